"""A damaged input of the plateau pages (docs/results/hyperset/plateau and its ablation) is one line naming the file
and the line or key (energyformer.report.inputs), from the reader, the scripts and ``energyformer report``."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from energyformer.analysis.hyperset_plateau import FIG3A, load, read_fig3a
from energyformer.errors import DataError
from energyformer.report.pages import Registry
from energyformer.report.render import render_page

ROOT = Path(__file__).resolve().parents[2]
PLATEAU = ROOT / "docs/results/hyperset/plateau"
ABLATION = ROOT / "scripts" / "hyperset_plateau_ablation.py"
SUMMARY = ROOT / "scripts" / "hyperset_plateau_summary.py"
CSV = ("# source: x\n# recipe: n_train=9000 label_size=16\nepoch,hyperset_board_acc,transformer_board_acc\n"
       "1,0,0\n{row}\n")


@pytest.mark.parametrize("row, where", [("2,abc,0", r":5: column hyperset_board_acc: 'abc' is not a number"),
                                        ("2,0", r":5: 2 cells, the header has 3"),
                                        ("2.5,0,0", r":5: column epoch: '2.5' is not a number")])
def test_fig3a_bad_cell_names_file_line_and_column(tmp_path, row, where):
    (tmp_path / FIG3A).write_text(CSV.format(row=row))
    with pytest.raises(DataError, match=FIG3A + where):
        read_fig3a(tmp_path)


def test_fig3a_good_rows_parse(tmp_path):
    (tmp_path / FIG3A).write_text(CSV.format(row="2,1.5,0"))
    assert read_fig3a(tmp_path)[2] == [(1, 0.0, 0.0), (2, 1.5, 0.0)]


def test_truncated_probe_file_names_file_line_and_column(tmp_path):
    (tmp_path / "transformer_d64_L8.json").write_text('{"records": [{"step": 1,\n "loss"')
    with pytest.raises(DataError, match=r"transformer_d64_L8.json:2:\d+: not valid JSON"):
        load(tmp_path)
    (tmp_path / "transformer_d64_L8.json").write_text('{"steps": 1}')
    with pytest.raises(DataError, match=r"transformer_d64_L8.json: lacks the key\(s\) 'records'"):
        load(tmp_path)


def test_report_names_the_csv_cell_of_the_plateau_page(tmp_path):
    (page,) = Registry().select(["hyperset-plateau"])
    folder = tmp_path / page.folder
    shutil.copytree(PLATEAU, folder, ignore=shutil.ignore_patterns("ablation"))
    (tmp_path / "scripts").mkdir()
    shutil.copy(SUMMARY, tmp_path / "scripts" / SUMMARY.name)
    csv = folder / FIG3A
    lines = csv.read_text().splitlines()
    n = next(i for i, ln in enumerate(lines) if ln.startswith("5,"))
    lines[n] = "5,abc,0"
    csv.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError) as err:
        render_page(page, tmp_path, in_place=False)
    assert f"docs/results/hyperset/plateau/{FIG3A}:{n + 1}: column hyperset_board_acc: 'abc' is not a number" \
        in str(err.value)


def _ablation(tmp_path: Path, edit) -> Path:
    folder = tmp_path / "ablation"
    folder.mkdir()
    data = json.loads((PLATEAU / "ablation/results.json").read_text())
    edit(data)
    (folder / "results.json").write_text(json.dumps(data))
    return folder


@pytest.mark.parametrize("edit, where", [
    (lambda d: d["records"][3].update(last50=True), r"records\[3\]\.last50: True is not a number"),
    (lambda d: d["records"][0].update(last50="abc"), r"records\[0\]\.last50: 'abc' is not a number"),
    (lambda d: d["records"][1].update(left_ln9=1), r"records\[1\]\.left_ln9: 1 is not true or false"),
    (lambda d: d["records"][2]["means25"].__setitem__(0, None), r"records\[2\]\.means25\[0\]: None is not"),
    (lambda d: d["records"][2].pop("seed"), r"records\[2\]: lacks the key\(s\) 'seed'"),
    (lambda d: d.pop("meta"), r"results.json: lacks the key\(s\) 'meta'"),
])
def test_ablation_record_with_a_bad_value_names_the_key(tmp_path, load_script, edit, where):
    mod = load_script(ABLATION)
    folder = _ablation(tmp_path, edit)
    with pytest.raises(DataError, match=where):
        mod.render(folder)


def test_ablation_script_prints_one_line_for_truncated_results(tmp_path, load_script, capsys):
    mod = load_script(ABLATION)
    folder = tmp_path / "ablation"
    folder.mkdir()
    (folder / "results.json").write_text((PLATEAU / "ablation/results.json").read_text()[:500])
    with pytest.raises(SystemExit) as ex:
        mod.main(["--render-only", str(folder)])
    assert str(ex.value).startswith(f"error: {folder}/results.json:") and "not valid JSON" in str(ex.value)
    assert "\n" not in str(ex.value)


def test_summary_script_prints_one_line_for_a_binary_probe_file(tmp_path, load_script, capsys):
    mod = load_script(SUMMARY)
    (tmp_path / "transformer_d64_L8.json").write_bytes(b'{"records": [\x89PNG]}')
    assert mod.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {tmp_path}/transformer_d64_L8.json:1:") and "not UTF-8" in err
    assert "\n" not in err
