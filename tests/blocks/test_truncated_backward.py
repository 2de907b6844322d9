"""``backward: truncated`` on every energy sublayer kind and example (core/backward.py): the gradient through the
last k steps equals the same run with its first steps tracked and their result detached.

Truncated runs the first T − k steps under ``torch.no_grad()``. Anything a sublayer builds once per call and
reuses between steps (cached values, step-size tables, read-out plans) is then built without a graph, and a
tracked step that reuses it loses gradients without an error: CEM's blocked and kernel paths and Hyper-SET's
step-size network did. The reference here runs the same steps with the prefix tracked, then detaches the
iterate (and any memory the prefix changed), so its gradient is the one truncation defines."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError
from torch import Tensor, nn

from energyformer.blocks import ATTENTIONS, MLPS, SublayerSpec, build_attention, build_mlp
from energyformer.core import ForwardContext
from energyformer.core.backward import BackwardMode
from energyformer.utils.config import load_config

from .block_cases import randomise

STEPS, K = 3, 1


class DetachedPrefix(BackwardMode):
    """Truncated's gradient, with the first steps tracked (their graph is built, then cut)."""

    def __init__(self, k: int):
        self.k = k

    def run(self, descent, x0, state, memory, steps):
        prefix = max(steps - self.k, 0)
        start = memory
        xp, state, memory = descent.descend(x0, state, memory, 0, prefix)
        if isinstance(memory, Tensor) and memory is not start:  # what the prefix updated has no graph
            memory = memory.detach()
        return descent.descend(x0 + (xp - x0).detach(), state, memory, prefix, steps)


def _cases():
    for reg, build in ((ATTENTIONS, build_attention), (MLPS, build_mlp)):
        for name in reg.names():
            cfg_cls = reg.get(name).config
            if "backward" not in cfg_cls.model_fields or "steps" not in cfg_cls.model_fields:
                continue  # not a descent sublayer (softmax attention, plain MLPs)
            for i, example in enumerate(cfg_cls.examples()):
                try:
                    cfg_cls.model_validate({**example, "steps": STEPS})
                except ValidationError as err:  # one step per call by definition: no prefix to truncate
                    # (Hyper-SET: one per iteration; a look-ahead rule, e.g. nag_mha's readout 'seed': per call)
                    if any(e["loc"] == ("steps",) or "takes one step per call" in e["msg"] for e in err.errors()):
                        continue
                yield pytest.param(build, cfg_cls, example, id=f"{reg.what}-{name}-{i}")



def _grads(blk: nn.Module, x: Tensor) -> dict[str, Tensor]:
    xg = x.clone().requires_grad_(True)
    ctx = ForwardContext(embedded=xg, iterations=STEPS)  # a step-size table covering every step
    y = blk(xg, ctx)
    w = torch.linspace(-1, 1, y.numel(), dtype=y.dtype).view_as(y)
    params = [(n, p) for n, p in blk.named_parameters() if p.requires_grad]
    out = torch.autograd.grad((y * w).sum(), [xg] + [p for _, p in params], allow_unused=True)
    return {n: g for n, g in zip(["input"] + [n for n, _ in params], out) if g is not None}


@pytest.mark.parametrize("build,cfg_cls,example", list(_cases()))
def test_truncated_gradient_is_the_detached_prefix_gradient(build, cfg_cls, example):
    cfg = load_config(cfg_cls, {**example, "kind": cfg_cls.model_fields["kind"].default, "steps": STEPS,
                                "backward": {"kind": "truncated", "k": K}})
    spec = SublayerSpec(dim=16, heads=4, causal=bool(getattr(cfg_cls, "supports_causal", True)))
    torch.manual_seed(0)
    blk = randomise(build(cfg, spec).double(), 1).train()
    assert not blk.solver.lookahead  # (refused with steps > 1 when the config loads)
    x = torch.randn(2, 6, 16, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    got = _grads(blk, x)
    blk.solver.backward = DetachedPrefix(K)
    want = _grads(blk, x)
    assert set(got) == set(want) and "input" in want
    for n, g in want.items():
        torch.testing.assert_close(got[n], g, rtol=1e-9, atol=1e-11, msg=lambda m: f"{n}: {m}")
