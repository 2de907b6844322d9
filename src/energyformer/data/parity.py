"""Binary cumulative parity: ``y_t = b_1 xor ... xor b_t`` (EqT parity benchmark).

Source: Jafari & Anbarjafari, "Closed-Loop Transformers: Autoregressive Modeling as Iterative
Latent Equilibrium" (arXiv 2511.21882), §5.1.1 and Table 2, as reconstructed in
``specs/reconstructed.md`` §3: per-position cumulative XOR ``y_t = (sum_{i<=t} b_i) mod 2``;
metric = per-token accuracy averaged over **4,096 test sequences** at each length
``L in {8, 16, 32, 48, 64, 96, 128, 192, 256}`` (:data:`PARITY_LENGTHS`).

* :func:`random_bits` / :func:`make_parity`: seeded i.i.d. fair bits and their targets.
* :func:`parity_test_set`: the fixed test set of one length. Its bits are taken from
  ``sha256(PARITY_TEST_SALT:length:index:block)`` digests, so they are the same on every machine,
  device and library version, and no training seed can ever reproduce them by accident. (At L = 8
  there are only 256 distinct sequences, so 4,096 test sequences necessarily repeat, and overlap
  with training; the same holds for the paper's setting.)
* :class:`ParityBatcher`: fresh random training sequences; batch ``k`` is a pure function of
  ``(seed, k)`` (the :class:`~energyformer.data.text.LMBatcher` contract), so resume is exact. A
  fixed training set (the paper's 32,768 sequences per length) goes through
  :func:`parity_train_batcher` instead.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from pydantic import Field

from energyformer.data.batching import EpochBatcher, seeded_generator
from energyformer.errors import DataError
from energyformer.utils.config import ConfigModel
from energyformer.utils.validate import check_int

PARITY_LENGTHS: tuple[int, ...] = (8, 16, 32, 48, 64, 96, 128, 192, 256)
"""The sequence lengths of the paper's Table 2."""
PARITY_TEST_SIZE = 4096
"""Test sequences per length (as in the paper)."""
PARITY_TRAIN_SIZE = 32768
"""Training sequences per length when a fixed training set is used (as in the paper)."""
PARITY_TEST_SALT = "energyformer-parity-test-v1"


def cumulative_parity(bits: torch.Tensor) -> torch.Tensor:
    """Targets ``y[..., t] = bits[..., 0] xor ... xor bits[..., t]`` (same shape and dtype).

    ``bits`` must hold only 0 and 1 (integer or bool); anything else is a DataError.
    """
    if not isinstance(bits, torch.Tensor) or bits.dim() < 1:
        raise DataError(f"parity bits must be a tensor with a sequence dimension; got "
                        f"{type(bits).__name__} {tuple(getattr(bits, 'shape', ()))}")
    if bits.is_floating_point() or bits.is_complex():
        raise DataError(f"parity bits must be integers or bool; got {bits.dtype}")
    b = bits.long()
    if b.numel() and (int(b.min()) < 0 or int(b.max()) > 1):
        raise DataError(f"parity bits must be 0 or 1; found values in [{int(b.min())}, {int(b.max())}]")
    return (b.cumsum(-1) & 1).to(bits.dtype)


def _check_length(length: int) -> None:
    check_int("parity length", length, min=1)


def random_bits(n: int, length: int, generator: torch.Generator, *,
                device: torch.device | str | None = None) -> torch.Tensor:
    """``(n, length)`` i.i.d. fair bits (long) drawn on the CPU from ``generator``, moved to ``device``."""
    check_int("parity n", n, min=1)
    _check_length(length)
    return torch.randint(0, 2, (n, length), generator=generator).to(device)


