"""Atomic, verified checkpoints: safetensors weights + ``state.pt`` + ``manifest.json``.

Layout of a run directory::

    out_dir/
      ckpt-00000100/          one complete checkpoint (step 100)
        model.safetensors     model weights (tied/shared tensors stored once)
        state.pt              optimizer, scheduler, step, data and RNG state (torch.save)
        manifest.json         size and sha256 of every file above
      ckpt-00000200/
      latest                  text file: name of the newest complete checkpoint

Writing (:func:`save_checkpoint`) is atomic: files go into ``ckpt-<step>.tmp/`` and are fsync'ed,
the manifest is written last, the directory is renamed to ``ckpt-<step>``, and only then the
``latest`` pointer is replaced (write to a temp file + ``os.replace``) and checkpoints beyond
``keep`` are pruned (each renamed to ``ckpt-<step>.pruned/`` before it is deleted, so a kill never leaves a
half-deleted folder under a checkpoint's name). A crash at any point leaves every earlier checkpoint untouched; the
``.tmp/`` (and ``.pruned/``) folder of a save that was killed is deleted by the next successful save or on resume
(:func:`remove_stale_tmp`), and a
replacement of a step's checkpoint killed between its two renames is undone (:func:`restore_replaced`).

Reading (:func:`load_checkpoint`) first checks the manifest (file present, size, sha256) and raises
:class:`CheckpointError` naming the file and what is wrong. :func:`latest_valid_checkpoint` walks
back to the newest checkpoint that verifies.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

from energyformer.errors import UserError, brief
from energyformer.utils.io import atomic_write_text, fsync_dir, remove_stale_temp_files

from .state_checks import check_plain, nonfinite_tensors  # noqa: F401  (also this module's API)

MODEL_FILE = "model.safetensors"
STATE_FILE = "state.pt"
MANIFEST_FILE = "manifest.json"
LATEST_FILE = "latest"
FORMAT_VERSION = 1
_CKPT_RE = re.compile(r"^ckpt-(\d+)$")
_TMP_RE = re.compile(r"^ckpt-\d+\.(tmp|pruned)$")  # a save killed before its rename; a pruning killed mid-delete
_REPLACED_RE = re.compile(r"^(ckpt-\d+)\.replaced-\d+$")  # a checkpoint moved aside while its step is saved again


class CheckpointError(UserError, RuntimeError):
    """A checkpoint is missing, incomplete or corrupt; the message names the file and the problem."""


# ----------------------------------------------------------------------------------------------
# helpers


def unwrap_model(model: nn.Module) -> nn.Module:
    """The plain module under DDP (``.module``) and ``torch.compile`` (``._orig_mod``) wrappers."""
    while True:
        if isinstance(model, torch.nn.parallel.DistributedDataParallel):
            model = model.module
        elif hasattr(model, "_orig_mod") and isinstance(model._orig_mod, nn.Module):
            model = model._orig_mod
        else:
            return model


def checkpoint_name(step: int) -> str:
    return f"ckpt-{step:08d}"


def checkpoint_step(path: str | os.PathLike) -> int | None:
    """Step encoded in a checkpoint directory name, or None if the name is not ``ckpt-<int>``."""
    m = _CKPT_RE.match(Path(path).name)
    return int(m.group(1)) if m else None


def list_checkpoints(out_dir: str | os.PathLike) -> list[Path]:
    """Complete-looking checkpoint directories (``ckpt-<step>``, not ``.tmp``), oldest first."""
    out = Path(out_dir)
    if not out.is_dir():
        return []
    found = [(checkpoint_step(p), p) for p in out.iterdir() if p.is_dir()]
    return [p for s, p in sorted((s, p) for s, p in found if s is not None)]


def remove_stale_tmp(out_dir: str | os.PathLike) -> list[Path]:
    """Delete the ``ckpt-<step>.tmp/`` folders a save that was killed left behind, and the ``ckpt-<step>.pruned/``
    ones of a pruning killed mid-delete; return them. Also the temporary files of killed atomic writes
    (``metrics.jsonl``, ``latest``: :func:`~energyformer.utils.io.remove_stale_temp_files`).

    Only folders named exactly ``ckpt-<digits>.tmp`` / ``.pruned`` go (never a checkpoint, a ``.corrupt`` one set
    aside, ``latest`` or any other file). No other save can be running in the folder: the run directory is locked
    while a run trains (:mod:`energyformer.train.lock`).
    """
    out = Path(out_dir)
    if not out.is_dir():
        return []
    restore_replaced(out)  # first: a replacement killed half-way leaves its new checkpoint in ckpt-<step>.tmp/
    stale = [p for p in out.iterdir() if _TMP_RE.match(p.name) and p.is_dir() and not p.is_symlink()]
    for p in stale:
        shutil.rmtree(p, ignore_errors=True)
    remove_stale_temp_files(out)
    return stale


def restore_replaced(out_dir: str | os.PathLike) -> list[Path]:
    """Undo a replacement of a step's checkpoint (:func:`save_checkpoint`: old one aside as
    ``ckpt-<step>.replaced-<pid>/``, new one renamed in, old one deleted) that a kill interrupted: with no
    ``ckpt-<step>`` the old (complete) one is renamed back, else the copy aside is deleted. Returns those put back."""
    out = Path(out_dir)
    back = []
    for aside in sorted(p for p in out.iterdir() if _REPLACED_RE.match(p.name) and p.is_dir() and not p.is_symlink()):
        final = out / _REPLACED_RE.match(aside.name).group(1)
        if final.exists():
            shutil.rmtree(aside, ignore_errors=True)
        else:
            os.replace(aside, final)
            back.append(final)
    if back:
        fsync_dir(out)
    return back


def latest_checkpoint(out_dir: str | os.PathLike) -> Path | None:
    """The checkpoint named by ``out_dir/latest`` (or the highest step if the pointer is missing).

    Does not verify it; see :func:`latest_valid_checkpoint`.
    """
    out = Path(out_dir)
    pointer = out / LATEST_FILE
    if pointer.is_file():
        name = pointer.read_text(errors="replace").strip()  # a damaged pointer falls back to the highest step
        if name and (out / name).is_dir() and checkpoint_step(name) is not None:
            cands = list_checkpoints(out)
            # a newer complete checkpoint than the pointer can exist only if we crashed between
            # the rename and the pointer update; prefer the highest step in that case
            if cands and checkpoint_step(cands[-1]) > checkpoint_step(name):  # type: ignore[operator]
                return cands[-1]
            return out / name
    cands = list_checkpoints(out)
    return cands[-1] if cands else None


def latest_valid_checkpoint(
    out_dir: str | os.PathLike, *, warn: bool = True,
) -> tuple[Path | None, list[tuple[Path, str]]]:
    """Newest checkpoint whose manifest verifies, and the newer ones that failed with their errors.

    Emits a ``UserWarning`` for every skipped checkpoint when ``warn``.
    """
    first = latest_checkpoint(out_dir)
    cands = list(reversed(list_checkpoints(out_dir)))
    if first is not None and first in cands:
        cands.remove(first)
        cands.insert(0, first)
    bad: list[tuple[Path, str]] = []
    for c in cands:
        try:
            verify_checkpoint(c)
        except CheckpointError as e:
            bad.append((c, str(e)))
            if warn:
                warnings.warn(f"skipping invalid checkpoint: {e}", stacklevel=2)
            continue
        return c, bad
    return None, bad


def _sha256(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(chunk)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def _fsync_file(path: Path) -> None:
    with open(path, "rb+") as f:
        f.flush()
        os.fsync(f.fileno())


# ----------------------------------------------------------------------------------------------
# save


def _is_disk_full(err: BaseException) -> bool:
    import errno

    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    text = str(err)  # torch.save reports a full disk as a RuntimeError from its zip writer
    return "No space left" in text or ("file write failed" in text and "inline_container" in text)


def save_checkpoint(
    out_dir: str | os.PathLike,
    step: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any | None = None,
    *,
    extra: dict[str, Any] | None = None,
    keep: int = 2,
) -> Path:
    """Write ``out_dir/ckpt-<step>`` atomically and return its path.

    ``extra`` holds any further resumable state (data position, RNG, elapsed time, ...); it must be
    made of tensors and plain Python values (see :func:`check_plain`). ``keep``: number of newest
    checkpoints to keep after this one is complete (0 keeps all). Wrapped models (DDP, compiled)
    are unwrapped; tied/shared weights are stored once (``safetensors.torch.save_model``).

    A checkpoint is never written with non-finite weights or optimizer state (:class:`CheckpointError`),
    so every checkpoint on disk is a good one and pruning can never leave only poisoned ones. A full
    disk raises ``OSError(ENOSPC)`` ("no space left on device") and leaves no temporary files.
    """
    raw = unwrap_model(model)
    bad = nonfinite_tensors(raw.state_dict())
    if optimizer is not None:
        bad += nonfinite_tensors(optimizer.state_dict().get("state", {}), "optimizer")
    if bad:
        raise CheckpointError(f"refusing to save step {step}: non-finite values in {', '.join(bad[:4])}"
                              + (f" and {len(bad) - 4} more" if len(bad) > 4 else ""))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    name = checkpoint_name(step)
    tmp = out / (name + ".tmp")
    try:
        return _write_checkpoint(out, name, tmp, step, raw, optimizer, scheduler, extra, keep)
    except BaseException as err:
        shutil.rmtree(tmp, ignore_errors=True)
        if _is_disk_full(err) and not isinstance(err, OSError):
            import errno

            raise OSError(errno.ENOSPC, "No space left on device", str(out)) from None
        raise


def _write_checkpoint(out: Path, name: str, tmp: Path, step: int, raw: nn.Module, optimizer, scheduler,
                      extra: dict[str, Any] | None, keep: int) -> Path:
    from safetensors.torch import save_model

    final = out / name
    if tmp.exists():  # left over from an interrupted save of this step
        shutil.rmtree(tmp)
    tmp.mkdir()

    state: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "step": int(step),
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "scheduler": scheduler.state_dict() if scheduler is not None else None,
    }
    if extra:
        overlap = set(extra) & set(state)
        if overlap:
            raise ValueError(f"save_checkpoint: extra may not use reserved keys {sorted(overlap)}")
        state.update(extra)
    check_plain(state)

    save_model(raw, str(tmp / MODEL_FILE), metadata={"step": str(step), "format": "pt"})
    torch.save(state, tmp / STATE_FILE)
    files = {}
    for fname in (MODEL_FILE, STATE_FILE):
        p = tmp / fname
        _fsync_file(p)
        files[fname] = {"size": p.stat().st_size, "sha256": _sha256(p)}
    manifest = {
        "format_version": FORMAT_VERSION,
        "step": int(step),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "files": files,
    }
    with open(tmp / MANIFEST_FILE, "w") as f:
        json.dump(manifest, f, indent=2)
        f.flush()
        os.fsync(f.fileno())
    fsync_dir(tmp)

    if final.exists():
        # Same step written before (e.g. a corrupt checkpoint we resumed past). Move it aside,
        # put the new one in place, then delete the old one.
        aside = out / (name + f".replaced-{os.getpid()}")
        os.replace(final, aside)
        os.replace(tmp, final)
        shutil.rmtree(aside, ignore_errors=True)
    else:
        os.replace(tmp, final)
    fsync_dir(out)
    atomic_write_text(out / LATEST_FILE, name + "\n")

    if keep > 0:
        for old in list_checkpoints(out)[:-keep]:
            if old != final:  # renamed first: a kill mid-delete leaves ckpt-<step>.pruned/, never a torn ckpt-<step>
                gone = old.with_name(old.name + ".pruned")
                os.replace(old, gone)
                shutil.rmtree(gone, ignore_errors=True)
    remove_stale_tmp(out)  # of saves killed before (a save of this step reuses its own above)
    return final


# ----------------------------------------------------------------------------------------------
# load


def verify_checkpoint(path: str | os.PathLike, *, check_finite: bool = True) -> dict[str, Any]:
    """Check ``manifest.json`` against the files (presence, size, sha256) and, with
    ``check_finite``, that weights and optimizer state are finite; return the manifest.

    Raises :class:`CheckpointError` naming the checkpoint, the file and what is wrong.
    """
    ckpt = Path(path)
    if not ckpt.is_dir():
        raise CheckpointError(f"checkpoint {ckpt}: not a directory")
    mpath = ckpt / MANIFEST_FILE
    if not mpath.is_file():
        raise CheckpointError(
            f"checkpoint {ckpt}: {MANIFEST_FILE} is missing (the save was interrupted or this is "
            "not a checkpoint directory)"
        )
    try:
        manifest = json.loads(mpath.read_text())
        files = manifest["files"]
    except (ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"checkpoint {ckpt}: {MANIFEST_FILE} is unreadable ({e})") from e
    if not isinstance(files, dict) or set(files) != {MODEL_FILE, STATE_FILE}:
        listed = sorted(files) if isinstance(files, dict) else files
        raise CheckpointError(f"checkpoint {ckpt}: {MANIFEST_FILE} must list {MODEL_FILE} and {STATE_FILE} "
                              f"(it lists {listed})")
    for fname, meta in files.items():  # a damaged entry is an unreadable manifest, not an internal error (probe AC)
        if not (isinstance(meta, dict) and type(meta.get("size")) is int and isinstance(meta.get("sha256"), str)):
            raise CheckpointError(f"checkpoint {ckpt}: {MANIFEST_FILE} is unreadable (entry {fname} = {meta!r}: "
                                  "needs an integer size and a sha256 string)")
    step = checkpoint_step(ckpt.name)
    if step is not None and manifest.get("step") != step:  # a renamed folder would resume at the wrong step
        raise CheckpointError(f"checkpoint {ckpt}: its name says step {step}, its {MANIFEST_FILE} says step "
                              f"{manifest.get('step')!r} (renamed or copied by hand?)")
    for fname, meta in files.items():
        p = ckpt / fname
        if not p.is_file():
            raise CheckpointError(f"checkpoint {ckpt}: file {fname} is missing")
        size = p.stat().st_size
        if size != meta["size"]:
            what = "truncated" if size < meta["size"] else "larger than recorded"
            raise CheckpointError(
                f"checkpoint {ckpt}: file {fname} is {what}: {size} bytes, manifest says "
                f"{meta['size']} bytes"
            )
        digest = _sha256(p)
        if digest != meta["sha256"]:
            raise CheckpointError(
                f"checkpoint {ckpt}: file {fname} is corrupt: sha256 {digest[:16]}... does not "
                f"match the manifest's {meta['sha256'][:16]}..."
            )
    if check_finite:
        _check_finite(ckpt)
    return manifest


def _reader_error(err: Exception) -> str:
    """A reader's error in one short line: torch.load's weights-only refusal is a paragraph of advice around
    the one line that says what is wrong (``WeightsUnpickler error: ...``)."""
    text = " ".join(str(err).split())
    if "WeightsUnpickler error:" in text:
        what = text.split("WeightsUnpickler error:", 1)[1].split(" Check the documentation")[0].strip()
        return f"{type(err).__name__}: {what[:200]}"
    return brief(err, 200)


def _check_finite(ckpt: Path) -> None:
    """A checkpoint with NaN/inf weights or optimizer moments is not a good checkpoint (older versions
    of the trainer could write one when training diverged)."""
    from safetensors.torch import load_file

    name = MODEL_FILE
    try:
        bad = nonfinite_tensors(load_file(str(ckpt / MODEL_FILE)))
        name = STATE_FILE
        state = torch.load(ckpt / STATE_FILE, map_location="cpu", weights_only=True)
    except Exception as e:  # unreadable despite a matching hash: report, do not crash
        raise CheckpointError(f"checkpoint {ckpt}: cannot read {name} ({_reader_error(e)})") from None
    bad += nonfinite_tensors((state.get("optimizer") or {}).get("state", {}), "optimizer")
    if bad:
        raise CheckpointError(f"checkpoint {ckpt}: non-finite values in {', '.join(bad[:3])}")


def _resolve_checkpoint(path: str | os.PathLike) -> Path:
    p = Path(path)
    if p.is_dir() and not (p / MANIFEST_FILE).exists() and checkpoint_step(p) is None:
        # a run directory: take the newest valid checkpoint in it
        found, _ = latest_valid_checkpoint(p)
        if found is None:
            raise CheckpointError(f"no valid checkpoint in run directory {p}")
        return found
    return p


def _load_weights(model: nn.Module, file: Path, strict: bool) -> None:
    from safetensors.torch import load_model

    raw = unwrap_model(model)
    try:
        load_model(raw, str(file), strict=strict, device="cpu")
    except RuntimeError as e:
        shapes = re.findall(r"size mismatch for ([\w.]+): copying a param with shape (torch.Size\(\[[\d, ]*\]\)) "
                            r"from checkpoint, the shape in current model is (torch.Size\(\[[\d, ]*\]\))", str(e))
        if shapes:
            name, old, new = shapes[0]
            raise CheckpointError(
                f"{file}: the checkpoint does not fit this model ({name} is {old[11:-1]} in the checkpoint, "
                f"{new[11:-1]} in the model{f'; {len(shapes) - 1} more' if len(shapes) > 1 else ''}): "
                "use the model config the run was trained with, or start a new run") from None
        text = " ".join(str(e).split())
        raise CheckpointError(f"{file}: weights do not fit {type(raw).__name__}: {text[:300]}") from None
    except Exception as e:  # safetensors raises its own error types for bad headers
        raise CheckpointError(f"{file}: cannot read safetensors file: {e}") from e


def load_model_weights(
    model: nn.Module, path: str | os.PathLike, *, strict: bool = True, verify: bool = True,
) -> Path:
    """Load only the weights into ``model`` (for evaluation / generation); return the file used.

    ``path`` may be a checkpoint directory, a run directory (newest valid checkpoint) or a
    ``.safetensors`` file.
    """
    p = Path(path)
    if p.is_file():
        _load_weights(model, p, strict)
        return p
    ckpt = _resolve_checkpoint(p)
    if verify:
        verify_checkpoint(ckpt)
    _load_weights(model, ckpt / MODEL_FILE, strict)
    return ckpt / MODEL_FILE


def load_checkpoint(
    path: str | os.PathLike,
    model: nn.Module | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any | None = None,
    *,
    verify: bool = True,
    strict: bool = True,
) -> dict[str, Any]:
    """Verify and load a checkpoint; return the full state dict (``step``, ``extra`` keys, ...).

    Weights go into ``model`` (unwrapped; may live on any device), optimizer/scheduler states are
    loaded when given. ``path`` may also be a run directory (newest valid checkpoint).
    The returned dict has ``path`` set to the checkpoint directory that was read.
    """
    ckpt = _resolve_checkpoint(path)
    if verify:
        verify_checkpoint(ckpt)
    elif not ckpt.is_dir():
        raise CheckpointError(f"checkpoint {ckpt}: not a directory")
    try:
        state = torch.load(ckpt / STATE_FILE, map_location="cpu", weights_only=True)
    except FileNotFoundError as e:
        raise CheckpointError(f"checkpoint {ckpt}: file {STATE_FILE} is missing") from e
    except Exception as e:
        raise CheckpointError(f"checkpoint {ckpt}: cannot read {STATE_FILE}: {e}") from e
    if model is not None:
        _load_weights(model, ckpt / MODEL_FILE, strict)
    if optimizer is not None:
        if state.get("optimizer") is None:
            raise CheckpointError(f"checkpoint {ckpt}: {STATE_FILE} holds no optimizer state")
        try:
            optimizer.load_state_dict(state["optimizer"])
        except (ValueError, KeyError) as e:
            raise CheckpointError(
                f"checkpoint {ckpt}: optimizer state does not fit this optimizer: {e}"
            ) from e
    if scheduler is not None and state.get("scheduler") is not None:
        scheduler.load_state_dict(state["scheduler"])
    state["path"] = str(ckpt)
    return state
