"""The CEM seed's language-model claims (§4.1-4.4, Fig. 2-4), checked on our runs by declared rules.

The seed reports its LM results only as figures (the numbers were not recoverable), so each claim is
stated as the paper makes it and checked on the validation loss (nats/token; perplexity = exp) of runs
made with the configs named. A claim whose configs were not run is UNTESTABLE ("not run"). At CPU
scale (~1M parameters, minutes of training) a claim that does not hold here is not evidence against
the paper at 100M parameters — but it is reported plainly.

Protocol (seed §4.1: "we adopt the optimal Llama hyperparameters ... to ensure consistent comparisons";
§4.3: "we train models with five learning rates ... Akima interpolation to estimate the optimal rate"):

* claims of §4.1, §4.2, §4.4 and Fig. 3c / 4 compare runs at one learning rate (``at = 'fixed'``);
* claims of §4.3 / Fig. 2c compare each model at its Akima-interpolated optimum (``'opt'``) or the
  optimal rates themselves (``'lr'``, in octaves = log2 of the rate).

Verdicts (:func:`energyformer.analysis.verdicts.compare`): a margin in the claim's favour is compared
with a band = max(the seeds' own spread, a declared noise). The declared noise of a loss is the
largest seed range (max − min validation loss) among the (config, lr) pairs run with two or more
seeds on the same page — most configs ran one seed, so this is the only seed-to-seed variation
measured. A comparison of *gains* (differences of two losses) whose two bases differ gets twice it.
The optimal rate has its own bound: one octave (the sweep's grid step).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import fmean

from .claim_rows import RuleSpec, markdown_rows, rule_text, verdict_text
from .verdicts import Outcome, Rules, Verdict, compare

#: "small effect" on perplexity (seed §4.1 wording): within +5% perplexity = ln 1.05 nats of loss
SMALL = math.log(1.05)
#: the bound on a single seed's optimal learning rate: the sweep's grid step (rates double)
LR_BOUND_OCTAVES = 1.0


@dataclass(frozen=True)
class Claim:
    """"``a`` <claim> ``b``" on validation loss. ``a`` may name candidates (the best one is compared);
    ``direction`` 'lower': a lower loss supports the claim, 'higher': a higher one. ``gain``: compare
    the gain from ``gain[0]`` -> ``a[0]`` with the gain from ``gain[1]`` -> ``b``."""

    section: str
    text: str
    a: tuple[str, ...]
    b: str
    kind: str = "better"          # better | not_worse
    tolerance: float = 0.0
    direction: str = "lower"
    at: str = "fixed"              # fixed | opt | lr
    gain: tuple[str, str] | None = None

    @property
    def needs(self) -> tuple[str, ...]:
        return (*self.a, self.b, *(self.gain or ()))


CLAIMS: list[Claim] = [
    Claim("§4.1", "CEM attention (T=1) changes perplexity only a little (not worse than Llama by more than 5%)",
          ("cem_attn_t1",), "llama", "not_worse", SMALL),
    Claim("§4.1", "dimension-matched CEM MLP (T=1) has higher perplexity than the SwiGLU MLP",
          ("cem_mlp_t1",), "llama", direction="higher"),
    Claim("§4.1", "parameter-matched CEM MLP improves on the dimension-matched one",
          ("cem_mlp_t1_param_matched",), "cem_mlp_t1"),
    Claim("§4.2", "CEM attention: T=2 improves on T=1", ("cem_attn_t2_diag", "cem_attn_t2_dlr"), "cem_attn_t1"),
    Claim("§4.2", "CEM MLP: T=2 improves on T=1", ("cem_mlp_t2_diag", "cem_mlp_t2_dlr"), "cem_mlp_t1"),
    Claim("§4.2", "CEM attention with T=2 and preconditioners outperforms the Llama baseline",
          ("cem_attn_t2_diag", "cem_attn_t2_dlr"), "llama"),
    Claim("§4.2", "diagonal + low-rank preconditioner adds a gain over diagonal at T=2 (attention)",
          ("cem_attn_t2_dlr",), "cem_attn_t2_diag"),
    Claim("§4.2", "diagonal + low-rank preconditioner adds a gain over diagonal at T=2 (MLP)",
          ("cem_mlp_t2_dlr",), "cem_mlp_t2_diag"),
    Claim("§4.3", "the full CEM transformer (T=2, D+LR) is at least as good as Llama, each at its optimal LR",
          ("cem_full",), "llama", "not_worse", at="opt"),
    Claim("§4.3", "CEM models favour higher learning rates than Llama", ("cem_full",), "llama",
          direction="higher", at="lr"),
    Claim("Fig. 2c", "CEM attention T=2 + D+LR beats Llama, each at its optimal LR",
          ("cem_attn_t2_dlr",), "llama", at="opt"),
    Claim("§4.4", "a KQ diagonal is essential (shared beats none)", ("cem_kq_shared",), "cem_kq_none"),
    Claim("§4.4", "a shared diagonal performs close to per-head diagonals (not worse by more than 5%)",
          ("cem_kq_shared",), "cem_kq_per_head", "not_worse", SMALL),
    Claim("Fig. 3c", "MLP: within-layer recursion (T=1 -> T=2) improves perplexity",
          ("cem_mlp_t2_diag",), "cem_mlp_t1"),
    Claim("Fig. 3c", "MLP: plain layer reuse yields little or no gain (not better than Llama by more than 5%)",
          ("llama",), "mlp_plain_reuse", "not_worse", SMALL),
    Claim("Fig. 3c", "MLP: within-layer recursion gains more than plain layer reuse",
          ("cem_mlp_t2_diag",), "mlp_plain_reuse", gain=("cem_mlp_t1", "llama")),
    Claim("Fig. 4", "attention: within-layer recursion (T=1 -> T=2) improves perplexity",
          ("cem_attn_t2_diag",), "cem_attn_t1"),
    Claim("Fig. 4", "attention: plain layer reuse offers no benefit (not better than T=1)",
          ("cem_attn_t1",), "attn_plain_reuse", "not_worse"),
    Claim("Fig. 4", "attention: within-layer recursion gains more than plain layer reuse",
          ("cem_attn_t2_diag",), "attn_plain_reuse", gain=("cem_attn_t1", "cem_attn_t1")),
]


@dataclass(frozen=True)
class Checked:
    claim: Claim
    outcome: Outcome
    spec: RuleSpec
    evidence: str


def loss_noise(seed_losses: Mapping[str, Sequence[float]]) -> float | None:
    """The declared noise of a loss: the largest max − min over configs run with ≥ 2 seeds (None if none)."""
    ranges = [max(v) - min(v) for v in seed_losses.values() if len(v) >= 2]
    return max(ranges) if ranges else None


def _ppl(xs: Sequence[float]) -> str:
    return f"{math.exp(fmean(xs)):.2f}"


def _check(c: Claim, vals: Mapping[str, Sequence[float]], noise: float | None, noise_src: str) -> Checked:
    if c.at == "lr":
        spec = RuleSpec(Rules(single_seed_bound=LR_BOUND_OCTAVES), unit="octaves",
                        noise_source="the sweep's grid step")
        a, b = [math.log2(vals[c.a[0]][0])], [math.log2(vals[c.b][0])]
        out = compare(a, b, higher_is_better=c.direction == "higher", rules=spec.rules, claim=c.kind)
        ev = f"optimal lr {c.a[0]} {vals[c.a[0]][0]:.2e} vs {c.b} {vals[c.b][0]:.2e} (x{2 ** (a[0] - b[0]):.2f})"
        return Checked(c, out, spec, ev)
    best = min(c.a, key=lambda n: fmean(vals[n]))
    band_noise = noise
    if c.gain is not None and noise is not None and c.gain[0] != c.gain[1]:
        band_noise, noise_src = 2 * noise, f"twice {noise:.3g}: a difference of gains with different bases"
    spec = RuleSpec(Rules(noise=band_noise), c.kind, c.tolerance, "nats", noise_src)
    higher = c.direction == "higher"
    if c.gain is None:
        a, b = vals[best], vals[c.b]
        out = compare(a, b, higher_is_better=higher, rules=spec.rules, claim=c.kind, tolerance=c.tolerance)
        pick = f"best of {', '.join(c.a)}: " if len(c.a) > 1 else ""
        rel = (math.exp(fmean(a) - fmean(b)) - 1) * 100
        ev = f"{pick}{best} {_ppl(a)} vs {c.b} {_ppl(b)} ({rel:+.1f}% ppl)"
        return Checked(c, out, spec, ev)
    base_a, base_b = c.gain
    g_a = fmean(vals[base_a]) - fmean(vals[best])     # gain of recursion (nats; positive = better)
    g_b = fmean(vals[base_b]) - fmean(vals[c.b])      # gain of reuse
    out = compare([g_a], [g_b], higher_is_better=True, rules=spec.rules, claim=c.kind)
    ev = (f"recursion {base_a} {_ppl(vals[base_a])} -> {best} {_ppl(vals[best])} (gain {g_a:+.3f} nats) vs "
          f"reuse {base_b} {_ppl(vals[base_b])} -> {c.b} {_ppl(vals[c.b])} (gain {g_b:+.3f} nats)")
    return Checked(c, out, spec, ev)


def check_claims(seed_losses: Mapping[str, Sequence[float]], opt_losses: Mapping[str, float] | None = None,
                 lr_opt: Mapping[str, float] | None = None, noise: float | None = None,
                 noise_source: str = "largest seed range of a repeated run") -> list[Checked]:
    """Every claim with its outcome. ``seed_losses``: per-seed validation losses at the one LR;
    ``opt_losses`` / ``lr_opt``: each config's Akima optimum (loss, rate); ``noise``: the declared loss
    noise in nats (default :func:`loss_noise` of ``seed_losses``)."""
    noise = loss_noise(seed_losses) if noise is None else noise
    sources = {"fixed": dict(seed_losses), "opt": {k: [v] for k, v in (opt_losses or {}).items()},
               "lr": {k: [v] for k, v in (lr_opt or {}).items()}}
    out = []
    for c in CLAIMS:
        vals = sources[c.at]
        missing = [n for n in c.needs if n not in vals]
        if missing:
            why = ("needs an LR sweep of " if c.at != "fixed" else "not run: ") + ", ".join(dict.fromkeys(missing))
            spec = RuleSpec(Rules(noise=noise), c.kind, c.tolerance, "nats", noise_source)
            out.append(Checked(c, Outcome(Verdict.UNTESTABLE, None, None, why), spec, "—"))
            continue
        out.append(_check(c, vals, noise, noise_source))
    return out


def claims_markdown(seed_losses: Mapping[str, Sequence[float]], opt_losses: Mapping[str, float] | None = None,
                    lr_opt: Mapping[str, float] | None = None, noise: float | None = None,
                    noise_source: str = "largest seed range of a repeated run") -> str:
    """The claims table: section, claim, where compared, verdict (with margin and band), rule, evidence."""
    where = {"fixed": "one LR", "opt": "optimal LR", "lr": "LR sweep"}
    rows = [[k.claim.section, k.claim.text, where[k.claim.at], verdict_text(k.outcome, k.spec.unit),
             rule_text(k.spec), k.evidence]
            for k in check_claims(seed_losses, opt_losses, lr_opt, noise, noise_source)]
    return markdown_rows(["seed", "claim", "compared at", "verdict", "rule", "evidence (validation perplexity)"],
                         rows)
