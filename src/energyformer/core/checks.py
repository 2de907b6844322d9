"""Property checks every energy must pass (DESIGN.md: "Tests prove for every energy that ``grad``
equals autograd of ``energy``, and that a small enough step lowers it").

``tests/core/test_energy_properties.py`` runs them over every registered energy and its
``examples()``; a researcher writing a new energy outside the package (which those tests never see) calls
:func:`check_energy`, :func:`check_energy_dtypes`, :func:`check_attention_kind` and :func:`check_mlp_kind` on it
directly (and :func:`~.solver_checks.check_solver` on a step rule of its own).

* :func:`check_grad`: ``energy`` is one value per token and ``grad(x, state)`` equals autograd of
  ``Σ_i energy(x, state)_i`` (for an iterate-context energy, of ``Σ_i energy(x, reprepare(state, x))_i``: the
  total derivative).
* :func:`check_descent` (``exact`` energies): ``direction`` has a negative slope and a small step
  along it lowers the energy; with a single preconditioner P (``precond_exact``) it equals −P ∇E.
* :func:`check_reference` (``exact = False``): ``direction`` equals the energy's independent
  ``reference_direction``; an inexact energy without one fails (nothing is skipped), and so does a reference that
  calls ``direction``.
* :func:`check_energy`: the three above for one energy, with every :func:`standard_preconds` (unless one P is given),
  without and with a key-padding mask handed to ``prepare``.

* :func:`check_energy_dtypes`: ``grad`` and ``direction`` in float32, bf16 (module cast) and bf16 autocast
  agree with float64 as closely as the problem's conditioning allows (:mod:`.fuzz`): a low-precision path
  that computes something else (a wrong transpose in a "fast" bf16 branch) fails.
* :func:`check_attention_kind`: a registered attention kind, built as a model builds it, is causal (output at
  token i unchanged when a later token changes), ignores padded keys (``mask``) and decodes with its KV cache
  exactly as the full forward does. :func:`check_energy` calls ``prepare`` with no cache or causal setting, and
  checks a mask only for agreement of ``energy`` and ``grad``, so an energy that sees the future or drops the mask
  or the cache passes it; this one does not.
* :func:`check_mlp_kind`: a registered MLP kind is position-wise (unless its energy declares ``token_local =
  False``) and decodes with its KV cache exactly as the full forward does.

Every helper raises ``AssertionError`` naming what failed. The grad / descent checks run in float64
(tolerances are set for it).
"""

from __future__ import annotations

from typing import Any

import copy
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from .energy import Energy
from .precond import Preconditioner


def _state_at(energy: Energy, state: Any, x: Tensor) -> Any:
    return energy.reprepare(state, x) if energy.context_is_iterate else state


def total_energy(energy: Energy, state: Any, x: Tensor) -> Tensor:
    """Σ_i E_i(x), with the context re-prepared at ``x`` for iterate-context energies."""
    return energy.energy(x, _state_at(energy, state, x)).sum()


def check_grad(energy: Energy, state: Any, x: Tensor, rtol: float = 1e-9, atol: float = 1e-10) -> None:
    """``energy`` is per token (shape x.shape[:-1], (B, N)) and the closed-form ``grad`` == autograd of the total
    energy. (An energy of another shape summed to the same total passed before: its traces, means and the
    ``energy_threshold`` stopping rule read per-token values; probe AX.)"""
    with torch.no_grad():
        e = energy.energy(x, _state_at(energy, state, x))
    if tuple(e.shape) != tuple(x.shape[:-1]):
        raise AssertionError(f"{type(energy).__name__}.energy has shape {tuple(e.shape)}: one value per token, "
                             f"{tuple(x.shape[:-1])} for x {tuple(x.shape)}, is the contract")
    g = energy.grad(x, _state_at(energy, state, x))
    xg = x.detach().clone().requires_grad_(True)
    (ga,) = torch.autograd.grad(total_energy(energy, state, xg), xg)
    if g.shape != x.shape:
        raise AssertionError(f"{type(energy).__name__}.grad has shape {tuple(g.shape)}, x {tuple(x.shape)}")
    torch.testing.assert_close(g, ga, rtol=rtol, atol=atol,
                               msg=lambda m: f"{type(energy).__name__}.grad != autograd of energy: {m}")


