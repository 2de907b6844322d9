"""Equilibrium transformer (EqT, seed 003) overheads, measured side by side in one run.

Baseline (``configs/eqt/baseline.yaml``) vs EqT (``configs/eqt/eqt.yaml``), same backbone, on parity
batches: (1) parameters (+%), (2) one training step (forward + backward + AdamW) at K_train = 2,
(3) inference at K = 8 without and with early stopping (ε = ``--tol``), (4) inference at K = 32.
Variants are interleaved in every repeat; the median ratio to the baseline and its range are printed.
Goals from issue 13: inference at K = 8 with early stopping ≤ 2.5× (paper ≈3×), training +15%,
parameters +8%.

Usage: ``python benchmarks/eqt.py [--length 64] [--batch 32] [--repeats 7] [--tol 1e-3]``.
Run it alone: timings on a shared machine are noisy, so only ratios from one run are reported.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from energyformer.data.parity import make_parity
from energyformer.models.config import ModelConfig
from energyformer.models.equilibrium import EquilibriumConfig
from energyformer.tasks.parity import ParityTask, ParityTaskConfig
from energyformer.utils.config import read_yaml

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--length", type=int, default=64)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--tol", type=float, default=1e-3)
    args = p.parse_args()
    base, eqt = read_yaml(ROOT / "configs/eqt/baseline.yaml"), read_yaml(ROOT / "configs/eqt/eqt.yaml")
    task = ParityTask(ParityTaskConfig(data={"length": args.length}, batch_size=args.batch))
    torch.manual_seed(0)
    mb = task.build_model(task.resolve_model_config(ModelConfig.model_validate(base["model"])))
    torch.manual_seed(0)
    me = task.build_model(task.resolve_model_config(EquilibriumConfig.model_validate(eqt["model"])))
    opts = {id(m): torch.optim.AdamW(m.parameters(), lr=1e-4) for m in (mb, me)}
    x, y = make_parity(args.batch, args.length, seed=1)
    (refiner,) = me.refiners()

    def train(m):
        m.train()
        loss, _ = task.loss(m, (x, y))
        opts[id(m)].zero_grad()
        loss.backward()
        opts[id(m)].step()

    @torch.no_grad()
    def infer(m, steps=None, tol=None):
        m.eval()
        if m is me:
            refiner.solver.tol = tol
        m(x, **({} if steps is None else {"steps": steps}))

    variants = {"train baseline": lambda: train(mb), "train EqT K=2": lambda: train(me),
                "infer baseline": lambda: infer(mb), "infer EqT K=8": lambda: infer(me, 8),
                f"infer EqT K=8 tol={args.tol:g}": lambda: infer(me, 8, args.tol),
                "infer EqT K=32": lambda: infer(me, 32)}
    for fn in variants.values():   # warm-up
        fn()
    times: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(args.repeats):
        for k, fn in variants.items():
            t = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t)
    nb, ne = (sum(q.numel() for q in m.parameters()) for m in (mb, me))
    print(f"parameters: baseline {nb}, EqT {ne} (+{100 * (ne / nb - 1):.1f}%; paper +8%)")
    for group, ref in (("train", "train baseline"), ("infer", "infer baseline")):
        for k, v in times.items():
            if not k.startswith(group):
                continue
            r = [a / b for a, b in zip(v, times[ref])]
            print(f"{k:28s} median {statistics.median(v) * 1e3:8.1f} ms   ratio {statistics.median(r):5.2f}x "
                  f"[{min(r):.2f}, {max(r):.2f}]")


if __name__ == "__main__":
    main()
