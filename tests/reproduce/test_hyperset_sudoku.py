"""reproduce hyperset-sudoku is the study studies/hyperset-sudoku.yaml: the grid is Hyper-SET, the looped
transformer, Fig. 3a's ET and CRATE and the learned / sinusoidal positions pairs under one recipe, the gpu
scale is issue 20's preset for the first two, a toy-size study trains the models through the runner and records
every metric hook, and the committed pages re-render byte for byte from their records (claims: tests/analysis/
test_sudoku_report.py)."""

import json
import shutil
from pathlib import Path

from energyformer.experiment import load_run_config
from energyformer.studies import expand, load_study
from energyformer.studies.command import main as study_main
from energyformer.studies.runner import config_hash, run_study

from .page_check import assert_page_rerenders

PAGE = Path(__file__).resolve().parents[2] / "docs" / "results" / "hyperset"
TINY = ["model.dim=16", "model.heads=2", "model.iterations=2", "task.eval_iterations=[4]", "train.steps=2",
        "task.generate={n_train: 16, n_validation: 4, n_test: 4, givens: [45, 55]}", "train.eval_every=1",
        "train.save_every=2", "task.eval_max=4", "task.workers=1", "train.tensorboard=false", "train.device=cpu"]


def test_the_grid_is_the_models_on_one_seed():
    plans = expand(load_study("hyperset-sudoku"), "cpu")
    assert [(p.name, p.config) for p in plans] == [
        ("hyperset_seed0", "hyperset/sudoku_hyperset"), ("transformer_seed0", "hyperset/sudoku_transformer"),
        ("et_seed0", "hyperset/sudoku_et"), ("crate_seed0", "hyperset/sudoku_crate"),
        ("hyperset_sinpos_seed0", "hyperset/sudoku_hyperset"), ("hyperset_learned_seed0", "hyperset/sudoku_hyperset"),
        ("transformer_sinpos_seed0", "hyperset/sudoku_transformer"),
        ("transformer_learned_seed0", "hyperset/sudoku_transformer"),
        ("hyperset_statenorm_seed0", "hyperset/sudoku_hyperset"),
        ("hyperset_statenorm_sinpos_seed0", "hyperset/sudoku_hyperset"),
        ("hyperset_sigmoid_seed0", "hyperset/sudoku_hyperset"), ("hyperset_negbeta_seed0", "hyperset/sudoku_hyperset")]
    cfg = {p.cell["model"]: load_run_config(p.config, p.overrides) for p in plans}
    assert cfg["transformer"].model.block.attention.kind == "llama" and cfg["hyperset"].model.iterations == 8
    assert cfg["hyperset_sigmoid"].model.block.attention.energy == "sigmoid"
    assert cfg["hyperset_sigmoid"].model.block.mlp == cfg["hyperset_learned"].model.block.mlp
    neg = cfg["hyperset_negbeta"].model   # hyperset_learned but for the sign of β
    assert neg.block.attention.beta_scale == -1 and cfg["hyperset_learned"].model.block.attention.beta_scale == 1
    assert neg.model_copy(update={"block": neg.block.model_copy(update={"attention": neg.block.attention.model_copy(
        update={"beta_scale": 1.0})})}) == cfg["hyperset_learned"].model
    for lab, c in cfg.items():   # Fig. 3a: "under identical experimental conditions"
        assert c.train == cfg["hyperset"].train and c.task == cfg["hyperset"].task
        same = {k: getattr(cfg["hyperset"].model, k) for k in ("dim", "heads", "n_layers", "iterations", "max_seq_len")}
        assert {k: getattr(c.model, k) for k in same} == same, lab   # one weight-tied layer iterated L times
    assert (cfg["et"].model.block.attention.kind, cfg["et"].model.block.mlp.kind) == ("et", "identity")
    assert (cfg["crate"].model.block.attention.kind, cfg["crate"].model.block.mlp.kind) == ("crate", "ista")
    for m in ("hyperset", "transformer"):   # the positions pairs differ from their model in the positions only
        sin, learned = cfg[f"{m}_sinpos"].model, cfg[f"{m}_learned"].model
        assert (sin.positions, learned.positions, cfg[m].model.positions) == ("sinusoidal", "learned", "learned")
        assert sin.model_copy(update={"positions": "learned"}) == learned == cfg[m].model
    sin, learned = cfg["hyperset_statenorm_sinpos"].model, cfg["hyperset_statenorm"].model
    assert (sin.positions, learned.positions) == ("sinusoidal", "learned")
    assert sin.block.attention.step_size.state_norm and not cfg["hyperset"].model.block.attention.step_size.state_norm
    assert sin.model_copy(update={"positions": "learned"}) == learned
    att = learned.block.attention   # the state_norm pair differs from hyperset in the conditioning only
    att = att.model_copy(update={"step_size": att.step_size.model_copy(update={"state_norm": False})})
    assert learned.model_copy(update={"block": learned.block.model_copy(update={"attention": att})}) == \
        cfg["hyperset"].model


