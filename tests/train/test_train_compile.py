"""``train.compile``: the modes, which module trains and which evaluates, and a compiled run equal to eager
(also for energies whose gradient is autograd's: a custom one and EqT's default).

(CUDA graphs themselves — ``'reduce-overhead'`` on a GPU — are tested in ``test_cuda.py``.)
"""

from __future__ import annotations

import logging
import math

import pytest
import torch
from torch._dynamo.utils import counters
from train_toys import ToyMLP, build

from energyformer.core import Energy, EnergyBlock, GradientDescent
from energyformer.train import compiling
from energyformer.train.checkpoint import load_model_weights
from energyformer.train.compiling import COMPILE_MODES, compile_for_training


@pytest.fixture
def calls(monkeypatch):
    """torch.compile recorded instead of run: (module, mode) per call, the module itself returned."""
    seen: list[tuple[torch.nn.Module, str | None]] = []

    def fake(model, mode=None):
        seen.append((model, mode))
        return model

    monkeypatch.setattr(compiling.torch, "compile", fake)
    return seen


@pytest.mark.parametrize("value, cuda, train_mode, eval_mode", [
    (True, True, "default", None),
    ("default", False, "default", None),
    ("reduce-overhead", True, "reduce-overhead", "default"),
    ("reduce-overhead", False, "default", None),
    ("max-autotune", True, "max-autotune", "max-autotune-no-cudagraphs"),
    ("max-autotune", False, "max-autotune-no-cudagraphs", None),
    ("max-autotune-no-cudagraphs", True, "max-autotune-no-cudagraphs", None),
])
def test_modes_train_and_evaluate(calls, value, cuda, train_mode, eval_mode, caplog):
    model = ToyMLP()
    with caplog.at_level(logging.INFO, logger=compiling.__name__):
        tr, ev = compile_for_training(model, value, torch.device("cuda" if cuda else "cpu"))
    assert calls[0] == (model, train_mode)
    if eval_mode is None:  # no CUDA graphs: evaluation runs the very module that trains
        assert len(calls) == 1 and ev is tr
    else:  # a second compile, without graphs, for evaluation
        assert calls[1] == (model, eval_mode)
    said = "CUDA graphs need a CUDA device" in caplog.text
    assert said == (not cuda and value in ("reduce-overhead", "max-autotune"))


def test_eager_compiles_nothing(calls):
    model = ToyMLP()
    assert compile_for_training(model, False, torch.device("cpu")) == (model, model) and not calls


def test_every_mode_is_a_torch_mode():
    """The modes offered are the ones this torch's compile takes (a renamed mode fails here, not in a run)."""
    from torch._inductor import list_mode_options

    for mode in COMPILE_MODES:
        list_mode_options(mode)  # raises for an unknown mode


def test_compiled_run_equals_eager(tmp_path):
    """Inductor on the CPU: the same losses, evaluation and a checkpoint an eager model loads."""
    runs = {}
    for value in (False, "reduce-overhead"):  # the graph mode compiles as 'default' on the CPU
        tr = build(tmp_path / str(value), steps=4, dropout=0.0, with_eval=True, eval_every=2, compile=value)
        final = tr.fit()
        assert isinstance(tr._train_model, torch._dynamo.eval_frame.OptimizedModule) == bool(value)
        runs[value] = tr.loss_history, final["eval/loss"], tr.last_checkpoint
    (le, ee, _), (lc, ec, ckpt) = runs[False], runs["reduce-overhead"]
    assert lc == pytest.approx(le, rel=1e-5) and ec == pytest.approx(ee, rel=1e-5)
    fresh = ToyMLP(dropout=0.0)
    load_model_weights(fresh, ckpt)
    x = torch.randn(3, 8)
    eager_ckpt = ToyMLP(dropout=0.0)
    load_model_weights(eager_ckpt, runs[False][2])
    torch.testing.assert_close(fresh(x), eager_ckpt(x), rtol=1e-4, atol=1e-6)


# ---------------------------------------------------------------- energies without a closed-form gradient
class _LogCosh(Energy):
    """E_i = Σ_k log cosh((W x_i)_k) − h_i·x_i with a trained W; no ``grad``: the autograd fallback."""

    def __init__(self, dim: int = 4) -> None:
        super().__init__()
        self.W = torch.nn.Parameter(torch.randn(dim, dim, generator=torch.Generator().manual_seed(1)) / dim)

    def energy(self, x, state):
        z = x @ self.W.T
        return (z.abs() + torch.nn.functional.softplus(-2 * z.abs()) - math.log(2.0)).sum(-1) - (x * state).sum(-1)


