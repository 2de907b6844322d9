"""Per-step records of a descent run (DESIGN.md "Trace").

Tracing is off by default and then costs nothing: solvers only build a :class:`Trace` when asked.
When on, every block of a model adds its trace to one :class:`Traces` mapping keyed by
``(block qualified name, iteration)`` (``ForwardContext.key``), so a whole model's descent —
including every pass of a block iterated by a recurrent-depth backbone — can be plotted from one
object.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from .precision import at_least_float32

#: Key of per-block records: (qualified module name, iteration index).
BlockKey = tuple[str, int]


@dataclass
class Trace:
    """What one block's solver did in one call.

    energy:    (steps + 1) x (B, N) per-token energy at each iterate, detached (index 0 = start);
               the objective the solver descends (a proximal term included).
    terms:     name -> (steps + 1) x (B, N) per-term energies (composite energies, proximal term);
               they sum to ``energy``. Empty for a single-term energy.
    step_norm: (steps) x (B, N) per-token norm of each update ``x_{t+1} - x_t`` (0 for tokens that
               stopped or are masked).
    steps:     number of steps actually taken (may be < requested when a stopping rule fires).
    exact:     whether each update was exactly ``-eta * P * grad`` of the traced energy.
    mask:      (B, N) bool, True for real tokens (the call's padding mask), or None (every token real).
               The ``mean_*`` summaries average over real tokens only: a padded token never moves, but its
               energy can (an attention energy's padded query row sees the real keys move), and counting
               it would add to or hide a real token's rise, and dilute every mean by the padding share.
               The per-token tensors keep every token.
    """

    energy: list[Tensor] = field(default_factory=list)
    step_norm: list[Tensor] = field(default_factory=list)
    terms: dict[str, list[Tensor]] = field(default_factory=dict)
    exact: bool = True
    mask: Tensor | None = None

    @property
    def steps(self) -> int:
        return len(self.step_norm)

    def add_energy(self, e: Tensor, terms: dict[str, Tensor] | None = None) -> None:
        self.energy.append(at_least_float32(e.detach()))
        for name, v in (terms or {}).items():
            self.terms.setdefault(name, []).append(at_least_float32(v.detach()))

    def add_step(self, dx: Tensor) -> None:
        self.step_norm.append(at_least_float32(dx.detach()).norm(dim=-1))

    def _mean(self, v: Tensor) -> float:
        """Mean of a (B, N) record over the real tokens (all tokens without a mask; nan with none real)."""
        if self.mask is None:
            return float(v.mean())
        m = self.mask.to(device=v.device, dtype=v.dtype)
        return float((v * m).sum() / m.sum()) if bool(self.mask.any()) else float("nan")

    def mean_energy(self) -> list[float]:
        """Mean energy over batch and real tokens at each iterate (for plotting)."""
        return [self._mean(e) for e in self.energy]

    def mean_step_norm(self) -> list[float]:
        """Mean update norm over batch and real tokens at each step."""
        return [self._mean(s) for s in self.step_norm]

    def mean_terms(self) -> dict[str, list[float]]:
        """Per term: mean energy over batch and real tokens at each iterate."""
        return {k: [self._mean(e) for e in v] for k, v in self.terms.items()}

    def energy_tensor(self) -> Tensor:
        """(steps + 1, B, N) stacked energies."""
        return torch.stack(self.energy)

    def term_tensor(self, name: str) -> Tensor:
        """(steps + 1, B, N) stacked energies of term ``name``."""
        if name not in self.terms:
            raise KeyError(f"trace has no energy term {name!r}; terms: {', '.join(self.terms) or '(none)'}")
        return torch.stack(self.terms[name])


def key_label(key: BlockKey | str) -> str:
    """Readable label of a record key: ``name`` at iteration 0, ``name@i`` after (as ``cache_slot``)."""
    if isinstance(key, str):
        return key
    name, it = key
    return name if it == 0 else f"{name}@{it}"


class Traces(dict):
    """Ordered mapping ``(block name, iteration) -> Trace`` for a whole model (like x-transformers'
    intermediates). ``label(key)`` gives ``name`` / ``name@iteration`` strings for plots and logs."""

    label = staticmethod(key_label)

    def blocks(self) -> list[str]:
        """Block names in first-recorded order."""
        return list(dict.fromkeys(name for name, _ in self))

    def of(self, name: str) -> list[Trace]:
        """Traces of block ``name``, ordered by iteration."""
        return [self[k] for k in sorted((k for k in self if k[0] == name), key=lambda k: k[1])]

    def summary(self) -> dict[str, dict[str, list[float]]]:
        """``label -> {energy, step_norm[, terms]}`` of mean values per step (JSON-friendly)."""
        out: dict[str, dict] = {}
        for k, v in self.items():
            row: dict = {"energy": v.mean_energy(), "step_norm": v.mean_step_norm()}
            if v.terms:
                row["terms"] = v.mean_terms()
            out[key_label(k)] = row
        return out
