"""Sublayers by registry: kinds with their own config sections, one builder spec, clear errors."""

from typing import Literal

import pytest
import torch
from torch import nn

from energyformer.blocks import (
    ATTENTIONS, MLPS, AttentionConfig, BlockConfig, CEMAttentionConfig, CEMMLPConfig, SublayerSpec,
    build_attention, build_mlp,
)
from energyformer.blocks.cem import Diagonal, Precond
from energyformer.core import PRECONDITIONERS, ForwardContext, check_attention_kind, check_mlp_kind
from energyformer.core.checks import _supports_causal
from energyformer.energies.interaction import DIAGONAL_MODES
from energyformer.models.params import count_params
from energyformer.utils.config import load_config, to_dict
from energyformer.utils.validate import ConfigError

from .block_cases import randomise


def test_yaml_layout_each_kind_its_own_section():
    cfg = load_config(BlockConfig, {"attention": {"kind": "cem", "steps": 2, "precond": "diag_low_rank"},
                                    "mlp": {"kind": "cem", "steps": 2}})
    assert isinstance(cfg.attention, CEMAttentionConfig) and cfg.attention.steps == 2
    assert cfg.attention.solver.precond == "diag_low_rank" and cfg.attention.solver.precond_rank == 4
    assert isinstance(cfg.mlp, CEMMLPConfig) and cfg.mlp.steps == 2 and cfg.mlp.solver.precond_rank == 16
    # shorthand: a bare kind name = that kind with its defaults; round trip through to_dict
    short = load_config(BlockConfig, {"attention": "gpt", "mlp": "gelu"})
    assert short == load_config(BlockConfig, {"attention": {"kind": "gpt"}, "mlp": {"kind": "gelu"}})
    assert load_config(BlockConfig, to_dict(cfg)) == cfg
    assert to_dict(BlockConfig())["attention"] == {"kind": "llama", "rope_theta": 10000.0, "rope": True}
    # dotted overrides reach into a kind's section
    over = load_config(BlockConfig, {"attention": "cem"}, ["attention.steps=3", "mlp.kind=gelu"])
    assert over.attention.steps == 3 and over.mlp.kind == "gelu"


@pytest.mark.parametrize("data,needles", [
    ({"attention": "flash"}, ["attention.kind = 'flash'", "registered: llama, gpt, cem"]),
    ({"attention": {"kind": "lama"}}, ["(did you mean 'llama'?)", "registered: llama, gpt, cem"]),
    ({"mlp": "reglu"}, ["mlp.kind = 'reglu'", "registered: swiglu, gelu, relu, cem"]),
])
def test_bad_kind_is_one_line_listing_registered(data, needles, config_error_says):
    config_error_says(BlockConfig, data, needles)


@pytest.mark.parametrize("data,needles", [
    ({"attention": {"kind": "gpt", "rope_theta": 5e5}},
     ["unknown key 'attention.rope_theta' for attention kind 'gpt'", "kinds that accept it: llama"]),
    ({"attention": {"kind": "llama", "steps": 2}},
     ["unknown key 'attention.steps' for attention kind 'llama'", "kinds that accept it: cem"]),
    ({"mlp": {"kind": "gelu", "solver": "gd"}},
     ["unknown key 'mlp.solver' for mlp kind 'gelu'", "kinds that accept it: cem"]),
    ({"attention": {"kind": "cem", "stpes": 2}}, ["unknown key 'attention.stpes'", "did you mean 'attention.steps'"]),
])
def test_unknown_key_in_a_kind_section_names_the_kinds_that_accept_it(data, needles, config_error_says):
    config_error_says(BlockConfig, data, needles)


def test_bad_values_and_wrong_config_class():
    with pytest.raises(ConfigError, match=r"rope_theta = 0.*greater than 0"):
        load_config(BlockConfig, {"attention": {"kind": "llama", "rope_theta": 0}})
    with pytest.raises(ConfigError, match=r"dropout = 1\.5"):
        BlockConfig(dropout=1.5)
    with pytest.raises(ConfigError, match="attention kind 'cem' takes a CEMAttentionConfig"):
        BlockConfig(attention=CEMMLPConfig())


def test_literals_follow_the_core_choices():
    assert set(Precond.__args__) == set(PRECONDITIONERS.names())
    assert set(Diagonal.__args__) == set(DIAGONAL_MODES)


@pytest.mark.parametrize("kind,expected", [("gelu", 4 * 40), ("swiglu", 128), ("cem", 128)])
def test_each_mlp_kind_knows_its_default_hidden(kind, expected):
    spec = SublayerSpec(dim=40, heads=4)  # 8/3·40 = 106.7 -> rounded up to 32: 128
    cfg = load_config(BlockConfig, {"mlp": kind}).mlp
    assert cfg.hidden_size(spec) == expected
    assert cfg.hidden_size(SublayerSpec(dim=40, heads=4, mlp_hidden=50)) == 50  # the model's mlp_hidden
    own = load_config(BlockConfig, {"mlp": {"kind": kind, "hidden": 24}}).mlp
    assert own.hidden_size(SublayerSpec(dim=40, heads=4, mlp_hidden=50)) == 24  # the section wins
    mlp = build_mlp(cfg, spec)
    assert mlp.part == "mlp" and max(p.shape[0] for p in mlp.parameters() if p.dim() == 2) == expected



