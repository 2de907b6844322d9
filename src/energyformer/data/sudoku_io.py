"""Read and write Sudoku files in the formats published sets use.

Formats (``fmt``):

* ``'lines'`` — one puzzle per line, 81 characters: ``1``-``9`` and ``.`` or ``0`` for blanks
  (both may appear in one file). Blank lines and lines starting with ``#`` are skipped.
* ``'csv'`` — comma-separated, with or without a header row:

  - with a header, columns are found by name (case-insensitive): puzzle = ``puzzle``/``puzzles``/
    ``quiz``/``quizzes``/``question``/``q``; solution = ``solution``/``solutions``/``answer``/``a``;
    ``source``; rating = ``rating``/``difficulty``. Other columns (``id``, ``clues``, ...) are
    not read. A puzzle column is required.
  - without one, the number of fields decides: 1 = ``puzzle``; 2 = ``puzzle,solution`` (the Kaggle
    1M/9M layout); 4 = ``source,q,a,rating`` (the many-puzzles "sudoku-extreme" layout).
  - a header is recognised by its first row holding no 81-character grid.
  - lines starting with ``#`` before the first row are comments (skipped, as ``'auto'`` skips them when it
    looks for the first data line); after it every line is a row (a ``source`` field may start with ``#``).

* ``'auto'`` (default) — ``'csv'`` when the first data line holds a comma (or is a lone puzzle
  column name such as ``puzzle``), else ``'lines'``.

Lines end at ``\n`` (``\r\n`` too) and nowhere else: a form feed, U+2028 or another character that
``str.splitlines`` would split at stays inside its line (which is then a bad line, named by its true
number). A leading UTF-8 byte-order mark is skipped. An empty ``rating`` field is a missing rating
(NaN); a rating written as ``nan`` or ``inf`` is refused.

Puzzles without solutions are allowed (then scoring checks validity against the givens). Every
malformed line is a :class:`~energyformer.errors.DataError` whose message starts ``FILE:LINE:``:
a wrong length, a bad character, a wrong number of fields, conflicting givens, a solution with a
blank or a rule violation, a solution that contradicts its puzzle, a rating that is not a finite number.
The checks are vectorised: ``puzzle,solution`` CSV reads at ~100,000 puzzles/s, the lines format at
~280,000 puzzles/s (500,000-puzzle files on this project's CPU).
"""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path

import numpy as np

from energyformer.data.sudoku_dataset import SudokuDataset
from energyformer.data.sudoku_grid import UNITS, as_grids, has_conflicts
from energyformer.data.text import read_utf8
from energyformer.errors import DataError
from energyformer.utils.io import atomic_write_text
from energyformer.utils.validate import check_choice

READ_FORMATS = ("auto", "lines", "csv")
WRITE_FORMATS = ("lines", "csv", "source_q_a_rating")

_COLUMN_NAMES = {
    "puzzle": ("puzzle", "puzzles", "quiz", "quizzes", "question", "q"),
    "solution": ("solution", "solutions", "answer", "a"),
    "source": ("source",),
    "rating": ("rating", "difficulty"),
}
_POSITIONAL = {1: ("puzzle",), 2: ("puzzle", "solution"), 4: ("source", "puzzle", "solution", "rating")}
_GRID_CHARS = frozenset("0123456789.")
_UNIT_NAMES = [f"row {i + 1}" for i in range(9)] + [f"column {i + 1}" for i in range(9)] + \
    [f"box {i + 1}" for i in range(9)]


class _Rows:
    """Fields collected from a file before the vectorised checks (with their line numbers)."""

    def __init__(self) -> None:
        self.lines: list[int] = []
        self.puzzles: list[str] = []
        self.solutions: list[str] = []
        self.sources: list[str] = []
        self.ratings: list[str] = []


def _looks_like_grid(field: str) -> bool:
    f = field.strip()
    return len(f) == 81 and set(f) <= _GRID_CHARS


def _split_lines(text: str) -> list[str]:
    """The file's lines, split at ``\n`` only (``str.splitlines`` also splits at ``\x0c``, ``\x1c``-``\x1e``,
    ``\x85``, U+2028 and U+2029, which would shift every later line number); a ``\r`` before the
    ``\n`` is dropped."""
    return [ln.removesuffix("\r") for ln in text.split("\n")]


