"""The memory probe of the ``bare-sa`` study (slide "cons: high memory usage"; ``studies/bare-sa.yaml``,
``probes.memory``): peak resident memory of one training step per model, each in a fresh process.

:func:`memory_probe` measures the models; :func:`step_memory` runs this module as a subprocess::

    python -m energyformer.analysis.bare_sa_memory SPEC_JSON

SPEC: ``{"model": <model config dict>, "batch", "n_tokens", "vocab", "n_out", "iterations"}``. One warm-up
step (forward + backward + Adam) makes weights, Adam state and data resident; then ``/proc/self/clear_refs``
(5) resets the high-water mark and a second step is measured: ``step_peak_bytes`` = VmHWM during it − VmRSS
before it. Transformers get a synthetic batch of token ids (loss: the mean log-partition, the same graph as a
cross-entropy); bare SA ``local_loss`` on random unit tokens. Prints one JSON line: params, param_bytes
(float32), step_peak_bytes, rss_bytes. Linux only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch


def rss(key: str) -> int:
    """A /proc/self/status field in bytes (``VmRSS:``, ``VmHWM:``)."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key))


def measure(spec: dict) -> dict[str, int]:
    """Params and the peak extra resident memory of one training step of ``spec``'s model (module docstring)."""
    from energyformer.models import MODELS
    from energyformer.utils.config import from_dict

    torch.set_num_threads(1)
    cfg = from_dict(MODELS.get(spec["model"]["kind"]).config, spec["model"])
    g = torch.Generator().manual_seed(0)
    if cfg.kind == "transformer":
        model = MODELS.build(cfg, vocab_size=spec["vocab"], n_out=spec["n_out"], causal=False)
        idx = torch.randint(0, spec["vocab"], (spec["batch"], spec["n_tokens"]), generator=g)  # (B, N)
        loss = lambda: model(idx, iterations=spec.get("iterations")).logits.float().logsumexp(-1).mean()  # noqa: E731
    else:
        model = MODELS.build(cfg)
        x = torch.randn(spec["batch"], cfg.n_tokens, cfg.dim, generator=g)  # (B, N, d) on the sphere
        x = x / x.norm(dim=-1, keepdim=True)
        loss = lambda: model.local_loss(x)[0]  # noqa: E731
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss().backward()
    opt.step()
    opt.zero_grad(set_to_none=False)
    base = rss("VmRSS:")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    loss().backward()
    opt.step()
    n = sum(p.numel() for p in model.parameters())
    return {"params": n, "param_bytes": 4 * n, "step_peak_bytes": rss("VmHWM:") - base, "rss_bytes": base}


def step_memory(model_cfg: dict, batch: int, n_tokens: int, *, vocab: int = 0, n_out: int = 0,
                iterations: int | None = None) -> dict[str, float]:
    """:func:`measure` of one model in a fresh process (this package's tree first on its path)."""
    spec = {"model": model_cfg, "batch": batch, "n_tokens": n_tokens, "vocab": vocab, "n_out": n_out,
            "iterations": iterations}
    src = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")])))
    out = subprocess.run([sys.executable, "-m", "energyformer.analysis.bare_sa_memory",
                          json.dumps(spec)], capture_output=True, text=True, env=env, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"memory probe failed: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def memory_probe(scale: str) -> dict:
    """Peak step memory (fresh processes) at the Potts scale (B = 256, N = 20, d = C = 10) and image scales."""
    bare = lambda n, d, objective: {"kind": "bare_sa", "n_tokens": n, "dim": d, "objective": objective}  # noqa: E731
    tr = {"kind": "transformer", "dim": 64, "heads": 4, "n_layers": 1, "positions": "learned", "max_seq_len": 64,
          "final_norm": "layer", "block": {"attention": "gpt", "mlp": "gelu"}}
    specs = {
        "Potts: bare SA (N=20, d=10)": (bare(20, 10, "plain"), 256, 20, {}),
        "Potts: recycled x3 (dim 64)": (tr, 256, 20, {"vocab": 11, "n_out": 10, "iterations": 3}),
        "Potts: 3 layers (dim 64)": (tr | {"n_layers": 3}, 256, 20, {"vocab": 11, "n_out": 10}),
        "MNIST p=4: bare SA (N=49, d=32)": (bare(49, 32, "vmf"), 64, 49, {}),
        "CIFAR p=4: bare SA (N=64, d=96)": (bare(64, 96, "vmf"), 64, 64, {}),
        "CIFAR p=4: recycled x3 (dim 96)": (tr | {"dim": 96}, 64, 64, {"vocab": 256, "n_out": 256, "iterations": 3}),
    }
    return {label: step_memory(m, batch, n, **kw) for label, (m, batch, n, kw) in specs.items()}


if __name__ == "__main__":
    print(json.dumps(measure(json.loads(sys.argv[1]))))
