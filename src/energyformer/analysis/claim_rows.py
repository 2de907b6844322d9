"""One claim row of a results page: the claim's rule in words beside its verdict (issue 22).

:func:`energyformer.analysis.verdicts.compare` decides a verdict from declared :class:`Rules`; a page
must show that rule next to the verdict. :func:`rule_text` writes it in one line ("lower by more than
the band; band = max(seed spread, declared noise 0.28 nats: ...)"), :func:`verdict_text` the verdict
with the margin it was decided by, and :func:`markdown_rows` a table.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .verdicts import Outcome, Rules


@dataclass(frozen=True)
class RuleSpec:
    """A declared rule: the verdict kind, its tolerance and rules, and where the noise comes from."""

    rules: Rules
    claim: str = "better"          # "better" | "not_worse" | "equal" (see verdicts.compare)
    tolerance: float = 0.0
    unit: str = ""                 # "nats", "points", "octaves" ...
    noise_source: str = ""         # where the declared noise / single-seed bound comes from


def _num(x: float) -> str:
    return f"{x:.4g}"


def rule_text(spec: RuleSpec) -> str:
    """The rule of a claim in words, e.g. "better by more than the band; band = max(seed spread,
    declared noise 0.283 nats (largest seed range of a repeated run))"."""
    u = f" {spec.unit}" if spec.unit else ""
    what = {"better": "better by more than the band",
            "not_worse": f"not worse by more than {_num(spec.tolerance)}{u} ± the band",
            "equal": f"within {_num(spec.tolerance)}{u} ± the band"}[spec.claim]
    return "; ".join([what, band_text(spec)])


def band_text(spec: RuleSpec) -> str:
    """The band part of a rule: "band = max(seed spread, declared noise 0.28 nats (source))" and the
    floor / chance conditions."""
    u = f" {spec.unit}" if spec.unit else ""
    r = spec.rules
    src = f" ({spec.noise_source})" if spec.noise_source else ""
    if r.noise is not None:
        band = f"band = max(seed spread, declared noise {_num(r.noise)}{u}{src})"
    elif r.single_seed_bound is not None:
        band = f"band = seed spread; one seed: bound {_num(r.single_seed_bound)}{u}{src}"
    else:
        band = "band = seed spread; one seed: never decides"
    extra = []
    if r.floor is not None:
        extra.append(f"UNTESTABLE if both at the floor {r.floor:g}")
    if r.chance is not None:
        extra.append(f"UNTESTABLE if both at chance {r.chance:.4g}")
    return "; ".join([band, *extra])


def verdict_text(outcome: Outcome, unit: str = "") -> str:
    """'HOLDS (margin +0.31 > band 0.28)' or 'UNTESTABLE (both at the floor (0))'."""
    if outcome.margin is None or outcome.band is None:
        return f"{outcome.verdict} ({outcome.reason})"
    u = f" {unit}" if unit else ""
    return f"{outcome.verdict} (margin {outcome.margin:+.4g}{u}, band {outcome.band:.4g})"


def markdown_rows(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub markdown table of already formatted cells."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in rows]
    return "\n".join(lines)