def check_descent(energy: Energy, state: Any, x: Tensor, precond: Preconditioner, step: float = 1e-4,
                  rtol: float = 1e-9, atol: float = 1e-10) -> None:
    """An exact energy's ``direction`` is a descent direction and a small step along it lowers E; where the
    energy says the direction is −P ∇E for one matrix P (``precond_exact``), it equals −P applied to autograd's
    gradient (P as its dense matrix): an energy that folds P into its weights is checked against the
    preconditioner itself, which a descent test alone does not do (a direction without P still descends)."""
    with torch.no_grad():
        st = _state_at(energy, state, x)
        d = energy.direction(x, st, precond)
    if energy.precond_exact(precond):
        xg = x.detach().clone().requires_grad_(True)
        (ga,) = torch.autograd.grad(total_energy(energy, state, xg), xg)
        want = -ga if precond.is_identity else -(ga @ precond.matrix().detach().to(ga.dtype).mT)
        torch.testing.assert_close(d, want, rtol=rtol, atol=atol,
                                   msg=lambda m: f"{type(energy).__name__}.direction != -P grad: {m}")
    with torch.no_grad():
        g = energy.grad(x, st)
        slope = float((g * d).sum())  # first-order change per unit step
        e0 = float(total_energy(energy, state, x))
        e1 = float(total_energy(energy, state, x + step * d))
    if not bool(g.ne(0).any()):
        raise AssertionError(f"{type(energy).__name__}: x is a stationary point (the gradient is 0 there), where no "
                             "direction can descend: check at another x (random inputs, not zeros)")
    if not slope < 0:
        raise AssertionError(f"{type(energy).__name__}.direction is not a descent direction (slope {slope})")
    if not e1 < e0:
        raise AssertionError(f"{type(energy).__name__}: a step of {step} along direction raised the "
                             f"energy from {e0} to {e1}")


def check_reference(energy: Energy, state: Any, x: Tensor, precond: Preconditioner,
                    rtol: float = 1e-9, atol: float = 1e-10) -> None:
    """An inexact energy's ``direction`` equals its ``reference_direction``, which must be computed without calling
    ``direction`` (a reference that returns ``self.direction(...)`` compared the direction with itself and passed
    whatever it was; probe AX)."""
    with torch.no_grad():
        st = _state_at(energy, state, x)
        d = energy.direction(x, st, precond)
    ref = _reference_without_direction(energy, x, st, precond)  # NotImplementedError when missing
    torch.testing.assert_close(
        d, ref.detach(), rtol=rtol, atol=atol,
        msg=lambda m: f"{type(energy).__name__}.direction != reference_direction: {m}")


def _reference_without_direction(energy: Energy, x: Tensor, st: Any, precond: Preconditioner) -> Tensor:
    def refuse(*args, **kwargs):
        raise AssertionError(f"{type(energy).__name__}.reference_direction calls direction: the reference must be "
                             "computed independently (else the check compares the direction with itself)")

    # every class of the energy that defines direction refuses during the call: an instance attribute alone let a
    # reference calling Cls.direction(self, ...) or super().direction(...) through (probe AY)
    owners = [c for c in type(energy).__mro__ if "direction" in vars(c)]
    saved = [(c, vars(c)["direction"]) for c in owners]
    try:
        for c in owners:
            setattr(c, "direction", refuse)
        return energy.reference_direction(x, st, precond)
    finally:
        for c, f in saved:
            setattr(c, "direction", f)


def key_mask_for(context: Any, seed: int = 0, x: Tensor | None = None) -> Tensor | None:
    """A (B, N) key-padding mask (``True`` = real token) for a tensor ``context`` of (B, N, ...), or else for the
    iterate ``x`` (B, N, D) (a context that is not a tensor: an energy's own structure): about a quarter of the tokens
    padded, token 0 of every row real (so every causal row sees a key) and at least one token padded; None for fewer
    than two tokens."""
    ref = context if torch.is_tensor(context) and context.dim() >= 3 else x
    if ref is None or ref.dim() < 3 or ref.shape[1] < 2:
        return None
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(ref.shape[:2], generator=g) > 0.25
    mask[:, 0] = True
    if bool(mask.all()):
        mask[-1, -1] = False
    return mask.to(ref.device)


