"""Step-size modules: values, parameters, the index they receive (ctx.iteration × steps + t),
per-iteration range errors, and the network's zero initialisation."""

import copy

import pytest
import torch
from core_toys import FixedTarget

from energyformer.core import (
    EnergyBlock, FixedStepSize, ForwardContext, GradientDescent, LearnedStepSize, NetworkStepSize,
    PerIterationStepSize, StepSize, make_step_size,
)
from energyformer.core.stepsize import FixedStepSizeConfig, NetworkStepSizeConfig
from energyformer.utils.validate import ConfigError

DT = torch.float64


class Recording(StepSize):
    def __init__(self):
        super().__init__()
        self.seen = []

    def forward(self, index, x0, x):
        self.seen.append(index)
        return 0.1


def _block(step_size, steps=2, seed=0):
    c = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(seed), dtype=DT)
    return EnergyBlock(FixedTarget(c).to(DT), GradientDescent(step_size=step_size), steps=steps).to(DT)


def _x(seed=1):
    return torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(seed), dtype=DT)


def test_index_is_iteration_times_steps_plus_step():
    rec = Recording()
    blk = _block(rec, steps=3)
    blk(_x(), ForwardContext(iteration=2))
    assert rec.seen == [6, 7, 8]
    rec.seen.clear()
    blk(_x(), ForwardContext(iteration=1, steps=5))  # a test-time budget changes the stride
    assert rec.seen == [5, 6, 7, 8, 9]
    rec.seen.clear()
    blk(_x(), ForwardContext(iteration=1, steps=5), steps=2)  # steps= wins over ctx.steps
    assert rec.seen == [2, 3]


def test_fixed_and_learned():
    assert FixedStepSize(0.25)(3, None, None) == 0.25
    s = LearnedStepSize(0.3).to(DT)
    assert float(s(0, None, None).detach()) == pytest.approx(0.3, rel=1e-6)
    blk = _block(s)
    blk(_x()).sum().backward()
    assert s.theta.grad is not None and s.theta.grad.abs() > 0
    with pytest.raises(ValueError, match="step_size"):
        FixedStepSize(0.0)


def test_per_iteration_uses_one_value_per_index_and_rejects_larger_indices():
    s = PerIterationStepSize(max_steps=6, init=0.2).to(DT)
    blk = _block(s, steps=2)
    blk(_x(), ForwardContext(iteration=1)).sum().backward()  # indices 2, 3
    used = (s.theta.grad != 0).nonzero().flatten().tolist()
    assert used == [2, 3]
    with torch.no_grad():
        s.theta[2] += 1.0  # only index 2 changes the first step of iteration 1
    y1 = blk(_x(), ForwardContext(iteration=1))
    y0 = blk(_x(), ForwardContext(iteration=0))
    assert not torch.allclose(y0, y1)
    with pytest.raises(ConfigError, match=r"max_steps = 6: step index 7 \(iteration 3 x 2 steps \+ step 1\)"):
        blk(_x(), ForwardContext(iteration=3))
    # the first index past the table, at the launch check and at a direct call (each an IndexError with ">")
    with pytest.raises(ConfigError, match=r"max_steps = 6: step index 6 \(iteration 6 x 1 steps \+ step 0\)"):
        _block(s, steps=1)(_x(), ForwardContext(iteration=6))
    with pytest.raises(ConfigError, match=r"max_steps = 6: step index 6 "):
        s(6, _x(), _x())


def test_network_step_size_shapes_conditions_and_index_dependence():
    x0, x = _x(1), _x(2)
    for output, shape in (("scalar", (2, 3, 1)), ("vector", (2, 3, 4))):
        net = NetworkStepSize(4, embed_dim=8, output=output, zero_init="none").to(DT)
        assert net(0, x0, x).shape == shape
    torch.manual_seed(0)
    on_x0 = NetworkStepSize(4, embed_dim=8, condition="x0", zero_init="none").to(DT)
    torch.manual_seed(0)
    on_it = NetworkStepSize(4, embed_dim=8, condition="iterate", zero_init="none").to(DT)
    torch.testing.assert_close(on_x0(3, x0, x), on_it(3, x0, x0))  # same weights, same state
    assert not torch.allclose(on_x0(3, x0, x), on_it(3, x0, x))
    assert not torch.allclose(on_x0(3, x0, x), on_x0(4, x0, x))  # depends on the index
    assert NetworkStepSize.exact is False


