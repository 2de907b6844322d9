"""The ``norm`` key of the one sublayer shape (issue 19): every energy sublayer builds its norm, in-loop
flag and start point from its config through ``EnergyBlock.from_config``; each system keeps its own
default; the old top-level spellings (``norm_in_loop``, CEM's ``init``) load; bad kinds are one-line
errors."""
from __future__ import annotations

import pytest
import torch
import yaml
from torch import nn

from energyformer.utils.validate import ConfigError
from energyformer.blocks import ATTENTIONS, MLPS, BlockConfig, SublayerSpec, TransformerLayer
from energyformer.core import NORMS, DescentConfig, EnergyBlock, ForwardContext
from energyformer.energies.energy_transformer import EnergyLayerNorm
from energyformer.utils.config import dumps_yaml, load_config, to_dict


def _layer(text: str, causal: bool = False, dim: int = 16) -> TransformerLayer:
    cfg = load_config(BlockConfig, yaml.safe_load(text))
    torch.manual_seed(0)
    return TransformerLayer(cfg, SublayerSpec(dim=dim, heads=2, causal=causal)).double()


# (kind, part, norm class, eps, in loop, init): each system's default and its source
DEFAULTS = [
    ("cem", "attention", nn.RMSNorm, 1e-6, True, "residual"),        # CEM Algorithm 1
    ("cem", "mlp", nn.RMSNorm, 1e-6, True, "residual"),
    ("crate", "attention", nn.LayerNorm, 1e-5, True, "residual"),    # CRATE code: pre-LN
    ("ista", "mlp", nn.LayerNorm, 1e-5, False, "normalized"),        # CRATE code: z = LN(x), no residual
    ("et", "attention", EnergyLayerNorm, 1e-5, True, "residual"),    # ET Eqs. 1, 8
    ("mha_tied", "attention", nn.LayerNorm, 1e-5, True, "residual"),  # seed 001: pre-LN
    ("momen_gelu", "mlp", nn.LayerNorm, 1e-5, True, "residual"),
    ("hyperset", "attention", nn.Identity, None, False, "residual"),  # the sphere norms are the energy's
]


@pytest.mark.parametrize("kind,part,cls,eps,in_loop,init", DEFAULTS, ids=[f"{p}-{k}" for k, p, *_ in DEFAULTS])
def test_each_system_keeps_its_norm(kind, part, cls, eps, in_loop, init):
    reg = ATTENTIONS if part == "attention" else MLPS
    cfg = reg.get(kind).config(**({"step_size": 0.5} if kind == "hyperset" and part == "mlp" else {}))
    block = reg.build(cfg, SublayerSpec(dim=16, heads=2, causal=False))
    assert type(block.norm) is cls
    if eps is not None:
        assert block.norm.eps == eps
    assert (block.norm_in_loop and not isinstance(block.norm, nn.Identity)) == in_loop
    assert block.init == init


CEM_LAYER = """
attention: {kind: cem, steps: 2, norm: {kind: layer}}
mlp: {kind: cem, norm: {kind: layer, in_loop: false, eps: 1.0e-4}}
"""


def test_cem_block_with_a_layer_norm_from_yaml():
    layer = _layer(CEM_LAYER, causal=True)
    attn, mlp = layer.attn, layer.mlp
    assert type(attn.norm) is nn.LayerNorm and attn.norm_in_loop and not attn.exact
    assert type(mlp.norm) is nn.LayerNorm and mlp.norm.eps == 1e-4 and not mlp.norm_in_loop
    assert mlp.exact == (mlp.energy.exact and mlp.solver.exact)  # the norm no longer breaks exactness
    # the state-dict keys stay under the block's ``norm`` attribute
    assert {"attn.norm.weight", "attn.norm.bias", "mlp.norm.weight", "mlp.norm.bias"} <= set(layer.state_dict())
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    h = attn.norm(x)
    torch.testing.assert_close(h, torch.nn.functional.layer_norm(x, (16,), attn.norm.weight, attn.norm.bias))
    assert torch.isfinite(layer(x, ForwardContext())).all()


