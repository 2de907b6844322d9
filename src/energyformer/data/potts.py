"""Generalised Potts model with factorised couplings: parameters, exact conditionals, Gibbs sampling.

Source: Rende, Gerace, Laio & Goldt, "Optimal inference of a generalised Potts model by
single-layer transformers with factored attention" (Phys. Rev. Research 6, 023057, 2024; arXiv
2304.07235), as reconstructed in ``specs/reconstructed.md`` §2.2. Colours are ``0 .. C-1`` here
(the paper writes ``1 .. C``).

* Sequences ``s in {0..C-1}^L``; couplings factorise over sites and colours, ``J_ij(a, b) = J_ij U_ab``.
* ``H(s) = -sum_{i<j} J_ij U[s_i, s_j] - sum_i h_i[s_i]``,  ``P(s) = exp(-beta H(s)) / Z``.
* ``J`` (L x L) symmetric with zero diagonal, entries ``N(0, 1/L)``, optionally sparsified;
  ``U`` (C x C) symmetric, entries ``N(0, 1)``; fields ``h`` (L x C) optional (default 0);
  [REC] ``L = 20, C = 10, beta = 1``.
* Exact conditional (the Gibbs update and the exact masked-token target):
  ``P(s_i = a | s_-i) = softmax_a(beta sum_{j != i} J_ij U[a, s_j] + beta h_i[a])``.
* The Bayes-optimal masked-token loss is the conditional entropy ``E_s[-log P(s_i | s_-i)]``
  (averaged over sites), estimated by Monte Carlo from samples, or exactly by enumeration for tiny
  ``(L, C)``.

The data sets drawn from it (config, files, cache) are :mod:`energyformer.data.potts_dataset`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from energyformer.data.batching import derive_seed
from energyformer.errors import DataError
from energyformer.utils.validate import check_float, check_int

#: Largest number of states :meth:`PottsModel.enumerate` will list (C ** L).
MAX_ENUMERATE = 2 ** 22


def _generator(seed: int, *parts: object, device: torch.device | str | None = None) -> torch.Generator:
    g = torch.Generator(device=device if device is not None else "cpu")
    return g.manual_seed(derive_seed("potts", seed, *parts))


@dataclass(frozen=True, eq=False)
class PottsModel:
    """Parameters of a generalised Potts model: ``J (L, L)``, ``U (C, C)``, ``h (L, C)``, ``beta``.

    Validated at construction: shapes, finiteness, symmetry of J and U, zero diagonal of J.
    All tensors share the dtype and device of ``J`` (float64 recommended for exact checks).
    """

    J: torch.Tensor
    U: torch.Tensor
    h: torch.Tensor | None = None
    beta: float = 1.0

    def __post_init__(self) -> None:
        J, U = self.J, self.U
        if not isinstance(J, torch.Tensor) or J.dim() != 2 or J.shape[0] != J.shape[1] or J.shape[0] < 2:
            raise DataError(f"Potts J must be a square (L, L) tensor with L >= 2; got shape "
                            f"{tuple(getattr(J, 'shape', ()))}")
        if not isinstance(U, torch.Tensor) or U.dim() != 2 or U.shape[0] != U.shape[1] or U.shape[0] < 2:
            raise DataError(f"Potts U must be a square (C, C) tensor with C >= 2; got shape "
                            f"{tuple(getattr(U, 'shape', ()))}")
        if not J.is_floating_point():
            raise DataError(f"Potts J must be floating point; got {J.dtype}")
        L, C = J.shape[0], U.shape[0]
        U = U.to(J)
        h = torch.zeros(L, C, dtype=J.dtype, device=J.device) if self.h is None else self.h.to(J)
        if h.shape != (L, C):
            raise DataError(f"Potts h must have shape (L, C) = ({L}, {C}); got {tuple(h.shape)}")
        for name, t in (("J", J), ("U", U), ("h", h)):
            if not bool(torch.isfinite(t).all()):
                raise DataError(f"Potts {name} has non-finite entries")
        tol = 1e-6 if J.dtype in (torch.float16, torch.bfloat16, torch.float32) else 1e-10
        for name, t in (("J", J), ("U", U)):
            asym = float((t - t.T).abs().max())
            if asym > tol * max(1.0, float(t.abs().max())):
                raise DataError(f"Potts {name} must be symmetric; max |{name} - {name}^T| = {asym:.3g}")
        if float(J.diagonal().abs().max()) != 0.0:
            raise DataError("Potts J must have a zero diagonal (no self-coupling J_ii)")
        check_float("Potts beta", self.beta, min=0.0)
        object.__setattr__(self, "U", U)
        object.__setattr__(self, "h", h)
        object.__setattr__(self, "beta", float(self.beta))

    @property
    def L(self) -> int:
        """Sequence length (number of sites)."""
        return int(self.J.shape[0])

    @property
    def C(self) -> int:
        """Number of colours."""
        return int(self.U.shape[0])

    def to(self, device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> PottsModel:
        """A copy on ``device`` / in ``dtype``."""
        return PottsModel(self.J.to(device=device, dtype=dtype), self.U.to(device=device, dtype=dtype),
                          self.h.to(device=device, dtype=dtype), self.beta)

    # ---------------------------------------------------------------------------- checks
    def check_states(self, s: torch.Tensor, name: str = "states") -> torch.Tensor:
        """Validate integer states ``(n, L)`` with colours in ``[0, C)``; returns them as long."""
        if not isinstance(s, torch.Tensor) or s.dim() != 2 or s.shape[1] != self.L:
            raise DataError(f"Potts {name} must be an (n, L = {self.L}) tensor; got shape "
                            f"{tuple(getattr(s, 'shape', ()))}")
        if s.is_floating_point() or s.is_complex() or s.dtype == torch.bool:
            raise DataError(f"Potts {name} must hold integer colours; got {s.dtype}")
        if s.numel() and (int(s.min()) < 0 or int(s.max()) >= self.C):
            raise DataError(f"Potts {name} has colours in [{int(s.min())}, {int(s.max())}]; "
                            f"allowed [0, {self.C - 1}]")
        return s.long().to(self.J.device)

    # ----------------------------------------------------------------------- quantities
    def energy(self, s: torch.Tensor) -> torch.Tensor:
        """``H(s) = -sum_{i<j} J_ij U[s_i, s_j] - sum_i h_i[s_i]`` for states ``(n, L)`` -> ``(n,)``."""
        s = self.check_states(s)
        Us = self.U[s]  # (n, L, C): row U[s_i, :]
        pair = torch.gather(Us, 2, s[:, None, :].expand(-1, self.L, -1))  # (n, L, L): U[s_i, s_j]
        inter = 0.5 * (self.J * pair).sum(dim=(1, 2))  # J symmetric, zero diagonal: = sum_{i<j}
        field = self.h[torch.arange(self.L, device=s.device), s].sum(-1)  # (n,)
        return -inter - field

    def local_fields(self, s: torch.Tensor) -> torch.Tensor:
        """``f_i(a) = sum_{j != i} J_ij U[a, s_j] + h_i[a]`` for states ``(n, L)`` -> ``(n, L, C)``."""
        s = self.check_states(s)
        return torch.einsum("ij,nja->nia", self.J, self.U.T[s]) + self.h  # U.T[s][n,j,a] = U[a,s_j]

    def conditional_logits(self, s: torch.Tensor) -> torch.Tensor:
        """``beta f_i(a)``: logits of ``P(s_i = a | s_-i)``, shape ``(n, L, C)`` (s_i itself unused)."""
        return self.beta * self.local_fields(s)

    def conditional_log_probs(self, s: torch.Tensor) -> torch.Tensor:
        """``log P(s_i = a | s_-i)``, shape ``(n, L, C)``."""
        return torch.log_softmax(self.conditional_logits(s), dim=-1)

    def masked_token_nll(self, s: torch.Tensor) -> torch.Tensor:
        """``-log P(s_i | s_-i)`` at the observed colours, shape ``(n, L)`` (the MLM loss of a
        Bayes-optimal predictor, site by site)."""
        s = self.check_states(s)
        return -self.conditional_log_probs(s).gather(2, s[..., None])[..., 0]

    # ------------------------------------------------------------------------ enumeration
    def all_states(self) -> torch.Tensor:
        """Every state ``(C ** L, L)`` in lexicographic order (site 0 most significant)."""
        n = self.C ** self.L
        if n > MAX_ENUMERATE:
            raise DataError(f"Potts enumeration of C^L = {self.C}^{self.L} states exceeds "
                            f"{MAX_ENUMERATE}; use a smaller model or Monte Carlo")
        idx = torch.arange(n, device=self.J.device)
        powers = self.C ** torch.arange(self.L - 1, -1, -1, device=self.J.device)
        return (idx[:, None] // powers) % self.C

    def enumerate(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Exact joint: ``(states (C^L, L), log P(states) (C^L,))``."""
        states = self.all_states()
        logw = -self.beta * self.energy(states)
        return states, logw - torch.logsumexp(logw, 0)

    def exact_bayes_loss(self) -> float:
        """Conditional entropy ``sum_s P(s) mean_i(-log P(s_i | s_-i))`` by enumeration."""
        states, logp = self.enumerate()
        return float((logp.exp() * self.masked_token_nll(states).mean(-1)).sum())

    # ------------------------------------------------------------------------ persistence
    def tensors(self) -> dict[str, torch.Tensor]:
        """``{'J', 'U', 'h'}`` (contiguous, CPU)."""
        return {k: getattr(self, k).detach().cpu().contiguous() for k in ("J", "U", "h")}


