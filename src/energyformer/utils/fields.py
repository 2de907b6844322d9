"""Config field types shared by every task: one validator per concept, run when a config is loaded.

Each type is a pydantic ``Annotated`` type, so a bad value is a one-line config error naming the key
(``task.eval_iterations = [0, -2]: ...``) before any data is built or any step is trained.

``IterationCounts``  a list of iteration counts (test-time depth), each an integer >= 1
``SplitSize``        a held-out split: a fraction in (0, 1) of a set, or a count >= 1 of examples
``Seed``             a seed, an integer in 0..SEED_MAX
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, Field


def _iteration_counts(v: list[int]) -> list[int]:
    bad = [n for n in v if n < 1]
    if bad:
        raise ValueError(f"iteration counts must be integers >= 1 (got {', '.join(map(str, bad))})")
    return v


def _no_bool(v):
    if isinstance(v, bool):
        raise ValueError("must be a fraction in (0, 1) or a count >= 1, not a boolean")
    return v


def _split_size(v: float | int) -> float | int:
    if isinstance(v, float) and not v.is_integer():
        if not 0 < v < 1:
            raise ValueError(f"a fraction must lie in (0, 1), got {v!r}")
        return v
    if isinstance(v, float):  # 2.0 -> a count of 2; 0.0 -> refused below
        v = int(v)
    if v < 1:
        raise ValueError(f"must be a fraction in (0, 1) or a count >= 1 of examples, got {v!r} "
                         "(evaluation needs at least one example)")
    return v


#: Iteration counts (``task.eval_iterations``): integers >= 1.
IterationCounts = Annotated[list[int], AfterValidator(_iteration_counts)]
#: A held-out split (``task.validation``): a fraction in (0, 1) or a count >= 1.
SplitSize = Annotated[float | int, BeforeValidator(_no_bool), AfterValidator(_split_size)]


#: The largest seed: torch's generators take 0..2^64 − 1, and a run adds offsets to its seeds (``seed + rank``,
#: ``seed + 1000 · rank`` for the data streams), so seeds stop at 2^63 − 1 to leave them room. A larger one was an
#: internal error ("Overflow when unpacking long long") once the first generator was seeded.
SEED_MAX = 2**63 - 1
#: A seed in a config (``train.seed``, a data set's seeds): an integer in 0..SEED_MAX.
Seed = Annotated[int, Field(ge=0, le=SEED_MAX)]
