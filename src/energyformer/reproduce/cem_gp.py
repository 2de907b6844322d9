"""Reproduce the CEM seed's Table 3 (Appendix E): Plain / Gated / CEM-T{1,2,4,8} on GP regression.

    energyformer reproduce cem-gp [--reps N] [--full] [--out DIR] [--epochs E] ...

Every (kernel, repetition, model) is one ordinary run of the ``gp`` task through the library's one
:class:`~energyformer.train.Trainer` (``OUT/runs/<kernel>-r<rep>-<model>``, with its config, metrics
and checkpoint), so any row can be re-run or evaluated alone with ``energyformer train/eval``.

Default (quick, a few minutes on one CPU core): 3 repetitions, 4000 train / 1000 test points,
12 epochs of mini-batch (100) Adam (480 steps). ``--full``: 10 repetitions, 8000 train points,
50 epochs (4000 steps; about an hour on one core). More data per step matters more than more
epochs here: at 2000 points x 50 epochs the recursive models over-fit the rough kernels.
Repetition ``r`` of kernel ``k`` draws a fresh data set (seed ``seed + 1000 * k_index + r``) and
fresh initial weights (seed ``seed + r``), shared by all six models so their differences are paired.
Writes ``report.md`` and ``results.json`` to ``--out`` and prints the table and the claim verdicts
(:mod:`energyformer.analysis.gp_claims`). ``--report-only --out DIR`` trains nothing: it re-renders the
pages of the results folder DIR (gp.md, gp_findings.md, and README.md with ``lm_results.json``) from
its committed JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import subprocess
import sys
import time
from pathlib import Path

import torch
from pydantic import Field, field_validator

from energyformer.analysis.gp_report import (
    PAPER_CITATION, PAPER_TABLE3, aggregate, parse_si, render_markdown,
)
from energyformer.analysis.gp_claims import check_claims
from energyformer.data.gp import KERNELS, KernelConfig
from energyformer.models.params import count_params
from energyformer.models.regressor import (
    FLOPS_BATCH, GPRegressor, RegressorConfig, analytic_flops, fit_flops_batch, measured_flops,
)
from energyformer.utils.config import ConfigModel, load_config, read_yaml
from ..utils.cliargs import count, nonneg_int, positive_float
from ..utils.paths import writable_dir, writable_file

#: The six rows of Table 3, in order.
MODEL_SPECS: dict[str, RegressorConfig] = {
    "Plain": RegressorConfig(block={"kind": "gelu", "norm": "rms"}),
    "Gated": RegressorConfig(block="swiglu"),
    **{f"CEM-T{t}": RegressorConfig(block={"kind": "cem", "steps": t}) for t in (1, 2, 4, 8)},
}

#: Study of recursion depth (issue #8: why do T4/T8 get worse than T2?): the same data, initial weights
#: and schedule as the Table 3 rows, changing one thing — the step size scaled so that T·η = 2 (the
#: total step of T2), a learned η, or exact gradient steps (no RMSNorm of the iterate in the loop).
STUDY_SPECS: dict[str, RegressorConfig] = {
    **{f"CEM-T{t}-eta{2 / t:g}": RegressorConfig(block={"kind": "cem", "steps": t, "step_size": 2 / t}) for t in (4, 8)},
    **{f"CEM-T{t}-learned": RegressorConfig(block={"kind": "cem", "steps": t, "step_size": {"kind": "learned", "init": 1.0}}) for t in (4, 8)},
    **{f"CEM-T{t}-exact": RegressorConfig(block={"kind": "cem", "steps": t, "norm": {"in_loop": False}}) for t in (4, 8)},
}
ALL_SPECS = {**MODEL_SPECS, **STUDY_SPECS}

#: The quick preset (the defaults of ``parse_args``): the YAML beside this module.
PRESET_FILE = Path(__file__).with_name("cem_gp.yaml")
QUICK = {"reps": 3, "n_train": 4000, "n_test": 1000, "epochs": 12}
FULL = {"reps": 10, "n_train": 8000, "n_test": 1000, "epochs": 50}


class GPExperiment(ConfigModel):
    """Everything a run depends on; YAML keys of ``--config`` and of the preset ``PRESET_FILE``."""

    reps: int = Field(QUICK["reps"], ge=1)
    """repetitions per kernel"""
    n_train: int = Field(QUICK["n_train"], ge=1)
    """training points per data set"""
    n_test: int = Field(QUICK["n_test"], ge=1)
    """test points per data set"""
    epochs: int = Field(QUICK["epochs"], ge=1)
    """passes over the training set"""
    batch_size: int = Field(100, ge=1)
    """mini-batch size"""
    lr: float = Field(1e-2, gt=0)
    """peak learning rate (5% warm-up, cosine to 0.1x)"""
    kernels: list[str] = Field(default_factory=lambda: list(KERNELS))
    """kernels to run"""
    models: list[str] = Field(default_factory=lambda: list(MODEL_SPECS))
    """Table 3 rows to run"""
    seed: int = Field(0, ge=0)
    """base seed of data and initial weights"""
    threads: int = Field(1, ge=1)
    """torch intra-op threads (1 is fastest for these sizes)"""
    study: bool = False
    """also run the recursion-depth study (STUDY_SPECS) on study_kernels"""
    study_kernels: list[str] = Field(default_factory=lambda: ["rbf", "periodic"])
    """kernels of the recursion-depth study"""

    @field_validator("kernels", "study_kernels")
    @classmethod
    def _kernels(cls, v: list[str]) -> list[str]:
        bad = [k for k in v if k not in KERNELS]
        if bad:
            raise ValueError(f"unknown kernel(s) {bad}; allowed: {', '.join(KERNELS)}")
        return v

    @field_validator("models")
    @classmethod
    def _models(cls, v: list[str]) -> list[str]:
        bad = [m for m in v if m not in MODEL_SPECS]
        if bad:
            raise ValueError(f"unknown model(s) {bad}; allowed: {', '.join(MODEL_SPECS)}")
        return v


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Precedence: the quick preset ``PRESET_FILE`` < ``--full`` < ``--config`` YAML < explicit flags."""
    p = argparse.ArgumentParser(prog="energyformer reproduce cem-gp", description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=count, help="repetitions per kernel (quick 3, full 10)")
    p.add_argument("--full", action="store_true", help="paper-like run: 10 reps, 8000 train points, 50 epochs")
    p.add_argument("--config", type=Path, help="YAML file with GPExperiment keys")
    p.add_argument("--out", type=writable_dir("--out", as_path=True), default=Path("runs/cem_gp"), help="output directory")
    p.add_argument("--epochs", type=count)
    p.add_argument("--n-train", type=count)
    p.add_argument("--n-test", type=count)
    p.add_argument("--batch-size", type=count)
    p.add_argument("--lr", type=positive_float)
    p.add_argument("--kernels", nargs="+", help=f"subset of {list(KERNELS)}")
    p.add_argument("--models", nargs="+", help=f"subset of {list(MODEL_SPECS)}")
    p.add_argument("--seed", type=nonneg_int)
    p.add_argument("--threads", type=count, help="torch intra-op threads (1 is fastest for these sizes)")
    p.add_argument("--study", action="store_true", default=None,
                   help="also run the recursion-depth study (T4/T8 with eta = 2/T, learned eta, exact steps)")
    p.add_argument("--study-kernels", nargs="+", help="kernels of the study (default rbf periodic)")
    p.add_argument("--report", type=writable_file("--report", as_path=True), help="also write the report here (its JSON beside it as gp_results.json, and gp_findings.md)")
    p.add_argument("--report-only", action="store_true",
                   help="train nothing: re-render the pages of the results folder --out (gp.md, gp_findings.md, "
                        "and README.md when lm_results.json is there) from its committed gp_results.json")
    args = p.parse_args(argv)
    try:
        values: dict = read_yaml(PRESET_FILE)
        load_config(GPExperiment, values)
        values.update(FULL if args.full else {})
        if args.config is not None:
            raw = read_yaml(args.config)
            load_config(GPExperiment, raw)  # strict: unknown keys and bad values fail here
            values.update(raw)
        values.update({k: getattr(args, k) for k in GPExperiment.model_fields if getattr(args, k) is not None})
        exp = load_config(GPExperiment, values)
    except ValueError as err:
        p.error(f"{args.config or 'command line'}: {err}")
    for k in GPExperiment.model_fields:
        setattr(args, k, getattr(exp, k))
    return args


