"""Sudoku data for the Hyper-SET experiment (seed ``002``, §5.1 and Appendix D.2): the public API.

A puzzle is an ``(81,)`` row-major grid, ``0`` = blank, ``1..9`` = digits; a set is ``(n, 81)``.

The paper trains on Palm et al.'s (2018) set: Royle's 49,151 17-given puzzles with 0-17 givens added
back from the solution (17-34 givens, evenly spread), 9k train / 1k test. That list is in no registry
this project can reach, and 17-19 given puzzles cannot be *generated* here (see
:mod:`~energyformer.data.sudoku_generator` for the measured reachable range, practically 20-81).
So this module offers:

* a **generated, cached** set (:class:`SudokuGenConfig`, :func:`load_generated_sudoku`): unique
  solution, givens drawn uniformly from a range, train/validation/test from independent seed streams,
  stored under ``<data_dir>/sudoku/`` keyed by the parameters so a training run never regenerates;
* **readers/writers** for the published formats (:func:`read_sudoku`, :func:`write_sudoku`), so a
  user who has Palm et al.'s or another set can train on it (``SudokuDataset.split`` makes splits);
* a compiled **solver** (:func:`count_solutions`, :func:`solve`), **augmentation** (:func:`augment`),
  **scoring** (:func:`board_accuracy`, :func:`cell_accuracy`, :func:`score_sudoku`) and the
  **givens histogram** (:func:`givens_histogram`, :func:`format_givens_histogram`) every report shows.

Modules: ``sudoku_grid`` (geometry, checks), ``sudoku_solver`` (numba solver), ``sudoku_generator``,
``sudoku_augment``, ``sudoku_metrics``, ``sudoku_dataset`` (:class:`SudokuDataset`), ``sudoku_io``;
this one re-exports their public names and owns the cache.
"""

from __future__ import annotations

import hashlib
import io
import json
import time
import warnings
import zipfile
from pathlib import Path

import numpy as np
from pydantic import Field, model_validator

from energyformer.data.sudoku_augment import (
    SudokuTransforms, apply_transforms, augment, random_transforms,
)
from energyformer.data.sudoku_dataset import SudokuDataset
from energyformer.data.sudoku_generator import (
    DEFAULT_CHUNK_SIZE, DEFAULT_CLIMB_STEPS, DEFAULT_MAX_GRIDS, GENERATOR_VERSION, MIN_GIVENS,
    GenerationStats, generate_puzzle, generate_puzzles, generate_streams, givens_range,
)
from energyformer.data.sudoku_grid import (
    PEERS, UNITS, agrees_with_givens, as_grids, format_grid, grid_from_string, grid_to_string,
    has_conflicts, is_solution, is_solved_grid, n_givens,
)
from energyformer.data.sudoku_io import READ_FORMATS, WRITE_FORMATS, read_sudoku, write_sudoku
from energyformer.data.sudoku_metrics import (
    board_accuracy, cell_accuracy, format_givens_histogram, givens_histogram, score_sudoku, solved,
)
from energyformer.data.sudoku_solver import (
    count_solutions, dig_puzzle, has_unique_solution, random_full_grid, solve,
)
from energyformer.data.text import data_dir, note
from energyformer.errors import DataError, brief
from energyformer.utils.config import ConfigModel
from energyformer.utils.fields import Seed
from energyformer.utils.io import atomic_write_bytes, atomic_write_text

__all__ = [
    # config + cached generated splits
    "SudokuGenConfig", "load_generated_sudoku", "sudoku_cache_path", "SPLITS",
    # container + files
    "SudokuDataset", "read_sudoku", "write_sudoku", "READ_FORMATS", "WRITE_FORMATS",
    # solver + generator
    "count_solutions", "solve", "has_unique_solution", "random_full_grid", "dig_puzzle",
    "generate_puzzle", "generate_puzzles", "generate_streams", "givens_range", "GenerationStats",
    "MIN_GIVENS", "GENERATOR_VERSION",
    # augmentation
    "augment", "random_transforms", "apply_transforms", "SudokuTransforms",
    # grids, scoring, histogram
    "UNITS", "PEERS", "as_grids", "grid_from_string", "grid_to_string", "format_grid", "n_givens",
    "has_conflicts", "is_solved_grid", "agrees_with_givens", "is_solution",
    "solved", "board_accuracy", "cell_accuracy", "score_sudoku",
    "givens_histogram", "format_givens_histogram",
]

