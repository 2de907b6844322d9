"""One config shape for every energy sublayer (issue 19): any solver, step size and backward mode
with any energy from YAML; old spellings (configs and resolved run configs from before) load
through one migration; old parameter names load through pre-hooks."""
from __future__ import annotations

import pytest
import torch
import yaml

from energyformer.blocks import ATTENTIONS, MLPS, BlockConfig, SublayerSpec, TransformerLayer
from energyformer.blocks.equilibrium import RefineConfig
from energyformer.core import (
    DescentConfig, ForwardContext, Implicit, LearnedStepSize, Nesterov, StepSizeGroup, Truncated,
)
from energyformer.utils.config import load_config
from energyformer.utils.validate import ConfigError

HYPERSET_NESTEROV = """
attention:
  kind: hyperset
  solver: {kind: nesterov, beta: 0.5, learn_beta: true}
  step_size: {kind: network, embed_dim: 16, condition: layer, groups: 2, zero_init: output}
mlp: {kind: hyperset, solver: {kind: nesterov, beta: 0.3}, step_size: shared}
"""

CEM_IMPLICIT = """
attention:
  kind: cem
  steps: 3
  eval_steps: 6
  solver: {kind: gd, precond: diagonal}
  step_size: {kind: learned, init: 0.5}
  backward: {kind: implicit, method: fixed_point, max_iter: 30, damping: 0.5}
mlp: {kind: cem, steps: 2, backward: {kind: truncated, k: 1}}
"""


def _layer(text: str, causal: bool) -> TransformerLayer:
    cfg = load_config(BlockConfig, yaml.safe_load(text))
    torch.manual_seed(0)
    return TransformerLayer(cfg, SublayerSpec(dim=16, heads=2, causal=causal)).double()


def _forward_backward(layer: TransformerLayer) -> torch.Tensor:
    x = torch.randn(2, 5, 16, dtype=torch.float64, requires_grad=True)
    y = layer(x, ForwardContext())
    y.pow(2).sum().backward()
    assert torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
    return y


def test_hyperset_block_with_the_nesterov_solver_from_yaml():
    layer = _layer(HYPERSET_NESTEROV, causal=False)
    attn, mlp = layer.attn, layer.mlp
    assert type(attn.solver) is Nesterov and type(mlp.solver) is Nesterov and mlp.solver.beta() == 0.3
    assert isinstance(attn.solver.step_size, StepSizeGroup) and mlp.step is attn.step
    _forward_backward(layer)
    assert attn.solver.beta_logit.grad is not None  # the learned beta is trained
    assert attn.step.out.weight.grad.abs().sum() > 0  # the shared network gets gradient from both sublayers


def test_cem_block_with_implicit_backward_from_yaml():
    layer = _layer(CEM_IMPLICIT, causal=True)
    attn, mlp = layer.attn, layer.mlp
    assert isinstance(attn.solver.backward, Implicit) and attn.solver.backward.method == "fixed_point"
    assert isinstance(mlp.solver.backward, Truncated) and mlp.solver.backward.k == 1
    assert isinstance(attn.solver.step_size, LearnedStepSize) and (attn.steps, attn.eval_steps) == (3, 6)
    _forward_backward(layer)
    assert attn.solver.backward.solves == 1 and attn.solver.step_size.theta.grad is not None
    # the same layer unrolled gives the same forward value (implicit changes the gradient only)
    unrolled = _layer(CEM_IMPLICIT.replace("backward: {kind: implicit, method: fixed_point, max_iter: 30, "
                                           "damping: 0.5}", "backward: unroll"), causal=True)
    x = torch.randn(1, 4, 16, dtype=torch.float64)
    torch.testing.assert_close(layer(x, ForwardContext()), unrolled(x, ForwardContext()))


