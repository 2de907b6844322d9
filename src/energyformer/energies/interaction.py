"""CEM interaction energy → weight-tied attention (CEM seed §2.1, §2.3 Eq. 1-5, 12, 14, 16; App. B;
Algorithm 1; reconstructed.md §4).

For the update variable u_i (the normalised query-side state) and the normalised context h_{≤i}:

    E_i(u_i) = −τ Σ_k log Σ_{j≤i} exp(s_ijk),
    s_ijk    = (1/τ) u_iᵀ A_k h_j + b_ijk,     A_k = W_Qkᵀ W_Kk + diag(d_k)           (Eq. 1, 12)
    b_ijk    = −m_k (i − j) + δ_k [j = i]       (ALiBi slopes m_k of Press et al.; learned self bias δ_k)
    −∇E_i    = Σ_k Σ_j p_ijk (W_Qkᵀ k_j + d_k ∘ h_j),   p = softmax_j(s),  k_j = W_Kk h_j   (Eq. 2, 4)

With d = 0 and no bias, one step of size 1 is multi-head attention with W^V = W^K and W^O = W^Q
(Eq. 5). The diagonal enters the scores AND the value/output path; adding it only to the scores is
not a gradient step (reconstructed.md §4).

Read-outs (``diagonal_readout``):
  * ``gradient`` (default, ``exact = True``): the step is −P ∇E above, the exact gradient of Eq. 2 + 12.
  * ``algorithm1``: the paper's Algorithm 1 literally — the diagonal is in the scores only and the
    update is ``Σ_k P_k W_Qkᵀ o_k`` with ``o_k = Σ_j p_ijk W_Kk h_j`` (no d_k ∘ h_j value term). This
    is not the gradient of any energy we know of (``exact = False``); :meth:`reference_direction`
    is its slow, literal formula for the property test, and ``grad`` stays the true gradient of E.

Evaluation paths (``attn_path``; :mod:`energyformer.energies.interaction_paths` has the details):
  * ``fused``: one ``scaled_dot_product_attention`` call over feature-augmented keys (every head
    D_h + D wide), O(N) memory; the self score is merged *inside* SDPA's max-subtracted softmax,
    so any finite logits are safe in float32 and bf16. Always used for decoding (one query).
  * ``blocked``: explicit scores per causal query block; the shared diagonal's logits are computed
    once for all heads and its value term from the head-summed probabilities — exact, and about twice
    Llama's attention-core work instead of H + 1 times (shared diagonal, no per-head P). It keeps ~B·H·N²/2
    probabilities for backward; when that exceeds ``attn_memory_mb`` each block is recomputed in
    backward instead (live N² memory: one block), and when even one block of 16 queries does not
    fit, ``auto`` falls back to ``fused``.
  * ``kernel``: the flash-style Triton kernel of :mod:`energyformer.energies.cem_kernel` (no N×N
    tensor per head; the products every head shares — the diagonal's logits, the head-summed
    read-out — once, by default as batched matmuls; its own backward). Covers a shared or no
    diagonal, both read-outs and every preconditioner (per-head banks included); not
    ``diagonal = per_head`` (an error under ``kernel``; ``auto`` then does not take it). Its launch is
    ``attn_kernel`` (:class:`~.cem_launch.KernelTiles`). On CPU it runs through Triton's interpreter
    (tests only: slow).
  * ``auto`` (default): ``kernel`` on CUDA with triton installed (unless ``diagonal = per_head``);
    otherwise ``blocked`` within the memory budget, ``fused`` for decoding. (Measured with
    ``benchmarks/cem_attention.py``: blocked is faster than SDPA here even without a diagonal — x1.1
    in float32, x2.0 under bf16 autocast, D = 256, N = 256, 8 heads, one CPU thread.)

Choices where the source is ambiguous (flags, defaults recommended by reconstructed.md §4):
  * ``temperature`` τ: the seed's Eq. 5 and Algorithm 1 write τ = √D_h, but D_h is also its symbol
    for the model width (§2.1: "D_h is the feature dimension for h_i", head width D_r). Default
    ``head_dim`` (τ = √D_r, standard attention scaling, so that T = 1 is ordinary MHA); ``model_dim``
    (τ = √D) is the literal reading; a number sets τ directly.
  * ALiBi slopes: Press et al. 2022 — m_k = 2^{−8k/K} for K a power of two; otherwise the 2^⌊log2 K⌋
    power-of-two slopes followed by every other slope of the 2·2^⌊log2 K⌋ sequence. The seed's App. B
    prints ``b_ijk = m_k |i − j|`` (a *positive* sign, which would reward distance) and gives
    ``m_k = 2^{−k}`` "e.g."; we use −m_k (i − j) as Press et al. (for K = 8 the slopes coincide).
  * ``diagonal``: 'shared' (seed §4.4: close to per-head at lower cost), 'per_head' or 'none'; d init 0,
    so the layer starts as tied MHA.
  * Only δ = β_self − β_cross is identifiable (β_cross shifts every logit of a row equally), so one
    self bias per head is learned, initialised at 0.
  * ``attn_fp32``: under bf16 autocast the blocked path runs its products in bf16 (scores rounded to
    bf16, relative error 2^-9) and the bias and softmax in float32; ``attn_fp32`` keeps the products
    in float32 too. The fused path always runs in float32 (its ALiBi feature columns reach m·N).

Bidirectional context (``causal=False``; not in the seed, needed by Hyper-SET-style encoders and
masked modelling): the sum runs over every j, the self bias still marks j = i, and ALiBi becomes the
symmetric distance penalty ``−m_k |i − j|`` (Press et al. 2022's encoder variant). For every j ≤ i,
``−m(i − j) = −m|i − j|``, so one formula covers both.

Key padding (``prepare(..., mask=...)``, (B, Nk) bool, True = real token): masked keys are never
attended. Every query still sees itself, so a padded query's row is well defined; its output is
meaningless and no real token reads it.

Weight decay: ``d`` has the role ``diagonal`` and ``self_bias`` the role ``position``; the trainer
never decays them (train/roles.py). Preconditioner parameters (p, U, V, also of per-head banks) have
the role ``precond`` by module type.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from einops import rearrange
from torch import Tensor, nn

from ..core.attention import append_cache, visible
from ..core.constants import ExactConstant
from ..core.energy import Energy, register_energy
from ..core.precision import autocast_dtype, autocast_off
from ..core.precond import Preconditioner
from ..utils.validate import check_choice, check_float, check_int
from .cem_kernel import attend_kernel, triton_available
from .cem_launch import KernelTiles
from .interaction_paths import (
    Averages, BlockedState, FusedState, ValuePlan, attend_blocked, attend_fused, blocked_bytes,
    once_per_grad_mode, plan_id, position_bias, prepare_fused,
)

DIAGONAL_MODES = ("none", "shared", "per_head")
READOUTS = ("gradient", "algorithm1")
ATTN_PATHS = ("auto", "fused", "blocked", "kernel")
TEMPERATURES = ("head_dim", "model_dim")
#: smallest query block the blocked path uses to stay inside the memory budget
MIN_BLOCK = 16


def alibi_slope_values(heads: int) -> list[float]:
    """ALiBi slopes of Press et al. 2022 (their reference ``get_slopes``) as Python floats.

    K a power of two: m_k = 2^{−8k/K}, k = 1..K. Otherwise, with n = 2^⌊log2 K⌋: the n slopes for n
    heads followed by the first K − n of every other slope for 2n heads (2^{−4(2k−1)/n}). Pure Python,
    so a model built on the meta device (Hugging Face's from_pretrained) still gets the numbers."""
    def power_of_two(n: int) -> list[float]:
        return [2.0 ** (-8.0 * (k + 1) / n) for k in range(n)]

    n = 2 ** int(math.floor(math.log2(heads)))
    slopes = power_of_two(n)
    if n < heads:
        slopes += power_of_two(2 * n)[0::2][: heads - n]
    return slopes


def alibi_slopes(heads: int, dtype: torch.dtype | None = None) -> Tensor:
    """:func:`alibi_slope_values` as a tensor."""
    return torch.tensor(alibi_slope_values(heads), dtype=dtype)


@dataclass
class InteractionState:
    """Work done once per block call (outside the recursion)."""

    h: Tensor        # (B, Nk, D) normalised context
    k: Tensor        # (B, H, Nk, Dr) keys (= values, tied)
    offset: int      # position of the first query
    path: str        # 'fused', 'blocked' or 'kernel'
    key_mask: Tensor | None = None   # (B, Nk) bool, True = real key (None: all real)
    fused: FusedState | None = None
    blocked: BlockedState | None = None  # blocked and kernel paths: keys and h in the product dtype
    attn_mask: Tensor | None = None  # fused path: SDPA mask over [null ; keys], or None
    #: weight-only work shared by the call's steps (the read-out plans with a preconditioner's products), keyed
    #: with the grad mode: a plan built under no_grad (the untracked steps of ``backward: truncated``) is never
    #: reused by a step whose gradient must reach the preconditioner
    plans: dict = field(default_factory=dict)


@register_energy("cem_interaction")
class InteractionEnergy(Energy):
    """Interaction energy of CEM attention with K heads (see module docstring)."""

    head_bank = True  # one P_k per head (Eq. 14): the read-out applies each head's own preconditioner

    exact = True
    #: parameter roles for the trainer's weight-decay groups (train/roles.py): never decayed
    param_roles = {"d": "diagonal", "self_bias": "position"}

    def __init__(
        self, dim: int, heads: int, head_dim: int | None = None, diagonal: str = "shared",
        alibi: bool = True, self_bias: bool = True, temperature: float | str | None = None,
        attn_fp32: bool = False, causal: bool = True, diagonal_readout: str = "gradient",
        attn_path: str = "auto", attn_memory_mb: float = 512.0, attn_block: int = 128,
        attn_kernel: KernelTiles | None = None,
    ):
        super().__init__()
        check_int("dim", dim, min=1)
        check_int("heads", heads, min=1)
        if head_dim is None and dim % heads != 0:
            raise ValueError(f"heads = {heads!r}: must divide dim = {dim} (or set head_dim)")
        check_choice("diagonal", diagonal, DIAGONAL_MODES)
        check_choice("diagonal_readout", diagonal_readout, READOUTS)
        check_choice("attn_path", attn_path, ATTN_PATHS)
        check_float("attn_memory_mb", attn_memory_mb, min=0.0)
        check_int("attn_block", attn_block, min=1)
        self.dim, self.heads = dim, heads
        self.head_dim = head_dim or dim // heads
        check_int("head_dim", self.head_dim, min=1)
        if temperature is None or isinstance(temperature, str):
            check_choice("temperature", temperature or "head_dim", TEMPERATURES)
            self.tau = math.sqrt(self.dim if temperature == "model_dim" else self.head_dim)
        else:
            check_float("temperature", temperature, min=0.0, min_exclusive=True)
            self.tau = float(temperature)
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
            self.slope_values = ExactConstant(alibi_slope_values(heads))  # (H,), exact in every dtype
        self.self_bias = nn.Parameter(torch.zeros(heads)) if self_bias else None
        self.attn_fp32 = attn_fp32
        self.causal = bool(causal)
        self.readout = diagonal_readout
        self.exact = diagonal_readout == "gradient"  # Algorithm 1's read-out is not a gradient step
        self.attn_path, self.attn_memory_mb, self.attn_block = attn_path, float(attn_memory_mb), attn_block
        self.attn_kernel = attn_kernel or KernelTiles()  # the kernel path's launch
        # ... as each read-out runs it (KernelTiles.launch: per-head factors on their own tiles), resolved once
        self.attn_launch = {m: self.attn_kernel.launch(m) for m in ("none", "sum", "stack")}
        if attn_path == "kernel" and not triton_available():
            raise ValueError("attn_path = 'kernel' needs the triton package (pip install triton); "
                             "allowed without it: 'auto', 'fused', 'blocked'")
        if attn_path == "kernel" and diagonal == "per_head":
            raise ValueError("attn_path = 'kernel' does not cover diagonal = 'per_head' (the kernel shares "
                             "the diagonal tile across heads); use diagonal 'shared' or 'none', or another attn_path")

    @classmethod
    def examples(cls, dtype=torch.float64):
        """Causal: every diagonal mode with / without ALiBi + self bias, on both paths; bidirectional:
        the same (symmetric ALiBi −m|i − j|) for diagonal none / shared; Algorithm 1's read-out."""
        cases = [(diag, ab, True, "gradient", path) for diag in DIAGONAL_MODES for ab in (False, True)
                 for path in ("fused", "blocked")]
        cases += [(diag, ab, False, "gradient", "auto") for diag in ("none", "shared") for ab in (False, True)]
        cases += [(diag, True, c, "algorithm1", path) for diag in ("shared", "per_head") for c in (True, False)
                  for path in ("fused", "blocked")]
        out = []
        for diag, ab, causal, readout, path in cases:
            g = torch.Generator().manual_seed(len(out))
            torch.manual_seed(len(out))
            e = cls(16, 4, diagonal=diag, alibi=ab, self_bias=ab, causal=causal, diagonal_readout=readout,
                    attn_path=path, attn_block=3).to(dtype)
            with torch.no_grad():
                if e.d is not None:
                    e.d.normal_(0, 0.5, generator=g)
                if e.self_bias is not None:
                    e.self_bias.normal_(0, 1, generator=g)
            ctx = torch.randn(2, 7, 16, generator=g, dtype=dtype)
            x = torch.randn(2, 7, 16, generator=g, dtype=dtype)
            label = f"diag={diag},alibi={ab},self_bias={ab},{readout},{path}" + ("" if causal else ",bidirectional")
            out.append((label, e, ctx, x))
        return out

    # ------------------------------------------------------------------ once per block call
    @property
    def slopes(self) -> Tensor | None:
        """(H,) ALiBi slopes in the module's dtype (None without ALiBi)."""
        return self.slope_values() if self.alibi else None

    def prepare(
        self, context: Tensor, cache: dict | None = None, offset: int = 0, mask: Tensor | None = None, **kw,
    ) -> InteractionState:
        """Keys (and the chosen path's tensors) for queries at the last ``Nn`` positions.

        context: (B, Nn, D) normalised input of this call; ``cache`` holds earlier keys (decoding);
        mask: (B, Nn) bool key-padding mask of this call's tokens (True = real).
        """
        h = context  # (B, Nn, D) normalised input
        k = rearrange(self.wk(h), "b n (h r) -> b h n r", h=self.heads)  # (B, H, Nn, Dr)
        nq = h.shape[1]
        new = {"k": k} if self.d is None else {"k": k, "h": h}  # the diagonal term also reads the inputs h
        kv, key_mask = append_cache(cache, mask, seq_dims={"h": 1}, **new)  # key mask (B, Nk) or None
        k, h = kv["k"], kv.get("h", h)  # (B, H, Nk, Dr), (B, Nk, D) with the diagonal
        B, H, nk, _ = k.shape
        offset = nk - nq
        st = InteractionState(h=h, k=k, offset=offset, path="fused", key_mask=key_mask)
        if self._use_kernel(k):
            path, block, recompute = "kernel", 0, False
        else:
            path, block, recompute = self._choose_path(B, nq, nk, offset, self._product_dtype(k))
        if path in ("blocked", "kernel"):
            cdt = self._product_dtype(k)
            st.path = path
            kc = k.to(cdt)
            if path == "kernel":  # laid out as the kernels read it once per call, not once per step
                kc = kc.contiguous()
            st.blocked = BlockedState(block=block, recompute=recompute, cdt=cdt, k=kc,
                                      h=None if self.d is None else h.to(cdt))
        else:
            st.fused = prepare_fused(self, h, k, offset, h_values=self.readout == "gradient")
            st.attn_mask = self._others_mask(nq, nk, offset, key_mask, st.fused.keys.dtype, k.device)
        return st

    def _product_dtype(self, k: Tensor) -> torch.dtype:
        """dtype of the blocked path's products: at least float32 with ``attn_fp32``, else the
        autocast dtype under autocast, else the keys' dtype."""
        if self.attn_fp32:
            return torch.promote_types(k.dtype, torch.float32)
        dev = k.device.type
        return torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else k.dtype

    def _use_kernel(self, k: Tensor) -> bool:
        """``kernel`` when asked for; ``auto`` takes it on CUDA when triton is installed and the
        diagonal is not per head (energies/cem_kernel.py)."""
        if self.attn_path == "kernel":
            return True
        return (self.attn_path == "auto" and k.device.type == "cuda" and self.diagonal != "per_head"
                and triton_available())

    def _choose_path(self, B: int, nq: int, nk: int, offset: int, cdt: torch.dtype) -> tuple[str, int, bool]:
        """(path, query block, recompute) under the memory budget (module docstring)."""
        if self.attn_path == "fused" or (self.attn_path == "auto" and nq == 1):
            return "fused", 0, False
        budget = self.attn_memory_mb * 2**20
        stack = self.d is not None and self.readout == "gradient"  # conservative: per-head value factors

        def est(b):
            return blocked_bytes(B, self.heads, nq, nk, offset, self.causal, b, cdt, stack, self.dim)

        block = self.attn_block
        total, worst = est(block)
        keep = torch.is_grad_enabled()
        if (total if keep else worst) <= budget:
            return "blocked", block, False
        while block > MIN_BLOCK and est(block)[1] > budget:
            block = max(MIN_BLOCK, block // 2)
        if est(block)[1] <= budget or self.attn_path == "blocked":
            return "blocked", block, keep
        return "fused", 0, False

    def _others_mask(
        self, nq: int, nk: int, offset: int, key_mask: Tensor | None, cdt: torch.dtype, device,
    ) -> Tensor | None:
        """Fused path: SDPA mask over [null ; keys] for the keys j ≠ i merged by SDPA (the null key,
        carrying the self score, is always visible). None where the fused causal calls apply.

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
        bias = position_bias(self.slopes, offset, nq, nk, False, device, cdt)  # (H, Nq, Nk) −m_k |i − j|
        bias = torch.cat([bias.new_zeros(self.heads, nq, 1), bias], -1)[None]   # (1, H, Nq, 1+Nk)
        vis = vis[None, None] if vis.dim() == 2 else vis[:, None]
        return bias.masked_fill(~vis, float("-inf"))

    # ------------------------------------------------------------------ inside the loop
    @staticmethod
    def _bank(precond: Preconditioner | None) -> bool:
        return precond is not None and not precond.is_identity and precond.heads is not None

    def _plan(self, precond: Preconditioner | None, gradient: bool) -> ValuePlan:
        """What the read-out needs: the h-term's per-head factors c_k and the low-rank projections; with a
        per-head bank also the weight-only products of the heads' combination (P_k W_Qkᵀ, [U_k, V_k])."""
        bank = self._bank(precond)
        H, R, D = self.heads, self.head_dim, self.dim
        w_eff = None
        if bank:  # P_k W_Qkᵀ: (H, D, Dr), weight-only: in the weights' dtype (autocast off: no operand casts)
            with autocast_off(self.wq.weight.device.type):
                w_eff = precond.fold(self.wq.weight.view(H, R, D).transpose(1, 2))
        if self.d is None or not gradient:
            return ValuePlan(key=("none",), w_eff=w_eff)
        if not bank:
            mode = "sum" if self.d.dim() == 1 else "stack"
            return ValuePlan(h_mode=mode, c=self.d, key=(mode,))
        dd = self.d if self.d.dim() == 2 else self.d[None]            # (H or 1, D)
        c = precond.diag() * dd                                       # (H, D): diag(P_k) ∘ d_k
        lr = uv = None
        if hasattr(precond, "U"):                                     # [d_k∘V_k , d_k∘U_k]: (H, D, 2R)
            lr = torch.cat([precond.V, precond.U], -1) * dd[..., None]
            uv = torch.cat([precond.U, precond.V], -1)                # (H, D, 2R)
        return ValuePlan(h_mode="stack", c=c, lr=lr, key=("bank", plan_id(precond)), w_eff=w_eff, uv=uv)

    def _step_plan(self, st: InteractionState, precond: Preconditioner | None, gradient: bool) -> ValuePlan:
        """:meth:`_plan`, built once per call and grad mode (``st.plans``): with T steps a per-head bank's
        diagonal, low-rank factors and P_k W_Qkᵀ are weight-only products, the same at every step."""
        return once_per_grad_mode(st.plans, (plan_id(precond), gradient), lambda: self._plan(precond, gradient))

    def attend(self, u: Tensor, st: InteractionState, plan: ValuePlan | None = None,
               need_logz: bool = False) -> Averages:
        """The attention averages of queries u (B, Nq, D) on the prepared context (see
        :mod:`energyformer.energies.interaction_paths`); default plan: the gradient's."""
        plan = plan or self._plan(None, True)
        if st.path == "kernel":
            return attend_kernel(self, u, st, st.blocked, plan, need_logz)
        if st.path == "blocked":
            return attend_blocked(self, u, st, st.blocked, plan, need_logz)
        o, _, logz = attend_fused(self, u, st.fused, st.attn_mask, need_logz)
        R = self.head_dim
        avg = Averages(oq=o[..., :R], logz=logz)
        if plan.h_mode is not None or plan.lr is not None:
            if not st.fused.h_values:
                raise RuntimeError("this fused state carries no h values (prepared for Algorithm 1's read-out)")
            oh = o[..., R:]  # (B, H, Nq, D) Σ_j p_ijk h_j
            if plan.h_mode == "sum":
                avg.hterm = oh.sum(1) * plan.c.to(oh.dtype)
            elif plan.h_mode == "stack":
                avg.hterm = torch.einsum("bhnd,hd->bnd", oh, plan.c.to(oh.dtype))
            if plan.lr is not None:
                avg.lowrank = torch.einsum("bhnd,hdr->bhnr", oh, plan.lr.to(oh.dtype))
        return avg

    def _combine(self, avg: Averages, precond: Preconditioner | None, plan: ValuePlan,
                 dtype: torch.dtype) -> Tensor:
        """Σ_k P_k (W_Qkᵀ oq_k) + h-term + low-rank term (→ (B, Nq, D)); a single P is applied last."""
        if self._bank(precond):  # Σ_k P_k W_Qkᵀ oq_k with the plan's weight-only P_k W_Qkᵀ
            out = torch.einsum("bhnr,hdr->bnd", avg.oq.to(dtype), plan.w_eff.to(dtype))
        else:
            # oq (B, H, Nq, Dr) as (B, Nq, H·Dr) in the matmul's dtype, cast and reordered in one copy (an einsum
            # permuted the kernel's float32 oq, then cast it, and cast a view of the weight per call), times the
            # weight itself, whose cast autocast caches. (The bank's einsum stays: on the CPU, float32, the
            # paper configuration measured 1.4% slower with this form, compare_commits 61e1869 -> 71f1b91.)
            oq = avg.oq.transpose(1, 2).to(autocast_dtype(dtype, avg.oq.device.type),
                                           memory_format=torch.contiguous_format).flatten(2)
            out = oq @ self.wq.weight.to(dtype)  # Σ_k W_Qkᵀ oq_k
        if avg.hterm is not None:
            out = out + avg.hterm.to(dtype)
        if avg.lowrank is not None:  # Σ_k U_k (V_kᵀ d∘o_hk) + V_k (U_kᵀ d∘o_hk)
            out = out + torch.einsum("bhnr,hdr->bnd", avg.lowrank.to(dtype), plan.uv.to(dtype))
        if precond is not None and not precond.is_identity and not self._bank(precond):
            out = precond(out)
        return out

    # ------------------------------------------------------------------ Energy API
    def direction(self, u: Tensor, st: InteractionState, precond: Preconditioner) -> Tensor:
        plan = self._step_plan(st, precond, self.readout == "gradient")
        return self._combine(self.attend(u, st, plan), precond, plan, u.dtype)

    def grad(self, u: Tensor, st: InteractionState) -> Tensor:
        if st.path == "fused" and not st.fused.h_values and self.d is not None:
            return super().grad(u, st)  # Algorithm 1's fused state has no h values: autograd of E
        plan = self._plan(None, True)
        return -self._combine(self.attend(u, st, plan), None, plan, u.dtype)

    def energy_fused(self, u: Tensor, st: InteractionState) -> Tensor:
        """E_i from the chosen path's normaliser (no N×N matrix on the fused path): −τ Σ_k log Z_ik.

        The fused path gets log Z = s_ii − log p_ii; where p_ii is below ``finfo.tiny`` (subnormal or
        0: the past outweighs the self score by more than the dtype's normal range, and a subnormal
        p_ii has too few mantissa bits for its log) this row is recomputed on the blocked path."""
        log_z = self.attend(u, st, ValuePlan(), need_logz=True).logz
        if st.path == "fused" and not torch.isfinite(log_z).all():
            bs = BlockedState(block=self.attn_block, recompute=False, cdt=st.fused.keys.dtype,
                              k=st.k.to(st.fused.keys.dtype), h=None if self.d is None else st.h.to(st.fused.keys.dtype))
            alt = InteractionState(h=st.h, k=st.k, offset=st.offset, path="blocked", key_mask=st.key_mask, blocked=bs)
            log_z = torch.where(torch.isfinite(log_z), log_z, self.attend(u, alt, ValuePlan(), need_logz=True).logz)
        return -self.tau * log_z.sum(1).to(u.dtype)

    def _dense_scores(self, u: Tensor, st: InteractionState) -> Tensor:
        """Explicit (B, H, Nq, Nk) scores s_ijk with −inf where j is not visible (tests, traces)."""
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
        vis = visible(nq, nk, self.causal, st.key_mask, u.device)  # (1|B, 1, Nq, Nk) or None
        return s if vis is None else s.masked_fill(~vis, float("-inf"))

    def energy(self, u: Tensor, st: InteractionState) -> Tensor:
        """Reference per-token energy with explicit (B, H, Nq, Nk) scores (tests, traces).

        Masked (padded) queries get a finite energy from their own key and the real ones; it is
        meaningless and callers that aggregate should ignore it.
        """
        return -self.tau * torch.logsumexp(self._dense_scores(u, st), dim=-1).sum(1)  # (B, Nq)

    def reference_direction(self, u: Tensor, st: InteractionState, precond: Preconditioner) -> Tensor:
        """Algorithm 1's update written out: p from the explicit scores (diagonal included),
        o_k = Σ_j p_ijk W_Kk h_j, update Σ_k P_k W_Qkᵀ o_k with P_k as dense matrices."""
        if self.readout == "gradient":
            return super().reference_direction(u, st, precond)  # exact: checked against the gradient
        p = torch.softmax(self._dense_scores(u, st), dim=-1)              # (B, H, Nq, Nk)
        o = torch.einsum("bhnm,bhmr->bhnr", p, st.k.to(p.dtype))          # (B, H, Nq, Dr)
        wq = self.wq.weight.view(self.heads, self.head_dim, self.dim)
        per_head = torch.einsum("bhnr,hrd->bhnd", o, wq)                  # W_Qkᵀ o_k
        if precond.is_identity:
            return per_head.sum(1)
        M = precond.matrix()
        if precond.heads is not None:
            return torch.einsum("hde,bhne->bnd", M, per_head)
        return per_head.sum(1) @ M.T

    def precond_exact(self, precond: Preconditioner) -> bool:
        # Per-head P_k (seed Eq. 14) give Σ_k P_k ∇E_k, which is not −P∇E for one PD P and need not
        # even be a descent direction; a shared P (or identity) is an exact preconditioned step.
        return precond.is_identity or precond.heads is None
