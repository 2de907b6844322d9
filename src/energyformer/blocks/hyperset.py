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
(RMS-normalised) conditioning state, GELU, Linear d x 2d — **one** network for both sublayers:
the attention sublayer's network has ``groups: 2`` and hands the second half (γ_t) to the
feed-forward sublayer of the same layer, whose ``step_size: shared`` takes it (through
``ctx.carry``). In these sublayers the network's ``condition: x0`` means the model input x⁽⁰⁾ (the
layer stack's input ``ctx.embedded``, Eq. 12, the Sudoku setting, Table 8), ``iterate`` the current
state x_t (the image setting, Table 10); γ_t is computed from the same state as α_t, before the
attention step, as in the released code. Every Linear of the network is zero-initialised
(``zero_init: all``, the paper's "zero-initialization of network parameters" and the code), so the
first forward pass leaves the tokens unchanged. Note what that implies (the core's docstring shows
it): with all-zero init the time-embedding trunk never receives a gradient, so the learned steps
depend on the conditioning state but not on t — in the released Sudoku code too, which zeroes the
same three Linears; ``zero_init: output`` keeps t in play. The conditioning state is RMS-normalised
before it meets the time embedding (as the released image code's ``ln_inp``; its Sudoku model adds
x⁽⁰⁾ unnormalised). Fixed,
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

from contextlib import contextmanager
from typing import Literal

import torch
from pydantic import Field
from torch import Tensor, nn

from ..core.block import EnergyBlock
from ..core.context import ForwardContext
from ..core.solver import GradientDescent
from ..core.stepsize import NetworkStepSize, NetworkStepSizeConfig, StepSize, StepSizeField, make_step_size
from ..energies.hyperspherical import BiSoftmaxAttentionEnergy, ReLUFFEnergy
from ..energies.hyperspherical_alt import GatedFFEnergy, LinearAttentionEnergy, SigmoidAttentionEnergy, SoftmaxFFEnergy
from ..utils.config import ConfigModel
from ..utils.validate import ConfigError
from .registry import ATTENTIONS, MLPS, AttentionConfig, MLPConfig, SublayerSpec

ATTENTION_ENERGIES = {"bisoftmax": BiSoftmaxAttentionEnergy, "sigmoid": SigmoidAttentionEnergy,
                      "linear": LinearAttentionEnergy}
FF_ENERGIES = {"relu": ReLUFFEnergy, "softmax": SoftmaxFFEnergy, "gated": GatedFFEnergy}
SHARE_KEY = "hyperset.gamma"


def paper_step_network() -> NetworkStepSizeConfig:
    """The step-size network of App. D.1 / Table 6 (Sudoku, Table 8: conditioned on x⁽⁰⁾)."""
    return NetworkStepSizeConfig(embed_dim=512, condition="x0", output="vector", zero_init="all", groups=2)


class LoRAConfig(ConfigModel):
    """Depth-wise LoRA (App. G.2): one low-rank delta of the shared projection per iteration."""

    rank: int = Field(0, ge=0)
    """r; 0 = off"""
    alpha: float | None = Field(None, gt=0)
    """scale numerator: ΔW = (alpha/r) B A (None: 4r, the paper's scaling factor 4)"""
    iterations: int | None = Field(None, ge=1)
    """number of per-iteration adapters (required when rank > 0; >= the training iterations)"""
    init_std: float = Field(0.02, gt=0)
    """std of the Gaussian init of A and B (paper and code: 0.02)"""
    beyond: Literal["error", "last", "none"] = "error"
    """iterations past the last adapter: error, reuse the last adapter, or no adapter"""


class DepthLoRA(nn.Module):
    """ΔW_t = (alpha/r) B_t A_t, t < iterations (App. G.2); ``delta(t)`` -> (d_out, d_in) or None."""

    def __init__(self, d_out: int, d_in: int, cfg: LoRAConfig, name: str = "lora"):
        super().__init__()
        if cfg.iterations is None:
            raise ConfigError(f"{name}.iterations is not set: give the number of per-iteration adapters "
                              f"(at least the training iterations) when {name}.rank = {cfg.rank}")
        r, n = cfg.rank, cfg.iterations
        self.rank, self.iterations, self.beyond, self.name = r, n, cfg.beyond, name
        self.scale = (cfg.alpha if cfg.alpha is not None else 4.0 * r) / r
        self.A = nn.Parameter(torch.randn(n, r, d_in) * cfg.init_std)
        self.B = nn.Parameter(torch.randn(n, d_out, r) * cfg.init_std)

    def delta(self, t: int) -> Tensor | None:
        if t >= self.iterations:
            if self.beyond == "none":
                return None
            if self.beyond == "error":
                raise ConfigError(f"{self.name}.iterations = {self.iterations}: iteration {t} has no adapter; "
                                  f"set {self.name}.beyond to 'last' or 'none' to run more iterations")
            t = self.iterations - 1
        return self.scale * (self.B[t] @ self.A[t])

    def extra_repr(self) -> str:
        return f"rank={self.rank}, iterations={self.iterations}, scale={self.scale:g}, beyond={self.beyond!r}"


class _GivenStepSize(StepSize):
    """The step size the owning sublayer computed for this call (set just before the solver runs)."""

    exact = False

    def __init__(self):
        super().__init__()
        self.value: Tensor | float | None = None

    def forward(self, index: int, x0: Tensor, x: Tensor) -> Tensor | float:
        if self.value is None:
            raise RuntimeError("a Hyper-SET sublayer's solver ran outside its sublayer (no step size set)")
        return self.value


class HyperSETSublayer(nn.Module):
    """One descent step x ← x + η ⊙ direction(x) on ``energy``, with η from ``step_size``; optional LoRA."""

    role = ""  # "attention" (publishes γ) or "mlp" (may take it)

    def __init__(self, energy: nn.Module, dim: int, step_size, lora: LoRAConfig, name: str):
        super().__init__()
        self.block = EnergyBlock(energy, GradientDescent(step_size=_GivenStepSize()), steps=1)
        self.dim, self.name = dim, name
        self.step: StepSize | None = None if step_size == "shared" else make_step_size(step_size, dim)
        if isinstance(self.step, NetworkStepSize) and self.step.groups > 2:
            raise ConfigError(f"{name}.step_size.groups = {self.step.groups}: allowed 1 or 2 (alpha, gamma)")
        w = energy.proj.weight
        self.lora = DepthLoRA(w.shape[0], w.shape[1], lora, f"{name}.lora") if lora.rank else None
        self.qualname = ""

    @property
    def energy(self):
        return self.block.energy

    def _share_key(self) -> tuple[str, str]:
        return SHARE_KEY, self.qualname.rpartition(".")[0]

    def step_size(self, x: Tensor, ctx: ForwardContext) -> Tensor | float:
        """η for this call (α or γ, (B, N, D) for the network); publishes γ when the network has 2 groups."""
        if self.step is None:
            key = self._share_key()
            if key not in ctx.carry:
                raise ConfigError(
                    f"{self.name}.step_size = 'shared' takes gamma from the step-size network of the hyperset "
                    f"attention of the same layer (step_size {{kind: network, groups: 2}}); none ran before "
                    f"{self.qualname or 'this sublayer'}: give the MLP its own step_size")
            return ctx.carry.pop(key)
        t = ctx.iteration
        self.step.check_index(t, iteration=t, steps=1)
        if isinstance(self.step, NetworkStepSize):
            cond = ctx.embedded if self.step.condition == "x0" and ctx.embedded is not None else x
            eta = self.step(t, cond, x)  # (B, N, groups * D) or (B, N, groups)
            if self.step.groups == 2:
                eta, gamma = eta.chunk(2, dim=-1)
                if self.role == "attention":
                    ctx.carry[self._share_key()] = gamma
            return eta
        return self.step(t, x, x)

    @contextmanager
    def _adapted(self, t: int):
        e = self.energy
        e.delta = None if self.lora is None else self.lora.delta(t)
        try:
            yield
        finally:
            e.delta = None

    def forward(self, x: Tensor, ctx: ForwardContext | None = None) -> Tensor:  # (B, N, D)
        ctx = ctx or ForwardContext()
        if ctx.steps not in (None, 1):
            raise ConfigError(f"steps = {ctx.steps}: a Hyper-SET sublayer takes one step per iteration; "
                              f"use iterations to run longer")
        solver_step = self.block.solver.step_size
        solver_step.value = self.step_size(x, ctx)
        try:
            with self._adapted(ctx.iteration):
                return self.block(x, ctx, steps=1)
        finally:
            solver_step.value = None

    @torch.no_grad()
    def energy_at(self, x: Tensor, iteration: int = 0, mask: Tensor | None = None) -> Tensor:
        """(B, N) energy of this sublayer at x with iteration ``iteration``'s weights (LoRA)."""
        with self._adapted(iteration):
            st = self.energy.prepare(x, mask=mask)
            return self.energy.energy(x, st)


class HyperSETAttentionConfig(AttentionConfig):
    """Hyper-SET attention: one descent step on a hyperspherical attention energy (Eq. 9, Table 19)."""

    kind: Literal["hyperset"] = "hyperset"
    energy: Literal["bisoftmax", "sigmoid", "linear"] = "bisoftmax"
    """E_ATTN: bi-softmax (Eq. 3, the paper), sigmoid or linear attention (Table 19)"""
    head_dim: int | None = Field(None, ge=1)
    """subspace dimension p (None: dim / heads, so H p = d as in the paper)"""
    sphere: bool = True
    """RMSNorm the projections onto the sphere of radius √p (Eq. 8); false: the plain energy"""
    gain: Literal["fixed", "learned"] = "fixed"
    """RMSNorm gain: fixed 1 (radius √p, paper) or learned (the released code)"""
    qkv_norm: Literal["shared", "separate"] = "shared"
    """one norm for Q = K = V (paper; symmetric) or three learnable ones (the image code; not a gradient)"""
    self_interaction: bool = True
    """j = i in the inner sum of Eq. 3 (the paper); false: j ≠ i"""
    impl: Literal["auto", "fused", "einsum"] = "auto"
    """bi-softmax by two SDPA passes + one log-sum-exp (fused), the materialised scores (einsum), or
    einsum below 512 tokens and fused from there on (auto: the faster of the two on CPU, measured)"""
    phi: Literal["sigmoid", "tanh", "softplus"] = "sigmoid"
    """Φ of linear attention (Table 19: sigmoid)"""
    step_size: StepSizeField = Field(default_factory=paper_step_network)
    """α_t: the paper's network (groups 2: also γ for the feed-forward), or fixed / learned / per_iteration"""
    lora: LoRAConfig = Field(default_factory=LoRAConfig)
    """depth-wise LoRA of W (App. G.2)"""

    @classmethod
    def examples(cls) -> list[dict]:
        return [{}, {"impl": "fused"}, {"energy": "sigmoid"}, {"energy": "linear"},
                {"sphere": False, "gain": "learned", "self_interaction": False, "impl": "fused"}]


class HyperSETAttention(HyperSETSublayer):
    """Hyper-SET attention sublayer: x ← x − α_t ⊙ Σ_h W_h (bi-softmax)(Z_h) (Eq. 9)."""

    part = "attention"
    role = "attention"


class HyperSETFFConfig(MLPConfig):
    """Hyper-SET feed-forward: one ascent step toward the columns of D on the sphere (Eq. 11, Table 20)."""

    kind: Literal["hyperset"] = "hyperset"
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

    def default_hidden(self, dim: int) -> int:
        return 4 * dim  # M = 4d (Sudoku, Table 8); the image models use M = d

    @classmethod
    def examples(cls) -> list[dict]:
        # own step size: the default 'shared' takes γ from the layer's attention, absent when fuzzed alone
        return [{"step_size": 0.5}, {"step_size": 0.5, "sphere": False}, {"step_size": 0.5, "energy": "softmax"},
                {"step_size": 0.5, "energy": "gated"}]


class HyperSETFF(HyperSETSublayer):
    """Hyper-SET feed-forward sublayer: x ← x + γ_t ⊙ D act(RMSNorm(Dᵀ x)) (Eq. 11)."""

    part = "mlp"
    role = "mlp"


def _no_causal(kind: str, spec: SublayerSpec) -> None:
    if spec.causal:
        raise ConfigError(f"{kind} kind 'hyperset' is bidirectional only (Hyper-SET has no causal form, seed "
                          f"002 App. H.4): set model.causal: false or use a bidirectional task")


@ATTENTIONS.register("hyperset", HyperSETAttentionConfig)
def build_hyperset_attention(cfg: HyperSETAttentionConfig, spec: SublayerSpec) -> HyperSETAttention:
    """Hyper-SET attention (bi-softmax / sigmoid / linear energy, learned step sizes, optional LoRA)."""
    _no_causal("attention", spec)
    cls = ATTENTION_ENERGIES[cfg.energy]
    kw = dict(sphere=cfg.sphere, gain=cfg.gain, qkv_norm=cfg.qkv_norm, self_interaction=cfg.self_interaction)
    if cfg.energy == "bisoftmax":
        kw["impl"] = cfg.impl
    elif cfg.energy == "linear":
        kw["phi"] = cfg.phi
    try:
        energy = cls(spec.dim, spec.heads, cfg.head_dim, **kw)
    except ValueError as err:
        raise ConfigError(f"attention ({cfg.energy}): {err}") from None
    return HyperSETAttention(energy, spec.dim, cfg.step_size, cfg.lora, "attention")


@MLPS.register("hyperset", HyperSETFFConfig)
def build_hyperset_ff(cfg: HyperSETFFConfig, spec: SublayerSpec) -> HyperSETFF:
    """Hyper-SET feed-forward (ReLU / softmax / gated energy, shared or own step sizes, optional LoRA)."""
    _no_causal("mlp", spec)
    cls = FF_ENERGIES[cfg.energy]
    kw = dict(sphere=cfg.sphere, gain=cfg.gain)
    if cfg.energy == "gated":
        kw["phi"] = cfg.phi
    energy = cls(spec.dim, cfg.hidden_size(spec), **kw)
    return HyperSETFF(energy, spec.dim, cfg.step_size, cfg.lora, "mlp")


def check_hyperset_block(block) -> None:
    """Config-time check of a ``model.block`` with Hyper-SET sublayers (shared γ needs the attention's network)."""
    att, mlp = block.attention, block.mlp
    if getattr(mlp, "kind", None) == "hyperset" and mlp.step_size == "shared":
        net = getattr(att, "step_size", None)
        if att.kind != "hyperset" or getattr(net, "kind", None) != "network" or net.groups != 2:
            raise ConfigError("model.block.mlp.step_size = 'shared' needs attention kind 'hyperset' with "
                              "step_size {kind: network, groups: 2}; otherwise give the mlp its own step_size")
