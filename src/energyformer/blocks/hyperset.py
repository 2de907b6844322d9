"""Hyper-SET sublayers (seed 002 §4.2-4.3, App. D.1, G.1-G.2): attention kind ``hyperset`` and MLP kind ``hyperset``.

One Hyper-SET layer is an attention step then a feed-forward step (alternating minimisation, §4.1.3),
each one gradient-descent step of an :class:`~energyformer.core.EnergyBlock` on its energy::

    X ← X + α_t ⊙ (−Σ_h W_h Z_h (softmax_col + softmax_row)(β Z_hᵀ Z_h)),  Z_h = RMSNorm(W_hᵀ X)   (Eq. 9)
    X ← X + γ_t ⊙ D ReLU(RMSNorm(Dᵀ X))                                                       (Eq. 11)

Config (``model.block``)::

    attention: {kind: hyperset, energy: bisoftmax | sigmoid | linear, step_size: {kind: network, ...}, lora: {rank: 0}}
    mlp:       {kind: hyperset, energy: relu | softmax | gated, step_size: shared, lora: {rank: 0}}

with ``model.causal: false`` (Hyper-SET has no causal form, App. H.4). Iterate the layer with the
backbone's ``iterations`` (one Hyper-SET layer iterated L times is ``n_layers: 1, iterations: L``).

**Step sizes** α_t, γ_t ∈ R^d per token (§4.3, App. D.1) come from the core's step-size modules
(:mod:`energyformer.core.stepsize`). The default is the paper's network (Table 6): a 512-wide
sinusoidal embedding of the iteration t, Linear 512 x d, GELU, Linear d x d, added to the
conditioning state, GELU, Linear d x 2d — **one** network for both sublayers:
the attention sublayer's network has ``groups: 2`` and hands the second half (γ_t) to the
feed-forward sublayer of the same layer, whose ``step_size: shared`` references the same network
(group 1). The network's ``condition: input`` is the model input x⁽⁰⁾ (the layer stack's input
``ctx.embedded``, Eq. 12, the Sudoku setting, Table 8), ``layer`` the layer's input x_t, the state
before the attention step (the image setting, Table 10; older configs' ``x0`` / ``iterate`` are
migrated to these); γ_t is computed from the same state as α_t, before the
attention step, as in the released code. The conditioning state enters as it is (``state_norm: false``,
Table 6 and the released Sudoku code's ``c + x_inp``; ``state_norm: true`` RMS-normalises it first, as
the released image code's ``ln_inp`` — the previous default, which let α, γ grow about ten times
faster at d = 64 and the token states run away, docs/results/hyperset/plateau/). Every Linear of the
network is zero-initialised
(``zero_init: all``, the paper's "zero-initialization of network parameters" and the code), so the
first forward pass leaves the tokens unchanged. Note what that implies (the core's docstring shows
it): with all-zero init the time-embedding trunk never receives a gradient, so the learned steps
depend on the conditioning state but not on t — in the released Sudoku code too, which zeroes the
same three Linears; ``zero_init: output`` keeps t in play. Fixed,
learned-scalar and per-iteration step sizes (the Table 4 ablation: ``step_size: 0.1``) work as in
any energy block. The iteration index t is 0-based (the paper counts 1..L).

**Depth-wise LoRA** (App. G.2, Table 5): iteration t adds ΔW_t = (α/r) B_t A_t to the shared W (and
ΔD_t to D), A_t ∈ R^{r x d_in}, B_t ∈ R^{d_out x r} both N(0, 0.02²) (paper and code); α defaults
to 4r (the paper's scaling factor 4; the code's lora_alpha = 128 at r = 32). ``lora.iterations``
adapters exist; a later iteration (test-time extrapolation) is an error unless ``lora.beyond``
says ``last`` (reuse the last adapter) or ``none`` (the shared weights alone).

Everything here acts on (B, N, D) token states, so the same sublayers serve tokens (Sudoku) and
patches (images) alike.
"""

from __future__ import annotations

