"""Reproduce the CEM seed's Table 3 (Appendix E): Plain / Gated / CEM-T{1,2,4,8} on GP regression.

    python -m energyformer.reproduce.cem_gp [--reps N] [--full] [--out DIR] [--epochs E] ...

Default (quick, a few minutes on one CPU core): 3 repetitions, 4000 train / 1000 test points,
12 epochs of mini-batch (100) Adam (480 steps). ``--full``: 10 repetitions, 8000 train points,
50 epochs (4000 steps; about an hour on one core). More data per step matters more than more
epochs here: at 2000 points x 50 epochs the recursive models over-fit the rough kernels.
Repetition ``r`` of kernel ``k`` draws a fresh data set (seed ``seed + 1000 * k_index + r``) and
fresh initial weights (seed ``seed + r``), shared by all six models so their differences are paired.
Writes ``report.md`` and ``results.json`` to ``--out`` and prints the table and the claim checks.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import subprocess
import sys
import time
from dataclasses import dataclass, field, fields
from pathlib import Path

import torch
import yaml

from energyformer.analysis.gp_report import (
    PAPER_CITATION, PAPER_TABLE3, aggregate, check_claims, parse_si, render_markdown,
)
from energyformer.data.gp import KERNELS, KernelConfig, make_gp_dataset
from energyformer.utils.config import load_config
from energyformer.utils.validate import check_choice, check_float, check_int
from energyformer.tasks.gp_regression import (
    FLOPS_BATCH, MODEL_SPECS, TrainConfig, analytic_flops, build_regressor, count_params,
    fit_flops_batch, measured_flops, train_regressor,
)

QUICK = {"reps": 3, "n_train": 4000, "n_test": 1000, "epochs": 12}
FULL = {"reps": 10, "n_train": 8000, "n_test": 1000, "epochs": 50}


@dataclass
class GPExperiment:
    """Everything a run depends on; YAML keys of ``--config`` (e.g. ``configs/cem_gp.yaml``)."""

    reps: int = QUICK["reps"]
    n_train: int = QUICK["n_train"]
    n_test: int = QUICK["n_test"]
    epochs: int = QUICK["epochs"]
    batch_size: int = 100
    lr: float = 1e-2
    kernels: list[str] = field(default_factory=lambda: list(KERNELS))
    models: list[str] = field(default_factory=lambda: list(MODEL_SPECS))
    seed: int = 0
    threads: int = 1

    def __post_init__(self) -> None:
        for key in ("reps", "n_train", "n_test", "epochs", "batch_size", "threads"):
            check_int(key, getattr(self, key), min=1)
        check_float("lr", self.lr, min=0.0, min_exclusive=True)
        for key, allowed in (("kernels", KERNELS), ("models", list(MODEL_SPECS))):
            for v in getattr(self, key):
                check_choice(key, v, allowed)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Precedence: built-in quick preset < ``--full`` < ``--config`` YAML < explicit flags."""
    p = argparse.ArgumentParser(prog="energyformer reproduce cem-gp", description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, help="repetitions per kernel (quick 3, full 10)")
    p.add_argument("--full", action="store_true", help="paper-like run: 10 reps, 8000 train points, 50 epochs")
    p.add_argument("--config", type=Path, help="YAML file with GPExperiment keys")
    p.add_argument("--out", type=Path, default=Path("runs/cem_gp"), help="output directory")
    p.add_argument("--epochs", type=int)
    p.add_argument("--n-train", type=int)
    p.add_argument("--n-test", type=int)
    p.add_argument("--batch-size", type=int)
    p.add_argument("--lr", type=float)
    p.add_argument("--kernels", nargs="+", help=f"subset of {list(KERNELS)}")
    p.add_argument("--models", nargs="+", help=f"subset of {list(MODEL_SPECS)}")
    p.add_argument("--seed", type=int)
    p.add_argument("--threads", type=int, help="torch intra-op threads (1 is fastest for these sizes)")
    args = p.parse_args(argv)
    values: dict = dict(FULL) if args.full else {}
    try:
        if args.config is not None:
            raw = yaml.safe_load(args.config.read_text()) or {}
            load_config(GPExperiment, raw)  # strict: unknown keys and bad values fail here
            values.update(raw)
        values.update({f.name: getattr(args, f.name) for f in fields(GPExperiment)
                       if getattr(args, f.name) is not None})
        exp = load_config(GPExperiment, values)
    except ValueError as err:
        p.error(f"{args.config or 'command line'}: {err}")
    for f in fields(GPExperiment):
        setattr(args, f.name, getattr(exp, f.name))
    return args


