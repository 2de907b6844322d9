"""The ``network`` step size (Hyper-SET Eq. 12, App. D.1): η from a small network of the step index and a state.

``eta_t(s) = base + W_o GELU(tau(t) + RMSNorm(s))``, ``tau(t) = W_2 GELU(W_1 sin-emb(t))``; its shared views
(:class:`StepSizeGroup`: Hyper-SET's α and γ from one trunk). The index convention, the forward context and the
other kinds are in :mod:`energyformer.core.stepsize`, which re-exports these names.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Literal

import torch
import torch.nn.functional as F
from pydantic import Field, field_validator
from torch import Tensor, nn

from .constants import ExactTable
from .precision import autocast_dtype
from .stepsize_base import STEP_SIZES, StepSize
from ..utils.config import KindConfig
from ..utils.validate import check_int

# ----------------------------------------------------------------------------- network
class NetworkStepSizeConfig(KindConfig):
    """Step sizes from a small network of the step index and the state (Hyper-SET Eq. 12, App. D.1)."""

    kind: Literal["network"] = "network"
    embed_dim: int = Field(64, ge=2)
    """Width of the sinusoidal index embedding (Hyper-SET Table 6: 512); even."""
    condition: Literal["x0", "iterate", "input", "layer"] = "x0"
    """State the step size sees: the block's starting point x0, the current iterate, the model input
    (ctx.embedded, Hyper-SET Eq. 12) or the layer input (ctx.layer_input, the state before the layer's
    first sublayer); the last two fall back to x0 outside a model."""
    output: Literal["scalar", "vector"] = "vector"
    """One step size per token (scalar) or one per token and channel (vector, Hyper-SET)."""
    zero_init: Literal["none", "output", "all"] = "output"
    """Zero-initialise the output Linear ('output') or every Linear ('all'); both give eta = base at first."""
    base: float = 0.0
    """Constant added to the network output (eta = base + net)."""
    groups: int = Field(1, ge=1)
    """Step sizes produced by one network (output width groups x d, or groups for 'scalar'): Hyper-SET's
    network gives alpha and gamma of two sublayers from one trunk (Table 6: Linear d x 2d), groups = 2."""
    state_norm: bool = True
    """RMS-normalise the conditioning state before it meets the index embedding (the released image
    code's ``ln_inp``); false: add it as it is (the released Sudoku code, ``c + x_inp``). Its eps is float32's
    machine epsilon in every dtype (torch's default in float32 training; the dtype's own made a float64 or bf16
    model another function: 75 % off η at a state of RMS 1e-4, probe AD)"""

    @field_validator("embed_dim")
    @classmethod
    def _even(cls, v: int) -> int:
        if v % 2:
            raise ValueError("must be even (sin and cos halves)")
        return v

    def reads_block_state(self) -> bool:
        """Whether eta depends on the block's own start point or iterate (condition x0 / iterate), not only on
        the step index and the forward context: a look-ahead rule must then know that start point before it
        computes the η of its look-ahead (:func:`~energyformer.core.momentum.check_lookahead_start`)."""
        return self.condition in ("x0", "iterate")


def timestep_freqs(half: int, max_period: float) -> Tensor:
    """f_k = max_period^(-k/half), k < half, in float64 (the time embedding's frequencies)."""
    return torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float64) / half)


def sinusoidal_embedding(index: int, freqs: Tensor) -> Tensor:
    """[sin(index * f), cos(index * f)] with f_k = max_period^(-k/half): (2 * half,)."""
    arg = freqs * float(index)
    return torch.cat([torch.sin(arg), torch.cos(arg)])


def sinusoidal_table(n: int, freqs: Tensor) -> Tensor:
    """:func:`sinusoidal_embedding` of the indices 0 … n−1 as rows: (n, 2 * half)."""
    at = torch.promote_types(freqs.dtype, torch.float32)  # indices exact (bf16 holds integers only to 256)
    arg = (torch.arange(n, dtype=at, device=freqs.device).unsqueeze(1) * freqs).to(freqs.dtype)  # (n, half)
    return torch.cat([torch.sin(arg), torch.cos(arg)], dim=-1)


