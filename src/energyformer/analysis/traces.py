"""Plot the descent recorded in a model's :class:`~energyformer.core.Traces` (energy and step norm per
block, iteration and step), e.g. to check that every CEM block really lowers its energy::

    out = model(idx, trace=True)
    plot_traces(out.traces, "traces.png")

Traces are keyed by ``(block name, iteration)`` (:meth:`ForwardContext.key`): a model whose layer stack
runs L times has L traces per energy block. Each block gets one colour; iterations of the same block
are drawn from light (first) to dark (last).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..core.trace import Traces
from .figures import save_figure


def trace_label(key: Any) -> str:
    """'layers.0.attn' for ``(name, 0)`` of a single-pass model, 'layers.0.attn @2' for iteration 2."""
    if isinstance(key, tuple) and len(key) == 2:
        name, it = key
        return f"{name} @{it}" if it else str(name)
    return str(key)


def block_name(key: Any) -> str:
    """The block part of a trace key (the key itself when it is not a (name, iteration) pair)."""
    return str(key[0]) if isinstance(key, tuple) and len(key) == 2 else str(key)


def energy_drops(traces: Traces) -> dict[Any, float]:
    """Mean energy change from the first to the last iterate of each (block, iteration) (negative = descent)."""
    return {k: t.mean_energy()[-1] - t.mean_energy()[0] for k, t in traces.items()}


def plot_traces(traces: Traces, path: str | Path, title: str = "energy descent per block") -> Path:
    """Two panels: mean energy relative to the start, and mean step norm, against the step index."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not traces:
        raise ValueError("no traces to plot: run the model with trace=True and at least one energy block")
    blocks = list(dict.fromkeys(block_name(k) for k in traces))
    iters = [k[1] if isinstance(k, tuple) and len(k) == 2 else 0 for k in traces]
    last = max(iters) or 1
    cmap = plt.get_cmap("tab10")
    fig, (ax_e, ax_s) = plt.subplots(1, 2, figsize=(10, 4))
    for (key, tr), it in zip(traces.items(), iters):
        e = tr.mean_energy()
        style = dict(linestyle="-" if tr.exact else "--", marker="o", label=trace_label(key),
                     color=cmap(blocks.index(block_name(key)) % 10), alpha=0.35 + 0.65 * it / last)
        ax_e.plot(range(len(e)), [v - e[0] for v in e], **style)
        ax_s.plot(range(1, tr.steps + 1), tr.mean_step_norm(), **style)
    ax_e.set_xlabel("step t")
    ax_e.set_ylabel("mean energy E(x_t) − E(x_0)")
    ax_s.set_xlabel("step t")
    ax_s.set_ylabel("mean ‖x_t − x_{t−1}‖")
    for ax in (ax_e, ax_s):
        ax.grid(alpha=0.3)
    ax_e.legend(fontsize=7, ncol=2 if len(traces) > 8 else 1)
    fig.suptitle(f"{title}  (dashed: update not exactly −ηP∇E; darker: later iteration)")
    fig.tight_layout()
    return save_figure(fig, path, dpi=110)
