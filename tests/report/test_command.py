"""``energyformer report``: render in place, --check passes on a fresh render and fails after a hand edit,
missing images and artifacts are named (a synthetic page: a tiny generator script, so no training and no
other branch's page is involved), plus one end-to-end check of a real page."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from energyformer.cli import main as cli_main
from energyformer.report.command import run
from energyformer.report.pages import ARTIFACTS, PAGES, Page, Registry, Script
from energyformer.report.readme import BEGIN, END

from .toy_repo import toy_repo

ROOT = Path(__file__).resolve().parents[2]

GENERATOR = '''import json, sys
from pathlib import Path
out = Path(sys.argv[1])
data = json.loads((out / "results.json").read_text())
rows = "".join(f"| {c} | {p} | {o} | {v} |\\n" for c, p, o, v in data["claims"])
img = "\\n![curve](curve.png)\\n" if data.get("figure") else ""
(out / "README.md").write_text(f"# Toy page\\n\\n| claim | paper | ours | verdict |\\n|---|---|---|---|\\n{rows}{img}")
if data.get("figure"):
    (out / "curve.png").write_bytes(b"png")
'''


@pytest.fixture
def repo(tmp_path):
    return toy_repo(tmp_path, GENERATOR, '{"claims": [["A beats B", "1.0 (Table 1)", "0.9", "HOLDS"]], "figure": true}',
                    "\n## Tests\n")


REG = Registry(pages=(Page("toy", "docs/results/toy", generator=Script("render_toy.py", ("{out}",))),), artifacts=())


def test_render_in_place_then_check_passes_and_fails_after_a_hand_edit(repo, capsys):
    assert run(["--root", str(repo)], REG) == 0
    page = repo / "docs/results/toy/README.md"
    assert "| A beats B | 1.0 (Table 1) | 0.9 | HOLDS |" in page.read_text()
    assert "| A beats B | 1.0 (Table 1) | 0.9 | HOLDS |" in (repo / "README.md").read_text()
    assert (repo / "README.md").read_text().endswith(f"{END}\n\n## Tests\n")
    capsys.readouterr()
    assert run(["--check", "--root", str(repo)], REG) == 0
    assert "ok            toy" in capsys.readouterr().out

    page.write_text(page.read_text().replace("0.9", "0.95"))  # a hand edit
    assert run(["--check", "--root", str(repo)], REG) == 1
    out = capsys.readouterr().out
    assert f"DIFFERS       {'toy':24s} docs/results/toy/README.md: differs: README.md" in out
    assert "-| A beats B | 1.0 (Table 1) | 0.95 | HOLDS |" in out and "+| A beats B | 1.0 (Table 1) | 0.9 | HOLDS |" in out
    assert "DIFFERS       README results" in out  # the section no longer matches the edited page
    assert "0.95" in page.read_text()  # --check writes nothing


def test_a_figure_the_render_does_not_redraw_is_said_to_be_unchecked(repo, capsys):
    """A figure drawn at training time (no render redraws it) was compared with its own committed copy and passed
    whatever it showed; the page's line now counts it as not checked."""
    results = repo / "docs/results/toy/results.json"
    assert run(["--root", str(repo)], REG) == 0
    capsys.readouterr()
    assert run(["--check", "toy", "--root", str(repo)], REG) == 0
    assert "not checked" not in capsys.readouterr().out  # the generator redraws curve.png
    results.write_text(results.read_text().replace('"figure": true', '"figure": false'))
    page = repo / "docs/results/toy/README.md"
    assert run(["--root", str(repo)], REG) == 0
    page.write_text(page.read_text() + "\n![curve](curve.png)\n")  # a figure the render keeps as committed
    gen = repo / "render_toy.py"
    gen.write_text(gen.read_text().replace('img = "\\n![curve](curve.png)\\n" if data.get("figure") else ""',
                                           'img = "\\n![curve](curve.png)\\n"'))
    capsys.readouterr()
    assert run(["--check", "toy", "--root", str(repo)], REG) == 0
    assert "(1 figure(s) drawn at training time, kept as committed: not checked)" in capsys.readouterr().out


def test_check_fails_when_a_referenced_image_is_missing(repo, capsys):
    assert run(["--root", str(repo)], REG) == 0
    (repo / "docs/results/toy/curve.png").unlink()
    assert run(["--check", "toy", "--root", str(repo)], REG) == 1
    assert f"MISSING IMAGE {'toy':24s} docs/results/toy/README.md: missing image README.md: curve.png" \
        in capsys.readouterr().out


def test_missing_artifact_is_one_line_naming_the_file(repo, capsys):
    (repo / "docs/results/toy/results.json").unlink()
    assert run(["--check", "toy", "--root", str(repo)], REG) == 1
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines == [f"FAILED        {'toy':24s} docs/results/toy/results.json not found (the committed "
                     "artifact this page is rendered from)"]


