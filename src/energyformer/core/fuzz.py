"""Low-precision agreement: a module run in float32 or bf16 autocast against its float64 twin (issue 23:
"no silent wrong answers").

A result in a low precision is accepted when it is as close to the float64 result as the problem
allows, judged by the problem itself rather than by one fixed tolerance:

    ‖y_low − y_64‖ ≤ C · (s + u ‖y_64‖ + tiny √n)        per output tensor of n elements,

with ``u`` the unit roundoff of the precision (float32 2^-23, bfloat16 2^-8), ``tiny`` its smallest normal (a
float64 value below it is a correct 0 or subnormal there) and ``s`` the measured
*sensitivity*: the largest change of the float64 result when every input, every parameter and the
output of every submodule (a projection, a norm, a residual block) is perturbed by a random relative
amount of size ``u`` (``probes`` seeded draws), and once by rounding each of them to the low
precision and back — a model of rounding at each of those points. A well-conditioned
computation has ``s ≈ u ‖y‖``; an ill-conditioned one (peaked softmax near a tie, cancellation of
large terms) gets the room its conditioning demands, and no more: a low-precision path that drops
terms, underflows a normaliser or overflows a norm is off by far more than C times what rounding the
inputs can explain. ``C`` (:data:`SLACK`) covers the rounding of intermediates (a few dozen ops).

**What it cannot see.** The bound is at least ``C · u ‖y‖``: 4e-6 of ‖y‖ in float32, but 25 % of ‖y‖ in bfloat16
(u = 2^-8), more where the sensitivity is large. A bf16 path off by less than that passes; a bf16-only fault must
be caught by the float32 leg (same code, other rounding) or by a dedicated test. Measured over the scale fuzz
(tests/core/test_scale_fuzz.py, 2026-11): the largest err/bound of an accepted bf16 result was 0.29 (median 0.004),
so C cannot be lowered by much more than a factor 2 without failing correct bf16 results.

:func:`low_precision_agreement` returns an :class:`Agreement` per output; an exception raised by the
low-precision run is a *clear error* (reported as such, not a failure); a non-finite result where the
float64 one is finite is a *loud* failure, not a silent one. Everything else must agree.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

#: C in the acceptance bound (module docstring)
SLACK = 64.0


@dataclass
class Agreement:
    """One output: ``err = ‖y_low − y_64‖``, ``bound = C (s + u ‖y_64‖)``; ``status`` is 'ok',
    'wrong' (finite and outside the bound: a silent wrong answer), 'loud' (non-finite where float64 is
    finite), 'raised' (the low-precision run raised) or 'no_reference' (float64 itself not finite)."""

    status: str
    err: float = float("nan")
    bound: float = float("nan")
    scale: float = float("nan")
    message: str = ""

    @property
    def silent_wrong(self) -> bool:
        return self.status == "wrong"


def unit_roundoff(dtype: torch.dtype) -> float:
    """u = eps / 2 of a floating dtype (float32 6e-8, bfloat16 2e-3)."""
    return torch.finfo(dtype).eps / 2


def scale_weights_(module: nn.Module, factor: float) -> nn.Module:
    """Multiply every weight matrix (parameter with ≥ 2 dimensions) by ``factor`` in place; vectors
    (norm gains, biases, step sizes, temperatures) keep their values."""
    with torch.no_grad():
        for p in module.parameters():
            if p.dim() >= 2:
                p.mul_(factor)
    return module


def _outputs(y) -> list[Tensor]:
    if isinstance(y, Tensor):
        return [y]
    return [t for t in y if isinstance(t, Tensor)]


def map_tensors(obj: Any, fn: Callable[[Tensor], Tensor]) -> Any:
    """``obj`` with ``fn`` applied to every floating tensor inside tuples, lists, dicts and dataclasses
    (other tensors as they are); a ``torch.Generator`` is replaced by a copy in the same state, so
    every run of a seeded random context draws the same numbers."""
    if isinstance(obj, Tensor):
        return fn(obj) if obj.is_floating_point() else obj
    if isinstance(obj, torch.Generator):
        g = torch.Generator(device=obj.device)
        g.set_state(obj.get_state())
        return g
    if isinstance(obj, (tuple, list)):
        return type(obj)(map_tensors(o, fn) for o in obj)
    if isinstance(obj, dict):
        return {k: map_tensors(v, fn) for k, v in obj.items()}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.replace(obj, **{f.name: map_tensors(getattr(obj, f.name), fn)
                                           for f in dataclasses.fields(obj) if f.init})
    return obj


def _perturbed(module: nn.Module, inputs: Any, u: float, g: torch.Generator | None, dtype: torch.dtype):
    def jitter(x: Tensor) -> Tensor:
        if g is None:  # round to the low precision and back: the perturbation it applies itself
            return x.to(dtype).to(x.dtype)
        return x * (1 + u * torch.randn(x.shape, generator=g, dtype=x.dtype).to(x.device))

    m = copy.deepcopy(module)
    with torch.no_grad():
        for p in m.parameters():
            if p.is_floating_point():
                p.copy_(jitter(p))
    for sub in m.modules():  # every submodule's output rounded too (a residual sum, a projection)
        sub.register_forward_hook(lambda _m, _i, out: map_tensors(out, jitter))
    return m, map_tensors(inputs, jitter)


def sublayer_gradients(module: nn.Module, inputs: tuple[Tensor], params: bool = True) -> list[Tensor]:
    """A ``run`` for :func:`low_precision_agreement` of a sublayer's backward: the gradients of Σ y ∘ w (w fixed:
    N(0, 1) of seed 7, in y's dtype) with respect to the tokens ``inputs[0]`` (B, N, D) and, with ``params``, every
    trainable parameter (zeros where unused), y = ``module(x, ForwardContext(embedded=x))``."""
    from .block import ForwardContext

    (x,) = inputs
    with torch.enable_grad():
        x = x.detach().requires_grad_(True)
        y = module(x, ForwardContext(embedded=x))
        w = torch.randn(y.shape, generator=torch.Generator().manual_seed(7), dtype=torch.float64).to(y.dtype)
        wrt = [x, *(p for p in module.parameters() if p.requires_grad)] if params else [x]
        grads = torch.autograd.grad((y * w).sum(), wrt, allow_unused=True)
    return [torch.zeros_like(t) if g is None else g for g, t in zip(grads, wrt)]


def low_precision_agreement(run: Callable[[nn.Module, Any], Tensor | Sequence[Tensor]],
                            module: nn.Module, inputs: Any,
                            precisions: Sequence[tuple[torch.dtype, bool]] = ((torch.float32, False),), *,
                            probes: int = 0, seed: int = 0, slack: float = SLACK) -> list[list[Agreement]]:
    """Compare ``run(module, inputs)`` in each precision with the float64 run (module docstring).

    ``module`` and the floating tensors in ``inputs`` (any tree, :func:`map_tensors`) are float64 (they
    are not modified; every run gets a fresh copy of the tree). A precision is ``(dtype, autocast)``:
    autocast runs the float32 module under ``torch.autocast(device, dtype)`` (mixed precision, as
    training does) instead of casting the module and inputs to ``dtype``. Returns, per precision, one
    :class:`Agreement` per output (a single 'raised' one when the run raised).
    """
    with torch.no_grad():
        ref = [t.detach() for t in _outputs(run(module, map_tensors(inputs, lambda x: x)))]
    return [_agreement(run, module, inputs, ref, dtype, autocast, probes, seed, slack)
            for dtype, autocast in precisions]


def _agreement(run, module, inputs, ref, dtype, autocast, probes, seed, slack) -> list[Agreement]:
    u = unit_roundoff(dtype)
    with torch.no_grad():
        g = torch.Generator().manual_seed(seed)
        sens = [torch.zeros((), dtype=torch.float64) for _ in ref]
        for gen in [None] + [g] * probes:
            m, xs = _perturbed(module, inputs, u, gen, dtype)
            for i, t in enumerate(_outputs(run(m, xs))):
                sens[i] = torch.maximum(sens[i], (t.detach() - ref[i]).norm())
        work = torch.float32 if autocast else dtype
        m = copy.deepcopy(module).to(work)
        devices: list[str] = []
        xs = map_tensors(inputs, lambda x: devices.append(x.device.type) or x.to(work))
        ctx = torch.autocast(devices[0] if devices else "cpu", dtype=dtype) if autocast else nullcontext()
        try:
            with ctx:
                low = _outputs(run(m, xs))
        except Exception as e:  # noqa: BLE001 -- a clear error is an accepted outcome
            return [Agreement("raised", message=f"{type(e).__name__}: {e}".splitlines()[0])]
    out = []
    for r, s, y in zip(ref, sens, low):
        scale = float(r.norm())
        if not torch.isfinite(r).all() or not torch.isfinite(s):
            out.append(Agreement("no_reference", scale=scale))
            continue
        if not torch.isfinite(y).all():
            out.append(Agreement("loud", scale=scale))
            continue
        err = float((y.detach().to(torch.float64) - r).norm())
        # + the dtype's smallest normal per element: a float64 value below it (a gradient of 1e-102) is a
        # correct 0 or subnormal there, not a wrong answer (probe AU)
        bound = slack * (float(s) + u * scale + torch.finfo(dtype).tiny * r.numel() ** 0.5)
        out.append(Agreement("ok" if err <= bound else "wrong", err, bound, scale))
    return out
