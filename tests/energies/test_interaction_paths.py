"""CEM attention's evaluation paths and read-outs (energies/interaction.py, interaction_paths.py):

* large logits: float32 and bf16 attention equal a float64 softmax for logits up to ±1e4, on every
  path, causal / bidirectional / key-padded (the old null-key merge overflowed past ~88);
* every fast path equals the fused reference path in float64: outputs and all gradients, for every
  option, T = 1 and 2, causal and bidirectional, with and without key padding, with recomputation;
* Algorithm 1's read-out equals a literal loop over tokens, steps and heads.
"""

import copy

import pytest
import torch
from einops import rearrange

from energyformer.blocks.cem import CEMAttention, CEMAttentionConfig
from energyformer.core import ForwardContext, IdentityPrecond
from energyformer.energies.interaction import InteractionEnergy, alibi_slopes

from .cem_cases import MASK7, PATHS, assert_same_block, opts_id, randomised, visible


# ---------------------------------------------------------------------------- large logits
def _controlled(N: int, path: str, causal: bool, bias: bool):
    """An energy whose scores are exactly s_ijk = L_k[i, j] (+ ALiBi + self bias): H = 2 heads of
    width N, τ = 1, W_Q = W_K = I, h_j = e_j + e_{N+j} (so k_jk = e_j) and u_i = [L_1[i] ; L_2[i]].
    Then W_Qkᵀ o_k = p_ik: the update direction IS the two heads' probability rows."""
    e = InteractionEnergy(2 * N, 2, diagonal="none", alibi=bias, self_bias=bias, temperature=1.0,
                          causal=causal, attn_path=path, attn_block=3)
    with torch.no_grad():
        e.wq.weight.copy_(torch.eye(2 * N))
        e.wk.weight.copy_(torch.eye(2 * N))
        if bias:
            e.self_bias.copy_(torch.tensor([2.5, -64.0]))  # exact in bf16
    h = torch.cat([torch.eye(N), torch.eye(N)], -1)[None].repeat(2, 1, 1)  # (B=2, N, 2N)
    return e, h


def _large_logits(N: int, dtype: torch.dtype) -> torch.Tensor:
    """(B=2, H=2, N, N) logits up to ±1e4 with the hard rows spelled out, rounded to ``dtype``."""
    g = torch.Generator().manual_seed(0)
    base = torch.tensor([1e4, -1e4, 0.0, 9984.0, -9000.0, 50.0])[torch.randint(0, 6, (2, 2, N, 1), generator=g)]
    L = base + torch.empty(2, 2, N, N).uniform_(-8, 8, generator=g)
    L[0, 0, 1, :2] = torch.tensor([-9984.0, 9984.0])   # self ≫ past: p_self = 1 (old merge: NaN)
    L[0, 0, 2, :3] = torch.tensor([100.0, 100.0, 95.0])  # past ≫ 88: self weight 0.0034 (old: ~1)
    L[0, 1, 3, :4] = torch.tensor([1e4, 1e4, 1e4, -1e4])  # self ≪ past: p_self = 0
    L[1, 0, 4, :5] = 9984.0                              # exact ties at a huge logit: 1/5 each
    return L.to(dtype).double()


def _reference_rows(e, L, causal, key_mask):
    """float64 softmax over the visible j of L + ALiBi + self bias: (B, N, 2N) = [p_i1 ; p_i2]."""
    N = L.shape[-1]
    i, j = torch.arange(N)[:, None], torch.arange(N)[None]
    s = L.clone()
    if e.alibi:
        s = s - e.slopes.double()[:, None, None] * (i - j).abs() + e.self_bias.double()[:, None, None] * (i == j)
    p = s.masked_fill(~visible(2, N, N, causal, key_mask)[:, None], float("-inf")).softmax(-1)  # (B, H, N, N)
    return rearrange(p, "b h i j -> b i (h j)")


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("causal,masked", [(True, False), (True, True), (False, False), (False, True)])
@pytest.mark.parametrize("dtype", ["float32", "bf16-autocast"])
def test_large_logits_match_float64_softmax(path, causal, masked, dtype):
    N = 8
    bf16 = dtype == "bf16-autocast"
    e, h = _controlled(N, path, causal, bias=True)
    L = _large_logits(N, torch.bfloat16 if bf16 else torch.float32)
    u = rearrange(L, "b h i j -> b i (h j)").float()  # q_ik = L_k[i]
    key_mask = torch.tensor([[1] * N, [1, 0, 1, 1, 1, 0, 1, 1]], dtype=torch.bool) if masked else None
    with torch.no_grad():
        ref = _reference_rows(e, L, causal, key_mask)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        st = e.prepare(h, mask=key_mask)
        assert st.path == path
        got = e.direction(u, st, IdentityPrecond(2 * N))
    assert torch.isfinite(got).all()
    tol = 2e-2 if bf16 else 1e-5
    torch.testing.assert_close(got.double(), ref, rtol=0, atol=tol)
    if not masked and causal:
        p_self = float(ref[0, 2, 2])
        assert abs(float(got[0, 2, 2].detach()) - p_self) < tol and p_self < 0.1  # the example (old: 0.9995)


