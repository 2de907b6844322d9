"""No silent wrong answers (issue 23): every registered energy, every attention and MLP sublayer kind and
the bare self-attention model, in float32 and in bf16 autocast (CPU), against float64.

Driven by the registries: ``ENERGIES`` (each energy's ``examples()``, at most :data:`MAX_EXAMPLES`
evenly spread per energy), ``ATTENTIONS`` / ``MLPS`` (each kind config's ``examples()``), so a new
registration is fuzzed as soon as it exists, and one without examples fails
:func:`test_every_registration_has_examples`. Scales (:data:`SCALES`): inputs and weight matrices
1e-3, inputs 1e-4 (rows of RMS ~1e-4), inputs 4 and 17 (unnormalised attention logits ~100 and ~300), inputs 1e4
and 1e20 (past float32's norm overflow), weight matrices 1e2 and 1e4. Acceptance
(:func:`energyformer.core.fuzz.low_precision_agreement`): within C · (measured sensitivity to a rounding
of every input, parameter and submodule output, and to :data:`PROBES` random u-sized perturbations of them,
+ u‖y‖ + the dtype's smallest normal per element), or a clear error, or a non-finite result —
never a finite wrong answer. Every sublayer kind's float32 backward (the input's and every parameter's
gradient, parameters moved off their initialisation) is fuzzed the same way at :data:`GRAD_SCALES`. A case listed
in :data:`KNOWN` is a silent wrong answer found and not yet fixed (with the reason); it must still be one
(strict), so a fix shows up here.
"""

from __future__ import annotations

import copy
import functools
import math

import pytest
import torch

import energyformer.blocks  # noqa: F401  (registers all sublayers)
import energyformer.energies  # noqa: F401  (registers all energies)
from energyformer.blocks.registry import ATTENTIONS, MLPS, SublayerSpec
from energyformer.core import ENERGIES, ForwardContext, IdentityPrecond
from energyformer.core.fuzz import low_precision_agreement, map_tensors, scale_weights_, sublayer_gradients
from energyformer.models import MODELS
from energyformer.models.bare_attention import BareSAConfig
from energyformer.utils.validate import ConfigError

#: (input scale, weight-matrix scale); inputs x4 put unnormalised logits at ~100, where the pre-issue-23
#: Hyper-SET fused bi-softmax dropped keys (this fuzz fails with its old span check), x17 at ~300; weights x100,
#: where MHA2nd-lite's σ² = E[v²] − μ² residue shows (x30 and x300 pass: it sat between the scales sampled);
#: inputs x1e20, past float32's ‖z‖ overflow (~1.8e19), where the sphere norms and coherence_mem's cosines
#: returned finite zeros (probe P); inputs x1e-4 at unit weights, rows of RMS ~1e-4, where an RMSNorm eps of its
#: dtype's size (bf16's 7.8e-3) put the step network's output 75 % off float64 (probe AD)
SCALES = [(1e-3, 1e-3), (1e-4, 1.0), (4.0, 1.0), (17.0, 1.0), (1e4, 1.0), (1.0, 1e4), (1.0, 1e2), (1e20, 1.0)]
PRECISIONS = {"float32": (torch.float32, False), "bf16_autocast": (torch.bfloat16, True)}
MAX_EXAMPLES = 3
#: random u-sized perturbations of every input, parameter and submodule output added to the deterministic
#: rounding when measuring the sensitivity: the rounding alone is one sample and can land on cancellations
#: (newton_heads at inputs x17 measured a sensitivity 10x below two random probes' on an AMD EPYC, and its
#: float32 direction, 1e-5 relative to |y| at logits ~300, failed there while passing on Intel CPUs)
PROBES = 2

#: (case id, precision, (input scale, weight scale)) -> why it is still a silent wrong answer (MHA2nd1st's Taylor
#: bias at weights x1e4 was one until it was shifted per query, energies/newton.py; CRATE's float32 backward
#: through fused SDPA at weights x10 until it materialised its softmax, energies/crate.py; MHA2nd-lite's float32
#: forward and bf16-autocast gradient at weights x100 until its moments ran in float64, LiteHeads.attend)
KNOWN: dict[tuple, str] = {}


def _check(case: str, results_by_precision, scale, tags=tuple(PRECISIONS)):
    problems, known_seen = [], []
    for tag, results in zip(tags, results_by_precision):
        wrong = [r for r in results if r.silent_wrong]
        key = (case, tag, scale)
        if key in KNOWN:
            assert wrong, f"{key} is listed in KNOWN but is no longer a silent wrong answer: remove it"
            known_seen.append(key)
            continue
        if wrong:
            problems.append(f"{tag} at inputs x{scale[0]:g}, weights x{scale[1]:g}: " + "; ".join(
                f"err {r.err:.3g} > bound {r.bound:.3g} (|y| {r.scale:.3g})" for r in wrong))
    assert not problems, f"{case}: silent wrong answer(s): " + " | ".join(problems)
    return known_seen


