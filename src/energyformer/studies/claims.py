"""Claims of a study evaluated from its run records by their declared rules (``verdicts.compare``).

An arm over runs gives one value per seed: the mean of its metric over the selected runs of that seed
(e.g. the accuracy over every hard length). A claim with ``per: AXIS`` gives one row per label of the
axis. A claim declared ``untestable: REASON`` is UNTESTABLE with that reason, whatever ran. The two arms are
compared over the same cells or the row is UNTESTABLE saying why; a diverged run is a non-finite result (UNTESTABLE,
named), never a cell silently left out of one arm. Arms whose records were made with different command-line ``--set``
overrides, or an arm mixing several, are UNTESTABLE naming them (:func:`sets_mismatch`): a run retrained with more
steps beside the others decided the claim.
"""

from __future__ import annotations

import difflib
import math
import warnings
from dataclasses import dataclass
from statistics import fmean
from typing import Any

from ..analysis.verdicts import Outcome, Rules, Verdict, compare
from ..errors import DataError
from .plan import scale_labels
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


@dataclass(frozen=True)
class ArmResult:
    """An arm's per-seed values with what it selected: ``cells`` are the cells of every matching record (run
    with or without a value, diverged or not), so two arms are compared over the same cells or not at all;
    ``why`` says why an arm that selected runs has no value (a metric path no run has, a mismatch of cells);
    ``sets`` are the command-line ``--set`` lists its records were made with (:func:`.runner.record_sets`)."""

    values: dict[int, float]
    cells: frozenset = frozenset()
    diverged: tuple[str, ...] = ()
    why: str | None = None
    sets: frozenset = frozenset()


def arm_values(records: dict[str, dict], arm: ArmSpec, metric: str, extra: dict[str, str],
               probes: dict | None = None) -> dict[int, float]:
    """{seed: value} of :func:`arm_result`."""
    return arm_result(records, arm, metric, extra, probes).values


def arm_result(records: dict[str, dict], arm: ArmSpec, metric: str, extra: dict[str, str],
               probes: dict | None = None, sets: dict[str, tuple | None] | None = None) -> ArmResult:
    """Per seed the runs the arm selects aggregated to one (``arm.agg``, the mean by default) — or, with
    ``reduce``, its function of the per-label aggregates of one axis — minus the ``minus`` selection's value
    (seeds both ran); a probe's measurement is one value (seed 0).

    The arm's cells are those of every record it selects, with a value or not. A seed counts only with a value
    in each of them: a seed whose run of one cell is missing (not run, or no such metric) is left out rather
    than aggregated over fewer cells, which would set a mean over other cells beside the other seeds' (its seed
    count then says so); a cell whose runs all lack the metric leaves every seed out, with ``why`` naming the
    path. A diverged run (recorded with ``diverged`` and no metrics) is a non-finite result, never a cell
    dropped: its seed's value is NaN, so ``compare`` says UNTESTABLE (a diverged learning rate left out of a
    sensitivity range, or one length left out of one arm's mean, silently decided the claim). ``sets`` (record name
    -> its ``--set`` list) gives the arm's :attr:`ArmResult.sets`."""
    if arm.probe is not None:
        v = metric_value({"metrics": {arm.probe: (probes or {}).get(arm.probe)}}, f"{arm.probe}.{arm.metric or metric}")
        return ArmResult({0: float(v)} if isinstance(v, (int, float)) else {})
    where = {**(arm.where or {}), **extra}
    m = arm.metric or metric
    by_seed: dict[int, dict[str | None, list[float]]] = {}
    cells: dict[int, set] = {}  # per seed, the cells it has a value for (NaN: diverged)
    selected, valued, diverged, made = set(), set(), [], set()
    for key, r in records.items():
        if not _matches(r, where):
            continue
        selected.add(_cell_key(r))
        if sets is not None and key in sets:
            made.add(sets[key])
        v = math.nan if "diverged" in r else metric_value(r, m)
        if isinstance(v, str):  # a number damaged into text was a seed silently left out
            raise DataError(f"runs[{key!r}]: metric {m} is {v!r}, not a number (a claim reads it)")
        if "diverged" in r:
            diverged.append(key)
        if isinstance(v, (int, float)):
            label = r.get("cell", {}).get(arm.reduce.over) if arm.reduce else None
            by_seed.setdefault(int(r["seed"]), {}).setdefault(label, []).append(float(v))
            cells.setdefault(int(r["seed"]), set()).add(_cell_key(r))
            valued.add(_cell_key(r))
    agg = _AGG[arm.agg]
    out: dict[int, float] = {}
    for s in sorted(by_seed):
        if cells[s] != selected:
            continue  # a cell of the arm missing in this seed
        groups = by_seed[s]
        if not all(math.isfinite(x) for g in groups.values() for x in g):
            out[s] = math.nan   # (min / max of a list with a NaN depend on its order)
            continue
        if arm.reduce is None:
            out[s] = agg(groups[None])
            continue
        from .runner import hook

        labels = list(groups)
        v = hook(arm.reduce.fn)(labels, [agg(groups[lab]) for lab in labels])
        if v is not None:
            out[s] = float(v)
    why = None
    if selected and not out:
        lacking = sorted(selected - valued)
        why = (_no_metric(records, where, m) if not valued else
               f"metric {m} missing in every run of {_cell_text(lacking[0])}" if lacking else
               f"no seed has the metric {m} in every selected cell")
    res = ArmResult(out, frozenset(selected), tuple(diverged), why, frozenset(made))
    if arm.minus is not None:   # (a gain over runs trained differently is as wrong as a comparison: sets joined)
        other = arm_result(records, arm.minus, m, extra, probes, sets)
        differ = cell_mismatch(arm, res, arm.minus, other, extra)
        vals = {} if differ else {s: v - other.values[s] for s, v in out.items() if s in other.values}
        res = ArmResult(vals, res.cells, res.diverged + other.diverged,
                        differ or res.why or (f"minus: {other.why}" if other.why else None), res.sets | other.sets)
    return res


