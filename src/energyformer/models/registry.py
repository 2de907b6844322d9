"""Model kinds: ``model: {kind: transformer, ...}`` / ``{kind: regressor, ...}`` in a run config.

A model config is a :class:`~energyformer.utils.config.KindConfig` registered here; the task of a run
builds the model from it (a task knows its vocabulary, classes and heads, the model config knows the
backbone), and says which model kinds it accepts.
"""

from __future__ import annotations

from energyformer.utils.config import Registry

#: model kind -> (config class, builder). Builders are called by tasks as ``build(cfg, **task_dims)``.
MODELS = Registry("model")
