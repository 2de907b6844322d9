"""Training throughput and memory of the image models (Hyper-SET seed 002 Table 1 set, ``configs/images``).

Each model is built from its config (parameter-matched widths, 12 iterations) for the chosen image
set's shape and timed on one training step (forward, cross-entropy, backward, Adam step) of a fixed
random batch. The variants are interleaved (a random order in every round) and repeated; printed per
model: parameters, median step time and its range (min..max), training images/s at the median, the
ratio of its median step time to the first model's (the Transformer by default), and memory:

* CUDA: ``torch.cuda.max_memory_allocated`` over one training step (weights, gradients, Adam state and
  activations), reset per model;
* CPU: the bytes of the tensors autograd saves for the backward pass (distinct storages, counted by
  ``torch.autograd.graph.saved_tensors_hooks``) plus weights, gradients and Adam state — the part of
  the peak that depends on the model; the allocator's own peak is not observable per model on CPU.

Clock: CPU time of the process on CPU (``time.process_time``: time preempted by other processes on a
shared machine does not count), wall clock with synchronisation on CUDA.

Usage: python benchmarks/image_models.py [--dataset fashion_mnist] [--batch 128] [--repeats 7]
           [--models transformer et ...] [--device cpu|cuda] [--threads 1] [--precision fp32|bf16]
           [--out FILE.md]  (also write the table to FILE; the hyperset-images page includes
           ``docs/results/images/cpu/benchmark.md`` verbatim)
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _page  # noqa: E402  (a sibling: argument checks and the run header)

from energyformer.experiment import load_run_config  # noqa: E402
from energyformer.models.params import count_params  # noqa: E402
from energyformer.tasks.classification import IMAGE_SHAPES  # noqa: E402

DEFAULT_MODELS = ["transformer", "transformer_12layer", "et", "crate", "crate_t", "crate_t_code", "hyperset",
                  "hyperset_wide"]


def build(name: str, dataset: str, device: str):
    from energyformer.models.vision import VisionTransformer
    from energyformer.utils.config import replace

    cfg = load_run_config(f"images/{name}", [f"task.dataset={dataset}"])
    ch, side, n = IMAGE_SHAPES[dataset]
    mcfg = replace(cfg.model, channels=ch, image_size=side, n_classes=n)
    torch.manual_seed(0)
    model = VisionTransformer(mcfg).to(device)
    return model, mcfg


def saved_bytes(model, x, y) -> int:
    """Bytes of distinct storages autograd saves in one forward pass (activation memory)."""
    seen: dict[int, int] = {}

    def pack(t):
        try:
            s = t.untyped_storage()
            seen[s.data_ptr()] = s.nbytes()
        except (RuntimeError, NotImplementedError):
            pass
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = F.cross_entropy(model(x).logits.float(), y)
    loss.backward()
    model.zero_grad(set_to_none=True)
    return sum(seen.values())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="fashion_mnist", choices=sorted(IMAGE_SHAPES))
    p.add_argument("--models", nargs="+", default=DEFAULT_MODELS)
    p.add_argument("--batch", type=_page.positive_int, default=128)
    p.add_argument("--repeats", type=_page.positive_int, default=7)
    p.add_argument("--warmup", type=_page.nonneg_int, default=2)
    p.add_argument("--device", type=_page.device_arg, default="cpu", help="cpu or cuda")
    p.add_argument("--threads", type=_page.positive_int, default=1)
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--out", help="also write the printed table (markdown) to this file")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    cuda = a.device.startswith("cuda")
    clock = time.perf_counter if cuda else time.process_time
    ch, side, n = IMAGE_SHAPES[a.dataset]
    g = torch.Generator().manual_seed(0)
    x = torch.randn(a.batch, ch, side, side, generator=g).to(a.device)
    y = torch.randint(0, n, (a.batch,), generator=g).to(a.device)
    models = {}
    for name in a.models:
        try:
            models[name] = build(name, a.dataset, a.device)
        except Exception as err:  # a config that cannot be built here (e.g. no Hyper-SET kind) is reported
            print(f"skip {name}: {type(err).__name__}: {err}")
    if not models:
        raise SystemExit(f"--models {' '.join(a.models)}: none could be built for --dataset {a.dataset} (see above)")
    opts = {k: torch.optim.Adam(m.parameters(), 1e-4) for k, (m, _) in models.items()}
    amp = torch.autocast("cuda" if cuda else "cpu", dtype=torch.bfloat16) if a.precision == "bf16" else None

    def step(name):
        m, _ = models[name]
        if cuda:
            torch.cuda.synchronize()
        t0 = clock()
        if amp is not None:
            with amp:
                logits = m(x).logits
        else:
            logits = m(x).logits
        loss = F.cross_entropy(logits.float(), y)
        opts[name].zero_grad(set_to_none=True)
        loss.backward()
        opts[name].step()
        if cuda:
            torch.cuda.synchronize()
        return clock() - t0

    memory = {}
    for name, (m, _) in models.items():
        for _ in range(a.warmup):
            step(name)
        if cuda:
            torch.cuda.reset_peak_memory_stats()
            step(name)
            memory[name] = torch.cuda.max_memory_allocated()
        else:
            state = sum(t.numel() * t.element_size() for st in opts[name].state.values() for t in st.values()
                        if torch.is_tensor(t))
            params = sum(q.numel() * q.element_size() for q in m.parameters())
            memory[name] = saved_bytes(m, x, y) + 2 * params + state
    times = {k: [] for k in models}
    order = list(models)
    for _ in range(a.repeats):
        random.shuffle(order)
        for name in order:
            times[name].append(step(name))
    base = next(iter(models))
    med = {k: statistics.median(v) for k, v in times.items()}
    lines: list[str] = []
    emit = lines.append
    emit(_page.header(a.device))
    emit(f"Image models, {a.dataset} ({ch}x{side}x{side}), batch {a.batch}, {a.repeats} interleaved rounds, "
          f"{a.device} ({platform.processor() or platform.machine()}, {a.threads} threads), {a.precision}, "
          f"clock {'wall' if cuda else 'process CPU'}; torch {torch.__version__}:")
    emit("")
    emit("| model | width | params | step time median (range) | train images/s | time / " + base
          + " | memory" + (" (CUDA peak)" if cuda else " (saved activations + weights, grads, Adam)") + " |")
    emit("|---|---:|---:|---|---:|---:|---:|")
    for name, (m, mcfg) in models.items():
        v = times[name]
        emit(f"| {name} | {mcfg.dim} | {count_params(m)['total'] / 1e3:.1f}K | {1e3 * med[name]:.1f} ms "
              f"({1e3 * min(v):.1f}..{1e3 * max(v):.1f}) | {a.batch / med[name]:.0f} | "
              f"{med[name] / med[base]:.2f} | {memory[name] / 2**20:.1f} MiB |")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(text)
    return 0


if __name__ == "__main__":
    _page.run(main)
