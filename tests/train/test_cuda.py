"""CUDA smoke tests (``pytest -m cuda``; skipped without a GPU).

Every model kind trains 3 steps on CUDA in fp32 and in bf16 autocast, and its loss at step 1 (same seed,
same weights, same batch: every random draw of the data and the models is on a CPU generator) matches
the CPU fp32 loss; dropout is set to 0 so no device-side randomness enters. Then evaluation, generation
(KV cache against none) and exact resume on CUDA.
"""
from __future__ import annotations

import math
import shutil
import sys
from pathlib import Path

import pytest
import torch

from energyformer.cli import main
from energyformer.experiment import load_run_config, load_trained, run_experiment
from energyformer.train import checkpoint_step

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from toy_configs import CUDA_KINDS as KINDS  # noqa: E402
from toy_configs import toy_overrides  # noqa: E402

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

#: relative tolerance of the step-1 loss against CPU fp32 (TF32 is off: fp32 matmuls are IEEE)
RTOL = {"fp32": 1e-4, "bf16": 5e-2}


def _run(kind: str, tmp_path, device: str, precision: str, steps: int, extra: list[str] = ()):
    config, base = KINDS[kind]
    ov = toy_overrides(config, tmp_path, f"{kind}-{device}-{precision}", base)
    cfg = load_run_config(config, ov + [f"train.device={device}", f"train.precision={precision}",
                                        f"train.steps={steps}", *extra])
    return run_experiment(cfg)


@pytest.fixture(autouse=True)
def _ieee_fp32():
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_trains_on_cuda_and_matches_cpu_at_step_1(kind, precision, tmp_path):
    cpu = _run(kind, tmp_path / "reference", "cpu", "fp32", 1)
    cuda = _run(kind, tmp_path, "cuda", precision, 3)
    assert len(cuda.loss_history) == 3 and all(math.isfinite(v) for v in cuda.loss_history)
    assert cuda.loss_history[0] == pytest.approx(cpu.loss_history[0], rel=RTOL[precision])
    evals = {k: v for k, v in cuda.final.items() if k.startswith("eval/") and isinstance(v, float)}
    assert evals and all(math.isfinite(v) for v in evals.values()), evals


def test_eval_and_generate_on_cuda(tmp_path):
    run = _run("transformer_cem", tmp_path, "cuda", "fp32", 2).run_dir
    assert main(["eval", str(run), "--device", "cuda"]) == 0
    _, model, _ = load_trained(run, "cuda")
    assert next(model.parameters()).is_cuda
    prompt = torch.randint(0, model.cfg.vocab_size, (2, 4), device="cuda",
                           generator=torch.Generator("cuda").manual_seed(0))
    cached = model.generate(prompt, 8, greedy=True)
    assert cached.is_cuda and cached.shape == (2, 12)
    assert torch.equal(cached, model.generate(prompt, 8, greedy=True, use_cache=False))
    assert main(["generate", str(run), "--device", "cuda", "--max-new-tokens", "8"]) == 0


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_resume_on_cuda_continues_exactly(precision, tmp_path):
    keep = ["train.save_every=2", "train.keep_checkpoints=0"]
    full = _run("transformer_cem", tmp_path, "cuda", precision, 4, keep)
    ckpts = sorted(full.run_dir.glob("ckpt-*"), key=checkpoint_step)
    assert [checkpoint_step(p) for p in ckpts] == [2, 4]
    shutil.rmtree(ckpts[-1])  # as if the run had stopped after step 2
    cfg = load_run_config(str(full.run_dir / "config.yaml"))
    resumed = run_experiment(cfg, resume=True)
    assert resumed.loss_history[-1] == pytest.approx(full.loss_history[-1], rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("kind", ["transformer_cem", "transformer_hyperset", "transformer_llama", "equilibrium"])
def test_compiled_with_cuda_graphs_trains_as_eager(kind, tmp_path):
    """``train.compile: reduce-overhead`` (Inductor + CUDA graph trees; CEM's and Hyper-SET's Triton kernels as
    custom operators inside the graphs): 4 steps with an evaluation between them give eager's losses and
    evaluation within Inductor's reordering of float32 sums. EqT's energy has no closed-form gradient: its
    autograd gradient runs eager (``torch.compiler.disable``) between the graph trees' subgraphs, a double
    backward no CPU test can put under CUDA graphs (the CPU maps the mode to 'default')."""
    extra = ["train.eval_every=2"]
    eager = _run(kind, tmp_path / "eager", "cuda", "fp32", 4, extra)
    graphed = _run(kind, tmp_path / "graphed", "cuda", "fp32", 4, extra + ["train.compile=reduce-overhead"])
    assert graphed.loss_history == pytest.approx(eager.loss_history, rel=1e-3, abs=1e-5)
    evals = {k: v for k, v in eager.final.items() if k.startswith("eval/") and isinstance(v, float)}
    assert evals and all(graphed.final[k] == pytest.approx(v, rel=1e-3, abs=1e-5) for k, v in evals.items())
