import os

import pytest
import torch

# two threads; under pytest-xdist (`make test` runs `-n auto`) the cores are shared among the workers
torch.set_num_threads(max(1, min(2, (os.cpu_count() or 2) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))))

if not torch.cuda.is_available():
    # attn_path 'kernel' (energies/cem_kernel.py) runs its Triton kernels through Triton's CPU interpreter,
    # a mode triton fixes when it is first imported
    os.environ.setdefault("TRITON_INTERPRET", "1")


def _skip_nested_lang_patches() -> None:
    """Speed only, the interpreter's arithmetic untouched. Triton's interpreter swaps ``triton.language``'s builtins
    for interpreted ones when a kernel launches (``GridExecutor``: ``_patch_lang``, undone when the grid ends) and
    again on **every** call of a ``@triton.jit`` helper inside it, whose patch finds the builtins already swapped and
    is never undone: a scan of the language modules (``inspect.getmembers``) per helper call, a quarter of the CEM
    kernel tests' time. Here a helper's call skips it when the launch already patched every language module the
    helper's globals hold or an earlier helper of the launch patched; anything else (a launch, a helper that sees
    another module) patches as before. Left off when the interpreter lacks the internals this knows (those of triton
    3.9, which torch 2.13 installs)."""
    try:
        import triton.language as tl
        from triton.runtime import interpreter
    except ImportError:
        return
    real = getattr(interpreter, "_patch_lang", None)
    scope_cls = getattr(interpreter, "_LangPatchScope", None)
    if real is None or scope_cls is None or not hasattr(scope_cls(), "restore"):
        return
    import inspect

    patched: list[set] = []  # the language modules the running launch patched (one launch at a time)

    def langs(fn) -> set:
        return {id(v) for v in fn.__globals__.values() if inspect.ismodule(v) and v in (tl, tl.core)}

    class LaunchScope:
        def __init__(self, scope):
            self.scope = scope

        def restore(self):
            patched.clear()
            self.scope.restore()

    def patch_lang(fn):
        if not patched:  # a launch (no launch runs): patch, and remember what until its scope is restored
            scope = LaunchScope(real(fn))
            patched.append(langs(fn))
            return scope
        helper = langs(fn)
        if helper <= patched[0]:  # a helper inside the launch: already patched
            return scope_cls()
        scope = real(fn)  # a helper that sees another module (tl.zeros sees triton.language.core): patched as before,
        patched[0] |= helper  # and, as before, left patched until the launch ends (its caller drops the scope)
        return scope

    interpreter._patch_lang = patch_lang


def _interpreter_overflow_checks(on: bool) -> bool:
    """Turn the interpreter's int32 overflow check on (its ``sanitize_overflow`` and ``debug`` options) or off (both
    off); returns whether it was on. By default the interpreter follows every int32 add, sub and mul of a kernel with
    an int64 recomputation and a range test, then drops the result: the assert that would report it is a no-op
    without ``debug`` (``device_assert``). That was half the CEM kernel tests' time and checked nothing. The suite
    runs with both off, and the ``overflow_checked`` fixture turns both on, so that an overflow raises, for the tests
    that check it (every kernel and launch: ``test_cem_kernel.py``, ``test_hyperspherical_kernel.py``,
    ``test_hyperspherical_ffkernel.py``; at test sizes no index comes near 2³¹, the GPU's model-size tests in
    ``test_cem_kernel_cuda.py`` are where offsets grow)."""
    try:
        import dataclasses

        from triton.runtime import interpreter
    except ImportError:
        return False
    builder = getattr(interpreter, "interpreter_builder", None)
    options = getattr(builder, "options", None)
    if options is None or not hasattr(options, "sanitize_overflow") or not hasattr(options, "debug"):
        return False
    was = bool(options.sanitize_overflow and options.debug)
    builder.options = dataclasses.replace(options, sanitize_overflow=on, debug=on)
    return was


if os.environ.get("TRITON_INTERPRET") == "1":
    _skip_nested_lang_patches()
    _interpreter_overflow_checks(False)


@pytest.fixture
def overflow_checked():
    """Triton's interpreter checks every int32 index operation of the kernels for overflow during this test (the
    suite runs without that check: ``_interpreter_overflow_checks``)."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("Triton's interpreter is not in use (TRITON_INTERPRET=1 on CPU)")
    was = _interpreter_overflow_checks(True)
    try:
        from triton.runtime import interpreter
        options = interpreter.interpreter_builder.options
        assert options.sanitize_overflow and options.debug, "this triton's interpreter has no int32 overflow check"
        yield
    finally:  # the rest of the worker's tests run as before, whatever this one did
        _interpreter_overflow_checks(was)


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
