"""The suite's own fixtures that decide whether a test passes (tests/conftest.py): ``in_own_process`` runs the test's
body in a fresh process and carries its failure back; ``overflow_checked`` turns Triton's interpreter's int32 overflow
check on for a test."""

import os

import pytest

_PARENT = os.getpid()


@pytest.mark.parametrize("fails", [False, True])
def test_in_own_process_runs_the_body_in_another_process_and_reports_it(fails, in_own_process, request):
    """The outer call returns False after the fresh process passed; a failing body there fails the outer test with
    that process's report (checked through the flag the inner run sees; the outer one, not the inner, asserts)."""
    inner = os.environ.get("ENERGYFORMER_TEST_OWN_PROCESS") == request.node.nodeid
    if inner:
        assert in_own_process() is True
        assert os.environ.get("EF_FIXTURE_PARENT") not in (None, str(os.getpid()))  # another process
        assert not fails, "the body failed in its own process"
        return
    os.environ["EF_FIXTURE_PARENT"] = str(_PARENT)
    try:
        if fails:
            with pytest.raises(AssertionError, match="the body failed in its own process"):
                in_own_process()
        else:
            assert in_own_process() is False
    finally:
        del os.environ["EF_FIXTURE_PARENT"]


def _int32_product_kernel():
    """A one-program kernel that multiplies two int32 values and stores the (int32) product."""
    import triton
    import triton.language as tl

    @triton.jit
    def product(a_ptr, b_ptr, out_ptr):
        tl.store(out_ptr, tl.load(a_ptr) * tl.load(b_ptr))

    return product


@pytest.mark.filterwarnings("ignore:overflow encountered in multiply:RuntimeWarning")  # numpy's, when it wraps
@pytest.mark.parametrize("checked", [False, True])
def test_overflow_checked_turns_the_interpreters_int32_overflow_check_on(checked, request):
    """The suite runs Triton's interpreter without its int32 overflow check (conftest); ``overflow_checked`` turns
    it on for its test: 2¹⁶ · 2¹⁶ then raises, where the unchecked interpreter wraps to 0 as a GPU does."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("Triton's interpreter is not in use (CUDA machine)")
    pytest.importorskip("triton")
    import torch
    from triton.runtime.interpreter import InterpreterError

    a, out = torch.tensor([2 ** 16], dtype=torch.int32), torch.zeros(1, dtype=torch.int32)
    kernel = _int32_product_kernel()
    if not checked:
        kernel[(1,)](a, a, out)
        assert out.item() == 0
        return
    request.getfixturevalue("overflow_checked")
    with pytest.raises(InterpreterError, match="overflow"):
        kernel[(1,)](a, a, out)
    kernel[(1,)](a, torch.tensor([3], dtype=torch.int32), out)  # in range: no error
    assert out.item() == 3 * 2 ** 16
