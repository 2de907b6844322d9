"""``train.compile``: the modes, which module trains and which evaluates, and a compiled run equal to eager.

(CUDA graphs themselves — ``'reduce-overhead'`` on a GPU — are tested in ``test_cuda.py``.)
"""

from __future__ import annotations

import logging

import pytest
import torch
from train_toys import ToyMLP, build

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
