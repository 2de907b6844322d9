"""Hyper-SET energies: fused bi-softmax == einsum, the update is −∇E exactly on the sphere and only
tangentially off it, precision of float32 / bf16 vs float64 at large and small magnitudes."""

import math

import pytest
import torch
from einops import rearrange

from energyformer.core import IdentityPrecond
from energyformer.energies.hyperspherical import BiSoftmaxAttentionEnergy, ReLUFFEnergy
from energyformer.energies.hyperspherical_alt import (
    GatedFFEnergy, LinearAttentionEnergy, SigmoidAttentionEnergy, SoftmaxFFEnergy,
)
from energyformer.energies.hyperspherical_ops import bisoftmax_einsum, bisoftmax_fused, chunked_lse

D64 = torch.float64
P = IdentityPrecond(1)


def _z(B=2, H=3, N=9, p=4, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, H, N, p, generator=g, dtype=D64) * scale


CASES = ["plain", "key_padding", "no_self", "non_symmetric", "non_symmetric_padding"]


def _case(case: str) -> tuple[torch.Tensor | None, bool]:
    """(mask, symmetric) of a case of the tests below: key padding (the last 3 of batch row 0), no self-interaction,
    or none; scores from Q = K (symmetric) or a second projection."""
    mask = None
    if case in ("key_padding", "non_symmetric_padding"):
        mask = torch.ones(2, 1, 1, 9, dtype=torch.bool)
        mask[0, ..., -3:] = False
    if case == "no_self":
        mask = ~torch.eye(9, dtype=torch.bool)[None, None]
    return mask, not case.startswith("non_symmetric")