def test_generator_failure_is_one_line_with_its_last_error_line(repo, capsys):
    (repo / "docs/results/toy/results.json").write_text("{}")
    assert run(["--check", "toy", "--root", str(repo)], REG) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("FAILED        toy") and out[0].endswith("KeyError: 'claims'")


def test_hand_written_page_is_listed_and_fails_only_the_check(repo, capsys):
    (repo / "docs/results/toy/notes.md").write_text("# typed\n")
    reg = Registry(pages=REG.pages + (Page("notes", "docs/results/toy", ("notes.md",), why="typed by hand"),),
                   artifacts=())
    assert run(["notes", "--root", str(repo)], reg) == 0
    assert run(["--check", "notes", "--root", str(repo)], reg) == 1
    assert f"HAND-WRITTEN  {'notes':24s} docs/results/toy/notes.md: hand-written: not checkable (typed by " \
           "hand)" in capsys.readouterr().out
    assert run(["--list", "--root", str(repo)], reg) == 0
    assert "hand-written: not checkable (typed by hand)" in capsys.readouterr().out


def test_cli_lists_pages_and_refuses_an_unknown_name(capsys):
    assert cli_main(["report", "--list"]) == 0
    out = capsys.readouterr().out
    assert "bare-sa" in out and "energyformer reproduce bare-sa --report-only --out DIR" in out
    assert cli_main(["report", "bare_sa"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "report page 'bare_sa': not registered" in err[0]
    with pytest.raises(SystemExit):   # (it was accepted, acting as 0)
        cli_main(["report", "--check", "--diff-lines", "-5"])
    assert "argument --diff-lines: -5 must be an integer >= 0" in capsys.readouterr().err


def test_real_page_bare_sa_checks_after_a_fresh_render_and_fails_after_a_hand_edit(tmp_path, capsys):
    """End to end on the committed bare-sa page (its report-only render takes ~8 s), on a copy."""
    shutil.copytree(ROOT / "docs/results/bare_sa", tmp_path / "docs/results/bare_sa")
    (tmp_path / "README.md").write_text(f"{BEGIN}\n{END}\n")
    reg = Registry(pages=tuple(p for p in PAGES if p.name == "bare-sa"),
                   artifacts=tuple(a for a in ARTIFACTS if a.folder.startswith("docs/results/bare_sa")))
    assert run(["bare-sa", "--root", str(tmp_path)], reg) == 0
    assert run(["--check", "bare-sa", "--root", str(tmp_path)], reg) == 0
    page = tmp_path / "docs/results/bare_sa/cpu/README.md"
    page.write_text(page.read_text().replace("| **HOLDS** |", "| **UNDECIDED** |", 1))
    capsys.readouterr()
    assert run(["--check", "bare-sa", "--root", str(tmp_path)], reg) == 1
    assert "DIFFERS       bare-sa" in capsys.readouterr().out


FIGURE_GENERATOR = '''import json, sys
from pathlib import Path
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
from energyformer.analysis.figures import save_figure
out = Path(sys.argv[1])
data = json.loads((out / "results.json").read_text())
fig, ax = plt.subplots()
ax.plot(range(len(data["loss"])), data["loss"], label="ours")
ax.legend()
save_figure(fig, out / "cpu" / "curve.png", dpi=data["dpi"])
(out / "cpu" / "README.md").write_text("# Toy\\n\\n![loss](curve.png)\\n")
'''


def test_check_compares_figures_by_what_they_show(tmp_path, capsys):
    """a figure left stale by new artifacts fails the check; one drawn again with other bytes (another dpi here,
    another matplotlib elsewhere) and the same data passes"""
    (tmp_path / "render_fig.py").write_text(FIGURE_GENERATOR)
    folder = tmp_path / "docs/results/fig"
    (folder / "cpu").mkdir(parents=True)
    (folder / "results.json").write_text('{"loss": [3.0, 2.0, 1.5], "dpi": 50}')
    (tmp_path / "README.md").write_text(f"# repo\n\n{BEGIN}\n{END}\n")
    reg = Registry(pages=(Page("fig", "docs/results/fig", ("cpu/README.md",),
                               generator=Script("render_fig.py", ("{out}",)), readme=False),), artifacts=())
    assert run(["--root", str(tmp_path)], reg) == 0
    png = folder / "cpu/curve.png"
    drawn = png.read_bytes()
    capsys.readouterr()
    (folder / "results.json").write_text('{"loss": [3.0, 2.0, 1.5], "dpi": 70}')
    assert run(["--check", "--root", str(tmp_path)], reg) == 0   # other bytes, the same data
    (folder / "results.json").write_text('{"loss": [3.0, 2.0, 1.25], "dpi": 50}')
    assert run(["--check", "--root", str(tmp_path)], reg) == 1
    out = capsys.readouterr().out
    assert "differs: cpu/curve.png" in out and "figure cpu/curve.png: it shows other data" in out
    assert png.read_bytes() == drawn   # --check writes nothing
    assert run(["--root", str(tmp_path)], reg) == 0 and run(["--check", "--root", str(tmp_path)], reg) == 0
