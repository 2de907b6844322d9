"""``ForwardContext``: what a model hands down to its blocks in one forward pass (DESIGN.md core table).

One context object travels through every layer and every iteration of a forward pass. Blocks read
from it (offset, mask, iteration, step override, model inputs) and write to it (traces, solver
statistics, KV cache, state carried across layers, auxiliary losses). Records are keyed by
``(block qualified name, iteration)`` so a block iterated L times by a recurrent-depth backbone keeps
L traces and L cache entries (a sublayer applied r times per layer, plain reuse, records its later
applications as ``name#1`` … ``name#r-1``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from .trace import Traces, key_label

#: Key of per-block records: (qualified module name, iteration index).
BlockKey = tuple[str, int]


@dataclass
class ForwardContext:
    """Per-forward information handed down a model to its blocks.

    traces:     when not None, energy blocks record their :class:`Trace` under :meth:`key`.
    stats:      when not None, energy blocks record their solver statistics
                (:class:`~energyformer.core.solver.SolverStats`) under :meth:`key`.
    cache:      when not None, incremental-decoding state (KV cache); :meth:`cache_slot` gives a
                block its own dict per iteration.
    offset:     position of the first token of ``x`` in the sequence (non-zero while decoding).
    mask:       (B, N) bool key-padding mask, True for real tokens (None: every token is real).
                Attention never attends to masked keys; solvers keep masked tokens fixed.
    iteration:  index of the current pass of a recurrent-depth backbone (0 for a plain stack).
    iterations: number of passes in this forward pass.
    reuse:      index of the current application of a sublayer applied several times with the same
                weights (``block.attn_reuse`` / ``mlp_reuse``, set by
                :class:`~energyformer.blocks.layer.TransformerLayer`; 0 for the first): the second
                application records and caches as ``name#1`` (:meth:`key`), so traces, statistics and
                KV-cache slots of the applications stay apart.
    steps:      when not None, overrides the step count of every energy block (test-time budgets).
    inputs:     the model's inputs (token ids, images), for energies that need them.
    carry:      state a solver's rule carries across layers (momentum velocity), keyed by the
                solver's carry key; read and written only by :meth:`Solver.run` / :meth:`Solver.shift`.
    aux_losses: auxiliary losses added by blocks (:meth:`add_aux`); the task adds them to its loss.
    embedded:   the layer stack's input x⁰ (embedded tokens or patches, (B, N, D)), set by
                :class:`~energyformer.models.backbone.LayerStack` before its first pass; blocks that
                condition on the model input read it (Hyper-SET's step sizes, seed 002 Eq. 12).
    layer_input: the input of the current layer (set by
                :class:`~energyformer.blocks.layer.TransformerLayer`): the state a step size with
                ``condition: layer`` sees in every sublayer of the layer (Hyper-SET's γ_t and α_t).
    memo:       per-forward cache of pure functions of (module, index, state), e.g. a step-size
                network shared by two sublayers computes its output once. Users key it with
                ``torch.is_grad_enabled()`` too: a value built under no_grad (``backward: truncated``'s
                untracked steps) has no graph and must not reach a tracked step.
    """

    traces: Traces | None = None
    stats: dict[BlockKey, Any] | None = None
    cache: dict[str, dict] | None = None
    offset: int = 0
    mask: Tensor | None = None
    iteration: int = 0
    iterations: int = 1
    reuse: int = 0
    steps: int | None = None
    inputs: Any = None
    carry: dict[str, Any] = field(default_factory=dict)
    aux_losses: dict[str, Tensor] = field(default_factory=dict)
    embedded: Tensor | None = None
    layer_input: Tensor | None = None
    memo: dict[Any, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # the blocks cast the mask to bool: an additive 0 / −inf float mask came out inverted (0 → False hid the real
        # tokens, −inf → True kept the padding) with no error (probe AS); the models refuse it already (TokenModel)
        m = self.mask
        if m is not None and (not isinstance(m, Tensor) or m.dtype != torch.bool or m.dim() != 2):
            what = (f"dtype {m.dtype} and shape {tuple(m.shape)}" if isinstance(m, Tensor) else type(m).__name__)
            raise ValueError(f"ForwardContext mask of {what}: expected a (B, N) torch.bool key-padding mask (True = a "
                             "real token); an additive 0 / -inf mask is not one")

    def key(self, name: str) -> BlockKey:
        """Record key of block ``name`` at the current iteration (and plain reuse, ``name#r`` for r >= 1)."""
        return (f"{name}#{self.reuse}" if self.reuse else name, self.iteration)

    def cache_slot(self, name: str) -> dict | None:
        """This block's KV-cache dict at the current iteration and reuse (None when not caching); the
        slot's name is :func:`~energyformer.core.trace.key_label` of :meth:`key`."""
        if self.cache is None:
            return None
        return self.cache.setdefault(key_label(self.key(name)), {})

    def add_aux(self, name: str, value: Tensor) -> None:
        """Add an auxiliary loss term (summed over calls with the same name)."""
        self.aux_losses[name] = self.aux_losses[name] + value if name in self.aux_losses else value


def context_or_new(ctx: ForwardContext | None, who: str) -> ForwardContext:
    """``ctx``, or a fresh :class:`ForwardContext` for None. Anything else (a tensor passed as the second argument
    of ``block(x, ctx)``) is a TypeError naming ``who`` — it used to fail deep inside as "Boolean value of Tensor
    with more than one value is ambiguous"."""
    if ctx is None:
        return ForwardContext()
    if not isinstance(ctx, ForwardContext):
        raise TypeError(f"{who}(x, ctx): ctx must be a ForwardContext or None, not {type(ctx).__name__} "
                        "(call it as block(x), or block(x, ForwardContext(...)))")
    return ctx
