"""The checked readers of a page's inputs (energyformer.report.inputs): a damaged artifact is one line naming the
file (and line, column or key), a truncated benchmark output is refused, and ``energyformer report`` runs the
checks before a page's generator and says which files an in-place render wrote."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from energyformer.errors import DataError
from energyformer.report.command import run
from energyformer.report.inputs import check_input
from energyformer.utils.io import number, read_csv, read_json, read_text
from energyformer.report.pages import Page, Registry, Script

from .toy_repo import toy_repo

ROOT = Path(__file__).resolve().parents[2]
LM = ROOT / "docs/results/cem/bench_lm_throughput.txt"
HYPERSET_GPU = ROOT / "docs/results/hyperset/gpu_h100/gpu_throughput_fef18e0.md"
GPU_LM = ROOT / "docs/results/cem/gpu_h100/gpu_lm_graphs_855edd0.md"


def test_binary_text_names_file_line_and_column(tmp_path):
    f = tmp_path / "out.txt"
    f.write_bytes(b"ok line\nab\xff\xfecd\n")
    with pytest.raises(DataError, match=r"out.txt:2:3: not UTF-8 text \(byte 0xff"):
        read_text(f)
    with pytest.raises(DataError, match=r"^docs/x.txt:2:3: "):
        check_input(f, "docs/x.txt")


def test_truncated_json_names_file_line_and_column(tmp_path):
    f = tmp_path / "benchmark.json"
    f.write_text('{"a": 1,\n "b": [1, 2')
    with pytest.raises(DataError, match=r"benchmark.json:2:\d+: not valid JSON"):
        read_json(f)
    with pytest.raises(DataError, match=r"^docs/benchmark.json:2:\d+: not valid JSON"):
        check_input(f, "docs/benchmark.json")
    f.write_text("[1]")
    with pytest.raises(DataError, match=r"holds a JSON list, expected a dict"):
        read_json(f)


def test_jsonl_and_csv_inputs_name_the_bad_line(tmp_path):
    f = tmp_path / "run.metrics.jsonl"
    f.write_text('{"step": 1}\n{"step": 2\n')
    with pytest.raises(DataError, match=r"run.metrics.jsonl:2:\d+: not valid JSON"):
        check_input(f)
    c = tmp_path / "curve.csv"
    c.write_text("# source: x\nepoch,a,b\n1,0,0\n2,0\n")
    with pytest.raises(DataError, match=r"curve.csv:4: 2 cells, the header has 3"):
        check_input(c)
    with pytest.raises(DataError, match=r"curve.csv:4: 2 cells"):
        read_csv(c, ("epoch", "a", "b"))
    with pytest.raises(DataError, match=r"curve.csv:2: header lacks the column\(s\) c"):
        read_csv(c, ("epoch", "c"))


@pytest.mark.parametrize("value", [True, "abc", None, float("nan"), float("inf"), [1.0]])
def test_a_metric_value_must_be_a_finite_number(value):
    with pytest.raises(DataError, match=r"^results.json: runs.a.acc: .* (not a number|not finite)"):
        number(value, "results.json: runs.a.acc")


def test_numbers_pass():
    assert number("0.5", "x") == 0.5 and number(3, "x", integer=True) == 3 and number("7", "x", integer=True) == 7
    assert number(float("nan"), "x", finite=False) != number(float("nan"), "x", finite=False)


def test_the_committed_benchmark_outputs_are_complete():
    for f in (LM, HYPERSET_GPU, GPU_LM):
        check_input(f)


def _truncated(tmp_path: Path, src: Path, keep: int) -> Path:
    out = tmp_path / src.name
    out.write_bytes(src.read_bytes()[:keep])
    return out


@pytest.mark.parametrize("cut", [0.5, 0.9])
def test_a_truncated_lm_throughput_output_is_refused(tmp_path, cut):
    f = _truncated(tmp_path, LM, int(len(LM.read_bytes()) * cut))
    with pytest.raises(DataError, match=r"bench_lm_throughput.txt(:\d+)?: (ends mid-line|no final 'total wall)"):
        check_input(f)
    text = LM.read_text()   # cut at a line: the last table kept whole, the wall-time line lost
    f.write_text(text[:text.index("\n== 4.")] + "\n")
    with pytest.raises(DataError, match=r"bench_lm_throughput.txt: no final 'total wall time N s' line"):
        check_input(f)


@pytest.mark.parametrize("src", [HYPERSET_GPU, GPU_LM])
def test_a_truncated_gpu_table_output_is_refused(tmp_path, src):
    data = src.read_bytes()
    for keep in (len(data) // 4, len(data) // 2, len(data) - 3):
        keep -= data[keep - 1:keep] == b"\n"   # mid-line: a cut at a row's end reads as a shorter table
        f = _truncated(tmp_path, src, keep)
        with pytest.raises(DataError, match=rf"{src.name}(:\d+)?: "):
            check_input(f)
    text = src.read_text()   # cut at a line between a section's heading and its rows
    head = text.index("\n### ")
    f.write_text(text[:text.index("|---", head)])
    with pytest.raises(DataError, match=r"has no table rows"):
        check_input(f)


GENERATOR = '''import json, sys
from pathlib import Path
out = Path(sys.argv[1])
data = json.loads((out / "results.json").read_text())
(out / "README.md").write_text(f"# Toy\\n\\n{data['value']}\\n\\n![curve](curve.png)\\n")
(out / "curve.png").write_bytes(b"png")
'''


@pytest.fixture
def repo(tmp_path):
    return toy_repo(tmp_path, GENERATOR, '{"value": 1}')


REG = Registry(pages=(Page("toy", "docs/results/toy", generator=Script("render_toy.py", ("{out}",)),
                           readme=False),), artifacts=())


@pytest.mark.parametrize("data, where", [(b'{"value": \xff}', r"results.json:1:11: not UTF-8 text"),
                                         (b'{"value": 1', r"results.json:1:12: not valid JSON")])
def test_report_names_a_damaged_input_before_its_generator_runs(repo, capsys, data, where):
    (repo / "docs/results/toy/results.json").write_bytes(data)
    assert run(["--check", "toy", "--root", str(repo)], REG) == 1
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"FAILED        {'toy':24s} docs/results/toy/")
    assert re.search(rf"docs/results/toy/{where}", lines[0]), lines[0]


def test_report_in_place_names_a_restored_figure(repo, capsys):
    assert run(["toy", "--root", str(repo)], REG) == 0
    capsys.readouterr()
    assert run(["toy", "--root", str(repo)], REG) == 0
    assert capsys.readouterr().out.strip() == "unchanged     toy"
    (repo / "docs/results/toy/curve.png").unlink()
    assert run(["toy", "--root", str(repo)], REG) == 0
    assert capsys.readouterr().out.strip() == f"updated       {'toy':24s} docs/results/toy/curve.png"
    assert (repo / "docs/results/toy/curve.png").read_bytes() == b"png"


@pytest.mark.parametrize("name, src, keep", [("cem-benchmarks", LM, "lines"),
                                             ("hyperset-gpu", HYPERSET_GPU, "mid-line")])
def test_report_refuses_a_page_from_a_truncated_benchmark_output(tmp_path, name, src, keep):
    """Before the check the shorter page was rendered (and `report NAME` wrote it) with rows missing."""
    import shutil

    from energyformer.report.render import render_page

    (page,) = Registry().select([name])
    shutil.copytree(ROOT / page.folder, tmp_path / page.folder)
    shutil.copytree(ROOT / "benchmarks", tmp_path / "benchmarks", ignore=shutil.ignore_patterns("__pycache__"))
    text = src.read_text()
    end = text.rindex("\n", 0, len(text) - 40) + 1
    (tmp_path / page.folder / src.name).write_text(text[:end] if keep == "lines" else text[:end + 20])
    with pytest.raises(DataError, match=rf"^report {name}: {page.folder}/{src.name}(:\d+)?: "):
        render_page(page, tmp_path, in_place=True)
    assert (tmp_path / page.folder / page.files[0]).read_bytes() == (ROOT / page.folder / page.files[0]).read_bytes()
