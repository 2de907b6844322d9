"""Two exact evaluations of CEM attention's averages (used by :mod:`energyformer.energies.interaction`).

For queries u_i and the prepared context (h_j, k_jk = W_Kk h_j), with scores (CEM seed Eq. 1, 12, App. B)

    s_ijk = (W_Qk u_i)·k_jk / τ + (d_k∘u_i)·h_j / τ + b_ijk,     p_ijk = softmax_{j visible}(s_ijk)

every read-out of the layer is built from three attention averages (:class:`Averages`):

    oq_ik  = Σ_j p_ijk k_jk                                   (B, H, Nq, Dr)
    hterm_i = Σ_k c_k ∘ Σ_j p_ijk h_j                         (B, Nq, D)   c_k = d_k, or diag(P_k)∘d_k
    lr_ik  = Σ_j p_ijk [V_kᵀ(d_k∘h_j) ; U_kᵀ(d_k∘h_j)]        (B, H, Nq, 2R)  low-rank part of a P_k bank

(the gradient read-out of Eq. 2 + 12 needs all three; Algorithm 1's read-out only ``oq``). Pushing the
low-rank part of a per-head preconditioner P_k = diag(s_k) + U_k V_kᵀ + V_k U_kᵀ (Eq. 13) *through*
the average is exact because the average is linear: P_k Σ_j p_ijk g_j = Σ_j p_ijk P_k g_j.

**fused** (:func:`attend_fused`, O(N) memory): one ``scaled_dot_product_attention`` call per step over
feature-augmented keys ``k̃ = [k_jk ; h_j ; (j, 1)]`` and queries ``q̃ = [W_Qk u ; d_k∘u ; τ m_k (1, −i)]``
(ALiBi is the exact rank-2 product of the last columns). The self bias δ_k [j = i] is not low-rank,
so the call attends the *strictly* earlier keys plus one "null" key whose logit is made equal to the
self score s_iik through one more query column (``τ s_iik``, key column 1 for the null key only) and
whose value is an indicator. SDPA's own max-subtracted softmax then normalises over {self} ∪ {j < i}:
the indicator returns p_self = p_iik exactly and the self value is added as ``p_self · ṽ_i``. Nothing
is ever measured against a fixed logit, so any finite logits are safe (the earlier merge against a
null logit of 0 overflowed in float32 once a logit exceeded ~88). Every head is D_h + D wide.

**blocked** (:func:`attend_blocked`, exact, faster for the shared diagonal): per query block,
explicit scores ``Q_k K_kᵀ`` (per head, D_h wide) plus the shared diagonal's logits
``(d∘U) Hᵀ`` computed **once for all heads**; the diagonal's value term uses the head-summed
probabilities ``(Σ_k P_k) H`` (one product instead of H) unless the per-head factors c_k differ
(per-head diagonal or a per-head preconditioner diagonal: then ``Σ_k c_k ∘ (P_k H)``, the H products
``P_k H`` as one (H·b × Nk)·(Nk × D) matmul on a view of the probabilities, the factors applied to its
(B, H, b, D) result; scaling the values instead, c_k∘h_j, would build a (B, Nk, H, D) tensor, H times the
context, whose gradient every query block added up). Causal
query blocks skip the keys after the block. It keeps O(N²/2) probabilities for backward; under a
memory budget each block is recomputed in backward instead (``torch.utils.checkpoint``), which bounds
the live N² memory to one block. Softmax runs max-subtracted in at least float32; under bf16 autocast
the products run in bf16 (the float32 position bias is added after the product).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import torch
from einops import rearrange
from torch import Tensor
from torch.nn import functional as F
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

from ..core.precision import autocast_off

#: the position bias of a whole call is cached (shared by layers and steps) up to this size
POSITION_CACHE_BYTES = 16 * 2**20


@dataclass
class Averages:
    """Attention averages of one step (module docstring); ``None`` where the read-out needs none."""

    oq: Tensor                      # (B, H, Nq, Dr)
    hterm: Tensor | None = None     # (B, Nq, D)
    lowrank: Tensor | None = None   # (B, H, Nq, 2R)
    logz: Tensor | None = None      # (B, H, Nq) log Σ_j e^{s_ijk}


@dataclass
class ValuePlan:
    """What the read-out needs from the values (built by the energy from its read-out and P).

    h_mode: None (no h-term), 'sum' (one c for every head: use Σ_k p_ijk) or 'stack' (per-head c_k).
    c: (D,) for 'sum', (H, D) for 'stack'.  lr: (H, D, 2R) = [d_k∘V_k , d_k∘U_k] or None.
    With a per-head preconditioner bank also its weight-only products for the combination of the heads:
    w_eff: (H, D, Dr) = P_k W_Qkᵀ, uv: (H, D, 2R) = [U_k, V_k].
    """

    h_mode: str | None = None
    c: Tensor | None = None
    lr: Tensor | None = None
    key: tuple = ()
    w_eff: Tensor | None = None
    uv: Tensor | None = None


@dataclass
class FusedState:
    keys: Tensor         # (B, H, 1 + Nk, F) null key + [k̃ ; 0 (self column) ; 0 pad]
    values: Tensor       # (B, H, 1 + Nk, F) null [0 ; 1 (indicator) ; 0] + [ṽ ; 0 ; 0 pad]
    self_keys: Tensor    # (B, H, Nq, Fq0) k̃ at the query positions
    self_values: Tensor  # (B, H, Nq, Fv)
    qpos: Tensor | None  # (H, Nq, 2) τ m_k (1, −i) or None
    width: int           # F
    h_values: bool       # whether ṽ carries h (gradient read-out)


@dataclass
class BlockedState:
    block: int           # query block size
    recompute: bool      # recompute each block in backward (bounded memory)
    cdt: torch.dtype     # dtype of the products (bf16 under autocast unless attn_fp32)
    k: Tensor            # (B, H, Nk, Dr) in cdt
    h: Tensor | None     # (B, Nk, D) in cdt
    cache: dict = field(default_factory=dict)  # per-plan value tensors: :meth:`once`

    def once(self, key: tuple, build):
        """``build()`` once per call, ``key`` and grad mode (:func:`once_per_grad_mode`)."""
        return once_per_grad_mode(self.cache, key, build)


def plan_id(obj) -> int:
    """``id(obj)`` for a per-call cache key (:func:`once_per_grad_mode`); 0 while torch.compile traces, where
    those caches are bypassed: Dynamo guards an ``id()`` on the object itself, so a compiled frame resumed after
    a graph break inside a block would be recompiled for every layer's preconditioner (12 layers > the
    recompile limit of 8: the H100 run of ``train/compiling.py``'s docstring)."""
    return 0 if torch.compiler.is_compiling() else id(obj)