@pytest.mark.parametrize("output,base", [("vector", 0.0), ("scalar", 0.25)])
def test_network_table_for_the_model_input_is_the_per_index_network(output, base):
    """condition 'input': one table of every iteration's step sizes per forward (values and gradients equal
    to the network evaluated index by index); an index past the table is computed on its own."""
    torch.manual_seed(0)
    net = NetworkStepSize(4, embed_dim=8, condition="input", output=output, zero_init="none", base=base,
                          groups=2).to(DT)
    e = _x(3).requires_grad_(True)
    ctx = ForwardContext(iterations=3, embedded=e)
    got = [net.value(t, _x(1), _x(2), ctx, g) for t in (0, 1, 2, 3) for g in (0, 1)]
    assert sum(1 for k in ctx.memo if k[1] == "table") == 1 and (id(net), 3, True) in ctx.memo
    want = [net.net(t, e).chunk(2, dim=-1)[g] for t in (0, 1, 2, 3) for g in (0, 1)]
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    w = torch.randn(len(got), *got[0].shape, generator=torch.Generator().manual_seed(4), dtype=DT)
    ga = torch.autograd.grad(sum((a * wi).sum() for a, wi in zip(got, w)), [e, net.time_in.weight, net.out.weight])
    gb = torch.autograd.grad(sum((b * wi).sum() for b, wi in zip(want, w)), [e, net.time_in.weight, net.out.weight])
    for a, b in zip(ga, gb):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    other = ForwardContext(iterations=3, embedded=_x(5))
    assert not torch.allclose(net.value(1, _x(1), _x(2), other, 0), got[2])  # a new forward, a new table


