"""benchmarks/_hyperset_gpu_page.py: issue 20's speed target and its verdict from benchmarks/hyperset_gpu.py
outputs (dated runs decide newest first; undated ones only where they all agree)."""

import pytest

from .bench_script import load_bench

RUN = """# Hyper-SET vs the looped transformer: Sudoku training tokens/s (`python benchmarks/hyperset_gpu.py`)

```
device: cuda (NVIDIA H100 80GB HBM3); torch 2.11.0+cu130; commit 994ae78{date}
d=768 heads=12 L=24 batch=64 (x 81 tokens); 5 interleaved repeats after 2 warm-up per model{compiled}
```

### bf16 autocast, training

| model | parameters | tokens/s | × transformer, median [min, max] | peak step GiB |
|---|---|---|---|---|
| looped transformer | 7,156,992 | 129,220 | 1.00 [1.00, 1.00] | 3.11 |
{rows}
"""


def _run(folder, name, rows, date="", compiled=False):
    (folder / name).write_text(RUN.format(date=f"; {date} UTC" if date else "", rows="\n".join(rows),
                                          compiled="; torch.compile" if compiled else ""))


def test_dated_runs_decide_newest_first_and_undated_ones_only_in_agreement(tmp_path):
    m = load_bench("_hyperset_gpu_page")
    _run(tmp_path, "gpu_throughput_aaaaaaa.md", ["| Hyper-SET | 5,192,448 | 98,430 | 0.81 [0.72, 1.45] | 4.01 |",
                                                 "| Hyper-SET, CUDA graph | 5,192,448 | 1 | 0.79 [0.78, 0.79] | 4.41 |"])
    _run(tmp_path, "gpu_throughput_bbbbbbb.md",
         ["| Hyper-SET, CUDA graph | 5,192,448 | 1 | 1.02 [1.01, 1.03] | 4 |"])
    _run(tmp_path, "gpu_throughput_compile_ccccccc.md", ["| Hyper-SET | 5,192,448 | 1 | 0.57 [0.44, 0.61] | 4.4 |"],
         compiled=True)
    page = m.render(tmp_path).split("## Every run")[0]
    assert "| the same, each step one CUDA graph | [aaaaaaa](gpu_throughput_aaaaaaa.md), " \
           "[bbbbbbb](gpu_throughput_bbbbbbb.md) | 0.79× [0.78, 0.79]; 1.02× [1.01, 1.03] | " \
           "UNDECIDED (undated runs disagree) |" in page
    assert "| the same, every model under torch.compile | [ccccccc](gpu_throughput_compile_ccccccc.md) | " \
           "0.57× [0.44, 0.61] | NOT MET |" in page
    _run(tmp_path, "gpu_throughput_ddddddd.md", ["| Hyper-SET | 5,192,448 | 1 | 1.04 [0.97, 1.10] | 3.9 |",
                                                 "| Hyper-SET, CUDA graph | 5,192,448 | OOM | — | OOM |"],
         date="2026-11-27 10:00")
    _run(tmp_path, "gpu_throughput_eeeeeee.md", ["| Hyper-SET | 5,192,448 | 1 | 0.90 [0.85, 0.95] | 3.9 |"],
         date="2026-11-26 10:00")
    page = m.render(tmp_path)
    top = page.split("## Every run")[0]
    assert "(d 768, L 24, bf16 autocast) | [ddddddd](gpu_throughput_ddddddd.md), 2026-11-27 10:00 UTC | " \
           "1.04× [0.97, 1.10] | MET on the median (min 0.97 below 1) |" in top   # the newest dated run
    assert "| the same, each step one CUDA graph | [ddddddd](gpu_throughput_ddddddd.md), 2026-11-27 10:00 UTC | " \
           "OOM | NOT MET (out of memory) |" in top
    assert "| [eeeeeee](gpu_throughput_eeeeeee.md), 2026-11-26 10:00 UTC | 0.90× [0.85, 0.95] | NOT MET |" in page
    assert "| [gpu_throughput_aaaaaaa.md](gpu_throughput_aaaaaaa.md) | aaaaaaa | cuda (NVIDIA H100 80GB HBM3) | " \
           "undated | no |" in page


def test_bad_folders_and_rows_are_one_line_errors(tmp_path):
    m = load_bench("_hyperset_gpu_page")
    with pytest.raises(SystemExit, match="no gpu_throughput"):
        m.render(tmp_path)
    _run(tmp_path, "gpu_throughput_fffffff.md", ["| Hyper-SET | 0.81 |"])
    with pytest.raises(SystemExit, match=r"gpu_throughput_fffffff.md:13: not a hyperset_gpu.py table row"):
        m.render(tmp_path)


def test_what_hyperset_gpu_writes_is_what_the_page_reads(tmp_path):
    bench, m = load_bench("hyperset_gpu"), load_bench("_hyperset_gpu_page")
    out = tmp_path / "gpu_throughput_tiny.md"
    bench.main(["--tiny", "--repeats", "1", "--warmup", "0", "--precisions", "bf16", "--modes", "training",
                "--models", "Hyper-SET", "--out", str(out)])
    run = m.parse(out)
    assert run["date"] and not run["compiled"]
    assert set(run["rows"]) == {("bf16", "training", n) for n in ("looped transformer", "Hyper-SET")}


def test_a_compiled_runs_graphed_rows_count_as_graphed(tmp_path):
    """hyperset_gpu.py --compile MODE --cuda-graph: its CUDA-graph rows are eager steps captured, so they decide the
    graphed target; its other rows decide the torch.compile one only"""
    m = load_bench("_hyperset_gpu_page")
    _run(tmp_path, "gpu_throughput_aaaaaaa.md", ["| Hyper-SET | 5,192,448 | 1 | 0.82 [0.63, 0.99] | 3.5 |"],
         date="2026-11-27 04:58")
    _run(tmp_path, "gpu_throughput_compiled_bbbbbbb.md",
         ["| Hyper-SET | 5,192,448 | 1 | 0.30 [0.25, 0.42] | 3.6 |",
          "| Hyper-SET, CUDA graph | 5,192,448 | 1 | 1.07 [1.05, 1.07] | 4 |"],
         date="2026-11-27 05:02", compiled=True)
    top = m.render(tmp_path).split("## Every run")[0]
    assert "bf16 autocast) | [aaaaaaa](gpu_throughput_aaaaaaa.md), 2026-11-27 04:58 UTC | 0.82× [0.63, 0.99]" in top
    assert "| the same, each step one CUDA graph | [bbbbbbb](gpu_throughput_compiled_bbbbbbb.md), 2026-11-27 05:02 " \
           "UTC | 1.07× [1.05, 1.07] | MET |" in top
    assert "| the same, every model under torch.compile | [bbbbbbb](gpu_throughput_compiled_bbbbbbb.md), " \
           "2026-11-27 05:02 UTC | 0.30× [0.25, 0.42] | NOT MET |" in top
