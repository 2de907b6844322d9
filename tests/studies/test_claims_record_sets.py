"""Which records a claim compares under one configuration (runner.record_sets): a migrated record (no ``overrides``
list) is left out of that comparison, so a claim over migrated and new records is still decided; and a claim
evaluated without a scale (each record's own) still sees the ``--set`` overrides its records were made with."""

import copy

from energyformer.studies import load_study
from energyformer.studies.claims import evaluate
from energyformer.studies.plan import expand

from .tiny import TINY, write


def _spec(tmp_path):
    data = copy.deepcopy(TINY)
    data["seeds"] = [0, 1]
    data["claims"][0]["paired"] = False
    return load_study(write(tmp_path / "s.yaml", **data))


def _records(spec, sets_of):
    """As test_claims_overrides: EqT wins by 30 points in every seed; ``sets_of(plan)`` is a record's --set list."""
    out = {}
    for p in expand(spec, "cpu"):
        eqt = p.cell["model"] == "eqt"
        out[p.name] = {"cell": p.cell, "seed": p.seed, "scale": "cpu", "config_hash": "h",
                       "overrides": [*p.overrides[:-2], *sets_of(p), *p.overrides[-2:]],
                       "metrics": {"accuracy": {"k32": 90.0 + p.seed, "plain": 60.0 + p.seed}} if eqt else
                       {"accuracy": {"plain": 60.0 + p.seed, "k32": 60.0}}}
    return out


def test_a_claim_over_migrated_and_new_records_is_decided(tmp_path):
    spec = _spec(tmp_path)
    records = _records(spec, lambda p: [])
    for r in records.values():
        if r["cell"]["model"] == "eqt":   # recorded by the old program: no overrides list
            r.pop("overrides")
            r["config_hash"] = "migrated"
    (row,) = evaluate(spec, records, None, "cpu")
    assert str(row.outcome.verdict) == "HOLDS", row.outcome.reason


def test_without_a_scale_each_records_own_scale_names_its_overrides(tmp_path):
    spec = _spec(tmp_path)
    records = _records(spec, lambda p: ["train.steps=1200"] if p.cell["model"] == "eqt" else [])
    (row,) = evaluate(spec, records)
    assert str(row.outcome.verdict) == "UNTESTABLE"
    assert row.outcome.reason.startswith("A and B ran with different command-line overrides: A --set train.steps=1200")
