"""Where a bf16 training step's time goes, per model: torch.profiler over a few steps (issues 20 and 21).

The throughput tables (``gpu_lm.py``, ``hyperset_gpu.py``) say *how much* slower a model trains than its
baseline; this says *where*. For each model of a suite, after warm-up steps, ``--steps`` training
steps (forward + loss + backward + AdamW, the same step as the tables') run under ``torch.profiler``
(CPU and, on CUDA, device activity), and the output gives per model

* the wall time of one step without the profiler (median of the same number of steps, synchronised),
  and with it the device-busy time: the sum of the device kernels' durations per step; wall well above
  busy means the step waits on the host (kernel launches, Python), not on the GPU;
* the number of device kernels per step;
* the operators with the most self device time (self CPU time where there is no device), with calls
  per step — the rows to make faster first;
* on a device also the host's side (``--host-rows``): the operators, autograd Functions and Python-level
  ranges with the most self CPU time per step (what the host spends issuing the step: dispatch, autograd,
  custom Functions with their Triton launches), and the sum of all self CPU time — where wall is above device
  busy, these are the rows to make cheaper;
* on a device the host's enqueue time per step, without any profiler: the time the step's Python takes to
  return, the device left to finish (the queue of launches is deep): where it is close to the wall time the
  host is the bound, and it is what a faster host path must cut;
* with ``--python N``: the N Python functions with the most own time per step (cProfile, a separate run of the
  same steps), which the profiler's operator table cannot show — the Python around the operators: the modules'
  forward code, autograd Functions' bodies, Triton's launcher (``JITFunction.run``), the optimizer.

Suites: ``cem`` — ``gpu_lm.py``'s models at N × B (default 1024 × 8): the Llama baseline, full CEM T=1 on
the default path, and the paper configuration; ``hyperset`` — ``hyperset_gpu.py``'s looped transformer,
Hyper-SET (on CUDA its Triton kernel) and Hyper-SET on the bi-softmax's PyTorch path (``attention.impl:
einsum``) at d 768, L 24, batch 64. ``--models`` picks a
subset by name. Like every benchmark here it is a script (never a timed test); the smoke test runs
``--tiny`` on CPU.

Usage (GPU):  python benchmarks/gpu_profile.py --suite cem --out docs/results/cem/gpu_profile.md
              python benchmarks/gpu_profile.py --suite hyperset --out docs/results/hyperset/gpu_profile.md
              python benchmarks/gpu_profile.py --suite hyperset --python 30   # + the Python functions' own time
              python benchmarks/gpu_profile.py --suite cem --tiny      # CPU smoke run
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path
from typing import Callable

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _page  # noqa: E402  (sibling scripts)
import gpu_lm  # noqa: E402
import hyperset_gpu  # noqa: E402
from _timing import median  # noqa: E402
from lm_throughput import CausalLM, make_train_step, model_config, ours_logits, pick_device  # noqa: E402

CEM_MODELS = (gpu_lm.BASE, "full CEM T=1 (auto path)", "paper configuration (T=2, D+LR)")
HYPERSET_MODELS = (hyperset_gpu.BASE, "Hyper-SET", "Hyper-SET, attention.impl einsum")


def cem_steps(args, device: torch.device, names: list[str]) -> dict[str, Callable[[], None]]:
    """gpu_lm's models by name, each as a bf16 training step over one random (B, N) token batch."""
    blocks = gpu_lm.models()
    n, b = (int(v) for v in args.setting.lower().split("x"))
    g = torch.Generator().manual_seed(2)
    idx = torch.randint(0, args.vocab, (b, n + 1), generator=g).to(device)
    out = {}
    for name in names:
        torch.manual_seed(0)
        m = CausalLM(model_config(args.vocab, args.dim, args.layers, args.heads, args.mlp_hidden, n,
                                  blocks[name])).to(device)
        out[name] = make_train_step(m, ours_logits, idx[:, :-1], idx[:, 1:], precision=args.precision)
    return out


def hyperset_steps(args, device: torch.device, names: list[str]) -> dict[str, Callable[[], None]]:
    """hyperset_gpu's models by name, each as a training step over one random Sudoku board batch."""
    g = torch.Generator().manual_seed(0)
    cells = hyperset_gpu.CELLS
    boards = torch.randint(0, hyperset_gpu.VOCAB, (args.batch, cells), generator=g).to(device)
    targets = torch.where(boards == 0, torch.randint(0, hyperset_gpu.CLASSES, boards.shape, generator=g).to(device),
                          -100)
    size = argparse.Namespace(dim=args.dim, heads=args.heads, iterations=args.iterations)
    return {name: make_train_step(hyperset_gpu.build(*hyperset_gpu.MODELS[name], size, device), ours_logits,
                                  boards, targets, precision=args.precision) for name in names}


