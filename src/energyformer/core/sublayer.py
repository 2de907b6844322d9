"""One config shape for every energy sublayer, and one builder (DESIGN.md "The target now: no seams").

Every sublayer realised as descent on an energy declares its energy keys next to the same descent keys::

    {kind: cem, <energy keys>,
     solver:    {kind: gd | momentum | nesterov | proximal | ista | sphere, precond, tol, ...},
     step_size: {kind: fixed | learned | per_iteration | network, ...}   (a number = fixed),
     steps: T, eval_steps: T_eval | null,
     backward:  {kind: unroll | truncated | implicit, ...},             (a name = its defaults)
     norm:      {kind: rms | layer | energy_layer | none, in_loop, init, eps}}   (a name = its defaults)

A sublayer config inherits :class:`DescentConfig` (overriding a default where its system has
another, e.g. a momentum solver or its system's norm) and its builder calls
:meth:`EnergyBlock.from_config <energyformer.core.block.EnergyBlock.from_config>` (solver, step budgets,
norm, in-loop flag and start point from the config); nothing else is written per system. ``solver``
and ``norm`` given without a kind (or with the default kind) are merged onto the sublayer's default,
so ``solver: {beta: 0.9}`` or ``norm: {in_loop: false}`` keeps the other defaults of that sublayer.

``norm`` (:mod:`energyformer.core.norm`) is the norm applied to the block input (and, with
``in_loop``, to the iterate before every gradient evaluation) and the start point ``init`` of the
descent. The default here is a LayerNorm in the loop, starting at the residual stream (GPT-2's
pre-LayerNorm; the intrinsic-optimizer sublayers, seed 001 App. A.8); systems override it: CEM an
RMSNorm (eps 1e-6) in the loop (CEM Algorithm 1), CRATE's ISTA a LayerNorm outside the loop with
x0 = LN(x) (the CRATE code), ET its scalar-gain layer norm in the loop (ET Eqs. 1, 8), Hyper-SET
none (its sphere RMSNorms are part of the energy, Eqs. 8, 11).

**Old spellings** (configs and resolved ``config.yaml`` files written before this shape) are
rewritten in one place, :func:`migrate_descent`, called on the raw mapping before validation:

* ``step_size: 0.5, learn_step_size: true``  -> ``step_size: {kind: learned, init: 0.5}``
  (``false`` -> ``{kind: fixed, value: 0.5}``);
* solver options at the top level (``precond``, ``precond_rank``, ``precond_per_head``, ``tol``,
  ``energy_threshold``, ``beta``, ``learn_beta``, ``carry_key``, ``ema``, ``lambd``,
  ``nonnegative``, ``gamma``) -> into ``solver`` (unless the sublayer declares the key itself);
* ``backward: truncated, truncate: k`` -> ``backward: {kind: truncated, k: k}``;
* ``norm_in_loop: b`` and CEM's ``init: residual | normalized`` at the top level -> ``norm: {in_loop: b,
  init: ...}`` (merged onto the sublayer's default norm).
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field, model_validator

from ..utils.config import ConfigModel
from ..utils.validate import ConfigError
from .backward import BACKWARD_MODES, make_backward_mode
from .norm import NORMS, LayerNormConfig
from .solver import SOLVERS, Solver, truncated_stop_message
from .stepsize import FixedStepSizeConfig, StepSizeField

#: Norm options that older configs wrote at the sublayer's top level -> their key inside ``norm``.
OLD_NORM_KEYS = {"norm_in_loop": "in_loop", "init": "init"}
#: Solver options that older configs wrote at the sublayer's top level.
OLD_SOLVER_KEYS = ("precond", "precond_rank", "precond_per_head", "tol", "energy_threshold", "beta",
                   "learn_beta", "carry_key", "ema", "lambd", "nonnegative", "gamma")


class DescentConfig(ConfigModel):
    """The descent keys of an energy sublayer: solver, step size, step budgets, backward mode, norm."""

    solver: SOLVERS.type("gd") = SOLVERS.field("gd")
    """descent rule: {kind: gd | momentum | nesterov | proximal | ista | sphere, ...its options}"""
    step_size: StepSizeField = Field(default_factory=lambda: FixedStepSizeConfig(value=1.0))
    """eta: a number (fixed) or {kind: fixed | learned | per_iteration | network, ...}"""
    steps: int = Field(1, ge=1)
    """T descent steps per call in training (and in eval unless eval_steps)"""
    eval_steps: int | None = Field(None, ge=1)
    """T in eval mode (None: steps); a call-time budget (ctx.steps, --steps) overrides both"""
    backward: BACKWARD_MODES.type("unroll") = BACKWARD_MODES.field("unroll")
    """gradient through the run: unroll | {kind: truncated, k} | {kind: implicit, method, ...}"""
    norm: NORMS.type("layer") = Field(default_factory=LayerNormConfig)
    """norm of the block input and (in_loop) of the iterate, start point init: {kind: rms | layer |
    energy_layer | none, in_loop, init, eps} (default: LayerNorm in the loop, GPT-2's pre-LN)"""

    @classmethod
    def migrate(cls, data: dict) -> dict:
        return migrate_descent(cls, data)

    #: whether this sublayer's energy takes a per-head preconditioner bank (:attr:`Energy.head_bank
    #: <energyformer.core.energy.Energy.head_bank>`; CEM attention's, Eq. 14): where it does not,
    #: ``solver.precond_per_head: true`` is refused when the config loads (a sublayer of your own sets it True)
    head_bank: ClassVar[bool] = False

    @model_validator(mode="after")
    def _no_head_bank(self) -> DescentConfig:
        """``solver.precond_per_head: true`` on a sublayer whose energy acts on the merged (B, N, D) output: refused
        here. Hyper-SET, ET and CRATE accepted it at load and refused it only when the model was built; the
        intrinsic sublayers once accepted it outright, and the (H, D) bank broadcast against the sequence axis (a
        crash where N ≠ H, token i scaled by head i's diagonal where N = H; probe N). The block refuses it again
        at build for an energy built by hand (:class:`~energyformer.core.EnergyBlock`)."""
        if not type(self).head_bank and getattr(self.solver, "precond_per_head", False):
            raise ValueError(f"solver.precond_per_head = true: the {getattr(self, 'kind', type(self).__name__)} "
                             "sublayer has no per-head preconditioner bank (only CEM attention's energy takes one); "
                             "allowed: false")
        return self

    @model_validator(mode="after")
    def _lookahead_one_step(self) -> DescentConfig:
        """A look-ahead rule (Nesterov ``form: sutskever``: the gradient at x + η β v, the velocity carried between
        calls) takes one step per block call; T > 1 in training or eval was accepted here and refused at the first
        forward pass, after the run directory was written (a call-time ``--steps`` is still checked there)."""
        if self.lookahead():
            for key in ("steps", "eval_steps"):
                if getattr(self, key) not in (None, 1):
                    raise ValueError(f"{key} = {getattr(self, key)}: a look-ahead rule (Nesterov, form 'sutskever', "
                                     "as the intrinsic sublayers' readout 'seed' builds it) takes one step per call; "
                                     "allowed: 1 (use iterations to run longer)")
        return self

    @model_validator(mode="after")
    def _truncated_without_stopping(self) -> DescentConfig:
        """``backward: truncated`` with ``solver.tol`` / ``solver.energy_threshold`` is refused at load
        (:func:`~energyformer.core.solver.check_stop_with_backward`: a stop inside the untracked prefix left no
        gradient, silently)."""
        if getattr(self.backward, "kind", None) == "truncated":
            rules = [f"solver.{k} = {getattr(self.solver, k)}" for k in ("tol", "energy_threshold")
                     if getattr(self.solver, k, None) is not None]
            if rules:
                raise ValueError(truncated_stop_message(self.backward.k, rules))
        return self

    def lookahead(self) -> bool:
        """Whether the built solver evaluates its gradient at a look-ahead point (one step per call)."""
        return getattr(self.solver, "form", None) == "sutskever"


def _default(cls: type[ConfigModel], name: str) -> Any:
    f = cls.model_fields[name]
    return f.default_factory() if f.default_factory is not None else f.default


def migrate_descent(cls: type[ConfigModel], data: dict) -> dict:
    """Rewrite old spellings of the descent keys of ``cls`` (module docstring); idempotent."""
    fields = cls.model_fields
    if "solver" not in fields:
        return data
    data = dict(data)
    # -- step size: number + learn flag
    if "learn_step_size" in data and "learn_step_size" not in fields:
        learn = data.pop("learn_step_size")
        default = _default(cls, "step_size")
        if "step_size" in data:
            eta = data["step_size"]
        else:  # the old default number of this sublayer (the value of its default step size)
            eta = getattr(default, "value", getattr(default, "init", None))
        if eta is None:  # the old "sublayer default" (e.g. heads): today's 'auto' step size of the kind
            if not isinstance(default, str) or bool(learn) != getattr(cls, "auto_step_learned", None):
                raise ConfigError(f"learn_step_size = {learn!r} with step_size = null: give step_size explicitly, "
                                  "e.g. {kind: learned, init: 1.0}")
            data.pop("step_size", None)
        elif isinstance(eta, (int, float)) and not isinstance(eta, bool):
            data["step_size"] = {"kind": "learned", "init": eta} if learn else {"kind": "fixed", "value": eta}
        elif learn:
            raise ConfigError(f"learn_step_size = True: only allowed with a numeric step_size (got {eta!r})")
        elif isinstance(eta, dict) and eta.get("kind", "fixed") != "fixed":  # was dropped without a word
            raise ConfigError(f"learn_step_size = False conflicts with step_size = {eta!r} (a learned kind): set "
                              "step_size only")
    # -- solver options at the top level
    moved = {k: data.pop(k) for k in OLD_SOLVER_KEYS if k in data and k not in fields}
    check_moved(moved, data.get("solver"), "solver")
    data = _merge_default(cls, data, "solver", moved)
    # -- backward: name + truncate
    if "truncate" in data and "truncate" not in fields:
        k = data.pop("truncate")
        if k is not None:
            if data.get("backward") not in (None, "truncated"):
                raise ConfigError(f"truncate = {k!r}: only allowed with backward = 'truncated'")
            data["backward"] = {"kind": "truncated", "k": k}
    # -- norm: top-level norm_in_loop / init; a norm without a kind (or a bare name) merges onto the default
    if "norm" in fields:
        moved = {new: data.pop(old) for old, new in OLD_NORM_KEYS.items() if old in data and old not in fields}
        check_moved(moved, data.get("norm"), "norm", {new: old for old, new in OLD_NORM_KEYS.items()})
        data = _merge_default(cls, data, "norm", moved)
    return data


def _same_number(a: Any, b: Any) -> bool:
    """Whether a and b are one number written two ways ('1e-3' and 0.001: a quoted YAML value validates to the
    number), not booleans."""
    try:
        return not isinstance(a, bool) and not isinstance(b, bool) and float(a) == float(b)
    except (TypeError, ValueError):
        return False


def check_moved(moved: dict, given: Any, where: str, old_names: dict | None = None) -> None:
    """Refuse an old top-level key whose new place (``where.key``) is also given, with another value. The new
    place won silently: the migration runs after ``--set``, so ``--set model.refine.gamma=2`` on a config that
    writes ``solver: {gamma: 1}`` trained with 1 and said nothing (an outside probe)."""
    if not isinstance(given, dict):
        return
    for key, value in moved.items():
        if key in given and given[key] != value and not _same_number(given[key], value):
            old = (old_names or {}).get(key, key)
            raise ConfigError(f"{old} = {value!r} conflicts with {where}.{key} = {given[key]!r} (the same setting, "
                              f"its old spelling at the top level): set {where}.{key} only")


def _merge_default(cls: type[ConfigModel], data: dict, key: str, moved: dict) -> dict:
    """``data[key]`` (a mapping or a kind name) with ``moved`` old keys, merged onto the default of
    ``cls.key`` when it names no other kind (explicit keys > moved keys > defaults). Anything else is
    left for validation to refuse by name."""
    given = data.get(key)
    if isinstance(given, str):
        given = {"kind": given}
    if given is not None and not isinstance(given, dict):
        return data
    if moved or key in data:
        given = dict(given or {})  # null: the default
        default = _default(cls, key)
        base = default.model_dump() if given.get("kind", default.kind) == default.kind else {}
        data[key] = {**base, **moved, **given}
    return data


def build_solver(cfg: DescentConfig, dim: int, heads: int | None = None, *, step_size: Any = None,
                 name: str = "solver") -> Solver:
    """The solver of a sublayer config: ``cfg.solver``'s rule with ``cfg.step_size`` (or ``step_size``
    when given: a sublayer-computed default or a shared module) and ``cfg.backward``."""
    eta = cfg.step_size if step_size is None else step_size
    if eta is None:
        raise ConfigError(f"{name}: step_size is not set")
    return SOLVERS.get(cfg.solver.kind).builder.from_config(
        cfg.solver, dim, heads, step_size=eta, backward=make_backward_mode(cfg.backward), name=f"{name}.solver")
