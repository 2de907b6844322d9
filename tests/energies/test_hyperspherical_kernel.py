"""Hyper-SET's symmetric bi-softmax as one Triton kernel each way (energies/hyperspherical_kernel.py,
``attention.impl: kernel``): through Triton's interpreter on CPU, compiled on CUDA (marked)."""

import pytest
import torch

from energyformer.energies import hyperspherical_kernel as hk
from energyformer.energies.hyperspherical import BiSoftmaxAttentionEnergy
from energyformer.energies.hyperspherical_ops import bisoftmax_einsum, bisoftmax_symmetric

from .cem_cases import interpreted


@interpreted
@pytest.mark.parametrize("n,p", [(1, 4), (9, 4), (81, 64), (128, 16), (33, 48)])
@pytest.mark.parametrize("negate,beta", [(False, 0.3), (True, 0.3), (False, -0.3)])
def test_kernel_equals_the_symmetric_bisoftmax_in_float64(n, p, negate, beta, overflow_checked):
    """Values and gradients equal bisoftmax_symmetric (itself the two-softmax reference) to 1e-12 in float64,
    at padded and exact tile sizes, up to MAX_TOKENS; also at a negative β (attention.beta_scale < 0). With the
    interpreter's int32 overflow check on (the suite leaves it off: tests/conftest.py)."""
    g = torch.Generator().manual_seed(n * 100 + p)
    u = torch.randn(2, 3, n, p, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(u.shape, generator=g, dtype=torch.float64)
    y = hk.bisoftmax_symmetric_kernel(u, beta, negate=negate)
    ref = bisoftmax_symmetric(u, beta, negate=negate)
    torch.testing.assert_close(y, ref, rtol=1e-12, atol=1e-12)
    (gk,) = torch.autograd.grad((y * w).sum(), u)
    (gr,) = torch.autograd.grad((ref * w).sum(), u)
    torch.testing.assert_close(gk, gr, rtol=1e-11, atol=1e-11)
    two_softmax = bisoftmax_einsum(u, u, u, beta, symmetric=False) * (-1.0 if negate else 1.0)
    torch.testing.assert_close(y, two_softmax, rtol=1e-12, atol=1e-12)


@interpreted
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("radius", [1.0, 4.0])
def test_kernel_low_precision_is_as_close_as_the_pytorch_function(dtype, radius):
    """float32 / bf16 operands, on the sphere (scores up to 8) and four times off it: y and dU within 1.5x
    the error of the PyTorch Function in the same dtype (against float64 on the same rounded operands),
    plus eps/4 of the value's norm."""
    g = torch.Generator().manual_seed(7)
    u64 = torch.randn(2, 3, 81, 64, generator=g, dtype=torch.float64)
    u64 = (u64 / u64.norm(dim=-1, keepdim=True) * 8.0 * radius).to(dtype).double()
    w = torch.randn(u64.shape, generator=g, dtype=torch.float64)
    out = {}
    for name, fn, dt in (("ref", bisoftmax_symmetric, torch.float64), ("torch", bisoftmax_symmetric, dtype),
                         ("kernel", hk.bisoftmax_symmetric_kernel, dtype)):
        u = u64.to(dt).requires_grad_(True)
        y = fn(u, 0.125)
        assert y.dtype == dt
        out[name] = (y.detach().double(), torch.autograd.grad((y * w.to(dt)).sum(), u)[0].double())
    eps = torch.finfo(dtype).eps
    for i in (0, 1):
        ref = out["ref"][i]
        err = {n: float((out[n][i] - ref).norm()) for n in ("torch", "kernel")}
        assert err["kernel"] <= 1.5 * err["torch"] + eps / 4 * float(ref.norm()), (i, err)


@interpreted
@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_kernel_reads_and_writes_the_projection_layout(dtype):
    """u as the projections are laid out — a (B, H, N, p) view of (B, N, H, p) memory — is read in place and y
    and dU are written in u's layout (so the read-out's "b h n p -> b n (h p)" is a view, no copy), dy in a third
    layout is read in place: the values equal the kernel's on contiguous copies exactly."""
    g = torch.Generator().manual_seed(3)
    u0 = torch.randn(2, 81, 3, 16, generator=g, dtype=torch.float64).to(dtype)
    w0 = torch.randn(2, 3, 16, 81, generator=g, dtype=torch.float64).to(dtype)  # dy's memory: (B, H, p, N)
    out = {}
    for layout in ("strided", "contiguous"):
        u = u0.transpose(1, 2)
        u = (u.contiguous() if layout == "contiguous" else u).requires_grad_(True)
        y = hk.bisoftmax_symmetric_kernel(u, 0.25)
        dy = w0.transpose(-1, -2) if layout == "strided" else w0.transpose(-1, -2).contiguous()
        (du,) = torch.autograd.grad(y, u, dy)
        if layout == "strided":
            assert y.stride() == u.stride() and du.stride() == u.stride()
            assert y.transpose(1, 2).is_contiguous()  # (B, N, H, p) memory: the read-out's merge is a view
        out[layout] = y, du
    for a, b in zip(out["strided"], out["contiguous"]):
        assert torch.equal(a, b)


def test_kernel_refuses_what_it_does_not_cover(monkeypatch):
    with pytest.raises(ValueError, match="at most 128 tokens, got 129"):
        hk.bisoftmax_symmetric_kernel(torch.randn(1, 1, 129, 4), 0.5)
    with pytest.raises(ValueError, match="qkv_norm 'shared', self_interaction true"):
        BiSoftmaxAttentionEnergy(8, 2, impl="kernel", self_interaction=False)
    with pytest.raises(ValueError, match="qkv_norm 'shared'"):
        BiSoftmaxAttentionEnergy(8, 2, impl="kernel", qkv_norm="separate", gain="learned")
    e = BiSoftmaxAttentionEnergy(8, 2, impl="kernel")
    x = torch.randn(2, 5, 8)
    mask = torch.ones(2, 5, dtype=torch.bool)
    mask[1, 3:] = False
    with pytest.raises(ValueError, match="without padding"):
        e.operator(e.prepare(x, mask=mask))
    monkeypatch.setattr(hk, "triton_available", lambda: False)
    with pytest.raises(ValueError, match="needs the triton package"):
        hk.bisoftmax_symmetric_kernel(torch.randn(1, 1, 5, 4), 0.5)


@interpreted
def test_sudoku_model_with_the_kernel_matches_the_default_impl():
    """The Sudoku Hyper-SET (toy size) with ``attention.impl: kernel``: logits and every parameter gradient
    as with the default path (float32, same weights)."""
    from energyformer.experiment import load_run_config
    from energyformer.models import MODELS
    from energyformer.tasks.sudoku import CLASSES, VOCAB

    models = []
    for impl in ("auto", "kernel"):
        cfg = load_run_config("hyperset/sudoku_hyperset", ["model.dim=32", "model.heads=4", "model.iterations=3",
                                                          f"model.block.attention.impl={impl}"])
        torch.manual_seed(0)
        models.append(MODELS.build(cfg.model, vocab_size=VOCAB, n_out=CLASSES, causal=False))
    with torch.no_grad():  # non-zero step sizes, so the attention moves the tokens
        for m in models:
            torch.manual_seed(1)
            for p in m.parameters():
                p.add_(0.05 * torch.randn_like(p))
    boards = torch.randint(0, VOCAB, (2, 81), generator=torch.Generator().manual_seed(2))
    outs = []
    for m in models:
        logits = m(boards).logits
        grads = torch.autograd.grad(logits.pow(2).sum(), list(m.parameters()))
        outs.append((logits, grads))
    torch.testing.assert_close(outs[1][0], outs[0][0], rtol=1e-5, atol=1e-5)
    for a, b in zip(outs[1][1], outs[0][1]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.cuda
def test_compiled_kernel_matches_float64_on_cuda():
    """The compiled kernel under bf16 autocast: bf16 out, y and dU within 2% (relative norm) of float64."""
    g = torch.Generator().manual_seed(3)
    u = torch.randn(8, 12, 81, 64, generator=g, dtype=torch.float64)
    u = u / u.norm(dim=-1, keepdim=True) * 8.0
    w = torch.randn(u.shape, generator=g, dtype=torch.float64)

    def run(x, ww, fn, autocast):
        x = x.clone().requires_grad_(True)
        with torch.autocast(x.device.type, torch.bfloat16, enabled=autocast):
            y = fn(x, 0.125)
        return y, torch.autograd.grad((y.double() * ww).sum(), x)[0]

    ref = run(u, w, bisoftmax_symmetric, False)
    got = run(u.float().cuda(), w.cuda(), hk.bisoftmax_symmetric_kernel, True)
    assert got[0].dtype == torch.bfloat16
    for a, b in zip(got, ref):
        a, b = a.detach().double().cpu(), b.detach()
        assert float((a - b).norm() / b.norm()) < 2e-2


def test_bf16_kernels_compile_for_sm90_without_spilling():
    """scripts/hyperset_kernel_resources.py at the launcher's Sudoku tile (128 × 64, 8 warps, bf16), and the
    feed-forward's fused norm + ReLU at 4d of d 768 and 2,048: every kernel under the 255-register cap with no
    spill, shared memory under the H100's 227 KiB (skipped where Triton cannot compile for sm_90)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("triton")
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, TRITON_INTERPRET="0", OMP_NUM_THREADS="1", PYTHONPATH=str(root / "src"))
    out = subprocess.run([sys.executable, str(root / "scripts/hyperset_kernel_resources.py"), "--cases",
                          "bf16:128x64:8"], env=env, capture_output=True, text=True)
    if out.returncode == 3:
        pytest.skip(out.stdout.strip())
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line.split(" | ") for line in out.stdout.splitlines() if line.startswith("| bf16")]
    assert [r[3] for r in rows] == ["`_fwd`", "`_bwd`"] + ["`_norm_relu_fwd`", "`_norm_relu_bwd`"] * 2
    for r in rows:
        regs, stores, loads, shared = int(r[4]), int(r[5].replace(",", "")), int(r[6].replace(",", "")), \
            int(r[7].rstrip(" |").replace(",", ""))
        assert regs <= 255 and stores == loads == 0 and shared <= 232_448, r


def test_auto_takes_the_kernel_only_where_it_applies(monkeypatch):
    """impl 'auto': never the kernel on CPU; on a (pretended) CUDA tensor only for one shared sphere with
    self-interaction, no padding, at most MAX_TOKENS tokens, not float64, with triton installed."""
    e = BiSoftmaxAttentionEnergy(8, 2, impl="auto")
    x = torch.randn(2, 5, 8)
    st = e.prepare(x)
    assert e.auto_kernel(st) is False  # CPU
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    monkeypatch.setattr("energyformer.energies.hyperspherical.triton_available", lambda: True)
    assert e.auto_kernel(st) is True
    e64 = BiSoftmaxAttentionEnergy(8, 2, impl="auto").double()
    assert e64.auto_kernel(e64.prepare(x.double())) is False
    assert e.auto_kernel(e.prepare(torch.randn(1, hk.MAX_TOKENS + 1, 8))) is False
    mask = torch.ones(2, 5, dtype=torch.bool)
    mask[1, 3:] = False
    assert e.auto_kernel(e.prepare(x, mask=mask)) is False
    assert BiSoftmaxAttentionEnergy(8, 2, impl="auto", self_interaction=False).auto_kernel(st) is False
    sep = BiSoftmaxAttentionEnergy(8, 2, impl="auto", qkv_norm="separate", gain="learned")
    assert sep.auto_kernel(sep.prepare(x)) is False
    monkeypatch.setattr("energyformer.energies.hyperspherical.triton_available", lambda: False)
    assert e.auto_kernel(st) is False


@pytest.mark.cuda
def test_auto_runs_the_kernel_in_the_sudoku_model_on_cuda(monkeypatch):
    """The Sudoku Hyper-SET on CUDA with the default impl ('auto') calls the Triton kernel."""
    from energyformer.energies import hyperspherical
    from energyformer.experiment import load_run_config
    from energyformer.models import MODELS
    from energyformer.tasks.sudoku import CLASSES, VOCAB

    calls = []
    real = hyperspherical.bisoftmax_symmetric_kernel
    monkeypatch.setattr(hyperspherical, "bisoftmax_symmetric_kernel", lambda *a, **k: calls.append(1) or real(*a, **k))
    cfg = load_run_config("hyperset/sudoku_hyperset", ["model.dim=32", "model.heads=4", "model.iterations=3"])
    m = MODELS.build(cfg.model, vocab_size=VOCAB, n_out=CLASSES, causal=False).cuda()
    with torch.autocast("cuda", torch.bfloat16):
        m(torch.randint(0, VOCAB, (2, 81), device="cuda")).logits.float().sum().backward()
    assert len(calls) == 3  # one per iteration


@interpreted
def test_compile_keeps_the_kernel_in_one_graph(compiles_like_eager):
    """While torch.compile traces, the launches are custom operators: torch.compile(fullgraph=True) traces the
    Sudoku Hyper-SET with ``impl: kernel`` without a graph break, and its logits and gradients equal eager ones
    (aot_eager backend: Dynamo's and AOTAutograd's tracing, no code generation)."""
    from energyformer.experiment import load_run_config
    from energyformer.models import MODELS
    from energyformer.tasks.sudoku import CLASSES, VOCAB

    cfg = load_run_config("hyperset/sudoku_hyperset", ["model.dim=32", "model.heads=4", "model.iterations=3",
                                                      "model.block.attention.impl=kernel"])
    torch.manual_seed(0)
    m = MODELS.build(cfg.model, vocab_size=VOCAB, n_out=CLASSES, causal=False)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.05 * torch.randn_like(p))
    boards = torch.randint(0, VOCAB, (2, 81), generator=torch.Generator().manual_seed(2))
    compiles_like_eager(lambda: m(boards).logits, m.parameters())


@interpreted
def test_autocast_only_casts_the_input():
    """The launcher runs no autocast context (host time): under bf16 autocast a float32 u gives bitwise what a bf16
    u gives without autocast, value and gradient."""
    g = torch.Generator().manual_seed(7)
    u = torch.randn(2, 3, 20, 8, generator=g)
    w = torch.randn(u.shape, generator=g).bfloat16()
    out = []
    for on, x0 in ((False, u.bfloat16()), (True, u)):
        x = x0.clone().requires_grad_(True)
        with torch.autocast("cpu", torch.bfloat16, enabled=on):
            y = hk.bisoftmax_symmetric_kernel(x, 0.35, negate=True)
        assert y.dtype == torch.bfloat16
        out.append((y, torch.autograd.grad((y * w).sum(), x)[0].bfloat16()))
    assert torch.equal(out[0][0], out[1][0]) and torch.equal(out[0][1], out[1][1])
