"""Helpers for data-parallel training under ``torchrun`` (PyTorch's own DDP; nothing home-made).

Launch::

    torchrun --nproc_per_node=2 -m energyformer.cli train ...   # or python -m torch.distributed.run

``torchrun`` sets ``RANK``, ``LOCAL_RANK`` and ``WORLD_SIZE``. The :class:`~energyformer.train.Trainer`
initialises the process group when ``WORLD_SIZE > 1`` (backend ``nccl`` on CUDA, ``gloo``
otherwise), wraps the model in ``DistributedDataParallel`` and destroys the group at the end of
``fit``. **Sharding the data is the task's job**: build ``train_data`` per rank, e.g. seed its
generator with ``seed + rank`` or take every ``world_size``-th example starting at ``rank``; use
:func:`dist_info` (it works before the process group exists).
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist


def dist_info() -> tuple[int, int]:
    """``(rank, world_size)`` of this process; ``(0, 1)`` when not launched by ``torchrun``."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def local_rank() -> int:
    """Index of this process on its node (``LOCAL_RANK``), 0 when not distributed."""
    return int(os.environ.get("LOCAL_RANK", "0"))


def is_main_process() -> bool:
    """True on rank 0 (the rank that logs and saves)."""
    return dist_info()[0] == 0


def wants_distributed() -> bool:
    """True when launched with ``WORLD_SIZE > 1``."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def init_distributed(device: torch.device) -> bool:
    """Initialise the default process group if needed; return True if this call created it."""
    if not wants_distributed() or (dist.is_available() and dist.is_initialized()):
        return False
    if not dist.is_available():  # pragma: no cover
        raise RuntimeError("WORLD_SIZE > 1 but torch.distributed is not available in this build")
    backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend=backend)
    return True


def barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def destroy_distributed() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
