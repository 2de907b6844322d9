"""Optimiser and device selection for the trainer.

AdamW with weight decay on weight matrices only (not embeddings, biases, norms or other 0-/1-D
parameters), and ``train.device`` resolution (``auto`` picks CUDA, then MPS, then CPU; under torchrun
each rank takes ``cuda:LOCAL_RANK``).
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import nn

from energyformer.utils.validate import ConfigError

from .config import TrainConfig
from .distributed import local_rank, wants_distributed


def resolve_device(spec: str) -> torch.device:
    """``'auto'|'cpu'|'cuda'|'cuda:N'|'mps'`` -> a device. Under ``torchrun`` CUDA uses ``LOCAL_RANK``."""
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
            raise ConfigError(f"train.device = {spec!r}: CUDA is not available here; use 'auto' or 'cpu'")
        if distributed:
            if ":" in spec:
                warnings.warn(f"train.device = {spec!r}: under torchrun each rank uses cuda:LOCAL_RANK",
                              stacklevel=3)
            return torch.device("cuda", local_rank())
        if ":" in spec:
            idx = int(spec.split(":")[1])
            if idx >= torch.cuda.device_count():
                raise ConfigError(f"train.device = {spec!r}: only {torch.cuda.device_count()} CUDA "
                                  "device(s) present")
            return torch.device("cuda", idx)
        return torch.device("cuda", torch.cuda.current_device())
    if spec == "mps":
        if not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
            raise ConfigError("train.device = 'mps': MPS is not available here; use 'auto' or 'cpu'")
        return torch.device("mps")
    return torch.device("cpu")


def param_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """AdamW groups: decay only weight matrices (``ndim >= 2``) that are not embedding tables.

    Biases, norm gains and any 0-/1-D parameter are not decayed; neither are ``nn.Embedding`` /
    ``nn.EmbeddingBag`` weights (nor heads tied to them) or parameters with
    ``no_weight_decay = True``. Shared parameters appear once.
    """
    embedding_ids = {
        id(m.weight) for m in model.modules() if isinstance(m, (nn.Embedding, nn.EmbeddingBag))
    }
    decay, no_decay, seen = [], [], set()
    for p in model.parameters():  # .parameters() already yields shared parameters once
        if not p.requires_grad or id(p) in seen:
            continue
        seen.add(id(p))
        if p.ndim >= 2 and id(p) not in embedding_ids and not getattr(p, "no_weight_decay", False):
            decay.append(p)
        else:
            no_decay.append(p)
    groups = []
    if decay:
        groups.append({"params": decay, "weight_decay": weight_decay})
    if no_decay:
        groups.append({"params": no_decay, "weight_decay": 0.0})
    return groups


def build_optimizer(model: nn.Module, cfg: TrainConfig, device: torch.device) -> torch.optim.AdamW:
    """AdamW over :func:`param_groups` (fused kernel on CUDA)."""
    groups = param_groups(model, cfg.weight_decay)
    if not groups:
        raise ValueError("the model has no trainable parameters")
    kwargs: dict[str, Any] = {}
    if device.type == "cuda":
        kwargs["fused"] = True
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps, **kwargs)