@STEP_SIZES.register("network", NetworkStepSizeConfig)
class NetworkStepSize(StepSize):
    """eta_t(s) = base + W_o GELU(tau(t) + RMSNorm(s)), tau(t) = W_2 GELU(W_1 sin-emb(t)); state_norm: false -> + s.

    ``state_norm=False`` (Hyper-SET's configs) drops the RMSNorm (eta_t(s) = base + W_o GELU(tau(t) + s)), as the
    released Sudoku code does: with a short state (an embedding of scale 0.02) the output then starts nearly
    state-independent and grows at about the rate of its bias; with the norm every weight of W_o moves
    it as much as the bias (Adam), ten times faster at d = 64 (issue 20, docs/results/hyperset/plateau).

    Our reading of Hyper-SET §4.3 Eq. 12 and App. D.1 (Table 6: time embedding 512, Linear 512 x d,
    GELU, Linear d x d, GELU, Linear d x 2d; the released code adds the normalised input to the time
    embedding before the last GELU). One module per block, so the output is d (``output='vector'``)
    or 1 (``'scalar'``) per token instead of Hyper-SET's 2d (alpha and gamma of two sublayers).
    ``s`` is the block's x0, the current iterate, the model input or the layer input
    (``condition``; the last two come from the forward context). The index is 0-based
    (Hyper-SET counts t = 1..L). No sign constraint (Hyper-SET App. F), so ``exact`` is False.

    Zero initialisation (Bachlechner et al. 2021, as Hyper-SET) makes the first forward take steps of
    exactly ``base`` (zero by default). ``'output'`` zeroes only W_o and its bias (every other layer
    still receives gradient after the first update of W_o). ``'all'`` zeroes every Linear, the
    literal reading of "zero-initialization of network parameters"; then W_1, b_1 and W_2 get no
    gradient ever (GELU(0) = 0 and W_2 = 0 block each other's gradient), so the step size learns to
    depend on the state but never on the index; ``tests/core/test_stepsize.py`` shows it.
    """

    exact = False

    def __init__(self, dim: int, embed_dim: int = 64, condition: str = "x0", output: str = "vector",
                 zero_init: str = "output", base: float = 0.0, max_period: float = 10000.0,
                 groups: int = 1, state_norm: bool = True):
        super().__init__()
        cfg = NetworkStepSizeConfig(embed_dim=embed_dim, condition=condition, output=output, zero_init=zero_init,
                                    base=base, groups=groups, state_norm=state_norm)  # validates the options
        check_int("dim", dim, min=1)
        self.dim, self.condition, self.output, self.base = dim, cfg.condition, cfg.output, float(base)
        self.groups, self.zero_init = cfg.groups, cfg.zero_init
        half = embed_dim // 2
        self.freqs = ExactTable(functools.partial(timestep_freqs, half, max_period))  # (half,), exact in every dtype
        self.time_in = nn.Linear(embed_dim, dim)   # W_1
        self.time_out = nn.Linear(dim, dim)        # W_2
        self.state_norm = nn.RMSNorm(dim, eps=torch.finfo(torch.float32).eps) if cfg.state_norm else nn.Identity()
        self.out = nn.Linear(dim, cfg.groups * (1 if output == "scalar" else dim))  # W_o
        self.after_model_init()

    def after_model_init(self) -> None:
        """(Re-)apply the zero initialisation. Models that re-initialise every Linear call this
        hook afterwards (:class:`~energyformer.models.wrapper.TokenModel`), so a step-size network
        inside a model still starts at eta = base."""
        zeroed = {"none": (), "output": (self.out,), "all": (self.time_in, self.time_out, self.out)}
        with torch.no_grad():
            for lin in zeroed[self.zero_init]:
                nn.init.zeros_(lin.weight)
                nn.init.zeros_(lin.bias)

    @classmethod
    def from_config(cls, cfg: NetworkStepSizeConfig, dim: int) -> NetworkStepSize:
        return cls(dim, cfg.embed_dim, cfg.condition, cfg.output, cfg.zero_init, cfg.base, groups=cfg.groups,
                   state_norm=cfg.state_norm)

    @property
    def needs_context(self) -> bool:  # type: ignore[override]
        return self.condition in ("input", "layer") or self.groups > 1

    def state(self, x0: Tensor, x: Tensor, ctx: Any) -> Tensor:
        """The conditioning state s (B, N, D) chosen by ``condition``."""
        if self.condition == "iterate":
            return x
        if ctx is not None:
            s = ctx.embedded if self.condition == "input" else ctx.layer_input if self.condition == "layer" else None
            if s is not None:
                return s
        return x0

    def conditioning(self, s: Tensor) -> Tensor:
        """RMSNorm(s) (or s) in the dtype the network's matmuls run in: the weights', or the autocast dtype
        when autocast lowers them. The sum with tau and its GELU then run in that dtype, as the out-projection
        reads them anyway: under bf16 autocast a float32 s would make the (steps, B, N, D) sum, its GELU and
        their backward float32, and cast the GELU back for the matmul (docs/hyperset.md, "Speed")."""
        w = self.time_in.weight
        return self.state_norm(s.to(w.dtype)).to(autocast_dtype(w.dtype, s.device.type))

    def net(self, index: int, s: Tensor) -> Tensor:
        """base + W_o GELU(tau(index) + RMSNorm(s)): (B, N, groups * D) or (B, N, groups)."""
        eta = self._net_groups(index, s)
        return torch.cat(eta, dim=-1) if self.groups > 1 else eta[0]

    def _net_groups(self, index: int, s: Tensor, tau: Tensor | None = None) -> tuple[Tensor, ...]:
        """:meth:`net` split into its groups (:meth:`out_groups`); ``tau``: tau(index) (D,) if already known
        (:meth:`_tau_row`), else computed here."""
        if tau is None:
            w = self.time_in.weight
            emb = sinusoidal_embedding(index, self.freqs().to(w.dtype))  # (E,)
            tau = self.time_out(F.gelu(self.time_in(emb)))  # (D,)
        c = self.conditioning(s)  # (B, N, D)
        return self.out_groups(F.gelu(tau.to(c.dtype) + c))  # h: (B, N, D)

    def out_groups(self, h: Tensor) -> tuple[Tensor, ...]:
        """base + W_o h split into the groups: each (…, D) or (…, 1), each **contiguous**. One Linear per
        group on its rows of W_o (the same products) rather than one Linear whose output is chunked: a chunk
        of the last axis is a strided view, and each ⊙ that reads it — α ⊙ d and γ ⊙ f forward, and their
        backward, 4 per Hyper-SET iteration — runs PyTorch's non-vectorised elementwise kernel on CUDA (the
        H100 profile's ``elementwise_kernel<128, 4>`` rows at 4 calls per iteration,
        ``docs/results/hyperset/gpu_h100/gpu_profile_83f4ef8.md``); the chunk's backward was a cat per
        iteration."""
        if self.groups == 1:
            eta = (self.out(h),)
        else:
            # cast whole, then split: autocast would cast each part (not a leaf, so not cached) per call
            w = self.out.weight.to(h.dtype).unflatten(0, (self.groups, -1)).unbind(0)  # groups x (D | 1, D)
            b = self.out.bias.to(h.dtype).unflatten(0, (self.groups, -1)).unbind(0)
            eta = tuple(F.linear(h, wg, bg) for wg, bg in zip(w, b))
        return tuple(e + self.base for e in eta) if self.base else eta

    def table(self, n: int, s: Tensor) -> tuple[tuple[Tensor, ...], ...]:
        """The step sizes of indices 0 … n−1 for one state s, all at once: ``table[t][g]`` is group g of
        step t, (B, N, D) or (B, N, 1). The same function as :meth:`net` per index, evaluated as one
        (n, E) time embedding, one (n, B, N, D) GELU and one out-projection instead of n of each."""
        tau = self.tau_table(n)  # (n, D)
        c = self.conditioning(s)  # (B, N, D)
        h = F.gelu(tau.view(n, 1, 1, -1).to(c.dtype) + c)  # (n, B, N, D)
        groups = [g.unbind(0) for g in self.out_groups(h)]  # per group (n, B, N, 1 | D): one backward stack each
        return tuple(zip(*groups))

    def tau_table(self, n: int) -> Tensor:
        """tau(t) = W_2 GELU(W_1 sin-emb(t)) of the indices 0 … n−1 as rows, (n, D): the part of the network that
        depends on the weights and the index only, as one (n, E) embedding and one matmul pair."""
        w = self.time_in.weight
        emb = sinusoidal_table(n, self.freqs().to(w.dtype))  # (n, E)
        return self.time_out(F.gelu(self.time_in(emb)))  # (n, D)

    def _tau_row(self, index: int, ctx: Any) -> Tensor | None:
        """tau(index) (D,) from one :meth:`tau_table` per forward pass (``ctx.memo``; None for a forward of one index:
        ``ctx.iterations`` 1, index 0). It was recomputed per iteration and step, forward and backward (probe AA, F3).
        Rows of the table are the per-index values up to the matmul's order of sums. Reused only while the grad
        mode (no_grad: no graph), the Linears' run dtype (autocast), dtype, device and version counters (an
        optimiser step writes in place) and ``ctx.embedded`` (set anew by each forward of a model: never a graph a
        past backward freed) match; an index past it rebuilds it at least twice as long (several steps)."""
        if ctx.iterations <= 1 and index == 0:
            return None
        lin = (self.time_in.weight, self.time_in.bias, self.time_out.weight, self.time_out.bias)
        w = lin[0]
        # (under torch.compile the version counters are symbolic, a data-dependent compare: left out there, where
        # the model builds its ctx inside the compiled forward anyway)
        versions = () if torch.compiler.is_compiling() else tuple(p._version for p in lin)
        stamp = (autocast_dtype(w.dtype, w.device.type), tuple((p.dtype, p.device) for p in lin), versions)
        key = (id(self), "tau", torch.is_grad_enabled())
        hit = ctx.memo.get(key)
        fresh = hit is not None and hit[0] is ctx.embedded and hit[1] == stamp
        if not fresh or index >= len(hit[2]):
            n = max(ctx.iterations, index + 1, 2 * len(hit[2]) if fresh else 0)
            hit = (ctx.embedded, stamp, self.tau_table(n).unbind(0))  # rows: one stack in the backward
            ctx.memo[key] = hit
        return hit[2][index]

    def value(self, index: int, x0: Tensor, x: Tensor, ctx: Any = None, group: int = 0) -> Tensor:
        """Group ``group`` of step ``index``: (B, N, D) or (B, N, 1).

        Inside a forward pass (``ctx``) the values are computed once per (network, index, state) and kept in
        ``ctx.memo``, split into groups once (both sublayers of a Hyper-SET layer read the same split). With
        ``condition: input`` the state x⁽⁰⁾ is the same for every iteration, so the whole forward's steps
        0 … ``ctx.iterations``−1 come from one :meth:`table` before the first step (work done once per forward
        instead of once per iteration); an index past the table (more than one step per iteration) is
        computed on its own (its index part tau(t), as with other conditions, from one table: :meth:`_tau_row`).
        The memo is kept per grad mode: the untracked steps of ``backward: truncated`` run under no_grad, and a
        table they built would give the tracked steps values without a graph (the network's gradient lost)."""
        s = self.state(x0, x, ctx)
        if ctx is None:
            return self._net_groups(index, s)[group]
        grad = torch.is_grad_enabled()  # part of every key: a value built under no_grad has no graph (below)
        if self.condition == "input" and s is ctx.embedded:
            key = (id(self), "table", grad)
            hit = ctx.memo.get(key)
            if hit is None or hit[0] is not s:
                hit = (s, self.table(max(ctx.iterations, index + 1), s))
                ctx.memo[key] = hit
            if index < len(hit[1]):
                return hit[1][index][group]
        key = (id(self), index, grad)
        hit = ctx.memo.get(key)
        if hit is None or hit[0] is not s:
            hit = (s, self._net_groups(index, s, self._tau_row(index, ctx)))
            ctx.memo[key] = hit
        return hit[1][group]

    def full(self, index: int, x0: Tensor, x: Tensor, ctx: Any = None) -> Tensor:
        """The whole output (B, N, groups * (1 | D)) of step ``index``."""
        if self.groups == 1:
            return self.value(index, x0, x, ctx)
        return torch.cat([self.value(index, x0, x, ctx, g) for g in range(self.groups)], dim=-1)

    def forward(self, index: int, x0: Tensor, x: Tensor, ctx: Any = None) -> Tensor:
        return self.full(index, x0, x, ctx)

    def group(self, g: int, owner: bool = False) -> StepSizeGroup:
        """A step size giving group ``g`` of this network's output (registered in the view when ``owner``)."""
        return StepSizeGroup(self, g, owner)

    def extra_repr(self) -> str:
        g = f", groups={self.groups}" if self.groups > 1 else ""
        return f"dim={self.dim}, condition={self.condition!r}, output={self.output!r}, base={self.base}{g}"


class StepSizeGroup(StepSize):
    """Group ``g`` of a shared :class:`NetworkStepSize` (Hyper-SET: α = group 0 in the attention,
    γ = group 1 in the feed-forward). The owner view registers the network (``net.*`` parameters);
    other views reference it without registering it, so it is saved and moved once."""

    exact = False
    needs_context = True

    def __init__(self, net: NetworkStepSize, g: int, owner: bool = False):
        super().__init__()
        check_int("group", g, min=0, max=net.groups - 1)
        self.g, self.owner = g, owner
        if owner:
            self.net = net
        else:
            self._shared = (net,)  # a reference, not a submodule

    @property
    def source(self) -> NetworkStepSize:
        return self.net if self.owner else self._shared[0]

    def check_index(self, last: int, *, iteration: int = 0, steps: int = 1) -> None:
        self.source.check_index(last, iteration=iteration, steps=steps)

    def forward(self, index: int, x0: Tensor, x: Tensor, ctx: Any = None) -> Tensor:
        return self.source.value(index, x0, x, ctx, self.g)

    def extra_repr(self) -> str:
        return f"group={self.g}" + ("" if self.owner else ", shared")