def _no_metric(records: dict[str, dict], where: dict, m: str) -> str:
    """Why no selected run has a number at ``m``: a path to a mapping (``accuracy`` of ``{k0, k8, k32}``) says so
    and names paths inside it (it read "no selected run has the metric accuracy", which it had)."""
    found = next((v for r in records.values() if _matches(r, where) and "diverged" not in r
                  for v in [metric_value(r, m)] if isinstance(v, (dict, list))), None)
    if isinstance(found, dict):
        inside = ", ".join(f"{m}.{k}" for k in list(found)[:3]) + (", ..." if len(found) > 3 else "")
        return f"metric {m} is a mapping, not a number (give a path inside it: {inside})"
    if isinstance(found, list):
        return f"metric {m} is a list, not a number (give an element: {m}.0, {m}.-1)"
    paths = set().union(*(_metric_paths(r.get("metrics")) for r in records.values()
                          if _matches(r, where) and "diverged" not in r))
    near = difflib.get_close_matches(m, sorted(paths), n=2, cutoff=0.6)
    return f"no selected run has the metric {m}" + (f" (they have {', '.join(near)})" if near else "")


def _sets_text(made: tuple | None) -> str:
    if made is None:
        return "overrides the study no longer gives (an out-of-date record)"
    return " ".join(f"--set {o}" for o in made) if made else "no --set"


def sets_mismatch(ra: ArmResult, rb: ArmResult | None) -> str | None:
    """Why two arms over runs are not compared: their records were made with different command-line ``--set``
    overrides (CEM-T1 retrained with ``--set train.steps=1200`` against Plain at 150 steps said HOLDS), or one arm
    mixes records of several. None when every record of both agrees (or records say nothing of it)."""
    for side, r in (("A", ra), ("B", rb)):
        if r is not None and len(r.sets) > 1:
            return (f"{side} mixes runs made with different command-line overrides: " + " vs ".join(
                sorted(map(_sets_text, r.sets))) + " (compared under one configuration or not at all)")
    if rb is not None and ra.sets and rb.sets and ra.sets != rb.sets:
        (a,), (b,) = ra.sets, rb.sets
        return (f"A and B ran with different command-line overrides: A {_sets_text(a)}, B {_sets_text(b)} "
                "(compared under one configuration or not at all)")
    return None


def _cell_text(cell: tuple) -> str:
    return ", ".join(f"{a}={v}" for a, v in cell) or "the arm"


