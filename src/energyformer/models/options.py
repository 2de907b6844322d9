"""Which call-time options a model honours (``energyformer eval --steps / --iterations``).

An option a model cannot honour is an error naming the option and the model kind, never a silent
no-op (issue 25: ``eval --steps 3`` on a Llama used to print the plain evaluation with rc 0).

A model may declare its options with a ``forward_options()`` method returning a set of names. Without
one they are inferred: ``iterations`` and ``steps`` must be parameters of ``forward``, and ``steps``
(the step budget of energy blocks, ``ForwardContext.steps``) needs at least one
:class:`~energyformer.core.block.EnergyBlock` in the model — a plain Llama, GPT or looped transformer
takes ``iterations`` (passes through its stack) but has no descent steps to change.
"""

from __future__ import annotations

import inspect
from typing import Any

from torch import nn

from ..core.block import EnergyBlock
from ..utils.validate import ConfigError

OPTIONS = ("iterations", "steps")


def supported_forward_options(model: nn.Module) -> set[str]:
    """The subset of ``iterations`` / ``steps`` that ``model`` honours."""
    declared = getattr(model, "forward_options", None)
    if callable(declared):
        return set(declared())
    params = inspect.signature(model.forward).parameters
    opts = {o for o in OPTIONS if o in params}
    if "steps" in opts and not any(isinstance(m, EnergyBlock) for m in model.modules()):
        opts.discard("steps")
    return opts


def check_forward_options(model: nn.Module, options: dict[str, Any], kind: str) -> None:
    """Raise a ConfigError naming the option and the model kind for every option ``model`` ignores."""
    ok = supported_forward_options(model)
    for name, value in options.items():
        if name not in ok:
            what = {"steps": "no energy descent steps to set",
                    "iterations": "no recurrent depth to set"}.get(name, "no such option")
            allowed = ", ".join(f"--{o}" for o in sorted(ok)) or "none"
            raise ConfigError(f"--{name} {value}: a {kind!r} model has {what} "
                              f"(options this model takes: {allowed})")