SPLITS: tuple[str, ...] = ("train", "validation", "test")
"""Split names in order; split ``k`` is generated from seed stream ``k``."""


class SudokuGenConfig(ConfigModel):
    """Parameters of a generated Sudoku set; together they key the on-disk cache.

    Each split is generated from its own seed stream, so the test set does not change when
    ``n_train`` does. Defaults: the paper's 9k/1k sizes plus a 500-puzzle validation split, with
    givens evenly spread over 21-34 (the paper's set spreads them over 17-34, which cannot be
    generated here; bring that file with :func:`read_sudoku` to match it).
    """

    n_train: int = Field(9000, ge=1)
    """training puzzles"""
    n_validation: int = Field(500, ge=1)
    """validation puzzles"""
    n_test: int = Field(1000, ge=0)
    """test puzzles"""
    givens: int | tuple[int, int] = (21, 34)
    """number of givens, or an inclusive (lo, hi) range drawn uniformly per puzzle; >= 17, and
    >= 20 in practice (energyformer.data.sudoku_generator). Default: the paper's upper end, 34, and
    the lowest count that still generates at tens of puzzles a second, 21 (~40 s for 10.5k)"""
    seed: Seed = 0
    """seed of the generator"""
    max_grids: int = Field(DEFAULT_MAX_GRIDS, ge=1)
    """full grids tried per puzzle before giving up"""
    climb_steps: int = Field(DEFAULT_CLIMB_STEPS, ge=0)
    """climb steps per grid when the plain dig stops above the target"""
    chunk_size: int = Field(DEFAULT_CHUNK_SIZE, ge=1)
    """puzzles per seeded chunk (part of the seed schedule, not a performance knob)"""

    @model_validator(mode="after")
    def _check_givens(self) -> SudokuGenConfig:
        givens_range(self.givens)
        return self

    def sizes(self) -> dict[str, int]:
        """``{'train': n_train, 'validation': n_validation, 'test': n_test}``."""
        return {"train": self.n_train, "validation": self.n_validation, "test": self.n_test}

    def cache_key(self) -> str:
        """16 hex digits of sha256 over the parameters and :data:`GENERATOR_VERSION`."""
        lo, hi = givens_range(self.givens)
        d = self.model_dump()
        d["givens"] = [lo, hi]
        d["generator_version"] = GENERATOR_VERSION
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


def sudoku_cache_path(cfg: SudokuGenConfig) -> Path:
    """``<data_dir>/sudoku/generated-<lo>-<hi>-<key>.npz`` (a ``.json`` with the metadata beside)."""
    lo, hi = givens_range(cfg.givens)
    return data_dir() / "sudoku" / f"generated-{lo}-{hi}-{cfg.cache_key()}.npz"


def _split_problem(p: np.ndarray | None, s: np.ndarray | None, split: str, cfg: SudokuGenConfig) -> str | None:
    """What is wrong with one cached split, or None: shapes, value range, and (vectorised, ~1 us a grid) every
    solution a complete valid grid that keeps its puzzle's givens, every puzzle's givens in the config's range.
    A tampered file would otherwise be scored silently (solutions of all 1s) or fail deep inside a run."""
    n, (lo, hi) = cfg.sizes()[split], givens_range(cfg.givens)
    if p is None or s is None:
        return f"lacks the {split} puzzles or solutions"
    if p.shape != (n, 81) or s.shape != p.shape:
        return f"holds {split} arrays of shapes {p.shape} and {s.shape}, expected ({n}, 81)"
    if p.dtype.kind not in "iu" or s.dtype.kind not in "iu":
        return f"holds {split} arrays of {p.dtype} and {s.dtype}, expected integers"
    if n and (p.min() < 0 or p.max() > 9 or s.min() < 0 or s.max() > 9):
        return f"holds {split} values outside 0..9"
    bad = np.flatnonzero(~(is_solved_grid(s) & agrees_with_givens(s, p)))
    if bad.size:
        return (f"holds {split} solution {bad[0]} that is not a valid Sudoku keeping its puzzle's givens "
                f"({bad.size} of {n} such)")
    given = (p != 0).sum(axis=1)
    bad = np.flatnonzero((given < lo) | (given > hi))
    if bad.size:
        return f"holds {split} puzzle {bad[0]} with {given[bad[0]]} givens, outside {lo}..{hi}"
    return None


