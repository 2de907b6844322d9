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
    DescentConfig, EnergyBlock, IdentityPrecond, check_attention_kind, check_energy, check_energy_dtypes, check_grad,
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



# --- probe AX: wrong energies the public checks passed before
class EnergyIgnoresMask(QuadAttn):
    """``grad`` honours the key mask, ``energy`` does not: traces and ``energy_threshold`` read another energy."""

    def energy(self, x, st):
        k = st[0]
        causal = torch.arange(k.shape[1])[None] <= torch.arange(x.shape[1])[:, None]  # (N, Nk), no key mask
        return QuadAttn.energy(self, x, (k, causal[None]))


class PerComponentEnergy(QuadAttn):
    """(B, N, D) "energy" whose sum is the right total: every gradient check passed it."""

    def energy(self, x, st):
        e = QuadAttn.energy(self, x, st)
        return e[..., None].expand(*x.shape) / x.shape[-1]


class SelfReference(QuadAttn):
    """An inexact energy whose reference is its own direction (and that direction ascends)."""

    exact = False

    def direction(self, x, st, precond):
        return self.grad(x, st)

    def reference_direction(self, x, st, precond):
        return self.direction(x, st, precond)


def _quad(cls):
    (_, e0, ctx, x), = QuadAttn.examples()
    e = cls(6).double()
    e.load_state_dict(e0.state_dict())
    return e, ctx, x


def test_check_energy_runs_with_a_key_mask_and_catches_an_energy_that_ignores_it():
    e, ctx, x = _quad(EnergyIgnoresMask)
    check_grad(e, e.prepare(ctx), x)  # without a mask energy and grad agree
    with pytest.raises(AssertionError, match=r"(?s)^with a key-padding mask handed to prepare: "
                                             r"EnergyIgnoresMask.grad != autograd of energy"):
        check_energy(e, ctx, x)
    check_energy(*_quad(QuadAttn))  # the correct energy passes with the mask and every preconditioner


def test_check_energy_refuses_an_energy_that_is_not_one_value_per_token():
    with pytest.raises(AssertionError, match=r"PerComponentEnergy.energy has shape \(2, 5, 6\): one value per token, "
                                             r"\(2, 5\)"):
        check_energy(*_quad(PerComponentEnergy))


def test_a_reference_that_calls_direction_fails():
    with pytest.raises(AssertionError, match="reference_direction calls direction"):
        check_energy(*_quad(SelfReference), IdentityPrecond(6))


def test_a_stationary_point_is_named_as_such():
    e, ctx, x = _quad(QuadAttn)
    with torch.no_grad():
        e.W.zero_()
    with pytest.raises(AssertionError, match="x is a stationary point"):
        check_energy(e, ctx, torch.zeros_like(x), IdentityPrecond(6))


def test_check_energy_without_a_preconditioner_checks_the_three_kinds():
    """A direction that leaves P out descends with P = I (the README's example call passed it)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from core_toys import IgnoresPrecond

    g = torch.Generator().manual_seed(0)
    x, ctx = (torch.randn(2, 5, 4, generator=g, dtype=torch.float64) for _ in range(2))
    e = IgnoresPrecond(4).double()
    check_energy(e, ctx, x, IdentityPrecond(4))
    with pytest.raises(AssertionError, match="direction != -P grad"):
        check_energy(e, ctx, x)


class NaiveSoftmax(QuadAttn):
    """exp without the max subtracted: its float64 gradient is NaN at inputs x30 (exp(s) overflows)."""

    def grad(self, x, st):
        w = torch.exp(self.scores(x, st))
        return x - torch.einsum("bij,bje,de->bid", w / w.sum(-1, keepdim=True), st[0], self.W.to(x.dtype))


def test_check_energy_dtypes_fails_where_float64_itself_is_not_finite():
    """It passed before (status 'no_reference' was not counted), where the package's own dtype test fails."""
    check_energy_dtypes(NaiveSoftmax, scales=(1.0,))
    with pytest.raises(AssertionError, match=r"grad in float32 at inputs x30 \[d6\]: float64 itself .*is not finite"):
        check_energy_dtypes(NaiveSoftmax, scales=(30.0,))


# --- probe AY: what the first version of these checks still let through
class DiagOnlyP(QuadAttn):
    """Says −P grad but applies P's diagonal only (drops a low-rank part)."""

    def direction(self, x, st, precond):
        g = self.grad(x, st)
        return -(g * precond.diag()) if hasattr(precond, "diag") else -g


