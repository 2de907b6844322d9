import os

import pytest
import torch

# two threads; under pytest-xdist (`make test` runs `-n auto`) the cores are shared among the workers
torch.set_num_threads(max(1, min(2, (os.cpu_count() or 2) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))))

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


@pytest.fixture
def config_error_says():
    """``config_error_says(cls, data, needles)``: loading ``data`` as ``cls`` raises a one-line ConfigError
    containing every needle (returns the message)."""
    from energyformer.utils.config import load_config
    from energyformer.utils.validate import ConfigError

    def check(cls, data, needles) -> str:
        with pytest.raises(ConfigError) as err:
            load_config(cls, data)
        msg = str(err.value)
        assert "\n" not in msg
        for n in needles:
            assert n in msg, (n, msg)
        return msg

    return check


@pytest.fixture
def compiles_like_eager():
    """``compiles_like_eager(fn, params)``: ``torch.compile(fn, fullgraph=True, backend='aot_eager')`` traces
    ``fn`` (no arguments, returns a tensor) without a graph break, and its output and the gradients of
    ``output.pow(2).sum()`` in ``params`` equal the eager ones."""

    def check(fn, params, rtol: float = 1e-6, atol: float = 1e-6) -> None:
        params = list(params)
        torch._dynamo.reset()
        try:
            outs = []
            for f in (fn, torch.compile(fn, fullgraph=True, backend="aot_eager")):
                y = f()
                outs.append((y, torch.autograd.grad(y.pow(2).sum(), params)))
        finally:
            torch._dynamo.reset()
        torch.testing.assert_close(outs[1][0], outs[0][0], rtol=rtol, atol=atol)
        for a, b in zip(outs[1][1], outs[0][1]):
            torch.testing.assert_close(a, b, rtol=10 * rtol, atol=atol)

    return check


@pytest.fixture
def load_script():
    """``load_script("scripts/x.py")``: a repository script loaded as a module (tests/fixtures/script_loader.py)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent / "fixtures"))
    from script_loader import load_file

    return load_file
