"""reproduce intrinsic-lm: registered, and its report is built from recorded runs (no training here)."""

import json
import math

from energyformer.reproduce import REPRODUCTIONS
from energyformer.reproduce.intrinsic_lm import SEED_VARIANTS, write_report

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
