"""Intrinsic-optimizer sublayers (seed 001 §2-3, App. A.8): attention and FFN as one descent step.

Each sublayer is an :class:`IntrinsicBlock` = pre-LayerNorm + an update direction (an energy of
:mod:`energyformer.energies.free_energy` / :mod:`~energyformer.energies.intrinsic_heads` /
:mod:`~energyformer.energies.newton`) + a core solver taking ONE step per layer (layer index =
iteration index, seed §2.1 (ii)). Registered kinds (``model.block.attention`` / ``model.block.mlp``):

=================== ============================================================ =====================
kind                update (x: residual stream, S: the sublayer's direction)       seed
=================== ============================================================ =====================
``mha``             ``x + η S(LN x)``, GPT-2 MHA, η = 1 fixed: equals ``gpt``       baseline
``mha_tied``        ``x − η ∇F_MH(LN x)``, tied V = K, W_O = P_hᵀ: exact GD on D7    Theorem 3
``momen_mha``       ``m ← β m + S(LN x);  x ← x + η m`` (heavy ball)                 §3.1 MomenMHA
``nag_mha``         ``m ← β m + S(LN(x + ηβm));  x ← x + η m`` (Nesterov)           §3.1 NagMHA
``momen_gelu``      the FFN in the same momentum recursion (MLP kind)               §3.1 "FFN too"
``nag_gelu``        the FFN in the same Nesterov recursion (MLP kind)               §3.1
``linear_attn``     ``x + η S(LN x)``, linear attention (D6); ``tied``: exact GD       §2.2, Theorem 2
=================== ============================================================ =====================

(The Newton kinds ``mha2nd``, ``mha2nd1st``, ``mha2nd1st_simple``, ``mha2nd_lite`` are in
:mod:`energyformer.blocks.intrinsic_newton`.)

Every kind has the shared sublayer shape (:mod:`energyformer.core.sublayer`: ``solver``, ``step_size``,
``steps``, ``eval_steps``, ``backward``, ``norm``); the kinds differ in their energy and their default
solver. The norm is GPT-2's pre-LayerNorm in the loop (the shared default, ``norm: {kind: layer}``).

**Momentum across layers.** ``momen_*`` / ``nag_*`` default to the core :class:`~energyformer.core.Momentum`
/ :class:`~energyformer.core.Nesterov` solvers (``torch.optim.SGD`` semantics, tested step for step)
whose velocity is carried through ``ctx.carry[carry_key]``; attention and FFN share the key, so one
velocity runs through all 2L sublayers (reconstructed.md §1.2). Every sublayer has its own
**learnable β = sigmoid(θ)** and **learnable step η = softplus(θ')** (seed §3.1; footnote 4 puts η in
the x-update). The seed's initial values were lost in extraction: defaults β₀ = 0.5
(reconstructed.md §1.2 [REC]) and η₀ = 1 (so that β → 0 recovers the baseline). With
``solver: {beta: 0, learn_beta: false}``, ``step_size: 1`` a model is bit-for-bit GPT (tested).

Flags for what the text leaves open (defaults and why):

* ``solver.ema`` (False): ``m ← β m + (1 − β) S`` instead of ``m ← β m + S``. Default off: the seed writes
  momentum as Sutskever et al. (no dampening) and β = 0 must give the baseline either way.
* ``readout`` (``nag_mha``/``nag_gelu``; 'seed'): the seed's recursion (§3.1, Eq. of NAG with η in
  the x-update): the stream holds the iterate x and sublayer l+1 is evaluated at
  ``x_l + η_{l+1} β_{l+1} m_l`` (its own η, β; keys/values from that point too), the head reads x_L.
  'sgd_lookahead' (the default before issue 23, then named 'lookahead'): the stream holds SGD's
  look-ahead point ``y_l = x_l + η_l β_l m_l`` (one sublayer call per step, what
  ``torch.optim.SGD(nesterov=True)`` returns), so sublayer l+1 sees the *previous* sublayer's η, β.
  The two are the same model only when every sublayer shares one fixed η and β (tested); with the
  default per-sublayer learnable β, η they differ. The old names 'iterate' / 'lookahead' are still
  read (as 'seed' / 'sgd_lookahead') so saved run configs load as the model they trained.
  'seed' is the core Nesterov solver's ``form: sutskever`` (its look-ahead point is evaluated by
  :class:`~energyformer.core.EnergyBlock`), 'sgd_lookahead' its ``form: sgd``.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, field_validator, model_validator
from torch import nn

from ..core.block import EnergyBlock
from ..core.momentum import MomentumConfig, NesterovConfig, check_lookahead_start
from ..core.norm import NORMS, LayerNormConfig
from ..core.solver import SOLVERS, Solver
from ..core.stepsize import LearnedStepSizeConfig, StepSizeField
from ..core.sublayer import DescentConfig
from ..energies.free_energy import FEATURE_MAPS, MultiHeadFreeEnergy, SumOfSquaresEnergy
from ..energies.intrinsic_heads import GeluFFNField, LinearAttentionHeads, MHAHeads
from .registry import ATTENTIONS, MLPS, AttentionConfig, MLPConfig, SublayerSpec

CARRY_KEY = "intrinsic_velocity"
#: NagMHA read-outs (module docstring); the names before issue 23 map to the same computations
READOUTS = ("seed", "sgd_lookahead")
LEGACY_READOUTS = {"iterate": "seed", "lookahead": "sgd_lookahead"}


class IntrinsicBlock(EnergyBlock):
    """Pre-LayerNorm sublayer = one solver step on an energy (residual included): an
    :class:`~energyformer.core.EnergyBlock` with a LayerNorm (the look-ahead point of explicit
    Nesterov is the core's, :meth:`~energyformer.core.Solver.shift`). Built from a config by
    :meth:`~energyformer.core.EnergyBlock.from_config`."""

    def __init__(self, energy: nn.Module, solver: Solver, norm: nn.Module, steps: int = 1,
                 norm_in_loop: bool = True, eval_steps: int | None = None, init: str = "residual"):
        super().__init__(energy, solver, steps, norm, norm_in_loop, init, eval_steps)


def _learned(init: float = 1.0):
    return lambda: LearnedStepSizeConfig(init=init)


def _momentum_default(kind: str):
    cls = MomentumConfig if kind == "momentum" else NesterovConfig
    return lambda: cls(beta=0.5, learn_beta=True, carry_key=CARRY_KEY)


class IntrinsicDescentConfig(DescentConfig):
    """The descent keys of every intrinsic sublayer (attention and FFN kinds here and in
    :mod:`~energyformer.blocks.intrinsic_newton`). Their energies act on the merged (B, N, D) output and take no
    per-head preconditioner bank, so ``solver.precond_per_head: true`` is refused when the config loads
    (:class:`~energyformer.core.sublayer.DescentConfig`'s ``head_bank`` rule)."""


class _MomentumSublayer(IntrinsicDescentConfig):
    """Defaults of the momentum / Nesterov sublayers (seed §3.1): learned η₀ = 1 (footnote 4; value
    lost: 1 = the baseline's step), learned β₀ = 0.5 (reconstructed.md §1.2 [REC]), one velocity
    shared across depth through carry_key."""

    step_size: StepSizeField = Field(default_factory=_learned())
    """η in the x-update (seed footnote 4): learned softplus, initialised at 1 (the baseline's step)"""


class _NesterovSublayer(_MomentumSublayer):
    """The momentum sublayer defaults + the Nesterov read-out (module docstring)."""

    readout: Literal[READOUTS] = "seed"
    """seed: stream holds x, sublayer l+1 evaluated at x_l + eta_(l+1) beta_(l+1) m_l (seed §3.1);
    sgd_lookahead: stream holds SGD's look-ahead point x_l + eta_l beta_l m_l (the default before
    issue 23); use the same value in attention and MLP"""

    @field_validator("readout", mode="before")
    @classmethod
    def _legacy_readout_names(cls, v):
        return LEGACY_READOUTS.get(v, v) if isinstance(v, str) else v

    @model_validator(mode="after")
    def _lookahead_eta_at_its_start(self) -> _NesterovSublayer:
        """readout 'seed' computes its look-ahead η before the block's start point: refused with
        ``norm.init: normalized`` and a step size reading that point (:func:`check_lookahead_start`)."""
        if self.lookahead():
            check_lookahead_start(self.step_size, getattr(self.norm, "init", "residual"))
        return self

    def lookahead(self) -> bool:
        """readout 'seed' builds the Nesterov solver in its look-ahead (Sutskever) form (:func:`_nag`)."""
        return self.solver.kind == "nesterov" and self.readout == "seed" or super().lookahead()


# ----------------------------------------------------------------------------- attention kinds
class MHAConfig(AttentionConfig, IntrinsicDescentConfig):
    """GPT-2 multi-head attention as one GD step (η fixed at 1: the ``gpt`` kind, bit for bit)."""

    kind: Literal["mha"] = "mha"

    @classmethod
    def examples(cls) -> list[dict]:
        return [{}]


class MomenMHAConfig(AttentionConfig, _MomentumSublayer):
    """MomenMHA (seed §3.1): heavy-ball momentum over depth; pair with mlp: momen_gelu."""

    kind: Literal["momen_mha"] = "momen_mha"
    solver: SOLVERS.type("momentum") = Field(default_factory=_momentum_default("momentum"))
    """descent rule (default: heavy-ball momentum, learned beta from 0.5, carry_key intrinsic_velocity)"""

    @classmethod
    def examples(cls) -> list[dict]:
        return [{}]


class NagMHAConfig(AttentionConfig, _NesterovSublayer):
    """NagMHA (seed §3.1): Nesterov momentum over depth; pair with mlp: nag_gelu."""

    kind: Literal["nag_mha"] = "nag_mha"
    solver: SOLVERS.type("nesterov") = Field(default_factory=_momentum_default("nesterov"))
    """descent rule (default: Nesterov, learned beta from 0.5, carry_key intrinsic_velocity)"""

    @classmethod
    def examples(cls) -> list[dict]:
        return [{}, {"readout": "sgd_lookahead"}]


class TiedMHAConfig(AttentionConfig, IntrinsicDescentConfig):
    """Tied MHA = GD on the multi-head free energy (Theorem 3: V^h = K^h, W_O^h = (eta/H) P_h^T)."""

    kind: Literal["mha_tied"] = "mha_tied"
    form: Literal["sphere", "elastic"] = "sphere"
    """free energy: hypersphere (Theorem 3, = tied softmax MHA) or full-space elastic (adds -q)"""
    temperature: float | None = Field(None, gt=0)
    """T_h for every head (None: sqrt(head_dim), the standard attention scale)"""
    auto_step_learned: ClassVar[bool] = True
    step_size: Literal["auto"] | StepSizeField = "auto"
    """eta: 'auto' = learned, initialised at heads (so that W_O^h = P_h^T at the start), or a step-size config"""
    norm: NORMS.type("layer") = Field(default_factory=LayerNormConfig)
    """norm (default: LayerNorm in the loop, the gradient at z = LN(x), Theorem 1's point on the sphere;
    in_loop: false gives exact GD on F(x | LN(context)))"""

    @classmethod
    def examples(cls) -> list[dict]:
        return [{}, {"form": "elastic", "norm": {"in_loop": False}}]


class LinearAttnConfig(AttentionConfig, IntrinsicDescentConfig):
    """Linear attention (seed Eq. 5, §2.2) = GD on the sum-of-squares energy (Theorem 2)."""

    kind: Literal["linear_attn"] = "linear_attn"
    tied: bool = False
    """true: exact GD on F_lin (v = k, W_O = P^T); false: free W_V, W_O (standard linear attention)"""
    decay: bool = False
    """gated / retention weights gamma_h^(i-j), gamma_h = sigmoid(theta_h) learned (RetNet init)"""
    feature_map: Literal[FEATURE_MAPS] = "none"
    """kernel phi on queries and keys: none or elu1 (elu + 1, Katharopoulos et al.)"""
    auto_step_learned: ClassVar[bool] = False
    step_size: Literal["auto"] | StepSizeField = "auto"
    """eta: 'auto' = fixed 1 untied, heads when tied; or a step-size config"""

    @classmethod
    def examples(cls) -> list[dict]:
        return [{}, {"tied": True, "decay": True, "feature_map": "elu1"}]


def _block(energy: nn.Module, cfg: DescentConfig, spec: SublayerSpec, name: str, step_size=None) -> IntrinsicBlock:
    """The generic energy sublayer (``step_size`` overrides an 'auto' config)."""
    return IntrinsicBlock.from_config(energy, cfg, spec.dim, spec.heads, step_size=step_size, name=name)


def _nag(cfg):
    """readout 'seed' is the Nesterov solver's Sutskever form (look-ahead evaluation point),
    'sgd_lookahead' its SGD form."""
    if cfg.solver.kind != "nesterov":
        return cfg
    form = "sutskever" if cfg.readout == "seed" else "sgd"
    return cfg.model_copy(update={"solver": cfg.solver.model_copy(update={"form": form})})


def _tag(block: nn.Module, part: str) -> nn.Module:
    block.part = part
    return block


@ATTENTIONS.register("mha", MHAConfig)
def build_mha(cfg: MHAConfig, spec: SublayerSpec) -> IntrinsicBlock:
    """GPT-2 MHA as one gradient-descent step (η fixed 1 = the gpt kind)."""
    energy = MHAHeads(spec.dim, spec.heads, spec.dropout, spec.causal)
    return _tag(_block(energy, cfg, spec, "attention"), "attention")


@ATTENTIONS.register("momen_mha", MomenMHAConfig)
def build_momen_mha(cfg: MomenMHAConfig, spec: SublayerSpec) -> IntrinsicBlock:
    """MomenMHA: heavy-ball momentum across layers (core Momentum solver, carried velocity)."""
    energy = MHAHeads(spec.dim, spec.heads, spec.dropout, spec.causal)
    return _tag(_block(energy, cfg, spec, "attention"), "attention")


@ATTENTIONS.register("nag_mha", NagMHAConfig)
def build_nag_mha(cfg: NagMHAConfig, spec: SublayerSpec) -> IntrinsicBlock:
    """NagMHA: Nesterov momentum across layers (core Nesterov solver, or heavy ball at x + ηβm)."""
    energy = MHAHeads(spec.dim, spec.heads, spec.dropout, spec.causal)
    return _tag(_block(energy, _nag(cfg), spec, "attention"), "attention")


@ATTENTIONS.register("mha_tied", TiedMHAConfig)
def build_tied_mha(cfg: TiedMHAConfig, spec: SublayerSpec) -> IntrinsicBlock:
    """Tied MHA: exact −∇F_MH (fused SDPA), one step of learned size η."""
    energy = MultiHeadFreeEnergy(spec.dim, spec.heads, cfg.form, cfg.temperature, spec.causal)
    eta = LearnedStepSizeConfig(init=float(spec.heads)) if cfg.step_size == "auto" else None
    return _tag(_block(energy, cfg, spec, "attention", eta), "attention")


@ATTENTIONS.register("linear_attn", LinearAttnConfig)
def build_linear_attn(cfg: LinearAttnConfig, spec: SublayerSpec) -> IntrinsicBlock:
    """Linear attention: GD on the (weighted) sum of squares, tied (exact) or untied."""
    if cfg.tied:
        energy = SumOfSquaresEnergy(spec.dim, spec.heads, cfg.decay, cfg.feature_map, None, spec.causal)
    else:
        energy = LinearAttentionHeads(spec.dim, spec.heads, cfg.decay, cfg.feature_map, spec.causal)
    eta = (float(spec.heads) if cfg.tied else 1.0) if cfg.step_size == "auto" else None
    return _tag(_block(energy, cfg, spec, "attention", eta), "attention")


# ----------------------------------------------------------------------------- FFN kinds
class _GeluHidden(MLPConfig):
    def default_hidden(self, dim: int) -> int:
        return 4 * dim


class MomenGeluConfig(_GeluHidden, _MomentumSublayer):
    """GPT-2 GELU FFN inside the heavy-ball recursion (seed §3.1: momentum through the FFN too)."""

    kind: Literal["momen_gelu"] = "momen_gelu"
    solver: SOLVERS.type("momentum") = Field(default_factory=_momentum_default("momentum"))
    """descent rule (default: heavy-ball momentum, learned beta from 0.5, carry_key intrinsic_velocity)"""

    @classmethod
    def examples(cls) -> list[dict]:
        return [{}]


class NagGeluConfig(_GeluHidden, _NesterovSublayer):
    """GPT-2 GELU FFN inside the Nesterov recursion (seed §3.1)."""

    kind: Literal["nag_gelu"] = "nag_gelu"
    solver: SOLVERS.type("nesterov") = Field(default_factory=_momentum_default("nesterov"))
    """descent rule (default: Nesterov, learned beta from 0.5, carry_key intrinsic_velocity)"""

    @classmethod
    def examples(cls) -> list[dict]:
        return [{}]


def _ffn(cfg, spec: SublayerSpec) -> IntrinsicBlock:
    energy = GeluFFNField(spec.dim, cfg.hidden_size(spec), spec.dropout)
    return _tag(_block(energy, cfg, spec, "mlp"), "mlp")


@MLPS.register("momen_gelu", MomenGeluConfig)
def build_momen_gelu(cfg: MomenGeluConfig, spec: SublayerSpec) -> IntrinsicBlock:
    """GELU FFN with heavy-ball momentum carried across sublayers."""
    return _ffn(cfg, spec)


@MLPS.register("nag_gelu", NagGeluConfig)
def build_nag_gelu(cfg: NagGeluConfig, spec: SublayerSpec) -> IntrinsicBlock:
    """GELU FFN with Nesterov momentum carried across sublayers."""
    return _ffn(_nag(cfg), spec)