@pytest.mark.parametrize("label", ["diag=per_head,alibi=False,self_bias=False,gradient,fused",
                                   "diag=shared,alibi=True,self_bias=True,algorithm1,fused"])
def test_scores_past_float32_give_a_nan_direction_not_a_zero(label):
    """Inputs x1e20: the float32 self score overflows (inf − inf = NaN in the q·k sum) and PyTorch's CPU SDPA returns
    a finite 0 for that query row; the fused path's direction was 0 (a zero update) where float64 gives ~5e20 and
    the energy is NaN. Now such rows are NaN, as on the blocked path."""
    e, ctx, x = {lab: (e, c, x) for lab, e, c, x in InteractionEnergy.examples(torch.float64)}[label]
    e = e.eval().float()
    ctx, x = (t.float() * 1e20 for t in (ctx, x))
    st = e.prepare(ctx)
    d = e.direction(x, st, IdentityPrecond(x.shape[-1]))
    assert not torch.isfinite(d).all()
    assert not torch.isfinite(e.energy_fused(x, st)).all()


@pytest.mark.parametrize("path", PATHS)
def test_large_logit_energy_is_finite_and_exact(path):
    """log Z on both paths (fused: s_ii − log p_ii, recomputed where p_ii underflows) vs float64."""
    N = 8
    e, h = _controlled(N, path, True, bias=True)
    L = _large_logits(N, torch.float32)
    u = rearrange(L, "b h i j -> b i (h j)").float()
    st = e.prepare(h)
    e64 = copy.deepcopy(e).double()
    with torch.no_grad():
        ref = e64.energy(u.double(), e64.prepare(h.double()))
    torch.testing.assert_close(e.energy_fused(u, st).double(), ref, rtol=1e-6, atol=1e-2)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("bf16", [False, True])
def test_wide_shared_diagonal_is_finite(path, bf16):
    """The issue's case: D = 768, 12 heads, shared diagonal d = 1 makes the self logit D/√64 = 96 > 88,
    which turned every output of the old merge into NaN (float32 and bf16 autocast)."""
    blk = CEMAttention(768, 12, CEMAttentionConfig(attn_path=path))
    with torch.no_grad():
        blk.energy.d.fill_(1.0)
    x = torch.randn(2, 6, 768, generator=torch.Generator().manual_seed(0))
    ref = copy.deepcopy(blk).double()(x.double())
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        y = blk(x)
    assert torch.isfinite(y).all()
    rel = ((y.double() - ref).norm() / ref.norm()).item()
    assert rel < (2e-2 if bf16 else 1e-5), rel


# ---------------------------------------------------------------------------- fast paths == reference
OPTIONS = [
    dict(),
    dict(diagonal="none"),
    dict(diagonal="per_head", alibi=False),
    dict(self_bias=False, temperature="model_dim"),
    dict(precond="diagonal"),
    dict(precond="diag_low_rank", precond_rank=3),
    dict(precond="diag_low_rank", precond_rank=3, diagonal="per_head"),
    dict(precond="diag_low_rank", precond_rank=3, precond_per_head=False),
    dict(diagonal_readout="algorithm1", precond="diag_low_rank", precond_rank=3),
    dict(learn_step_size=True, step_size=0.7, norm={"in_loop": False}),
]


