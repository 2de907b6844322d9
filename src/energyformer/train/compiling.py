"""``train.compile``: torch.compile for training, and the module evaluation runs.

Values (``TrainConfig.compile``):

* ``false`` — eager (the default);
* ``true`` or ``'default'`` — Inductor: chains of pointwise ops and reductions fused into Triton (CUDA) or
  C++ (CPU) kernels, the launches left to the host;
* ``'reduce-overhead'`` — the same kernels, and every compiled forward and backward replayed as CUDA graphs
  (PyTorch's CUDA graph trees): the host launches one graph per compiled region instead of each kernel.
  For host-bound steps — a small layer iterated many times at a small batch, e.g. the Sudoku models at
  d 768, L 24, batch 64, whose eager step kept an H100 busy 43-57 % of the time
  (``docs/results/hyperset/gpu_h100/gpu_profile_83f4ef8.md``);
* ``'max-autotune'`` — Inductor with GEMM autotuning and CUDA graphs (long first steps);
* ``'max-autotune-no-cudagraphs'`` — the autotuning without graphs.

CUDA graphs exist on CUDA devices only: on any other device the graph modes compile as their no-graph forms
(``'reduce-overhead'`` → ``'default'``, ``'max-autotune'`` → ``'max-autotune-no-cudagraphs'``), and the log
says so once. Evaluation always runs the no-graph form of the mode, compiled separately: an ``eval_fn`` calls
the model on batches whose shapes vary and may keep one call's outputs while it makes the next call, which a
replayed graph would overwrite (CUDA graph trees record a graph per shape and raise when an overwritten
output is read). Training needs no step marking: a graph tree starts a new iteration at each call of the
compiled model once the previous call's backward has run, which is the trainer's loop (one forward and one
backward per micro-batch).

An energy without a closed-form ``grad`` (EqT's ``coherence_conf`` and ``coherence_consist``, its ``mlp``
read-out, a user's energy-only subclass) takes ``Energy.grad``'s autograd fallback, which in train mode
differentiates with ``create_graph=True`` so that the parameters train through the gradient: a double backward,
which AOTAutograd's compiled graphs refuse ("does not currently support double backward"). The fallback is
``torch.compiler.disable``d (``core.energy._autograd_grad``): it runs eagerly, a graph break at each call, and
trains as eager does (``tests/train/test_train_compile.py``); energies with a closed form keep one graph.

The optimiser, gradient clipping, the learning-rate schedule and the host's divergence checks stay eager
around the compiled model.

One graph per model: a graph break inside a block costs far more than the break itself, because Dynamo then
compiles the frame it resumes after the break on its own, and guards it on the block it ran for: a frame
compiled again for each of a model's layers (or each sublayer type and iteration) passes Dynamo's
``recompile_limit`` (8) at the 9th and runs eagerly from then on. On one H100 with torch 2.11 that made
``reduce-overhead`` slower than eager: Hyper-SET (d 768, L 24) 0.30x the looped transformer where eager
captured as one CUDA graph gave 1.07x, full CEM T=1 (12 layers) 0.54x Llama instead of 0.65x. The break was
``energies.cem_kernel.triton_available()``, asked by CUDA's ``auto`` paths (CEM attention, the bi-softmax):
its ``functools.cache`` made Dynamo trace ``importlib.util.find_spec``, which torch before 2.13 cannot trace
(2.13 folds it to a constant); it is now a plain read of a flag set at import. What made CEM's resumed frame
per layer, an ``id(precond)`` key of the per-call plan cache, is gone while tracing
(``energies.interaction_paths.plan_id``), so a break in a CEM block would no longer multiply. A break inside
a Hyper-SET iteration still would (the step-size memo indexes its per-iteration table by the iteration).
``tests/train/test_compile_graph_breaks.py`` checks both models' compiled training step for breaks and
recompiles on the CPU, with the CUDA path choices and the older ``find_spec`` put back. To look at a model:
``TORCH_LOGS=graph_breaks,recompiles``, or ``torch._dynamo.explain(model)(inputs)``; raising
``torch._dynamo.config.recompile_limit`` only hides a new break's cost, it is not a fix. Since the fix (one H100,
torch 2.11, code 855edd0; docs/results/*/gpu_h100/*_compiled_855edd0.md): Hyper-SET 1.00x [0.99, 1.00] the compiled
looped transformer, full CEM T=1 0.73x [0.72, 0.73] compiled Llama at N 1,024 (0.67x as graphed eager steps).
"""

from __future__ import annotations

import logging

import torch
from torch import nn

log = logging.getLogger(__name__)

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
# each mode's form without CUDA graphs
NO_GRAPHS = {"default": "default", "reduce-overhead": "default", "max-autotune": "max-autotune-no-cudagraphs",
             "max-autotune-no-cudagraphs": "max-autotune-no-cudagraphs"}


def compile_mode(value: bool | str) -> str | None:
    """The torch.compile mode of a ``train.compile`` value (``None``: eager)."""
    if value is False:
        return None
    return "default" if value is True else str(value)


def uses_cuda_graphs(mode: str | None) -> bool:
    return mode is not None and NO_GRAPHS[mode] != mode


def effective_mode(value: bool | str, device: torch.device) -> str | None:
    """The mode ``train.compile = value`` compiles in on ``device``: a graph mode's no-graph form off CUDA."""
    mode = compile_mode(value)
    return NO_GRAPHS[mode] if uses_cuda_graphs(mode) and device.type != "cuda" else mode


def compile_for_training(model: nn.Module, value: bool | str, device: torch.device) -> tuple[nn.Module, nn.Module]:
    """(module to train, module to evaluate) for ``train.compile = value`` on ``device``: both ``model`` itself
    when eager; else ``torch.compile(model, mode=…)`` for training (the graph modes only on CUDA) and the same
    module when the mode uses no CUDA graphs, or a second compile in the mode's no-graph form for evaluation."""
    mode = effective_mode(value, device)
    if mode is None:
        return model, model
    if mode != compile_mode(value):
        log.info("train.compile = %r: CUDA graphs need a CUDA device; compiling for %s as %r",
                 compile_mode(value), device.type, mode)
    train = torch.compile(model, mode=mode)
    if not uses_cuda_graphs(mode):
        return train, train  # type: ignore[return-value]
    return train, torch.compile(model, mode=NO_GRAPHS[mode])  # type: ignore[return-value]