def _self_device_us(e) -> float:
    return float(getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0.0) or 0.0)


def host_rows(avg, steps: int, rows: int) -> list[str]:
    """The ``rows`` entries of a profile with the most self CPU time per step, and the total (a device run's
    host side: what issuing the step costs the CPU, profiler overhead included)."""
    total = sum(float(e.self_cpu_time_total) for e in avg) or 1.0
    lines = ["", f"host: self CPU time {total / 1e3 / steps:.1f} ms/step in all (with the profiler's own overhead)",
             "", "| operator, Function or range | self CPU ms/step | share of host self time | calls/step |",
             "|---|---|---|---|"]
    for e in sorted(avg, key=lambda e: float(e.self_cpu_time_total), reverse=True)[:rows]:
        name = e.key.replace("|", "/")[:90]
        lines.append(f"| `{name}` | {e.self_cpu_time_total / 1e3 / steps:.2f} | {e.self_cpu_time_total / total:.1%} "
                     f"| {e.count / steps:g} |")
    return lines


def profile_step(fn: Callable[[], None], steps: int, device: torch.device, rows: int,
                 host: int = 0) -> list[str]:
    """Wall ms/step unprofiled, then ``steps`` steps under the profiler: busy ms/step, kernels/step, top ops
    (and on a device the ``host`` top entries by self CPU time, :func:`host_rows`)."""
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    walls, enqueue = [], []
    for _ in range(steps):
        sync()
        t0 = time.perf_counter()
        fn()
        enqueue.append(time.perf_counter() - t0)  # the host's part: launches queued, the device may still run
        sync()
        walls.append(time.perf_counter() - t0)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=acts) as prof:
        for _ in range(steps):
            fn()
        sync()
    avg = prof.key_averages()
    kernels = [e for e in prof.events() if cuda and e.device_type == torch.autograd.DeviceType.CUDA]
    busy_us = float(sum(e.time_range.elapsed_us() for e in kernels))  # the kernels' own durations
    busy_ms = busy_us / 1e3 / steps
    lines = [f"wall {median(walls) * 1e3:.1f} ms/step (unprofiled, median of {steps}); "
             + (f"device busy {busy_ms:.1f} ms/step ({busy_ms / (median(walls) * 1e3):.0%} of wall); "
                f"{len(kernels) / steps:.0f} device kernels/step; host enqueue {median(enqueue) * 1e3:.1f} ms/step "
                f"(the step's Python returned, the device left to finish; unprofiled)" if cuda
                else "no device: self CPU time below"),
             "", f"| operator or kernel | self {'device' if cuda else 'CPU'} ms/step | share of "
             f"{'device busy' if cuda else 'CPU self time'} | calls/step |", "|---|---|---|---|"]
    key = _self_device_us if cuda else (lambda e: float(e.self_cpu_time_total))
    # on a device an operator's self time is its own kernels', so operators and kernels both appear and
    # the shares are of the kernels' total (they sum to more than 100 %); on CPU of all self time
    total = (busy_us if cuda else sum(key(e) for e in avg)) or 1.0
    for e in sorted(avg, key=key, reverse=True)[:rows]:
        name = e.key.replace("|", "/")[:90]
        lines.append(f"| `{name}` | {key(e) / 1e3 / steps:.2f} | {key(e) / total:.1%} | {e.count / steps:g} |")
    return lines + (host_rows(avg, steps, host) if cuda and host else [])


