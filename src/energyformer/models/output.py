"""``ModelOutput``: the one record every model returns (x-transformers' ``LayerIntermediates``).

    logits      (B, N, n_out) per token, or (B, n_classes) for a pooled classifier
    loss        mean cross-entropy when the model was given targets (language models), else None
    traces      (block name, iteration) -> Trace, when asked for (``trace=True``)
    aux_losses  name -> scalar added by blocks (``ctx.add_aux``); the task adds them to its loss
                (:meth:`~energyformer.tasks.base.Task.add_aux_losses`)
    stats       (block name, iteration) -> solver statistics, when asked for (``stats=True``)
    hiddens     (layer index, iteration) -> state (B, N, D) after that layer in that pass, in
                execution order, when asked for (``hiddens=True``)
    embedded    the layer stack's input x⁰ (B, N, D), with ``hiddens``
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import Tensor

from ..core.context import ForwardContext
from ..core.trace import Traces


@dataclass
class ModelOutput:
    logits: Tensor
    loss: Tensor | None = None
    traces: Traces | None = None
    aux_losses: dict[str, Tensor] = field(default_factory=dict)
    stats: dict | None = None
    hiddens: dict[tuple[int, int], Tensor] | None = None
    embedded: Tensor | None = None

    @classmethod
    def of(cls, logits: Tensor, ctx: ForwardContext, *, loss: Tensor | None = None,
           hiddens: dict[tuple[int, int], Tensor] | None = None) -> ModelOutput:
        """The record of one forward pass: ``logits`` plus what the context collected."""
        return cls(logits=logits, loss=loss, traces=ctx.traces, aux_losses=ctx.aux_losses, stats=ctx.stats,
                   hiddens=hiddens, embedded=None if hiddens is None else ctx.embedded)

    def iteration_states(self, layer: int = -1) -> list[Tensor]:
        """[x⁰, x¹, …, x^L]: the stack input and the state after ``layer`` (default the last) in every
        pass (with one layer, or ``order: cycle``, the state after every pass). Needs ``hiddens=True``."""
        if self.hiddens is None or self.embedded is None:
            raise ValueError("no hidden states in this output: call the model with hiddens=True")
        layers = sorted({i for i, _ in self.hiddens})
        pick = layers[layer]
        return [self.embedded] + [h for (i, _), h in self.hiddens.items() if i == pick]


__all__ = ["ModelOutput"]