def random_potts(L: int = 20, C: int = 10, *, beta: float = 1.0, seed: int = 0,
                 sparsity: float = 0.0, field_std: float = 0.0,
                 dtype: torch.dtype = torch.float64) -> PottsModel:
    """Seeded random parameters (§2.2 [REC]).

    ``J_ij = J_ji ~ N(0, 1/L)`` for ``i < j``, each pair zeroed with probability ``sparsity``;
    ``J_ii = 0``; ``U_ab = U_ba ~ N(0, 1)`` (diagonal included); ``h_i[a] ~ N(0, field_std^2)``.
    """
    check_int("Potts L", L, min=2)
    check_int("Potts C", C, min=2)
    check_int("Potts seed", seed)
    check_float("Potts sparsity", sparsity, min=0.0, max=1.0)
    check_float("Potts field_std", field_std, min=0.0)
    g = _generator(seed, "couplings")
    upper = torch.triu(torch.randn(L, L, generator=g, dtype=torch.float64), diagonal=1) / math.sqrt(L)
    keep = torch.rand(L, L, generator=g, dtype=torch.float64) >= sparsity
    upper = upper * torch.triu(keep, diagonal=1)
    J = upper + upper.T
    G = torch.randn(C, C, generator=g, dtype=torch.float64)
    U = torch.triu(G) + torch.triu(G, diagonal=1).T
    h = field_std * torch.randn(L, C, generator=g, dtype=torch.float64)
    return PottsModel(J.to(dtype), U.to(dtype), h.to(dtype), beta)


