"""Bare self-attention and its energy, the negative log pseudo-likelihood (seed 004 slides Eq. 3-4, 8,
12, 19-20; reconstructed.md §2.1).

The only parameter is ``J ∈ R^{N×N×d×d}`` (the blocks J_ii are never used). Tokens are spins
``x_i ∈ R^d`` (on the unit sphere in the model), with no positional encoding (position enters only
through the pair index of J_ij), no MLP and V = J. With ``s_ij = λ x_iᵀ J_ij x_j`` (j ≠ i):

    α_ij  = softmax_{j≠i}(s_ij)                                                     (Eq. 4)
    x_i  <- γ x_i + Σ_{j≠i} α_ij J_ij x_j        [then x_i <- x_i/‖x_i‖ when renormalising]   (Eq. 3, 20)

(the renormalisation by :func:`unit`, exact at any scale of y: issue 23)
    e_i(x) = −(1/λ) log Σ_{j≠i} exp(λ x_iᵀ J_ij x_j),      F(x; J) = Σ_i e_i(x)              (Eq. 8, 12)

**The update is not gradient descent on F** (reconstructed §2.1, checked): with γ = 1 the update is
``x_i − ∂e_i/∂x_i``, i.e. every token descends its *own* term e_i with the other tokens held fixed,
while ``∂F/∂x_i = ∂e_i/∂x_i − Σ_{k≠i} α_ki J_kiᵀ x_k`` also carries how x_i enters the other tokens'
terms. :class:`PseudoLikelihoodEnergy` therefore sets ``exact = False``: ``grad`` is the total
derivative ∂F/∂x (closed form, checked against autograd), ``direction`` is the per-token partial
``−P ∂E_i/∂x_i`` (the dynamics) and ``reference_direction`` computes the same partial by autograd with
the context detached (the library-wide property test compares the two).

γ enters the energy as a self term: ``E_i = e_i + (1 − γ)/2 ‖x_i‖²`` so that a step of size 1 along
``direction`` is exactly ``γ x_i + Σ_j α_ij J_ij x_j`` (for γ = 1 the energy is e_i itself; on the
sphere the extra term is a constant). Renormalisation onto the sphere belongs to the descent rule
(:class:`energyformer.models.bare_attention.SphereDescent`), not to the energy.

Multi-head factorisation (slide Eq. 19, option ``heads = H > 0``): ``J_ij = Σ_h K_ijᴴᵀ Q_ijᴴ`` with
``K, Q ∈ R^{H×N×N×d_h×d}``; J is materialised once per call (:meth:`coupling`), so a step costs the
same O(B N² d²) as with a full J. ``heads = 0`` (default) learns J itself, the slides' main model.

The energy's context is the iterate (``context_is_iterate``): ``prepare`` stores J (and the context),
``reprepare(state, u)`` computes ``J_ij u_j`` for all pairs once per step, shape (B, N, N, d).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..core.energy import Energy, register_energy
from ..core.precond import Preconditioner
from ..core.projected import safe_norm, unit  # noqa: F401  (scale-safe norms; re-exported, issue 23)
from ..utils.validate import check_float, check_int


def offdiag(n: int, device: torch.device | str | None = None) -> Tensor:
    """(n, n) bool, True off the diagonal (the pairs j ≠ i that attention may use)."""
    return ~torch.eye(n, dtype=torch.bool, device=device)


def apply_couplings(J: Tensor, x: Tensor) -> Tensor:
    """``J_ij x_j`` for every pair: J (N, N, d, d), x (B, N, d) -> (B, N, N, d)."""
    return torch.einsum("ijac,zjc->zija", J, x)


def bare_scores(x: Tensor, Jx: Tensor, lam: float) -> Tensor:
    """``s_ij = λ x_iᵀ J_ij x_j`` with the diagonal at −inf: x (B, N, d), Jx (B, N, N, d) -> (B, N, N)."""
    s = lam * torch.einsum("zia,zija->zij", x, Jx)
    return s.masked_fill(~offdiag(x.shape[1], x.device), float("-inf"))


def bare_step(x: Tensor, J: Tensor, lam: float = 1.0, gamma: float = 1.0, renorm: bool = True) -> Tensor:
    """One step of the slides' dynamics, written literally (Eq. 3-4, 20), for tests and reference:
    ``x_i <- γ x_i + Σ_{j≠i} softmax_j(λ x_iᵀ J_ij x_j) J_ij x_j`` (then renormalised)."""
    Jx = apply_couplings(J, x)  # (B, N, N, d)
    alpha = bare_scores(x, Jx, lam).softmax(-1)  # (B, N, N)
    y = gamma * x + torch.einsum("zij,zija->zia", alpha, Jx)
    return unit(y) if renorm else y


def pseudolikelihood_F(x: Tensor, J: Tensor, lam: float = 1.0) -> Tensor:
    """``F(x; J) = Σ_i e_i(x)`` per sequence, (B,) (slide Eq. 8 / 12 / 14)."""
    s = bare_scores(x, apply_couplings(J, x), lam)
    return (-torch.logsumexp(s, -1) / lam).sum(-1)


@dataclass
class BareState:
    """Prepared state: J (N, N, d, d) and the context x (B, N, d) with J_ij x_j (B, N, N, d), computed
    on first use (``jx``) so that ``prepare`` followed by the solver's ``reprepare`` does it once."""

    J: Tensor
    x: Tensor | None = None
    Jx_: Tensor | None = None

    def jx(self) -> Tensor:
        if self.Jx_ is None:
            if self.x is None:
                raise ValueError("bare self-attention state has no context: call prepare(context) first")
            self.Jx_ = apply_couplings(self.J, self.x)
        return self.Jx_


