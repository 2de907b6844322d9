"""The ``transformer`` model kind: :class:`ModelConfig` + :func:`build_transformer` in :data:`MODELS`."""

from __future__ import annotations

from torch import nn

from ..utils.config import replace
from .config import ModelConfig
from .encoder import TokenEncoder
from .lm import CausalLM
from .registry import MODELS


@MODELS.register("transformer", ModelConfig)
def build_transformer(
    cfg: ModelConfig, *, vocab_size: int | None = None, n_out: int | None = None, causal: bool | None = None,
) -> nn.Module:
    """Transformer backbone with the head the task asks for.

    vocab_size: the task's input vocabulary (replaces ``cfg.vocab_size`` when given).
    n_out:      None -> :class:`CausalLM` (next-token prediction over the vocabulary; causal);
                an int -> :class:`TokenEncoder` with ``n_out`` classes per token.
    causal:     the task's default for the encoder when ``cfg.causal`` is None (else False).
    """
    if vocab_size is not None and vocab_size != cfg.vocab_size:
        cfg = replace(cfg, vocab_size=vocab_size)
    if n_out is None:
        if causal is False:
            raise ValueError("build_transformer: a next-token LM head (n_out=None) cannot be bidirectional")
        return CausalLM(cfg)
    return TokenEncoder(cfg, n_out, causal=cfg.causal if cfg.causal is not None else causal)
