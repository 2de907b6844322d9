"""The generic line plot of a study page (:class:`.page_spec.PlotSpec`), drawn with matplotlib (Agg).

Ours: the mean over seeds with the seeds' min-max as a band; the paper's points dashed (black, or in the
colour of their series; rows sharing an x, e.g. the paper's runs, as their mean with their range as a band).
A value that is a list of dicts (or of lists) is a curve (``x`` and ``y_key`` name its keys, or index its
rows), a dict of equal-length lists (columns; ``x`` and ``y_key`` name two of them) a curve, a
dict with numeric keys a curve {x: y}, a dict of dicts a curve keyed
by x (``y_key`` names the value), a list of numbers a curve over x_start, x_start + 1, ... (a list of lists
of numbers: several samples at each x, e.g. heads: their mean, their range as the band); a number is one
point at the numeric label of the ``x`` axis, or at the record's value of the path ``x`` when ``x`` is not
an axis; with ``pairs``, a list of [x, y] pairs is a curve.
"""

from __future__ import annotations

from pathlib import Path
from statistics import fmean
from typing import Any

from ..analysis.figures import save_figure
from .claims import metric_value
from .page_spec import PlotSpec


_ANY = object()


def _smooth(pts: list[tuple[float, float]], w: int) -> list[tuple[float, float]]:
    """The mean of each run of ``w`` consecutive points (x and y)."""
    runs = [pts[i:i + w] for i in range(0, len(pts) - w + 1, w)]
    return [(fmean(p[0] for p in r), fmean(p[1] for p in r)) for r in runs] if w > 1 else pts


def _key(d: Any, k: str) -> Any:
    """``d[k]`` of a curve's point: a dict's key, or a list's index (``k`` a digit string)."""
    if isinstance(d, dict):
        return d.get(k)
    ok = isinstance(d, (list, tuple)) and k.lstrip("-").isdigit() and -len(d) <= int(k) < len(d)
    return d[int(k)] if ok else None


def _points(value: Any, spec: PlotSpec, x_label: str | None) -> list[tuple[float, float]]:
    if isinstance(value, dict) and spec.x is not None and isinstance(value.get(spec.x), list) \
            and isinstance(value.get(spec.y_key), list):   # columns: {"iteration": [...], "energy": [...]}
        return [(float(x), float(y)) for x, y in zip(value[spec.x], value[spec.y_key])
                if isinstance(x, (int, float)) and isinstance(y, (int, float))]
    if isinstance(value, dict) and spec.y_key is not None:   # a curve keyed by x: {"4": {"acc": …}, …}
        return sorted((float(k), float(d[spec.y_key])) for k, d in value.items()
                      if isinstance(d, dict) and isinstance(d.get(spec.y_key), (int, float)))
    if isinstance(value, dict):   # {x: y}, numeric keys (a sweep recorded as a dict)
        return sorted((float(k), float(v)) for k, v in value.items()
                      if isinstance(v, (int, float)) and str(k).lstrip("-").replace(".", "", 1).isdigit())
    if isinstance(value, list):
        if spec.pairs:   # [x, y] pairs (a history)
            return _smooth([(float(x), float(y)) for x, y in value if isinstance(y, (int, float))], spec.smooth)
        if spec.y_key is None or spec.x is None:   # numbers; a list of numbers at one x is one sample each (heads)
            pts = [(i + spec.x_start, float(u)) for i, v in enumerate(value)
                   for u in (v if isinstance(v, list) else [v]) if isinstance(u, (int, float))]
        else:   # rows: dicts by key, lists by index
            pts = [(float(_key(d, spec.x)), float(_key(d, spec.y_key))) for d in value
                   if isinstance(_key(d, spec.y_key), (int, float)) and isinstance(_key(d, spec.x), (int, float))]
        return _smooth(pts, spec.smooth)
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


def _vlines(ctx, spec: PlotSpec) -> list[float]:
    """``vline``: a number is one x; a path gives each value it has among the plotted records."""
    if spec.vline is None:
        return []
    try:
        return [float(spec.vline)]
    except ValueError:
        return sorted({float(v) for r in ctx.select(spec.where) if (v := metric_value(r, spec.vline)) is not None})


def line_plot(ctx, spec: PlotSpec, path: Path) -> Path | None:
    """Draw ``spec`` into ``path``; None when no record has its values."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullLocator

    panels = ctx.labels(spec.panel, spec.where) if spec.panel else [None]
    series = ctx.labels(spec.series, spec.where) if spec.series else [None]
    lines = {(p, s): series_points(ctx, spec, {**spec.where, **({spec.panel: p} if p else {}),
                                               **({spec.series: s} if s else {})})
             for p in panels for s in series}
    if not any(lines.values()):
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 3.6), squeeze=False)
    for ax, p in zip(axes[0], panels):
        colour: dict = {}   # the paper's line of a series in its colour (no series: black)
        for s in series:
            pts = lines[(p, s)]
            if not pts:
                continue
            xs, ys = list(pts), [fmean(v) for v in pts.values()]
            (line,) = ax.plot(xs, ys, "o-" if len(xs) < 30 else "-", ms=3, label=s or "ours")
            colour[s] = line.get_color()
            if any(len(v) > 1 for v in pts.values()):
                ax.fill_between(xs, [min(v) for v in pts.values()], [max(v) for v in pts.values()],
                                color=line.get_color(), alpha=0.2)
        for s in series + ([_ANY] if spec.series else []):   # _ANY: the paper's rows that name no series label
            paper: dict[float, list[float]] = {}   # several rows at one x (the paper's runs): their mean, a band
            for r in spec.paper:
                if (p is None or str(r.get(spec.panel)) == p) and (
                        s is None or (spec.series not in r if s is _ANY else str(r.get(spec.series)) == s)):
                    paper.setdefault(float(r["x"]), []).append(float(r["y"]))
            if paper:
                xs = sorted(paper)
                c = colour.get(s, "k") if s is not None else "k"
                ax.plot(xs, [fmean(paper[x]) for x in xs], "--" if len(xs) > 1 else "x", color=c, lw=1, alpha=0.7,
                        label=f"{spec.paper_label}" + (f" ({s})" if s and s is not _ANY else ""))
                if any(len(v) > 1 for v in paper.values()):
                    ax.fill_between(xs, [min(paper[x]) for x in xs], [max(paper[x]) for x in xs], color=c, alpha=0.1)
        for level in spec.hlines:
            ax.axhline(level, ls=":", color="grey", lw=1)
        for v in _vlines(ctx, spec):
            ax.axvline(float(v), ls=":", color="grey", lw=1)
        ax.set_xscale("log" if spec.logx else "linear")
        ax.set_yscale("log" if spec.logy else "linear")
        if spec.xticks:
            ax.xaxis.set_minor_locator(NullLocator())
            ax.set_xticks(spec.xticks, [f"{t:g}" for t in spec.xticks])
        ax.set_xlabel(spec.xlabel or spec.x or "")
        ax.set_ylabel(spec.ylabel or spec.y)
        ax.set_title(" ".join(t for t in (spec.title, f"{spec.panel} = {p}" if p else "") if t))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, path, dpi=110)
