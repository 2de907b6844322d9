"""The public checks a researcher runs on an energy or attention kind defined outside the package
(``energyformer.core.check_attention_kind``, ``check_energy_dtypes``): the package's own property tests never see such
a kind, and ``check_energy`` alone (float64, no mask, no cache, no causal setting) passed an energy that reads the
future, ignores the key mask or the KV cache, or is wrong only in bf16 (probe T, finding 2). Before, these helpers
did not exist; each broken energy below still passes ``check_energy``, which the tests assert too."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Literal

import pytest
import torch

from energyformer.blocks.registry import ATTENTIONS, AttentionConfig
from energyformer.core import (
    DescentConfig, EnergyBlock, IdentityPrecond, check_attention_kind, check_energy, check_energy_dtypes,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from quad_attn_energy import QuadAttn  # noqa: E402  (the energy a plugin would define)


class FutureLeak(QuadAttn):
    """Every token sees every key: not causal."""

    def prepare(self, context, mask=None, cache=None, offset=0, **kw):
        k, vis = QuadAttn.prepare(self, context, mask, cache, offset)
        return k, torch.ones_like(vis)


class MaskIgnored(QuadAttn):
    def prepare(self, context, mask=None, cache=None, offset=0, **kw):
        return QuadAttn.prepare(self, context, None, cache, offset)


class CacheIgnored(QuadAttn):
    """Drops the cache through **kw (what the README's example energy did): each decoded token sees only itself."""

    def prepare(self, context, mask=None, **kw):
        return QuadAttn.prepare(self, context, mask)


class Bf16Bug(QuadAttn):
    """A low-precision "fast path" with W where Wᵀ belongs: float64 (and float32) are right."""

    def grad(self, x, st):
        if x.dtype not in (torch.bfloat16, torch.float16):
            return QuadAttn.grad(self, x, st)
        a = torch.softmax(self.scores(x, st), -1)
        return x - torch.einsum("bij,bje,ed->bid", a, st[0], self.W.to(x.dtype))


def _config(name: str) -> type[AttentionConfig]:
    return type(f"Cfg_{name}", (AttentionConfig, DescentConfig), {
        "__annotations__": {"kind": Literal[name], "step_size": float}, "kind": name, "step_size": 0.5,
        "examples": classmethod(lambda c: [{}]), "__doc__": f"test kind {name}", "__module__": __name__})


KINDS = {"pub_quad": QuadAttn, "pub_future": FutureLeak, "pub_maskless": MaskIgnored,
         "pub_cacheless": CacheIgnored}


@pytest.fixture(scope="module", autouse=True)
def kinds():
    for name, cls in KINDS.items():
        ATTENTIONS.register(name, _config(name))(
            lambda cfg, spec, cls=cls: EnergyBlock.from_config(cls(spec.dim, spec.causal), cfg, spec.dim, spec.heads))
    yield
    for name in KINDS:
        del ATTENTIONS.entries[name]


def _passes_check_energy(cls) -> None:
    (_, e0, ctx, x), = QuadAttn.examples()
    e = cls(6).double()
    e.load_state_dict(e0.state_dict())
    check_energy(e, ctx, x, IdentityPrecond(6))  # the old public check: blind to all of these


def test_a_correct_plugin_kind_and_energy_pass():
    check_attention_kind("pub_quad")
    check_attention_kind({"kind": "pub_quad", "steps": 2})
    check_energy_dtypes(QuadAttn)
    (_, e, ctx, x), = QuadAttn.examples()
    check_energy_dtypes(e, ctx, x, scales=(1.0,))


@pytest.mark.parametrize("kind,needle", [
    ("pub_future", "is not causal"),
    ("pub_maskless", "does not ignore padded keys"),
    ("pub_cacheless", "KV cache"),
])
def test_check_attention_kind_catches_what_check_energy_passes(kind, needle):
    _passes_check_energy(KINDS[kind])
    with pytest.raises(AssertionError, match=needle) as err:
        check_attention_kind(kind)
    assert f"attention kind {kind!r}" in str(err.value) and "\n" not in str(err.value)


def test_check_energy_dtypes_catches_a_wrong_bf16_path():
    _passes_check_energy(Bf16Bug)
    with pytest.raises(AssertionError, match=r"Bf16Bug .*grad in bfloat16 at inputs x1 \[d6\]: error .*relative"):
        check_energy_dtypes(Bf16Bug)


def test_the_package_kinds_pass_and_bad_arguments_are_named():
    for kind in ("llama", "gpt", {"kind": "cem", "steps": 2, "precond": "diag_low_rank"}):
        check_attention_kind(kind)
    with pytest.raises(ValueError, match="give the context and x"):
        check_energy_dtypes(QuadAttn.examples()[0][1])

