"""Which call-time options a model honours (``energyformer eval --steps / --iterations``).

An option a model cannot honour is an error naming the option and the model kind, never a silent
no-op (issue 25: ``eval --steps 3`` on a Llama used to print the plain evaluation with rc 0).

A model may declare its options with a ``forward_options()`` method returning ``{name: least value}``
(the equilibrium transformer takes ``steps = 0``: K = 0, no refinement). Without one they are
inferred, each with least value 1: ``iterations`` and ``steps`` must be parameters of ``forward``, and ``steps``
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


def supported_forward_options(model: nn.Module) -> dict[str, int]:
    """``{option: least allowed value}`` for the options among ``iterations`` / ``steps`` that
    ``model`` honours."""
    declared = getattr(model, "forward_options", None)
    if callable(declared):
        return dict(declared())
    params = inspect.signature(model.forward).parameters
    opts = {o: 1 for o in OPTIONS if o in params}
    if "steps" in opts and not any(isinstance(m, EnergyBlock) for m in model.modules()):
        del opts["steps"]
    return opts


def check_forward_options(model: nn.Module, options: dict[str, Any], kind: str, *, flags: bool = True) -> None:
    """Raise a ConfigError naming the option and the model kind for every option ``model`` ignores
    or every value below the least it takes; ``flags``: name them as the CLI's ``--steps 3``, else as the
    call's keyword ``steps = 3`` (``TokenModel.context``)."""
    ok = supported_forward_options(model)
    said = (lambda n, v: f"--{n} {v}") if flags else (lambda n, v: f"{n} = {v!r}")
    for name, value in options.items():
        if name not in ok:
            what = {"steps": "no energy descent steps to set",
                    "iterations": "no recurrent depth to set"}.get(name, "no such option")
            allowed = ", ".join(f"--{o}" if flags else o for o in sorted(ok)) or "none"
            raise ConfigError(f"{said(name, value)}: a {kind!r} model has {what} "
                              f"(options this model takes: {allowed})")
        if isinstance(value, bool) or not isinstance(value, int) or value < ok[name]:
            raise ConfigError(f"{said(name, value)}: a {kind!r} model takes {'--' if flags else ''}{name} "
                              f"{'>=' if flags else 'as an integer >='} {ok[name]}")
