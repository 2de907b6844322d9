"""Claims of a study evaluated from its run records by their declared rules (``verdicts.compare``).

An arm over runs gives one value per seed: the mean of its metric over the selected runs of that seed
(e.g. the accuracy over every hard length). A claim with ``per: AXIS`` gives one row per label of the
axis. A claim declared ``untestable: REASON`` is UNTESTABLE with that reason, whatever ran.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import fmean
from typing import Any

from ..analysis.verdicts import Outcome, Rules, Verdict, compare
from ..errors import DataError
from .spec import ArmSpec, ClaimSpec, StudySpec


@dataclass(frozen=True)
class ClaimRow:
    claim: ClaimSpec
    label: str | None               # the ``per`` axis label, if any
    a: list[float]                  # per-seed values of arm A
    b: list[float] | float | None   # per-seed values of arm B, or the fixed number
    outcome: Outcome


def metric_value(record: dict, path: str) -> Any:
    """A dotted path into a run record's metrics (or its top-level numbers: tokens_per_s, params.total); an
    integer part indexes a list (``convergence.by_step.5``)."""
    head = path.split(".")[0]
    node: Any = record.get("metrics", {}) if head in record.get("metrics", {}) else record
    for part in path.split("."):
        if isinstance(node, list) and part.lstrip("-").isdigit() and -len(node) <= int(part) < len(node):
            node = node[int(part)]   # an element of a list: by_step.5, train_ce.-1
            continue
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _matches(record: dict, where: dict[str, str | list[str]]) -> bool:
    cell = record.get("cell", {})
    return all(cell.get(a) in (v if isinstance(v, list) else [v]) for a, v in where.items())


def _cell_key(record: dict) -> tuple:
    """A run's cell (its axis labels, the seed apart) as a hashable key."""
    return tuple(sorted((a, str(v)) for a, v in record.get("cell", {}).items()))


_AGG = {"mean": fmean, "min": min, "max": max, "range": lambda v: max(v) - min(v)}


def arm_values(records: dict[str, dict], arm: ArmSpec, metric: str, extra: dict[str, str],
               probes: dict | None = None) -> dict[int, float]:
    """{seed: value}: per seed the runs the arm selects aggregated to one (``arm.agg``, the mean by
    default) — or, with ``reduce``, its function of the per-label aggregates of one axis — minus the
    ``minus`` selection's value (seeds both ran); a probe's measurement is one value (seed 0).
    Only seeds with a value in every cell the arm selects in any seed count: a seed whose run of one cell is
    missing (not run, failed, or no such metric) is left out rather than aggregated over fewer cells, which
    would set a mean over other cells beside the other seeds' (its seed count then says so)."""
    if arm.probe is not None:
        v = metric_value({"metrics": {arm.probe: (probes or {}).get(arm.probe)}}, f"{arm.probe}.{arm.metric or metric}")
        return {0: float(v)} if isinstance(v, (int, float)) else {}
    where = {**(arm.where or {}), **extra}
    m = arm.metric or metric
    by_seed: dict[int, dict[str | None, list[float]]] = {}
    cells: dict[int, set] = {}  # per seed, the cells it has a value for
    for key, r in records.items():
        if _matches(r, where):
            v = metric_value(r, m)
            if isinstance(v, str):  # a number damaged into text was a seed silently left out
                raise DataError(f"runs[{key!r}]: metric {m} is {v!r}, not a number (a claim reads it)")
            if isinstance(v, (int, float)):
                label = r.get("cell", {}).get(arm.reduce.over) if arm.reduce else None
                by_seed.setdefault(int(r["seed"]), {}).setdefault(label, []).append(float(v))
                cells.setdefault(int(r["seed"]), set()).add(_cell_key(r))
    every = set().union(*cells.values()) if cells else set()
    agg = _AGG[arm.agg]
    out: dict[int, float] = {}
    for s in sorted(by_seed):
        if cells[s] != every:
            continue  # a cell of the arm missing in this seed
        groups = by_seed[s]
        if arm.reduce is None:
            out[s] = agg(groups[None])
            continue
        from .runner import hook

        labels = list(groups)
        v = hook(arm.reduce.fn)(labels, [agg(groups[lab]) for lab in labels])
        if v is not None:
            out[s] = float(v)
    if arm.minus is not None:
        other = arm_values(records, arm.minus, m, extra, probes)
        out = {s: v - other[s] for s, v in out.items() if s in other}
    return out


