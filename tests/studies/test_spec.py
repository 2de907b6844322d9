"""Study files: validation errors name the key, the value and what is allowed; grid expansion."""

import copy

import pytest

from energyformer.studies import expand, known_studies, load_study
from energyformer.utils.validate import ConfigError

from .tiny import TINY, refused, write


def _err(tmp_path, mutate) -> str:
    data = copy.deepcopy(TINY)
    mutate(data)
    with pytest.raises(ConfigError) as e:
        load_study(write(tmp_path / "s.yaml", **data))
    msg = str(e.value)
    assert "\n" not in msg.strip()
    return msg


def test_committed_studies_load():
    assert {"intrinsic-lm", "eqt", "cem-lm", "cem-gp"} <= set(known_studies())
    for name in ("intrinsic-lm", "eqt", "hyperset-sudoku", "cem-lm", "cem-gp", "bare-sa"):
        spec = load_study(name)
        assert set(spec.scales) == {"cpu", "gpu"} and spec.claims


def test_validation_errors_name_key_value_and_allowed(tmp_path):
    assert "titel" in _err(tmp_path, lambda d: d.update(titel="x")) and "allowed keys" in _err(
        tmp_path, lambda d: d.update(titel="x"))
    msg = _err(tmp_path, lambda d: d["scales"].update(tpu={}))
    assert "'tpu'" in msg and "cpu, gpu" in msg
    msg = _err(tmp_path, lambda d: d["claims"][0]["a"]["where"].update(model="transformer"))
    assert "claims[gain].a.where.model = 'transformer'" in msg and "baseline, eqt" in msg
    msg = _err(tmp_path, lambda d: d["claims"][0]["a"].update(metric="acc"))
    assert "'acc'" in msg and "accuracy" in msg
    msg = _err(tmp_path, lambda d: d["runs"].update(name="L{length}_{model}"))
    assert "name" in msg and "{seed}" in msg
    msg = _err(tmp_path, lambda d: d["claims"][0].update(claim="worse"))
    assert "'worse'" in msg and "better" in msg
    msg = _err(tmp_path, lambda d: d["claims"][0].pop("b"))
    assert "arms a and b" in msg and "untestable" in msg
    msg = _err(tmp_path, lambda d: d["metrics"].update(bad="no_colon"))
    assert "module:function" in msg
    msg = _err(tmp_path, lambda d: d["scales"]["cpu"].update(only={"length": [9]}))
    assert "scales.cpu.only.length = '9'" in msg and "allowed 8" in msg
    msg = _err(tmp_path, lambda d: d["claims"][0]["rules"].update(noise=-1) if "rules" in d["claims"][0]
               else d["claims"][0].update(rules={"noise": -1}))
    assert "noise" in msg and "-1" in msg
    with pytest.raises(ConfigError, match="study 'nope' not found"):
        load_study("nope")


def test_grid_expansion_configs_axes_seeds_and_override_order(tmp_path):
    data = copy.deepcopy(TINY)
    data["runs"]["grid"]["length"][16] = ["task.data.length=16"]
    data["seeds"] = [0, 1]
    data["scales"]["gpu"] = {"overrides": ["train.device=cuda"], "only": {"length": [16]}, "seeds": [3]}
    spec = load_study(write(tmp_path / "s.yaml", **data))
    plans = expand(spec, "cpu")
    assert len(plans) == 8 and len({p.name for p in plans}) == 8
    p = next(p for p in plans if p.name == "L16_s1_eqt")
    assert p.config == "eqt/eqt" and p.cell == {"model": "eqt", "length": "16"} and p.seed == 1
    assert p.overrides[-3:] == ["task.data.length=16", "train.seed=1", "name=L16_s1_eqt"]
    gpu = expand(spec, "gpu", sets=["train.lr=1e-3"])
    assert [g.name for g in gpu] == ["L16_s3_baseline", "L16_s3_eqt"]
    assert gpu[0].overrides[-4:-2] == ["train.device=cuda", "train.lr=1e-3"]   # scale, then --set
    assert [g.name for g in expand(spec, "cpu", seeds=[5], only={"model": ["eqt"]})] == ["L8_s5_eqt", "L16_s5_eqt"]
    with pytest.raises(ConfigError, match="--only: axis 'size' unknown"):
        expand(spec, "cpu", only={"size": ["1"]})
    with pytest.raises(ConfigError, match="--scale 'tpu'"):
        expand(spec, "tpu")
    # a seed twice trained one run twice (two processes on one folder); --only outside the scale ran nothing, rc 0
    with pytest.raises(ConfigError, match="--seeds 3 3: a seed is given twice"):
        expand(spec, "cpu", seeds=[3, 3])
    with pytest.raises(ConfigError, match="--only length=8: selects no run of scale 'gpu'"):
        expand(spec, "gpu", only={"length": ["8"]})


