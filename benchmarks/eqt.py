"""Equilibrium transformer (EqT, seed 003) overheads, measured side by side in one run.

Baseline (``configs/eqt/baseline.yaml``) vs EqT (``configs/eqt/eqt.yaml``), same backbone, on parity
batches: (1) parameters (+%), (2) one training step (forward + backward + AdamW) at K_train = 2,
(3) inference at K = 8 without and with early stopping (ε = ``--tol``), (4) inference at K = 32,
(5) matmul FLOPs (``torch.utils.flop_counter``) of the EqT forward relative to the baseline's: the
floor a timing ratio cannot go below on compute alone. Variants are interleaved in every repeat;
the median ratio to the baseline of the same repeat and its range are printed.

``--before REV`` also times the source of git revision REV (``git archive`` into a temporary
directory; the working tree is not touched) in a second worker process, interleaved with the
current tree in every repeat (the order alternates), so "before" and "after" ratios come from one
run. Goals from issue 13: inference at K = 8 with early stopping ≤ 2.5× (paper ≈3×), training +15%,
parameters +8%.

Usage: ``python benchmarks/eqt.py [--length 64] [--batch 32] [--repeats 7] [--tol 1e-3] [--threads 1]
[--before HEAD] [--model-set n_layers=6 --model-set dim=256 --model-set heads=8] [--json FILE]`` (the last: the
paper's 6 x 256 backbone, where the ERM is a smaller share of the model than in our CPU configs). Run it alone: timings on a shared machine are noisy, so only ratios from one
run are reported. ``--json FILE`` also writes the per-round ratios (the page of the ``eqt`` study reads
``docs/results/eqt/<scale>/overheads.json``, this script's committed output).

A worker that stops (a ``--model-set`` the config refuses, an error in the tree of ``--before``) ends the run with
one line: the worker's exit code and the last line of its error output (it used to end in the parent's
JSONDecodeError traceback below the worker's own). The parent checks its arguments (counts >= 1, ``--tol`` > 0,
``KEY=VALUE``, a ``--before`` revision git knows) before it starts a worker; the worker, which may run an older
tree's ``energyformer``, imports nothing from ``benchmarks/``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _worker(args) -> None:
    """Build both models from the importable ``energyformer``; answer ``round`` / ``info`` on stdin."""
    import torch
    import yaml

    from energyformer.data.parity import make_parity
    from energyformer.models.config import ModelConfig
    from energyformer.models.equilibrium import EquilibriumConfig
    from energyformer.tasks.parity import ParityTask, ParityTaskConfig
    from energyformer.utils.config import read_yaml

    torch.set_num_threads(args.threads)
    base, eqt = read_yaml(ROOT / "configs/eqt/baseline.yaml"), read_yaml(ROOT / "configs/eqt/eqt.yaml")
    for item in args.model_set:  # backbone overrides shared by both models, e.g. n_layers=6
        key, _, value = item.partition("=")
        for cfg in (base, eqt):
            cfg["model"][key] = yaml.safe_load(value)
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
    for line in sys.stdin:
        if line.strip() == "round":
            out = {}
            for k, fn in variants.items():
                t = time.perf_counter()
                fn()
                out[k] = time.perf_counter() - t
        else:
            out = {"params": [sum(q.numel() for q in m.parameters()) for m in (mb, me)], "flops": _flops(mb, me, x)}
        print(json.dumps(out), flush=True)


def _flops(mb, me, x) -> dict[str, float]:
    """Matmul FLOPs (mm, bmm, addmm, convolution, attention: torch's flop formulas, backward of the
    energy gradients included) of eval forwards: the baseline and EqT at K = 0, 1, 2, 8."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import flop_registry

    class Count(TorchDispatchMode):
        total = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            f = flop_registry.get(func._overloadpacket)
            if f is not None:
                self.total += f(*args, **(kwargs or {}), out_val=out)
            return out

    out = {}
    with torch.no_grad():
        for name, fn in (("baseline", lambda: mb.eval()(x)), *((f"K={k}", lambda k=k: me.eval()(x, steps=k))
                                                               for k in (0, 1, 2, 8))):
            with Count() as c:
                fn()
            out[name] = float(c.total)
    return out


def _run_worker(args) -> None:
    """:func:`_worker`; an error prints its traceback, then one line saying what was wrong (the CLI's wording where
    this tree has it) as the last line of stderr, which the parent forwards, and exits 2."""
    try:
        _worker(args)
    except Exception as err:  # noqa: BLE001 - the parent reports the last line
        import traceback

        traceback.print_exc()
        try:
            from energyformer.cli_errors import describe_error
            msg = describe_error(err)[0]
        except ImportError:  # an older tree
            msg = f"{type(err).__name__}: {err}"
        print(" ".join(msg.split()), file=sys.stderr, flush=True)
        raise SystemExit(2) from None


class _Worker:
    def __init__(self, src: Path, args, name: str = "after"):
        env = dict(os.environ, PYTHONPATH=str(src), OMP_NUM_THREADS=str(args.threads))
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--length", str(args.length),
               "--batch", str(args.batch), "--tol", str(args.tol), "--threads", str(args.threads)]
        cmd += [a for item in args.model_set for a in ("--model-set", item)]
        self.name, self.err = name, tempfile.TemporaryFile("w+")  # a file, not a pipe: a chatty worker cannot block
        self.p = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err,
                                  text=True)

    def ask(self, what: str) -> dict:
        try:
            self.p.stdin.write(what + "\n")
            self.p.stdin.flush()
        except BrokenPipeError:
            self.failed()
        line = self.p.stdout.readline()
        if not line:
            self.failed()
        return json.loads(line)

    def failed(self) -> None:
        """End the run with one line: the worker's exit code and the last line of its error output."""
        rc = self.p.wait()
        self.err.seek(0)
        last = next((s.strip() for s in reversed(self.err.read().splitlines()) if s.strip()), "no error output")
        raise SystemExit(f"eqt.py: error: the {self.name!r} worker stopped (exit code {rc}): {last}")

    def close(self) -> None:
        self.p.stdin.close()
        self.p.wait()
        self.err.close()