def standard_preconds(dim: int, seed: int = 1) -> list[Preconditioner]:
    """Identity, diagonal and diagonal + low-rank preconditioners of ``dim`` in float64, the latter two moved off
    their initialisation (seeded; the low-rank part small enough that P stays positive definite): the three the
    package's own property test checks every energy with."""
    from .precond import DiagLowRankPrecond, DiagonalPrecond, IdentityPrecond

    out: list[Preconditioner] = [IdentityPrecond(dim)]
    g = torch.Generator().manual_seed(seed)
    for P in (DiagonalPrecond(dim).double(), DiagLowRankPrecond(dim, rank=max(1, min(2, dim - 1))).double()):
        with torch.no_grad():
            P.p.uniform_(-0.5, 0.5, generator=g)
            if isinstance(P, DiagLowRankPrecond):
                P.U.normal_(0, 0.1, generator=g), P.V.normal_(0, 0.1, generator=g)
        out.append(P)
    return out


@torch.enable_grad()  # autograd's gradient is the reference: a caller's no_grad blamed the energy (probe BB)
def check_energy(energy: Energy, context: Tensor, x: Tensor, precond: Preconditioner | None = None) -> None:
    """All properties of one energy instance at one point, on a float64 copy where it is not float64 already (the
    tolerances are float64's; low precision is :func:`check_energy_dtypes`' job): :func:`check_grad`, then
    :func:`check_descent` (``exact``) or :func:`check_reference`, for ``precond`` or, when None, each of
    :func:`standard_preconds` (a direction that leaves P out descends with P = I); with no mask and again with a
    key-padding mask handed to ``prepare`` (:func:`key_mask_for`, shaped like the context's or x's (B, N)): an energy
    whose ``energy`` ignores the mask that its ``grad`` honours (or the reverse) fails there (probe AX). A ``prepare``
    that does not take ``mask=`` fails too (a block passes ``mask``, ``cache`` and ``offset``: accept ``**kwargs``).
    Autograd runs whatever the caller's grad mode."""
    if x.dtype != torch.float64 or any(p.dtype != torch.float64 for p in energy.parameters()):
        from .fuzz import map_tensors  # a float32 energy failed the float64 tolerances, its grad blamed (probe BA)

        energy, context, x = copy.deepcopy(energy).double(), map_tensors(context, lambda t: t.double()), x.double()
        precond = None if precond is None else copy.deepcopy(precond).double()
    preconds = [precond] if precond is not None else standard_preconds(x.shape[-1])
    padded = key_mask_for(context, x=x)
    for mask in [None] + ([padded] if padded is not None else []):
        where = "" if mask is None else "with a key-padding mask handed to prepare"
        try:
            state = energy.prepare(context) if mask is None else energy.prepare(context, mask=mask)
        except TypeError as err:
            if mask is None:
                raise
            raise AssertionError(f"{type(energy).__name__}.prepare(context, mask=...) raised TypeError: {err} (a block "
                                 "passes mask, cache and offset: accept **kwargs)") from err
        try:
            check_grad(energy, state, x)
            for P in preconds:
                if energy.exact:
                    check_descent(energy, state, x, P)
                else:
                    check_reference(energy, state, x, P)
        except AssertionError as err:
            if not where:
                raise
            raise AssertionError(f"{where}: {err}") from err


#: precisions :func:`check_energy_dtypes` compares with float64: (dtype, autocast); bf16 both cast (the module's
#: own low-precision path, as ``tests/core/test_energy_dtypes.py``) and under autocast (bf16 training)
DTYPE_PRECISIONS = ((torch.float32, False), (torch.bfloat16, False), (torch.bfloat16, True))


#: relative tolerance ‖y_low − y_64‖ / ‖y_64‖ (``tests/core/test_energy_dtypes.py``'s, measured over the package's
#: energies at inputs x1e-2 and x1): a result off by more fails even where the rounding bound is wider
DTYPE_RTOL = {torch.float32: 2e-4, torch.bfloat16: 5e-2}


