"""Parameter counting by part: attention / MLP / embedding / head / other (CEM seed §4.1).

A parameter belongs to the part named by the ``part`` attribute ('attention' or 'mlp') of the
sublayer that owns it (its pre-norm and preconditioners included). Built-in sublayers declare it as a
class attribute; a sublayer built through the ``ATTENTIONS`` / ``MLPS`` registries is tagged with its
registry's part otherwise (:mod:`energyformer.blocks.registry`). Embeddings and the output head are
recognised by module type / name; anything else is 'other' (e.g. the final norm).
Tied weights are counted once (under 'embedding').
"""

from __future__ import annotations

from torch import nn


def count_params(model: nn.Module) -> dict[str, int]:
    """{'attention', 'mlp', 'embedding', 'head', 'other', 'total'} parameter counts."""
    owner: dict[int, str] = {}
    for name, mod in model.named_modules():
        part = getattr(mod, "part", None)
        if part in ("attention", "mlp"):
            for p in mod.parameters():
                owner.setdefault(id(p), part)
        elif isinstance(mod, nn.Embedding):
            for p in mod.parameters():
                owner.setdefault(id(p), "embedding")
    counts = dict.fromkeys(("attention", "mlp", "embedding", "head", "other"), 0)
    seen: set[int] = set()
    for name, p in model.named_parameters():  # named_parameters already dedupes tied weights
        if id(p) in seen:
            continue
        seen.add(id(p))
        part = owner.get(id(p)) or ("head" if name.startswith("head.") else "other")
        counts[part] += p.numel()
    counts["total"] = sum(counts.values())
    return counts

