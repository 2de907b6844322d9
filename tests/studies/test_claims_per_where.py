"""A ``per`` claim whose arms select some labels of that axis (``where: {length: [64, …]}``) has rows for those
labels only. The row's label replaced the arm's own selection of the axis, so EqT's "gain at L ≥ 64" claim still had
a row, with data and a verdict, at length 16 (where the paper reports no gain: an outside probe)."""

from __future__ import annotations

import warnings

import pytest
import yaml

from energyformer.studies.claims import evaluate
from energyformer.studies.spec import load_study, studies_dir
from energyformer.utils.validate import ConfigError


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


def test_a_per_axis_the_arms_select_apart_is_refused_not_left_without_rows(tmp_path):
    """``per: model`` with arm a at model eqt and arm b at model baseline: no label is admitted by both, so the claim
    had no row at all, silently (not on the page, not in the index's count: probe AZ). Now one line at load time."""
    study = yaml.safe_load((studies_dir() / "eqt.yaml").read_text())
    claim = next(c for c in study["claims"] if c.get("a", {}).get("where", {}).get("model") and not c.get("per")
                 and c.get("b", {}).get("where", {}).get("model") not in (None, c["a"]["where"]["model"]))
    claim["per"] = "model"
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(study))
    with pytest.raises(ConfigError, match=rf"s.yaml: .*claims\[{claim['id']}\].per = 'model': no label of it is "
                                          r"selected by both arms .* no row"):
        load_study(tmp_path / "s.yaml")


def test_an_empty_seed_list_of_a_scale_is_refused(tmp_path):
    """``scales.cpu.seeds: []`` fell back to the study's seeds, silently (a top-level ``seeds: []`` was refused)."""
    study = yaml.safe_load((studies_dir() / "eqt.yaml").read_text())
    study["scales"]["cpu"]["seeds"] = []
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(study))
    with pytest.raises(ConfigError, match=r"s.yaml: .*scales.*cpu.*seeds"):
        load_study(tmp_path / "s.yaml")


def test_a_scale_override_that_replaces_a_labels_own_value_warns(tmp_path):
    """A config label's own ``train.steps=1`` (an untrained control) was replaced by the scale's ``train.steps=40``
    without a word, where ``--set`` in the same place warns (probe AZ); the same value twice says nothing."""
    from energyformer.studies.plan import expand

    study = yaml.safe_load((studies_dir() / "eqt.yaml").read_text())
    axis = next(iter(study["runs"]["config"]))
    label, base = next(iter(study["runs"]["config"][axis].items()))
    study["runs"]["config"][axis][label] = {"config": base, "overrides": ["train.steps=1"]}
    study["scales"]["cpu"]["overrides"] = [o for o in study["scales"]["cpu"].get("overrides", [])
                                           if not o.startswith("train.steps=")] + ["train.steps=40"]
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(study))
    with pytest.warns(UserWarning, match=rf"scales.cpu.overrides train.steps=40 replaces run label {axis}={label}'s "
                                         r"own train.steps=1"):
        expand(load_study(tmp_path / "s.yaml"), "cpu")
    study["runs"]["config"][axis][label]["overrides"] = ["train.steps=40"]
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(study))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        expand(load_study(tmp_path / "s.yaml"), "cpu")