def test_eval_steps_is_the_eval_budget_and_ctx_steps_overrides():
    layer = _layer(CEM_IMPLICIT, causal=True)
    attn = layer.attn
    x = torch.randn(1, 4, 16, dtype=torch.float64)
    for mode, want in ((True, 3), (False, 6)):
        attn.train(mode)
        ctx = ForwardContext(stats={})
        with torch.no_grad():
            attn(x, ctx)
        assert int(next(iter(ctx.stats.values())).steps.max()) == want
    ctx = ForwardContext(stats={}, steps=2)
    with torch.no_grad():
        attn(x, ctx)
    assert int(next(iter(ctx.stats.values())).steps.max()) == 2


def test_every_energy_sublayer_has_the_descent_keys():
    energy_kinds = {"cem", "mha", "momen_mha", "nag_mha", "mha_tied", "linear_attn", "mha2nd", "mha2nd1st",
                    "mha2nd1st_simple", "mha2nd_lite", "hyperset", "et", "crate", "momen_gelu", "nag_gelu", "ista"}
    found = set()
    for reg in (ATTENTIONS, MLPS):
        for name in reg.names():
            cfg = reg.get(name).config
            if issubclass(cfg, DescentConfig):
                found.add(name)
                assert {"solver", "step_size", "steps", "eval_steps", "backward", "norm"} <= set(cfg.model_fields)
    assert energy_kinds <= found


@pytest.mark.parametrize("old,new", [
    ({"kind": "cem", "step_size": 0.5, "learn_step_size": True, "precond": "diag_low_rank", "precond_rank": 2},
     {"step_size": {"kind": "learned", "init": 0.5}, "solver": {"precond": "diag_low_rank", "precond_rank": 2,
                                                                 "precond_per_head": True}}),
    ({"kind": "cem", "learn_step_size": False}, {"step_size": {"kind": "fixed", "value": 1.0}}),
    ({"kind": "momen_mha", "beta": 0.0, "learn_beta": False, "step_size": 1.0, "learn_step_size": False,
      "ema": True, "carry_key": "v"},
     {"solver": {"kind": "momentum", "beta": 0.0, "learn_beta": False, "ema": True, "carry_key": "v"},
      "step_size": {"kind": "fixed", "value": 1.0}}),
    ({"kind": "mha_tied", "step_size": None, "learn_step_size": True}, {"step_size": "auto"}),
    ({"kind": "et", "steps": 2, "step_size": 0.1}, {"steps": 2, "step_size": {"kind": "fixed", "value": 0.1}}),
])
def test_old_sublayer_spellings_load(old, new):
    got = load_config(BlockConfig, {"attention": old}).attention
    want = load_config(BlockConfig, {"attention": {"kind": old["kind"], **new}}).attention
    assert got == want


def test_old_ista_and_hyperset_spellings_load():
    got = load_config(BlockConfig, {"mlp": {"kind": "ista", "step_size": 0.1, "lambd": 0.2, "nonnegative": False}}).mlp
    assert got.solver.kind == "ista" and got.solver.lambd == 0.2 and not got.solver.nonnegative
    hs = load_config(BlockConfig, {"attention": {"kind": "hyperset", "step_size": {
        "kind": "network", "condition": "iterate", "groups": 2}}, "mlp": {"kind": "hyperset"}}).attention
    assert hs.step_size.condition == "layer"  # Hyper-SET's gamma is computed from the layer input
    x0 = load_config(BlockConfig, {"attention": {"kind": "hyperset", "step_size": {
        "kind": "network", "condition": "x0"}}}).attention
    assert x0.step_size.condition == "input"  # x0 of Eq. 12 is the model input


def test_old_refine_spelling_loads():
    old = RefineConfig(alpha=0.2, gamma=10.0, tol=1e-3, backward="implicit", implicit_method="fixed_point",
                       implicit_max_iter=7, implicit_tol=1e-5)
    assert old.step_size.value == 0.2 and old.solver.gamma == 10.0 and old.solver.tol == 1e-3
    assert old.backward.kind == "implicit" and (old.backward.method, old.backward.max_iter) == ("fixed_point", 7)


