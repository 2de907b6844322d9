"""Checks :func:`~energyformer.studies.runner.run_study` makes before any run trains, so that an error a cheap
check can find is one line at the start, not a failure after hours of earlier runs.

* :func:`check_hooks` imports every function the study names (metric hooks, probes, the page's render, section,
  figure and reducer functions): a misspelt ``module:function`` used to surface only after the first run trained
  (a metric) or after every run (a probe, the page).
* :func:`check_models` builds the model of every distinct run config on the ``meta`` device (no memory, no
  initialisation: milliseconds) after the task has completed it (:func:`energyformer.experiment.resolve`), so the
  model-build checks (e.g. ``mlp.solver.precond_rank = 16: must be an integer in [1, 15]``) run for every run
  before the first trains; they used to run in each run's own training, five runs in for the sixth config.

The task that completes a model config is built without its data where its ``resolve_model_config`` needs none
(most read only their config; building the data of some tasks takes minutes); a task whose resolution needs its
data is built in full, once per distinct task config. Only a user error (:class:`~energyformer.errors.UserError`)
found this way is reported, and only as the real task reproduces it (the light task only clears a config); anything
else (a model the meta device cannot build) is left to the run itself, which checks it as before.
"""

from __future__ import annotations

import importlib
import json
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel

from ..errors import DataError, UserError
from ..utils.validate import ConfigError


def study_hooks(spec: BaseModel) -> Iterator[tuple[str, str]]:
    """(where in the study, ``module:function``) of every function the study names."""
    from .page_spec import BlockSpec, FigureSpec, ReduceSpec

    if getattr(spec, "render", None):
        yield "render", spec.render
    for kind in ("metrics", "probes"):
        for name, fn in getattr(spec, kind, {}).items():
            yield f"{kind}.{name}", fn

    def walk(node: Any, where: str) -> Iterator[tuple[str, str]]:
        if isinstance(node, (ReduceSpec, FigureSpec)):
            yield f"{where}.fn", node.fn
        elif isinstance(node, BlockSpec) and node.section is not None:
            yield f"{where}.section", node.section
        if isinstance(node, BaseModel):
            for key in type(node).model_fields:
                yield from walk(getattr(node, key), f"{where}.{key}" if where else key)
        elif isinstance(node, dict):
            for key, v in node.items():
                yield from walk(v, f"{where}[{key!r}]")
        elif isinstance(node, (list, tuple)):
            for i, v in enumerate(node):
                yield from walk(v, f"{where}[{i}]")

    for key in type(spec).model_fields:
        if key not in ("render", "metrics", "probes"):
            yield from walk(getattr(spec, key), key)


def hook(path: str) -> Callable:
    """The function ``module:function`` names."""
    mod, _, fn = path.partition(":")
    try:
        return getattr(importlib.import_module(mod), fn)
    except (ImportError, AttributeError) as err:
        raise ConfigError(f"{path!r}: cannot be imported ({err})") from None


def is_study_path(study: str) -> bool:
    """Whether ``study`` is the path of a study file (``energyformer reproduce PATH.yaml``), not a study's name."""
    return Path(study).suffix in (".yaml", ".yml")


def library_name(study: str) -> str | None:
    """The library study ``study`` is: its name, or the name of its file in ``studies/`` given by any path (a
    symlink included); None for a user's study file."""
    if not is_study_path(study):
        return study
    from .spec import studies_dir

    p = Path(study).expanduser().resolve()
    return p.stem if p == (studies_dir() / p.name).resolve() else None


def study_file(study: str) -> str:
    """How errors and pages name the study: ``studies/<name>.yaml`` for a library study (by name or path), the file's
    name for a user's (the same page however its path was typed: ./x.yaml, an absolute path, from another folder)."""
    lib = library_name(study)
    return f"studies/{lib}.yaml" if lib is not None else Path(study).name


def study_arg(study: str) -> str:
    """The study as a page's commands name it: a library study's name, or a user's file's name."""
    lib = library_name(study)
    return lib if lib is not None else Path(study).name


