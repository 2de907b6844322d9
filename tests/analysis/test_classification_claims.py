"""The Hyper-SET image claims on made-up rows: seed-spread bands, paired seeds, the four verdicts."""

from energyformer.analysis.classification_claims import (
    accuracy_claim, accuracy_claims, claims_markdown, paired, seed_noise, trajectory_claims, verdict_counts,
)
from energyformer.analysis.verdicts import Verdict


def _row(acc, seed=0, config=None, params=100_000, **stats):
    r = {"test_accuracy": acc, "seed": seed, "params": {"total": params}}
    if config:
        r["config_name"] = config
    if stats:
        r["stats"] = stats
    return r


RUNS = {"hyperset": _row(0.690, d_eff_rank=-1.0, max_rise=2.0), "hyperset_seed1": _row(0.683, 1, "hyperset",
                                                                                         d_eff_rank=-0.8, max_rise=3.0),
        "transformer": _row(0.740), "transformer_seed1": _row(0.745, 1, "transformer"),
        "hyperset_lora4": _row(0.696), "et": _row(0.50)}


def test_seed_noise_is_the_largest_spread_per_metric():
    n = seed_noise(RUNS)
    assert abs(n["test_accuracy"] - 0.7) < 1e-9  # hyperset 69.0 vs 68.3 (transformer: 0.5)
    assert abs(n["d_eff_rank"] - 0.2) < 1e-9 and abs(n["max_rise"] - 1.0) < 1e-9
    assert seed_noise({"hyperset": _row(0.5)}) == {}


def test_paired_compares_like_with_like():
    assert paired({0: 1.0, 1: 2.0}, {0: 3.0}) == ([1.0], [3.0], "seed 0 of both")
    assert paired({0: 1.0, 1: 2.0}, {0: 3.0, 1: 4.0}) == ([1.0, 2.0], [3.0, 4.0], "")
    assert paired({1: 1.0}, {0: 3.0}) == ([1.0], [3.0], "")  # no common seed: all of each


def test_accuracy_verdicts():
    noise = seed_noise(RUNS)
    c = accuracy_claim(RUNS, "Table 1", "Hyper-SET > Transformer", "hyperset", "transformer", "p", noise, "s")
    assert c.outcome.verdict is Verdict.DOES_NOT_HOLD and "68.30" in c.ours and "74.50" in c.ours
    c = accuracy_claim(RUNS, "Table 5", "r4 > none", "hyperset_lora4", "hyperset", "p", noise, "s")
    # 69.6 vs seed 0's 69.0: a 0.6 margin inside the 0.7 band (against the seed mean it would be 0.95)
    assert c.outcome.verdict is Verdict.UNDECIDED and "seed 0 of both" in c.outcome.reason
    c = accuracy_claim(RUNS, "Table 1", "Hyper-SET > ET", "hyperset", "et", "p", noise, "s")
    assert c.outcome.verdict is Verdict.HOLDS
    c = accuracy_claim(RUNS, "Table 4", "x", "hyperset", "hyperset_sigmoid", "p", noise, "s")
    assert c.outcome.verdict is Verdict.UNTESTABLE and "hyperset_sigmoid" in c.outcome.reason
    one = {"hyperset": _row(0.70), "et": _row(0.69)}  # one seed each, no declared band: never decided
    assert accuracy_claim(one, "T", "x", "hyperset", "et", "p", {}, "s").outcome.verdict is Verdict.UNDECIDED


def test_every_table_and_figure_has_rows_and_cifar_is_untestable():
    rows = accuracy_claims(RUNS, seed_noise(RUNS), "s")
    assert {r.source for r in rows} >= {"Table 1", "Table 2", "Table 4", "Table 5", "Fig. 4"}
    assert rows[0].outcome.verdict is Verdict.UNTESTABLE and "CIFAR" in rows[0].claim
    params = [r for r in rows if "fewer parameters at 1 x 12" in r.claim][0]
    assert params.outcome.verdict is Verdict.UNDECIDED  # equal counts, band 0: margin 0 is not > 0


def test_trajectory_claims_two_seeds_declared_band_and_missing():
    rows = trajectory_claims(RUNS, {}, "s")
    rank = next(r for r in rows if "effective rank higher" in r.claim)
    assert rank.outcome.verdict is Verdict.DOES_NOT_HOLD and rank.rule == "seed spread of the statistic"
    rise = next(r for r in rows if "every step" in r.claim)
    assert rise.outcome.verdict is Verdict.DOES_NOT_HOLD  # rises by 2 and 3: both above 0 beyond the spread 1
    attn = next(r for r in rows if "E_ATTN lower" in r.claim)
    assert attn.outcome.verdict is Verdict.UNTESTABLE  # no such statistic recorded
    one = {"hyperset": _row(0.7, d_eff_rank=0.1)}
    r1 = next(r for r in trajectory_claims(one, {"d_eff_rank": 0.2}, "s") if "effective rank" in r.claim)
    assert r1.outcome.verdict is Verdict.UNDECIDED and "noise band 0.2" in r1.rule
    gone = trajectory_claims({"hyperset": _row(0.7)}, {}, "s", missing="not regenerated: budget")
    assert all(r.outcome.verdict is Verdict.UNTESTABLE and "budget" in r.outcome.reason for r in gone)


def test_markdown_and_counts():
    rows = trajectory_claims(RUNS, {}, "s")
    md = claims_markdown(rows)
    assert md.count("\n") == len(rows) + 1 and "**DOES NOT HOLD**" in md and "| UNTESTABLE |" in md
    assert verdict_counts(rows).startswith("DOES NOT HOLD")
