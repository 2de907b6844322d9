"""reproduce intrinsic-lm: registered, and its report is built from recorded runs (no training here)."""

import json
import math
from pathlib import Path

from energyformer.reproduce import REPRODUCTIONS
from energyformer.reproduce.intrinsic_lm import SEED_VARIANTS, readout_note, write_report

P = {"attention": 10, "mlp": 20, "embedding": 30, "head": 0, "other": 0, "total": 60}


def test_registered():
    assert REPRODUCTIONS["intrinsic-lm"].module == "energyformer.reproduce.intrinsic_lm"


def test_report_from_recorded_runs(tmp_path):
    runs = {}
    for corpus in ("shakespeare", "pydoc"):
        for seed in (0, 1):
            for k, v in enumerate(SEED_VARIANTS):
                runs[f"{corpus}-{v}-s{seed}"] = {
                    "corpus": corpus, "variant": v, "seed": seed, "params": P, "seconds": 1.0, "steps": 100,
                    "tokens_per_step": 1024, "tokens_per_s": 500.0, "run_dir": str(tmp_path),
                    "history": [(s, 6 + 2 * math.exp(-s / 30) + 0.01 * k + 0.001 * seed) for s in range(10, 101, 10)],
                    "model": {"dim": 64, "n_layers": 2, "heads": 2, "max_seq_len": 256, "block": {"dropout": 0.1}},
                    "train": {"lr": 2e-3, "optimizer": {"betas": [0.9, 0.95], "weight_decay": 0.1},
                              "schedule": {"kind": "warmup_linear", "warmup": 0.05}},
                    "hardware": "test CPU"}
    text = write_report({"runs": runs, "overrides": ["--steps 100"]}, tmp_path)
    assert (tmp_path / "README.md").read_text().strip() == text.strip()
    assert (tmp_path / "val_loss.png").stat().st_size > 0
    assert text.count("| (a) MomenMHA and NagMHA converge faster than MHA |") == 2
    assert "## shakespeare" in text and "## pydoc" in text and "test CPU" in text
    assert text.count("**Can this run tell the variants apart?**") == 2
    assert "not every variant ran every seed" not in text


def test_report_names_variants_that_missed_a_seed(tmp_path):
    """Seed 1 only for MHA (an interrupted run): the README says so, every claim is UNDECIDED, and
    differences within the seed noise are called what they are."""
    runs = {}
    for corpus in ("shakespeare",):
        for seed in (0, 1):
            for k, v in enumerate(SEED_VARIANTS):
                if seed == 1 and v != "mha":
                    continue
                runs[f"{corpus}-{v}-s{seed}"] = {
                    "corpus": corpus, "variant": v, "seed": seed, "params": P, "seconds": 1.0, "steps": 100,
                    "tokens_per_step": 1024, "tokens_per_s": 500.0, "run_dir": str(tmp_path),
                    "history": [(s, 6 + 0.005 * k + 0.02 * seed) for s in range(10, 101, 10)],
                    "model": {"dim": 64, "n_layers": 2, "heads": 2, "max_seq_len": 256, "block": {"dropout": 0.1}},
                    "train": {"lr": 2e-3, "optimizer": {"betas": [0.9, 0.95], "weight_decay": 0.1},
                              "schedule": {"kind": "warmup_linear", "warmup": 0.05}}}
    text = write_report(json.loads(json.dumps({"runs": runs})), tmp_path)
    assert "not every variant ran every seed: shakespeare/MHA 2, shakespeare/MomenMHA 1" in text
    assert text.count("UNDECIDED") == 5 and "cannot tell the variants apart" in text


def test_every_variant_config_has_equal_width_depth_data_and_training():
    """configs/intrinsic/*.yaml differ only in the sublayer kinds (issue 10 Build 3; seed App. A.8)."""
    from energyformer.experiment import load_run_config
    from energyformer.reproduce.intrinsic_lm import EXTRA_VARIANTS

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


def test_nag_runs_with_the_pre_issue_23_readout_are_marked(tmp_path):
    """Runs recorded with readout 'lookahead' (the old default, now 'sgd_lookahead') are named as such on
    the page; runs with the seed's recursion are not."""
    def run(readout):
        return {"variant": "nag_mha", "model": {"block": {"attention": {"kind": "nag_mha", "readout": readout}}}}

    assert readout_note({"runs": {"a": run("seed"), "b": run("iterate")}}) == ""
    note = readout_note({"runs": {"a": run("lookahead"), "b": run("sgd_lookahead"), "c": run("seed")}})
    assert note.startswith("* **NagMHA read-out:** 2 NagMHA run(s) here used `readout: sgd_lookahead`")
    for page in ("cpu", "gpu"):  # the committed pages carry the note their results.json implies
        root = Path(__file__).resolve().parents[2] / "docs" / "results" / "intrinsic" / page
        assert readout_note(json.loads((root / "results.json").read_text())) in (root / "README.md").read_text()