def model_table(models: list[str]) -> dict[str, dict]:
    """Exact parameter counts and FLOPs (analytic and FlopCounterMode) for each model."""
    info = {}
    for m in models:
        cfg = ALL_SPECS[m]
        torch.manual_seed(0)
        net = GPRegressor(cfg)
        info[m] = {"params": count_params(net)["total"], "flops": analytic_flops(cfg),
                   "flops_measured": measured_flops(net), "hidden": cfg.h, "dim": cfg.dim,
                   "block": cfg.block.kind, "steps": getattr(cfg.block, "steps", 1)}
    return info


def run_config(args: argparse.Namespace, kernel: str, rep: int, model: str, data_seed: int):
    """The RunConfig of one (kernel, repetition, model): the gp task, the regressor, Adam."""
    from energyformer.experiment import RunConfig
    from energyformer.utils.config import to_dict

    steps = args.epochs * math.ceil(args.n_train / args.batch_size)
    return load_config(RunConfig, {
        "name": f"{kernel}-r{rep}-{model}", "out_dir": str(Path(args.out) / "runs"),
        "task": {"kind": "gp", "kernel": {"name": kernel}, "n_train": args.n_train, "n_test": args.n_test,
                 "data_seed": data_seed, "batch_size": args.batch_size},
        "model": to_dict(ALL_SPECS[model]),
        # Adam with PyTorch's defaults (no weight decay), 5% warm-up, cosine to 0.1x
        "train": {"steps": steps, "lr": args.lr,
                  "optimizer": {"kind": "adam", "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0},
                  "schedule": {"kind": "warmup_cosine", "warmup": 0.05, "final_lr_factor": 0.1},
                  "grad_clip": 1.0, "seed": args.seed + rep,
                  "eval_every": 0, "log_every": 0, "save_every": 0, "keep_checkpoints": 1,
                  "progress": False, "tensorboard": False, "device": "cpu"},
    })


def _git_commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True, cwd=Path(__file__).parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def recursion_trace(run_dir: str, x: torch.Tensor) -> dict:
    """What the trained CEM block does inside its recursion on inputs ``x``: mean energy ξ(u_t | h)
    per step (u_t = the point where the gradient is taken), mean step norm ‖x_{t+1} − x_t‖, the norm of
    the state ‖x_t‖ (from the embedding's norm and the steps) and the step size η in use."""
    from energyformer.core import ForwardContext
    from energyformer.experiment import load_trained

    _, model, _ = load_trained(run_dir)
    ctx = ForwardContext(traces={})
    with torch.no_grad():
        z = model.embed(x)[:, None, :]
        out = model.block(z, ctx)
    trace = next(iter(ctx.traces.values()))
    eta = model.block.solver.step_size(0, z, z)
    return {"energy": trace.mean_energy(), "step_norm": trace.mean_step_norm(),
            "state_norm_start": float(z.norm(dim=-1).mean()), "state_norm_end": float(out.norm(dim=-1).mean()),
            "eta": float(eta.detach() if isinstance(eta, torch.Tensor) else eta)}


def run_all(args: argparse.Namespace) -> list[dict]:
    """Train every (kernel, repetition, model) — and the study's — one line per run; return the records."""
    from energyformer.experiment import build_task, run_experiment

    plan = [(k, m) for k in args.kernels for m in args.models]
    if args.study:
        plan += [(k, m) for k in args.study_kernels for m in STUDY_SPECS]
    runs, total = [], len(plan) * args.reps
    t_start = time.perf_counter()
    for kernel in dict.fromkeys(k for k, _ in plan):
        k_index = list(KERNELS).index(kernel)
        for rep in range(args.reps):
            data_seed = args.seed + 1000 * k_index + rep
            for model in [m for k, m in plan if k == kernel]:
                cfg = run_config(args, kernel, rep, model, data_seed)
                task = build_task(cfg, rank=0)
                res = run_experiment(cfg, overwrite=True, task=task)
                per_epoch = math.ceil(args.n_train / args.batch_size)
                last = res.loss_history[-per_epoch:]
                rec = {"kernel": kernel, "model": model, "rep": rep, "data_seed": data_seed,
                       "init_seed": args.seed + rep, "train_rmse": res.final["eval/train_rmse"],
                       "test_rmse": res.final["eval/test_rmse"], "seconds": res.seconds,
                       "final_train_loss": sum(last) / max(len(last), 1), "run_dir": str(res.run_dir)}
                if args.study and kernel in args.study_kernels and rep == 0 and ALL_SPECS[model].block.kind == "cem":
                    rec["recursion"] = recursion_trace(str(res.run_dir), task.data.x_test[:500])
                runs.append(rec)
                print(f"[{len(runs):3d}/{total}] {kernel:8s} rep {rep} {model:15s} "
                      f"train {runs[-1]['train_rmse']:.4f} test {runs[-1]['test_rmse']:.4f} "
                      f"({res.seconds:.1f}s, elapsed {time.perf_counter() - t_start:.0f}s)", flush=True)
    return runs


def setup_dict(args: argparse.Namespace, info: dict, seconds: float) -> dict:
    per_sample = {m: i["flops"] / FLOPS_BATCH for m, i in info.items()}
    paper_flops = {m: parse_si(PAPER_TABLE3[("rbf", m)].flops) for m in info if ("rbf", m) in PAPER_TABLE3}
    return {
        "data": f"x ~ U[-1,1]^10, one joint GP draw (float64 Cholesky, jitter 1e-6) on "
                f"{args.n_train} train + {args.n_test} test points, no noise, no rescaling",
        "kernels": ", ".join(KernelConfig(name=k).describe() for k in args.kernels),
        "models": "Linear(10,16) -> block on (B,1,16) -> Linear(16,1); Plain/Gated pre-norm, CEM = "
                  "energyformer.blocks.cem.CEMMLP (identity preconditioner, step size 1)",
        "training": f"Adam lr {args.lr}, batch {args.batch_size}, {args.epochs} epochs, 5% warm-up, "
                    f"cosine to 0.1x, grad clip 1.0, MSE loss; the library's Trainer (energyformer train)",
        "repetitions": args.reps,
        "FLOPs convention": f"matmul FLOPs (2 per multiply-add) of one forward pass of a batch of "
                            f"{FLOPS_BATCH} samples; batch that best fits the paper's FLOPs: "
                            f"{fit_flops_batch(per_sample, paper_flops):.1f}",
        "wall time": f"{seconds:.0f} s on {torch.get_num_threads()} thread(s)",
        "versions": f"python {platform.python_version()}, torch {torch.__version__}",
        "git commit": _git_commit(),
        "command": " ".join(["energyformer reproduce cem-gp", *sys.argv[3:]]),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.report_only:
        from .cem_lm import render_page_dir

        for page in render_page_dir(Path(args.out)):
            print(f"wrote {page}")
        return 0
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    info = model_table(list(args.models) + (list(STUDY_SPECS) if args.study else []))
    for m, i in info.items():
        print(f"{m:14s} params {i['params']:6d}  FLOPs/forward(B={FLOPS_BATCH}) {i['flops']:>9d} "
              f"(FlopCounterMode {i['flops_measured']})")
    runs = run_all(args)
    setup = setup_dict(args, info, time.perf_counter() - t0)
    report = render_markdown(runs, info, setup)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "report.md").write_text(report)
    agg = aggregate(runs)
    results = {
        "setup": setup, "model_info": info, "runs": runs,
        "kernels": {k: KernelConfig(name=k).model_dump() | {"lengthscale": KernelConfig(name=k).ell}
                    for k in args.kernels},
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "aggregate": [{"kernel": k, "model": m, **{a: b for a, b in v.items() if a != "test_by_rep"}}
                      for (k, m), v in agg.items()],
        "claims": [{**{k: v for k, v in c.items() if k != "outcome"}, "verdict": str(c["outcome"].verdict),
                    "reason": c["outcome"].reason} for c in check_claims(runs)],
        "paper_table3_not_measured": {"citation": PAPER_CITATION, "rows": [
            {"kernel": k, "model": m, **vars(r)} for (k, m), r in PAPER_TABLE3.items()]},
    }
    (args.out / "results.json").write_text(json.dumps(results, indent=2))
    if args.report is not None:
        from energyformer.analysis.gp_report import plot_recursion

        args.report.parent.mkdir(parents=True, exist_ok=True)
        png = plot_recursion(runs, args.report.parent / "gp_recursion.png")
        if png is not None:
            report += f"\n![test RMSE against T](gp_recursion.png)\n"
        args.report.write_text(report)
        (args.report.parent / "gp_results.json").write_text(json.dumps(results, indent=1))
        from energyformer.analysis.gp_claims import findings_markdown

        (args.report.parent / "gp_findings.md").write_text(findings_markdown(results))
    print(report)
    print(f"wrote {args.out / 'report.md'} and {args.out / 'results.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
