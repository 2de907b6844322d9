"""Bare self-attention as a model: fixed embedding, q steps of the pseudo-likelihood dynamics, readout
(seed 004 slides "The bare self-attention", Eq. 3-4, 13-16, 19-20; reconstructed.md §2.1).

``model: {kind: bare_sa, ...}``. The only parameter is J (:class:`~energyformer.energies.pseudolikelihood.
PseudoLikelihoodEnergy`); there is no positional encoding, no MLP, no learned embedding or head:

* discrete tokens (Potts colours) are embedded by a fixed codebook E (C, d): one-hot (d = C, default)
  or seeded random unit vectors; a masked token starts at 0 (``mask_init: zero``, recommended by
  reconstructed §2.1) or at a random unit vector;
* the state runs q steps ``x_i <- normalise(γ x_i + Σ_{j≠i} α_ij J_ij x_j)`` (the energy's per-token
  direction with step size ``step_size`` = 1, descended by :class:`SphereDescent`; without
  ``renorm`` plain :class:`~energyformer.core.GradientDescent`), every token moving (the slides'
  dynamical system) unless ``clamp_observed`` keeps the observed tokens fixed;
* discrete readout ``logits_i(a) = λ_out e_aᵀ x_i(q)`` (``readout_scale`` = λ_out; accuracy does not
  depend on it, cross-entropy does, so tasks also report it at a scale calibrated on training data).

Training never runs the dynamics through a graph: :meth:`local_loss` is the pseudo-likelihood of the
data (:mod:`energyformer.energies.pl_objectives`) whose gradient w.r.t. J is the closed-form Hebbian
rule (tasks call it as ``model(x, local_loss=True)``, so a DDP wrapper synchronises it), applied by the shared
Trainer and optimiser (``objective``: plain | vmf | codebook | cd;
``sites``: all | random, slide Eq. 13). Normalisations of the unbounded plain objective (reconstructed
§2.1): weight decay (``train.optimizer.weight_decay``; J has the ``weight`` role), a Frobenius bound
``frobenius`` on every block J_ij (kept by a ``ProjectionCallback`` through :meth:`project_`), the vMF
normaliser (``vmf``), the discrete Potts normaliser (``codebook``), or contrastive divergence (``cd``).
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from pydantic import Field, model_validator
from torch import Tensor, nn

from ..core.context import ForwardContext
from ..core.projected import SphereDescent  # noqa: F401  (the core's 'sphere' solver; re-exported)
from ..core.solver import SOLVERS, SolverResult
from ..energies.pl_objectives import pl_objective
from ..energies.pseudolikelihood import PseudoLikelihoodEnergy
from ..utils.config import KindConfig
from ..utils.fields import Seed
from ..utils.validate import ConfigError
from .output import ModelOutput
from .potts_ids import check_colour_ids
from .registry import MODELS
from .wrapper import ID_DTYPES


class BareSAConfig(KindConfig):
    """Bare self-attention (seed 004): J only, fixed embedding, q steps of the dynamics, PL training."""

    kind: Literal["bare_sa"] = "bare_sa"
    n_tokens: int | None = Field(None, ge=2)
    """N, positions of J (set by the task)"""
    dim: int | None = Field(None, ge=1)
    """d, token dimension (set by the task: C for one-hot colours, 2·channels·patch² for images)"""
    n_colours: int | None = Field(None, ge=2)
    """C, discrete token values (set by token tasks; None for continuous inputs)"""
    lam: float = Field(1.0, gt=0)
    """λ, inverse temperature of the attention scores ([REC] 1)"""
    gamma: float = 1.0
    """γ, self-coupling of the update (the slides use 1)"""
    renorm: bool = True
    """renormalise every token onto the unit sphere after each step ([REC] on)"""
    heads: int = Field(0, ge=0)
    """0: a full J; H > 0: J_ij = Σ_h K_ijᵀ Q_ij (slide Eq. 19)"""
    head_dim: int | None = Field(None, ge=1)
    """d_h of the factored form (None: d // heads)"""
    init_std: float = Field(0.0, ge=0)
    """std of J's normal init (0: J = 0; the factored form needs > 0)"""
    init_seed: Seed = 0
    """seed of J's init and of a random codebook"""
    iterations: int = Field(1, ge=1)
    """q, dynamics steps at evaluation (forward(iterations=) overrides)"""
    step_size: float = Field(1.0, gt=0)
    """η of each step (1: the slides' map x <- γx + Σ α J x)"""
    mask_init: Literal["zero", "random"] = "zero"
    """initial state of a masked token: 0 or a random unit vector (one per site, seeded, the same in every
    sequence: :meth:`BareSelfAttention.embed`)"""
    clamp_observed: bool = False
    """keep observed tokens fixed during the dynamics (False: every token moves, as in the slides)"""
    readout_scale: float = Field(1.0, gt=0)
    """λ_out in logits = λ_out e_aᵀ x_i"""
    codebook: Literal["onehot", "random"] = "onehot"
    """embedding of discrete tokens: one-hot (needs dim = n_colours) or seeded random unit vectors"""
    objective: Literal["plain", "vmf", "codebook", "cd"] | None = None
    """training objective (None: the task's normaliser: codebook for discrete tokens, vmf otherwise)"""
    sites: Literal["all", "random"] = "all"
    """sites per training step: all (GD/SGD on Σ_i e_i) or one random site (slide Eq. 13)"""
    cd_steps: int = Field(1, ge=1)
    """dynamics steps from the data that give the contrastive-divergence model samples"""
    frobenius: float | None = Field(None, gt=0)
    """radius r: after every optimiser step each block J_ij is projected onto ‖J_ij‖_F ≤ r (N1)"""

    @model_validator(mode="after")
    def _check(self):
        if self.codebook == "onehot" and self.n_colours is not None and self.dim is not None \
                and self.dim != self.n_colours:
            raise ValueError(f"codebook = 'onehot' needs dim = n_colours = {self.n_colours}; got dim = "
                             f"{self.dim} (use codebook: random for another dim)")
        if self.heads > 0 and self.init_std == 0:
            raise ValueError("heads > 0 needs init_std > 0 (K = Q = 0 is a saddle of J = Σ_h KᵀQ)")
        if self.frobenius is not None and self.heads > 0:
            raise ValueError("frobenius is implemented for a full J (heads = 0)")
        return self


def random_codebook(n: int, d: int, seed: int) -> Tensor:
    """n seeded random unit vectors in R^d, (n, d)."""
    e = torch.randn(n, d, generator=torch.Generator().manual_seed(seed))
    return e / e.norm(dim=-1, keepdim=True)


class BareSelfAttention(nn.Module):
    """Bare self-attention model (module docstring). ``recurrent``: evaluated at any q."""

    recurrent = True

    def __init__(self, cfg: BareSAConfig):
        super().__init__()
        if cfg.n_tokens is None or cfg.dim is None:
            raise ConfigError(f"model.n_tokens = {cfg.n_tokens}, model.dim = {cfg.dim}: bare_sa needs both "
                              "(a task sets them from its data)")
        self.cfg = cfg
        g = torch.Generator().manual_seed(cfg.init_seed)
        self.energy = PseudoLikelihoodEnergy(cfg.n_tokens, cfg.dim, cfg.lam, cfg.gamma, cfg.heads,
                                             cfg.head_dim, cfg.init_std, generator=g)
        kind = "sphere" if cfg.renorm else "gd"
        self.solver = SOLVERS.get(kind).builder.from_config(SOLVERS.get(kind).config(), cfg.dim,
                                                             step_size=cfg.step_size)
        cb = None
        if cfg.n_colours is not None:
            cb = torch.eye(cfg.n_colours) if cfg.codebook == "onehot" else random_codebook(
                cfg.n_colours, cfg.dim, cfg.init_seed + 1)
        self.register_buffer("codebook", cb, persistent=False)
        self.qualname = "bare_sa"

    # ------------------------------------------------------------------ dynamics
    def run(self, x0: Tensor, *, moving: Tensor | None = None, steps: int | None = None,
            trace: bool = False, stats: bool = False, J: Tensor | None = None) -> SolverResult:
        """q = ``steps`` (default ``cfg.iterations``) steps from x0 (B, N, d). ``moving`` (B, N) bool: only
        these tokens move (passed to the solver as the context mask, which keeps the others fixed;
        bare attention still attends them). Traces record the per-token energy e_i at every step. x0 is cast to
        J's dtype (data tokens are float32; a float64 or bf16 model runs in its own dtype, as ``local_loss``)."""
        self.energy.check_input(x0, "input")
        steps = self.cfg.iterations if steps is None else steps
        ctx = ForwardContext(mask=moving)
        J = self.energy.coupling() if J is None else J
        x0 = x0.to(J.dtype)
        state = self.energy.prepare(x0, J=J)
        res = self.solver.run(self.energy, x0, state, steps, ctx=ctx, trace=trace, stats=stats)
        if res.trace is not None:  # not gradient steps on the traced energy (per-token partial, projected)
            res.trace.exact = bool(self.energy.exact and self.solver.exact)
        return res

    @torch.no_grad()
    def trajectory(self, x0: Tensor, steps: int, *, moving: Tensor | None = None) -> Tensor:
        """States x(0), ..., x(steps): (steps + 1, B, N, d) (J materialised once)."""
        J = self.energy.coupling()
        xs = [x0.to(J.dtype)]
        for _ in range(steps):
            xs.append(self.run(xs[-1], moving=moving, steps=1, J=J).x)
        return torch.stack(xs)

    # ------------------------------------------------------------------ discrete tokens
    def _check_ids(self, idx: Tensor) -> None:
        C = self.cfg.n_colours
        if C is None:
            raise ValueError("this bare_sa model has no codebook (model.n_colours is None): it takes "
                             "continuous tokens through run(), not token ids")
        if idx.dim() != 2 or idx.dtype not in ID_DTYPES:  # bool ids were read as colours 0 / 1
            raise ValueError(f"token ids must be an int64 or int32 (batch, tokens) tensor; got {idx.dtype} "
                             f"{tuple(idx.shape)}")
        check_colour_ids(idx, C)

    def embed(self, idx: Tensor) -> Tensor:
        """Token ids (B, N) -> (B, N, d): colour a -> e_a, the mask id C -> 0 or a random unit vector.

        The random vectors are one per site, r_n (N, d) drawn with seed 0 and shared by every sequence of the
        batch, so a sequence's output does not depend on the batch it is evaluated in (drawn as one (B, N, d)
        tensor, a row's start and its logits changed with its row index and the batch size)."""
        self._check_ids(idx)
        C = self.cfg.n_colours
        masked = idx == C
        x = self.codebook[idx.clamp_max(C - 1)] * (~masked)[..., None]
        if self.cfg.mask_init == "random":  # (no host read of masked.any(): where with none masked is x itself)
            x = torch.where(masked[..., None], self._mask_vectors(x), x)  # (N, d) over B
        return x

    def _mask_vectors(self, x: Tensor) -> Tensor:
        """The random unit vectors r_n (N, d) of :meth:`embed`, drawn once per (N, d, dtype, device) and kept (they
        were drawn on the CPU and copied over at every forward, after a host read of whether any site was masked)."""
        key = (*x.shape[-2:], x.dtype, x.device)
        cache = self.__dict__.setdefault("_mask_cache", {})
        if key not in cache:
            if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
                raise RuntimeError(
                    f"bare_sa mask_init 'random': the mask vectors for {tuple(x.shape[-2:])} {x.dtype} are drawn on "
                    "the CPU and copied over on their first use, which a CUDA graph cannot capture; run one eager "
                    "forward with this shape before capturing (torch.compile's CUDA graphs and the benchmarks warm up "
                    "first)")
            r = torch.randn(x.shape[-2:], generator=torch.Generator().manual_seed(0), dtype=torch.float64)
            cache[key] = (r / r.norm(dim=-1, keepdim=True)).to(x)
        return cache[key]

    def forward_options(self) -> dict[str, int]:
        """Call-time ``iterations`` and ``steps`` both change the dynamics (models/options.py)."""
        return {"iterations": 1, "steps": 1}

    def forward(self, idx: Tensor, mask: Tensor | None = None, *, trace: bool = False, stats: bool = False,
                iterations: int | None = None, steps: int | None = None,
                local_loss: bool = False) -> ModelOutput | tuple[Tensor, dict[str, float]]:
        """Token ids (B, N) with masked sites = C -> logits (B, N, C) after q = iterations × steps steps
        (``iterations`` defaults to cfg.iterations, ``steps`` to 1). ``mask`` (key padding) is refused.

        ``local_loss=True``: the training objective instead, :meth:`local_loss` of the data ``idx`` (token ids,
        embedded, or continuous tokens (B, N, d)), no dynamics. Tasks train through this call, not the method:
        under DDP only a call of the wrapper's forward arms the gradient all-reduce, so a loss computed on the
        unwrapped module left every rank training its own J (train/trainer.py's loss_fn contract)."""
        if mask is not None:
            raise ValueError("bare self-attention takes no padding mask (its sequences have fixed length)")
        if local_loss:
            extra = [k for k, v in (("trace", trace), ("stats", stats), ("iterations", iterations),
                                    ("steps", steps)) if v not in (False, None)]
            if extra:
                raise ValueError(f"forward(local_loss=True) runs no dynamics; {', '.join(extra)} not allowed with it")
            return self._data_loss(idx)
        q = (self.cfg.iterations if iterations is None else iterations) * (1 if steps is None else steps)
        x0 = self.embed(idx)
        moving = (idx == self.cfg.n_colours) if self.cfg.clamp_observed else None
        res = self.run(x0, moving=moving, steps=q, trace=trace, stats=stats)
        logits = self.cfg.readout_scale * res.x @ self.codebook.T  # (B, N, C)
        traces = None
        if trace:
            from ..core.trace import Traces

            traces = Traces()
            traces[(self.qualname, 0)] = res.trace
        return ModelOutput(logits=logits, traces=traces,
                           stats={(self.qualname, 0): res.stats} if stats else None)

    @torch.no_grad()
    def coupling64(self) -> Tensor:
        """J (N, N, d, d) materialised in float64 (for the factored form from float64 K and Q, so that a
        large J is not rounded to float32 before it is used)."""
        e = self.energy
        if e.heads == 0:
            return e.J.detach().double()
        return torch.einsum("hijka,hijkb->ijab", e.K.detach().double(), e.Q.detach().double())

    @torch.no_grad()
    def conditional_logits(self, idx: Tensor) -> Tensor:
        """The model's own conditional at every site, without dynamics: ``log Σ_{j≠i} exp(λ e_aᵀ J_ij x_j)``
        (B, N, C), float64: the discrete pseudo-likelihood that the ``codebook`` objective fits
        (``P(s_i = a | s_−i) = softmax_a`` of these logits; for one-hot colours ``Σ_j exp(λ J_ij[a, s_j])``).

        Well defined for every J, the factored one included: Eq. 19 only writes ``J_ij = Σ_h K_ijᴴᵀ Q_ijᴴ``
        (the heads share one softmax over j; there is no per-head conditional to combine), so the
        conditional is that of the materialised J. Computed in float64 with log-sum-exp over j, so it
        is exact at any scale of J. Unlike the CE of the dynamics (renormalised states, so only J's
        direction matters), its cross-entropy grows linearly with ‖J‖ when the argmax is wrong: a J whose
        scale blew up in training (e.g. the factored form under plain SGD with a step size meant for a
        full J) gives a huge own-conditional CE next to an ordinary dynamics CE."""
        x = self.embed(idx).double()
        J = self.energy._J_for(self.coupling64().to(x.device), x.shape[1])
        g = self.cfg.lam * torch.einsum("zija,ka->zijk", torch.einsum("ijac,zjc->zija", J, x),
                                        self.codebook.double())  # (B, N, N, C)
        eye = torch.eye(x.shape[1], dtype=torch.bool, device=x.device)
        return torch.logsumexp(g.masked_fill(eye[None, :, :, None], float("-inf")), 2)

    # ------------------------------------------------------------------ training (no backprop through dynamics)
    def local_loss(self, x: Tensor, objective: str | None = None) -> tuple[Tensor, dict[str, float]]:
        """Pseudo-likelihood objective of data tokens x (B, N, d) (cfg.objective unless given), with the
        closed-form gradient w.r.t. J; sites per cfg.sites (one random site per call: torch RNG)."""
        self.energy.check_input(x, "data")
        kind = objective or self.cfg.objective or ("codebook" if self.codebook is not None else "vmf")
        N = x.shape[1]
        rows = torch.randint(0, N, (1,)) if self.cfg.sites == "random" else None
        x_model = None
        if kind == "cd":
            x_model = self.trajectory(x, self.cfg.cd_steps)[-1]
        J = self.energy._J_for(self.energy.coupling(), N)
        loss = pl_objective(J, x, lam=self.cfg.lam, kind=kind, rows=rows, codebook=self.codebook,
                            x_model=x_model)
        return loss, {"j_norm": J.detach().norm()}  # a tensor: read by the trainer after the backward

    @torch.compiler.disable
    def _data_loss(self, data: Tensor) -> tuple[Tensor, dict[str, float]]:
        """forward(local_loss=True): :meth:`local_loss` of token ids (embedded) or tokens (B, N, d). Eager under
        ``torch.compile``, as when tasks called the method directly: its input checks and metric are host reads
        that break a graph, and a few einsums leave nothing worth compiling."""
        return self.local_loss(data if data.is_floating_point() else self.embed(data))

    @torch.no_grad()
    def project_(self) -> None:
        """Frobenius bound (N1): every block J_ij with ‖J_ij‖_F > r is scaled back onto the ball of radius r."""
        r = self.cfg.frobenius
        if r is None:
            return
        J = self.energy.J
        norms = J.flatten(2).norm(dim=-1)[..., None, None]
        J.mul_(torch.clamp(r / norms.clamp_min(1e-30), max=1.0))

    def extra_repr(self) -> str:
        c = self.cfg
        return (f"q={c.iterations}, renorm={c.renorm}, clamp_observed={c.clamp_observed}, "
                f"objective={c.objective}, sites={c.sites}")


@MODELS.register("bare_sa", BareSAConfig)
def build_bare_sa(cfg: BareSAConfig, **_: Any) -> BareSelfAttention:
    """Bare self-attention: J only, fixed embedding, q steps of the dynamics (seed 004)."""
    return BareSelfAttention(cfg)