def once_per_grad_mode(cache: dict, key: tuple, build):
    """``build()`` once per ``key`` and grad mode in a per-call ``cache``, then reused by every step. The grad
    mode is part of the key: values built under no_grad (``backward: truncated``'s untracked steps,
    ``implicit``'s forward solve) carry no graph, and a tracked step reusing them lost their gradients (CEM's
    k, h and preconditioner: wrong gradients, no error).

    While torch.compile traces, ``build()`` runs at every call instead: the cache is host-side bookkeeping whose
    keys hold ``id()`` of modules (:func:`plan_id`), and the compiled graph's CSE merges the repeated weight-only
    products anyway (``train/compiling.py``)."""
    if torch.compiler.is_compiling():
        return build()
    key = (*key, torch.is_grad_enabled())
    if key not in cache:
        cache[key] = build()
    return cache[key]


# ------------------------------------------------------------------------------------ fused
def prepare_fused(e, h: Tensor, k: Tensor, offset: int, h_values: bool) -> FusedState:
    """Feature-augmented keys/values for :func:`attend_fused` (module docstring)."""
    B, H, nk, _ = k.shape
    cdt = torch.promote_types(k.dtype, torch.float32)  # ALiBi columns (~m·N) need >= float32
    feats = [k.to(cdt)]
    if e.d is not None:
        feats.append(h.to(cdt).unsqueeze(1).expand(B, H, nk, e.dim))
    vals = torch.cat(feats if h_values else feats[:1], dim=-1)  # ṽ: (B, H, Nk, Fv)
    qpos = None
    if e.alibi and e.causal:  # τ m (1, −i) · (j, 1) = τ m (j − i)
        pos = torch.arange(nk, device=k.device, dtype=cdt)
        feats.append(torch.stack([pos, torch.ones_like(pos)], -1).expand(B, H, nk, 2))
        qi = pos[offset:]
        m = e.tau * e.slopes.to(cdt)[:, None, None]  # (H, 1, 1)
        qpos = m * torch.stack([torch.ones_like(qi), -qi], -1)  # (H, Nq, 2)
    keys = torch.cat(feats, dim=-1) if len(feats) > 1 else feats[0]  # k̃: (B, H, Nk, Fq0)
    fq0, fv = keys.shape[-1], vals.shape[-1]
    width = max(fq0 + 1, fv + 1)  # + self-score column (keys) / indicator column (values)
    keys_f = torch.cat([keys, keys.new_zeros(B, H, nk, width - fq0)], -1)
    vals_f = torch.cat([vals, vals.new_zeros(B, H, nk, width - fv)], -1)
    null_k = keys.new_zeros(B, H, 1, width)
    null_k[..., fq0] = 1.0  # null logit = (query's τ s_ii column) / τ = s_ii
    null_v = keys.new_zeros(B, H, 1, width)
    null_v[..., fv] = 1.0   # indicator: returns p_self
    return FusedState(keys=torch.cat([null_k, keys_f], 2), values=torch.cat([null_v, vals_f], 2),
                      self_keys=keys[:, :, offset:], self_values=vals[:, :, offset:], qpos=qpos,
                      width=width, h_values=h_values)


