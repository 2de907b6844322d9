"""One initialisation pass for every model built on the layer stack.

    1. the generic rule on every ``nn.Linear`` and ``nn.Embedding`` (:func:`init_module`):
       ``normal`` — weight ~ N(0, init_std²), bias 0 (GPT-2 / nanoGPT style);
       ``torch``  — the module's own ``reset_parameters()`` (Linear U(±1/√fan_in), Embedding N(0, 1));
    2. the model's own extras (a [CLS] token, learned positions, a LeCun-normal patch projection);
    3. every submodule's own rule, so a block's initialisation survives the generic pass:
       ``after_model_init()`` (e.g. zero-initialised step-size networks) and
       ``reset_energy_parameters()`` (energies whose parameters have their own scale, e.g. ET's Q/K
       at 0.002, CRATE's orthogonal subspaces).
"""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from ..utils.validate import check_choice

INITS = ("normal", "torch")
MODULE_HOOKS = ("after_model_init", "reset_energy_parameters")


def init_module(m: nn.Module, init: str, std: float) -> None:
    """Step 1 on one module (anything but a Linear or an Embedding is left alone)."""
    if not isinstance(m, (nn.Linear, nn.Embedding)):
        return
    if init == "torch":
        m.reset_parameters()
        return
    nn.init.normal_(m.weight, std=std)
    if getattr(m, "bias", None) is not None:
        nn.init.zeros_(m.bias)


def run_module_init_hooks(model: nn.Module) -> None:
    """Step 3: every submodule's ``after_model_init()`` and ``reset_energy_parameters()``."""
    for m in model.modules():
        if m is model:
            continue
        for hook in MODULE_HOOKS:
            fn = getattr(m, hook, None)
            if callable(fn):
                fn()


def init_model(model: nn.Module, init: str, std: float, extra: Callable[[], None] | None = None) -> None:
    """The whole pass (module docstring): generic rule, the model's ``extra`` rule, the modules' own."""
    check_choice("init", init, INITS)
    for m in model.modules():
        init_module(m, init, std)
    if extra is not None:
        extra()
    run_module_init_hooks(model)
