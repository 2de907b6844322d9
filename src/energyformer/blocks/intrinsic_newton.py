"""Newton-type attention kinds of seed 001 §3.2 / App. A.7 (heads in :mod:`energyformer.energies.newton`).

=================== ===================================================================================
kind                update ``x + η d``, d from per-head steps o_h (see energies/newton.py)
=================== ===================================================================================
``mha2nd``          exact per-head Newton ``o = M_ε⁻¹ a`` (damped), ``d = Σ_h P_h⁺ o_h`` — the reference
``mha2nd1st``       first-order Taylor ``o = a + C a / T_b``, ``d = Σ_h P_h⁺ o_h``  (MHA2nd1st)
``mha2nd1st_simple`` the same with ``P_h⁺`` replaced by a learnable W_O (the "simplified" form)
``mha2nd_lite``     MHA + per-dimension variance preconditioning ``o = μ + σ²⊙μ / T_b`` (MHA2nd-lite)
=================== ===================================================================================

Defaults and why:

* Temperatures ``T_s`` (scores) and ``T_b`` (bias term) are head-wise and learnable (App. A.7.1: two
  per head); their initial values were lost in extraction, so both start at ``√d_h``
  (reconstructed.md §1.3 [REC]: equal to standard attention's scale at initialisation).
* ``tie_values`` (Newton kinds; default **false**): the seed's practical form (App. A.7.1, Eq. 32)
  "introduces new parameters to make the model more flexible" — we read this as a value projection
  W_V^h; ``true`` is the theory (v = k), under which ``o = −(2I − ∇²F)∇F`` holds exactly.
* ``subtract_query`` (true): ``a = μ − q`` is the negative gradient of the elastic free energy.
* η: learnable (init 1, the natural Newton step) where the output map is ``P_h⁺`` (nothing else
  scales it); fixed 1 for ``mha2nd1st_simple`` and ``mha2nd_lite``, whose W_O absorbs the step
  (as in MHA).
* ``mha2nd`` damping: eigenvalues of ``M = I − C/T_s`` clamped to ≥ 0.1 (M is indefinite once
  λ_max(C) > T_s, Lemma 2). It is a reference (per-token eigendecompositions), not in the LM
  comparison, as in the seed.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from torch import nn

from ..core.stepsize import FixedStepSizeConfig, LearnedStepSizeConfig, StepSizeField
from ..energies.newton import DAMPINGS, MOMENTS, LiteHeads, NewtonHeads
from ..utils.config import ConfigModel
from .intrinsic import IntrinsicBlock, IntrinsicDescentConfig, _block as _intrinsic_block
from .registry import ATTENTIONS, AttentionConfig, SublayerSpec


class _NewtonConfig(AttentionConfig, IntrinsicDescentConfig):
    temperature_init: float | None = Field(None, gt=0)
    """initial score temperature T_s per head (None: sqrt(head_dim))"""
    learn_temperature: bool = True
    """learn the temperatures (softplus, head-wise; App. A.7.1)"""
    tie_values: bool = False
    """v = k (the theory) instead of a value projection W_V (the seed's practical Eq. 32)"""
    subtract_query: bool = True
    """a = mu - q (the negative elastic gradient); false: a = mu"""
    step_size: StepSizeField = Field(default_factory=lambda: LearnedStepSizeConfig(init=1.0))
    """eta: learned softplus, initialised at 1 (the natural Newton step)"""


class _PinvConfig(_NewtonConfig):
    pinv_eps: float | None = Field(None, ge=0)
    """ridge of the output pseudo-inverse relative to each head's scale, eps_h = pinv_eps tr(P_h P_h^T)/d_h
    (None: the working dtype's machine epsilon; 0: none)"""


class MHA2ndConfig(_PinvConfig):
    """MHA2nd: exact per-head damped Newton step with the pseudo-inverse (reference; slow)."""

    kind: Literal["mha2nd"] = "mha2nd"
    damping: Literal[DAMPINGS] = "clamp"
    """clamp eigenvalues of M to >= damping_eps, |lambda| >= eps (saddle-free), or M + eps I"""
    damping_eps: float = Field(0.1, gt=0)
    """epsilon of the damping"""

    @classmethod
    def examples(cls) -> list[dict]:
        return [{}]


class _TaylorFields(ConfigModel):
    bias_temperature_init: float | None = Field(None, gt=0)
    """initial bias-term temperature T_b per head (None: sqrt(head_dim))"""


class MHA2nd1stConfig(_TaylorFields, _PinvConfig):
    """MHA2nd1st: first-order Taylor of the inverse Hessian (bias vector C a / T_b), output P_h^+."""

    kind: Literal["mha2nd1st"] = "mha2nd1st"

    @classmethod
    def examples(cls) -> list[dict]:
        return [{}]


class MHA2nd1stSimpleConfig(_TaylorFields, _NewtonConfig):
    """Simplified MHA2nd1st: P_h^+ replaced by a learnable W_O (no pseudo-inverse, so no pinv_eps)."""

    kind: Literal["mha2nd1st_simple"] = "mha2nd1st_simple"
    step_size: StepSizeField = Field(default_factory=lambda: FixedStepSizeConfig(value=1.0))
    """eta: fixed 1 (W_O already absorbs it)"""

    @classmethod
    def examples(cls) -> list[dict]:
        return [{}]


class MHA2ndLiteConfig(AttentionConfig, IntrinsicDescentConfig):
    """MHA2nd-lite: MHA with per-dimension variance preconditioning and two per-head temperatures."""

    kind: Literal["mha2nd_lite"] = "mha2nd_lite"
    temperature_init: float | None = Field(None, gt=0)
    """initial score temperature T_s (None: sqrt(head_dim))"""
    bias_temperature_init: float | None = Field(None, gt=0)
    """initial preconditioning temperature T_b (None: sqrt(head_dim))"""
    learn_temperature: bool = True
    """learn both temperatures (softplus, per head)"""
    moments: Literal[MOMENTS] = "auto"
    """dtype of the SDPA call forming μ and E[v⊙v] (σ² = E[v⊙v] − μ⊙μ cancels where one key dominates): auto =
    float32, again in float64 where a row's E[v⊙v]/|T_b| exceeds 8 (one host read per call); float64 = always
    (slower: a float64 SDPA); float32 = never (leaves ~u·E[v⊙v] in σ²). energies/newton.py LiteHeads.attend"""
    fp32_heads: bool = True
    """under autocast, the q/k/v projection in float32, forward and backward (its gradient sums routes that cancel;
    bf16 left the input gradient far off at large weights: LiteHeads.project_qkv); false = autocast's dtype"""

    @classmethod
    def examples(cls) -> list[dict]:
        return [{}]


def _block(energy: nn.Module, cfg, spec: SublayerSpec) -> IntrinsicBlock:
    block = _intrinsic_block(energy, cfg, spec, "attention")
    block.part = "attention"
    return block


def _newton(cfg, spec: SublayerSpec, mode: str, output: str, **kw) -> NewtonHeads:
    return NewtonHeads(spec.dim, spec.heads, mode=mode, output=output, tie_values=cfg.tie_values,
                       subtract_query=cfg.subtract_query, temperature_init=cfg.temperature_init,
                       learn_temperature=cfg.learn_temperature, dropout=spec.dropout, causal=spec.causal, **kw)


@ATTENTIONS.register("mha2nd", MHA2ndConfig)
def build_mha2nd(cfg: MHA2ndConfig, spec: SublayerSpec) -> IntrinsicBlock:
    """MHA2nd: damped per-head Newton with the pseudo-inverse (reference)."""
    return _block(_newton(cfg, spec, "newton", "pinv", damping=cfg.damping, damping_eps=cfg.damping_eps,
                          pinv_eps=cfg.pinv_eps), cfg, spec)


@ATTENTIONS.register("mha2nd1st", MHA2nd1stConfig)
def build_mha2nd1st(cfg: MHA2nd1stConfig, spec: SublayerSpec) -> IntrinsicBlock:
    """MHA2nd1st: a + C a / T_b per head, mapped back by P_h^+."""
    return _block(_newton(cfg, spec, "taylor", "pinv", bias_temperature_init=cfg.bias_temperature_init,
                          pinv_eps=cfg.pinv_eps), cfg, spec)


@ATTENTIONS.register("mha2nd1st_simple", MHA2nd1stSimpleConfig)
def build_mha2nd1st_simple(cfg: MHA2nd1stSimpleConfig, spec: SublayerSpec) -> IntrinsicBlock:
    """Simplified MHA2nd1st: a + C a / T_b per head, mapped back by a learnable W_O."""
    return _block(_newton(cfg, spec, "taylor", "learned", bias_temperature_init=cfg.bias_temperature_init), cfg, spec)


@ATTENTIONS.register("mha2nd_lite", MHA2ndLiteConfig)
def build_mha2nd_lite(cfg: MHA2ndLiteConfig, spec: SublayerSpec) -> IntrinsicBlock:
    """MHA2nd-lite: MHA + per-dimension variance preconditioning (one fused SDPA call)."""
    energy = LiteHeads(spec.dim, spec.heads, spec.dropout, spec.causal, cfg.temperature_init,
                       cfg.bias_temperature_init, cfg.learn_temperature, cfg.moments, cfg.fp32_heads)
    return _block(energy, cfg, spec)
