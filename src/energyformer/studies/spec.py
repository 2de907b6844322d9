"""A study is data (issue 22): ``studies/<name>.yaml`` = base configs × override grid × seeds × scales,
the metrics read from every finished run, and the paper's claims with declared verdict rules.

    title: ...                     # the page's title
    paper: {seed: 003_..., section: "§4, Table 2"}
    page: docs/results/eqt         # the page folder: <page>/<scale>/results.json, README.md, figures
    render: module:function        # page text and figures from the committed records (per paper)
    runs:
      config: {model: {baseline: eqt/baseline, eqt: eqt/eqt}}   # a config name, or an axis of them
      grid: {length: {"64": [task.data.length=64], ...}}          # named axes: label -> dotted overrides
      overrides: [...]                                           # applied to every run ({seed}: the run's seed)
      name: "L{length}_seed{seed}_{model}"                       # the run name (its run directory)
    seeds: [0, 1]
    scales: {cpu: {overrides: [...], only: {length: ["64"]}, seeds: [0]}, gpu: {...}}
                                   # only: one selection, or a list of them (the union: e.g. every rate
                                   # for a few configs plus one rate for the rest)
    metrics: {accuracy: module:function}       # eval hooks: a finished run -> JSON numbers
    probes: {memory: module:function}          # measurements that are not training runs: scale -> JSON
    claims: [{id, text, paper: {value, source}, metric, a, b, higher_is_better, claim, tolerance,
              rules: {noise, single_seed_bound, chance, floor, at_band, gate}, per, untestable}]

A claim's arm (``a``/``b``) is a grid cell selection ``{where: {axis: label | [labels]}, metric: ...,
agg: mean | min | max | range}`` (per seed: the selected runs aggregated to one, the mean by default), a
probe's measurement ``{probe: NAME, metric: ...}`` (``probes:`` are stages that are not training runs) or a
fixed number ``{value: x}``. An arm over runs may ``reduce`` one axis by a function (per seed,
``fn(labels, values)``: the best of several configs, an interpolated optimum over learning rates) and
subtract another selection (``minus``: a gain). A label of the config axis may carry overrides:
``{label: {config: NAME, overrides: [...]}}`` (runs that are not a product grid). ``per: AXIS`` evaluates
the claim once per label of that axis. :func:`load_study` validates it all; every mistake is one
:class:`ConfigError` naming the key, the value and what is allowed.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from ..analysis.verdicts import Rules
from ..utils.config import ConfigModel, load_config, read_yaml
from ..utils.fields import Seed
from ..utils.validate import ConfigError
from ..utils.yaml_files import library_folder
from .page_spec import HOOK_RE, BlockSpec, Hook, ReduceSpec, page_axes

SCALES = ("cpu", "gpu")


def _distinct(v: list[int] | None) -> list[int] | None:
    """A seed listed twice would train one run twice, two processes on one folder (the CLI's --seeds refuses it)."""
    if v is not None and len(set(v)) < len(v):
        raise ValueError("a seed is given twice (each seed once)")
    return v


def _labels(v: dict, where: str) -> dict:
    """YAML may give a label as a number (``64:``): labels are strings. Two keys that are one string (``16`` and
    ``"16"``, ``0.004`` and ``"0.004"``) are refused naming both and ``where`` (the axis): the second silently
    replaced the first, so runs named length 16 trained at the other key's length."""
    out: dict = {}
    first: dict = {}
    for k, val in v.items():
        if str(k) in out:
            head = f"{where}: " if where else ""
            raise ValueError(f"{head}labels {first[str(k)]!r} and {k!r} are the same label {str(k)!r} "
                             "(give each label once)")
        out[str(k)], first[str(k)] = val, k
    return out


def _some(v, where: str):
    """An empty axis or selection ran nothing and said nothing (the product over it is empty): refused."""
    if isinstance(v, (dict, list)) and not v:
        raise ValueError(f"{where} = {v!r}: give at least one label")
    return v


class PaperRef(ConfigModel):
    """Where in the seed paper the study's results are."""

    seed: str
    """the seed file under specs/ (e.g. 003_equilibrium_transformer)"""
    section: str
    """section, table or figure (e.g. '§4, Table 2')"""


class ConfigCell(ConfigModel):
    """A label of the config axis that carries overrides of its own (runs that are not a product grid:
    e.g. a sweep of one model beside the main models)."""

    config: str
    """a config name under configs/"""
    overrides: list[str] = Field(default_factory=list)
    """dotted overrides of this label's runs (after the study's, before the grid cells')"""


class RunsSpec(ConfigModel):
    """The runs: base config(s) × the override grid (× seeds × scales, declared beside it)."""

    config: str | dict[str, dict[str, str | ConfigCell]]
    """a config name under configs/, or {axis: {label: config name | {config, overrides}}} (the configs
    are a grid axis; a label may carry its own overrides)"""
    grid: dict[str, dict[str, list[str]]] = Field(default_factory=dict)
    """named axes: {axis: {label: [dotted overrides]}}"""
    overrides: list[str] = Field(default_factory=list)
    """dotted overrides applied to every run; ``{seed}`` in any override (here, in the grid or a scale)
    is the run's seed (e.g. ``task.data_seed={seed}``: a fresh data set per seed)"""
    name: str
    """run-name template over the axes and {seed}, e.g. '{corpus}-{variant}-s{seed}'"""

    @field_validator("grid", mode="before")
    @classmethod
    def _str_labels(cls, v):
        return {a: _labels(_some(vals, f"axis {a!r}"), f"axis {a!r}") if isinstance(vals, dict) else vals
                for a, vals in v.items()} if isinstance(v, dict) else v

    @field_validator("config", mode="before")
    @classmethod
    def _one_config_axis(cls, v):
        if not isinstance(v, dict):
            return v
        if len(v) != 1:
            raise ValueError(f"{sorted(v)}: give one axis of configs ({{axis: {{label: config}}}}) or one name")
        out = {}
        for a, vals in v.items():
            if not isinstance(vals, dict):
                raise ValueError(f"axis {a!r}: give {{label: config name or {{config: NAME, overrides: [...]}}}}")
            out[a] = {}
            for lab, c in _labels(_some(vals, f"axis {a!r}"), f"axis {a!r}").items():
                if isinstance(c, dict):
                    try:
                        c = load_config(ConfigCell, c)
                    except ConfigError as err:
                        raise ValueError(f"{a}.{lab}: {err}") from None
                out[a][lab] = c
        return out

    @property
    def axes(self) -> dict[str, list[str]]:
        """Every axis with its labels, the config axis first."""
        out = {a: list(vals) for a, vals in self.config.items()} if isinstance(self.config, dict) else {}
        out.update({a: list(vals) for a, vals in self.grid.items()})
        return out

    @model_validator(mode="after")
    def _template(self) -> RunsSpec:
        cfg_axes = list(self.config) if isinstance(self.config, dict) else []
        if set(cfg_axes) & set(self.grid):
            raise ValueError(f"axis {cfg_axes[0]!r} is both the config axis and a grid axis")
        names = set(re.findall(r"{(\w+)}", self.name))
        need = set(self.axes) | {"seed"}
        if names - need or need - names:
            raise ValueError(f"name = {self.name!r}: must use each of {{{'}, {'.join(sorted(need))}}} "
                             f"once and nothing else (so every run has its own directory)")
        return self


class ScaleSpec(ConfigModel):
    """One scale (cpu: minutes on a laptop; gpu: about 20 minutes of one H100)."""

    overrides: list[str] = Field(default_factory=list)
    """dotted overrides of this scale, after the study's"""
    seeds: list[Seed] | None = Field(None, min_length=1)
    """this scale's seeds (default: the study's): distinct, each in 0..2^63-1 (as --seeds); an empty list is refused
    (it fell back to the study's seeds, silently)"""
    only: dict[str, list[str]] | list[dict[str, list[str]]] = Field(default_factory=dict)
    """{axis: [labels]}: the grid cells this scale runs (default: all); a list of such selections runs
    their union (a cell runs when it matches any of them); a selection may also name ``seed: [...]``
    (those cells run only with those seeds, e.g. a second seed for two configs)"""
    note: str = ""
    """a sentence for the page: what this scale is sized for"""

    _seeds = field_validator("seeds")(_distinct)

    @field_validator("only", mode="before")
    @classmethod
    def _str(cls, v):
        def one(d):
            return {a: [str(x) for x in _some(vals, a)] for a, vals in d.items()} if isinstance(d, dict) else d

        return [one(d) for d in v] if isinstance(v, list) else one(v)

    @property
    def selections(self) -> list[dict[str, list[str]]]:
        """``only`` as a list of selections (empty: every cell)."""
        return [s for s in (self.only if isinstance(self.only, list) else [self.only]) if s]

    def runs_cell(self, cell: dict[str, str], seed: int | None = None) -> bool:
        """Whether this scale runs the grid cell ``cell`` (with ``seed``: a selection's ``seed`` list
        includes it) — it matches one of the selections, or there are none."""
        sels = self.selections
        return not sels or any(all((seed is None or str(seed) in labels) if a == "seed" else cell[a] in labels
                                   for a, labels in s.items()) for s in sels)


class GateSpec(ConfigModel):
    """A claim about a trained model is UNTESTABLE while arm A's model sits at chance on another metric (Hyper-SET's
    Fig. 5/6 energy and geometry claims on a model whose cell accuracy never left chance)."""

    metric: str
    """the metric that says whether A's model learned (read from A's runs, e.g. extrapolation.cell_L)"""
    chance: float
    """that metric at chance"""
    at_band: float = Field(0.0, ge=0)
    """how close to chance counts as 'at' it"""


class RulesSpec(ConfigModel):
    """``verdicts.Rules`` of one claim (metric units), and an optional ``gate`` (:class:`GateSpec`)."""

    noise: float | None = Field(None, ge=0)
    """a declared noise band (None: the seeds' own spread only)"""
    single_seed_bound: float | None = Field(None, ge=0)
    """with one seed a side, the margin that decides (None: one seed never decides)"""
    chance: float | None = None
    """the metric at chance"""
    floor: float | None = None
    """the metric's floor"""
    at_band: float = Field(0.0, ge=0)
    """how close to chance / floor counts as 'at' it"""

    gate: GateSpec | None = None
    """UNTESTABLE while A's model is at chance on another metric: {metric, chance, at_band}"""

    def rules(self) -> Rules:
        return Rules(**self.model_dump(exclude={"gate"}))


class ArmSpec(ConfigModel):
    """One side of a claim: grid cells (per seed reduced over them, the mean by default), a probe's
    measurement, or a fixed number."""

    where: dict[str, str | list[str]] | None = None
    """{axis: label or [labels]}: the runs on this side (axes not named: every label)"""
    metric: str | None = None
    """the metric of this side (default: the claim's), a dotted path into a run's metrics"""
    agg: Literal["mean", "min", "max", "range"] = "mean"
    """per seed, how the selected runs' values become one (range: max - min, e.g. over a learning-rate sweep)"""
    probe: str | None = None
    """a probe of the study (a measurement that is not a training run): the metric is a dotted path into it"""
    value: float | None = None
    """a fixed number (e.g. the paper's value) instead of runs"""
    reduce: ReduceSpec | None = None
    """per seed, reduce the selected labels of one axis by a function (best of, interpolated optimum)"""
    minus: ArmSpec | None = None
    """per seed, subtract this selection's value (a difference, e.g. the gain of a change); only the
    seeds both ran count"""

    @field_validator("where", mode="before")
    @classmethod
    def _str(cls, v):
        if isinstance(v, dict):
            return {a: [str(x) for x in _some(vals, a)] if isinstance(vals, list) else str(vals)
                    for a, vals in v.items()}
        return v

    @model_validator(mode="after")
    def _one(self) -> ArmSpec:
        if sum(x is not None for x in (self.where, self.value, self.probe)) != 1:
            raise ValueError("give one of where: {axis: label} (runs), probe: NAME or value: NUMBER")
        if self.where is None and (self.reduce is not None or self.minus is not None):
            raise ValueError("reduce / minus apply to an arm over runs (where:), not to value: or probe:")
        return self

    def selections(self):
        """This arm and the arms it subtracts, each once."""
        arm = self
        while arm is not None:
            yield arm
            arm = arm.minus


class PaperValue(ConfigModel):
    value: float | str | None = None
    """the paper's number (or its words when it gives none)"""
    source: str
    """table / figure / section; 'read off Fig. N' when read off a figure"""
    by: dict[str, float | str] = Field(default_factory=dict)
    """the paper's value per label of the claim's ``per`` axis"""

    @field_validator("by", mode="before")
    @classmethod
    def _str(cls, v):
        return _labels(v, "") if isinstance(v, dict) else v


class ClaimSpec(ConfigModel):
    """One claim of the paper with the rule that decides it here."""

    id: str
    text: str
    paper: PaperValue
    metric: str | None = None
    """the metric (dotted path into a run's metrics) both arms read unless they name their own"""
    a: ArmSpec | None = None
    b: ArmSpec | None = None
    higher_is_better: bool = True
    claim: Literal["better", "not_worse", "equal"] = "better"
    tolerance: float = Field(0.0, ge=0)
    """for not_worse / equal, in metric units"""
    rules: RulesSpec = Field(default_factory=RulesSpec)
    per: str | None = None
    """an axis: one verdict per label of it"""
    paired: bool = False
    """both arms ran on the same seeds (same data, same initial weights): decide on the per-seed
    differences A - B, whose spread is the noise band (at chance / floor is still judged on A and B)"""
    untestable: str | None = None
    """the reason this claim cannot be tested here (scale, data, or it holds by construction)"""

    @model_validator(mode="after")
    def _arms(self) -> ClaimSpec:
        if self.untestable is None:
            if self.a is None or self.b is None:
                raise ValueError(f"claim {self.id!r}: needs arms a and b (or untestable: REASON)")
            for arm in (self.a, self.b):
                if arm.value is None and (arm.metric or self.metric) is None:
                    raise ValueError(f"claim {self.id!r}: an arm over runs or a probe needs a metric")
            if self.a.value is not None:
                raise ValueError(f"claim {self.id!r}: arm a must be runs (where:) or a probe, b may be a number")
            # accepted and ignored, these silently decided another rule than the one written
            if "tolerance" in self.model_fields_set and self.claim == "better":
                raise ValueError(f"claim {self.id!r}: tolerance = {self.tolerance:g} applies to claim: not_worse or "
                                 "equal, not better (its band is the seeds' spread and rules.noise)")
            if self.paired and self.b.value is not None:
                raise ValueError(f"claim {self.id!r}: paired: true needs per-seed values on both sides; b is a "
                                 f"fixed value ({self.b.value:g}): drop paired")
        return self

    def admits(self, label: str) -> bool:
        """Whether both arms' ``where`` admit ``label`` of the claim's ``per`` axis (an arm that names no label of it
        admits all). The row's label replaced the arm's own selection of that axis, so a claim restricted to
        ``length: [64, …]`` still had a row, with data, at length 16."""
        for arm in (self.a, self.b):
            chosen = (arm.where or {}).get(self.per) if arm is not None and arm.value is None else None
            if chosen is not None and label not in [str(x) for x in (chosen if isinstance(chosen, list) else [chosen])]:
                return False
        return True


class StudySpec(ConfigModel):
    """``studies/<name>.yaml``: see the module docstring."""

    title: str
    paper: PaperRef
    page: str
    """the page folder, relative to the repository (docs/results/<x>)"""
    render: Hook | None = None
    """module:function(out, study, name, scale, records, claim rows) -> rendered .md paths; without it the
    page is ``report`` rendered by :mod:`energyformer.studies.page`"""
    report: dict[str, list[BlockSpec]] = Field(default_factory=dict)
    """{file: [blocks]}: the scale page as data (:mod:`energyformer.studies.page_spec`)"""
    runs: RunsSpec
    seeds: list[Seed] = Field(min_length=1)
    """distinct, each in 0..2^63-1 (as --seeds)"""
    scales: dict[str, ScaleSpec]
    metrics: dict[str, str] = Field(default_factory=dict)
    """{name: module:function}: eval hooks run on every finished run"""
    probes: dict[str, str] = Field(default_factory=dict)
    """{name: module:function}: measurements that are not training runs, fn(scale) -> JSON (None: not
    recorded), made once per scale and recorded under ``probes`` in results.json"""
    claims: list[ClaimSpec] = Field(default_factory=list)

    _seeds = field_validator("seeds")(_distinct)

    @field_validator("metrics", "probes")
    @classmethod
    def _hooks(cls, v, info):
        for k, h in v.items():
            if not HOOK_RE.match(h):
                raise ValueError(f"{info.field_name[:-1]} {k!r} = {h!r}: must be module:function")
        return v

    @field_validator("scales")
    @classmethod
    def _scales(cls, v):
        bad = [s for s in v if s not in SCALES]
        if bad:
            raise ValueError(f"scale {bad[0]!r}: allowed {', '.join(SCALES)}")
        return v

    @model_validator(mode="after")
    def _refs(self) -> StudySpec:
        axes = self.runs.axes
        for s, sc in self.scales.items():
            for sel in sc.selections:
                for a, labels in sel.items():
                    if a != "seed":
                        _check_labels(f"scales.{s}.only", axes, a, labels)
        if (self.render is None) == (not self.report):
            raise ValueError("give exactly one of render (a page function) or report (the page as blocks)")
        for f, blocks in self.report.items():
            for i, b in enumerate(blocks):
                for key, axis in page_axes(b):
                    if axis != "seed" and axis not in axes:
                        raise ValueError(f"report.{f}[{i}].{key} = {axis!r}: allowed axes seed, {', '.join(axes)}")
        ids = [c.id for c in self.claims]
        if len(set(ids)) != len(ids):
            raise ValueError(f"claims: duplicate id among {ids}")
        for c in self.claims:
            if c.per is not None and c.per not in axes:
                raise ValueError(f"claims[{c.id}].per = {c.per!r}: allowed axes {', '.join(axes)}")
            if c.per is not None and c.untestable is None and not any(c.admits(lab) for lab in axes[c.per]):
                # the claim had no row at all, silently: not on the page, not in the index's count (probe AZ)
                raise ValueError(f"claims[{c.id}].per = {c.per!r}: no label of it is selected by both arms (each "
                                 f"row compares A and B at one {c.per}), so the claim would have no row; per needs "
                                 f"an axis the arms share (or drop per)")
            for side, top in (("a", c.a), ("b", c.b)):
                for depth, arm in enumerate(top.selections() if top else ()):
                    key = f"claims[{c.id}].{side}" + ".minus" * depth
                    for a, labels in (arm.where or {}).items():
                        _check_labels(f"{key}.where", axes, a, labels if isinstance(labels, list) else [labels])
                    if arm.reduce is not None and arm.reduce.over not in axes:
                        raise ValueError(f"{key}.reduce.over = {arm.reduce.over!r}: allowed axes {', '.join(axes)}")
                    if arm.probe is not None and arm.probe not in self.probes:
                        raise ValueError(f"{key}.probe = {arm.probe!r}: allowed "
                                         f"{', '.join(self.probes) or '(no probes declared)'}")
                    m = (arm.metric or top.metric or c.metric) if arm.where is not None else None
                    if m is not None and m.split(".")[0] not in self.metrics and m.split(".")[0] not in RUN_FIELDS:
                        raise ValueError(f"{key}.metric = {m!r}: allowed "
                                         f"{', '.join(sorted(self.metrics) + list(RUN_FIELDS))} (dotted paths inside them)")
        return self


#: numbers every run record carries, usable as claim metrics beside the declared ones
RUN_FIELDS = ("tokens_per_s", "seconds", "params")


def _check_labels(key: str, axes: dict[str, list[str]], axis: str, labels: list[str]) -> None:
    if axis not in axes:
        raise ValueError(f"{key}: axis {axis!r} unknown; allowed {', '.join(axes) or '(no axes)'}")
    for lab in labels:
        if lab not in axes[axis]:
            raise ValueError(f"{key}.{axis} = {lab!r}: allowed {', '.join(axes[axis])}")


# ----------------------------------------------------------------------------- files
def studies_dir() -> Path:
    """The library's ``studies/`` folder (beside ``configs/``, found the same way: ``utils.yaml_files.library_folder``),
    or ``./studies``."""
    here = library_folder("studies")
    return here if here.is_dir() else Path("studies")


def known_studies() -> list[str]:
    return sorted(p.stem for p in studies_dir().glob("*.yaml"))


def study_path(name: str) -> Path | None:
    p = studies_dir() / f"{name}.yaml"
    return p if p.exists() else None


def load_study(name_or_path: str | Path) -> StudySpec:
    """A validated study from ``studies/<name>.yaml`` or a YAML path."""
    p = Path(name_or_path)
    if p.suffix not in (".yaml", ".yml"):
        found = study_path(str(name_or_path))
        if found is None:
            raise ConfigError(f"study {str(name_or_path)!r} not found (one of: {', '.join(known_studies())})")
        p = found
    try:
        return load_config(StudySpec, read_yaml(p))
    except ConfigError as err:
        raise ConfigError(f"{p.name}: {err}") from None
