"""An old top-level spelling of a descent key (``alpha``, ``gamma``, ``precond``, ``norm_in_loop``, ``implicit_*``)
next to its new place with another value is refused, naming both. The migration runs after ``--set``, and the new
place won silently: ``--set model.refine.alpha=0.2`` on ``eqt/eqt`` trained with the file's 0.1, and
``--set model.block.attention.precond=diagonal`` on ``lm/cem_full`` kept diag_low_rank (an outside probe)."""

from __future__ import annotations

import pytest

from energyformer.experiment import load_run_config
from energyformer.utils.validate import ConfigError


@pytest.mark.parametrize("config, override, needle", [
    ("eqt/eqt", "model.refine.alpha=0.2", r"alpha = 0\.2 conflicts with step_size"),
    ("eqt/eqt", "model.refine.gamma=2.0", r"gamma = 2\.0 conflicts with solver\.gamma = 1\.0"),
    ("lm/cem_full", "model.block.attention.precond=diagonal",
     r"precond = 'diagonal' conflicts with solver\.precond = 'diag_low_rank'"),
    ("lm/cem_full", "model.block.attention.norm_in_loop=false;model.block.attention.norm.in_loop=true",
     r"norm_in_loop = False conflicts with norm\.in_loop = True"),
    ("eqt/eqt", "model.refine.implicit_tol=0.01", r"implicit_tol = 0\.01: options of backward 'implicit'"),
])
def test_an_old_key_that_disagrees_with_its_new_place_is_refused(config, override, needle):
    with pytest.raises(ConfigError, match=needle):
        load_run_config(config, override.split(";"))


@pytest.mark.parametrize("config, override, key, want", [
    ("eqt/eqt", "model.refine.alpha=0.1", "step_size", 0.1),
    ("eqt/eqt", "model.refine.gamma=1.0", "solver.gamma", 1.0),
    ("eqt/eqt", "model.refine.tol=0.01", "solver.tol", 0.01),
])
def test_an_old_key_that_agrees_or_stands_alone_still_loads(config, override, key, want):
    cfg = load_run_config(config, [override]).model.refine
    for part in key.split("."):
        cfg = getattr(cfg, part)
    assert getattr(cfg, "value", cfg) == want


def test_an_old_eqt_run_config_with_the_old_implicit_defaults_loads(tmp_path):
    """Before the one sublayer shape every resolved EqT config.yaml held implicit_method / _max_iter / _tol at their
    defaults beside ``backward: unroll``: the first form of the refusal above made every such run directory
    unloadable (an outside probe). The old defaults load; another value there is still refused."""
    import yaml

    from energyformer.utils.config import dumps_yaml

    cfg = yaml.safe_load(dumps_yaml(load_run_config("eqt/eqt", [])))
    r = cfg["model"]["refine"]
    solver, step = r.pop("solver"), r.pop("step_size")
    r.pop("backward")
    r.update(alpha=step["value"], gamma=solver["gamma"], tol=solver["tol"], energy_threshold=None,
             backward="unroll", implicit_method="cg", implicit_max_iter=50, implicit_tol=1e-6)
    (tmp_path / "old.yaml").write_text(yaml.safe_dump(cfg))
    refine = load_run_config(str(tmp_path / "old.yaml"), []).model.refine
    assert refine.backward.kind == "unroll" and refine.solver.gamma == solver["gamma"]
    r["implicit_tol"] = 1e-3
    (tmp_path / "other.yaml").write_text(yaml.safe_dump(cfg))
    with pytest.raises(ConfigError, match=r"implicit_tol = 0\.001: options of backward 'implicit'"):
        load_run_config(str(tmp_path / "other.yaml"), [])


@pytest.mark.parametrize("key", ["gamma=2.0", "tol=0.01"])
def test_an_eqt_solver_given_by_name_takes_the_old_top_level_key(tmp_path, key):
    """``solver: proximal`` (a kind name) with an old top-level ``gamma`` was an internal TypeError ('str' object is
    not a mapping)."""
    text = f"base: eqt/eqt\nmodel:\n  refine:\n    solver: proximal\n    {key.replace('=', ': ')}\n"
    (tmp_path / "y.yaml").write_text(text)
    solver = load_run_config(str(tmp_path / "y.yaml"), []).model.refine.solver
    name, value = key.split("=")
    assert solver.kind == "proximal" and getattr(solver, name) == float(value)


@pytest.mark.parametrize("override, needle", [
    ("model.refine.solver.precond_per_head=true", "the refiner has no per-head preconditioner bank"),
])
def test_the_eqt_refiner_refuses_a_head_bank_at_load(override, needle):
    with pytest.raises(ConfigError, match=needle):
        load_run_config("eqt/eqt", [override])


def test_learn_step_size_false_beside_a_learned_step_size_is_refused():
    """It was dropped without a word (the step size stayed learned); the mirror case was already refused."""
    with pytest.raises(ConfigError, match=r"learn_step_size = False conflicts with step_size"):
        load_run_config("lm/cem_attn_t2_dlr", ["model.block.attention.step_size={kind: learned, init: 0.5}",
                                                "model.block.attention.learn_step_size=false"])


def test_one_number_written_two_ways_is_no_conflict():
    """A quoted '1e-3' beside 0.001 is the same setting (each alone validates to 0.001); it was refused."""
    cfg = load_run_config("eqt/eqt", ["model.refine.tol='1e-3'", "model.refine.solver.tol=0.001"])
    assert cfg.model.refine.solver.tol == 0.001
    with pytest.raises(ConfigError, match="conflicts"):
        load_run_config("eqt/eqt", ["model.refine.tol='1e-2'", "model.refine.solver.tol=0.001"])