#: Chains are simulated in blocks whose ``(L, C, chains)`` field tensor holds about this many
#: entries (cache-sized on a CPU; at least 1024 chains a block). Block ``k`` draws its random numbers
#: from a generator seeded with ``(seed, k)``, so samples depend on ``(seed, L, C)`` but not on ``n``.
GIBBS_BLOCK_ENTRIES = 2 ** 19


def gibbs_block_size(L: int, C: int) -> int:
    """Chains per block: ``max(1024, GIBBS_BLOCK_ENTRIES // (L * C))``."""
    return max(1024, GIBBS_BLOCK_ENTRIES // (L * C))


def _gibbs_block(J: torch.Tensor, UT: torch.Tensor, bh: torch.Tensor, beta: float, s: torch.Tensor,
                 g: torch.Generator, sweeps: int) -> None:
    """Run ``sweeps`` systematic-scan sweeps in place on states ``s`` stored site-major ``(L, M)``."""
    L, M = s.shape
    C = UT.shape[0]
    colours = torch.arange(C, device=s.device)[None, :, None]  # (1, C, 1)
    for _ in range(sweeps):
        # N[i, b, m] = sum_j J_ij [s_jm = b], computed exactly once per sweep and then updated as
        # sites change, so site i's logits are beta * (U N[i])[a, m] + beta h_i[a]   (C, M).
        N = (J @ (s[:, None, :] == colours).to(J.dtype).reshape(L, C * M)).reshape(L, C, M)
        u = torch.rand(L, M, generator=g, device=s.device, dtype=J.dtype)
        for i in range(L):
            logits = torch.addmm(bh[i][:, None], UT.T, N[i], alpha=beta)  # (C, M); J_ii = 0
            p = (logits - logits.amax(0)).exp_().cumsum_(0)  # unnormalised CDF over colours
            new = (p < u[i] * p[-1]).sum(0).clamp_max_(C - 1)  # inverse-CDF draw, (M,)
            col = J[:, i, None, None].expand(L, 1, M)
            N.scatter_add_(1, s[i].expand(L, 1, M), -col)
            N.scatter_add_(1, new.expand(L, 1, M), col)
            s[i] = new


def gibbs_sample(model: PottsModel, n: int, *, burn_in: int = 1000, thin: int = 10,
                 samples_per_chain: int = 1, seed: int = 0, init: torch.Tensor | None = None,
                 dtype: torch.dtype = torch.float32,
                 device: torch.device | str | None = None) -> torch.Tensor:
    """``n`` samples ``(n, L)`` (long) from ``P(s)`` by systematic-scan Gibbs sampling.

    ``M = ceil(n / samples_per_chain)`` independent chains, vectorised (in blocks of
    :func:`gibbs_block_size` chains). Each starts uniformly at random (or from ``init``,
    ``(M, L)``), makes ``burn_in`` sweeps (a sweep updates sites ``0 .. L-1`` in turn, each drawn from the exact
    conditional ``softmax_a(beta sum_j J_ij U[a, s_j] + beta h_i[a])``), then records one sample
    every ``thin`` sweeps. Output is chain-major: sample ``t`` of chain ``m`` is row
    ``m * samples_per_chain + t`` (truncated to ``n``). ``dtype`` is the compute precision of
    the conditionals (float32: probability errors ~1e-7, far below any Monte-Carlo noise).
    Random numbers come from generators on ``device`` seeded from ``(seed, block)``.
    """
    check_int("gibbs n", n, min=1)
    check_int("gibbs burn_in", burn_in, min=0)
    check_int("gibbs thin", thin, min=1)
    check_int("gibbs samples_per_chain", samples_per_chain, min=1)
    check_int("gibbs seed", seed)
    m = model.to(device, dtype)
    dev = m.J.device
    M = -(-n // samples_per_chain)
    if init is not None:
        init = m.check_states(init, "init")
        if init.shape[0] != M:
            raise DataError(f"gibbs init has {init.shape[0]} chains; need M = ceil(n / "
                            f"samples_per_chain) = {M}")
    UT, bh = m.U.T.contiguous(), m.beta * m.h
    out = torch.empty(M, samples_per_chain, m.L, dtype=torch.long, device=dev)
    block = gibbs_block_size(m.L, m.C)
    for k, lo in enumerate(range(0, M, block)):
        hi = min(M, lo + block)
        g = _generator(seed, "gibbs", k, device=dev)
        s = (torch.randint(0, m.C, (m.L, hi - lo), generator=g, device=dev) if init is None
             else init[lo:hi].T.contiguous())  # (L, M_block), site-major
        _gibbs_block(m.J, UT, bh, m.beta, s, g, burn_in)
        for t in range(samples_per_chain):
            if t > 0:
                _gibbs_block(m.J, UT, bh, m.beta, s, g, thin)
            out[lo:hi, t] = s.T
    return out.reshape(M * samples_per_chain, m.L)[:n]


def chain_autocorrelation(model: PottsModel, lags: tuple[int, ...] = (1, 2, 5, 10), *,
                          chains: int = 512, burn_in: int = 200, seed: int = 0) -> dict[int, float]:
    """Autocorrelation of the energy ``H(s)`` between sweeps ``t`` and ``t + lag`` of stationary
    Gibbs chains (pooled over ``chains``): a check that ``thin`` makes samples near independent."""
    span = max(lags) * 4
    s = gibbs_sample(model, chains * span, burn_in=burn_in, thin=1, samples_per_chain=span, seed=seed)
    e = model.energy(s).double().reshape(chains, span)
    e = e - e.mean()
    var = float(e.square().mean())
    return {k: float((e[:, :-k] * e[:, k:]).mean()) / var for k in lags}


def bayes_loss(model: PottsModel, samples: torch.Tensor) -> tuple[float, float]:
    """Monte-Carlo Bayes-optimal masked-token loss from samples of ``P``: ``(mean, standard error)``.

    Each sample contributes ``mean_i(-log P(s_i | s_-i))``; the standard error treats samples as
    independent (true for one sample per chain), so it is a lower bound for thinned chains.
    """
    per = model.masked_token_nll(samples).double().mean(-1)  # (n,)
    se = float(per.std() / math.sqrt(per.numel())) if per.numel() > 1 else float("inf")
    return float(per.mean()), se


def empirical_distribution(model: PottsModel, samples: torch.Tensor) -> torch.Tensor:
    """Frequencies of each state (index as in :meth:`PottsModel.all_states`), shape ``(C ** L,)``."""
    s = model.check_states(samples)
    powers = model.C ** torch.arange(model.L - 1, -1, -1, device=s.device)
    counts = torch.bincount((s * powers).sum(-1), minlength=model.C ** model.L)
    return counts.double() / s.shape[0]
