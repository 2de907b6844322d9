"""A study's runs (:func:`expand`): its grid, restricted by the scale's and the command line's ``only``, times
its seeds, each a :class:`RunPlan` (name, cell, seed, base config, overrides in the order they apply); a
``--set`` key that a run's cell or seed decides is refused (:func:`_check_sets`). The study file's format is
:mod:`.spec`'s."""

from __future__ import annotations

import itertools
import warnings
from dataclasses import dataclass, field

from ..utils.overrides import override_key
from ..utils.validate import ConfigError
from .spec import ConfigCell, ScaleSpec, StudySpec, _check_labels


@dataclass(frozen=True)
class RunPlan:
    """One run of a study: its cell (axis -> label), seed, base config and overrides."""

    name: str
    cell: dict[str, str]
    seed: int
    config: str
    overrides: list[str] = field(default_factory=list)


def expand(spec: StudySpec, scale: str, *, seeds: list[int] | None = None,
           only: dict[str, list[str]] | None = None, sets: list[str] = ()) -> list[RunPlan]:
    """Every run of ``scale``: the grid (restricted by the scale's and the caller's ``only``) × seeds.

    Overrides in order: the study's, the cell's (a config label's own, then the grid axes'), the scale's, ``sets``
    (the command line), then ``train.seed`` and ``name``. ``seeds`` (command line) wins over the scale's and the
    study's. A ``sets`` key that a run's cell or seed decides is refused (:func:`_check_sets`)."""
    if scale not in spec.scales:
        raise ConfigError(f"--scale {scale!r}: this study has {', '.join(spec.scales)}")
    sc = spec.scales[scale]
    axes = spec.runs.axes
    for a, labels in (only or {}).items():
        try:
            _check_labels("--only", axes, a, labels)
        except ValueError as err:
            raise ConfigError(str(err)) from None
    if seeds is not None and len(set(seeds)) < len(seeds):  # the same run twice (two processes on one folder)
        raise ConfigError(f"--seeds {' '.join(map(str, seeds))}: a seed is given twice")
    pick = {a: [lab for lab in labels if lab in (only or {}).get(a, labels)] for a, labels in axes.items()}
    cfg_axis = next(iter(spec.runs.config)) if isinstance(spec.runs.config, dict) else None
    out = []
    for seed in seeds if seeds is not None else (sc.seeds if sc.seeds is not None else spec.seeds):
        for combo in itertools.product(*pick.values()):
            cell = dict(zip(pick, combo))
            if not sc.runs_cell(cell, seed):
                continue
            config = spec.runs.config[cfg_axis][cell[cfg_axis]] if cfg_axis else spec.runs.config
            cell_over = [o for a, lab in cell.items() if a in spec.runs.grid for o in spec.runs.grid[a][lab]]
            _check_sets(spec, sc, cell, config, sets)
            _warn_scale_replaces_recipe(spec, scale, cell, config)
            if isinstance(config, ConfigCell):
                config, cell_over = config.config, [*config.overrides, *cell_over]
            name = spec.runs.name.format(seed=seed, **cell)
            over = [o.replace("{seed}", str(seed)) for o in (*spec.runs.overrides, *cell_over, *sc.overrides, *sets)]
            out.append(RunPlan(name, cell, seed, config, [*over, f"train.seed={seed}", f"name={name}"]))
    if not out and only:  # e.g. a label the scale does not run: it ran nothing and said nothing
        said = " ".join(f"{a}={','.join(v)}" for a, v in only.items())
        raise ConfigError(f"--only {said}: selects no run of scale {scale!r} (its cells and seeds exclude it)")
    return out


def scale_labels(spec: StudySpec, scale: str, axis: str) -> list[str]:
    """The labels of ``axis`` that ``scale`` runs (any seed), in the axis's order: a claim ``per`` that axis has
    one row for each, run or not (:func:`.claims.evaluate`)."""
    sc, axes = spec.scales[scale], spec.runs.axes
    return [lab for lab in axes[axis]
            if any(sc.runs_cell({**dict(zip(axes, combo)), axis: lab})
                   for combo in itertools.product(*(labs if a != axis else [lab] for a, labs in axes.items())))]


def _clash(k: tuple[str, ...], o: str) -> bool:
    """Whether the key ``k`` is override ``o``'s key, under it or above it."""
    return k[:len(override_key(o))] == override_key(o) or override_key(o)[:len(k)] == k


def _warn_scale_replaces_recipe(spec: StudySpec, scale: str, cell: dict[str, str], config: str | ConfigCell) -> None:
    """Warn when the scale's overrides (applied after the cell's) give a key of a config label's own overrides another
    value: the label's recipe (``train.steps=1`` for an untrained control) was replaced silently (probe AZ), where
    ``--set`` in the same place warns. The same value twice says nothing."""
    if not isinstance(config, ConfigCell):
        return
    a = next(iter(spec.runs.config))
    for o in spec.scales[scale].overrides:
        for mine in config.overrides:
            if _clash(override_key(o), mine) and o != mine:
                warnings.warn(f"scales.{scale}.overrides {o} replaces run label {a}={cell[a]}'s own {mine} (the "
                              "scale's overrides apply after a label's; set the key per label, or not in the scale)",
                              stacklevel=4)


def _check_sets(spec: StudySpec, sc: ScaleSpec, cell: dict[str, str], config: str | ConfigCell,
                sets: list[str]) -> None:
    """Refuse a ``--set`` key equal to, under or above one the run's grid axes, its seed (``{seed}``, ``train.seed``)
    or ``name`` set: the grid's overrides apply before ``--set``, which won silently (``--only kernel=rbf --set
    task.kernel.name=matern`` trained runs named rbf on the Matérn kernel, shown as rbf); train.seed and name apply
    after it, which was lost silently. A key of a config label's own overrides (its recipe: ``train.steps``, a
    learning rate) is replaced with a warning naming both values, as ``--set`` replaces a config file's: a shortened
    run stays possible, and the page marks such records out of date (their config is not the study's)."""
    owned = [(o, f"the grid axis {a!r} sets this key; use --only {a}=...")
             for a, lab in cell.items() if a in spec.runs.grid for o in spec.runs.grid[a][lab]]
    owned += [(o, f"the study sets this key from each run's seed ({o}); use --seeds")
              for o in [*spec.runs.overrides, *sc.overrides] if "{seed}" in o]
    owned += [("train.seed=", "the study sets each run's seed; use --seeds"), ("name=", "runs.name names each run")]
    recipe = []
    if isinstance(config, ConfigCell):   # a config label with its own overrides
        a = next(iter(spec.runs.config))
        recipe = [(o, f"run label {a}={cell[a]} sets {o} itself") for o in config.overrides]

    for item in sets:
        k = override_key(item)
        for o, why in owned:
            if _clash(k, o):
                raise ConfigError(f"--set {'.'.join(k)}: {why}")
        for o, why in recipe:
            if _clash(k, o):
                warnings.warn(f"--set {item}: replaces a study recipe value ({why}); the page marks these runs "
                              "out of date", stacklevel=4)
