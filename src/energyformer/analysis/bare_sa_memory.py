"""Peak resident memory of one training step, measured in this (fresh) process (the ``bare-sa`` study's
memory probe; :func:`energyformer.analysis.bare_sa.step_memory` runs it as a subprocess).

    python -m energyformer.analysis.bare_sa_memory SPEC_JSON

SPEC: ``{"model": <model config dict>, "batch", "n_tokens", "vocab", "n_out", "iterations"}``. One
warm-up step (forward + backward + Adam) makes weights, Adam state and data resident; then
``/proc/self/clear_refs`` (5) resets the high-water mark and a second step is measured:
``step_peak_bytes`` = VmHWM during it − VmRSS before it. Transformers get a synthetic batch of token
ids (loss: the mean log-partition, the same graph as a cross-entropy); bare SA ``local_loss`` on random
unit tokens. Prints one JSON line: params, param_bytes (float32), step_peak_bytes, rss_bytes. Linux only.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

import torch


def rss(key: str) -> int:
    """A /proc/self/status field in bytes (``VmRSS:``, ``VmHWM:``)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{key} not in /proc/self/status")


def build_step(spec: dict) -> tuple[torch.nn.Module, Callable[[], None]]:
    """The model of ``spec`` and a closure running forward + backward on a fixed synthetic batch."""
    from energyformer.models import MODELS
    from energyformer.utils.config import from_dict

    entry = MODELS.get(spec["model"]["kind"])
    cfg = from_dict(entry.config, spec["model"])
    g = torch.Generator().manual_seed(0)
    if cfg.kind == "transformer":
        model = MODELS.build(cfg, vocab_size=spec["vocab"], n_out=spec["n_out"], causal=False)
        idx = torch.randint(0, spec["vocab"], (spec["batch"], spec["n_tokens"]), generator=g)  # (B, N)

        def step() -> None:
            out = model(idx, iterations=spec.get("iterations"))
            out.logits.float().logsumexp(-1).mean().backward()
    else:
        model = MODELS.build(cfg)
        x = torch.randn(spec["batch"], cfg.n_tokens, cfg.dim, generator=g)  # (B, N, d) on the sphere
        x = x / x.norm(dim=-1, keepdim=True)

        def step() -> None:
            model.local_loss(x)[0].backward()
    return model, step


def measure(spec: dict) -> dict[str, int]:
    """Params and the peak extra resident memory of one training step (module docstring)."""
    torch.set_num_threads(1)
    model, step = build_step(spec)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    step()
    opt.step()
    opt.zero_grad(set_to_none=False)
    base = rss("VmRSS:")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    step()
    opt.step()
    peak = rss("VmHWM:")
    n = sum(p.numel() for p in model.parameters())
    return {"params": n, "param_bytes": 4 * n, "step_peak_bytes": peak - base, "rss_bytes": base}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    print(json.dumps(measure(json.loads(args[0]))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