class _LogCoshClosed(_LogCosh):
    """The same energy with its closed-form gradient ``Wᵀ tanh(W x_i) − h_i``."""

    def grad(self, x, state):
        return torch.tanh(x @ self.W.T) @ self.W - state


class _TwoBlocks(torch.nn.Module):
    """A closed-form block then a fallback block, each 2 gradient steps, between two linear maps."""

    def __init__(self, dim: int = 4) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.inp, self.out = torch.nn.Linear(dim, dim), torch.nn.Linear(dim, 1)
        self.closed = EnergyBlock(_LogCoshClosed(dim), GradientDescent(step_size=0.3), steps=2)
        self.fallback = EnergyBlock(_LogCosh(dim), GradientDescent(step_size=0.3), steps=2)

    def forward(self, x):
        return self.out(self.fallback(self.closed(self.inp(x))))


def _train(model: torch.nn.Module, step_model, batches) -> list[float]:
    """One AdamW step per batch (``batches``: callables of the stepped module -> loss); the losses."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for batch in batches:
        loss = batch(step_model)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
    return losses


@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


def test_autograd_fallback_energy_trains_compiled(fresh_dynamo):
    """An energy without a closed-form ``grad`` trains under torch.compile (Inductor, CPU) as in eager; the
    closed-form block beside it keeps its graph. Before, ``Energy.grad``'s ``autograd.grad(create_graph=True)``
    was traced into the compiled forward and the first backward raised "torch.compile with aot_autograd does
    not currently support double backward"."""
    x = torch.randn(3, 5, 4, generator=torch.Generator().manual_seed(2))
    batches = [lambda m, k=k: m(x * (1 + k)).square().mean() for k in range(2)]
    eager = _TwoBlocks()
    le = _train(eager, eager, batches)
    model = _TwoBlocks()
    lc = _train(model, torch.compile(model), batches)
    assert lc == pytest.approx(le, rel=1e-5)
    for a, b in zip(eager.parameters(), model.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    breaks = list(counters["graph_break"])
    assert breaks and all("_autograd_grad" in r for r in breaks), breaks  # only the fallback's eager call


def test_eqt_with_the_confidence_term_trains_compiled(fresh_dynamo):
    """EqT's default energy (rev + mask + conf; ``coherence_conf`` has no closed-form gradient) trains compiled
    and equals eager. Before, ``train.compile = true`` failed at the first backward with "torch.compile with
    aot_autograd does not currently support double backward" (it trained only with ``weights.conf = 0``).

    The backend is ``aot_eager``: AOTAutograd, where the error came from, without Inductor's code generation
    (EqT's mask term breaks the graph at a ``nonzero``, and Inductor compiling each piece took 73 s here, not
    15 s); Inductor itself runs the autograd fallback in the test above."""
    from energyformer.experiment import load_run_config
    from energyformer.models import MODELS

    cfg = load_run_config("eqt/eqt", ["model.dim=8", "model.n_layers=1", "model.heads=2", "model.refine.steps=1",
                                      "model.refine.window=4", "model.refine.rev_layers=1"])
    assert cfg.model.refine.weights["conf"] > 0

    def build():
        torch.manual_seed(0)
        return MODELS.build(cfg.model, vocab_size=2, n_out=2, causal=True).train()

    g = torch.Generator().manual_seed(0)
    idx, tgt = torch.randint(0, 2, (2, 6), generator=g), torch.randint(0, 2, (2, 6), generator=g)

    def batch(m, seed):
        torch.manual_seed(seed)  # the masked-term sample
        out = m(idx)
        ce = torch.nn.functional.cross_entropy(out.logits.float().flatten(0, 1), tgt.flatten())
        return ce + sum(out.aux_losses.values())

    batches = [lambda m, s=s: batch(m, s) for s in range(2)]
    eager = build()
    le = _train(eager, eager, batches)
    model = build()
    lc = _train(model, torch.compile(model, backend="aot_eager"), batches)
    assert lc == pytest.approx(le, rel=1e-5)
    for a, b in zip(eager.parameters(), model.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6)
