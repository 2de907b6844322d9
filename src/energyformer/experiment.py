"""One experiment = a task, a model and a training config, loaded from YAML with dotted overrides.

    config -> task (data, model) -> Trainer -> checkpoints + metrics -> analysis/report  (DESIGN.md)

``RunConfig.task`` and ``RunConfig.model`` are tagged unions: ``task.kind`` picks the task (and which
keys ``task:`` may hold); ``model.kind`` picks the model config, defaulting to the task's first model
kind. Everything goes through the task registry, so a new task needs no change here.

Plugins (:mod:`energyformer.plugins`): a run records the plugins it was trained with in ``run_info.json``;
reloading the run (eval, generate, export, ``train --resume``) imports them first.
"""

from __future__ import annotations

import re
import shutil
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from pydantic import Field, field_validator, model_validator
from torch import nn

from .models import MODELS
from .models.params import count_params
from .plugins import foreign_checks, load_recorded_plugins, plugin_hint, run_plugins
from .tasks import TASKS, Task
from .train import TrainConfig, Trainer, seed_everything
from .train.callbacks import Callback
from .utils.config import ConfigModel, load_config, read_yaml, replace, to_dict
from .utils.validate import ConfigError, closest
from .utils.yaml_files import LIBRARY_CONFIGS

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+=-]*$")


class RunConfig(ConfigModel):
    """A whole run: name and output folder, task, model, training."""

    name: str = "run"
    """run name: the run directory is out_dir/name"""
    out_dir: str = Field("runs", min_length=1)
    """root folder of run directories"""
    task: TASKS.type("lm") = TASKS.field("lm")
    """what to learn: task.kind picks the task (energyformer list tasks)"""
    model: MODELS.type("transformer") = MODELS.field("transformer")
    """which model: model.kind picks the model config (default: the task's first model kind)"""
    train: TrainConfig = Field(default_factory=TrainConfig)
    """optimiser, schedule, precision, checkpoints"""

    @model_validator(mode="before")
    @classmethod
    def _default_model_kind(cls, data: Any) -> Any:
        """Give ``model`` the task's default kind when the config names none."""
        if not isinstance(data, dict):
            return data
        task = data.get("task", "lm")
        kind = task if isinstance(task, str) else (task.get("kind", "lm") if isinstance(task, dict)
                                                   else getattr(task, "kind", "lm"))
        if not isinstance(kind, str) or kind not in TASKS.entries:  # the task error is reported; do not build a default model
            return {**data, "model": data.get("model") or {}}
        default = TASKS.get(kind).builder.model_kinds[0]
        model = data.get("model")
        if isinstance(model, dict) and not isinstance(model.get("kind", ""), str):
            return data  # the model error is reported
        if model is None:
            return {**data, "model": {"kind": default}}
        if isinstance(model, dict) and "kind" not in model:
            return {**data, "model": {"kind": default, **model}}
        return data

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME_RE.match(v) or v in (".", "..") or ".." in v:
            raise ValueError("must be a non-empty name of letters, digits and ._+=- starting with a letter or digit "
                             "(no path separators, no '..'), e.g. cem_full_lr2e-3")
        return v

    @model_validator(mode="after")
    def _model_fits_task(self) -> RunConfig:
        task_cls = TASKS.get(self.task.kind).builder
        if self.model.kind not in task_cls.model_kinds:
            raise ValueError(f"model.kind = {self.model.kind!r}: task {self.task.kind!r} builds "
                             f"{', '.join(repr(k) for k in task_cls.model_kinds)}")
        check = getattr(task_cls, "check_config", None)
        if check is not None:
            check(self.task, self.model)
        return self

    @property
    def run_dir(self) -> Path:
        return Path(self.out_dir) / self.name


def configs_dir() -> Path:
    """The repository's ``configs/`` folder (next to ``src/``), or ``./configs``."""
    return LIBRARY_CONFIGS if LIBRARY_CONFIGS.is_dir() else Path("configs")


def known_configs() -> list[str]:
    return sorted(str(q.relative_to(configs_dir()).with_suffix("")) for q in configs_dir().rglob("*.yaml"))


def resolve_config_path(name: str) -> Path:
    """A YAML path, or a config name like ``lm/llama`` looked up under ``configs/``."""
    p = Path(name)
    if p.suffix in (".yaml", ".yml") or p.exists():
        if p.exists():
            return p
        raise ConfigError(f"config file {name!r} not found")
    cand = configs_dir() / (name if name.endswith((".yaml", ".yml")) else f"{name}.yaml")
    if cand.exists():
        return cand
    known = known_configs()
    near = closest(name, known)
    folder = name.split("/")[0] + "/"
    same = [k for k in known if k.startswith(folder)] if "/" in name else []
    hint = (f"did you mean {near!r}? " if near else "") + (
        f"{folder[:-1]}/: {', '.join(same)}" if 0 < len(same) <= 12 else f"`energyformer list configs` lists all "
        f"{len(known)}")
    raise ConfigError(f"config {name!r} not found (a YAML path, or a config name; {hint})")


