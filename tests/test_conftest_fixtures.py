"""The suite's own fixtures that decide whether a test passes (tests/conftest.py): ``in_own_process`` runs the test's
body in a fresh process and carries its failure back."""

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
