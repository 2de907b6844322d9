"""Causal language model: embedding, the (possibly iterated) layer stack, final norm, tied or untied head.

Blocks come from :class:`~energyformer.blocks.layer.BlockConfig` (Llama / GPT baselines, CEM attention
and/or CEM MLP). ``forward(idx, targets, trace=True)`` returns a :class:`~energyformer.models.output.ModelOutput` with every energy block's
:class:`~energyformer.core.Trace` in one :class:`~energyformer.core.Traces` mapping keyed by
``(block name, iteration)``. ``generate`` decodes with a KV cache holding one entry per block and
iteration (for CEM attention: the tied keys — one tensor per head — plus, with a diagonal term, the
normalised inputs).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from numbers import Integral, Real

import torch
import torch.nn.functional as F
from torch import Tensor

from ..core.precision import at_least_float32
from ..errors import NonFiniteOutput
from ..utils.validate import ConfigError, check_int
from .config import ModelConfig
from .output import ModelOutput
from .sampling import tempered
from .wrapper import TokenModel

__all__ = ["CausalLM", "ModelConfig", "check_sampling", "kv_cache_bytes", "token_cross_entropy"]


def check_sampling(max_new_tokens: int, temperature: float, top_k: int | None, *, cli: bool = False) -> None:
    """The checks of :meth:`CausalLM.generate`'s sampling arguments (the CLI's ``generate`` runs the same ones).

    Raises :class:`~energyformer.errors.ConfigError` (a ``ValueError``) in one line naming the argument,
    the value and what is allowed: ``temperature = -1: ...`` or, with ``cli=True``, ``--temperature -1: ...``.
    """
    def bad(name: str, value, allowed: str) -> ConfigError:
        where = f"--{name.replace('_', '-')} {value}" if cli else f"{name} = {value!r}"
        return ConfigError(f"{where}: {allowed}")

    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, Integral) or max_new_tokens < 0:
        raise bad("max_new_tokens", max_new_tokens, "must be an integer >= 0")
    if (isinstance(temperature, bool) or not isinstance(temperature, Real)
            or not math.isfinite(temperature) or temperature < 0):
        raise bad("temperature", temperature, "must be a finite number >= 0 (0 = greedy)")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, Integral) or top_k < 1):
        raise bad("top_k", top_k, "must be an integer >= 1" + ("" if cli else ", or None for no top-k filter"))


class CausalLM(TokenModel):
    """Next-token language model over ``cfg.vocab_size`` tokens (always causal)."""

    def __init__(self, cfg: ModelConfig):
        if cfg.causal is False:
            raise ConfigError("model.causal = False: a causal language model (next-token prediction) needs "
                              "causal attention; remove model.causal or set it to true")
        super().__init__(cfg, cfg.vocab_size, causal=True)

    def forward(
        self, idx: Tensor, targets: Tensor | None = None, *, mask: Tensor | None = None,
        trace: bool = False, stats: bool = False, cache: dict | None = None, offset: int = 0,
        iterations: int | None = None, steps: int | None = None, hiddens: bool = False,
    ) -> ModelOutput:
        """idx, targets: (B, N) token ids; mask: (B, N) bool, True = real token (padded keys hidden).

        ``cache``/``offset`` for incremental decoding; ``iterations`` overrides the number of passes
        through the layer stack, ``steps`` the step budget of every energy block (``ctx.steps``);
        ``hiddens`` returns the state after every (layer, iteration) (:class:`ModelOutput`).
        """
        ctx = self.context(idx, mask=mask, trace=trace, stats=stats, cache=cache, offset=offset, steps=steps)
        states = {} if hiddens else None
        logits = self.body(idx, ctx, iterations, states)  # (B, N, V)
        loss = None
        if targets is not None:
            loss = token_cross_entropy(logits, targets)
        return ModelOutput.of(logits, ctx, loss=loss, hiddens=states)

    def generate(
        self, idx: Tensor, max_new_tokens: int, temperature: float = 1.0, top_k: int | None = None,
        greedy: bool = False, use_cache: bool = True, generator: torch.Generator | None = None,
        iterations: int | None = None, steps: int | None = None,
    ) -> Tensor:
        """Append ``max_new_tokens`` tokens to idx (B, N): greedy, or sampled with temperature / top-k.

        The number of passes is fixed for the whole generation (``iterations``, default
        ``cfg.iterations``), so every cached token has one cache entry per pass. ``temperature`` >= 0
        (0 = greedy), ``top_k`` >= 1 or None (:func:`check_sampling`); the prompt needs at least one token
        (checked up front by the forward pass's own :meth:`TokenModel.context`). Past ``cfg.max_seq_len``
        tokens each step reads the last ``max_seq_len`` (a sliding window, recomputed), with or without the cache.
        With the cache every energy block whose energy reads other tokens must fill its slot (``Energy.prepare``,
        :meth:`~energyformer.core.block.EnergyBlock.check_cache`): one that leaves it empty is refused with a
        ConfigError at the first call, as it would have decoded other tokens than ``use_cache=False``.
        The tokens one at a time, as they are drawn: :meth:`stream`.
        """
        new = list(self.stream(idx, max_new_tokens, temperature, top_k, greedy, use_cache, generator,
                               iterations, steps))
        return torch.cat([idx, *new], dim=1)

    def stream(
        self, idx: Tensor, max_new_tokens: int, temperature: float = 1.0, top_k: int | None = None,
        greedy: bool = False, use_cache: bool = True, generator: torch.Generator | None = None,
        iterations: int | None = None, steps: int | None = None,
    ) -> Iterator[Tensor]:
        """:meth:`generate`'s new tokens, one (B, 1) tensor per step as it is drawn (for printing while sampling).

        The arguments are checked here, before the first token is asked for; the tokens equal
        ``generate(...)[:, N:]`` for the same arguments and generator state.
        """
        check_sampling(max_new_tokens, temperature, top_k)
        self.context(idx, steps=steps)  # the forward pass's checks of idx ((B, N) ids, N >= 1) and steps, up front
        if iterations is not None:  # the forward's check of it (body), up front too: it ran at the first token
            check_int("iterations", iterations, min=1)
        iterations = self.cfg.iterations if iterations is None else iterations
        return self._draw(idx, max_new_tokens, temperature, top_k, greedy or temperature == 0, use_cache, generator,
                          iterations, steps)

    @torch.no_grad()
    def _draw(self, idx: Tensor, max_new_tokens: int, temperature: float, top_k: int | None, greedy: bool,
              use_cache: bool, generator: torch.Generator | None, iterations: int,
              steps: int | None) -> Iterator[Tensor]:
        cache: dict | None = {} if use_cache else None
        out, pos, inp = idx, 0, idx
        for _ in range(max_new_tokens):
            if not use_cache:
                inp, pos = out[:, -self.cfg.max_seq_len:], 0
            elif pos + inp.shape[1] > self.cfg.max_seq_len:  # window full: restart the cache on the last
                # max_seq_len tokens, the window the uncached path reads (it used to keep one token fewer)
                cache, inp, pos = {}, out[:, -self.cfg.max_seq_len:], 0
            logits = self(inp, cache=cache, offset=pos, iterations=iterations, steps=steps).logits[:, -1].float()
            _check_finite(logits, out.shape[1] - idx.shape[1])
            if use_cache:
                pos += inp.shape[1]
            if greedy:
                nxt = logits.argmax(-1, keepdim=True)  # (B, 1)
            else:
                if top_k is not None:  # on the raw logits: the kept set is the same at any temperature > 0
                    kth = torch.topk(logits, min(top_k, logits.shape[-1])).values[:, -1:]
                    logits = logits.masked_fill(logits < kth, float("-inf"))
                logits = tempered(logits, temperature)
                nxt = torch.multinomial(logits.softmax(-1), 1, generator=generator)
            out = torch.cat([out, nxt], dim=1)
            inp = nxt
            yield nxt


def token_cross_entropy(logits: Tensor, targets: Tensor) -> Tensor:
    """Mean cross-entropy of logits (B, N, V) against targets (B, N) (int64 class ids, −100 ignored), in at least
    float32. targets of another shape or dtype are one line naming them: one with as many elements in another
    shape, (N, B) say, was flattened against the logits and gave a finite loss of the wrong pairs (probe AS)."""
    if targets.shape != logits.shape[:2] or targets.dtype != torch.int64:
        raise ValueError(f"targets of shape {tuple(targets.shape)} and dtype {targets.dtype}: expected token ids "
                         f"{tuple(logits.shape[:2])} (the inputs' shape) of dtype torch.int64, -100 to ignore one")
    return F.cross_entropy(at_least_float32(logits).flatten(0, 1), targets.flatten(), ignore_index=-100)


def _check_finite(logits: Tensor, t: int) -> None:
    """Refuse logits (B, V) that no token can be drawn from: a NaN or +inf, or a row with no finite logit. Greedy
    decoding took the NaN's index and then token 0 at every step (argmax of all-NaN rows), sampling failed inside
    torch.multinomial; −inf alone is a token ruled out. One host read per new token, beside a whole forward."""
    bad = logits.isnan().any(-1) | logits.isposinf().any(-1) | ~logits.isfinite().any(-1)  # (B,)
    if bool(bad.any()):
        rows = bad.nonzero().flatten().tolist()
        raise NonFiniteOutput(f"generate: the model's logits for new token {t} are not finite (NaN, +inf, or no "
                              f"finite logit) in batch row(s) {rows[:8]}{' ...' if len(rows) > 8 else ''}: its "
                              "weights are not finite or it overflows in this precision (try float32)")


def kv_cache_bytes(cache: dict) -> int:
    """Total bytes held by a KV cache produced by :meth:`CausalLM.generate` / forward(cache=...)."""
    return sum(t.numel() * t.element_size() for slot in cache.values() for t in slot.values())
