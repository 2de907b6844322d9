"""Sudoku task (Hyper-SET seed 002, §5.1 and App. D.2): fill the blanks of 9 x 9 boards.

Input: the 81 cells as tokens 0..9 (0 = blank); model: a bidirectional
:class:`~energyformer.models.TokenEncoder` with 9 classes per cell (digits 1..9); loss: cross-entropy
**on the blank cells only** (App. D.2). Metrics (:mod:`energyformer.data.sudoku_metrics`):
**board accuracy** — the fraction of boards solved completely (the paper's headline number; the
givens are copied into the prediction) — and **cell accuracy** on the blanks. ``eval_iterations``
adds board / cell accuracy at other iteration counts (test-time extrapolation, Fig. 3b).

Data (``task.source``): ``generated`` (default) builds cached train / validation / test splits with
the data layer's generator (:class:`~energyformer.data.sudoku.SudokuGenConfig`; unique solutions,
givens drawn uniformly from ``generate.givens``). The paper's set (Palm et al. 2018, 17-34 givens,
9k train / 1k test) is not available here and boards with 17-19 givens cannot be generated (the
generator's reachable range starts near 20): **our default data are 21-34 givens, so they are easier
than the paper's** and numbers are not comparable. ``files`` reads ``train_file`` /
``validation_file`` / ``test_file`` in any format :func:`~energyformer.data.sudoku.read_sudoku`
accepts (bring Palm et al.'s set this way). Every split's givens histogram is logged
(:meth:`SudokuTask.describe_data`).

``energyformer eval RUN --puzzles FILE [--iterations N]`` scores any puzzle file; puzzles without
solutions are scored by validity against their givens. ``energyformer eval RUN --split S`` scores every board
of the split; ``task.eval_max`` caps the periodic evaluation only.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import os
import warnings
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field, field_validator, model_validator
from torch import nn

from ..core.precision import at_least_float32
from ..data.sudoku import SudokuDataset, SudokuGenConfig, augment, load_generated_sudoku, read_sudoku, score_sudoku
from ..utils.fields import IterationCounts
from ..utils.config import KindConfig, replace
from ..utils.validate import ConfigError, DataError
from .base import Task, TaskConfig, register_task

VOCAB, CLASSES, CELLS = 10, 9, 81


class SudokuTaskConfig(TaskConfig):
    """Sudoku solving: loss on blanks, board and cell accuracy (Hyper-SET §5.1)."""

    kind: Literal["sudoku"] = "sudoku"
    source: Literal["generated", "files"] = "generated"
    """generated (cached, task.generate) or files (task.train_file, ...)"""
    generate: SudokuGenConfig = Field(default_factory=SudokuGenConfig)
    """generator parameters (sizes, givens range, seed) when source = generated"""
    train_file: str | None = None
    """training puzzles with solutions (source = files)"""
    validation_file: str | None = None
    """validation puzzles (source = files; None: min(500, a tenth) of the training file's puzzles split off)"""
    test_file: str | None = None
    """test puzzles (source = files; None: no test split)"""
    augment: bool = False
    """apply a random validity-preserving transform (digits, transpose, bands, rows) to each training batch"""
    batch_size: int = Field(16, ge=1)
    """boards per training batch (paper: 16)"""
    eval_batch_size: int = Field(250, ge=1)
    """boards per evaluation batch"""
    eval_max: int | None = Field(None, ge=1)
    """boards of the split scored by the periodic evaluation (None: all); `energyformer eval` scores them all"""
    eval_iterations: IterationCounts = Field(default_factory=list)
    """extra iteration counts scored by evaluate (e.g. [16] for 2x a model trained with 8)"""
    workers: int = Field(1, ge=1)
    """processes generating the data on first use (cached afterwards)"""

    @field_validator("train_file", "validation_file", "test_file")
    @classmethod
    def _absolute(cls, path: str | None) -> str | None:
        """Absolute, as ``task.text_files``: the saved config names the same file for ``eval`` and ``--resume`` from
        any directory (a relative name read another directory's file of that name, silently)."""
        return None if path is None else os.path.abspath(os.path.expanduser(path))

    @model_validator(mode="after")
    def _files(self) -> SudokuTaskConfig:
        if self.source == "files" and not self.train_file:
            raise ValueError("task.train_file is not set: give a puzzle file with solutions when task.source = 'files'")
        if self.source != "files" and (self.train_file or self.validation_file or self.test_file):
            raise ValueError(f"task.train_file/validation_file/test_file are set but task.source = {self.source!r} "
                             "ignores them: set task.source=files")
        for key in ("validation_file", "test_file"):
            if self.train_file and getattr(self, key) == self.train_file:
                raise ValueError(f"task.{key} = {self.train_file!r} is task.train_file: its scores would be training "
                                 f"scores; give held-out puzzles, or leave validation_file unset to split them off")
        return self


def _boards(rows: list[int]) -> str:
    """0-based rows of a puzzle file as its board numbers for a warning (the first five)"""
    return ", ".join(str(i + 1) for i in rows[:5]) + (" ..." if len(rows) > 5 else "")


@functools.lru_cache(maxsize=2)
def _generated(gen_json: str, workers: int) -> dict[str, SudokuDataset]:
    return load_generated_sudoku(SudokuGenConfig.model_validate_json(gen_json), workers=workers)


def load_splits(cfg: SudokuTaskConfig) -> dict[str, SudokuDataset]:
    """train / validation (/ test) :class:`SudokuDataset` s of the task config.

    With ``source = files``: boards with no blank cell are left out of every split with a warning (nothing to
    learn or solve: a batch of them averaged the loss over no cell, a NaN, and each counted as solved when
    scored), a file of only such boards is a :class:`DataError`; held-out boards that are also training
    puzzles are warned about, and a held-out split made only of training puzzles (e.g. ``validation_file`` =
    ``train_file``) is a DataError: its scores would be training scores."""
    if cfg.source == "generated":
        return dict(_generated(cfg.generate.model_dump_json(), cfg.workers))
    train, _ = _with_blanks(read_sudoku(cfg.train_file), f"task.train_file = {cfg.train_file!r}")
    if not train.has_solutions:
        raise ConfigError(f"task.train_file = {cfg.train_file!r}: has no solutions (training needs them)")
    out = {}
    if cfg.validation_file:
        out["train"] = train
        out["validation"], _ = _with_blanks(read_sudoku(cfg.validation_file),
                                            f"task.validation_file = {cfg.validation_file!r}")
    else:
        n_val = min(500, len(train) // 10)
        if n_val < 1:
            raise DataError(f"task.train_file = {cfg.train_file!r}: {len(train)} puzzle(s); at least 10 are "
                            "needed to split off a validation set (or give task.validation_file)")
        parts = train.split({"train": len(train) - n_val, "validation": n_val}, seed=0)
        out.update(parts)
    if cfg.test_file:
        out["test"], _ = _with_blanks(read_sudoku(cfg.test_file), f"task.test_file = {cfg.test_file!r}")
    for split, key in (("validation", "validation_file"), ("test", "test_file")):
        if split in out:
            _check_disjoint(out["train"], out[split], split, key, getattr(cfg, key), cfg.train_file)
    return out


def _with_blanks(data: SudokuDataset, where: str, left_out_of: str = "") -> tuple[SudokuDataset, list[int]]:
    """``data`` without its fully given boards, and their 0-based rows: a board with no blank has nothing to solve
    (a training batch of them averaged the loss over no cell) and would count as solved. A warning names them
    (``where``: the file as the user gave it); a DataError when every board is one."""
    full = (data.puzzles != 0).all(1)
    if bool(full.all()):
        raise DataError(f"{where}: every puzzle is fully given (no blank cell): nothing to solve; give puzzles with "
                        "blanks")
    rows = full.nonzero().reshape(-1).tolist()
    if rows:
        warnings.warn(f"{where}: {len(rows)} of {len(data)} puzzles have no blank cell (board(s) {_boards(rows)}): "
                      f"left out{left_out_of}", stacklevel=3)
        data = data.subset(~full)
    return data, rows


def _check_disjoint(train: SudokuDataset, held: SudokuDataset, split: str, key: str, path: str | None,
                    train_path: str) -> None:
    """Warn when held-out puzzles are also training puzzles; a DataError when all of them are."""
    def rows(d: SudokuDataset) -> np.ndarray:  # one opaque 81-byte value per puzzle: (n,)
        return d.puzzles.to(torch.int8).contiguous().numpy().view(np.dtype((np.void, CELLS))).ravel()

    shared = np.isin(rows(held), rows(train))
    if not shared.any():
        return
    where = f"task.{key} = {path!r}" if path else f"the {split} part split off task.train_file = {train_path!r}"
    fix = ("give held-out puzzles" if path
           else "the file repeats puzzles: remove the repeats or give task.validation_file")
    if shared.all():
        raise DataError(f"{where}: all {len(held)} {split} puzzles are also training puzzles (task.train_file = "
                        f"{train_path!r}): its scores would be training scores; {fix}")
    warnings.warn(f"{where}: {int(shared.sum())} of {len(held)} {split} puzzles are also training puzzles (board(s) "
                  f"{_boards(np.flatnonzero(shared).tolist())}): they are scored as held-out", stacklevel=3)


class _Once(argparse.Action):
    """An option given at most once: a repeated ``--puzzles`` scored only the last file, silently."""

    def __call__(self, parser, namespace, values, option_string=None):
        if getattr(namespace, self.dest, None) is not None:
            parser.error(f"{option_string} given twice ({getattr(namespace, self.dest)}, {values}): one file per "
                         "eval; run eval once per file")
        setattr(namespace, self.dest, values)


def targets_of(puzzles: torch.Tensor, solutions: torch.Tensor) -> torch.Tensor:
    """Class targets 0..8 on blanks, -100 (ignored) on givens: (B, 81)."""
    return torch.where(puzzles == 0, solutions - 1, torch.full_like(solutions, -100))


def _sha256(*sets: SudokuDataset) -> str:
    """sha256 (hex) of held-out boards: each set's count, puzzles and solutions (if any) as int8."""
    h = hashlib.sha256()
    for d in sets:
        h.update(f"{len(d)},{d.solutions is not None};".encode())
        h.update(d.puzzles.to(torch.int8).numpy().tobytes())
        if d.solutions is not None:
            h.update(d.solutions.to(torch.int8).numpy().tobytes())
    return h.hexdigest()


class SudokuBatcher:
    """Epochs of seeded permutations of the training boards; optional augmentation; exact resume.

    The state holds the boards' count, the batch size and a sha256 of the boards (puzzles and solutions):
    resuming on other boards (``task.train_file`` edited or replaced since the checkpoint) is a
    :class:`DataError` naming ``source``, since the saved order would index other boards (another count drew
    empty batches: a NaN loss reported as divergence). A state saved before these were kept is checked on its
    order's length alone. ``held_out``: the validation / test boards (``task.validation_file``, ``test_file`` or
    the part split off the training file); their sha256 is kept too, and other held-out boards on resume are a
    DataError as well (the resumed run's evaluations would score other boards than its first part's), as the LM
    task's ``held_out_sha256``; a state without it is not checked on them."""

    def __init__(self, data: SudokuDataset, batch_size: int, seed: int, augment_batches: bool = False,
                 source: str = "the training boards", held_out: list[SudokuDataset] | None = None,
                 held_out_source: str = "the validation/test boards"):
        self.source, self.held_out_source = source, held_out_source
        self.held_out_sha256 = None if held_out is None else _sha256(*held_out)
        self.p, self.s = data.puzzles.long(), data.solutions.long()
        self.n, self.bs, self.aug = len(data), min(batch_size, len(data)), augment_batches
        self.per_epoch = -(-self.n // self.bs)
        self.gen = torch.Generator().manual_seed(int(seed))
        self.perm: torch.Tensor | None = None
        self.i, self.drawn = self.per_epoch, 0
        self.tokens_per_batch = self.bs * CELLS

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.i >= self.per_epoch:
            self.perm, self.i = torch.randperm(self.n, generator=self.gen), 0
        idx = self.perm[self.i * self.bs:(self.i + 1) * self.bs]
        self.i += 1
        p, s = self.p[idx], self.s[idx]
        if self.aug:
            seed = int(torch.randint(0, 2**31 - 1, (), generator=self.gen))
            p, s = (torch.as_tensor(a).long() for a in augment(p, s, seed=seed))
        self.drawn += 1
        return p, targets_of(p, s)

    def boards_sha256(self) -> str:
        """sha256 (hex) of the training boards, puzzles then solutions as int8: their identity, computed once."""
        if getattr(self, "_sha", None) is None:
            h = hashlib.sha256(self.p.to(torch.int8).numpy().tobytes())
            h.update(self.s.to(torch.int8).numpy().tobytes())
            self._sha = h.hexdigest()
        return self._sha

    def state_dict(self) -> dict[str, Any]:
        state = {"gen": self.gen.get_state(), "perm": self.perm, "i": self.i, "drawn": self.drawn,
                 "n_boards": self.n, "batch_size": self.bs, "boards_sha256": self.boards_sha256()}
        return state if self.held_out_sha256 is None else {**state, "held_out_sha256": self.held_out_sha256}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        perm = state.get("perm")
        n = state.get("n_boards", self.n if perm is None else len(perm))
        if n != self.n or state.get("boards_sha256", self.boards_sha256()) != self.boards_sha256():
            raise DataError(f"{self.source}: the training boards changed since the checkpoint ({n} boards then, "
                            f"{self.n} now" + ("" if n != self.n else ", other puzzles or solutions") + "): resuming "
                            "would draw its batches from other boards; restore the file it trained on, or start a "
                            "new run")
        if state.get("batch_size", self.bs) != self.bs:
            raise DataError(f"{self.source}: the checkpoint's batches hold {state['batch_size']} boards, this run's "
                            f"{self.bs}: resume with the batch size it trained with")
        if None not in (state.get("held_out_sha256"), self.held_out_sha256) \
                and state["held_out_sha256"] != self.held_out_sha256:
            raise DataError(f"{self.held_out_source}: the held-out boards changed since the checkpoint: the resumed "
                            "run's evaluations would score other boards than its first part's; restore the files it "
                            "trained with, or start a new run")
        self.gen.set_state(state["gen"])
        self.perm, self.i, self.drawn = state["perm"], int(state["i"]), int(state["drawn"])


@torch.no_grad()
def predict(model: nn.Module, puzzles: torch.Tensor, batch: int = 250, **forward: Any) -> torch.Tensor:
    """Filled boards (n, 81) on the CPU: argmax digit on the blanks, the givens copied. The boards stay on the model's
    device until the end and come back in one transfer (a ``.cpu()`` per batch kept the host from queueing the
    next batch until this one had finished)."""
    dev = next(model.parameters()).device
    outs = []
    for i in range(0, len(puzzles), batch):
        p = puzzles[i:i + batch].to(dev).long()
        logits = model(p, **forward).logits
        outs.append(torch.where(p == 0, logits.argmax(-1) + 1, p))
    return torch.cat(outs).cpu() if outs else puzzles.clone()


@register_task("sudoku", SudokuTaskConfig)
class SudokuTask(Task):
    """Sudoku: per-cell classifier, cross-entropy on blanks, board / cell accuracy (seed 002 §5.1)."""

    model_kinds = ("transformer",)
    main_metric = "board_accuracy"
    lower_is_better = False

    def __init__(self, cfg: SudokuTaskConfig, *, seed: int = 0, rank: int = 0):
        super().__init__(cfg, seed=seed, rank=rank)
        self.splits = load_splits(cfg)
        files = cfg.source == "files"
        held_out = [f"task.{k} {getattr(cfg, k)}" for k in ("validation_file", "test_file") if getattr(cfg, k)]
        if files and not cfg.validation_file:
            held_out.insert(0, f"the validation part of task.train_file {cfg.train_file}")
        self.train_data = SudokuBatcher(self.splits["train"], cfg.batch_size, seed + 1000 * rank, cfg.augment,
                                        source=f"task.train_file {cfg.train_file}" if files
                                        else "the generated training boards",
                                        held_out=[v for k, v in self.splits.items() if k != "train"],
                                        held_out_source=" / ".join(held_out) if files
                                        else "the generated validation/test boards")

    # ------------------------------------------------------------------ model
    @classmethod
    def check_config(cls, task_cfg: SudokuTaskConfig, model_cfg: KindConfig) -> None:
        from ..blocks.hyperset import check_hyperset_block

        if getattr(model_cfg, "causal", None):
            raise ValueError("model.causal = True: Sudoku cells see the whole board; remove it or set false")
        if getattr(model_cfg, "max_seq_len", CELLS) < CELLS:
            raise ValueError(f"model.max_seq_len = {model_cfg.max_seq_len}: a board has {CELLS} cells")
        check_hyperset_block(model_cfg.block)

    def resolve_model_config(self, model_cfg: KindConfig) -> KindConfig:
        changes = {k: v for k, v in (("vocab_size", VOCAB), ("causal", False)) if getattr(model_cfg, k) != v}
        return replace(model_cfg, **changes) if changes else model_cfg

    def build_model(self, model_cfg: KindConfig) -> nn.Module:
        from ..models import MODELS

        return MODELS.build(model_cfg, vocab_size=VOCAB, n_out=CLASSES, causal=False)

    # ------------------------------------------------------------------ training
    def loss(self, model: nn.Module, batch: tuple) -> tuple[torch.Tensor, dict[str, float]]:
        puzzles, targets = batch
        out = model(puzzles)
        loss = F.cross_entropy(at_least_float32(out.logits).flatten(0, 1), targets.flatten(), ignore_index=-100)
        return self.add_aux_losses(loss, out)

    def loss_items(self, batch: tuple) -> int:
        """The blank cells of the batch's boards (targets not -100): what :meth:`loss` averages over."""
        return int((batch[1] != -100).sum())

    # ------------------------------------------------------------------ evaluation
    def score(self, model: nn.Module, data: SudokuDataset, **forward: Any) -> dict[str, float]:
        """Board / cell accuracy and validity of ``model`` on ``data`` (plus loss with solutions)."""
        pred = predict(model, data.puzzles, self.cfg.eval_batch_size, **forward)
        res = score_sudoku(pred, data.puzzles, data.solutions)
        return {k: float(v) for k, v in res.items()}

    def evaluate(self, model: nn.Module, split: str = "validation", all_boards: bool = False,
                 **options: Any) -> dict[str, float]:
        """Metrics on ``split``; ``options`` (iterations, steps) go to the model. The first ``task.eval_max``
        boards are scored, as the periodic evaluation (a cheap, fixed subset); ``all_boards``: the whole split,
        what ``energyformer eval`` reports (LM's ``eval_max_batches`` likewise), since a split's metrics on part of
        it were printed as the split's (``eval --split test`` scored 500 of the 1,000 test boards)."""
        if split not in self.splits:
            raise ConfigError(f"split {split!r}: this Sudoku task has {', '.join(self.splits)}")
        data = self.splits[split]
        if not all_boards and self.cfg.eval_max is not None and len(data) > self.cfg.eval_max:
            data = data.subset(slice(0, self.cfg.eval_max))
        was = model.training
        model.eval()
        try:
            res = self.score(model, data, **options)
            if "iterations" not in options:
                for it in self.cfg.eval_iterations:
                    r = self.score(model, data, iterations=it)
                    res[f"board_accuracy@{it}"] = r["board_accuracy"]
                    if "cell_accuracy" in r:
                        res[f"cell_accuracy@{it}"] = r["cell_accuracy"]
        finally:
            model.train(was)
        return res

    def describe_data(self) -> dict[str, str]:
        """One givens-histogram line per split (reports show them)."""
        return {k: f"{len(v)} boards, {v.describe_givens()}" for k, v in self.splits.items()}

    eval_file_options = ("puzzles",)

    @classmethod
    def add_eval_args(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--puzzles", metavar="FILE", action=_Once, help="score the puzzles in FILE (any format "
                            "read_sudoku reads; without solutions, boards count as solved when valid and consistent)")

    def eval_from_args(self, model, args, forward_options):
        if getattr(args, "puzzles", None):
            data = read_sudoku(args.puzzles)
            n_read = len(data)
            data, dropped = _with_blanks(data, args.puzzles, " of the metrics")
            note = f"; {len(dropped)} fully given puzzle(s) left out" if dropped else ""
            line = sorted(set(range(n_read)) - set(dropped))  # each scored board's number in the file
            if not data.has_solutions:  # scored by validity: say when a board can never count
                from ..data.sudoku_solver import count_solutions

                counts, _ = count_solutions(data.puzzles.numpy(), limit=1)
                bad = [i for i, c in enumerate(counts) if c == 0]
                if bad:
                    note += f"; {len(bad)} puzzle(s) have no solution and count as failures"
                    warnings.warn(f"{args.puzzles}: {len(bad)} of {n_read} puzzles have no solution "
                                  f"(board(s) {_boards([line[i] for i in bad])}); no prediction can solve them, "
                                  "so they are scored as failures", stacklevel=2)
            res = self.score(model, data, **forward_options)
            return f"{args.puzzles} ({data.describe_givens()}{note})", res
        return f"Sudoku {args.split} split", self.evaluate(model, args.split, all_boards=True, **forward_options)

    def format_metrics(self, metrics: dict[str, float]) -> str:
        parts = []
        for k, v in metrics.items():
            k = k.removeprefix("eval/")
            if "accuracy" in k or k == "valid_fraction":
                parts.append(f"{k.replace('_', ' ')} {100 * v:.2f}%")
            elif k == "n":
                parts.append(f"{int(v)} boards")
            else:
                parts.append(f"{k} {v:.4g}")
        return ", ".join(parts)
