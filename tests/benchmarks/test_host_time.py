"""benchmarks/host_time.py: the host's side of an eager step with CUDA's kernel paths forced and their Triton
launches stubbed (tiny sizes, a few repeats: nothing here checks a speed)."""

import importlib.util
import re

import pytest

from .bench_script import load_bench

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                                reason="the kernel paths need triton installed (their launches are stubbed, not run)")
TINY = ["--iterations", "2", "--layers", "2", "--seq", "16", "--repeats", "2", "--warmup", "1"]


def test_kernel_paths_run_their_launchers_with_every_launch_stubbed(monkeypatch):
    """Hyper-SET's bi-softmax and feed-forward kernels and CEM's attention kernels are launched (as no-ops) in a
    training step: the CUDA paths are the ones timed, and Triton's interpreter never runs."""
    b = load_bench("host_time")
    launched = []
    real = b._NoKernels.__getattr__
    monkeypatch.setattr(b._NoKernels, "__getattr__", lambda self, name: launched.append(name) or real(self, name))
    args = b.argparse.Namespace(dim=8, heads=2, iterations=2, batch=1, lm_dim=16, lm_heads=2, layers=1,
                                mlp_hidden=32, vocab=32, seq=8)
    with b.stubbed_cuda_kernels():
        b.sudoku_step("Hyper-SET" + b.KERNEL, args, "bf16")[1]()
        assert {"_fwd", "_bwd", "_norm_relu_fwd", "_norm_relu_bwd"} <= set(launched), launched
        launched.clear()
        b.lm_step("full CEM T=1 (auto path)" + b.KERNEL, args, "fp32")[1]()
        assert {"_fwd_h", "_bwd_d_h", "_bwd_kv_h"} <= set(launched), launched
    from energyformer.energies import hyperspherical_ffkernel as ffk

    assert "cpu" not in ffk.FUSED_NORM_RELU  # the switch is put back on exit


def test_tables_for_both_suites(tmp_path, capsys):
    b = load_bench("host_time")
    out = tmp_path / "host.md"
    b.main(["--precisions", "fp32", "--models", "Hyper-SET, kernel path", *TINY, "--out", str(out)])
    text = out.read_text()
    assert "### hyperset: fp32, training" in text and "### cem: fp32, training" in text
    assert re.search(r"energyformer at commit \w+.*, this script at \w+", text)
    for row in ("looped transformer", "Hyper-SET, kernel path", "Llama baseline"):
        assert re.search(rf"\| {re.escape(row)} \| [\d.]+ \| \d+\.\d\d \[\d+\.\d\d, \d+\.\d\d\] \| [\d,]+ \| [\d.]+ \|",
                         text), row
    # --models names only the suite's models it holds: the cem suite then times its baseline alone
    assert "full CEM" not in text
    printed = capsys.readouterr().out
    assert printed.split("### ", 1)[1] in text and printed.splitlines()[0] in text  # what is printed is written


def test_default_models_and_profile(capsys):
    b = load_bench("host_time")
    b.main(["--suite", "cem", "--precisions", "bf16", *TINY])
    text = capsys.readouterr().out
    for row in b.SUITES["cem"][1]:
        assert f"| {row} |" in text
    b.main(["--suite", "cem", *TINY, "--profile", "paper configuration (T=2, D+LR), kernel path"])
    text = capsys.readouterr().out
    assert "profile of 'paper configuration (T=2, D+LR), kernel path'" in text and "tottime" in text
    assert re.search(r"kernel ops per step: [\d,]+; by name: \w+ \d+", text)


def test_bad_arguments_name_what_is_allowed():
    b = load_bench("host_time")
    with pytest.raises(SystemExit, match="name the model's --suite"):
        b.main(["--profile", "Hyper-SET, kernel path"])
    with pytest.raises(SystemExit, match="not a hyperset-suite model; allowed: looped transformer"):
        b.main(["--suite", "hyperset", "--profile", "no such model"])
    with pytest.raises(SystemExit, match="not a gpu_lm.py model"):
        b.main(["--suite", "cem", *TINY, "--profile", "no such model"])


@pytest.mark.parametrize("flag,value,says", [("--repeats", "0", "0 must be an integer >= 1"),
                                             ("--warmup", "x", "'x' is not an integer"),
                                             ("--threads", "-1", "-1 must be an integer >= 1")])
def test_counts_are_checked_in_one_line(flag, value, says, capsys):
    b = load_bench("host_time")
    with pytest.raises(SystemExit):
        b.main([flag, value])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"argument {flag}: {says}" in err