def attend_fused(e, u: Tensor, fs: FusedState, attn_mask: Tensor | None, need_logz: bool
                 ) -> tuple[Tensor, Tensor, Tensor | None]:
    """One SDPA call: (o (B, H, Nq, Fv) = Σ_j p_ijk ṽ_j, s_self (B, H, Nq), log Z or None).

    Calls ``F.scaled_dot_product_attention`` itself, not the attention kit's ``sdpa``: the keys are
    [null ; keys] (the null key carries the self score s_ii so that p_ii comes out of the same call),
    so visibility is "others" (j < i causal, j ≠ i bidirectional) shifted by one column — a square
    ``is_causal`` call on a query padded by one row, or the mask of ``InteractionEnergy._others_mask``
    (an additive ALiBi float mask when bidirectional) — none of which is the kit's ``visible``."""
    cdt = fs.keys.dtype
    with autocast_off(u.device.type):
        B, nq = u.shape[:2]
        parts = [rearrange(e.wq(u.to(e.wq.weight.dtype)), "b n (h r) -> b h n r", h=e.heads).to(cdt)]
        if e.d is not None:
            d = e.d if e.d.dim() == 2 else e.d.expand(e.heads, e.dim)
            parts.append((u.unsqueeze(1) * d[None, :, None, :]).to(cdt))  # (B, H, Nq, D)
        if fs.qpos is not None:
            parts.append(fs.qpos.expand(B, -1, -1, -1))
        qt0 = torch.cat(parts, -1) if len(parts) > 1 else parts[0]  # (B, H, Nq, Fq0)
        s_self = (qt0 * fs.self_keys).sum(-1) / e.tau  # (B, H, Nq); ALiBi columns give 0 at j = i
        if e.self_bias is not None:
            s_self = s_self + e.self_bias.to(cdt)[None, :, None]
        pad = fs.width - qt0.shape[-1] - 1
        qt = torch.cat([qt0, (e.tau * s_self).unsqueeze(-1), qt0.new_zeros(*qt0.shape[:-1], pad)], -1)
        nk = fs.keys.shape[2] - 1
        if attn_mask is not None:  # bidirectional, key padding or chunked prefill: one masked call
            out = F.scaled_dot_product_attention(qt, fs.keys, fs.values, attn_mask=attn_mask,
                                                 scale=1.0 / e.tau)
        elif nq == nk:  # causal training / prefill: square strictly-causal call on [null ; keys]
            q_pad = torch.cat([qt, qt.new_zeros(B, qt.shape[1], 1, fs.width)], 2)
            out = F.scaled_dot_product_attention(q_pad, fs.keys, fs.values, is_causal=True,
                                                 scale=1.0 / e.tau)[:, :, :-1]
        else:  # decoding one token: every cached key before it is visible
            out = F.scaled_dot_product_attention(qt, fs.keys[:, :, :-1], fs.values[:, :, :-1],
                                                 scale=1.0 / e.tau)
        fv = fs.self_values.shape[-1]
        p_self = out[..., fv]  # (B, H, Nq) = p_iik, exact in [0, 1]
        o = out[..., :fv] + p_self.unsqueeze(-1) * fs.self_values
        # a non-finite self score (inputs past float32's range: inf − inf in the q·k sum) is a non-finite query
        # row, for which PyTorch's CPU kernel (is_causal or no mask, 2.13) returns a finite 0, not NaN: o was a zero
        # update where the energy is NaN (probe P). s_self is finite exactly when the row's qt is.
        o = o.masked_fill(~torch.isfinite(s_self).unsqueeze(-1), float("nan"))
        logz = None
        if need_logz:  # log Z = s_ii − log p_ii, +inf where p_ii is subnormal or 0 (caller recomputes)
            ok = p_self >= torch.finfo(p_self.dtype).tiny  # subnormal p_ii has too few mantissa bits
            logz = torch.where(ok, s_self - torch.log(p_self.clamp_min(torch.finfo(p_self.dtype).tiny)),
                               torch.full_like(s_self, float("inf")))
    return o, s_self, logz


