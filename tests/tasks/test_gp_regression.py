"""GP regressors, training, FLOP/parameter counts and the Table 3 report (CEM seed Appendix E)."""

import json

import pytest
import torch

from energyformer.analysis.gp_report import (
    MODELS, PAPER_TABLE3, aggregate, check_claims, claims_text, fmt_si, parse_si, render_markdown,
)
from energyformer.data.gp import make_gp_dataset
from energyformer.tasks.gp_regression import (
    FLOPS_BATCH, MODEL_SPECS, RegressorConfig, TrainConfig, analytic_flops, build_regressor,
    count_params, fit_flops_batch, lr_factor, measured_flops, rmse, train_regressor,
)

EXPECTED_PARAMS = {"Plain": 33984, "Gated": 33953, "CEM-T1": 22673, "CEM-T2": 22673,
                   "CEM-T4": 22673, "CEM-T8": 22673}


@pytest.fixture
def one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.mark.parametrize("name", list(MODEL_SPECS))
def test_param_counts_match_reported_and_paper(name):
    net = build_regressor(MODEL_SPECS[name], 0)
    n = count_params(net)
    assert n == EXPECTED_PARAMS[name]
    paper = parse_si(PAPER_TABLE3[("rbf", name)].params)
    assert abs(n - paper) / paper < 1e-3  # within 0.1% of the seed's Table 3


@pytest.mark.parametrize("name", list(MODEL_SPECS))
def test_analytic_flops_equal_flop_counter_and_shape(name):
    cfg = MODEL_SPECS[name]
    net = build_regressor(cfg, 0)
    assert analytic_flops(cfg) == measured_flops(net)
    assert analytic_flops(cfg, batch=7) == measured_flops(net, batch=7)
    assert net(torch.randn(5, 10)).shape == (5,)


def test_flops_grow_linearly_with_steps_and_fit_paper_batch():
    f = {t: analytic_flops(MODEL_SPECS[f"CEM-T{t}"]) for t in (1, 2, 4, 8)}
    assert f[2] - f[1] == (f[4] - f[2]) // 2 == (f[8] - f[4]) // 4
    assert analytic_flops(MODEL_SPECS["CEM-T1"]) == pytest.approx(analytic_flops(MODEL_SPECS["Gated"]), rel=0.01)
    per_sample = {m: analytic_flops(c) / FLOPS_BATCH for m, c in MODEL_SPECS.items()}
    paper = {m: parse_si(PAPER_TABLE3[("rbf", m)].flops) for m in MODEL_SPECS}
    assert 90 < fit_flops_batch(per_sample, paper) < 105


def test_cem_block_is_the_library_cem_mlp_with_steps():
    from energyformer.blocks.cem import CEMMLP

    net = build_regressor(MODEL_SPECS["CEM-T4"], 0)
    assert isinstance(net.block, CEMMLP) and net.block.steps == 4


def test_regressor_config_errors_name_key_value_allowed():
    with pytest.raises(ValueError, match=r"regressor.block = 'mlp'.*'plain'"):
        RegressorConfig(block="mlp")
    with pytest.raises(ValueError, match=r"regressor.steps = 2"):
        RegressorConfig(block="gated", steps=2)
    with pytest.raises(ValueError, match=r"train.lr = 0"):
        TrainConfig(lr=0)


def test_lr_schedule_warmup_then_cosine_to_final():
    """GP training uses the library's one schedule (train.schedule.lr_factor), warm-up in steps."""
    total, warm = 100, 5  # warmup_frac 0.05 of 100 steps
    assert lr_factor(0, total, warm, 0.1) == pytest.approx(0.2)
    assert lr_factor(4, total, warm, 0.1) == pytest.approx(1.0)
    assert lr_factor(total - 1, total, warm, 0.1) == pytest.approx(0.1)  # last step ends at the final LR
    vals = [lr_factor(s, total, warm, 0.1) for s in range(warm, total)]
    assert all(a >= b for a, b in zip(vals, vals[1:]))


