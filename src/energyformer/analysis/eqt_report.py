"""Metric hooks of the ``eqt`` study: cumulative parity (seed 003 §5, Table 2; reconstructed.md §3); its
page is declared in ``studies/eqt.yaml`` (``report:``).

Metric hooks (run on every finished run of ``studies/eqt.yaml``): :func:`accuracy` (per-token accuracy
in % on the fixed test set of the run's length: the baseline's, or EqT's at K = 0, 8, 32),
:func:`convergence` (EqT: the fraction of tokens whose relative change ‖Δh‖/‖h‖ < 1e-3 by step
k = 1 … 32, K = 32, no early stop) and :func:`train_ce` (the per-step training CE of metrics.jsonl).
Overheads (time per training step and per inference) are measured by ``benchmarks/eqt.py --json``,
interleaved and repeated; the page's :func:`overheads` section reads its committed output ``overheads.json``.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import torch

KS = (0, 8, 32)


def accuracy(run) -> dict[str, float]:
    """Metric hook: per-token test accuracy (%) — ``{"plain": a}`` for the baseline, ``{"k0", "k8", "k32"}``
    for EqT (refinement steps at test time)."""
    cfg, model, task = run.trained()
    L = cfg.task.data.length
    if cfg.model.kind != "equilibrium":
        return {"plain": 100 * task.accuracy(model, L)}
    return {f"k{k}": 100 * task.accuracy(model, L, steps=k) for k in KS}


@torch.no_grad()
def convergence(run, n: int = 64) -> dict | None:
    """Metric hook (EqT only): % of tokens with ‖h⁽ᵏ⁾ − h⁽ᵏ⁻¹⁾‖/‖h⁽ᵏ⁻¹⁾‖ < 1e-3 at k = 1 … 32."""
    from ..data.parity import parity_test_set

    cfg, model, _ = run.trained()
    if cfg.model.kind != "equilibrium":
        return None
    bits, _ = parity_test_set(cfg.task.data.length, n, device=next(model.parameters()).device)
    (st,) = model.eval()(bits, stats=True, steps=32).stats.values()
    by_step = [100 * float((r < 1e-3).float().mean()) for r in st.relative]
    return {"by_step": by_step, "k6": by_step[5]}


def train_ce(run, key: str = "train/ce") -> list[float]:
    """Metric hook: the per-step training CE from the run's metrics.jsonl (the last event of a step wins)."""
    from ..train.metrics import METRICS_FILE, read_events

    by_step = {}
    for ev in read_events(Path(run.run_dir) / METRICS_FILE, skip_bad=True):
        if ev.get("event") == "train" and key in ev:
            by_step[int(ev["step"])] = float(ev[key])
    return [by_step[s] for s in sorted(by_step)]


# ----------------------------------------------------------------------------- page
def overheads(ctx) -> str:
    """Page section: parameters from the records, step-time ratios from the committed ``overheads.json``
    (``benchmarks/eqt.py --json``: interleaved, repeated), the paper's (§5.3.3) beside them."""
    n = {m: next((r["params"]["total"] for r in ctx.records if r["cell"]["model"] == m), None)
         for m in ("baseline", "eqt")}
    if None in n.values():
        return ""
    params = f"+{100 * (n['eqt'] / n['baseline'] - 1):.1f}% ({n['baseline']} → {n['eqt']})"
    path = ctx.out / "overheads.json"
    if not path.exists():
        return (f"## Overheads\n\nParameters: {params}; paper +8%. Step times are not measured yet: "
                f"`python benchmarks/eqt.py --json {path}` (interleaved, repeated) writes them here.")
    ov = json.loads(path.read_text())
    lines = ["## Overheads", "", ov["source"], "", "| quantity | paper | ours (median [min, max] over rounds) |",
             "|---|---|---|", f"| parameters | +8% (§5.3.3) | {params} |"]
    for key, label, paper in (("train EqT K=2", "training step time, K = 2", "1.15× (§5.3.3)"),
                              ("infer EqT K=8", "inference time, K = 8", "≈3× (§5.3.3)")):
        if r := ov["ratios"].get(key):
            lines.append(f"| {label} | {paper} | {statistics.median(r):.2f}× [{min(r):.2f}, {max(r):.2f}] |")
    return "\n".join(lines)