def model_table(models: list[str]) -> dict[str, dict]:
    """Exact parameter counts and FLOPs (analytic and FlopCounterMode) for each model."""
    info = {}
    for m in models:
        cfg = MODEL_SPECS[m]
        net = build_regressor(cfg, 0)
        info[m] = {"params": count_params(net), "flops": analytic_flops(cfg),
                   "flops_measured": measured_flops(net), "hidden": cfg.h, "dim": cfg.dim,
                   "block": cfg.block, "steps": cfg.steps}
    return info


def _git_commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True, cwd=Path(__file__).parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def run_all(args: argparse.Namespace) -> list[dict]:
    """Train every (kernel, repetition, model); print one line per run; return the run records."""
    runs, total = [], len(args.kernels) * args.reps * len(args.models)
    t_start = time.perf_counter()
    for ki, kernel in enumerate(args.kernels):
        k_index = list(KERNELS).index(kernel)
        for rep in range(args.reps):
            data_seed = args.seed + 1000 * k_index + rep
            data = make_gp_dataset(kernel, args.n_train, args.n_test, seed=data_seed)
            for model in args.models:
                tcfg = TrainConfig(epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
                                   seed=args.seed + rep)
                net = build_regressor(MODEL_SPECS[model], args.seed + rep)
                res = train_regressor(net, data, tcfg)
                runs.append({"kernel": kernel, "model": model, "rep": rep, "data_seed": data_seed,
                             "init_seed": args.seed + rep, "train_rmse": res.train_rmse,
                             "test_rmse": res.test_rmse, "seconds": res.seconds,
                             "final_train_loss": res.curve[-1]})
                print(f"[{len(runs):3d}/{total}] {kernel:8s} rep {rep} {model:7s} "
                      f"train {res.train_rmse:.4f} test {res.test_rmse:.4f} ({res.seconds:.1f}s, "
                      f"elapsed {time.perf_counter() - t_start:.0f}s)", flush=True)
    return runs


def setup_dict(args: argparse.Namespace, info: dict, seconds: float) -> dict:
    per_sample = {m: i["flops"] / FLOPS_BATCH for m, i in info.items()}
    paper_flops = {m: parse_si(PAPER_TABLE3[("rbf", m)].flops) for m in info}
    return {
        "data": f"x ~ U[-1,1]^10, one joint GP draw (float64 Cholesky, jitter 1e-6) on "
                f"{args.n_train} train + {args.n_test} test points, no noise, no rescaling",
        "kernels": ", ".join(KernelConfig(name=k).describe() for k in args.kernels),
        "models": "Linear(10,16) -> block on (B,1,16) -> Linear(16,1); Plain/Gated pre-norm, CEM = "
                  "energyformer.blocks.cem.CEMMLP (identity preconditioner, step size 1)",
        "training": f"Adam lr {args.lr}, batch {args.batch_size}, {args.epochs} epochs, 5% warm-up, "
                    f"cosine to 0.1x, grad clip 1.0, MSE loss",
        "repetitions": args.reps,
        "FLOPs convention": f"matmul FLOPs (2 per multiply-add) of one forward pass of a batch of "
                            f"{FLOPS_BATCH} samples; batch that best fits the paper's FLOPs: "
                            f"{fit_flops_batch(per_sample, paper_flops):.1f}",
        "wall time": f"{seconds:.0f} s on {torch.get_num_threads()} thread(s)",
        "versions": f"python {platform.python_version()}, torch {torch.__version__}",
        "git commit": _git_commit(),
        "command": " ".join(["python -m energyformer.reproduce.cem_gp", *sys.argv[1:]]),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    info = model_table(args.models)
    for m, i in info.items():
        print(f"{m:7s} params {i['params']:6d}  FLOPs/forward(B={FLOPS_BATCH}) {i['flops']:>9d} "
              f"(FlopCounterMode {i['flops_measured']})")
    runs = run_all(args)
    setup = setup_dict(args, info, time.perf_counter() - t0)
    report = render_markdown(runs, info, setup)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "report.md").write_text(report)
    agg = aggregate(runs)
    results = {
        "setup": setup, "model_info": info, "runs": runs,
        "kernels": {k: dataclasses.asdict(KernelConfig(name=k)) | {"lengthscale": KernelConfig(name=k).ell}
                    for k in args.kernels},
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "aggregate": [{"kernel": k, "model": m, **{a: b for a, b in v.items() if a != "test_by_rep"}}
                      for (k, m), v in agg.items()],
        "claims": check_claims(agg),
        "paper_table3_not_measured": {"citation": PAPER_CITATION, "rows": [
            {"kernel": k, "model": m, **dataclasses.asdict(r)} for (k, m), r in PAPER_TABLE3.items()]},
    }
    (args.out / "results.json").write_text(json.dumps(results, indent=2))
    print(report)
    print(f"wrote {args.out / 'report.md'} and {args.out / 'results.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
