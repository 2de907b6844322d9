"""Issue 20's plateau class at CPU size: does a model's Sudoku loss leave ln 9 in a short, fixed recipe?

Recipe (stated, fixed): d = 32, 4 heads, one layer iterated L = 4 times, 128 generated boards with
36-60 givens, each batch freshly augmented (digits relabelled, transposed, bands and rows permuted),
batch 32, AdamW (lr 3e-3 constant, β (0.9, 0.95), weight decay 0.1), clipping 1, 200 steps, seed 0;
"left ln 9" = the mean training loss of the last 50 steps below ln 9 − 0.005.

Measured (CPU, 1 thread): the paper's baseline transformer leaves it (2.1844; 25-step means 2.2000,
2.1989, 2.1984, 2.1981, 2.1938, 2.1903, 2.1865, 2.1822); Hyper-SET does not (2.1974, flat from step
50 on: 2.1993, 2.1975, 2.1977, 2.1974, 2.1974, 2.1973, 2.1974, 2.1975; docs/results/hyperset/plateau/):
the known, open plateau of issue 20, so that half is a strict xfail — it turns into a failure the day
Hyper-SET trains as fast, and the marker must then go. 80 s and 120 s on a loaded 2-core machine,
hence ``slow``.
"""

import math

import pytest
import torch

from energyformer.models import MODELS, ModelConfig

LN9 = math.log(9)
MARGIN = 0.005


def _losses(block: dict, steps: int = 200, progress: bool = False) -> list[float]:
    """Training losses of the recipe for a ``model.block`` (one thread, as measured)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the measured numbers above are single-threaded (and deterministic so)
    try:
        return _train(block, steps, progress)
    finally:
        torch.set_num_threads(threads)


def _train(block: dict, steps: int, progress: bool) -> list[float]:
    from energyformer.data.sudoku import augment, generate_puzzles
    from energyformer.tasks.sudoku import targets_of

    cfg = ModelConfig.model_validate(dict(vocab_size=10, dim=32, heads=4, n_layers=1, iterations=4,
                                          positions="learned", max_seq_len=81, causal=False, block=block))
    torch.manual_seed(0)
    model = MODELS.build(cfg, n_out=9)
    p, s, _ = generate_puzzles(128, (36, 60), seed=7)
    p, s = torch.as_tensor(p).long(), torch.as_tensor(s).long()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1)
    g = torch.Generator().manual_seed(0)
    out = []
    for step in range(steps):
        i = torch.randint(0, len(p), (32,), generator=g)
        # a fresh validity-preserving transform (digits, transpose, bands, rows) per batch: the digit of a
        # cell is then uniform over 1-9 given its position alone, so only the board's constraints lower
        # the loss below ln 9 (128 fixed boards would otherwise let a per-cell marginal do it)
        bp, bs = (torch.as_tensor(a).long() for a in augment(p[i], s[i], seed=step))
        logits = model(bp).logits
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets_of(bp, bs).flatten(),
                                                 ignore_index=-100)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        out.append(float(loss.detach()))
        if progress and len(out) % 25 == 0:
            print(len(out), sum(out[-25:]) / 25, flush=True)
    return out


def _left_ln9(losses: list[float]) -> float:
    return sum(losses[-50:]) / 50


@pytest.mark.slow
def test_paper_baseline_transformer_leaves_ln9_in_the_recipe():
    """The control: the recipe is long enough for the looped transformer (§5's baseline)."""
    m = _left_ln9(_losses({"attention": {"kind": "llama", "rope": False}, "mlp": "relu"}))
    assert m < LN9 - MARGIN, m


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="issue 20: Hyper-SET's initial plateau (open; docs/results/hyperset/plateau)")
def test_hyperset_leaves_ln9_as_fast_as_the_transformer():
    m = _left_ln9(_losses({"attention": {"kind": "hyperset"}, "mlp": {"kind": "hyperset"}}))
    assert m < LN9 - MARGIN, m
