"""``energyformer reproduce PATH.yaml``: a study file of the user's own runs like the library's (docs/studies.md). The
CLI took only the registered names, so a study a user wrote could not be run from it, and the Python route named it
``studies//tmp/x.yaml.yaml`` on its pages and put its runs under ``runs//tmp/x.yaml/`` (probe AZ)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from energyformer.cli import main
from energyformer.reproduce import REPRODUCTIONS, resolve
from energyformer.studies import studies_dir
from energyformer.studies.preflight import study_file, study_key
from energyformer.utils.validate import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def _my_copy_of_eqt(tmp_path: Path, stem: str = "my_eqt") -> tuple[Path, Path]:
    """``studies/eqt.yaml`` copied as a user's study file, with the committed eqt records made that file's own (its
    stem as the study's name, its resolved path as their origin): a page folder it may render."""
    study = tmp_path / "mine" / f"{stem}.yaml"
    study.parent.mkdir(exist_ok=True)
    shutil.copy(studies_dir() / "eqt.yaml", study)
    page = tmp_path / f"page_{stem}"
    shutil.copytree(ROOT / "docs" / "results" / "eqt", page)
    rec = json.loads((page / "cpu" / "results.json").read_text())
    rec.update(study=stem, origin=os.path.relpath(study.resolve(), (page / "cpu").resolve()))
    (page / "cpu" / "results.json").write_text(json.dumps(rec))
    return study, page


def test_a_study_file_renders_its_pages_naming_the_file_and_check_finds_a_hand_edit(tmp_path, capsys, monkeypatch):
    """The pages name the study file by its name (the same text however its path is typed) and the command that
    re-renders them; ``--report-only --check`` passes them and finds a hand edit of a verdict, writing nothing."""
    study, page = _my_copy_of_eqt(tmp_path)
    assert main(["reproduce", str(study), "--report-only", "--out", str(page)]) == 0
    text = (page / "cpu" / "README.md").read_text()
    assert "`energyformer reproduce my_eqt.yaml --report-only --out DIR`" in text and "study `my_eqt.yaml`" in text
    assert "verdicts by the rules declared in `my_eqt.yaml`" in text and "studies/" not in text.split("\n\n")[1]
    assert "Study: `my_eqt.yaml`" in (page / "README.md").read_text()
    assert "wrote" in capsys.readouterr().out
    monkeypatch.chdir(study.parent)  # another spelling of the same file renders the same pages
    assert main(["reproduce", "./my_eqt.yaml", "--report-only", "--check", "--out", str(page)]) == 0
    assert "DIFFERS" not in capsys.readouterr().out
    edited = text.replace("| **UNDECIDED** |", "| **HOLDS** |", 1)
    assert edited != text
    (page / "cpu" / "README.md").write_text(edited)
    assert main(["reproduce", str(study), "--report-only", "--check", "--out", str(page)]) == 1
    out = capsys.readouterr().out
    assert f"DIFFERS  {page / 'cpu' / 'README.md'}" in out and "+| " in out and "-| " in out
    assert (page / "cpu" / "README.md").read_text() == edited
    assert main(["reproduce", str(study), "--check", "--out", str(page)]) != 0
    assert "give it with --report-only" in capsys.readouterr().err


def test_a_study_file_never_shares_records_with_another_of_its_name_or_the_librarys(tmp_path, capsys):
    """probe BA: a copy of studies/eqt.yaml run as a file wrote into the library's records and runs (its stem was
    their name); two files of one stem overwrote each other's; --report-only into a folder without this study's
    records overwrote its README.md."""
    lib = tmp_path / "eqt.yaml"
    shutil.copy(studies_dir() / "eqt.yaml", lib)
    assert main(["reproduce", str(lib), "--report-only", "--out", str(tmp_path)]) != 0
    assert "named like the library's study 'eqt'" in capsys.readouterr().err
    study, page = _my_copy_of_eqt(tmp_path)
    other = tmp_path / "other" / "my_eqt.yaml"
    other.parent.mkdir()
    shutil.copy(study, other)
    assert main(["reproduce", str(other), "--report-only", "--out", str(page)]) != 0
    err = capsys.readouterr().err
    assert "the records of the study file ../../mine/my_eqt.yaml (from this folder), not the study file " \
        "../../other/my_eqt.yaml" in err
    assert main(["reproduce", "eqt", "--report-only", "--out", str(page)]) != 0  # the library's, by name: no either
    assert "the records of study 'my_eqt', not 'eqt'" in capsys.readouterr().err
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "README.md").write_text("# My project\n")
    assert main(["reproduce", str(study), "--report-only", "--out", str(tmp_path / "proj")]) != 0
    assert "holds no records of this study" in capsys.readouterr().err
    assert (tmp_path / "proj" / "README.md").read_text() == "# My project\n"
    (tmp_path / "new").mkdir()  # a folder without records: its "not run yet" index, rendered twice, is its own
    for _ in range(2):
        assert main(["reproduce", str(other), "--report-only", "--out", str(tmp_path / "new")]) == 0
    capsys.readouterr()