def cell_mismatch(x: ArmSpec, xr: ArmResult, y: ArmSpec, yr: ArmResult, extra: dict[str, str]) -> str | None:
    """Why two arms over runs are not compared: the cells they ran differ on an axis both select alike (the same
    labels, or neither names it, and neither reduces over it) — e.g. A's mean over length 64 beside B's over 64
    and 96. None when they agree (or one selected nothing: ``compare`` says so)."""
    if x.where is None or y.where is None or not xr.cells or not yr.cells:
        return None

    def picks(arm: ArmSpec, axis: str):
        v = {**(arm.where or {}), **extra}.get(axis)
        return None if v is None else frozenset(v if isinstance(v, list) else [v])

    axes = {a for c in xr.cells | yr.cells for a, _ in c}
    reduced = {arm.reduce.over for arm in (x, y) if arm.reduce is not None}
    shared = sorted(a for a in axes if a not in reduced and picks(x, a) == picks(y, a))
    px, py = ({tuple((a, v) for a, v in c if a in shared) for c in r.cells} for r in (xr, yr))
    if px == py:
        return None
    side, only = ("A", sorted(px - py)) if px - py else ("B", sorted(py - px))
    return (f"the arms ran different cells: only {side} has {'; '.join(_cell_text(c) for c in only[:3])}"
            f"{' and more' if len(only) > 3 else ''} (compared over the same cells or not at all)")


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
    if r.gate is not None:
        parts.append(f"untestable while A's {r.gate.metric} is at chance {r.gate.chance:g} (±{r.gate.at_band:g})")
    return "; ".join(parts)


def evaluate(spec: StudySpec, records: dict[str, dict], probes: dict | None = None,
             scale: str | None = None) -> list[ClaimRow]:
    """Every claim of ``spec`` (one row per ``per`` label) from the run records (and the probes' records).

    With ``scale``, a ``per`` claim has a row for every label that scale runs: one with no record is UNTESTABLE
    "not run" (such a label's row was left off the page, so a partial run read as a complete table)."""
    from .runner import record_sets

    made = record_sets(spec, scale, records)   # each record's --set list: arms made differently are not compared
    _check_metric_names(spec, records)
    rows = []
    for c in spec.claims:
        if c.untestable:
            rows.append(ClaimRow(c, None, [], None, Outcome(Verdict.UNTESTABLE, None, None, c.untestable)))
            continue
        labels: list[str | None] = [None]
        if c.per is not None:
            seen = {r.get("cell", {}).get(c.per) for r in records.values()}
            planned = set(scale_labels(spec, scale, c.per)) if scale is not None else set()
            labels = [lab for lab in spec.runs.axes[c.per] if (lab in seen or lab in planned) and c.admits(lab)]
        for lab in labels:
            if lab is not None and lab not in seen:
                why = f"not run: no record with {c.per} = {lab} at scale {scale}"
                rows.append(ClaimRow(c, lab, [], c.b.value if c.b.value is not None else [],
                                    Outcome(Verdict.UNTESTABLE, None, None, why)))
                continue
            extra = {c.per: lab} if lab is not None else {}
            ra = arm_result(records, c.a, c.metric, extra, probes, made)
            rb = None if c.b.value is not None else arm_result(records, c.b, c.metric, extra, probes, made)
            a, b = ra.values, (c.b.value if rb is None else rb.values)
            av, bv = list(a.values()), (b if isinstance(b, float) else list(b.values()))
            rows.append(ClaimRow(c, lab, av, bv, _decide(c, ra, rb, extra, records, probes)))
    return rows


def _metric_paths(node: Any, prefix: str = "") -> set[str]:
    """The dotted paths of a record's mappings and numbers (list elements not enumerated)."""
    out = {prefix} if prefix else set()
    if isinstance(node, dict):
        for k, v in node.items():
            out |= _metric_paths(v, f"{prefix}.{k}" if prefix else str(k))
    return out


def _check_metric_names(spec: StudySpec, records: dict[str, dict]) -> None:
    """Warn when an arm selects run records and no record at all holds the claim's metric: most likely a misspelled
    path (the rows say UNTESTABLE "no selected run has the metric", which read as if the runs lacked a measurement).
    The warning names the nearest paths the records hold. Not an error: records made before a metric hook was added
    lack it too, and the page says so; an arm that selects no record (a partial run) is not judged."""
    made = [r for r in records.values() if "diverged" not in r and isinstance(r.get("metrics"), dict)]
    for c in spec.claims:
        arms = [a for arm in (c.a, c.b) if arm is not None for a in (arm, arm.minus)
                if a is not None and a.value is None and a.probe is None]
        for a in arms:
            m = a.metric or c.metric
            if not m or not any(_matches(r, a.where or {}) for r in made) \
                    or any(metric_value(r, m) is not None for r in made):
                continue
            paths = set().union(*(_metric_paths(r["metrics"]) | {k for k, v in r.items()
                                                                  if isinstance(v, (int, float, dict))} for r in made))
            near = difflib.get_close_matches(m, sorted(paths), n=3, cutoff=0.6)
            warnings.warn(f"claim {c.id}: metric {m!r} is in none of the {len(made)} run records"
                          + (f" (nearest: {', '.join(near)})" if near else "")
                          + ": a misspelled path in the study's claims?", stacklevel=3)
            break


