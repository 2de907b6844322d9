"""The structure checks of a page's inputs (energyformer.report.inputs.check_input) case by case, on small synthetic
files: each way a benchmark table output or a JSON-lines / CSV artifact can be incomplete is refused, naming the
file and line, and a complete one passes."""
from __future__ import annotations

import pytest

from energyformer.errors import DataError
from energyformer.report.inputs import check_input

HEAD = "# gpu_lm\n\n```\ncommit abc, one H100\n```\n\n"
TABLE = ("### N 1024, bf16\n\n| model | tokens/s | memory |\n|---|---|---|\n| Llama | 100 | 1 GiB |\n"
         "| CEM | 50 | 2 GiB |\n")


def _write(tmp_path, name, text):
    f = tmp_path / name
    f.write_text(text)
    return f


def test_a_complete_table_output_passes(tmp_path):
    check_input(_write(tmp_path, "gpu_lm_x.md", HEAD + TABLE + "\n" + TABLE.replace("1024", "4096")))


@pytest.mark.parametrize("text, match", [
    (HEAD.replace("```\n\n", "\n") + TABLE, r"gpu_lm_x.md: the header's ``` code fence is not closed"),
    (HEAD, r"gpu_lm_x.md: no '### \.\.\.' table"),
    (HEAD + TABLE.split("| Llama")[0], r"gpu_lm_x.md:7: section 'N 1024, bf16' has no table rows"),
    (HEAD + TABLE.replace("|---|---|---|\n", ""),
     r"gpu_lm_x.md:7: section 'N 1024, bf16' has no table rows"),
    (HEAD + TABLE.replace("| CEM | 50 | 2 GiB |", "| CEM | 50 |"), r"gpu_lm_x.md:12: a table row with other cells"),
    (HEAD + TABLE.replace("| CEM | 50 | 2 GiB |", "| CEM | 50 | 2 GiB"),
     r"gpu_lm_x.md:12: a table row with other cells"),
])
def test_an_incomplete_table_output_is_refused(tmp_path, text, match):
    for name in ("gpu_lm_x.md", "gpu_throughput_x.md"):
        with pytest.raises(DataError, match=match.replace("gpu_lm_x.md", name)):
            check_input(_write(tmp_path, name, text))
    check_input(_write(tmp_path, "notes.md", text))  # a file of no known structure is only read


def test_lm_throughput_output_must_end_with_its_wall_time_line(tmp_path):
    check_input(_write(tmp_path, "bench_lm_throughput.txt", "== 1. table\nrow\n\ntotal wall time 12 s\n"))
    for last in ("total wall time 12", "total wall time", "total wall time ? s"):
        with pytest.raises(DataError, match=r"bench_lm_throughput.txt: no final 'total wall time N s' line"):
            check_input(_write(tmp_path, "bench_lm_throughput.txt", f"== 1. table\nrow\n\n{last}\n"))


def test_jsonl_lines_are_objects_and_blank_lines_are_allowed(tmp_path):
    check_input(_write(tmp_path, "run.metrics.jsonl", '{"step": 1}\n\n{"step": 2}\n'))
    with pytest.raises(DataError, match=r"run.metrics.jsonl:2: not a JSON object \(expected one event per line\)"):
        check_input(_write(tmp_path, "run.metrics.jsonl", '{"step": 1}\n[2]\n'))


def test_csv_first_data_row_is_checked_too(tmp_path):
    check_input(_write(tmp_path, "curve.csv", "epoch,a\n1,0\n2,0\n"))
    with pytest.raises(DataError, match=r"curve.csv:2: 1 cells, the header has 2 \(epoch, a\)"):
        check_input(_write(tmp_path, "curve.csv", "epoch,a\n1\n2,0\n"))
