"""Equilibrium Refinement Module (ERM) of the equilibrium transformer (seed 003 §2.3, §3.2, §3.5,
§3.7, Algorithm 1; reconstructed.md §3).

A standard block proposes f; the ERM descends the learned coherence energy ℒ (Eq. 11) with the core's
proximal solver (:class:`~energyformer.core.ProximalGradient`), anchor f and start h⁽⁰⁾ = f:

    h⁽ᵏ⁺¹⁾ = h⁽ᵏ⁾ − α (∇ℒ(h⁽ᵏ⁾) + (h⁽ᵏ⁾ − f)/γ),   k = 0 … K−1        (Eq. 8, Alg. 1 lines 7-16)

and Alg. 1 ends with h* = LayerNorm(h⁽ᴷ⁾) (the model's final LayerNorm, see
:mod:`energyformer.models.equilibrium`; ``norm_each`` adds one per ERM). With ℒ ≡ 0 or K = 0 the
ERM is the identity, so the model is the backbone followed by its final LayerNorm.

The config has the shared sublayer shape (``solver`` (proximal: ``gamma``, ``tol``,
``energy_threshold``), ``step_size`` α, ``steps``, ``eval_steps``, ``backward``); budgets, the adaptive
phase and the relative-change statistics are options of the core solver's run (no loop here).

Steps: ``steps`` (K_train, default 2: "K = 2 for gradient stability") in training mode,
``eval_steps`` (K_eval, default 8) in eval mode, ``ctx.steps`` (``--steps``) overrides both.
Early stopping (§3.7): ``tol`` ε stops a token once ‖h⁽ᵏ⁺¹⁾ − h⁽ᵏ⁾‖ < ε (absolute; the relative
change ‖Δh‖/‖h⁽ᵏ⁾‖ is recorded when statistics are asked for); ``energy_threshold`` τ stops a token
once its energy is at or below τ (Corollary 5; the core compares the traced objective ℒ + proximal
term, which equals ℒ at h⁽⁰⁾ and bounds it from above after). Adaptive K (§3.7, eval only):
``adaptive='entropy'`` gives tokens whose proposal f has output entropy below
``entropy_threshold``·ln C (C classes) ``k_low`` = 8 steps and the others ``k_high`` = 32.

Training (§3.5): the loss is CE + β·ℒ(h⁽ᴷ⁾); the ERM adds β·λ_i·mean ℒ_i(h⁽ᴷ⁾) to ``ctx.aux_losses``
as ``eqt/<term>`` (the task sums them). ℒ is evaluated at h⁽ᴷ⁾ (the variable it was minimised over)
rather than at LayerNorm(h⁽ᴷ⁾): the seed writes ℒ(h*) with h* ≈ h⁽ᴷ⁾ (Eq. 8). Differentiation:
``backward: unroll`` (default, exact gradient of the K-step map) or ``{kind: implicit}`` (implicit
function theorem at the end point, :mod:`energyformer.core.implicit`; meant for converged runs,
e.g. K = 16-32 with ``tol``; non-convergence is reported). γ annealing (10 → 1, §3.5 step 3) and
the K curriculum (4 → 16, step 4) are trainer callbacks (:meth:`EquilibriumRefiner.callbacks`).

Energies (``energy``): ``'coherence'`` (§3.3, default): rev / mask / conf / mem with weights
λ = 1.0 / 0.5 / 0.2 / 0 (§3.7 values; the parity experiment lists no memory term, so it is off
by default); ``'consistency'`` (§2.2.2): pred / consist / mem with λ = 1 / 1 / 0 (the seed gives no
values). A weight of 0 leaves the term out.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
from pydantic import Field, model_validator
from torch import Tensor, nn

from ..core.backward import BACKWARD_MODES
from ..core.composite import CompositeEnergy
from ..core.context import ForwardContext, context_or_new
from ..core.proximal import ProximalConfig
from ..core.solver import SOLVERS, Budget, SolverStats
from ..core.stepsize import StepSizeField
from ..core.sublayer import build_solver, check_moved
from ..energies.coherence import CoherenceContext, MaskedReconstructionEnergy, ReversePredictionEnergy
from ..energies.coherence_pointwise import ConfidenceEnergy, ConsistencyEnergy, MemoryEnergy
from ..utils.config import ConfigModel
from ..utils.validate import ConfigError

TERMS = {"coherence": ("rev", "mask", "conf", "mem"), "consistency": ("pred", "consist", "mem")}
DEFAULT_WEIGHTS = {"coherence": {"rev": 1.0, "mask": 0.5, "conf": 0.2, "mem": 0.0},
                   "consistency": {"pred": 1.0, "consist": 1.0, "mem": 0.0}}


class Schedule(ConfigModel):
    """A value moved from ``start`` to ``end`` over ``steps`` optimiser steps after ``begin``
    (linear; ``steps: 1`` is a switch at ``begin``)."""

    start: float
    """value before ``begin``"""
    end: float
    """value from ``begin + steps`` on"""
    steps: int = Field(1, ge=1)
    """length of the ramp (optimiser steps)"""
    begin: int = Field(0, ge=0)
    """optimiser step at which the ramp starts"""


#: the defaults of the old top-level ``implicit_*`` keys (before the one sublayer shape): every resolved config.yaml
#: of that time holds them, whatever its backward mode, so they load where backward is not implicit
OLD_IMPLICIT_DEFAULTS = {"method": "cg", "max_iter": 50, "tol": 1e-6}


class RefineConfig(ConfigModel):
    """The ERM: energy, proximal descent, step budgets, stopping, training and backward options."""

    energy: Literal["coherence", "consistency"] = "coherence"
    """'coherence' (§3.3: rev, mask, conf, mem) or 'consistency' (§2.2.2: pred, consist, mem)"""
    weights: dict[str, float] | None = None
    """λ per term (None: coherence rev 1.0, mask 0.5, conf 0.2 as §3.7, mem 0 — §3.7's 0.1 needs the memory bank,
    off by default; consistency pred 1, consist 1, mem 0)"""
    placement: Literal["last", "every"] = "last"
    """refine after the last layer only, or after every layer (the seed leaves it open)"""
    window: int = Field(32, ge=1)
    """W: tokens read by the rev and mask terms (W_t = min(W, t); §3.7: W = 32)"""
    mask_prob: float = Field(0.15, gt=0, le=1)
    """fraction of the window masked for the mask term (§3.3.2: 15 %)"""
    rev_layers: int = Field(1, ge=1)
    """layers of the reverse window transformer q_φ"""
    rev_heads: int | None = Field(None, ge=1)
    """heads of q_φ (None: the model's)"""
    rev_readout: Literal["bilinear", "mlp"] = "bilinear"
    """how q_φ reads h_t: bilinear (convex in h, cheap) or a residual MLP (see energies.coherence)"""
    hidden: int | None = Field(None, ge=1)
    """hidden size of the energy networks' MLPs (None: the model width)"""
    mem_size: int = Field(256, ge=1)
    """memory bank slots M"""
    mem_tau: float = Field(0.1, gt=0)
    """memory temperature τ (Eq. 15; the seed gives no value: our choice)"""
    mem_relevance: Literal["all", "topk"] = "all"
    """r_i: every slot, or the mem_topk slots most similar to the proposal"""
    mem_topk: int = Field(16, ge=1)
    """slots kept by mem_relevance = 'topk'"""
    mem_ema: float = Field(0.99, ge=0, le=1)
    """EMA factor of the memory write (Eq. 16; the seed gives no value: our choice)"""
    consist_map: Literal["mlp", "own"] = "mlp"
    """F_θ of the consistency term: the refined layer's MLP sublayer, or an own residual MLP"""
    solver: SOLVERS.type("proximal") = Field(default_factory=ProximalConfig)
    """descent rule (default proximal: gamma γ, tol ε = per-token early stop once ‖Δh‖ < ε, energy_threshold τ)"""
    step_size: StepSizeField = 0.1
    """step size α (§3.7: 0.1, constant)"""
    steps: int = Field(2, ge=0)
    """K_train (§5.3.3: K = 2 in training)"""
    eval_steps: int = Field(8, ge=0)
    """K_eval (eval mode; ctx.steps / --steps override; §5.3.3: K = 8)"""
    backward: BACKWARD_MODES.type("unroll") = BACKWARD_MODES.field("unroll")
    """gradient through the unrolled K steps, or {kind: implicit, method, max_iter, tol} at the end point"""
    adaptive: Literal["none", "entropy"] = "none"
    """eval-time K per token: 'entropy' gives confident proposals k_low steps, the others k_high"""
    k_low: int = Field(8, ge=0)
    """steps for confident tokens (adaptive = 'entropy'; §3.7 "Adaptive K": 8)"""
    k_high: int = Field(32, ge=0)
    """steps for uncertain tokens (adaptive = 'entropy'; §3.7 "Adaptive K": 32)"""
    entropy_threshold: float = Field(0.5, gt=0, le=1)
    """confident: entropy of p_θ(·|f) below this fraction of ln C (the seed names no threshold: our choice)"""
    beta: float = Field(0.3, ge=0)
    """β of the training loss CE + β·ℒ(h⁽ᴷ⁾) (§3.7: 0.3)"""
    norm_each: bool = False
    """LayerNorm after every ERM (Alg. 1 per layer); False: only the model's final LayerNorm"""
    gamma_anneal: Schedule | None = None
    """γ schedule in training, e.g. {start: 10, end: 1, steps: 10000} (§3.5); None: fixed γ"""
    k_curriculum: Schedule | None = None
    """K_train schedule, e.g. {start: 4, end: 16, begin: 50000} (§3.5); None: fixed steps"""
    mask_seed: int = Field(0, ge=0)
    """seed of the mask term's random mask in eval mode (one draw for every row; training: torch's RNG, per row)"""

    @classmethod
    def migrate(cls, data: dict) -> dict:
        """Old spellings (before the one sublayer shape): ``alpha`` is the step size, ``gamma`` /
        ``tol`` / ``energy_threshold`` are proximal-solver options, ``backward: implicit`` with
        ``implicit_method`` / ``implicit_max_iter`` / ``implicit_tol`` is the backward config."""
        data = dict(data)
        if "alpha" in data:
            alpha, given = data.pop("alpha"), data.get("step_size", None)
            value = given.get("value") if isinstance(given, dict) and given.get("kind", "fixed") == "fixed" else given
            if "step_size" in data and value != alpha:
                raise ConfigError(f"alpha = {alpha!r} conflicts with step_size = {given!r} (the same setting, its "
                                  "old spelling): set step_size only")
            data.setdefault("step_size", alpha)
        moved = {k: data.pop(k) for k in ("gamma", "tol", "energy_threshold") if k in data}
        solver = data.get("solver")
        if isinstance(solver, str):  # a kind name: its defaults (as {kind: name})
            solver = {"kind": solver}
        check_moved(moved, solver, "solver")
        if moved:
            base = ProximalConfig().model_dump() if (solver or {}).get("kind", "proximal") == "proximal" else {}
            data["solver"] = {**base, **moved, **(solver or {})}
        imp = {k[len("implicit_"):]: data.pop(k) for k in ("implicit_method", "implicit_max_iter", "implicit_tol")
               if k in data}
        backward = data.get("backward")
        if backward == "implicit":
            data["backward"] = {"kind": "implicit", **imp}
        elif imp and isinstance(backward, dict) and backward.get("kind") == "implicit":
            check_moved(imp, backward, "backward")
            data["backward"] = {**imp, **backward}
        elif {k: v for k, v in imp.items() if OLD_IMPLICIT_DEFAULTS.get(k) != v}:  # dropped without a word before
            raise ConfigError(f"{', '.join(f'implicit_{k} = {v!r}' for k, v in imp.items())}: options of backward "
                              f"'implicit', but backward = {backward or 'unroll (the default)'!r}; allowed: "
                              f"backward: {{kind: implicit, {next(iter(imp))}: ...}}")
        # (else: the old defaults, which every resolved config.yaml of that time held beside backward: unroll)
        return data

    @model_validator(mode="after")
    def _no_head_bank(self):
        """The refiner's energy acts on (B, N, D) and takes no per-head bank: refused here, as on every sublayer
        (``DescentConfig.head_bank``; it was refused only when the model was built)."""
        if getattr(self.solver, "precond_per_head", False):
            raise ValueError("solver.precond_per_head = true: the refiner has no per-head preconditioner bank (only "
                             "CEM attention's energy takes one); allowed: false")
        return self

    @model_validator(mode="after")
    def _check(self):
        allowed = TERMS[self.energy]
        for k, v in (self.weights or {}).items():
            if k not in allowed:
                raise ValueError(f"weights.{k}: not a term of energy {self.energy!r}; allowed: {', '.join(allowed)}")
            if not v >= 0:
                raise ValueError(f"weights.{k} = {v}: must be >= 0")
        if not any(v > 0 for v in self.resolved_weights().values()):
            raise ValueError("weights: at least one term needs a weight > 0")
        if self.k_low > self.k_high:
            raise ValueError(f"k_low = {self.k_low}: must be <= k_high = {self.k_high}")
        if self.mem_relevance == "topk" and self.mem_topk > self.mem_size:  # (unused by relevance 'all')
            raise ValueError(f"mem_topk = {self.mem_topk}: must be <= mem_size = {self.mem_size} "
                             "(mem_relevance 'topk')")
        return self

    def resolved_weights(self) -> dict[str, float]:
        """λ of every term of the chosen energy (defaults filled in)."""
        return {**DEFAULT_WEIGHTS[self.energy], **(self.weights or {})}


class _RelativeChange:
    """Solver observer recording the per-token relative change ‖h⁽ᵏ⁾ − h⁽ᵏ⁻¹⁾‖/‖h⁽ᵏ⁻¹⁾‖ (the solver
    shows it every iterate; a repeated iterate is skipped). Only used when statistics are requested."""

    def __init__(self) -> None:
        self.prev: Tensor | None = None
        self.last_obj: Tensor | None = None
        self.rel: list[Tensor] = []

    def __call__(self, x: Tensor) -> Tensor:
        self.see(x)
        return x

    def see(self, x: Tensor) -> None:
        if x is self.last_obj:
            return
        xd = x.detach().float()
        if self.prev is not None:
            self.rel.append((xd - self.prev).norm(dim=-1) / self.prev.norm(dim=-1).clamp_min(1e-12))
        self.prev, self.last_obj = xd, x


class EquilibriumRefiner(nn.Module):
    """ERM: ``refiner(f, ctx) -> h⁽ᴷ⁾`` (B, N, D) by proximal descent on ℒ from h⁽⁰⁾ = f (module docstring).

    ``embedding``, ``head`` and ``final_norm`` are the model's (shared, not owned); ``mlp`` is the
    refined layer's MLP sublayer (F_θ of the consistency term).
    """

    def __init__(self, cfg: RefineConfig, dim: int, heads: int, vocab_size: int, n_out: int, *,
                 embedding: nn.Embedding, head: nn.Module, final_norm: nn.Module, mlp: nn.Module | None = None):
        super().__init__()
        self.cfg = cfg
        self.n_out = n_out
        w = cfg.resolved_weights()
        terms: dict[str, nn.Module] = {}
        if w.get("rev", 0) > 0:
            terms["rev"] = ReversePredictionEnergy(
                dim, vocab_size, window=cfg.window, layers=cfg.rev_layers, heads=cfg.rev_heads or heads,
                hidden=cfg.hidden, readout=cfg.rev_readout, embedding=embedding)
        if w.get("mask", 0) > 0:
            terms["mask"] = MaskedReconstructionEnergy(dim, vocab_size, window=cfg.window, mask_prob=cfg.mask_prob,
                                                       hidden=cfg.hidden, embedding=embedding)
        for name, ent in (("conf", True), ("pred", False)):
            if w.get(name, 0) > 0:
                terms[name] = ConfidenceEnergy(dim, n_out, head=head, norm=final_norm, entropy=ent)
        if w.get("consist", 0) > 0:
            terms["consist"] = ConsistencyEnergy(dim, forward_map=mlp if cfg.consist_map == "mlp" else None,
                                                 hidden=cfg.hidden)
        if w.get("mem", 0) > 0:
            terms["mem"] = MemoryEnergy(dim, size=cfg.mem_size, tau=cfg.mem_tau, relevance=cfg.mem_relevance,
                                        topk=cfg.mem_topk, ema=cfg.mem_ema)
        self.energy = CompositeEnergy(terms, {k: w[k] for k in terms})
        self.solver = build_solver(cfg, dim, name="refine")
        self.steps, self.eval_steps, self.beta = cfg.steps, cfg.eval_steps, cfg.beta
        self.norm = nn.LayerNorm(dim) if cfg.norm_each else nn.Identity()
        self._head_norm = (head, final_norm)  # not registered: the model owns them
        self.qualname = ""
        self._eval_gen: torch.Generator | None = None

    # -- schedules (trainer callbacks write these)
    @property
    def k_train(self) -> float:
        """K_train as a float (the K-curriculum callback writes it; steps = round(k_train))."""
        return float(self.steps)

    @k_train.setter
    def k_train(self, value: float) -> None:
        self.steps = max(0, int(round(value)))

    @property
    def exact(self) -> bool:
        """Every step is an exact gradient step on ℒ + ‖h − f‖²/(2γ)."""
        return bool(self.energy.exact and self.solver.exact)

    def budget(self, ctx: ForwardContext) -> int:
        """K of this call: K_train / K_eval by mode, ``ctx.steps`` overrides (the solver's :class:`Budget`)."""
        return Budget(self.steps, self.eval_steps).resolve(ctx, self.training)

    def _context(self, f: Tensor, ctx: ForwardContext) -> CoherenceContext:
        if ctx.inputs is None or not isinstance(ctx.inputs, Tensor) or ctx.inputs.shape != f.shape[:2]:
            raise ValueError("EquilibriumRefiner needs the token ids (B, N) in ctx.inputs, aligned with the "
                             f"hidden states {tuple(f.shape)} (KV-cached decoding is not supported)")
        gen = None
        if not self.training:  # a reproducible mask at evaluation, the same for every row
            gen = torch.Generator().manual_seed(self.cfg.mask_seed)
        # the key-padding mask: padded positions are in no real token's window or q_φ context
        return CoherenceContext(ctx.inputs, f, gen, ctx.mask, shared_mask=not self.training)

    def _uncertain(self, f: Tensor) -> Tensor:
        """(B, N) bool: tokens whose proposal's output entropy is at or above the threshold."""
        head, norm = self._head_norm
        with torch.no_grad():
            logp = torch.log_softmax(head(norm(f)).float(), -1)
            ent = -(logp.exp() * logp).sum(-1)
        return ent >= self.cfg.entropy_threshold * math.log(self.n_out)

    def forward(self, f: Tensor, ctx: ForwardContext | None = None) -> Tensor:  # (B, N, D) -> (B, N, D)
        """h⁽ᴷ⁾ (then ``norm``). Eval mode runs under ``torch.no_grad()`` (the energy gradients are
        closed form or local autograd without ``create_graph``); use train mode to differentiate."""
        ctx = context_or_new(ctx, type(self).__name__)
        adaptive = self.cfg.adaptive == "entropy" and not self.training and ctx.steps is None
        K = self.cfg.k_low if adaptive else self.budget(ctx)
        want_stats, trace = ctx.stats is not None, ctx.traces is not None
        if self.training:
            return self._refine(f, ctx, K, adaptive, want_stats, trace)
        with torch.no_grad():  # eval: an inference procedure, no graph through the K steps
            return self._refine(f, ctx, K, adaptive, want_stats, trace)

    def _refine(self, f: Tensor, ctx: ForwardContext, K: int, adaptive: bool, want_stats: bool,
                trace: bool) -> Tensor:  # (B, N, D) -> (B, N, D)
        needed = self.training or trace or K > 0 or (adaptive and self.cfg.k_high > K)
        context = self._context(f, ctx)  # checks the token ids even when nothing is prepared
        state = self.energy.prepare(context) if needed else None  # K = 0 at eval: ℒ is never read
        rel = _RelativeChange() if want_stats else None
        more = None
        if adaptive and self.cfg.k_high > K:
            more = (self._uncertain(f), self.cfg.k_high - K)
        res = self.solver.run(self.energy, f, state, K, anchor=f, ctx=ctx, trace=trace, stats=want_stats,
                              adaptive=more, observer=rel)
        h, st = res.x, res.stats
        key = ctx.key(self.qualname or "erm")
        if trace and res.trace is not None:
            res.trace.exact = self.exact
            ctx.traces[key] = res.trace
        if want_stats:
            ctx.stats[key] = RefineStats(st.steps, st.step_norm, rel.rel)
        if self.training:
            self._training_terms(h, state, ctx)
        return self.norm(h)

    def _training_terms(self, h: Tensor, state: Any, ctx: ForwardContext) -> None:
        """β·λ_i·mean ℒ_i(h⁽ᴷ⁾) into ctx.aux_losses; the memory bank's EMA write."""
        if self.beta > 0:
            for name, e in self.energy.energy_terms(h, state).items():   # weighted (B, N) terms
                v = e.float()
                v = (v * ctx.mask).sum() / ctx.mask.sum().clamp_min(1) if ctx.mask is not None else v.mean()
                ctx.add_aux(f"eqt/{name}", self.beta * v)
        if "mem" in self.energy.terms:
            self.energy.terms["mem"].update(h, ctx.mask)

    def callbacks(self) -> list:
        """Trainer callbacks of this ERM's schedules (γ annealing, K curriculum); see the model's."""
        from ..train.callbacks import AnnealCallback

        cbs = []
        if self.cfg.gamma_anneal is not None:
            s = self.cfg.gamma_anneal
            cbs.append(AnnealCallback("gamma", s.start, s.end, s.steps, begin=s.begin, target=[self.solver],
                                      label=f"{self.qualname}.gamma"))
        if self.cfg.k_curriculum is not None:
            s = self.cfg.k_curriculum
            cbs.append(AnnealCallback("k_train", s.start, s.end, s.steps, begin=s.begin, target=[self],
                                      label=f"{self.qualname}.k_train"))
        return cbs


class RefineStats(SolverStats):
    """Solver statistics of one ERM call plus ``relative``: per step k a (B, N) tensor of
    ‖h⁽ᵏ⁺¹⁾ − h⁽ᵏ⁾‖/‖h⁽ᵏ⁾‖ (0 for tokens that stopped)."""

    def __init__(self, steps: Tensor, step_norm: Tensor, relative: list[Tensor]):
        super().__init__(steps, step_norm)
        self.relative = relative


class RefinedLayer(nn.Module):
    """A backbone layer followed by an ERM: x -> refiner(layer(x)) (the layer's output is the proposal f)."""

    def __init__(self, layer: nn.Module, refiner: EquilibriumRefiner):
        super().__init__()
        self.layer, self.refiner = layer, refiner

    def forward(self, x: Tensor, ctx: ForwardContext | None = None) -> Tensor:
        return self.refiner(self.layer(x, ctx), ctx)
