"""Hyper-SET analysis (seed 002 §5.4, App. D.5, F): energies, effective rank and average angle per
iteration, and their plots (energies, rank and angle).

* :func:`effective_rank` — Eq. 17: exp of the entropy of p_i = σ_i / Σ_j σ_j (singular values of the
  N x p matrix of one subspace's tokens).
* :func:`average_angle` — Eq. 18: arccos of the mean pairwise cosine over i < j, in degrees
  (``mode='paper'``); ``mode='code'`` is the released code's mean of the pairwise arccos.
* :func:`iteration_states` — the states x⁰ … x^L of a recurrent-depth token model (its output's hidden states).
* :func:`trajectory` — per iteration t = 0 … L: E_ATTN, E_FF and their sum (per board: summed over
  the tokens, averaged over boards; the energies at the normalised projections, as Fig. 5), and
  per subspace h the effective rank and average angle of RMSNorm(W_hᵀ x^t) (Fig. 6). For a plain
  (GPT or Llama) attention layer the subspaces are its RMS-normalised per-head queries (no energies).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from ..blocks.baselines import GPTAttention, LlamaAttention
from ..blocks.hyperset import HyperSETSublayer
from ..energies.hyperspherical import SubspaceAttentionEnergy
from .figures import save_figure


@torch.no_grad()
def effective_rank(z: Tensor) -> Tensor:
    """Eq. 17 on the last two axes (N, p) of ``z``: exp(−Σ p_i log p_i), p_i = σ_i / Σ σ. Shape z.shape[:-2]
    (on the CPU: a batch of small SVDs is one LAPACK loop there, while CUDA's solver is called once per
    matrix — thousands of calls per iteration for a GPU-scale trajectory)."""
    s = torch.linalg.svdvals(z.detach().to("cpu", torch.float64))
    p = s / s.sum(-1, keepdim=True).clamp_min(1e-300)
    ent = -(p * torch.log(p.clamp_min(1e-300))).sum(-1)
    return ent.exp().to(torch.float32)


@torch.no_grad()
def average_angle(z: Tensor, mode: str = "paper") -> Tensor:
    """Eq. 18 on (…, N, p) in degrees: arccos of the mean pairwise cosine over i < j (``'paper'``), or
    the mean of the pairwise angles (``'code'``, the released code)."""
    if mode not in ("paper", "code"):
        raise ValueError(f"mode = {mode!r}: allowed values are 'paper', 'code'")
    u = F.normalize(z.double(), dim=-1)
    cos = (u @ u.transpose(-1, -2)).clamp(-1.0, 1.0)  # (…, N, N)
    n = z.shape[-2]
    off = ~torch.eye(n, dtype=torch.bool, device=z.device)
    if mode == "paper":
        mean_cos = cos.masked_select(off).reshape(*cos.shape[:-2], -1).mean(-1)
        return torch.rad2deg(torch.arccos(mean_cos)).to(torch.float32)
    ang = torch.arccos(cos).masked_select(off).reshape(*cos.shape[:-2], -1)
    return torch.rad2deg(ang.mean(-1)).to(torch.float32)


@torch.no_grad()
def iteration_states(model: nn.Module, idx: Tensor, iterations: int, **forward) -> list[Tensor]:
    """[x⁰, x¹, …, x^L]: the layer stack's input and its state after every pass (B, N, D) each, read
    from the model's :class:`~energyformer.models.output.ModelOutput` (``hiddens=True``)."""
    return model(idx, iterations=iterations, hiddens=True, **forward).iteration_states()


def has_subspaces(layer: nn.Module) -> bool:
    """Whether :func:`_subspaces` knows the layer's attention (Hyper-SET, GPT, Llama; not ET or CRATE)."""
    attn = layer.attn
    return (isinstance(attn, HyperSETSublayer) and isinstance(attn.energy, SubspaceAttentionEnergy)) or \
        isinstance(attn, (GPTAttention, LlamaAttention))


def _subspaces(layer: nn.Module, x: Tensor) -> Tensor:
    """(B, H, N, p) normalised subspace projections of x for a Hyper-SET, GPT or Llama attention layer."""
    attn = layer.attn
    if isinstance(attn, HyperSETSublayer) and isinstance(attn.energy, SubspaceAttentionEnergy):
        return attn.energy.spherical(x)
    if isinstance(attn, (GPTAttention, LlamaAttention)):  # their per-head queries of the normalised input
        h = attn.norm(x)
        q = attn.c_attn(h)[..., : x.shape[-1]] if isinstance(attn, GPTAttention) else attn.wq(h)
        q = rearrange(q, "b n (h p) -> b h n p", h=attn.heads)
        return F.rms_norm(q, (q.shape[-1],))
    raise TypeError(f"no subspace projections known for attention {type(attn).__name__}")


