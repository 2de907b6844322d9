"""Sublayers: plain baselines (Llama, GPT-2) and energy blocks (CEM), chosen by kind.

Importing this package registers every built-in kind in :data:`ATTENTIONS` and :data:`MLPS`.
"""

from .baselines import (
    GeluMLP, GeluMLPConfig, GPTAttention, GPTAttentionConfig, LlamaAttention, LlamaAttentionConfig,
    SwiGLU, SwiGLUConfig,
)
from .cem import CEMMLP, CEMAttention, CEMAttentionConfig, CEMMLPConfig
from .intrinsic import IntrinsicBlock  # noqa: F401  (registers the intrinsic-optimizer kinds)
from .intrinsic_newton import build_mha2nd1st  # noqa: F401  (registers the Newton kinds)
from .layer import BlockConfig, TransformerLayer
from .registry import (
    ATTENTIONS, MLPS, AttentionConfig, MLPConfig, SublayerSpec, build_attention, build_mlp,
)

__all__ = [
    "ATTENTIONS", "MLPS", "AttentionConfig", "MLPConfig", "SublayerSpec", "build_attention", "build_mlp",
    "BlockConfig", "TransformerLayer", "LlamaAttention", "LlamaAttentionConfig", "GPTAttention",
    "GPTAttentionConfig", "SwiGLU", "SwiGLUConfig", "GeluMLP", "GeluMLPConfig", "CEMAttention",
    "CEMAttentionConfig", "CEMMLP", "CEMMLPConfig",
]
from .equilibrium import EquilibriumRefiner, RefineConfig, RefinedLayer, RefineStats  # noqa: E402

__all__ += ["EquilibriumRefiner", "RefineConfig", "RefinedLayer", "RefineStats"]
from .hyperset import (  # noqa: E402  (Hyper-SET kinds: attention 'hyperset', mlp 'hyperset')
    DepthLoRA, HyperSETAttention, HyperSETAttentionConfig, HyperSETFF, HyperSETFFConfig, LoRAConfig,
)

__all__ += ["HyperSETAttention", "HyperSETAttentionConfig", "HyperSETFF", "HyperSETFFConfig", "LoRAConfig",
            "DepthLoRA"]
from .crate import CRATEAttention, CRATEAttentionConfig, ISTABlock, ISTAConfig  # noqa: E402  (CRATE / CRATE-T)
from .et import EnergyTransformerBlock, ETConfig, NoMLP, NoMLPConfig  # noqa: E402  (Energy Transformer; mlp 'identity')

__all__ += ["CRATEAttention", "CRATEAttentionConfig", "ISTABlock", "ISTAConfig", "EnergyTransformerBlock",
            "ETConfig", "NoMLP", "NoMLPConfig"]
