"""Weights of a step's micro-batches when the task's mean loss averages over a varying number of items.

A task's loss is a mean over the items of its batch: tokens, or only some of them (Sudoku's blank cells,
the masked codes of masked image modelling). With ``grad_accum`` micro-batches (and, under DDP, one set
per rank) the trainer's plain form, ``Σ_i loss_i / accum`` averaged over ranks, is the mean of the
micro-batches' means, which equals the mean over all the step's items only when every micro-batch counts
the same number. Otherwise a micro-batch with few items weighs as much as one with many, and
``grad_accum: 2`` at batch B/2 is not the step of batch B.

With a task's count ``n_i`` of each micro-batch (``Task.loss_items``), micro-batch i's loss is scaled by
``w_i = n_i · world / N`` (N: the items of the whole step, all ranks; DDP averages the ranks' gradients,
hence the factor ``world``), so the gradient is that of ``Σ_i n_i loss_i / N``, the mean over every item of
the step (as in Hugging Face transformers' ``num_items_in_batch``). Where every count is equal the weights
are ``1 / accum`` and the trainer keeps its plain form, bit for bit (:func:`micro_weights` returns None).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

#: the items a batch's mean loss averages over (None: every micro-batch weighs the same)
CountFn = Callable[[tuple], int]


def count_items(count_fn: CountFn, batch: tuple) -> int:
    """``count_fn(batch)`` as an int >= 0 (a clear error for anything else)."""
    n = count_fn(batch)
    if isinstance(n, torch.Tensor):
        n = n.item()
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise TypeError(f"loss_items(batch) = {n!r}: expected the number of items the batch's loss averages "
                        "over (an integer >= 0)")
    return n


def micro_weights(counts: Sequence[int], world: int = 1,
                  all_reduce: Callable[[int], int] | None = None) -> list[float] | None:
    """Per micro-batch loss weights ``n_i · world / N`` (module docstring), or None where they are all
    ``1 / len(counts)`` (equal counts on every rank) or the step has no item at all.

    ``all_reduce(local_total) -> global_total``: the sum over ranks (DDP; None: one process)."""
    local = sum(counts)
    total = all_reduce(local) if all_reduce is not None and world > 1 else local
    if total <= 0:
        return None
    if len(set(counts)) == 1 and total == world * local:  # equal everywhere: the plain Σ loss_i / accum
        return None
    return [n * world / total for n in counts]


def all_reduce_int(n: int, device: torch.device) -> int:
    """n summed over the ranks of the default process group (one collective)."""
    import torch.distributed as dist

    t = torch.tensor(n, device=device, dtype=torch.int64)
    dist.all_reduce(t)
    return int(t.item())


def _as_tuple(batch) -> tuple:
    return tuple(batch) if isinstance(batch, (tuple, list)) else (batch,)


class StepPlan:
    """The micro-batches of one optimiser step and what each weighs: ``batch(i)``, ``backward(i, loss)``,
    ``share(i)``. With ``count_fn`` and something to weigh (several micro-batches, or several ranks) the step's
    batches are drawn first and weighed by :func:`micro_weights`; otherwise each is drawn when asked and weighs
    ``1 / accum``."""

    def __init__(self, next_batch: Callable[[], tuple], accum: int, count_fn: CountFn | None = None,
                 world: int = 1, all_reduce: Callable[[int], int] | None = None):
        self._next, self.accum = next_batch, accum
        self.batches: list[tuple] | None = None
        self.weights: list[float] | None = None
        if count_fn is not None and (accum > 1 or world > 1):
            self.batches = [_as_tuple(next_batch()) for _ in range(accum)]
            self.weights = micro_weights([count_items(count_fn, b) for b in self.batches], world, all_reduce)

    def batch(self, i: int) -> tuple:
        """micro-batch i (drawn now, unless the step's batches were drawn to weigh them)"""
        return self.batches[i] if self.batches is not None else _as_tuple(self._next())

    def empty(self, i: int) -> bool:
        """Whether micro-batch i counts no item while the step does: weight 0, and a mean over no item (NaN, whose
        gradient is NaN too, so scaling it by 0 is no help): the trainer leaves its loss out of the step."""
        return self.weights is not None and self.weights[i] == 0

    def backward(self, i: int, loss: torch.Tensor) -> None:
        """backward of micro-batch i's loss, scaled by its weight (plain: ``loss / accum``)"""
        if self.weights is not None:
            (loss * self.weights[i]).backward()
        elif self.accum > 1:
            (loss / self.accum).backward()
        else:
            loss.backward()

    def share(self, i: int) -> tuple[float, float]:
        """(factor of micro-batch i's loss, factor of its metrics) in the step's ``Σ_i · / accum``: its weight
        times accum, and for the metrics its share of this rank's items (1, 1 when plain)"""
        if self.weights is None:
            return 1.0, 1.0
        w = self.weights[i] * self.accum
        return w, w / sum(self.weights)