def rule_text(c: ClaimSpec) -> str:
    """The claim's declared rule in words, for the page."""
    if c.untestable:
        return "declared untestable"
    r = c.rules
    parts = [{"better": "A better than B beyond the band", "not_worse": f"A not worse than B by more than {c.tolerance:g}",
              "equal": f"A − B within ±{c.tolerance:g}"}[c.claim]]
    if c.paired:
        parts.append("paired by seed")
    spread = "spread of the per-seed differences" if c.paired else "seed spread"
    parts.append(f"band = max({spread}, {r.noise:g})" if r.noise is not None else f"band = {spread}")
    if r.noise is not None:   # compare(): a declared noise is the band whatever the number of seeds
        parts.append("one seed: decided against the band")
    else:
        parts.append(f"one seed decides beyond {r.single_seed_bound:g}" if r.single_seed_bound is not None
                     else "one seed: undecided")
    for name, level in (("chance", r.chance), ("floor", r.floor)):
        if level is not None:
            parts.append(f"untestable at {name} {level:g} (±{r.at_band:g})")
    return "; ".join(parts)


def evaluate(spec: StudySpec, records: dict[str, dict], probes: dict | None = None) -> list[ClaimRow]:
    """Every claim of ``spec`` (one row per ``per`` label) from the run records (and the probes' records)."""
    rows = []
    for c in spec.claims:
        if c.untestable:
            rows.append(ClaimRow(c, None, [], None, Outcome(Verdict.UNTESTABLE, None, None, c.untestable)))
            continue
        labels: list[str | None] = [None]
        if c.per is not None:
            seen = {r.get("cell", {}).get(c.per) for r in records.values()}
            labels = [lab for lab in spec.runs.axes[c.per] if lab in seen]
        for lab in labels:
            extra = {c.per: lab} if lab is not None else {}
            a = arm_values(records, c.a, c.metric, extra, probes)
            b = c.b.value if c.b.value is not None else arm_values(records, c.b, c.metric, extra, probes)
            av, bv = list(a.values()), (b if isinstance(b, float) else list(b.values()))
            out = compare(av, bv, higher_is_better=c.higher_is_better, rules=c.rules.rules(), claim=c.claim,
                          tolerance=c.tolerance)
            if c.paired and isinstance(b, dict) and out.verdict != Verdict.UNTESTABLE:
                out = _paired(c, a, b)
            rows.append(ClaimRow(c, lab, av, bv, out))
    return rows


def _paired(c: ClaimSpec, a: dict[int, float], b: dict[int, float]) -> Outcome:
    """The verdict on the per-seed differences A - B of the seeds both arms ran (noise: their spread)."""
    seeds = sorted(set(a) & set(b))
    if not seeds:
        return Outcome(Verdict.UNTESTABLE, None, None, "no seed ran both arms")
    r = c.rules.rules()
    rules = Rules(noise=r.noise, single_seed_bound=r.single_seed_bound)
    out = compare([a[s] - b[s] for s in seeds], 0.0, higher_is_better=c.higher_is_better, rules=rules,
                  claim=c.claim, tolerance=c.tolerance)
    return Outcome(out.verdict, out.margin, out.band, f"paired over seeds {seeds}: {out.reason}")


def _fmt(v: list[float] | float | None) -> str:
    if v is None:
        return "–"
    if isinstance(v, (int, float)):
        return f"{v:.4g}"
    if not v:
        return "not run"
    return f"{fmean(v):.4g}" + (f" [{min(v):.4g}, {max(v):.4g}]" if len(v) > 1 else " (1 seed)")


def claims_table(rows: list[ClaimRow], per_name: str | None = None) -> str:
    """Markdown: each claim with the paper's value and source beside ours, the rule and the verdict."""
    out = ["| claim | paper (source) | A | B | rule | verdict | why |", "|---|---|---|---|---|:---:|---|"]
    for r in rows:
        c = r.claim
        label = f" ({c.per} = {r.label})" if r.label is not None else ""
        value = c.paper.by.get(r.label, c.paper.value) if r.label is not None else c.paper.value
        paper = f"{value if value is not None else '–'} ({c.paper.source})"
        out.append(f"| **{c.id}** {c.text}{label} | {paper} | {_fmt(r.a) if r.a else '–'} | {_fmt(r.b)} | "
                   f"{rule_text(c)} | **{r.outcome.verdict}** | {r.outcome.reason} |")
    return "\n".join(out)
