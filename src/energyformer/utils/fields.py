"""Config field types shared by every task: one validator per concept, run when a config is loaded.

Each type is a pydantic ``Annotated`` type, so a bad value is a one-line config error naming the key
(``task.eval_iterations = [0, -2]: ...``) before any data is built or any step is trained.

``IterationCounts``  a list of iteration counts (test-time depth), each an integer >= 1
``SplitSize``        a held-out split: a fraction in (0, 1) of a set, or a count >= 1 of examples
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BeforeValidator


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