def _grad_and_direction(energy: Energy, inputs: Any) -> tuple[Tensor, Tensor]:
    from .precond import IdentityPrecond

    ctx, x = inputs
    st = _state_at(energy, energy.prepare(ctx), x)
    return energy.grad(x, st), energy.direction(x, st, IdentityPrecond(x.shape[-1]))


def check_energy_dtypes(energy: Energy | type[Energy], context: Any = None, x: Tensor | None = None, *,
                        scales: Sequence[float] = (1e-2, 1.0), precisions=DTYPE_PRECISIONS) -> None:
    """``grad`` and ``direction`` of ``energy`` in low precision agree with float64 by the library's two rules:
    within the rounding bound ``‖y_low − y_64‖ ≤ C (s + u ‖y_64‖)`` of issue 23 (``s`` the measured sensitivity to
    rounding, :func:`.fuzz.low_precision_agreement`, as ``tests/core/test_scale_fuzz.py``) and within the relative
    tolerance :data:`DTYPE_RTOL` (as ``tests/core/test_energy_dtypes.py``). A wrong low-precision path (a
    transpose missed in a bf16 branch) is off by order one and fails both. Large input scales make softmax-like
    energies ill-conditioned in bf16 (the package excludes four of its energies at x30): check at the scales
    your model's activations have.

    ``energy``: an energy class (its ``examples(torch.float64)`` are checked) or a float64 instance with its
    ``context`` and ``x``; inputs (x and a tensor context) are scaled by each of ``scales``. A low-precision run
    that raises is a clear error and accepted; a finite wrong or a non-finite result (float64 finite) fails, and so
    does a scale where float64 itself is not finite (it passed before: nothing was compared; probe AX)."""
    from .fuzz import low_precision_agreement, map_tensors

    if isinstance(energy, type):
        cases = [(label, e, c, xx) for label, e, c, xx in energy.examples(torch.float64)]
    else:
        if x is None:
            raise ValueError("check_energy_dtypes(energy, context, x): give the context and x of an energy "
                             "instance, or pass the energy class to check its examples()")
        cases = [("given", energy, context, x)]
    problems = []
    for label, e, ctx, xx in cases:
        for s in scales:
            inputs = (ctx * s if torch.is_tensor(ctx) and ctx.is_floating_point() else ctx, xx * s)
            inputs = map_tensors(inputs, lambda t: t.to(torch.float64))
            res = low_precision_agreement(_grad_and_direction, copy.deepcopy(e).double().eval(), inputs,
                                          list(precisions), probes=1)
            for (dtype, autocast), per in zip(precisions, res):
                for what, r in zip(("grad", "direction"), per):
                    rel = r.err / max(r.scale, 1e-30)
                    if r.status in ("wrong", "loud", "no_reference") or (r.status == "ok"
                                                                         and rel > DTYPE_RTOL[dtype]):
                        where = f"{str(dtype)[6:]}{' autocast' if autocast else ''}"
                        no_ref = ("float64 itself (or its sensitivity to rounding) is not finite here: nothing to "
                                  "compare with; an energy that overflows in float64 at these inputs fails")
                        why = ("non-finite where float64 is finite" if r.status == "loud" else
                               no_ref if r.status == "no_reference" else
                               f"error {r.err:.3g} (relative {rel:.2g}, allowed {DTYPE_RTOL[dtype]:g}; rounding "
                               f"bound {r.bound:.3g})")
                        problems.append(f"{what} in {where} at inputs x{s:g} [{label}]: {why}")
    if problems:
        raise AssertionError(f"{_name(cases[0][1])} disagrees with float64 beyond rounding: " + "; ".join(problems))


def _name(energy: Any) -> str:
    return type(energy).__name__


def _moved_off_init(blk: nn.Module, seed: int) -> nn.Module:
    """``blk`` in float64 with N(0, 0.3²) noise (seeded) on every parameter, so zero-initialised parts act too; eval
    mode."""
    blk = blk.double()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in blk.parameters():
            p.add_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.3)
    return blk.eval()


