"""Bare self-attention cost (seed 004), measured side by side in one run.

1. One dynamics step (no grad) and one pseudo-likelihood training step (closed-form gradient) against N
   and d: median time over interleaved repeats (range in brackets), the log-log slopes in N and d (the
   step is O(B N² d²): expect slopes near 2 once the work dominates the fixed overheads), and the peak
   resident memory of a training step (fresh process) beside the analytic size of the pair tensor
   J_ij x_j (B N² d floats).
2. One training step of bare SA (pseudo-likelihood, no backprop through dynamics) vs one of the recycled
   transformer (q = 3 and q = 1) and 3 distinct layers (backprop) at the Potts MLM scale (B = 256, L = 20,
   C = 10), interleaved; with ``--results`` (the ``bare-sa`` study's cpu results.json) the steps each model
   needed to reach bare SA's final validation loss turn the per-step medians into a time-to-target ratio.

Usage: ``python benchmarks/bare_sa.py [--repeats 7] [--results docs/results/bare_sa/cpu/results.json]``.
Run it alone: timings on a shared machine are noisy, so only ratios from one run are reported.

``--results`` defaults to that file in this repository (not relative to the working directory, which silently
dropped the time-to-target table when run from elsewhere); an explicit path that is not a file is an error, and a
missing default is said in one line.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _page  # noqa: E402  (a sibling: argument checks and the run header)

from energyformer.analysis.bare_sa_memory import step_memory  # noqa: E402
from energyformer.models import MODELS  # noqa: E402
from energyformer.models.bare_attention import BareSAConfig  # noqa: E402

DEFAULT_RESULTS = Path(__file__).resolve().parents[1] / "docs/results/bare_sa/cpu/results.json"


def _time(fn, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def interleaved(fns: dict, repeats: int) -> dict[str, tuple[float, float, float]]:
    """Median, min and max seconds of each function, calling them in turn ``repeats`` times."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for f in fns.values():
        f()  # warm-up
    for _ in range(repeats):
        for k, f in fns.items():
            times[k].append(_time(f, warmup=0))
    return {k: (statistics.median(v), min(v), max(v)) for k, v in times.items()}


def bare_fns(N: int, d: int, B: int):
    m = MODELS.build(BareSAConfig(n_tokens=N, dim=d, init_std=0.05, objective="plain"))
    g = torch.Generator().manual_seed(0)
    x = torch.randn(B, N, d, generator=g)
    x = x / x.norm(dim=-1, keepdim=True)
    opt = torch.optim.SGD(m.parameters(), lr=1.0)

    def dyn():
        with torch.no_grad():
            m.run(x, steps=1)

    def train():
        loss, _ = m.local_loss(x)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return dyn, train


def slope(xs: list[float], ys: list[float]) -> float:
    lx, ly = [math.log(v) for v in xs], [math.log(v) for v in ys]
    mx, my = statistics.fmean(lx), statistics.fmean(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)


def scaling(repeats: int, B: int) -> None:
    print(f"\n## bare SA step vs N and d (batch {B}; median [min, max] ms over {repeats} interleaved repeats)\n")
    grid = [(N, d) for N in (16, 32, 64) for d in (8, 32)] + [(64, 96)]
    fns = {}
    for N, d in grid:
        dyn, train = bare_fns(N, d, B)
        fns[(N, d, "dynamics")] = dyn
        fns[(N, d, "PL train")] = train
    res = interleaved(fns, repeats)
    print("| N | d | J numbers | pair tensor MiB (B N² d) | dynamics step ms | PL training step ms | "
          "training step peak MiB |")
    print("|---|---|---|---|---|---|---|")
    for N, d in grid:
        mem = step_memory({"kind": "bare_sa", "n_tokens": N, "dim": d, "objective": "plain"}, B, N)
        a, b = res[(N, d, "dynamics")], res[(N, d, "PL train")]
        print(f"| {N} | {d} | {N * N * d * d:,} | {B * N * N * d * 4 / 2**20:.1f} | {a[0] * 1e3:.2f} "
              f"[{a[1] * 1e3:.2f}, {a[2] * 1e3:.2f}] | {b[0] * 1e3:.2f} [{b[1] * 1e3:.2f}, {b[2] * 1e3:.2f}] | "
              f"{mem['step_peak_bytes'] / 2**20:.1f} |")
    for kind in ("dynamics", "PL train"):
        sN = [slope([16, 32, 64], [res[(N, d, kind)][0] for N in (16, 32, 64)]) for d in (8, 32)]
        sd = [slope([8, 32], [res[(N, d, kind)][0] for d in (8, 32)]) for N in (16, 32, 64)]
        print(f"\n{kind}: log-log slope in N {', '.join(f'{v:.2f}' for v in sN)} (d = 8, 32); in d "
              f"{', '.join(f'{v:.2f}' for v in sd)} (N = 16, 32, 64); O(N² d²) predicts 2 and 2")


