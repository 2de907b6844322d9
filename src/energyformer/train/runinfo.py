"""Run records: ``config.yaml`` (the resolved config) and ``run_info.json`` (seed, versions, git).

``run_info.json`` is written when a run starts; each resume appends an entry to its ``resumes`` list
(step resumed from, checkpoint, time, git commit), so one file tells the whole history of a run.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import os
import platform
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

from energyformer.utils.io import atomic_write_text

CONFIG_FILE = "config.yaml"
RUN_INFO_FILE = "run_info.json"
_PACKAGES = ("energyformer", "numpy", "scipy", "einops", "safetensors", "pyyaml", "tqdm",
             "tensorboard", "tokenizers")


def to_plain(obj: Any) -> Any:
    """Dataclasses, tuples, Paths, ... -> dicts/lists/str so YAML and JSON can write them."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): to_plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set)):
        return [to_plain(v) for v in obj]
    if isinstance(obj, (str, int, float, bool)) or obj is None:
        return obj
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    return str(obj)


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def package_versions() -> dict[str, str | None]:
    from importlib import metadata

    out: dict[str, str | None] = {}
    for name in _PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def git_info(start: str | os.PathLike | None = None) -> dict[str, Any]:
    """``{"commit": sha, "dirty": bool}`` of the git repository holding ``start`` (default: this
    package's source, then the working directory); ``{"commit": None}`` outside a repository."""
    places = [Path(start)] if start is not None else [Path(__file__).resolve().parent, Path.cwd()]
    for where in places:
        try:
            sha = subprocess.run(["git", "rev-parse", "HEAD", "--show-toplevel"], cwd=where, capture_output=True,
                                 text=True, timeout=10)
            if sha.returncode != 0:
                continue
            st = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                cwd=where, capture_output=True, text=True, timeout=10)
            lines = sha.stdout.split()
            return {"commit": lines[0], "dirty": bool(st.stdout.strip()),
                    "repo": lines[1] if len(lines) > 1 else str(where)}
        except (OSError, subprocess.SubprocessError):
            continue
    return {"commit": None, "dirty": None}


def version_text() -> str:
    """``energyformer --version``: the package's version, torch's (and its CUDA), and the git commit of the
    checkout the package runs from (``+dirty`` with uncommitted changes), as a run records them."""
    from .. import __version__

    git = git_info(Path(__file__).resolve().parent)
    commit = "" if git["commit"] is None else f", commit {git['commit'][:12]}{'+dirty' if git['dirty'] else ''}"
    cuda = f", CUDA {torch.version.cuda}" if torch.version.cuda else ""
    return f"energyformer {__version__} (torch {torch.__version__}{cuda}, Python {sys.version.split()[0]}{commit})"


def collect_run_info(seed: int, device: torch.device, world_size: int) -> dict[str, Any]:
    return {
        "start_time": now_iso(),
        "seed": seed,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "argv": list(sys.argv),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": str(device),
        "world_size": world_size,
        "packages": package_versions(),
        "git": git_info(),
    }


def write_config(out_dir: Path, config: Any, *, resume_step: int | None = None) -> Path:
    """Write the resolved config as YAML. On resume a changed config goes to
    ``config-resume-<step>.yaml`` and the original ``config.yaml`` is kept."""
    import yaml

    text = yaml.safe_dump(to_plain(config), sort_keys=False)
    path = out_dir / CONFIG_FILE
    if resume_step is not None and path.is_file():
        if path.read_text() == text:
            return path
        path = out_dir / f"config-resume-{resume_step}.yaml"
    atomic_write_text(path, text)
    return path


#: ``extra`` fields of one training segment (a process): a resume records its own beside the first segment's
PER_SEGMENT = ("plugin_checks",)


def write_run_info(out_dir: Path, info: dict[str, Any], *, resume: dict[str, Any] | None = None,
                   extra: dict[str, Any] | None = None) -> Path:
    """Write ``run_info.json``; with ``resume`` append it to the existing file's ``resumes``. ``extra``: top-level
    fields set on every write (the run's plugins: a resume with another plugin list records the new one), except
    those of :data:`PER_SEGMENT`, which a resume records in its own ``resumes`` entry, keeping the first segment's
    (a plugin check that failed before a fix was otherwise lost from the record; probe BA)."""
    path = out_dir / RUN_INFO_FILE
    extra = dict(extra or {})
    if resume is not None and path.is_file():
        try:
            data = json.loads(path.read_text())
        except ValueError:
            data = dict(info)
        mine = {k: extra.pop(k) for k in PER_SEGMENT if k in extra and k in data}
        data.setdefault("resumes", []).append({**resume, "time": info["start_time"],
                                               "git": info["git"], "world_size": info["world_size"], **mine})
    else:
        data = dict(info)
        if resume is not None:
            data["resumes"] = [{**resume, "time": info["start_time"]}]
    data.update(extra)
    atomic_write_text(path, json.dumps(to_plain(data), indent=2) + "\n")
    return path
