"""CEM attention and CEM MLP sublayers (CEM seed Algorithm 1): energy + gradient descent + T steps.

Both are :class:`~energyformer.core.EnergyBlock`s, registered as attention kind ``cem`` and MLP kind
``cem``::

    CEM attention = InteractionEnergy  + GradientDescent(P_k, eta) × T   (Eq. 14, 16)
    CEM MLP       = ElementwiseEnergy  + GradientDescent(P_mlp, eta) × T (Eq. 15, 17)

with one RMSNorm (eps 1e-6) per sublayer used both on the block input (keys / gate, computed once) and,
with ``norm: {in_loop: true}`` (Algorithm 1, the default), on the iterate before each gradient
evaluation — then ``exact`` is False (see :mod:`energyformer.core.block`). ``norm`` is the shared
sublayer key (:mod:`energyformer.core.norm`): ``norm: {in_loop: false}`` gives exact gradient steps,
``norm: {init: normalized}`` starts the descent at RMSNorm(x) as Algorithm 1 read literally does,
``norm: {kind: layer}`` swaps the norm. With T = 1, identity preconditioner and no diagonal, CEM attention
is pre-norm multi-head attention with W^K = W^V, W^Q = W^O plus the residual; CEM MLP is a pre-norm
gated MLP with W^u = W^dᵀ.

Descent keys (``solver``, ``step_size``, ``steps``, ``eval_steps``, ``backward``, ``norm``) are the shared
sublayer shape (:mod:`energyformer.core.sublayer`); the default solver is ``gd`` with the seed's
preconditioner options (``solver: {precond: diag_low_rank}`` picks P_k of Eq. 13-14).

CEM attention is causal (the seed) or bidirectional (``causal=False``, given by the model; see
:mod:`energyformer.energies.interaction` for the bidirectional energy and its symmetric ALiBi).
"""

from typing import ClassVar, Literal

from pydantic import Field

from ..core.block import EnergyBlock
from ..core.norm import NORMS, RMSNormConfig
from ..core.solver import SOLVERS, GDConfig
from ..core.sublayer import DescentConfig
from ..energies.cem_launch import KernelTiles
from ..energies.elementwise import ElementwiseEnergy
from ..energies.interaction import InteractionEnergy
from .registry import ATTENTIONS, MLPS, AttentionConfig, MLPConfig, SublayerSpec, llama_hidden

Precond = Literal["identity", "diagonal", "diag_low_rank"]  # = core.precond.PRECONDITIONERS (tested)
Diagonal = Literal["none", "shared", "per_head"]              # = energies.interaction.DIAGONAL_MODES
Readout = Literal["gradient", "algorithm1"]                   # = energies.interaction.READOUTS
AttnPath = Literal["auto", "fused", "blocked", "kernel"]      # = energies.interaction.ATTN_PATHS
Temperature = Literal["head_dim", "model_dim"]                # = energies.interaction.TEMPERATURES


def _rmsnorm() -> RMSNormConfig:
    """CEM's norm: RMSNorm with eps 1e-6 (Llama's), on the input and on the iterate (Algorithm 1)."""
    return RMSNormConfig(eps=1e-6, in_loop=True, init="residual")


