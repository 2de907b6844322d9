"""CRATE sublayers (Yu et al. 2023, "White-Box Transformers via Sparse Rate Reduction", NeurIPS, §2.3-2.5;
CRATE-T: Hu et al. 2024, NeurIPS): attention kind ``crate`` (compression) and MLP kind ``ista``
(sparsification).

One CRATE layer, Yu et al. Eqs. 11 and 13 (the reference code: ``x = ff(attn(x) + x)`` with a pre-LayerNorm
in front of each)::

    z^{l+1/2} = z + κ · MSSA(LN(z))                        attention ``crate``: one gradient step on the
                                                            subspace energy (energies/crate.py), init = z
    z^{l+1}   = ReLU(h + η Dᵀ(h - D h) - η λ),  h = LN(z^{l+1/2})   MLP ``ista``: one ISTA step on the LASSO
                                                            started at h, **no residual**

* ``attention: {kind: crate, output: learned}`` — CRATE: a learned output matrix W_O (+ bias) after the
  subspace attention (not a gradient; the block reports ``exact = False``).
* ``attention: {kind: crate, output: tied}`` — CRATE-T: the output is the subspace basis U itself, so
  the step is exactly -κ ∇E of the subspace energy at the normalised point (fused SDPA).
* ``attention: {kind: crate, output: tied_code}`` — CRATE-T as the released Hyper-SET code has it (the
  output mapped with the transposed operator; ``exact = False``); the one that trains at our scale.
* ``mlp: {kind: ista, step_size: 0.1, lambd: 0.1}`` — η and λ of the reference code; ``steps: T``
  runs T ISTA steps from h (CRATE: 1).

The ISTA step is a **proximal** gradient step (:class:`ISTA`): z ← prox_{ηλ‖·‖₁ + ι≥0}(z − η∇E(z)) =
ReLU(z − η∇E(z) − ηλ). It is not −η∇E of any smooth energy, so the rule is inexact
(``rule_exact = False``); what it does guarantee, and what ``tests/blocks/test_crate.py`` checks, is
that with η ≤ 1/‖D‖² every step from a non-negative point does not raise the LASSO objective
F(z) = ½‖x − Dz‖² + λ‖z‖₁ (Beck & Teboulle 2009). The solver adds λ‖z‖₁ to the traced energy
(term ``l1``).
"""

from __future__ import annotations

from typing import Any, Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor, nn

from ..core.block import EnergyBlock
from ..core.solver import GradientDescent, Solver, _scale
from ..core.stepsize import StepSizeField, make_step_size
from ..energies.crate import LassoEnergy, SubspaceAttentionEnergy
from ..utils.validate import ConfigError, check_float
from .registry import ATTENTIONS, MLPS, AttentionConfig, MLPConfig, SublayerSpec


class ISTA(Solver):
    """Proximal gradient (ISTA) for E(z) + λ‖z‖₁ (+ z ≥ 0): z ← S_{ηλ}(z + η·direction(z)).

    ``nonnegative`` (CRATE): S(v) = ReLU(v − ηλ); else the soft threshold sign(v)·ReLU(|v| − ηλ).
    The traced objective includes λ‖z‖₁ (term ``l1``).
    """

    rule_exact = False

    def __init__(self, lambd: float = 0.1, step_size: Any = 0.1, nonnegative: bool = True, **kw: Any):
        super().__init__(step_size=step_size, **kw)
        check_float("lambd", lambd, min=0.0)
        self.lambd, self.nonnegative = float(lambd), bool(nonnegative)

    def update(self, energy, x, u, state, memory, eta):
        v = x + _scale(eta, energy.direction(u, state, self.precond))  # z - η P ∇E
        t = _scale(eta, torch.full_like(x, self.lambd))                 # η λ
        new = F.relu(v - t) if self.nonnegative else torch.sign(v) * F.relu(v.abs() - t)
        return new - x, memory

    def extra_energy(self, x: Tensor, memory: Any) -> dict[str, Tensor]:
        return {"l1": self.lambd * x.abs().sum(-1)}  # (B, N)

    def extra_repr(self) -> str:
        return f"lambd={self.lambd}, nonnegative={self.nonnegative}, " + super().extra_repr()


