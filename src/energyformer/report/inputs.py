"""Checked readers of a results page's committed inputs (issue 22's page contract).

Every read of a page input goes through the checked readers of :mod:`energyformer.utils.io` (``read_text``,
``read_json``, ``read_csv``, ``number``), so a damaged artifact is one line naming the file (and the line, column
or key) and what is allowed, a :class:`~energyformer.errors.DataError`, never a bare ``ValueError`` or
``JSONDecodeError``.

:func:`check_input` is what ``energyformer report`` runs on each input a page declares before its generator:
the file must decode and parse by its kind (``.json``, ``.jsonl``, ``.csv``, text), and a verbatim benchmark
output whose structure is known (:data:`STRUCTURE`) must be complete, so a truncated one is refused instead of
rendering a page with rows missing.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Callable
from fnmatch import fnmatch
from pathlib import Path

from ..errors import DataError
from ..utils.io import read_json, read_text


# ---- structure of the verbatim benchmark outputs ---------------------------------------------------------
_WALL = re.compile(r"^total wall time \d+ s$")
_SECTION = re.compile(r"^### ")


def _complete_last_line(text: str, name: str) -> None:
    if text and not text.endswith("\n"):
        n = text.count("\n") + 1
        raise DataError(f"{name}:{n}: ends mid-line (truncated? the benchmark ends its output with a newline)")


def lm_throughput_complete(text: str, name: str) -> None:
    """``benchmarks/lm_throughput.py``'s output ends with its ``total wall time N s`` line: without it the run
    was cut (or the file truncated) and the tables after the cut are missing."""
    _complete_last_line(text, name)
    last = next((ln.strip() for ln in reversed(text.splitlines()) if ln.strip()), "")
    if not _WALL.match(last):
        raise DataError(f"{name}: no final 'total wall time N s' line (truncated? lm_throughput.py writes it "
                        f"after its last table; the last line is {last[:60]!r})")


def tables_complete(text: str, name: str) -> None:
    """A ``markdown_emitter`` output (``gpu_lm*.md``, ``gpu_throughput*.md``): ends with a newline, its header's
    code fence is closed, and every ``### `` section holds a table with a header, a separator and at least one
    row whose cells match the header's."""
    _complete_last_line(text, name)
    lines = text.splitlines()
    if sum(ln.startswith("```") for ln in lines) % 2:
        raise DataError(f"{name}: the header's ``` code fence is not closed (truncated?)")
    sections = [i for i, ln in enumerate(lines) if _SECTION.match(ln)] + [len(lines)]
    if len(sections) == 1:
        raise DataError(f"{name}: no '### ...' table (truncated? the benchmark writes one per setting)")
    for start, end in zip(sections, sections[1:]):
        _table_complete(lines, start, end, name)


def _table_complete(lines: list[str], start: int, end: int, name: str) -> None:
    table = [(n, ln) for n, ln in enumerate(lines[start + 1:end], start + 2) if ln.startswith("|")]
    if len(table) < 3 or not table[1][1].startswith("|---"):
        raise DataError(f"{name}:{start + 1}: section {lines[start][4:]!r} has no table rows (truncated? expected "
                        "a header, a '|---' line and one row per model)")
    width = table[0][1].count(" | ")
    for n, ln in table[2:]:
        if ln.count(" | ") != width or not ln.rstrip().endswith("|"):
            raise DataError(f"{name}:{n}: a table row with other cells than its header's {width + 1} (truncated "
                            "or damaged?)")


#: verbatim benchmark outputs whose structure :func:`check_input` checks, by file-name pattern
STRUCTURE: dict[str, Callable[[str, str], None]] = {
    "bench_lm_throughput.txt": lm_throughput_complete,
    "gpu_lm_*.md": tables_complete,
    "gpu_throughput_*.md": tables_complete,
}


def check_input(path: Path, label: str | None = None) -> None:
    """Read ``path`` as its kind says (JSON, JSON lines, CSV, else UTF-8 text) and, for a benchmark output in
    :data:`STRUCTURE`, check that it is complete; a DataError naming ``label`` (and line/column) when not."""
    name = label or str(path)
    if path.suffix == ".json":
        read_json(path, name, kind=object)
        return
    text = read_text(path, name)
    if path.suffix == ".jsonl":
        _check_jsonl(text, name)
    elif path.suffix == ".csv":
        _check_csv(text, name)
    for pattern, check in STRUCTURE.items():
        if fnmatch(path.name, pattern):
            check(text, name)


def _check_jsonl(text: str, name: str) -> None:
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            ok = isinstance(json.loads(line), dict)
        except json.JSONDecodeError as err:
            raise DataError(f"{name}:{n}:{err.colno}: not valid JSON ({err.msg}; truncated or damaged?)") from None
        if not ok:
            raise DataError(f"{name}:{n}: not a JSON object (expected one event per line)")


def _check_csv(text: str, name: str) -> None:
    body = [(n, ln) for n, ln in enumerate(text.splitlines(), 1) if ln.strip() and not ln.startswith("#")]
    parsed = list(csv.reader([ln for _, ln in body]))
    for (n, _), cells in zip(body[1:], parsed[1:]):
        if len(cells) != len(parsed[0]):
            raise DataError(f"{name}:{n}: {len(cells)} cells, the header has {len(parsed[0])} "
                            f"({', '.join(parsed[0])})")
