"""Sphere norms and cosines at any finite scale (probe P, finding 1): ``sphere_rms_norm``
(energies/sphere_norm.py) and ``coherence_mem``'s cosines (energies/coherence_pointwise.py) squared before
they summed, so a float32 row past ‖z‖ ≈ 1.8e19 had an infinite norm and came out a *finite* 0 (rsqrt(inf) = 0;
F.normalize divided by inf): every Hyper-SET energy a constant, its update 0, no error. Each test here failed on
that code."""

import copy

import pytest
import torch
import torch.nn.functional as F

import energyformer.energies  # noqa: F401  (registers all energies)
from energyformer.core import ENERGIES, IdentityPrecond
from energyformer.core.fuzz import map_tensors
from energyformer.energies import sphere_norm as ops
from energyformer.energies.hyperspherical_ops import sphere_rms_norm

PATHS = ["custom", "fused", "gain"]


def _reference(z: torch.Tensor, eps: float, w: torch.Tensor | None, dy: torch.Tensor):
    """The norm and its gradient in float64 on the (rounded) input, scaled per row by hand so that nothing over- or
    underflows: (z/s)(mean (z/s)² + eps/s²)^(-1/2) is the same function of z for a constant s."""
    z = z.detach().double().requires_grad_(True)
    s = z.detach().abs().amax(-1, keepdim=True)
    zs = z / s
    u = zs * torch.rsqrt(zs.square().mean(-1, keepdim=True) + eps / s.square())
    u = u if w is None else u * w.double()
    (g,) = torch.autograd.grad(u, z, dy.double())
    return u.detach(), g


