"""The ``Energy`` abstraction (DESIGN.md "The one idea").

An energy assigns each token state ``x_i`` a scalar ``E_i(x_i | context)``. A block descends it:

    prepare(context) -> state      work done ONCE, outside the descent loop (keys, values, gates, norms)
    energy(x, state) -> (B, N)     per-token energy (for traces and tests)
    grad(x, state)   -> like x     gradient of sum(energy) w.r.t. x; subclasses give a closed form
    direction(x, state, P) -> like x   the update direction the block uses; default ``-P grad``

Three kinds of energies beyond the plain one (DESIGN.md core table):

* **Context = the iterate** (``context_is_iterate = True``; bi-softmax attention of Hyper-SET, bare
  self-attention): the solver calls ``reprepare(state, u_t)`` at every step, so the context is the
  current point ``u_t``. ``grad`` is then the *total* derivative d/dx sum_i E_i(x | x) (the default
  autograd differentiates through ``reprepare``).
* **Composite energies** (:class:`~energyformer.core.composite.CompositeEnergy`): a weighted sum of
  named energies; ``energy_terms`` gives the weighted per-term energies that traces record.
* **Inexact updates**: ``exact`` says whether ``direction`` is exactly ``-P grad``. An energy whose
  update is deliberately *not* the gradient of the energy it reports (e.g. per-token partial
  gradients) sets ``exact = False``, documents why, and must implement ``reference_direction``: an
  independent (slow, obviously correct) formula of its update that the property test compares
  ``direction`` with.

**Incremental decoding** (``token_local``): with a KV cache a block sees only the new tokens, so an energy
that reads other tokens must keep what it reads (keys, values) in its cache slot (:meth:`Energy.prepare`);
one whose ``E_i`` depends on token i alone (an MLP-like energy) declares ``token_local = True`` and needs no
cache. :class:`~energyformer.core.block.EnergyBlock` refuses a slot left empty by an energy that is not
token-local (:func:`is_token_local`): it used to decode silently wrong tokens, each new token seeing only itself.

Every registered energy is checked by ``tests/core/test_energy_properties.py`` through
:mod:`energyformer.core.checks`: ``grad`` equals autograd of ``energy`` in float64; where ``exact``,
a small step along ``direction`` lowers the energy; where not, ``direction`` equals
``reference_direction``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from .precond import Preconditioner

#: Registry of energy classes by name (``energyformer list energies``).
ENERGIES: dict[str, type[Energy]] = {}


def register_energy(name: str):
    """Class decorator adding an Energy subclass to :data:`ENERGIES`."""

    def deco(cls):
        if name in ENERGIES:
            raise ValueError(f"energy {name!r} is already registered")
        ENERGIES[name] = cls
        cls.registry_name = name
        return cls

    return deco


class Energy(nn.Module):
    """Base class of every energy. Subclasses implement ``energy`` and, ideally, a closed-form ``grad``."""

    exact: bool = True
    context_is_iterate: bool = False
    registry_name: str = ""
    #: whether ``direction`` takes a per-head preconditioner bank (``solver.precond_per_head``: one P_k per
    #: attention head acting on that head's channels, CEM's Eq. 14); the block refuses a bank otherwise
    head_bank: bool = False
    #: whether E_i depends only on x_i, its own context row h_i and parameters (an MLP-like energy), so that
    #: decoding with a KV cache may run it on the new tokens alone. True: declared token-local, the cache slot
    #: may stay empty. False: it reads other tokens, so ``prepare`` must append what it reads to the slot.
    #: None (default, undeclared): decided by :func:`is_token_local` (token-local in an MLP sublayer only)
    token_local: bool | None = None

    @classmethod
    def examples(cls, dtype: torch.dtype = torch.float64) -> list[tuple[str, Energy, Tensor, Tensor]]:
        """Small seeded instances ``(label, energy, context, x)`` covering the energy's options.

        The library-wide property test iterates over every registered energy and its examples, so a
        new energy is checked as soon as it is registered; one without examples fails that test.
        """
        raise NotImplementedError(f"{cls.__name__} must provide examples() for the property tests")

    def prepare(self, context: Tensor, **kwargs: Any) -> Any:
        """Work done once per block call (outside the loop). Default: the context itself.

        Blocks pass ``cache``, ``offset`` and ``mask`` keywords; accept ``**kwargs``. ``cache`` is this
        block's KV-cache slot (a dict, filled in place; None when not decoding incrementally): with it the
        call holds only the new tokens, at positions ``offset`` onwards. An energy that reads other tokens
        must append what it reads to the slot and use all of it (``core.attention.append_cache(cache, mask,
        k=k, v=v)`` returns the cached + new tensors and key mask); dropping it through ``**kwargs`` would let
        each decoded token see only itself, so the block raises a ConfigError when the slot is still empty
        after this call. An energy whose ``E_i`` reads token i alone sets ``token_local = True`` and may
        ignore the cache.
        """
        return context

    def reprepare(self, state: Any, u: Tensor) -> Any:
        """State for context = ``u`` (called every step when ``context_is_iterate``).

        Default: ``prepare(u)``. The old ``state`` is given so that options fixed for the whole
        call (a padding mask) can be carried over; the KV cache is not (iterate-context energies
        do not decode incrementally).
        """
        return self.prepare(u)

    def energy(self, x: Tensor, state: Any) -> Tensor:
        """Per-token energy, shape (B, N)."""
        raise NotImplementedError

    def energy_terms(self, x: Tensor, state: Any) -> dict[str, Tensor] | None:
        """Named (B, N) parts that sum to :meth:`energy` (composite energies); None for one term."""
        return None

    def grad(self, x: Tensor, state: Any) -> Tensor:
        """∇_x Σ_i E_i. Default: autograd of :meth:`energy` (differentiable w.r.t. parameters when
        grad mode is on, so a block built on an energy-only subclass still trains). For an
        iterate-context energy the derivative also goes through ``reprepare(state, x)``."""
        return _autograd_grad(self, x, state)

    def direction(self, x: Tensor, state: Any, precond: Preconditioner) -> Tensor:
        """Update direction ``-P ∇E``; subclasses may fuse P into their weights."""
        return -precond(self.grad(x, state))

    def reference_direction(self, x: Tensor, state: Any, precond: Preconditioner) -> Tensor:
        """Independent formula of :meth:`direction` for energies with ``exact = False``.

        Required when ``exact`` is False: the property test compares ``direction`` with it, since
        such an update cannot be checked against the gradient. Write it the slow, obvious way (e.g.
        per-token autograd of the partial energy with the context held fixed).
        """
        raise NotImplementedError(
            f"{type(self).__name__} has exact = False and must implement reference_direction(x, state, "
            f"precond) (an independent formula of its update) for the property tests")

    def precond_exact(self, precond: Preconditioner) -> bool:
        """Whether ``direction`` with this preconditioner is ``-P ∇E`` for one PD matrix P."""
        return precond.heads is None


def is_token_local(energy: Energy, part: str | None = None) -> bool:
    """Whether ``energy`` may decode without a KV cache (see :attr:`Energy.token_local`).

    A declared ``token_local`` wins. Undeclared (None): a composite energy (``terms``) is token-local when
    every term is; any other is token-local only in a block built as an MLP sublayer (``part == 'mlp'``,
    position-wise by the layer's contract: the package's per-token energies keep working without declaring
    it) and otherwise assumed to read other tokens (an attention sublayer, a bare block), the safe side.
    """
    declared = energy.token_local
    if declared is not None:
        return bool(declared)
    terms = getattr(energy, "terms", None)
    if isinstance(terms, nn.ModuleDict) and terms and all(isinstance(e, Energy) for e in terms.values()):
        return all(is_token_local(e, part) for e in terms.values())
    return part == "mlp"


@torch.compiler.disable
def _autograd_grad(energy: Energy, x: Tensor, state: Any) -> Tensor:
    """:meth:`Energy.grad`'s autograd fallback, run eagerly even inside ``torch.compile`` (``train.compile``).

    In grad mode the gradient is taken with ``create_graph=True`` so the parameters get their gradient
    through it: a double backward, which AOTAutograd's compiled graphs do not support ("torch.compile with
    aot_autograd does not currently support double backward"). Run eagerly, the energy's graph is an
    ordinary autograd graph; the compiled regions before and after it are each differentiated once. The cost
    is a graph break per call (energies with a closed-form ``grad`` never come here and keep one graph).
    """
    create = torch.is_grad_enabled()
    with torch.enable_grad():
        # a fresh alias of x when x is in a graph: the gradient flows through x's own appearances only, never
        # through a state that was built from x too (prepare(norm(x)) inside the loop; the old ``xg = x`` took
        # that path as well, so grad mode and no_grad gave different steps)
        xg = x.view_as(x) if x.requires_grad else x.detach().requires_grad_(True)
        st = energy.reprepare(state, xg) if energy.context_is_iterate else state
        (g,) = torch.autograd.grad(energy.energy(xg, st).sum(), xg, create_graph=create)
    return g
