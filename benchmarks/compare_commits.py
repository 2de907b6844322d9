"""Training-step time of the same configs at two commits, interleaved: did a change cost speed?

    python benchmarks/compare_commits.py --base 3decd96 --head HEAD [--configs lm/llama lm/cem_full]
                                         [--rounds 5 --steps 10 --threads 1] [--set KEY=VALUE ...]

Each commit is checked out into a temporary git worktree. In every round, for every config, one
subprocess per commit (the order alternates between rounds) builds the model from that commit's own
``configs/<name>.yaml`` (the same experiment in each commit's config format), runs a few untimed warm-up
steps, then times ``--steps`` training steps (forward + backward + AdamW, float32) and prints the median
step time. Language-model configs build ``CausalLM`` (batch 8 x the config's sequence length); other
tasks (Sudoku for Hyper-SET, parity for EqT: generated data) go through the task registry, one fixed
batch of the task's own size, loss from ``task.loss``. The script reports, per config, head/base as the
median and range over rounds. Both commits run with the same thread count in turn, so load on a shared
machine hits both alike.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

SNIPPET = r"""
import statistics, sys, time, torch
torch.manual_seed(0)
torch.set_num_threads(int(sys.argv[3]))
from energyformer.experiment import build_task, load_run_config, resolve
cfg = load_run_config(sys.argv[1], sys.argv[4:])
if cfg.task.kind == "lm":
    from energyformer.models.lm import CausalLM
    model = CausalLM(cfg.model)
    n = cfg.model.max_seq_len
    x = torch.randint(0, cfg.model.vocab_size, (8, n))
    loss = lambda: model(x, x).loss
else:
    task = build_task(cfg, rank=0)
    cfg = resolve(cfg, task)
    model = task.build_model(cfg.model).train()
    batch = task.train_data.next_batch()
    loss = lambda: task.loss(model, batch)[0]
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
def step():
    opt.zero_grad(set_to_none=True)
    loss().backward()
    opt.step()
for _ in range(2):
    step()
times = []
for _ in range(int(sys.argv[2])):
    t0 = time.perf_counter(); step(); times.append(time.perf_counter() - t0)
print(statistics.median(times))
"""


def worktree(repo: Path, rev: str, where: Path) -> Path:
    path = where / rev.replace("/", "_")
    subprocess.run(["git", "-C", str(repo), "worktree", "add", "-q", "--detach", str(path), rev], check=True)
    return path


def time_once(tree: Path, config: str, steps: int, threads: int, overrides: list[str] = ()) -> float:
    env = dict(os.environ, PYTHONPATH=str(tree / "src"), OMP_NUM_THREADS=str(threads))
    env.setdefault("ENERGYFORMER_DATA", str(Path(__file__).resolve().parents[1] / "data_cache"))
    out = subprocess.run([sys.executable, "-c", SNIPPET, config, str(steps), str(threads), *overrides], env=env,
                         cwd=tree, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="git revision before the change")
    ap.add_argument("--head", default="HEAD", help="git revision after the change")
    ap.add_argument("--configs", nargs="+", default=["lm/llama", "lm/cem_full"])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                    help="config overrides for every config at both commits, e.g. a host-bound size: "
                         "model.dim=16 model.heads=2 model.iterations=24 train.batch_size=1")
    a = ap.parse_args(argv)
    repo = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"base": worktree(repo, a.base, Path(tmp)), "head": worktree(repo, a.head, Path(tmp))}
        try:
            ratios: dict[str, list[float]] = {c: [] for c in a.configs}
            secs: dict[tuple[str, str], list[float]] = {}
            for r in range(a.rounds):
                order = ["base", "head"] if r % 2 == 0 else ["head", "base"]
                for c in a.configs:
                    t = {w: time_once(trees[w], c, a.steps, a.threads, a.set) for w in order}
                    for w in order:
                        secs.setdefault((c, w), []).append(t[w])
                    ratios[c].append(t["head"] / t["base"])
                    print(f"round {r + 1}: {c:24s} base {t['base'] * 1e3:7.1f} ms  head {t['head'] * 1e3:7.1f} ms"
                          f"  head/base {ratios[c][-1]:.3f}", flush=True)
            print(f"\nhead {a.head} vs base {a.base}, {a.threads} thread(s), {a.rounds} rounds x {a.steps} steps"
                  f"{', overrides ' + ' '.join(a.set) if a.set else ''}:")
            for c, rs in ratios.items():
                print(f"  {c:24s} step time head/base: median {statistics.median(rs):.3f} "
                      f"(range {min(rs):.3f}-{max(rs):.3f}); base median "
                      f"{statistics.median(secs[(c, 'base')]) * 1e3:.1f} ms")
        finally:
            for t in trees.values():
                subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(t)], check=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