@pytest.mark.parametrize("case", CASES)
def test_fused_equals_einsum_float64(case):
    z = _z()
    q, k, v = z, z, z
    mask, sym = _case(case)
    if not sym:
        q = _z(seed=1)
    y, r = bisoftmax_fused(q, k, v, 0.5, mask, symmetric=sym, budget=40)  # several chunks
    ref = bisoftmax_einsum(q, k, v, 0.5, mask)
    rows = slice(None) if mask is None or mask.shape[-2] > 1 else slice(0, 6)  # padded rows are free
    torch.testing.assert_close(y[0, :, rows], ref[0, :, rows], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(y[1], ref[1], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("case", CASES)
def test_fused_gradients_equal_einsum_float64(case):
    """Training differentiates through the operator (``impl: auto`` takes the fused path from 512 tokens): the
    gradients of ⟨y, w⟩ with respect to q, k and v equal the materialised path's to 1e-12 — also through the row
    normalisers' factor exp(r − m) of the column term, whose gradient a detach lost with every value unchanged
    (probe AN: dq 16.7 off, the direction's training gradient 3 off)."""
    mask, sym = _case(case)
    w = _z(seed=5)
    if mask is not None and mask.shape[-2] == 1:
        w = w * mask[..., 0, :, None]  # padded query rows are free: their outputs carry no weight
    grads = []
    for fused in (True, False):
        z, v = _z().requires_grad_(True), _z(seed=2).requires_grad_(True)
        q = z if sym else _z(seed=1).requires_grad_(True)
        y = (bisoftmax_fused(q, z, v, 0.5, mask, symmetric=sym, budget=40)[0] if fused
             else bisoftmax_einsum(q, z, v, 0.5, mask))
        grads.append(torch.autograd.grad((y * w).sum(), [z, v] + ([] if sym else [q])))
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("self_interaction", [True, False])
def test_the_fused_layers_training_gradient_equals_the_materialised_one(self_interaction):
    """The layer's update differentiated for training (with respect to the tokens and every parameter): the fused
    path equals the einsum path to 1e-12 in float64, with key padding."""
    g = torch.Generator().manual_seed(6)
    x = torch.randn(2, 9, 8, generator=g, dtype=D64)
    w = torch.randn(2, 9, 8, generator=g, dtype=D64)
    pad = torch.ones(2, 9, dtype=torch.bool)
    pad[1, 6:] = False
    w = w * pad[..., None]
    out = []
    for impl in ("fused", "einsum"):
        e = BiSoftmaxAttentionEnergy(8, 2, impl=impl, self_interaction=self_interaction, gain="learned").double()
        with torch.no_grad():
            e.proj.weight.normal_(0, 0.6, generator=torch.Generator().manual_seed(7))
        xx = x.clone().requires_grad_(True)
        d = e.direction(xx, e.prepare(xx, mask=pad), P)
        out.append(torch.autograd.grad((d * w).sum(), [xx, *e.parameters()]))
    for a, b in zip(*out):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_column_term_is_rescaled_attention():
    """Σ_j exp(S_ij - r_j) v_j == r_i · SDPA(Q, K, V / r)_i with r_i = Σ_j exp(S_ij) (the algebra, checked)."""
    z = _z(N=6)
    s = torch.einsum("bhid,bhjd->bhij", z, z) * 0.7
    r = s.exp().sum(-1)  # (B, H, N)
    col = torch.einsum("bhij,bhjd->bhid", s.exp() / r[..., None, :], z)
    sdpa = torch.nn.functional.scaled_dot_product_attention(z, z, z / r[..., None], scale=0.7)
    torch.testing.assert_close(col, r[..., None] * sdpa, rtol=1e-12, atol=1e-12)


def test_chunked_lse_gradcheck_and_value():
    q = _z(N=7).requires_grad_(True)
    k = _z(N=7, seed=3).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda a, b: chunked_lse(a, b, 0.6, None, 30), (q, k))
    ref = torch.logsumexp(torch.einsum("bhid,bhjd->bhij", q, k) * 0.6, -1)
    torch.testing.assert_close(chunked_lse(q, k, 0.6, None, 30), ref)


def test_energy_is_the_same_lse():
    """E_ATTN per token = β⁻¹ Σ_h LSE_j (the log-sum-exp the fused path computes anyway)."""
    e = BiSoftmaxAttentionEnergy(12, 3).double()
    x = torch.randn(2, 5, 12, dtype=D64)
    st = e.prepare(x)
    z = e.spherical(x)
    ref = torch.logsumexp(torch.einsum("bhid,bhjd->bhij", z, z) * e.beta, -1).sum(1) / e.beta
    torch.testing.assert_close(e.energy(x, st), ref)


def _on_sphere_inputs(D=12, H=3, seed=0):
    """Square invertible W and X with ‖W_hᵀ x_i‖ = √p for every head and token."""
    g = torch.Generator().manual_seed(seed)
    p = D // H
    e_sph = BiSoftmaxAttentionEnergy(D, H).double()
    e_raw = BiSoftmaxAttentionEnergy(D, H, sphere=False).double()
    W = torch.randn(D, D, generator=g, dtype=D64) / math.sqrt(D) + torch.eye(D, dtype=D64)
    with torch.no_grad():
        e_sph.proj.weight.copy_(W)
        e_raw.proj.weight.copy_(W)
    u = torch.randn(2, 7, H, p, generator=g, dtype=D64)
    u = u / u.norm(dim=-1, keepdim=True) * math.sqrt(p)  # on the spheres
    x = torch.linalg.solve(W, rearrange(u, "b n h p -> b n (h p)").unsqueeze(-1)).squeeze(-1)
    return e_sph, e_raw, x


def test_attention_update_is_exact_gradient_on_the_sphere():
    e_sph, e_raw, x = _on_sphere_inputs()
    z = e_raw.project(x)
    torch.testing.assert_close(z.norm(dim=-1), torch.full_like(z[..., 0], 2.0))  # √p, p = 4
    d = e_sph.direction(x, e_sph.prepare(x), P)
    xg = x.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(e_raw.energy(xg, e_raw.prepare(xg)).sum(), xg)  # ∇ of the plain E_ATTN
    torch.testing.assert_close(d, -g, rtol=1e-10, atol=1e-10)
    assert e_raw.exact and not e_sph.exact


def test_attention_update_off_sphere_is_only_tangentially_the_gradient():
    """With W = I: ∇_z E(RMSNorm(z)) = (√p/‖z‖) P_⊥ g(u) while the update is −g(u)."""
    D, H, p = 8, 2, 4
    e = BiSoftmaxAttentionEnergy(D, H).double()
    with torch.no_grad():
        e.proj.weight.copy_(torch.eye(D, dtype=D64))
    x = torch.randn(2, 6, D, dtype=D64, generator=torch.Generator().manual_seed(5)) * 3
    d = e.direction(x, e.prepare(x), P)
    g = e.grad(x, e.prepare(x))  # autograd of E ∘ RMSNorm (exact = False path)
    assert (d + g).abs().max() > 1e-3  # not the gradient
    z, dz = (rearrange(t, "b n (h p) -> b n h p", h=H) for t in (x, d))
    zhat = z / z.norm(dim=-1, keepdim=True)
    tangential = dz - (dz * zhat).sum(-1, keepdim=True) * zhat
    scaled = tangential * math.sqrt(p) / z.norm(dim=-1, keepdim=True)
    torch.testing.assert_close(rearrange(scaled, "b n h p -> b n (h p)"), -g, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("cls", [ReLUFFEnergy, SoftmaxFFEnergy, GatedFFEnergy])
def test_ff_update_is_exact_gradient_on_the_sphere(cls):
    D = 10
    g = torch.Generator().manual_seed(1)
    e_sph, e_raw = cls(D, D).double(), cls(D, D, sphere=False).double()
    W = torch.randn(D, D, generator=g, dtype=D64) / math.sqrt(D) + torch.eye(D, dtype=D64)
    with torch.no_grad():
        e_sph.proj.weight.copy_(W)
        e_raw.proj.weight.copy_(W)
    u = torch.randn(3, 4, D, generator=g, dtype=D64)
    u = u / u.norm(dim=-1, keepdim=True) * math.sqrt(D)  # ‖Dᵀx‖ = √M
    x = torch.linalg.solve(W, u.unsqueeze(-1)).squeeze(-1)
    d = e_sph.direction(x, e_sph.prepare(x), P)
    torch.testing.assert_close(d, -e_raw.grad(x, e_raw.prepare(x)), rtol=1e-10, atol=1e-10)
    assert e_raw.exact and not e_sph.exact


@pytest.mark.parametrize("cls", [SigmoidAttentionEnergy, LinearAttentionEnergy])
def test_alternative_attention_exact_on_sphere(cls):
    e_sph, e_raw, x = _on_sphere_inputs(seed=2)
    a, b = cls(12, 3).double(), cls(12, 3, sphere=False).double()
    with torch.no_grad():
        a.proj.weight.copy_(e_sph.proj.weight)
        b.proj.weight.copy_(e_sph.proj.weight)
    torch.testing.assert_close(a.direction(x, a.prepare(x), P), -b.grad(x, b.prepare(x)), rtol=1e-10, atol=1e-10)


def test_separate_norms_are_not_symmetric_and_not_exact():
    e = BiSoftmaxAttentionEnergy(8, 2, qkv_norm="separate", gain="learned").double()
    with torch.no_grad():
        for i, gp in enumerate(e.gains):
            gp.uniform_(0.5, 1.5, generator=torch.Generator().manual_seed(i))
    assert not e.exact and not e.symmetric
    x = torch.randn(2, 5, 8, dtype=D64)
    st = e.prepare(x)
    torch.testing.assert_close(e.direction(x, st, P), e.reference_direction(x, st, P))


@pytest.mark.parametrize("scale", [1e-4, 1.0, 1e4])
def test_precision_float32_bf16_vs_float64(scale):
    """The layer's update at small and large token magnitudes: fp32 ≈ fp64 (1e-5), bf16 ≈ fp64 (5e-2)."""
    torch.manual_seed(0)
    e64 = BiSoftmaxAttentionEnergy(32, 4).double()
    x64 = torch.randn(2, 81, 32, dtype=D64) * scale
    ref = e64.direction(x64, e64.prepare(x64), P)
    for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 5e-2)):
        e = BiSoftmaxAttentionEnergy(32, 4).to(dtype)
        e.load_state_dict(e64.state_dict())
        x = x64.to(dtype)
        d = e.direction(x, e.prepare(x), P).double()
        rel = (d - ref).norm() / ref.norm()
        assert rel < tol, (dtype, scale, float(rel))
        en = e.energy(x, e.prepare(x)).double()
        ren = e64.energy(x64, e64.prepare(x64))
        assert ((en - ren).abs().max() / ren.abs().max()) < tol


