"""Resuming a run: choose the checkpoint, compare train configs, restore optimiser state by name, and
restore a trainer from a checkpoint (:func:`restore_run`, the trainer's resume step). The model and task
configs must be the checkpoint's (:func:`check_model_config`, :func:`check_task_config`): a change is
refused naming each key, with both values; a train config may change (with a warning).

Optimiser state is matched to parameters **by name**, not by position: each parameter group
carries the names of its parameters (``group["names"]``, see :mod:`energyformer.train.optim`), so
a resumed run whose groups differ (other ``no_decay_roles``, a new role declaration, a checkpoint
from the layout before roles, which had two groups by number of dimensions) still gives every
parameter its own moments. The group hyper-parameters (weight decay, betas, momentum, ...) come
from the *current* config, never from the checkpoint. A checkpoint written with another optimiser
kind restores no optimiser state (with a warning): its moments mean something else.
"""

from __future__ import annotations

from collections.abc import Callable

import logging
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ..errors import DataError
from .checkpoint import (CheckpointError, checkpoint_step, latest_valid_checkpoint, load_checkpoint, load_model_weights,
                         remove_stale_tmp, save_checkpoint)
from .config import LEGACY_KEYS
from .contract import TrainingDiverged
from .rng import seed_everything, set_rng_state
from .runinfo import to_plain

log = logging.getLogger("energyformer.train")

# keys whose change on resume is expected and not worth a warning
QUIET_KEYS = ("progress", "device", "log_every", "eval_every", "save_every", "keep_checkpoints",
              "tensorboard")


def find_resume_checkpoint(out_dir: Path, is_main: bool, ddp: bool) -> str | None:
    """Newest valid checkpoint (rank 0 decides, broadcast under DDP); newer invalid ones are
    renamed ``<name>.corrupt`` with a warning, ``ckpt-<step>.tmp/`` left by a killed save are deleted."""
    choice: str | None = None
    if is_main:
        for tmp in remove_stale_tmp(out_dir):  # a save that was killed (never a checkpoint)
            log.info("removed %s, left by a save that was interrupted", tmp)
        ckpt, bad = latest_valid_checkpoint(out_dir, warn=False)
        chosen_step = checkpoint_step(ckpt) if ckpt is not None else -1
        for path, err in bad:
            msg = f"checkpoint {path.name} is invalid ({err})"
            s = checkpoint_step(path)
            if s is not None and s > chosen_step:
                target = path.with_name(path.name + ".corrupt")
                if not target.exists():
                    path.rename(target)
                    msg += f"; moved aside to {target.name}"
            warnings.warn(msg + (f"; resuming from {ckpt.name}" if ckpt else ""), stacklevel=4)  # once: not logged too
        choice = str(ckpt) if ckpt is not None else None
    if ddp:
        box = [choice]
        dist.broadcast_object_list(box, src=0)
        choice = box[0]
    return choice


