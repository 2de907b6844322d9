"""The bare-sa study's hook helpers (q sweep summary, transient overlap, blow-up detection, coupling recovery)
and its memory probe."""

import pytest

import torch

from energyformer.analysis import bare_sa_memory as M
from energyformer.analysis.bare_sa import blew_up, coupling_recovery, q_summary, transient
from energyformer.analysis.bare_sa_memory import step_memory
from energyformer.studies import load_study


def test_hook_helpers():
    t = {"loss_q1": 2.0, "loss_q2": 1.9, "loss_q3": 1.85, "loss_q4": 1.95, "loss_q6": 2.2, "loss": 1.85}
    q = q_summary(t, [2, 4])
    assert (q["q1"], q["best_more_q"], q["best"], q["range_worst"]) == (2.0, 3, 1.85, 1.95)
    assert q["gain"] == pytest.approx(0.15)
    assert q_summary({"loss_cal_q1": 2.0, "loss_cal_q2": 2.1, "loss_q1": 9.0, "loss_q2": 9.0}, None)["gain"] == \
        pytest.approx(-0.1)                     # bare SA: the calibrated CE
    assert q_summary({"loss": 1.0}, None) is None
    assert transient([0.7, 0.9, 0.85]) == {"peak_t": 1, "fall": pytest.approx(0.05)}
    assert transient([0.9, 0.8, 0.7])["fall"] == 0.0 and transient([0.7, 0.8, 0.9])["fall"] == 0.0
    # the factored J (Eq. 19) under SGD lr 300: finite losses, so the Trainer never stopped it
    assert "2.3 -> 1e+15" in blew_up([2.3] * 10 + [4.0, 1e5] * 20 + [1e15] * 10)
    assert blew_up([2.3] * 10 + [float("inf")]) is not None
    assert blew_up([2.30 - 0.001 * k for k in range(300)]) is None      # codebook objective going down
    assert blew_up([-2.9 - 0.1 * k for k in range(300)]) is None        # plain objective: unbounded below
    assert blew_up([]) is None


def test_memory_probe_measures_what_the_memory_claim_reads(monkeypatch):
    seen = []
    monkeypatch.setattr(M, "step_memory", lambda m, b, n, **kw: seen.append((m["kind"], b, n)) or {"step_peak_bytes": 1})
    probe = M.memory_probe("cpu")
    (claim,) = [c for c in load_study("bare-sa").claims if c.id == "memory"]
    for arm in (claim.a, claim.b):
        model, key = arm.metric.rsplit(".", 1)
        assert arm.probe == "memory" and key in probe[model]
    assert ("bare_sa", 64, 64) in seen and len(seen) == 6


def test_step_memory_runs_one_training_step_in_a_fresh_process():
    out = step_memory({"kind": "bare_sa", "n_tokens": 4, "dim": 3, "objective": "plain"}, 2, 4)
    assert out["params"] == 4 * 4 * 3 * 3 and out["param_bytes"] == 4 * out["params"] and out["step_peak_bytes"] >= 0


def test_coupling_recovery_reads_a_planted_coupling():
    g = torch.Generator().manual_seed(0)
    J_true, U = torch.randn(5, 5, generator=g), torch.randn(3, 3, generator=g)
    out = coupling_recovery(J_true[:, :, None, None] * U, J_true, U)     # J_ij = J_true[i, j] U exactly
    assert out["corr"] == pytest.approx(1.0) and out["u_share"] == pytest.approx(1.0)
    noise = coupling_recovery(torch.randn(5, 5, 3, 3, generator=g), J_true, U)
    assert abs(noise["corr"]) < 0.9 and noise["u_share"] < 0.5


def test_a_small_rise_is_no_blow_up_and_symmetry_compares_c_with_its_transpose():
    """Outside-probe mutants that survived: the blow-up margin max(1, |first|) without its floor of 1 (a loss going
    0.1 -> 0.9 called a blow-up), and the symmetry correlation of c with itself (always 1)."""
    assert blew_up([0.1] * 10 + [0.9] * 10) is None
    assert blew_up([0.1] * 10 + [1.2] * 10) == "training objective 0.1 -> 1.2"
    g = torch.Generator().manual_seed(0)
    L, C = 6, 3
    c = torch.randn(L, L, generator=g, dtype=torch.float64)
    U = torch.randn(C, C, generator=g, dtype=torch.float64)
    J = c[:, :, None, None] * U                              # every block along U: c recovered exactly
    off = ~torch.eye(L, dtype=torch.bool)
    want = float(torch.corrcoef(torch.stack([c[off], c.T[off]]))[0, 1])
    out = coupling_recovery(J, c, U)
    assert abs(out["symmetry"] - want) < 1e-12 and abs(want) < 0.9
    assert abs(out["corr"] - 1) < 1e-12 and abs(out["u_share"] - 1) < 1e-12
