"""Crash-safe file writes (a reader sees the old file or the new one, never a torn one) and checked reads.

``atomic_write_bytes`` writes to a temporary file beside the target and renames it over the target
(``os.replace`` is atomic on POSIX). With ``durable=True`` (default) the data and the directory entry
are fsync'ed too, so the new file also survives a power loss; checkpoints rely on that. A writer killed
between the two leaves its temporary file, which :func:`remove_stale_temp_files` deletes once that pid is gone.

Checked reads (:func:`read_text`, :func:`read_json`, :func:`read_csv`, :func:`number`): a damaged file is one line
naming it and the line, column or key, a :class:`~energyformer.errors.DataError`, never a bare ``ValueError``.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


def _decode(data: bytes, label: str, expected: str, error: Callable[[str], Exception]) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        col = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        raise error(f"{label}:{line}:{col}: not UTF-8 text (byte 0x{data[err.start]:02x}; binary or damaged data, "
                    f"expected {expected})") from None


def read_text_file(path: Path, error: Callable[[str], Exception], label: str, expected: str) -> str:
    """The UTF-8 text of ``path``, or ``error(message)`` raised for a folder, binary data (line and column of the
    first bad byte) or an unreadable file: one line starting with ``label`` (the file, maybe with what it is) and
    naming the ``expected`` content."""
    if path.is_dir():
        raise error(f"{label}: is a directory, not {expected}")
    try:
        data = path.read_bytes()
    except OSError as err:
        raise error(f"{label}: cannot read ({err.strerror})") from None
    return _decode(data, label, expected, error)


def read_text(path: str | os.PathLike, label: str | None = None, expected: str = "a text file") -> str:
    """:func:`read_text_file` raising :class:`~energyformer.errors.DataError` (``label``: default the path), a
    missing file named too."""
    from ..errors import DataError

    path = Path(path)
    name = label or str(path)
    if not path.exists():
        raise DataError(f"{name}: not found")
    return read_text_file(path, DataError, name, expected)


def read_json(path: str | os.PathLike, label: str | None = None, *, kind: type = dict,
              require: tuple[str, ...] = ()) -> Any:
    """The JSON value of ``path`` (a ``kind``: an object by default; ``object`` takes any), or a
    :class:`~energyformer.errors.DataError` starting ``label`` (default: the path) — missing, a folder, not text,
    empty, malformed (``label:line:col``), another kind, or an object lacking one of the ``require`` d keys."""
    from ..errors import DataError

    name = label or str(path)
    text = read_text(path, name, "a JSON file")
    if not text.strip():
        raise DataError(f"{name}: empty file (expected JSON)")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise DataError(f"{name}:{err.lineno}:{err.colno}: not valid JSON ({err.msg}; truncated or damaged?)") \
            from None
    if not isinstance(data, kind):
        raise DataError(f"{name}: holds a JSON {type(data).__name__}, expected a {kind.__name__}")
    if require:
        require_keys(data, require, name)
    return data


def read_csv(path: Path, fields: tuple[str, ...], label: str | None = None,
             comment: str = "#") -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    """(comment lines without their ``#``, [(line number, row)]) of a CSV whose header names every one of
    ``fields``; a row with a missing or extra cell is a DataError naming file and line."""
    from ..errors import DataError

    name = label or str(path)
    lines = read_text(path, name, "a CSV file").splitlines()
    comments = [ln[len(comment):].strip() for ln in lines if ln.startswith(comment)]
    body = [(n, ln) for n, ln in enumerate(lines, 1) if not ln.startswith(comment) and ln.strip()]
    if not body:
        raise DataError(f"{name}: no header row (expected the columns {', '.join(fields)})")
    parsed = list(csv.reader([ln for _, ln in body]))
    header, head_line = parsed[0], body[0][0]
    missing = [f for f in fields if f not in header]
    if missing:
        raise DataError(f"{name}:{head_line}: header lacks the column(s) {', '.join(missing)} "
                        f"(expected {', '.join(fields)})")
    rows = []
    for (n, _), cells in zip(body[1:], parsed[1:]):
        if len(cells) != len(header):
            raise DataError(f"{name}:{n}: {len(cells)} cells, the header has {len(header)} ({', '.join(header)})")
        rows.append((n, dict(zip(header, cells))))
    return comments, rows


def number(value: Any, where: str, *, finite: bool = True, integer: bool = False) -> float:
    """``value`` as a float (an int where ``integer``): a CSV cell's text or a JSON number. A bool, a
    non-numeric string, None or (where ``finite``) NaN/inf is a DataError ``where: ...`` (``where`` names the
    file and the line or key)."""
    from ..errors import DataError

    want = "an integer" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise DataError(f"{where}: {value!r} is not a number (expected {want})")
    try:
        out = int(value) if integer else float(value)
    except ValueError:
        raise DataError(f"{where}: {value!r} is not a number (expected {want})") from None
    if finite and not math.isfinite(out):
        raise DataError(f"{where}: {value!r} is not finite (expected a finite number)")
    return out


def require_keys(data: dict, keys: tuple[str, ...], where: str) -> None:
    """A DataError ``where: lacks the key(s) ...`` when ``data`` lacks one of ``keys``."""
    from ..errors import DataError

    missing = [k for k in keys if k not in data]
    if missing:
        raise DataError(f"{where}: lacks the key(s) {', '.join(repr(k) for k in missing)} "
                        f"(expected {', '.join(keys)})")
