"""``TokenModel``: token embedding (+ positions) -> :class:`LayerStack` -> final norm -> per-token head.

The shared body of :class:`~energyformer.models.lm.CausalLM` and
:class:`~energyformer.models.encoder.TokenEncoder` (x-transformers' ``TransformerWrapper``): one
layer stack behind different tasks. Parameter names: ``embed``, ``pos`` (learned positions),
``layers.{i}.attn`` / ``layers.{i}.mlp``, ``norm``, ``head``.
"""

import functools
import math
from typing import Literal

import torch
from torch import Tensor, nn

from ..core.constants import ExactTable
from ..core.context import ForwardContext
from ..core.trace import Traces
from ..utils.config import KindConfig, Registry
from ..utils.validate import check_int
from .config import ModelConfig
from .init import init_module, init_model
from .naming import name_blocks


def sinusoid_table(max_len: int, dim: int) -> Tensor:
    """PE (max_len, dim) in float64: PE[p, 2i] = sin(p / 10000^{2i/D}), PE[p, 2i+1] = cos(p / 10000^{2i/D})."""
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float64) * (-math.log(10000.0) / dim))
    table = torch.zeros(max_len, dim, dtype=torch.float64)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq)[:, : dim // 2]
    return table


class SinusoidalPositions(nn.Module):
    """Fixed sinusoidal positions (Vaswani et al. 2017 §3.5, :func:`sinusoid_table`).
    ``forward(positions (N,) or (B, N)) -> (..., D)``; no parameters. The table is computed in float64 and held
    correctly rounded in the module's dtype (:class:`~energyformer.core.constants.ExactTable`)."""

    def __init__(self, max_len: int, dim: int):
        super().__init__()
        self.table = ExactTable(functools.partial(sinusoid_table, max_len, dim))

    def forward(self, positions: Tensor | None = None) -> Tensor:
        t = self.table()
        return t if positions is None else t[positions]


#: position kind (``model.positions``) -> (config class, builder(cfg, max_len, dim) -> module or None);
#: the module maps positions (N,) -> (N, D), or per row (B, N) -> (B, N, D) (with a key-padding mask:
#: :meth:`TokenModel.positions`), and is added to the token embedding
POSITIONS = Registry("positions")

#: the KV-cache slot that holds each row's next absolute position once a call had a key-padding mask
POSITIONS_SLOT = "_positions"


class NoPositionsConfig(KindConfig):
    """No absolute positions (RoPE / ALiBi live in the attention; or a permutation-invariant model)."""

    kind: Literal["none"] = "none"


class LearnedPositionsConfig(KindConfig):
    """A learned table of max_seq_len x D (an nn.Embedding, GPT-2)."""

    kind: Literal["learned"] = "learned"


class SinusoidalPositionsConfig(KindConfig):
    """Fixed sinusoids (Vaswani et al. 2017 §3.5); no parameters."""

    kind: Literal["sinusoidal"] = "sinusoidal"


POSITIONS.register("none", NoPositionsConfig)(lambda cfg, max_len, dim: None)
POSITIONS.register("learned", LearnedPositionsConfig)(lambda cfg, max_len, dim: nn.Embedding(max_len, dim))
POSITIONS.register("sinusoidal", SinusoidalPositionsConfig)(lambda cfg, max_len, dim: SinusoidalPositions(max_len, dim))


def build_positions(kind: str, max_len: int, dim: int) -> nn.Module | None:
    """The positions module of ``kind`` (a :data:`POSITIONS` lookup) for ``max_len`` positions of width ``dim``."""
    return POSITIONS.build(POSITIONS.get(kind).config(), max_len, dim)


#: the dtypes token ids are taken in: nn.Embedding's (uint8 ids failed inside it, naming no argument)
ID_DTYPES = (torch.int64, torch.int32)


class TokenModel(nn.Module):
    """Embedding, layer stack (iterated), final norm and a bias-free head with ``n_out`` outputs.

    Initialisation: the one pass of :mod:`energyformer.models.init` with ``cfg.init`` (default every
    Linear and Embedding weight from N(0, init_std²), biases zero), then every module's own rule
    (``after_model_init``, ``reset_energy_parameters``). The head is tied to the embedding when
    ``cfg.tie_embeddings`` is True, or None and the head predicts the vocabulary
    (``n_out == vocab_size``); tying with ``n_out != vocab_size`` is an error.
    """

    def __init__(self, cfg: ModelConfig, n_out: int, causal: bool):
        super().__init__()
        self.cfg, self.causal, self.n_out = cfg, causal, n_out
        tie = cfg.tie_embeddings if cfg.tie_embeddings is not None else n_out == cfg.vocab_size
        if tie and n_out != cfg.vocab_size:
            raise ValueError(f"model.tie_embeddings = True: the head has {n_out} outputs but the "
                             f"embedding {cfg.vocab_size} tokens; set model.tie_embeddings: false")
        self.embed = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.pos = build_positions(cfg.positions, cfg.max_seq_len, cfg.dim)
        self.drop = nn.Dropout(cfg.block.dropout)
        self.layers = cfg.build_stack(causal)
        self.norm = nn.RMSNorm(cfg.dim, eps=1e-6) if cfg.final_norm == "rms" else nn.LayerNorm(cfg.dim)
        self.head = nn.Linear(cfg.dim, n_out, bias=False)
        init_model(self, cfg.init, cfg.init_std)
        if tie:
            self.head.weight = self.embed.weight
        name_blocks(self)

    def _init(self, m: nn.Module) -> None:
        """The generic init rule on one module (for modules added after construction)."""
        init_module(m, self.cfg.init, self.cfg.init_std)

    def context(
        self, idx: Tensor, *, mask: Tensor | None = None, trace: bool = False, stats: bool = False,
        cache: dict | None = None, offset: int = 0, steps: int | None = None,
    ) -> ForwardContext:
        """The :class:`ForwardContext` of one forward pass over token ids ``idx`` (B, N), its arguments checked:
        ``idx`` int64 / int32 (B, N) with N ≥ 1, on the model's device; ``mask`` bool (True = a real token) of idx's
        shape — a float mask (e.g. an additive 0 / −∞ one, which a cast to bool would invert) is refused; ``offset``
        ≥ 0; ``steps`` only where the model has descent steps to set (:func:`.options.check_forward_options`)."""
        if idx.dim() != 2 or idx.dtype not in ID_DTYPES:
            raise ValueError(f"idx of shape {tuple(idx.shape)} and dtype {idx.dtype}: expected token ids (B, N) of "
                             f"dtype torch.int64 or torch.int32")
        if idx.shape[1] == 0:
            raise ValueError(f"idx of shape {tuple(idx.shape)}: expected at least one token per row")
        if idx.device != self.embed.weight.device:  # 'meta' ids gave uninitialised memory as embeddings (probe AS)
            raise ValueError(f"idx on device {idx.device}, the model on {self.embed.weight.device}: move the token ids "
                             "to the model's device")
        if mask is not None and mask.shape != idx.shape:
            raise ValueError(f"mask of shape {tuple(mask.shape)}: expected the shape of the tokens {tuple(idx.shape)}")
        if mask is not None and mask.dtype != torch.bool:
            raise ValueError(f"mask of dtype {mask.dtype}: expected torch.bool (True = a real token, False = "
                             f"padding); an additive 0 / -inf mask is not a key-padding mask")
        check_int("offset", offset, min=0)  # the position of the first token
        if steps is not None:
            from .options import check_forward_options

            check_forward_options(self, {"steps": steps}, self.cfg.kind, flags=False)
        return ForwardContext(
            traces=Traces() if trace else None, stats={} if stats else None, cache=cache, offset=offset,
            mask=mask, steps=steps, inputs=idx)

    @staticmethod
    def positions(ctx: ForwardContext, B: int, N: int, device: torch.device) -> Tensor:
        """Absolute positions of this call's tokens: ``offset … offset + N − 1`` (N,), or with a key-padding mask
        (B, N) each row's real tokens numbered from where its real tokens start, so a padded row's real tokens get
        the positions they have unpadded (left padding no longer shifts learned or sinusoidal positions; a
        padded slot takes its next real token's). A KV cache carries each row's next position across calls
        (slot :data:`POSITIONS_SLOT`, only once a call had a mask)."""
        slot = ctx.cache.get(POSITIONS_SLOT) if ctx.cache is not None else None
        if ctx.mask is None and slot is None:
            return torch.arange(ctx.offset, ctx.offset + N, device=device)
        start = slot["next"] if slot is not None else torch.full((B,), ctx.offset, dtype=torch.long, device=device)
        real = (ctx.mask.to(device=device, dtype=torch.long) if ctx.mask is not None
                else torch.ones(B, N, dtype=torch.long, device=device))
        if ctx.cache is not None:
            ctx.cache[POSITIONS_SLOT] = {"next": start + real.sum(1)}
        return start[:, None] + real.cumsum(1) - real  # (B, N): real tokens before each slot

    def body(self, idx: Tensor, ctx: ForwardContext, iterations: int | None = None,
             hiddens: dict | None = None) -> Tensor:
        """Token ids (B, N) -> head logits (B, N, n_out), running the stack ``iterations`` times
        (recording the state after every (layer, iteration) in ``hiddens`` when a dict is given)."""
        B, N = idx.shape
        if ctx.offset + N > self.cfg.max_seq_len and self.pos is not None:
            raise ValueError(f"sequence length {ctx.offset + N} exceeds model.max_seq_len = {self.cfg.max_seq_len}")
        if iterations is not None:
            check_int("iterations", iterations, min=1)  # passes through the layer stack
        try:
            x = self.embed(idx)  # (B, N, D)
        except IndexError as e:  # CPU; CUDA asserts on the device instead
            raise ValueError(f"token ids outside [0, {self.cfg.vocab_size}) (model.vocab_size): "
                             f"min {int(idx.min())}, max {int(idx.max())}") from e
        if self.pos is not None:
            x = x + self.pos(self.positions(ctx, B, N, idx.device))
        x = self.drop(x)
        x = self.layers(x, ctx, iterations, hiddens)  # (B, N, D)
        return self.head(self.norm(x))       # (B, N, n_out)
