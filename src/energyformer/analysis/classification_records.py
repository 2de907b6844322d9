"""What an image-classification run records for its page (seed 002 §5.2-5.4), so the page is rebuilt
from committed artifacts alone: the test-time depth curve, the per-iteration trajectory (Fig. 5-6) and
the statistics its claims are decided on.

* :func:`depth_curve` — validation accuracy (%) at other iteration counts (test-time depth).
* :func:`geometry_record` — :func:`~energyformer.analysis.hyperset.trajectory` to 2L as plain lists
  (JSON): E_ATTN, E_FF and their sum per image (Fig. 5; ``None`` for a layer without energies), the
  per-subspace effective rank (Eq. 17) and average angle (Eq. 18, degrees) and the full-space
  effective rank (Fig. 6), for t = 0 … 2L.
* :func:`trajectory_stats` — the numbers the Fig. 5-6 claims compare (:data:`STATS`), from a record.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from statistics import fmean
from typing import Any

import torch
from torch import Tensor, nn

#: statistics of a trajectory record (t = 0 … L, L the trained iteration count):
#: ``d_energy_attn`` / ``d_energy_ff`` / ``d_energy_total``  E(L) − E(0) per image (Fig. 5);
#: ``max_rise``   max over t = 1 … L of E_total(t) − E_total(t−1) (< 0: the energy falls at every step);
#: ``rises``      how many of the L steps raise E_total;
#: ``d_eff_rank`` / ``d_angle``  change of the per-subspace mean effective rank / average angle (Fig. 6);
#: ``d_full_rank``  change of the full-space effective rank (Fig. 6: "remains unchanged")
STATS = ("d_energy_attn", "d_energy_ff", "d_energy_total", "max_rise", "rises", "d_eff_rank", "d_angle",
         "d_full_rank")


@torch.no_grad()
def depth_curve(evaluate: Callable[[int], float], iterations: int,
                factors: Sequence[float] = (0.5, 1.0, 1.5, 2.0)) -> dict[str, list]:
    """``{"iterations": [n…], "accuracy": [%…]}``: ``evaluate(n)`` (an accuracy in [0, 1]) at
    n = round(f · iterations) for each factor (at least 1, each count once, ascending)."""
    ns = sorted({max(1, int(round(f * iterations))) for f in factors})
    return {"iterations": ns, "accuracy": [100.0 * float(evaluate(n)) for n in ns]}


@torch.no_grad()
def geometry_record(model: nn.Module, images: Tensor, iterations: int) -> dict[str, Any]:
    """The trajectory of ``model`` on ``images`` (B, C, H, W) for t = 0 … ``iterations`` (module
    docstring), with ``images`` = B recorded."""
    from .hyperset import trajectory

    tr = trajectory(model, images, iterations)
    return {"images": int(images.shape[0]), "iterations": int(iterations), **tr}


def trajectory_stats(record: dict[str, Any], trained: int) -> dict[str, float | int | None]:
    """:data:`STATS` of a :func:`geometry_record` up to the trained count ``trained`` (= L).

    Energy statistics are ``None`` for a layer without energies."""
    if not 1 <= trained <= len(record["eff_rank"]) - 1:
        raise ValueError(f"trained = {trained}: the record covers t = 0 … {len(record['eff_rank']) - 1}")
    L = trained
    out: dict[str, float | int | None] = dict.fromkeys(STATS)
    e = record["e_total"]
    if e[0] is not None:
        out["d_energy_attn"] = record["e_attn"][L] - record["e_attn"][0]
        out["d_energy_ff"] = record["e_ff"][L] - record["e_ff"][0]
        out["d_energy_total"] = e[L] - e[0]
        steps = [e[t] - e[t - 1] for t in range(1, L + 1)]
        out["max_rise"] = max(steps)
        out["rises"] = sum(s > 0 for s in steps)
    out["d_eff_rank"] = fmean(record["eff_rank"][L]) - fmean(record["eff_rank"][0])
    out["d_angle"] = fmean(record["angle"][L]) - fmean(record["angle"][0])
    out["d_full_rank"] = record["full_rank"][L] - record["full_rank"][0]
    return out
