"""A claim compares arms whose records were made under one configuration: records trained with different
command-line ``--set`` overrides (or an arm mixing several) make the row UNTESTABLE, naming the overrides.

Before: ``_decide`` checked only that the arms ran the same cells, so CEM-T1 retrained with ``--set
train.steps=1200`` beside Plain and T2 at 150 steps said HOLDS / DOES NOT HOLD (probe W, 3)."""

import copy

from energyformer.studies import load_study
from energyformer.studies.claims import evaluate
from energyformer.studies.plan import expand

from .tiny import TINY, write


def _spec(tmp_path, paired=False):
    data = copy.deepcopy(TINY)
    data["seeds"] = [0, 1]
    data["claims"][0]["paired"] = paired
    return load_study(write(tmp_path / "s.yaml", **data))


def _records(spec, sets_of):
    """One record per run of the tiny study (seeds 0, 1), made with ``sets_of(plan)`` as its --set list; EqT wins
    by 30 points in every seed."""
    out = {}
    for p in expand(spec, "cpu"):
        own, tail = p.overrides[:-2], p.overrides[-2:]
        eqt = p.cell["model"] == "eqt"
        out[p.name] = {"cell": p.cell, "seed": p.seed, "scale": "cpu", "config_hash": "h",
                       "overrides": [*own, *sets_of(p), *tail],
                       "metrics": {"accuracy": {"k32": 90.0 + p.seed, "plain": 60.0 + p.seed}} if eqt else
                       {"accuracy": {"plain": 60.0 + p.seed, "k32": 60.0}}}
    return out


def _row(spec, records):
    (row,) = evaluate(spec, records, None, "cpu")
    return row.outcome


def test_arms_made_with_different_overrides_are_untestable_naming_them(tmp_path):
    """EqT's runs retrained with --set train.steps=1200, the baseline's with none: it said HOLDS. Arms made with
    the same overrides (none, or the same --set) are still decided."""
    spec = _spec(tmp_path)
    assert str(_row(spec, _records(spec, lambda p: [])).verdict) == "HOLDS"
    assert str(_row(spec, _records(spec, lambda p: ["train.steps=7"])).verdict) == "HOLDS"
    for paired in (False, True):
        spec = _spec(tmp_path, paired)
        out = _row(spec, _records(spec, lambda p: ["train.steps=1200"] if p.cell["model"] == "eqt" else []))
        assert str(out.verdict) == "UNTESTABLE", paired
        assert out.reason == ("A and B ran with different command-line overrides: A --set train.steps=1200, B no "
                              "--set (compared under one configuration or not at all)")


def test_an_arm_mixing_override_lists_is_untestable(tmp_path):
    """Seed 1 of both arms retrained with --set train.lr=1e-3: each arm mixes two configurations."""
    spec = _spec(tmp_path)
    out = _row(spec, _records(spec, lambda p: ["train.lr=1e-3"] if p.seed == 1 else []))
    assert str(out.verdict) == "UNTESTABLE"
    assert out.reason.startswith("A mixes runs made with different command-line overrides: --set train.lr=1e-3 vs "
                                 "no --set")
