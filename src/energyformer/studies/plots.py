"""The generic line plot of a study page (:class:`.page_spec.PlotSpec`), drawn with matplotlib (Agg).

Ours: the mean over seeds with the seeds' min-max as a band; the paper's points dashed in black. A value
that is a list of dicts is a curve (``x`` and ``y_key`` name its keys), a list of numbers a curve over
1, 2, ...; a dict of equal-length lists (columns) is a curve too (``x`` and ``y_key`` name two of
its columns; entries that are not numbers are skipped); a number is one point at the numeric label of the ``x`` axis, or at the record's value of the
path ``x`` when ``x`` is not an axis.
"""

from __future__ import annotations

from pathlib import Path
from statistics import fmean
from typing import Any

from .claims import metric_value
from .page_spec import PlotSpec


def _points(value: Any, spec: PlotSpec, x_label: str | None) -> list[tuple[float, float]]:
    if isinstance(value, dict) and spec.x is not None and isinstance(value.get(spec.x), list) \
            and isinstance(value.get(spec.y_key), list):
        return [(float(x), float(y)) for x, y in zip(value[spec.x], value[spec.y_key])
                if isinstance(x, (int, float)) and isinstance(y, (int, float))]
    if isinstance(value, list):
        if spec.y_key is None or spec.x is None:
            return [(i + 1.0, float(v)) for i, v in enumerate(value) if isinstance(v, (int, float))]
        return [(float(d[spec.x]), float(d[spec.y_key])) for d in value
                if isinstance(d, dict) and isinstance(d.get(spec.y_key), (int, float))]
    if isinstance(value, (int, float)) and isinstance(x_label, (int, float, str)):
        return [(float(x_label), float(value))]
    return []


def series_points(ctx, spec: PlotSpec, where: dict) -> dict[float, list[float]]:
    """{x: [y per seed]} of one line."""
    pts: dict[float, list[float]] = {}
    x_axis = spec.x if spec.x in ctx.spec.runs.axes else None
    for r in ctx.select(where):
        x_label = r.get("cell", {}).get(x_axis) if x_axis else (metric_value(r, spec.x) if spec.x else None)
        for x, y in _points(metric_value(r, spec.y), spec, x_label):
            pts.setdefault(x, []).append(y * spec.scale)
    return dict(sorted(pts.items()))


def line_plot(ctx, spec: PlotSpec, path: Path) -> Path | None:
    """Draw ``spec`` into ``path``; None when no record has its values."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = ctx.labels(spec.panel, spec.where) if spec.panel else [None]
    series = ctx.labels(spec.series, spec.where) if spec.series else [None]
    lines = {(p, s): series_points(ctx, spec, {**spec.where, **({spec.panel: p} if p else {}),
                                               **({spec.series: s} if s else {})})
             for p in panels for s in series}
    if not any(lines.values()):
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 3.6), squeeze=False)
    for ax, p in zip(axes[0], panels):
        for s in series:
            pts = lines[(p, s)]
            if not pts:
                continue
            xs, ys = list(pts), [fmean(v) for v in pts.values()]
            (line,) = ax.plot(xs, ys, "o-" if len(xs) < 30 else "-", ms=3, label=s or "ours")
            if any(len(v) > 1 for v in pts.values()):
                ax.fill_between(xs, [min(v) for v in pts.values()], [max(v) for v in pts.values()],
                                color=line.get_color(), alpha=0.2)
        for s in series:
            paper = [(float(r["x"]), float(r["y"])) for r in spec.paper
                     if (p is None or str(r.get(spec.panel)) == p) and (s is None or str(r.get(spec.series)) == s)]
            if paper:
                ax.plot(*zip(*sorted(paper)), "k--", lw=1, alpha=0.7,
                        label=f"{spec.paper_label}" + (f" ({s})" if s else ""))
        if spec.vline is not None:
            ax.axvline(spec.vline, color="grey", ls="--", lw=1)
        ax.set_xscale("log" if spec.logx else "linear")
        ax.set_yscale("log" if spec.logy else "linear")
        ax.set_xlabel(spec.xlabel or spec.x or "")
        ax.set_ylabel(spec.ylabel or spec.y)
        ax.set_title(" ".join(t for t in (spec.title, f"{spec.panel} = {p}" if p else "") if t))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)
    return path
