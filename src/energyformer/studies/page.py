"""Render a study's page from its records and its declared ``report:`` blocks (format: :mod:`.page_spec`).

One renderer for every study (issue 22): what stays in Python per paper is metric hooks and the few
figures and sections a table cannot say. ``README.md`` of a scale starts with the title and the command
that rebuilt it; every number comes from ``results.json`` (ours) or a ``paper:`` row of the study (theirs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from itertools import product
from pathlib import Path
from statistics import fmean, stdev
from typing import Any

from ..utils.markdown import md_table
from .claims import ClaimRow, _matches, arm_values, claims_table, metric_value
from .page_spec import BlockSpec, ColumnSpec, TableSpec
from .preflight import study_arg, study_file
from .spec import ArmSpec, StudySpec


@dataclass(frozen=True)
class PageContext:
    """What a page block sees: the study, its name and scale, the scale's records, probes and claim rows."""

    spec: StudySpec
    name: str
    scale: str
    out: Path
    data: dict
    rows: list[ClaimRow]
    order: dict[str, list[str]] | None = None   # label order of axes the study does not declare (table keys)

    @property
    def records(self) -> list[dict]:
        return list(self.data["runs"].values())

    def labels(self, axis: str, where: dict | None = None) -> list[str]:
        """The labels of ``axis`` present among the records (``where`` selects), in the study's order."""
        recs = [r for r in self.records if _matches(r, where or {})]
        if axis == "seed":
            return [str(s) for s in sorted({int(r["seed"]) for r in recs})]
        seen = {r.get("cell", {}).get(axis) for r in recs}
        declared = (self.order or {}).get(axis) or self.spec.runs.axes.get(axis, [])
        return [lab for lab in declared if lab in seen] + sorted(str(x) for x in seen - set(declared) - {None})

    def select(self, where: dict) -> list[dict]:
        """Records matching ``where`` (``seed`` allowed as an axis)."""
        seed = where.get("seed")
        rest = {k: v for k, v in where.items() if k != "seed"}
        return [r for r in self.records if _matches(r, rest) and (seed is None or str(r["seed"]) == str(seed))]


def fmt_value(v: Any, fmt: str) -> str:
    """One value as the column declares: a format spec, ``si`` or ``text``; lists element-wise."""
    if v is None:
        return "–"
    if isinstance(v, (list, tuple)):
        return ", ".join(fmt_value(x, fmt) for x in v)
    if fmt == "text" or isinstance(v, str):
        return str(v)
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if fmt == "si":
        for suffix, s in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
            if abs(v) >= s:
                return f"{v / s:.2f}{suffix}"
        return f"{v:g}"
    if fmt.endswith("d") and isinstance(v, float) and v.is_integer():
        v = int(v)   # a mean of equal integer counts
    return format(v, fmt)


def _scaled(v: Any, k: float) -> Any:
    if k == 1.0 or v is None or isinstance(v, (str, bool)):
        return v
    if isinstance(v, (list, tuple)):
        return [_scaled(x, k) for x in v]
    return v * k if isinstance(v, (int, float)) else v


def column_values(ctx: PageContext, col: ColumnSpec, where: dict) -> dict[int, Any]:
    """{seed: value} of a measured column for one row (``minus``: the paired difference per seed; a row
    with more than one run per seed averages them)."""
    where = {**where, **col.where}
    if col.reduce is not None:
        return {s: _scaled(v, col.scale) for s, v in _reduced(ctx, col, where).items()}
    by_seed: dict[int, list] = {}
    for r in ctx.select(where):
        v = metric_value(r, col.metric)
        if col.key is not None and isinstance(v, (list, dict)):
            v = [d[col.key] for d in (v.values() if isinstance(v, dict) else v) if isinstance(d, dict) and col.key in d]
        if col.tail is not None and isinstance(v, list) and v:
            v = fmean(v[-col.tail:])
        if v is not None:
            by_seed.setdefault(int(r["seed"]), []).append(v)
    vals = {s: (fmean(v) if len(v) > 1 and all(isinstance(x, (int, float)) for x in v) else v[0])
            for s, v in by_seed.items()}
    if col.minus:
        # the other side unscaled: the difference is scaled once below (it was scaled twice: (0.8 - 50) x 100)
        other = column_values(ctx, col.model_copy(update={"minus": None, "scale": 1.0}), {**where, **col.minus})
        vals = {s: v - other[s] for s, v in vals.items() if s in other and isinstance(v, (int, float))}
    return {s: _scaled(v, col.scale) for s, v in vals.items()}


def _reduced(ctx: PageContext, col: ColumnSpec, where: dict) -> dict[int, float]:
    """{seed: fn(labels, means)}: the row's runs reduced over ``col.reduce.over`` exactly as a claim arm with
    that ``reduce`` is (:func:`~energyformer.studies.claims.arm_values`)."""
    runs = {str(i): r for i, r in enumerate(ctx.select(where))}
    return arm_values(runs, ArmSpec(where={}, metric=col.metric, reduce=col.reduce), col.metric, {})