#: every registered attention kind (CEM with two steps and its preconditioner, so the loop and the bank act); the
#: properties below hold for the class, not for the baselines alone (ET's padded queries once pulled on real keys)
ATTN_KINDS = [{"kind": "cem", "steps": 2, "precond": "diag_low_rank"} if k == "cem" else k for k in ATTENTIONS.names()
              if k != "echo_iteration"]


CAUSAL_KINDS = [k for k in ATTN_KINDS if _supports_causal(k)]


def _attn(kind, causal: bool) -> nn.Module:
    cfg = load_config(BlockConfig, {"attention": kind}).attention
    torch.manual_seed(0)
    return randomise(build_attention(cfg, SublayerSpec(dim=16, heads=4, causal=causal)).double(), 1).eval()


@pytest.mark.parametrize("kind", ATTN_KINDS, ids=str)
def test_every_attention_kind_meets_the_public_contract(kind):
    """Causal (where it has a causal form), ignores padded keys (causal and bidirectional), KV-cache decoding with
    left padding equals the full forward: the checks a plugin's kind gets (``core.check_attention_kind``)."""
    check_attention_kind(kind)


@pytest.mark.parametrize("kind", MLPS.names())
def test_every_mlp_kind_meets_the_public_contract(kind):
    """Position-wise (an MLP sublayer's energy is taken as token-local in cached decoding) and KV-cache decoding
    equals the full forward where it has a causal form: the checks a plugin's kind gets (``core.check_mlp_kind``)."""
    check_mlp_kind(kind)


@pytest.mark.parametrize("kind", CAUSAL_KINDS, ids=str)
def test_every_bidirectional_form_sees_later_tokens(kind):
    x = torch.randn(2, 8, 16, dtype=torch.float64)
    x2 = x.clone()
    x2[:, 5] += torch.randn(16, dtype=torch.float64)
    bidir = _attn(kind, False)
    assert not torch.allclose(bidir(x2)[:, 0], bidir(x)[:, 0])  # position 0 sees position 5


class EchoIterationConfig(AttentionConfig):
    """A plugin attention kind (for this test only)."""

    kind: Literal["echo_iteration"] = "echo_iteration"
    scale: float = 1.0


class EchoIteration(nn.Module):
    """Adds scale · (ctx.iteration + 1) · w to the residual stream; records what it saw."""

    def __init__(self, cfg: EchoIterationConfig, spec: SublayerSpec):
        super().__init__()
        self.spec, self.scale, self.seen = spec, cfg.scale, []
        self.w = nn.Parameter(torch.ones(spec.dim))

    def forward(self, x, ctx=None):
        it = 0 if ctx is None else ctx.iteration
        self.seen.append(it)
        return x + self.scale * (it + 1) * self.w


@pytest.fixture
def echo_kind():
    ATTENTIONS.register("echo_iteration", EchoIterationConfig)(EchoIteration)
    yield
    del ATTENTIONS.entries["echo_iteration"]


def test_a_new_kind_is_a_config_and_a_builder(echo_kind):
    """Registering a kind needs no change elsewhere: config section, builder spec, parameter parts."""
    from energyformer.models.lm import CausalLM, ModelConfig

    cfg = load_config(ModelConfig, {"vocab_size": 11, "dim": 8, "n_layers": 1, "heads": 2, "iterations": 3,
                                    "block": {"attention": {"kind": "echo_iteration", "scale": 0.5}}})
    m = CausalLM(cfg)
    att = m.layers[0].attn
    assert isinstance(att, EchoIteration) and att.part == "attention"  # tagged by its registry
    assert att.spec == SublayerSpec(dim=8, heads=2, causal=True, dropout=0.0, mlp_hidden=None)
    m(torch.randint(0, 11, (1, 4)))
    assert att.seen == [0, 1, 2]  # the block saw ctx.iteration of every pass
    assert count_params(m)["attention"] == 8
    with pytest.raises(ConfigError, match="registered: llama, gpt, cem, .*echo_iteration"):  # other systems add kinds
        load_config(BlockConfig, {"attention": "echo"})


_SUBLAYERS = [(reg, build, name) for reg, build in ((ATTENTIONS, build_attention), (MLPS, build_mlp))
              for name in reg.names()]


@pytest.mark.parametrize("reg,build,name", _SUBLAYERS, ids=[f"{r.what}-{n}" for r, _, n in _SUBLAYERS])
def test_every_sublayer_declares_causal_support_and_keeps_it(reg, build, name):
    """A kind with ``supports_causal`` builds for a causal model and never lets token i see j > i; one
    without is refused by the registry with one error naming the kind."""
    cfg = reg.get(name).config()
    spec = SublayerSpec(dim=16, heads=4, causal=True)
    if not type(cfg).supports_causal:
        with pytest.raises(ConfigError, match=f"{reg.what} kind '{name}' is bidirectional only"):
            build(cfg, spec)
        return
    torch.manual_seed(0)
    blk = randomise(build(cfg, spec).double(), 1).eval()
    x = torch.randn(2, 8, 16, dtype=torch.float64)
    x2 = x.clone()
    x2[:, 5] += torch.randn(16, dtype=torch.float64)
    torch.testing.assert_close(blk(x2, ForwardContext())[:, :5], blk(x, ForwardContext())[:, :5], rtol=0, atol=1e-12)
