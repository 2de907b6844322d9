"""The one study runner (issue 22): every run of a study is ``experiment.run_experiment`` — no second
assembly of model and trainer, no private training or timing loop.

:func:`run_study` expands the grid (:func:`plan.expand`) and for each run

* **reuses** it when ``<out>/results.json`` holds its record with the same config hash (the hash of the
  run's full config except ``out_dir``; a changed config trains again, never silently reused) and made with the
  study's metric hooks (:func:`stale_hooks`: else its checkpoint is evaluated again; a change of code is not seen);
* **resumes** it when its run directory holds checkpoints of the same resolved config
  (``run_experiment(cfg, resume=True)``), else trains it from scratch (``overwrite=True``);
* then runs the study's metric functions (the eval hooks: ``fn(run: FinishedRun) -> JSON``) and records
  the run — cell, seed, config hash, device, hardware, scale, parameters, steps, seconds, tokens/s,
  metrics, hooks, package version — inserting it into results.json after each run under the page folder's lock
  (:func:`.records.update_results`: two processes writing one ``--out`` keep each other's records). A run whose
  training diverged (a non-finite loss) is a result, not an error: its record says ``diverged`` (and has no metrics);
* makes the study's probes (measurements that are not training runs, ``fn(scale) -> JSON``) not yet
  recorded under ``probes``.

First every function the study names is imported and every distinct run config's model built on the meta device
(:mod:`~energyformer.studies.preflight`), so such errors come before any run trains, not after the earlier ones.

``jobs > 1`` trains that many runs at once, each in its own (spawned) process with the machine's
threads split between them; only the parent writes results.json. SIGTERM or Ctrl-C (with any ``jobs``) stops
every run at a step boundary with its checkpoint saved and records those that finished
(:mod:`~energyformer.studies.scheduling`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from ..utils.config import hash_view, to_dict
from ..utils.validate import ConfigError
from .preflight import check_hooks, check_models, hook, study_file
from .scheduling import SeeTrainer, train_parallel, train_serial
from .plan import RunPlan, expand
from .records import FORMAT, MIGRATION_KEYS, is_migrated, load_results, save_results, update_results  # noqa: F401
from .spec import StudySpec


def config_hash(cfg) -> str:
    """A short hash of a run config, ``out_dir`` excluded (where a run lives does not change it), and options added
    since with the old behaviour as their default too while they hold it (``utils.config.hash_view``)."""
    d = hash_view(cfg)
    d.pop("out_dir", None)
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


def hardware(device: str) -> str:
    """One line naming the machine a run trained on."""
    if device.startswith("cuda") and torch.cuda.is_available():  # cuda:N names card N, not the current one
        return f"{torch.cuda.get_device_name(torch.device(device))} GPU, torch {torch.__version__}"
    return f"{platform.machine()} CPU, {torch.get_num_threads()} thread(s), torch {torch.__version__}"


@dataclass
class FinishedRun:
    """What a metric function sees: the run directory, its config and (lazily) the trained model."""

    run_dir: Path
    config: Any                      # RunConfig
    result: Any = None               # experiment.RunResult
    cell: dict[str, str] = field(default_factory=dict)   # the run's grid cell (axis -> label)
    out: Path | None = None          # the scale's page folder (results.json): where a hook may write figures
    _loaded: tuple | None = field(default=None, repr=False)
    memo: dict = field(default_factory=dict, repr=False)   # work the run's hooks share (e.g. one trajectory)

    def trained(self) -> tuple[Any, torch.nn.Module, Any]:
        """(resolved config, model in eval mode on the run's device, task), loaded once."""
        if self._loaded is None:
            from ..experiment import load_trained

            self._loaded = load_trained(self.run_dir, device=self.config.train.device)
        return self._loaded


def _config(plan: RunPlan, runs_dir: Path):
    from ..experiment import load_run_config

    return load_run_config(plan.config, [*plan.overrides, f"out_dir={runs_dir}"])


def _located_config(spec: StudySpec, name: str, scale: str, plan: RunPlan, runs_dir: Path, sets: list[str]):
    """:func:`_config`, its error prefixed with the study file and the key path of the override it names (a typo
    in a study's overrides read "unknown key 'train.eval_evry'" with nothing saying where it was written)."""
    try:
        return _config(plan, runs_dir)
    except ConfigError as err:
        raise ConfigError(f"{study_file(name)}: {_override_origin(spec, scale, plan, sets, str(err))}: {err}") from None


def _override_origin(spec: StudySpec, scale: str, plan: RunPlan, sets: list[str], message: str) -> str:
    """Where the override ``message`` names was written (``runs.overrides[0] = 'train.eval_evry=0'``, a config
    label's, a grid cell's, the scale's or ``--set``), with the run; every place this run's overrides come from
    where none is named."""
    from ..utils.overrides import override_key

    places = [("runs.overrides", spec.runs.overrides)]
    for axis, label in plan.cell.items():
        if axis in spec.runs.grid:
            places.append((f"runs.grid.{axis}.{label}", spec.runs.grid[axis][label]))
        elif isinstance(spec.runs.config, dict) and hasattr(spec.runs.config[axis][label], "overrides"):
            places.append((f"runs.config.{axis}.{label}.overrides", spec.runs.config[axis][label].overrides))
    places += [(f"scales.{scale}.overrides", spec.scales[scale].overrides), ("--set", list(sets))]
    found = []   # (where the message names its key, order, place): the first named is at fault (not "did you mean")
    for where, items in places:
        for i, item in enumerate(items):
            try:
                key = ".".join(override_key(item))
            except (ValueError, ConfigError):
                key = item
            at = min((j for j in (message.find(f"'{key}'"), message.find(f"{key} ")) if j >= 0), default=-1)
            if at >= 0:
                found.append((at, -len(found), f"--set {item}" if where == "--set" else f"{where}[{i}] = {item!r}"))
    if found:   # (of two that set one key the later applies: the one the value came from)
        return f"{min(found)[2]} (run {plan.name})"
    return f"run {plan.name} (config {plan.config}; overrides from " + ", ".join(w for w, v in places if v) + ")"


def resumes(cfg: Any, task: Any = None) -> bool:
    """Whether the run continues from a checkpoint in ``cfg.run_dir``: there is one and the config it was trained
    with is ``cfg`` resolved by its task (``task``: built from ``cfg`` when not given). A run of another config
    trains from scratch, overwriting it."""
    from ..experiment import build_task, load_run_dir_config, resolve
    from ..train import list_checkpoints

    if not list_checkpoints(cfg.run_dir):
        return False
    try:
        old, new = to_dict(load_run_dir_config(cfg.run_dir)), to_dict(resolve(cfg, task or build_task(cfg)))
    except (ConfigError, OSError, ValueError):
        return False
    return {**old, "out_dir": None} == {**new, "out_dir": None}  # a moved run folder resumes too


def train_one(plan: RunPlan, runs_dir: str, metrics: dict[str, str], scale: str, threads: int = 0,
              out: str | None = None) -> dict:
    """Train (or resume) one run with ``run_experiment``, run the metric hooks, return its record."""
    from ..experiment import build_task, run_experiment
    from ..train import TrainingDiverged, resolve_device

    if threads:
        torch.set_num_threads(threads)
    cfg = _config(plan, Path(runs_dir))
    task = build_task(cfg)
    resume = resumes(cfg, task)
    device = str(resolve_device(cfg.train.device))
    from .. import __version__

    head = {"cell": plan.cell, "seed": plan.seed, "config": plan.config, "overrides": plan.overrides,
            "config_hash": config_hash(cfg), "scale": scale, "device": device, "hardware": hardware(device),
            "metric_hooks": dict(metrics), "version": __version__}
    try:
        res = run_experiment(cfg, resume=resume, overwrite=not resume, task=task, callbacks=[SeeTrainer()])
    except TrainingDiverged as err:   # a result of the study (e.g. a learning rate too large), not an error
        return {**head, "diverged": str(err).split(". ")[0], "steps": err.step, "run_dir": str(cfg.run_dir),
                "resolved": {k: to_dict(cfg)[k] for k in ("task", "model", "train")}, "metrics": {}}
    finally:
        SeeTrainer.trainer = None
    run = FinishedRun(cfg.run_dir, cfg, res, dict(plan.cell), Path(out) if out else None)
    values = {name: hook(fn)(run) for name, fn in metrics.items()}
    resolved = to_dict(res.config) if res.config is not None else to_dict(cfg)
    return {**head,
            "params": res.params, "steps": int(res.final.get("step", cfg.train.steps)),
            "seconds": float(res.final.get("elapsed_s", res.seconds)), "tokens_per_s": res.tokens_per_s,
            "resumed": resume, "run_dir": str(cfg.run_dir),
            "resolved": {k: resolved[k] for k in ("task", "model", "train")},
            "metrics": {k: v for k, v in values.items() if v is not None}}


def _command_line_sets(plan: RunPlan, record: dict) -> list[str] | None:
    """The ``--set`` overrides ``record`` was made with beyond its run's own (``expand`` puts them between the
    study's overrides and the seed and name): [] for none; None where the study's own part differs."""
    rec, own, tail = record.get("overrides"), plan.overrides[:-2], plan.overrides[-2:]
    if not isinstance(rec, list) or len(rec) < len(plan.overrides) or rec[:len(own)] != own or rec[-2:] != tail:
        return None
    return rec[len(own):-2]


def _record_plans(spec: StudySpec, scale: str, runs: dict[str, dict]) -> dict[str, RunPlan]:
    """The scale's runs (name -> plan) at the seeds the records hold; none where the study no longer expands."""
    seeds = sorted({int(r["seed"]) for r in runs.values() if isinstance(r.get("seed"), int)})
    try:
        return {p.name: p for p in expand(spec, scale, seeds=seeds)} if seeds else {}
    except ConfigError:
        return {}


def record_sets(spec: StudySpec, scale: str | None, runs: dict[str, dict]) -> dict[str, tuple[str, ...] | None]:
    """Per record (name) the command-line ``--set`` overrides it was made with (:func:`_command_line_sets`; () for
    none), or None where the study's own overrides of that run differ from the record's (or the run is no longer one
    of the scale's): what a claim compares arms on (:mod:`.claims`). A record without an ``overrides`` list (a
    migrated one) is left out. ``scale`` None: each record's own."""
    plans: dict[str, dict[str, RunPlan]] = {}
    out: dict[str, tuple[str, ...] | None] = {}
    for key, r in runs.items():
        sc = scale or r.get("scale")
        if not isinstance(r.get("overrides"), list):
            continue
        if sc not in plans:
            plans[sc] = _record_plans(spec, sc, runs) if sc in spec.scales else {}
        plan = plans[sc].get(key)
        sets = _command_line_sets(plan, r) if plan is not None else None
        out[key] = tuple(sets) if sets is not None else None
    return out


def outdated_records(spec: StudySpec, scale: str, runs: dict[str, dict]
                     ) -> tuple[list[str], list[str], dict[str, list[str]]]:
    """(changed, outside, with_sets): the records (names) whose config differs from what the study resolves to now
    for the same run with the same command-line ``--set`` overrides — ``run_study`` would train them again (a
    changed default, recipe or config file) — those whose name is no longer a run of the scale's grid at their
    seed, and the others made with ``--set`` overrides (name -> overrides: the study's configuration alone was not
    what ran; ``reproduce`` with the same ``--set`` reuses them). Migrated records (no config hash) are none of
    these: they say so themselves."""
    plans = _record_plans(spec, scale, runs)
    changed, outside, with_sets = [], [], {}
    for key, r in runs.items():
        if is_migrated(r):
            continue
        if key not in plans or {a: str(v) for a, v in r.get("cell", {}).items()} != plans[key].cell:
            outside.append(key)  # (a record of the grid's name with other labels is no run of the grid either)
            continue
        plan, sets = plans[key], _command_line_sets(plans[key], r)
        if sets:  # the run as it was made: its own overrides with the record's --set between them
            plan = dataclasses.replace(plan, overrides=list(r["overrides"]))
        try:
            same = config_hash(_config(plan, Path("runs"))) == r.get("config_hash")
        except ConfigError:  # the study's config no longer loads for this run
            same = False
        if not same:
            changed.append(key)
        elif sets:
            with_sets[key] = sets
    return changed, outside, with_sets


def stale_hooks(spec: StudySpec, record: dict) -> str | None:
    """Why ``record``'s metrics are not the study's: its ``metric_hooks`` (name -> module:function, recorded since
    they were) differ from the study's ``metrics`` — a metric added, removed or pointed at another function — or
    None. A record made before hooks were recorded, or a diverged one (no metrics), is not judged; nor is a change
    inside a hook's code or the model's (the records hold the package version, not the code)."""
    hooks = record.get("metric_hooks")
    if not isinstance(hooks, dict) or "diverged" in record or hooks == spec.metrics:
        return None
    added = sorted(set(spec.metrics) - set(hooks))
    other = sorted(k for k in set(spec.metrics) & set(hooks) if spec.metrics[k] != hooks[k])
    gone = sorted(set(hooks) - set(spec.metrics))
    return "; ".join(f"{what} {', '.join(keys)}" for what, keys in (("without the metric(s)", added),
                     ("with another function for", other), ("with metric(s) no longer declared:", gone)) if keys)


def outdated_text(spec: StudySpec, scale: str, runs: dict[str, dict]) -> str:
    """One sentence for a page naming :func:`outdated_records` (up to five names each), or ''."""
    changed, outside, with_sets = outdated_records(spec, scale, runs)

    def names(keys: list[str]) -> str:
        return ", ".join(f"`{k}`" for k in keys[:5]) + (f" and {len(keys) - 5} more" if len(keys) > 5 else "")

    parts = []
    if changed:
        parts.append(f"{len(changed)} of these records were made with a configuration that differs from the one "
                     f"the study resolves to now, so `reproduce` would train them again ({names(changed)})")
    if outside:
        parts.append(f"{len(outside)} are not runs of the scale's current grid and seeds ({names(outside)})")
    hooks = [k for k, r in runs.items() if k not in changed and stale_hooks(spec, r)]
    if hooks:
        parts.append(f"{len(hooks)} were evaluated with other metric hooks than the study declares now, so "
                     f"`reproduce` would evaluate them again ({names(hooks)})")
    said = ""
    if with_sets:
        distinct = sorted({" ".join(f"--set {o}" for o in v) for v in with_sets.values()})
        said = (f" **Made with command-line overrides:** {len(with_sets)} of these records ran with `--set` beyond the "
                f"study's configuration ({names(list(with_sets))}): " + "; ".join(f"`{d}`" for d in distinct[:3])
                + (f" and {len(distinct) - 3} more" if len(distinct) > 3 else "") + ".")
    return ((("**Out of date:** " + "; ".join(parts) + ".") if parts else "") + said).strip()


def run_study(spec: StudySpec, name: str, scale: str, out: Path, runs_dir: Path, *, jobs: int = 1,
              seeds: list[int] | None = None, only: dict[str, list[str]] | None = None, sets: list[str] = (),
              log: Callable[[str], None] = print) -> dict:
    """Every run of the study at ``scale`` not already recorded in ``out/results.json``; returns the records."""
    if jobs < 1:
        raise ConfigError(f"--jobs {jobs}: must be >= 1")
    plans = expand(spec, scale, seeds=seeds, only=only, sets=list(sets))
    path = out / "results.json"
    data = load_results(path, name, scale)
    from ..train import checkpoint_step, list_checkpoints

    check_hooks(spec, name)  # every function the study names imports, before any run trains
    todo, steps, at, cfgs = [], {}, {}, {}
    for p in plans:
        cfgs[p.name] = cfg = _located_config(spec, name, scale, p, runs_dir, list(sets))
        h, steps[p.name] = config_hash(cfg), cfg.train.steps
        old = data["runs"].get(p.name)
        stale = stale_hooks(spec, old) if old is not None and old.get("config_hash") == h else None
        if old is not None and old.get("config_hash") == h and not stale:
            log(f"== {p.name}: reusing its record (config unchanged)")
        else:
            if stale:   # its checkpoint is evaluated again (trained again only where it is gone)
                log(f"== {p.name}: its record was made {stale}: evaluating it again")
            elif old is not None:
                log(f"== {p.name}: its config changed since it was recorded: training it again")
            saved = list_checkpoints(cfg.run_dir)   # a run that stopped before it was recorded continues
            at[p.name] = checkpoint_step(saved[-1]) if saved and resumes(cfg) else -1 if saved else 0
            todo.append(p)
    check_models([(p.name, cfgs[p.name]) for p in todo])  # every model builds (meta device), before any trains
    t0, done = time.perf_counter(), 0

    def finish(p: RunPlan, rec: dict) -> None:
        nonlocal done
        # re-read under the page folder's lock: another process may have recorded runs since (records.py)
        update_results(path, data, lambda d: d["runs"].__setitem__(p.name, rec))
        done += 1
        left = len(todo) - done
        eta = (time.perf_counter() - t0) / done * left / jobs
        what = f"DIVERGED ({rec['diverged']})" if "diverged" in rec else f"{rec['seconds']:.0f}s"
        log(f"== {p.name}: {rec['steps']} steps in {what} ({rec['device']})"
            f"; {done}/{len(todo)} done" + (f", ~{eta / 60:.1f} min left" if left else ""))

    run_dirs = {p.name: Path(cfgs[p.name].run_dir) for p in todo}
    stop = (name, steps, run_dirs, log)
    args = (str(runs_dir), spec.metrics, scale)
    if jobs == 1 or len(todo) <= 1:
        train_serial(train_one, todo, at, args, str(out), stop, finish)
    else:
        train_parallel(train_one, todo, jobs, args, str(out), stop, finish)
    return run_probes(spec, scale, path, data, log)


def run_probes(spec: StudySpec, scale: str, path: Path, data: dict, log: Callable[[str], None] = print) -> dict:
    """Every probe of the study not yet recorded in ``data["probes"]`` (``fn(scale) -> JSON``; None: not
    recorded), saved after each."""
    for name, fn in spec.probes.items():
        if name in data.get("probes", {}):
            log(f"== probe {name}: reusing its record")
            continue
        log(f"== probe {name}")
        value = hook(fn)(scale)
        if value is not None:
            update_results(path, data, lambda d, k=name, v=value: d.setdefault("probes", {}).__setitem__(k, v))
    return data
