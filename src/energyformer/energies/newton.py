"""Newton-type heads of seed 001 §3.2 and App. A.7 (equations from ``reconstructed.md`` §1.3).

Per head h and query i (causal, j ≤ i), theory-tied ``q_i = P_h u_i`` (P_h = W_Q^h), ``k_j = W_h h_j``
(W_h = W_K^h), values ``v_j = k_j`` (``tie_values``) or ``W_V^h h_j``:

    elastic logits  ℓ_ij = (q_i·k_j − ½‖k_j‖²)/T_s,   p = softmax_j ℓ,   μ_i = Σ_j p_ij v_j
    a_i = μ_i − q_i  (= −∂F_h/∂q, the negative gradient; ``subtract_query``)
    C_i = Σ_j p_ij (v_j − μ_i)(v_j − μ_i)ᵀ,          ∂²F_h/∂q² = M_i = I − C_i/T_s   (Lemma 2, D8)

* ``mode='newton'`` (**MHA2nd**, the reference): ``o_i = M_{i,ε}⁻¹ a_i`` with ``M_ε`` damped (eigenvalues
  clamped to ≥ ε, or |λ| ≥ ε, or ``M + εI``): M is indefinite once λ_max(C) > T_s (the seed's Lemma 2),
  so an undamped Newton step may ascend. Per-token d_h×d_h eigendecompositions: a reference, not a
  fast layer. C is taken about each query's heaviest value (``_covariance``) and the scores shifted by
  their row maximum before T_s: the same numbers, without float32 cancellations when attention is peaked.
* ``mode='taylor'`` (**MHA2nd1st**): ``M⁻¹ ≈ I + C/T`` (first-order Taylor), so
  ``o_i = a_i + b_i``, ``b_i = (1/T_b)[Σ_j p_ij (v_j·a_i) v_j − (μ_i·a_i) μ_i] = C_i a_i / T_b``. The
  inner products ``v_j·a_i`` come first (an N×N matrix, then one more N×N matmul), so the cost stays
  O(N² d) as the seed says; P must be materialised (no fused attention kernel returns it). The sum is
  taken about each query's heaviest value (``_taylor_bias``): the same number, without the float32
  cancellation of two |v|²|a| terms when attention is peaked.
  Two head-wise learnable temperatures (App. A.7.1): ``T_s`` in the scores, ``T_b`` in the bias term;
  with ``T_b = T_s`` and tied values, ``o = −(2I − ∇²F)∇F`` exactly (tested against autograd).

Output map (the per-head range-space / pseudo-inverse step of App. A.7.1):
  ``output='pinv'``: ``d = Σ_h P_h⁺ o_h`` with ``P_h⁺ = P_hᵀ(P_h P_hᵀ + ε_h I)⁻¹`` computed from W_Q each
  call (weight-only work; **MHA2nd1st** / **MHA2nd**). The ridge is relative to the head's scale,
  ``ε_h = pinv_eps · tr(P_h P_hᵀ)/d_h`` (``pinv_eps`` None: the working dtype's machine ε; 0: none), so
  the bias ``~ε_h/σ_min²`` does not depend on the size of W_Q (an absolute ε = 1e-6 gave 1.2e-3 relative
  error at D 8, weight std 0.02; issue 23);
  ``output='learned'``: ``d = W_O concat_h o_h`` with a free W_O (the **simplified** form: "the matrix
  replaced by a learnable one"; our reading, reconstructed.md §1.3).

Initial temperatures: the seed's values were lost in extraction; default ``T = √d_h``
(reconstructed.md §1.3 [REC]: matches standard attention at initialisation). Temperatures are
``softplus(θ)`` (positive); a non-positive initial value is an error.

* :class:`LiteHeads` (**MHA2nd-lite**, App. A.7.2): standard MHA parametrisation (fused QKV, W_O),
  inner-product scores ``q·k/T_s`` and per-dimension variance preconditioning
  ``o = μ + (σ² ⊙ μ)/T_b``, ``σ² = Σ_j p_ij v_j⊙v_j − μ⊙μ`` (diagonal of C), two per-head learnables.
  μ and E[v⊙v] come from ONE fused SDPA call with values ``[v, v⊙v]``; as ``T_b → ∞`` it is MHA.

All are ``exact = False`` (a Newton-type step is not ``−η∇F``); ``reference_direction`` recomputes the
update per query with explicit centred covariances (and, for 'newton', ``torch.linalg.eigh`` of the
explicit M), independently of the batched code.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..core.attention import append_cache, masked_softmax, sdpa, visible
from ..core.constants import ExactConstant
from ..core.energy import Energy, register_energy
from ..core.precision import autocast_dtype, autocast_off, linear_at_least_float32, no_host_sync, widest_float
from ..core.stepsize import _inverse_softplus
from ..utils.validate import ConfigError, check_choice, check_float, check_int
from .free_energy import HeadsState, free_energy_heads, merge_heads, split_heads
from .intrinsic_heads import MHAHeads, QKVState, _apply

MODES = ("newton", "taylor")
OUTPUTS = ("pinv", "learned")
DAMPINGS = ("clamp", "abs", "add")
MOMENTS = ("auto", "float64", "float32")  # LiteHeads: the dtype of the call forming μ and E[v⊙v]
#: LiteHeads' "auto" moments: above this E[v⊙v]/|T_b| in a row, σ²'s float32 residue passes ~8u of |y|
LITE_RATIO = 8.0


class HeadTemperature(nn.Module):
    """Per-head positive temperature ``T_h = softplus(θ_h)`` (learned) or the fixed ``init`` exactly, in
    every dtype (an :class:`~energyformer.core.constants.ExactConstant`, not softplus of a rounded θ)."""

    param_roles = {"theta": "other_no_decay"}

    def __init__(self, heads: int, init: float, learn: bool = True, name: str = "temperature"):
        super().__init__()
        if isinstance(init, bool) or not isinstance(init, (int, float)) or not init > 0 or not math.isfinite(init):
            raise ConfigError(f"{name} = {init!r}: must be a finite number > 0 (a temperature)")
        if learn:
            self.theta = nn.Parameter(torch.full((heads,), _inverse_softplus(float(init))))
        else:
            self.fixed = ExactConstant([float(init)] * heads)  # (H,)

    def forward(self) -> Tensor:
        return F.softplus(self.theta) if hasattr(self, "theta") else self.fixed()


def damp(M: Tensor, kind: str, eps: float) -> Tensor:
    """Damped symmetric matrices (..., d, d): eigenvalues clamped to ≥ eps ('clamp'), |λ| ≥ eps
    ('abs', saddle-free Newton), or ``M + eps I`` ('add', may stay indefinite).

    'clamp' / 'abs' add the correction ``V diag(λ_ε − λ) Vᵀ`` computed without gradient: the value is
    exactly the clamped matrix, and the gradient flows through M alone (differentiating an
    eigendecomposition is unstable at the repeated eigenvalues M = I − C/T has when C is small).
    """
    eye = torch.eye(M.shape[-1], dtype=M.dtype, device=M.device)
    if kind == "add":
        return M + eps * eye
    with torch.no_grad():
        try:
            lam, V = torch.linalg.eigh(M.float() if M.dtype in (torch.float16, torch.bfloat16) else M)
        except torch.linalg.LinAlgError as err:  # NaN weights gave "linalg.eigh: ... failed to converge" (probe AS)
            if not bool(torch.isfinite(M).all()):
                from ..errors import NonFiniteOutput

                raise NonFiniteOutput("MHA2nd's Newton matrix I - C/T is not finite (NaN or inf in the weights, the "
                                      "input or the covariance C): no eigendecomposition to damp") from err
            raise
        target = lam.clamp_min(eps) if kind == "clamp" else lam.abs().clamp_min(eps)
        corr = ((V * (target - lam)[..., None, :]) @ V.transpose(-1, -2)).to(M.dtype)
    return M + corr


@register_energy("newton_heads")
class NewtonHeads(Energy):
    """MHA2nd (``mode='newton'``) and MHA2nd1st (``mode='taylor'``); see the module docstring."""

    exact = False

    def __init__(self, dim: int, heads: int, mode: str = "taylor", output: str = "pinv",
                 tie_values: bool = True, subtract_query: bool = True,
                 temperature_init: float | None = None, bias_temperature_init: float | None = None,
                 learn_temperature: bool = True, damping: str = "clamp", damping_eps: float = 0.1,
                 pinv_eps: float | None = None, dropout: float = 0.0, causal: bool = True, fp32_heads: bool = True):
        super().__init__()
        self.fp32_heads = bool(fp32_heads)
        check_int("heads", heads, min=1)
        if dim % heads:
            raise ValueError(f"heads = {heads}: must divide dim = {dim}")
        check_choice("mode", mode, MODES)
        check_choice("output", output, OUTPUTS)
        check_choice("damping", damping, DAMPINGS)
        check_float("damping_eps", damping_eps, min=0.0, min_exclusive=True)
        if pinv_eps is not None:
            check_float("pinv_eps", pinv_eps, min=0.0)
        self.dim, self.heads, self.head_dim = dim, heads, dim // heads
        self.mode, self.output, self.tie_values, self.subtract_query = mode, output, tie_values, subtract_query
        self.damping, self.damping_eps = damping, float(damping_eps)
        self.pinv_eps = None if pinv_eps is None else float(pinv_eps)
        self.dropout, self.causal = float(dropout), bool(causal)
        dh = self.head_dim
        self.wq = nn.Linear(dim, dim, bias=False)  # P_h stacked (H·dh × D)
        self.wk = nn.Linear(dim, dim, bias=False)  # W_h stacked
        self.wv = None if tie_values else nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False) if output == "learned" else None
        t0 = math.sqrt(dh) if temperature_init is None else temperature_init
        tb = math.sqrt(dh) if bias_temperature_init is None else bias_temperature_init
        self.temp_score = HeadTemperature(heads, t0, learn_temperature, "temperature_init")
        self.temp_bias = HeadTemperature(heads, tb, learn_temperature, "bias_temperature_init") \
            if mode == "taylor" else None

    # ------------------------------------------------------------------ state
    def prepare(self, context: Tensor, cache: dict | None = None, offset: int = 0,
                mask: Tensor | None = None, **kw) -> QKVState:
        k = split_heads(self._project(self.wk, context), self.heads)
        v = k if self.wv is None else split_heads(self._project(self.wv, context), self.heads)
        kv, key_mask = append_cache(cache, mask, k=k, v=v)
        return QKVState(context, split_heads(self._project(self.wq, context), self.heads), kv["k"], kv["v"], key_mask)

    def queries(self, u: Tensor, st: QKVState) -> Tensor:
        return st.q if u is st.h else split_heads(self._project(self.wq, u), self.heads)

    def _project(self, lin: nn.Linear, t: Tensor) -> Tensor:
        """``lin(t)``, under autocast in at least float32 (autocast off) with ``fp32_heads``, as the heads then run:
        the scores q·k − |k|²/2 and the centred covariance cancel terms of size |q|², |k|², which q and k rounded to
        bf16 carry at bf16's relative error — at weights ×100 under bf16 autocast MHA2nd1st's input gradient came
        out 3.7e3 times too large, finite (probe AU); with float32 projections 5e-3 of float64's. (A module cast to
        bf16 keeps its bf16 projections: its weights are bf16 already.)"""
        if self.fp32_heads and torch.is_autocast_enabled(t.device.type):
            return linear_at_least_float32(t, lin.weight, lin.bias)
        return lin(t)

    # ------------------------------------------------------------------ energy (elastic, D7)
    def _fe(self, u: Tensor, st: QKVState):
        vis = visible(u.shape[1], st.k.shape[2], self.causal, st.key_mask, u.device)
        return free_energy_heads(self.queries(u, st), st.k, self.temp_score().to(u.dtype), "elastic", vis)

    def energy(self, u: Tensor, st: QKVState) -> Tensor:
        return self._fe(u, st)[0].mean(1)

    def grad(self, u: Tensor, st: QKVState) -> Tensor:
        return merge_heads(self._fe(u, st)[1] / self.heads) @ self.wq.weight

    # ------------------------------------------------------------------ output map
    def ridge(self, G: Tensor) -> Tensor:
        """``G + ε_h I`` for Gram matrices G (..., dh, dh), ``ε_h = pinv_eps · tr(G)/dh`` (module docstring)."""
        eps = torch.finfo(G.dtype).eps if self.pinv_eps is None else self.pinv_eps
        if not eps:
            return G
        scale = G.diagonal(dim1=-2, dim2=-1).mean(-1)  # mean squared singular value of P_h
        ridge = (eps * scale).clamp_min(torch.finfo(G.dtype).tiny)  # P_h = 0 gives P_h⁺ = 0
        return G + ridge[..., None, None] * torch.eye(G.shape[-1], dtype=G.dtype, device=G.device)

    def pinv_rows(self) -> Tensor:
        """Stacked ``(P_h⁺)ᵀ = (P_h P_hᵀ + ε_h I)⁻¹ P_h`` as an (H·dh × D) matrix (weight-only work).

        Solved in at least float32 (bf16/fp16 weights are upcast for the d_h×d_h solve), returned in the
        weights' dtype so that :meth:`out_map` multiplies like with like (a float32 result crashed the
        matmul with bf16 heads in a model cast to bf16)."""
        w = self.wq.weight
        with autocast_off(w.device.type):  # a d_h x d_h solve: float32 at least
            P = w.float().view(self.heads, self.head_dim, self.dim) if w.dtype in (torch.float16, torch.bfloat16) \
                else w.view(self.heads, self.head_dim, self.dim)  # (H, dh, D)
            G = self.ridge(P @ P.transpose(-1, -2))  # (H, dh, dh)
            return torch.linalg.solve(G, P).reshape(self.heads * self.head_dim, self.dim).to(w.dtype)

    def out_map(self, o: Tensor) -> Tensor:
        """(B, H, N, dh) per-head steps -> (B, N, D)."""
        if self.output == "learned":
            return self.wo(merge_heads(o))
        return merge_heads(o) @ self.pinv_rows().to(o.dtype)  # like with like (o is in autocast's dtype under it)

    # ------------------------------------------------------------------ the batched update
    def head_steps(self, q: Tensor, st: QKVState) -> Tensor:
        """Per-head step o (B, H, N, dh) before the output map.

        Computed in at least float32 (autocast off) unless ``fp32_heads`` is False: the bias
        ``Σ_j p_ij (v_j·a_i) v_j − (μ_i·a_i) μ_i`` cancels two large terms when attention is peaked
        (in bf16 its relative error reached 2.8 at logits ~1e3 in tests/energies/test_free_energy.py).
        """
        if self.fp32_heads and (q.dtype in (torch.float16, torch.bfloat16) or torch.is_autocast_enabled(q.device.type)):
            dt = torch.promote_types(q.dtype, torch.float32)
            with autocast_off(q.device.type):
                st32 = QKVState(st.h, st.q, st.k.to(dt), st.v.to(dt), st.key_mask)
                return self._head_steps(q.to(dt), st32).to(q.dtype)
        return self._head_steps(q, st)

    def _head_steps(self, q: Tensor, st: QKVState) -> Tensor:
        k, v = st.k, st.v
        Ts = self.temp_score().to(q.dtype)[None, :, None, None]
        raw = q @ k.transpose(-1, -2) - 0.5 * (k * k).sum(-1)[:, :, None, :]     # (B, H, N, Nk)
        vis = visible(q.shape[2], k.shape[2], self.causal, st.key_mask, q.device)
        # each row shifted by its largest visible logit (a constant: softmax and, since a row's dS sums to zero,
        # every gradient are unchanged) before dividing by T_s: unshifted, T_s's gradient Σ dS·s/T_s summed
        # logits of size |k|² whose shares cancel — in float32 at weights x10 it was 1 % off, sign flipped for
        # one head before the covariance below was centred too; shifted, within 2e-5 of float64
        seen = raw.detach() if vis is None else raw.detach().masked_fill(~vis, float("-inf"))
        top = seen.amax(-1, keepdim=True)                                           # (B, H, N, 1)
        s = (raw - torch.where(torch.isfinite(top), top, torch.zeros_like(top))) / Ts
        p = masked_softmax(s, vis)
        if self.training and self.dropout:
            p = F.dropout(p, self.dropout)
        mu = p @ v                                       # (B, H, N, dh)
        a = mu - q if self.subtract_query else mu
        if self.mode == "taylor":
            return a + self._taylor_bias(p, v, mu, a) / self.temp_bias().to(q.dtype)[None, :, None, None]
        C = self._covariance(p, v, mu)
        eye = torch.eye(self.head_dim, dtype=q.dtype, device=q.device)
        M = damp(eye - C / Ts[..., None], self.damping, self.damping_eps)
        with autocast_off(q.device.type):  # batched d_h x d_h solves in float32
            dt = torch.promote_types(q.dtype, torch.float32)
            return torch.linalg.solve(M.to(dt), a.to(dt)[..., None])[..., 0].to(q.dtype)

    def _covariance(self, p: Tensor, v: Tensor, mu: Tensor) -> Tensor:
        """C_i = Σ_j p_ij v_j v_jᵀ − μ_i μ_iᵀ (B, H, N, dh, dh), taken about c_i = v_{j*(i)}, each query's heaviest
        value, as :meth:`_taylor_bias` takes C a: ``C_i = Σ_j p_ij (v_j − c_i)(v_j − c_i)ᵀ − (μ_i − c_i)(μ_i − c_i)ᵀ``.
        The unshifted form cancels two terms of size |v|² when attention is peaked: with weights x10 its float32
        gradients were off by 16 % (W_K) and the score temperature's by 200 %, sign flipped, against 4e-5 from
        float64 under float32-sized perturbations. Dropped-out weights (training) do not sum to one: the term
        ``(S_i − 1) c_i c_iᵀ``, S_i = Σ_j p_ij, restores the unshifted formula exactly. The centred values
        (v_j − c_i) are one (B, H, N, Nk, dh) tensor: MHA2nd is the slow reference (per-token solves)."""
        j = p.argmax(-1, keepdim=True)                                # (B, H, N, 1) heaviest key
        c = torch.gather(v, 2, j.expand(*j.shape[:-1], v.shape[-1]))  # (B, H, N, dh)
        vc = v[:, :, None] - c[..., None, :]                          # (B, H, N, Nk, dh)
        d = mu - c
        C = (vc * p[..., None]).transpose(-1, -2) @ vc - d[..., :, None] * d[..., None, :]
        if self.training and self.dropout:
            C = C - (p.sum(-1) - 1)[..., None, None] * c[..., :, None] * c[..., None, :]
        return C

    def _taylor_bias(self, p: Tensor, v: Tensor, mu: Tensor, a: Tensor) -> Tensor:
        """C_i a_i = Σ_j p_ij (v_j·a_i) v_j − (μ_i·a_i) μ_i, shifted per query (B, H, N, dh).

        The two terms are each of size |v|²|a| and cancel when attention is peaked (issue 23: in
        float32 at weights x1e4 the difference was off by more than its size). The covariance is
        shift-invariant for Σ_j p_ij = 1, so it is computed about c_i = v_{j*(i)}, the value of each
        query's heaviest key: ``C_i a_i = Σ_j p_ij g'_ij (v_j − c_i) − (μ_i − c_i)((μ_i − c_i)·a_i)``
        with ``g'_ij = v_j·a_i − c_i·a_i`` (c_i·a_i read from the same N×N product, so g'_ij* = 0
        exactly). Rounding now scales with |v − c| instead of |v|; memory stays O(N²) (no N×N×d_h
        centred values). Dropped-out weights (training) do not sum to one: the term
        ``(S_i − 1)(c_i·a_i) c_i``, S_i = Σ_j p_ij, restores the unshifted formula exactly.
        """
        g = a @ v.transpose(-1, -2)                                   # v_j·a_i first: (B, H, N, Nk)
        j = p.argmax(-1, keepdim=True)                                # (B, H, N, 1) heaviest key
        c = torch.gather(v, 2, j.expand(*j.shape[:-1], v.shape[-1]))  # (B, H, N, dh) = v_{j*(i)}
        gc = g.gather(-1, j)                                          # (B, H, N, 1) = c_i·a_i
        w = p * (g - gc)                                              # p_ij g'_ij
        d = mu - c
        Ca = w @ v - w.sum(-1, keepdim=True) * c - (d * a).sum(-1, keepdim=True) * d
        if self.training and self.dropout:
            Ca = Ca - (p.sum(-1, keepdim=True) - 1) * gc * c
        return Ca

    def direction(self, u: Tensor, st: QKVState, precond) -> Tensor:
        d = self.out_map(self.head_steps(self.queries(u, st), st))
        if self.training and self.dropout:
            d = F.dropout(d, self.dropout)  # residual dropout, as MHA
        return _apply(precond, d)

    # ------------------------------------------------------------------ the slow, obvious formula
    def reference_direction(self, u: Tensor, st: QKVState, precond) -> Tensor:
        q = self.queries(u, st)
        Ts = self.temp_score()
        Tb = self.temp_bias() if self.temp_bias is not None else None
        vis = visible(u.shape[1], st.k.shape[2], self.causal, st.key_mask, u.device)
        B, H, N, dh = q.shape
        out = torch.zeros_like(q)
        eye = torch.eye(dh, dtype=q.dtype)
        for b in range(B):
            for h in range(H):
                for i in range(N):
                    js = torch.arange(st.k.shape[2]) if vis is None else vis[min(b, vis.shape[0] - 1), 0, i].nonzero()[:, 0]
                    k, v, qi = st.k[b, h, js], st.v[b, h, js], q[b, h, i]
                    logits = torch.stack([(qi @ kj - 0.5 * kj @ kj) / Ts[h] for kj in k])
                    w = torch.exp(logits - logits.max())
                    p = w / w.sum()
                    mu = (p[:, None] * v).sum(0)
                    C = sum(p[j] * torch.outer(v[j] - mu, v[j] - mu) for j in range(len(js)))
                    a = mu - qi if self.subtract_query else mu
                    if self.mode == "taylor":
                        out[b, h, i] = a + C @ a / Tb[h]
                    else:
                        lam, V = torch.linalg.eigh(eye - C / Ts[h])
                        lam = {"clamp": lam.clamp_min(self.damping_eps),
                               "abs": lam.abs().clamp_min(self.damping_eps),
                               "add": lam + self.damping_eps}[self.damping]
                        out[b, h, i] = V @ ((V.T @ a) / lam)
        if self.output == "learned":
            d = self.wo(merge_heads(out))
        else:
            P = self.wq.weight.view(H, dh, self.dim).detach()
            eps = torch.finfo(P.dtype).eps if self.pinv_eps is None else self.pinv_eps
            pinv = [torch.linalg.pinv(P[h]) if not eps else P[h].T @ torch.linalg.inv(
                P[h] @ P[h].T + eps * float((P[h] ** 2).sum()) / dh * eye) for h in range(H)]
            d = sum(out[:, h] @ pinv[h].T for h in range(H))
        return _apply(precond, d)

    @classmethod
    def examples(cls, dtype=torch.float64):
        out = []
        for mode, output, tie, damping in (("taylor", "pinv", True, "clamp"), ("taylor", "learned", False, "clamp"),
                                           ("newton", "pinv", True, "clamp"), ("newton", "pinv", True, "abs"),
                                           ("newton", "learned", False, "add")):
            torch.manual_seed(17)
            e = cls(8, 2, mode=mode, output=output, tie_values=tie, damping=damping, pinv_eps=0.0,
                    temperature_init=1.3, bias_temperature_init=2.1).to(dtype)
            with torch.no_grad():
                for lin in (e.wq, e.wk, e.wv, e.wo):
                    if lin is not None:
                        lin.weight.normal_(0, 0.5)
            g = torch.Generator().manual_seed(18)
            ctx, x = (torch.randn(2, 5, 8, generator=g, dtype=dtype) for _ in range(2))
            out.append((f"{mode},{output},tie_values={tie},damping={damping}", e, ctx, x))
        return out


@register_energy("lite_heads")
class LiteHeads(MHAHeads):
    """MHA2nd-lite (App. A.7.2): MHA with ``o = μ + σ²⊙μ / T_b`` and learnable ``T_s``, ``T_b`` per head."""

    def __init__(self, dim: int, heads: int, dropout: float = 0.0, causal: bool = True,
                 temperature_init: float | None = None, bias_temperature_init: float | None = None,
                 learn_temperature: bool = True, moments: str = "auto", fp32_heads: bool = True):
        super().__init__(dim, heads, dropout, causal)
        if moments not in MOMENTS:
            raise ValueError(f"LiteHeads: moments={moments!r}; allowed: {', '.join(MOMENTS)}")
        self.moments, self.fp32_heads = moments, bool(fp32_heads)
        dh = self.head_dim
        self.temp_score = HeadTemperature(heads, math.sqrt(dh) if temperature_init is None else temperature_init,
                                          learn_temperature, "temperature_init")
        self.temp_bias = HeadTemperature(heads, math.sqrt(dh) if bias_temperature_init is None
                                         else bias_temperature_init, learn_temperature, "bias_temperature_init")

    def score_temperature(self, ref: Tensor) -> Tensor:
        return self.temp_score().to(ref.dtype)

    def project_qkv(self, t: Tensor) -> Tensor:
        """``c_attn(t)``; under autocast with ``fp32_heads`` (default) in float32, forward and backward: the
        gradient reaching the projection from σ²⊙μ/T_b sums q, k and v routes that cancel, which a bf16 incoming
        gradient and bf16 product carry at bf16's relative error — at weights ×100 under bf16 autocast the input
        gradient was 8.4 times the fuzz rule's bound, 970 times its own size, with the moments in float64 too;
        2.5e-3 of its size with float32 projections (tests/energies/test_lite_moments.py). The keys and values then
        stay float32 in a KV cache, as NewtonHeads' do."""
        if self.fp32_heads and torch.is_autocast_enabled(t.device.type):
            return linear_at_least_float32(t, self.c_attn.weight, self.c_attn.bias)
        return self.c_attn(t)

    def project_queries(self, u: Tensor) -> Tensor:
        if self.fp32_heads and torch.is_autocast_enabled(u.device.type):
            return linear_at_least_float32(u, self.c_attn.weight[: self.dim], self.c_attn.bias[: self.dim])
        return super().project_queries(u)

    def attend(self, q: Tensor, st: QKVState) -> Tensor:
        """``μ + σ²⊙μ / T_b`` with ``σ² = E[v⊙v] − μ⊙μ`` from one SDPA call on the values ``[v, v⊙v]``.

        The difference cancels where one key dominates (σ² ≪ E[v⊙v]), leaving ~u·E[v⊙v] of rounding in the dtype
        the call runs in, in the output (relative to |y| ≈ |μ|: ~u·E[v⊙v]/T_b) and in both of its gradient's routes
        (through E[v⊙v] and through μ⊙μ). No float32 form removes it: the shift of v that would is per query
        (σ² = E[(v − μ_i)²]), which one SDPA call cannot take, and a float32 softmax summing to 1 + ε leaves ε·μ²
        even with exact products. ``moments`` says what runs (the output always in the working dtype, autocast's or
        q's; bf16/float16 inputs never run the call in their own dtype: the statistic in bf16 was 11% off in one
        probe):

        * ``"auto"`` (default): the call in float32 and, where some row's E[v⊙v]/|T_b| exceeds :data:`LITE_RATIO`
          (the residue then passes ~8u of |y|; float32 at weights ×100 was 4.5 times the fuzz rule's bound, err
          8.1 at |y| 5.5e4, and the bf16-autocast input gradient 54 times off float64's, probe AU; at ×200-1000
          still 2.6-110 times the bound with the projection in float32, :meth:`project_qkv`), the call again in
          float64 (float32 on MPS). The test reads one bool on the host: free on a CPU, one synchronisation per
          call on an accelerator; under torch.compile or CUDA-graph capture, which allow no host read, both are
          computed and the rows chosen with ``where``.
        * ``"float64"``: always float64 (slower; a float64 SDPA on CUDA is PyTorch's math backend, which forms the
          N × N probabilities).
        * ``"float32"``: never float64: the old form, fastest, with the residue above at large values.
        """
        out_dtype = autocast_dtype(q.dtype, q.device.type)
        wide = widest_float(q.device)
        work = wide if self.moments == "float64" else torch.promote_types(out_dtype, torch.float32)
        check = self.moments == "auto" and work != wide
        out, risky = self._moments(q, st, work, check)
        if not check:
            return out.to(out_dtype)
        if no_host_sync(risky):
            return torch.where(risky, self._moments(q, st, wide)[0].to(out.dtype), out).to(out_dtype)
        if bool(risky.any()):
            out = self._moments(q, st, wide)[0]
        return out.to(out_dtype)

    def _moments(self, q: Tensor, st: QKVState, work: torch.dtype, check: bool = False
                 ) -> tuple[Tensor, Tensor | None]:
        """The output (B, H, N, dh) with the call and the difference in ``work``, and with ``check`` the rows
        (B, H, N, 1 bool) whose E[v⊙v]/|T_b| exceeds :data:`LITE_RATIO` in some channel (else None)."""
        with autocast_off(q.device.type):
            q, k, v = q.to(work), st.k.to(work), st.v.to(work)
            Ts = self.score_temperature(q)[None, :, None, None]
            Tb = self.temp_bias().to(work)[None, :, None, None]
            vv = torch.cat([v, v * v], dim=-1)  # values [v, v⊙v]: μ and E[v⊙v] in one call
            o = sdpa(q / Ts, k, vv, self.causal, st.key_mask, self.dropout if self.training else 0.0, scale=1.0)
            mu, m2 = o.split(self.head_dim, dim=-1)
            risky = m2.detach().amax(-1, keepdim=True) > LITE_RATIO * Tb.detach().abs() if check else None
            return mu + (m2 - mu * mu) * mu / Tb, risky

    def head_reference(self, q: Tensor, k: Tensor, v: Tensor, T: Tensor) -> Tensor:
        raise AssertionError("unused")  # replaced by reference_direction below

    def reference_direction(self, u: Tensor, st: QKVState, precond) -> Tensor:
        q = self.queries(u, st)
        Ts, Tb = self.temp_score(), self.temp_bias()
        vis = visible(u.shape[1], st.k.shape[2], self.causal, st.key_mask, u.device)
        out = torch.zeros_like(q)
        B, H, N, _ = q.shape
        for b in range(B):
            for h in range(H):
                for i in range(N):
                    js = torch.arange(st.k.shape[2]) if vis is None else vis[min(b, vis.shape[0] - 1), 0, i].nonzero()[:, 0]
                    k, v = st.k[b, h, js], st.v[b, h, js]
                    s = (k @ q[b, h, i]) / Ts[h]
                    p = torch.softmax(s, 0)
                    mu = (p[:, None] * v).sum(0)
                    var = (p[:, None] * (v - mu) ** 2).sum(0)
                    out[b, h, i] = mu + var * mu / Tb[h]
        return _apply(precond, self.c_proj(merge_heads(out)))

    @classmethod
    def examples(cls, dtype=torch.float64):
        out = []
        for causal in (True, False):
            torch.manual_seed(19)
            e = cls(8, 2, causal=causal, temperature_init=1.7, bias_temperature_init=0.9).to(dtype)
            with torch.no_grad():
                e.c_attn.weight.normal_(0, 0.5)
                e.c_attn.bias.normal_(0, 0.1)
            g = torch.Generator().manual_seed(20)
            ctx, x = (torch.randn(2, 5, 8, generator=g, dtype=dtype) for _ in range(2))
            out.append((f"causal={causal}", e, ctx, x))
        return out


__all__ = ["NewtonHeads", "LiteHeads", "HeadTemperature", "damp", "HeadsState"]
