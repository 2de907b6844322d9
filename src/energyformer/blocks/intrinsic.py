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

**Momentum across layers.** ``momen_*`` / ``nag_*`` build the core :class:`~energyformer.core.Momentum`
/ :class:`~energyformer.core.Nesterov` solvers (``torch.optim.SGD`` semantics, tested step for step)
whose velocity is carried through ``ctx.carry[carry_key]``; attention and FFN share the key, so one
velocity runs through all 2L sublayers (reconstructed.md §1.2). Every sublayer has its own
**learnable β = sigmoid(θ)** and **learnable step η = softplus(θ')** (seed §3.1; footnote 4 puts η in
the x-update). The seed's initial values were lost in extraction: defaults β₀ = 0.5
(reconstructed.md §1.2 [REC]) and η₀ = 1 (so that β → 0 recovers the baseline). With ``beta: 0``,
``learn_beta: false``, ``step_size: 1``, ``learn_step_size: false`` a model is bit-for-bit GPT (tested).

Flags for what the text leaves open (defaults and why):

* ``ema`` (False): ``m ← β m + (1 − β) S`` instead of ``m ← β m + S``. Default off: the seed writes
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
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator
from torch import Tensor, nn

from ..core.block import EnergyBlock
from ..core.context import ForwardContext
from ..core.momentum import Momentum, Nesterov
from ..core.solver import GradientDescent, Solver, _scale
from ..core.stepsize import LearnedStepSize
from ..energies.free_energy import FEATURE_MAPS, MultiHeadFreeEnergy, SumOfSquaresEnergy
from ..energies.intrinsic_heads import GeluFFNField, LinearAttentionHeads, MHAHeads
from ..utils.config import ConfigModel
from ..utils.validate import ConfigError
from .registry import ATTENTIONS, MLPS, AttentionConfig, MLPConfig, SublayerSpec

CARRY_KEY = "intrinsic_velocity"
#: NagMHA read-outs (module docstring); the names before issue 23 map to the same computations
READOUTS = ("seed", "sgd_lookahead")
LEGACY_READOUTS = {"iterate": "seed", "lookahead": "sgd_lookahead"}


class IntrinsicBlock(EnergyBlock):
    """Pre-LayerNorm sublayer = one solver step on an energy (residual included).

    Like :class:`~energyformer.core.EnergyBlock`, plus: the queries prepared from ``LN(x)`` are
    reused for the first step (no second projection), and with ``lookahead`` (explicit Nesterov) the
    sublayer is evaluated at ``x + η β m`` where ``m`` is the carried velocity.
    """

    def __init__(self, energy: nn.Module, solver: Solver, norm: nn.Module, steps: int = 1,
                 norm_in_loop: bool = True, lookahead: bool = False):
        super().__init__(energy, solver, steps, norm, norm_in_loop, "residual")
        self.lookahead = lookahead

    def forward(self, x: Tensor, ctx: ForwardContext | None = None, steps: int | None = None,
                anchor: Tensor | None = None) -> Tensor:  # (B, N, D)
        ctx = ctx or ForwardContext()
        if steps is None:
            steps = self.steps if ctx.steps is None else ctx.steps
        shift = None
        if self.lookahead:
            if steps != 1:
                raise ConfigError(f"steps = {steps}: readout = 'seed' (explicit Nesterov) takes one step "
                                  "per sublayer")
            m = ctx.carry.get(self.solver.carry_key)
            if m is not None:
                eta = self.solver.step_size(ctx.iteration, x, x)
                shift = _scale(eta, _scale(self.solver.beta(), m))
        y = x if shift is None else x + shift
        h = self.norm(y)  # (B, N, D)
        state = self.energy.prepare(h, cache=ctx.cache_slot(self.qualname), offset=ctx.offset, mask=ctx.mask)
        if self.norm_in_loop:
            def point(v: Tensor) -> Tensor:
                return h if v is x else self.norm(v if shift is None else v + shift)
        else:
            point = None if shift is None else (lambda v: v + shift)
        trace, stats = ctx.traces is not None, ctx.stats is not None
        res = self.solver.run(self.energy, x, state, steps, point=point, trace=trace, ctx=ctx, stats=stats)
        self.record(ctx, res)
        return res.x


