"""Rendering one page (energyformer.report.render): which
image references count, the page contract's working folder, a failure's message in the page's own paths, the
diff's length, a missing folder, a file the render did not write or wrote without its being committed, and
another page's file in the same folder."""
from __future__ import annotations

import pytest

from energyformer.errors import DataError
from energyformer.report.command import run
from energyformer.report.pages import Page, Registry, Script
from energyformer.report.render import referenced_images, render_page

from .toy_repo import toy_repo

GENERATOR = '''import json, sys
from pathlib import Path
out = Path(sys.argv[1])
data = json.loads((out / "results.json").read_text())
if data.get("fail"):
    raise SystemExit(f"cannot read {out / 'extra.json'}")
rows = "".join(f"| row {i} | {data['v']} | HOLDS |\\n" for i in range(data.get("rows", 1)))
body = f"# Toy\\n\\n| claim | ours | verdict |\\n|---|---|---|\\n{rows}" + data.get("tail", "")
if not data.get("skip"):
    (out / "README.md").write_text(body)
for name in data.get("also", []):
    (out / name).write_text(f"# {name} {data['v']}\\n")
(out / "outside.txt").write_text(str(Path("runs/secret.json").exists()))
'''
PAGE = Page("toy", "docs/results/toy", generator=Script("render_toy.py", ("{out}",)), readme=False)
REG = Registry(pages=(PAGE,), artifacts=())


@pytest.fixture
def repo(tmp_path):
    return toy_repo(tmp_path, GENERATOR, '{"v": 1}')


def _data(repo, text):
    (repo / "docs/results/toy/results.json").write_text(text)


def test_referenced_images_take_markdown_and_html_and_skip_web_links_and_anchors():
    md = ('![a](a.png) ![b]( <sub/b.png> "title") <img alt="c" src="c.png"> <img src=\'d.svg\' width=3>\n'
          '![web](https://example.org/x.png) ![anchor](e.png#frame)')
    assert referenced_images(md) == ["a.png", "sub/b.png", "c.png", "d.svg", "e.png"]


def test_a_missing_image_the_render_references_fails_the_check(repo, capsys):
    """An html <img> counts as a markdown image does; a web link is no file; the image is named when only the
    rendered page references it."""
    assert run(["--root", str(repo)], REG) == 0
    _data(repo, '{"v": 1, "tail": "\\n<img src=\\"gone.png\\">\\n\\n![web](https://example.org/x.png)\\n"}')
    capsys.readouterr()
    assert run(["--check", "--root", str(repo)], REG) == 1
    out = capsys.readouterr().out
    assert "differs: README.md; missing image README.md: gone.png" in out and "example.org/x.png:" not in out
    assert run(["--root", str(repo)], REG) == 1  # written in place, the reference is still to nothing
    assert "MISSING IMAGE toy" in capsys.readouterr().out


def test_the_diff_shown_is_of_the_first_differing_file(repo, capsys):
    two = Registry(pages=(Page("toy", "docs/results/toy", ("README.md", "b.md"),
                               generator=Script("render_toy.py", ("{out}",)), readme=False),), artifacts=())
    _data(repo, '{"v": 1, "also": ["b.md"]}')
    assert run(["--root", str(repo)], two) == 0
    _data(repo, '{"v": 2, "also": ["b.md"]}')
    capsys.readouterr()
    assert run(["--check", "--root", str(repo)], two) == 1
    out = capsys.readouterr().out
    assert "differs: README.md, b.md" in out and "--- committed/README.md" in out and "committed/b.md" not in out


def test_the_generator_runs_outside_the_repository(repo):
    """The page contract: a render that reads a relative path outside its folder (runs/...) finds nothing."""
    (repo / "runs").mkdir()
    (repo / "runs/secret.json").write_text("{}")
    assert render_page(PAGE, repo, in_place=True).status == "ok"
    assert (repo / "docs/results/toy/outside.txt").read_text() == "False"


def test_a_generator_failure_names_the_pages_folder_not_the_temporary_one(repo, capsys):
    _data(repo, '{"v": 1, "fail": true}')
    assert run(["--check", "toy", "--root", str(repo)], REG) == 1
    (line,) = capsys.readouterr().out.strip().splitlines()
    assert line.startswith("FAILED        toy") and line.endswith("cannot read docs/results/toy/extra.json"), line


def test_diff_lines_bounds_the_diff_and_says_how_much_more(repo, capsys):
    _data(repo, '{"v": 1, "rows": 6}')
    assert run(["--root", str(repo)], REG) == 0
    _data(repo, '{"v": 2, "rows": 6}')
    capsys.readouterr()
    assert run(["--check", "toy", "--diff-lines", "3", "--root", str(repo)], REG) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[1:] == ["--- committed/README.md", "+++ rendered/README.md", "@@ -4,7 +4,7 @@",
                       "... (13 more diff lines)"]
    assert run(["--check", "toy", "--diff-lines", "0", "--root", str(repo)], REG) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("DIFFERS       toy"), out


def test_a_page_whose_folder_is_missing_is_one_line(tmp_path, capsys):
    (tmp_path / "render_toy.py").write_text(GENERATOR)
    with pytest.raises(DataError, match=r"^report toy: folder docs/results/toy not found$"):
        render_page(PAGE, tmp_path, in_place=False)


def test_a_page_file_the_render_does_not_write_fails(repo):
    _data(repo, '{"v": 1, "skip": true}')
    res = render_page(PAGE, repo, in_place=False)
    assert res.status == "failed" and res.problems == ["README.md: not rendered"]


def test_a_rendered_page_that_is_not_committed_fails(repo):
    _data(repo, '{"v": 1, "also": ["stray.md"]}')
    res = render_page(PAGE, repo, in_place=True)
    assert res.status == "failed" and res.problems == ["stray.md: rendered but not committed"]
    assert not (repo / "docs/results/toy/stray.md").exists()  # never copied in


def test_an_in_place_render_never_overwrites_another_pages_file(repo):
    notes = repo / "docs/results/toy/notes.md"
    notes.write_text("# notes typed by hand\n")
    _data(repo, '{"v": 1, "also": ["notes.md"]}')
    res = render_page(PAGE, repo, in_place=True)
    assert notes.read_text() == "# notes typed by hand\n" and "notes.md" not in res.written
    assert "README.md" in res.written


def test_a_hand_edited_page_whose_generator_stopped_writing_it_fails_the_check(repo, capsys):
    """Before: the work folder held the committed page, so a generator that no longer wrote it compared the committed
    copy (hand edits and all) with itself and passed."""
    assert run(["--root", str(repo)], REG) == 0
    (repo / "render_toy.py").write_text("pass\n")  # the generator writes nothing now
    page = repo / "docs/results/toy/README.md"
    page.write_text(page.read_text().replace("| 1 |", "| 99 |"))
    assert run(["--check", "toy", "--root", str(repo)], REG) == 1
