"""Parameter groups by role, never by number of dimensions."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from energyformer.core.precond import Preconditioner, make_preconditioner
from energyformer.train import (
    LRSchedule,
    TrainConfig,
    build_optimizer,
    declare_param_roles,
    describe_param_groups,
    format_param_groups,
    param_groups,
    param_roles,
    register_module_role,
)
from energyformer.train.roles import MODULE_ROLES
from energyformer.utils.validate import ConfigError


class KQDiag(nn.Module):
    """Declares its diagonal (a per-head MATRIX) and its self-bias, like CEM's interaction energy."""

    param_roles = {"d": "diagonal", "self_bias": "position"}

    def __init__(self, heads: int = 2, dim: int = 4, self_bias: bool = True) -> None:
        super().__init__()
        self.wq = nn.Linear(dim, heads * dim, bias=False)
        self.d = nn.Parameter(torch.zeros(heads, dim))
        self.self_bias = nn.Parameter(torch.zeros(heads)) if self_bias else None
        self.gain = nn.Parameter(torch.ones(dim))  # 1-D and undeclared: a weight, decayed


class Stepper(nn.Module):
    """A learned step size (0-D), declared."""

    param_roles = {"theta": "step_size"}

    def __init__(self) -> None:
        super().__init__()
        self.theta = nn.Parameter(torch.tensor(0.5))


class ToyPrecond(Preconditioner):
    def __init__(self, dim: int = 4) -> None:
        super().__init__(dim)
        self.p = nn.Parameter(torch.ones(dim))
        self.U = nn.Parameter(torch.zeros(dim, 2))  # a matrix, but a preconditioner's: no decay


class Toy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.attn = KQDiag()
        self.attn_off = KQDiag(self_bias=False)  # an optional parameter switched off is fine
        self.solver = Stepper()
        self.precond = ToyPrecond()
        self.norm = nn.LayerNorm(4)
        self.proj = nn.Linear(4, 4)
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.emb.weight  # tied: an embedding, not a decayed weight


EXPECTED = {
    "emb.weight": "embedding",
    "attn.wq.weight": "weight", "attn.d": "diagonal", "attn.self_bias": "position",
    "attn.gain": "weight",
    "attn_off.wq.weight": "weight", "attn_off.d": "diagonal", "attn_off.gain": "weight",
    "solver.theta": "step_size",
    "precond.p": "precond", "precond.U": "precond",
    "norm.weight": "norm", "norm.bias": "norm",  # module type comes before the name 'bias'
    "proj.weight": "weight", "proj.bias": "bias",
}


def test_roles_come_from_declarations_module_types_and_names():
    model = Toy()
    assert param_roles(model) == EXPECTED
    # shared parameters appear once, and every trainable parameter has a role
    assert len(param_roles(model)) == len(list(model.parameters()))


def test_decay_follows_roles_not_dimensions():
    model = Toy()
    with pytest.warns(UserWarning, match=r"weight decay applies to attn.gain, attn_off.gain"):
        opt = build_optimizer(model, TrainConfig(optimizer={"weight_decay": 0.1}), torch.device("cpu"))
    decay = {id(p) for g in opt.param_groups if g["weight_decay"] > 0 for p in g["params"]}
    names = dict(model.named_parameters())
    for name, p in names.items():
        assert (id(p) in decay) == (EXPECTED[name] == "weight"), name
    # no 1-D "weight" is silently exempt, no matrix "diagonal"/"precond" is decayed
    assert id(names["attn.gain"]) in decay and names["attn.gain"].ndim == 1
    assert id(names["attn.d"]) not in decay and names["attn.d"].ndim == 2
    assert id(names["precond.U"]) not in decay and id(names["emb.weight"]) not in decay
    assert [g["role"] for g in opt.param_groups] == [
        "weight", "embedding", "norm", "bias", "precond", "diagonal", "position", "step_size"]
    for g in opt.param_groups:  # names travel with the group (resume matches state by them)
        assert [id(names[n]) for n in g["names"]] == [id(p) for p in g["params"]]


def test_no_decay_roles_and_lr_multipliers_are_configurable():
    model = Toy()
    groups = param_groups(model, 0.1, no_decay_roles=["bias", "norm"], lr_multipliers={"step_size": 0.1})
    by_role = {g["role"]: g for g in groups}
    assert by_role["diagonal"]["weight_decay"] == 0.1 and by_role["bias"]["weight_decay"] == 0.0
    assert by_role["step_size"]["lr_multiplier"] == 0.1 and by_role["weight"]["lr_multiplier"] == 1.0
    opt = torch.optim.SGD(groups, lr=1.0)
    LRSchedule(opt, 0.5, 10, TrainConfig(schedule="constant").schedule)
    assert {g["role"]: g["lr"] for g in opt.param_groups}["step_size"] == pytest.approx(0.05)


class LlamaBlock(nn.Module):
    """A Llama-style block from torch modules only: RMSNorm, bias-free projections, SwiGLU."""

    def __init__(self, dim: int = 8, hidden: int = 16) -> None:
        super().__init__()
        self.attn_norm = nn.RMSNorm(dim)
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(dim, dim, bias=False) for _ in range(4))
        self.mlp_norm = nn.RMSNorm(dim)
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)