def make_parity(n: int, length: int, seed: int = 0, *,
                device: torch.device | str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded ``(bits, targets)``, each ``(n, length)`` long; the same seed gives the same tensors."""
    check_int("parity seed", seed)
    bits = random_bits(n, length, seeded_generator("parity", seed, length), device=device)
    return bits, cumulative_parity(bits)


def parity_test_set(length: int, n: int = PARITY_TEST_SIZE, *,
                    device: torch.device | str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The fixed test set of ``length``: ``(bits, targets)``, each ``(n, length)`` long.

    Sequence ``k`` is the first ``length`` bits (most significant first) of the concatenated
    digests ``sha256(f"{PARITY_TEST_SALT}:{length}:{k}:{block}")``, ``block = 0, 1, ...``.
    Taking fewer sequences gives a prefix of the same set.
    """
    check_int("parity n", n, min=1)
    _check_length(length)
    blocks = -(-length // 256)
    raw = b"".join(hashlib.sha256(f"{PARITY_TEST_SALT}:{length}:{k}:{blk}".encode()).digest()
                   for k in range(n) for blk in range(blocks))
    bits = np.unpackbits(np.frombuffer(raw, dtype=np.uint8)).reshape(n, blocks * 256)[:, :length]
    b = torch.from_numpy(bits.astype(np.int64)).to(device)
    return b, cumulative_parity(b)


def parity_test_sets(lengths: tuple[int, ...] = PARITY_LENGTHS, n: int = PARITY_TEST_SIZE, *,
                     device: torch.device | str | None = None) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
    """``{length: parity_test_set(length, n)}`` for every length."""
    return {L: parity_test_set(L, n, device=device) for L in lengths}


def set_fingerprint(bits: torch.Tensor) -> str:
    """Short sha256 of a bit tensor's shape and values (to record a data set in a run)."""
    b = bits.detach().to("cpu", torch.uint8).contiguous()
    return hashlib.sha256(repr(tuple(b.shape)).encode() + b.numpy().tobytes()).hexdigest()[:16]


@dataclass(eq=False)
class ParityBatcher:
    """Fresh random sequences: batch ``k`` = :func:`random_bits` with a generator seeded by
    ``(seed, length, k)``; returns ``(bits, targets)``, each ``(batch_size, length)`` long."""

    length: int
    batch_size: int
    seed: int = 0
    step: int = 0
    device: torch.device | str | None = None

    def __post_init__(self) -> None:
        _check_length(self.length)
        check_int("ParityBatcher.batch_size", self.batch_size, min=1)
        check_int("ParityBatcher.seed", self.seed)
        check_int("ParityBatcher.step", self.step, min=0)

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Batch number ``step`` (random access; does not move the cursor)."""
        g = seeded_generator("parity-batcher", self.seed, self.length, step)
        bits = random_bits(self.batch_size, self.length, g, device=self.device)
        return bits, cumulative_parity(bits)

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The next batch; advances the cursor."""
        out = self.batch(self.step)
        self.step += 1
        return out

    __next__ = next_batch

    def __iter__(self) -> ParityBatcher:
        return self

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: seed, step, and the shape it was made for."""
        return {"seed": self.seed, "step": self.step, "batch_size": self.batch_size,
                "length": self.length}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict`; a different batch size or length is an error."""
        for key in ("batch_size", "length"):
            if key in state and state[key] != getattr(self, key):
                raise DataError(f"ParityBatcher state {key} = {state[key]!r} does not match this "
                                f"batcher's {key} = {getattr(self, key)!r}")
        check_int("ParityBatcher state step", state["step"], min=0)
        self.seed = int(state["seed"])
        self.step = int(state["step"])


def parity_train_batcher(length: int, batch_size: int, *, n_train: int = PARITY_TRAIN_SIZE,
                         data_seed: int = 0, seed: int = 0,
                         device: torch.device | str | None = None) -> EpochBatcher:
    """Epochs over a fixed training set of ``n_train`` sequences (:func:`make_parity` with
    ``data_seed``); batches ``(bits, targets)``, shuffled per epoch with ``seed``, exactly resumable."""
    bits, targets = make_parity(n_train, length, data_seed)
    return EpochBatcher((bits, targets), batch_size, seed=seed, device=device,
                        name=f"parity[L={length}] batcher")


class ParityConfig(ConfigModel):
    """Cumulative-parity data for one length (EqT §5.1.1; see :mod:`energyformer.data.parity`)."""

    length: int = Field(64, ge=1)
    """sequence length L"""
    n_train: int | None = Field(None, ge=1)
    """size of a fixed training set (the paper: 32768); None = fresh random sequences every batch"""
    data_seed: int = 0
    """seed of the fixed training set"""
    n_test: int = Field(PARITY_TEST_SIZE, ge=1)
    """fixed test sequences (4096 in the paper; fewer = a prefix of the same set)"""

    def batcher(self, batch_size: int, *, seed: int = 0,
                device: torch.device | str | None = None) -> ParityBatcher | EpochBatcher:
        """The training batcher this config describes."""
        if self.n_train is None:
            return ParityBatcher(self.length, batch_size, seed=seed, device=device)
        return parity_train_batcher(self.length, batch_size, n_train=self.n_train,
                                    data_seed=self.data_seed, seed=seed, device=device)

    def test_set(self, device: torch.device | str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The fixed test set ``(bits, targets)``."""
        return parity_test_set(self.length, self.n_test, device=device)
