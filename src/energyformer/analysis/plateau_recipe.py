"""Issue 20's plateau recipe at CPU size: does a model's Sudoku loss leave ln 9 in a short, fixed run?

Recipe (stated, fixed): d = 32, 4 heads, one layer iterated L = 4 times, learned positions, 128 generated
boards with 36-60 givens, each batch freshly augmented (digits relabelled, transposed, bands and rows
permuted), batch 32, AdamW (lr 3e-3 constant, β (0.9, 0.95), weight decay 0.1 on every parameter),
gradient clipping 1, 200 steps, one torch thread. A fresh validity-preserving transform per batch makes
a cell's digit uniform over 1-9 given its position alone, so only the board's constraints lower the
loss below ln 9 (128 fixed boards would otherwise let a per-cell marginal do it).

**Left ln 9** = the mean training loss of the last 50 steps below ln 9 − :data:`MARGIN`.

``seed`` seeds the model's initialisation only; the boards, the batches and their transforms are the same
for every seed (seed 0 is the recipe of ``tests/blocks/test_hyperset_plateau.py``).
"""

from __future__ import annotations

import math

import torch

LN9 = math.log(9)
MARGIN = 0.005
STEPS = 200
DIM, HEADS, ITERATIONS, BATCH, LR = 32, 4, 4, 32, 3e-3


def recipe_losses(block: dict, steps: int = STEPS, seed: int = 0, *, dim: int = DIM, heads: int = HEADS,
                  iterations: int = ITERATIONS) -> list[float]:
    """The recipe's training losses, one per step, for a ``model.block`` config, single-threaded (the
    measured numbers are; one thread also makes them deterministic). ``dim``, ``heads`` and ``iterations``
    change the model's size only (the recipe's are d 32, 4 heads, L 4)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _train(block, steps, seed, (dim, heads, iterations))
    finally:
        torch.set_num_threads(threads)


def _train(block: dict, steps: int, seed: int, size: tuple[int, int, int]) -> list[float]:
    from energyformer.data.sudoku import augment, generate_puzzles
    from energyformer.models import MODELS, ModelConfig
    from energyformer.tasks.sudoku import targets_of

    dim, heads, iterations = size
    cfg = ModelConfig.model_validate(dict(vocab_size=10, dim=dim, heads=heads, n_layers=1, iterations=iterations,
                                          positions="learned", max_seq_len=81, causal=False, block=block))
    torch.manual_seed(seed)
    model = MODELS.build(cfg, n_out=9)
    p, s, _ = generate_puzzles(128, (36, 60), seed=7)
    p, s = torch.as_tensor(p).long(), torch.as_tensor(s).long()
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.95), weight_decay=0.1)
    g = torch.Generator().manual_seed(0)
    out: list[float] = []
    for step in range(steps):
        i = torch.randint(0, len(p), (BATCH,), generator=g)
        bp, bs = (torch.as_tensor(a).long() for a in augment(p[i], s[i], seed=step))  # (BATCH, 81)
        logits = model(bp).logits  # (BATCH, 81, 9)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets_of(bp, bs).flatten(),
                                                 ignore_index=-100)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        out.append(float(loss.detach()))
    return out


def last50(losses: list[float]) -> float:
    """The mean of the last 50 losses (all of them when fewer)."""
    tail = losses[-50:]
    return sum(tail) / len(tail)


def left_ln9(losses: list[float]) -> bool:
    """The recipe's rule: the last 50 steps' mean loss is below ln 9 − MARGIN."""
    return last50(losses) < LN9 - MARGIN