def test_llama_style_model_groups():
    model = nn.ModuleDict({"embed": nn.Embedding(32, 8), "blocks": nn.ModuleList([LlamaBlock(), LlamaBlock()]),
                           "norm": nn.RMSNorm(8), "head": nn.Linear(8, 32, bias=False)})
    desc = describe_param_groups(model)
    assert list(desc) == ["weight", "embedding", "norm"]  # no biases anywhere
    assert desc["weight"]["tensors"] == 2 * 7 + 1 and desc["weight"]["decay"]
    assert desc["norm"]["names"] == ["blocks.0.attn_norm.weight", "blocks.0.mlp_norm.weight",
                                     "blocks.1.attn_norm.weight", "blocks.1.mlp_norm.weight",
                                     "norm.weight"]
    assert desc["norm"]["numel"] == 5 * 8 and not desc["norm"]["decay"]
    assert desc["embedding"] == {"names": ["embed.weight"], "tensors": 1, "numel": 256, "decay": False,
                                 "lr_multiplier": 1.0}
    assert sum(d["numel"] for d in desc.values()) == sum(p.numel() for p in model.parameters())
    text = format_param_groups(model)
    assert "weight" in text and "decay=yes" in text and "blocks.0.attn_norm.weight" in text
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing undeclared here: no warning
        build_optimizer(model, TrainConfig(), torch.device("cpu"))


def test_gpt_style_norm_biases_and_linear_biases():
    block = nn.Sequential(nn.LayerNorm(4), nn.Linear(4, 4), nn.GELU(), nn.Linear(4, 4))
    assert param_roles(block) == {"0.weight": "norm", "0.bias": "norm", "1.weight": "weight",
                                  "1.bias": "bias", "3.weight": "weight", "3.bias": "bias"}


def test_library_preconditioners_are_precond():
    p = make_preconditioner("diag_low_rank", 8, rank=2, heads=2)
    assert set(param_roles(p).values()) == {"precond"} and len(param_roles(p)) == 3


def test_declarations_are_inherited_overridden_and_per_instance():
    class Sub(KQDiag):
        param_roles = {"d": "other_no_decay", "gain": "norm"}

    assert param_roles(Sub()) == {"wq.weight": "weight", "d": "other_no_decay",
                                  "self_bias": "position", "gain": "norm"}
    m = declare_param_roles(KQDiag(), gain="norm")
    assert param_roles(m)["gain"] == "norm"
    assert param_roles(KQDiag())["gain"] == "weight"  # the class is untouched
    # a parent may declare into its children by dotted path; declared beats module type
    lm = declare_param_roles(nn.ModuleDict({"pos": nn.Embedding(5, 4)}), {"pos.weight": "position"})
    assert param_roles(lm) == {"pos.weight": "position"}


def test_frozen_parameters_are_not_grouped():
    model = nn.Linear(3, 3)
    model.bias.requires_grad_(False)
    assert param_roles(model) == {"weight": "weight"}
    assert param_roles(model, trainable_only=False) == {"weight": "weight", "bias": "bias"}


def test_register_module_role_for_third_party_types():
    class ThirdPartyScale(nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = nn.Parameter(torch.ones(3))

    register_module_role(ThirdPartyScale, "norm")
    try:
        assert param_roles(ThirdPartyScale()) == {"scale": "norm"}
    finally:
        del MODULE_ROLES[ThirdPartyScale]
    with pytest.raises(ConfigError, match=r"'nrom': not a parameter role \(did you mean 'norm'\?\)"):
        register_module_role(ThirdPartyScale, "nrom")


def test_bad_declarations_are_errors():
    class NotAParam(KQDiag):
        param_roles = {"wq": "weight"}  # a submodule

    with pytest.raises(ConfigError, match=r"NotAParam.param_roles names 'wq', which is a Linear, not a "
                                          r"parameter of it; its parameters: d, self_bias, gain, wq.weight"):
        param_roles(NotAParam())

    class BadRole(KQDiag):
        param_roles = {"d": "diag"}

    with pytest.raises(ConfigError, match=r"BadRole.param_roles\['d'\] = 'diag': not a parameter role"
                                          r".*roles: weight, embedding"):
        param_roles(BadRole())
    # on an instance, a name it does not have can only be a typo
    with pytest.raises(ConfigError, match=r"names 'dd', which is not an attribute"):
        declare_param_roles(KQDiag(), dd="diagonal")
    with pytest.raises(ConfigError, match=r"'nrom': not a parameter role"):
        declare_param_roles(KQDiag(), gain="nrom")


def test_class_declarations_may_name_optional_parameters():
    class Solver(nn.Module):
        param_roles = {"theta": "step_size", "extra.scale": "step_size"}

        def __init__(self, learned: bool):
            super().__init__()
            if learned:
                self.theta = nn.Parameter(torch.tensor(1.0))
            self.w = nn.Parameter(torch.ones(2, 2))

    assert param_roles(Solver(True)) == {"theta": "step_size", "w": "weight"}
    assert param_roles(Solver(False)) == {"w": "weight"}


def test_conflicting_declarations_on_a_shared_parameter_are_an_error():
    a, b = KQDiag(), KQDiag()
    b.d = a.d  # shared
    declare_param_roles(b, d="position")
    with pytest.raises(ConfigError, match=r"parameter 'a.d' gets different roles by declared: "
                                          r"diagonal .*; position"):
        param_roles(nn.ModuleDict({"a": a, "b": b}))
