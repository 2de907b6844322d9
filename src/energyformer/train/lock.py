"""An OS-level lock on a run directory, so two trainings never write into the same run at once.

``RunDirLock(run_dir)`` takes an exclusive ``fcntl.flock`` on ``run_dir/.lock`` (created if needed) and
writes who holds it (pid, host, start time, command line) into the file. The kernel releases the lock
when the holding process exits in any way (normal exit, exception, Ctrl-C, SIGKILL), so a lock file
left behind by a dead process is *stale* and simply taken over; only a live holder blocks. A second
process gets :class:`RunDirBusy` naming the directory and the holder. On platforms without ``fcntl``
(Windows) the lock is a no-op and says so in a warning.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import warnings
from pathlib import Path

from ..errors import UserError

try:  # POSIX
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

LOCK_FILE = ".lock"


class RunDirBusy(UserError):
    """Another live process holds the run directory's lock."""


def lock_holder(run_dir: str | os.PathLike) -> dict:
    """What the lock file says about its (last) holder; {} when there is none or it is unreadable."""
    try:
        return json.loads((Path(run_dir) / LOCK_FILE).read_text() or "{}")
    except (OSError, ValueError):
        return {}


class RunDirLock:
    """Exclusive lock on ``run_dir`` for the lifetime of a ``with`` block (or until :meth:`release`)."""

    def __init__(self, run_dir: str | os.PathLike):
        self.run_dir = Path(run_dir)
        self._fd: int | None = None

    def acquire(self) -> RunDirLock:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if fcntl is None:  # pragma: no cover
            warnings.warn("run-directory locking is not available on this platform", stacklevel=2)
            return self
        fd = os.open(self.run_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            who = lock_holder(self.run_dir)
            desc = (f"process {who.get('pid', '?')} on {who.get('host', '?')} (started {who.get('started', '?')}: "
                    f"{who.get('command', '?')})") if who else "another process"
            raise RunDirBusy(f"run directory {self.run_dir} is in use by {desc}; wait for it to finish, "
                             f"stop it, or use another run name") from None
        info = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%d %H:%M:%S"),
                "command": " ".join(sys.argv)[:300]}
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps(info).encode())
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            try:
                os.ftruncate(self._fd, 0)
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            finally:
                os.close(self._fd)
                self._fd = None

    def __enter__(self) -> RunDirLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
