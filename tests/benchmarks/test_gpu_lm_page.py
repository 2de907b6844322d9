"""benchmarks/_gpu_lm_page.py: issue 21's targets and verdicts from benchmarks/gpu_lm.py outputs."""

import pytest

from .bench_script import load_bench

HEAD = """# CEM vs Llama: tokens/s and peak step memory (`python benchmarks/gpu_lm.py`)

```
device: cuda (NVIDIA H100 80GB HBM3); torch 2.11.0+cu130; triton 3.6.0; commit 994ae78; {date} UTC
D=768 L=12 H=12 F=2048 V=32000; 4 interleaved repeats after 1 warm-up per model
```
"""
TABLE = """
### N = {n}, B = {b}, bf16 autocast, training

| model | tokens/s | × Llama, median [min, max] | peak step GiB | × Llama |
|---|---|---|---|---|
| Llama baseline | 148,603 | 1.00 [1.00, 1.00] | 8.18 | 1.00 |
"""


def _run(folder, name, date, rows_1k, rows_4k=()):
    text = HEAD.format(date=date) + TABLE.format(n=1024, b=8) + "".join(r + "\n" for r in rows_1k)
    if rows_4k:
        text += TABLE.format(n=4096, b=2) + "".join(r + "\n" for r in rows_4k)
    (folder / name).write_text(text)


def test_the_newest_run_with_a_row_decides_and_every_run_is_listed(tmp_path):
    m = load_bench("_gpu_lm_page")
    _run(tmp_path, "gpu_lm_aaaaaaa.md", "2026-11-26 09:12",
         ["| full CEM T=1 (auto path) | 94,405 | 0.64 [0.45, 0.70] | 8.05 | 0.98 |",
          "| paper configuration (T=2, D+LR) | 12,322 | 0.36 [0.30, 0.40] | 11.25 | 1.38 |"])
    _run(tmp_path, "gpu_lm_graphs_bbbbbbb.md", "2026-11-27 10:00",
         ["| full CEM T=1 (auto path) | 99,000 | 0.85 [0.81, 0.90] | 8.05 | 1.35 |",
          "| full CEM T=1 (auto path), CUDA graph | 149,827 | 0.82 [0.79, 0.84] | 8.88 | 0.96 |"],
         ["| full CEM T=1 (auto path) | OOM | — | OOM | — |"])
    page = m.render(tmp_path)
    top = page.split("## Every run")[0]
    assert "| full CEM T=1 ≥ 0.8× Llama's training tokens/s at N = 1,024 | [bbbbbbb](gpu_lm_graphs_bbbbbbb.md), " \
           "2026-11-27 10:00 UTC | 0.85× [0.81, 0.90] | MET |" in top
    assert "at N = 1,024 (CUDA graphs) | [bbbbbbb](gpu_lm_graphs_bbbbbbb.md), 2026-11-27 10:00 UTC | 0.82× " \
           "[0.79, 0.84] | MET on the median (min 0.79 below 0.8) |" in top
    assert "peak training memory ≤ 1.3× Llama's at N = 1,024 | [bbbbbbb](gpu_lm_graphs_bbbbbbb.md), " \
           "2026-11-27 10:00 UTC | 1.35× | NOT MET |" in top
    oom = "at N = 4,096 | [bbbbbbb](gpu_lm_graphs_bbbbbbb.md), 2026-11-27 10:00 UTC | OOM | NOT MET (out of memory) |"
    assert oom in top
    assert "≥ 0.35× Llama's training tokens/s at N = 1,024 | [aaaaaaa](gpu_lm_aaaaaaa.md), 2026-11-26 09:12 UTC | " \
           "0.36× [0.30, 0.40] | MET on the median (min 0.30 below 0.35) |" in top   # only the older run has it
    assert "at N = 4,096 (CUDA graphs) | — | not measured | UNTESTABLE (no run has the row) |" in top
    every = page.split("## Every run")[1]
    assert "| [aaaaaaa](gpu_lm_aaaaaaa.md), 2026-11-26 09:12 UTC | 0.64× [0.45, 0.70] | NOT MET |" in every
    assert page == m.render(tmp_path) and m.write(tmp_path).read_text() == page   # the same bytes every time


