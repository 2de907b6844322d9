"""benchmarks/cem_ops.py: CEM's and Llama's ops, bytes and FLOPs per layer at a tiny size (fake tensors,
nothing is timed)."""

from argparse import Namespace

from .bench_script import load_bench

ARGS = Namespace(dim=32, heads=4, mlp_hidden=64, vocab=64, seq=40, batch=2)


def test_one_layer_is_the_difference_of_two_steps_and_scales_with_batch():
    b = load_bench("cem_ops")
    blocks = b.models()
    t, n, nb = b.per_layer(blocks[b.BASE], ARGS)
    assert t["ops"] > 20 and t["matmuls"] > 5 and t["flops"] > 0 and t["saved"] > 0
    assert sum(n.values()) == t["ops"] and sum(nb.values()) == t["bytes"]
    t1, _, _ = b.per_layer(blocks[b.BASE], Namespace(**{**vars(ARGS), "batch": 1}))
    assert t1["ops"] == t["ops"] and t1["bytes"] < t["bytes"]  # launches do not scale with the batch


def test_paper_configuration_on_the_blocked_path_has_no_context_times_heads_traffic():
    """The per-head factors' read-out: no op reads or writes a (B, N, H, D) tensor (the old c_k∘h_j)."""
    b = load_bench("cem_ops")
    block = b.models()["paper configuration, blocked path"]
    model = b.build_lm(block, 1, ARGS)
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    with b.emulated_cuda_policy(), FakeTensorMode():
        model = b.with_fake_tensors(model)
        log = b.OpLog()
        with log, torch.autocast("cpu", torch.bfloat16):
            idx = torch.zeros(ARGS.batch, ARGS.seq, dtype=torch.long)
            b.ours_logits(model, idx).float().sum().backward()
        rows = log.rows
    wide = [r for r in rows if any(s[-2:] == (ARGS.heads, ARGS.dim) and ARGS.seq in s for s in r[3])]
    assert rows and not wide, wide[:3]


def test_report_and_out(tmp_path, capsys):
    b = load_bench("cem_ops")
    out = tmp_path / "ops.md"
    b.main(["--seq", "24", "--dim", "32", "--heads", "4", "--mlp-hidden", "64", "--vocab", "64", "--ops", "--top", "3",
            "--models", "paper configuration, blocked path", "--out", str(out)])
    text = out.read_text()
    assert "| Llama baseline |" in text and "| paper configuration, blocked path |" in text
    assert "--out" not in text and "benchmarks/cem_ops.py --seq 24" in text and "ops of one layer" in text
    assert capsys.readouterr().out == text


def test_kernel_path_counted_with_its_launches_stubbed():
    """``<model>, kernel path``: CEM attention forced onto the Triton kernel, each launch logged as one op (its
    forward and backward kernels of one program per head, and ``_psum_h``, which gathers the head sums: the
    default launch), nothing run; CUDA's bmm with a float32 out_dtype for the shared products, no float32
    matmul."""
    import importlib.util

    import pytest

    if importlib.util.find_spec("triton") is None:
        pytest.skip("the kernel path needs triton installed (its launches are stubbed, not run)")
    b = load_bench("cem_ops")
    block = b.block_of("full CEM T=1 (auto path)" + b.KERNEL_SUFFIX, b.models())
    assert block.attention.attn_path == "kernel"
    t, n, _ = b.per_layer(block, ARGS)
    launches = {k[0]: v for k, v in n.items() if k[0].startswith("triton ")}
    assert launches == {"triton _fwd_h": 1, "triton _psum_h": 1, "triton _bwd_d_h": 1, "triton _bwd_kv_h": 1}, launches
    assert not [k for k in n if k[0] == "bmm" and k[1] == "f32/f32"]
    with pytest.raises(SystemExit, match="not a gpu_lm.py model"):
        b.block_of("no such model", b.models())
