"""Intrinsic-optimizer sublayers (seed 001 §3.1): the momentum / Nesterov kinds reduce to GPT at
beta = 0, eta = 1 bit for bit; with an exact -grad oracle they are torch.optim.SGD step for step;
the explicit Nesterov form equals the SGD form; options are validated."""

import math

import pytest
import torch
from torch import nn

from energyformer.blocks.intrinsic import IntrinsicBlock
from energyformer.core import ForwardContext, Momentum, Nesterov
from energyformer.models.lm import CausalLM, ModelConfig
from energyformer.experiment import RunConfig
from energyformer.utils.config import ConfigError, load_config


def _model(att, mlp, seed=0, dropout=0.1, layers=3):
    cfg = ModelConfig(vocab_size=50, dim=16, n_layers=layers, heads=2, max_seq_len=32, positions="learned",
                      final_norm="layer", block={"attention": att, "mlp": mlp, "dropout": dropout})
    torch.manual_seed(seed)
    return CausalLM(cfg)


ZERO = {"beta": 0.0, "learn_beta": False, "step_size": 1.0, "learn_step_size": False}


@pytest.mark.parametrize("att,mlp", [
    ("mha", "gelu"),
    ({"kind": "momen_mha", **ZERO}, {"kind": "momen_gelu", **ZERO}),
    ({"kind": "nag_mha", **ZERO}, {"kind": "nag_gelu", **ZERO}),
    ({"kind": "nag_mha", "readout": "sgd_lookahead", **ZERO}, {"kind": "nag_gelu", "readout": "sgd_lookahead", **ZERO}),
    ({"kind": "momen_mha", "ema": True, **ZERO}, {"kind": "momen_gelu", "ema": True, **ZERO}),
])
@pytest.mark.parametrize("train", [False, True])
def test_beta0_eta1_is_gpt_bit_for_bit(att, mlp, train):
    ref, new = _model("gpt", "gelu"), _model(att, mlp)
    ref.train(train), new.train(train)
    x = torch.randint(0, 50, (2, 12), generator=torch.Generator().manual_seed(3))
    torch.manual_seed(7)
    a = ref(x, x)
    torch.manual_seed(7)
    b = new(x, x)
    assert torch.equal(a.logits, b.logits)
    a.loss.backward(), b.loss.backward()
    assert torch.equal(ref.embed.weight.grad, new.embed.weight.grad)  # and the backward pass too


def test_momentum_changes_the_model_when_beta_positive():
    ref, new = _model("gpt", "gelu"), _model({"kind": "momen_mha", "beta": 0.5}, {"kind": "momen_gelu", "beta": 0.5})
    ref.eval(), new.eval()
    x = torch.randint(0, 50, (2, 12))
    assert not torch.allclose(ref(x).logits, new(x).logits)


def _quadratic(dim, seed):
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(dim, dim, generator=g, dtype=torch.float64)
    A = A @ A.T / dim + 0.5 * torch.eye(dim, dtype=torch.float64)
    b = torch.randn(dim, generator=g, dtype=torch.float64)
    return A, b


class QuadField(nn.Module):
    """f(x) = ½ xᵀAx − bᵀx per token; direction = −∇f (what a sublayer plays in the seed's picture)."""

    exact = True
    context_is_iterate = False

    def __init__(self, A, b):
        super().__init__()
        self.A, self.b = A, b

    def prepare(self, context, **kw):
        return None

    def direction(self, u, state, precond):
        return -(u @ self.A - self.b)

    def energy(self, u, state):
        return 0.5 * ((u @ self.A) * u).sum(-1) - u @ self.b


