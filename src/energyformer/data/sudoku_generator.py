"""Seeded generator of Sudoku puzzles with a unique solution and a chosen number of givens.

One puzzle (:func:`generate_puzzle`):

1. draw a random full grid (:func:`~energyformer.data.sudoku_solver.random_full_grid`);
2. **dig**: visit the 81 cells in a random order and remove each given whose removal keeps the
   solution unique, stopping as soon as the puzzle has ``target`` givens;
3. if the dig ends at a *minimal* puzzle (no given can go) with more than ``target`` givens, **climb**:
   put back 2 random givens from the solution and dig again in a new random order; keep the result
   when it has no more givens than before (so the search can walk along plateaus). Up to
   ``climb_steps`` climbs per grid, then a new grid, up to ``max_grids`` grids; then a
   :class:`~energyformer.errors.DataError`.

Every puzzle returned has exactly one solution and exactly ``target`` givens.

Reachable range, measured with ``benchmarks/sudoku_generator.py`` on one core of this project's
2-core CPU (puzzles/s: median of 5 runs of 40 puzzles; "dig fails": fraction of full grids whose
plain dig stopped at a minimal puzzle above the target, so the climb had to take over):

=======  =========  ============  ==================================================
givens   dig fails  puzzles/s     notes
=======  =========  ============  ==================================================
36       0 %        ~5,500
30       0 %        ~4,100
26       3.5 %      ~2,400
24       45 %       ~840          1.5 climbs a puzzle
22       97 %       ~100          19 climbs a puzzle
21       99.7 %     ~35           67 climbs a puzzle
20       99.995 %   ~5            450 climbs a puzzle
19       (100 %)    ~0.3          ~6,000 climbs; with max_grids=10, 1 of 3 runs gave up
<= 18    (100 %)    --            not reached; 17 is the proven minimum of any unique puzzle
=======  =========  ============  ==================================================

The plain dig alone (20,000 random grids) stops at minimal puzzles of 20-29 givens: 20: 0.005 %,
21: 0.26 %, 22: 3.5 %, 23: 17.6 %, 24: 34.1 %, 25: 29.6 %, 26: 12.3 %, 27: 2.5 %, 28: 0.2 %,
29: 0.015 %. A 21-34 range (evenly spread) costs ~3.5 ms a puzzle: 10,000 puzzles in ~35 s on
one process, ~21 s on two (``workers=2``).

So ranges down to 20 are practical, 19 is slow and 17-18 cannot be generated here. The Hyper-SET
paper's data (Palm et al., 2018: Royle's 49,151 17-given puzzles with 0-17 givens added back from the
solution, 17-34 givens) cannot be reproduced by generation; users who have such a file read it with
:func:`~energyformer.data.sudoku_io.read_sudoku`.

Many puzzles (:func:`generate_puzzles`): the work is cut into chunks of ``chunk_size`` puzzles, and
chunk ``k`` of stream ``s`` draws from ``SeedSequence(seed, spawn_key=(s, k))``, so the output depends
only on ``(n, givens, seed, stream, chunk_size, budgets)`` and not on the number of worker processes.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from energyformer.data.sudoku_solver import _dig, random_full_grid
from energyformer.errors import DataError
from energyformer.utils.validate import check_int

#: Bumped whenever the generator's output for a given seed changes (it keys the data cache).
GENERATOR_VERSION = 1
#: No Sudoku with fewer givens has a unique solution (McGuire, Tugemann and Civario, 2012).
MIN_GIVENS = 17
#: Defaults of the search budget per puzzle.
DEFAULT_MAX_GRIDS = 20
DEFAULT_CLIMB_STEPS = 2000
DEFAULT_CHUNK_SIZE = 64


@dataclass
class TargetStats:
    """What generating the puzzles with one target number of givens cost."""

    puzzles: int = 0
    """puzzles produced"""
    grids: int = 0
    """full grids dug (one per first attempt, plus one per restart)"""
    dig_failures: int = 0
    """digs that ended at a minimal puzzle above the target (then the climb takes over)"""
    climbs: int = 0
    """climb steps taken"""
    seconds: float = 0.0
    """wall time spent"""

    @property
    def dig_failure_rate(self) -> float:
        """Fraction of full grids whose plain dig did not reach the target."""
        return self.dig_failures / self.grids if self.grids else 0.0

    def add(self, other: TargetStats) -> None:
        self.puzzles += other.puzzles
        self.grids += other.grids
        self.dig_failures += other.dig_failures
        self.climbs += other.climbs
        self.seconds += other.seconds


@dataclass
class GenerationStats:
    """Per-target :class:`TargetStats` of one generation run."""

    per_target: dict[int, TargetStats] = field(default_factory=dict)

    def target(self, k: int) -> TargetStats:
        return self.per_target.setdefault(int(k), TargetStats())

    def merge(self, other: GenerationStats) -> GenerationStats:
        for k, s in other.per_target.items():
            self.target(k).add(s)
        return self

    def to_dict(self) -> dict[str, dict[str, float]]:
        """JSON-friendly ``{target: {puzzles, grids, dig_failures, climbs, seconds}}``."""
        return {str(k): {"puzzles": s.puzzles, "grids": s.grids, "dig_failures": s.dig_failures,
                         "climbs": s.climbs, "seconds": round(s.seconds, 4)}
                for k, s in sorted(self.per_target.items())}

    def summary(self) -> str:
        """One line per target: puzzles/s and the dig failure rate."""
        lines = []
        for k, s in sorted(self.per_target.items()):
            rate = s.puzzles / s.seconds if s.seconds > 0 else float("inf")
            lines.append(f"givens {k:2d}: {s.puzzles} puzzles, {rate:.0f}/s, {s.grids} grids, "
                         f"dig failure rate {s.dig_failure_rate:.1%}, {s.climbs} climbs")
        return "\n".join(lines)


def givens_range(givens: int | Sequence[int]) -> tuple[int, int]:
    """``givens`` (an int or an inclusive ``(lo, hi)`` pair) as a checked ``(lo, hi)``."""
    if isinstance(givens, (int, np.integer)) and not isinstance(givens, bool):
        lo = hi = int(givens)
    elif isinstance(givens, Sequence) and not isinstance(givens, str) and len(givens) == 2:
        lo, hi = (int(g) if isinstance(g, np.integer) else g for g in givens)
    else:
        raise DataError(f"givens = {givens!r}: give an int or an inclusive (lo, hi) pair")
    # at most 80: a puzzle needs a blank cell (81 givens trained on a mean over no blanks: a NaN loss at step 1)
    check_int("givens (low end)", lo, min=MIN_GIVENS, max=80)
    check_int("givens (high end)", hi, min=lo, max=80)
    return lo, hi


def generate_puzzle(rng: np.random.Generator, givens: int, *,
                    max_grids: int = DEFAULT_MAX_GRIDS, climb_steps: int = DEFAULT_CLIMB_STEPS,
                    stats: TargetStats | None = None) -> tuple[np.ndarray, np.ndarray]:
    """One puzzle with exactly ``givens`` givens and a unique solution: ``(puzzle, solution)``.

    Both are ``(81,)`` int8 (0 = blank). Reproducible for a given state of ``rng``. The search
    (module docstring) tries up to ``max_grids`` full grids with ``climb_steps`` climbs each and
    raises :class:`~energyformer.errors.DataError` when the target is not reached. ``stats``, if
    given, accumulates the cost.
    """
    check_int("givens", givens, min=MIN_GIVENS, max=80)
    target = int(givens)
    check_int("max_grids", max_grids, min=1)
    check_int("climb_steps", climb_steps, min=0)
    st = TargetStats() if stats is None else stats
    t0 = time.perf_counter()
    try:
        for _ in range(max_grids):
            solution = random_full_grid(rng)
            puzzle = _dig(solution, rng.permutation(81), target)
            n = int(np.count_nonzero(puzzle))
            st.grids += 1
            if n > target:
                st.dig_failures += 1
            for _ in range(climb_steps):
                if n == target:
                    break
                st.climbs += 1
                trial = puzzle.copy()
                back = rng.choice(np.flatnonzero(trial == 0), size=2, replace=False)
                trial[back] = solution[back]
                trial = _dig(trial, rng.permutation(81), target)
                m = int(np.count_nonzero(trial))
                if m <= n:
                    puzzle, n = trial, m
            if n == target:
                st.puzzles += 1
                return puzzle, solution
    finally:
        st.seconds += time.perf_counter() - t0
    raise DataError(
        f"could not generate a Sudoku with {target} givens in {max_grids} grids x {climb_steps} "
        f"climbs; unique puzzles with fewer than 20 givens are rare (see "
        f"energyformer.data.sudoku_generator): raise max_grids/climb_steps or ask for more givens"
    )


def _chunk_rng(seed: int, stream: int, chunk: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(stream, chunk)))


def _generate_chunk(args: tuple) -> tuple[np.ndarray, np.ndarray, GenerationStats]:
    """Worker: ``n`` puzzles of chunk ``chunk``; targets drawn uniformly from ``[lo, hi]``."""
    n, lo, hi, seed, stream, chunk, max_grids, climb_steps = args
    rng = _chunk_rng(seed, stream, chunk)
    targets = rng.integers(lo, hi + 1, size=n)
    puzzles = np.zeros((n, 81), dtype=np.int8)
    solutions = np.zeros((n, 81), dtype=np.int8)
    stats = GenerationStats()
    for i, t in enumerate(targets):
        puzzles[i], solutions[i] = generate_puzzle(rng, int(t), max_grids=max_grids,
                                                   climb_steps=climb_steps, stats=stats.target(t))
    return puzzles, solutions, stats


def generate_streams(sizes: Sequence[int], givens: int | Sequence[int], seed: int = 0, *,
                     workers: int = 1, chunk_size: int = DEFAULT_CHUNK_SIZE,
                     max_grids: int = DEFAULT_MAX_GRIDS, climb_steps: int = DEFAULT_CLIMB_STEPS,
                     progress: bool = False) -> list[tuple[np.ndarray, np.ndarray, GenerationStats]]:
    """Several independent sets at once: ``sizes[s]`` puzzles from seed stream ``s``.

    Same as ``[generate_puzzles(n, givens, seed, stream=s, ...) for s, n in enumerate(sizes)]``
    but with one process pool for all of them (a pool costs a few seconds to start).
    """
    check_int("seed", seed, min=0)
    check_int("workers", workers, min=1)
    check_int("chunk_size", chunk_size, min=1)
    check_int("max_grids", max_grids, min=1)
    check_int("climb_steps", climb_steps, min=0)
    for n in sizes:
        check_int("n", n, min=0)
    lo, hi = givens_range(givens)
    jobs = [(min(chunk_size, n - start), lo, hi, seed, stream, k, max_grids, climb_steps)
            for stream, n in enumerate(sizes) for k, start in enumerate(range(0, n, chunk_size))]
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=sum(sizes), unit="puzzle", desc=f"sudoku {lo}-{hi} givens")
    results = []
    try:
        if workers == 1 or len(jobs) <= 1:
            for job in jobs:
                results.append(_generate_chunk(job))
                if bar is not None:
                    bar.update(job[0])
        else:
            ctx = mp.get_context("spawn")
            with cf.ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=ctx) as ex:
                for res, job in zip(ex.map(_generate_chunk, jobs), jobs):
                    results.append(res)
                    if bar is not None:
                        bar.update(job[0])
    finally:
        if bar is not None:
            bar.close()
    out = []
    for stream in range(len(sizes)):
        mine = [r for r, job in zip(results, jobs) if job[4] == stream]
        stats = GenerationStats()
        for _, _, st in mine:
            stats.merge(st)
        if mine:
            out.append((np.concatenate([r[0] for r in mine]), np.concatenate([r[1] for r in mine]),
                        stats))
        else:
            out.append((np.zeros((0, 81), dtype=np.int8), np.zeros((0, 81), dtype=np.int8), stats))
    return out


def generate_puzzles(n: int, givens: int | Sequence[int], seed: int = 0, *, stream: int = 0,
                     workers: int = 1, chunk_size: int = DEFAULT_CHUNK_SIZE,
                     max_grids: int = DEFAULT_MAX_GRIDS, climb_steps: int = DEFAULT_CLIMB_STEPS,
                     progress: bool = False) -> tuple[np.ndarray, np.ndarray, GenerationStats]:
    """``n`` unique-solution puzzles: ``(puzzles, solutions, stats)``, arrays ``(n, 81)`` int8.

    ``givens``: an int, or an inclusive ``(lo, hi)`` range from which each puzzle's number of
    givens is drawn uniformly (Palm et al.'s data is evenly spread over 17-34 the same way).
    ``stream`` separates independent sets drawn with one ``seed`` (e.g. one per split).
    ``workers > 1`` generates chunks in that many processes (spawned; each imports the package and
    loads the compiled solver, ~3 s, so a script calling it needs the usual
    ``if __name__ == "__main__":`` guard); the output is identical for any ``workers``.
    """
    check_int("stream", stream, min=0)
    sizes = [0] * stream + [n]
    return generate_streams(sizes, givens, seed, workers=workers, chunk_size=chunk_size,
                            max_grids=max_grids, climb_steps=climb_steps, progress=progress)[stream]
