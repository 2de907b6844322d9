"""A transformer layer = attention-like sublayer + MLP-like sublayer, each chosen by config.

"CEM attention + Llama MLP", "Llama attention + CEM MLP" and "full CEM" (seed §4.1-4.3) are each one
switch: ``attention: cem`` / ``mlp: cem``. ``attn_reuse`` / ``mlp_reuse`` apply a sublayer several
times with the same weights — the *plain layer reuse* baseline of seed Fig. 3c / Fig. 4, to contrast
with CEM's within-layer recursion (``cem_attention.steps`` / ``cem_mlp.steps``), where keys and
gates are computed once and only the query side is iterated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from torch import Tensor, nn

from ..core.block import ForwardContext
from ..utils.validate import check_choice, check_float, check_int
from .baselines import GeluMLP, GPTAttention, LlamaAttention, SwiGLU
from .cem import CEMAttention, CEMAttentionConfig, CEMMLP, CEMMLPConfig

ATTENTIONS = ("llama", "gpt", "cem")
MLPS = ("swiglu", "gelu", "cem")


@dataclass
class BlockConfig:
    """Which sublayers make a layer, and their options."""

    attention: Literal["llama", "gpt", "cem"] = "llama"
    mlp: Literal["swiglu", "gelu", "cem"] = "swiglu"
    dropout: float = 0.0
    rope_theta: float = 10000.0
    attn_reuse: int = 1
    mlp_reuse: int = 1
    cem_attention: CEMAttentionConfig = field(default_factory=CEMAttentionConfig)
    cem_mlp: CEMMLPConfig = field(default_factory=CEMMLPConfig)

    def __post_init__(self):
        check_choice("block.attention", self.attention, ATTENTIONS)
        check_choice("block.mlp", self.mlp, MLPS)
        check_float("block.dropout", self.dropout, min=0.0, max=1.0)
        check_int("block.attn_reuse", self.attn_reuse, min=1)
        check_int("block.mlp_reuse", self.mlp_reuse, min=1)


def make_attention(cfg: BlockConfig, dim: int, heads: int) -> nn.Module:
    if cfg.attention == "llama":
        return LlamaAttention(dim, heads, cfg.rope_theta)
    if cfg.attention == "gpt":
        return GPTAttention(dim, heads, cfg.dropout)
    return CEMAttention(dim, heads, cfg.cem_attention)


def make_mlp(cfg: BlockConfig, dim: int, hidden: int) -> nn.Module:
    if cfg.mlp == "swiglu":
        return SwiGLU(dim, hidden)
    if cfg.mlp == "gelu":
        return GeluMLP(dim, hidden, cfg.dropout)
    return CEMMLP(dim, cfg.cem_mlp, hidden=hidden)


class TransformerLayer(nn.Module):
    """x -> mlp^r(attn^r(x)) with r-fold plain reuse (default 1)."""

    def __init__(self, cfg: BlockConfig, dim: int, heads: int, mlp_hidden: int):
        super().__init__()
        self.attn = make_attention(cfg, dim, heads)
        self.mlp = make_mlp(cfg, dim, mlp_hidden)
        self.attn_reuse, self.mlp_reuse = cfg.attn_reuse, cfg.mlp_reuse

    def forward(self, x: Tensor, ctx: ForwardContext | None = None) -> Tensor:  # (B, N, D)
        if self.attn_reuse > 1 and ctx is not None and ctx.cache is not None:
            raise NotImplementedError("block.attn_reuse > 1 does not support KV-cached decoding")
        for _ in range(self.attn_reuse):
            x = self.attn(x, ctx)
        for _ in range(self.mlp_reuse):
            x = self.mlp(x, ctx)
        return x
