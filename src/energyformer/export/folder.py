"""The export's output folder: written whole beside it, then moved into place.

An export never writes into a folder that holds other files: they could be a run's checkpoint (its
``model.safetensors`` overwritten) or another export's ``tokenizer.json`` left beside a model with another
vocabulary. ``overwrite`` replaces a folder only when it is an earlier export (its ``config.json`` carries
:data:`MARKER`). The new folder is written in a hidden sibling and renamed into place once it is complete
and checked, so a failed or killed export leaves OUT as it was.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from ..errors import UserError

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


@contextlib.contextmanager
def export_folder(out: str | Path, overwrite: bool = False, error: type[UserError] = UserError) -> Iterator[Path]:
    """Yield an empty staging folder; on success it becomes ``out`` (see the module docstring).

    Refused up front, in one line (``error``): ``out`` is a file; ``out`` holds files and is not an earlier
    export; ``out`` is an earlier export and ``overwrite`` is False.
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise error(f"{out} is a file: the export's OUT must be a folder (a new or empty one)")
    held = _entries(out) if out.is_dir() else []
    if held:
        shown = ", ".join(held[:3]) + (", ..." if len(held) > 3 else "")
        if not is_export(out):
            raise error(f"{out} is not empty ({shown}) and is not an earlier export: give a new or empty folder")
        if not overwrite:
            raise error(f"{out} holds an earlier export ({shown}): give a new or empty folder, or --overwrite "
                        "to replace it")
    out.parent.mkdir(parents=True, exist_ok=True)
    stage = out.with_name(f".{out.name}.export-{os.getpid()}")
    shutil.rmtree(stage, ignore_errors=True)  # a stale one of this pid
    stage.mkdir()
    try:
        yield stage
        old = out.with_name(f".{out.name}.replaced-{os.getpid()}")
        if held:
            out.rename(old)  # the earlier export moves aside only once the new one is complete
        elif out.is_dir():
            out.rmdir()
        stage.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


__all__ = ["MARKER", "export_folder", "is_export"]