# ------------------------------------------------------------------------------------ blocked
@functools.lru_cache(maxsize=8)
def _position_bias_cached(slopes: tuple | None, nq: int, nk: int, offset: int, causal: bool,
                          device: str, dtype: torch.dtype) -> Tensor | None:
    with torch.inference_mode(False), torch.no_grad():
        return position_bias(slopes, offset, nq, nk, causal, torch.device(device), dtype)


def position_bias(slopes: tuple | Tensor | None, i0: int, nq: int, nk: int, causal: bool, device,
                  dtype: torch.dtype) -> Tensor | None:
    """(H or 1, nq, nk) bias of queries i0..i0+nq−1 on keys 0..nk−1: −m_k |i − j| (ALiBi; App. B,
    Press et al. 2022) and −inf for j > i when causal; None when there is neither. ``slopes``: (H,) as
    Python floats (the cached eager form) or as a tensor (under torch.compile: no ``tolist``, no cache)."""
    if slopes is None and not causal:
        return None
    positive = False
    if slopes is not None and not isinstance(slopes, Tensor):
        positive, slopes = min(slopes) > 0, torch.tensor(slopes, device=device, dtype=dtype)
    bias = torch.zeros(1 if slopes is None else slopes.shape[0], nq, nk, device=device, dtype=dtype)
    add_position_bias_(bias, slopes, i0, causal, positive)
    return bias


