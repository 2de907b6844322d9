"""Seeded, exactly resumable batching over a fixed set of examples (images, Potts sequences, parity).

The contract is the one of :class:`energyformer.data.text.LMBatcher`: batch number ``k`` is a pure
function of ``(seed, k)``, so the whole state is ``{'seed', 'step'}`` (plus the sizes it was made
for) and after ``load_state_dict`` the batches are exactly those an uninterrupted run would have
drawn. Here ``k`` lies in epoch ``e = k // batches_per_epoch``; each epoch is one permutation of
the examples drawn from a generator seeded with ``(seed, e)`` (sampling without replacement; the
last ``n mod batch_size`` examples of each epoch's order are dropped), and an optional transform
(augmentation) gets its own generator seeded with ``(seed, k)``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from energyformer.errors import DataError
from energyformer.utils.validate import check_int

#: ``transform(tensors, generator) -> tensors``: applied to each batch (before moving to ``device``).
Transform = Callable[[tuple[torch.Tensor, ...], torch.Generator], tuple[torch.Tensor, ...]]


def derive_seed(*parts: Any) -> int:
    """A 63-bit seed from any printable parts (``sha256`` of their ``repr``s joined by ':')."""
    digest = hashlib.sha256(":".join(repr(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


def seeded_generator(*parts: Any) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded with :func:`derive_seed` of ``parts``.

    Random numbers are drawn on the CPU and moved to the data's device, so a seed gives the same
    batches on every device.
    """
    return torch.Generator().manual_seed(derive_seed(*parts))


@dataclass(eq=False)
class EpochBatcher:
    """Batches of ``batch_size`` examples from tensors sharing their first dimension ``n``.

    ``tensors`` stay where they are (CPU or a device); batches are moved to ``device`` when given.
    ``shuffle=False`` walks the examples in order (epoch after epoch). ``name`` appears in errors.
    """

    tensors: tuple[torch.Tensor, ...]
    batch_size: int
    seed: int = 0
    step: int = 0
    shuffle: bool = True
    transform: Transform | None = None
    device: torch.device | str | None = None
    name: str = "EpochBatcher"
    _perm: tuple[int, torch.Tensor] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        check_int(f"{self.name}.batch_size", self.batch_size, min=1)
        check_int(f"{self.name}.seed", self.seed)
        check_int(f"{self.name}.step", self.step, min=0)
        self.tensors = tuple(self.tensors)
        if not self.tensors:
            raise DataError(f"{self.name}: no tensors given")
        n = self.tensors[0].shape[0]
        for t in self.tensors:
            if t.shape[0] != n:
                raise DataError(f"{self.name}: tensors have different lengths "
                                f"{[int(t.shape[0]) for t in self.tensors]}")
        if n < self.batch_size:
            raise DataError(f"{self.name}: {n} examples, fewer than batch_size = {self.batch_size}")

    @property
    def n(self) -> int:
        """Number of examples."""
        return int(self.tensors[0].shape[0])

    @property
    def batches_per_epoch(self) -> int:
        """Full batches per epoch (``n // batch_size``)."""
        return self.n // self.batch_size

    @property
    def epoch(self) -> int:
        """The epoch the next batch comes from."""
        return self.step // self.batches_per_epoch

    def _order(self, epoch: int) -> torch.Tensor:
        if not self.shuffle:
            return torch.arange(self.n)
        if self._perm is None or self._perm[0] != epoch:
            self._perm = (epoch, torch.randperm(self.n, generator=seeded_generator(
                "epoch-batcher-perm", self.seed, epoch)))
        return self._perm[1]

    def indices(self, step: int) -> torch.Tensor:
        """The example indices of batch number ``step`` (CPU long tensor)."""
        epoch, j = divmod(step, self.batches_per_epoch)
        return self._order(epoch)[j * self.batch_size:(j + 1) * self.batch_size]

    def batch(self, step: int) -> tuple[torch.Tensor, ...]:
        """Batch number ``step`` (random access; does not move the cursor)."""
        idx = self.indices(step)
        out = tuple(t[idx.to(t.device)] for t in self.tensors)
        if self.transform is not None:
            out = tuple(self.transform(out, seeded_generator("epoch-batcher-aug", self.seed, step)))
        if self.device is not None:
            out = tuple(t.to(self.device) for t in out)
        return out

    def next_batch(self) -> tuple[torch.Tensor, ...]:
        """The next batch; advances the cursor."""
        out = self.batch(self.step)
        self.step += 1
        return out

    __next__ = next_batch

    def __iter__(self) -> Iterator[tuple[torch.Tensor, ...]]:
        return self

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: seed, step, and the sizes it was made for."""
        return {"seed": self.seed, "step": self.step, "batch_size": self.batch_size, "n": self.n,
                "shuffle": self.shuffle}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict`; a different batch size, data size or order is an error."""
        mine = self.state_dict()
        for key in ("batch_size", "n", "shuffle"):
            if key in state and state[key] != mine[key]:
                raise DataError(f"{self.name} state {key} = {state[key]!r} does not match this "
                                f"batcher's {key} = {mine[key]!r}")
        check_int(f"{self.name} state step", state["step"], min=0)
        self.seed = int(state["seed"])
        self.step = int(state["step"])


def eval_batches(tensors: tuple[torch.Tensor, ...], batch_size: int, *,
                 device: torch.device | str | None = None) -> Iterator[tuple[torch.Tensor, ...]]:
    """Every example once, in order, ``batch_size`` at a time (the last batch may be smaller)."""
    check_int("batch_size", batch_size, min=1)
    n = int(tensors[0].shape[0])
    for i in range(0, n, batch_size):
        out = tuple(t[i:i + batch_size] for t in tensors)
        yield tuple(t.to(device) for t in out) if device is not None else out