@register_energy("pseudolikelihood")
class PseudoLikelihoodEnergy(Energy):
    """Per-token energy ``E_i = −(1/λ) log Σ_{j≠i} exp(λ x_iᵀ J_ij c_j) + (1−γ)/2 ‖x_i‖²`` with the
    context c = the iterate; the descent direction is the per-token partial gradient (module docstring).

    n_tokens: N (positions; J is N×N×d×d). dim: d. lam: λ (fixed; [REC] 1). gamma: γ (the slides use 1).
    heads: 0 = a full J; H > 0 = J_ij = Σ_h K_ijᴴᵀ Q_ijᴴ (Eq. 19) with ``head_dim`` (default d // H).
    init_std: std of the normal initialisation (0: J = 0, the Hebbian starting point; the factored form
    needs > 0, since K = Q = 0 is a saddle). Diagonal blocks J_ii start at 0 and get no gradient.
    """

    exact = False
    context_is_iterate = True

    def __init__(self, n_tokens: int, dim: int, lam: float = 1.0, gamma: float = 1.0, heads: int = 0,
                 head_dim: int | None = None, init_std: float = 0.0, generator: torch.Generator | None = None):
        super().__init__()
        check_int("bare_sa.n_tokens", n_tokens, min=2)
        check_int("bare_sa.dim", dim, min=1)
        check_float("bare_sa.lam", lam, min=0.0, min_exclusive=True)
        check_float("bare_sa.gamma", gamma)
        check_int("bare_sa.heads", heads, min=0)
        check_float("bare_sa.init_std", init_std, min=0.0)
        self.n_tokens, self.dim, self.lam, self.gamma, self.heads = n_tokens, dim, float(lam), float(gamma), heads
        keep = offdiag(n_tokens)[:, :, None, None]
        if heads == 0:
            J = torch.randn(n_tokens, n_tokens, dim, dim, generator=generator) * init_std * keep
            self.J = nn.Parameter(J)
        else:
            if init_std == 0:
                raise ValueError("bare_sa.init_std = 0 with heads > 0: K = Q = 0 is a saddle of the "
                                 "factored coupling; give init_std > 0")
            dh = head_dim if head_dim is not None else max(1, dim // heads)
            check_int("bare_sa.head_dim", dh, min=1)
            self.head_dim = dh
            shape = (heads, n_tokens, n_tokens, dh, dim)
            # std of each factor such that J = Σ_h Kᵀ Q has entries of std ≈ init_std
            std = math.sqrt(init_std / math.sqrt(heads * dh))
            self.K = nn.Parameter(torch.randn(shape, generator=generator) * std * keep[None])
            self.Q = nn.Parameter(torch.randn(shape, generator=generator) * std * keep[None])

    @classmethod
    def examples(cls, dtype: torch.dtype = torch.float64):
        g = torch.Generator().manual_seed(0)
        out = []
        for label, kw in (("full", {}), ("gamma0.5_lam2", {"gamma": 0.5, "lam": 2.0}),
                          ("heads2", {"heads": 2, "head_dim": 2})):
            e = cls(4, 3, init_std=0.7, generator=g, **kw).to(dtype)
            ctx = torch.randn(2, 4, 3, generator=g, dtype=dtype)
            x = torch.randn(2, 4, 3, generator=g, dtype=dtype)
            out.append((label, e, ctx, x))
        return out

    # ------------------------------------------------------------------ couplings
    def coupling(self) -> Tensor:
        """J (N, N, d, d); for the factored form ``Σ_h K_ijᴴᵀ Q_ijᴴ`` materialised here (once per call)."""
        if self.heads == 0:
            return self.J
        return torch.einsum("hijka,hijkb->ijab", self.K, self.Q)

    def check_input(self, x: Tensor, name: str = "x") -> None:
        """(B, N', d) with N' ≤ N and the model's d, finite; one-line errors otherwise."""
        if not isinstance(x, Tensor) or x.dim() != 3:
            raise ValueError(f"bare self-attention {name} must be a (batch, tokens, dim) tensor; got shape "
                             f"{tuple(getattr(x, 'shape', ()))}")
        if x.shape[-1] != self.dim:
            raise ValueError(f"bare self-attention {name} has token dimension {x.shape[-1]}; J was built for "
                             f"dim = {self.dim}")
        if x.shape[1] > self.n_tokens or x.shape[1] < 2:
            raise ValueError(f"bare self-attention {name} has {x.shape[1]} tokens; J holds couplings for "
                             f"2 .. n_tokens = {self.n_tokens} positions")

    def _J_for(self, J: Tensor, n: int) -> Tensor:
        return J if n == J.shape[0] else J[:n, :n]

    # ------------------------------------------------------------------ Energy API
    def prepare(self, context: Tensor, *, J: Tensor | None = None, **kwargs) -> BareState:
        """Store J (materialised unless given) and the context; the pair products come on first use.
        Keyword arguments of blocks (cache, offset, mask) are accepted and unused: bare attention
        attends every other position (its inputs are never padded)."""
        self.check_input(context, "context")
        J = self.coupling() if J is None else J
        return BareState(self._J_for(J, context.shape[1]), context)

    def reprepare(self, state: BareState, u: Tensor) -> BareState:
        return BareState(state.J, u, apply_couplings(state.J, u))

    def energy(self, x: Tensor, state: BareState) -> Tensor:
        e = -torch.logsumexp(bare_scores(x, state.jx(), self.lam), -1) / self.lam  # (B, N)
        if self.gamma != 1.0:
            e = e + 0.5 * (1.0 - self.gamma) * x.pow(2).sum(-1)
        return e

    def grad(self, x: Tensor, state: BareState) -> Tensor:
        """Total derivative ∂F/∂x_k = −Σ_j α_kj J_kj x_j − Σ_i α_ik J_ikᵀ x_i + (1 − γ) x_k (context = x)."""
        Jx = state.jx()
        alpha = bare_scores(x, Jx, self.lam).softmax(-1)  # (B, N, N)
        g = -torch.einsum("zij,zija->zia", alpha, Jx) - torch.einsum("zik,ikac,zia->zkc", alpha, state.J, x)
        return g + (1.0 - self.gamma) * x if self.gamma != 1.0 else g

    def partial_grad(self, x: Tensor, state: BareState) -> Tensor:
        """∂E_i/∂x_i with the context held fixed: −Σ_j α_ij J_ij c_j + (1 − γ) x_i."""
        Jx = state.jx()
        alpha = bare_scores(x, Jx, self.lam).softmax(-1)
        g = -torch.einsum("zij,zija->zia", alpha, Jx)
        return g + (1.0 - self.gamma) * x if self.gamma != 1.0 else g

    def direction(self, x: Tensor, state: BareState, precond: Preconditioner) -> Tensor:
        """−P ∂E_i/∂x_i: with P = I and a unit step, ``x + direction = γ x_i + Σ_j α_ij J_ij x_j``."""
        return -precond(self.partial_grad(x, state))

    def reference_direction(self, x: Tensor, state: BareState, precond: Preconditioner) -> Tensor:
        """Autograd of Σ_i E_i w.r.t. the query x with the context detached (each E_i depends on its
        own x_i only, so this is every token's partial gradient at once)."""
        fixed = BareState(state.J.detach(), state.x.detach() if state.x is not None else None,
                          state.jx().detach())
        with torch.enable_grad():
            xq = x.detach().clone().requires_grad_(True)
            (g,) = torch.autograd.grad(self.energy(xq, fixed).sum(), xq)
        return -precond(g)

    def extra_repr(self) -> str:
        form = "full J" if self.heads == 0 else f"J = sum of {self.heads} heads K^T Q (head_dim {self.head_dim})"
        return f"N={self.n_tokens}, d={self.dim}, lam={self.lam}, gamma={self.gamma}, {form}"
