"""CEM interaction energy → weight-tied attention (CEM seed §2.1, §2.3 Eq. 1-5, 12, 14, 16; App. B;
reconstructed.md §4).

For the update variable u_i (the normalised query-side state) and the normalised causal context h_{≤i}:

    E_i(u_i) = −τ Σ_k log Σ_{j≤i} exp(s_ijk),
    s_ijk    = (1/τ) u_iᵀ A_k h_j + b_ijk,     A_k = W_Qkᵀ W_Kk + diag(d_k)           (Eq. 1, 12)
    b_ijk    = −m_k (i − j) + δ_k [j = i]       (ALiBi slopes m_k = 2^{−8k/K}; learned self bias δ_k)
    −∇E_i    = Σ_k Σ_j p_ijk (W_Qkᵀ k_j + d_k ∘ h_j),   p = softmax_j(s),  k_j = W_Kk h_j   (Eq. 2, 4)

With d = 0 and no bias, one step of size 1 is multi-head attention with W^V = W^K and W^O = W^Q
(Eq. 5). The diagonal enters the scores AND the value/output path; adding it only to the scores would
not be a gradient step (reconstructed.md §4).

Fused evaluation (no N×N matrix): per head the query, key and value are concatenated
``q̃ = [W_Qk u ; d_k∘u ; τ m_k (1, −i)]``, ``k̃ = [k_j ; h_j ; (j, 1)]``, ``ṽ = [k_j ; h_j]`` and one
``scaled_dot_product_attention`` call with scale 1/τ gives ``Σ_j p_ijk [k_j ; h_j]``. ALiBi is the two
extra feature columns (exact: m_k j − m_k i). The self bias δ_k [j = i] is not low-rank, so the fused
call attends *strictly* earlier keys plus a zero "null" key whose value carries an indicator column;
the indicator returns r_i = 1/(1 + Σ_{j<i} e^{s_ij}) and the self term is merged exactly:

    o_i = (o_i^{<} + c_i ṽ_i) / (1 − r_i + c_i),     c_i = r_i exp(s_ii),    log Z_i = log(1 − r_i + c_i) − log r_i

Choices where the source is ambiguous (flags, defaults recommended by reconstructed.md §4):
  * ``temperature`` τ = √(head dim) (standard attention scale; Eq. 5 writes √D_h with D_h ambiguous).
  * ``diagonal``: 'shared' (seed §4.4: close to per-head at lower cost), 'per_head' or 'none'; d init 0,
    so the layer starts as tied MHA.
  * Only δ = β_self − β_cross is identifiable (β_cross shifts every logit of a row equally), so one
    self bias per head is learned, initialised at 0.
  * ``attn_fp32``: the attention core runs in float32 under autocast, because the ALiBi feature
    columns carry values ~m·N that bfloat16 cannot resolve.

Bidirectional context (``causal=False``; not in the seed, needed by Hyper-SET-style encoders and
masked modelling): the sum runs over every j, the self bias still marks j = i, and ALiBi becomes the
symmetric distance penalty ``−m_k |i − j|`` (Press et al. 2022's encoder variant; with ``alibi=False``
there is no position bias). ``|i − j|`` is not low-rank, so the bidirectional path passes the bias as
an additive SDPA mask (one SDPA call, O(N²) bias) instead of the feature columns; the causal path
keeps the fused single call with ``is_causal``. For every j ≤ i, ``−m(i − j) = −m|i − j|``, so one
formula covers both.

Key padding (``prepare(..., mask=...)``, (B, Nk) bool, True = real token): masked keys are never
attended. Every query still sees itself (the self term is merged separately), so a padded query's
row is well defined; its output is meaningless and no real token reads it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from ..core.energy import Energy, register_energy
from ..core.precond import Preconditioner
from ..utils.validate import check_choice, check_float, check_int

DIAGONAL_MODES = ("none", "shared", "per_head")


def alibi_slopes(heads: int) -> Tensor:
    """m_k = 2^{−8k/K}, k = 1..K (Press et al. 2022; reconstructed.md §4)."""
    return torch.tensor([2.0 ** (-8.0 * (k + 1) / heads) for k in range(heads)])


def concat_key_mask(old: Tensor | None, new: Tensor | None, n_old: int, n_new: int, batch: int,
                    device: torch.device) -> Tensor | None:
    """Key-padding mask (B, n_old + n_new) of cached + new keys; None when neither part has one."""
    if old is None and new is None:
        return None
    if old is None:
        old = torch.ones(batch, n_old, dtype=torch.bool, device=device)
    if new is None:
        new = torch.ones(batch, n_new, dtype=torch.bool, device=device)
    return torch.cat([old, new.to(torch.bool)], dim=1)


def append_key_mask(cache: dict | None, mask: Tensor | None, n_old: int, n_new: int, batch: int,
                    device: torch.device) -> Tensor | None:
    """The key mask of all keys so far; stored in ``cache['mask']`` when a cache is given."""
    if mask is not None and tuple(mask.shape) != (batch, n_new):
        raise ValueError(f"key mask of shape {tuple(mask.shape)}: expected (batch, tokens) = {(batch, n_new)}")
    if cache is None:
        return None if mask is None else mask.to(torch.bool)
    full = concat_key_mask(cache.get("mask"), mask, n_old, n_new, batch, device)
    if full is not None:
        cache["mask"] = full
    return full


@dataclass
class InteractionState:
    """Work done once per block call (outside the recursion)."""

    keys: Tensor     # (B, H, 1 + Nk, F) null key + feature-augmented keys k̃
    values: Tensor   # (B, H, 1 + Nk, F) [ṽ ; null indicator ; zero padding]
    self_keys: Tensor    # (B, H, Nq, F) k̃ at the query positions
    self_values: Tensor  # (B, H, Nq, Fv)
    qpos_feat: Tensor | None  # (H, Nq, 2) τ m_k (1, −i) or None
    h: Tensor        # (B, Nk, D) normalised context
    k: Tensor        # (B, H, Nk, Dr) keys (= values, tied)
    offset: int      # position of the first query
    qpad: int = 0    # zero columns appended to queries so that q/k/v widths match
    key_mask: Tensor | None = None   # (B, Nk) bool, True = real key (None: all real)
    attn_mask: Tensor | None = None  # SDPA mask over [null ; keys] for the non-fused paths, or None


@register_energy("cem_interaction")
class InteractionEnergy(Energy):
    """Interaction energy of CEM attention with K heads (see module docstring)."""

    exact = True
    #: parameter roles for the trainer's weight-decay groups (train/roles.py): never decayed
    param_roles = {"d": "diagonal", "self_bias": "position"}

    def __init__(
        self, dim: int, heads: int, head_dim: int | None = None, diagonal: str = "shared",
        alibi: bool = True, self_bias: bool = True, temperature: float | None = None,
        attn_fp32: bool = True, causal: bool = True,
    ):
        super().__init__()
        check_int("dim", dim, min=1)
        check_int("heads", heads, min=1)
        if head_dim is None and dim % heads != 0:
            raise ValueError(f"heads = {heads!r}: must divide dim = {dim} (or set head_dim)")
        check_choice("diagonal", diagonal, DIAGONAL_MODES)
        self.dim, self.heads = dim, heads
        self.head_dim = head_dim or dim // heads
        check_int("head_dim", self.head_dim, min=1)
        if temperature is not None:
            check_float("temperature", temperature, min=0.0, min_exclusive=True)
        self.tau = float(temperature) if temperature is not None else math.sqrt(self.head_dim)
        self.diagonal = diagonal
        self.wq = nn.Linear(dim, heads * self.head_dim, bias=False)  # W^Q = W^O (tied)
        self.wk = nn.Linear(dim, heads * self.head_dim, bias=False)  # W^K = W^V (tied)
        if diagonal == "shared":
            self.d = nn.Parameter(torch.zeros(dim))
        elif diagonal == "per_head":
            self.d = nn.Parameter(torch.zeros(heads, dim))
        else:
            self.register_parameter("d", None)
        self.alibi = alibi
        if alibi:
            self.register_buffer("slopes", alibi_slopes(heads), persistent=False)
        self.self_bias = nn.Parameter(torch.zeros(heads)) if self_bias else None
        self.attn_fp32 = attn_fp32
        self.causal = bool(causal)

    @classmethod
    def examples(cls, dtype=torch.float64):
        """Causal: every diagonal mode with / without ALiBi + self bias; bidirectional: the same
        (symmetric ALiBi −m|i − j|) for diagonal none / shared."""
        cases = [(diag, ab, True) for diag in DIAGONAL_MODES for ab in (False, True)]
        cases += [(diag, ab, False) for diag in ("none", "shared") for ab in (False, True)]
        out = []
        for diag, ab, causal in cases:
            g = torch.Generator().manual_seed(len(out))
            torch.manual_seed(len(out))
            e = cls(16, 4, diagonal=diag, alibi=ab, self_bias=ab, causal=causal).to(dtype)
            with torch.no_grad():
                if e.d is not None:
                    e.d.normal_(0, 0.5, generator=g)
                if e.self_bias is not None:
                    e.self_bias.normal_(0, 1, generator=g)
            ctx = torch.randn(2, 7, 16, generator=g, dtype=dtype)
            x = torch.randn(2, 7, 16, generator=g, dtype=dtype)
            label = f"diag={diag},alibi={ab},self_bias={ab}" + ("" if causal else ",bidirectional")
            out.append((label, e, ctx, x))
        return out

    # ------------------------------------------------------------------ once per block call
    def prepare(
        self, context: Tensor, cache: dict | None = None, offset: int = 0, mask: Tensor | None = None, **kw,
    ) -> InteractionState:
        """Keys, values and the SDPA mask for queries at the last ``Nn`` positions.

        context: (B, Nn, D) normalised input of this call; ``cache`` holds earlier keys (decoding);
        mask: (B, Nn) bool key-padding mask of this call's tokens (True = real).
        """
        h = context  # (B, Nn, D) normalised input
        k = rearrange(self.wk(h), "b n (h r) -> b h n r", h=self.heads)  # (B, H, Nn, Dr)
        nq = h.shape[1]
        n_old = 0
        if cache is not None:
            if "k" in cache:
                n_old = cache["k"].shape[2]
                k = torch.cat([cache["k"], k], dim=2)
                if self.d is not None:
                    h = torch.cat([cache["h"], h], dim=1)
            cache["k"] = k
            if self.d is not None:
                cache["h"] = h
        key_mask = append_key_mask(cache, mask, n_old, nq, k.shape[0], k.device)  # (B, Nk) or None
        B, H, nk, _ = k.shape
        offset = nk - nq
        cdt = self._compute_dtype(k.dtype)
        feats = [k.to(cdt)]
        if self.d is not None:
            feats.append(h.to(cdt).unsqueeze(1).expand(B, H, nk, self.dim))
        vals = torch.cat(feats, dim=-1)  # ṽ: (B, H, Nk, Fv)
        qpos = None
        if self.alibi and self.causal:  # exact rank-2 features: τ m (1, −i) · (j, 1) = τ m (j − i)
            pos = torch.arange(nk, device=k.device, dtype=cdt)
            kpos = torch.stack([pos, torch.ones_like(pos)], -1)  # (Nk, 2): (j, 1)
            feats.append(kpos.expand(B, H, nk, 2))
            qi = pos[offset:]
            m = self.tau * self.slopes.to(cdt)[:, None, None]  # (H, 1, 1)
            qpos = m * torch.stack([torch.ones_like(qi), -qi], -1)  # (H, Nq, 2): τ m (1, −i)
        keys = torch.cat(feats, dim=-1) if len(feats) > 1 else feats[0]  # k̃: (B, H, Nk, F)
        # The fused CPU/CUDA kernels need equal q/k/v widths: the value gets the null-indicator
        # column plus zero padding up to the key width F (F >= Fv + 1 is ensured by padding keys).
        fv, fq = vals.shape[-1], keys.shape[-1]
        self_keys = keys[:, :, offset:]  # (B, H, Nq, Fq) before padding
        fk = max(fq, fv + 1)
        if fk > fq:
            keys = torch.cat([keys, keys.new_zeros(B, H, nk, fk - fq)], -1)
        null_k = keys.new_zeros(B, H, 1, fk)
        null_v = keys.new_zeros(B, H, 1, fk)
        null_v[..., fv] = 1.0  # indicator column: returns r_i = p(null)
        vals_ind = torch.cat([vals, vals.new_zeros(B, H, nk, fk - fv)], -1)
        return InteractionState(
            keys=torch.cat([null_k, keys], 2), values=torch.cat([null_v, vals_ind], 2),
            self_keys=self_keys, self_values=vals[:, :, offset:], qpos_feat=qpos,
            h=h, k=k, offset=offset, qpad=fk - fq, key_mask=key_mask,
            attn_mask=self._others_mask(nq, nk, offset, key_mask, cdt, k.device),
        )

    def _others_mask(
        self, nq: int, nk: int, offset: int, key_mask: Tensor | None, cdt: torch.dtype, device,
    ) -> Tensor | None:
        """SDPA mask over [null ; keys] for the keys j ≠ i merged by SDPA (the self term is added
        exactly afterwards). None where :meth:`attend` uses the fused causal calls.

        Causal: bool (Nq, 1+Nk) or (B, 1, Nq, 1+Nk), key c = j + 1 visible iff j < i (and real).
        Bidirectional: every real j ≠ i; with ALiBi an additive float mask −m_k |i − j| (−inf where
        hidden) of shape (1 or B, H, Nq, 1+Nk).
        """
        if self.causal and key_mask is None and (nq == nk or nq == 1):
            return None
        i = offset + torch.arange(nq, device=device)[:, None]  # (Nq, 1) query positions
        j = torch.arange(nk, device=device)[None, :]            # (1, Nk) key positions
        vis = j < i if self.causal else j != i                  # (Nq, Nk)
        if key_mask is not None:
            vis = vis[None] & key_mask[:, None, :]              # (B, Nq, Nk)
        vis = torch.cat([torch.ones_like(vis[..., :1]), vis], -1)  # null key always visible
        if not (self.alibi and not self.causal):
            return vis if vis.dim() == 2 else vis[:, None]      # bool, broadcast over heads
        dist = (i - j).abs().to(cdt)                            # (Nq, Nk) |i − j|
        bias = -self.slopes.to(device=device, dtype=cdt)[:, None, None] * dist  # (H, Nq, Nk)
        bias = torch.cat([bias.new_zeros(self.heads, nq, 1), bias], -1)[None]   # (1, H, Nq, 1+Nk)
        vis = vis[None, None] if vis.dim() == 2 else vis[:, None]
        return bias.masked_fill(~vis, float("-inf"))

    def _compute_dtype(self, dt: torch.dtype) -> torch.dtype:
        return torch.promote_types(dt, torch.float32) if self.attn_fp32 else dt

    # ------------------------------------------------------------------ inside the loop
    def _query(self, u: Tensor, st: InteractionState, cdt: torch.dtype) -> Tensor:
        B, nq, _ = u.shape
        parts = [rearrange(self.wq(u), "b n (h r) -> b h n r", h=self.heads).to(cdt)]
        if self.d is not None:
            d = self.d if self.d.dim() == 2 else self.d.expand(self.heads, self.dim)
            parts.append((u.unsqueeze(1) * d[None, :, None, :]).to(cdt))  # (B, H, Nq, D)
        if st.qpos_feat is not None:
            parts.append(st.qpos_feat.expand(B, -1, -1, -1))
        return torch.cat(parts, -1) if len(parts) > 1 else parts[0]

    def attend(self, u: Tensor, st: InteractionState) -> tuple[Tensor, Tensor]:
        """Fused attention of queries u (B, Nq, D) on the prepared context.

        Returns (o, logZ): o (B, H, Nq, Fv) = Σ_j p_ijk ṽ_j and logZ (B, H, Nq) = log Σ_j e^{s_ijk}
        over the visible keys (j ≤ i when causal, all real j otherwise).
        """
        cdt = st.keys.dtype
        with torch.autocast(u.device.type, enabled=False) if self.attn_fp32 else _null():
            qt = self._query(u, st, cdt)  # (B, H, Nq, Fq)
            s_self = (qt * st.self_keys).sum(-1) / self.tau  # (B, H, Nq)
            if st.qpad:
                qt = torch.cat([qt, qt.new_zeros(*qt.shape[:-1], st.qpad)], -1)
            nq, nk = qt.shape[2], st.keys.shape[2] - 1
            if st.attn_mask is not None:  # bidirectional, key padding or chunked prefill: one masked call
                out = F.scaled_dot_product_attention(
                    qt, st.keys, st.values, attn_mask=st.attn_mask, scale=1.0 / self.tau)
            elif nq == nk:  # causal training / prefill: square strictly-causal call (fused)
                q_pad = torch.cat([qt, qt.new_zeros(qt.shape[0], qt.shape[1], 1, qt.shape[-1])], 2)
                out = F.scaled_dot_product_attention(
                    q_pad, st.keys, st.values, is_causal=True, scale=1.0 / self.tau)[:, :, :-1]
            else:  # decoding one token: every cached key before it is visible
                out = F.scaled_dot_product_attention(
                    qt, st.keys[:, :, :-1], st.values[:, :, :-1], scale=1.0 / self.tau)
            fv = st.self_values.shape[-1]
            o_lt, r = out[..., :fv], out[..., fv]  # (B,H,Nq,Fv), (B,H,Nq)
            if self.self_bias is not None:
                s_self = s_self + self.self_bias.to(cdt)[None, :, None]
            log_r = torch.log(r.clamp_min(torch.finfo(r.dtype).tiny))
            c = torch.exp(s_self + log_r)
            denom = 1.0 - r + c
            o = (o_lt + c.unsqueeze(-1) * st.self_values) / denom.unsqueeze(-1)
            log_z = torch.log(denom) - log_r
        return o, log_z

    def _readout(self, o: Tensor, precond: Preconditioner | None, dtype: torch.dtype) -> Tensor:
        """Σ_k P_k (W_Qkᵀ o_k[:Dr] + d_k ∘ o_k[Dr:]) → (B, Nq, D)."""
        H, R, D = self.heads, self.head_dim, self.dim
        o = o.to(dtype)
        o_q, o_h = o[..., :R], o[..., R:]
        wq = self.wq.weight.view(H, R, D)  # W_Qk: (H, Dr, D)
        bank = precond is not None and not precond.is_identity and precond.heads is not None
        if bank:
            w_eff = precond.fold(wq.transpose(1, 2))  # P_k W_Qkᵀ: (H, D, Dr), weight-only
            out = torch.einsum("bhnr,hdr->bnd", o_q, w_eff.to(dtype))
        else:
            out = torch.einsum("bhnr,hrd->bnd", o_q, wq.to(dtype))
        if self.d is not None:
            d = self.d.to(dtype)
            if bank:
                g = rearrange(o_h, "b h n d -> b n h d") * (d if d.dim() == 2 else d[None])
                out = out + precond(g).sum(2)
            elif d.dim() == 1:
                out = out + d * o_h.sum(1)
            else:
                out = out + torch.einsum("bhnd,hd->bnd", o_h, d)
        if precond is not None and not precond.is_identity and not bank:
            out = precond(out)
        return out

    # ------------------------------------------------------------------ Energy API
    def direction(self, u: Tensor, st: InteractionState, precond: Preconditioner) -> Tensor:
        o, _ = self.attend(u, st)
        return self._readout(o, precond, u.dtype)

    def grad(self, u: Tensor, st: InteractionState) -> Tensor:
        o, _ = self.attend(u, st)
        return -self._readout(o, None, u.dtype)

    def energy_fused(self, u: Tensor, st: InteractionState) -> Tensor:
        """E_i from the fused path's normaliser (no N×N matrix): −τ Σ_k log Z_ik + ALiBi offset."""
        _, log_z = self.attend(u, st)
        return -self.tau * log_z.sum(1).to(u.dtype)

    def energy(self, u: Tensor, st: InteractionState) -> Tensor:
        """Reference per-token energy with explicit (B, H, Nq, Nk) scores (tests, traces).

        Masked (padded) queries get a finite energy from their own key and the real ones; it is
        meaningless and callers that aggregate should ignore it.
        """
        H = self.heads
        q = rearrange(self.wq(u), "b n (h r) -> b h n r", h=H)
        s = torch.einsum("bhnr,bhmr->bhnm", q, st.k.to(q.dtype))
        if self.d is not None:
            d = self.d if self.d.dim() == 2 else self.d.expand(H, self.dim)
            s = s + torch.einsum("bnd,hd,bmd->bhnm", u, d, st.h.to(u.dtype))
        s = s / self.tau
        nq, nk = u.shape[1], st.k.shape[2]
        i = torch.arange(st.offset, st.offset + nq, device=u.device)[:, None]
        j = torch.arange(nk, device=u.device)[None, :]
        if self.alibi:  # −m(i − j) on the causal support, symmetric −m|i − j| when bidirectional
            s = s - self.slopes.to(s.dtype)[:, None, None] * (i - j).abs().to(s.dtype)
        if self.self_bias is not None:
            s = s + self.self_bias.to(s.dtype)[:, None, None] * (i == j).to(s.dtype)
        vis = (j <= i) if self.causal else torch.ones_like(i == j)  # (Nq, Nk)
        if st.key_mask is not None:
            vis = (vis[None] & st.key_mask[:, None, :]) | (i == j)[None]  # (B, Nq, Nk); self always
            vis = vis[:, None]
        s = s.masked_fill(~vis, float("-inf"))
        return -self.tau * torch.logsumexp(s, dim=-1).sum(1)  # (B, Nq)

    def precond_exact(self, precond: Preconditioner) -> bool:
        # Per-head P_k (seed Eq. 14) give Σ_k P_k ∇E_k, which is not −P∇E for one PD P and need not
        # even be a descent direction; a shared P (or identity) is an exact preconditioned step.
        return precond.is_identity or precond.heads is None


class _null:
    def __enter__(self):
        return None

    def __exit__(self, *a):
        return False