# ----------------------------------------------------------------------------- solvers
class _EMAVelocity:
    """``m ← β m + (1 − β) d`` (m₀ = 0): torch.optim.SGD(dampening=β), except that SGD does not
    dampen its first step."""

    def velocity(self, d: Tensor, m: Tensor | None) -> Tensor:
        b = self.beta()
        d = _scale(1 - b, d)
        return d if m is None else _scale(b, m) + d


class EMAMomentum(_EMAVelocity, Momentum):
    """Heavy-ball momentum with an EMA velocity (not registered: built by ``ema: true``)."""


class EMANesterov(_EMAVelocity, Nesterov):
    """Nesterov (SGD form) with an EMA velocity (not registered: built by ``ema: true``)."""


def step_size(value: float, learn: bool):
    return LearnedStepSize(value) if learn else float(value)


class MomentumFields(ConfigModel):
    """Options of the momentum / Nesterov sublayers (seed §3.1)."""

    beta: float = Field(0.5, ge=0, lt=1)
    """initial momentum coefficient β in [0, 1) (seed value lost; reconstructed.md §1.2 [REC] 0.5)"""
    learn_beta: bool = True
    """learn β = sigmoid(θ) per sublayer (seed §3.1); needs 0 < beta < 1"""
    step_size: float = Field(1.0, gt=0)
    """initial step η in the x-update (seed footnote 4; value lost: 1 = the baseline's step)"""
    learn_step_size: bool = True
    """learn η = softplus(θ) per sublayer (seed §3.1)"""
    ema: bool = False
    """velocity m <- beta m + (1 - beta) S (EMA) instead of m <- beta m + S"""
    carry_key: str = Field(CARRY_KEY, min_length=1)
    """ctx.carry key of the velocity: sublayers sharing it share one velocity across depth"""

    @model_validator(mode="after")
    def _learn_beta_needs_open_interval(self):
        if self.learn_beta and not 0 < self.beta < 1:
            raise ValueError(f"beta = {self.beta}: must be in (0, 1) when learn_beta = true "
                             "(beta = sigmoid(theta)); set learn_beta: false for beta = 0")
        return self


class NesterovFields(MomentumFields):
    """Options of the Nesterov sublayers: the momentum options + the read-out (module docstring)."""

    readout: Literal[READOUTS] = "seed"
    """seed: stream holds x, sublayer l+1 evaluated at x_l + eta_(l+1) beta_(l+1) m_l (seed §3.1);
    sgd_lookahead: stream holds SGD's look-ahead point x_l + eta_l beta_l m_l (the default before
    issue 23); use the same value in attention and MLP"""

    @field_validator("readout", mode="before")
    @classmethod
    def _legacy_readout_names(cls, v):
        return LEGACY_READOUTS.get(v, v) if isinstance(v, str) else v


def momentum_solver(cfg: MomentumFields, rule: str) -> Solver:
    """The core heavy-ball ('momentum') or Nesterov ('nesterov') solver of a sublayer config."""
    cls = {("momentum", False): Momentum, ("momentum", True): EMAMomentum,
           ("nesterov", False): Nesterov, ("nesterov", True): EMANesterov}[(rule, cfg.ema)]
    return cls(step_size=step_size(cfg.step_size, cfg.learn_step_size), beta=cfg.beta,
               learn_beta=cfg.learn_beta, carry_key=cfg.carry_key)


# ----------------------------------------------------------------------------- attention kinds
class MHAConfig(AttentionConfig):
    """GPT-2 multi-head attention as one GD step (η fixed at 1: the ``gpt`` kind, bit for bit)."""

    kind: Literal["mha"] = "mha"
    step_size: float = Field(1.0, gt=0)
    """η (1: the baseline)"""
    learn_step_size: bool = False
    """learn η = softplus(θ)"""

    @classmethod
    def examples(cls) -> list[dict]:
        return [{}]


