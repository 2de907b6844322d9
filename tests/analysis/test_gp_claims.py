"""GP claims (Table 3) by declared rules: each verdict on synthetic repetitions; the pages from a
results dict alone."""

from energyformer.analysis.gp_claims import check_claims, claims_markdown, findings_markdown, render_gp_pages
from energyformer.analysis.gp_report import MODELS
from energyformer.analysis.verdicts import Verdict

BASE = {"Plain": 0.5, "Gated": 0.4, "CEM-T1": 0.3, "CEM-T2": 0.2, "CEM-T4": 0.15, "CEM-T8": 0.16}


def _runs(means=BASE, spread=0.001, reps=3, kernel="rbf", extra=()):
    return [{"kernel": kernel, "model": m, "rep": r, "train_rmse": v, "test_rmse": v + spread * r}
            for m, v in {**means, **dict(extra)}.items() for r in range(reps)]


def _verdict(runs, key):
    return next(c["outcome"].verdict for c in check_claims(runs) if c["key"] == key)


def test_better_claims_reach_holds_fails_undecided():
    assert _verdict(_runs(), "t2_vs_t1") == Verdict.HOLDS
    assert _verdict(_runs(BASE | {"CEM-T2": 0.4}), "t2_vs_t1") == Verdict.DOES_NOT_HOLD
    assert _verdict(_runs(BASE | {"CEM-T2": 0.2995}, spread=0.01), "t2_vs_t1") == Verdict.UNDECIDED
    assert _verdict(_runs(), "t1_vs_plain") == Verdict.HOLDS


def test_one_repetition_never_decides():
    assert _verdict(_runs(reps=1), "t2_vs_t1") == Verdict.UNDECIDED


def test_two_part_claim_takes_the_weaker_part():
    assert _verdict(_runs(), "t4_t8_vs_t2") == Verdict.HOLDS
    assert _verdict(_runs(BASE | {"CEM-T8": 0.3}), "t4_t8_vs_t2") == Verdict.DOES_NOT_HOLD
    assert _verdict(_runs(BASE | {"CEM-T8": 0.201}, spread=0.01), "t4_t8_vs_t2") == Verdict.UNDECIDED


def test_not_monotonic_and_t1_vs_gated():
    assert _verdict(_runs(), "not_monotonic") == Verdict.HOLDS          # T4 0.15 -> T8 0.16 beyond 0.002
    assert _verdict(_runs(BASE | {"CEM-T8": 0.1}), "not_monotonic") == Verdict.DOES_NOT_HOLD
    assert _verdict(_runs(BASE | {"CEM-T1": 0.5}), "t1_vs_gated") == Verdict.DOES_NOT_HOLD
    rows = check_claims(_runs())
    assert next(c for c in rows if c["key"] == "t1_vs_gated")["paper_holds"] is True  # RBF: 0.0119 <= 0.0122


def test_markdown_states_rules_and_paper(tmp_path):
    md = claims_markdown(_runs())
    assert "band = seed spread" in md and "(holds on the means)" in md and "not worse by more than 0" in md
    runs = _runs(extra={"CEM-T4-eta0.5": 0.14, "CEM-T8-eta0.25": 0.15})
    f = findings_markdown({"runs": runs})
    assert "were cut" in f and "| CEM-T4-eta0.5 | -0.0500 | -0.0600 | HOLDS" in f
    pages = render_gp_pages({"runs": [r for r in runs if r["model"] in MODELS], "model_info": {},
                             "setup": {"repetitions": 3}}, tmp_path)
    assert [p.name for p in pages] == ["gp.md", "gp_findings.md"] and (tmp_path / "gp_recursion.png").exists()
