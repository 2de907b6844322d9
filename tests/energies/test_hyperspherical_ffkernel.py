"""The feed-forward's ReLU(RMSNorm(s)) as one Triton kernel each way (energies/hyperspherical_ffkernel.py): through
Triton's interpreter on CPU, compiled on CUDA (marked)."""

import pytest
import torch
import torch.nn.functional as F

from energyformer.energies import hyperspherical_ffkernel as ffk
from energyformer.energies.hyperspherical_ops import sphere_rms_norm

from .cem_cases import interpreted


def _composite(s, eps):
    """The two ops the kernel replaces: the sphere norm (as ``sphere_rms_norm`` runs it here) and ReLU."""
    return F.relu(sphere_rms_norm(s, eps))


def _rows(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(*shape, generator=g, dtype=torch.float64) * 3.0
    s[0, 0] = 0.0                      # a zero row: r = eps^(-1/2), a = 0
    s[0, 1] = -s[0, 1].abs()           # a row without a positive entry: a = 0, no gradient
    return s.to(dtype)


@interpreted
@pytest.mark.parametrize("m", [1, 8, 100, 3072])
def test_equals_norm_then_relu_in_float64(m, overflow_checked):
    """Values and gradients equal F.relu(F.rms_norm(s)) to 1e-12 in float64, padded and exact widths, with a zero
    row and an all-negative row; with the interpreter's int32 overflow check on (off in the rest of the suite)."""
    s = _rows((2, 5, m), torch.float64, m).requires_grad_(True)
    w = torch.randn(s.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    eps = 1e-6
    a, ref = ffk.sphere_norm_relu(s, eps), _composite(s, eps)
    torch.testing.assert_close(a, ref, rtol=1e-12, atol=1e-12)
    (ga,) = torch.autograd.grad((a * w).sum(), s)
    (gr,) = torch.autograd.grad((ref * w).sum(), s)
    torch.testing.assert_close(ga, gr, rtol=1e-11, atol=1e-11)
    assert torch.equal(a[0, 1], torch.zeros_like(a[0, 1])) and torch.equal(ga[0, 1], torch.zeros_like(ga[0, 1]))


@interpreted
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("scale", [1e-3, 1.0, 1e3])
def test_low_precision_is_as_close_as_the_two_ops(dtype, scale):
    """float32 / bf16 rows at small and large magnitudes: a and ds within 1.5x the error of the two PyTorch ops in
    the same dtype (both against float64 on the same rounded rows), plus eps/4 of the value's norm."""
    s64 = (_rows((4, 9, 96), torch.float64, 3) * scale).to(dtype).double()
    w = torch.randn(s64.shape, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    eps = torch.finfo(dtype).tiny
    out = {}
    for name, fn, dt in (("ref", _composite, torch.float64), ("torch", _composite, dtype),
                         ("kernel", ffk.sphere_norm_relu, dtype)):
        s = s64.to(dt).requires_grad_(True)
        a = fn(s, eps)
        assert a.dtype == dt
        out[name] = a.detach().double(), torch.autograd.grad((a * w.to(dt)).sum(), s)[0].double()
    e = torch.finfo(dtype).eps
    for i in (0, 1):
        ref = out["ref"][i]
        err = {n: float((out[n][i] - ref).norm()) for n in ("torch", "kernel")}
        assert err["kernel"] <= 1.5 * err["torch"] + e / 4 * float(ref.norm()), (i, err)


def test_refuses_what_it_does_not_cover(monkeypatch):
    with pytest.raises(ValueError, match="at most 8192 columns, got 8193"):
        ffk.sphere_norm_relu(torch.randn(2, 8193), 1e-6)
    with pytest.raises(ValueError, match="no normal float32 number"):
        ffk.sphere_norm_relu(torch.randn(2, 8, dtype=torch.float64), torch.finfo(torch.float64).tiny)
    monkeypatch.setattr(ffk, "triton_available", lambda: False)
    with pytest.raises(ValueError, match="needs the triton package"):
        ffk.sphere_norm_relu(torch.randn(2, 8), 1e-6)


def test_applies_on_cuda_only_without_a_gain_in_fast_dtypes(monkeypatch):
    s = torch.randn(2, 3, 16)
    assert not ffk.applies(s, None)  # CPU: the two ops
    monkeypatch.setitem(ffk.FUSED_NORM_RELU, "cpu", True)  # as CUDA decides
    monkeypatch.setattr(ffk, "triton_available", lambda: True)
    assert ffk.applies(s, None) and ffk.applies(s.bfloat16(), None)
    assert not ffk.applies(s, torch.ones(16)) and not ffk.applies(s.double(), None)
    assert not ffk.applies(torch.randn(1, ffk.MAX_COLUMNS + 1), None)


def _sudoku(dtype=torch.float32):
    from energyformer.experiment import load_run_config
    from energyformer.models import MODELS
    from energyformer.tasks.sudoku import CLASSES, VOCAB

    cfg = load_run_config("hyperset/sudoku_hyperset", ["model.dim=16", "model.heads=2", "model.iterations=3"])
    torch.manual_seed(0)
    m = MODELS.build(cfg.model, vocab_size=VOCAB, n_out=CLASSES, causal=False).to(dtype)
    for p in m.parameters():  # step sizes away from their zero start, so every sublayer acts
        p.data.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel()), dtype=dtype))
    return m, torch.randint(0, VOCAB, (2, 81), generator=torch.Generator().manual_seed(5))