class MomenMHAConfig(AttentionConfig, MomentumFields):
    """MomenMHA (seed §3.1): heavy-ball momentum over depth; pair with mlp: momen_gelu."""

    kind: Literal["momen_mha"] = "momen_mha"

    @classmethod
    def examples(cls) -> list[dict]:
        return [{}]


class NagMHAConfig(AttentionConfig, NesterovFields):
    """NagMHA (seed §3.1): Nesterov momentum over depth; pair with mlp: nag_gelu."""

    kind: Literal["nag_mha"] = "nag_mha"

    @classmethod
    def examples(cls) -> list[dict]:
        return [{}, {"readout": "sgd_lookahead"}]


class TiedMHAConfig(AttentionConfig):
    """Tied MHA = GD on the multi-head free energy (Theorem 3: V^h = K^h, W_O^h = (eta/H) P_h^T)."""

    kind: Literal["mha_tied"] = "mha_tied"
    form: Literal["sphere", "elastic"] = "sphere"
    """free energy: hypersphere (Theorem 3, = tied softmax MHA) or full-space elastic (adds -q)"""
    temperature: float | None = Field(None, gt=0)
    """T_h for every head (None: sqrt(head_dim), the standard attention scale)"""
    step_size: float | None = Field(None, gt=0)
    """initial eta (None: heads, so that W_O^h = P_h^T at the start)"""
    learn_step_size: bool = True
    """learn eta = softplus(theta)"""
    norm_in_loop: bool = True
    """gradient at z = LN(x) (Theorem 1's point on the sphere); false: exact GD on F(x | LN(context))"""

    @classmethod
    def examples(cls) -> list[dict]:
        return [{}, {"form": "elastic", "norm_in_loop": False}]


class LinearAttnConfig(AttentionConfig):
    """Linear attention (seed Eq. 5, §2.2) = GD on the sum-of-squares energy (Theorem 2)."""

    kind: Literal["linear_attn"] = "linear_attn"
    tied: bool = False
    """true: exact GD on F_lin (v = k, W_O = P^T); false: free W_V, W_O (standard linear attention)"""
    decay: bool = False
    """gated / retention weights gamma_h^(i-j), gamma_h = sigmoid(theta_h) learned (RetNet init)"""
    feature_map: Literal[FEATURE_MAPS] = "none"
    """kernel phi on queries and keys: none or elu1 (elu + 1, Katharopoulos et al.)"""
    step_size: float | None = Field(None, gt=0)
    """initial eta (None: 1 untied, heads when tied)"""
    learn_step_size: bool = False
    """learn eta = softplus(theta)"""

    @classmethod
    def examples(cls) -> list[dict]:
        return [{}, {"tied": True, "decay": True, "feature_map": "elu1"}]


def _norm(dim: int) -> nn.LayerNorm:
    return nn.LayerNorm(dim)


def _tag(block: nn.Module, part: str) -> nn.Module:
    block.part = part
    return block


@ATTENTIONS.register("mha", MHAConfig)
def build_mha(cfg: MHAConfig, spec: SublayerSpec) -> IntrinsicBlock:
    """GPT-2 MHA as one gradient-descent step (η fixed 1 = the gpt kind)."""
    energy = MHAHeads(spec.dim, spec.heads, spec.dropout, spec.causal)
    solver = GradientDescent(step_size=step_size(cfg.step_size, cfg.learn_step_size))
    return _tag(IntrinsicBlock(energy, solver, _norm(spec.dim)), "attention")


@ATTENTIONS.register("momen_mha", MomenMHAConfig)
def build_momen_mha(cfg: MomenMHAConfig, spec: SublayerSpec) -> IntrinsicBlock:
    """MomenMHA: heavy-ball momentum across layers (core Momentum solver, carried velocity)."""
    energy = MHAHeads(spec.dim, spec.heads, spec.dropout, spec.causal)
    return _tag(IntrinsicBlock(energy, momentum_solver(cfg, "momentum"), _norm(spec.dim)), "attention")


