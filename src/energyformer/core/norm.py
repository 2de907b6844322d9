"""The norm of an energy sublayer: which norm, where it acts, and where the descent starts.

Every energy sublayer config has a ``norm`` key (:class:`~energyformer.core.sublayer.DescentConfig`)::

    norm: {kind: rms | layer | energy_layer | none, in_loop: true, init: residual, eps: ...}

An :class:`~energyformer.core.block.EnergyBlock` applies the norm to its input once, ``h = norm(x)``
(keys, values and gates are prepared from h), and

* ``in_loop: true`` re-applies it to the iterate before every gradient evaluation, u_t = norm(x_t),
  x_{t+1} = x_t - eta P ∇E(u_t) (CEM Algorithm 1; then the step is not a gradient step of
  x -> E(norm(x)) and the block reports ``exact = False``); ``false`` evaluates at x_t itself;
* ``init`` is the start point x0: ``residual`` (the raw stream x: with T = 1 the block is a pre-norm
  residual sublayer x + f(norm(x))) or ``normalized`` (x0 = h, CRATE's ISTA step, Algorithm 1 read
  literally);
* ``eps`` is the norm's epsilon (the kind's default when not given).

Kinds live in the registry :data:`NORMS` (``energyformer list norms``): ``rms`` (``nn.RMSNorm``),
``layer`` (``nn.LayerNorm``), ``none`` (the identity; no further keys) and ``energy_layer`` (ET's
scalar-gain layer norm, registered by :mod:`energyformer.energies.energy_transformer` so that core
imports no energy). A new kind is a :class:`NormConfig` subclass with ``kind: Literal[name] = name``
and a builder ``(cfg, dim) -> nn.Module`` registered with ``@NORMS.register(name, ConfigClass)``.
The module is kept as the block's ``norm`` attribute, so its parameters are ``<block>.norm.*``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from torch import nn

from ..utils.config import KindConfig, Registry

#: Norm kinds: name -> (config class, builder ``(cfg, dim) -> nn.Module``).
NORMS = Registry("norm")

Init = Literal["residual", "normalized"]


class NormConfig(KindConfig):
    """Base of the norm kinds that normalise: where the norm acts and where the descent starts."""

    in_loop: bool = True
    """re-apply the norm to the iterate before every gradient evaluation (CEM Algorithm 1; the block
    is then not exact); false: the norm acts on the block input only"""
    init: Init = "residual"
    """start point x0: the residual stream x ('residual': T = 1 is a pre-norm residual sublayer) or the
    normalised input norm(x) ('normalized')"""


class RMSNormConfig(NormConfig):
    """RMSNorm with a learned gain, ``nn.RMSNorm`` (Zhang & Sennrich 2019)."""

    kind: Literal["rms"] = "rms"
    eps: float = Field(1e-6, gt=0)
    """epsilon (Llama's 1e-6, as CEM's and the baselines' norms), the same in every dtype: torch's default, the
    input dtype's machine epsilon, made a float32 or bf16 layer another function than its float64 reference
    (70 % off at rows of RMS 1e-4, probe AD)"""


class LayerNormConfig(NormConfig):
    """LayerNorm with a learned gain and bias, ``nn.LayerNorm`` (Ba et al. 2016)."""

    kind: Literal["layer"] = "layer"
    eps: float = Field(1e-5, gt=0)
    """epsilon (torch's default 1e-5)"""


class NoNormConfig(KindConfig):
    """No norm (the identity): prepare and descend on the raw stream."""

    kind: Literal["none"] = "none"


@NORMS.register("rms", RMSNormConfig)
def build_rms(cfg: RMSNormConfig, dim: int) -> nn.Module:
    """RMSNorm over the last dimension (learned gain)."""
    return nn.RMSNorm(dim, eps=cfg.eps)


@NORMS.register("layer", LayerNormConfig)
def build_layer(cfg: LayerNormConfig, dim: int) -> nn.Module:
    """LayerNorm over the last dimension (learned gain and bias)."""
    return nn.LayerNorm(dim, eps=cfg.eps)


@NORMS.register("none", NoNormConfig)
def build_none(cfg: NoNormConfig, dim: int) -> nn.Module:
    """No norm: the identity."""
    return nn.Identity()


def make_norm(cfg: KindConfig, dim: int) -> tuple[nn.Module, bool, str]:
    """``(module, in_loop, init)`` of a norm config; kind ``none`` gives ``(Identity, False, 'residual')``."""
    module = NORMS.build(cfg, dim)
    return module, bool(getattr(cfg, "in_loop", False)), getattr(cfg, "init", "residual")