def test_fused_falls_back_when_normalisers_span_too_much():
    """Off the sphere, huge scores: the fused path detects the span and uses the einsum path (finite)."""
    z = _z(scale=30.0).float()
    y, _ = bisoftmax_fused(z, z, z, 1.0)
    ref = bisoftmax_einsum(z.double(), z.double(), z.double(), 1.0)
    assert torch.isfinite(y).all()
    torch.testing.assert_close(y.double(), ref, rtol=1e-4, atol=1e-3)


def test_config_errors_name_the_option():
    with pytest.raises(ValueError, match="qkv_norm"):
        BiSoftmaxAttentionEnergy(8, 2, qkv_norm="both")
    with pytest.raises(ValueError, match="self_interaction"):
        LinearAttentionEnergy(8, 2, self_interaction=False)
    with pytest.raises(ValueError, match="heads = 3"):
        BiSoftmaxAttentionEnergy(8, 3)


def test_auto_impl_switches_at_the_threshold():
    from energyformer.energies import hyperspherical as hs

    e = BiSoftmaxAttentionEnergy(8, 2, impl="auto").double()
    ref = BiSoftmaxAttentionEnergy(8, 2, impl="einsum").double()
    ref.load_state_dict(e.state_dict())
    for n in (hs.AUTO_FUSED_MIN_TOKENS - 1, hs.AUTO_FUSED_MIN_TOKENS):
        x = torch.randn(1, n, 8, dtype=D64)
        torch.testing.assert_close(e.direction(x, e.prepare(x), P), ref.direction(x, ref.prepare(x), P))


