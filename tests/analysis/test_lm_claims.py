from energyformer.analysis.lm_claims import CLAIMS, check_claims, claims_markdown
from energyformer.experiment import resolve_config_path


def test_every_claim_names_existing_configs():
    for c in CLAIMS:
        for n in c.needs:
            assert resolve_config_path(f"lm/{n}").exists(), n


def test_verdicts_follow_the_numbers():
    ppl = {"llama": 100.0, "cem_attn_t1": 103.0, "cem_attn_t2_diag": 98.0, "cem_attn_t2_dlr": 99.0,
           "cem_mlp_t1": 110.0, "cem_mlp_t2_diag": 112.0, "cem_mlp_t2_dlr": 111.0}
    got = {c.text: (v, d) for c, v, d in check_claims(ppl)}
    v = lambda needle: next(val for t, val in got.items() if needle in t)[0]  # noqa: E731
    assert v("changes perplexity only a little") == "HOLDS"           # +3% is within 5%
    assert v("CEM attention: T=2 improves") == "HOLDS"
    assert v("CEM MLP: T=2 improves") == "DOES NOT HOLD"
    assert v("outperforms the Llama") == "HOLDS"
    assert v("adds a gain over diagonal at T=2 (attention)") == "DOES NOT HOLD"
    assert v("KQ diagonal is essential") == "not run"
    ppl["cem_attn_t1"] = 120.0
    assert next(v for c, v, _ in check_claims(ppl) if "only a little" in c.text) == "DOES NOT HOLD"
    md = claims_markdown(ppl)
    assert md.count("\n") == len(CLAIMS) + 1 and "+20.0%" in md


def test_optimal_lr_claims_and_noise_marks():
    ppl = {"llama": 100.0, "cem_full": 99.5}
    opt = {"llama": 100.0, "cem_full": 99.5}
    lr = {"llama": 2e-3, "cem_full": 4e-3}
    got = {c.text: v for c, v, _ in check_claims(ppl, opt, lr, noise=0.01)}
    full = next(v for t, v in got.items() if "full CEM transformer" in t)
    assert full == "HOLDS (within seed noise)"                       # -0.5% < 1% noise
    assert next(v for t, v in got.items() if "higher learning rates" in t) == "HOLDS"
    got = {c.text: v for c, v, _ in check_claims(ppl, opt, lr, noise=0.001)}
    assert next(v for t, v in got.items() if "full CEM transformer" in t) == "HOLDS"
    assert next(v for c, v, _ in check_claims(ppl) if "full CEM transformer" in c.text) == "not run"


def test_recursion_vs_reuse_says_when_neither_gains():
    ppl = {"cem_attn_t1": 100.0, "attn_plain_reuse": 130.0, "cem_attn_t2_diag": 120.0}
    c, v, d = next(x for x in check_claims(ppl) if x[0].section == "Fig. 4")
    assert v == "HOLDS" and "neither gains" in d  # -20 ppl beats -30 ppl, but recursion does not gain
    ppl["cem_attn_t2_diag"] = 90.0
    c, v, d = next(x for x in check_claims(ppl) if x[0].section == "Fig. 4")
    assert v == "HOLDS" and "neither gains" not in d
