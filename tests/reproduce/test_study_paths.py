"""``energyformer reproduce PATH.yaml``: a study file of the user's own runs like the library's (docs/studies.md). The
CLI took only the registered names, so a study a user wrote could not be run from it, and the Python route named it
``studies//tmp/x.yaml.yaml`` on its pages and put its runs under ``runs//tmp/x.yaml/`` (probe AZ)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from energyformer.cli import main
from energyformer.reproduce import REPRODUCTIONS, resolve
from energyformer.studies import studies_dir
from energyformer.studies.preflight import study_key, study_source
from energyformer.utils.validate import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def test_a_study_file_renders_its_pages_naming_the_file_as_given(tmp_path, capsys):
    """The committed eqt records re-rendered from a copy of its study file: the records' study is the file's stem
    (moving the file keeps them its own), the pages name the path as given and the command that re-renders them."""
    study = tmp_path / "mine" / "eqt.yaml"
    study.parent.mkdir()
    shutil.copy(studies_dir() / "eqt.yaml", study)
    page = tmp_path / "page"
    shutil.copytree(ROOT / "docs" / "results" / "eqt", page)
    assert main(["reproduce", str(study), "--report-only", "--out", str(page)]) == 0
    text = (page / "cpu" / "README.md").read_text()
    assert f"`energyformer reproduce {study} --report-only --out DIR`" in text and f"study `{study}`" in text
    assert "studies/" not in text.split("\n\n")[1]
    assert f"Study: `{study}`" in (page / "README.md").read_text()
    assert "wrote" in capsys.readouterr().out
    # --check: the rendered pages pass; a hand edit of one verdict is found, and nothing is written
    assert main(["reproduce", str(study), "--report-only", "--check", "--out", str(page)]) == 0
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


def test_names_keys_and_errors():
    assert study_key("/x/y/my_study.yaml") == "my_study" and study_key("eqt") == "eqt"
    assert study_source("/x/y/my_study.yml") == "/x/y/my_study.yml" and study_source("eqt") == "studies/eqt.yaml"
    assert resolve("eqt") is not None and set(REPRODUCTIONS) >= {"eqt", "cem-lm"}
    with pytest.raises(ConfigError, match=r"reproduce '/nowhere/s.yaml': no such study file"):
        resolve("/nowhere/s.yaml")
    with pytest.raises(ConfigError, match=r"reproduce 'cem_lm': allowed cem-lm, .* or the path of a study file"):
        resolve("cem_lm")


def test_the_cli_names_a_wrong_reproduction_in_one_line(capsys):
    assert main(["reproduce", "no-such-study"]) != 0
    err = capsys.readouterr().err.strip()
    assert err.startswith("energyformer: error:") and "\n" not in err and "path of a study file" in err
