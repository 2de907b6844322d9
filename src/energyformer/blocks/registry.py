"""Sublayers by registry: ``block: {attention: {kind: cem, steps: 2}, mlp: {kind: swiglu}}``.

Every attention-like and MLP-like sublayer is a kind registered in :data:`ATTENTIONS` or :data:`MLPS`
with its own config section (a :class:`~energyformer.utils.config.KindConfig`) and a builder::

    @ATTENTIONS.register("gpt", GPTAttentionConfig)
    def build_gpt_attention(cfg: GPTAttentionConfig, spec: SublayerSpec) -> nn.Module: ...

A kind declares whether it has a causal form (``supports_causal``, default True); a causal model
refuses one that does not, with one clear error. A builder gets its own config plus one :class:`SublayerSpec` with what the model decides (width,
heads, causal, dropout, the model-wide MLP width) and returns an ``nn.Module`` mapping
``(x (B, N, D), ctx) -> (B, N, D)`` with the residual included. Adding a system adds a config class
and a builder; nothing else changes (no shared-config fields, no if-chains).

The module a builder returns is tagged with the registry's part ("attention" or "mlp") unless it
declares ``part`` itself; :func:`energyformer.models.params.count_params` counts parameters by it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

from pydantic import Field
from torch import nn

from ..utils.config import KindConfig, Registry
from ..utils.validate import ConfigError

#: attention kind -> (config class, builder(cfg, spec) -> nn.Module)
ATTENTIONS = Registry("attention")
#: MLP kind -> (config class, builder(cfg, spec) -> nn.Module)
MLPS = Registry("mlp")


@dataclass(frozen=True)
class SublayerSpec:
    """What the model hands every sublayer builder (the only thing builders share).

    dim:        model width D.
    heads:      attention heads.
    causal:     whether token i may only see tokens j <= i (decided by the model / task).
    dropout:    the block's dropout probability (used by the kinds that have dropout).
    mlp_hidden: model-wide MLP hidden size; None = each MLP kind's own default.
    shared:     modules one sublayer of a layer offers the next at build time (Hyper-SET's step-size
                network, built by the attention, referenced by the MLP); one dict per layer.
    """

    dim: int
    heads: int
    causal: bool = True
    dropout: float = 0.0
    mlp_hidden: int | None = None
    shared: dict = field(default_factory=dict, compare=False, repr=False)


class SublayerConfig(KindConfig):
    """Base of every sublayer kind config. A kind that has no causal form declares
    ``supports_causal = False`` (with the reason in ``causal_note``): building it for a causal model is
    then a :class:`ConfigError` before its builder runs."""

    supports_causal: ClassVar[bool] = True
    causal_note: ClassVar[str] = ""

    @classmethod
    def examples(cls) -> list[dict]:
        """Option sets this kind is built with by the library-wide scale fuzz
        (``tests/core/test_scale_fuzz.py``: float32 and bf16 against float64 at input and weight
        scales 1e-3 … 1e4); ``[{}]`` is the defaults. A registered kind without examples fails it."""
        raise NotImplementedError(f"{cls.__name__} must provide examples() for the scale fuzz")


class AttentionConfig(SublayerConfig):
    """Base of attention kind configs (a kind adds ``kind: Literal[name] = name`` and its options)."""


class MLPConfig(SublayerConfig):
    """Base of MLP kind configs; each kind knows its default hidden size (:meth:`default_hidden`)."""

    hidden: int | None = Field(None, ge=1)
    """hidden size of this MLP (None: the model's mlp_hidden, else this kind's default)"""

    def default_hidden(self, dim: int) -> int:
        """Hidden size used when neither this section nor the model sets one."""
        raise NotImplementedError(f"{type(self).__name__} must define default_hidden(dim)")

    def hidden_size(self, spec: SublayerSpec) -> int:
        """This section's ``hidden`` > the model's ``mlp_hidden`` > the kind's default."""
        if self.hidden is not None:
            return self.hidden
        if spec.mlp_hidden is not None:
            return spec.mlp_hidden
        return self.default_hidden(spec.dim)


def llama_hidden(dim: int) -> int:
    """Llama's MLP width: 8/3 · dim rounded up to a multiple of 32 (Touvron et al. 2023)."""
    return 32 * math.ceil(8 * dim / 3 / 32)


def _build(registry: Registry, cfg: KindConfig, spec: SublayerSpec) -> nn.Module:
    entry = registry.get(cfg.kind)
    if not isinstance(cfg, entry.config):
        raise TypeError(f"{registry.what} kind {cfg.kind!r} expects a {entry.config.__name__}, "
                        f"got a {type(cfg).__name__}")
    if spec.causal and not getattr(cfg, "supports_causal", True):
        note = getattr(cfg, "causal_note", "")
        raise ConfigError(f"{registry.what} kind {cfg.kind!r} is bidirectional only{f' ({note})' if note else ''}: "
                          f"set model.causal: false or use a bidirectional task")
    module = entry.builder(cfg, spec)
    if not isinstance(module, nn.Module):
        raise TypeError(f"the builder of {registry.what} kind {cfg.kind!r} returned "
                        f"{type(module).__name__}, not an nn.Module")
    if getattr(module, "part", None) is None:
        module.part = registry.what
    return module


def build_attention(cfg: KindConfig, spec: SublayerSpec) -> nn.Module:
    """The attention sublayer of kind ``cfg.kind`` (part 'attention')."""
    return _build(ATTENTIONS, cfg, spec)


def build_mlp(cfg: KindConfig, spec: SublayerSpec) -> nn.Module:
    """The MLP sublayer of kind ``cfg.kind`` (part 'mlp')."""
    return _build(MLPS, cfg, spec)