@pytest.mark.parametrize("rule,nesterov", [("momentum", False), ("nesterov", True)])
def test_exact_oracle_reproduces_torch_sgd_step_for_step(rule, nesterov):
    """25 blocks sharing one carried velocity = 25 steps of torch.optim.SGD(momentum, nesterov), float64."""
    A, b = _quadratic(5, 0)
    beta, eta = 0.8, 0.3
    cls = Nesterov if rule == "nesterov" else Momentum
    blocks = [IntrinsicBlock(QuadField(A, b), cls(step_size=eta, beta=beta, carry_key="v"), nn.Identity(),
                             norm_in_loop=False) for _ in range(25)]
    x0 = torch.randn(1, 1, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    ctx, x = ForwardContext(), x0
    p = nn.Parameter(x0.clone())
    opt = torch.optim.SGD([p], lr=eta, momentum=beta, nesterov=nesterov)
    for blk in blocks:
        x = blk(x, ctx)
        opt.zero_grad()
        (0.5 * ((p @ A) * p).sum() - (p @ b).sum()).backward()
        opt.step()
        torch.testing.assert_close(x, p.detach(), rtol=1e-13, atol=1e-13)


def test_explicit_nesterov_form_equals_sgd_form_shifted():
    """With one shared fixed β, η: readout='seed' (sublayer at x + ηβm) holds x; the SGD form
    ('sgd_lookahead') holds y = x + ηβm: the same sequence."""
    A, b = _quadratic(4, 2)
    beta, eta = 0.7, 0.2
    sgd = [IntrinsicBlock(QuadField(A, b), Nesterov(step_size=eta, beta=beta, carry_key="intrinsic_velocity"),
                          nn.Identity(), norm_in_loop=False) for _ in range(10)]
    exp = [IntrinsicBlock(QuadField(A, b), Nesterov(step_size=eta, beta=beta, carry_key="intrinsic_velocity",
                                                    form="sutskever"), nn.Identity(), norm_in_loop=False)
           for _ in range(10)]
    x0 = torch.randn(2, 3, 4, dtype=torch.float64)
    c1, c2, y, x = ForwardContext(), ForwardContext(), x0, x0
    for s, e in zip(sgd, exp):
        y, x = s(y, c1), e(x, c2)
        torch.testing.assert_close(y, x + eta * beta * c2.carry["intrinsic_velocity"], rtol=1e-12, atol=1e-12)


def _seed_nesterov_stream(model, idx):
    """The seed's NagMHA recursion (§3.1, η in the x-update) written out over the model's sublayers:
    ``m ← β_s m + S_s(LN_s(x + η_s β_s m));  x ← x + η_s m`` with each sublayer's own β_s, η_s."""
    x = model.embed(idx) + model.pos(torch.arange(idx.shape[1]))  # (B, N, D)
    m = torch.zeros_like(x)
    for layer in model.layers:
        for blk in (layer.attn, layer.mlp):
            beta, eta = blk.solver.beta(), blk.solver.step_size(0, x, x)
            h = blk.norm(x + eta * beta * m)
            m = beta * m + blk.energy.direction(h, blk.energy.prepare(h), blk.solver.precond)  # identity
            x = x + eta * m
    return model.head(model.norm(x))


def test_nesterov_default_readout_is_the_seed_recursion():
    """Issue 23: with per-sublayer β, η (the default: learned per sublayer, here set apart) the default
    read-out is the seed's recursion, sublayer l+1 evaluated at x_l + η_{l+1} β_{l+1} m_l (float64);
    the pre-issue-23 default 'sgd_lookahead' (x_l + η_l β_l m_l) is a different model."""
    torch.set_default_dtype(torch.float64)
    try:
        models = {r: _model({"kind": "nag_mha", "readout": r}, {"kind": "nag_gelu", "readout": r}, dropout=0.0)
                  for r in ("seed", "sgd_lookahead")}
        default = _model("nag_mha", "nag_gelu", dropout=0.0)
    finally:
        torch.set_default_dtype(torch.float32)
    g = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for model in (*models.values(), default):
            for i, (n, p) in enumerate(sorted(model.named_parameters())):
                if n.endswith(("beta_logit", "step_size.theta")):  # β in (0.2, 0.8), η in softplus(±1)
                    p.copy_(torch.empty_like(p).uniform_(-1.2, 1.2, generator=g))
        default.load_state_dict(models["seed"].state_dict())
    idx = torch.randint(0, 50, (2, 12), generator=torch.Generator().manual_seed(3))
    for model in (*models.values(), default):
        model.eval()
    with torch.no_grad():
        want = _seed_nesterov_stream(models["seed"], idx)
        torch.testing.assert_close(models["seed"](idx).logits, want, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(default(idx).logits, want, rtol=1e-12, atol=1e-12)
        models["sgd_lookahead"].load_state_dict(models["seed"].state_dict())
        assert (models["sgd_lookahead"](idx).logits - want).abs().max() > 1e-3


@pytest.mark.parametrize("old,new", [("iterate", "seed"), ("lookahead", "sgd_lookahead")])
def test_readout_names_before_issue_23_load_as_the_same_computation(old, new):
    cfg = load_config(RunConfig, {"model": {"block": {"attention": {"kind": "nag_mha", "readout": old},
                                                      "mlp": {"kind": "nag_gelu", "readout": old}}}})
    assert cfg.model.block.attention.readout == new and cfg.model.block.mlp.readout == new


def test_ema_velocity():
    A, b = _quadratic(3, 4)
    blocks = [IntrinsicBlock(QuadField(A, b), Momentum(step_size=0.5, beta=0.6, ema=True, carry_key="v"),
                             nn.Identity(), norm_in_loop=False) for _ in range(5)]
    x = x_ref = torch.randn(1, 2, 3, dtype=torch.float64)
    m = torch.zeros_like(x)
    ctx = ForwardContext()
    for blk in blocks:
        x = blk(x, ctx)
        m = 0.6 * m + 0.4 * (-(x_ref @ A - b))
        x_ref = x_ref + 0.5 * m
        torch.testing.assert_close(x, x_ref)


def test_learned_beta_and_step_are_parameters_with_step_size_role():
    from energyformer.train.roles import param_roles
    m = _model({"kind": "momen_mha"}, {"kind": "momen_gelu"})
    names = [n for n, _ in m.named_parameters()]
    assert sum(n.endswith("beta_logit") for n in names) == 6
    assert sum(n.endswith("step_size.theta") for n in names) == 6
    roles = param_roles(m)
    assert {roles[n] for n in names if n.endswith(("beta_logit", "step_size.theta"))} == {"step_size"}
    # initial values: beta 0.5, eta 1
    blk = m.layers[0].attn
    assert abs(float(blk.solver.beta()) - 0.5) < 1e-6
    assert abs(float(blk.solver.step_size(0, None, None)) - 1.0) < 1e-6


@pytest.mark.parametrize("attention,match", [
    ({"kind": "momen_mhaa"}, "momen_mha"),
    ({"kind": "momen_mha", "beta": 1.0}, "beta"),
    ({"kind": "momen_mha", "beta": -0.1}, "beta"),
    ({"kind": "nag_mha", "beta": 0.0}, "learn_beta"),
    ({"kind": "mha2nd1st", "temperature_init": -1.0}, "temperature_init"),
    ({"kind": "mha2nd1st", "bias_temperature_init": 0.0}, "bias_temperature_init"),
    ({"kind": "nag_mha", "readout": "x"}, "readout"),
    ({"kind": "mha2nd", "damping": "none"}, "damping"),
    ({"kind": "linear_attn", "feature_map": "relu"}, "feature_map"),
    ({"kind": "mha_tied", "form": "cosine"}, "form.*'sphere' or 'elastic'"),
    ({"kind": "mha_tied", "temperature": 0.0}, "temperature = 0.0: input should be greater than 0"),
    ({"kind": "mha2nd_lite", "bias_temperature_init": -2.0}, "bias_temperature_init = -2.0"),
    ({"kind": "momen_mha", "step_size": -1.0}, "step_size.value = -1.0: input should be greater than 0"),
    ({"kind": "momen_mha", "momentum": 0.9}, "unknown key .*momentum.* allowed keys: solver, step_size"),
])
def test_bad_options_are_one_line_errors(attention, match):
    with pytest.raises(ConfigError, match=match) as e:
        load_config(RunConfig, {"model": {"block": {"attention": attention}}})
    assert "\n" not in str(e.value).strip()


@pytest.mark.parametrize("mlp,match", [
    ({"kind": "momen_gelu", "beta": 1.0}, "model.block.mlp.solver.beta = 1.0: input should be less than 1"),
    ({"kind": "nag_gelu", "readout": "x"}, "model.block.mlp.readout = 'x': allowed values are 'seed' or 'sgd_lookahead'"),
    ({"kind": "nag_gelu", "beta": 0.0}, "learn_beta"),
])
def test_bad_ffn_momentum_options_are_one_line_errors(mlp, match):
    with pytest.raises(ConfigError, match=match) as e:
        load_config(RunConfig, {"model": {"block": {"mlp": mlp}}})
    assert "\n" not in str(e.value).strip()


@pytest.mark.parametrize("att,mlp", [
    ("mha", "gelu"), ("momen_mha", "momen_gelu"), ("nag_mha", "nag_gelu"),
    ({"kind": "nag_mha", "readout": "sgd_lookahead"}, {"kind": "nag_gelu", "readout": "sgd_lookahead"}),
    ("mha_tied", "gelu"), ("linear_attn", "gelu"), ({"kind": "linear_attn", "decay": True}, "gelu"),
    ("mha2nd1st", "gelu"), ("mha2nd1st_simple", "gelu"), ("mha2nd_lite", "gelu"), ("mha2nd", "gelu"),
])
def test_kv_cache_decoding_equals_the_full_forward(att, mlp):
    """Keys/values cached per block; the carried velocity is per token, so decoding in chunks with a
    cache gives the full forward's logits (causality of every kind included)."""
    m = _model(att, mlp, dropout=0.0).eval()
    x = torch.randint(0, 50, (2, 11), generator=torch.Generator().manual_seed(5))
    full = m(x).logits
    cache = {}
    parts = [m(x[:, :6], cache=cache).logits, m(x[:, 6:9], cache=cache, offset=6).logits,
             m(x[:, 9:], cache=cache, offset=9).logits]
    torch.testing.assert_close(torch.cat(parts, 1), full, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["mha2nd_lite", "mha2nd1st_simple", "mha2nd1st"])
def test_the_two_temperatures_start_at_their_own_inits(kind):
    """temperature_init sets the score temperature and bias_temperature_init the bias one (an outside probe's
    mutant that gave the bias the score's init survived)."""
    m = _model({"kind": kind, "temperature_init": 2.0, "bias_temperature_init": 5.0}, "gelu", dropout=0.0, layers=1)
    temps = {n: float(t().detach().mean()) for n, t in m.layers[0].attn.energy.named_modules() if n.endswith(("temp_score",
                                                                                                    "temp_bias"))}
    assert temps and all(math.isclose(v, 2.0 if n.endswith("temp_score") else 5.0, rel_tol=1e-5)
                         for n, v in temps.items()), temps
