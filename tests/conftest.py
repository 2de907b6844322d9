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


#: set in the process that ``in_own_process`` starts, so that the test runs its body there
_OWN_PROCESS = "ENERGYFORMER_TEST_OWN_PROCESS"


@pytest.fixture
def in_own_process(request):
    """``if not in_own_process(): return`` at the top of a test: the first call runs this very test again in a fresh
    Python process (pytest on its node id, 10 minutes at most) and fails if that run fails, returning False; in the
    fresh process it returns True and the body runs. For a GPU case that can end in an illegal memory access (an
    untried kernel launch): that error poisons the CUDA context of its process, and every CUDA test after it in the
    same process would fail too."""
    import subprocess
    import sys
    from pathlib import Path

    def run() -> bool:
        if os.environ.get(_OWN_PROCESS) == request.node.nodeid:
            return True
        root = Path(request.config.rootpath)
        env = {**os.environ, _OWN_PROCESS: request.node.nodeid}
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", request.node.nodeid],
                           cwd=root, env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, f"{request.node.nodeid} in its own process (rc {r.returncode}):\n{r.stdout[-4000:]}"
        return False

    return run


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


@pytest.fixture
def host_reads():
    """``with host_reads() as r: ...; r.n``: the reads of tensor values on the host inside the block, and what makes
    an accelerator's host wait: ``_local_scalar_dense`` (item, float, int, bool), ``nonzero``, ``masked_select``,
    boolean-mask ``index`` / ``index_put`` (a ``nonzero`` on CUDA; a CPU kernel runs it inside, unseen) and
    ``Tensor.tolist`` (which reads a CPU tensor's memory without an aten op)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    aten = torch.ops.aten
    reads = {aten._local_scalar_dense.default, aten.nonzero.default, aten.masked_select.default}
    indexing = {aten.index.Tensor, aten.index_put.default, aten.index_put_.default, aten._index_put_impl_.default}

    class HostReads(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.n = 0

        def __enter__(self):
            self._tolist = tolist = torch.Tensor.tolist

            def counted(t, *a, **k):
                self.n += 1
                return tolist(t, *a, **k)

            torch.Tensor.tolist = counted
            return super().__enter__()

        def __exit__(self, *exc):
            torch.Tensor.tolist = self._tolist
            return super().__exit__(*exc)

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            bool_index = func in indexing and any(t is not None and t.dtype == torch.bool for t in args[1])
            if bool_index or func in reads:
                self.n += 1
            return func(*args, **(kwargs or {}))

    return HostReads


@pytest.fixture
def op_counts():
    """``op_counts(fn)``: (fn's result, a Counter of the aten ops ``fn()`` dispatched, by overload packet name)."""
    from collections import Counter

    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops[func.overloadpacket.__name__] += 1
            return func(*args, **(kwargs or {}))

    def count(fn):
        with Count() as c:
            out = fn()
        return out, c.ops

    return count


@pytest.fixture
def no_host_read(monkeypatch):
    """``with no_host_read(): ...``: ``Tensor.__bool__``, ``__float__`` and ``item`` raise inside, so any host read of
    a value fails the test."""
    import contextlib

    def no_read(*a, **k):
        raise AssertionError("a host read of a tensor value")

    @contextlib.contextmanager
    def scope():
        with monkeypatch.context() as m:
            for name in ("__bool__", "__float__", "item"):
                m.setattr(torch.Tensor, name, no_read)
            yield

    return scope