# ----------------------------------------------------------------------------- registrations
def test_every_registration_has_examples():
    missing = []
    for name, cls in ENERGIES.items():
        try:
            ok = bool(cls.examples(torch.float64))
        except NotImplementedError:
            ok = False
        if not ok:
            missing.append(f"energy {name}")
    for reg in (ATTENTIONS, MLPS):
        for name, entry in reg.entries.items():
            try:
                ok = bool(entry.config.examples())
            except NotImplementedError:
                ok = False
            if not ok:
                missing.append(f"{reg.what} {name}")
    assert not missing, f"registered without examples: {', '.join(missing)}"


# ----------------------------------------------------------------------------- energies
@functools.lru_cache(maxsize=None)
def _energy_examples(name):
    examples = ENERGIES[name].examples(torch.float64)
    step = max(1, math.ceil(len(examples) / MAX_EXAMPLES))
    return {label: (energy.eval(), ctx, x) for label, energy, ctx, x in examples[::step]}


def _energy_cases():
    for name, cls in sorted(ENERGIES.items()):
        try:
            labels = list(_energy_examples(name))
        except NotImplementedError:
            continue  # test_every_registration_has_examples names it
        for label in labels:
            yield pytest.param(name, label, id=f"{name}[{label}]")


def _run_energy(energy, inputs):
    ctx, x = inputs
    state = energy.prepare(ctx)
    if energy.context_is_iterate:
        state = energy.reprepare(state, x)
    return energy.direction(x, state, IdentityPrecond(x.shape[-1])), energy.energy(x, state)


@pytest.mark.parametrize("name,label", list(_energy_cases()))
def test_energy_update_and_value_in_low_precision(name, label):
    """The update direction (what a block applies) and the per-token energy (what is traced)."""
    base, ctx, x = _energy_examples(name)[label]
    for s_in, s_w in SCALES:
        energy = scale_weights_(copy.deepcopy(base), s_w)
        inputs = map_tensors((ctx, x), lambda t: t * s_in)
        res = low_precision_agreement(_run_energy, energy, inputs, list(PRECISIONS.values()), probes=PROBES)
        _check(f"{name}[{label}]", res, (s_in, s_w))


# ----------------------------------------------------------------------------- sublayers
def _sublayer_cases():
    for reg in (ATTENTIONS, MLPS):
        for name, entry in reg.entries.items():
            try:
                examples = entry.config.examples()
            except NotImplementedError:
                continue
            for opts in examples:
                label = ",".join(f"{k}={v}" for k, v in opts.items()) or "default"
                yield pytest.param(reg.what, name, opts, id=f"{reg.what}:{name}[{label}]")


def _run_sublayer(module, inputs):
    (x,) = inputs
    return module(x, ForwardContext(embedded=x))


def _build_sublayer(part: str, name: str, opts: dict):
    """The sublayer in float64, eval mode, 16 wide with 2 heads: causal where the kind has a causal form, else
    bidirectional (the build refuses causal with a ConfigError)."""
    reg = ATTENTIONS if part == "attention" else MLPS
    entry = reg.get(name)
    torch.manual_seed(0)
    try:
        base = entry.builder(entry.config(**opts), SublayerSpec(dim=16, heads=2, causal=True))
    except ConfigError:
        torch.manual_seed(0)
        base = entry.builder(entry.config(**opts), SublayerSpec(dim=16, heads=2, causal=False))
    return base.double().eval()