def aggregate(values: dict[int, Any], agg: str) -> Any:
    """The column's aggregate of its per-seed values (None when there are none)."""
    xs = [values[s] for s in sorted(values)]
    if agg == "n":
        return len(xs)
    if not xs:
        return None
    if agg == "first":
        return xs[0]
    if agg == "seeds":
        return xs
    nums = [float(x) for x in xs if isinstance(x, (int, float))]
    if not nums:
        return xs[0]
    if agg in ("min", "max") and any(math.isnan(x) for x in nums):  # min/max over a NaN depend on the order
        return math.nan
    return {"mean": fmean, "mean_std": fmean, "mean_range": fmean, "min": min, "max": max, "sum": sum}[agg](nums)


def _cell(values: dict[int, Any], col: ColumnSpec, bold: bool) -> str:
    v = aggregate(values, col.agg)
    if v is None:
        return "–"
    nums = [float(x) for x in values.values() if isinstance(x, (int, float))]
    if col.agg == "seeds":
        text = " / ".join(fmt_value(x, col.fmt) for x in v)
    else:
        text = fmt_value(v, "d" if col.agg == "n" else col.fmt)
    bad = sum(not math.isfinite(x) for x in nums)
    if bad and col.agg not in ("seeds", "n"):  # a record holds NaN/inf (the runner writes them as they are)
        text += f" (non-finite in {bad} of {len(nums)} seed(s))"
    elif col.agg == "mean_std" and len(nums) > 1:
        text += f" ± {fmt_value(stdev(nums), col.fmt)}"
    elif col.agg == "mean_range" and len(nums) > 1:
        text += f" [{fmt_value(min(nums), col.fmt)}, {fmt_value(max(nums), col.fmt)}]"
    return f"**{text}**" if bold else text


def _paper_row(table: TableSpec, labels: dict[str, str]) -> dict | None:
    for row in table.paper:
        if all(str(row.get(k)) == v for k, v in labels.items() if k in row):
            return row
    return None


def _table_rows(ctx: PageContext, t: TableSpec, where: dict) -> list[list[str]]:
    combos = [dict(zip(t.rows, c)) for c in product(*(ctx.labels(a, where) for a in t.rows))]
    combos = [c for c in combos if ctx.select({**where, **c})]
    values = [[column_values(ctx, col, {**where, **c}) if col.metric else None for col in t.columns] for c in combos]
    best = {}
    for j, col in enumerate(t.columns):
        if col.best and col.metric:
            aggs = [aggregate(v[j], col.agg) for v in values]
            nums = [a for a in aggs if isinstance(a, (int, float)) and math.isfinite(a)]  # a NaN is never best
            if nums:
                best[j] = (min if col.best == "min" else max)(nums)
    out = []
    for c, vals in zip(combos, values):
        row = [t.names.get(v, v) for v in c.values()]
        for j, col in enumerate(t.columns):
            if col.paper is not None:
                p = _paper_row(t, c)
                row.append(fmt_value(p.get(col.paper), col.fmt if col.fmt != ".4g" else "text") if p else "–")
            else:
                row.append(_cell(vals[j], col, j in best and aggregate(vals[j], col.agg) == best[j]))
        out.append(row)
    return out


def _keyed(ctx: PageContext, t: TableSpec, where: dict) -> tuple[PageContext, TableSpec]:
    """A ``keys`` table as an ordinary one: a record per (run, key of the dict at ``t.keys``) — or per key of
    the probe ``probes.NAME`` — with the key as axis ``t.key_label`` and the key's entry as its metrics."""
    if t.keys.startswith("probes."):
        sources = [({}, 0, (ctx.data.get("probes") or {}).get(t.keys.split(".", 1)[1]))]
    else:
        sources = [(r.get("cell", {}), r["seed"], metric_value(r, t.keys)) for r in ctx.select(where)]
    runs, order = {}, []
    for cell, seed, entries in sources:
        for k, v in (entries if isinstance(entries, dict) else {}).items():
            order += [] if k in order else [k]
            runs[str(len(runs))] = {"cell": {**cell, t.key_label: k}, "seed": seed,
                                    "metrics": v if isinstance(v, dict) else {"value": v}}
    return (replace(ctx, data={**ctx.data, "runs": runs}, order={t.key_label: order}),
            t.model_copy(update={"rows": [*t.rows, t.key_label], "keys": None}))