@torch.no_grad()
def trajectory(model: nn.Module, idx: Tensor, iterations: int, mask: Tensor | None = None) -> dict:
    """Per-iteration statistics of the first layer (module docstring): a dict of lists over t = 0 … L.

    Keys: ``e_attn``, ``e_ff``, ``e_total`` (None entries for layers without energies; x^t's energy with iteration
    t's weights — the energy pass t + 1 descends, the last iteration's past L — which differ only with LoRA),
    ``eff_rank`` and ``angle`` (lists of per-head values), ``full_rank`` (effective rank of the
    whole D-dimensional state, Fig. 6's "full rank").
    """
    model.eval()
    states = iteration_states(model, idx, iterations)
    layer = model.layers[0]
    has_energy = isinstance(layer.attn, HyperSETSublayer) and isinstance(layer.mlp, HyperSETSublayer)
    out = {k: [] for k in ("e_attn", "e_ff", "e_total", "eff_rank", "angle", "full_rank")}
    for t, x in enumerate(states):
        if has_energy:
            it = max(0, min(t, iterations - 1))
            ea = float(layer.attn.energy_at(x, it, mask).sum(-1).mean())
            ef = float(layer.mlp.energy_at(x, it, mask).sum(-1).mean())
            out["e_attn"].append(ea)
            out["e_ff"].append(ef)
            out["e_total"].append(ea + ef)
        else:
            for k in ("e_attn", "e_ff", "e_total"):
                out[k].append(None)
        z = _subspaces(layer, x)  # (B, H, N, p)
        out["eff_rank"].append(effective_rank(z).mean(0).tolist())
        out["angle"].append(average_angle(z).mean(0).tolist())
        out["full_rank"].append(float(effective_rank(x).mean()))
    return out


# ------------------------------------------------------------------------------------------ plots
def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_energies(traj: dict, train_iterations: int, path, title: str = "") -> None:
    """E_ATTN, E_FF and the total per iteration (three panels), Fig. 5's layout."""
    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.2))
    ts = list(range(len(traj["e_attn"])))
    for ax, key, name in zip(axes, ("e_attn", "e_ff", "e_total"), ("E_ATTN", "E_FF", "E_ATTN + E_FF")):
        v = traj[key]
        # t = 0 is the embedding x⁰, which the paper's Fig. 5 leaves out (its code records each iteration's output)
        ax.plot(ts[:2], v[:2], ls=":", lw=1, color="C0")
        ax.plot(ts[1:], v[1:], marker=".", color="C0")
        ax.plot(ts[:1], v[:1], marker="o", mfc="none", ls="", color="C0", label="x⁰ (not in Fig. 5)")
        ax.axvline(train_iterations, color="grey", ls="--", lw=1)
        ax.set_xlabel("iteration t")
        ax.set_title(name)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(title or "energy per iteration (per board, at the normalised projections)")
    fig.tight_layout()
    save_figure(fig, path, dpi=120)


def plot_rank_angle(trajs: dict[str, dict], train_iterations: int, path, title: str = "") -> None:
    """Effective rank and average angle per iteration: mean over subspaces (line) and range (band)."""
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
    for name, tr in trajs.items():
        ts = list(range(len(tr["eff_rank"])))
        for ax, key in zip(axes, ("eff_rank", "angle")):
            v = torch.tensor(tr[key])  # (T, H)
            ax.plot(ts, v.mean(1), marker=".", label=name)
            ax.fill_between(ts, v.amin(1), v.amax(1), alpha=0.2)
    axes[0].set_title("effective rank per subspace (Eq. 17)")
    axes[1].set_title("average angle per subspace, degrees (Eq. 18)")
    for ax in axes:
        ax.axvline(train_iterations, color="grey", ls="--", lw=1)
        ax.set_xlabel("iteration t")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(title or "subspace geometry of the tokens")
    fig.tight_layout()
    save_figure(fig, path, dpi=120)


def is_decreasing(values: Sequence[float], upto: int | None = None, tol: float = 0.0) -> bool:
    """Whether ``values[:upto+1]`` never rises by more than ``tol`` (relative to the first value's scale)."""
    v = list(values[: None if upto is None else upto + 1])
    scale = max(1e-12, abs(v[0])) if v else 1.0
    return all(b <= a + tol * scale for a, b in zip(v, v[1:]))