def test_moving_a_study_with_its_page_folder_keeps_its_records_and_a_run_round_trips(tmp_path, monkeypatch):
    """The records name the study file relative to their folder (an absolute path made a moved or cloned project's
    own records another file's, and leaked the author's home path): records written, re-read under the folder lock
    (the second run's update) and read again after the whole project moved."""
    from energyformer.studies.preflight import default_runs
    from energyformer.studies.records import load_results, save_results, update_results

    proj = tmp_path / "proj"
    (proj / "page" / "cpu").mkdir(parents=True)
    (proj / "s.yaml").write_text("x")
    path = proj / "page" / "cpu" / "results.json"
    data = load_results(path, str(proj / "s.yaml"), "cpu")
    assert data["origin"] == "../../s.yaml" and data["study"] == "s"
    save_results(path, data)
    record = next(iter(json.loads((ROOT / "docs/results/eqt/cpu/results.json").read_text())["runs"].values()))
    update_results(path, data, lambda d: d["runs"].setdefault("r0", record))
    monkeypatch.chdir(proj)
    assert set(load_results(path, "./s.yaml", "cpu")["runs"]) == {"r0"}
    shutil.move(proj, tmp_path / "moved")
    assert set(load_results(tmp_path / "moved" / "page" / "cpu" / "results.json", str(tmp_path / "moved" / "s.yaml"),
                            "cpu")["runs"]) == {"r0"}
    a, b = default_runs(str(tmp_path / "a" / "x.yaml"), "cpu"), default_runs(str(tmp_path / "b" / "x.yaml"), "cpu")
    assert a != b and a.parent.name.startswith("x-") and a.name == "cpu"


def test_the_librarys_study_by_path_is_the_library_study(tmp_path, capsys):
    """studies/eqt.yaml given by path (or a symlink to it) renders the pages its name renders (they named eqt.yaml and
    a command that fails from the repository root)."""
    page = tmp_path / "page"
    shutil.copytree(ROOT / "docs" / "results" / "eqt", page)
    link = tmp_path / "lnk" / "other_name.yaml"
    link.parent.mkdir()
    link.symlink_to(studies_dir() / "eqt.yaml")
    for arg in (str(studies_dir() / "eqt.yaml"), str(link)):
        assert main(["reproduce", arg, "--report-only", "--out", str(page)]) == 0
        for f in ("README.md", "cpu/README.md"):
            assert (page / f).read_text() == (ROOT / "docs" / "results" / "eqt" / f).read_text(), (arg, f)
    bad = page / "cpu" / "results.json"
    bad.write_text(bad.read_text().replace('"study": "eqt"', '"study": "foo"', 1))
    assert main(["reproduce", "eqt", "--report-only", "--check", "--out", str(page)]) != 0
    assert f"error: {bad}: the records of study 'foo'" in capsys.readouterr().err  # OUT's file, not --check's copy


def test_names_keys_and_errors():
    assert study_key("/x/y/my_study.yaml") == "my_study" and study_key("eqt") == "eqt"
    assert study_file("/x/y/my_study.yml") == "my_study.yml" and study_file("eqt") == "studies/eqt.yaml"
    assert resolve("eqt") is not None and set(REPRODUCTIONS) >= {"eqt", "cem-lm"}
    with pytest.raises(ConfigError, match=r"reproduce '/nowhere/s.yaml': no such study file"):
        resolve("/nowhere/s.yaml")
    with pytest.raises(ConfigError, match=r"reproduce 'cem_lm': allowed cem-lm, .* or the path of a study file"):
        resolve("cem_lm")


def test_the_cli_names_a_wrong_reproduction_in_one_line(capsys):
    assert main(["reproduce", "no-such-study"]) != 0
    err = capsys.readouterr().err.strip()
    assert err.startswith("energyformer: error:") and "\n" not in err and "path of a study file" in err
