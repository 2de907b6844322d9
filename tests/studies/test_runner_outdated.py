"""What a page says is out of date (runner.outdated_records / outdated_text / stale_hooks), from records alone: a
record whose configuration no longer loads is one `reproduce` would train again (not one "made with --set"); a
diverged record is never judged by its metric hooks (it has no metrics), a hook pointed at another function is
named, and a record to be trained again is not also named for its hooks; and each list names at most five records
("up to five names each"), then counts the rest, and at most three distinct --set lists."""

import copy
import dataclasses
from pathlib import Path

from energyformer.studies import load_study
from energyformer.studies.plan import expand
from energyformer.studies.runner import _config, config_hash, outdated_records, outdated_text, stale_hooks

from .tiny import TINY, write


def _spec(tmp_path, seeds=(0,)):
    data = copy.deepcopy(TINY)
    data["seeds"] = list(seeds)
    return load_study(write(tmp_path / "s.yaml", **data))


def _records(spec, sets=()):
    return {p.name: {"cell": p.cell, "seed": p.seed, "scale": "cpu", "config_hash": "0" * 16,
                     "overrides": [*p.overrides[:-2], *sets, *p.overrides[-2:]],
                     "metric_hooks": dict(spec.metrics), "metrics": {}} for p in expand(spec, "cpu")}


def test_a_record_whose_configuration_no_longer_loads_would_be_trained_again(tmp_path):
    spec = _spec(tmp_path)
    runs = _records(spec, sets=["train.no_such_key=3"])   # made with a --set of a key the config no longer has
    changed, outside, with_sets = outdated_records(spec, "cpu", runs)
    assert changed == sorted(runs) and outside == [] and with_sets == {}


def test_a_diverged_record_is_not_judged_by_its_metric_hooks(tmp_path):
    spec = _spec(tmp_path)
    rec = {"metric_hooks": {}, "diverged": "training diverged at step 2: loss = nan is not finite", "metrics": {}}
    assert stale_hooks(spec, rec) is None
    assert stale_hooks(spec, {"metric_hooks": {}, "metrics": {}}).startswith("without the metric(s) accuracy")
    other = {**spec.metrics, "accuracy": "energyformer.analysis.eqt_report:train_ce"}
    assert stale_hooks(spec, {"metric_hooks": other, "metrics": {}}) == "with another function for accuracy"


def test_a_record_to_be_trained_again_is_not_also_named_for_its_hooks(tmp_path):
    spec = _spec(tmp_path)
    runs = _records(spec)
    for r in runs.values():
        r["metric_hooks"] = {}
    text = outdated_text(spec, "cpu", runs)
    assert "2 of these records were made with a configuration that differs" in text and "metric hooks" not in text


def test_out_of_date_names_five_records_and_counts_the_rest(tmp_path):
    spec = _spec(tmp_path, seeds=(0, 1, 2))
    runs = _records(spec)   # six records, none with the config hash the study resolves to now
    names = sorted(runs, key=list(runs).index)
    text = outdated_text(spec, "cpu", runs)
    assert ("6 of these records were made with a configuration that differs from the one the study resolves to "
            "now, so `reproduce` would train them again (" + ", ".join(f"`{n}`" for n in names[:5])
            + " and 1 more)") in text, text


def test_made_with_overrides_names_three_distinct_set_lists_and_counts_the_rest(tmp_path):
    spec = _spec(tmp_path, seeds=(0, 1))
    runs = {}
    for i, p in enumerate(expand(spec, "cpu")):   # four records, each made with its own --set, none out of date
        over = [*p.overrides[:-2], f"train.lr=0.00{i + 1}", *p.overrides[-2:]]
        runs[p.name] = {"cell": p.cell, "seed": p.seed, "scale": "cpu", "overrides": over,
                        "config_hash": config_hash(_config(dataclasses.replace(p, overrides=over), Path("runs"))),
                        "metric_hooks": dict(spec.metrics), "metrics": {}}
    text = outdated_text(spec, "cpu", runs)
    assert "Out of date" not in text
    assert text.endswith(": `--set train.lr=0.001`; `--set train.lr=0.002`; `--set train.lr=0.003` and 1 more."), text
