"""The page registry covers every results folder and page under docs/results (issue 22)."""
from __future__ import annotations

from pathlib import Path

import pytest

from energyformer.errors import ConfigError
from energyformer.report.pages import RESULTS, Page, Registry, Reproduce, Script
from energyformer.reproduce import REPRODUCTIONS

ROOT = Path(__file__).resolve().parents[2]


def test_every_folder_and_page_under_docs_results_is_registered():
    reg = Registry()
    assert reg.unregistered(ROOT) == []
    folders = {str(d.relative_to(ROOT)) for d in (ROOT / RESULTS).rglob("*") if d.is_dir()}
    assert folders <= reg.folders()


def test_registered_files_exist_and_generators_name_registered_reproductions():
    for page in Registry().pages:
        for name in page.files:
            assert (ROOT / page.folder / name).is_file(), f"{page.name}: {page.folder}/{name}"
        if isinstance(page.generator, Reproduce):
            assert page.generator.name in REPRODUCTIONS
        if isinstance(page.generator, Script):
            assert (ROOT / page.generator.path).is_file()
        assert page.generated or page.why, f"{page.name}: a hand-written page says why"


def test_a_new_page_no_entry_claims_is_reported(tmp_path):
    (tmp_path / RESULTS / "new").mkdir(parents=True)
    (tmp_path / RESULTS / "new" / "README.md").write_text("# new\n")
    (tmp_path / RESULTS / "new" / "notes.md").write_text("# notes\n")
    reg = Registry(pages=(Page("new", f"{RESULTS}/new"),), artifacts=())
    assert reg.unregistered(tmp_path) == [f"{RESULTS}/new/notes.md"]
    assert Registry(pages=(), artifacts=()).unregistered(tmp_path) == [
        f"{RESULTS}/new/README.md", f"{RESULTS}/new/notes.md", f"{RESULTS}/new"]


def test_unknown_page_name_is_one_line_error_listing_the_pages():
    with pytest.raises(ConfigError, match=r"report page 'bare_sa': not registered; registered: cem, .*bare-sa"):
        Registry().select(["bare_sa"])
    with pytest.raises(ValueError, match="registered twice"):
        Registry(pages=(Page("x", "a"), Page("x", "b")))


def test_select_returns_the_named_pages_in_registry_order():
    reg = Registry(pages=(Page("a", "x/a"), Page("b", "x/b"), Page("c", "x/c")), artifacts=())
    assert [p.name for p in reg.select(["c", "a"])] == ["a", "c"]
    assert [p.name for p in reg.select([])] == ["a", "b", "c"]


def test_a_reproductions_render_is_the_report_only_command_it_describes():
    gen = Reproduce("bare-sa")
    argv = gen.argv(Path("/tmp/out"))
    assert argv[1:3] == ["-m", "energyformer.cli"]
    assert " ".join(["energyformer", *argv[3:]]) == gen.describe().replace("DIR", "/tmp/out")
    assert "--report-only" in argv