def _attention(kind: Any, causal: bool, dim: int, heads: int, seed: int) -> tuple[str, nn.Module]:
    """The attention sublayer of ``kind`` (a name, a ``{kind: ..., key: value}`` mapping or an attention config),
    built as a model builds it, in float64, its parameters moved off their initialisation (N(0, 0.3²) noise:
    zero-initialised parts act too), in eval mode."""
    from ..blocks import BlockConfig
    from ..blocks.registry import AttentionConfig, SublayerSpec, build_attention
    from ..utils.config import load_config

    cfg = kind if isinstance(kind, AttentionConfig) else load_config(BlockConfig, {"attention": kind}).attention
    torch.manual_seed(seed)
    blk = build_attention(cfg, SublayerSpec(dim=dim, heads=heads, causal=causal))
    return f"attention kind {cfg.kind!r}", _moved_off_init(blk, seed)


@torch.no_grad()
def check_attention_kind(kind: Any, *, dim: int = 16, heads: int = 4, seed: int = 0, atol: float = 1e-10) -> None:
    """The contract of a registered attention kind (``kind``: its name, a ``{kind: ..., key: value}`` mapping or
    its config), checked in float64 on random inputs (the package's own kinds pass the same checks in
    ``tests/blocks/test_registry.py``):

    * causal (kinds with ``supports_causal``): the output at tokens 0..4 is unchanged when token 5 changes;
    * key padding (causal and bidirectional): tokens whose keys are padded (``mask`` False) do not change the
      output at the real tokens, and the output stays finite;
    * KV cache (causal): decoding in pieces of 3, 1 and 3 tokens with a cache (left padding) equals the full
      forward at the real tokens; an energy that ignores the cache slot sees only the current piece.

    Raises ``AssertionError`` naming the kind and the property that failed."""
    from .context import ForwardContext

    g = torch.Generator().manual_seed(seed)
    name, causal_blk = _attention(kind, True, dim, heads, seed) if _supports_causal(kind) else (None, None)
    name, bidir = _attention(kind, False, dim, heads, seed)
    x = torch.randn(2, 8, dim, generator=g, dtype=torch.float64)
    if causal_blk is not None:
        x2 = x.clone()
        x2[:, 5] += torch.randn(dim, generator=g, dtype=torch.float64)  # not a constant shift: a norm removes those
        diff = float((causal_blk(x2, ForwardContext())[:, :5] - causal_blk(x, ForwardContext())[:, :5]).abs().max())
        if not diff <= atol:
            raise AssertionError(f"{name} is not causal: the output at tokens 0-4 changed by {diff:.3g} when "
                                 f"token 5 changed (token i must not see tokens j > i)")
    mask = torch.tensor([[1] * 8, [1, 1, 0, 1, 1, 1, 0, 0]], dtype=torch.bool)
    x2 = x.clone()
    x2[~mask] = torch.randn(int((~mask).sum()), dim, generator=g, dtype=torch.float64)
    for label, blk in (("causal", causal_blk), ("bidirectional", bidir)):
        if blk is None:
            continue
        y, y2 = blk(x, ForwardContext(mask=mask)), blk(x2, ForwardContext(mask=mask))
        diff = float((y2[mask] - y[mask]).abs().max())
        if not diff <= atol or not torch.isfinite(y2).all():
            raise AssertionError(f"{name} ({label}) does not ignore padded keys: the output at real tokens changed "
                                 f"by {diff:.3g} when padded tokens changed (ForwardContext.mask: False = padding)")
    if causal_blk is not None:
        _check_cache(name, causal_blk, torch.randn(2, 7, dim, generator=g, dtype=torch.float64), atol)


def _mlp(kind: Any, dim: int, seed: int) -> tuple[str, nn.Module, bool]:
    """The MLP sublayer of ``kind`` (name, mapping or config), built as a model builds it (with an attention's
    shared modules where the kind reads them: Hyper-SET's step network), float64, parameters moved off their
    initialisation, eval mode; and whether it was built causal (its ``supports_causal``)."""
    from ..blocks import BlockConfig
    from ..blocks.registry import ATTENTIONS, MLPConfig, SublayerSpec, build_attention, build_mlp
    from ..utils.config import load_config
    from ..utils.validate import ConfigError

    cfg = kind if isinstance(kind, MLPConfig) else load_config(BlockConfig, {"mlp": kind}).mlp
    torch.manual_seed(seed)
    spec = SublayerSpec(dim=dim, heads=4, causal=bool(getattr(cfg, "supports_causal", True)))
    try:
        blk = build_mlp(cfg, spec)
    except ConfigError:  # a kind that reads its layer's attention (spec.shared): build that one first
        if cfg.kind not in ATTENTIONS.names():
            raise
        build_attention(load_config(BlockConfig, {"attention": cfg.kind}).attention, spec)
        blk = build_mlp(cfg, spec)
    return f"mlp kind {cfg.kind!r}", _moved_off_init(blk, seed), spec.causal


