"""Causal language model backbone: embedding, N layers from config, final norm, tied or untied head.

Blocks come from :class:`~energyformer.blocks.layer.BlockConfig` (Llama / GPT baselines, CEM attention
and/or CEM MLP). ``forward(idx, targets, trace=True)`` returns every energy block's
:class:`~energyformer.core.Trace` in one :class:`~energyformer.core.Traces` mapping. ``generate``
decodes with a KV cache (for CEM attention the cache holds the tied keys — one tensor per head — plus,
with a diagonal term, the normalised inputs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..blocks.layer import BlockConfig, TransformerLayer
from ..core.block import ForwardContext
from ..core.trace import Traces
from ..utils.validate import check_choice, check_float, check_int
from .naming import name_blocks


@dataclass
class ModelConfig:
    """Causal LM shape. ``mlp_hidden`` None = 4·dim for a GELU MLP, else Llama's 8/3·dim rounded up to 32."""

    vocab_size: int = 4096
    dim: int = 128
    n_layers: int = 4
    heads: int = 4
    mlp_hidden: int | None = None
    max_seq_len: int = 256
    tie_embeddings: bool = True
    positions: Literal["none", "learned"] = "none"
    final_norm: Literal["rms", "layer"] = "rms"
    init_std: float = 0.02
    block: BlockConfig = field(default_factory=BlockConfig)

    def __post_init__(self):
        for k in ("vocab_size", "dim", "n_layers", "heads", "max_seq_len"):
            check_int(f"model.{k}", getattr(self, k), min=1)
        if self.dim % self.heads:
            raise ValueError(f"model.heads = {self.heads}: must divide model.dim = {self.dim}")
        if self.mlp_hidden is not None:
            check_int("model.mlp_hidden", self.mlp_hidden, min=1)
        check_choice("model.positions", self.positions, ("none", "learned"))
        check_choice("model.final_norm", self.final_norm, ("rms", "layer"))
        check_float("model.init_std", self.init_std, min=0.0, min_exclusive=True)

    @property
    def hidden(self) -> int:
        if self.mlp_hidden is not None:
            return self.mlp_hidden
        if self.block.mlp == "gelu":
            return 4 * self.dim
        return 32 * math.ceil(8 * self.dim / 3 / 32)


@dataclass
class LMOutput:
    logits: Tensor              # (B, N, V)
    loss: Tensor | None = None  # mean cross-entropy over targets != -100
    traces: Traces | None = None


class CausalLM(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.pos = nn.Embedding(cfg.max_seq_len, cfg.dim) if cfg.positions == "learned" else None
        self.drop = nn.Dropout(cfg.block.dropout)
        self.layers = nn.ModuleList(
            TransformerLayer(cfg.block, cfg.dim, cfg.heads, cfg.hidden) for _ in range(cfg.n_layers))
        self.norm = nn.RMSNorm(cfg.dim, eps=1e-6) if cfg.final_norm == "rms" else nn.LayerNorm(cfg.dim)
        self.head = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        self.apply(self._init)
        if cfg.tie_embeddings:
            self.head.weight = self.embed.weight
        name_blocks(self)

    def _init(self, m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=self.cfg.init_std)
            if getattr(m, "bias", None) is not None:
                nn.init.zeros_(m.bias)

    def forward(
        self, idx: Tensor, targets: Tensor | None = None, *, trace: bool = False,
        cache: dict | None = None, offset: int = 0,
    ) -> LMOutput:
        """idx, targets: (B, N) token ids; ``cache``/``offset`` for incremental decoding."""
        B, N = idx.shape
        if offset + N > self.cfg.max_seq_len and self.pos is not None:
            raise ValueError(f"sequence length {offset + N} exceeds model.max_seq_len = {self.cfg.max_seq_len}")
        ctx = ForwardContext(traces=Traces() if trace else None, cache=cache, offset=offset)
        x = self.embed(idx)  # (B, N, D)
        if self.pos is not None:
            x = x + self.pos(torch.arange(offset, offset + N, device=idx.device))
        x = self.drop(x)
        for layer in self.layers:
            x = layer(x, ctx)
        logits = self.head(self.norm(x))  # (B, N, V)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), ignore_index=-100)
        return LMOutput(logits=logits, loss=loss, traces=ctx.traces)

    @torch.no_grad()
    def generate(
        self, idx: Tensor, max_new_tokens: int, temperature: float = 1.0, top_k: int | None = None,
        greedy: bool = False, use_cache: bool = True, generator: torch.Generator | None = None,
    ) -> Tensor:
        """Append ``max_new_tokens`` tokens to idx (B, N): greedy, or sampled with temperature / top-k."""
        check_int("max_new_tokens", max_new_tokens, min=0)
        cache: dict | None = {} if use_cache else None
        out, pos, inp = idx, 0, idx
        for _ in range(max_new_tokens):
            if not use_cache:
                inp, pos = out[:, -self.cfg.max_seq_len:], 0
            elif pos + inp.shape[1] > self.cfg.max_seq_len:  # window full: restart the cache
                cache, inp, pos = {}, out[:, -self.cfg.max_seq_len + 1:], 0
            logits = self(inp, cache=cache, offset=pos).logits[:, -1].float()  # (B, V)
            if use_cache:
                pos += inp.shape[1]
            if greedy or temperature == 0:
                nxt = logits.argmax(-1, keepdim=True)
            else:
                logits = logits / temperature
                if top_k is not None:
                    kth = torch.topk(logits, min(top_k, logits.shape[-1])).values[:, -1:]
                    logits = logits.masked_fill(logits < kth, float("-inf"))
                nxt = torch.multinomial(logits.softmax(-1), 1, generator=generator)
            out = torch.cat([out, nxt], dim=1)
            inp = nxt
        return out


def kv_cache_bytes(cache: dict) -> int:
    """Total bytes held by a KV cache produced by :meth:`CausalLM.generate` / forward(cache=...)."""
    return sum(t.numel() * t.element_size() for slot in cache.values() for t in slot.values())
