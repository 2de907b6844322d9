"""``train.compile``: a compiled training step of the Sudoku Hyper-SET (10 iterations) and of a full-CEM LM
(10 layers) is one graph, each frame compiled fewer times than Dynamo's recompile limit (train/compiling.py).

On an H100 with torch 2.11 both models hit ``recompile_limit`` (8): their CUDA ``auto`` paths ask
``triton_available()``, whose ``functools.cache`` made Dynamo trace ``importlib.util.find_spec``, which torch
before 2.13 cannot trace — a graph break inside every block, and the frames resumed after it were compiled
again per layer (CEM: an ``id(precond)`` cache key) or per sublayer type and iteration (Hyper-SET). On the CPU
the ``auto`` paths do not ask, and torch 2.13 folds ``find_spec`` to a constant, so the tests put both back:
the energies' path choices ask ``triton_available()`` as on CUDA (and still take the CPU path), and
``find_spec`` is a function Dynamo must not trace. The backend records the compiles and runs the graphs
eagerly (graph breaks and guards are Dynamo's, whatever the backend).
"""

from __future__ import annotations

import types

import pytest
import torch
import torch._dynamo as dynamo
from torch._dynamo.utils import counters
from torch._guards import CompileContext

from energyformer.energies import cem_kernel, hyperspherical, interaction

LAYERS = 10  # more than the recompile limit (8): a per-instance or per-iteration recompile shows


@pytest.fixture
def as_on_cuda(monkeypatch):
    """The path choices of CEM attention (``_use_kernel``) and the bi-softmax (``auto_kernel``) ask
    ``triton_available()`` as they do on CUDA, then choose as on the CPU; ``find_spec`` untraceable as for
    torch < 2.13's Dynamo (a graph break where it is traced)."""
    find_spec = cem_kernel.importlib.util.find_spec
    untraceable = torch.compiler.disable(lambda name: find_spec(name))
    monkeypatch.setattr(cem_kernel, "importlib", types.SimpleNamespace(util=types.SimpleNamespace(
        find_spec=untraceable)))
    for cls, name, mod in ((interaction.InteractionEnergy, "_use_kernel", interaction),
                           (hyperspherical.BiSoftmaxAttentionEnergy, "auto_kernel", hyperspherical)):
        choose = getattr(cls, name)

        def asks(self, t, choose=choose, mod=mod):
            mod.triton_available()
            return choose(self, t)

        monkeypatch.setattr(cls, name, asks)


def compiled_steps(model: torch.nn.Module, idx: torch.Tensor, targets: torch.Tensor, steps: int = 2):
    """``steps`` training steps (forward, loss, backward, AdamW) of ``torch.compile(model)`` as the trainer runs
    them; returns the compile ids of the graphs Dynamo made (frame, recompile of that frame)."""
    ids = []

    def backend(gm, example_inputs):
        ids.append(CompileContext.current_compile_id())
        return gm.forward

    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    cm = torch.compile(model, backend=backend)
    for _ in range(steps):
        logits = cm(idx).logits
        loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return ids


@pytest.fixture
def fresh_dynamo(monkeypatch):
    dynamo.reset()
    counters.clear()
    monkeypatch.setattr(dynamo.config, "fail_on_recompile_limit_hit", True, raising=False)
    yield
    dynamo.reset()


def hyperset():
    from energyformer.experiment import load_run_config
    from energyformer.models import MODELS
    from energyformer.tasks.sudoku import CLASSES, VOCAB

    cfg = load_run_config("hyperset/sudoku_hyperset", ["model.dim=16", "model.heads=2",
                                                        f"model.iterations={LAYERS}"])
    torch.manual_seed(0)
    m = MODELS.build(cfg.model, vocab_size=VOCAB, n_out=CLASSES, causal=False)
    g = torch.Generator().manual_seed(0)
    return m, torch.randint(0, VOCAB, (2, 81), generator=g), torch.randint(0, CLASSES, (2, 81), generator=g)


def full_cem():
    from energyformer.models import CausalLM, ModelConfig

    cfg = ModelConfig.model_validate(dict(vocab_size=32, dim=16, heads=2, n_layers=LAYERS, mlp_hidden=32,
                                          max_seq_len=8, block={"attention": "cem", "mlp": "cem"}))
    torch.manual_seed(0)
    m = CausalLM(cfg)
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, 32, (2, 9), generator=g)
    return m, idx[:, :-1], idx[:, 1:]


@pytest.mark.parametrize("build", [hyperset, full_cem], ids=["hyperset", "full_cem"])
def test_compiled_training_step_is_one_graph(build, as_on_cuda, fresh_dynamo):
    model, idx, targets = build()
    ids = compiled_steps(model.train(), idx, targets)
    assert not counters["graph_break"], dict(counters["graph_break"])
    assert len(ids) == 1, ids  # one frame, compiled once, for every layer, iteration and step
    assert max(c.frame_compile_id for c in ids) + 1 < dynamo.config.recompile_limit


def test_a_break_inside_a_cem_block_is_not_recompiled_per_layer(monkeypatch, fresh_dynamo):
    """Should a block break its graph again (another torch, another path), the frame Dynamo resumes after it
    serves every layer: no guard on a layer's own modules (the per-call plan cache keyed by ``id(precond)``
    was one, ``interaction_paths.plan_id``)."""
    choose = interaction.InteractionEnergy._use_kernel

    def breaks(self, k):
        dynamo.graph_break()
        return choose(self, k)

    monkeypatch.setattr(interaction.InteractionEnergy, "_use_kernel", breaks)
    model, idx, targets = full_cem()
    ids = compiled_steps(model.train(), idx, targets)
    per_frame: dict[int, int] = {}
    for c in ids:
        per_frame[c.frame_id] = max(per_frame.get(c.frame_id, 0), c.frame_compile_id + 1)
    assert counters["graph_break"]  # the break is there
    assert max(per_frame.values()) <= 2, per_frame  # attention and MLP blocks: two classes, one frame each
