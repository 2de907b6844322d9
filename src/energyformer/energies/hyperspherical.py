"""Hyper-SET's hyperspherical energies (seed 002, §4.1-4.2, App. C).

**Attention energy** (repulsion in H subspaces of dimension p, Eq. 3-4, registered ``hyperset_attention``)::

    z_i^h = W_hᵀ x_i,   E_ATTN = Σ_h β⁻¹ Σ_i log Σ_j exp(β z_i^hᵀ z_j^h),   ‖z_i^h‖ = √p,  β = 1/√p

The inner sum runs over every j, i = j included (Eq. 3); ``self_interaction=False`` drops j = i. Its
total derivative (every token moves, App. C.1) is the bi-softmax operator, read out through W:

    −∇_X E_ATTN = −Σ_h W_h Z^h (softmax_col(S^h) + softmax_row(S^h)),   S^h = β Z^hᵀ Z^h     (Eq. 7)

**Feed-forward energy** (attraction to the columns of D, Eq. 5, registered ``hyperset_ff``)::

    E_FF = −½ Σ_i Σ_m ReLU(d_mᵀ x_i)²,   ‖Dᵀ x_i‖ = √M,     −∇ E_FF = D ReLU(Dᵀ X)            (Eq. 10)

**The sphere constraint** (``sphere=True``, the layer's setting): the projections are put on their
sphere by RMSNorm (Eq. 8; gain 1, so radius √p resp. √M) and the update is the gradient *evaluated
at the normalised projections* (Eq. 9, 11). Where a point already satisfies the constraint
(‖W_hᵀ x_i‖ = √p for all h, i; ‖Dᵀ x_i‖ = √M) RMSNorm is the identity (its ``eps`` defaults to
:data:`SPHERE_EPS` = 1e-24, so that this holds to rounding and tokens of any magnitude, 1e-4 as 1e4, land on
the sphere; a larger eps would leave small tokens off it) and the update equals
−∇E exactly (tested). Elsewhere it is *not* the gradient of x ↦ E(RMSNorm(·)): that gradient is the
update's component tangent to the sphere, scaled by √p/‖z‖ (the RMSNorm Jacobian removes the radial
part). So ``sphere=True`` energies report ``exact = False``; their ``energy`` is E at the normalised
projections (what the paper plots, Fig. 5 caption) and ``reference_direction`` is an independent
formula of the update (the einsum bi-softmax; autograd at the normalised projections for the FF).
``sphere=False`` gives the plain energies with closed-form, exact gradients.

Options where the paper and the released code differ (paper = default): ``qkv_norm='shared'`` (one
projection, one sphere: symmetric scores) vs ``'separate'`` (the image code's three learnable
RMSNorms on Q, K, V: the scores are no longer symmetric and the update is no gradient at all);
``gain='fixed'`` (radius exactly √p, the paper) vs ``'learned'`` (nn.RMSNorm's gain, the code).

Key padding (``prepare(context, mask=m)``, True = real token): the energies sum over real tokens, with real
keys only, so ∂E/∂x is 0 at a padded token; ``grad``, ``direction`` and ``reference_direction`` return 0
there on every path (:func:`real_tokens`), where the operators alone fill every query row.

LoRA: a sublayer may set ``energy.delta`` (a tensor shaped like the projection weight) before a call;
the projection is then W + ΔW in and out (depth-wise LoRA, seed App. G.2).

The alternatives of Tables 19-20 (sigmoid and linear attention, softmax and gated feed-forward) are in
:mod:`energyformer.energies.hyperspherical_alt`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..core.attention import key_padding_mask
from ..core.energy import Energy, register_energy
from ..core.precond import Preconditioner
from ..utils.validate import check_choice, check_int
from . import hyperspherical_ffkernel as ffk
from .hyperspherical_kernel import MAX_TOKENS, bisoftmax_symmetric_kernel, triton_available
from .hyperspherical_ops import bisoftmax_einsum, bisoftmax_fused, bisoftmax_symmetric, chunked_lse, sphere_rms_norm

GAINS = ("fixed", "learned")
QKV_NORMS = ("shared", "separate")
IMPLS = ("fused", "einsum", "auto", "kernel")
#: ``impl='auto'`` uses the fused path from this many tokens on and the einsum path below (CPU,
#: benchmarks/hyperset_attention.py: the materialised scores are faster at N = 81 and 256, the fused
#: path at N >= 1024; docs/results/hyperset/benchmark.md).
AUTO_FUSED_MIN_TOKENS = 512


@dataclass
class SubspaceState:
    """Projections of the context (the iterate) once per call.

    context: (B, N, D) the point they were taken at; q, k, v: (B, H, N, p) (one tensor three times
    when ``qkv_norm='shared'``); mask: SDPA mask (True = visible) or None; tokens: (B, N) bool real
    tokens or None.
    """

    context: Tensor
    q: Tensor
    k: Tensor
    v: Tensor
    mask: Tensor | None
    tokens: Tensor | None


#: Default eps of the sphere norms, the same in every dtype: small enough that a token of RMS 1e-10 is put on
#: the sphere to 1e-4 (1e-4 ones to rounding), large enough that rms_norm's autograd (F.rms_norm: float64,
#: learned gains, CUDA's fused kernel), which forms (mean z² + eps)^(-3/2) = 1e36 at z = 0, stays finite in
#: float32 and bf16, so that a zero projection (a zero token) has one finite gradient, r·g with r = 1e12, in
#: every precision and path. It was the dtype's smallest normal number: r³ overflowed to inf and inf · 0 gave
#: NaN gradients in float64 (the reference) and on those paths, 9.2e18 · g on the custom float32 one.
SPHERE_EPS = 1e-24


def real_tokens(t: Tensor, tokens: Tensor | None) -> Tensor:
    """t (B, N, …) with the rows of padded tokens set to 0 (``tokens``: (B, N) bool, True = real; None: t itself).

    The energies sum over real tokens and see padded ones through no key, so ∂E/∂x is 0 at a padded token; the
    operators, computed for every query row (the fused and kernel paths cannot skip rows), would send a finite,
    wrong number there. One multiply, only when a mask is given."""
    return t if tokens is None else t * tokens.reshape(*tokens.shape, *(1,) * (t.dim() - 2)).to(t.dtype)


class SubspaceAttentionEnergy(Energy):
    """Base of the attention energies on H subspaces: Σ_h Σ_i e_i^h(Z^h), Z^h = sphere(W_hᵀ X).

    Subclasses give ``head_energy(q, k, mask) -> (B, H, N)`` and ``operator(state) -> (B, H, N, p)``
    (the update in projection space: ∂/∂u of Σ_i e_i at u = the projections, for shared norms).
    """

    context_is_iterate = True

    def __init__(self, dim: int, heads: int, head_dim: int | None = None, *, sphere: bool = True,
                 gain: str = "fixed", qkv_norm: str = "shared", self_interaction: bool = True,
                 beta: float | None = None, eps: float | None = None):
        super().__init__()
        check_int("dim", dim, min=1)
        check_int("heads", heads, min=1)
        if head_dim is None:
            if dim % heads:
                raise ValueError(f"heads = {heads}: must divide dim = {dim} (or give head_dim)")
            head_dim = dim // heads
        check_int("head_dim", head_dim, min=1)
        check_choice("gain", gain, GAINS)
        check_choice("qkv_norm", qkv_norm, QKV_NORMS)
        if qkv_norm == "separate" and not sphere:
            raise ValueError("qkv_norm = 'separate': needs sphere = True (the norms are the separation)")
        self.dim, self.heads, self.head_dim = dim, heads, head_dim
        self.sphere, self.gain, self.qkv_norm = bool(sphere), gain, qkv_norm
        self.self_interaction = bool(self_interaction)
        if beta is not None and (not math.isfinite(beta) or beta == 0):
            raise ValueError(f"beta = {beta!r}: must be a finite non-zero number (None: 1/√p)")
        self.beta = 1.0 / math.sqrt(head_dim) if beta is None else float(beta)
        self.eps = eps
        self.proj = nn.Linear(dim, heads * head_dim, bias=False)  # weight = Wᵀ: (H p, D)
        n_gains = (3 if qkv_norm == "separate" else 1) if sphere and gain == "learned" else 0
        self.gains = nn.ParameterList([nn.Parameter(torch.ones(head_dim)) for _ in range(n_gains)])
        self.param_roles = {f"gains.{i}": "norm" for i in range(n_gains)}
        self.delta: Tensor | None = None

    @property
    def symmetric(self) -> bool:
        return self.qkv_norm == "shared"

    @property
    def exact(self) -> bool:  # type: ignore[override]
        return not self.sphere and self.symmetric

    # ------------------------------------------------------------------ projections
    def weight(self) -> Tensor:
        """Wᵀ (H p, D), plus the LoRA delta when one is set."""
        w = self.proj.weight
        return w if self.delta is None else w + self.delta.to(w.dtype)

    def _tokens_heads(self, x: Tensor) -> Tensor:
        """(B, N, D) -> raw projections W_hᵀ x_i in the linear's memory order: (B, N, H, p), a view."""
        return F.linear(x, self.weight()).unflatten(-1, (self.heads, self.head_dim))

    def project(self, x: Tensor) -> Tensor:
        """(B, N, D) -> raw projections W_hᵀ x_i: (B, H, N, p) (a view of (B, N, H p) memory)."""
        return self._tokens_heads(x).transpose(1, 2)

    def _norm(self, z: Tensor, i: int) -> Tensor:
        """Sphere norm ``i`` (the shared one, or q / k / v) of projections z (…, p), or z without the sphere."""
        if not self.sphere:
            return z
        w = self.gains[i] if len(self.gains) else None
        eps = SPHERE_EPS if self.eps is None else self.eps
        return sphere_rms_norm(z, eps, w.to(z.dtype) if w is not None else None)

    def _spheres(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(q, k, v), each (B, H, N, p): the normalised projections, one tensor three times with one shared
        norm. Normalised in the linear's (B, N, H, p) memory order (contiguous rows of p) and returned as
        (B, H, N, p) views of it: no permutation to undo and no copy, the layout the kernels and the
        read-out read (the same numbers as normalising the (B, H, N, p) view)."""
        z = self._tokens_heads(x)
        if self.symmetric:
            q = self._norm(z, 0).transpose(1, 2)
            return q, q, q
        q, k, v = (self._norm(z, i).transpose(1, 2) for i in range(3))
        return q, k, v

    def spherical(self, x: Tensor) -> Tensor:
        """The normalised projections RMSNorm(W_hᵀ x) (radius √p with gain 1): (B, H, N, p)."""
        return self._norm(self._tokens_heads(x), 0).transpose(1, 2)

    def readout(self, y: Tensor) -> Tensor:
        """Σ_h W_h y^h: (B, H, N, p) -> (B, N, D) (the tied output, Eq. 9).

        ``y @ Wᵀ`` with the weight itself (not ``F.linear`` of its transpose): under autocast the cast of a
        leaf parameter is cached for the forward pass, so the projection and the read-out share one
        low-precision copy of W, and its gradient is accumulated once, not cast per iteration."""
        return torch.matmul(y.transpose(1, 2).flatten(2), self.weight())  # "b h n p -> b n (h p)"

    # ------------------------------------------------------------------ state
    def prepare(self, context: Tensor, mask: Tensor | None = None, **kw: Any) -> SubspaceState:
        q, k, v = self._spheres(context)
        n = context.shape[1]
        sdpa = key_padding_mask(mask)  # (B, 1, 1, N) or None
        if not self.self_interaction:
            off = ~torch.eye(n, dtype=torch.bool, device=context.device)[None, None]  # (1, 1, N, N)
            sdpa = off if sdpa is None else (sdpa & off)
        tokens = None if mask is None else mask.to(torch.bool)
        return SubspaceState(context, q, k, v, sdpa, tokens)

    def reprepare(self, state: SubspaceState, u: Tensor) -> SubspaceState:
        return state if u is state.context else self.prepare(u, mask=state.tokens)

    def _at(self, x: Tensor, state: SubspaceState) -> SubspaceState:
        return self.reprepare(state, x)

    # ------------------------------------------------------------------ energy, update
    def head_energy(self, q: Tensor, k: Tensor, mask: Tensor | None) -> Tensor:  # pragma: no cover
        raise NotImplementedError

    def operator(self, st: SubspaceState) -> Tensor:  # pragma: no cover
        raise NotImplementedError

    def energy_heads(self, x: Tensor, state: SubspaceState) -> Tensor:
        """(B, H, N) per-subspace, per-token energy (queries from x, keys from the context)."""
        q = state.q if x is state.context else self.spherical(x)
        e = self.head_energy(q, state.k, state.mask)
        return e if state.tokens is None else e * state.tokens[:, None, :].to(e.dtype)

    def energy(self, x: Tensor, state: SubspaceState) -> Tensor:
        return self.energy_heads(x, state).sum(1)  # (B, N)

    def neg_operator(self, st: SubspaceState) -> Tensor:
        """−operator(st) (subclasses may fold the sign into their last matmul)."""
        return -self.operator(st)

    def direction(self, x: Tensor, state: SubspaceState, precond: Preconditioner) -> Tensor:
        # −P W y = P W (−y): preconditioner and read-out are linear, so the sign goes to the operator; padded
        # tokens get 0 (the operator fills every query row; the energy does not depend on them: real_tokens)
        st = self._at(x, state)
        return precond(real_tokens(self.readout(self.neg_operator(st)), st.tokens))

    def grad(self, x: Tensor, state: SubspaceState) -> Tensor:
        if self.exact:  # closed form: the operator at the raw projections is the total derivative (0 at padding)
            st = self._at(x, state)
            return real_tokens(self.readout(self.operator(st)), st.tokens)
        return super().grad(x, state)

    def reference_operator(self, st: SubspaceState) -> Tensor:
        """Autograd of Σ_i e_i(U) with respect to the projections U, held at their values."""
        if not self.symmetric:
            raise NotImplementedError(f"{type(self).__name__}: qkv_norm = 'separate' has no reference")
        with torch.enable_grad():
            u = st.q.detach().requires_grad_(True)
            e = self.head_energy(u, u, st.mask)
            if st.tokens is not None:
                e = e * st.tokens[:, None, :].to(e.dtype)
            (g,) = torch.autograd.grad(e.sum(), u)
        return g

    def reference_direction(self, x: Tensor, state: SubspaceState, precond: Preconditioner) -> Tensor:
        st = self._at(x, state)
        return -precond(real_tokens(self.readout(self.reference_operator(st)), st.tokens))

    def extra_repr(self) -> str:
        return (f"dim={self.dim}, heads={self.heads}, head_dim={self.head_dim}, sphere={self.sphere}, "
                f"gain={self.gain!r}, qkv_norm={self.qkv_norm!r}, self_interaction={self.self_interaction}")


def _attention_examples(cls, dtype: torch.dtype, variants: list[dict]) -> list:
    out = []
    for i, kw in enumerate(variants):
        torch.manual_seed(100 + i)
        g = torch.Generator().manual_seed(i)
        e = cls(8, 2, **kw).to(dtype)
        with torch.no_grad():
            e.proj.weight.normal_(0, 0.6, generator=g)
            for p in e.gains:
                p.uniform_(0.5, 1.5, generator=g)
        ctx = torch.randn(2, 6, 8, generator=g, dtype=dtype)
        label = ",".join(f"{k}={v}" for k, v in kw.items()) or "default"
        out.append((label, e, ctx, ctx.clone()))
    return out


@register_energy("hyperset_attention")
class BiSoftmaxAttentionEnergy(SubspaceAttentionEnergy):
    """E_ATTN (Eq. 3-4): Σ_h β⁻¹ Σ_i LSE_j(β z_iᵀ z_j); update = bi-softmax attention read out by W (Eq. 9).

    ``impl='fused'`` (default) computes the operator with two SDPA passes and one chunked
    log-sum-exp (:func:`~energyformer.energies.hyperspherical_ops.bisoftmax_fused`), no N x N matrix;
    ``'einsum'`` materialises the scores (the reference; also what ``reference_direction`` uses);
    ``'kernel'`` runs the symmetric bi-softmax as one Triton program per sequence and head
    (:mod:`~energyformer.energies.hyperspherical_kernel`: one shared sphere, self-interaction, no padding,
    at most :data:`~energyformer.energies.hyperspherical_kernel.MAX_TOKENS` tokens); ``'auto'`` takes the
    kernel on CUDA wherever it applies (:meth:`auto_kernel`), else the einsum path below
    :data:`AUTO_FUSED_MIN_TOKENS` tokens (faster there) and the fused one from it on (faster and far
    smaller there).
    """

    def __init__(self, dim: int, heads: int, head_dim: int | None = None, *, impl: str = "fused", **kw: Any):
        super().__init__(dim, heads, head_dim, **kw)
        check_choice("impl", impl, IMPLS)
        if impl == "kernel" and not (self.symmetric and self.self_interaction):
            raise ValueError("impl = 'kernel' covers one shared sphere with self-interaction (qkv_norm 'shared', "
                             "self_interaction true); use impl 'auto'")
        self.impl = impl

    @classmethod
    def examples(cls, dtype=torch.float64):
        return _attention_examples(cls, dtype, [
            {"sphere": False}, {"sphere": False, "self_interaction": False}, {},
            {"self_interaction": False}, {"gain": "learned"}, {"impl": "einsum"},
            {"qkv_norm": "separate", "gain": "learned"}, {"beta": -0.5}, {"beta": -0.5, "impl": "fused"},
            {"beta": -0.5, "self_interaction": False, "impl": "fused"}])

    def head_energy(self, q, k, mask):
        return chunked_lse(q, k, self.beta, mask) / self.beta  # (B, H, N), at least float32

    def operator(self, st: SubspaceState, negate: bool = False) -> Tensor:
        """The bi-softmax (B, H, N, p) (−it with ``negate``). The materialised path with one shared sphere
        and no mask (Q = K, S = Sᵀ: the Sudoku model) runs as :func:`bisoftmax_symmetric`, the same maths in
        fewer passes with the sign in its last matmul; masks and separate norms take ``bisoftmax_einsum``."""
        n = st.q.shape[2]
        if self.impl == "kernel" or (self.impl == "auto" and self.auto_kernel(st)):  # hyperspherical_kernel.py
            if st.mask is not None:
                raise ValueError("impl = 'kernel' covers sequences without padding; use impl 'auto'")
            return bisoftmax_symmetric_kernel(st.q, self.beta, negate=negate)
        if self.impl == "einsum" or (self.impl == "auto" and n < AUTO_FUSED_MIN_TOKENS):
            if st.mask is None and st.q is st.k:
                return bisoftmax_symmetric(st.q, self.beta, None if st.v is st.q else st.v, negate=negate)
            y = bisoftmax_einsum(st.q, st.k, st.v, self.beta, st.mask)
        else:
            y = bisoftmax_fused(st.q, st.k, st.v, self.beta, st.mask, symmetric=self.symmetric)[0]
        return -y if negate else y

    def neg_operator(self, st: SubspaceState) -> Tensor:
        return self.operator(st, negate=True)

    def auto_kernel(self, st: SubspaceState) -> bool:
        """``impl='auto'`` takes the Triton kernel: on CUDA with triton installed, one shared sphere
        (Q = K = V) with self-interaction, no padding, at most MAX_TOKENS tokens, not float64 (whose
        compiled form no GPU has run; ``impl='kernel'`` still takes it). Measured on one H100
        (bf16 training at the Sudoku GPU scale, d 768, L 24, batch 64; docs/results/hyperset/
        gpu_h100/gpu_throughput_fef18e0.md): 0.86x the looped transformer's tokens/s with the kernel vs 0.81x without
        (eager), 0.92x vs 0.79x with each step one CUDA graph; its CUDA test matches float64."""
        return (st.q.is_cuda and st.q.dtype != torch.float64 and st.mask is None and st.q is st.k
                and st.v is st.q and self.self_interaction and st.q.shape[2] <= MAX_TOKENS and triton_available())

    def reference_operator(self, st: SubspaceState) -> Tensor:
        """The einsum bi-softmax (materialised row and column softmax, both computed), also for separate norms."""
        return bisoftmax_einsum(st.q, st.k, st.v, self.beta, st.mask, symmetric=False)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", impl={self.impl!r}"


# ---------------------------------------------------------------------------------- feed-forward
class SphericalFFEnergy(Energy):
    """Base of the feed-forward energies: Σ_i e(u_i), u_i = sphere(Dᵀ x_i) ∈ R^M (Eq. 5, 20).

    Subclasses give ``token_energy(u) -> (B, N)`` and ``activation(u) = −∂e/∂u``; the update is
    ``D activation(u)`` (Eq. 11 for ReLU).
    """

    def __init__(self, dim: int, hidden: int, *, sphere: bool = True, gain: str = "fixed", eps: float | None = None):
        super().__init__()
        check_int("dim", dim, min=1)
        check_int("hidden", hidden, min=1)
        check_choice("gain", gain, GAINS)
        self.dim, self.hidden, self.sphere, self.gain, self.eps = dim, hidden, bool(sphere), gain, eps
        self.proj = nn.Linear(dim, hidden, bias=False)  # weight = Dᵀ: (M, D)
        self.gain_weight = nn.Parameter(torch.ones(hidden)) if sphere and gain == "learned" else None
        if self.gain_weight is not None:
            self.param_roles = {"gain_weight": "norm"}
        self.delta: Tensor | None = None

    @property
    def exact(self) -> bool:  # type: ignore[override]
        return not self.sphere

    def weight(self) -> Tensor:
        w = self.proj.weight
        return w if self.delta is None else w + self.delta.to(w.dtype)

    def pre(self, x: Tensor) -> Tensor:
        """u = RMSNorm(Dᵀ x) (radius √M with gain 1), or Dᵀ x without the sphere: (B, N, M)."""
        return self.sphered(F.linear(x, self.weight()))

    def sphered(self, s: Tensor) -> Tensor:
        """u from the projections s = Dᵀ x."""
        if not self.sphere:
            return s
        g = None if self.gain_weight is None else self.gain_weight.to(s.dtype)
        return sphere_rms_norm(s, self.sphere_eps(s), g)

    def sphere_eps(self, s: Tensor) -> float:
        """The sphere norm's epsilon for s: ``eps``, or :data:`SPHERE_EPS`."""
        return SPHERE_EPS if self.eps is None else self.eps

    def token_energy(self, u: Tensor) -> Tensor:  # pragma: no cover
        raise NotImplementedError

    def activation(self, u: Tensor) -> Tensor:  # pragma: no cover
        raise NotImplementedError

    def prepare(self, context: Tensor, mask: Tensor | None = None, **kw: Any) -> Tensor | None:
        return None if mask is None else mask.to(torch.bool)  # per-token energy: no context

    def energy(self, x: Tensor, state: Tensor | None) -> Tensor:
        e = self.token_energy(self.pre(x))
        return e if state is None else e * state.to(e.dtype)

    def readout(self, a: Tensor) -> Tensor:
        """D a: (B, N, M) -> (B, N, D); ``a @ Dᵀ`` with the weight itself (one cached autocast copy of D per
        forward, as :meth:`SubspaceAttentionEnergy.readout`)."""
        return torch.matmul(a, self.weight())

    def activated(self, x: Tensor) -> Tensor:
        """activation(pre(x)): (B, N, M), the read-out's input (subclasses may fuse the two)."""
        return self.activation(self.pre(x))

    def direction(self, x: Tensor, state: Any, precond: Preconditioner) -> Tensor:
        # state: the (B, N) real tokens or None; padded tokens get 0, as the gradient (real_tokens)
        return precond(real_tokens(self.readout(self.activated(x)), state))

    def grad(self, x: Tensor, state: Any) -> Tensor:
        if self.exact:
            return real_tokens(-self.readout(self.activated(x)), state)
        return super().grad(x, state)

    def reference_direction(self, x: Tensor, state: Any, precond: Preconditioner) -> Tensor:
        """−P D ∂e/∂u by autograd at u = the normalised projections (held fixed); 0 at padded tokens."""
        with torch.enable_grad():
            u = self.pre(x).detach().requires_grad_(True)
            (g,) = torch.autograd.grad(self.token_energy(u).sum(), u)
        return -precond(real_tokens(self.readout(g), state))

    @classmethod
    def _examples(cls, dtype, variants: list[dict]) -> list:
        out = []
        for i, kw in enumerate(variants):
            torch.manual_seed(200 + i)
            g = torch.Generator().manual_seed(i)
            e = cls(6, 10, **kw).to(dtype)
            with torch.no_grad():
                e.proj.weight.normal_(0, 0.5, generator=g)
                if e.gain_weight is not None:
                    e.gain_weight.uniform_(0.5, 1.5, generator=g)
            x = torch.randn(2, 5, 6, generator=g, dtype=dtype)
            out.append((",".join(f"{k}={v}" for k, v in kw.items()) or "default", e, x, x.clone()))
        return out

    def extra_repr(self) -> str:
        return f"dim={self.dim}, hidden={self.hidden}, sphere={self.sphere}, gain={self.gain!r}"


@register_energy("hyperset_ff")
class ReLUFFEnergy(SphericalFFEnergy):
    """E_FF (Eq. 5): −½ Σ_m ReLU(u_m)² per token; update D ReLU(u) (Eq. 10-11)."""

    @classmethod
    def examples(cls, dtype=torch.float64):
        return cls._examples(dtype, [{"sphere": False}, {}, {"gain": "learned"}])

    def token_energy(self, u: Tensor) -> Tensor:
        return -0.5 * F.relu(u).pow(2).sum(-1)

    def activation(self, u: Tensor) -> Tensor:
        return F.relu(u)

    def activated(self, x: Tensor) -> Tensor:
        """ReLU(sphere(Dᵀx)); on CUDA without a learned gain one Triton kernel each way
        (:mod:`~energyformer.energies.hyperspherical_ffkernel`: the same maths and rounding, one pass instead
        of two each way)."""
        s = F.linear(x, self.weight())
        if self.sphere and ffk.applies(s, self.gain_weight):
            return ffk.sphere_norm_relu(s, self.sphere_eps(s))
        return self.activation(self.sphered(s))