def python_rows(fn: Callable[[], None], steps: int, device: torch.device, rows: int) -> list[str]:
    """cProfile over ``steps`` more steps: the ``rows`` Python functions with the most own time per step (own:
    excluding the functions they call; C functions such as PyTorch's operators count as their own rows), with
    their cumulative time and calls per step."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(steps):
        fn()
    sync()
    prof.disable()
    stats = pstats.Stats(prof).stats  # {(file, line, name): (primitive calls, calls, own s, cumulative s, callers)}
    total = sum(v[2] for v in stats.values()) or 1.0
    lines = ["", f"Python (cProfile, {steps} steps): own time {total * 1e3 / steps:.1f} ms/step in all (with "
             "cProfile's own overhead)", "", "| function | own ms/step | share | cumulative ms/step | calls/step |",
             "|---|---|---|---|---|"]
    for (file, line, name), (_, calls, own, cum, _) in sorted(stats.items(), key=lambda kv: kv[1][2],
                                                               reverse=True)[:rows]:
        where = name if file == "~" else f"{'/'.join(Path(file).parts[-2:])}:{line} {name}"
        lines.append(f"| `{where.replace('|', '/')[:100]}` | {own * 1e3 / steps:.2f} | {own / total:.1%} | "
                     f"{cum * 1e3 / steps:.2f} | {calls / steps:g} |")
    return lines


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suite", choices=("cem", "hyperset"), required=True)
    ap.add_argument("--models", help="model names of the suite, separated by ';' (names hold commas); "
                    "default: its usual three")
    ap.add_argument("--setting", default="1024x8", help="cem: NxB (sequence × batch)")
    ap.add_argument("--vocab", type=_page.positive_int, default=32000)
    ap.add_argument("--dim", type=_page.positive_int, default=768)
    ap.add_argument("--layers", type=_page.positive_int, default=12, help="cem: layers")
    ap.add_argument("--heads", type=_page.positive_int, default=12)
    ap.add_argument("--mlp-hidden", type=_page.positive_int, default=2048)
    ap.add_argument("--iterations", type=_page.positive_int, default=24, help="hyperset: L")
    ap.add_argument("--batch", type=_page.positive_int, default=64, help="hyperset: boards per batch")
    ap.add_argument("--precision", choices=("bf16", "fp32"), default="bf16")
    ap.add_argument("--warmup", type=_page.nonneg_int, default=2)
    ap.add_argument("--steps", type=_page.positive_int, default=3)
    ap.add_argument("--rows", type=_page.positive_int, default=20, help="operators listed per model")
    ap.add_argument("--host-rows", type=_page.positive_int, default=12,
                    help="(device runs) host-side entries listed per model, by self CPU time; 0: none")
    ap.add_argument("--python", type=_page.nonneg_int, default=0, metavar="N",
                    help="also list the N Python functions with the most own time per step (cProfile); 0: none")
    ap.add_argument("--tiny", action="store_true", help="CPU smoke size")
    gpu_lm.keep_going_arg(ap)
    ap.add_argument("--out", type=Path, help="also write the output to this file (markdown)")
    args = ap.parse_args(argv)
    if args.tiny:
        args.vocab, args.dim, args.layers, args.heads, args.mlp_hidden = 97, 32, 2, 4, 64
        args.iterations, args.batch, args.setting, args.warmup, args.steps = 2, 2, "16x2", 1, 1
    device = pick_device()
    if device.type == "cpu":
        torch.set_num_threads(1)
    known = CEM_MODELS if args.suite == "cem" else HYPERSET_MODELS
    allowed = set(gpu_lm.models()) if args.suite == "cem" else set(hyperset_gpu.MODELS)
    names = args.models.split(";") if args.models else list(known)
    for n in names:
        if n not in allowed:
            raise SystemExit(f"--models: {n!r} is not a {args.suite} model; allowed: {', '.join(sorted(allowed))}")
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    size = (f"N×B {args.setting}, D {args.dim}, {args.layers} layers" if args.suite == "cem"
            else f"d {args.dim}, L {args.iterations}, batch {args.batch} × {hyperset_gpu.CELLS}")
    out = [f"# Where a {args.precision} training step's time goes (`python benchmarks/gpu_profile.py "
           f"--suite {args.suite}`)", "", "```",
           f"device: {device.type} ({gpu}); torch {torch.__version__}; commit {gpu_lm.git_commit()}",
           f"{size}, {args.heads} heads; {args.warmup} warm-up steps, then {args.steps} unprofiled and {args.steps} "
           "profiled steps per model", "```"]

    def emit() -> None:
        print("\n".join(out), flush=True)
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text("\n".join(out) + "\n")

    build = cem_steps if args.suite == "cem" else hyperset_steps
    for name in names:
        out += ["", f"## {name}", ""]
        try:
            fn = build(args, device, [name])[name]
            for _ in range(args.warmup):
                fn()
            out += profile_step(fn, args.steps, device, args.rows, args.host_rows)
            if args.python:
                out += python_rows(fn, args.steps, device, args.python)
        except Exception as err:  # noqa: BLE001 (re-raised unless --keep-going)
            if not args.keep_going:
                raise
            out.append(f"failed: {type(err).__name__}: {(str(err).strip().splitlines() or [''])[0][:160]}")
        emit()
        if device.type == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    _page.run(main)