@torch.no_grad()
def check_mlp_kind(kind: Any, *, dim: int = 16, seed: int = 0, atol: float = 1e-10) -> None:
    """The contract of a registered MLP kind (``kind``: its name, a ``{kind: ..., key: value}`` mapping or its
    config), checked in float64 on random inputs (the package's own kinds in ``tests/blocks/test_registry.py``):

    * position-wise, unless its energy declares ``token_local = False``: the output at every other token is
      unchanged when token 3 changes. An MLP sublayer's energy that declares nothing is taken as token-local
      (:func:`~energyformer.core.energy.is_token_local`), so cached decoding hands it only the new tokens; one
      that mixes tokens without saying so decoded silently different tokens, and nothing checked it;
    * KV cache (kinds with ``supports_causal``): decoding in pieces of 3, 1 and 3 tokens with a cache (left
      padding) equals the full forward at the real tokens; the output is finite.

    Raises ``AssertionError`` naming the kind and the property that failed."""
    from .context import ForwardContext

    g = torch.Generator().manual_seed(seed)
    name, blk, causal = _mlp(kind, dim, seed)
    energy = getattr(blk, "energy", None)
    x = torch.randn(2, 8, dim, generator=g, dtype=torch.float64)
    y = blk(x, ForwardContext())
    if not torch.isfinite(y).all():
        raise AssertionError(f"{name}: the output is not finite on unit-scale inputs")
    if not isinstance(energy, Energy) or energy.token_local is not False:
        x2 = x.clone()
        x2[:, 3] += torch.randn(dim, generator=g, dtype=torch.float64)
        others = [i for i in range(8) if i != 3]
        diff = float((blk(x2, ForwardContext())[:, others] - y[:, others]).abs().max())
        if not diff <= atol:
            raise AssertionError(f"{name} is not position-wise: the output at other tokens changed by {diff:.3g} "
                                 f"when token 3 changed (an MLP sublayer's energy is taken as token-local; one that "
                                 f"reads other tokens sets token_local = False and appends them to its KV-cache slot)")
    if causal:
        _check_cache(name, blk, torch.randn(2, 7, dim, generator=g, dtype=torch.float64), atol)


def _check_cache(name: str, blk: nn.Module, x: Tensor, atol: float) -> None:
    from .context import ForwardContext

    blk = copy.deepcopy(blk)
    blk.qualname = "a"  # the cache slot's key (a model names its sublayers)
    mask = torch.tensor([[0, 0, 1, 1, 1, 1, 1], [1] * 7], dtype=torch.bool)  # left padding
    full = blk(x, ForwardContext(mask=mask))
    cache: dict = {}
    pieces, pos = [], 0
    try:
        for n in (3, 1, 3):  # one context per call, as a model's forward makes
            pieces.append(blk(x[:, pos:pos + n], ForwardContext(cache=cache, offset=pos, mask=mask[:, pos:pos + n])))
            pos += n
    except Exception as err:  # noqa: BLE001 - reported with the kind's name
        raise AssertionError(f"{name}: decoding with a KV cache raised {type(err).__name__}: "
                             f"{str(err).splitlines()[0] if str(err) else ''}") from err
    diff = float((torch.cat(pieces, 1)[mask] - full[mask]).abs().max())
    if not diff <= max(atol, 1e-10 * float(full[mask].abs().max())):
        raise AssertionError(f"{name}: decoding with the KV cache differs from the full forward by {diff:.3g} "
                             f"(a cross-token energy must append its keys to the cache slot in prepare)")


def _supports_causal(kind: Any) -> bool:
    from ..blocks import BlockConfig
    from ..blocks.registry import AttentionConfig
    from ..utils.config import load_config

    cfg = kind if isinstance(kind, AttentionConfig) else load_config(BlockConfig, {"attention": kind}).attention
    return bool(getattr(cfg, "supports_causal", True))