def study_key(study: str) -> str:
    """The name a study's records and run folders carry: a library study's name, or a user's file's stem."""
    lib = library_name(study)
    return lib if lib is not None else Path(study).stem


def study_origin(study: str) -> str | None:
    """A user's study file, resolved (its records name it relative to their folder: :func:`.records.load_results`),
    None for the library's own studies: two files of one stem never share records."""
    return None if library_name(study) is not None else str(Path(study).expanduser().resolve())


def default_runs(study: str, scale: str) -> Path:
    """Where a study's runs go unless ``--runs`` says: ``runs/<name>/<scale>``; a user's study file's folder also
    carries a digest of its path, so two files of one name never train into each other's run folders."""
    origin = study_origin(study)
    if origin is None:
        return Path("runs") / study_key(study) / scale
    import hashlib

    return Path("runs") / f"{study_key(study)}-{hashlib.sha1(origin.encode()).hexdigest()[:8]}" / scale


def check_study_file_name(study: str) -> None:
    """Refuse a user's study file named like one of the library's (``eqt.yaml`` copied to edit it): its records,
    pages and runs would mix with the library study's, whose name they carry (probe BA)."""
    from .spec import known_studies

    if study_origin(study) is not None and Path(study).stem in known_studies():
        raise ConfigError(f"{study}: named like the library's study {Path(study).stem!r} (studies/"
                          f"{Path(study).stem}.yaml), whose records and runs it would share: rename the file")


def check_hooks(spec: BaseModel, study: str) -> None:
    """Import every function the study names; a ConfigError naming the study (:func:`study_file`), the study key
    and the function for the first that is missing or not callable."""
    for where, path in study_hooks(spec):
        try:
            fn = hook(path)
        except ConfigError as err:
            raise ConfigError(f"{study_file(study)} {where}: {err}") from None
        if not callable(fn):
            raise ConfigError(f"{study_file(study)} {where}: {path!r} is a {type(fn).__name__}, not a function")


def _key(obj: Any) -> str:
    from ..utils.config import to_dict

    return json.dumps(to_dict(obj), sort_keys=True, default=str)


def _light_task(cfg) -> Any:
    """The run's task without its data (:meth:`~energyformer.tasks.base.Task.without_data`)."""
    from ..tasks import TASKS
    from ..tasks.base import Task

    cls = TASKS.get(cfg.task.kind).builder
    if not (isinstance(cls, type) and issubclass(cls, Task)):
        raise TypeError(f"task builder {cls!r} is not a Task class")
    return cls.without_data(cfg.task, seed=cfg.train.seed, rank=0)


def _meta_build(cfg, task) -> None:
    """Resolve ``cfg``'s model config with ``task`` and build the model on the meta device."""
    import torch

    from ..experiment import resolve

    resolved = resolve(cfg, task)
    with torch.device("meta"):
        task.build_model(resolved.model)


def check_models(configs: Iterable[tuple[str, Any]]) -> None:
    """Build the model of every distinct (task, model) config of ``configs`` ((run name, RunConfig)) on the meta
    device; the first user error is raised naming the run. Silent otherwise (the runs' own warnings come when they
    train), and every RNG state is left as it was."""
    from ..experiment import build_task
    from ..train.rng import fork_rng

    seen: set[str] = set()
    full: dict[str, Any] = {}   # task config -> the real task (built only where the light one would not do)
    with fork_rng(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, cfg in configs:
            key = _key({"task": cfg.task, "model": cfg.model})
            if key in seen:
                continue
            seen.add(key)
            try:
                _meta_build(cfg, _light_task(cfg))
                continue
            except Exception:  # noqa: BLE001 - not conclusive: the real task decides
                pass
            try:
                tkey = _key(cfg.task)
                if tkey not in full:
                    full[tkey] = build_task(cfg, rank=0)
                _meta_build(cfg, full[tkey])
            except UserError as err:
                cls = type(err) if type(err) in (ConfigError, DataError) else ConfigError
                raise cls(f"run {name}: {err} (checked before any run trains)") from None
            except Exception:  # noqa: BLE001 - the meta device cannot build it: the run itself will check
                continue
