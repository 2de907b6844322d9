"""``TokenModel``: token embedding (+ positions) -> :class:`LayerStack` -> final norm -> per-token head.

The shared body of :class:`~energyformer.models.lm.CausalLM` and
:class:`~energyformer.models.encoder.TokenEncoder` (x-transformers' ``TransformerWrapper``): one
layer stack behind different tasks. Parameter names: ``embed``, ``pos`` (learned positions),
``layers.{i}.attn`` / ``layers.{i}.mlp``, ``norm``, ``head``.
"""

import math

import torch
from torch import Tensor, nn

from ..blocks.layer import TransformerLayer
from ..core.context import ForwardContext
from ..core.trace import Traces
from .backbone import LayerStack
from .config import ModelConfig
from .naming import name_blocks


class SinusoidalPositions(nn.Module):
    """Fixed sinusoidal positions (Vaswani et al. 2017): PE[p, 2i] = sin(p / 10000^{2i/D}),
    PE[p, 2i+1] = cos(p / 10000^{2i/D}). ``forward(positions (N,)) -> (N, D)``; no parameters."""

    def __init__(self, max_len: int, dim: int):
        super().__init__()
        pos = torch.arange(max_len, dtype=torch.float32)[:, None]
        freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
        table = torch.zeros(max_len, dim)
        table[:, 0::2] = torch.sin(pos * freq)
        table[:, 1::2] = torch.cos(pos * freq)[:, : dim // 2]
        self.register_buffer("table", table, persistent=False)

    def forward(self, positions: Tensor) -> Tensor:
        return self.table[positions]


def _positions(cfg: ModelConfig) -> nn.Module | None:
    if cfg.positions == "learned":
        return nn.Embedding(cfg.max_seq_len, cfg.dim)
    if cfg.positions == "sinusoidal":
        return SinusoidalPositions(cfg.max_seq_len, cfg.dim)
    return None


class TokenModel(nn.Module):
    """Embedding, layer stack (iterated), final norm and a bias-free head with ``n_out`` outputs.

    Every Linear and Embedding weight is drawn from N(0, init_std²) (biases zero); afterwards every
    module that defines ``after_model_init()`` re-applies its own rule (e.g. a zero-initialised
    step-size network). The head is tied to the embedding when ``cfg.tie_embeddings`` is True, or None and the head
    predicts the vocabulary (``n_out == vocab_size``); tying with ``n_out != vocab_size`` is an error.
    """

    def __init__(self, cfg: ModelConfig, n_out: int, causal: bool):
        super().__init__()
        self.cfg, self.causal, self.n_out = cfg, causal, n_out
        tie = cfg.tie_embeddings if cfg.tie_embeddings is not None else n_out == cfg.vocab_size
        if tie and n_out != cfg.vocab_size:
            raise ValueError(f"model.tie_embeddings = True: the head has {n_out} outputs but the "
                             f"embedding {cfg.vocab_size} tokens; set model.tie_embeddings: false")
        self.embed = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.pos = _positions(cfg)
        self.drop = nn.Dropout(cfg.block.dropout)
        spec = cfg.spec(causal)
        self.layers = LayerStack(
            (TransformerLayer(cfg.block, spec) for _ in range(cfg.n_layers)), iterations=cfg.iterations,
            train_iterations=cfg.train_iterations, input_injection=cfg.input_injection)
        self.norm = nn.RMSNorm(cfg.dim, eps=1e-6) if cfg.final_norm == "rms" else nn.LayerNorm(cfg.dim)
        self.head = nn.Linear(cfg.dim, n_out, bias=False)
        self.apply(self._init)
        for m in self.modules():  # modules with their own init rule (zero-initialised step-size networks)
            hook = getattr(m, "after_model_init", None)
            if callable(hook):
                hook()
        if tie:
            self.head.weight = self.embed.weight
        name_blocks(self)

    def _init(self, m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=self.cfg.init_std)
            if getattr(m, "bias", None) is not None:
                nn.init.zeros_(m.bias)

    def context(
        self, idx: Tensor, *, mask: Tensor | None = None, trace: bool = False, stats: bool = False,
        cache: dict | None = None, offset: int = 0, steps: int | None = None,
    ) -> ForwardContext:
        """The :class:`ForwardContext` of one forward pass over token ids ``idx`` (B, N)."""
        if mask is not None and mask.shape != idx.shape:
            raise ValueError(f"mask of shape {tuple(mask.shape)}: expected the shape of the tokens {tuple(idx.shape)}")
        return ForwardContext(
            traces=Traces() if trace else None, stats={} if stats else None, cache=cache, offset=offset,
            mask=None if mask is None else mask.to(torch.bool), steps=steps, inputs=idx)

    def body(self, idx: Tensor, ctx: ForwardContext, iterations: int | None = None) -> Tensor:
        """Token ids (B, N) -> head logits (B, N, n_out), running the stack ``iterations`` times."""
        B, N = idx.shape
        if ctx.offset + N > self.cfg.max_seq_len and self.pos is not None:
            raise ValueError(f"sequence length {ctx.offset + N} exceeds model.max_seq_len = {self.cfg.max_seq_len}")
        x = self.embed(idx)  # (B, N, D)
        if self.pos is not None:
            x = x + self.pos(torch.arange(ctx.offset, ctx.offset + N, device=idx.device))
        x = self.drop(x)
        x = self.layers(x, ctx, iterations)  # (B, N, D)
        return self.head(self.norm(x))       # (B, N, n_out)