def _read_lines(text: str, where: str) -> tuple[_Rows, set[str]]:
    rows = _Rows()
    for lineno, line in enumerate(_split_lines(text), 1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        rows.lines.append(lineno)
        rows.puzzles.append(s)
    return rows, {"puzzle"}


def _csv_records(reader, where: str):
    """``reader``'s rows; a row the csv module cannot parse is a ``DataError`` naming file and line."""
    while True:
        try:
            fields = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            why = ("a carriage return (\\r) inside a line; lines end in \\n or \\r\\n"
                   if "new-line character" in str(e) else f"not valid CSV ({e})")
            raise DataError(f"{where}:{reader.line_num}: {why}") from None
        yield fields


def _read_csv(text: str, where: str) -> tuple[_Rows, set[str]]:
    rows = _Rows()
    reader = csv.reader(io.StringIO(text))  # StringIO splits at \n only; csv takes \r\n
    columns: dict[str, int] | None = None
    width = 0
    for fields in _csv_records(reader, where):
        lineno = reader.line_num
        if not fields or all(not f.strip() for f in fields):
            continue
        if columns is None and fields[0].lstrip().startswith("#"):  # a leading comment, as 'auto' skips it
            continue
        if columns is None:  # first non-empty row: a header, or the first data row
            width = len(fields)
            if any(_looks_like_grid(f) for f in fields):
                if width not in _POSITIONAL:
                    raise DataError(
                        f"{where}:{lineno}: {width} fields; without a header a row has 1 (puzzle), "
                        f"2 (puzzle,solution) or 4 (source,q,a,rating) fields")
                columns = {name: i for i, name in enumerate(_POSITIONAL[width])}
            else:
                columns = {}
                names = [f.strip().lower() for f in fields]
                for key, aliases in _COLUMN_NAMES.items():
                    hits = [i for i, n in enumerate(names) if n in aliases]
                    if len(hits) > 1:
                        raise DataError(f"{where}:{lineno}: header names the {key} column twice "
                                        f"({', '.join(fields[i] for i in hits)})")
                    if hits:
                        columns[key] = hits[0]
                if "puzzle" not in columns:
                    raise DataError(
                        f"{where}:{lineno}: header {','.join(fields)!r} has no puzzle column; "
                        f"name it one of {', '.join(_COLUMN_NAMES['puzzle'])} (or drop the header)")
                continue
        if len(fields) != width:
            raise DataError(f"{where}:{lineno}: {len(fields)} fields, expected {width} like the "
                            f"first row")
        rows.lines.append(lineno)
        rows.puzzles.append(fields[columns["puzzle"]].strip())
        if "solution" in columns:
            rows.solutions.append(fields[columns["solution"]].strip())
        if "source" in columns:
            rows.sources.append(fields[columns["source"]].strip())
        if "rating" in columns:
            rows.ratings.append(fields[columns["rating"]].strip())
    return rows, set(columns or ())


def _parse_grids(strs: list[str], lines: list[int], where: str, what: str,
                 allow_blank: bool) -> np.ndarray:
    """``(n, 81)`` int8 from 81-character strings; the first bad one raises ``FILE:LINE: ...``."""
    lengths = np.fromiter((len(s) for s in strs), dtype=np.int64, count=len(strs))
    bad = np.flatnonzero(lengths != 81)
    if bad.size:
        i = bad[0]
        raise DataError(f"{where}:{lines[i]}: {what} has {lengths[i]} characters, expected 81")
    data = "".join(strs).encode("utf-8")
    if len(data) != 81 * len(strs):  # some non-ASCII character
        i = next(i for i, s in enumerate(strs) if not s.isascii())
        ch = next(c for c in strs[i] if not c.isascii())
        raise DataError(f"{where}:{lines[i]}: {what} has the bad character {ch!r}; allowed are "
                        f"1-9{' and . or 0 for blanks' if allow_blank else ''}")
    lut = np.full(256, 255, dtype=np.uint8)
    lut[np.frombuffer(b"123456789", np.uint8)] = np.arange(1, 10, dtype=np.uint8)
    if allow_blank:
        lut[[ord("."), ord("0")]] = 0
    vals = lut[np.frombuffer(data, dtype=np.uint8)].reshape(len(strs), 81)
    bad = np.flatnonzero((vals == 255).any(axis=1))
    if bad.size:
        i = bad[0]
        col = int(np.flatnonzero(vals[i] == 255)[0])
        ch = strs[i][col]
        if not allow_blank and ch in ".0":
            msg = f"{what} has a blank at character {col + 1}; a solution must be complete"
        else:
            msg = (f"{what} has the bad character {ch!r} at character {col + 1}; allowed are "
                   f"1-9{' and . or 0 for blanks' if allow_blank else ''}")
        raise DataError(f"{where}:{lines[i]}: {msg}")
    return vals.astype(np.int8)


def _conflict(grid: np.ndarray) -> str:
    """Words for the first repeated digit of one grid, e.g. ``digit 5 twice in row 3``."""
    for u, cells in enumerate(UNITS):
        vals = grid[cells]
        vals = vals[vals > 0]
        uniq, cnt = np.unique(vals, return_counts=True)
        if (cnt > 1).any():
            return f"digit {int(uniq[cnt > 1][0])} twice in {_UNIT_NAMES[u]}"
    return "no conflict"  # pragma: no cover


def read_sudoku(path: str | os.PathLike, fmt: str = "auto", *, name: str | None = None,
                **dataset_kwargs) -> SudokuDataset:
    """Read a Sudoku file (formats in the module docstring) into a :class:`SudokuDataset`.

    ``name`` defaults to the file name; ``dataset_kwargs`` go to :class:`SudokuDataset`
    (e.g. ``dtype=torch.uint8`` for millions of puzzles). Bad lines raise ``DataError('FILE:LINE: ...')``.
    """
    check_choice("fmt", fmt, READ_FORMATS)
    where = str(path)
    text = read_utf8(path)  # a UTF-8 byte-order mark dropped
    if fmt == "auto":
        first = next((ln.strip() for ln in _split_lines(text)
                      if ln.strip() and not ln.lstrip().startswith("#")), "")
        one_column_header = first.lower() in _COLUMN_NAMES["puzzle"]
        fmt = "csv" if "," in first or one_column_header else "lines"
    rows, columns = (_read_csv if fmt == "csv" else _read_lines)(text, where)
    if not rows.puzzles:
        raise DataError(f"{where}: no puzzles found (only a header, blank lines or comments)")
    puzzles = _parse_grids(rows.puzzles, rows.lines, where, "puzzle", allow_blank=True)
    bad = np.flatnonzero(has_conflicts(puzzles))
    if bad.size:
        i = bad[0]
        raise DataError(f"{where}:{rows.lines[i]}: puzzle givens conflict: {_conflict(puzzles[i])}")
    solutions = None
    if "solution" in columns:
        solutions = _parse_grids(rows.solutions, rows.lines, where, "solution", allow_blank=False)
        bad = np.flatnonzero(has_conflicts(solutions))
        if bad.size:
            i = bad[0]
            raise DataError(f"{where}:{rows.lines[i]}: solution breaks the rules: "
                            f"{_conflict(solutions[i])}")
        differ = (puzzles != 0) & (puzzles != solutions)
        bad = np.flatnonzero(differ.any(axis=1))
        if bad.size:
            i = bad[0]
            c = int(np.flatnonzero(differ[i])[0])
            raise DataError(
                f"{where}:{rows.lines[i]}: solution contradicts the puzzle at row {c // 9 + 1}, "
                f"column {c % 9 + 1} (given {puzzles[i, c]}, solution {solutions[i, c]})")
    ratings = None
    if "rating" in columns:
        ratings = np.empty(len(rows.ratings), dtype=np.float64)
        for i, r in enumerate(rows.ratings):
            try:
                ratings[i] = float(r) if r else np.nan
            except ValueError:
                raise DataError(f"{where}:{rows.lines[i]}: rating {r!r} is not a number") from None
            if r and not np.isfinite(ratings[i]):
                raise DataError(f"{where}:{rows.lines[i]}: rating {r!r} is not a finite number; "
                                f"leave the field empty for a missing rating")
    sources = rows.sources if "source" in columns else None
    dataset_kwargs.setdefault("info", {"source": "file", "path": where, "format": fmt})
    return SudokuDataset(puzzles, solutions, sources=sources, ratings=ratings,
                         name=name or Path(path).name, **dataset_kwargs)


def _strings(grids, blank: str) -> list[str]:
    """``(n, 81)`` grids as 81-character strings (vectorised)."""
    lut = np.frombuffer((blank + "123456789").encode(), dtype=np.uint8)
    return [row.decode() for row in lut[as_grids(grids)].view("S81").ravel()]


def write_sudoku(path: str | os.PathLike, data: SudokuDataset, fmt: str = "csv", *,
                 header: bool = True, blank: str = ".") -> Path:
    """Write ``data`` atomically; :func:`read_sudoku` reads it back unchanged.

    ``fmt='lines'``: puzzles only, one per line. ``'csv'``: ``puzzle[,solution]`` with a header row
    unless ``header=False``. ``'source_q_a_rating'``: ``source,q,a,rating`` (needs solutions;
    missing sources are written empty, missing ratings as empty fields). ``blank``: ``'.'`` or ``'0'``.
    """
    check_choice("fmt", fmt, WRITE_FORMATS)
    check_choice("blank", blank, (".", "0"))
    puzzles = _strings(data.puzzles, blank)
    if fmt == "lines":
        return atomic_write_text(path, "".join(p + "\n" for p in puzzles))
    solutions: list[str] | None = None
    if data.solutions is not None:
        solutions = _strings(data.solutions, blank)
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    if fmt == "csv":
        if header:
            w.writerow(["puzzle", "solution"] if solutions is not None else ["puzzle"])
        w.writerows(zip(puzzles, solutions) if solutions is not None else ([p] for p in puzzles))
    else:
        if solutions is None:
            raise DataError(f"{data.name}: the source,q,a,rating layout needs solutions; "
                            f"use fmt='csv' or 'lines', or SudokuDataset.solve_missing() first")
        sources = data.sources or [""] * len(puzzles)
        ratings = [""] * len(puzzles) if data.ratings is None else \
            ["" if np.isnan(r) else repr(r) for r in data.ratings.tolist()]
        if header:
            w.writerow(["source", "q", "a", "rating"])
        w.writerows(zip(sources, puzzles, solutions, ratings))
    return atomic_write_text(path, out.getvalue())