@interpreted
def test_sudoku_model_with_the_fused_activation_matches_the_two_ops(monkeypatch):
    """The Sudoku Hyper-SET (toy size, float32) with the fused kernel (forced on CPU through the interpreter):
    logits and every parameter gradient as with the two ops."""
    out = {}
    for fused in (False, True):
        monkeypatch.setitem(ffk.FUSED_NORM_RELU, "cpu", fused)
        m, idx = _sudoku()
        logits = m(idx).logits
        grads = torch.autograd.grad(logits.square().mean(), [p for p in m.parameters()], allow_unused=True)
        out[fused] = logits.detach(), grads
    torch.testing.assert_close(out[True][0], out[False][0], rtol=1e-5, atol=1e-6)
    for a, b in zip(out[True][1], out[False][1]):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


@interpreted
def test_compile_traces_the_two_ops(monkeypatch, compiles_like_eager):
    """While torch.compile traces, the plain ops run (Inductor fuses them itself): one graph, the eager (fused
    kernel) values; the kernel is never called while tracing."""
    monkeypatch.setitem(ffk.FUSED_NORM_RELU, "cpu", True)
    m, idx = _sudoku()
    calls = []
    kernel = ffk.sphere_norm_relu

    def spy(*a):
        calls.append(torch.compiler.is_compiling())
        return kernel(*a)

    monkeypatch.setattr(ffk, "sphere_norm_relu", spy)
    compiles_like_eager(lambda: m(idx).logits, m.parameters(), rtol=1e-5)
    assert calls and not any(calls)  # eager calls only


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_compiled_kernel_matches_float64_on_cuda():
    s64 = _rows((64, 81, 3072), torch.float64).cuda()
    w = torch.randn(s64.shape, dtype=torch.float64, device="cuda")
    for dtype in (torch.bfloat16, torch.float32):
        eps = torch.finfo(dtype).tiny
        s = s64.to(dtype).requires_grad_(True)
        a = ffk.sphere_norm_relu(s, eps)
        (g,) = torch.autograd.grad((a * w.to(dtype)).sum(), s)
        r = s64.to(dtype).double().requires_grad_(True)
        ra = _composite(r, eps)
        (rg,) = torch.autograd.grad((ra * w).sum(), r)
        tol = 2 * torch.finfo(dtype).eps
        assert float((a.double() - ra).norm() / ra.norm()) < tol
        assert float((g.double() - rg).norm() / rg.norm()) < 4 * tol


@interpreted
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_autocast_changes_nothing(dtype):
    """The launcher runs no autocast context (host time): under bf16 autocast the value and gradient are bitwise
    those without it, in s's dtype."""
    s = _rows((2, 7, 40), dtype, 5)
    w = torch.randn(s.shape, generator=torch.Generator().manual_seed(6)).to(dtype)
    out = []
    for on in (False, True):
        x = s.clone().requires_grad_(True)
        with torch.autocast("cpu", torch.bfloat16, enabled=on):
            a = ffk.sphere_norm_relu(x, 1e-6)
        assert a.dtype == dtype
        out.append((a, torch.autograd.grad((a * w).sum(), x)[0]))
    assert torch.equal(out[0][0], out[1][0]) and torch.equal(out[0][1], out[1][1])


@interpreted
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rows_past_the_float32_norm_overflow_are_exact(dtype):
    """A row at 1e20 (‖s‖² past float32's range): the kernel's r was 0, a finite zero output and gradient; now the
    statistic is taken over s / max(max |s|, 1), so values and gradients match float64, and a tiny row is unchanged."""
    s = torch.randn(3, 16, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    s[1] *= 1e20
    s[2] *= 1e-25
    s = s.to(dtype)
    x = s.clone().requires_grad_(True)
    x64 = s.double().requires_grad_(True)
    w = torch.randn(3, 16, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    a, ref = ffk.sphere_norm_relu(x, 1e-24), _composite(x64, 1e-24)
    (ga,) = torch.autograd.grad((a.double() * w).sum(), x)
    (gr,) = torch.autograd.grad((ref * w).sum(), x64)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    for i in range(3):  # each row against its own scale
        torch.testing.assert_close(a[i].double() / ref[i].abs().max(), ref[i] / ref[i].abs().max(), **tol)
        torch.testing.assert_close(ga[i].double() / gr[i].abs().max(), gr[i] / gr[i].abs().max(), **tol)
