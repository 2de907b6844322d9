"""``energyformer.core.check_mlp_kind``: the contract of an MLP kind defined outside the package. An MLP sublayer's
energy that declares nothing is taken as token-local (``core.energy.is_token_local``), so cached decoding hands it
only the new tokens; a plugin energy that mixes tokens without saying so decoded silently different tokens, and no
check existed (``check_energy`` passes it, asserted below). Before, ``check_mlp_kind`` did not exist."""

from __future__ import annotations

from typing import Literal

import pytest
import torch

from energyformer.blocks.registry import MLPS, MLPConfig
from energyformer.core import (
    DescentConfig, Energy, EnergyBlock, IdentityPrecond, check_energy, check_mlp_kind,
)
from energyformer.core.attention import append_cache


class Centre(Energy):
    """E_i = ½ |x_i − m|², m the mean of the context's tokens: a correct energy that reads every token."""

    exact = True

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def prepare(self, context, mask=None, cache=None, offset=0, **kw):
        return context.mean(1, keepdim=True)  # (B, 1, D)

    def energy(self, x, m):
        return 0.5 * (x - m).pow(2).sum(-1)

    def grad(self, x, m):
        return x - m


class CentreDeclared(Centre):
    """Declares that it reads other tokens, but keeps no cache: pieces see only themselves."""

    token_local = False


class CentreCached(CentreDeclared):
    """Declares it and appends the context to its cache slot: a causal running mean (padding counted as in the full
    forward), decodes exactly."""

    def prepare(self, context, mask=None, cache=None, offset=0, **kw):
        ctx = append_cache(cache, mask, {"c": 1}, c=context)[0]["c"]  # (B, offset + n, D): the tokens so far
        n = context.shape[1]
        csum = ctx.cumsum(1)[:, -n:]                                                        # (B, n, D)
        count = torch.arange(ctx.shape[1] - n + 1, ctx.shape[1] + 1, dtype=ctx.dtype, device=ctx.device)
        return csum / count[None, :, None]


KINDS = {"pub_centre": Centre, "pub_centre_declared": CentreDeclared, "pub_centre_cached": CentreCached,
         "pub_pointwise": None}


def _config(name: str) -> type[MLPConfig]:
    return type(f"Cfg_{name}", (MLPConfig, DescentConfig), {
        "__annotations__": {"kind": Literal[name], "step_size": float}, "kind": name, "step_size": 0.5,
        "examples": classmethod(lambda c: [{}]), "__doc__": f"test kind {name}", "__module__": __name__})


class Pointwise(Centre):
    def prepare(self, context, mask=None, cache=None, offset=0, **kw):
        return context  # (B, N, D): token i reads only its own context


@pytest.fixture(scope="module", autouse=True)
def kinds():
    for name, cls in KINDS.items():
        cls = cls or Pointwise
        MLPS.register(name, _config(name))(
            lambda cfg, spec, cls=cls: EnergyBlock.from_config(cls(spec.dim), cfg, spec.dim, spec.heads))
    yield
    for name in KINDS:
        del MLPS.entries[name]


def test_check_energy_passes_the_token_mixing_energy():
    g = torch.Generator().manual_seed(0)
    ctx, x = (torch.randn(2, 5, 6, generator=g, dtype=torch.float64) for _ in range(2))
    check_energy(Centre(6), ctx, x, IdentityPrecond(6))


def test_a_position_wise_kind_and_a_declared_cached_one_pass():
    check_mlp_kind("pub_pointwise")
    check_mlp_kind({"kind": "pub_pointwise", "steps": 2})
    check_mlp_kind("pub_centre_cached")


@pytest.mark.parametrize("kind, needle", [("pub_centre", "is not position-wise"),
                                          ("pub_centre_declared", "KV-cache slot empty")])
def test_a_token_mixing_kind_is_caught(kind, needle):
    with pytest.raises(AssertionError, match=needle) as err:
        check_mlp_kind(kind)
    assert f"mlp kind {kind!r}" in str(err.value) and "\n" not in str(err.value)
