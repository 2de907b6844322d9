"""Smoke test of benchmarks/gpu_lm.py at its CPU size, and its out-of-memory handling (no timing checks)."""

from __future__ import annotations

import pytest
import torch

from .bench_script import load_bench


bench = load_bench("gpu_lm")


def test_tiny_run_prints_every_model_mode_and_precision(tmp_path, capsys):
    out = tmp_path / "gpu_lm.md"
    bench.main(["--tiny", "--settings", "8x1", "--repeats", "1", "--warmup", "0", "--out", str(out)])
    text = capsys.readouterr().out
    assert text.startswith("device: cpu")
    for precision in ("bf16 autocast", "fp32"):
        for mode in ("training", "inference"):
            assert f"### N = 8, B = 1, {precision}, {mode}" in text
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| model")]
    assert len(rows) == 4 * len(bench.models())
    for name in bench.models():
        assert sum(row.startswith(f"| {name} |") for row in rows) == 4
    assert all("OOM" not in row and "| n/a | n/a |" in row for row in rows)  # CPU: no peak memory
    assert out.read_text().startswith("# CEM vs Llama") and "| Llama baseline | " in out.read_text()


def test_out_of_memory_model_is_reported_and_left_out():
    calls = {"ok": 0, "big": 0}

    def ok():
        calls["ok"] += 1

    def big():
        calls["big"] += 1
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 52 GiB")

    def broken():
        raise RuntimeError("shape mismatch")

    times, peak, oom = bench.timed_runs({bench.BASE: ok, "big": big}, 1, 3, torch.device("cpu"),
                                        {bench.BASE: 0, "big": 0})
    assert oom == {"big": "OOM"} and calls == {"ok": 4, "big": 1}  # tried once, then left out
    assert len(times[bench.BASE]) == 3 and times["big"] == [] and peak[bench.BASE] is None
    assert bench.ratio(times, "big") == "—" and bench.ratio(times, bench.BASE).startswith("1.00")
    try:  # other errors are not swallowed
        bench.timed_runs({"broken": broken}, 1, 1, torch.device("cpu"), {"broken": 0})
    except RuntimeError as err:
        assert "shape mismatch" in str(err)
    else:
        raise AssertionError("a non-OOM error was swallowed")


def test_keep_going_lists_a_failed_model_and_times_the_rest(capsys):
    calls = {"ok": 0, "broken": 0}

    def ok():
        calls["ok"] += 1

    def broken():
        calls["broken"] += 1
        raise ValueError("triton: out of resources | shared memory\nsecond line")

    times, _, left = bench.timed_runs({bench.BASE: ok, "broken": broken}, 1, 2, torch.device("cpu"),
                                      {bench.BASE: 0, "broken": 0}, keep_going=True)
    assert left == {"broken": "failed: ValueError: triton: out of resources / shared memory"}
    assert calls == {"ok": 3, "broken": 1} and len(times[bench.BASE]) == 2 and times["broken"] == []
    assert "Traceback" in capsys.readouterr().err  # the whole error is on stderr


def test_models_and_modes_select_rows_and_bad_names_are_refused(capsys):
    bench.main(["--tiny", "--settings", "8x1", "--repeats", "1", "--warmup", "0", "--precisions", "fp32",
                "--modes", "training", "--models", "full CEM T=1 (auto path);full CEM T=1, kernel with row tiles "
                "(grid rows)"])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and "tokens/s" not in line]
    assert [r.split(" | ")[0] for r in rows] == ["| Llama baseline", "| full CEM T=1 (auto path)",
                                                 "| full CEM T=1, kernel with row tiles (grid rows)"]
    try:
        bench.main(["--tiny", "--models", "full CEM T=3"])
    except SystemExit as err:
        assert "'full CEM T=3' is not a model here; allowed: Llama baseline;" in str(err)
    else:
        raise AssertionError("an unknown model name was accepted")


def test_cuda_graph_rows_need_cuda():
    try:
        bench.main(["--tiny", "--settings", "8x1", "--precisions", "fp32", "--modes", "training", "--cuda-graph",
                    "--models", "full CEM T=1 (auto path)"])
    except ValueError as err:
        assert "a CUDA-graph step needs a CUDA device; got 'cpu'" in str(err)
    else:
        raise AssertionError("--cuda-graph ran on CPU")


def test_git_commit_marks_a_changed_working_tree(tmp_path):
    import shutil
    import subprocess

    if shutil.which("git") is None:
        return
    assert bench.git_commit(tmp_path) == "unknown"
    run = lambda *a: subprocess.run(["git", *a], cwd=tmp_path, check=True, capture_output=True)  # noqa: E731
    run("init", "-q")
    (tmp_path / "f.txt").write_text("a")
    run("add", "f.txt")
    run("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    head = bench.git_commit(tmp_path)
    assert len(head) >= 7 and "+" not in head
    (tmp_path / "f.txt").write_text("b")
    assert bench.git_commit(tmp_path) == head + "+changes"


def test_lm_flops_counts_linear_and_square_parts_that_grow_as_they_should(tmp_path):
    """benchmarks/lm_flops.py at its tiny size: Llama's N × N part is its attention (SDPA's math backend:
    QKᵀ and PV, forward 2 · 2 N² D per layer, whole square, plus the backward's four), it grows 4x from N to
    2N while the linear part grows 2x, and the written page holds every model."""
    flops = load_bench("lm_flops")
    args = flops.argparse.Namespace(vocab=97, dim=32, layers=2, heads=4, mlp_hidden=64)
    blocks = bench.models()
    lin16, sq16 = flops.count(blocks[bench.BASE], args, 16)
    lin32, sq32 = flops.count(blocks[bench.BASE], args, 32)
    assert sq16 == 2 * (2 * 2 * 16 * 16 * 32) * 3  # fwd QKᵀ, PV; bwd twice as many, per layer
    assert sq32 == 4 * sq16 and lin32 == 2 * lin16
    out = tmp_path / "f.md"
    flops.main(["--tiny", "--out", str(out)])
    text = out.read_text()
    assert all(f"| {name} | " in text for name in flops.MODELS)


@pytest.mark.parametrize("mode", [[], ["reduce-overhead"]])
def test_compile_rows_run_and_say_so(capsys, mode):
    """--compile [MODE]: every model compiled first as train.compile does, the header names the mode (tiny, one
    model, CPU: 'reduce-overhead' compiles as 'default' there)."""
    bench.main(["--tiny", "--settings", "8x1", "--repeats", "1", "--warmup", "1", "--precisions", "fp32",
                "--modes", "training", "--compile", *mode, "--models", "full CEM T=1 (auto path)"])
    text = capsys.readouterr().out
    want = "'reduce-overhead' (compiled as 'default': no CUDA graphs on cpu)" if mode else "'default'"
    assert f"; torch.compile mode {want}" in text and "| full CEM T=1 (auto path) | " in text


def test_compile_mode_is_checked():
    with pytest.raises(SystemExit):
        bench.main(["--tiny", "--compile", "reduce_overhead"])
