"""The page of a study as data (issue 22): blocks of text, setup lists, tables, plots and the claims.

A study's ``report:`` maps a file of the scale's page folder to its blocks, in order::

    report:
      README.md:
        - text: "Why T4 / T8 come out worse than T2: [findings.md](findings.md)."
        - setup: {optimizer: resolved.train.optimizer.kind, lr: resolved.train.lr}
        - table:
            title: Table 3
            rows: [kernel, model]               # one row per present combination, in declared order
            columns:
              - {label: Test RMSE (ours), metric: fit.test_rmse, agg: mean_std, fmt: .4f, best: min}
              - {label: Test RMSE (paper), paper: test}
            paper: [{kernel: rbf, model: Plain, test: "0.0158 ± 0.0024"}, ...]
            paper_source: "seed 000, Appendix E, Table 3"
        - plot: {file: rmse.png, alt: test RMSE against T, y: fit.test_rmse, x: steps, series: kernel}
        - claims: "Test RMSE over the repetitions."
        - section: module:function            # markdown a table cannot say: fn(ctx) -> str
        - figure: {fn: module:function, file: recursion.png, alt: ...}   # fn(ctx, path) -> path | None
        - include: benchmark.md               # a committed file of the page folder, verbatim

Values are dotted paths into a run record (:func:`energyformer.studies.claims.metric_value`): a metric
(``fit.test_rmse``) or a record field (``seconds``, ``params.total``, ``resolved.train.lr``, ``seed``,
``cell.model``). The paper's numbers are rows of ``paper`` (keyed by the row axes) and never measured.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field, model_validator

from ..utils.config import ConfigModel


def _labels(v):
    """Axis labels are strings (YAML reads 64 as an int); anything but a mapping is left to the type check."""
    if not isinstance(v, dict):
        return {} if v is None else v
    return {k: [str(x) for x in x_] if isinstance(x_, list) else str(x_) for k, x_ in v.items()}


#: a selection {axis: label or [labels]}; labels read as strings
Where = Annotated[dict[str, str | list[str]], BeforeValidator(_labels)]


#: a hook: ``module:function``
HOOK_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def _hook(v: str) -> str:
    """A function's ``module:function`` name, checked when the study loads (the error names key and value)."""
    if not HOOK_RE.match(v):
        raise ValueError("must be module:function")
    return v


#: ``module:function``: a reducer's, a figure's, a section's, the page's render
Hook = Annotated[str, AfterValidator(_hook)]


class ReduceSpec(ConfigModel):
    """Reduce one axis of a selection, per seed, to one number (a claim arm's ``reduce`` and a page column's)."""

    over: str
    """the axis whose labels are reduced (e.g. lr, model)"""
    fn: Hook
    """module:function(labels: list[str], values: list[float]) -> float | None (None: this seed has no
    value), given each selected label of ``over`` with its value (the mean over the other axes)"""


AGGS = ("mean", "mean_std", "mean_range", "min", "max", "first", "seeds", "n", "sum")


class ColumnSpec(ConfigModel):
    """One column: a measurement aggregated over the row's runs, or a column of the paper's rows."""

    label: str
    metric: str | None = None
    #: over the row's runs (one per seed, more when the row leaves an axis open): mean, mean ± sample std,
    #: mean [min, max], min, max, the first value, one value per seed ("0.91 / 0.93"), the number of runs, sum
    agg: Literal[AGGS] = "mean"  # type: ignore[valid-type]
    #: a Python format spec (".4f", ".1%", ",d"), "si" (22.67K, Table 3 style) or "text" (str()); lists are
    #: formatted element-wise and joined by ", "
    fmt: str = ".4g"
    scale: float = 1.0
    #: a paired difference: the same row with these labels replaced, per seed, before aggregating
    minus: dict[str, str] | None = None
    #: the paper's value: this key of the paper row matching the row's labels ("–" when none)
    paper: str | None = None
    #: bold the best row's value (within a group)
    best: Literal["min", "max"] | None = None
    #: a selection of this column merged into the row's (e.g. one column per learning rate)
    where: Where = Field(default_factory=dict)
    #: per seed, reduce an axis the row leaves open by a claim reducer: {over: lr, fn: module:function}
    reduce: ReduceSpec | None = None
    #: a curve (a list of dicts, or a dict of dicts keyed by x): the list of its values under this key
    key: str | None = None
    #: a list of numbers: the mean of its last ``tail`` values (e.g. the final training loss)
    tail: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _one(self) -> ColumnSpec:
        if (self.metric is None) == (self.paper is None):
            raise ValueError(f"column {self.label!r}: give exactly one of metric (ours) or paper (the paper's value)")
        return self