def load_run_config(name_or_path: str | None, overrides=(), *, resume: bool = False) -> RunConfig:
    """The run config of a YAML path or config name with dotted overrides; with ``resume`` the plugins the run
    directory it names recorded are imported first (its config may use their kinds)."""
    src = None if name_or_path is None else resolve_config_path(name_or_path)
    if resume:
        try:  # the run directory before validation: name and out_dir as the raw YAML and overrides give them
            from .utils.config import apply_overrides

            raw = apply_overrides(read_yaml(src) if src is not None else {}, list(overrides))
            run_dir = Path(str(raw.get("out_dir", "runs"))) / str(raw.get("name", "run"))
        except Exception:  # noqa: BLE001 - the config's own error is reported by load_config below
            run_dir = None
        if run_dir is not None and run_dir.is_dir():
            load_recorded_plugins(run_dir)
    try:
        return load_config(RunConfig, src, list(overrides))
    except ConfigError as err:
        raise ConfigError(f"{err}{plugin_hint(err)}") from None


def build_task(cfg: RunConfig, rank: int | None = None) -> Task:
    """The run's task object (data built lazily or at once, as the task chooses)."""
    from .train import dist_info

    rank = dist_info()[0] if rank is None else rank
    return TASKS.build(cfg.task, seed=cfg.train.seed, rank=rank)


def resolve(cfg: RunConfig, task: Task) -> RunConfig:
    """``cfg`` with the model config completed by the task (vocabulary size, input size, ...).

    A key the task sets that the config gave another value (not the key's default) is refused in one line:
    it used to be replaced without a word (``--set model.vocab_size=10`` trained a 4096-token model)."""
    try:
        model_cfg = task.resolve_model_config(cfg.model)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    if model_cfg is cfg.model:
        return cfg
    fields = type(cfg.model).model_fields
    for name in sorted(cfg.model.model_fields_set):
        have, want = getattr(cfg.model, name), getattr(model_cfg, name)
        if have != want and have is not None and have != fields[name].default:
            raise ConfigError(f"model.{name} = {have}: the {task.name!r} task sets it ({want} here, from its data, "
                              f"tokenizer or task keys); leave model.{name} unset")
    return replace(cfg, model=model_cfg)


def build_model(cfg: RunConfig, task: Task) -> nn.Module:
    """A freshly initialised model of the (resolved) run config, seeded with ``train.seed``."""
    seed_everything(cfg.train.seed)
    return task.build_model(cfg.model)


@dataclass
class RunResult:
    name: str
    run_dir: Path
    params: dict[str, int]
    final: dict[str, float]
    loss_history: list[float]
    tokens_per_s: float
    seconds: float
    task: Task | None = None  # the task the run trained on (data, tokenizer), for reports
    config: RunConfig | None = None
    model: nn.Module | None = None  # the trained model (in memory; the run directory has its checkpoint)


def check_run_dir(cfg: RunConfig, resume: bool, overwrite: bool = False) -> None:
    """Refuse to start a new run on top of an old one's checkpoints (unless resuming or overwriting),
    and refuse at once when another process is training in the same run directory."""
    from .train.lock import RunDirLock

    if cfg.run_dir.exists() and not cfg.run_dir.is_dir():  # (it was "[Errno 17] File exists" from mkdir)
        raise ConfigError(f"the run directory {cfg.run_dir} (out_dir/name) is a file: --set name=OTHER or "
                          f"out_dir=DIR for a new run, or move the file")
    if cfg.run_dir.is_dir():
        RunDirLock(cfg.run_dir).acquire().release()  # RunDirBusy names the process holding it
    old = sorted(cfg.run_dir.glob("ckpt-*")) if cfg.run_dir.is_dir() else []
    if not old or resume:
        return
    if overwrite:
        with RunDirLock(cfg.run_dir):  # refuses while another process trains there
            for p in cfg.run_dir.iterdir():
                if p.name != ".lock":
                    shutil.rmtree(p) if p.is_dir() else p.unlink()
        return
    raise FileExistsError(
        f"{cfg.run_dir} already holds checkpoints ({old[-1].name}): use --resume to continue it, "
        f"--set name=OTHER or --out DIR for a new run, or delete it")