@pytest.mark.parametrize("opts", OPTIONS, ids=opts_id)
@pytest.mark.parametrize("steps", [1, 2])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("fast", ["blocked", "blocked-recompute"])
def test_fast_path_equals_fused_reference_float64(opts, steps, causal, masked, fast):
    """The blocked path (keeping or recomputing its probabilities) == the fused SDPA path in float64:
    outputs of real tokens, the input gradient and every parameter gradient."""
    recompute = fast == "blocked-recompute"
    base = dict(opts, steps=steps, attn_block=3)
    ref_blk = randomised(CEMAttentionConfig(**base, attn_path="fused"), causal, 1)
    fast_blk = randomised(CEMAttentionConfig(**base, attn_path="blocked",
                                             attn_memory_mb=1e-6 if recompute else 512.0), causal, 1)
    x = torch.randn(2, 7, 16, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    mask = MASK7 if masked else None
    st = fast_blk.energy.prepare(fast_blk.norm(x), mask=mask)
    assert st.path == "blocked" and st.blocked.recompute == recompute
    assert_same_block(fast_blk, ref_blk, x, mask)


@pytest.mark.parametrize("ends,used", [((3, 5, 7), (0, 1, 2)), ((2, 4, 6), (0, 2)), ((7, 7), (1,)), ((4,), ())])
def test_key_prefixes_add_their_gradients_once(ends, used):
    """The blocked path's key prefixes: views equal to narrowing, and one backward whose gradient equals
    narrowing's (unused prefixes, a largest prefix short of the whole tensor, none used at all)."""
    from energyformer.energies.interaction_paths import _Prefixes, key_prefixes

    x = torch.randn(2, 7, 3, dtype=torch.float64, requires_grad=True)
    w = [torch.randn(2, e, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(e)) for e in ends]
    views = key_prefixes(x, 1, list(ends))
    assert all(torch.equal(v, x[:, :e]) for v, e in zip(views, ends))
    loss = sum((views[i] * w[i]).sum() for i in used) + 0 * x.sum()
    got, = torch.autograd.grad(loss, x)
    want, = torch.autograd.grad(sum((x[:, :ends[i]] * w[i]).sum() for i in used) + 0 * x.sum(), x)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-15)
    assert torch.autograd.gradcheck(lambda t: _Prefixes.apply(t, 1, ends), (x,))
    with torch.no_grad():                                           # no gradient: plain views
        assert all(v._base is x for v in key_prefixes(x, 1, list(ends)) if v is not x)


def test_blocked_per_head_factors_keep_no_context_times_heads_tensor():
    """With per-head value factors (the paper configuration's per-head preconditioner) the blocked path
    multiplies P_k H as one product and applies c_k to its result: nothing kept for the backward, and no
    tensor at all, is as large as the context times the heads (the old c_k∘h_j, (B, Nk, H, D))."""
    blk = randomised(CEMAttentionConfig(steps=2, precond="diag_low_rank", precond_rank=2, attn_path="blocked",
                                        attn_block=4), True, 1, dim=16, heads=4)
    x = torch.randn(2, 12, 16, dtype=torch.float64, requires_grad=True)
    limit = 2 * 12 * 4 * 16                                          # B · Nk · H · D
    sizes = []

    def pack(t):
        sizes.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = blk(x, ForwardContext())
    y.sum().backward()
    assert sizes and max(sizes) < limit, max(sizes)


@pytest.mark.parametrize("opts", [{}, dict(alibi=False), dict(self_bias=False), OPTIONS[4]], ids=opts_id)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("masked", [False, True])
def test_blocked_position_bias_per_block_float64(monkeypatch, opts, causal, masked):
    """Past the whole-call bias cache (long sequences) each query block adds its position bias itself
    (``add_position_bias_``): the same float64 equality with the fused path."""
    from energyformer.energies import interaction_paths

    monkeypatch.setattr(interaction_paths, "POSITION_CACHE_BYTES", 0)
    test_fast_path_equals_fused_reference_float64(opts, 2, causal, masked, "blocked")


@pytest.mark.parametrize("causal,masked", [(True, False), (True, True), (False, True)])
@pytest.mark.parametrize("dtype", ["float32", "bf16-autocast"])
def test_blocked_position_bias_per_block_large_logits(monkeypatch, causal, masked, dtype):
    """... and the large-logit rows (±1e4, ties, self ≫ past) in float32 and bf16 autocast."""
    from energyformer.energies import interaction_paths

    monkeypatch.setattr(interaction_paths, "POSITION_CACHE_BYTES", 0)
    test_large_logits_match_float64_softmax("blocked", causal, masked, dtype)


