"""CEM attention and CEM MLP sublayers (CEM seed Algorithm 1): energy + gradient descent + T steps.

Both are :class:`~energyformer.core.EnergyBlock`s:

    CEM attention = InteractionEnergy  + GradientDescent(P_k, eta) × T   (Eq. 14, 16)
    CEM MLP       = ElementwiseEnergy  + GradientDescent(P_mlp, eta) × T (Eq. 15, 17)

with one RMSNorm per sublayer used both on the block input (keys / gate, computed once) and, when
``norm_in_loop`` (Algorithm 1), on the iterate before each gradient evaluation — then ``exact`` is False
(see :mod:`energyformer.core.block`). With T = 1, identity preconditioner and no diagonal, CEM attention
is pre-norm multi-head attention with W^K = W^V, W^Q = W^O plus the residual; CEM MLP is a pre-norm
gated MLP with W^u = W^dᵀ.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from torch import nn

from ..core.block import EnergyBlock
from ..core.precond import PRECONDITIONERS, make_preconditioner
from ..core.solver import GradientDescent
from ..energies.elementwise import ElementwiseEnergy
from ..energies.interaction import DIAGONAL_MODES, InteractionEnergy
from ..utils.validate import check_choice, check_float, check_int


@dataclass
class CEMAttentionConfig:
    """Options of CEM attention (defaults: seed §4 + reconstructed.md §4 recommendations).

    steps: T recursive steps (Eq. 16); step_size: eta; learn_step_size: learn eta (softplus).
    diagonal: 'none' | 'shared' | 'per_head' diagonal d_k in A_k (Eq. 12); 'shared' per seed §4.4.
    precond: 'identity' | 'diagonal' | 'diag_low_rank' (Eq. 13), rank ``precond_rank`` (App. D.4: 4).
    precond_per_head: one P_k per head as in Eq. 14 (True) or one P shared by all heads.
    alibi / self_bias: App. B position biases. norm_in_loop: RMSNorm before each step (Algorithm 1).
    init: 'residual' (x0 = residual stream; T=1 == pre-norm attention) | 'normalized' (x0 = RMSNorm(h)).
    temperature: τ, default sqrt(head_dim). attn_fp32: attention core in float32 under autocast.
    """

    steps: int = 1
    step_size: float = 1.0
    learn_step_size: bool = False
    diagonal: Literal["none", "shared", "per_head"] = "shared"
    precond: Literal["identity", "diagonal", "diag_low_rank"] = "identity"
    precond_rank: int = 4
    precond_per_head: bool = True
    alibi: bool = True
    self_bias: bool = True
    norm_in_loop: bool = True
    init: Literal["residual", "normalized"] = "residual"
    temperature: float | None = None
    attn_fp32: bool = True

    def __post_init__(self):
        check_int("steps", self.steps, min=1)
        check_float("step_size", self.step_size, min=0.0, min_exclusive=True)
        check_choice("diagonal", self.diagonal, DIAGONAL_MODES)
        check_choice("precond", self.precond, PRECONDITIONERS)
        check_int("precond_rank", self.precond_rank, min=1)
        check_choice("init", self.init, ("residual", "normalized"))
        if self.temperature is not None:
            check_float("temperature", self.temperature, min=0.0, min_exclusive=True)


@dataclass
class CEMMLPConfig:
    """Options of the CEM MLP. hidden: D_v (None = the model's MLP hidden size); precond_rank 16 (App. D.4)."""

    steps: int = 1
    hidden: int | None = None
    step_size: float = 1.0
    learn_step_size: bool = False
    precond: Literal["identity", "diagonal", "diag_low_rank"] = "identity"
    precond_rank: int = 16
    norm_in_loop: bool = True
    init: Literal["residual", "normalized"] = "residual"

    def __post_init__(self):
        check_int("steps", self.steps, min=1)
        if self.hidden is not None:
            check_int("hidden", self.hidden, min=1)
        check_float("step_size", self.step_size, min=0.0, min_exclusive=True)
        check_choice("precond", self.precond, PRECONDITIONERS)
        check_int("precond_rank", self.precond_rank, min=1)
        check_choice("init", self.init, ("residual", "normalized"))


def _rmsnorm(dim: int) -> nn.Module:
    return nn.RMSNorm(dim, eps=1e-6)


class CEMAttention(EnergyBlock):
    """CEM attention sublayer: (B, N, D) -> (B, N, D), residual included."""

    kind = "attention"

    def __init__(self, dim: int, heads: int, cfg: CEMAttentionConfig | None = None):
        cfg = cfg or CEMAttentionConfig()
        energy = InteractionEnergy(
            dim, heads, diagonal=cfg.diagonal, alibi=cfg.alibi, self_bias=cfg.self_bias,
            temperature=cfg.temperature, attn_fp32=cfg.attn_fp32)
        precond = make_preconditioner(
            cfg.precond, dim, cfg.precond_rank, heads if cfg.precond_per_head else None,
            name="cem_attention.precond")
        solver = GradientDescent(precond, cfg.step_size, cfg.learn_step_size)
        super().__init__(energy, solver, cfg.steps, _rmsnorm(dim), cfg.norm_in_loop, cfg.init)
        self.cfg = cfg


class CEMMLP(EnergyBlock):
    """CEM MLP sublayer: (B, N, D) -> (B, N, D), residual included."""

    kind = "mlp"

    def __init__(self, dim: int, cfg: CEMMLPConfig | None = None, hidden: int | None = None):
        cfg = cfg or CEMMLPConfig()
        hidden = cfg.hidden or hidden
        if hidden is None:
            raise ValueError("cem_mlp.hidden = None: give the hidden size D_v (an integer >= 1)")
        energy = ElementwiseEnergy(dim, hidden)
        precond = make_preconditioner(cfg.precond, dim, cfg.precond_rank, None, name="cem_mlp.precond")
        solver = GradientDescent(precond, cfg.step_size, cfg.learn_step_size)
        super().__init__(energy, solver, cfg.steps, _rmsnorm(dim), cfg.norm_in_loop, cfg.init)
        self.cfg = cfg
