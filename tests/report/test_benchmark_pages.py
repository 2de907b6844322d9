"""The benchmark pages are rendered by their scripts' --render-only modes from committed raw output (issue 22)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from energyformer.errors import DataError
from energyformer.report.pages import Registry, Script
from energyformer.report.render import render_page

ROOT = Path(__file__).resolve().parents[2]
BENCHMARK_PAGES = ("cem-benchmarks", "intrinsic-cpu-benchmark", "hyperset-benchmark")


@pytest.mark.parametrize("name", BENCHMARK_PAGES)
def test_benchmark_page_is_its_scripts_render_of_the_committed_raw_output(name):
    (page,) = Registry().select([name])
    assert isinstance(page.generator, Script) and "--render-only" in page.generator.args
    res = render_page(page, ROOT, in_place=False)
    assert res.status == "ok", f"{name}: {res.problems} {res.diff}"


def test_a_benchmark_page_edited_by_hand_or_missing_its_raw_output_fails(tmp_path):
    (page,) = Registry().select(["intrinsic-cpu-benchmark"])
    folder = tmp_path / page.folder
    shutil.copytree(ROOT / page.folder, folder)
    (tmp_path / "benchmarks").mkdir()
    for f in (ROOT / "benchmarks").glob("*.py"):
        shutil.copy(f, tmp_path / "benchmarks" / f.name)
    md = folder / "benchmark.md"
    md.write_text(md.read_text().replace("met", "MET", 1))
    assert render_page(page, tmp_path, in_place=False).status == "differs"
    (folder / "benchmark.json").unlink()
    with pytest.raises(DataError, match=r"benchmark.json not found"):
        render_page(page, tmp_path, in_place=False)