class CEMAttentionConfig(AttentionConfig, DescentConfig):
    """CEM attention (defaults: seed §4 + reconstructed.md §4 recommendations)."""

    kind: Literal["cem"] = "cem"
    head_bank: ClassVar[bool] = True  # one P_k per head (Eq. 14)
    solver: SOLVERS.type("gd") = Field(default_factory=lambda: GDConfig(precond_rank=4, precond_per_head=True))
    """descent rule (default gd; precond: P_k of Eq. 13, rank R = 4 (App. D.4), one P_k per head (Eq. 14))"""
    diagonal: Diagonal = "shared"
    """diagonal d_k in A_k = W_Qkᵀ W_Kk + diag(d_k) (Eq. 12); 'shared' per seed §4.4"""
    alibi: bool = True
    """ALiBi bias: −m_k (i − j) causal, symmetric −m_k |i − j| bidirectional (App. B)"""
    self_bias: bool = True
    """learned per-head bias on the self score j = i (App. B)"""
    norm: NORMS.type("rms") = Field(default_factory=lambda: _rmsnorm())
    """norm (default: RMSNorm, eps 1e-6, in the loop: Algorithm 1, so the update is not exact; x0 = the
    residual stream, so T = 1 is pre-norm attention; init: normalized starts at RMSNorm(h))"""
    diagonal_readout: Readout = "gradient"
    """'gradient': the update is the exact gradient of Eq. 2 + 12 (d_k∘h_j in the values too);
    'algorithm1': the seed's Algorithm 1, diagonal in the scores only (not a gradient step)"""
    temperature: float | Temperature | None = None
    """τ: 'head_dim' (√D_r, default; None means the same), 'model_dim' (√D, Algorithm 1 read literally) or a number"""
    attn_path: AttnPath = "auto"
    """attention evaluation: 'fused' SDPA (O(N) memory), 'blocked' exact scores per query block (shared
    diagonal computed once for all heads), 'kernel' the flash-style Triton kernel (needs triton; on CPU
    only through its slow interpreter), 'auto' = kernel on CUDA with triton, else blocked within
    attn_memory_mb and fused for decoding"""
    attn_memory_mb: float = Field(512.0, ge=0)
    """budget for the blocked path's N×N tensors kept for backward by one step of one layer (MiB);
    above it blocks are recomputed in backward, and auto falls back to fused when one block does not fit"""
    attn_block: int = Field(128, ge=1)
    """query block size of the blocked path"""
    attn_fp32: bool = False
    """keep the blocked path's products in float32 under autocast (default: bf16 products, float32
    bias and softmax); the fused path is always float32"""
    attn_kernel: KernelTiles = Field(default_factory=KernelTiles)
    """launch of the 'kernel' path: tiles, warps, pipelining stages, head-loop unrolling and whether the
    products shared by the heads are materialised (energies/cem_kernel.py, docs/cem.md); never changes
    the result beyond rounding"""

    @classmethod
    def examples(cls) -> list[dict]:
        return [{}, {"steps": 2, "diagonal": "per_head", "solver": {"precond": "diag_low_rank"}},
                {"diagonal_readout": "algorithm1", "attn_fp32": True}]


class CEMMLPConfig(MLPConfig, DescentConfig):
    """CEM MLP (element-wise energy); default hidden as Llama's MLP, 8/3·D rounded up to 32."""

    kind: Literal["cem"] = "cem"
    solver: SOLVERS.type("gd") = Field(default_factory=lambda: GDConfig(precond_rank=16))
    """descent rule (default gd; precond: P of Eq. 13, rank R = 16 (App. D.4))"""
    norm: NORMS.type("rms") = Field(default_factory=lambda: _rmsnorm())
    """norm (default: RMSNorm, eps 1e-6, in the loop: Algorithm 1, so the update is not exact; x0 = the
    residual stream; init: normalized starts at RMSNorm(h))"""

    def default_hidden(self, dim: int) -> int:
        return llama_hidden(dim)

    @classmethod
    def examples(cls) -> list[dict]:
        return [{}, {"steps": 2, "solver": {"precond": "diag_low_rank", "precond_rank": 4}}]


class CEMAttention(EnergyBlock):
    """CEM attention sublayer: (B, N, D) -> (B, N, D), residual included."""

    part = "attention"

    def __init__(self, dim: int, heads: int, cfg: CEMAttentionConfig | None = None, causal: bool = True):
        cfg = cfg or CEMAttentionConfig()
        energy = InteractionEnergy(
            dim, heads, diagonal=cfg.diagonal, alibi=cfg.alibi, self_bias=cfg.self_bias,
            temperature=cfg.temperature, attn_fp32=cfg.attn_fp32, causal=causal,
            diagonal_readout=cfg.diagonal_readout, attn_path=cfg.attn_path,
            attn_memory_mb=cfg.attn_memory_mb, attn_block=cfg.attn_block, attn_kernel=cfg.attn_kernel)
        super().__init__(energy, **self.config_args(cfg, dim, heads, name="attention"))
        self.cfg = cfg


class CEMMLP(EnergyBlock):
    """CEM MLP sublayer: (B, N, D) -> (B, N, D), residual included."""

    part = "mlp"

    def __init__(self, dim: int, cfg: CEMMLPConfig | None = None, hidden: int | None = None):
        cfg = cfg or CEMMLPConfig()
        hidden = cfg.hidden or hidden or cfg.default_hidden(dim)
        energy = ElementwiseEnergy(dim, hidden)
        super().__init__(energy, **self.config_args(cfg, dim, name="mlp"))
        self.cfg = cfg


@ATTENTIONS.register("cem", CEMAttentionConfig)
def build_cem_attention(cfg: CEMAttentionConfig, spec: SublayerSpec) -> CEMAttention:
    """CEM attention: descent on the interaction energy (tied W_K = W_V, W_Q = W_O)."""
    return CEMAttention(spec.dim, spec.heads, cfg, causal=spec.causal)


@MLPS.register("cem", CEMMLPConfig)
def build_cem_mlp(cfg: CEMMLPConfig, spec: SublayerSpec) -> CEMMLP:
    """CEM MLP: descent on the element-wise energy (tied W_u = W_dᵀ)."""
    return CEMMLP(spec.dim, cfg, hidden=cfg.hidden_size(spec))