@ATTENTIONS.register("nag_mha", NagMHAConfig)
def build_nag_mha(cfg: NagMHAConfig, spec: SublayerSpec) -> IntrinsicBlock:
    """NagMHA: Nesterov momentum across layers (core Nesterov solver, or heavy ball at x + ηβm)."""
    energy = MHAHeads(spec.dim, spec.heads, spec.dropout, spec.causal)
    explicit = cfg.readout == "seed"
    solver = momentum_solver(cfg, "momentum" if explicit else "nesterov")
    return _tag(IntrinsicBlock(energy, solver, _norm(spec.dim), lookahead=explicit), "attention")


@ATTENTIONS.register("mha_tied", TiedMHAConfig)
def build_tied_mha(cfg: TiedMHAConfig, spec: SublayerSpec) -> IntrinsicBlock:
    """Tied MHA: exact −∇F_MH (fused SDPA), one step of learned size η."""
    energy = MultiHeadFreeEnergy(spec.dim, spec.heads, cfg.form, cfg.temperature, spec.causal)
    eta = float(spec.heads) if cfg.step_size is None else cfg.step_size
    solver = GradientDescent(step_size=step_size(eta, cfg.learn_step_size))
    return _tag(IntrinsicBlock(energy, solver, _norm(spec.dim), norm_in_loop=cfg.norm_in_loop), "attention")


@ATTENTIONS.register("linear_attn", LinearAttnConfig)
def build_linear_attn(cfg: LinearAttnConfig, spec: SublayerSpec) -> IntrinsicBlock:
    """Linear attention: GD on the (weighted) sum of squares, tied (exact) or untied."""
    if cfg.tied:
        energy = SumOfSquaresEnergy(spec.dim, spec.heads, cfg.decay, cfg.feature_map, None, spec.causal)
    else:
        energy = LinearAttentionHeads(spec.dim, spec.heads, cfg.decay, cfg.feature_map, spec.causal)
    eta = (float(spec.heads) if cfg.tied else 1.0) if cfg.step_size is None else cfg.step_size
    solver = GradientDescent(step_size=step_size(eta, cfg.learn_step_size))
    return _tag(IntrinsicBlock(energy, solver, _norm(spec.dim)), "attention")


# ----------------------------------------------------------------------------- FFN kinds
class _GeluHidden(MLPConfig):
    def default_hidden(self, dim: int) -> int:
        return 4 * dim


class MomenGeluConfig(_GeluHidden, MomentumFields):
    """GPT-2 GELU FFN inside the heavy-ball recursion (seed §3.1: momentum through the FFN too)."""

    kind: Literal["momen_gelu"] = "momen_gelu"

    @classmethod
    def examples(cls) -> list[dict]:
        return [{}]


class NagGeluConfig(_GeluHidden, NesterovFields):
    """GPT-2 GELU FFN inside the Nesterov recursion (seed §3.1)."""

    kind: Literal["nag_gelu"] = "nag_gelu"

    @classmethod
    def examples(cls) -> list[dict]:
        return [{}]


def _ffn(cfg, spec: SublayerSpec, rule: str, lookahead: bool = False) -> IntrinsicBlock:
    energy = GeluFFNField(spec.dim, cfg.hidden_size(spec), spec.dropout)
    return _tag(IntrinsicBlock(energy, momentum_solver(cfg, rule), _norm(spec.dim), lookahead=lookahead), "mlp")


@MLPS.register("momen_gelu", MomenGeluConfig)
def build_momen_gelu(cfg: MomenGeluConfig, spec: SublayerSpec) -> IntrinsicBlock:
    """GELU FFN with heavy-ball momentum carried across sublayers."""
    return _ffn(cfg, spec, "momentum")


@MLPS.register("nag_gelu", NagGeluConfig)
def build_nag_gelu(cfg: NagGeluConfig, spec: SublayerSpec) -> IntrinsicBlock:
    """GELU FFN with Nesterov momentum carried across sublayers."""
    explicit = cfg.readout == "seed"
    return _ffn(cfg, spec, "momentum" if explicit else "nesterov", lookahead=explicit)