def upgrade_train_config(old: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """A stored train config in the current layout, and whether it was in the previous flat one.

    The previous layout had ``betas``/``eps``/``weight_decay`` (AdamW) and ``warmup``/
    ``final_lr_factor`` (warm-up + cosine) at the top level.
    """
    old = dict(old or {})
    legacy = "optimizer" not in old and any(k in old for k in LEGACY_KEYS)
    if not legacy:
        return old, False
    opt: dict[str, Any] = {"kind": "adamw"}
    sched: dict[str, Any] = {"kind": "warmup_cosine"}
    for key, new in LEGACY_KEYS.items():
        if key in old:
            section, sub = new.split(".")
            (opt if section == "optimizer" else sched)[sub] = old.pop(key)
    old["optimizer"], old["schedule"] = opt, sched
    return old, True


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix: list(d) if isinstance(d, tuple) else d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def config_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """``"key: old -> new"`` for every dotted key that differs (absent on one side included).

    A changed ``kind`` of any section (``optimizer.kind``, ``block.attention.kind``, the model's own ``kind``)
    is reported once, first, and not with the section's other keys (they then mean other things).
    """
    fo, fn = _flat(old), _flat(new)
    keys = [k for k in dict.fromkeys([*fo, *fn]) if k.split(".")[0] not in QUIET_KEYS]
    kinds = [k for k in keys if k.rsplit(".", 1)[-1] == "kind"]
    switched = [k[:-len("kind")] for k in kinds if fo.get(k, "<unset>") != fn.get(k, "<unset>")]  # "" or "a.b."
    changes = []
    for key in kinds + [k for k in keys if k not in kinds]:
        if any(key.startswith(s) and key != s + "kind" for s in switched):
            continue
        a, b = fo.get(key, "<unset>"), fn.get(key, "<unset>")
        if a != b:
            changes.append(f"{key}: {a!r} -> {b!r}")
    return changes


def legacy_group_names(model: nn.Module) -> list[list[str]]:
    """Parameter names of the two AdamW groups of the layout before roles (decay, no decay).

    That layout decayed trainable parameters with ``ndim >= 2`` that were not ``nn.Embedding`` /
    ``nn.EmbeddingBag`` weights nor marked ``no_weight_decay``; empty groups were left out.
    """
    emb = {id(m.weight) for m in model.modules() if isinstance(m, (nn.Embedding, nn.EmbeddingBag))}
    decay, rest = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        wd = p.ndim >= 2 and id(p) not in emb and not getattr(p, "no_weight_decay", False)
        (decay if wd else rest).append(name)
    return [g for g in (decay, rest) if g]


def load_optimizer_state(optimizer: torch.optim.Optimizer, saved: dict[str, Any],
                         model: nn.Module, where: str) -> list[str]:
    """Load ``saved`` (an optimizer ``state_dict``) into ``optimizer``, matching parameters by name.

    Hyper-parameters of every group stay those of ``optimizer`` (the current config). Returns the
    names of current parameters the checkpoint's optimizer did not have (their state starts fresh).
    """
    saved_groups = saved.get("param_groups") or []
    if all("names" in g for g in saved_groups):
        saved_names = [list(g["names"]) for g in saved_groups]
    else:  # written before parameter roles: two groups by number of dimensions
        saved_names = legacy_group_names(model)
    if len(saved_names) != len(saved_groups) or any(
            len(n) != len(g["params"]) for n, g in zip(saved_names, saved_groups)):
        raise CheckpointError(f"checkpoint {where}: its optimizer state does not fit this model's "
                              "parameters (group sizes differ)")
    known = {n for names in saved_names for n in names}
    by_name = {}
    for names, g in zip(saved_names, saved_groups):
        for name, idx in zip(names, g["params"]):
            if idx in saved["state"]:
                by_name[name] = saved["state"][idx]
    state: dict[int, Any] = {}
    groups: list[dict[str, Any]] = []
    missing: list[str] = []
    idx = 0
    for group in optimizer.param_groups:
        ids = []
        for name in group["names"]:
            if name in by_name:
                state[idx] = by_name[name]
            elif name not in known:
                missing.append(name)
            ids.append(idx)
            idx += 1
        groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": ids})
    optimizer.load_state_dict({"state": state, "param_groups": groups})
    return missing


def check_model_config(saved: dict[str, Any] | None, current: dict[str, Any] | None, ckpt: str | Path,
                       out_dir: Path, normalise: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> None:
    """Refuse to resume or evaluate a checkpoint under another model config (issue 25 class 4).

    ``saved`` is the run config a checkpoint recorded (``extra['run_config']``; absent in checkpoints
    written before it was recorded: then nothing is checked), ``current`` the one in use. Two
    checks, each naming what differs: the config in use, and the run directory's ``config.yaml`` on
    disk (an edit there would make a later ``eval`` rebuild another model than the checkpoint's).
    ``normalise`` maps a recorded model config to today's spelling (old keys migrated, defaults filled)
    before comparing, so a run written before a config key was renamed still resumes under its own model.
    """
    import yaml

    from ..errors import ConfigError
    from .runinfo import CONFIG_FILE

    if not isinstance(saved, dict) or "model" not in saved:
        return

    def model(run: Any) -> dict[str, Any]:
        m = (run or {}).get("model") or {}
        if normalise is not None and isinstance(m, dict):
            try:
                return normalise(m)
            except Exception:  # noqa: BLE001 - an unreadable record is compared as it is written
                return m
        return m

    def diff(other: Any) -> list[str]:
        return config_changes(model(saved), model(other))

    if isinstance(current, dict) and "model" in current:
        changed = diff(current)
        if changed:
            raise ConfigError(
                f"model config differs from the one checkpoint {ckpt} was trained with "
                f"({'; '.join('model.' + c for c in changed[:3])}{' ...' if len(changed) > 3 else ''}): "
                f"a checkpoint continues only under its own model; use the run's own config "
                f"({out_dir / CONFIG_FILE}) or start a new run (--set name=OTHER)")
    path = Path(out_dir) / CONFIG_FILE
    if path.is_file():
        try:
            on_disk = yaml.safe_load(path.read_text())
        except (yaml.YAMLError, UnicodeDecodeError) as e:
            raise ConfigError(f"{path}: not readable YAML ({' '.join(str(e).split())[:200]})") from None
        on_disk = on_disk if isinstance(on_disk, dict) else {}
        changed = diff(on_disk)
        if changed:
            names = saved.get("name"), on_disk.get("name")
            why = (f"the checkpoint was written by run {names[0]!r}, config.yaml is run {names[1]!r}: copied from "
                   "another run?" if names[0] != names[1] else "edited after the checkpoint was written?")
            raise ConfigError(
                f"{path} does not describe checkpoint {ckpt} ({why} "
                f"{'; '.join('model.' + c for c in changed[:3])}{' ...' if len(changed) > 3 else ''}); "
                f"it must describe the run's checkpoints: restore it, or train the new model as a new run")


# task keys that may change on resume because training never reads them; each one's documentation says so
RESUMABLE_TASK_KEYS = (
    "task.workers",  # sudoku: processes generating the data on first use; identical data for any number
)


def task_changes(old: Any, new: Any, prefix: str = "task") -> list[str]:
    """``"task.<key>: old -> new"`` for every key of two recorded ``task`` sections that differs.

    A changed ``task.kind`` is reported alone (the other keys then mean other things). Keys recorded on
    one side only (added to or removed from a task config between the versions that wrote the two) and
    :data:`RESUMABLE_TASK_KEYS` are not compared.
    """
    if prefix in RESUMABLE_TASK_KEYS:
        return []
    if isinstance(old, dict) and isinstance(new, dict):
        if prefix == "task" and old.get("kind") != new.get("kind"):
            return [f"task.kind: {old.get('kind')!r} -> {new.get('kind')!r}"]
        return [c for k in old if k in new for c in task_changes(old[k], new[k], f"{prefix}.{k}")]
    a, b = (list(v) if isinstance(v, tuple) else v for v in (old, new))
    return [] if a == b else [f"{prefix}: {a!r} -> {b!r}"]


def check_task_config(saved: dict[str, Any] | None, current: dict[str, Any] | None, ckpt: str | Path,
                      out_dir: Path) -> None:
    """Refuse to resume a checkpoint under another task config.

    The task makes the data stream the checkpoint's data state points into (``seq_len``, ``batch_size``,
    ...) and the validation set its evaluations were scored on (``val_fraction``, ``eval_max_batches``,
    ...): a resumed run under other values would mix two runs in one ``metrics.jsonl``, and ``eval``
    (which reads ``config.yaml``) would score another set. ``saved`` is the checkpoint's recorded run
    config (nothing is checked without one), ``current`` the one in use; the run directory's
    ``config.yaml`` must match the checkpoint too. Every changed ``task.<key>`` is named, with both values.
    """
    import yaml

    from ..errors import ConfigError
    from .runinfo import CONFIG_FILE

    if not isinstance(saved, dict) or not isinstance(saved.get("task"), dict):
        return
    if isinstance(current, dict) and "task" in current:
        changed = task_changes(saved["task"], current["task"])
        if changed:
            raise ConfigError(
                f"task config differs from the one checkpoint {ckpt} was trained with ({'; '.join(changed)}): "
                f"the task must match to resume (its data position and validation set belong to the run); "
                f"resume with the run's own task settings ({Path(out_dir) / CONFIG_FILE}) "
                f"or start a new run (--set name=OTHER)")
    path = Path(out_dir) / CONFIG_FILE
    if not path.is_file():
        return
    try:
        on_disk = yaml.safe_load(path.read_text())
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: not readable YAML ({' '.join(str(e).split())[:200]})") from None
    task = on_disk.get("task") if isinstance(on_disk, dict) else None
    changed = task_changes(saved["task"], task if isinstance(task, dict) else {})
    if changed:
        raise ConfigError(
            f"{path} does not match checkpoint {ckpt} (checkpoint -> {CONFIG_FILE}: {'; '.join(changed)}); "
            f"it must describe the run's checkpoints (eval reads it): restore the checkpoint's task settings "
            f"in it, or train the other task settings as a new run (--set name=OTHER)")


def restore_run(trainer: Any, path: str) -> dict[str, Any]:
    """Restore a :class:`~energyformer.train.trainer.Trainer` (set up, not yet fitted) from the checkpoint
    ``path``: model and task config checks, weights, this rank's data and RNG state, optimiser state by name (with
    warnings for a changed train config, rank count or optimiser kind), callbacks, step, tokens and elapsed
    time. Returns the checkpoint's state dict."""
    assert trainer.optimizer is not None and trainer.scheduler is not None
    # rank 0 verified the manifest in find_resume_checkpoint
    state = load_checkpoint(path, None, None, trainer.scheduler, verify=False)
    if int(state["step"]) > trainer.cfg.steps:  # (it "finished" at the checkpoint's step without a word)
        from ..errors import ConfigError

        raise ConfigError(f"train.steps = {trainer.cfg.steps}: the checkpoint {path} is at step {state['step']}, "
                          f"past it, so nothing would train; give train.steps >= {state['step']} to continue")
    # the model config first: a checkpoint continues only under its own model
    check_model_config(state.get("run_config"), to_plain(trainer.run_config), path, trainer.out_dir,
                       trainer.normalise_model_config)
    # and the task: the data state below points into its data stream
    check_task_config(state.get("run_config"), to_plain(trainer.run_config), path, trainer.out_dir)
    load_model_weights(trainer.model, path, verify=False)
    restore_rank_streams(trainer, state.get("ranks") or [], path)
    old_cfg, legacy = upgrade_train_config(state.get("train_config") or {})
    new_cfg = trainer.cfg.to_dict()
    changed = config_changes(old_cfg, new_cfg) if old_cfg else []
    if changed or legacy:
        note = (" (the checkpoint's train config uses the layout before optimizer/schedule "
                "kinds; read as optimizer.kind='adamw', schedule.kind='warmup_cosine')"
                if legacy else "")
        steps = any(c.startswith("steps:") for c in changed) and trainer.cfg.schedule.kind != "constant"
        warnings.warn("resuming with a changed train config" + note
                      + (": " + ", ".join(changed) if changed else "")
                      + ("; the learning-rate schedule now spans the new train.steps (its warm-up and decay are "
                         "fractions of it), so the rate jumps at the resume" if steps else ""), stacklevel=5)
    if state.get("optimizer") is None:
        raise CheckpointError(f"checkpoint {path}: state.pt holds no optimizer state")
    old_kind = (old_cfg.get("optimizer") or {}).get("kind", trainer.cfg.optimizer.kind)
    if old_kind != trainer.cfg.optimizer.kind:
        warnings.warn(f"train.optimizer.kind changed from {old_kind!r} to "
                      f"{trainer.cfg.optimizer.kind!r}: the optimizer state starts fresh",
                      stacklevel=5)
    else:
        missing = load_optimizer_state(trainer.optimizer, state["optimizer"], trainer.model, path)
        if missing:
            warnings.warn(f"checkpoint {path} holds no optimizer state for "
                          f"{', '.join(missing)}; it starts fresh", stacklevel=5)
    trainer.callbacks.load_state_dict(state.get("callbacks"))
    trainer.step = int(state["step"])
    trainer.tokens_seen = int(state.get("tokens_seen", 0))
    trainer._elapsed_before = float(state.get("elapsed_s", 0.0))
    trainer.last_checkpoint = Path(path)
    return state


def restore_rank_streams(trainer: Any, entries: list[Any], path: str) -> None:
    """Restore this rank's data position and RNG state from the checkpoint's per-rank ``entries``.

    Rank ``r`` restores ``entries[r]`` only when the checkpoint has one. A rank beyond them (the run has more
    ranks than wrote the checkpoint) keeps the per-rank data stream the task built for it and seeds its RNG with
    ``seed + rank``, as a fresh run does: restoring another rank's entry would copy that rank's seed, position and
    RNG, so both ranks would draw the same batches and the run would train on less data than it counts. Saved
    entries beyond this run's ranks (fewer ranks than wrote it) are dropped. Either change is a warning naming it.
    """
    if not entries:
        return
    n, world = len(entries), trainer.world_size
    if n != world:
        if world > n:
            what = (f"rank(s) {_span(n, world)} have no saved stream and start their own data stream and RNG "
                    f"afresh (seed + rank), as in a new run")
        else:
            what = f"the saved data streams and RNG of rank(s) {_span(world, n)} are dropped"
        warnings.warn(f"checkpoint {path} was written by {n} rank(s), this run has {world}: rank(s) "
                      f"{_span(0, min(n, world))} resume their own data position and RNG; {what}", stacklevel=6)
    if trainer.rank >= n:
        seed_everything(trainer.cfg.seed + trainer.rank)
        return
    entry = entries[trainer.rank]
    try:
        trainer.train_data.load_state_dict(entry["data"])
    except DataError as err:
        raise DataError(f"cannot resume from {path}: {err}") from None
    set_rng_state(entry["rng"])


def _span(lo: int, hi: int) -> str:
    """Ranks ``lo .. hi-1`` in words: ``3`` or ``1-3``."""
    return str(lo) if hi - lo == 1 else f"{lo}-{hi - 1}"


def eval_pending(trainer: Any, logged: set[tuple[str, int]]) -> bool:
    """Whether the step a run resumes at was due an evaluation that ``metrics.jsonl`` (its kept events
    ``logged``) does not hold: a checkpoint is written before its step's evaluation, so a stop between the two
    lost it for good (the final one too) and a study then read an earlier evaluation as the last. The main
    process reads the file; in DDP every rank follows its answer."""
    missing = trainer.eval_due(trainer.step) and trainer.is_main and ("eval", trainer.step) not in logged
    if trainer.ddp:
        flag = [missing]
        dist.broadcast_object_list(flag, src=0)
        missing = bool(flag[0])
    return bool(missing)


def save_run(trainer: Any, entry: dict[str, Any]) -> None:
    """Write the trainer's checkpoint at its step (the inverse of :func:`restore_run`): ``entry`` is this rank's
    data and RNG state (all ranks' are gathered under DDP), with the tokens, time, configs, callback state, last
    loss and the open logging window. Non-finite weights or moments are :class:`TrainingDiverged`."""
    t = trainer
    if t.ddp:
        entries: list[Any] = [None] * t.world_size
        dist.all_gather_object(entries, entry)
    else:
        entries = [entry]
    if t.is_main:
        extra = {
            "ranks": entries,
            "world_size": t.world_size,
            "tokens_seen": t.tokens_seen,
            "elapsed_s": t._elapsed(),
            "train_config": t.cfg.to_dict(),
            "run_config": to_plain(t.run_config) if t.run_config is not None else None,
            "callbacks": t.callbacks.state_dict(),
            "loss": t.loss_history[-1] if t.loss_history else None,
            "window": t._window.state_dict() if getattr(t, "_window", None) is not None else None,
        }
        try:
            t.last_checkpoint = save_checkpoint(t.out_dir, t.step, t.model, t.optimizer, t.scheduler,
                                                extra=extra, keep=t.cfg.keep_checkpoints)
        except CheckpointError as err:  # non-finite weights/moments after a finite-looking step
            if "non-finite" not in str(err):
                raise
            last = str(t.last_checkpoint) if t.last_checkpoint is not None else None
            raise TrainingDiverged(t.step, float("nan"), "weights or optimizer state", last, t.cfg) from None
        log.info("step %d: saved %s", t.step, t.last_checkpoint)
    if t.ddp:
        dist.barrier()
    t._last_saved_step = t.step
