"""The plateau recipe (energyformer.analysis.plateau_recipe) and its ablation script
(scripts/hyperset_plateau_ablation.py)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from energyformer.analysis.plateau_recipe import LN9, MARGIN, last50, left_ln9, recipe_losses
from energyformer.report.pages import Registry, Script
from energyformer.report.render import render_page

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "hyperset_plateau_ablation.py"
HYPERSET = {"attention": {"kind": "hyperset"}, "mlp": {"kind": "hyperset"}}


def test_the_rule_is_the_last_50_steps_mean_below_ln9_minus_the_margin():
    assert last50([9.0] * 10 + [1.0] * 50) == 1.0 and last50([2.0, 4.0]) == 3.0
    assert left_ln9([LN9 - MARGIN - 1e-6] * 50) and not left_ln9([LN9 - MARGIN] * 50)


def test_recipe_is_deterministic_and_the_seed_moves_only_the_initialisation():
    a = recipe_losses(HYPERSET, steps=3, seed=0, dim=16, iterations=2)
    assert a == recipe_losses(HYPERSET, steps=3, seed=0, dim=16, iterations=2)
    b = recipe_losses(HYPERSET, steps=3, seed=1, dim=16, iterations=2)
    assert len(a) == 3 and a != b
    assert all(abs(x - LN9) < 0.1 for x in a + b)  # a step from chance: every run starts at ln 9


def test_every_variant_builds_and_the_probe_control_equals_the_library_operator(tmp_path, load_script):
    """Two steps of every variant at a toy size; the patched plain bi-softmax (the probe's control) gives the
    library's losses to rounding, so the centring is the only thing the probe changes."""
    mod = load_script(SCRIPT)
    recs = mod.measure(tmp_path, list(mod.VARIANTS), [0], steps=2, jobs=1, dim=16, iterations=2)
    by = {r["variant"]: r for r in recs}
    assert set(by) == set(mod.VARIANTS)
    assert by["probe_bisoftmax+relu_mlp"]["means25"] == pytest.approx(by["hs_attention_fixed+relu_mlp"]["means25"],
                                                                       abs=1e-4)
    assert by["probe_centred_bisoftmax+relu_mlp"]["means25"] != by["probe_bisoftmax+relu_mlp"]["means25"]
    saved = json.loads((tmp_path / "results.json").read_text())
    assert len(saved["records"]) == len(mod.VARIANTS) and saved["meta"]["recipe"]["dim"] == 32


def test_a_rerun_replaces_its_records_and_the_render_reads_only_the_file(tmp_path, load_script):
    mod = load_script(SCRIPT)
    mod.measure(tmp_path, ["transformer"], [0, 1], steps=2, jobs=1, dim=8, iterations=1)
    mod.measure(tmp_path, ["transformer"], [1], steps=2, jobs=1, dim=8, iterations=1)
    recs = json.loads((tmp_path / "results.json").read_text())["records"]
    assert sorted(r["seed"] for r in recs) == [0, 1]
    page = mod.render(tmp_path)
    assert page == mod.render(tmp_path) and "## d 8, L 1, 2 steps" in page and "0 of 2" in page


def test_bad_arguments_get_one_line_errors(capsys, load_script):
    mod = load_script(SCRIPT)
    for argv, words in ((["--out", "x", "--variants", "nope"], "unknown nope"),
                        (["--out", "x", "--seeds", "a"], "--seeds"), (["--out", "x", "--dim", "30"], "multiple of"),
                        (["--seeds", "0"], "--out"), (["--render-only", "/nonexistent"], "no results.json")):
        with pytest.raises(SystemExit):
            mod.main(argv)
        assert words in capsys.readouterr().err


def test_the_committed_page_is_the_render_of_the_committed_results(tmp_path):
    (page,) = Registry().select(["hyperset-plateau-ablation"])
    assert isinstance(page.generator, Script) and page.generator.path == "scripts/hyperset_plateau_ablation.py"
    res = render_page(page, ROOT, in_place=False)
    assert res.status == "ok", f"{res.problems} {res.diff}"
    folder = tmp_path / page.folder
    shutil.copytree(ROOT / page.folder, folder)
    md = folder / "README.md"
    md.write_text(md.read_text().replace("of 3", "of 4", 1))
    (tmp_path / "scripts").mkdir()
    shutil.copy(SCRIPT, tmp_path / "scripts" / SCRIPT.name)
    assert render_page(page, tmp_path, in_place=False).status != "ok"