def _gate(c: ClaimSpec, records: dict[str, dict], extra: dict[str, str], probes: dict | None) -> str | None:
    """Why the claim is UNTESTABLE under its ``rules.gate`` (A's runs at chance on the gate's metric: the mean over
    seeds within ``at_band`` of chance), or None."""
    g = c.rules.gate
    if g is None:
        return None
    # A's selection as a plain mean over its runs: not A's own agg / reduce / minus (a gain or a range of the gate
    # metric is never at chance), and a gate that reads no number is UNTESTABLE, never silently off (probe L)
    if c.a.where is None:  # a probe's or a fixed number's A has no runs to gate on
        return f"gate {g.metric}: A selects no runs (a gate reads A's runs)"
    res = arm_result(records, ArmSpec(where=c.a.where), g.metric, extra, probes)
    vals = [v for v in res.values.values() if math.isfinite(v)]
    if not vals:
        return f"gate {g.metric}: no finite value in A's runs ({res.why or 'no run selected'})"
    if abs(fmean(vals) - g.chance) <= g.at_band * (1 + 1e-9):
        return f"A's model at chance on {g.metric} ({fmean(vals):g} vs {g.chance:g} ± {g.at_band:g})"
    return None


def _decide(c: ClaimSpec, ra: ArmResult, rb: ArmResult | None, extra: dict[str, str], records: dict[str, dict],
            probes: dict | None = None) -> Outcome:
    """The verdict of one row: UNTESTABLE with the reason where an arm selected runs but has no value, the
    arms ran different cells or with different command-line overrides; else ``compare`` (a diverged run:
    non-finite, named), paired if declared."""
    for side, r in (("A", ra), ("B", rb)):
        if r is not None and not r.values and r.why:
            return Outcome(Verdict.UNTESTABLE, None, None, f"{side}: {r.why}")
    differ = (cell_mismatch(c.a, ra, c.b, rb, extra) if rb is not None else None) or sets_mismatch(ra, rb)
    if differ:
        return Outcome(Verdict.UNTESTABLE, None, None, differ)
    gated = _gate(c, records, extra, probes)
    if gated:
        return Outcome(Verdict.UNTESTABLE, None, None, gated)
    b = c.b.value if rb is None else list(rb.values.values())
    out = compare(list(ra.values.values()), b, higher_is_better=c.higher_is_better, rules=c.rules.rules(),
                  claim=c.claim, tolerance=c.tolerance)
    gone = ra.diverged + (rb.diverged if rb is not None else ())
    if out.verdict == Verdict.UNTESTABLE and gone and out.margin is None and "non-finite" in out.reason:
        names = ", ".join(sorted(set(gone))[:3]) + (" and more" if len(set(gone)) > 3 else "")
        return Outcome(out.verdict, None, None, f"{out.reason}: {names}")
    if c.paired and rb is not None and out.verdict != Verdict.UNTESTABLE:
        out = _paired(c, ra.values, rb.values)
    return out


def _paired(c: ClaimSpec, a: dict[int, float], b: dict[int, float]) -> Outcome:
    """The verdict on the per-seed differences A - B of the seeds both arms ran (noise: their spread)."""
    seeds = sorted(set(a) & set(b))
    if not seeds:
        return Outcome(Verdict.UNTESTABLE, None, None, "no seed ran both arms")
    r = c.rules.rules()
    rules = Rules(noise=r.noise, single_seed_bound=r.single_seed_bound)
    out = compare([a[s] - b[s] for s in seeds], 0.0, higher_is_better=c.higher_is_better, rules=rules,
                  claim=c.claim, tolerance=c.tolerance)
    # compare() saw the differences as A: its "seed spread" is theirs (probe AZ: the page said seed spread)
    why = out.reason.replace("seed spread", "spread of the per-seed differences", 1)
    return Outcome(out.verdict, out.margin, out.band, f"paired over seeds {seeds}: {why}")


def _fmt(v: list[float] | float | None) -> str:
    if v is None:
        return "–"
    if isinstance(v, (int, float)):
        return f"{v:.4g}"
    if not v:
        return "not run"
    if not all(map(math.isfinite, v)):  # a diverged run's seed (a NaN mean would print as "nan [nan, nan]")
        return f"non-finite in {sum(not math.isfinite(x) for x in v)} of {len(v)} seed(s)"
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