def training_steps(repeats: int, results: Path | None) -> None:
    from energyformer.experiment import build_model, build_task, load_run_config, resolve

    names = {"bare SA": "potts_bare_sa", "recycled x1": "potts_recycled_x1", "recycled x3": "potts_recycled_x3",
             "3 layers": "potts_layers3", "factored": "potts_factored"}
    fns = {}
    for label, name in names.items():
        cfg = load_run_config(f"bare_sa/{name}")
        task = build_task(cfg)
        cfg = resolve(cfg, task)
        model = build_model(cfg, task).train()
        if getattr(getattr(model, "layers", None), "train_iterations", None) is not None:
            model.layers.train_iterations = None  # time q = 3, the mean of the sampled range [2, 4]
        opt = torch.optim.SGD(model.parameters(), lr=1e-9)
        batch = task.train_data.next_batch()

        def step(model=model, opt=opt, task=task, batch=batch):
            torch.manual_seed(0)  # the same masked sites every repeat
            loss, _ = task.loss(model, batch)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        fns[label] = step
    res = interleaved(fns, repeats)
    base = res["bare SA"][0]
    print(f"\n## one training step at the Potts MLM scale (B = 256, L = 20, C = 10; {repeats} interleaved repeats)\n")
    print("| model | median ms [min, max] | ratio to bare SA |")
    print("|---|---|---|")
    for k, (med, lo, hi) in res.items():
        print(f"| {k} | {med * 1e3:.2f} [{lo * 1e3:.2f}, {hi * 1e3:.2f}] | {med / base:.2f} |")
    print("\n(recycled x3 is timed at q = 3, the mean of its sampled training range [2, 4].)")
    if results is None:
        print(f"\n(no time-to-target table: {DEFAULT_RESULTS} not found; pass --results)")
    else:
        recs = {x["cell"]["run"]: x for x in _page.read_input(results, as_json=True)["runs"].values() if x["seed"] == 0}
        run = {k: v.removeprefix("potts_") for k, v in names.items()}   # the study's run labels
        r = {k: {"curve": recs[run[k]]["metrics"]["timing"]["curve"], "steps": recs[run[k]]["steps"]}
             for k in names if run[k] in recs}
        target = r["bare SA"]["curve"][-1][2]
        print(f"\n## time to bare SA's final validation loss {target:.4f} = steps needed x median step time\n")
        print("| model | steps to target (eval every 100) | estimated seconds | ratio to bare SA |")
        print("|---|---|---|---|")
        t_bare = None
        for k in ("bare SA", "recycled x3", "recycled x1", "3 layers", "factored"):
            steps = next((s for s, _, v in r[k]["curve"] if v <= target + 1e-12), None)
            if steps is None:
                print(f"| {k} | not reached in {r[k]['steps']} | - | - |")
                continue
            secs = steps * res[k][0]
            t_bare = secs if k == "bare SA" else t_bare
            ratio = f"{secs / t_bare:.2f}" if t_bare else "-"
            print(f"| {k} | {steps} | {secs:.1f} | {ratio} |")


def results_path(p: argparse.ArgumentParser, given: Path | None) -> Path | None:
    """The results.json to read: ``given`` (not a file: an argparse error naming it), else
    :data:`DEFAULT_RESULTS` where it exists (None: the caller says it is missing)."""
    if given is not None:
        if not given.is_file():
            p.error(f"argument --results: {str(given)!r} is not a file (the bare-sa study's cpu results.json)")
        return given
    return DEFAULT_RESULTS if DEFAULT_RESULTS.is_file() else None


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=_page.positive_int, default=7)
    p.add_argument("--batch", type=_page.positive_int, default=32, help="batch of the scaling table")
    p.add_argument("--results", type=Path, default=None,
                   help="the bare-sa study's cpu results.json (default: docs/results/bare_sa/cpu/results.json of "
                        "this repository)")
    p.add_argument("--skip-scaling", action="store_true")
    a = p.parse_args(argv)
    a.results = results_path(p, a.results)
    torch.set_num_threads(1)
    print(_page.header("cpu"))
    print(f"torch {torch.__version__}, 1 thread")
    if not a.skip_scaling:
        scaling(a.repeats, a.batch)
    training_steps(a.repeats, a.results)


if __name__ == "__main__":
    _page.run(main)
