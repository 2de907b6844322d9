"""Shared helpers of the benchmark scripts' ``--json OUT`` / ``--render-only DIR`` modes (issue 22).

A benchmark run with ``--json OUT`` writes its raw measurements plus :func:`machine` (device, threads,
torch, the load average before and after, the command) to OUT; ``--render-only DIR`` rebuilds the
results page in DIR from that committed JSON alone, byte for byte the same every time (the page
contract of ``energyformer report``): it measures nothing and reads only DIR.

The argument checks and the run header below are shared by every script (probe K): an argument a script cannot
honour is refused at parse time with argparse's one line naming the option, the value and what is allowed
(``--precisions fp16`` used to run float32 labelled "fp16"; ``--repeats 0`` ended in a traceback), a library
:class:`~energyformer.errors.UserError` raised later ends in one ``error:`` line (:func:`run`), and every output
starts with :func:`header` (device, threads, torch, commit) so a committed output says what produced it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import sys
from pathlib import Path

import torch

from energyformer.errors import ConfigError
from energyformer.utils.cliargs import count as positive_int  # noqa: F401  (re-exported argparse types)
from energyformer.utils.cliargs import nonneg_int, positive_float  # noqa: F401

#: the precisions every timing script can run: bf16 autocast, or plain float32 (nothing else is implemented)
PRECISIONS = ("bf16", "fp32")


def comma_choices(what: str, allowed: tuple[str, ...]):
    """argparse type of a comma-separated list of ``allowed`` names, returned normalised ("fp32,bf16"): an unknown
    name is an error naming it and the allowed ones (``--sections 5`` used to run nothing, exit 0)."""

    def convert(text: str) -> str:
        items = [s.strip() for s in text.split(",")]
        if bad := [s for s in items if s not in allowed]:
            raise argparse.ArgumentTypeError(f"{bad[0]!r} is not a {what}; allowed: a comma-separated list of "
                                             f"{', '.join(allowed)}")
        return ",".join(items)

    convert.__name__ = f"{what} list"
    return convert


#: argparse type of ``--precisions``; anything else used to run float32 labelled with the name asked for ("fp16")
precisions = comma_choices("precision", PRECISIONS)


def check_precision(precision: str) -> str:
    """``precision`` if it is one of :data:`PRECISIONS`; else a ConfigError (callers below the parser, e.g.
    ``lm_throughput._context``, never treat an unknown name as float32)."""
    if precision not in PRECISIONS:
        raise ConfigError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    return precision


def int_list(text: str) -> list[int]:
    """argparse type of a comma-separated list of integers >= 1 (``--mem-seqs 256,512``)."""
    try:
        values = [int(s) for s in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None
    if any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: every value must be an integer >= 1")
    return values


int_list.__name__ = "integer list"


def device_arg(text: str) -> str:
    """argparse type of ``--device``: 'cpu', or 'cuda' where this torch build sees a CUDA device (else one line
    instead of torch's 'not compiled with CUDA' traceback mid-run)."""
    if text not in ("cpu", "cuda"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a device; allowed: cpu, cuda")
    if text == "cuda" and not torch.cuda.is_available():
        raise argparse.ArgumentTypeError("'cuda': no CUDA device is available to this torch build; allowed here: cpu")
    return text


device_arg.__name__ = "device"


def git_commit(where: Path | None = None) -> str:
    """Short commit of the checkout holding ``where`` (default: the benchmarks' own), '+changes' after it where
    tracked files differ from that commit (a copied working tree, e.g. a device machine's copy, whose git
    HEAD is not the code that ran), or 'unknown' (from the run record's :func:`~energyformer.train.runinfo.git_info`)."""
    from energyformer.train.runinfo import git_info

    info = git_info(where or Path(__file__).resolve().parent)
    if info["commit"] is None:
        return "unknown"
    return info["commit"][:7] + ("+changes" if info["dirty"] else "")


def _cpu_name() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo), else what ``platform`` knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def header(device: torch.device | str | None = None, threads: int | None = None) -> str:
    """The first line of every benchmark output: device (CPU model or GPU name), machine, torch threads (the
    current setting unless ``threads``), torch version, commit and UTC time, so a committed output names what
    produced it without anyone adding it by hand."""
    dev = torch.device(device or "cpu")
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else _cpu_name()
    now = datetime.datetime.now(datetime.timezone.utc)
    return (f"run: device {dev.type} ({name}), machine {platform.machine()} with {os.cpu_count()} cores, "
            f"{threads or torch.get_num_threads()} torch thread(s); torch {torch.__version__}; "
            f"commit {git_commit()}; {now:%Y-%m-%d %H:%M} UTC")


def run(main, *args) -> None:
    """Call ``main(*args)``; a library :class:`~energyformer.errors.UserError` (a ConfigError), a config validation
    error or a ValueError (what a block's constructor raises for sizes that do not fit, e.g. ``--heads 3 --dim 16``)
    ends in one ``<script>: error: ...`` line and exit 2, as the energyformer CLI does, instead of a traceback;
    ENERGYFORMER_DEBUG=1 shows the traceback. A benchmark's ValueError comes from its arguments, so it is said,
    with its type, as a user error here (the CLI calls it internal)."""
    from pydantic import ValidationError

    from energyformer.cli_errors import debug_env, describe_error
    from energyformer.errors import UserError, brief

    try:
        code = main(*args)
    except (UserError, ValidationError, ValueError) as err:
        if debug_env():
            raise
        text = describe_error(err)[0] if isinstance(err, (UserError, ValidationError)) else brief(err, 300)
        print(f"{Path(sys.argv[0]).name}: error: {text} (ENERGYFORMER_DEBUG=1 for the traceback)", file=sys.stderr)
        raise SystemExit(2) from None
    raise SystemExit(code or 0)


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
            "machine": platform.machine(), "nice": os.nice(0), "load_before": loadavg(), "commit": git_commit()}


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


def load_words(meta: dict) -> str:
    """How loaded the machine was, for a page's prose: '**under load** from other jobs' when the recorded 1-minute
    load average before the run was 1 or more (something else was running: the run itself adds one), else 'with
    nothing else running'; '(load not recorded)' without a record."""
    before = meta.get("load_before")
    if not before:
        return "(load not recorded)"
    return "**under load** from other jobs" if before[0] >= 1.0 else "with nothing else running"


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
