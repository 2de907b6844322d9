"""Training bare self-attention without backpropagation through its dynamics (seed 004 slides Eq. 13,
15, 16; reconstructed.md §2.1).

J is fitted to data by minimising the (negative log) pseudo-likelihood ``(1/M) Σ_μ Σ_i ℓ_i(x^μ; J)``.
No dynamics are run (except to draw contrastive-divergence samples, without a graph): the gradient is
local and Hebbian-like and is computed **in closed form** by :class:`PLObjective` (a
``torch.autograd.Function`` whose backward returns the formula below, not an autograd graph), so the
shared :class:`~energyformer.train.Trainer` applies it through ``loss.backward()`` and any optimiser.

Objectives (``kind``), per site i, with ``s_ij = λ x_iᵀ J_ij x_j``, ``α_ij = softmax_{j≠i}(s_ij)``:

* ``plain``: ``ℓ_i = e_i = −(1/λ) log Σ_{j≠i} exp(s_ij)``;  ``∂ℓ_i/∂J_ij = −α_ij x_i x_jᵀ`` (the Hebb
  rule of slide Eq. 13/15). **Unbounded below** in the scale of J (``F(cJ) ≈ c F(J)``): use it with
  weight decay or a Frobenius constraint (N1), or pick a normalised kind.
* ``vmf`` (N2): the von Mises–Fisher-mixture normalisation for spins on S^{d−1},
  ``ℓ_i = e_i + (1/λ) log Σ_{j≠i} Z_d(λ‖J_ij x_j‖)``;  extra gradient ``+ λ w_ij (A_d(κ_ij)/κ_ij) J_ij x_j x_jᵀ``
  with ``w = softmax_j(log Z_d(κ_ij))`` (:mod:`energyformer.energies.vmf`). ``ℓ_i = −(1/λ) log P(x_i|x_−i)``.
* ``codebook`` (N3): discrete tokens whose embeddings are the rows e_a of a fixed codebook E (C, d)
  (one-hot Potts colours: E = I): ``ℓ_i = e_i + (1/λ) log Σ_a Σ_{j≠i} exp(λ e_aᵀ J_ij x_j)``, extra
  gradient ``+ Σ_a π_ija e_a x_jᵀ`` with π the softmax over (a, j). For data on the codebook
  ``ℓ_i = −(1/λ) log P(s_i | s_−i)``, ``P(s_i = a|·) ∝ Σ_j exp(λ J_ij[a, s_j])``.
* ``cd`` (slide Eq. 16): contrastive divergence, ``ℓ = ⟨Σ_i e_i⟩_data − ⟨Σ_i e_i⟩_model`` with model
  samples ``x_model`` supplied by the caller (the dynamics run k steps from the data, no graph);
  gradient ``−⟨α x_i x_jᵀ⟩_data + ⟨α x_i x_jᵀ⟩_model``.

``rows`` restricts the sum to some sites: all sites (GD / SGD on Σ_i e_i), or one random site per step
(slide Eq. 13, which updates only the couplings J_i· of that site, at O(B N d²) instead of O(B N² d²)).
The loss is the mean over batch and selected sites, so one random site is an unbiased estimate of
the all-sites loss.

:func:`pl_objective_reference` writes every objective with plain differentiable torch operations; the
tests check that the closed-form gradient equals its autograd gradient.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from ..utils.validate import check_choice
from .pseudolikelihood import offdiag, safe_norm
from .vmf import vmf_log_normalizer

OBJECTIVES = ("plain", "vmf", "codebook", "cd")
Objective = Literal["plain", "vmf", "codebook", "cd"]


def _row_terms(J: Tensor, x: Tensor, rows: Tensor, lam: float) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """For selected sites R: J_rj x_j (B, R, N, d), scores (B, R, N) with j = r at −inf, x_r (B, R, d),
    and the (R, N) mask of usable pairs."""
    JR = J.index_select(0, rows)  # (R, N, d, d)
    Jx = torch.einsum("rjac,zjc->zrja", JR, x)  # (B, R, N, d)
    xr = x.index_select(1, rows)  # (B, R, d)
    keep = offdiag(J.shape[0], x.device).index_select(0, rows)  # (R, N)
    s = (lam * torch.einsum("zra,zrja->zrj", xr, Jx)).masked_fill(~keep, float("-inf"))
    return Jx, s, xr, keep


def _hebb(alpha: Tensor, xr: Tensor, x: Tensor) -> Tensor:
    """Σ_b α_rj x_r x_jᵀ -> (R, N, d, d)."""
    return torch.einsum("zrja,zjc->rjac", alpha[..., None] * xr[:, :, None, :], x)


def _terms(J: Tensor, x: Tensor, rows: Tensor, lam: float, kind: str, codebook: Tensor | None,
           want_grad: bool) -> tuple[Tensor, Tensor | None]:
    """Per-(sequence, site) losses (B, R) and the summed gradient over the batch for J[rows]."""
    Jx, s, xr, keep = _row_terms(J, x, rows, lam)
    lse = torch.logsumexp(s, -1)  # (B, R)
    loss = -lse / lam
    grad = None
    if want_grad:
        grad = -_hebb(s.softmax(-1), xr, x)
    if kind == "vmf":
        # κ by a scale-safe norm and the two log-sum-exps combined in float64: the terms grow like ‖J‖
        # and cancel (a plain float32 norm overflowed at ‖J_ij x_j‖ ~ 1.8e19 and the loss was NaN)
        kappa = lam * safe_norm(Jx.double(), dim=-1)  # (B, R, N)
        logz, a_over_k = vmf_log_normalizer(x.shape[-1], kappa)
        logz = logz.masked_fill(~keep, float("-inf"))
        loss = ((torch.logsumexp(logz, -1) - lse.double()) / lam).to(x.dtype)
        if want_grad:
            w = (logz.softmax(-1) * a_over_k * lam).to(x.dtype)  # (B, R, N)
            grad = grad + torch.einsum("zrja,zjc->rjac", w[..., None] * Jx, x)
    elif kind == "codebook":
        g = lam * torch.einsum("zrja,ka->zrjk", Jx, codebook)  # (B, R, N, C)
        g = g.masked_fill(~keep[None, :, :, None], float("-inf"))
        flat = g.flatten(2)
        loss = loss + torch.logsumexp(flat, -1) / lam
        if want_grad:
            pi = flat.softmax(-1).view_as(g)
            m = torch.einsum("zrjk,ka->zrja", pi, codebook)  # expected codebook vector
            grad = grad + torch.einsum("zrja,zjc->rjac", m, x)
    return loss, grad


def _check(J: Tensor, x: Tensor, kind: str, codebook: Tensor | None, x_model: Tensor | None) -> None:
    check_choice("bare_sa objective", kind, OBJECTIVES)
    if J.dim() != 4 or J.shape[0] != J.shape[1] or J.shape[2] != J.shape[3]:
        raise ValueError(f"J must have shape (N, N, d, d); got {tuple(J.shape)}")
    if x.dim() != 3 or x.shape[1] != J.shape[0] or x.shape[2] != J.shape[2]:
        raise ValueError(f"pseudo-likelihood data of shape {tuple(x.shape)}: expected (batch, N = "
                         f"{J.shape[0]}, d = {J.shape[2]})")
    if kind == "codebook" and (codebook is None or codebook.dim() != 2 or codebook.shape[1] != J.shape[2]):
        raise ValueError(f"objective 'codebook' needs a codebook of shape (C, d = {J.shape[2]}); got "
                         f"{None if codebook is None else tuple(codebook.shape)}")
    if kind == "cd" and (x_model is None or x_model.shape != x.shape):
        raise ValueError(f"objective 'cd' needs model samples x_model shaped like the data {tuple(x.shape)}")


class PLObjective(torch.autograd.Function):
    """Scalar pseudo-likelihood objective whose backward is the closed-form (Hebbian) gradient w.r.t. J.

    ``apply(J, x, rows, lam, kind, codebook, x_model)``; x, codebook and x_model get no gradient.
    """

    @staticmethod
    def forward(ctx, J, x, rows, lam, kind, codebook, x_model):  # type: ignore[override]
        want = bool(ctx.needs_input_grad[0])
        x = x.detach().to(J.dtype)
        n = x.shape[0] * rows.numel()
        with torch.no_grad():
            loss, grad = _terms(J, x, rows, lam, "plain" if kind == "cd" else kind, codebook, want)
            total = loss.sum()
            if kind == "cd":
                lm, gm = _terms(J, x_model.detach().to(J.dtype), rows, lam, "plain", None, want)
                total = total - lm.sum()
                grad = grad - gm if want else None
        if want:
            full = torch.zeros_like(J)
            full.index_copy_(0, rows, (grad / n).to(full.dtype))  # bf16 autocast computes grad in bf16
            ctx.save_for_backward(full)
        return total / n

    @staticmethod
    def backward(ctx, g):  # type: ignore[override]
        (full,) = ctx.saved_tensors
        return g * full, None, None, None, None, None, None


def pl_objective(J: Tensor, x: Tensor, *, lam: float = 1.0, kind: str = "plain", rows: Tensor | None = None,
                 codebook: Tensor | None = None, x_model: Tensor | None = None) -> Tensor:
    """Mean pseudo-likelihood objective over batch and ``rows`` (default: every site), scalar; its
    gradient w.r.t. J is the closed form of the module docstring (no autograd graph). J (N, N, d, d),
    x (B, N, d) data, ``codebook`` (C, d) for kind 'codebook', ``x_model`` (B, N, d) for kind 'cd'."""
    _check(J, x, kind, codebook, x_model)
    rows = torch.arange(J.shape[0], device=J.device) if rows is None else rows.to(J.device).long().reshape(-1)
    cb = None if codebook is None else codebook.to(J)
    return PLObjective.apply(J, x, rows, float(lam), kind, cb, x_model)


def hebbian_gradient(J: Tensor, x: Tensor, lam: float = 1.0) -> Tensor:
    """``∂/∂J_ij (1/B) Σ_b F(x_b; J) = −(1/B) Σ_b α_ij x_i x_jᵀ`` (the plain rule, all sites), (N, N, d, d)."""
    rows = torch.arange(J.shape[0], device=J.device)
    with torch.no_grad():
        _, g = _terms(J, x.to(J.dtype), rows, lam, "plain", None, True)
    out = torch.zeros_like(J)
    out.index_copy_(0, rows, g)
    return out / x.shape[0]


def pl_objective_reference(J: Tensor, x: Tensor, *, lam: float = 1.0, kind: str = "plain",
                           rows: Tensor | None = None, codebook: Tensor | None = None,
                           x_model: Tensor | None = None) -> Tensor:
    """The same objective written with plain differentiable operations (slow; for tests)."""
    _check(J, x, kind, codebook, x_model)
    N, d = J.shape[0], J.shape[2]
    rows = torch.arange(N) if rows is None else rows.long().reshape(-1)
    total = x.new_zeros(())

    def site_terms(xx: Tensor, i: int) -> tuple[Tensor, Tensor]:
        others = [j for j in range(N) if j != i]
        v = torch.stack([xx[:, j] @ J[i, j].T for j in others], 1)  # (B, N-1, d): J_ij x_j
        s = lam * (v * xx[:, i, None, :]).sum(-1)
        return -torch.logsumexp(s, -1) / lam, v

    for i in rows.tolist():
        e, v = site_terms(x, i)
        if kind == "vmf":
            logz = vmf_log_normalizer(d, lam * v.norm(dim=-1))[0]
            e = e + torch.logsumexp(logz, -1) / lam
        elif kind == "codebook":
            g = lam * v @ codebook.T  # (B, N-1, C)
            e = e + torch.logsumexp(g.flatten(1), -1) / lam
        elif kind == "cd":
            e = e - site_terms(x_model, i)[0]
        total = total + e.sum()
    return total / (x.shape[0] * rows.numel())
