"""The export's output folder: written whole beside it, then moved into place.

An export never writes into a folder that holds other files: they could be a run's checkpoint (its
``model.safetensors`` overwritten) or another export's ``tokenizer.json`` left beside a model with another
vocabulary. ``overwrite`` replaces a folder only when it is an earlier export (its ``config.json`` carries
:data:`MARKER`). The new folder is written in a hidden sibling and renamed into place once it is complete
and checked, so a failed or killed export leaves OUT as it was; the next export to OUT removes what a killed
one left beside it (:func:`_clean_stale`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

from ..errors import UserError
from ..utils.io import pid_alive
from ..utils.paths import check_writable_dir

#: key of every exported config.json (value: the format version); what ``overwrite`` may replace
MARKER = "energyformer_export"
MARKER_VERSION = 1


def is_export(path: Path) -> bool:
    """Whether ``path`` is a folder an export wrote (its config.json carries :data:`MARKER`)."""
    try:
        return MARKER in json.loads((Path(path) / "config.json").read_text())
    except (OSError, ValueError, TypeError):
        return False


def _entries(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir())


def _clean_stale(out: Path) -> None:
    """The staging and set-aside siblings of exports that were killed (their pid no longer runs): a set-aside
    earlier export goes back to ``out`` where a kill came between the two renames (``out`` missing), every other
    one is deleted."""
    pattern = re.compile(rf"^\.{re.escape(out.name)}\.(export|replaced)-(\d+)$")
    for p in sorted(out.parent.iterdir()) if out.parent.is_dir() else []:
        m = pattern.match(p.name)
        if not m or not p.is_dir() or p.is_symlink() or pid_alive(int(m.group(2))):
            continue
        if m.group(1) == "replaced" and not out.exists():
            os.replace(p, out)
        else:
            shutil.rmtree(p, ignore_errors=True)


@contextlib.contextmanager
def export_folder(out: str | Path, overwrite: bool = False, error: type[UserError] = UserError) -> Iterator[Path]:
    """Yield an empty staging folder; on success it becomes ``out`` (see the module docstring).

    Refused up front, in one line (``error``): ``out`` is a file; ``out`` holds files and is not an earlier
    export; ``out`` is an earlier export and ``overwrite`` is False, or holds the working folder (it cannot be
    moved aside); ``out``'s folder cannot be written. An existing empty ``out`` (``.``, a mount point, a link) is
    filled in place, ``config.json`` (the :data:`MARKER`) last, so a kill there leaves no folder that looks like
    an export.
    """
    given, out = Path(out), Path(os.path.abspath(out))  # '.' and '..' have no name to stage beside
    if out.exists() and not out.is_dir():
        raise error(f"{given} is a file: the export's OUT must be a folder (a new or empty one)")
    check_writable_dir(out.parent, "the export's folder")
    _clean_stale(out)
    held = _entries(out) if out.is_dir() else []
    if held:
        shown = ", ".join(held[:3]) + (", ..." if len(held) > 3 else "")
        if not is_export(out):
            raise error(f"{given} is not empty ({shown}) and is not an earlier export: give a new or empty folder")
        if not overwrite:
            raise error(f"{given} holds an earlier export ({shown}): give a new or empty folder, or --overwrite "
                        "to replace it")
        if Path.cwd().resolve().is_relative_to(out.resolve()):
            raise error(f"{given} holds the working folder, which --overwrite cannot move aside: run the export "
                        "from another folder")
    stage = out.with_name(f".{out.name}.export-{os.getpid()}")
    shutil.rmtree(stage, ignore_errors=True)  # a stale one of this pid
    stage.mkdir()
    try:
        yield stage
        old = out.with_name(f".{out.name}.replaced-{os.getpid()}")
        if held:
            out.rename(old)  # the earlier export moves aside only once the new one is complete
            stage.rename(out)
        elif out.is_dir():  # empty: filled in place, the marker last
            for f in sorted(stage.iterdir(), key=lambda p: p.name == "config.json"):
                shutil.move(f, out / f.name)
        else:
            stage.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


__all__ = ["MARKER", "export_folder", "is_export"]
