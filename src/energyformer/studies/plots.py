"""The generic line plot of a study page (:class:`.page_spec.PlotSpec`), drawn with matplotlib (Agg).

Ours: the mean over seeds with the seeds' min-max as a band; the paper's points dashed in black. A value
that is a list of dicts (or of lists) is a curve (``x`` and ``y_key`` name its keys, or index its rows), a
list of numbers a curve over 1, 2, ..., a dict with numeric keys a curve {x: y}; a number is one point at the
numeric label of the ``x`` axis, or at the record's value of the path ``x`` when ``x`` is not an axis.
"""

from __future__ import annotations

from pathlib import Path
from statistics import fmean
from typing import Any

from .claims import metric_value
from .page_spec import PlotSpec


def _key(d: Any, k: str) -> Any:
    """``d[k]`` of a curve's point: a dict's key, or a list's index (``k`` a digit string)."""
    if isinstance(d, dict):
        return d.get(k)
    ok = isinstance(d, (list, tuple)) and k.lstrip("-").isdigit() and -len(d) <= int(k) < len(d)
    return d[int(k)] if ok else None


def _points(value: Any, spec: PlotSpec, x_label: str | None) -> list[tuple[float, float]]:
    if isinstance(value, dict):   # {x: y}, numeric keys (a sweep recorded as a dict)
        return sorted((float(k), float(v)) for k, v in value.items()
                      if isinstance(v, (int, float)) and str(k).lstrip("-").replace(".", "", 1).isdigit())
    if isinstance(value, list):
        if spec.y_key is None or spec.x is None:
            return [(i + 1.0, float(v)) for i, v in enumerate(value) if isinstance(v, (int, float))]
        return [(float(_key(d, spec.x)), float(_key(d, spec.y_key))) for d in value
                if isinstance(_key(d, spec.y_key), (int, float)) and isinstance(_key(d, spec.x), (int, float))]
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