import math
from typing import ClassVar, Literal

import torch
from pydantic import Field, field_validator
from torch import Tensor, nn

from ..core.adapter import DepthLoRA, LoRAConfig
from ..core.block import EnergyBlock
from ..core.context import ForwardContext
from ..core.stepsize import NetworkStepSize, NetworkStepSizeConfig, StepSizeField, StepSizeGroup, make_step_size
from ..core.norm import NORMS, NoNormConfig
from ..core.sublayer import DescentConfig
from ..energies.hyperspherical import BiSoftmaxAttentionEnergy, ReLUFFEnergy
from ..energies.hyperspherical_alt import GatedFFEnergy, LinearAttentionEnergy, SigmoidAttentionEnergy, SoftmaxFFEnergy
from ..utils.config import HASH_NEUTRAL
from ..utils.validate import ConfigError
from .registry import ATTENTIONS, MLPS, AttentionConfig, MLPConfig, SublayerSpec

ATTENTION_ENERGIES = {"bisoftmax": BiSoftmaxAttentionEnergy, "sigmoid": SigmoidAttentionEnergy,
                      "linear": LinearAttentionEnergy}
FF_ENERGIES = {"relu": ReLUFFEnergy, "softmax": SoftmaxFFEnergy, "gated": GatedFFEnergy}


def paper_step_network() -> NetworkStepSizeConfig:
    """The step-size network of App. D.1 / Table 6 (Sudoku, Table 8: conditioned on the model input x⁽⁰⁾,
    not normalised)."""
    return NetworkStepSizeConfig(embed_dim=512, condition="input", output="vector", zero_init="all", groups=2,
                                 state_norm=False)


SHARED_NETWORK = "hyperset.step_network"  # SublayerSpec.shared key: the attention's network, for the MLP


def _hyperset_condition(data: dict) -> dict:
    """In Hyper-SET sublayers a network's ``condition: x0`` has always meant the model input x⁽⁰⁾ (Eq. 12):
    today's ``input``; the attention's ``iterate`` (its input = the layer input) is ``layer``, the state
    the shared γ_t is computed from."""
    eta = data.get("step_size")
    if isinstance(eta, dict) and eta.get("kind") == "network":
        cond = eta.get("condition", "x0")
        role = data.get("_role")
        if isinstance(cond, str):  # anything else is left for validation to reject
            new = {"x0": "input", "iterate": "layer" if role == "attention" else "iterate"}.get(cond, cond)
            data["step_size"] = {**eta, "condition": new}
    data.pop("_role", None)
    return data


class HyperSETSublayer(EnergyBlock):
    """One descent step x ← x + η ⊙ direction(x) on ``energy`` (an :class:`~energyformer.core.EnergyBlock`),
    with η from the config's step size, a group of the attention's shared network (``step_size: shared``),
    and optional depth-wise LoRA."""

    role = ""  # "attention" (owns a groups-2 network) or "mlp" (may reference it)

    def __init__(self, energy: nn.Module, dim: int, cfg, name: str, shared: dict | None = None):
        shared = {} if shared is None else shared
        if cfg.step_size == "shared":
            net = shared.get(SHARED_NETWORK)
            if net is None:
                raise ConfigError(
                    f"{name}.step_size = 'shared' takes gamma from the step-size network of the hyperset attention of "
                    f"the same layer (step_size {{kind: network, groups: 2}}); there is none: give the {name} its own "
                    f"step_size")
            step = net.group(1)
        else:
            step = make_step_size(cfg.step_size, dim)
            if isinstance(step, NetworkStepSize):
                if step.groups > 2:
                    raise ConfigError(f"{name}.step_size.groups = {step.groups}: allowed 1 or 2 (alpha, gamma)")
                if step.groups == 2:
                    if self.role == "attention":
                        shared[SHARED_NETWORK] = step
                    step = step.group(0, owner=True)
        super().__init__(energy, **self.config_args(cfg, dim, step_size=step, name=name))
        self.dim, self.name = dim, name
        w = energy.proj.weight
        if cfg.lora.rank:
            self.adapter = DepthLoRA(w.shape[0], w.shape[1], cfg.lora, f"{name}.lora")
        self._register_load_state_dict_pre_hook(_old_names, with_module=True)

    @property
    def step(self) -> nn.Module:
        """This sublayer's step-size module (the shared network itself for a group view)."""
        ss = self.solver.step_size
        return ss.source if isinstance(ss, StepSizeGroup) else ss

    @property
    def lora(self) -> DepthLoRA | None:
        return self.adapter

    def forward(self, x: Tensor, ctx: ForwardContext | None = None, steps: int | None = None,
                anchor: Tensor | None = None) -> Tensor:  # (B, N, D)
        if ctx is not None and ctx.steps not in (None, 1):
            raise ConfigError(f"steps = {ctx.steps}: a Hyper-SET sublayer takes one step per iteration; "
                              f"use iterations to run longer")
        return super().forward(x, ctx, steps, anchor)

    @torch.no_grad()
    def energy_at(self, x: Tensor, iteration: int = 0, mask: Tensor | None = None) -> Tensor:
        """(B, N) energy of this sublayer at x with iteration ``iteration``'s weights (LoRA)."""
        energy = self.adapted_energy(iteration)
        return energy.energy(x, energy.prepare(x, mask=mask))