def test_on_the_sphere_a_token_scores_itself_highest():
    """Why the mirror toy task uses ``self_interaction: false`` (tests/tasks/test_sudoku.py): with one shared
    projection on the sphere (gain 1), Z_iᵀZ_j <= ‖Z_i‖‖Z_j‖ = p = Z_iᵀZ_i, so in every row of the scores the
    token's own entry is the largest and its row-softmax weight on any other token is at most its weight on
    itself. A learned per-channel gain (the released code's RMSNorm) breaks the equal radii, and with them
    the bound: another token can then outscore the token itself."""
    torch.manual_seed(0)
    e = BiSoftmaxAttentionEnergy(8, 2).double()
    x = torch.randn(3, 7, 8, dtype=D64)
    z = e.spherical(x)  # (B, H, N, p)
    s = z @ z.transpose(-1, -2)  # (B, H, N, N)
    diag = s.diagonal(dim1=-2, dim2=-1)
    torch.testing.assert_close(diag, torch.full_like(diag, 4.0))  # p = 8 / 2
    assert bool((s <= diag.unsqueeze(-1) + 1e-12).all())
    learned = BiSoftmaxAttentionEnergy(8, 2, gain="learned").double()
    with torch.no_grad():
        learned.proj.weight.copy_(e.proj.weight)
        learned.gains[0].copy_(torch.tensor([3.0, 0.1, 0.1, 0.1], dtype=D64))
    zl = learned.spherical(x)
    sl = zl @ zl.transpose(-1, -2)
    assert bool((sl > sl.diagonal(dim1=-2, dim2=-1).unsqueeze(-1) + 1e-9).any())


def test_fused_bisoftmax_bounds_the_whole_span_of_the_normalisers():
    """Issue 23: the fused path checked |r - m| and |c - m| <= 80 apart, never the whole span, so with
    normalisers spanning ~100 (reachable off the sphere, with a learned gain or a large β) keys whose row
    weight underflowed inside SDPA dropped out of the column term: a silent 3e-2 error in float32. The
    whole span now decides (float32: 70), and the layer matches float64."""
    torch.manual_seed(0)
    e64 = BiSoftmaxAttentionEnergy(32, 4, beta=12.5, sphere=False).double()  # β p = 100
    x64 = torch.randn(2, 64, 32, dtype=D64)
    e = BiSoftmaxAttentionEnergy(32, 4, beta=12.5, sphere=False)
    e.load_state_dict(e64.state_dict())
    x = x64.float()
    st = e.prepare(x)
    with torch.no_grad():
        r = chunked_lse(st.q, st.k, e.beta, st.mask)
        m = 0.5 * (r.amax(-1, keepdim=True) + r.amin(-1, keepdim=True))
        assert float((r - m).abs().max()) < 80 < float((r.amax(-1) - r.amin(-1)).max())  # old check passed
        forced = bisoftmax_fused(st.q, st.k, st.v, e.beta, st.mask, check_span=False)[0].double()
        want = bisoftmax_einsum(st.q.double(), st.k.double(), st.v.double(), e.beta, st.mask)
        assert float((forced - want).norm() / want.norm()) > 1e-3  # what the old fused path returned
        ref = e64.direction(x64, e64.prepare(x64), P)
        got = e.direction(x, st, P).double()
    assert float((got - ref).norm() / ref.norm()) < 1e-5


