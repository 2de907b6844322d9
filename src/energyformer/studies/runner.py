"""The one study runner (issue 22): every run of a study is ``experiment.run_experiment`` — no second
assembly of model and trainer, no private training or timing loop.

:func:`run_study` expands the grid (:func:`plan.expand`) and for each run

* **reuses** it when ``<out>/results.json`` holds its record with the same config hash (the hash of the
  run's full config except ``out_dir``; a changed config trains again, never silently reused);
* **resumes** it when its run directory holds checkpoints of the same resolved config
  (``run_experiment(cfg, resume=True)``), else trains it from scratch (``overwrite=True``);
* then runs the study's metric functions (the eval hooks: ``fn(run: FinishedRun) -> JSON``) and records
  the run — cell, seed, config hash, device, hardware, scale, parameters, steps, seconds, tokens/s,
  metrics — writing results.json atomically after each run. A run whose training diverged (a non-finite
  loss) is a result, not an error: its record says ``diverged`` (and has no metrics);
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
from ..utils.io import atomic_write_text, read_json
from ..utils.validate import ConfigError
from .preflight import check_hooks, check_models, hook
from .scheduling import SeeTrainer, train_parallel, train_serial
from .plan import RunPlan, expand
from .spec import StudySpec

#: version of the record format in results.json
FORMAT = 1


def config_hash(cfg) -> str:
    """A short hash of a run config, ``out_dir`` excluded (where a run lives does not change it), and options added
    since with the old behaviour as their default too while they hold it (``utils.config.hash_view``)."""
    d = hash_view(cfg)
    d.pop("out_dir", None)
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


def hardware(device: str) -> str:
    """One line naming the machine a run trained on."""
    if device.startswith("cuda") and torch.cuda.is_available():
        return f"{torch.cuda.get_device_name()} GPU, torch {torch.__version__}"
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


def load_results(path: Path, study: str, scale: str) -> dict:
    if path.exists():
        data = read_json(path, f"study records {path}", require=("format", "runs"))
        if data.get("format") != FORMAT:
            raise ConfigError(f"{path}: not a study record file (format {data.get('format')!r}, want {FORMAT})")
        # another study's or scale's records were read as this one's: pages rewritten from them, runs added
        for key, want in (("study", study), ("scale", scale)):
            if key in data and data[key] != want:
                raise ConfigError(f"{path}: the records of {key} {data[key]!r}, not {want!r}: give this "
                                  f"{key}'s own --out (or a new folder)")
        runs = data["runs"]
        bad = next((k for k, r in runs.items() if not isinstance(r, dict)), None) if isinstance(runs, dict) else ""
        if bad is not None:
            what = f"runs[{bad!r}] is not a record (a mapping)" if bad else "'runs' is not a mapping of run records"
            raise ConfigError(f"{path}: {what}")
        for key, r in runs.items():
            where = _bool_leaf(r.get("metrics"), f"runs[{key!r}].metrics")
            if where is not None:  # JSON true was read as 1.0 and turned a verdict
                raise ConfigError(f"{path}: {where} is a true/false, not a metric value (a number, text or null)")
        return data
    return {"format": FORMAT, "study": study, "scale": scale, "runs": {}}


def _bool_leaf(node: Any, where: str) -> str | None:
    """The path of the first true/false inside a run's metrics, or None (no metric is a bool)."""
    if isinstance(node, bool):
        return where
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    return next((w for k, v in items if (w := _bool_leaf(v, f"{where}.{k}")) is not None), None)


#: top-level keys of a results file that describe records migrated from an old program
MIGRATION_KEYS = ("setup", "note")


def is_migrated(record: dict) -> bool:
    """Whether a record was migrated from an old program (``config_hash: migrated``): rendered, never reused."""
    return record.get("config_hash") == "migrated"


def save_results(path: Path, data: dict) -> None:
    """Write ``data`` atomically; once no record is migrated, the migration's ``setup`` and ``note`` (which
    describe those records) are dropped, so a page never shows them beside runs they do not describe."""
    if not any(is_migrated(r) for r in data["runs"].values()):
        for key in MIGRATION_KEYS:
            data.pop(key, None)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(data, indent=1) + "\n")


def _config(plan: RunPlan, runs_dir: Path):
    from ..experiment import load_run_config

    return load_run_config(plan.config, [*plan.overrides, f"out_dir={runs_dir}"])


def train_one(plan: RunPlan, runs_dir: str, metrics: dict[str, str], scale: str, threads: int = 0,
              out: str | None = None) -> dict:
    """Train (or resume) one run with ``run_experiment``, run the metric hooks, return its record."""
    from ..experiment import build_task, load_run_dir_config, resolve, run_experiment
    from ..train import TrainingDiverged, list_checkpoints, resolve_device

    if threads:
        torch.set_num_threads(threads)
    cfg = _config(plan, Path(runs_dir))
    task = build_task(cfg)
    resume = False
    if list_checkpoints(cfg.run_dir):
        try:
            old, new = to_dict(load_run_dir_config(cfg.run_dir)), to_dict(resolve(cfg, task))
            resume = {**old, "out_dir": None} == {**new, "out_dir": None}  # a moved run folder resumes too
        except (ConfigError, OSError, ValueError):
            resume = False
    device = str(resolve_device(cfg.train.device))
    head = {"cell": plan.cell, "seed": plan.seed, "config": plan.config, "overrides": plan.overrides,
            "config_hash": config_hash(cfg), "scale": scale, "device": device, "hardware": hardware(device)}
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


def outdated_records(spec: StudySpec, scale: str, runs: dict[str, dict]
                     ) -> tuple[list[str], list[str], dict[str, list[str]]]:
    """(changed, outside, with_sets): the records (names) whose config differs from what the study resolves to now
    for the same run with the same command-line ``--set`` overrides — ``run_study`` would train them again (a
    changed default, recipe or config file) — those whose name is no longer a run of the scale's grid at their
    seed, and the others made with ``--set`` overrides (name -> overrides: the study's configuration alone was not
    what ran; ``reproduce`` with the same ``--set`` reuses them). Migrated records (no config hash) are none of
    these: they say so themselves."""
    seeds = sorted({int(r["seed"]) for r in runs.values() if isinstance(r.get("seed"), int)})
    try:
        plans = {p.name: p for p in expand(spec, scale, seeds=seeds)} if seeds else {}
    except ConfigError:
        plans = {}
    changed, outside, with_sets = [], [], {}
    for key, r in runs.items():
        if is_migrated(r):
            continue
        if key not in plans:
            outside.append(key)
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
        cfgs[p.name] = cfg = _config(p, runs_dir)
        h, steps[p.name] = config_hash(cfg), cfg.train.steps
        old = data["runs"].get(p.name)
        if old is not None and old.get("config_hash") == h:
            log(f"== {p.name}: reusing its record (config unchanged)")
        else:
            if old is not None:
                log(f"== {p.name}: its config changed since it was recorded: training it again")
            saved = list_checkpoints(cfg.run_dir)
            at[p.name] = checkpoint_step(saved[-1]) if saved else 0  # a run that stopped before it was recorded
            todo.append(p)
    check_models([(p.name, cfgs[p.name]) for p in todo])  # every model builds (meta device), before any trains
    t0, done = time.perf_counter(), 0

    def finish(p: RunPlan, rec: dict) -> None:
        nonlocal done
        data["runs"][p.name] = rec
        save_results(path, data)
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
            data.setdefault("probes", {})[name] = value
            save_results(path, data)
    return data