def _old_names(module: HyperSETSublayer, state_dict, prefix, *args) -> None:
    """Checkpoints from before the core-seams refactor: the sublayer wrapped its EnergyBlock (``block.``)
    held its step-size network as ``step.`` (now the solver's step size, ``net.`` inside a group view) and
its depth-wise LoRA as ``lora.`` (now the block's ``adapter.``)."""
    step = "solver.step_size." + ("net." if isinstance(module.solver.step_size, StepSizeGroup) else "")
    for key in [k for k in state_dict if k.startswith(prefix)]:
        rest = key[len(prefix):]
        if rest.startswith("block.energy."):
            state_dict[prefix + rest[len("block."):]] = state_dict.pop(key)
        elif rest.startswith("step."):
            state_dict[prefix + step + rest[len("step."):]] = state_dict.pop(key)
        elif rest.startswith("lora."):
            state_dict[prefix + "adapter." + rest[len("lora."):]] = state_dict.pop(key)


def _one_step(v: int | None) -> int | None:
    """``steps`` / ``eval_steps`` of a Hyper-SET sublayer: one descent step per iteration (Eq. 9 / 11), as a
    call-time budget (``--steps``) is refused too; config-time T > 1 used to train without a word."""
    if v not in (None, 1):
        raise ValueError("a Hyper-SET sublayer takes one step per iteration (Eq. 9, 11); use model.iterations "
                         "to run longer")
    return v