def test_every_committed_run_config_loads():
    """Every run of every scale of the committed studies is a valid config (nothing trains)."""
    from energyformer.experiment import load_run_config

    for name in ("intrinsic-lm", "eqt", "hyperset-sudoku", "cem-lm", "cem-gp", "bare-sa"):
        spec = load_study(name)
        for scale in spec.scales:
            for p in expand(spec, scale):
                load_run_config(p.config, p.overrides)


def test_a_scale_may_run_a_union_of_selections_and_seed_placeholders(tmp_path):
    """``only: [sel, ...]`` runs the cells matching any selection; ``{seed}`` in an override is the run's seed."""
    data = copy.deepcopy(TINY)
    data["runs"]["grid"]["length"] = {8: ["task.data.length=8"], 16: ["task.data.length=16"],
                                      32: ["task.data.length=32"]}
    data["runs"]["overrides"] = [*data["runs"]["overrides"], "task.data.n_test={seed}0"]
    data["scales"]["cpu"] = {"only": [{"model": ["eqt"]}, {"length": [8]}]}
    spec = load_study(write(tmp_path / "s.yaml", **data))
    names = [p.name for p in expand(spec, "cpu", seeds=[2])]
    assert names == ["L8_s2_baseline", "L8_s2_eqt", "L16_s2_eqt", "L32_s2_eqt"]
    assert "task.data.n_test=20" in expand(spec, "cpu", seeds=[2])[0].overrides
    assert [p.name for p in expand(spec, "cpu", seeds=[0], only={"length": ["16"]})] == ["L16_s0_eqt"]
    data["scales"]["cpu"] = {"only": [{"model": ["eqt"]}, {"length": [9]}]}
    with pytest.raises(ConfigError, match=r"scales.cpu.only.length = '9'"):
        load_study(write(tmp_path / "s.yaml", **data))


def test_a_selection_may_name_seeds(tmp_path):
    """``only: [{..., seed: [1]}]``: those cells run only with those seeds (a second seed for some configs)."""
    data = copy.deepcopy(TINY)
    data["seeds"] = [0, 1]
    data["scales"]["cpu"] = {"only": [{"seed": [0]}, {"model": ["eqt"], "seed": [1]}]}
    spec = load_study(write(tmp_path / "s.yaml", **data))
    assert [p.name for p in expand(spec, "cpu")] == ["L8_s0_baseline", "L8_s0_eqt", "L8_s1_eqt"]
    assert [p.name for p in expand(spec, "cpu", seeds=[2])] == []


def test_a_config_label_may_carry_its_own_overrides(tmp_path):
    data = copy.deepcopy(TINY)
    data["runs"]["config"]["model"]["eqt_k4"] = {"config": "eqt/eqt", "overrides": ["model.refine.eval_steps=4"]}
    spec = load_study(write(tmp_path / "s.yaml", **data))
    plans = {p.cell["model"]: p for p in expand(spec, "cpu", sets=["train.steps=2"])}
    assert plans["eqt_k4"].config == "eqt/eqt" and plans["baseline"].config == "eqt/baseline"
    over = plans["eqt_k4"].overrides   # the study's, the label's, the grid cell's, the scale's and --set, then seed
    assert over.index("model.refine.eval_steps=4") == len(TINY["runs"]["overrides"])
    assert over[-4:] == ["task.data.length=8", "train.steps=2", "train.seed=0", "name=L8_s0_eqt_k4"]
    assert "model.refine.eval_steps=4" not in plans["eqt"].overrides
    msg = _err(tmp_path, lambda d: d["runs"]["config"]["model"].update(x={"config": "eqt/eqt", "overides": []}))
    assert "overides" in msg


