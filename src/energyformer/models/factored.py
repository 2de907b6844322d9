"""Factored attention (Rende, Gerace, Laio & Goldt 2024; reconstructed.md §2.2): the single layer that
is exact for generalised Potts data.

``model: {kind: factored, ...}``. Positions and colours are factored: a positional matrix A (L, L),
input-independent, and a colour matrix V (C, C). With one-hot inputs x_j (a masked site: the zero
vector, so it contributes nothing):

    logits_i = Σ_{j≠i} A_ij V x_j + b_i                                      (b: per-site colour bias)

``attention`` chooses A: ``linear`` (default) learns A_ij freely, so that ``A = βJ, V = U, b = βh``
reproduces the exact Potts conditional ``softmax_a(β Σ_j J_ij U[a, s_j] + β h_i[a])`` for any J
(tested); ``softmax`` uses ``A_ij = softmax_{j≠i}(w_ij)`` (attention weights proper, as in the paper's
title), which is exact only when the rows of βJ are nonnegative with equal sums (up to V's scale). The
default is ``linear`` because our J ~ N(0, 1/L) has mixed signs (reconstructed §2.2).

MLM cross-entropy of this model is the negative log pseudo-likelihood, so its optimum is the
Bayes-optimal loss in the limit of infinite data.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor, nn

from ..utils.config import KindConfig
from ..utils.validate import ConfigError
from .output import ModelOutput
from .potts_ids import check_colour_ids
from .registry import MODELS


class FactoredConfig(KindConfig):
    """Factored attention: positional A (L, L) x colour V (C, C), one layer (Rende et al. 2024)."""

    kind: Literal["factored"] = "factored"
    n_tokens: int | None = Field(None, ge=2)
    """L, sequence length (set by the task)"""
    n_colours: int | None = Field(None, ge=2)
    """C, colours (set by the task); id C is the mask"""
    attention: Literal["linear", "softmax"] = "linear"
    """A_ij free (exact for any Potts J) or softmax_j of learned scores"""
    bias: bool = True
    """per-site colour bias b_i (the fields h)"""
    init_std: float = Field(0.02, ge=0)
    """std of the normal init of A (or its scores) and V"""


class FactoredAttention(nn.Module):
    """logits_i = Σ_{j≠i} A_ij V x_j + b_i on one-hot colours (module docstring)."""

    recurrent = False
    part = "attention"

    def __init__(self, cfg: FactoredConfig):
        super().__init__()
        if cfg.n_tokens is None or cfg.n_colours is None:
            raise ConfigError(f"model.n_tokens = {cfg.n_tokens}, model.n_colours = {cfg.n_colours}: "
                              "factored attention needs both (a task sets them from its data)")
        self.cfg = cfg
        L, C = cfg.n_tokens, cfg.n_colours
        self.A = nn.Parameter(torch.randn(L, L) * cfg.init_std)
        self.V = nn.Parameter(torch.randn(C, C) * cfg.init_std)
        self.b = nn.Parameter(torch.zeros(L, C)) if cfg.bias else None
        self.register_buffer("offdiag", ~torch.eye(L, dtype=torch.bool), persistent=False)

    param_roles = {"b": "bias"}

    def positional(self) -> Tensor:
        """A (L, L) with a zero diagonal (softmax rows over j ≠ i, or the free matrix)."""
        if self.cfg.attention == "softmax":
            return self.A.masked_fill(~self.offdiag, float("-inf")).softmax(-1)
        return self.A * self.offdiag

    def forward_options(self) -> dict[str, int]:
        """A single non-recurrent layer: no call-time iterations or steps (models/options.py)."""
        return {}

    def forward(self, idx: Tensor, mask: Tensor | None = None, *, trace: bool = False, stats: bool = False,
                iterations: int | None = None, steps: int | None = None) -> ModelOutput:
        """Token ids (B, L) (id C = masked) -> logits (B, L, C). One layer: ``iterations``/``steps`` must be
        None or 1."""
        if mask is not None:
            raise ValueError("factored attention takes no padding mask (Potts sequences have fixed length)")
        for name, v in (("iterations", iterations), ("steps", steps)):
            if v not in (None, 1):
                raise ConfigError(f"{name} = {v}: factored attention is a single non-recurrent layer "
                                  "(allowed: 1)")
        L, C = self.cfg.n_tokens, self.cfg.n_colours
        if idx.dim() != 2 or idx.shape[1] != L or idx.is_floating_point():
            raise ValueError(f"token ids must be integers of shape (batch, L = {L}); got {idx.dtype} "
                             f"{tuple(idx.shape)}")
        check_colour_ids(idx, C)
        x = F.one_hot(idx, C + 1)[..., :C].to(self.V.dtype)  # (B, L, C): the mask is the zero vector
        vx = x @ self.V.T  # (B, L, C): V x_j
        logits = torch.einsum("ij,zja->zia", self.positional(), vx)
        if self.b is not None:
            logits = logits + self.b
        return ModelOutput(logits=logits)

    @torch.no_grad()
    def set_potts(self, J: Tensor, U: Tensor, beta: float, h: Tensor | None = None) -> None:
        """Load A = βJ, V = U, b = βh (linear attention): the exact conditional of that Potts model."""
        if self.cfg.attention != "linear":
            raise ValueError("set_potts needs attention = 'linear' (softmax rows cannot hold an arbitrary J)")
        self.A.copy_(beta * J)
        self.V.copy_(U)
        if self.b is not None:
            self.b.copy_(beta * h if h is not None else torch.zeros_like(self.b))


@MODELS.register("factored", FactoredConfig)
def build_factored(cfg: FactoredConfig, **_: Any) -> FactoredAttention:
    """Factored attention: positional A x colour V, exact for generalised Potts data."""
    return FactoredAttention(cfg)
