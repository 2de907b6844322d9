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
    true/false), or an empty record set of ``study`` at ``scale`` where there is no file (None: not checked)."""
    if path.exists():
        data = read_json(path, f"study records {path}", require=("format", "runs"))
        if data.get("format") != FORMAT:
            raise ConfigError(f"{path}: not a study record file (format {data.get('format')!r}, want {FORMAT})")
        # another study's or scale's records were read as this one's: pages rewritten from them, runs added
        for key, want in (("study", study), ("scale", scale)):
            if want is not None and key in data and data[key] != want:
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
        fresh = load_results(path, data.get("study"), data.get("scale")) if path.exists() else data
        change(fresh)
        save_results(path, fresh)
    if fresh is not data:
        data.clear()
        data.update(fresh)
    return data
