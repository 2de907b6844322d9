"""benchmarks/hyperset_ops.py: the CPU emulation of CUDA's autocast policy and the per-iteration op table
(tiny sizes; fake tensors, nothing is timed)."""

from argparse import Namespace
from collections import Counter

from .bench_script import load_bench


ARGS = Namespace(dim=16, heads=2, batch=1)


def test_cpu_emulation_dispatches_what_cuda_autocast_does():
    """Hyper-SET's bf16 forward: the same ops with the same dtypes under CUDA's own autocast (fake CUDA
    tensors) and under the CPU emulation the training counts come from."""
    b = load_bench("hyperset_ops")
    config, extra = b.MODELS["Hyper-SET"]
    key = lambda r: r[:3]  # noqa: E731
    cpu = Counter(map(key, b.log_step(config, extra, ARGS, 2, "bf16", False, "cpu")))
    cuda = Counter(map(key, b.log_step(config, extra, ARGS, 2, "bf16", False, "cuda")))
    assert cpu == cuda and sum(cpu.values()) > 20


def test_hyperset_iteration_has_no_float32_matmul_under_bf16():
    b = load_bench("hyperset_ops")
    config, extra = b.MODELS["Hyper-SET"]
    full = b.summarise(b.log_step(config, extra, ARGS, 3, "bf16", True))
    less = b.summarise(b.log_step(config, extra, ARGS, 2, "bf16", True))
    assert full["matmul"] > less["matmul"] > 0
    assert full["matmul f32"] == less["matmul f32"] == 0
    assert full["ops"] - less["ops"] > 0 and full["bytes"] > less["bytes"]


def test_emulated_policy_is_removed_on_exit():
    import torch

    b = load_bench("hyperset_ops")
    x = torch.randn(2, 3, dtype=torch.bfloat16)
    with b.emulated_cuda_policy(), torch.autocast("cpu", torch.bfloat16):
        assert torch.softmax(x, -1).dtype == torch.float32  # CUDA's float32 list
    with torch.autocast("cpu", torch.bfloat16):
        assert torch.softmax(x, -1).dtype == torch.bfloat16  # CPU's own again
