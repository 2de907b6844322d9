"""The low-precision sphere RMSNorm of Hyper-SET (energies/sphere_norm.py: ``sphere_rms_norm``) and the bi-softmax
paths of energies/hyperspherical_ops.py."""


import pytest
import torch
import torch.nn.functional as F

from energyformer.energies.hyperspherical_ops import sphere_rms_norm

TINY = torch.finfo(torch.float32).tiny


@pytest.mark.parametrize("scale", [1e-4, 1.0, 1e4])
def test_bf16_norm_is_the_float32_norm_rounded(scale):
    """Output: the float32 RMSNorm rounded once to bf16 (up to one bf16 ulp from the order of the sums)."""
    g = torch.Generator().manual_seed(0)
    z = (torch.randn(3, 5, 48, generator=g) * scale).to(torch.bfloat16)
    u = sphere_rms_norm(z, TINY)
    ref = F.rms_norm(z.double(), (48,), eps=TINY)
    assert u.dtype == torch.bfloat16
    assert ((u.double() - ref).abs() <= 2 ** -8 * ref.abs() + 1e-30).all()
    assert torch.allclose(u.double().pow(2).mean(-1), torch.ones(3, 5, dtype=torch.float64), rtol=1e-2)


@pytest.mark.parametrize("scale", [1e-4, 1.0, 1e4])
def test_bf16_norm_gradient_matches_float64(scale):
    g = torch.Generator().manual_seed(1)
    z64 = torch.randn(4, 7, 32, generator=g, dtype=torch.float64) * scale
    w = torch.randn(4, 7, 32, generator=g, dtype=torch.float64)  # upstream gradient
    z = z64.to(torch.bfloat16).requires_grad_(True)
    (sphere_rms_norm(z, TINY) * w.to(torch.bfloat16)).sum().backward()
    zr = z.detach().double().requires_grad_(True)  # the same (rounded) input in float64
    (F.rms_norm(zr, (32,), eps=TINY) * w.to(torch.bfloat16).double()).sum().backward()
    assert z.grad.dtype == torch.bfloat16 and torch.isfinite(z.grad).all()
    err = (z.grad.double() - zr.grad).norm() / zr.grad.norm()
    assert err < 2e-2, err


def test_bf16_norm_under_autocast_stays_bf16():
    """Under autocast F.rms_norm returns float32 (CUDA's float32 list); the sphere norm keeps z's dtype."""
    z = torch.randn(2, 3, 16).to(torch.bfloat16)
    with torch.autocast("cpu", torch.bfloat16):
        assert sphere_rms_norm(z, TINY).dtype == torch.bfloat16


