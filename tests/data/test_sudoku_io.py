"""Sudoku readers and writer (``data/sudoku_io.py``): line and CSV formats, headers, sources and ratings, the
round trip, and malformed files named by file and line (CR/LF, byte order mark, non-finite ratings)."""

from __future__ import annotations

import pytest
import torch

from energyformer.data import sudoku as S
from energyformer.errors import DataError


def _ds(small_set, n=3):
    p, s = small_set
    return S.SudokuDataset(p[:n], s[:n])


def test_read_lines_dot_and_zero(tmp_path, small_set):
    ds = _ds(small_set)
    dots = S.grid_to_string(ds.puzzles[0])
    zeros = S.grid_to_string(ds.puzzles[1], blank="0")
    f = tmp_path / "p.txt"
    f.write_text(f"# a comment\n{dots}\n\n{zeros}  \r\n")
    got = S.read_sudoku(f)
    assert not got.has_solutions and len(got) == 2
    assert torch.equal(got.puzzles, ds.puzzles[:2])
    assert got.info["format"] == "lines"


@pytest.mark.parametrize("content_kind", ["header", "no_header", "kaggle_header", "extra_columns"])
def test_read_csv_with_and_without_header(tmp_path, small_set, content_kind):
    ds = _ds(small_set)
    rows = [(S.grid_to_string(p, "0"), S.grid_to_string(s)) for p, s in zip(ds.puzzles, ds.solutions)]
    body = "\n".join(f"{p},{s}" for p, s in rows)
    text = {"header": "puzzle,solution\n" + body,
            "no_header": body,
            "kaggle_header": "quizzes,solutions\n" + body,
            "extra_columns": "id,puzzle,solution,clues\n" + "\n".join(
                f"{i},{p},{s},0" for i, (p, s) in enumerate(rows))}[content_kind]
    f = tmp_path / "p.csv"
    f.write_text(text + "\n")
    got = S.read_sudoku(f)
    assert torch.equal(got.puzzles, ds.puzzles) and torch.equal(got.solutions, ds.solutions)


def test_read_puzzle_only_csv_with_one_column_header(tmp_path, small_set):
    ds = _ds(small_set)
    f = tmp_path / "only.csv"
    f.write_text("Puzzle\n" + "".join(S.grid_to_string(p) + "\n" for p in ds.puzzles))
    got = S.read_sudoku(f)
    assert got.solutions is None and torch.equal(got.puzzles, ds.puzzles)
    assert got.score(ds.solutions) == {"n": 3, "board_accuracy": 1.0, "valid_fraction": 1.0}


@pytest.mark.parametrize("header", [True, False])
def test_read_source_q_a_rating(tmp_path, small_set, header):
    ds = _ds(small_set)
    lines = [f"src{i},{S.grid_to_string(p)},{S.grid_to_string(s)},{i * 1.5}"
             for i, (p, s) in enumerate(zip(ds.puzzles, ds.solutions))]
    f = tmp_path / "extreme.csv"
    f.write_text(("source,question,answer,rating\n" if header else "") + "\n".join(lines) + "\n")
    got = S.read_sudoku(f)
    assert got.sources == ["src0", "src1", "src2"]
    assert got.ratings.tolist() == [0.0, 1.5, 3.0]
    assert torch.equal(got.puzzles, ds.puzzles) and torch.equal(got.solutions, ds.solutions)


@pytest.mark.parametrize("fmt,kw", [("lines", {}), ("csv", {}), ("csv", {"header": False}),
                                    ("csv", {"blank": "0"}), ("source_q_a_rating", {})])
def test_write_read_round_trip(tmp_path, small_set, fmt, kw):
    ds = _ds(small_set)
    ds.sources, ds.ratings = ["a", "b", "c"], torch.tensor([1.0, float("nan"), 2.25],
                                                          dtype=torch.float64)
    f = S.write_sudoku(tmp_path / "out.txt", ds, fmt, **kw)
    got = S.read_sudoku(f)
    assert torch.equal(got.puzzles, ds.puzzles)
    if fmt == "lines":
        assert got.solutions is None
    else:
        assert torch.equal(got.solutions, ds.solutions)
    if fmt == "source_q_a_rating":
        assert got.sources == ds.sources
        assert torch.allclose(got.ratings, ds.ratings, equal_nan=True)