def run_experiment(cfg: RunConfig, resume: bool = False, overwrite: bool = False,
                   task: Task | None = None, *, callbacks: Sequence[Callback] = (),
                   eval_hook: Callable[[Callable], Callable] | None = None) -> RunResult:
    """Train (or resume) one run and return its summary. ``overwrite`` deletes an old run's directory.

    ``task`` may be passed to reuse data already built for the same task config. ``callbacks`` run after
    the task's own; ``eval_hook(eval_fn)`` returns the evaluation function the trainer calls instead of
    the task's validation ``eval_fn`` (e.g. to time or record each evaluation).
    """
    check_run_dir(cfg, resume, overwrite)
    task = task or build_task(cfg)
    cfg = resolve(cfg, task)
    model = build_model(cfg, task)
    eval_fn = task.eval_fn("validation")
    cbs = task.callbacks(model) + list(callbacks)
    plugins = run_plugins(cfg)  # recorded in run_info.json: eval, generate, export and --resume import them
    info = {"plugins": plugins} if plugins else {}
    if checks := foreign_checks():  # a plugin's energies and solvers, checked once per process
        info["plugin_checks"] = checks
        for key, result in checks.items():
            if result.startswith("not checked"):
                warnings.warn(f"{key} (registered outside energyformer) is {result}", stacklevel=2)
            elif result != "ok":
                warnings.warn(f"{key} (registered outside energyformer) fails its property check (core.check_energy "
                              f"/ check_solver): {result}", stacklevel=2)
    trainer = Trainer(model, cfg.train, task.loss, task.train_data, eval_hook(eval_fn) if eval_hook else eval_fn,
                      out_dir=cfg.run_dir, run_config=to_dict(cfg), normalise_model_config=normalise_model_config,
                      count_fn=task.loss_items, run_info=info or None,
                      **({"callbacks": cbs} if cbs else {}))
    t0 = time.perf_counter()
    final = trainer.fit(resume=resume)
    secs = time.perf_counter() - t0
    tokens = final.get("tokens", 0.0)  # every token of the run, across resumes
    elapsed = float(final.get("elapsed_s") or secs)  # and its training time across resumes (not this call's)
    return RunResult(cfg.name, cfg.run_dir, count_params(model), final, list(trainer.loss_history),
                     float(tokens) / max(elapsed, 1e-9), secs, task, cfg, model)


def normalise_model_config(model: dict[str, Any]) -> dict[str, Any]:
    """A recorded ``model`` section in today's spelling: validated by its model config (old spellings
    migrated, defaults filled), so the resume check compares models, not spellings."""
    return to_dict(MODELS.get(model["kind"]).config.model_validate(model))


def load_run_dir_config(run_dir: str | Path) -> RunConfig:
    """The resolved config a run directory records."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ConfigError(f"{run_dir} is not a directory (give a run directory, e.g. runs/llama)")
    cfg_path = run_dir / "config.yaml"
    if not cfg_path.exists():
        raise ConfigError(f"{cfg_path} not found: is {run_dir} a run directory?")
    load_recorded_plugins(run_dir)
    try:
        return load_config(RunConfig, read_yaml(cfg_path))
    except ConfigError as err:  # a value the run's own file holds: name the file (its YAML errors already do)
        if str(err).startswith(str(cfg_path)):
            raise
        raise ConfigError(f"{cfg_path}: {err}{plugin_hint(err)}") from None


def load_trained(run_dir: str | Path, device: str | torch.device = "cpu"
                 ) -> tuple[RunConfig, nn.Module, Task]:
    """Rebuild a trained model from its run directory (resolved config + newest valid checkpoint).

    ``task.checkpoint`` records which checkpoint was loaded, ``task.checkpoint_note`` says when
    newer checkpoints were skipped because they are invalid (empty otherwise), and ``task.trained_data`` holds
    the training data's state it recorded (a task checks its evaluation data against it).
    """
    from .train import CheckpointError, checkpoint_step, latest_valid_checkpoint, load_model_weights, resolve_device

    dev = resolve_device(str(device)) if isinstance(device, str) else device
    cfg = load_run_dir_config(run_dir)
    ckpt, bad = latest_valid_checkpoint(Path(run_dir), warn=False)
    if ckpt is None:
        # every checkpoint's reason, newest first: the newest alone can hide that older ones broke differently
        why = f" ({'; '.join(reason for _, reason in bad[:4])}{'; …' if len(bad) > 4 else ''})" if bad else ""
        todo = ("none of them loads: train the run again (`energyformer train ... --resume` starts over where no "
                "checkpoint is valid)") if bad else ("train it first (energyformer train ... --resume continues an "
                                                    "interrupted run)")
        raise CheckpointError(f"no valid checkpoint in run directory {run_dir}{why}: {todo}")
    from .train import load_checkpoint
    from .train.resume import check_model_config, check_task_config

    state = load_checkpoint(ckpt, verify=False)
    # config.yaml still describes the checkpoint: its model, and its task — an edited task (a data seed, the givens,
    # a test-set size) made eval score another data set under the run's name
    check_model_config(state.get("run_config"), None, ckpt, Path(run_dir))
    check_task_config(state.get("run_config"), None, ckpt, Path(run_dir))
    task = build_task(cfg, rank=0)
    cfg = resolve(cfg, task)
    model = task.build_model(cfg.model)
    load_model_weights(model, ckpt, verify=False)
    task.checkpoint = ckpt
    task.trained_data = ((state.get("ranks") or [None])[0] or {}).get("data")
    newer = [p for p, _ in bad if (checkpoint_step(p) or -1) > (checkpoint_step(ckpt) or -1)]
    task.checkpoint_note = (f"; newer checkpoint(s) {', '.join(p.name for p in newer)} are invalid, "
                            f"so step {checkpoint_step(ckpt)} was read" if newer else "")
    return cfg, model.to(dev).eval(), task