def test_fused_span_limit_follows_the_sdpa_dtype():
    from energyformer.energies.hyperspherical_ops import SAFE_SPAN, fused_span_limit

    assert 70 < SAFE_SPAN[torch.float32] < 71 and 81 < SAFE_SPAN[torch.bfloat16] < 82 and SAFE_SPAN[torch.float16] < 2
    v = torch.zeros(1, 1, 2, 2)
    assert fused_span_limit(v) == SAFE_SPAN[torch.float32]
    with torch.autocast("cpu", dtype=torch.float16):
        assert fused_span_limit(v) == SAFE_SPAN[torch.float16]


@pytest.mark.parametrize("where", ["cpu", "accelerator"])
@pytest.mark.parametrize("autocast", [False, True])
def test_float16_fused_passes_run_in_float32_past_float16s_span(where, autocast, monkeypatch):
    """float16's span limit (1.8) is below a trained head's span: the fused path made that head NaN where the host
    is not read (an accelerator: emulated) and fell back to the N x N scores on a CPU. Its SDPA passes now run in
    float32 and the result, in v's dtype, is float16-close to float64 on both, with float16 tensors or under
    float16 autocast."""
    from energyformer.energies import hyperspherical_ops as ops

    if where == "accelerator":
        monkeypatch.setattr(ops, "host_read_stalls", lambda t: True)
    monkeypatch.setattr(ops, "bisoftmax_einsum", _refuse)  # no fallback to the materialised scores either
    g = torch.Generator().manual_seed(0)
    z = torch.randn(2, 3, 40, 8, generator=g, dtype=D64)
    z[:, :, :30] = z[:, :, :1]  # 30 tokens alike: their normalisers log 30 above the others'
    z = z / z.pow(2).mean(-1, keepdim=True).sqrt()  # on the sphere of radius √p
    v = torch.randn(2, 3, 40, 8, generator=g, dtype=D64)
    beta = 1.0 / math.sqrt(8)
    r = ops.chunked_lse(z, z, beta)
    assert float((r.amax(-1) - r.amin(-1)).min()) > 1.4 * ops.SAFE_SPAN[torch.float16]  # every head past it
    want = _torch_bisoftmax(z, v, beta)
    dtype = torch.float32 if autocast else torch.float16
    with torch.autocast("cpu", dtype=torch.float16, enabled=autocast):
        y, _ = ops.bisoftmax_fused(z.to(dtype), z.to(dtype), v.to(dtype), beta)
    assert y.dtype == dtype and torch.isfinite(y).all()
    assert float((y.double() - want).norm() / want.norm()) < 2e-3


def _refuse(*args, **kwargs):
    raise AssertionError("fell back to the materialised scores")


def _torch_bisoftmax(z: torch.Tensor, v: torch.Tensor, beta: float) -> torch.Tensor:
    """softmax_row(S) V + softmax_col(S) V of S = β z zᵀ in float64, written out here"""
    s = beta * z @ z.transpose(-1, -2)
    return s.softmax(-1) @ v + s.softmax(-2) @ v


@pytest.mark.parametrize("impl", ["einsum", "fused"])
def test_a_token_with_no_other_real_token_is_not_moved_without_self_interaction(impl):
    """self_interaction = False, one token (or one real among padding): its log-sum-exp runs over no key. It was
    −inf (energy) and NaN (update, then every later iteration); now the empty sum is no term — energy 0, update 0,
    finite gradients — the convention of SDPA's fully masked rows, on both paths."""
    e = BiSoftmaxAttentionEnergy(12, 3, impl=impl, self_interaction=False).double()
    g = torch.Generator().manual_seed(0)
    for n, mask in ((1, None), (4, torch.tensor([[True, False, False, False], [True, True, False, True]]))):
        x = torch.randn(1 if mask is None else 2, n, 12, generator=g, dtype=D64, requires_grad=True)
        st = e.prepare(x, mask=mask)
        d, en = e.direction(x, st, P), e.energy(x, st)
        assert d[0, 0].abs().sum() == 0 and en[0, 0] == 0
        assert torch.isfinite(d).all() and torch.isfinite(en).all()
        real = torch.ones(x.shape[:2], dtype=torch.bool) if mask is None else mask
        ref = BiSoftmaxAttentionEnergy(12, 3, impl="einsum", self_interaction=False).double()
        ref.load_state_dict(e.state_dict())
        torch.testing.assert_close(d[real], ref.direction(x, ref.prepare(x, mask=mask), P)[real])
        grads = torch.autograd.grad((d * real[..., None]).sum() + en.sum(), [x, e.proj.weight])
        assert all(torch.isfinite(t).all() for t in grads)


