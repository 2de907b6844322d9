"""``energyformer report``'s command edges an outside mutation probe found unpinned: an unregistered page fails
only the check, a stale README section alone fails the check, a named run leaves the README alone, an in-place
render prints one line per page (no diff), --list names the artifacts and unregistered pages, and the default
root is this repository."""
from __future__ import annotations

from energyformer.report.command import repo_root, run
from energyformer.report.pages import Artifact, Page, Registry, Script
from energyformer.report.readme import BEGIN, END

from .toy_repo import toy_repo

GENERATOR = '''import json, sys
from pathlib import Path
out = Path(sys.argv[1])
data = json.loads((out / "results.json").read_text())
table = "| claim | ours | verdict |\\n|---|---|---|\\n"
(out / "README.md").write_text(f"# Toy\\n\\n{table}| x | {data['v']} | HOLDS |\\n")
'''

REG = Registry(pages=(Page("toy", "docs/results/toy", generator=Script("render_toy.py", ("{out}",))),),
               artifacts=(Artifact("docs/results/toy", "raw.md", "verbatim output of a toy benchmark"),))


def _repo(tmp_path):
    repo = toy_repo(tmp_path, GENERATOR, '{"v": 1}')
    (repo / "docs/results/toy/raw.md").write_text("raw\n")
    assert run(["--root", str(repo)], REG) == 0
    return repo


def _repo_with_a_typed_page(tmp_path, capsys):
    """The rendered toy repo plus a page no entry registers (docs/results/toy/typed.md); the output so far read."""
    repo = _repo(tmp_path)
    (repo / "docs/results/toy/typed.md").write_text("# typed\n")
    capsys.readouterr()
    return repo


def test_an_unregistered_page_fails_the_check_and_is_named(tmp_path, capsys):
    repo = _repo_with_a_typed_page(tmp_path, capsys)
    assert run(["--check", "--root", str(repo)], REG) == 1
    out = capsys.readouterr().out
    assert f"{'UNREGISTERED':13s} docs/results/toy/typed.md: no page entry says how it is made" in out
    assert run(["--root", str(repo)], REG) == 0  # a render in place names it and does not fail on it
    assert "UNREGISTERED  docs/results/toy/typed.md" in capsys.readouterr().out


def test_a_stale_readme_section_alone_fails_the_check(tmp_path, capsys):
    repo = _repo(tmp_path)
    readme = repo / "README.md"
    assert "| x | — | 1 | HOLDS |" in readme.read_text()
    readme.write_text(readme.read_text().replace("| x | — | 1 | HOLDS |", "| x | — | 2 | HOLDS |"))
    capsys.readouterr()
    assert run(["--check", "--root", str(repo)], REG) == 1
    out = capsys.readouterr().out
    assert "ok            toy" in out and "DIFFERS       README results" in out
    assert "| x | — | 2 | HOLDS |" in readme.read_text()  # --check writes nothing
    assert run(["--root", str(repo)], REG) == 0 and "| x | — | 1 | HOLDS |" in readme.read_text()
    assert run(["--check", "--root", str(repo)], REG) == 0


def test_a_run_over_named_pages_leaves_the_readme_section_alone(tmp_path, capsys):
    repo = _repo(tmp_path)
    (repo / "docs/results/toy/results.json").write_text('{"v": 3}')
    before = (repo / "README.md").read_text()
    capsys.readouterr()
    assert run(["toy", "--root", str(repo)], REG) == 0
    assert "| x | 3 | HOLDS |" in (repo / "docs/results/toy/README.md").read_text()
    assert (repo / "README.md").read_text() == before  # only a run over every page rewrites the section
    assert "README results" not in capsys.readouterr().out
    assert run(["--check", "toy", "--root", str(repo)], REG) == 0  # nor checks it


def test_an_in_place_render_prints_one_line_per_page_and_no_diff(tmp_path, capsys):
    repo = _repo(tmp_path)
    (repo / "docs/results/toy/results.json").write_text('{"v": 3}')
    capsys.readouterr()
    assert run(["toy", "--root", str(repo)], REG) == 0
    assert capsys.readouterr().out.strip().splitlines() == [f"{'updated':13s} {'toy':24s} docs/results/toy/README.md"]


def test_list_names_pages_artifacts_and_unregistered_files(tmp_path, capsys):
    repo = _repo_with_a_typed_page(tmp_path, capsys)
    assert run(["--list", "--root", str(repo)], REG) == 0
    out = capsys.readouterr().out
    assert "toy" in out and "python render_toy.py DIR" in out
    assert "(artifact)" in out and "docs/results/toy/raw.md" in out and "verbatim output of a toy benchmark" in out
    assert "(unregistered)           docs/results/toy/typed.md" in out


def test_the_default_root_is_this_repository():
    root = repo_root()
    assert (root / "src/energyformer/report/command.py").is_file()
    assert BEGIN in (root / "README.md").read_text() and END in (root / "README.md").read_text()