@pytest.mark.parametrize("condition", ["input", "iterate"])
def test_network_memo_built_under_no_grad_never_reaches_a_tracked_step(condition):
    """``backward: truncated`` runs the first steps under no_grad: the values (and the input's table) they build
    have no graph. A tracked step of the same forward must compute its own, or the network's gradient is lost
    without an error (it was, through the table)."""
    torch.manual_seed(0)
    net = NetworkStepSize(4, embed_dim=8, condition=condition, zero_init="none", groups=2).to(DT)
    e = _x(3)
    ctx = ForwardContext(iterations=3, embedded=e)
    x0, x = (e, e) if condition == "input" else (_x(1), _x(1))
    t = 2 if condition == "input" else 0  # input: another index from the same table; iterate: the same key
    with torch.no_grad():
        untracked = net.value(0, x0, x, ctx, 0)
    tracked = net.value(t, x0, x, ctx, 1)
    assert untracked.grad_fn is None and tracked.grad_fn is not None
    (g,) = torch.autograd.grad(tracked.sum(), net.out.weight)
    (want,) = torch.autograd.grad(net.net(t, e if condition == "input" else x).chunk(2, dim=-1)[1].sum(),
                                  net.out.weight)
    torch.testing.assert_close(g, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("zero_init", ["output", "all"])
def test_zero_initialised_network_first_forward_takes_zero_steps(zero_init):
    net = NetworkStepSize(4, embed_dim=8, zero_init=zero_init).to(DT)
    blk = _block(net, steps=3)
    x = _x().requires_grad_(True)
    y = blk(x)
    assert torch.equal(y, x)  # eta = 0 exactly: the block is the identity at initialisation
    y.pow(2).sum().backward(retain_graph=True)
    assert net.out.weight.grad.abs().sum() > 0  # ... and the output layer learns
    # 'all': the index branch can never learn (GELU(0) = 0 and W_2 = 0 block each other)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        blk(_x(), ForwardContext(iteration=1)).pow(2).sum().backward()
        opt.step()
    dead = net.time_in.weight.grad.abs().sum() == 0 and net.time_out.weight.grad.abs().sum() == 0
    assert dead == (zero_init == "all")


def test_network_base_and_config_validation():
    net = NetworkStepSize(4, embed_dim=8, base=0.5).to(DT)
    torch.testing.assert_close(net(0, _x(), _x()), torch.full((2, 3, 4), 0.5, dtype=DT))
    with pytest.raises(ConfigError, match="embed_dim"):
        NetworkStepSizeConfig(embed_dim=7)
    with pytest.raises(ConfigError, match="zero_init"):
        NetworkStepSize(4, zero_init="yes")


def test_make_step_size_from_numbers_modules_and_configs():
    assert isinstance(make_step_size(0.5), FixedStepSize)
    assert isinstance(make_step_size(0.5, learn=True), LearnedStepSize)
    assert isinstance(make_step_size(FixedStepSizeConfig(value=0.2)), FixedStepSize)
    assert isinstance(make_step_size(NetworkStepSizeConfig(), dim=4), NetworkStepSize)
    with pytest.raises(ConfigError, match="needs the model width"):
        make_step_size(NetworkStepSizeConfig())
    with pytest.raises(ConfigError, match="step_size = 'big'"):
        make_step_size("big")


@pytest.mark.parametrize("state_norm", [False, True])
def test_network_table_runs_in_the_autocast_dtype(state_norm):
    """Under bf16 autocast the (steps, B, N, D) sum, its GELU and their backward stay bf16 (the out-projection
    reads bf16 anyway; issue 20's bytes), and the table matches the float32 one to bf16 rounding."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Log(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.f32 = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(t, torch.Tensor) and t.dtype == torch.float32 and t.dim() == 4:
                    self.f32.append(func.overloadpacket.__name__)
            return out

    torch.manual_seed(0)
    net = NetworkStepSize(8, embed_dim=16, condition="input", output="vector", zero_init="none", groups=2,
                          state_norm=state_norm)
    s = torch.randn(2, 5, 8).requires_grad_(True)
    want = torch.stack([torch.cat(r, -1) for r in net.table(6, s)])  # (6, 2, 5, 16) float32
    with Log() as log, torch.autocast("cpu", torch.bfloat16):
        got = torch.stack([torch.cat(r, -1) for r in net.table(6, s)])
        got.sum().backward()
    assert got.dtype == torch.bfloat16 and s.grad.dtype == torch.float32
    assert log.f32 == [], log.f32  # no float32 tensor of the table's rank, forward or backward
    torch.testing.assert_close(got.float(), want, rtol=0.03, atol=0.03 * float(want.detach().abs().max()))
    with torch.autocast("cpu", torch.bfloat16):  # float64 is left alone by autocast, and here too
        net64 = net.double()
        assert net64.table(2, s.double())[0][0].dtype == torch.float64


def _hyperset_model(iterations, dtype=DT):
    """A tiny images/hyperset-style model: one Hyper-SET layer iterated, α and γ from one network on the layer
    input (``condition: layer``, ``groups: 2``)."""
    from energyformer.models import MODELS, ModelConfig

    ss = {"kind": "network", "condition": "layer", "groups": 2, "embed_dim": 8, "zero_init": "none"}
    block = {"attention": {"kind": "hyperset", "step_size": ss}, "mlp": {"kind": "hyperset"}}
    cfg = ModelConfig.model_validate(dict(vocab_size=10, dim=16, heads=2, n_layers=1, iterations=iterations,
                                          positions="learned", max_seq_len=9, causal=False, block=block))
    torch.manual_seed(0)
    return MODELS.build(cfg, n_out=9).to(dtype)


def _op_counts(model, idx):
    """Non-view aten ops of one forward and of its backward, by name."""
    import collections

    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = collections.Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if not func.is_view:
                self.ops[func.overloadpacket.__name__] += 1
            return func(*args, **(kwargs or {}))

    with Count() as fwd:
        out = model(idx)
    with Count() as bwd:
        out.logits.sum().backward()
    return fwd.ops, bwd.ops


def test_network_time_embedding_runs_once_per_forward_not_per_iteration():
    """condition 'layer' (every images/hyperset config): the state changes per iteration, but tau(t) =
    W_2 GELU(W_1 sin-emb(t)) depends on the weights and the index only. Old: recomputed in every iteration — per
    iteration one sin, cos and cat, two addmm and a GELU forward, a GELU backward and the Linears' weight gradients
    (probe AA, F3). Now one (L, E) table per forward: what grows per iteration is the state's part only."""
    idx = torch.randint(0, 10, (2, 9), generator=torch.Generator().manual_seed(0))
    counts = {it: _op_counts(_hyperset_model(it), idx) for it in (2, 4)}

    def per_iteration(k, name):
        return (counts[4][k][name] - counts[2][k][name]) / 2

    assert per_iteration(0, "sin") == per_iteration(0, "cos") == per_iteration(0, "cat") == 0
    assert per_iteration(0, "addmm") == 2  # the out-projection's two groups (was 4: + time_in, time_out)
    assert per_iteration(0, "gelu") == 1 and per_iteration(1, "gelu_backward") == 1  # the state's GELU (was 2)
    assert counts[4][0]["sin"] == 1  # one table per forward


def test_network_time_embedding_table_equals_the_per_iteration_network(monkeypatch):
    """The table's rows give the outputs and gradients of the per-index network (float64 to rounding), for a
    model and for two steps per iteration (indices past the first table); the time Linears run once per forward
    (old: once per index), and a reused ctx after an in-place weight update (an optimiser step) never reads the
    old weights' tau."""
    from energyformer.core.stepsize import NetworkStepSize as Net

    idx = torch.randint(0, 10, (2, 9), generator=torch.Generator().manual_seed(0))

    def run():
        m = _hyperset_model(3)
        out = m(idx).logits
        w = torch.randn(out.shape, generator=torch.Generator().manual_seed(1), dtype=DT)
        (out * w).sum().backward()
        return out.detach(), [p.grad for p in m.parameters()]

    got, got_g = run()
    with monkeypatch.context() as m:
        m.setattr(Net, "_tau_row", lambda self, index, ctx: None, raising=False)  # the per-index form
        want, want_g = run()
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    for a, b in zip(got_g, want_g):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)

    torch.manual_seed(0)
    net = Net(4, embed_dim=8, condition="layer", zero_init="none", groups=2).to(DT)
    calls = []
    net.time_in.register_forward_hook(lambda *a: calls.append(1))
    ctx = ForwardContext(iterations=2)
    states = [_x(t) for t in range(4)]
    got = []
    for t, s in enumerate(states):  # 2 iterations x 2 steps: indices 0 … 3, a new layer input each
        ctx.layer_input = s
        got.append(net.value(t, s, s, ctx, 1))
    assert len(calls) == 2  # the table of 2, then one of 4 for index 2 (old: 4 calls, one per index)
    for t, (a, s) in enumerate(zip(got, states)):
        torch.testing.assert_close(a, net.net(t, s).chunk(2, dim=-1)[1], rtol=1e-12, atol=1e-12)
    ga = torch.autograd.grad(sum(a.sum() for a in got), [net.time_in.weight, net.time_out.bias])
    gb = torch.autograd.grad(sum(net.net(t, s).chunk(2, -1)[1].sum() for t, s in enumerate(states)),
                             [net.time_in.weight, net.time_out.bias])
    for a, b in zip(ga, gb):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    with torch.no_grad():
        net.time_out.bias.add_(0.5)  # in place, as an optimiser step
    ctx.layer_input = s = _x(9)
    torch.testing.assert_close(net.value(1, s, s, ctx, 0), net.net(1, s).chunk(2, dim=-1)[0], rtol=1e-12, atol=0)


@pytest.mark.parametrize("rms", [1e-4, 1e-3, 2e-2, 1.0])
def test_network_state_norm_is_one_function_in_every_dtype(rms):
    """The step network's state RMSNorm had torch's default eps, the dtype's machine epsilon, so a float32 or bf16
    network computed another η than its float64 reference at a small state (75 % off at RMS 1e-4, 7 % at 1e-3;
    probe AD). Now float32's epsilon in every dtype (torch's default in the float32 training it was used in)."""
    torch.manual_seed(0)
    net = NetworkStepSize(16, embed_dim=8, condition="x0", output="vector", zero_init="none", state_norm=True).double()
    x0 = rms * torch.randn(2, 5, 16, dtype=torch.float64)
    ref = net(3, x0, x0)
    for dtype, tol in ((torch.float32, 64 * torch.finfo(torch.float32).eps), (torch.bfloat16, 0.05)):
        got = copy.deepcopy(net).to(dtype)(3, x0.to(dtype), x0.to(dtype)).double()
        assert ((got - ref).norm() / ref.norm()).item() < tol, (dtype, rms)
