"""``train.device`` resolution: ``auto`` picks CUDA, then MPS, then CPU; under torchrun each rank
takes ``cuda:LOCAL_RANK``."""

from __future__ import annotations

import re
import warnings

import torch

from energyformer.utils.validate import ConfigError

from .distributed import local_rank, wants_distributed

#: what a device spec may be (``train.device``, ``eval`` / ``generate --device``)
DEVICE_RE = re.compile(r"^(auto|cpu|cuda|cuda:\d+|mps)$")
DEVICE_ALLOWED = "allowed values are 'auto', 'cpu', 'cuda', 'cuda:N' (N an integer), 'mps'"


def resolve_device(spec: str, *, said: str | None = None) -> torch.device:
    """``'auto'|'cpu'|'cuda'|'cuda:N'|'mps'`` -> a device. Under ``torchrun`` CUDA uses ``LOCAL_RANK``. ``said``:
    how errors name the value (default ``train.device = 'cuda'``; the CLI's ``--device 'cuda'``)."""
    said = said or f"train.device = {spec!r}"
    distributed = wants_distributed()
    if spec == "auto":
        if torch.cuda.is_available():
            spec = "cuda"
        elif not distributed and hasattr(torch.backends, "mps") and torch.backends.mps.is_available():
            spec = "mps"
        else:
            spec = "cpu"
    if spec.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ConfigError(f"{said}: CUDA is not available here; use 'auto' or 'cpu'")
        if distributed:
            if ":" in spec:
                warnings.warn(f"{said}: under torchrun each rank uses cuda:LOCAL_RANK",
                              stacklevel=3)
            return torch.device("cuda", local_rank())
        if ":" in spec:
            idx = int(spec.split(":")[1])
            if idx >= torch.cuda.device_count():
                raise ConfigError(f"{said}: only {torch.cuda.device_count()} CUDA "
                                  "device(s) present")
            return torch.device("cuda", idx)
        return torch.device("cuda", torch.cuda.current_device())
    if spec == "mps":
        if not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
            raise ConfigError(f"{said}: MPS is not available here; use 'auto' or 'cpu'")
        return torch.device("mps")
    return torch.device("cpu")