def _rows_rel(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Relative error per row (each row on its own scale: the rows' gradients span 40 decades)."""
    return (a.double() - b).norm(dim=-1) / b.norm(dim=-1)


#: (dtype, row scale, eps): huge rows in float32 and bf16 (float32's exponent: the same statistics), tiny rows
#: with an eps below float32's underflow floor in float32
SCALES = [(torch.float32, 1e20, 1e-24), (torch.float32, 1e30, 1e-24), (torch.bfloat16, 1e20, 1e-24),
          (torch.bfloat16, 1e30, 1e-24), (torch.float32, 1e-21, 0.0), (torch.float32, 1e-25, 1e-45)]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype,scale,eps", SCALES)
def test_sphere_norm_and_gradient_match_float64_at_extreme_scales(monkeypatch, path, dtype, scale, eps):
    """Rows at 1e20 / 1e30 (old: u = 0, gradient 0) and tiny rows with an eps below float32's underflow floor
    (old: squares lost to underflow, u off by 3e-4 and an inf gradient at 1e-21; u = inf at 1e-25), next to an
    ordinary row, on each path (custom Function, the fused-kernel device path, learned gain): value and
    gradient within rounding of float64, the ordinary row untouched."""
    monkeypatch.setitem(ops.FUSED_NORM, "cpu", path == "fused")
    g = torch.Generator().manual_seed(0)
    z = torch.randn(4, 16, generator=g, dtype=torch.float64)
    z[1:] *= scale
    z = z.to(dtype)
    w = (torch.rand(16, generator=g, dtype=torch.float64) + 0.5).to(dtype) if path == "gain" else None
    dy = torch.randn(4, 16, generator=g, dtype=torch.float64).to(dtype)
    zz = z.clone().requires_grad_(True)
    u = sphere_rms_norm(zz, eps, w)
    (gz,) = torch.autograd.grad(u, zz, dy.to(u.dtype))
    u_ref, g_ref = _reference(z, eps, w, dy)
    tol = 1e-6 if dtype == torch.float32 else 1e-2
    assert (_rows_rel(u, u_ref) < tol).all(), _rows_rel(u, u_ref)
    assert (_rows_rel(gz, g_ref) < 10 * tol).all(), _rows_rel(gz, g_ref)
    # the ordinary row: bit for bit what the plain path gives it alone (the check adds no rounding)
    z0 = z[:1].clone().requires_grad_(True)
    u0 = sphere_rms_norm(z0, eps, w)
    assert torch.equal(u[:1], u0)
    assert torch.equal(gz[:1], torch.autograd.grad(u0, z0, dy[:1].to(u0.dtype))[0])


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_on_an_accelerator_an_overflowed_row_is_loud_without_a_host_read(monkeypatch, path, dtype, no_host_read):
    """Where a host read stalls the device's queue (``core.precision.host_read_stalls``: pretended here), the range
    check read z's norm on the host in every call (eager), or recomputed every row in float64 (CUDA graphs,
    compile). Now: ordinary inputs give bit for bit the plain result, value and gradient; a row past overflow makes
    the whole output and gradient NaN (never the finite 0 of the unchecked norm); and no value is read on the host
    (``Tensor.__bool__``, ``__float__`` and ``item`` raise during the call)."""
    monkeypatch.setitem(ops.FUSED_NORM, "cpu", path == "fused")
    g = torch.Generator().manual_seed(5)
    z = torch.randn(4, 16, generator=g, dtype=torch.float64).to(dtype)
    w = (torch.rand(16, generator=g, dtype=torch.float64) + 0.5).to(dtype) if path == "gain" else None
    dy = torch.randn(4, 16, generator=g, dtype=torch.float64).to(dtype)

    def run(t):
        t = t.clone().requires_grad_(True)
        u = sphere_rms_norm(t, 1e-6, w)
        return u, torch.autograd.grad(u, t, dy.to(u.dtype))[0]

    plain_u, plain_g = run(z)
    monkeypatch.setattr(ops, "host_read_stalls", lambda t: True)

    with no_host_read():
        loud_u, loud_g = run(z)
        big = z.clone()
        big[2] *= 1e160 if dtype == torch.float64 else 1e20
        huge_u, huge_g = run(big)
    assert torch.equal(loud_u, plain_u) and torch.equal(loud_g, plain_g)
    assert torch.isnan(huge_u[2]).all() and torch.isnan(huge_g[2]).all()
    if path == "custom" and dtype != torch.float64:  # its own statistic decides per row (r = 0: squares overflowed)
        assert not torch.isnan(huge_u[[0, 1, 3]]).any() and not torch.isnan(huge_g[[0, 1, 3]]).any()
    else:  # the fused kernel sums on its own: one flag with a margin for the whole call
        assert torch.isnan(huge_u).all() and torch.isnan(huge_g).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_the_loud_flag_has_its_margin_and_passes_rows_below_it(monkeypatch, dtype):
    """The fused kernel's flag: a row whose mean z² is past max/4 of the statistics' dtype makes the call NaN (a row
    the kernel's own sums overflow is never missed), a row at a quarter of that passes exactly."""
    monkeypatch.setitem(ops.FUSED_NORM, "cpu", True)
    monkeypatch.setattr(ops, "host_read_stalls", lambda t: True)
    stats = torch.float64 if dtype == torch.float64 else torch.float32
    top = (torch.finfo(stats).max / 4) ** 0.5            # the rms at the margin
    z = torch.ones(3, 16, dtype=torch.float64)
    for rms, nan in ((top * 1.5, True), (top * 0.25, False)):
        z[1] = rms
        u = sphere_rms_norm(z.to(dtype), 1e-6)
        assert bool(torch.isnan(u).all()) == nan and (nan or bool(torch.isfinite(u).all())), (rms, u)


def test_float64_rows_past_their_overflow_are_exact():
    """float64 (the reference precision) squares overflow at ~1.3e154: rows at 1e200 were 0 as well."""
    z = torch.randn(3, 8, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * 1e200
    torch.testing.assert_close(sphere_rms_norm(z, 1e-24), F.rms_norm(z / 1e200, (8,), eps=0.0), rtol=1e-14, atol=0)


def test_sphere_norm_of_huge_rows_compiles_into_one_graph():
    """Under torch.compile the off-range rows are selected by ``where`` (no host sync, no graph break)."""
    z = torch.randn(2, 3, 8, generator=torch.Generator().manual_seed(3))
    z[0, 1] *= 1e20
    z.requires_grad_(True)
    f = torch.compile(lambda t: sphere_rms_norm(t, 1e-24), backend="aot_eager", fullgraph=True)
    u = f(z)
    (gz,) = torch.autograd.grad(u.pow(3).sum(), z)
    u_ref, g_ref = _reference(z, 1e-24, None, 3 * u.detach().double().square())
    assert (_rows_rel(u.reshape(-1, 8), u_ref.reshape(-1, 8)) < 1e-6).all()
    assert (_rows_rel(gz.reshape(-1, 8), g_ref.reshape(-1, 8)) < 1e-5).all()


def test_memory_cosines_are_f_normalize_and_exact_past_the_overflow():
    """coherence_mem's cosines: those of F.normalize(h, eps=1e-6) bit for bit on ordinary and tiny rows (tiny ones
    are divided by eps, not put on the sphere), the float64 cosines at 1e20 (old: 0 for every memory)."""
    e = ENERGIES["coherence_mem"](8, size=6, tau=0.5)
    h = torch.randn(3, 8, generator=torch.Generator().manual_seed(4))
    h[1] *= 1e-9
    bank = F.normalize(e.bank, dim=-1)
    assert torch.equal(e._cos(h), F.normalize(h, dim=-1, eps=1e-6) @ bank.t())
    big = e._cos(h[[0, 2]] * 1e20)
    want = F.normalize(h[[0, 2]].double(), dim=-1) @ F.normalize(e.bank.double(), dim=-1).t()
    torch.testing.assert_close(big.double(), want, rtol=1e-5, atol=1e-6)


def test_memory_cosines_on_an_accelerator_are_loud_without_a_host_read(monkeypatch, no_host_read):
    """Where a host read stalls the queue (pretended): a row past the norm's overflow gives NaN cosines (loud; the
    exact rescaled norm read a flag on the host per call), ordinary rows are F.normalize's bit for bit, and no value
    is read on the host."""
    from energyformer.energies import coherence_pointwise as cp

    e = ENERGIES["coherence_mem"](8, size=6, tau=0.5)
    h = torch.randn(3, 8, generator=torch.Generator().manual_seed(6))
    h[1] *= 1e20
    bank = F.normalize(e.bank, dim=-1)
    monkeypatch.setattr(cp, "host_read_stalls", lambda t: True)

    with no_host_read():
        cos = e._cos(h)
    assert torch.isnan(cos[1]).all()
    assert torch.equal(cos[[0, 2]], F.normalize(h[[0, 2]], dim=-1, eps=1e-6) @ bank.t())


def _run(energy, ctx, x):
    state = energy.prepare(ctx)
    if energy.context_is_iterate:
        state = energy.reprepare(state, x)
    return energy.energy(x, state), energy.direction(x, state, IdentityPrecond(x.shape[-1]))


@pytest.mark.parametrize("name,label", [("hyperset_ff", "default"), ("hyperset_ff", "gain=learned"),
                                        ("hyperset_attention", "default"), ("hyperset_softmax_ff", "default"),
                                        ("coherence_mem", "all")])
def test_energy_and_direction_at_inputs_1e20_match_float64(name, label):
    """The energies probe P found constant at inputs x1e20 in float32 (hyperset_ff: −0 for every token,
    hyperset_attention 7.167 everywhere, coherence_mem −log M): energy and direction within 1e-5 of float64."""
    _, e, ctx, x = next(t for t in ENERGIES[name].examples(torch.float64) if t[0] == label)
    e = e.eval()
    ctx, x = map_tensors((ctx, x), lambda t: t * 1e20)
    e64, d64 = _run(e, ctx, x)
    e32, d32 = _run(copy.deepcopy(e).float(), *map_tensors((ctx, x), lambda t: t.float()))
    for a, b in ((e32, e64), (d32, d64)):
        a, b = a.detach().double(), b.detach()
        assert float((a - b).norm() / b.norm()) < 1e-5


@pytest.mark.cuda
@pytest.mark.parametrize("weight", [False, True])
def test_the_range_check_reads_no_host_value_under_cuda_graph_capture(weight):
    """A host read is an error while a stream is captured (benchmarks/hyperset_gpu.py graphs the whole Hyper-SET
    step): on CUDA the check reads nothing on the host (the loud form), and the replayed graph equals the eager
    result; a huge row makes both all NaN, never a finite 0."""
    z = torch.randn(4, 64, device="cuda")
    w = torch.rand(64, device="cuda") + 0.5 if weight else None
    for huge in (False, True):
        if huge:
            z[1] *= 1e20
        ref = sphere_rms_norm(z, 1e-6, w)
        out = _graphed(z.clone(), w)
        if huge:
            assert torch.isnan(ref).all() and torch.isnan(out).all()
        else:
            assert torch.isfinite(ref).all()
            torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)


def _graphed(static: torch.Tensor, w: torch.Tensor | None) -> torch.Tensor:
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up outside the capture, as torch.cuda.graph's users do
        sphere_rms_norm(static, 1e-6, w)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = sphere_rms_norm(static, 1e-6, w)
    g.replay()
    torch.cuda.synchronize()
    return out


def test_the_loud_check_costs_five_small_ops_beside_the_fused_norm(monkeypatch):
    """On an accelerator the fused norm's overflow flag is the rows' norms, their max, a compare, a cast and ok / ok:
    five ops beside the norm (it was eleven per call — the rows' r built in four more, then lt, any, where and its
    two scalars, a cast — on each of the 24 iterations' norms of the eager GPU step, which waits on the host)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if not func.is_view and func.__name__.split(".")[0] not in ("detach", "expand", "lift_fresh"):
                self.ops.append(func.__name__)
            return func(*args, **(kwargs or {}))

    monkeypatch.setitem(ops.FUSED_NORM, "cpu", True)
    monkeypatch.setattr(ops, "host_read_stalls", lambda t: True)
    z, w = torch.randn(2, 5, 16), torch.ones(16)
    with Count() as loud:
        sphere_rms_norm(z, 1e-6)
    with Count() as plain:
        torch.nn.functional.rms_norm(z, (16,), w, 1e-6)
    assert len(loud.ops) - len(plain.ops) <= 5, (loud.ops, plain.ops)


def test_float16_gradient_with_products_past_its_range_stays_finite():
    """Probe AU: the backward formed g·z in float16 before its float32 sum, so |g z| past 65504 made the row's
    gradient NaN where float64's is ~3 (z and g of size ~300, well inside float16)."""
    from energyformer.energies.hyperspherical import SPHERE_EPS

    g = torch.Generator().manual_seed(0)
    z, up = (torch.randn(4, 16, generator=g, dtype=torch.float64) * 300 for _ in range(2))
    assert float((z * up).abs().max()) > 65504
    grads = {}
    for dt in (torch.float64, torch.float16):
        zz = z.to(dt).requires_grad_(True)
        grads[dt], = torch.autograd.grad(sphere_rms_norm(zz, SPHERE_EPS), zz, up.to(dt))
    torch.testing.assert_close(grads[torch.float16].double(), grads[torch.float64], rtol=2e-2, atol=2e-2)