def test_et_block_with_the_norm_out_of_the_loop_from_yaml_is_exact():
    default = _layer("attention: {kind: et}\nmlp: identity").attn
    out = _layer("attention: {kind: et, norm: {in_loop: false}}\nmlp: identity").attn
    assert type(out.norm) is EnergyLayerNorm and not out.norm_in_loop  # kind and eps kept from ET's default
    assert not default.exact and out.exact
    # out of the loop, one step is -alpha ∇E at the raw iterate (the context is the iterate itself)
    x = torch.randn(1, 4, 16, dtype=torch.float64)
    want = x - 0.1 * out.energy.grad(x, out.energy.prepare(x))
    torch.testing.assert_close(out(x, ForwardContext()), want)
    assert not torch.allclose(default(x, ForwardContext()), want)


def test_the_in_loop_flag_decides_where_the_gradient_is_evaluated():
    """CEM attention, one step: in the loop at u = RMSNorm(x), out of it at x (so the two differ)."""
    on = _layer("attention: {kind: cem, step_size: 0.5}\nmlp: swiglu", causal=True).attn
    off = _layer("attention: {kind: cem, step_size: 0.5, norm: {in_loop: false}}\nmlp: swiglu", causal=True).attn
    off.load_state_dict(on.state_dict())
    x = 3 * torch.randn(1, 5, 16, dtype=torch.float64)
    h = on.norm(x)
    state = on.energy.prepare(h)
    torch.testing.assert_close(on(x), x - 0.5 * on.energy.grad(h, state))
    torch.testing.assert_close(off(x), x - 0.5 * on.energy.grad(x, state))


def test_start_point_normalized():
    blk = _layer("attention: {kind: cem, step_size: 0.5, norm: {init: normalized}}\nmlp: swiglu", causal=True).attn
    x = 3 * torch.randn(1, 5, 16, dtype=torch.float64)
    h = blk.norm(x)
    torch.testing.assert_close(blk(x), h - 0.5 * blk.energy.grad(h, blk.energy.prepare(h)))


@pytest.mark.parametrize("data,needles", [
    ({"attention": {"kind": "cem", "norm": "batch"}},
     ["attention.norm.kind = 'batch'", "unknown norm kind 'batch'", "registered: rms, layer, none, energy_layer"]),
    ({"attention": {"kind": "cem", "norm": {"kind": "group", "in_loop": False}}},
     ["attention.norm.kind = 'group'", "registered: rms, layer, none, energy_layer"]),
    ({"attention": {"kind": "hyperset", "norm": {"in_loop": False}}},
     ["unknown key 'attention.norm.in_loop' for norm kind 'none'", "kinds that accept it: rms, layer"]),
    ({"mlp": {"kind": "cem", "norm": {"init": "zero"}}}, ["mlp.norm.init = 'zero'", "'residual' or 'normalized'"]),
    ({"attention": {"kind": "cem", "norm": {"eps": 0}}}, ["attention.norm.eps = 0", "greater than 0"]),
    ({"attention": {"kind": "cem", "norm": 3}}, ["attention.norm = 3", "kind name or a mapping", "registered norm kinds: rms"]),
])
def test_bad_norm_values_are_one_line_errors(data, needles, config_error_says):
    config_error_says(BlockConfig, data, needles)


OLD_RUN_BLOCK = """
attention: {kind: cem, steps: 2, step_size: 0.5, learn_step_size: false, norm_in_loop: false, init: normalized,
            precond: diag_low_rank}
mlp: {kind: cem, norm_in_loop: true, init: residual}
"""


