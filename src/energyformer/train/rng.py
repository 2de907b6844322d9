"""Seeding and capture/restore of every random number generator a run touches.

States are stored as tensors and plain Python values only, so ``state.pt`` loads with
``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import random
from typing import Any

import torch


def seed_everything(seed: int) -> None:
    """Seed Python ``random``, NumPy's global generator and torch (CPU and every CUDA device)."""
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed % 2**32)
    except ImportError:  # pragma: no cover - numpy is a dependency
        pass
    torch.manual_seed(seed)  # also seeds all CUDA devices


def get_rng_state() -> dict[str, Any]:
    """Snapshot of Python, NumPy, torch CPU, CUDA (all devices) and MPS generator states."""
    state: dict[str, Any] = {"python": _py_state_to_plain(random.getstate()), "torch": torch.get_rng_state()}
    try:
        import numpy as np

        st = np.random.get_state(legacy=False)
        state["numpy"] = {
            "bit_generator": st["bit_generator"],
            "key": torch.from_numpy(st["state"]["key"].astype("int64")),
            "pos": int(st["state"]["pos"]),
            "has_gauss": int(st["has_gauss"]),
            "gauss": float(st["gauss"]),
        }
    except ImportError:  # pragma: no cover
        pass
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    if hasattr(torch, "mps") and torch.backends.mps.is_available():
        try:
            state["mps"] = torch.mps.get_rng_state()
        except Exception:  # pragma: no cover - depends on the build
            pass
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore a snapshot made by :func:`get_rng_state` (missing parts are left as they are)."""
    if "python" in state:
        random.setstate(_py_state_from_plain(state["python"]))
    if "torch" in state:
        torch.set_rng_state(state["torch"].cpu())
    if "numpy" in state:
        import numpy as np

        n = state["numpy"]
        np.random.set_state({
            "bit_generator": n["bit_generator"],
            "state": {"key": n["key"].cpu().numpy().astype("uint32"), "pos": int(n["pos"])},
            "has_gauss": int(n["has_gauss"]),
            "gauss": float(n["gauss"]),
        })
    if "cuda" in state and torch.cuda.is_available():
        cuda_states = state["cuda"]
        if len(cuda_states) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all([s.cpu() for s in cuda_states])
        else:
            for i, s in enumerate(cuda_states[: torch.cuda.device_count()]):
                torch.cuda.set_rng_state(s.cpu(), i)
    if "mps" in state and hasattr(torch, "mps") and torch.backends.mps.is_available():
        try:
            torch.mps.set_rng_state(state["mps"].cpu())
        except Exception:  # pragma: no cover
            pass


class fork_rng:
    """Context manager: code inside may use any RNG; all states are restored on exit.

    The trainer runs ``eval_fn`` inside it, so evaluation never changes the training stream.
    """

    def __enter__(self) -> fork_rng:
        self._state = get_rng_state()
        return self

    def __exit__(self, *exc: object) -> None:
        set_rng_state(self._state)


def _py_state_to_plain(st: tuple) -> dict[str, Any]:
    version, internal, gauss = st
    return {"version": int(version), "internal": torch.tensor(internal, dtype=torch.int64),
            "gauss": gauss}


def _py_state_from_plain(d: dict[str, Any]) -> tuple:
    return (int(d["version"]), tuple(int(v) for v in d["internal"].tolist()), d["gauss"])