@pytest.mark.parametrize("impl", ["einsum", "fused"])
def test_zero_tokens_have_one_finite_gradient_in_every_precision(impl):
    """A token whose projection is 0 (zero padding, a zero input): the sphere norm's default eps was the dtype's
    smallest normal number, whose rms_norm autograd overflowed (inf · 0): NaN gradients in float64 and the weight
    gradient NaN; float32 gave 9.2e18 · g, and rounding noise on padded rows came back amplified by it."""
    g = torch.Generator().manual_seed(1)
    x64 = torch.randn(2, 7, 12, generator=g, dtype=D64)
    x64[0, 5:] = 0  # padding
    x64[1, 2] = 0  # a zero real token
    mask = torch.ones(2, 7, dtype=torch.bool)
    mask[0, 5:] = False
    w = torch.randn(2, 7, 12, generator=g, dtype=D64) * mask[..., None]
    base = BiSoftmaxAttentionEnergy(12, 3, impl=impl).double()
    ff64 = ReLUFFEnergy(12, 20).double()
    out = {}
    for dt in (D64, torch.float32):
        att, ff = base.to(dt), ff64.to(dt)
        x = x64.to(dt).requires_grad_(True)
        y = att.direction(x, att.prepare(x, mask=mask), P) + ff.direction(x, ff.prepare(x), P)
        grads = torch.autograd.grad((y * w.to(dt)).sum(), [x, att.proj.weight, ff.proj.weight])
        assert all(torch.isfinite(t).all() for t in grads), dt
        out[dt] = [t.double() for t in grads]
    for a, b in zip(out[torch.float32], out[D64]):
        assert (a - b).norm() <= 1e-4 * b.norm(), ((a - b).norm(), b.norm())


def test_the_default_inverse_temperature_is_one_over_root_p():
    """β = 1/√p when not given (Eq. 3; probe Z: blocks always pass β, so a default of 1/p reached only users who
    build the energy themselves, and no test saw it)."""
    e = BiSoftmaxAttentionEnergy(16, 2)
    assert e.head_dim == 8 and e.beta == pytest.approx(1 / math.sqrt(8), rel=1e-15)
    assert BiSoftmaxAttentionEnergy(16, 2, head_dim=3).beta == pytest.approx(1 / math.sqrt(3), rel=1e-15)


@pytest.mark.parametrize("eps", [1.0, 1e-3])
def test_a_given_sphere_eps_is_the_one_the_norm_uses(eps):
    """``eps`` (attention.eps): the projections are z / √(mean(z²) + eps) — with small inputs a large eps shrinks
    them below the sphere's radius √p; the energy follows (probe AG: the norm could ignore it unnoticed)."""
    torch.manual_seed(0)
    e = BiSoftmaxAttentionEnergy(8, 2, eps=eps).double()
    x = 0.01 * torch.randn(1, 3, 8, dtype=torch.float64)
    z = e.project(x)
    want = z / torch.sqrt(z.pow(2).mean(-1, keepdim=True) + eps)
    torch.testing.assert_close(e.spherical(x), want, rtol=1e-12, atol=1e-15)
    default = BiSoftmaxAttentionEnergy(8, 2).double()
    default.load_state_dict(e.state_dict())
    assert not torch.allclose(e.energy(x, e.prepare(x)), default.energy(x, default.prepare(x)))


@pytest.mark.parametrize("beta", [0.0, float("inf"), float("nan")])
def test_an_inverse_temperature_of_zero_or_not_finite_is_refused(beta):
    with pytest.raises(ValueError, match=r"beta = .*: must be a finite non-zero number"):
        BiSoftmaxAttentionEnergy(8, 2, beta=beta, sphere=False)