def _load_cache(path: Path, cfg: SudokuGenConfig) -> tuple[dict[str, SudokuDataset] | None, str | None]:
    """``(the cached splits, None)``, or ``(None, what is wrong)`` when the file is unreadable, for other
    parameters (a foreign file) or fails :func:`_split_problem`."""
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            arrays = {k: z[k] for k in z.files if k != "meta"}
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as err:
        return None, f"cannot be read ({brief(err)})"
    config = meta.get("config") if isinstance(meta, dict) else None
    if not isinstance(config, dict) or meta.get("key") != cfg.cache_key() \
            or config.get("givens") != list(givens_range(cfg.givens)):
        return None, "was made for other parameters (its recorded key differs)"
    for split in SPLITS:
        problem = _split_problem(arrays.get(f"{split}_puzzles"), arrays.get(f"{split}_solutions"), split, cfg)
        if problem:
            return None, problem
    return {sp: _split_dataset(arrays[f"{sp}_puzzles"], arrays[f"{sp}_solutions"], sp, meta, path)
            for sp in SPLITS}, None


def _split_dataset(p: np.ndarray, s: np.ndarray, split: str, meta: dict, path: Path) -> SudokuDataset:
    lo, hi = meta["config"]["givens"]
    return SudokuDataset(p, s, name=f"sudoku-generated-{lo}-{hi}/{split}",
                         info={"source": "generated", "cache": str(path), "split": split, **meta})


def load_generated_sudoku(cfg: SudokuGenConfig | None = None, *, workers: int = 1,
                          cache: bool = True, refresh: bool = False,
                          progress: bool = False) -> dict[str, SudokuDataset]:
    """Generated train/validation/test :class:`SudokuDataset` s, from the disk cache when present.

    The first call generates (``workers`` processes; identical output for any number) and writes
    ``sudoku_cache_path(cfg)`` atomically, with a JSON sidecar recording the config, the generator
    version, each split's givens histogram and the generation cost per target (a line on stderr names it); later
    calls load it after a vectorised check (every solution a valid grid keeping its puzzle's givens, givens in
    range). A corrupt, tampered or foreign file is regenerated with a warning naming it. ``cache=False``
    neither reads nor writes the cache;
    ``refresh=True`` regenerates and overwrites. Each dataset's ``info`` holds that metadata.
    Generation checks that no solution grid occurs in two splits.
    """
    cfg = cfg or SudokuGenConfig()
    path = sudoku_cache_path(cfg)
    if cache and not refresh and path.exists():
        loaded, problem = _load_cache(path, cfg)
        if loaded is not None:
            return loaded
        warnings.warn(f"Sudoku cache {path} {problem}; generating it again", stacklevel=2)
    elif cache and not refresh:
        note(f"generating the Sudoku set into {path} (cached for later runs)")
    lo, hi = givens_range(cfg.givens)
    t0 = time.perf_counter()
    arrays: dict[str, np.ndarray] = {}
    stats = GenerationStats()
    generated = generate_streams(list(cfg.sizes().values()), (lo, hi), cfg.seed, workers=workers,
                                 chunk_size=cfg.chunk_size, max_grids=cfg.max_grids,
                                 climb_steps=cfg.climb_steps, progress=progress)
    for split, (p, s, st) in zip(SPLITS, generated):  # split k comes from seed stream k
        arrays[f"{split}_puzzles"], arrays[f"{split}_solutions"] = p, s
        stats.merge(st)
    seen: dict[bytes, str] = {}
    for split in SPLITS:
        for row in arrays[f"{split}_solutions"]:
            other = seen.setdefault(row.tobytes(), split)
            if other != split:
                raise DataError(f"generated Sudoku: one solution grid occurs in {other} and {split}"
                                f" (seed {cfg.seed}); use another seed")
    config = cfg.model_dump()
    config["givens"] = [lo, hi]
    meta = {
        "key": cfg.cache_key(), "generator_version": GENERATOR_VERSION, "config": config,
        "seconds": round(time.perf_counter() - t0, 2), "workers": workers,
        "givens_histogram": {sp: {str(k): v for k, v in givens_histogram(
            arrays[f"{sp}_puzzles"]).items()} for sp in SPLITS},
        "generation": stats.to_dict(),
    }
    if cache:
        buf = io.BytesIO()
        np.savez_compressed(buf, meta=np.array(json.dumps(meta)), **arrays)
        atomic_write_bytes(path, buf.getvalue())
        atomic_write_text(path.with_suffix(".json"), json.dumps(meta, indent=1) + "\n")
    return {sp: _split_dataset(arrays[f"{sp}_puzzles"], arrays[f"{sp}_solutions"], sp, meta, path)
            for sp in SPLITS}
