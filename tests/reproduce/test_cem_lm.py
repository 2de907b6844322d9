import json

from energyformer.reproduce.cem_lm import SUITES, run_suite
from energyformer.experiment import resolve_config_path

TINY = ["model.dim=32", "model.n_layers=1", "model.heads=2", "model.max_seq_len=32", "task.seq_len=32",
        "task.batch_size=2", "task.eval_batch_size=4", "task.eval_max_batches=1", "train.steps=2",
        "train.eval_every=2", "train.save_every=2", "train.progress=false", "train.tensorboard=false"]


def test_every_suite_config_exists():
    for names in SUITES.values():
        for n in names:
            assert resolve_config_path(n).exists()


def test_lr_sweep_writes_report_plot_and_results(tmp_path):
    rows, text = run_suite(["lm/llama", "lm/cem_attn_t1"], tmp_path, TINY, lr_sweep=[1e-3, 2e-3, 4e-3])
    assert [r["name"] for r in rows] == ["llama", "cem_attn_t1"]
    assert (tmp_path / "loss_curves.png").stat().st_size > 1000
    assert "Akima" in text and "Unigram baseline" in text
    res = json.loads((tmp_path / "results.json").read_text())
    assert set(res["lr_sweep"]) == {"llama", "cem_attn_t1"}
    assert len(res["lr_sweep"]["llama"]["val_loss"]) == 3
    assert res["runs"][0]["params"]["attention"] > res["runs"][1]["params"]["attention"]


def test_report_only_merges_earlier_results(tmp_path):
    from energyformer.reproduce.cem_lm import main

    a, b, out = tmp_path / "a", tmp_path / "b", tmp_path / "merged"
    run_suite(["lm/llama"], a, TINY)
    run_suite(["lm/cem_attn_t1"], b, TINY)
    assert main(["--report-only", "--from", str(a), str(b), "--out", str(out)]) == 0
    text = (out / "report.md").read_text()
    assert "| llama |" in text and "| cem_attn_t1 |" in text
    assert "CEM attention (T=1) changes perplexity only a little" in text
    assert (out / "loss_curves.png").exists()
