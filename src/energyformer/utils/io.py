"""Crash-safe file writes: a reader sees the old file or the new one, never a torn one.

``atomic_write_bytes`` writes to a temporary file beside the target and renames it over the target
(``os.replace`` is atomic on POSIX). With ``durable=True`` (default) the data and the directory entry
are fsync'ed too, so the new file also survives a power loss; checkpoints rely on that.
"""

from __future__ import annotations

import os
from pathlib import Path


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