# ----------------------------------------------------------------------------- attention: compression
class CRATEAttentionConfig(AttentionConfig):
    """CRATE multi-head subspace self-attention: one gradient step on the subspace energy (Yu et al. Eq. 11)."""

    kind: Literal["crate"] = "crate"
    output: Literal["learned", "tied", "tied_code"] = "learned"
    """learned W_O + bias (CRATE, Yu et al. 2023), the subspace basis U itself (CRATE-T, Hu et al. 2024;
    exactly -κ∇E), or 'tied_code': the released Hyper-SET code's CRATE-T, which applies Uᵀ read as a
    D x Kp matrix (not a gradient; needs heads·head_dim = dim; see energies/crate.py)"""
    steps: int = Field(1, ge=1)
    """gradient steps per call (CRATE: 1)"""
    step_size: StepSizeField = 1.0
    """κ (the reference code: 1, folded into W_O)"""
    head_dim: int | None = Field(None, ge=1)
    """subspace dimension p (None: dim / heads)"""

    @classmethod
    def examples(cls) -> list[dict]:
        return [{}]


class CRATEAttention(EnergyBlock):
    """z + κ · MSSA(LN(z)): EnergyBlock(subspace energy, GD(κ), T steps, LayerNorm in the loop)."""

    part = "attention"

    def __init__(self, dim: int, heads: int, cfg: CRATEAttentionConfig):
        try:
            energy = SubspaceAttentionEnergy(dim, heads, cfg.head_dim, cfg.output)
        except ValueError as err:
            raise ConfigError(f"attention (crate): {err}") from None
        super().__init__(energy, GradientDescent(step_size=make_step_size(cfg.step_size, dim)), cfg.steps,
                         norm=nn.LayerNorm(dim), norm_in_loop=True, init="residual")


@ATTENTIONS.register("crate", CRATEAttentionConfig)
def build_crate_attention(cfg: CRATEAttentionConfig, spec: SublayerSpec) -> CRATEAttention:
    """CRATE (output: learned) / CRATE-T (output: tied) subspace self-attention."""
    if spec.causal:
        raise ConfigError("attention kind 'crate' is bidirectional here: set model.causal: false or use a "
                          "bidirectional task")
    if spec.dim % spec.heads and cfg.head_dim is None:
        raise ConfigError(f"attention (crate): heads = {spec.heads} does not divide dim = {spec.dim}; set head_dim")
    return CRATEAttention(spec.dim, spec.heads, cfg)


# ----------------------------------------------------------------------------- MLP: sparsification
class ISTAConfig(MLPConfig):
    """CRATE's ISTA feed-forward: T proximal steps on ½‖x − Dz‖² + λ‖z‖₁, z ≥ 0, from z = LN(x) (Eq. 13)."""

    kind: Literal["ista"] = "ista"
    steps: int = Field(1, ge=1)
    """ISTA steps (CRATE: 1)"""
    step_size: float = Field(0.1, gt=0)
    """η (CRATE code: 0.1)"""
    lambd: float = Field(0.1, ge=0)
    """λ, the sparsity weight (CRATE code: 0.1)"""
    nonnegative: bool = True
    """non-negative codes (CRATE: ReLU) or the plain soft threshold"""

    def default_hidden(self, dim: int) -> int:
        return dim  # a square dictionary D ∈ R^{d×d} (the reference code)

    @classmethod
    def examples(cls) -> list[dict]:
        return [{}]


class ISTABlock(EnergyBlock):
    """ReLU(h − η Dᵀ(D h − h) − η λ), h = LN(x): EnergyBlock(LASSO energy, ISTA, T steps, init = normalized)."""

    part = "mlp"

    def __init__(self, dim: int, cfg: ISTAConfig):
        solver = ISTA(cfg.lambd, cfg.step_size, cfg.nonnegative)
        super().__init__(LassoEnergy(dim), solver, cfg.steps, norm=nn.LayerNorm(dim), norm_in_loop=False,
                         init="normalized")


@MLPS.register("ista", ISTAConfig)
def build_ista(cfg: ISTAConfig, spec: SublayerSpec) -> ISTABlock:
    """CRATE ISTA sparsification step (square dictionary, no residual)."""
    if cfg.hidden is not None and cfg.hidden != spec.dim:
        raise ConfigError(f"mlp.hidden = {cfg.hidden}: the ISTA dictionary is square (d x d = {spec.dim}); "
                          f"remove the key")
    return ISTABlock(spec.dim, cfg)
