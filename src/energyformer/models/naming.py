"""Give every sublayer its qualified module name (used as trace and cache key)."""

from torch import nn


def name_blocks(model: nn.Module) -> None:
    for name, mod in model.named_modules():
        if hasattr(mod, "qualname"):
            mod.qualname = name
