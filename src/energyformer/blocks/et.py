"""Energy Transformer block (Hoover et al. 2023, NeurIPS, §2 Eqs. 1-8) as attention kind ``et``, and the
empty MLP kind ``identity`` that goes with it.

ET has one energy (attention + Hopfield memory, :mod:`energyformer.energies.energy_transformer`) and
one update for both: T steps of

    x ← x - α ∇_g E(g),   g = EnergyLayerNorm(x)                                     (Eq. 8, discretised)

i.e. an :class:`~energyformer.core.EnergyBlock` with the ET layer norm *in the loop* (re-applied at
every step; the default of the sublayer's ``norm`` key, ``{kind: energy_layer, in_loop: true}``), gradient descent and no separate MLP — so a layer is ``{attention: {kind: et}, mlp:
identity}``. Recurrent depth: ``steps`` descent steps inside the block times the model's ``iterations``
passes (ET's code: 12 steps, α = 0.1; the Hyper-SET authors' image ET: one step per pass, 12 passes,
α = 1). The update is
exactly -α ∇_g E at g = LN(x) (tested against autograd); it is not -α ∇_x E(LN(x)), so the block
reports ``exact = False``, but it lowers E(LN(x)) for small α because the scalar-gain layer norm has
a symmetric PSD Jacobian (the energies module docstring; tested).

Config (``model.block``)::

    attention: {kind: et, steps: 1, step_size: 0.1, memories_ratio: 4.0, self_interaction: false}
    mlp: identity
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field
from torch import Tensor, nn

from ..core.block import EnergyBlock
from ..core.context import ForwardContext
from ..core.stepsize import StepSizeField
from ..core.norm import NORMS
from ..core.sublayer import DescentConfig
from ..energies.energy_transformer import EnergyLayerNormConfig, EnergyTransformerEnergy
from ..utils.validate import ConfigError
from .registry import ATTENTIONS, MLPS, AttentionConfig, MLPConfig, SublayerSpec


class ETConfig(AttentionConfig, DescentConfig):
    """Energy Transformer block: attention + Hopfield energy on LN(x), T gradient steps (ET Eqs. 1-8)."""

    kind: Literal["et"] = "et"
    supports_causal: ClassVar[bool] = False
    causal_note: ClassVar[str] = "its energy couples every pair of tokens"
    step_size: StepSizeField = 0.1
    """α (ET's code: 0.1 with 12 steps; the Hyper-SET authors' ET: 1.0); a number or a step-size config"""
    head_dim: int | None = Field(None, ge=1)
    """Y, the query/key dimension per head (None: dim / heads)"""
    beta: float | None = Field(None, gt=0)
    """inverse temperature (None: 1/√Y)"""
    memories_ratio: float = Field(4.0, ge=0)
    """Hopfield memories M = ratio · dim (ET and the Hyper-SET authors' ET: 4); 0 = no Hopfield term"""
    self_interaction: bool = False
    """include B = C in the attention sum (the ET paper, Eq. 2, excludes it; ET's code and the Hyper-SET
    authors' ET include it)"""
    init_std: float = Field(0.002, gt=0)
    """std of the N(0, std²) init of W^Q, W^K (ET code: 0.002)"""
    norm: NORMS.type("energy_layer") = Field(default_factory=EnergyLayerNormConfig)
    """norm (default: ET's scalar-gain layer norm g = LN(x) in the loop, Eqs. 1 and 8: the step is
    -α ∇_g E at g = LN(x_t), so not exact; x0 = x)"""

    @classmethod
    def examples(cls) -> list[dict]:
        return [{}]


class EnergyTransformerBlock(EnergyBlock):
    """ET sublayer: :class:`EnergyBlock` (energy, GD(α), T steps, EnergyLayerNorm in the loop)."""

    part = "attention"

    def __init__(self, dim: int, heads: int, cfg: ETConfig):
        memories = int(round(cfg.memories_ratio * dim))
        try:
            energy = EnergyTransformerEnergy(dim, heads, cfg.head_dim, memories, cfg.beta, cfg.self_interaction,
                                             cfg.init_std)
        except ValueError as err:
            raise ConfigError(f"attention (et): {err}") from None
        super().__init__(energy, **self.config_args(cfg, dim, heads, name="attention"))


@ATTENTIONS.register("et", ETConfig)
def build_et(cfg: ETConfig, spec: SublayerSpec) -> EnergyTransformerBlock:
    """Energy Transformer block (Hoover et al. 2023): attention + Hopfield energy, T gradient steps."""
    if spec.dim % spec.heads and cfg.head_dim is None:
        raise ConfigError(f"attention (et): heads = {spec.heads} does not divide dim = {spec.dim}; set head_dim")
    return EnergyTransformerBlock(spec.dim, spec.heads, cfg)


class NoMLPConfig(MLPConfig):
    """No MLP sublayer (the identity): for blocks whose one energy already holds the memory term (ET)."""

    kind: Literal["identity"] = "identity"

    def default_hidden(self, dim: int) -> int:
        return 0

    @classmethod
    def examples(cls) -> list[dict]:
        return [{}]


class NoMLP(nn.Module):
    """Identity sublayer with no parameters (MLP kind ``identity``)."""

    part = "mlp"

    def __init__(self):
        super().__init__()
        self.qualname = ""

    def forward(self, x: Tensor, ctx: ForwardContext | None = None) -> Tensor:
        return x


@MLPS.register("identity", NoMLPConfig)
def build_no_mlp(cfg: NoMLPConfig, spec: SublayerSpec) -> NoMLP:
    """No MLP: the identity (Energy Transformer layers hold their memory inside the attention energy)."""
    if cfg.hidden is not None:
        raise ConfigError(f"mlp.hidden = {cfg.hidden}: MLP kind 'identity' has no hidden layer; remove the key")
    return NoMLP()