def add_position_bias_(s: Tensor, slopes: Tensor | None, i0: int, causal: bool,
                       positive: bool = False) -> None:
    """``s`` (…, H, b, ke) of queries i0..i0+b−1 on keys 0..ke−1 plus the position bias, in place:
    −m_k |i − j| and −inf for j > i when causal (:func:`position_bias` builds its cached form with it).
    ``slopes``: (H,) on ``s``'s device (the energy's buffer: no copy from the host per block) or None.

    One pass over ``s``: the distances |i − j| are one (b, ke) tensor shared by every head and batch
    row, and ``s += −m_k |i − j|`` is one ``addcmul_`` (where building the (H, b, ke) bias and adding it
    took three). Causal with every slope known ``positive`` (ALiBi's are), the hidden keys' distance is
    +inf, so the same pass writes −inf there; otherwise the mask is one more pass."""
    b, ke = s.shape[-2:]
    i = i0 + torch.arange(b, device=s.device)[:, None]
    j = torch.arange(ke, device=s.device)[None, :]
    hidden = j > i if causal else None
    if slopes is not None:
        dist = (i - j).abs().to(s.dtype)  # (b, ke)
        if hidden is not None and positive:
            dist.masked_fill_(hidden, float("inf"))  # −m_k · inf = −inf
            hidden = None
        s.addcmul_(slopes.to(s.dtype)[:, None, None], dist, value=-1.0)
    if hidden is not None:
        s.masked_fill_(hidden, float("-inf"))


def blocked_values(e, st, bs: BlockedState, plan: ValuePlan) -> Tensor:
    """Per-head values [k ; lr projections] (B, H, Nk, Dr [+ 2R]), built once per call, plan and grad mode
    (:meth:`BlockedState.once`) and reused by every step."""
    if plan.lr is None:
        return bs.k
    # (B, H, Nk, 2R) projections after the keys
    return bs.once(plan.key, lambda: torch.cat([bs.k, torch.einsum("bnd,hdr->bhnr", bs.h, plan.lr.to(bs.cdt))], -1))


class _Prefixes(torch.autograd.Function):
    """The prefixes ``x[:e]`` along ``dim`` for every ``e`` in ``ends`` (views), with one backward that adds
    their gradients into one buffer. Narrowing a tensor once per query block instead gives a backward
    that allocates, zero-fills and adds a gradient of ``x``'s whole size per block."""

    @staticmethod
    def forward(ctx, x: Tensor, dim: int, ends: tuple[int, ...]):
        ctx.set_materialize_grads(False)
        ctx.dim, ctx.ends, ctx.full = dim, ends, x.shape[dim]
        return tuple(x.narrow(dim, 0, e) for e in ends)

    @staticmethod
    def backward(ctx, *grads):
        pairs = sorted(((e, g) for e, g in zip(ctx.ends, grads) if g is not None), key=lambda eg: -eg[0])
        if not pairs:
            return None, None, None
        size = pairs[0][1].shape[:ctx.dim] + (ctx.full,) + pairs[0][1].shape[ctx.dim + 1:]
        e0, g0 = pairs[0]
        if e0 == ctx.full:
            out = g0.clone()
        else:
            out = g0.new_zeros(size)
            out.narrow(ctx.dim, 0, e0).add_(g0)
        for e, g in pairs[1:]:
            out.narrow(ctx.dim, 0, e).add_(g)
        return out, None, None


def key_prefixes(x: Tensor | None, dim: int, ends: list[int]) -> list[Tensor | None]:
    """``x`` cut to each of ``ends`` along ``dim`` (:class:`_Prefixes` where a gradient flows; plain views
    under torch.compile, whose compiler fuses the zero-filled gradients itself, and without a gradient)."""
    if x is None:
        return [None] * len(ends)
    if not (torch.is_grad_enabled() and x.requires_grad) or torch.compiler.is_compiling() \
            or all(e == x.shape[dim] for e in ends):
        return [_upto(x, e, dim) for e in ends]
    return list(_Prefixes.apply(x, dim, tuple(ends)))