class TableSpec(ConfigModel):
    """Rows = the present combinations of ``rows`` (axes of the study, or ``seed``) among the runs ``where``
    selects; one table per label of ``group`` (under a ``###`` heading) when given."""

    title: str | None = None
    text: str = ""
    rows: list[str] = Field(default_factory=list)
    where: Where = Field(default_factory=dict)
    group: str | None = None
    columns: list[ColumnSpec] = Field(min_length=1)
    paper: list[dict[str, Any]] = Field(default_factory=list)
    paper_source: str = ""
    #: one row per key of the dict at this path (a metric of the row's runs, or ``probes.NAME``: a probe's
    #: measurements), shown in a last row column ``key_label``; column metrics are read inside the key's entry
    #: (an entry that is a number is the metric ``value``)
    keys: str | None = None
    key_label: str = "key"
    #: display names of row labels (axis labels or keys) on the page
    names: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _rows(self) -> TableSpec:
        if not self.rows and self.keys is None:
            raise ValueError("rows = []: a table needs rows (axes of the study) or keys (the keys of a dict)")
        return self


class PlotSpec(ConfigModel):
    """A line plot: ``y`` against ``x`` (an axis with numeric labels, or for curves a key of the list
    ``y`` names), one line per label of ``series``, one panel per label of ``panel``; mean over seeds with
    their min-max as a band; the paper's points (``paper``: rows with the series/panel labels, x and y)
    dashed beside ours."""

    file: str
    alt: str
    y: str
    x: str | None = None
    y_key: str | None = None          # curves: y is a list of dicts (or rows, or a dict of columns); plot d[y_key] against d[x]
    series: str | None = None
    panel: str | None = None
    where: Where = Field(default_factory=dict)
    scale: float = 1.0
    logx: bool = False
    logy: bool = False
    xlabel: str = ""
    ylabel: str = ""
    title: str = ""
    paper: list[dict[str, Any]] = Field(default_factory=list)
    paper_label: str = "paper"
    #: x ticks at exactly these values, labelled as written (e.g. a learning-rate grid on a log axis)
    xticks: list[float] | None = None
    x_start: float = 1.0              # a list of numbers is a curve over x_start, x_start + 1, ...
    smooth: int = Field(default=1, ge=1)   # curves: the mean of each run of ``smooth`` consecutive points
    hlines: list[float] = Field(default_factory=list)   # reference levels (chance, ln 2), dotted grey
    vline: str | None = None          # a dotted grey line at this x (a number) or at each value of this path
    pairs: bool = False               # y is a list of [x, y] pairs (a history)


class FigureSpec(ConfigModel):
    """A figure only Python can draw: ``fn(ctx, path) -> path | None`` (None: nothing to draw)."""

    fn: Hook
    file: str
    alt: str
    caption: str = ""


class BlockSpec(ConfigModel):
    """One block of a page; exactly one key."""

    text: str | None = None
    setup: dict[str, str] | None = None
    table: TableSpec | None = None
    plot: PlotSpec | None = None
    figure: FigureSpec | None = None
    claims: str | None = None
    section: Hook | None = None
    #: a committed file of the page folder, verbatim (e.g. a benchmark script's markdown output)
    include: str | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> BlockSpec:
        given = [k for k in type(self).model_fields if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"a page block has exactly one of {', '.join(type(self).model_fields)}; got "
                             f"{', '.join(given) or 'none'}")
        return self


def page_axes(b: BlockSpec) -> list[tuple[str, str]]:
    """(key, axis) of every axis a page block names: rows, group, series, panel, where."""
    out: list[tuple[str, str]] = []
    for kind in ("table", "plot"):
        part = getattr(b, kind)
        if part is None:
            continue
        names = ([("rows", a) for a in part.rows] + [("group", part.group)] if kind == "table"
                 else [("series", part.series), ("panel", part.panel)])
        out += [(f"{kind}.{k}", a) for k, a in names if a is not None]
        out += [(f"{kind}.where", a) for a in part.where]
        if kind == "table":
            out += [("table.columns.minus", a) for c in part.columns for a in (c.minus or {})]
            out += [("table.columns.where", a) for c in part.columns for a in c.where]
            out += [("table.columns.reduce.over", c.reduce.over) for c in part.columns if c.reduce]
    return out