def _extract(rev: str, where: Path) -> Path:
    """``git archive REV src`` unpacked under ``where`` (read-only use of the repository)."""
    data = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "src"], check=True, capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(data)) as tf:
        tf.extractall(where, filter="data") if sys.version_info >= (3, 12) else tf.extractall(where)
    return where / "src"


def _summary(name: str, rounds: list[dict]) -> list[str]:
    lines = []
    for group, ref in (("train", "train baseline"), ("infer", "infer baseline")):
        for k in rounds[0]:
            if not k.startswith(group):
                continue
            r = [t[k] / t[ref] for t in rounds]
            ms = statistics.median(t[k] for t in rounds) * 1e3
            lines.append(f"{name:7s} {k:28s} median {ms:8.1f} ms   ratio {statistics.median(r):5.2f}x "
                         f"[{min(r):.2f}, {max(r):.2f}]")
    return lines


def _write_json(args, info: dict, rounds: list[dict]) -> None:
    import platform

    ratios = {k: [t[k] / t[("train" if k.startswith("train") else "infer") + " baseline"] for t in rounds]
              for k in rounds[0] if not k.endswith("baseline")}
    cmd = " ".join(sys.argv[1:])
    source = (f"Measured by `python benchmarks/eqt.py {cmd}` ({platform.machine()}, {args.threads} thread(s)): "
              f"freshly initialised models, a training step and inference of both alternated in each of "
              f"{args.repeats} rounds after one warm-up round; ratios to the baseline of the same round.")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"source": source, "params": info["params"], "flops": info.get("flops"),
                                           "ratios": ratios}, indent=1) + "\n")


def _key_value(text: str) -> str:
    """argparse type of ``--model-set``: KEY=VALUE with a non-empty KEY."""
    if not text.partition("=")[0] or "=" not in text:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE (e.g. n_layers=6)")
    return text


def _check_revision(p: argparse.ArgumentParser, rev: str) -> None:
    """An argparse error naming ``--before REV`` where git does not know REV as a commit."""
    out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
                         capture_output=True, text=True)
    if out.returncode:
        p.error(f"argument --before: {rev!r} is not a git revision of {ROOT}")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    worker = "--worker" in argv   # checked by the parent; the worker may run an old tree (module docstring)
    if worker:
        pos, posf, kv = int, float, str
    else:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import _page

        pos, posf, kv = _page.positive_int, _page.positive_float, _key_value
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--length", type=pos, default=64)
    p.add_argument("--batch", type=pos, default=32)
    p.add_argument("--repeats", type=pos, default=7)
    p.add_argument("--tol", type=posf, default=1e-3)
    p.add_argument("--threads", type=pos, default=1)
    p.add_argument("--before", default=None, help="git revision to compare with (e.g. HEAD)")
    p.add_argument("--model-set", action="append", type=kv, default=[], metavar="KEY=VALUE",
                   help="top-level model key for both models (repeatable), e.g. the paper's backbone: "
                        "--model-set n_layers=6 --model-set dim=256 --model-set heads=8")
    p.add_argument("--json", default=None, metavar="FILE",
                   help="write the per-round ratios of the current tree (e.g. docs/results/eqt/cpu/overheads.json)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return _run_worker(args)
    if args.before:
        _check_revision(p, args.before)
    print(_page.header("cpu", args.threads))
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"after": ROOT / "src"}
        if args.before:
            trees = {"before": _extract(args.before, Path(tmp)), **trees}
        workers = {k: _Worker(src, args, k) for k, src in trees.items()}
        info = {k: w.ask("info") for k, w in workers.items()}
        times: dict[str, list[dict]] = {k: [] for k in workers}
        for i in range(args.repeats):
            for k in (list(workers) if i % 2 == 0 else list(workers)[::-1]):
                times[k].append(workers[k].ask("round"))
        for w in workers.values():
            w.close()
    label = {k: (k if args.before else "") for k in workers}
    for k, inf in info.items():
        nb, ne = inf["params"]
        print(f"{label[k]:7s} parameters: baseline {nb}, EqT {ne} (+{100 * (ne / nb - 1):.1f}%; paper +8%)")
    for k, rounds in times.items():
        print("\n".join(_summary(label[k], rounds)))
    if args.json:
        _write_json(args, info["after"], times["after"])
    for k, inf in info.items():
        fl = inf.get("flops") or {}
        if fl:
            b = fl["baseline"]
            step, prep = fl["K=2"] - fl["K=1"], fl["K=1"] - fl["K=0"] - (fl["K=2"] - fl["K=1"])
            print(f"{label[k]:7s} matmul FLOPs / baseline forward ({b / 1e6:.0f} MFLOP): one refinement step "
                  f"{step / b:.2f}, prepare {prep / b:.2f}, EqT K=8 forward {fl['K=8'] / b:.2f}x")


if __name__ == "__main__":
    main()
