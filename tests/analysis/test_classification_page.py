"""The images page and mim.md rendered from made-up artifacts: figures and verdict rows from recorded
curves, UNTESTABLE rows and a stated reason where a curve or matrix is not recorded, the same bytes twice."""

import json

from energyformer.analysis.classification_mim import mim_claims, render_mim
from energyformer.analysis.classification_page import render_folder
from energyformer.analysis.classification_records import trajectory_stats
from energyformer.analysis.verdicts import Verdict


def _traj(e_total, rank):
    T = len(e_total)
    return {"images": 4, "iterations": T - 1, "e_attn": [e / 2 for e in e_total], "e_ff": [e / 2 for e in e_total],
            "e_total": e_total, "eff_rank": [[r, r + 1] for r in rank], "angle": [[60.0 + t, 70.0] for t in range(T)],
            "full_rank": [5.0] * T}


def _row(acc, seed=0, traj=None, confusion=True):
    r = {"test_accuracy": acc, "val_accuracy": acc, "seed": seed, "params": {"total": 1000}, "width": 8,
         "iterations": 2, "steps": 10, "batch_size": 2, "train_examples": 20, "train_images_per_s": 5.0,
         "device": "cpu", "classes": ["a", "b"], "class_acc": [0.75, 1.0]}
    if confusion:
        r["confusion"] = [[3, 1], [0, 4]]
    if traj is not None:
        r.update(trajectory=traj, stats=trajectory_stats(traj, 2),
                 depth={"iterations": [1, 2, 3, 4], "accuracy": [50.0, 60.0, 58.0, 55.0], "examples": 8})
    return r


def test_page_with_records_and_without(tmp_path):
    runs = {"hyperset": _row(0.69, traj=_traj([10.0, 9.0, 8.0, 8.5, 9.0], [1.0, 1.5, 2.0, 2.0, 2.0])),
            "hyperset_seed1": {**_row(0.68, 1, traj=_traj([10.0, 9.5, 8.0, 8.0, 8.0], [1.0, 1.2, 1.9, 2.0, 2.0])),
                               "config_name": "hyperset"},
            "transformer": _row(0.74, confusion=False)}
    data = {"page": {"notes": ["note"], "missing_records": {"mnist": "not rerun in budget"}}, "fashion_mnist": {"runs": runs},
            "mnist": {"runs": {"hyperset": _row(0.8, confusion=False)}}}
    (tmp_path / "results.json").write_text(json.dumps(data))
    assert render_folder(tmp_path) == [tmp_path / "README.md"]
    page = (tmp_path / "README.md").read_text()
    fm, mn = page.split("\n## MNIST")
    assert "| Fig. 5 | E_ATTN + E_FF falls at every step" in fm and "seed spread of the statistic" in fm
    rank = next(line for line in fm.splitlines() if "effective rank higher" in line)
    assert "| HOLDS |" in rank  # +1.0 and +0.9, spread 0.1
    assert "![energies](energy_fashion_mnist.png)" in fm and "it rises at 0 of 2 steps" in fm
    assert "The confusion matrix of this run is not in the committed record" in fm  # transformer: class_acc only
    assert "no Hyper-SET trajectory is recorded for this data set" in mn and "not regenerated" in mn
    assert "**Curves not recorded**: not rerun in budget." in mn and "Curves not recorded" not in fm
    assert "seed spread of the Fashion-MNIST runs; MNIST has one seed per config" in mn
    for f in ("energy_fashion_mnist.png", "rank_angle_fashion_mnist.png", "depth_fashion_mnist.png",
              "confusion_fashion_mnist_hyperset.png"):
        assert (tmp_path / f).stat().st_size > 1000
    assert not (tmp_path / "energy_mnist.png").exists()
    render_folder(tmp_path)
    assert (tmp_path / "README.md").read_text() == page


def _mim_row(name, seed, psnr, ssim, params, hidden=None, iterations=12):
    mlp = {"kind": "hyperset", "hidden": hidden} if hidden else "gelu"
    return {"name": name, "config_name": name.split("_seed")[0], "seed": seed, "dataset": "fashion_mnist",
            "split": "validation", "params": {"total": params}, "device": "cpu", "git_commit": "abcdef0123",
            "eval": {"loss": 3.7, "accuracy": 0.31, "decode_accuracy": 0.29, "psnr": psnr, "ssim": ssim,
                     "examples": 10.0, "masked_fraction": 0.408, "unigram_loss": 4.4, "unigram_accuracy": 0.3,
                     "unigram_psnr": 11.3, "unigram_ssim": 0.43, "tokenizer_psnr": 21.3, "tokenizer_ssim": 0.83},
            "config": {"task": {"dataset": "fashion_mnist", "patch_size": 4, "codebook_size": 256, "batch_size": 64,
                                "decode_steps": 8, "temperature": 1.0},
                       "model": {"dim": 64, "heads": 4, "n_layers": 1, "iterations": iterations,
                                 "block": {"attention": "gpt", "mlp": mlp}},
                       "train": {"steps": 300, "lr": 1e-3, "grad_clip": 3.0,
                                 "optimizer": {"kind": "adamw", "betas": [0.9, 0.95], "weight_decay": 0.1}}}}


def test_mim_page_and_claims(tmp_path):
    runs = {"mim_transformer": _mim_row("mim_transformer", 0, 12.6, 0.480, 83200),
            "mim_transformer_seed1": _mim_row("mim_transformer_seed1", 1, 12.5, 0.478, 83200),
            "mim_hyperset": _mim_row("mim_hyperset", 0, 12.3, 0.473, 58112, hidden=64),
            "mim_hyperset_wide": _mim_row("mim_hyperset_wide", 0, 12.55, 0.4795, 86784, hidden=512, iterations=24)}
    claims = {c.claim: c.outcome.verdict for c in mim_claims(runs)}
    assert claims["Transformer > Hyper-SET 1 / 12 / d on PSNR (\"lags behind Transformer on all metrics\")"] \
        is Verdict.HOLDS  # 12.55 mean vs 12.3, band 0.1
    assert claims["Hyper-SET 1 / 24 / 8d matches the Transformer on PSNR (not worse)"] is Verdict.UNDECIDED
    assert claims["Hyper-SET 1 / 24 / 8d has fewer parameters than the Transformer"] is Verdict.DOES_NOT_HOLD
    assert claims["MS-SSIM, LPIPS and FID orderings"] is Verdict.UNTESTABLE
    (tmp_path / "mim.json").write_text(json.dumps({"runs": runs}))
    assert render_folder(tmp_path) == [tmp_path / "mim.md"]
    md = (tmp_path / "mim.md").read_text()
    assert "| `mim_hyperset_wide` | 1 / 24 / 8d | 86,784 | 0 |" in md and "| `mim_transformer` | 1 / 12 / 4d |" in md
    assert "20 of" not in md and "40.8% of the codes masked" in md
    assert render_mim(json.loads((tmp_path / "mim.json").read_text()), tmp_path) == md