def render_table(ctx: PageContext, t: TableSpec) -> str:
    """The table's markdown (one per ``group`` label), with its title, text and the paper's source."""
    head = [*t.rows, *([t.key_label] if t.keys else []), *(c.label for c in t.columns)]
    groups = ctx.labels(t.group, t.where) if t.group else [None]
    parts = [f"## {t.title}\n"] if t.title else []
    if t.text:
        parts.append(t.text.strip() + "\n")
    for g in groups:
        where = {**t.where, **({t.group: g} if g is not None else {})}
        rows = _table_rows(*_keyed(ctx, t, where), where) if t.keys else _table_rows(ctx, t, where)
        if not rows:
            continue
        if g is not None:
            parts.append(f"### {t.group} = {g}\n")
        parts.append("\n".join(md_table(head, rows, escape=True)) + "\n")
    if t.paper_source:
        parts.append(f"Paper columns: {t.paper_source} (copied, not measured).\n")
    return "\n".join(parts)


def render_setup(ctx: PageContext, setup: dict[str, str]) -> str:
    """``- label: value`` per entry: the distinct values over the records (``a, b`` when runs differ),
    then the hardware the runs were recorded on and the records' ``note``, if any. Records migrated from
    an old program show the setup list it recorded instead."""
    lines = ["## Setup", ""]
    recorded = ctx.data.get("setup") or {}   # migrated records carry the old program's setup list
    if isinstance(recorded, str):             # ... or its setup paragraph
        lines += [recorded.strip(), ""]
    else:
        lines += [f"- {k}: {v}" for k, v in recorded.items()]
    for label, path in ({} if recorded else setup).items():
        seen: list[str] = []
        for r in ctx.records:
            v = fmt_value(metric_value(r, path), "g" if isinstance(metric_value(r, path), float) else "text")
            if v not in seen and v != "–":
                seen.append(v)
        lines.append(f"- {label}: {', '.join(seen) if seen else '–'}")
    hw = sorted({r.get("hardware", "unrecorded") for r in ctx.records})
    lines.append(f"- recorded on: {'; '.join(hw)}")
    if ctx.data.get("note"):   # the records' own note (results.json ``note``)
        lines.append(f"- note: {ctx.data['note']}")
    return "\n".join(lines) + "\n"


def _text(ctx: PageContext, text: str) -> str:
    for k, v in {"{name}": ctx.name, "{page}": ctx.spec.page, "{scale}": ctx.scale,
                 "{runs}": str(len(ctx.records))}.items():
        text = text.replace(k, v)
    return text.strip() + "\n"


def render_block(ctx: PageContext, b: BlockSpec) -> str:
    from .runner import hook

    if b.text is not None:
        return _text(ctx, b.text)
    if b.setup is not None:
        return render_setup(ctx, b.setup)
    if b.table is not None:
        return render_table(ctx, b.table)
    if b.claims is not None:
        intro = (_text(ctx, b.claims) + "\n") if b.claims.strip() else ""
        return ("## Claims (verdicts by the rules declared in "
                f"`{study_file(ctx.name)}`)\n\n{intro}{claims_table(ctx.rows)}\n")
    if b.plot is not None:
        from .plots import line_plot

        path = line_plot(ctx, b.plot, ctx.out / b.plot.file)
        return f"![{b.plot.alt}]({b.plot.file})\n" if path else ""
    if b.figure is not None:
        path = hook(b.figure.fn)(ctx, ctx.out / b.figure.file)
        if path is None:
            return ""
        cap = f"\n{_text(ctx, b.figure.caption)}" if b.figure.caption else ""
        return f"![{b.figure.alt}]({b.figure.file})\n{cap}"
    if b.include is not None:
        path = ctx.out / b.include
        return (path.read_text().strip() + "\n") if path.exists() else ""
    text = hook(b.section)(ctx)
    return (text.strip() + "\n") if text else ""


def render(out: Path, spec: StudySpec, name: str, scale: str, data: dict, rows: list[ClaimRow]) -> list[Path]:
    """Write every file of ``spec.report`` into ``out`` (a scale's page folder); returns their paths."""
    ctx = PageContext(spec, name, scale, out, data, rows)
    written = []
    for fname, blocks in spec.report.items():
        parts = []
        if fname == "README.md":
            note = spec.scales[scale].note if scale in spec.scales else ""
            from .runner import is_migrated, outdated_text

            old = sum(map(is_migrated, data["runs"].values()))
            said = f" Scale: {note}" if note else ""
            if note and old:  # the note describes the scale's preset, which migrated records did not run
                said = (f" Scale preset ({'these' if old == len(data['runs']) else f'{old} of these'} runs were "
                        f"recorded before it by the old program: their own settings are below): {note}")
            parts.append(f"# {spec.title} — {scale} scale\n\nRendered from this folder's `results.json` by "
                         f"`energyformer reproduce {study_arg(name)} --report-only --out DIR` (DIR: the folder above "
                         "this one; study "
                         f"`{study_file(name)}`; {len(ctx.records)} runs).{said}\n")
            stale = outdated_text(spec, scale, data["runs"]) if scale in spec.scales else ""
            parts += [stale + "\n"] if stale else []
        parts += [s for s in (render_block(ctx, b) for b in blocks) if s]
        (out / fname).write_text("\n".join(parts))
        written.append(out / fname)
    return written
