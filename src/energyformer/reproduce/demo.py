"""``energyformer demo`` / ``make demo``: a tiny Llama and a tiny full-CEM model on Shakespeare.

Trains both for the step budget of ``configs/lm/demo_*.yaml`` (a few minutes on 2 CPU cores), prints
the comparison table (parameters by part, validation perplexity, bits/byte, tokens/s and the unigram
baseline), saves the loss curves and a text sample from each model.
"""

from __future__ import annotations

from pathlib import Path

import torch

from .cem_lm import SUITES, run_suite


def main(out: str = "runs/demo", steps: int | None = None, overrides: list[str] | None = None) -> int:
    out_dir = Path(out)
    ov = list(overrides or []) + ([f"train.steps={steps}"] if steps else [])
    if out_dir.exists():
        print(f"replacing the previous demo output in {out_dir}")
    rows, text = run_suite(SUITES["demo"], out_dir, ov, title="energyformer demo: Llama vs CEM", overwrite=True)
    print("\n" + text)
    from ..experiment import load_trained

    samples = []
    for r in rows:
        cfg, model, task = load_trained(r["run_dir"])
        idx = torch.tensor([task.tokenizer.encode("ROMEO:\n")])
        gen = model.generate(idx, 120, temperature=0.8, top_k=40, generator=torch.Generator().manual_seed(0))
        samples.append(f"## sample from {r['name']}\n\n```\n{task.tokenizer.decode(gen[0].tolist())}\n```\n")
    (out_dir / "samples.md").write_text("\n".join(samples))
    print("\n" + samples[-1])
    print(f"report: {out_dir / 'report.md'}   plot: {out_dir / 'loss_curves.png'}   samples: {out_dir / 'samples.md'}")
    return 0