class FlippedDiag(QuadAttn):
    """Applies a diagonal P's entries in reverse order: right only where P is a multiple of I."""

    def direction(self, x, st, precond):
        g = self.grad(x, st)
        return -(g * precond.diag().flip(-1)) if type(precond).__name__ == "DiagonalPrecond" else -precond(g)


class DirectionIgnoresMask(QuadAttn):
    """Exact; its direction is −P grad of the unmasked energy."""

    def direction(self, x, st, precond):
        causal = (torch.arange(st[0].shape[1])[None] <= torch.arange(x.shape[1])[:, None])[None]
        return -precond(self.grad(x, (st[0], causal)))


class TupleContext(QuadAttn):
    """Its context is a (keys, unused) pair, not a tensor; energy ignores the mask its grad honours."""

    def prepare(self, context, mask=None, **kw):
        return QuadAttn.prepare(self, context[0], mask, **kw)

    energy = EnergyIgnoresMask.energy


class RefViaClass(SelfReference):
    def reference_direction(self, x, st, precond):
        return SelfReference.direction(self, x, st, precond)


class RefViaSuper(SelfReference):
    def reference_direction(self, x, st, precond):
        return super().direction(x, st, precond)


class NoKwargs(QuadAttn):
    def prepare(self, context):
        return QuadAttn.prepare(self, context)


@pytest.mark.parametrize("cls,needle", [
    (DiagOnlyP, "direction != -P grad"),
    (FlippedDiag, "direction != -P grad"),
    (DirectionIgnoresMask, r"(?s)^with a key-padding mask handed to prepare: .*direction != -P grad"),
    (RefViaClass, "reference_direction calls direction"),
    (RefViaSuper, "reference_direction calls direction"),
    (NoKwargs, r"NoKwargs.prepare\(context, mask=...\) raised TypeError: .* accept \*\*kwargs"),
])
def test_what_the_first_version_let_through_fails(cls, needle):
    with pytest.raises(AssertionError, match=needle):
        check_energy(*_quad(cls))
    assert SelfReference.direction is not None and "direction" in vars(SelfReference)  # the guard restored it


def test_a_float32_energy_is_checked_on_a_float64_copy():
    """probe BA: a correct float32 energy failed the float64 tolerances, blamed on its grad; the energy itself is left
    in float32."""
    e, ctx, x = _quad(QuadAttn)
    e32 = e.float()
    check_energy(e32, ctx.float(), x.float())
    check_energy(e32, ctx, x)
    assert e32.W.dtype == torch.float32
    with pytest.raises(AssertionError, match="grad != autograd"):
        check_energy(_quad(EnergyIgnoresMask)[0].float(), ctx.float(), x.float())


class NoCast(QuadAttn):
    """Its weight is used as it is (no cast to x's dtype): float32 weights with float64 inputs fail unless the whole
    energy is checked as a float64 copy."""

    def scores(self, x, st):
        k, vis = st
        return torch.einsum("bid,de,bje->bij", x, self.W, k).masked_fill(~vis, float("-inf"))

    def grad(self, x, st):
        a = torch.softmax(self.scores(x, st), -1)
        return x - torch.einsum("bij,bje,de->bid", a, st[0], self.W)


def test_a_float32_energy_with_float64_inputs_and_a_callers_no_grad_are_checked_as_float64_with_grad():
    e, ctx, x = _quad(NoCast)
    check_energy(e.float(), ctx, x)  # float64 x, float32 weights
    with torch.no_grad():  # autograd's gradient is the reference: the caller's mode must not fail a correct energy
        check_energy(*_quad(QuadAttn))


def test_the_mask_pass_runs_for_a_context_that_is_not_a_tensor():
    e, ctx, x = _quad(TupleContext)
    with pytest.raises(AssertionError, match=r"(?s)^with a key-padding mask handed to prepare: .*grad != autograd"):
        check_energy(e, (ctx, ctx), x)


@pytest.mark.parametrize("shape,want", [((2, 3, 4), [[1, 1, 0], [1, 1, 1]]), ((1, 2, 4), [[1, 0]]), ((2, 1, 4), None)])
def test_key_mask_keeps_token_0_pads_one_and_needs_two_tokens(shape, want):
    from energyformer.core.checks import key_mask_for

    m = key_mask_for(torch.zeros(shape))
    assert (None if m is None else m.int().tolist()) == want
    m = key_mask_for(None, x=torch.zeros(shape))
    assert (None if m is None else m.int().tolist()) == want
