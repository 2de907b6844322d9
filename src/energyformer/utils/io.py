"""Crash-safe file writes (a reader sees the old file or the new one, never a torn one) and checked reads.

``atomic_write_bytes`` writes to a temporary file beside the target and renames it over the target
(``os.replace`` is atomic on POSIX). With ``durable=True`` (default) the data and the directory entry
are fsync'ed too, so the new file also survives a power loss; checkpoints rely on that. A writer killed
between the two leaves its temporary file, which :func:`remove_stale_temp_files` deletes once that pid is gone.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

_TEMP_RE = re.compile(r"^\..+\.(\d+)\.tmp$")  # atomic_write_bytes's temporary file: .<name>.<pid>.tmp


def fsync_dir(path: Path) -> None:
    """Flush a directory entry (rename / create) to disk; a no-op where directories can't be opened."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid runs on this machine (ours included): the owner test of the temporary
    files and folders named after their writer's pid, which only a dead writer's may be removed."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return pid > 0  # another user's process (an absurd pid is nobody's)
    return True


def remove_stale_temp_files(folder: str | os.PathLike) -> list[Path]:
    """Delete the temporary files ``.<name>.<pid>.tmp`` of :func:`atomic_write_bytes` calls whose writer was
    killed (its pid no longer runs); return them. The target files themselves are never touched."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    stale = []
    for p in folder.iterdir():
        m = _TEMP_RE.match(p.name)
        if m and p.is_file() and not p.is_symlink() and not pid_alive(int(m.group(1))):
            p.unlink(missing_ok=True)
            stale.append(p)
    return stale


def atomic_write_bytes(path: str | os.PathLike, data: bytes, *, durable: bool = True) -> Path:
    """Write ``data`` to ``path`` atomically (temporary file + rename), creating parent folders."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        if durable:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if durable:
        fsync_dir(path.parent)
    return path


def atomic_write_text(path: str | os.PathLike, text: str, *, durable: bool = True) -> Path:
    """UTF-8 text version of :func:`atomic_write_bytes`."""
    return atomic_write_bytes(path, text.encode("utf-8"), durable=durable)


def read_text_file(path: Path, error: Callable[[str], Exception], label: str, expected: str) -> str:
    """The UTF-8 text of ``path``, or ``error(message)`` raised for a folder, binary data or an unreadable file:
    one line starting with ``label`` (the file, maybe with what it is) and naming the ``expected`` content."""
    if path.is_dir():
        raise error(f"{label}: is a directory, not {expected}")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise error(f"{label}: not a text file (binary data, not UTF-8; expected {expected})") from None
    except OSError as err:
        raise error(f"{label}: cannot read ({err.strerror})") from None


def read_json(path: str | os.PathLike, what: str = "JSON file", require: tuple[str, ...] = ()) -> dict:
    """A JSON object from ``path``, or a :class:`~energyformer.errors.DataError` naming the file and
    what is wrong with it: missing, a folder, not text, empty, malformed (line and column), not an
    object, or lacking one of the ``require`` d top-level keys."""
    import json

    from ..errors import DataError

    p = Path(path)
    if not p.exists():
        raise DataError(f"{what} {p}: not found")
    text = read_text_file(p, DataError, f"{what} {p}", "a JSON file")
    if not text.strip():
        raise DataError(f"{what} {p}: empty file (expected JSON)")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(f"{what} {p}: not valid JSON at line {e.lineno}, column {e.colno} ({e.msg})") from None
    if not isinstance(data, dict):
        raise DataError(f"{what} {p}: holds a JSON {type(data).__name__}, expected an object")
    missing = [k for k in require if k not in data]
    if missing:
        raise DataError(f"{what} {p}: lacks the key(s) {', '.join(repr(k) for k in missing)} "
                        f"(is it the right file?)")
    return data