def test_float32_norm_and_gradient_match_f_rms_norm():
    g = torch.Generator().manual_seed(3)
    z = (torch.randn(3, 5, 40, generator=g) * 7).requires_grad_(True)
    w = torch.randn(3, 5, 40, generator=g)
    u = sphere_rms_norm(z, TINY)
    (gz,) = torch.autograd.grad((u * w).sum(), z)
    z2 = z.detach().clone().requires_grad_(True)
    ref = F.rms_norm(z2, (40,), eps=TINY)
    (gref,) = torch.autograd.grad((ref * w).sum(), z2)
    assert u.dtype == torch.float32 and u.is_contiguous()
    torch.testing.assert_close(u, ref, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(gz, gref, rtol=1e-5, atol=1e-6)


def test_float64_and_gains_are_f_rms_norm():
    z = torch.randn(2, 3, 16, dtype=torch.float64)
    w = torch.rand(16, dtype=torch.float64)
    assert torch.equal(sphere_rms_norm(z, TINY), F.rms_norm(z, (16,), eps=TINY))
    zb = z.to(torch.bfloat16)
    assert torch.equal(sphere_rms_norm(zb, TINY, w.to(zb.dtype)), F.rms_norm(zb, (16,), w.to(zb.dtype), TINY))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_norm_of_the_heads_view_runs_in_its_memory_order(dtype):
    """The heads' projections — (B, H, N, p) viewed over (B, N, H, p) memory — are normalised in memory order:
    the result has the view's strides (no copy to (B, H, N, p)) and equals the norm of a contiguous copy
    exactly, gradient too; views that are no permutation of dense memory (a slice) take the copy path."""
    g = torch.Generator().manual_seed(5)
    mem = torch.randn(2, 9, 3, 16, generator=g, dtype=torch.float64).to(dtype)
    dy = torch.randn(2, 3, 9, 16, generator=g, dtype=torch.float64).to(dtype)
    z = mem.transpose(1, 2).requires_grad_(True)
    zc = z.detach().contiguous().requires_grad_(True)
    u, uc = sphere_rms_norm(z, TINY), sphere_rms_norm(zc, TINY)
    assert u.stride() == z.stride() and torch.equal(u, uc)
    assert torch.equal(torch.autograd.grad(u, z, dy)[0], torch.autograd.grad(uc, zc, dy)[0])
    sl = torch.randn(2, 9, 6, 16, generator=g, dtype=torch.float64).to(dtype)[:, :, ::2].transpose(1, 2)
    assert torch.equal(sphere_rms_norm(sl, TINY), sphere_rms_norm(sl.contiguous(), TINY))


@pytest.mark.parametrize("padded", [False, True])
def test_symmetric_bisoftmax_is_the_two_softmax_reference(padded):
    """q is k: the column softmax taken as the transposed row softmax equals the computed one (float64),
    with and without key padding; a non-symmetric call still computes both."""
    from energyformer.core.attention import key_padding_mask
    from energyformer.energies.hyperspherical_ops import bisoftmax_einsum

    g = torch.Generator().manual_seed(2)
    q = torch.randn(2, 3, 9, 4, generator=g, dtype=torch.float64)
    v = torch.randn(2, 3, 9, 4, generator=g, dtype=torch.float64)
    tokens = torch.ones(2, 9, dtype=torch.bool)
    tokens[1, 6:] = False
    mask = key_padding_mask(tokens) if padded else None
    fast = bisoftmax_einsum(q, q, v, 0.5, mask)
    ref = bisoftmax_einsum(q, q, v, 0.5, mask, symmetric=False)
    torch.testing.assert_close(fast, ref, rtol=1e-12, atol=1e-12)
    k = torch.randn(2, 3, 9, 4, generator=g, dtype=torch.float64)
    wrong = bisoftmax_einsum(q, k, v, 0.5, mask, symmetric=True)  # the shortcut needs S = Sᵀ
    assert not torch.allclose(bisoftmax_einsum(q, k, v, 0.5, mask), wrong)


def test_sphere_norm_traces_into_one_graph():
    """torch.compile (train.compile) takes the norm and its gradient without a graph break (Dynamo only)."""
    z = torch.randn(2, 3, 8, requires_grad=True)
    f = torch.compile(lambda t: sphere_rms_norm(t, TINY), backend="aot_eager", fullgraph=True)
    u = f(z)
    (g,) = torch.autograd.grad(u.pow(3).sum(), z)
    z2 = z.detach().requires_grad_(True)
    (g2,) = torch.autograd.grad(F.rms_norm(z2, (8,), eps=TINY).pow(3).sum(), z2)
    torch.testing.assert_close(u, F.rms_norm(z, (8,), eps=TINY), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(g, g2, rtol=1e-5, atol=1e-5)


@pytest.fixture(params=["sums", "products"])
def symmetrise(request, monkeypatch):
    """Both forms of _SymmetricBiSoftmax on CPU: the transposed sums, or folded into the products (forced for any
    size; the library picks by head dimension and size, ``gemm_symmetrise``)."""
    from energyformer.energies import hyperspherical_ops as ops

    products = request.param == "products"
    monkeypatch.setitem(ops.GEMM_SYMMETRISE_MAX_P, "cpu", 1 << 30 if products else 0)
    monkeypatch.setattr(ops, "GEMM_SYMMETRISE_MIN_SCORES", 0)
    return request.param


def test_symmetrising_by_products_is_chosen_for_small_heads_and_many_scores():
    from energyformer.energies.hyperspherical_ops import gemm_symmetrise

    assert gemm_symmetrise(torch.empty(16, 4, 81, 16))                   # the CPU study: 64 x 81² scores, p 16
    assert not gemm_symmetrise(torch.empty(16, 4, 81, 32))               # p 32: no faster (measured)
    assert not gemm_symmetrise(torch.empty(1, 2, 81, 8))                 # 2 x 81² scores: the sums, in cache
    assert not gemm_symmetrise(torch.empty(16, 4, 81, 16, device="meta"))  # CPU only


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("negate", [False, True])
def test_bisoftmax_symmetric_is_the_two_softmax_reference_in_float64(tied, negate, symmetrise):
    """bisoftmax_symmetric (one shared sphere, no mask): values and gradients equal the einsum reference that
    computes both softmaxes, to 1e-12 in float64, in either form; ``negate`` gives −y; gradcheck passes."""
    from energyformer.energies.hyperspherical_ops import bisoftmax_einsum, bisoftmax_symmetric

    g = torch.Generator().manual_seed(5)
    u = torch.randn(2, 3, 7, 4, generator=g, dtype=torch.float64, requires_grad=True)
    v = None if tied else torch.randn(2, 3, 7, 4, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(2, 3, 7, 4, generator=g, dtype=torch.float64)
    leaves = [u] if tied else [u, v]
    y = bisoftmax_symmetric(u, 0.7, v, negate=negate)
    ref = bisoftmax_einsum(u, u, u if tied else v, 0.7, symmetric=False) * (-1.0 if negate else 1.0)
    torch.testing.assert_close(y, ref, rtol=1e-12, atol=1e-12)
    for a, b in zip(torch.autograd.grad((y * w).sum(), leaves), torch.autograd.grad((ref * w).sum(), leaves)):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    assert torch.autograd.gradcheck(lambda *t: bisoftmax_symmetric(t[0], 0.7, None if tied else t[1],
                                                                   negate=negate), tuple(leaves))


@pytest.mark.parametrize("radius", [1.0, 4.0])
def test_bisoftmax_symmetric_bf16_error_is_the_einsum_paths(radius, symmetrise):
    """bf16 operands (the dtype autocast gives it): y and dU stay within bf16 tolerance of float64, no worse
    than 1.5x the einsum path as CUDA autocast runs it (bf16 matmuls, float32 softmax), on the sphere (scores
    up to β p = 8) and four times off it (scores up to 128), in either form."""
    from energyformer.energies.hyperspherical_ops import bisoftmax_symmetric

    def einsum_path(u, scale):
        s = torch.einsum("bhid,bhjd->bhij", u, u) * scale
        p = torch.softmax(s.float(), -1)
        return torch.einsum("bhij,bhjd->bhid", (p + p.mT).to(u.dtype), u)

    g = torch.Generator().manual_seed(6)
    u64 = torch.randn(2, 3, 81, 64, generator=g, dtype=torch.float64)
    u64 = u64 / u64.norm(dim=-1, keepdim=True) * 8.0 * radius
    w = torch.randn(u64.shape, generator=g, dtype=torch.float64)
    out = {}
    for name, fn, dt in (("ref", bisoftmax_symmetric, torch.float64), ("new", bisoftmax_symmetric, torch.bfloat16),
                         ("einsum", einsum_path, torch.bfloat16)):
        u = u64.to(dt).requires_grad_(True)
        y = fn(u, 0.125)
        out[name] = (y.detach().double(), torch.autograd.grad((y * w.to(dt)).sum(), u)[0].double())
    for i in (0, 1):
        ref = out["ref"][i]
        err = {n: float((out[n][i] - ref).norm() / ref.norm()) for n in ("new", "einsum")}
        assert err["new"] < 1e-2 and err["new"] <= 1.5 * err["einsum"] + 1e-4, err


def test_bisoftmax_symmetric_follows_autocast_and_compiles():
    """Under autocast float32 operands run in the autocast dtype (as the einsum path's matmuls), float64 stays;
    torch.compile traces it (train.compile) with the same values and gradient."""
    from energyformer.energies.hyperspherical_ops import bisoftmax_symmetric

    u = torch.randn(2, 2, 5, 4)
    with torch.autocast("cpu", torch.bfloat16):
        assert bisoftmax_symmetric(u, 0.5).dtype == torch.bfloat16
        assert bisoftmax_symmetric(u.double(), 0.5).dtype == torch.float64
    a = u.clone().requires_grad_(True)
    f = torch.compile(lambda t: bisoftmax_symmetric(t, 0.5, negate=True), backend="aot_eager", fullgraph=True)
    y = f(a)
    (ga,) = torch.autograd.grad(y.pow(2).sum(), a)
    b = u.clone().requires_grad_(True)
    yb = bisoftmax_symmetric(b, 0.5, negate=True)
    (gb,) = torch.autograd.grad(yb.pow(2).sum(), b)
    torch.testing.assert_close(y, yb)
    torch.testing.assert_close(ga, gb)


@pytest.mark.parametrize("kw,fast", [({}, True), ({"self_interaction": False}, False),
                                     ({"qkv_norm": "separate", "gain": "learned"}, False)])
def test_attention_energy_takes_the_symmetric_path_only_where_it_holds(monkeypatch, kw, fast):
    """The einsum-range operator (N < 512) runs bisoftmax_symmetric for one shared sphere without a mask, the
    einsum path otherwise; the direction is the same either way (float64 against the reference)."""
    from energyformer.core.precond import IdentityPrecond
    from energyformer.energies import hyperspherical as hs

    calls = []
    real = hs.bisoftmax_symmetric
    monkeypatch.setattr(hs, "bisoftmax_symmetric", lambda *a, **k: calls.append(1) or real(*a, **k))
    torch.manual_seed(0)
    e = hs.BiSoftmaxAttentionEnergy(8, 2, impl="auto", **kw).double()
    x = torch.randn(2, 6, 8, dtype=torch.float64)
    st = e.prepare(x)
    d = e.direction(x, st, IdentityPrecond(8))
    assert bool(calls) == fast
    want = -e.readout(hs.bisoftmax_einsum(st.q, st.k, st.v, e.beta, st.mask, symmetric=False))
    torch.testing.assert_close(d, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sphere_norm_on_a_fused_kernel_device_is_rms_norm_in_the_operand_dtype(monkeypatch, dtype):
    """Where rms_norm has a fused kernel (FUSED_NORM; CUDA builds), the sphere norm is F.rms_norm with autocast
    off: z's dtype out also under autocast, values and gradient those of the hand-written path to rounding."""
    from energyformer.energies import hyperspherical_ops as ops

    z = torch.randn(2, 3, 5, 16, dtype=dtype) * 3
    g = torch.randn(z.shape, dtype=dtype)
    outs = []
    for fused in (False, True):
        monkeypatch.setitem(ops.FUSED_NORM, "cpu", fused)
        zz = z.clone().requires_grad_(True)
        with torch.autocast("cpu", torch.bfloat16):
            u = sphere_rms_norm(zz, TINY)
        (gz,) = torch.autograd.grad((u * g).sum(), zz)
        assert u.dtype == dtype and gz.dtype == dtype
        outs.append((u.detach().float(), gz.float()))
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    for a, b in zip(*outs):
        torch.testing.assert_close(a, b, rtol=tol, atol=tol)


@pytest.mark.cuda
def test_sphere_norm_and_symmetric_bisoftmax_on_cuda_match_float64():
    """On the GPU (whichever sphere-norm path FUSED_NORM picks there) under bf16 autocast: bf16 out, values and
    gradients within bf16 tolerance of the float64 CPU reference."""
    from energyformer.energies.hyperspherical_ops import bisoftmax_symmetric

    g = torch.Generator().manual_seed(9)
    z = torch.randn(4, 3, 81, 64, generator=g, dtype=torch.float64)
    w = torch.randn(z.shape, generator=g, dtype=torch.float64)

    def run(zz, ww, autocast):
        zz = zz.clone().requires_grad_(True)
        with torch.autocast(zz.device.type, torch.bfloat16, enabled=autocast):
            y = bisoftmax_symmetric(sphere_rms_norm(zz, TINY), 0.125)
        (gz,) = torch.autograd.grad((y.double() * ww).sum(), zz)
        return y, gz

    ref = run(z, w, False)
    got = run(z.float().cuda(), w.cuda(), True)
    assert got[0].dtype == torch.bfloat16
    for a, b in zip(got, ref):
        a, b = a.detach().double().cpu(), b.detach()
        assert float((a - b).norm() / b.norm()) < 2e-2


@pytest.mark.cuda
def test_fused_bisoftmax_under_float16_autocast_on_cuda_matches_float64():
    """float16 autocast on the GPU, normalisers spanning past float16's limit (1.8): the fused path's passes run in
    float32 (they made every such head NaN there, no host read deciding a fallback); values and gradients within
    float16 tolerance of the float64 CPU reference, with and without key padding."""
    import math

    from energyformer.energies import hyperspherical_ops as ops

    g = torch.Generator().manual_seed(3)
    z = torch.randn(2, 4, 200, 64, generator=g, dtype=torch.float64)
    z[:, :, :120] = z[:, :, :1] + 0.05 * z[:, :, :120]  # alike tokens: a span of about log 120 - 1 nats
    w = torch.randn(z.shape, generator=g, dtype=torch.float64)
    pad = torch.ones(2, 1, 1, 200, dtype=torch.bool)
    pad[1, ..., 150:] = False

    def run(zz, ww, mask, autocast):
        zz = zz.clone().requires_grad_(True)
        with torch.autocast(zz.device.type, torch.float16, enabled=autocast):
            u = sphere_rms_norm(zz, TINY)
            y, r = ops.bisoftmax_fused(u, u, u, 1 / math.sqrt(64), mask)
        (gz,) = torch.autograd.grad((y.double() * ww).sum(), zz)
        return y, gz, r

    for mask in (None, pad):
        ref = run(z, w, mask, False)
        assert float((ref[2].amax(-1) - ref[2].amin(-1)).min()) > 2 * ops.SAFE_SPAN[torch.float16]
        got = run(z.float().cuda(), w.cuda(), None if mask is None else mask.cuda(), True)
        for a, b in zip(got[:2], ref[:2]):
            a, b = a.detach().double().cpu(), b.detach()
            assert torch.isfinite(a).all() and float((a - b).norm() / b.norm()) < 5e-3


# ----------------------------------------------------------------------------- column_mask
def _padded_energy(impl: str, **kw):
    """A float64 bi-softmax energy without self-interaction, its state on a batch whose first row has 2 padded
    tokens, and the padding (B, N)."""
    from energyformer.energies.hyperspherical import BiSoftmaxAttentionEnergy

    e = BiSoftmaxAttentionEnergy(8, 2, impl=impl, self_interaction=False, **kw).double()
    with torch.no_grad():
        e.proj.weight.normal_(0, 0.6, generator=torch.Generator().manual_seed(0))
    pad = torch.tensor([[1, 1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1, 1]], dtype=torch.bool)
    x = torch.randn(2, 7, 8, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    return e, e.prepare(x, mask=pad), pad[:, None, :, None]


@pytest.mark.parametrize("impl", ["einsum", "fused"])
@pytest.mark.parametrize("sphere", [False, True])
def test_bisoftmax_without_self_interaction_and_with_padding_is_the_gradient(impl, sphere):
    """Key padding ∧ j ≠ i: a padded query sees the real keys but none sees it, so it must stay out of their
    column normalisers (column_mask = mask ∧ maskᵀ). The einsum path took the mask as given and was 0.88 off
    the autograd of E_ATTN on real rows; now both paths equal it to 1e-12 (padded rows are free)."""
    from energyformer.energies.hyperspherical import SubspaceAttentionEnergy

    e, st, real = _padded_energy(impl, sphere=sphere)
    ref = SubspaceAttentionEnergy.reference_operator(e, st)
    torch.testing.assert_close(e.operator(st) * real, ref * real, rtol=1e-12, atol=1e-12)


def test_column_mask_is_the_mask_and_its_transpose():
    from energyformer.energies.hyperspherical_ops import column_mask

    pad = torch.tensor([[True, True, False]])[:, None, None, :]  # (1, 1, 1, 3): its own swap
    assert column_mask(pad) is pad and column_mask(None) is None
    full = pad & ~torch.eye(3, dtype=torch.bool)  # (1, 1, 3, 3): the padded query still sees the real keys
    want = torch.tensor([[False, True, False], [True, False, False], [False, False, False]])
    assert torch.equal(column_mask(full)[0, 0], want)


@pytest.mark.parametrize("impl", [None, "fused", "einsum"])
def test_hyperset_attention_takes_an_empty_batch(impl):
    """B = 0 (and one token): the fused bi-softmax took the span of its normalisers with amax over nothing and
    raised PyTorch's internal reduction error; every impl returns an empty output and backpropagates."""
    import energyformer.blocks  # noqa: F401  (registers the attention kinds)
    from energyformer.blocks.registry import ATTENTIONS, SublayerSpec
    from energyformer.core import ForwardContext

    entry = ATTENTIONS.get("hyperset")
    blk = entry.builder(entry.config(**({"impl": impl} if impl else {})), SublayerSpec(dim=16, heads=2))
    for shape in ((0, 9, 16), (2, 1, 16)):
        x = torch.randn(*shape, requires_grad=True)
        y = blk(x, ForwardContext(embedded=x))
        assert y.shape == shape and torch.isfinite(y).all()
        y.sum().backward()
        assert x.grad.shape == shape


@pytest.mark.parametrize("case", ["symmetric", "non_symmetric_padded"])
def test_fused_bisoftmax_span_check_reads_nothing_on_an_accelerator(monkeypatch, case, no_host_read):
    """Where a host read stalls the device's queue (``core.precision.host_read_stalls``, pretended here) the fused
    path read the normalisers' span on the host in every call: one sync per layer x iteration (probe AA, F1), a
    graph break under compile, an error under CUDA-graph capture. Now the check runs on the device: ordinary
    inputs give bit for bit the host-checked result, value and gradient; a head whose span is past the limit
    (float32: 70; ~120 here) is NaN, value and gradient, where unchecked it is finite and wrong; and
    nothing is read on the host (``__bool__``, ``__float__``, ``item`` raise)."""
    from energyformer.energies import hyperspherical_ops as ops

    g = torch.Generator().manual_seed(3)
    z = torch.randn(2, 2, 32, 8, generator=g)
    sym = case == "symmetric"
    mask = None if sym else torch.ones(2, 1, 1, 32, dtype=torch.bool)
    if mask is not None:
        mask[1, ..., 28:] = False
    dy = torch.randn(2, 2, 32, 8, generator=g)

    def run(t, **kw):
        t = t.clone().requires_grad_(True)
        q, k = (t, t) if sym else (t, t.flip(-2))
        y = ops.bisoftmax_fused(q, k, t, 1.0, mask, symmetric=sym, **kw)[0]
        return y.detach(), torch.autograd.grad(y, t, dy)[0]

    plain_y, plain_g = run(z)
    big = z.clone()
    big[1, 0] *= 2.5  # one head of one sequence off the sphere: its span past 70, its exp factors still finite
    wrong_y, _ = run(big, check_span=False)
    b64 = big.double()
    ref = ops.bisoftmax_einsum(b64, b64 if sym else b64.flip(-2), b64, 1.0, mask)
    err = (wrong_y[1, 0].double() - ref[1, 0]).norm() / ref[1, 0].norm()
    assert torch.isfinite(wrong_y).all() and err > 1e-2, err  # what an unchecked span gives: finite, wrong
    monkeypatch.setattr(ops, "host_read_stalls", lambda t: True)
    with no_host_read():
        loud_y, loud_g = run(z)
        huge_y, huge_g = run(big)
    assert torch.equal(loud_y, plain_y) and torch.equal(loud_g, plain_g)
    assert torch.isnan(huge_y[1, 0]).all() and torch.isnan(huge_g[1, 0]).all()
    assert torch.isfinite(huge_y[0]).all() and torch.isfinite(huge_y[1, 1]).all()
