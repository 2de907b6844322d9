"""Depth as iteration: one layer stack applied L times with shared weights (recurrent depth).

    x⁰ = e                                         (embedded input, (B, N, D))
    x^{l+1} = F(x^l + [l ≥ 1 and injection = add] · e),   l = 0, …, L − 1,   F = layers[-1] ∘ … ∘ layers[0]

A plain transformer is the case L = 1. Hyper-SET iterates one shared layer L times and evaluates at
more iterations than it trained with (seed 002 §3, §5); recycling draws the training count q from
[q_min, q_max] per batch (seed 004). Input injection 'add' re-adds the embedded input before every
pass after the first (as in recurrent-depth / deep-equilibrium models, so late passes stay anchored
to the tokens); with L = 1 it has no effect.

Before the first pass the stack stores its input in ``ctx.embedded`` (x⁰: blocks that condition on
the model input, such as Hyper-SET's step-size network, read it there). Every pass sets ``ctx.iteration`` (0 … L−1) and ``ctx.iterations`` (L), so blocks can read the
iteration (per-iteration LoRA, iteration-conditioned step sizes), and traces, solver statistics and
KV-cache slots are keyed by (block, iteration).

Iteration count: an explicit ``iterations`` argument wins; else, in training mode with
``train_iterations = (lo, hi)``, L is drawn uniformly from [lo, hi] per forward pass with torch's
global generator (so a checkpoint that saves torch's RNG state resumes exactly; under DDP each rank
draws from its own stream); else ``iterations``. With a KV cache (``ctx.cache``) the count is never
sampled: every decoding call must run the passes the cache was filled with.

**Depth order** with several distinct layers (``order``): ``cycle`` runs the stack (1, 2, …, 1, 2, …)
L times (the recurrent-depth form above); ``consecutive`` runs layer 1 L times, then layer 2 L times,
… (the released Hyper-SET image code: every layer sees iteration indices 0 … L−1, and input
injection re-adds the stack input before every pass but the first of each layer). With one layer
both are the same.

**Hidden states** on request (``hiddens``, a dict the caller passes; x-transformers'
``LayerIntermediates``): the state after every (layer index, iteration), in execution order, so
analysis reads per-iteration states from the model's output instead of forward hooks.
"""

from collections.abc import Iterable

import torch
from torch import Tensor, nn

from ..core.context import ForwardContext
from ..utils.validate import check_choice, check_int

INJECTIONS = ("none", "add")
ORDERS = ("cycle", "consecutive")


class LayerStack(nn.ModuleList):
    """The layers of a model, iterated L times; ``stack(x, ctx, iterations=None)`` -> (B, N, D).

    A ``ModuleList`` so that parameter names stay ``layers.{i}.…`` whatever the depth settings.
    """

    def __init__(
        self, layers: Iterable[nn.Module] = (), *, iterations: int = 1,
        train_iterations: tuple[int, int] | None = None, input_injection: str = "none", order: str = "cycle",
    ):
        super().__init__(layers)
        check_int("iterations", iterations, min=1)
        if train_iterations is not None:
            lo, hi = train_iterations
            check_int("train_iterations[0]", lo, min=1)
            check_int("train_iterations[1]", hi, min=lo)
            train_iterations = (lo, hi)
        check_choice("input_injection", input_injection, INJECTIONS)
        check_choice("order", order, ORDERS)
        self.iterations = iterations
        self.train_iterations = train_iterations
        self.input_injection = input_injection
        self.order = order

    def num_iterations(self) -> int:
        """L for the next pass: sampled from ``train_iterations`` in training mode, else ``iterations``."""
        if self.training and self.train_iterations is not None:
            lo, hi = self.train_iterations
            return int(torch.randint(lo, hi + 1, ()).item())
        return self.iterations

    def schedule(self, iterations: int) -> list[tuple[int, int]]:
        """The (layer index, iteration) pairs in execution order for L = ``iterations`` passes."""
        if self.order == "consecutive":
            return [(i, it) for i in range(len(self)) for it in range(iterations)]
        return [(i, it) for it in range(iterations) for i in range(len(self))]

    def forward(self, x: Tensor, ctx: ForwardContext, iterations: int | None = None,
                hiddens: dict[tuple[int, int], Tensor] | None = None) -> Tensor:
        """x: (B, N, D) embedded input -> (B, N, D) state after L passes.

        ``hiddens``: when a dict is given, the state (B, N, D) after every (layer index, iteration)
        is stored in it, in execution order."""
        if iterations is None:
            iterations = self.iterations if ctx.cache is not None else self.num_iterations()
        check_int("iterations", iterations, min=1)
        e = x
        ctx.embedded = x
        ctx.iterations = iterations
        for i, it in self.schedule(iterations):
            ctx.iteration = it
            # input injection before every pass but the first (of each layer, when consecutive)
            if it > 0 and self.input_injection == "add" and (self.order == "consecutive" or i == 0):
                x = x + e
            x = self[i](x, ctx)
            if hiddens is not None:
                hiddens[(i, it)] = x
        return x

    def extra_repr(self) -> str:
        rng = "" if self.train_iterations is None else f", train_iterations={list(self.train_iterations)}"
        return (f"iterations={self.iterations}{rng}, input_injection={self.input_injection!r}, "
                f"order={self.order!r}")