@pytest.mark.parametrize("name", ["Plain", "Gated", "CEM-T2"])
def test_tiny_training_run_reduces_rmse_and_is_seeded(name, one_thread):
    data = make_gp_dataset("rbf", 200, 100, seed=0)
    cfg = TrainConfig(epochs=15, batch_size=50, lr=1e-2, seed=0)
    net = build_regressor(MODEL_SPECS[name], 0)
    before = rmse(net, data.x_train, data.y_train)
    res = train_regressor(net, data, cfg)
    assert res.train_rmse < 0.5 * before
    assert res.test_rmse < before
    again = train_regressor(build_regressor(MODEL_SPECS[name], 0), data, cfg)
    assert again.train_rmse == pytest.approx(res.train_rmse, rel=1e-5)


def _fake_runs(t2_better=True):
    runs = []
    for k in ("rbf", "matern"):
        for rep in range(3):
            for i, m in enumerate(MODELS):
                test = {"Plain": 0.5, "Gated": 0.4, "CEM-T1": 0.3, "CEM-T2": 0.2 if t2_better else 0.35,
                        "CEM-T4": 0.15, "CEM-T8": 0.16}[m] + 0.001 * rep
                runs.append({"kernel": k, "model": m, "rep": rep, "train_rmse": test - 0.05, "test_rmse": test})
    return runs


def test_report_has_paper_column_bold_and_claims():
    info = {m: {"params": 22673, "flops": analytic_flops(MODEL_SPECS[m])} for m in MODELS}
    md = render_markdown(_fake_runs(), info, {"repetitions": 3})
    assert "Test RMSE (paper)" in md and "Train RMSE (paper)" in md and "Table 3" in md
    assert "0.0092 ± 0.0008" in md  # the seed's CEM-T2 RBF test RMSE, from PAPER_TABLE3
    assert "**0.1510 ± 0.0010**" in md  # our best test RMSE per kernel is bold (CEM-T4)
    table_bold = sum(line.count("**") for line in md.splitlines() if line.startswith("| "))
    assert table_bold == 2 * 2 * 2  # train + test best, two kernels
    assert "T2 better than T1 (test): HOLDS" in md
    assert "gains not strictly monotonic beyond T2: HOLDS" in md


def test_claims_detect_failures():
    agg = aggregate(_fake_runs(t2_better=False))
    claims = check_claims(agg)
    assert not claims[0]["t2_beats_t1"] and claims[0]["paper_t2_beats_t1"]
    assert claims[0]["not_monotonic_beyond_t2"] is True  # 0.35 > 0.15 < 0.16
    text = claims_text(claims)
    assert "OVERALL 'T2 better than T1': FAILS in 0/2 kernels" in text
    assert fmt_si(22673) == "22.67K" and fmt_si(6774400) == "6.77M"


def test_reproduce_entry_point_writes_report_and_results(tmp_path, one_thread, capsys):
    from energyformer.reproduce.cem_gp import main

    out = tmp_path / "gp"
    assert main(["--reps", "2", "--epochs", "1", "--n-train", "60", "--n-test", "20", "--kernels", "rbf",
                 "--models", "Gated", "CEM-T1", "CEM-T2", "CEM-T4", "CEM-T8", "--out", str(out)]) == 0
    md = (out / "report.md").read_text()
    res = json.loads((out / "results.json").read_text())
    assert "Test RMSE (paper)" in md and "**" in md
    assert len(res["runs"]) == 2 * 5 and res["claims"][0]["kernel"] == "rbf"
    assert "paper_table3_not_measured" in res
    assert "[rbf] T2 better than T1" in capsys.readouterr().out


def test_reproduce_config_yaml_and_precedence(tmp_path):
    from pathlib import Path

    from energyformer.reproduce.cem_gp import FULL, QUICK, parse_args

    repo_cfg = Path(__file__).resolve().parents[2] / "configs" / "cem_gp.yaml"
    a = parse_args(["--config", str(repo_cfg), "--reps", "2"])
    assert (a.reps, a.n_train, a.epochs) == (2, QUICK["n_train"], QUICK["epochs"])
    assert (parse_args(["--full"]).reps, parse_args(["--full"]).n_train) == (FULL["reps"], FULL["n_train"])
    bad = tmp_path / "bad.yaml"
    bad.write_text("repz: 2\n")
    with pytest.raises(SystemExit):
        parse_args(["--config", str(bad)])
    with pytest.raises(SystemExit):
        parse_args(["--models", "CEM-T3"])
