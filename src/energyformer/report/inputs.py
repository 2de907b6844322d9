"""Checked readers of a results page's committed inputs (issue 22's page contract).

Every read of a page input goes through here, so a damaged artifact is one line naming the file (and the line,
column or key) and what is allowed, a :class:`~energyformer.errors.DataError`, never a bare ``ValueError`` or
``JSONDecodeError``: :func:`read_text` (UTF-8), :func:`read_json`, :func:`read_csv` (rows with their line
numbers), :func:`number` (a metric value: a finite number, never a bool or a string).

:func:`check_input` is what ``energyformer report`` runs on each input a page declares before its generator:
the file must decode and parse by its kind (``.json``, ``.jsonl``, ``.csv``, text), and a verbatim benchmark
output whose structure is known (:data:`STRUCTURE`) must be complete, so a truncated one is refused instead of
rendering a page with rows missing.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Callable
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

from ..errors import DataError


def _label(path: Path, label: str | None) -> str:
    return label or str(path)


def read_text(path: Path, label: str | None = None) -> str:
    """The UTF-8 text of ``path``; missing, a folder, unreadable or not UTF-8 (line and column named) is a
    DataError starting with ``label`` (default: the path)."""
    name = _label(path, label)
    if not path.exists():
        raise DataError(f"{name}: not found (a committed artifact the page is rendered from)")
    if path.is_dir():
        raise DataError(f"{name}: is a directory, expected a text file")
    try:
        data = path.read_bytes()
    except OSError as err:
        raise DataError(f"{name}: cannot read ({err.strerror})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        col = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        raise DataError(f"{name}:{line}:{col}: not UTF-8 text (byte 0x{data[err.start]:02x}; binary or damaged "
                        "data, expected a text file)") from None


def read_json(path: Path, label: str | None = None, *, kind: type = dict) -> Any:
    """The JSON value of ``path`` (a ``kind``: an object by default); malformed JSON names line and column."""
    name = _label(path, label)
    text = read_text(path, name)
    if not text.strip():
        raise DataError(f"{name}: empty file (expected JSON)")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise DataError(f"{name}:{err.lineno}:{err.colno}: not valid JSON ({err.msg}; truncated or damaged?)") \
            from None
    if not isinstance(data, kind):
        raise DataError(f"{name}: holds a JSON {type(data).__name__}, expected a {kind.__name__}")
    return data


def read_csv(path: Path, fields: tuple[str, ...], label: str | None = None,
             comment: str = "#") -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    """(comment lines without their ``#``, [(line number, row)]) of a CSV whose header names every one of
    ``fields``; a row with a missing or extra cell is a DataError naming file and line."""
    name = _label(path, label)
    lines = read_text(path, name).splitlines()
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
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise DataError(f"{where}: {value!r} is not a number (expected {'an integer' if integer else 'a number'})")
    try:
        out = int(value) if integer else float(value)
    except ValueError:
        raise DataError(f"{where}: {value!r} is not a number (expected {'an integer' if integer else 'a number'})") \
            from None
    if finite and not math.isfinite(out):
        raise DataError(f"{where}: {value!r} is not finite (expected a finite number)")
    return out


def require_keys(data: dict, keys: tuple[str, ...], where: str) -> None:
    """A DataError ``where: lacks the key(s) ...`` when ``data`` lacks one of ``keys``."""
    missing = [k for k in keys if k not in data]
    if missing:
        raise DataError(f"{where}: lacks the key(s) {', '.join(repr(k) for k in missing)} "
                        f"(expected {', '.join(keys)})")


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
    name = _label(path, label)
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
