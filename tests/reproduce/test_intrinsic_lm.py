"""reproduce intrinsic-lm is the study studies/intrinsic-lm.yaml: registered, its configs differ only in the
sublayer kinds, and its committed pages re-render byte for byte from their records."""

import json
from pathlib import Path

from energyformer.reproduce import REPRODUCTIONS
from energyformer.experiment import load_run_config
from energyformer.studies import load_study, study_path
from energyformer.studies.runner import config_hash
from energyformer.studies.plan import expand

from .page_check import assert_page_rerenders

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "results" / "intrinsic"
#: the seed's Fig. 1 variants (the study's axis) and the ones with configs outside Fig. 1
SEED_VARIANTS = ["mha", "momen_mha", "nag_mha", "mha2nd1st", "mha2nd1st_simple", "mha2nd_lite"]
EXTRA_VARIANTS = ["mha_tied", "linear_attn", "mha2nd"]


def test_registered_as_a_study():
    assert study_path("intrinsic-lm") is not None
    assert REPRODUCTIONS["intrinsic-lm"].main().func.__module__ == "energyformer.studies.command"
    assert list(load_study("intrinsic-lm").runs.axes["variant"]) == SEED_VARIANTS


def test_every_variant_config_has_equal_width_depth_data_and_training():
    """configs/intrinsic/*.yaml differ only in the sublayer kinds (issue 10 Build 3; seed App. A.8)."""
    from energyformer.experiment import load_run_config

    ref = None
    for v in SEED_VARIANTS + EXTRA_VARIANTS:
        cfg = load_run_config(f"intrinsic/{v}", [])
        d = cfg.model_dump(mode="json")
        d["model"]["block"].pop("attention"), d["model"]["block"].pop("mlp"), d.pop("name")
        assert cfg.task.tokenizer == "gpt2" and cfg.task.seq_len == 256 and cfg.model.block.dropout == 0.1
        assert cfg.train.schedule.kind == "warmup_linear" and cfg.train.optimizer.kind == "adamw"
        assert cfg.model.block.attention.kind == v
        ref = ref or d
        assert d == ref, v


def test_the_gpu_page_keeps_its_tables_numbers_and_verdicts():
    """The page as data keeps what the Python page showed: the loss table (mean [min, max]), the tokens to
    reach MHA's final loss, the scale verdict, NagMHA's pre-issue-23 read-out and the records' note."""
    page = (PAGE / "gpu" / "README.md").read_text()
    assert "| nag_mha | 1.05M | 2.10M | 12.93M | 16.09M | lookahead |" in page
    assert "| mha | 2 | 6.268 [6.265, 6.272] | 5.792 [5.761, 5.823] | 5.218 [5.175, 5.262] | " in page
    assert "| shakespeare | 4.934 | mha2nd1st | 1.43M, 1.34M |" in page
    assert "span 0.441 nats (mha2nd1st 4.673 to nag_mha 5.114), more than twice the seed noise" in page
    assert "- note: These runs predate the study's gpu preset" in page and "![depth traces](depth_traces.png)" in page
    assert page.count("**HOLDS**") == 3 and page.count("**DOES NOT HOLD**") == 4 and "UNTESTABLE" not in page
    # claim e decided by its rule (probe AR: "tracks MHA to about 1e-3 nats" was false here, pydoc's seed 1 +0.084)
    assert "margin -0.03657 vs band 0.09524" in page and "margin -0.01118 vs band 0.01326" in page


def test_committed_pages_rerender_from_their_records_alone(tmp_path):
    """The page contract: a copy of the page folder (no run directories anywhere) renders to the same .md."""
    assert_page_rerenders(tmp_path, "intrinsic-lm", PAGE)
    rec = json.loads((PAGE / "cpu" / "results.json").read_text())
    plans = {p.name: p for p in expand(load_study("intrinsic-lm"), "cpu")}
    assert rec["format"] == 1 and set(rec["runs"]) == set(plans)   # retrained by the runner on 2026-11-26:
    for n, p in plans.items():                                       # every record is its plan's (reused)
        assert rec["runs"][n]["config_hash"] == config_hash(load_run_config(p.config, p.overrides)), n


def test_a_tiny_run_of_the_study_records_its_metrics_and_renders(tmp_path):
    """One MomenMHA run at toy size through the study runner: the val_loss and depth_trace hooks record
    their numbers, and the page draws the depth traces from them."""
    from energyformer.studies.command import render_pages
    from energyformer.studies.runner import run_study

    spec = load_study("intrinsic-lm")
    tiny = ["task.seq_len=16", "task.batch_size=2", "task.eval_batch_size=2", "task.eval_max_batches=1",
            "model.max_seq_len=16", "model.dim=16", "model.n_layers=2", "model.heads=2", "train.steps=4",
            "train.eval_every=1", "train.save_every=0"]
    data = run_study(spec, "intrinsic-lm", "cpu", tmp_path / "page" / "cpu", tmp_path / "runs", seeds=[0],
                     only={"variant": ["mha", "momen_mha"], "corpus": ["shakespeare"]}, sets=tiny, log=lambda s: None)
    rec = data["runs"]["shakespeare-momen_mha-s0"]
    vl = rec["metrics"]["val_loss"]
    assert [s for s, _ in vl["history"]] == [1, 2, 3, 4] and vl["final"] == vl["history"][-1][1]
    tr = rec["metrics"]["depth_trace"]
    assert len(tr["before"]) == 2 and len(tr["velocity"]) == 4      # 2 layers; velocity after each sublayer
    render_pages("intrinsic-lm", spec, tmp_path / "page")
    page = (tmp_path / "page" / "cpu" / "README.md").read_text()
    assert "![depth traces](depth_traces.png)" in page and "| shakespeare |" in page   # convergence section
    assert (tmp_path / "page" / "cpu" / "depth_traces.png").stat().st_size > 0           # drawn from the records
    assert "| **a-momen** MomenMHA converges faster than MHA" in page   # one seed: UNDECIDED
    assert "**UNDECIDED** | one seed and no declared bound" in page