def test_malformed_lines_name_file_and_line(tmp_path, small_set):
    ds = _ds(small_set)
    p = S.grid_to_string(ds.puzzles[0])
    s = S.grid_to_string(ds.solutions[0])
    i = next(k for k in range(81) if p[k] == ".")
    j = next(k for k in range(81) if p[k] != ".")
    wrong_given = p[:j] + str(int(p[j]) % 9 + 1) + p[j + 1:]  # solution now contradicts it
    conflict = "11" + "." * 79
    bad_solution = s[:i] + str(int(s[i]) % 9 + 1) + s[i + 1:]  # breaks a rule, keeps the givens
    cases = [
        ("lines", f"{p}\n{p[:80]}\n", 2, "80 characters, expected 81"),
        ("lines", f"{p}\n{p}\n{p[:40]}x{p[41:]}\n", 3, "bad character 'x' at character 41"),
        ("lines", f"{p}\n{p[:10]}é{p[11:]}\n", 2, "bad character 'é'"),
        ("lines", f"{conflict}\n", 1, "givens conflict: digit 1 twice in row 1"),
        ("csv", f"puzzle,solution\n{p},{s}\n{wrong_given},{s}\n", 3, "contradicts the puzzle"),
        ("csv", f"{p},{s}\n{p},{bad_solution}\n", 2, "solution breaks the rules"),
        ("csv", f"{p},{s}\n{p},{s[:5]}.{s[6:]}\n", 2, "solution has a blank at character 6"),
        ("csv", f"{p},{s}\n{p},{s},x\n", 2, "3 fields, expected 2"),
        ("csv", f"{p},{s},x\n", 1, "3 fields; without a header"),
        ("csv", f"src,q,a,rating\nx,{p},{s},hard\n", 2, "rating 'hard' is not a number"),
        ("csv", f"id,grid\n1,{p}\n", 1, "no puzzle column"),
    ]
    for k, (kind, text, line, msg) in enumerate(cases):
        f = tmp_path / f"bad{k}.{'csv' if kind == 'csv' else 'txt'}"
        f.write_text(text, encoding="utf-8")
        with pytest.raises(DataError) as err:
            S.read_sudoku(f)
        assert str(err.value).startswith(f"{f}:{line}: "), (k, str(err.value))
        assert msg in str(err.value), (k, str(err.value))
    with pytest.raises(DataError, match="no puzzles"):
        (tmp_path / "h.csv").write_text("puzzle,solution\n")
        S.read_sudoku(tmp_path / "h.csv")
    with pytest.raises(DataError, match="not found"):
        S.read_sudoku(tmp_path / "missing.txt")