def test_migration_is_idempotent_and_bad_old_values_are_errors():
    cfg = load_config(BlockConfig, {"attention": {"kind": "cem", "precond": "diagonal", "learn_step_size": True}})
    again = load_config(BlockConfig, yaml.safe_load(yaml.safe_dump(cfg.model_dump(mode="json"))))
    assert again == cfg
    with pytest.raises(ConfigError, match="step_size = null"):
        load_config(BlockConfig, {"attention": {"kind": "mha_tied", "step_size": None, "learn_step_size": False}})
    with pytest.raises(ConfigError, match="truncate"):
        load_config(BlockConfig, {"attention": {"kind": "cem", "backward": "unroll", "truncate": 2}})


def test_old_hyperset_parameter_names_load():
    layer = _layer("attention: {kind: hyperset}\nmlp: {kind: hyperset}", causal=False)
    state = {k: v.clone() for k, v in layer.state_dict().items()}
    old = {}
    for k, v in state.items():
        k = k.replace("attn.solver.step_size.net.", "attn.step.").replace("attn.energy.", "attn.block.energy.")
        old[k.replace("mlp.energy.", "mlp.block.energy.")] = v + 1
    layer.load_state_dict(old, strict=True)
    assert torch.equal(layer.attn.step.out.bias, state["attn.solver.step_size.net.out.bias"] + 1)


def test_list_keys_shows_the_descent_keys_under_every_energy_sublayer():  # norm included (norm.kind)
    """What ``energyformer list keys`` prints (format_config_help(RunConfig))."""
    from energyformer.experiment import RunConfig
    from energyformer.utils.config_help import format_config_help

    text = format_config_help(RunConfig)
    for part, reg in (("attention", ATTENTIONS), ("mlp", MLPS)):
        for name in reg.names():
            if issubclass(reg.get(name).config, DescentConfig):
                head = f"block.{part}[kind={name}]."
                for key in ("solver.kind", "step_size", "backward.kind", "steps", "eval_steps", "norm.kind"):
                    assert head + key in text, head + key


@pytest.mark.parametrize("attention", [
    {"kind": "cem", "steps": 2, "solver": {"kind": "nesterov", "form": "sutskever"}},
    {"kind": "cem", "eval_steps": 3, "solver": {"kind": "nesterov", "form": "sutskever"}},
    {"kind": "nag_mha", "steps": 3},                   # readout 'seed' builds the sutskever form
    {"kind": "nag_mha", "eval_steps": 2},
])
def test_a_lookahead_rule_with_more_than_one_step_is_refused_when_the_config_loads(attention):
    """Before: accepted by the config, refused at the first forward pass (after `train` wrote the run folder)."""
    key = "steps" if "steps" in attention else "eval_steps"
    with pytest.raises(ConfigError, match=rf"attention: {key} = \d: a look-ahead rule .* allowed: 1"):
        load_config(BlockConfig, {"attention": attention})


@pytest.mark.parametrize("attention", [
    {"kind": "cem", "steps": 2, "solver": {"kind": "nesterov", "form": "sgd"}},
    {"kind": "nag_mha", "steps": 3, "readout": "sgd_lookahead"},
    {"kind": "nag_mha"},
])
def test_rules_without_lookahead_take_any_steps(attention):
    load_config(BlockConfig, {"attention": attention})


def test_eqt_mem_topk_is_checked_only_where_it_is_used():
    """``mem_topk`` is read by ``mem_relevance: topk`` alone; a small memory under 'all' was refused before."""
    cfg = load_config(RefineConfig, {"mem_size": 8})
    assert cfg.mem_relevance == "all" and cfg.mem_topk > cfg.mem_size
    with pytest.raises(ConfigError, match="mem_topk = 16: must be <= mem_size = 8"):
        load_config(RefineConfig, {"mem_size": 8, "mem_relevance": "topk"})