def test_probe_arms_and_aggregates_are_validated(tmp_path):
    msg = _err(tmp_path, lambda d: d["claims"][0].update(a={"probe": "memory", "metric": "peak"}))
    assert "claims[gain].a.probe = 'memory'" in msg and "no probes declared" in msg
    msg = _err(tmp_path, lambda d: d["claims"][0]["a"].update(agg="median"))
    assert "median" in msg and "'range'" in msg
    msg = _err(tmp_path, lambda d: d["claims"][0]["a"].update(value=1.0))
    assert "give one of where" in msg
    msg = _err(tmp_path, lambda d: d.update(probes={"memory": "not a hook"}))
    assert "probe 'memory'" in msg and "module:function" in msg
    data = copy.deepcopy(TINY)
    data["probes"] = {"memory": "builtins:str"}
    data["claims"][0]["b"] = {"probe": "memory", "metric": "peak"}
    assert load_study(write(tmp_path / "ok.yaml", **data)).claims[0].b.probe == "memory"


# A study file's structural mistakes are refused at load, each one ConfigError naming the key and what is allowed (the
# module docstring of studies/spec.py: "every mistake is one ConfigError naming the key, the value and what is
# allowed"): two config axes, a run-name placeholder that is no axis, an axis that is both the config axis and a grid
# axis, an arm that is neither runs, a probe nor a number, arm a a fixed number, two claims with one id, a claim per
# an axis the study lacks, a render that is not module:function, and an arm over runs without a metric (its own or the
# claim's).


@pytest.mark.parametrize("edit, said", [
    (lambda d: d["runs"].update(config={"model": {"baseline": "eqt/baseline"}, "m2": {"eqt": "eqt/eqt"}}),
     "runs.config: ['m2', 'model']: give one axis of configs"),
    (lambda d: d["runs"].update(name="L{length}_s{seed}_{model}_{width}"),
     "must use each of {length}, {model}, {seed} once and nothing else"),
    (lambda d: d["runs"]["grid"].update(model={"x": ["model.dim=8"]}),
     "axis 'model' is both the config axis and a grid axis"),
    (lambda d: d["claims"][0].update(b={"metric": "accuracy.plain"}),
     "claims[0].b: give one of where: {axis: label} (runs), probe: NAME or value: NUMBER"),
    (lambda d: d["claims"][0].update(a={"value": 50.0}, paired=False),
     "claim 'gain': arm a must be runs (where:) or a probe, b may be a number"),
    (lambda d: d["claims"].append(copy.deepcopy(d["claims"][0])),
     "claims: duplicate id among ['gain', 'gain']"),
    (lambda d: d["claims"][0].update(per="width"),
     "claims[gain].per = 'width': allowed axes model, length"),
    (lambda d: d.pop("report") and d.update(render="no_colon"),
     "render = 'no_colon': must be module:function"),
    (lambda d: d["metrics"].update(acc2="no_colon"), "metric 'acc2' = 'no_colon': must be module:function"),
    (lambda d: d.update(probes={"mem": "a b"}), "probe 'mem' = 'a b': must be module:function"),
    (lambda d: d["claims"][0]["a"].pop("metric"),
     "claim 'gain': an arm over runs or a probe needs a metric"),
], ids=["two-config-axes", "name-placeholder-no-axis", "config-axis-also-grid", "arm-of-nothing", "arm-a-a-number",
        "duplicate-claim-id", "per-no-axis", "render-not-a-hook", "metric-not-a-hook", "probe-not-a-hook",
        "arm-without-metric"])
def test_a_structural_mistake_is_refused_naming_it(tmp_path, edit, said):
    assert said in refused(tmp_path, edit)


# load_study reads ``studies/<name>.yaml`` or a YAML path (its docstring): a ``.yml`` path is a path too, not a study
# name.


def test_a_yml_path_loads_as_a_path(tmp_path):
    spec = load_study(write(tmp_path / "s.yml"))
    assert spec.title == "tiny parity study"
    assert load_study(str(tmp_path / "s.yml")).title == "tiny parity study"