@pytest.mark.parametrize("sep", ["\u2028", "\u2029", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\r"])
def test_lines_split_at_newline_only(tmp_path, small_set, sep):
    """A character ``str.splitlines`` splits at stays inside its line: that line is bad, named by
    its true number (it was read as two puzzles, and later lines were numbered one too high)."""
    p = S.grid_to_string(_ds(small_set).puzzles[0])
    for bad_line in (1, 2):
        lines = [p, p, p]
        lines[bad_line - 1] = p + sep + p
        f = tmp_path / f"sep{bad_line}.txt"
        f.write_bytes("\n".join(lines).encode("utf-8") + b"\n")
        with pytest.raises(DataError) as err:
            S.read_sudoku(f, "lines")
        assert str(err.value) == f"{f}:{bad_line}: puzzle has 163 characters, expected 81"
        with pytest.raises(DataError) as err:  # 'auto' must not split the first line either
            S.read_sudoku(f)
        assert str(err.value).startswith(f"{f}:{bad_line}: "), str(err.value)
    f = tmp_path / "crlf.txt"
    f.write_bytes(f"{p}\r\n# note\r\n{p}\r\n".encode())
    assert len(S.read_sudoku(f)) == 2


def test_csv_line_with_a_lone_carriage_return_names_file_and_line(tmp_path, small_set):
    ds = _ds(small_set)
    p, s = S.grid_to_string(ds.puzzles[0]), S.grid_to_string(ds.solutions[0])
    f = tmp_path / "cr.csv"
    f.write_bytes(f"puzzle,solution\r\n{p},{s}\r\n{p},{s}\r{p},{s}\r\n".encode())
    with pytest.raises(DataError) as err:
        S.read_sudoku(f)
    assert str(err.value).startswith(f"{f}:3: a carriage return"), str(err.value)
    f.write_bytes(f"puzzle,solution\n{p},{s}\u2028{p},{s}\n{p},{s}\n".encode())
    with pytest.raises(DataError) as err:
        S.read_sudoku(f)
    assert str(err.value) == f"{f}:2: 3 fields, expected 2 like the first row"


@pytest.mark.parametrize("kind", ["lines", "csv_header", "csv_no_header", "one_column_header"])
def test_leading_byte_order_mark_is_skipped(tmp_path, small_set, kind):
    ds = _ds(small_set)
    rows = [(S.grid_to_string(p), S.grid_to_string(s)) for p, s in zip(ds.puzzles, ds.solutions)]
    text = {"lines": "".join(p + "\n" for p, _ in rows),
            "csv_header": "puzzle,solution\n" + "".join(f"{p},{s}\n" for p, s in rows),
            "csv_no_header": "".join(f"{p},{s}\n" for p, s in rows),
            "one_column_header": "puzzle\n" + "".join(p + "\n" for p, _ in rows)}[kind]
    f = tmp_path / "bom.txt"
    f.write_bytes(b"\xef\xbb\xbf" + text.encode())
    got = S.read_sudoku(f)
    assert torch.equal(got.puzzles, ds.puzzles)
    if kind.startswith("csv"):
        assert torch.equal(got.solutions, ds.solutions)


@pytest.mark.parametrize("rating", ["nan", "NaN", "inf", "-inf", "+Infinity", "1e999"])
def test_non_finite_rating_names_file_and_line(tmp_path, small_set, rating):
    ds = _ds(small_set)
    p, s = S.grid_to_string(ds.puzzles[0]), S.grid_to_string(ds.solutions[0])
    f = tmp_path / "r.csv"
    f.write_text(f"source,q,a,rating\nx,{p},{s},1.5\ny,{p},{s},{rating}\n")
    with pytest.raises(DataError) as err:
        S.read_sudoku(f)
    assert str(err.value) == (f"{f}:3: rating {rating!r} is not a finite number; leave the field empty "
                              f"for a missing rating")
    f.write_text(f"source,q,a,rating\nx,{p},{s},1.5\ny,{p},{s},\n")  # empty = missing: allowed
    assert torch.isnan(S.read_sudoku(f).ratings[1])


def test_leading_comment_lines_of_a_csv_are_skipped(tmp_path, small_set):
    """'auto' skipped a leading '# ...' line to find the CSV, then the CSV reader took it as the header: 'header
    '# my puzzles' has no puzzle column'. Leading comments are skipped in both; later lines stay rows."""
    ds = _ds(small_set)
    body = "".join(f"{S.grid_to_string(p)},{S.grid_to_string(s)}\n" for p, s in zip(ds.puzzles, ds.solutions))
    for head in ("# my puzzles\n", "# one\n\n#two, with a comma\npuzzle,solution\n"):
        f = tmp_path / "c.csv"
        f.write_text(head + body)
        for fmt in ("auto", "csv"):
            got = S.read_sudoku(f, fmt=fmt)
            assert torch.equal(got.puzzles, ds.puzzles) and torch.equal(got.solutions, ds.solutions)
    f.write_text("puzzle,solution\n" + body + "# not a row\n")
    with pytest.raises(DataError, match=r"c.csv:5: "):
        S.read_sudoku(f)
