import json
from pathlib import Path

from energyformer.experiment import resolve_config_path
from energyformer.reproduce.cem_lm import SUITES, aggregate, load_records, main, run_suite

TINY = ["model.dim=32", "model.n_layers=1", "model.heads=2", "model.max_seq_len=32", "task.seq_len=32",
        "task.batch_size=2", "task.eval_batch_size=4", "task.eval_max_batches=1", "train.steps=2",
        "train.eval_every=2", "train.save_every=2", "train.progress=false", "train.tensorboard=false"]


def test_every_suite_config_exists():
    for names in SUITES.values():
        for n in names:
            assert resolve_config_path(n).exists()


def test_lr_sweep_writes_report_plots_and_results(tmp_path):
    rows, text = run_suite(["lm/llama", "lm/cem_attn_t1"], tmp_path, TINY, lr_sweep=[1e-3, 2e-3, 4e-3])
    assert sorted(r["name"] for r in rows) == ["cem_attn_t1", "llama"]
    assert (tmp_path / "loss_curves.png").stat().st_size > 1000
    assert (tmp_path / "lr_sweep.png").stat().st_size > 1000
    assert "Akima" in text and "Unigram baseline" in text
    res = json.loads((tmp_path / "results.json").read_text())
    assert set(res["lr_sweep"]) == {"llama", "cem_attn_t1"}
    assert len(res["lr_sweep"]["llama"]["val_loss"]) == 3 and len(res["runs"]) == 6
    best = min(res["lr_sweep"]["llama"]["lrs"], key=dict(zip(res["lr_sweep"]["llama"]["lrs"],
                                                              res["lr_sweep"]["llama"]["val_loss"])).get)
    assert res["at_lr"] == best  # one-LR claims at Llama's best grid rate
    p = {r["config"]: r["params"]["attention"] for r in res["runs"]}
    assert p["llama"] > p["cem_attn_t1"]


def test_finished_runs_are_reused_and_seeds_aggregate(tmp_path, capsys):
    run_suite(["lm/llama"], tmp_path, TINY, seeds=[0, 1])
    capsys.readouterr()
    rows, text = run_suite(["lm/llama"], tmp_path, TINY, seeds=[0, 1])
    assert capsys.readouterr().out.count("finished earlier") == 2  # nothing trained twice
    assert len(rows) == 1 and len(rows[0]["ppl_seeds"]) == 2
    agg = aggregate(load_records([tmp_path]))
    assert agg["noise"] is not None and agg["n_noise_groups"] == 1
    assert "Declared noise of a validation loss" in text and "seed range of llama" in text


def test_report_only_merges_earlier_results_and_readout_comparison(tmp_path):
    a, b, out = tmp_path / "a", tmp_path / "b", tmp_path / "merged"
    run_suite(["lm/llama", "lm/cem_kq_shared"], a, TINY)
    run_suite(["lm/cem_kq_shared_alg1"], b, TINY)
    report = tmp_path / "docs" / "README.md"
    setup = tmp_path / "setup.md"
    setup.write_text("**What ran**: a tiny test setup.\n")
    assert main(["--report-only", "--from", str(a), str(b / "results.json"), "--out", str(out),
                 "--report", str(report), "--setup", str(setup)]) == 0
    text = report.read_text()
    assert "**What ran**: a tiny test setup." in text  # --setup takes a file
    assert "| llama |" in text and "| cem_kq_shared |" in text
    assert "Algorithm 1" in text and "| cem_kq_shared | 0.002 |" in text
    assert (report.parent / "lm_loss_curves.png").exists() and (report.parent / "lm_results.json").exists()
    # the committed results file alone regenerates the page (setup paragraph and one-LR rate included)
    again = tmp_path / "again" / "README.md"
    assert main(["--report-only", "--from", str(report.parent / "lm_results.json"), "--out",
                 str(tmp_path / "o2"), "--report", str(again)]) == 0
    assert again.read_text() == text
    # the page contract: --report-only --out DIR re-renders DIR's page from DIR's artifacts alone
    (report.parent / "README.md").write_text("edited by hand\n")
    assert main(["--report-only", "--out", str(report.parent)]) == 0
    assert (report.parent / "README.md").read_text() == text
    assert not (report.parent / "results.json").exists()


def test_committed_cem_pages_rerender_byte_for_byte(tmp_path):
    """The page contract on the committed folder: README.md, gp.md and gp_findings.md from its JSON alone."""
    import shutil

    page = Path(__file__).resolve().parents[2] / "docs" / "results" / "cem"
    for f in ("lm_results.json", "gp_results.json"):
        shutil.copy(page / f, tmp_path / f)
    assert main(["--report-only", "--out", str(tmp_path)]) == 0
    for md in ("README.md", "gp.md", "gp_findings.md"):
        assert (tmp_path / md).read_text() == (page / md).read_text(), md