class HyperSETAttentionConfig(AttentionConfig, DescentConfig):
    """Hyper-SET attention: one descent step on a hyperspherical attention energy (Eq. 9, Table 19)."""

    kind: Literal["hyperset"] = "hyperset"
    supports_causal: ClassVar[bool] = False
    causal_note: ClassVar[str] = "Hyper-SET has no causal form, seed 002 App. H.4"
    energy: Literal["bisoftmax", "sigmoid", "linear"] = "bisoftmax"
    """E_ATTN: bi-softmax (Eq. 3, the paper), sigmoid or linear attention (Table 19)"""
    head_dim: int | None = Field(None, ge=1)
    """subspace dimension p (None: dim / heads, so H p = d as in the paper)"""
    beta_scale: float = Field(1.0, json_schema_extra={HASH_NEUTRAL: True})   # added after records: 1 = before
    """β = beta_scale / √p, the inverse temperature of E_ATTN (1, recommended: the paper's β = 1/√p, Eq. 3). Any
    finite non-zero value is an energy with the same update form (∂E/∂S = the softmaxes of βS for either sign);
    a negative one makes the bi-softmax a soft-min whose weights favour the least similar tokens — not in the
    paper: issue 20's plateau ablation (docs/results/hyperset/plateau/ablation) measures it"""
    sphere: bool = True
    """RMSNorm the projections onto the sphere of radius √p (Eq. 8); false: the plain energy"""
    gain: Literal["fixed", "learned"] = "fixed"
    """RMSNorm gain: fixed 1 (radius √p, paper) or learned (the released code)"""
    qkv_norm: Literal["shared", "separate"] = "shared"
    """one norm for Q = K = V (paper; symmetric) or three learnable ones (the image code; not a gradient)"""
    self_interaction: bool = True
    """j = i in the inner sum of Eq. 3 (the paper); false: j ≠ i"""
    impl: Literal["auto", "fused", "einsum", "kernel"] = "auto"
    """bi-softmax by two SDPA passes + one log-sum-exp (fused), the materialised scores (einsum), one
    Triton program per sequence and head (kernel: ≤ 128 tokens, one shared sphere, no padding), or auto
    (recommended): the kernel on CUDA wherever it applies (faster on an H100, measured), else einsum below
    512 tokens and fused from there on (the faster of the two on CPU, measured)"""
    phi: Literal["sigmoid", "tanh", "softplus"] = "sigmoid"
    """Φ of linear attention (Table 19: sigmoid)"""
    step_size: StepSizeField = Field(default_factory=paper_step_network)
    """α_t: the paper's network (groups 2: also γ for the feed-forward), or fixed / learned / per_iteration"""
    lora: LoRAConfig = Field(default_factory=LoRAConfig)
    """depth-wise LoRA of W (App. G.2)"""
    norm: NORMS.type("none") = Field(default_factory=NoNormConfig)
    """norm of the block (default none: Hyper-SET has no pre-norm; its sphere RMSNorms are part of the
    energy, Eq. 8, keys sphere / gain)"""

    _steps = field_validator("steps", "eval_steps")(_one_step)

    @field_validator("beta_scale")
    @classmethod
    def _beta_scale(cls, v: float) -> float:
        if not math.isfinite(v) or v == 0:
            raise ValueError("must be a finite non-zero number (1: the paper's β = 1/√p)")
        return v

    @classmethod
    def migrate(cls, data: dict) -> dict:
        return _hyperset_condition({**super().migrate(data), "_role": "attention"})

    @classmethod
    def examples(cls) -> list[dict]:
        # the default network step size starts at zero (an identity map): the last three take a step
        fixed, net = {"kind": "fixed", "value": 0.5}, {"kind": "network", "zero_init": "none", "state_norm": True}
        return [{}, {"impl": "fused"}, {"energy": "sigmoid"}, {"energy": "linear"},
                {"sphere": False, "gain": "learned", "self_interaction": False, "impl": "fused"},
                {"step_size": fixed}, {"step_size": net, "impl": "fused"}, {"step_size": fixed, "beta_scale": -1.0}]


class HyperSETAttention(HyperSETSublayer):
    """Hyper-SET attention sublayer: x ← x − α_t ⊙ Σ_h W_h (bi-softmax)(Z_h) (Eq. 9)."""

    part = "attention"
    role = "attention"


