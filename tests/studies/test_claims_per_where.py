"""A ``per`` claim whose arms select some labels of that axis (``where: {length: [64, …]}``) has rows for those
labels only. The row's label replaced the arm's own selection of the axis, so EqT's "gain at L ≥ 64" claim still had
a row, with data and a verdict, at length 16 (where the paper reports no gain: an outside probe)."""

from __future__ import annotations

from energyformer.studies.claims import evaluate
from energyformer.studies.spec import load_study


def _records():
    out = {}
    for length in ("16", "64", "96"):
        for seed in (0, 1):
            for model, acc in (("eqt", {"k32": 70.0 + seed, "k8": 70.0, "k0": 60.0}), ("baseline", {"plain": 60.0})):
                out[f"L{length}_seed{seed}_{model}"] = {"cell": {"length": length, "model": model}, "seed": seed,
                                                        "metrics": {"accuracy": acc}}
    return out


def test_a_per_claim_has_rows_only_for_the_labels_its_arms_select():
    rows = evaluate(load_study("eqt"), _records())
    assert [r.label for r in rows if r.claim.id == "gain"] == ["64", "96"]
    assert [r.label for r in rows if r.claim.id == "k8-equals-k32"] == ["16", "64", "96"]  # no selection: all