def test_gpu_scale_is_the_issue_20_preset():
    for p in expand(load_study("hyperset-sudoku"), "gpu"):
        cfg = load_run_config(p.config, p.overrides)
        assert (cfg.model.dim, cfg.model.heads, cfg.model.iterations) == (768, 12, 24)
        assert (cfg.task.batch_size, cfg.task.generate.givens, cfg.task.eval_iterations) == (64, (21, 34), [48])
        assert (cfg.train.steps, cfg.train.lr, cfg.train.precision, cfg.train.eval_every) == (4000, 3e-4, "bf16", 250)


def test_toy_study_trains_both_models_and_records_every_hook(tmp_path, monkeypatch):
    """The gpu scale at toy size on the CPU (bf16 autocast): both runs through run_experiment, every metric
    hook recorded, the claims decided and the page rendered from the records."""
    monkeypatch.setenv("ENERGYFORMER_DATA", str(tmp_path / "data"))  # the tiny generated set stays here
    spec = load_study("hyperset-sudoku")
    data = run_study(spec, "hyperset-sudoku", "gpu", tmp_path / "out" / "gpu", tmp_path / "runs", sets=TINY,
                     log=lambda s: None)
    hs, tf = data["runs"]["hyperset_seed0"], data["runs"]["transformer_seed0"]
    assert hs["resolved"]["train"]["precision"] == "bf16" and hs["steps"] == 2
    ex = hs["metrics"]["extrapolation"]
    assert ex["L"] == 2 and set(ex["curve"]) == {"1", "2", "3", "4"} and ex["n"] == 4
    assert len(hs["metrics"]["energy"]["e_total"]) == 5 and "energy" not in tf["metrics"]  # the transformer has none
    assert len(tf["metrics"]["geometry"]["angle"]) == 5 and len(tf["metrics"]["geometry"]["angle"][0]) == 2
    assert [e["step"] for e in hs["metrics"]["training"]["eval_history"]] == [1, 2]
    assert hs["metrics"]["sizes"]["step_size"] > 0 == tf["metrics"]["sizes"]["step_size"]
    assert hs["metrics"]["sizes"]["paper_width"] > 5e6 and "test" in hs["metrics"]["data"]
    assert study_main("hyperset-sudoku", ["--report-only", "--out", str(tmp_path / "out")]) == 0
    page = (tmp_path / "out" / "gpu" / "README.md").read_text()
    assert page.startswith("# Hyper-SET on Sudoku") and "— gpu scale" in page and "| **board-L**" in page
    for png in ("learning_curves.png", "extrapolation.png", "energy.png", "rank.png", "angle.png"):
        assert (tmp_path / "out" / "gpu" / png).stat().st_size > 0, png
    assert "cpu** — not run yet" in (tmp_path / "out" / "README.md").read_text()