class HyperSETFFConfig(MLPConfig, DescentConfig):
    """Hyper-SET feed-forward: one ascent step toward the columns of D on the sphere (Eq. 11, Table 20)."""

    kind: Literal["hyperset"] = "hyperset"
    supports_causal: ClassVar[bool] = False
    causal_note: ClassVar[str] = "Hyper-SET has no causal form, seed 002 App. H.4"
    energy: Literal["relu", "softmax", "gated"] = "relu"
    """E_FF: ReLU² (Eq. 5, the paper), softmax or gated (Table 20)"""
    sphere: bool = True
    """RMSNorm Dᵀx onto the sphere of radius √M (Eq. 11); false: the plain energy"""
    gain: Literal["fixed", "learned"] = "fixed"
    """RMSNorm gain: fixed 1 (paper) or learned (the released code)"""
    phi: Literal["sigmoid", "tanh", "softplus"] = "sigmoid"
    """Φ of the gated feed-forward (Table 20: sigmoid)"""
    step_size: Literal["shared"] | StepSizeField = "shared"
    """γ_t: 'shared' (from the attention sublayer's network, Table 6) or a step-size config of its own"""
    lora: LoRAConfig = Field(default_factory=LoRAConfig)
    """depth-wise LoRA of D (App. G.2)"""
    norm: NORMS.type("none") = Field(default_factory=NoNormConfig)
    """norm of the block (default none: Hyper-SET has no pre-norm; its sphere RMSNorms are part of the
    energy, Eq. 11, keys sphere / gain)"""

    _steps = field_validator("steps", "eval_steps")(_one_step)

    @classmethod
    def migrate(cls, data: dict) -> dict:
        return _hyperset_condition(super().migrate(data))

    def default_hidden(self, dim: int) -> int:
        return 4 * dim  # M = 4d (Sudoku, Table 8); the image models use M = d

    @classmethod
    def examples(cls) -> list[dict]:
        # own step size: the default 'shared' takes γ from the layer's attention, absent when fuzzed alone
        own = {"kind": "fixed", "value": 0.5}
        return [{"step_size": own}, {"step_size": own, "sphere": False}, {"step_size": own, "energy": "softmax"},
                {"step_size": own, "energy": "gated"}]


class HyperSETFF(HyperSETSublayer):
    """Hyper-SET feed-forward sublayer: x ← x + γ_t ⊙ D act(RMSNorm(Dᵀ x)) (Eq. 11)."""

    part = "mlp"
    role = "mlp"


@ATTENTIONS.register("hyperset", HyperSETAttentionConfig)
def build_hyperset_attention(cfg: HyperSETAttentionConfig, spec: SublayerSpec) -> HyperSETAttention:
    """Hyper-SET attention (bi-softmax / sigmoid / linear energy, learned step sizes, optional LoRA)."""
    cls = ATTENTION_ENERGIES[cfg.energy]
    kw = dict(sphere=cfg.sphere, gain=cfg.gain, qkv_norm=cfg.qkv_norm, self_interaction=cfg.self_interaction,
              beta=cfg.beta_scale / math.sqrt(cfg.head_dim or max(1, spec.dim // spec.heads)))
    if cfg.energy == "bisoftmax":
        kw["impl"] = cfg.impl
    elif cfg.energy == "linear":
        kw["phi"] = cfg.phi
    try:
        energy = cls(spec.dim, spec.heads, cfg.head_dim, **kw)
    except ValueError as err:
        raise ConfigError(f"attention ({cfg.energy}): {err}") from None
    return HyperSETAttention(energy, spec.dim, cfg, "attention", spec.shared)


@MLPS.register("hyperset", HyperSETFFConfig)
def build_hyperset_ff(cfg: HyperSETFFConfig, spec: SublayerSpec) -> HyperSETFF:
    """Hyper-SET feed-forward (ReLU / softmax / gated energy, shared or own step sizes, optional LoRA)."""
    cls = FF_ENERGIES[cfg.energy]
    kw = dict(sphere=cfg.sphere, gain=cfg.gain)
    if cfg.energy == "gated":
        kw["phi"] = cfg.phi
    energy = cls(spec.dim, cfg.hidden_size(spec), **kw)
    return HyperSETFF(energy, spec.dim, cfg, "mlp", spec.shared)


def check_hyperset_block(block) -> None:
    """Config-time check of a ``model.block`` with Hyper-SET sublayers (shared γ needs the attention's network)."""
    att, mlp = block.attention, block.mlp
    if getattr(mlp, "kind", None) == "hyperset" and mlp.step_size == "shared":
        net = getattr(att, "step_size", None)
        if att.kind != "hyperset" or getattr(net, "kind", None) != "network" or net.groups != 2:
            raise ConfigError("model.block.mlp.step_size = 'shared' needs attention kind 'hyperset' with "
                              "step_size {kind: network, groups: 2}; otherwise give the mlp its own step_size")
