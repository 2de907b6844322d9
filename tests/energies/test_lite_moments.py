"""MHA2nd-lite's moments (energies/newton.py, LiteHeads.attend): σ² = E[v⊙v] − μ⊙μ cancels where one key dominates,
so ``moments: auto`` (default) reruns a call in float64 where a row's E[v⊙v]/|T_b| passes ``LITE_RATIO``;
``float32`` is the old form (wrong past float32's tolerance at weights x100: the scale fuzz's former KNOWN entry)."""

from __future__ import annotations

import copy

import pytest
import torch

import energyformer.blocks  # noqa: F401  (registers all sublayers)
from energyformer.blocks.registry import ATTENTIONS, SublayerSpec
from energyformer.cli import main
from energyformer.core import ForwardContext
from energyformer.core.fuzz import low_precision_agreement, scale_weights_, sublayer_gradients
from energyformer.energies import newton
from energyformer.energies.newton import LiteHeads


def _lite(moments: str, weights: float = 1.0, **opts):
    entry = ATTENTIONS.get("mha2nd_lite")
    torch.manual_seed(0)
    block = entry.builder(entry.config(moments=moments, **opts), SublayerSpec(dim=16, heads=2, causal=True))
    return scale_weights_(block.double().eval(), weights)


def _run(module, inputs):
    (x,) = inputs
    return module(x, ForwardContext(embedded=x))


X = torch.randn(2, 9, 16, generator=torch.Generator().manual_seed(1), dtype=torch.float64)


def _verdicts(moments: str, weights: float, precision=(torch.float32, False)) -> list[str]:
    return [a.status for a in low_precision_agreement(_run, _lite(moments, weights), (X,), [precision], probes=2)[0]]


def test_float32_moments_are_wrong_at_weights_x100_and_auto_is_not():
    """The fuzz's former KNOWN case: float32 moments leave the residue (a finite wrong answer, the documented cost of
    the fast form); auto and float64 are within float32's tolerance."""
    assert "wrong" in _verdicts("float32", 100.0)
    assert _verdicts("auto", 100.0) == ["ok"] and _verdicts("float64", 100.0) == ["ok"]


def _float32_outputs(weights: float) -> dict[str, torch.Tensor]:
    out = {}
    for moments in ("auto", "float32", "float64"):
        block = _lite(moments, weights).float()
        with torch.no_grad():
            out[moments] = _run(block, (X.float(),))
    return out


def test_auto_reruns_in_float64_only_past_the_ratio():
    """At unit weights no row passes the ratio: auto is the float32 form bit for bit (no float64 cost); at weights
    x100 rows pass it and auto is the float64 form bit for bit."""
    small, large = _float32_outputs(1.0), _float32_outputs(100.0)
    assert torch.equal(small["auto"], small["float32"]) and not torch.equal(small["auto"], small["float64"])
    assert torch.equal(large["auto"], large["float64"]) and not torch.equal(large["auto"], large["float32"])


def test_auto_without_a_host_read_chooses_the_same_rows(monkeypatch):
    """Under torch.compile / CUDA-graph capture (``no_host_sync``) auto computes both forms and picks the risky rows
    with ``where``: the same output as the host-read path where every row or no row is risky, and per row in between."""
    heads = LiteHeads(8, 2, causal=True, temperature_init=1.0, bias_temperature_init=1.0).eval()
    torch.manual_seed(3)
    q, k = torch.randn(2, 2, 5, 4), torch.randn(2, 2, 5, 4)
    v = torch.randn(2, 2, 5, 4)
    v[0] *= 40.0  # batch row 0: E[v⊙v] ~ 1600 > 8 |T_b|; row 1: ~1
    st = newton.QKVState(h=torch.zeros(2, 5, 8), q=q, k=k, v=v)
    host = heads.attend(q, st)
    out32, risky = heads._moments(q, st, torch.float32, check=True)
    out64, _ = heads._moments(q, st, torch.float64)
    assert risky[0].all() and not risky[1].any()
    assert torch.equal(host, out64.float())  # some row risky: the whole call in float64
    monkeypatch.setattr(newton, "no_host_sync", lambda t: True)
    graphed = heads.attend(q, st)
    assert torch.equal(graphed[0], out64[0].float()) and torch.equal(graphed[1], out32[1])


def _input_grad(module, inputs):
    return sublayer_gradients(module, inputs, params=False)


@pytest.mark.parametrize("moments", ["auto", "float64"])
def test_bf16_autocast_input_gradient_needs_the_float32_projection(moments):
    """At weights x100 under bf16 autocast the input gradient sums q, k and v routes that cancel in the projection's
    backward: with the projection in bf16 it was 8.4 times the fuzz bound (970 times its own size) whatever the
    moments; ``fp32_heads`` (default) runs it in float32."""
    bf16 = (torch.bfloat16, True)
    res = {fp: low_precision_agreement(_input_grad, _lite(moments, 100.0, fp32_heads=fp), (X,), [bf16], probes=2)[0]
           for fp in (True, False)}
    assert [a.status for a in res[True]] == ["ok"] and res[True][0].err < 1e-2 * res[True][0].scale
    assert [a.status for a in res[False]] == ["wrong"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_defaults_stay_within_the_bound_across_weight_scales(seed):
    """The defaults (moments auto, fp32_heads) over the scales where the old forms failed (float32 forward from x50,
    bf16-autocast input gradient from x100 at these seeds): output and input gradient, float32 and bf16 autocast."""
    entry = ATTENTIONS.get("mha2nd_lite")
    x = torch.randn(2, 9, 16, generator=torch.Generator().manual_seed(seed + 1), dtype=torch.float64)
    for weights in (10.0, 50.0, 100.0, 200.0, 1000.0):
        torch.manual_seed(seed)
        block = entry.builder(entry.config(), SublayerSpec(dim=16, heads=2, causal=True)).double().eval()
        block = scale_weights_(block, weights)
        for run in (_run, _input_grad):
            res = low_precision_agreement(run, block, (x,), [(torch.float32, False), (torch.bfloat16, True)], probes=2)
            assert all(a.status == "ok" for r in res for a in r), (weights, run.__name__, res)


def test_float32_projection_only_under_autocast():
    """Without autocast the projection is c_attn itself (its hooks run; a bf16 module keeps its bf16 weights)."""
    block = _lite("auto").float()
    seen = []
    block.energy.c_attn.register_forward_hook(lambda *a: seen.append(1))
    with torch.no_grad():
        _run(block, (X.float(),))
        assert seen
        seen.clear()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            _run(block, (X.float(),))
        assert not seen


def test_bad_moments_are_refused_in_one_line(capsys):
    with pytest.raises(ValueError, match="moments='float16'; allowed: auto, float64, float32"):
        LiteHeads(8, 2, moments="float16")
    assert main(["config", "intrinsic/mha2nd_lite", "--set", "model.block.attention.moments=float16"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "moments" in err and "float16" in err, err


def test_float64_model_is_untouched_by_the_choice():
    """A float64 model runs its call in float64 whatever ``moments`` says (nothing wider to rerun in)."""
    outs = [_run(copy.deepcopy(_lite(m, 100.0)), (X,)) for m in ("auto", "float32", "float64")]
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])
