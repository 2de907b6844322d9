"""Plot the descent recorded in a model's :class:`~energyformer.core.Traces` (energy and step norm per
block and step), e.g. to check that every CEM block really lowers its energy::

    out = model(idx, trace=True)
    plot_traces(out.traces, "traces.png")
"""

from __future__ import annotations

from pathlib import Path

from ..core.trace import Traces


def energy_drops(traces: Traces) -> dict[str, float]:
    """Mean energy change from the first to the last iterate of each block (negative = descent)."""
    return {k: t.mean_energy()[-1] - t.mean_energy()[0] for k, t in traces.items()}


def plot_traces(traces: Traces, path: str | Path, title: str = "energy descent per block") -> Path:
    """Two panels: mean energy relative to the start, and mean step norm, against the step index."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not traces:
        raise ValueError("no traces to plot: run the model with trace=True and at least one energy block")
    fig, (ax_e, ax_s) = plt.subplots(1, 2, figsize=(10, 4))
    for name, tr in traces.items():
        e = tr.mean_energy()
        style = "-" if tr.exact else "--"
        ax_e.plot(range(len(e)), [v - e[0] for v in e], style, marker="o", label=name)
        ax_s.plot(range(1, tr.steps + 1), tr.mean_step_norm(), style, marker="o", label=name)
    ax_e.set_xlabel("step t")
    ax_e.set_ylabel("mean energy E(x_t) − E(x_0)")
    ax_s.set_xlabel("step t")
    ax_s.set_ylabel("mean ‖x_t − x_{t−1}‖")
    for ax in (ax_e, ax_s):
        ax.grid(alpha=0.3)
    ax_e.legend(fontsize=7)
    fig.suptitle(f"{title}  (dashed: update not exactly −ηP∇E)")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