@pytest.mark.parametrize("part,name,opts", list(_sublayer_cases()))
def test_sublayer_output_in_low_precision(part, name, opts, request):
    """One forward of the sublayer (residual included) on (2, 9, 16) tokens, 2 heads; causal where the
    kind has a causal form, else bidirectional (the build refuses causal with a ConfigError)."""
    base = _build_sublayer(part, name, opts)
    x = torch.randn(2, 9, 16, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    case = request.node.callspec.id
    for s_in, s_w in SCALES:
        module = scale_weights_(copy.deepcopy(base), s_w)
        res = low_precision_agreement(_run_sublayer, module, (x * s_in,), list(PRECISIONS.values()),
                                      probes=PROBES)
        _check(case, res, (s_in, s_w))


#: (input scale, weight-matrix scale) of the gradient fuzz: plain, logits ~100, and weights x10 (logits in the
#: hundreds), where MHA2nd's float32 gradients were 16 % (W_K) and 200 % (the score temperature) off float64
GRAD_SCALES = [(1.0, 1.0), (4.0, 1.0), (1.0, 10.0)]


_run_sublayer_grads = sublayer_gradients  # the input's and every trainable parameter's gradient


def _jittered_sublayer(part: str, name: str, opts: dict):
    """(the sublayer with its parameters moved off their initialisation by N(0, 0.3²), tokens (2, 9, 16))."""
    base = _build_sublayer(part, name, opts)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in base.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return base, torch.randn(2, 9, 16, generator=torch.Generator().manual_seed(1), dtype=torch.float64)


@pytest.mark.parametrize("part,name,opts", list(_sublayer_cases()))
def test_sublayer_gradients_in_float32(part, name, opts, request):
    """The backward of every sublayer kind in float32 against float64 (input and every parameter gradient), with
    the parameters moved off their initialisation (+ N(0, 0.3²): zero-initialised step sizes and gates would leave
    most gradients trivial), under the same acceptance as the forward: within C · the gradient's measured
    sensitivity to a rounding of every input, parameter and submodule output, or loud, never finite and wrong."""
    base, x = _jittered_sublayer(part, name, opts)
    case = request.node.callspec.id
    for s_in, s_w in GRAD_SCALES:
        module = scale_weights_(copy.deepcopy(base), s_w)
        res = low_precision_agreement(_run_sublayer_grads, module, (x * s_in,), [PRECISIONS["float32"]],
                                      probes=PROBES)
        _check(case, res, (s_in, s_w))


#: the Newton kinds' backward under bf16 autocast, at weights x10 and x100 (probe AU: at x100 MHA2nd1st's input
#: gradient came out 3.7e3 times too large, finite, from q and k rounded to bf16 before the scores q·k − |k|²/2
#: cancelled; its projections now run in float32 with its heads, ``fp32_heads``)
NEWTON_KINDS = ("mha2nd", "mha2nd1st", "mha2nd1st_simple", "mha2nd_lite")


@pytest.mark.parametrize("part,name,opts", [c for c in _sublayer_cases() if c.values[1] in NEWTON_KINDS])
def test_newton_sublayer_gradients_in_bf16_autocast(part, name, opts, request):
    """As :func:`test_sublayer_gradients_in_float32`, in bf16 autocast, for the kinds whose heads cancel large
    terms (energies/newton.py)."""
    base, x = _jittered_sublayer(part, name, opts)
    case = request.node.callspec.id
    for scale in ((1.0, 10.0), (1.0, 1e2)):
        module = scale_weights_(copy.deepcopy(base), scale[1])
        res = low_precision_agreement(_run_sublayer_grads, module, (x * scale[0],), [PRECISIONS["bf16_autocast"]],
                                      probes=PROBES)
        _check(case, res, scale, tags=("bf16_autocast_grad",))


# ----------------------------------------------------------------------------- model kinds
@pytest.mark.parametrize("objective", ["vmf", "codebook"])
def test_bare_self_attention_in_low_precision(objective):
    """The bare_sa model kind (no attention/MLP sublayers): q = 3 renormalised steps and its training
    objective, at J x 1e-3, 1, 1e4 and 1e20 (|γx + Σ α J x| past float32's norm overflow, issue 23;
    λ = 1/scale keeps the attention weights ordinary)."""
    colours = objective == "codebook"
    x0 = torch.nn.functional.normalize(
        torch.randn(2, 6, 4, generator=torch.Generator().manual_seed(3), dtype=torch.float64), dim=-1)

    def run(m, inputs):
        (x,) = inputs
        return m.run(x, steps=3).x, m.local_loss(x)[0]

    for scale in (1e-3, 1.0, 1e4, 1e20):
        cfg = BareSAConfig(n_tokens=6, dim=4, n_colours=4 if colours else None, init_std=0.5, lam=1.0 / scale,
                           objective=objective)
        model = scale_weights_(MODELS.build(cfg).double().eval(), scale)
        res = low_precision_agreement(run, model, (x0,), list(PRECISIONS.values()), probes=PROBES)
        _check(f"bare_sa[{objective}]", res, (1.0, scale))


# ----------------------------------------------------------------------------- the bound itself
def test_the_fuzz_catches_a_silent_wrong_answer():
    """The acceptance bound is not vacuous: a float32 norm that overflows (the pre-issue-23 bare SA
    renormalisation) is reported as a silent wrong answer, an overflow to inf as loud."""
    def old_renorm(m, inputs):
        (y,) = inputs
        return y / y.norm(dim=-1, keepdim=True).clamp_min(torch.finfo(y.dtype).tiny)

    y = torch.randn(3, 5, dtype=torch.float64) * 1e20
    [res] = low_precision_agreement(old_renorm, torch.nn.Identity(), (y,))
    assert [r.status for r in res] == ["wrong"] and math.isfinite(res[0].err)
    [res] = low_precision_agreement(lambda m, i: torch.exp(i[0].abs() * 1e-18), torch.nn.Identity(), (y,))
    assert [r.status for r in res] == ["loud"]


def test_a_value_below_the_dtypes_smallest_normal_is_no_wrong_answer():
    """Probe AU: a float64 gradient of 1.2e-102 that float32 returns as 0 (right for float32's range) was reported
    'wrong' (relative error 1); the bound now has the dtype's smallest normal per element. A 0 where the value is
    float32-sized is still wrong."""
    tiny = torch.full((4,), 1.16e-102, dtype=torch.float64)
    [res] = low_precision_agreement(lambda m, i: i[0] * 0 + tiny.to(i[0].dtype), torch.nn.Identity(), (tiny,))
    assert tiny.float().eq(0).all()
    assert [r.status for r in res] == ["ok"]
    small = torch.full((4,), 1e-30, dtype=torch.float64)
    [res] = low_precision_agreement(lambda m, i: i[0] * 0 + small * (i[0].dtype == torch.float64), torch.nn.Identity(),
                                    (small,))
    assert [r.status for r in res] == ["wrong"]
