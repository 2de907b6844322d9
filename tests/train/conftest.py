"""Test support for tests/train: make ``energyformer`` (src layout) and ``train_toys`` importable."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[1] / "src"

if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
try:
    import energyformer.train  # noqa: F401
except ImportError:
    sys.path.insert(0, str(SRC))


@pytest.fixture
def subprocess_env() -> dict[str, str]:
    """Environment for child Python processes: can import energyformer and train_toys."""
    import energyformer.train as et

    src = Path(et.__file__).resolve().parents[2]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(src), str(HERE), env.get("PYTHONPATH", "")])
    env["OMP_NUM_THREADS"] = "1"
    env.pop("WORLD_SIZE", None)
    env.pop("RANK", None)
    env.pop("LOCAL_RANK", None)
    return env


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny models on a shared 2-core machine: intra-op threads only add contention. Module scope,
    so module-scoped reference runs use the same thread count (float reductions depend on it)."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
