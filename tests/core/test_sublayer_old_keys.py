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
    ("eqt/eqt", "model.refine.implicit_tol=0.01", r"implicit_tol: options of backward 'implicit'"),
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