def test_bad_folders_and_rows_are_one_line_errors(tmp_path):
    m = load_bench("_gpu_lm_page")
    with pytest.raises(SystemExit, match="no gpu_lm"):
        m.render(tmp_path)
    _run(tmp_path, "gpu_lm_ccccccc.md", "2026-11-26 09:12", ["| full CEM T=1 (auto path) | 94,405 | 0.64 |"])
    with pytest.raises(SystemExit, match=r"gpu_lm_ccccccc.md:13: not a gpu_lm.py table row"):
        m.render(tmp_path)
    (tmp_path / "gpu_lm_ccccccc.md").write_text("# no header\n")
    with pytest.raises(SystemExit, match="gpu_lm_ccccccc.md: no 'device"):
        m.render(tmp_path)
    (tmp_path / "gpu_lm_ccccccc.md").write_bytes(b"# gpu\n\xff\xfe binary")  # was a bare UnicodeDecodeError
    with pytest.raises(SystemExit, match=r"gpu_lm_ccccccc.md:2:1: not UTF-8 text \(byte 0xff"):
        m.render(tmp_path)


def test_what_gpu_lm_writes_is_what_the_page_reads(tmp_path):
    """the tiny CPU run's --out file parses: every model of the run is a row (CPU: no memory column)"""
    bench, m = load_bench("gpu_lm"), load_bench("_gpu_lm_page")
    out = tmp_path / "gpu_lm_tiny.md"
    bench.main(["--tiny", "--settings", "8x1", "--repeats", "1", "--warmup", "1", "--precisions", "bf16",
                "--modes", "training", "--models", "full CEM T=1 (auto path)", "--out", str(out)])
    rows = m.parse(out)["rows"]
    assert set(rows) == {(8, 1, "bf16", "training", n) for n in ("Llama baseline", "full CEM T=1 (auto path)")}
    assert rows[(8, 1, "bf16", "training", "Llama baseline")][:3] == (1.0, 1.0, 1.0)


def test_a_compiled_runs_rows_count_for_the_compiled_targets_only(tmp_path):
    """gpu_lm.py --compile: the compiled rows decide the train.compile targets, never the eager ones; its CUDA-graph
    rows (eager steps captured) still count as graphed"""
    m = load_bench("_gpu_lm_page")
    _run(tmp_path, "gpu_lm_aaaaaaa.md", "2026-11-26 09:12",
         ["| full CEM T=1 (auto path) | 94,405 | 0.64 [0.45, 0.70] | 8.05 | 0.98 |"])
    text = HEAD.format(date="2026-11-27 10:00").replace(
        "warm-up per model\n", "warm-up per model; torch.compile mode 'reduce-overhead'\n") + TABLE.format(n=1024, b=8)
    text += "| full CEM T=1 (auto path) | 99,000 | 0.54 [0.42, 0.58] | 7.02 | 0.96 |\n"
    text += "| full CEM T=1 (auto path), CUDA graph | 149,827 | 0.65 [0.65, 0.65] | 8.88 | 0.96 |\n"
    (tmp_path / "gpu_lm_compiled_bbbbbbb.md").write_text(text)
    top = m.render(tmp_path).split("## Every run")[0]
    assert "at N = 1,024 | [aaaaaaa](gpu_lm_aaaaaaa.md), 2026-11-26 09:12 UTC | 0.64× [0.45, 0.70] | NOT MET |" in top
    assert "at N = 1,024 (train.compile) | [bbbbbbb](gpu_lm_compiled_bbbbbbb.md), 2026-11-27 10:00 UTC | 0.54× " \
           "[0.42, 0.58] | NOT MET |" in top
    assert "at N = 1,024 (CUDA graphs) | [bbbbbbb](gpu_lm_compiled_bbbbbbb.md)" in top
    assert "at N = 4,096 (train.compile) | — | not measured | UNTESTABLE (no run has the row) |" in top


def test_a_median_equal_to_the_target_at_two_decimals_is_undecided():
    """0.795 and 0.804 both print 0.80: the table cannot say which side of 0.8 the median is on"""
    m = load_bench("_gpu_lm_page")
    t = m.TARGETS[0]
    assert t.bound == 0.8
    assert m.verdict(t, (0.80, 0.79, 0.81, None, None))[1].startswith("UNDECIDED")
    assert m.verdict(t, (0.80, 0.80, 0.80, None, None))[1].startswith("UNDECIDED")
    assert m.verdict(t, (0.81, 0.79, 0.82, None, None))[1] == "MET on the median (min 0.79 below 0.8)"
    assert m.verdict(t, (0.79, 0.78, 0.81, None, None))[1] == "NOT MET"
