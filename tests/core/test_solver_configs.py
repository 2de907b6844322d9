"""Typed solver and step-size configs: every kind builds its solver, bad kinds and keys are
one-line errors listing what is registered, duplicate registrations fail."""

from typing import ClassVar

import pytest
import torch

from energyformer.core import (
    BACKWARD_MODES, SOLVERS, STEP_SIZES, DescentConfig, build_solver, DiagLowRankPrecond, GradientDescent, LearnedStepSize, Momentum,
    NetworkStepSize, Nesterov, PerIterationStepSize, ProximalGradient, Solver, register_solver,
)
from energyformer.core.solver import GDConfig
from energyformer.utils.config import ConfigModel, dumps_yaml, load_config
from energyformer.utils.validate import ConfigError


class BankDescent(DescentConfig):
    head_bank: ClassVar[bool] = True  # a sublayer whose energy takes a per-head bank (as CEM attention's)


class Holder(ConfigModel):
    sub: BankDescent = BankDescent()


def _build(data, dim=8, heads=None):
    """``data``: solver keys plus the sublayer's step_size / backward keys."""
    data = dict(data)
    top = {k: data.pop(k) for k in ("step_size", "backward") if k in data}
    cfg = load_config(Holder, {"sub": {"solver": data, **top}}).sub
    return build_solver(cfg, dim, heads)


def test_registries_list_the_kinds():
    assert SOLVERS.names() == ["gd", "momentum", "nesterov", "ista", "sphere", "proximal"]
    assert BACKWARD_MODES.names() == ["unroll", "truncated", "implicit"]
    assert STEP_SIZES.names() == ["fixed", "learned", "per_iteration", "network"]


def test_every_kind_builds_its_solver_with_its_options():
    s = _build({"kind": "gd", "step_size": 0.5, "precond": "diag_low_rank", "precond_rank": 2, "tol": 1e-3})
    assert type(s) is GradientDescent and s.step_size.value == 0.5 and s.tol == 1e-3
    assert isinstance(s.precond, DiagLowRankPrecond) and s.precond.rank == 2
    m = _build({"kind": "momentum", "beta": 0.9, "carry_key": "v", "step_size": {"kind": "learned", "init": 0.2}})
    assert type(m) is Momentum and m.beta() == 0.9 and m.carry_key == "v"
    assert isinstance(m.step_size, LearnedStepSize)
    n = _build({"kind": "nesterov", "learn_beta": True, "step_size": {"kind": "per_iteration", "max_steps": 4}})
    assert type(n) is Nesterov and isinstance(n.step_size, PerIterationStepSize) and n.step_size.max_steps == 4
    p = _build({"kind": "proximal", "gamma": 2.0, "step_size": 0.1, "backward": {"kind": "truncated", "k": 1}})
    assert type(p) is ProximalGradient and p.gamma == 2.0 and p.step_size.value == 0.1
    assert p.backward.k == 1
    net = _build({"kind": "gd", "step_size": {"kind": "network", "output": "scalar", "zero_init": "all"}}, dim=6)
    assert isinstance(net.step_size, NetworkStepSize) and net.step_size.out.out_features == 1
    bank = _build({"kind": "gd", "precond": "diagonal", "precond_per_head": True}, dim=8, heads=2)
    assert bank.precond.heads == 2


def test_resolved_config_round_trips_through_yaml():
    cfg = load_config(Holder, {"sub": {"solver": {"kind": "nesterov", "beta": 0.8}, "step_size": {"kind": "network"},
                                       "backward": {"kind": "implicit", "method": "fixed_point"}}})
    import yaml

    again = load_config(Holder, yaml.safe_load(dumps_yaml(cfg)))
    assert again == cfg


@pytest.mark.parametrize("data,pattern", [
    ({"kind": "adam"}, r"^sub.solver.kind = 'adam': unknown solver kind 'adam'; registered: gd, momentum, "
                       r"nesterov, ista, sphere, proximal$"),
    ({"kind": "gd", "step_size": {"kind": "cosine"}},
     r"unknown step size kind 'cosine'; registered: fixed, learned, per_iteration, network$"),
    ({"kind": "gd", "beta": 0.5}, r"unknown key 'sub.solver.beta' for solver kind 'gd'; kinds that accept it: "
                                  r"momentum, nesterov"),
    ({"kind": "momentum", "beta": 1.0}, r"beta = 1.0: input should be less than 1"),
    ({"kind": "gd", "backward": "truncated"}, r"missing required key 'sub.backward.k'"),
    ({"kind": "gd", "backward": "newton"}, r"unknown backward mode kind 'newton'; registered: unroll, truncated, "
                                           r"implicit"),
])
def test_bad_configs_are_one_line_errors(data, pattern):
    with pytest.raises(ConfigError, match=pattern) as err:
        _build(data)
    assert "\n" not in str(err.value)


def test_direct_lookup_of_a_bad_kind_lists_the_registered_ones():
    with pytest.raises(ConfigError, match=r"unknown solver kind 'nesterof' \(did you mean 'nesterov'\?\); "
                                          r"registered: gd, momentum, nesterov, ista, sphere, proximal"):
        SOLVERS.get("nesterof")


def test_per_head_preconditioner_needs_heads():
    with pytest.raises(ConfigError, match="precond_per_head"):
        _build({"kind": "gd", "precond_per_head": True}, heads=None)


def test_duplicate_solver_registration_fails_and_leaves_the_registries_unchanged():
    before = dict(SOLVERS.entries)
    with pytest.raises(ValueError, match="solver kind 'gd' is already registered"):
        @register_solver("gd", GDConfig)
        class Again(Solver):
            pass
    assert dict(SOLVERS.entries) == before


def test_old_checkpoint_key_of_a_learned_step_size_still_loads():
    s = GradientDescent(step_size=0.3, learn_step_size=True)
    s.load_state_dict({"theta": torch.tensor(2.0)})
    assert float(s.step_size.theta.detach()) == 2.0