def test_committed_pages_rerender_from_their_records_alone(tmp_path):
    assert_page_rerenders(tmp_path, "hyperset-sudoku", PAGE, ["README.md", "cpu/README.md", "gpu/README.md"])
    index = (PAGE / "README.md").read_text()
    assert "* **gpu** — [gpu/README.md](gpu/README.md): 3 runs on NVIDIA H100" in index


def test_committed_records_are_reused_by_the_runner():
    """Every cpu record was trained by the runner from today's configs (the hyperset / transformer ones
    retrained on 2026-11-26, the others for issue 20, item 5): each record's hash is its plan's, so
    `reproduce hyperset-sudoku --scale cpu` trains nothing again."""
    recs = json.loads((PAGE / "cpu" / "results.json").read_text())["runs"]
    plans = {p.name: p for p in expand(load_study("hyperset-sudoku"), "cpu")}
    assert set(plans) == set(recs)
    for n in plans:
        assert recs[n]["config_hash"] == config_hash(load_run_config(plans[n].config, plans[n].overrides)), n


def test_committed_gpu_records_are_the_gpu_scales_plans():
    """The gpu records (one H100 device run of `reproduce hyperset-sudoku --scale gpu`, 2026-11-26) are three of
    the scale's labels as declared today: each record's hash is its plan's, so a rerun trains only the rest."""
    recs = json.loads((PAGE / "gpu" / "results.json").read_text())["runs"]
    plans = {p.name: p for p in expand(load_study("hyperset-sudoku"), "gpu")}
    assert {"hyperset_seed0", "transformer_seed0", "hyperset_sigmoid_seed0"} == set(recs) <= set(plans)
    for n in recs:
        assert recs[n]["config_hash"] == config_hash(load_run_config(plans[n].config, plans[n].overrides)), n
        assert recs[n]["steps"] == 4000 and recs[n]["device"].startswith("cuda"), n


def test_toy_et_and_crate_train_through_the_runner_and_join_the_page(tmp_path, monkeypatch):
    """Fig. 3a's ET and CRATE at toy size: trained by the runner (cpu scale, --only), every hook that applies
    recorded (no energies, rank or angle: analysis.hyperset knows no subspaces of theirs), and the page
    re-rendered with the committed records shows them in its tables."""
    monkeypatch.setenv("ENERGYFORMER_DATA", str(tmp_path / "data"))
    out = tmp_path / "out"
    shutil.copytree(PAGE, out)
    data = run_study(load_study("hyperset-sudoku"), "hyperset-sudoku", "cpu", out / "cpu", tmp_path / "runs",
                     only={"model": ["et", "crate"]}, sets=TINY, log=lambda s: None)
    for name in ("et_seed0", "crate_seed0"):
        rec = data["runs"][name]
        assert rec["steps"] == 2 and set(rec["metrics"]) == {"extrapolation", "training", "sizes", "data"}, name
        assert set(rec["metrics"]["extrapolation"]["curve"]) == {"1", "2", "3", "4"}
    assert study_main("hyperset-sudoku", ["--report-only", "--out", str(out)]) == 0
    page = (out / "cpu" / "README.md").read_text()
    assert "\n| et | " in page and "\n| crate | " in page
    assert "| **et-fails** " in page and "| **crate-fails** " in page


def test_the_page_is_declared_generic_over_the_model_axis():
    spec = load_study("hyperset-sudoku")
    assert spec.render is None
    blocks = spec.report["README.md"]
    assert all(b.table.rows in (["model"], ["seed"]) for b in blocks if b.table)
    assert all(b.plot.series == "model" for b in blocks if b.plot)
    page = (PAGE / "cpu" / "README.md").read_text()
    for part in ("## Models", "## Results", "| hyperset | 0.00 | 0.0, 0.4 |", "## Energies per iteration",
                 "## Training curves (validation)", "| **plateau**", "![extrapolation](extrapolation.png)"):
        assert part in page, part
