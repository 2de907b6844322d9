"""A scale's record file, ``<out>/results.json`` (split from :mod:`~energyformer.studies.runner`): read checked
(:func:`load_results`), written atomically (:func:`save_results`), and changed only under a lock
(:func:`update_results`).

Several ``reproduce`` processes may write one page folder at once (two ``--only`` selections into the default
``docs/results/<study>``). Each change is therefore a locked read-modify-write: an exclusive ``fcntl.flock`` on the
page folder itself (no lock file is left beside the committed records), the file re-read, the one record inserted,
the file written atomically, the lock released. Before, each process rewrote the whole file from the snapshot it read
at its start, and the last writer silently dropped every record the other had added.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from pathlib import Path
from typing import Any, Callable, Iterator

from ..utils.io import atomic_write_text, read_json
from ..utils.validate import ConfigError

try:  # POSIX
    import fcntl
except ImportError:  # pragma: no cover - Windows: no lock (one process per page folder)
    fcntl = None  # type: ignore[assignment]

#: version of the record format in results.json
FORMAT = 1

#: top-level keys of a results file that describe records migrated from an old program
MIGRATION_KEYS = ("setup", "note")


def load_results(path: Path, study: str | None, scale: str | None) -> dict:
    """The records of ``path`` (checked: format, the study's and scale's own, every record a mapping, no metric a
    true/false), or an empty record set of ``study`` at ``scale`` where there is no file (None: not checked).
    ``study`` is a study's name or the path of its file (a user's file's stem is the records' name,
    :func:`.preflight.study_key`; its records also carry ``origin``, the file's path relative to the records' folder,
    so that moving the study with its page folder, or cloning both, keeps them its own, and another file's records
    of the same name are refused)."""
    from .preflight import study_key, study_origin

    origin = study_origin(study) if study is not None else None
    if origin is not None:
        origin = os.path.relpath(origin, path.parent.resolve())
    study = study_key(study) if study is not None else None
    if path.exists():
        data = read_json(path, f"study records {path}", require=("format", "runs"))
        if data.get("format") != FORMAT:
            raise ConfigError(f"{path}: not a study record file (format {data.get('format')!r}, want {FORMAT})")
        # another study's or scale's records were read as this one's: pages rewritten from them, runs added
        for key, want in (("study", study), ("scale", scale)):
            if want is not None and key in data and data[key] != want:
                raise ConfigError(f"{path}: the records of {key} {data[key]!r}, not {want!r}: give this "
                                  f"{key}'s own --out (or a new folder)")
        if study is not None and data.get("origin") != origin:  # two study files of one name (probe BA)
            have, want = (f"the study file {o} (from this folder)" if o else f"the library's studies/{study}.yaml"
                          for o in (data.get("origin"), origin))
            raise ConfigError(f"{path}: the records of {have}, not {want}: give this study its own --out (and "
                              "--runs); a study file moved without its page folder: move them together")
        runs = data["runs"]
        bad = next((k for k, r in runs.items() if not isinstance(r, dict)), None) if isinstance(runs, dict) else ""
        if bad is not None:
            what = f"runs[{bad!r}] is not a record (a mapping)" if bad else "'runs' is not a mapping of run records"
            raise ConfigError(f"{path}: {what}")
        for key, r in runs.items():
            where = _bool_leaf(r.get("metrics"), f"runs[{key!r}].metrics")
            if where is not None:  # JSON true was read as 1.0 and turned a verdict
                raise ConfigError(f"{path}: {where} is a true/false, not a metric value (a number, text or null)")
            problem = _bad_field(r, f"runs[{key!r}]")
            if problem is not None:  # rendered as is before: accuracy 150 %, a negative run time, an internal error
                raise ConfigError(f"{path}: {problem}")
        return data
    return {"format": FORMAT, "study": study, "scale": scale, "runs": {}, **({"origin": origin} if origin else {})}


#: top-level numbers of a record that cannot be negative
_COUNTS = ("steps", "seconds", "tokens_per_s")


def _bad_field(record: dict, where: str) -> str | None:
    """What is impossible in one record, or None: a seed that is missing or not an integer >= 0, a cell that is not
    a mapping of labels, a negative step count, time or speed, an accuracy outside [0, 100] (a fraction or a
    percentage) or a fraction outside [0, 1]."""
    seed = record.get("seed")
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        return f"{where}.seed = {seed!r}: must be an integer >= 0"
    cell = record.get("cell", {})
    if not isinstance(cell, dict) or not all(isinstance(v, (str, int, float)) for v in cell.values()):
        return f"{where}.cell = {cell!r}: must be a mapping of axis to label"
    for key in _COUNTS:
        v = record.get(key)
        if key in record and v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0):
            return f"{where}.{key} = {v!r}: must be a number >= 0"
    return _out_of_range(record.get("metrics"), f"{where}.metrics")


def _out_of_range(node: Any, where: str, keys: tuple[str, ...] = ()) -> str | None:
    """The first accuracy outside [0, 100] or fraction outside [0, 1] in a run's metrics, said, or None. A number is
    an accuracy when a key on its path names one (``accuracy.plain``, ``val.cell_accuracy@16``), a fraction when its
    own key ends in ``fraction``; a standard error or deviation (``_se``, ``_std``) and a list's elements (a curve
    holds steps beside values) are not checked."""
    if isinstance(node, (int, float)) and not isinstance(node, bool) and math.isfinite(node):
        own = keys[-1].lower() if keys else ""
        if not keys or own.endswith(("_se", "_std")):
            return None
        hi = 100.0 if any("accuracy" in k.lower() for k in keys) else 1.0 if own.endswith("fraction") else None
        if hi is not None and not 0.0 <= node <= hi:
            return f"{where} = {node!r}: {'an accuracy' if hi == 100 else 'a fraction'} is within [0, {hi:g}]"
        return None
    if isinstance(node, list):
        return None
    items = node.items() if isinstance(node, dict) else ()
    return next((w for k, v in items if (w := _out_of_range(v, f"{where}.{k}", (*keys, str(k)))) is not None), None)


def _bool_leaf(node: Any, where: str) -> str | None:
    """The path of the first true/false inside a run's metrics, or None (no metric is a bool)."""
    if isinstance(node, bool):
        return where
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    return next((w for k, v in items if (w := _bool_leaf(v, f"{where}.{k}")) is not None), None)


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


@contextlib.contextmanager
def folder_lock(folder: Path) -> Iterator[None]:
    """An exclusive ``fcntl.flock`` on ``folder`` (a directory can be locked through a read-only descriptor), held
    for the ``with`` block: another process's block waits. The kernel releases it when the process ends anyhow."""
    folder.mkdir(parents=True, exist_ok=True)
    if fcntl is None:  # pragma: no cover
        yield
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)   # (closing the only descriptor releases the lock)


def update_results(path: Path, data: dict, change: Callable[[dict], None]) -> dict:
    """``change`` applied to the records on disk under :func:`folder_lock`: the file re-read (``data``, the
    caller's copy, where there is none yet), changed, written atomically; ``data`` is then replaced by what was
    written, so the caller sees the records other processes added meanwhile. Returns ``data``."""
    with folder_lock(path.parent):
        study = str(path.parent / data["origin"]) if data.get("origin") else data.get("study")  # a file's: by path
        fresh = load_results(path, study, data.get("scale")) if path.exists() else data
        change(fresh)
        save_results(path, fresh)
    if fresh is not data:
        data.clear()
        data.update(fresh)
    return data
