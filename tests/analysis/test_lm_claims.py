"""The CEM LM claims by declared rules: each claim kind reaches HOLDS / DOES NOT HOLD / UNDECIDED /
UNTESTABLE on synthetic losses (nats)."""

import math

from energyformer.analysis.lm_claims import CLAIMS, SMALL, check_claims, claims_markdown, loss_noise
from energyformer.analysis.verdicts import Verdict
from energyformer.experiment import resolve_config_path


def _verdict(checked, needle):
    return next(k.outcome.verdict for k in checked if needle in k.claim.text)


def test_every_claim_names_existing_configs():
    for c in CLAIMS:
        for n in c.needs:
            assert resolve_config_path(f"lm/{n}").exists(), n


def test_noise_is_the_largest_seed_range():
    assert math.isclose(loss_noise({"a": [4.0, 4.3], "b": [4.0, 4.05], "c": [3.0]}), 0.3)
    assert loss_noise({"a": [4.0]}) is None


def test_better_claim_reaches_three_verdicts_against_the_noise():
    base = {"cem_attn_t1": [4.5], "llama": [4.5]}
    for t2, want in ((4.3, Verdict.HOLDS), (4.7, Verdict.DOES_NOT_HOLD), (4.45, Verdict.UNDECIDED)):
        got = check_claims(base | {"cem_attn_t2_diag": [t2], "cem_attn_t2_dlr": [t2 + 0.01]}, noise=0.1)
        assert _verdict(got, "CEM attention: T=2 improves on T=1") == want, t2


def test_one_seed_without_noise_is_undecided_and_missing_configs_untestable():
    got = check_claims({"cem_attn_t1": [4.5], "cem_attn_t2_diag": [3.0], "cem_attn_t2_dlr": [3.0]})
    assert _verdict(got, "CEM attention: T=2 improves on T=1") == Verdict.UNDECIDED  # no seed noise measured
    assert _verdict(got, "KQ diagonal is essential") == Verdict.UNTESTABLE
    row = next(k for k in got if "KQ diagonal is essential" in k.claim.text)
    assert "not run" in row.outcome.reason and "cem_kq_shared" in row.outcome.reason


def test_not_worse_with_the_small_tolerance():
    for attn, want in ((4.5 + SMALL / 2, Verdict.HOLDS), (4.5 + 3 * SMALL, Verdict.DOES_NOT_HOLD),
                       (4.5 + SMALL, Verdict.UNDECIDED)):
        got = check_claims({"llama": [4.5, 4.51], "cem_attn_t1": [attn]}, noise=0.01)
        assert _verdict(got, "changes perplexity only a little") == want, attn


def test_fig4_recursion_vs_t1_and_vs_reuse_are_separate():
    # recursion hurts (T2 worse than T1 by 0.2) but hurts less than reuse (0.5): the two claims differ
    losses = {"cem_attn_t1": [4.4], "cem_attn_t2_diag": [4.6], "attn_plain_reuse": [4.9]}
    got = check_claims(losses, noise=0.05)
    assert _verdict(got, "attention: within-layer recursion (T=1 -> T=2) improves") == Verdict.DOES_NOT_HOLD
    assert _verdict(got, "attention: within-layer recursion gains more") == Verdict.HOLDS
    assert _verdict(got, "attention: plain layer reuse offers no benefit") == Verdict.HOLDS


def test_gain_with_different_bases_gets_twice_the_noise():
    losses = {"cem_mlp_t1": [4.5], "cem_mlp_t2_diag": [4.35], "llama": [4.4], "mlp_plain_reuse": [4.4]}
    row = next(k for k in check_claims(losses, noise=0.1) if "MLP: within-layer recursion gains" in k.claim.text)
    assert math.isclose(row.outcome.margin, 0.15) and row.outcome.band == 0.2
    assert row.outcome.verdict == Verdict.UNDECIDED and "twice" in row.spec.noise_source


def test_optimal_lr_claim_uses_the_octave_bound_and_table_shows_rules():
    opt = {"llama": math.log(100.0), "cem_full": math.log(100.0)}
    for lr, want in ((8e-3, Verdict.HOLDS), (2.5e-3, Verdict.UNDECIDED), (5e-4, Verdict.DOES_NOT_HOLD)):
        got = check_claims({}, opt, {"llama": 2e-3, "cem_full": lr})
        assert _verdict(got, "higher learning rates") == want, lr
    md = claims_markdown({"llama": [4.5, 4.6], "cem_attn_t1": [4.4]}, opt, {"llama": 2e-3, "cem_full": 8e-3})
    assert md.count("\n") == len(CLAIMS) + 1
    assert "bound 1 octaves (the sweep's grid step)" in md and "declared noise 0.1 nats" in md