def _upto(t: Tensor, n: int, dim: int) -> Tensor:
    """``t`` cut to its first ``n`` entries along ``dim`` (no slice, hence no zero-filled gradient, when
    nothing is cut)."""
    return t if t.shape[dim] == n else t.narrow(dim, 0, n)


def _keep_per_head_products(B: int, rows: int, D: int):
    """A recomputed block's ``context_fn`` that keeps the per-head products P_k H, (B, H·b, D), for the
    backward (selective activation checkpointing): c_k's gradient reads them, so a plain recomputation
    would redo the block's widest matmul (H·D wide) to rebuild them, while keeping them costs O(b·H·D)
    memory per block, nothing of N². Everything else in the block is recomputed as before."""
    def policy(ctx, op, *args, **kwargs):
        if op is torch.ops.aten.bmm.default and args[0].shape[:2] == (B, rows) and args[1].shape[-1] == D:
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE

    return functools.partial(create_selective_checkpoint_contexts, policy)


def attend_blocked(e, u: Tensor, st, bs: BlockedState, plan: ValuePlan, need_logz: bool) -> Averages:
    """Exact averages by explicit scores per causal query block (module docstring)."""
    cdt, sdt = bs.cdt, torch.promote_types(bs.cdt, torch.float32)
    B, nq, D = u.shape
    H, nk, offset = e.heads, bs.k.shape[2], st.offset
    vals = blocked_values(e, st, bs, plan)
    dr = e.head_dim
    # projections outside the no-autocast region: under bf16 autocast W_Q u runs in bf16
    q = rearrange(e.wq(u) * (1.0 / e.tau), "b n (h r) -> b h n r", h=H).to(cdt)  # (B, H, Nq, Dr)
    ud = None
    if e.d is not None:
        ud = (u * (e.d / e.tau)).to(cdt) if e.d.dim() == 1 else \
            (u.unsqueeze(1) * (e.d / e.tau)[None, :, None, :]).to(cdt)  # (B, [H,] Nq, D)
    with autocast_off(u.device.type):
        compiling = torch.compiler.is_compiling()  # Dynamo traces no tolist (a graph break) and no lru_cache
        slopes = (e.slopes if compiling else e.slope_values.rounded()) if e.alibi else None  # floats: no device read
        full_bias, block_slopes, positive = None, None, False
        if H * nq * nk * torch.finfo(sdt).bits // 8 <= POSITION_CACHE_BYTES:
            full_bias = position_bias(slopes, offset, nq, nk, e.causal, u.device, sdt) if compiling else \
                _position_bias_cached(slopes, nq, nk, offset, e.causal, str(u.device), sdt)
        elif e.alibi:  # per block: the buffer on the device, and its sign known from the floats (no device read)
            block_slopes, positive = e.slopes.to(sdt), min(e.slope_values.rounded()) > 0
        delta = None if e.self_bias is None else e.self_bias.to(sdt)
        c = None if plan.c is None else plan.c.to(cdt)

        def block(s0: int, e0: int, qb, udb, k, h, v, delta, c):
            i0 = offset + s0
            ke = k.shape[2]  # causal: no key after the block's last query
            b = e0 - s0
            s = qb @ k.transpose(-1, -2)  # (B, H, b, ke); a fresh tensor, ours to modify in place
            if udb is not None:
                ht = h.transpose(-1, -2)  # (B, D, ke)
                if udb.dim() == 3:  # shared diagonal: one product for all heads
                    s.add_((udb @ ht).unsqueeze(1))
                else:
                    s.add_((udb.reshape(B, H * b, D) @ ht).view(B, H, b, ke))
            s = s.to(sdt)
            if full_bias is not None:
                s.add_(full_bias[:, s0:e0, :ke])
            elif e.alibi or e.causal:
                add_position_bias_(s, block_slopes, i0, e.causal, positive)
            if delta is not None:  # learned self bias on j = i
                s.diagonal(offset=i0, dim1=-2, dim2=-1).add_(delta[:, None])
            if st.key_mask is not None:  # hidden keys, except the query itself
                eye = torch.arange(ke, device=u.device)[None, :] == (i0 + torch.arange(b, device=u.device))[:, None]
                vis = st.key_mask[:, None, None, :ke] | eye
                s = s.masked_fill(~vis, float("-inf"))
            p = torch.softmax(s, dim=-1)
            lz = torch.logsumexp(s, dim=-1) if need_logz else None
            pc = p.to(cdt)
            ov = pc @ v  # (B, H, b, Dr [+ 2R])
            ht_ = None
            if plan.h_mode == "sum":  # one factor for all heads: Σ_k p_ijk first
                ht_ = (p.sum(1).to(cdt) @ h) * c  # (B, b, D)
            elif plan.h_mode == "stack":  # per-head factors: Σ_k c_k ∘ (P_k H), P_k H as one product
                y = pc.reshape(B, H * b, ke) @ h  # (B, H·b, D): a view of P, no (B, Nk, H, D) c_k∘h_j
                ht_ = (y.view(B, H, b, D) * c[None, :, None, :]).sum(1)  # (B, b, D)
            return ov, ht_, lz

        bq = max(1, min(bs.block, nq))
        q_blocks = q.split(bq, dim=2)  # one SplitBackward instead of a zero-filled gradient per block
        ud_blocks = [None] * len(q_blocks) if ud is None else ud.split(bq, dim=-2)
        starts = range(0, nq, bq)
        ends = [offset + min(nq, s0 + bq) if e.causal else nk for s0 in starts]  # each block's last key
        k_pre = key_prefixes(bs.k, 2, ends)
        v_pre = k_pre if vals is bs.k else key_prefixes(vals, 2, ends)
        h_pre = key_prefixes(bs.h, 1, ends)
        outs = []
        for n_blk, s0 in enumerate(starts):
            e0 = min(nq, s0 + bq)
            args = (s0, e0, q_blocks[n_blk], ud_blocks[n_blk], k_pre[n_blk], h_pre[n_blk], v_pre[n_blk], delta, c)
            if bs.recompute and torch.is_grad_enabled():
                # eager only: under torch.compile a context_fn must not meet the block's in-place ops
                keep = _keep_per_head_products(B, H * (e0 - s0), D) if plan.h_mode == "stack" and not compiling \
                    else None
                outs.append(checkpoint(block, *args, use_reentrant=False, **({"context_fn": keep} if keep else {})))
            else:
                outs.append(block(*args))
        ov = torch.cat([o[0] for o in outs], 2)
        hterm = torch.cat([o[1] for o in outs], 1) if plan.h_mode else None
        logz = torch.cat([o[2] for o in outs], 2) if need_logz else None
    lowrank = ov[..., dr:] if plan.lr is not None else None
    return Averages(oq=ov[..., :dr], hterm=hterm, lowrank=lowrank, logz=logz)


def blocked_bytes(B: int, H: int, nq: int, nk: int, offset: int, causal: bool, block: int,
                  cdt: torch.dtype, stack: bool, dim: int = 0) -> tuple[int, int]:
    """(bytes kept for backward by one blocked step, bytes of the largest block's working set).

    Kept per score: the float32 probabilities, their copy in the product dtype (H each) and the
    head-summed copy (1); with per-head value factors (``stack``, width ``dim``) also the per-head
    products P_k H, H·D per query."""
    c = torch.finfo(cdt).bits // 8
    f = max(4, c)
    per = H * (f + c) + c
    per_query = H * dim * c if stack else 0
    total, worst = 0, 0
    bq = max(1, min(block, nq))
    for s0 in range(0, nq, bq):
        e0 = min(nq, s0 + bq)
        ke = offset + e0 if causal else nk
        total += B * (e0 - s0) * (ke * per + per_query)
        worst = max(worst, B * (e0 - s0) * (ke * (H * 3 * f + per) + 2 * per_query))
    return total, worst
