import os

import pytest
import torch

torch.set_num_threads(2)

if not torch.cuda.is_available():
    # attn_path 'kernel' (energies/cem_kernel.py) runs its Triton kernels through Triton's CPU interpreter,
    # a mode triton fixes when it is first imported
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_collection_modifyitems(config, items):
    """Tests marked ``cuda`` need a CUDA device: skipped without one."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)
