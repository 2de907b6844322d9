"""Output paths are checked before any work (issue 25 class 5): a report, figure or run folder that
cannot be written is an error naming the path and why, not an error after an hour of training.

``check_writable_dir(path)`` creates the folder (as the work would) and writes and removes a probe
file in it; ``check_writable_file(path)`` does the same for the file's folder and refuses an existing
directory at the path. Both raise :class:`~energyformer.errors.ConfigError` with the option name.
``writable_dir`` / ``writable_file`` are the same checks as ``argparse`` types.
"""

from __future__ import annotations

import argparse
import errno
import os
import tempfile
from pathlib import Path

from ..errors import ConfigError

_WHY = {errno.EACCES: "permission denied", errno.EPERM: "permission denied", errno.EROFS: "read-only file system",
        errno.ENOSPC: "no space left on device", errno.ENOTDIR: "a parent of the path is a file, not a folder",
        errno.ENOENT: "a parent folder cannot be created there", errno.EEXIST: "a file is in the way",
        errno.EDQUOT: "disk quota exceeded"}


def _fail(option: str, path: Path, err: OSError | str) -> ConfigError:
    why = err if isinstance(err, str) else _WHY.get(err.errno, err.strerror or str(err))
    return ConfigError(f"{option} {path}: cannot be written ({why})")


def _probe(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-probe-"):
        pass


def _not_empty(path: str | os.PathLike, option: str) -> None:
    if not str(os.fspath(path)).strip():
        raise ConfigError(f"{option} {str(os.fspath(path))!r}: an empty path; give a folder or file name")


def check_writable_dir(path: str | os.PathLike, option: str = "output folder") -> Path:
    """Create ``path`` if needed and prove a file can be written in it; return it. An empty path (an unset
    shell variable, say) is refused, not taken for the current folder."""
    _not_empty(path, option)
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise _fail(option, p, "it is a file, not a folder")
    try:
        _probe(p)
    except OSError as e:
        raise _fail(option, p, e) from None
    return p


def check_writable_file(path: str | os.PathLike, option: str = "output file") -> Path:
    """Refuse a folder at ``path`` (and an empty path); create its parent folder and prove a file can be written
    there."""
    _not_empty(path, option)
    p = Path(path)
    if p.is_dir():
        raise _fail(option, p, "it is a folder, not a file")
    if p.exists() and not os.access(p, os.W_OK):
        raise _fail(option, p, "permission denied")
    try:
        _probe(p.parent)
    except OSError as e:
        raise _fail(option, p, e) from None
    return p


def _argparse_type(check, option: str, as_path: bool):
    def convert(value: str) -> Path | str:
        try:
            p = check(value, option)
        except ConfigError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        return p if as_path else str(value)
    convert.__name__ = "path"  # argparse names the type in its messages
    return convert


def writable_dir(option: str, as_path: bool = False):
    """``argparse`` type: a folder that can be written (checked at parse time, before any work);
    the value stays a string unless ``as_path``."""
    return _argparse_type(check_writable_dir, option, as_path)


def writable_file(option: str, as_path: bool = False):
    """``argparse`` type: a file path whose folder can be written (checked at parse time)."""
    return _argparse_type(check_writable_file, option, as_path)


def check_image_file(path: str | os.PathLike, option: str = "image file") -> Path:
    """:func:`check_writable_file` for a figure: its suffix must be a format matplotlib writes (png, pdf, svg, ...)."""
    from matplotlib.backend_bases import FigureCanvasBase

    p = Path(path)
    formats = sorted(FigureCanvasBase.get_supported_filetypes())
    if p.suffix.lower().lstrip(".") not in formats:
        raise ConfigError(f"{option} {p}: {p.suffix or 'no suffix'} is not an image format matplotlib writes; "
                          f"end the name in one of: {', '.join('.' + f for f in formats)}")
    return check_writable_file(p, option)


def writable_image(option: str, as_path: bool = False):
    """``argparse`` type: an image file path (:func:`check_image_file`, at parse time, before any work)."""
    return _argparse_type(check_image_file, option, as_path)