def test_recomputed_blocks_keep_the_per_head_products():
    """Recomputing blocks (the memory budget) redoes the scores but not the per-head products P_k H (kept by
    selective checkpointing): each runs once per block and step, forward and backward together."""
    from torch.utils._python_dispatch import TorchDispatchMode

    blk = randomised(CEMAttentionConfig(steps=2, precond="diag_low_rank", precond_rank=2, attn_path="blocked",
                                        attn_block=4, attn_memory_mb=1e-6), True, 1, dim=16, heads=4)
    x = torch.randn(2, 12, 16, dtype=torch.float64, requires_grad=True)
    assert blk.energy.prepare(blk.norm(x)).blocked.recompute
    calls = []

    class Log(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten.bmm.default and args[0].shape[:2] == (2, 4 * 4) and args[1].shape[-1] == 16:
                calls.append((tuple(args[0].shape), tuple(args[1].shape)))
            return func(*args, **(kwargs or {}))

    with Log():
        blk(x, ForwardContext()).sum().backward()
    assert len(calls) == 2 * 3, calls                                # 2 steps x 3 query blocks of 4
    blk.zero_grad(set_to_none=True)
    ref = randomised(CEMAttentionConfig(steps=2, precond="diag_low_rank", precond_rank=2, attn_path="fused"), True, 1)
    assert_same_block(blk, ref, x.detach(), None)


def test_auto_path_choice_and_memory_budget():
    e = InteractionEnergy(16, 4, attn_block=8)
    h = torch.randn(2, 40, 16)
    assert e.prepare(h).path == "blocked" and not e.prepare(h).blocked.recompute
    assert e.prepare(h[:, :1]).path == "fused"                       # decoding
    assert InteractionEnergy(16, 4, diagonal="none").prepare(h).path == "blocked"  # faster than SDPA here too
    e.attn_memory_mb = 0.08                                         # kept ~100 KiB > 82 KiB budget
    st = e.prepare(h)
    assert st.path == "blocked" and st.blocked.recompute
    with torch.no_grad():                                           # inference keeps nothing
        assert not e.prepare(h).blocked.recompute
    e.attn_memory_mb = 1e-6                                         # not even one block fits
    assert e.prepare(h).path == "fused"
    e.attn_path = "blocked"
    assert e.prepare(h).path == "blocked"                           # explicit choice is honoured


def test_alibi_slopes_follow_press_et_al():
    """Power of two: 2^{-8k/K}; otherwise the 2^⌊log2 K⌋ slopes then every other slope of twice as many
    (Press et al.'s get_slopes): e.g. 12 heads = 8-head slopes + 2^{-1/2}, 2^{-3/2}, 2^{-5/2}, 2^{-7/2}."""
    torch.testing.assert_close(alibi_slopes(8), torch.tensor([2.0 ** -k for k in range(1, 9)]))
    twelve = [2.0 ** -k for k in range(1, 9)] + [2.0 ** (-(2 * k - 1) / 2) for k in range(1, 5)]
    torch.testing.assert_close(alibi_slopes(12), torch.tensor(twelve))
    assert alibi_slopes(6).shape == (6,) and alibi_slopes(1).tolist() == [2.0 ** -8]


def test_temperature_options():
    assert InteractionEnergy(64, 4).tau == 4.0                      # √(head dim 16)
    assert InteractionEnergy(64, 4, temperature="model_dim").tau == 8.0
    assert InteractionEnergy(64, 4, temperature=2.5).tau == 2.5
    with pytest.raises(ValueError, match="temperature"):
        InteractionEnergy(64, 4, temperature="model")


# ---------------------------------------------------------------------------- Algorithm 1, literally
def _algorithm1_loop(blk: CEMAttention, x: torch.Tensor) -> torch.Tensor:
    """CEM seed Algorithm 1 (MHA subroutine) with App. B's biases, one token, step and head at a time:
    h ← RMSNorm(h); x_i ← h_i; T times: u_i ← RMSNorm(x_i), a_ijk = D_h^{-1/2}(k_jᵀ q_i + h_jᵀ D_k u_i)
    + ALiBi + self bias, o_ik = Σ_j softmax_j(a_ijk) v_j (v = k = W_Kk h), x_i ← x_i + η Σ_k P_k W_Qkᵀ o_ik."""
    e, P = blk.energy, blk.solver.precond
    H, R, D = e.heads, e.head_dim, e.dim
    Wq, Wk = e.wq.weight.view(H, R, D), e.wk.weight.view(H, R, D)
    Pk = P.matrix()  # (H, D, D)
    eta = float(blk.solver.step_size.value)
    h = blk.norm(x)
    out = torch.empty_like(x)
    for b in range(x.shape[0]):
        for i in range(x.shape[1]):
            xi = h[b, i].clone()
            for _ in range(blk.steps):
                ui = blk.norm(xi)
                acc = torch.zeros(D, dtype=x.dtype)
                for k in range(H):
                    q = Wq[k] @ ui
                    a = torch.stack([(Wk[k] @ h[b, j]) @ q + h[b, j] @ (e.d * ui) for j in range(i + 1)])
                    a = a / e.tau
                    a = a - e.slopes[k] * (i - torch.arange(i + 1)) + e.self_bias[k] * (torch.arange(i + 1) == i)
                    p = torch.softmax(a, 0)
                    o = sum(p[j] * (Wk[k] @ h[b, j]) for j in range(i + 1))
                    acc = acc + Pk[k] @ (Wq[k].T @ o)
                xi = xi + eta * acc
            out[b, i] = xi
    return out


@pytest.mark.parametrize("path", PATHS)
def test_algorithm1_readout_equals_literal_loop(path):
    cfg = CEMAttentionConfig(steps=2, diagonal_readout="algorithm1", precond="diag_low_rank", precond_rank=3,
                             norm={"init": "normalized"}, temperature="model_dim", step_size=0.8, attn_path=path,
                             attn_block=2)
    blk = randomised(cfg, True, 5)
    assert not blk.exact and not blk.energy.exact
    x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    torch.testing.assert_close(blk(x), _algorithm1_loop(blk, x), rtol=1e-10, atol=1e-12)


def test_algorithm1_differs_from_gradient_readout_only_by_the_value_term():
    """Same weights: the two read-outs differ by Σ_k P_k d_k∘Σ_j p_ijk h_j, which vanishes when d = 0."""
    g = randomised(CEMAttentionConfig(), True, 6)
    a = randomised(CEMAttentionConfig(diagonal_readout="algorithm1"), True, 6)
    x = torch.randn(1, 6, 16, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    assert (g(x) - a(x)).abs().max() > 1e-3
    with torch.no_grad():
        g.energy.d.zero_()
        a.energy.d.zero_()
    torch.testing.assert_close(g(x), a(x), rtol=1e-12, atol=1e-12)


def test_fused_energy_with_subnormal_self_probability():
    """Self score 100 below the past (float32): p_ii = e^-100 ≈ 3.7e-44 is subnormal, so log p_ii loses
    ~2 % and s_ii − log p_ii was off by 1.7e-2; such rows now fall back (below finfo.tiny) to the blocked
    path and E = −τ log(1 + e^-100) ≈ 0 as in float64."""
    N = 2
    e, h = _controlled(N, "fused", True, bias=False)
    L = torch.zeros(2, 2, N, N)
    L[:, :, 1, 1] = -100.0  # row 1: past logit 0, self logit −100 (both heads, both batch rows)
    u = rearrange(L, "b h i j -> b i (h j)")
    p_self = torch.tensor(-100.0).exp()
    assert 0 < p_self < torch.finfo(torch.float32).tiny  # the case really is subnormal
    got = e.energy_fused(u, e.prepare(h))[:, 1]
    e64 = copy.deepcopy(e).double()
    with torch.no_grad():
        ref = e64.energy(u.double(), e64.prepare(h.double()))[:, 1]
    assert ref.abs().max() < 1e-30
    assert got.abs().max() < 1e-6, got  # the old merge gave 1.7e-2


#: backward modes whose steps run partly under no_grad: truncated's prefix, implicit's forward solve (its gradient
#: is one tracked step at the fixed point; a few iterations and a small fixed step: the same computation on every
#: path, converged or not, which the comparison needs)
UNTRACKED = {"truncated": dict(steps=3, backward={"kind": "truncated", "k": 1}),
             "implicit": dict(steps=3, step_size={"kind": "fixed", "value": 0.05},
                              backward={"kind": "implicit", "method": "fixed_point", "max_iter": 4})}


@pytest.mark.filterwarnings("ignore:implicit backward")
@pytest.mark.parametrize("mode", list(UNTRACKED))
@pytest.mark.parametrize("path", [p for p in PATHS if p != "fused"])
@pytest.mark.parametrize("precond", ["diag_low_rank", "diagonal"])
def test_untracked_steps_give_the_fused_paths_gradients(path, precond, mode):
    """``backward: truncated`` and ``implicit`` run steps under no_grad: per-call values those build (the blocked
    path's [k ; low-rank projections], the kernel path's extra value columns) have no graph and must not be reused
    by a tracked step. They were: W_K's, the norm's, d's and P's gradients came out wrong without an error."""
    opts = dict(precond=precond, precond_rank=3, precond_per_head=True, attn_block=4, **UNTRACKED[mode])
    ref_blk = randomised(CEMAttentionConfig(**opts, attn_path="fused"), True, 2)
    blk = randomised(CEMAttentionConfig(**opts, attn_path=path), True, 2)
    x = torch.randn(2, 7, 16, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    assert_same_block(blk, ref_blk, x, None)
