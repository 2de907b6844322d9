"""Sudoku generator and solver throughput on one core (prints; not a test).

    python benchmarks/sudoku_generator.py                 # ~2 minutes
    python benchmarks/sudoku_generator.py --quick         # a few seconds
    python benchmarks/sudoku_generator.py --targets 19 --n 5 --reps 3 --climb-steps 2000
    python benchmarks/sudoku_generator.py --quick --no-plain --json OUT   # raw numbers for the Hyper-SET page

For each target number of givens: puzzles per second (generation on one process, median and range
over ``--reps`` repetitions with different seeds), the *dig failure rate* (fraction of full grids
whose plain dig stopped at a minimal puzzle above the target, so that the climb had to take over),
climbs per puzzle, and how many puzzles could not be made within the budget. Then solver
throughput (counting solutions up to 2) on generated puzzles and on a 17-given puzzle; the same
solver and generator as plain Python (a subprocess with ``NUMBA_DISABLE_JIT=1``), the comparison
that chose numba; and the wall clock of 1 vs 2 worker processes on a 21-34 givens set.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from energyformer.data.sudoku import (
    count_solutions, generate_puzzles, generate_streams, grid_from_string,
)
from energyformer.errors import DataError

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _page  # noqa: E402

P17 = "000000010400000000020000000000050407008000300001090000300400200050100000000806000"


def _fmt(xs: list[float], unit: str) -> str:
    return f"{statistics.median(xs):10.1f} {unit}  [{min(xs):.1f} - {max(xs):.1f}]"


def bench_generation(targets: list[int], n: int, reps: int, climb_steps: int, max_grids: int) -> list[dict]:
    print(f"generation, one process, {n} puzzles x {reps} repetitions per target "
          f"(climb_steps={climb_steps}, max_grids={max_grids})")
    print(f"{'givens':>6}  {'puzzles/s: median [range]':>36}  {'dig fails':>9}  "
          f"{'climbs/puzzle':>13}  {'gave up':>7}")
    out = []
    for target in targets:
        rates, grids, fails, climbs, made, gave_up = [], 0, 0, 0, 0, 0
        for rep in range(reps):
            t0 = time.perf_counter()
            try:
                _, _, stats = generate_puzzles(n, target, seed=1000 + rep, chunk_size=n,
                                               climb_steps=climb_steps, max_grids=max_grids)
            except DataError:
                gave_up += 1
                continue
            rates.append(n / (time.perf_counter() - t0))
            st = stats.per_target[target]
            grids, fails, climbs, made = grids + st.grids, fails + st.dig_failures, \
                climbs + st.climbs, made + st.puzzles
        rate = _fmt(rates, "/s") if rates else f"{'-':>36}"
        print(f"{target:>6}  {rate:>36}  {fails / max(grids, 1):>9.1%}  "
              f"{climbs / max(made, 1):>13.1f}  {gave_up:>4}/{reps}")
        out.append({"givens": target, "puzzles_per_s": rates, "dig_fail_rate": fails / max(grids, 1),
                    "climbs_per_puzzle": climbs / max(made, 1), "gave_up": gave_up, "reps": reps, "n": n})
    return out


def bench_solver(reps: int, n: int) -> dict[str, list[float]]:
    print(f"\nsolver (count solutions up to 2), compiled, {n} puzzles x {reps} repetitions")
    out = {}
    for givens in (24, 30):
        puzzles, _, _ = generate_puzzles(n, givens, seed=7)
        rates = []
        for _ in range(reps):
            t0 = time.perf_counter()
            counts, _ = count_solutions(puzzles)
            rates.append(n / (time.perf_counter() - t0))
            assert (counts == 1).all()
        print(f"  {givens} givens:        {_fmt([r / 1e3 for r in rates], 'k puzzles/s')}")
        out[f"{givens} givens"] = rates
    p17 = np.stack([grid_from_string(P17)] * 200)
    rates = []
    for _ in range(reps):
        t0 = time.perf_counter()
        count_solutions(p17)
        rates.append(200 / (time.perf_counter() - t0))
    print(f"  17-given (Royle #1): {_fmt([r / 1e3 for r in rates], 'k puzzles/s')}")
    out["17-given (Royle #1)"] = rates
    return out


_PLAIN = """
import time, numpy as np
from energyformer.data.sudoku import count_solutions, generate_puzzles, grid_from_string
t = time.perf_counter(); p, _, _ = generate_puzzles(4, 30, seed=7); g30 = 4 / (time.perf_counter() - t)
t = time.perf_counter(); p24, _, _ = generate_puzzles(4, 24, seed=7); g24 = 4 / (time.perf_counter() - t)
t = time.perf_counter(); count_solutions(p24); a = (time.perf_counter() - t) / 4
t = time.perf_counter(); count_solutions(grid_from_string({p17!r})); b = time.perf_counter() - t
print(a, b, g30, g24)
"""


def bench_plain_python() -> None:
    env = {**os.environ, "NUMBA_DISABLE_JIT": "1"}
    out = subprocess.run([sys.executable, "-c", _PLAIN.format(p17=P17)], env=env,
                         capture_output=True, text=True, check=True).stdout.split()
    a, b, g30, g24 = map(float, out)
    print("\nthe same algorithm as plain Python (NUMBA_DISABLE_JIT=1, one run of 4 puzzles):")
    print(f"  solver: {a * 1e3:.1f} ms per 24-given puzzle, {b * 1e3:.1f} ms for the 17-given one")
    print(f"  generation: {g30:.1f} puzzles/s at 30 givens, {g24:.1f} puzzles/s at 24 givens")


def bench_workers(n: int, givens: tuple[int, int]) -> None:
    print(f"\n{n} puzzles, givens {givens[0]}-{givens[1]}, wall clock by worker processes "
          f"(spawn start-up included)")
    base = None
    for workers in (1, 2):
        t0 = time.perf_counter()
        p, _, _ = generate_streams([n], givens, seed=3, workers=workers)[0]
        dt = time.perf_counter() - t0
        if base is None:
            base = p
        assert (p == base).all(), "output depends on the number of workers"
        print(f"  workers={workers}: {dt:6.1f} s  ({n / dt:7.0f} puzzles/s)")


#: (full, --quick) values of the options --quick changes; an option given explicitly wins over both
PRESETS = {"targets": ([36, 30, 26, 24, 22, 21, 20], [36, 30, 26, 24]), "n": (40, 20), "reps": (5, 3),
           "workers_n": (10000, 0)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    pos = _page.positive_int
    ap.add_argument("--targets", type=pos, nargs="+", help="givens per puzzle (default 36 30 26 24 22 21 20)")
    ap.add_argument("--n", type=pos, help="puzzles per repetition and target (default 40)")
    ap.add_argument("--reps", type=pos, help="repetitions (default 5)")
    ap.add_argument("--climb-steps", type=pos, default=2000)
    ap.add_argument("--max-grids", type=pos, default=20)
    ap.add_argument("--quick", action="store_true",
                    help="targets 36 30 26 24, n=20, reps=3, no worker comparison; explicit values of those win")
    ap.add_argument("--no-plain", action="store_true", help="skip the plain-Python comparison")
    ap.add_argument("--workers-n", type=_page.nonneg_int,
                    help="puzzles for the 1-vs-2 worker comparison (default 10000; 0: skip)")
    ap.add_argument("--json", type=Path, help="also write the raw generation and solver rates and the machine here")
    args = ap.parse_args(argv)
    for key, values in PRESETS.items():  # --quick used to overwrite explicit values silently
        if getattr(args, key) is None:
            setattr(args, key, values[args.quick])
    print(_page.header("cpu"))
    count_solutions(np.zeros(81, dtype=np.int8))  # load (or compile) the solver first
    generate_puzzles(1, 30, seed=0)
    meta = _page.machine()
    gen = bench_generation(args.targets, args.n, args.reps, args.climb_steps, args.max_grids)
    solver = bench_solver(args.reps, 500 if not args.quick else 100)
    if args.json:
        settings = {"n": args.n, "reps": args.reps, "climb_steps": args.climb_steps, "max_grids": args.max_grids,
                    "solver_puzzles": 500 if not args.quick else 100}
        _page.write_json(args.json, {"settings": settings, "meta": _page.finish(meta), "generation": gen,
                                     "solver": solver})
    if not args.no_plain:
        bench_plain_python()
    if args.workers_n:
        bench_workers(args.workers_n, (21, 34))


if __name__ == "__main__":
    _page.run(main)
