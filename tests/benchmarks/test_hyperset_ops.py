"""benchmarks/hyperset_ops.py: the CPU emulation of CUDA's autocast policy and the per-iteration op table
(tiny sizes; fake tensors, nothing is timed)."""

from argparse import Namespace
from collections import Counter

from .bench_script import load_bench


ARGS = Namespace(dim=16, heads=2, batch=1)


def test_cpu_emulation_dispatches_what_cuda_autocast_does():
    """Hyper-SET's bf16 forward: the same ops with the same dtypes under CUDA's own autocast (fake CUDA
    tensors) and under the CPU emulation the training counts come from."""
    b = load_bench("hyperset_ops")
    config, extra = b.MODELS["Hyper-SET"]
    key = lambda r: r[:3]  # noqa: E731
    cpu = Counter(map(key, b.log_step(config, extra, ARGS, 2, "bf16", False, "cpu")))
    cuda = Counter(map(key, b.log_step(config, extra, ARGS, 2, "bf16", False, "cuda")))
    assert cpu == cuda and sum(cpu.values()) > 20


def test_hyperset_iteration_has_no_float32_matmul_under_bf16():
    b = load_bench("hyperset_ops")
    config, extra = b.MODELS["Hyper-SET"]
    full = b.summarise(b.log_step(config, extra, ARGS, 3, "bf16", True))
    less = b.summarise(b.log_step(config, extra, ARGS, 2, "bf16", True))
    assert full["matmul"] > less["matmul"] > 0
    assert full["matmul f32"] == less["matmul f32"] == 0
    assert full["ops"] - less["ops"] > 0 and full["bytes"] > less["bytes"]


def test_emulated_policy_is_removed_on_exit():
    import torch

    b = load_bench("hyperset_ops")
    x = torch.randn(2, 3, dtype=torch.bfloat16)
    with b.emulated_cuda_policy(), torch.autocast("cpu", torch.bfloat16):
        assert torch.softmax(x, -1).dtype == torch.float32  # CUDA's float32 list
    with torch.autocast("cpu", torch.bfloat16):
        assert torch.softmax(x, -1).dtype == torch.bfloat16  # CPU's own again


def test_hyperset_bf16_step_keeps_scores_and_step_table_out_of_float32():
    """Issue 20's bytes: under bf16 autocast no op of Hyper-SET's training step reads or writes a float32
    (.., 81, 81) score tensor (the symmetric bi-softmax keeps them bf16), no float32 tensor of the step table's
    rank-4 (L, B, N, D) shape appears, and the operator's sign costs no ``neg`` pass."""
    b = load_bench("hyperset_ops")
    config, extra = b.MODELS["Hyper-SET"]
    rows = b.log_step(config, extra, ARGS, 3, "bf16", True)
    scores = [r for r in rows if any(len(s) >= 2 and s[-2:] == (81, 81) for s in r[3])]
    assert scores and not [r for r in scores if "f32" in r[1] + r[2]]
    table = [r for r in rows if r[0] != "stack" and any(len(s) == 4 and s[0] == 3 for s in r[3])]
    assert table and not [r for r in table if "f32" in r[1] + r[2]]
    assert "neg" not in {r[0] for r in rows}


def test_out_writes_the_printed_tables_with_the_command(tmp_path, capsys):
    b = load_bench("hyperset_ops")
    out = tmp_path / "ops.md"
    b.main(["--dim", "16", "--heads", "2", "--iterations", "2", "--batch", "1", "--precisions", "bf16",
            "--modes", "inference", "--out", str(out)])
    text = out.read_text()
    assert text == capsys.readouterr().out
    assert "`python benchmarks/hyperset_ops.py --dim 16 --heads 2" in text and str(out) not in text
    assert "| Hyper-SET | " in text and "| looped transformer | " in text


def test_rms_norm_is_logged_as_cudas_fused_kernel_pair_with_unchanged_values():
    """F.rms_norm inside the log: one ``_fused_rms_norm`` row forward and one backward row, no composite ops;
    values and gradients are the real function's; F.rms_norm is restored on exit."""
    import torch
    import torch.nn.functional as F

    b = load_bench("hyperset_ops")
    x = torch.randn(3, 5, 8, requires_grad=True)
    w = torch.rand(8, requires_grad=True)
    want = F.rms_norm(x, (8,), w, 1e-6)
    gw = torch.autograd.grad(want.pow(2).sum(), (x, w))
    log = b.OpLog()
    with log, b.fused_rms_norm(log):
        y = F.rms_norm(x, (8,), w, 1e-6)
        g = torch.autograd.grad(y.pow(2).sum(), (x, w))
    names = [r[0] for r in log.rows]
    assert names.count("_fused_rms_norm") == 1 and names.count("_fused_rms_norm_backward") == 1
    assert not {"rsqrt", "mean"} & set(names)
    assert F.rms_norm is b._RMS_NORM
    torch.testing.assert_close(y, want)
    for a, c in zip(g, gw):
        torch.testing.assert_close(a, c)


def test_kernel_row_logs_each_launch_as_one_op_and_copies_nothing():
    """``Hyper-SET on the kernel`` (the path CUDA's auto takes): each bi-softmax launch is one logged op with its
    N x N x p products as FLOPs, and nothing in the iteration copies or concatenates an activation."""
    b = load_bench("hyperset_ops")
    config, extra = b.MODELS[b.KERNEL_ROW]
    full = b.log_step(config, extra, ARGS, 3, "bf16", True)
    less = b.log_step(config, extra, ARGS, 2, "bf16", True)
    per, _ = b.diff_rows(full, less)
    names = Counter({k[0]: n for k, n in per.items()})
    assert names["bisoftmax_symmetric_fwd"] == names["bisoftmax_symmetric_bwd"] == 1
    assert names["norm_relu_fwd"] == names["norm_relu_bwd"] == 1 and "relu" not in names  # the fused FF activation
    torch_path, _ = b.diff_rows(b.log_step(*b.MODELS["Hyper-SET"], ARGS, 3, "bf16", True),
                                b.log_step(*b.MODELS["Hyper-SET"], ARGS, 2, "bf16", True))
    assert names["mm"] == Counter({k[0]: n for k, n in torch_path.items()})["mm"]  # one Dᵀx product per FF step
    fwd = next(r for r in full if r[0] == "bisoftmax_symmetric_fwd")
    assert fwd[5] == 2 * 2 * (1 * 2 * 81 * 8) * 81  # two products of 2 N² p per (b, h): B 1, H 2, p 8
    assert not {"clone", "cat", "contiguous"} & set(names), names
