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

The ISTA step is a **proximal** gradient step (the core solver kind ``ista``,
:class:`~energyformer.core.projected.ISTA`): z ← prox_{ηλ‖·‖₁ + ι≥0}(z − η∇E(z)) =
ReLU(z − η∇E(z) − ηλ). It is not −η∇E of any smooth energy, so the rule is inexact
(``rule_exact = False``); what it does guarantee, and what ``tests/blocks/test_crate.py`` checks, is
that with η ≤ 1/‖D‖² every step from a non-negative point does not raise the LASSO objective
F(z) = ½‖x − Dz‖² + λ‖z‖₁ (Beck & Teboulle 2009). The solver adds λ‖z‖₁ to the traced energy
(term ``l1``).
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from ..core.block import EnergyBlock
from ..core.norm import NORMS, LayerNormConfig
from ..core.projected import ISTA, ISTAConfig as ISTASolverConfig  # noqa: F401  (ISTA: re-exported)
from ..core.solver import SOLVERS
from ..core.stepsize import StepSizeField
from ..core.sublayer import DescentConfig
from ..energies.crate import LassoEnergy, SubspaceAttentionEnergy
from ..utils.validate import ConfigError
from .registry import ATTENTIONS, MLPS, AttentionConfig, MLPConfig, SublayerSpec


# ----------------------------------------------------------------------------- attention: compression
class CRATEAttentionConfig(AttentionConfig, DescentConfig):
    """CRATE multi-head subspace self-attention: one gradient step on the subspace energy (Yu et al. Eq. 11)."""

    kind: Literal["crate"] = "crate"
    supports_causal: ClassVar[bool] = False
    causal_note: ClassVar[str] = "CRATE's subspace energy couples every pair of tokens"
    output: Literal["learned", "tied", "tied_code"] = "learned"
    """learned W_O + bias (CRATE, Yu et al. 2023), the subspace basis U itself (CRATE-T, Hu et al. 2024;
    exactly -κ∇E), or 'tied_code': the released Hyper-SET code's CRATE-T, which applies Uᵀ read as a
    D x Kp matrix (not a gradient; needs heads·head_dim = dim; see energies/crate.py)"""
    step_size: StepSizeField = 1.0
    """κ (the reference code: 1, folded into W_O)"""
    head_dim: int | None = Field(None, ge=1)
    """subspace dimension p (None: dim / heads)"""
    norm: NORMS.type("layer") = Field(default_factory=LayerNormConfig)
    """norm (default: the CRATE code's pre-LayerNorm, re-applied at every step when steps > 1; x0 = z)"""

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
        super().__init__(energy, **self.config_args(cfg, dim, heads, name="attention"))


@ATTENTIONS.register("crate", CRATEAttentionConfig)
def build_crate_attention(cfg: CRATEAttentionConfig, spec: SublayerSpec) -> CRATEAttention:
    """CRATE (output: learned) / CRATE-T (output: tied) subspace self-attention."""
    if spec.dim % spec.heads and cfg.head_dim is None:
        raise ConfigError(f"attention (crate): heads = {spec.heads} does not divide dim = {spec.dim}; set head_dim")
    return CRATEAttention(spec.dim, spec.heads, cfg)


# ----------------------------------------------------------------------------- MLP: sparsification
class ISTAConfig(MLPConfig, DescentConfig):
    """CRATE's ISTA feed-forward: T proximal steps on ½‖x − Dz‖² + λ‖z‖₁, z ≥ 0, from z = LN(x) (Eq. 13)."""

    kind: Literal["ista"] = "ista"
    solver: SOLVERS.type("ista") = Field(default_factory=ISTASolverConfig)
    """descent rule (default ista: lambd λ = 0.1 and nonnegative codes, the CRATE code)"""
    step_size: StepSizeField = 0.1
    """η (CRATE code: 0.1)"""
    norm: NORMS.type("layer") = Field(default_factory=lambda: LayerNormConfig(in_loop=False, init="normalized"))
    """norm (default: the CRATE code's pre-LayerNorm h = LN(x), outside the loop, ISTA started at
    x0 = h: Eq. 13, no residual)"""

    def default_hidden(self, dim: int) -> int:
        return dim  # a square dictionary D ∈ R^{d×d} (the reference code)

    @classmethod
    def examples(cls) -> list[dict]:
        return [{}]


class ISTABlock(EnergyBlock):
    """ReLU(h − η Dᵀ(D h − h) − η λ), h = LN(x): EnergyBlock(LASSO energy, ISTA, T steps, init = normalized)."""

    part = "mlp"

    def __init__(self, dim: int, cfg: ISTAConfig):
        super().__init__(LassoEnergy(dim), **self.config_args(cfg, dim, name="mlp"))


@MLPS.register("ista", ISTAConfig)
def build_ista(cfg: ISTAConfig, spec: SublayerSpec) -> ISTABlock:
    """CRATE ISTA sparsification step (square dictionary, no residual)."""
    if cfg.hidden is not None and cfg.hidden != spec.dim:
        raise ConfigError(f"mlp.hidden = {cfg.hidden}: the ISTA dictionary is square (d x d = {spec.dim}); "
                          f"remove the key")
    return ISTABlock(spec.dim, cfg)
