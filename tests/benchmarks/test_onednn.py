"""benchmarks/onednn.py: float32 CPU F.linear through oneDNN equals PyTorch's (values and gradients)."""

import pytest
import torch
from torch import nn

from .bench_script import load_bench

_mod = load_bench("onednn")
OneDNNLinearMode, available, onednn_linear, set_onednn_linear = (
    _mod.OneDNNLinearMode, _mod.available, _mod.onednn_linear, _mod.set_onednn_linear)

pytestmark = pytest.mark.skipif(not available(), reason="no oneDNN linear in this build")


@pytest.mark.parametrize("bias", [True, False])
def test_linear_values_and_gradients_match(bias):
    torch.manual_seed(0)
    lin = nn.Linear(24, 40, bias=bias)
    x = torch.randn(3, 7, 24, requires_grad=True)
    y0 = lin(x)
    g = torch.randn_like(y0)
    ref = torch.autograd.grad(y0, [x, *lin.parameters()], g)
    calls = []

    class Spy(OneDNNLinearMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            calls.append(func)
            return super().__torch_function__(func, types, args, kwargs)

    with Spy():
        y1 = lin(x)
    got = torch.autograd.grad(y1, [x, *lin.parameters()], g)
    assert torch.nn.functional.linear in calls
    assert y1.grad_fn is not None and "_Linear" in type(y1.grad_fn).__name__  # routed, not passed through
    torch.testing.assert_close(y1, y0, rtol=1e-5, atol=1e-5)
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_other_dtypes_and_autocast_are_left_to_pytorch():
    lin = nn.Linear(8, 8).double()
    with onednn_linear():
        y = lin(torch.randn(2, 8, dtype=torch.float64, requires_grad=True))
        assert "_Linear" not in type(y.grad_fn).__name__
        with torch.autocast("cpu", dtype=torch.bfloat16):
            z = nn.Linear(8, 8)(torch.randn(2, 8))
        assert z.dtype == torch.bfloat16


def test_global_switch_on_and_off():
    lin = nn.Linear(8, 8)
    x = torch.randn(2, 8, requires_grad=True)
    set_onednn_linear(True)
    try:
        assert "_Linear" in type(lin(x).grad_fn).__name__
    finally:
        set_onednn_linear(False)
    assert "_Linear" not in type(lin(x).grad_fn).__name__