def test_old_top_level_spellings_load():
    old = load_config(BlockConfig, yaml.safe_load(OLD_RUN_BLOCK))
    assert old.attention.norm.model_dump() == {"kind": "rms", "in_loop": False, "init": "normalized", "eps": 1e-6}
    assert old.mlp.norm == load_config(BlockConfig, {"mlp": "cem"}).mlp.norm
    tied = load_config(BlockConfig, {"attention": {"kind": "mha_tied", "norm_in_loop": False}}).attention
    assert tied.norm.kind == "layer" and not tied.norm.in_loop
    # an old key beside its new place: the same value loads, another is refused (the new place won silently, also
    # over a --set of the old key); the migration is idempotent
    both = load_config(BlockConfig, {"attention": {"kind": "cem", "norm_in_loop": True, "norm": {"in_loop": True}}})
    assert both.attention.norm.in_loop
    with pytest.raises(ConfigError, match=r"norm_in_loop = False conflicts with norm\.in_loop = True"):
        load_config(BlockConfig, {"attention": {"kind": "cem", "norm_in_loop": False, "norm": {"in_loop": True}}})
    again = load_config(BlockConfig, yaml.safe_load(dumps_yaml(old)))
    assert again == old


def test_old_run_config_yaml_loads_as_the_same_model(tmp_path):
    """A resolved run config written before the norm key (top-level norm_in_loop / init) loads, and
    the model it builds has the same parameters as the one from today's spelling."""
    from energyformer.experiment import load_run_config, load_run_dir_config

    new = load_run_config("lm/cem_full_alg1", ["model.block.attention.norm.init=normalized",
                                               "model.block.mlp.norm.in_loop=false"])
    data = to_dict(new)
    for part in ("attention", "mlp"):
        sub = data["model"]["block"][part]
        norm = sub.pop("norm")
        assert norm.pop("kind") == "rms" and norm.pop("eps") == 1e-6
        sub["norm_in_loop"], sub["init"] = norm["in_loop"], norm["init"]
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(data))
    old = load_run_dir_config(tmp_path)
    assert old == new
    assert old.model.block.attention.norm.init == "normalized" and not old.model.block.mlp.norm.in_loop


def test_every_energy_sublayer_has_the_norm_key_and_norm_kinds_are_registered():
    assert {"rms", "layer", "none", "energy_layer"} <= set(NORMS.names())
    for reg in (ATTENTIONS, MLPS):
        for name in reg.names():
            cfg = reg.get(name).config
            if issubclass(cfg, DescentConfig):
                assert "norm" in cfg.model_fields and "norm_in_loop" not in cfg.model_fields, name


def test_from_config_is_the_builder():
    from energyformer.core import QuadraticEnergy

    blk = EnergyBlock.from_config(QuadraticEnergy(4), DescentConfig(norm={"kind": "rms", "in_loop": False}, steps=3), 4)
    assert type(blk.norm) is nn.RMSNorm and not blk.norm_in_loop and blk.steps == 3 and blk.exact
    none = EnergyBlock.from_config(QuadraticEnergy(4), DescentConfig(norm="none"), 4)
    assert isinstance(none.norm, nn.Identity) and none.exact


@pytest.mark.parametrize("rms", [1e-4, 2e-2, 1.0])
def test_rms_norm_computes_one_function_in_every_dtype(rms):
    """``norm: {kind: rms}`` had eps None: torch's default, the input dtype's machine epsilon (2.2e-16 in float64,
    1.2e-7 in float32, 7.8e-3 in bf16), so the float32 layer was another function than its float64 reference — 70 %
    off at rows of RMS 1e-4, 1.5e-4 at 0.02 (probe AD). Now one eps (1e-6) in every dtype: float32 within a few of
    its eps of float64 at every scale, bf16 within a few of its own."""
    from energyformer.core.norm import RMSNormConfig, build_rms

    assert RMSNormConfig().eps == 1e-6
    torch.manual_seed(0)
    x = rms * torch.randn(3, 5, 16, dtype=torch.float64)
    ref = build_rms(RMSNormConfig(), 16).double()(x)
    for dtype, tol in ((torch.float32, 8 * torch.finfo(torch.float32).eps), (torch.bfloat16, 0.02)):
        got = build_rms(RMSNormConfig(), 16).to(dtype)(x.to(dtype)).double()
        assert ((got - ref).norm() / ref.norm()).item() < tol, (dtype, rms)
