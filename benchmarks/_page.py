"""Shared helpers of the benchmark scripts' ``--json OUT`` / ``--render-only DIR`` modes (issue 22).

A benchmark run with ``--json OUT`` writes its raw measurements plus :func:`machine` (device, threads,
torch, the load average before and after, the command) to OUT; ``--render-only DIR`` rebuilds the
results page in DIR from that committed JSON alone, byte for byte the same every time (the page
contract of ``energyformer report``): it measures nothing and reads only DIR.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import sys
from pathlib import Path

import torch


def loadavg() -> list[float] | None:
    """The 1-, 5- and 15-minute load averages (None where the OS has none)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def machine(argv: list[str] | None = None) -> dict:
    """What a measurement ran on, recorded beside it; ``load_before`` is read here, ``load_after`` by
    :func:`finish`."""
    return {"command": "python " + " ".join(shlex.quote(a) for a in [sys.argv[0], *(argv or sys.argv[1:])]),
            "torch": torch.__version__, "threads": torch.get_num_threads(), "cpus": os.cpu_count(),
            "machine": platform.machine(), "nice": os.nice(0), "load_before": loadavg()}


def finish(meta: dict) -> dict:
    return meta | {"load_after": loadavg()}


def write_json(path: Path, payload: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=1, sort_keys=False) + "\n")


def read_input(path: Path, *, as_json: bool = False):
    """A committed raw output's text (or JSON value): binary, damaged or malformed JSON stops the script with one
    line naming file and line (energyformer.utils.io), not a traceback; its own parser checks the rest."""
    from energyformer.errors import DataError
    from energyformer.utils.io import read_json as checked_json
    from energyformer.utils.io import read_text

    if not path.is_file():
        raise SystemExit(f"{path}: not found (the committed raw output this page is rendered from)")
    try:
        return checked_json(path) if as_json else read_text(path)
    except DataError as err:
        raise SystemExit(str(err)) from None


def read_json(folder: Path, name: str) -> dict:
    return read_input(folder / name, as_json=True)


def load_line(meta: dict) -> str:
    """'1-minute load average 9.1 before, 11.3 after' from the recorded machine."""
    b, a = meta.get("load_before"), meta.get("load_after")
    if not b or not a:
        return "load average not recorded"
    return f"1-minute load average {b[0]:g} before the run, {a[0]:g} after"


def write_page(folder: Path, name: str, text: str) -> None:
    (folder / name).write_text(text.rstrip() + "\n")


def markdown_emitter(out: Path | None, title: str, header_lines: int):
    """``emit(lines)`` for scripts that print their output table by table: prints ``lines`` and, with ``out``,
    rewrites that file after every call as ``# title``, the output's first ``header_lines`` lines fenced, then the
    rest as markdown, so a cut run keeps every table it finished."""
    done: list[str] = []

    def emit(lines: list[str]) -> None:
        done.extend(lines)
        print("\n".join(lines), flush=True)
        if out:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(f"# {title}\n\n```\n" + "\n".join(done[:header_lines]) + "\n```\n"
                           + "\n".join(done[header_lines:]) + "\n")

    return emit
