"""Parameter roles: what each trainable parameter *is*, which decides its weight decay and LR.

Weight decay pulls a parameter towards zero. That is right for weight matrices and wrong for most
other things a model learns: a norm gain pulled to zero switches the norm off, a preconditioner
pulled to zero stops the descent, a learned step size pulled to zero freezes the layer. Whether a
parameter is decayed must therefore follow from what it is, never from how many dimensions it has
(a per-head diagonal is a matrix; a gain can be a weight vector). Every parameter gets one role:

=================  ==========================================================================
``weight``         weight matrices and anything not recognised below (decayed by default)
``embedding``      token / position embedding tables (``nn.Embedding``, ``nn.EmbeddingBag``)
``norm``           gains and biases of norm layers (LayerNorm, RMSNorm, GroupNorm, BatchNorm, ...)
``bias``           additive biases (a parameter whose own name is ``bias``)
``precond``        preconditioner parameters (``energyformer.core.precond.Preconditioner``)
``diagonal``       KQ diagonals and similar learned diagonals
``position``       ALiBi slopes, self-bias, position-pair biases
``step_size``      learned step sizes of a descent rule
``other_no_decay`` anything else that must not be decayed
=================  ==========================================================================

A parameter's role is decided, first rule that applies (:func:`param_roles`):

1. **declared** by a module that owns it: a class (or instance) attribute
   ``param_roles = {"d": "diagonal", "self_bias": "position"}`` mapping the module's own parameter
   names (or dotted paths into its children, ``"pos.weight": "position"``) to roles. Declarations
   are inherited and merged along the class hierarchy (the subclass wins). A class may name
   optional parameters an instance lacks (skipped); a name that is not a parameter (a buffer, a
   submodule) is an error. Use :func:`declare_param_roles` to declare on an instance you cannot
   edit (absent names are errors there). A parameter carrying ``no_weight_decay = True`` is
   declared ``other_no_decay``.
2. by the **type** of the module that owns it (:data:`MODULE_ROLES`, extendable with
   :func:`register_module_role`): norm layers -> ``norm``, embeddings -> ``embedding``,
   ``Preconditioner`` subclasses -> ``precond``.
3. by **name**: a parameter called ``bias`` -> ``bias``.
4. otherwise ``weight``.

A parameter shared by several modules (a head tied to the embedding) takes the role of the owner
whose rule comes first; two different roles from the same rule are an error. Which roles are *not*
decayed is ``train.no_decay_roles`` (default: every role but ``weight``).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from typing import Any, Literal, get_args

from torch import nn

from energyformer.utils.validate import ConfigError, closest

Role = Literal["weight", "embedding", "norm", "bias", "precond", "diagonal", "position",
               "step_size", "other_no_decay"]
ROLES: tuple[str, ...] = get_args(Role)
DEFAULT_NO_DECAY_ROLES: tuple[str, ...] = tuple(r for r in ROLES if r != "weight")

# rule priority: lower wins
_DECLARED, _TYPE, _NAME, _DEFAULT = 0, 1, 2, 3
_RULE_NAMES = {_DECLARED: "declared", _TYPE: "module type", _NAME: "name", _DEFAULT: "default"}


def _norm_types() -> tuple[type, ...]:
    out: list[type] = [nn.LayerNorm, nn.GroupNorm, nn.LocalResponseNorm]
    if hasattr(nn, "RMSNorm"):
        out.append(nn.RMSNorm)
    base = getattr(nn.modules.batchnorm, "_NormBase", None)  # BatchNorm*, InstanceNorm*, lazy ones
    out += [base] if base is not None else [nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d,
                                            nn.SyncBatchNorm, nn.InstanceNorm1d, nn.InstanceNorm2d,
                                            nn.InstanceNorm3d]
    return tuple(out)


def _default_module_roles() -> dict[type, str]:
    from energyformer.core.precond import Preconditioner

    roles: dict[type, str] = {t: "norm" for t in _norm_types()}
    roles[nn.Embedding] = "embedding"
    roles[nn.EmbeddingBag] = "embedding"
    roles[Preconditioner] = "precond"
    return roles


MODULE_ROLES: dict[type, str] = _default_module_roles()
"""Module type -> role of every parameter it owns directly (subclasses included)."""


def check_role(role: Any, where: str) -> str:
    """``role`` if it is one of :data:`ROLES`, else a ConfigError naming ``where`` and the roles."""
    if role not in ROLES:
        near = closest(str(role), ROLES)
        hint = f" (did you mean {near!r}?)" if near else ""
        raise ConfigError(f"{where} = {role!r}: not a parameter role{hint}; roles: {', '.join(ROLES)}")
    return role


def register_module_role(module_type: type, role: str) -> None:
    """Give every parameter owned directly by ``module_type`` (and subclasses) the role ``role``.

    For module types a project cannot declare ``param_roles`` on (third-party layers). Declarations
    on the module still win.
    """
    if not (isinstance(module_type, type) and issubclass(module_type, nn.Module)):
        raise TypeError(f"register_module_role: {module_type!r} is not an nn.Module subclass")
    MODULE_ROLES[module_type] = check_role(role, f"register_module_role({module_type.__name__})")


def declare_param_roles(module: nn.Module, roles: Mapping[str, str] | None = None, /,
                        **more: str) -> nn.Module:
    """Declare roles on one module instance (merged over its class's ``param_roles``); returns it.

    ``declare_param_roles(block.attn, d="diagonal")`` or
    ``declare_param_roles(lm, {"pos.weight": "position"})`` — same meaning as the class attribute.
    """
    new = {**(roles or {}), **more}
    for key, role in new.items():
        check_role(role, f"{type(module).__name__}.param_roles[{key!r}]")
        _resolve_declared(module, key, strict=True)
    merged = {**(module.__dict__.get("param_roles") or {}), **new}
    object.__setattr__(module, "param_roles", merged)  # a plain attribute, not a submodule/param
    return module


def declared_roles(module: nn.Module) -> dict[str, str]:
    """The module's ``param_roles``: class hierarchy merged (subclass wins), then the instance's."""
    out: dict[str, str] = {}
    for cls in reversed(type(module).__mro__):
        decl = cls.__dict__.get("param_roles")
        if decl:
            out.update(decl)
    out.update(module.__dict__.get("param_roles", {}) or {})
    return out


def _module_type_role(module: nn.Module) -> str | None:
    best: tuple[int, str] | None = None  # the most specific registered type in the MRO wins
    mro = type(module).__mro__
    for t, role in MODULE_ROLES.items():
        if t in mro:
            depth = mro.index(t)
            if best is None or depth < best[0]:
                best = (depth, role)
    return best[1] if best else None


def _resolve_declared(module: nn.Module, key: str, strict: bool = False) -> nn.Parameter | None:
    """The parameter a declaration key names; None for an optional parameter the instance lacks.

    A name that exists but is not a parameter (a submodule, a buffer, a number) is an error; a name
    the instance does not have at all (or has set to None) is skipped, so a class can declare
    parameters that exist only with some options (``theta`` only when the step size is learned).
    With ``strict`` (instance declarations) an absent name is an error too: it can only be a typo.
    """
    *path, leaf = key.split(".")
    owner: Any = module
    for part in path:
        owner = getattr(owner, part, None) if isinstance(owner, nn.Module) else None
    if isinstance(owner, nn.Module) and isinstance(owner._parameters.get(leaf), nn.Parameter):
        return owner._parameters[leaf]
    found = getattr(owner, leaf, None) if owner is not None else None
    if found is None and not (strict and (owner is None or not hasattr(owner, leaf))):
        return None
    what = f"a {type(found).__name__}" if found is not None else "not an attribute"
    params = ", ".join(n for n, _ in module.named_parameters()) or "(none)"
    raise ConfigError(f"{type(module).__name__}.param_roles names {key!r}, which is {what}, not a "
                      f"parameter of it; its parameters: {params}")


def _candidates(model: nn.Module) -> dict[int, list[tuple[int, str, str]]]:
    """id(param) -> [(rule, role, why)] from every module that owns or declares it."""
    cands: dict[int, list[tuple[int, str, str]]] = {}
    for mname, mod in model.named_modules(remove_duplicate=False):
        where = f"{mname or '<model>'} ({type(mod).__name__})"
        for key, role in declared_roles(mod).items():
            check_role(role, f"{type(mod).__name__}.param_roles[{key!r}]")
            p = _resolve_declared(mod, key)
            if p is not None:
                cands.setdefault(id(p), []).append((_DECLARED, role, f"declared by {where}"))
        type_role = _module_type_role(mod)
        for pname, p in mod._parameters.items():
            if p is None:
                continue
            c = cands.setdefault(id(p), [])
            if getattr(p, "no_weight_decay", False):
                c.append((_DECLARED, "other_no_decay", f"{mname}.{pname}.no_weight_decay"))
            if type_role is not None:
                c.append((_TYPE, type_role, f"owned by {where}"))
            if pname == "bias":
                c.append((_NAME, "bias", f"named 'bias' in {where}"))
            c.append((_DEFAULT, "weight", "default"))
    return cands


def param_roles(model: nn.Module, *, trainable_only: bool = True) -> dict[str, str]:
    """Parameter name (as in ``model.named_parameters()``) -> role, in parameter order.

    Raises ConfigError when a declaration names no parameter, uses an unknown role, or two owners of
    a shared parameter give it different roles by the same rule.
    """
    cands = _candidates(model)
    out: dict[str, str] = {}
    for name, p in model.named_parameters():
        if trainable_only and not p.requires_grad:
            continue
        options = cands[id(p)]
        rule = min(r for r, _, _ in options)
        chosen = {(role, why) for r, role, why in options if r == rule}
        roles = {role for role, _ in chosen}
        if len(roles) > 1:
            raise ConfigError(
                f"parameter {name!r} gets different roles by {_RULE_NAMES[rule]}: "
                + "; ".join(sorted(f"{role} ({why})" for role, why in chosen)))
        out[name] = roles.pop()
    return out


def undeclared_low_dim_weights(model: nn.Module) -> list[str]:
    """Names of 0-/1-D parameters that are ``weight`` only because no rule recognised them."""
    cands = _candidates(model)
    return [n for n, p in model.named_parameters()
            if p.requires_grad and p.ndim < 2 and min(r for r, _, _ in cands[id(p)]) == _DEFAULT]


def names_by_role(model: nn.Module) -> dict[str, list[str]]:
    """Role -> names of the trainable parameters with that role, in :data:`ROLES` order
    (shared parameters once, under their first name)."""
    by_role: dict[str, list[str]] = {}
    for name, role in param_roles(model).items():
        by_role.setdefault(role, []).append(name)
    return {role: by_role[role] for role in ROLES if role in by_role}


def describe_param_groups(model: nn.Module, no_decay_roles: Iterable[str] = DEFAULT_NO_DECAY_ROLES,
                          lr_multipliers: Mapping[str, float] | None = None) -> dict[str, dict]:
    """Role -> ``{"names", "tensors", "numel", "decay", "lr_multiplier"}`` for trainable parameters.

    Only roles that have parameters appear, in :data:`ROLES` order. ``decay`` says whether weight
    decay applies (the role is not in ``no_decay_roles``). See :func:`format_param_groups`.
    """
    no_decay = set(no_decay_roles)
    mult = dict(lr_multipliers or {})
    params = dict(model.named_parameters())
    return {role: {"names": names, "tensors": len(names), "numel": sum(params[n].numel() for n in names),
                   "decay": role not in no_decay, "lr_multiplier": float(mult.get(role, 1.0))}
            for role, names in names_by_role(model).items()}


def format_param_groups(model: nn.Module, no_decay_roles: Iterable[str] = DEFAULT_NO_DECAY_ROLES,
                        lr_multipliers: Mapping[str, float] | None = None, max_names: int = 6) -> str:
    """A readable table of :func:`describe_param_groups` (one line per role, then some names)."""
    desc = describe_param_groups(model, no_decay_roles, lr_multipliers)
    lines = ["parameter groups (role: tensors, numbers, decay, lr x):"]
    for role, d in desc.items():
        names = d["names"][:max_names] + (["..."] if len(d["names"]) > max_names else [])
        lines.append(f"  {role:<15} {d['tensors']:>4} tensors {d['numel']:>12,d}  "
                     f"decay={'yes' if d['decay'] else 'no ':<3}  lr x{d['lr_multiplier']:g}  "
                     f"[{', '.join(names)}]")
    return "\n".join(lines)


def warn_undeclared(model: nn.Module, decayed: bool) -> None:
    """Warn once about 0-/1-D parameters decayed only because nothing declared their role."""
    if not decayed:
        return
    names = undeclared_low_dim_weights(model)
    if names:
        shown = ", ".join(names[:8]) + (f", ... ({len(names)} in all)" if len(names) > 8 else "")
        warnings.warn(
            f"weight decay applies to {shown}: 0-/1-D parameters with no declared role are decayed "
            "as 'weight'. If that is not meant, declare them on their module, e.g. "
            "param_roles = {'gain': 'norm'} (see energyformer.train.roles)", stacklevel=3)
