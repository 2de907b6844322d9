"""CEM attention and CEM MLP sublayers (CEM seed Algorithm 1): energy + gradient descent + T steps.

Both are :class:`~energyformer.core.EnergyBlock`s, registered as attention kind ``cem`` and MLP kind
``cem``::

    CEM attention = InteractionEnergy  + GradientDescent(P_k, eta) × T   (Eq. 14, 16)
    CEM MLP       = ElementwiseEnergy  + GradientDescent(P_mlp, eta) × T (Eq. 15, 17)

with one RMSNorm per sublayer used both on the block input (keys / gate, computed once) and, when
``norm_in_loop`` (Algorithm 1), on the iterate before each gradient evaluation — then ``exact`` is False
(see :mod:`energyformer.core.block`). With T = 1, identity preconditioner and no diagonal, CEM attention
is pre-norm multi-head attention with W^K = W^V, W^Q = W^O plus the residual; CEM MLP is a pre-norm
gated MLP with W^u = W^dᵀ.

CEM attention is causal (the seed) or bidirectional (``causal=False``, given by the model; see
:mod:`energyformer.energies.interaction` for the bidirectional energy and its symmetric ALiBi).
"""

from typing import Literal

from pydantic import Field
from torch import nn

from ..core.block import EnergyBlock
from ..core.precond import make_preconditioner
from ..core.solver import GradientDescent
from ..energies.elementwise import ElementwiseEnergy
from ..energies.interaction import InteractionEnergy
from .registry import ATTENTIONS, MLPS, AttentionConfig, MLPConfig, SublayerSpec, llama_hidden

Precond = Literal["identity", "diagonal", "diag_low_rank"]  # = core.precond.PRECONDITIONERS (tested)
Diagonal = Literal["none", "shared", "per_head"]              # = energies.interaction.DIAGONAL_MODES
Init = Literal["residual", "normalized"]


class CEMAttentionConfig(AttentionConfig):
    """CEM attention (defaults: seed §4 + reconstructed.md §4 recommendations)."""

    kind: Literal["cem"] = "cem"
    steps: int = Field(1, ge=1)
    """T recursive steps (Eq. 16)"""
    step_size: float = Field(1.0, gt=0)
    """eta, the step size"""
    learn_step_size: bool = False
    """learn eta (softplus-parametrised, initialised at step_size)"""
    diagonal: Diagonal = "shared"
    """diagonal d_k in A_k = W_Qkᵀ W_Kk + diag(d_k) (Eq. 12); 'shared' per seed §4.4"""
    precond: Precond = "identity"
    """preconditioner P_k (Eq. 13)"""
    precond_rank: int = Field(4, ge=1)
    """rank R of the low-rank part of P_k (App. D.4: 4)"""
    precond_per_head: bool = True
    """one P_k per head as in Eq. 14 (True) or one P shared by all heads"""
    alibi: bool = True
    """ALiBi bias: −m_k (i − j) causal, symmetric −m_k |i − j| bidirectional (App. B)"""
    self_bias: bool = True
    """learned per-head bias on the self score j = i (App. B)"""
    norm_in_loop: bool = True
    """RMSNorm the iterate before each step (Algorithm 1); the update is then not exact"""
    init: Init = "residual"
    """x0 = residual stream ('residual': T=1 is pre-norm attention) or RMSNorm(h) ('normalized')"""
    temperature: float | None = Field(None, gt=0)
    """τ (None: sqrt(head_dim))"""
    attn_fp32: bool = True
    """attention core in float32 under autocast (ALiBi features need it)"""


class CEMMLPConfig(MLPConfig):
    """CEM MLP (element-wise energy); default hidden as Llama's MLP, 8/3·D rounded up to 32."""

    kind: Literal["cem"] = "cem"
    steps: int = Field(1, ge=1)
    """T recursive steps (Eq. 17)"""
    step_size: float = Field(1.0, gt=0)
    """eta, the step size"""
    learn_step_size: bool = False
    """learn eta (softplus-parametrised, initialised at step_size)"""
    precond: Precond = "identity"
    """preconditioner P (Eq. 13)"""
    precond_rank: int = Field(16, ge=1)
    """rank R of the low-rank part of P (App. D.4: 16)"""
    norm_in_loop: bool = True
    """RMSNorm the iterate before each step (Algorithm 1); the update is then not exact"""
    init: Init = "residual"
    """x0 = residual stream ('residual') or RMSNorm(h) ('normalized')"""

    def default_hidden(self, dim: int) -> int:
        return llama_hidden(dim)


def _rmsnorm(dim: int) -> nn.Module:
    return nn.RMSNorm(dim, eps=1e-6)


class CEMAttention(EnergyBlock):
    """CEM attention sublayer: (B, N, D) -> (B, N, D), residual included."""

    part = "attention"

    def __init__(self, dim: int, heads: int, cfg: CEMAttentionConfig | None = None, causal: bool = True):
        cfg = cfg or CEMAttentionConfig()
        energy = InteractionEnergy(
            dim, heads, diagonal=cfg.diagonal, alibi=cfg.alibi, self_bias=cfg.self_bias,
            temperature=cfg.temperature, attn_fp32=cfg.attn_fp32, causal=causal)
        precond = make_preconditioner(
            cfg.precond, dim, cfg.precond_rank, heads if cfg.precond_per_head else None,
            name="cem_attention.precond")
        solver = GradientDescent(precond, cfg.step_size, cfg.learn_step_size)
        super().__init__(energy, solver, cfg.steps, _rmsnorm(dim), cfg.norm_in_loop, cfg.init)
        self.cfg = cfg


class CEMMLP(EnergyBlock):
    """CEM MLP sublayer: (B, N, D) -> (B, N, D), residual included."""

    part = "mlp"

    def __init__(self, dim: int, cfg: CEMMLPConfig | None = None, hidden: int | None = None):
        cfg = cfg or CEMMLPConfig()
        hidden = cfg.hidden or hidden or cfg.default_hidden(dim)
        energy = ElementwiseEnergy(dim, hidden)
        precond = make_preconditioner(cfg.precond, dim, cfg.precond_rank, None, name="cem_mlp.precond")
        solver = GradientDescent(precond, cfg.step_size, cfg.learn_step_size)
        super().__init__(energy, solver, cfg.steps, _rmsnorm(dim), cfg.norm_in_loop, cfg.init)
        self.cfg = cfg


@ATTENTIONS.register("cem", CEMAttentionConfig)
def build_cem_attention(cfg: CEMAttentionConfig, spec: SublayerSpec) -> CEMAttention:
    """CEM attention: descent on the interaction energy (tied W_K = W_V, W_Q = W_O)."""
    return CEMAttention(spec.dim, spec.heads, cfg, causal=spec.causal)


@MLPS.register("cem", CEMMLPConfig)
def build_cem_mlp(cfg: CEMMLPConfig, spec: SublayerSpec) -> CEMMLP:
    """CEM MLP: descent on the element-wise energy (tied W_u = W_dᵀ)."""
    return CEMMLP(spec.dim, cfg, hidden=cfg.hidden_size(spec))
