"""EqT coherence energies over a token window (equilibrium transformer, seed 003 §3.3.1-3.3.2;
reconstructed.md §3).

The refinement of the equilibrium transformer descends a learned energy ℒ(h; x_≤t) of the hidden
state h_t of every token t (Eq. 11, ℒ = Σ λ_i ℒ_i). This module holds the two terms that read the
recent context; :mod:`energyformer.energies.coherence_pointwise` holds the terms that read h_t alone.

* :class:`ReversePredictionEnergy` ``coherence_rev`` (Eq. 12, reverse predictive coding): h_t must
  let a reverse model q_φ re-predict the last W_t = min(W, t) tokens,

      ℒ_rev(h_t) = −(1/W_t) Σ_{i = t−W_t+1}^{t} log q_φ(x_i | h_t, x_{<i})

  q_φ: a small causal transformer over the token sequence (its own attention / FFN weights; the
  model's token embedding shared for its inputs and its tied output) gives u_i from x_{<i}; the
  prediction of x_i from (h_t, u_i, offset t − i) is its read-out (``readout``).
* :class:`MaskedReconstructionEnergy` ``coherence_mask`` (Eq. 13): 15% of the window is masked and a
  2-layer MLP p_ψ reconstructs each masked token from h_t and the unmasked window:

      ℒ_mask(h_t) = −(1/|M_t|) Σ_{i ∈ M_t} log p_ψ(x_i | h_t, x_{≤t∖M_t})

Both are per token: ℒ_t depends on h_t and on x_{≤t} only, so the gradient of Σ_t ℒ_t w.r.t. h_t
is ∂ℒ_t/∂h_t and the refined state of token t never sees a later token. Their context is a
:class:`CoherenceContext` (token ids, the proposal f, a mask generator). ``prepare`` does every
h-free piece once per block call (q_φ's transformer pass, gathers, the random mask, the h-free
half of each first layer, the folded read-out keys); a step runs only the h-dependent remainder.
Gradients are closed form (``grad``: the bilinear ℒ_rev and ℒ_mask; autograd for the ``'mlp'``
read-out), tested equal to autograd of ``energy`` in float64; both energies are exact (the update
is −∇ℒ).

Choices where the source is ambiguous (flags; defaults as recommended by reconstructed.md §3 or,
where it is silent, for cost):

* ``window`` W = 32, truncated to the t available tokens. Window slot k holds position i = t − k.
* q_φ's context: x_{<i} is the *whole* prefix (Eq. 12 as written), read by one causal transformer
  pass over the sequence (O(N), not O(N·W)); the window only chooses which x_i are scored.
* Reverse ``readout``: ``'bilinear'`` (default) logit_v = e_vᵀ(B u'_ik) + e_vᵀ((G u'_ik) ∘ (A h_t)),
  u'_ik = u_i + r_k (r_k a learned offset embedding): the context u picks which directions of A h_t
  encode x_i. Logits are affine in h_t, so ℒ_rev is *convex in h* and a step costs O(W·(V−1)·d)
  per token (A and e_v − e_0 folded into the keys once per call, see ``_bilinear_logits``). ``'mlp'``: z = u'_ik + A h_t through a residual GELU MLP and a LayerNorm, logits z Eᵀ
  (non-convex, O(W·d·hidden) per token and step).
* Masked context: the seed's p_ψ is "a 2-layer MLP"; how x_{≤t∖M} enters it is not given. Here the
  unmasked window enters as one vector s_t = (1/W_t) Σ_k g_k ∘ ẽ_{t−k} (ẽ the token embedding, or a
  learned [MASK] vector where masked; g_k a learned per-slot gain) and the MLP reads
  h_t + q_k + s_t (q_k a learned query of the masked slot). At least one slot is masked per token;
  the mask is drawn once per block call (fixed during the K steps, so ℒ is one function of h).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..core.attention import sdpa
from ..core.energy import Energy, register_energy
from ..utils.validate import check_choice, check_float, check_int

READOUTS = ("bilinear", "mlp")


@dataclass
class CoherenceContext:
    """What the coherence energies read besides h (``energy.prepare(context)``).

    tokens:    (B, N) long token ids x.
    proposal:  (B, N, D) the proposal f of the forward block (memory relevance); optional.
    generator: torch.Generator of the random mask (None: torch's global RNG).
    mask:      (B, N) bool, True = real token (the model's key-padding mask); None: every token is real.
               A padded position is in no real token's window (nor q_φ's context) and has no energy.
    shared_mask: one random-mask draw for every row (evaluation's reproducible mask: a row's output does not
               depend on its batch or its place in it); False: a draw per row (training).
    """

    tokens: Tensor
    proposal: Tensor | None = None
    generator: torch.Generator | None = None
    mask: Tensor | None = None
    shared_mask: bool = False


class SharedModules:
    """Mixin: hold modules owned by the model (embedding, head, final norm) without registering them.

    A module given at construction is *shared*: used, not owned (its parameters belong to the
    model, appear once in ``state_dict`` and are trained through the model). Without one, the
    energy builds and owns its own (standalone use, the property tests).
    """

    def _hold(self, name: str, module: nn.Module | None, factory) -> None:
        if module is None:
            setattr(self, f"own_{name}", factory())
        else:
            object.__setattr__(self, f"_shared_{name}", (module,))

    def _held(self, name: str) -> nn.Module:
        shared = self.__dict__.get(f"_shared_{name}")
        return shared[0] if shared is not None else getattr(self, f"own_{name}")


def window_positions(n: int, window: int, device=None) -> tuple[Tensor, Tensor, Tensor]:
    """Slots of the window of every position t: slot k holds position t − k, k < W_t = min(W, t + 1).

    Returns ``pos`` (N, W) long (padding slots point at t itself, so gathers stay in range),
    ``valid`` (N, W) bool and ``count`` (N,) = W_t (0-based t).
    """
    t = torch.arange(n, device=device)[:, None]             # (N, 1)
    k = torch.arange(window, device=device)[None, :]         # (1, W)
    valid = k <= t
    return torch.where(valid, t - k, t), valid, torch.clamp(t[:, 0] + 1, max=window)


def real_slots(pos: Tensor, valid: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor]:
    """The window slots that hold a real token of a real position, (1 or B, N, W), and their count
    (1 or B, N), at least 1: ``valid`` and ``count`` of :func:`window_positions` without a key-padding
    ``mask`` (B, N) (True = real), else with every slot at a padded position, and every slot of a padded
    position, left out."""
    if mask is None:
        return valid[None], valid.sum(-1)[None]
    mask = mask.to(torch.bool)
    v = valid[None] & mask[:, pos] & mask[:, :, None]                    # (B, N, W)
    return v, v.sum(-1).clamp_min(1)


def band_blocks(keys: Tensor, window: int) -> Tensor:
    """(B, N, P, D) -> (B, nb, 2W, P, D), nb = ⌈N/W⌉: block j holds positions (j−1)W … (j+1)W − 1
    (zeros outside 0 … N−1), so rows jW … (j+1)W − 1 and all their W-window positions lie in block j."""
    N = keys.shape[1]
    nb = -(-N // window)
    kp = F.pad(keys, (0, 0, 0, 0, window, nb * window - N))                  # (B, (nb+1)W, P, D)
    return kp.unfold(1, 2 * window, window).movedim(-1, 2).contiguous()      # (B, nb, 2W, P, D)


def band_index(w: int, device) -> Tensor:
    """(W, W) long: column of position t − k in the block of row t = jW + r is W + r − k."""
    r = torch.arange(w, device=device)
    return w + r[:, None] - r[None, :]


def band_scores(q: Tensor, blocks: Tensor, window: int, idx: Tensor | None = None) -> Tensor:
    """S[b, t, p, k] = q[b, t] · key[b, t − k, p] for k < ``window`` (0 where t − k < 0).

    q (B, N, D); blocks = :func:`band_blocks` (key (B, N, P, D), W') with W' = min(window, N); idx =
    :func:`band_index` (W') (made here when None) -> (B, N, P, window). Cost O(B N 2W' P D) in dense
    matmuls; no (B, N, W, P, D) gather is formed.
    """
    B, N, D = q.shape
    nb, w2, P = blocks.shape[1:4]
    w = w2 // 2
    qb = F.pad(q, (0, 0, 0, nb * w - N)).view(B, nb, w, D)
    s = (qb @ blocks.view(B, nb, w2 * P, D).transpose(-1, -2)).view(B, nb, w, w2, P)  # (B, nb, W', 2W', P)
    idx = (band_index(w, q.device) if idx is None else idx).view(1, 1, w, w, 1).expand(B, nb, w, w, P)
    s = s.gather(3, idx).view(B, nb * w, w, P)[:, :N].transpose(-1, -2)      # (B, N, P, W')
    return F.pad(s, (0, window - w))                                         # slots k >= N: t − k < 0


def band_apply(r: Tensor, blocks: Tensor, window: int, idx: Tensor | None = None) -> Tensor:
    """Transpose of :func:`band_scores`: out[b, t] = Σ_{p,k} r[b, t, p, k] key[b, t − k, p] (B, N, D)."""
    B, N, P, _ = r.shape
    nb, w2, D = blocks.shape[1], blocks.shape[2], blocks.shape[-1]  # (explicit D: views of an empty batch)
    w = w2 // 2
    rb = F.pad(r[..., :w].transpose(-1, -2), (0, 0, 0, 0, 0, nb * w - N)).view(B, nb, w, w, P)
    idx = (band_index(w, r.device) if idx is None else idx).view(1, 1, w, w, 1).expand(B, nb, w, w, P)
    full = r.new_zeros(B, nb, w, w2, P).scatter(3, idx, rb)                  # (B, nb, W', 2W', P)
    out = full.view(B, nb, w, w2 * P) @ blocks.view(B, nb, w2 * P, D)        # (B, nb, W', D)
    return out.view(B, nb * w, D)[:, :N]


class _SeqLayer(nn.Module):
    """Pre-LN causal transformer layer: (B, N, d) -> (B, N, d)."""

    def __init__(self, dim: int, heads: int, hidden: int):
        super().__init__()
        if dim % heads:
            raise ValueError(f"coherence_rev.heads = {heads}: must divide dim = {dim}")
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.fc, self.out = nn.Linear(dim, hidden), nn.Linear(hidden, dim)

    def forward(self, z: Tensor, key_mask: Tensor | None = None) -> Tensor:
        B, N, D = z.shape
        q, k, v = self.qkv(self.ln1(z)).view(B, N, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        a = sdpa(q, k, v, causal=True, key_mask=key_mask)                # (B, H, N, Dh)
        z = z + self.proj(a.transpose(1, 2).reshape(B, N, D))
        return z + self.out(F.gelu(self.fc(self.ln2(z))))


def _examples_context(dtype, B=2, N=7, D=8, V=3, seed=0) -> tuple[CoherenceContext, Tensor]:
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, V, (B, N), generator=g)
    f = torch.randn(B, N, D, generator=g, dtype=dtype)
    x = f + 0.3 * torch.randn(B, N, D, generator=g, dtype=dtype)
    return CoherenceContext(tokens, f, torch.Generator().manual_seed(seed + 1)), x


# ----------------------------------------------------------------------------- reverse prediction
@register_energy("coherence_rev")
class ReversePredictionEnergy(SharedModules, Energy):
    """ℒ_rev(h_t) = −(1/W_t) Σ_{i in window} log q_φ(x_i | h_t, x_{<i}) (EqT Eq. 12; module docstring).

    ``embedding``: the model's token embedding (shared for q_φ's inputs and its tied output); None
    builds an own one of ``vocab_size`` rows. ``layers``/``heads``/``hidden``: q_φ's causal
    transformer (1 layer, hidden = dim by default: the parity model's +8% parameter budget).
    """

    exact = True

    def __init__(self, dim: int, vocab_size: int, *, window: int = 32, layers: int = 1, heads: int = 4,
                 hidden: int | None = None, readout: str = "bilinear", embedding: nn.Embedding | None = None):
        super().__init__()
        check_int("coherence_rev.dim", dim, min=1)
        check_int("coherence_rev.window", window, min=1)
        check_int("coherence_rev.layers", layers, min=1)
        check_choice("coherence_rev.readout", readout, READOUTS)
        hidden = dim if hidden is None else hidden
        self.dim, self.window, self.readout = dim, window, readout
        self._hold("embed", embedding, lambda: nn.Embedding(vocab_size, dim))
        self.bos = nn.Parameter(torch.zeros(dim))                  # q_φ's input before x_1
        self.layers = nn.ModuleList(_SeqLayer(dim, heads, hidden) for _ in range(layers))
        self.ln_u = nn.LayerNorm(dim)
        self.offset = nn.Parameter(0.02 * torch.randn(window, dim))  # r_k, k = t − i
        self.h_in = nn.Linear(dim, dim, bias=False)                # A
        if readout == "bilinear":
            self.base, self.gate = nn.Linear(dim, dim), nn.Linear(dim, dim)   # B, G
        else:
            self.ln_r, self.ln_f = nn.LayerNorm(dim), nn.LayerNorm(dim)
            self.fc, self.out = nn.Linear(dim, hidden), nn.Linear(hidden, dim)

    param_roles = {"bos": "embedding", "offset": "position"}

    @classmethod
    def examples(cls, dtype=torch.float64):
        out = []
        for readout in READOUTS:
            torch.manual_seed(0)
            e = cls(8, 3, window=4, heads=2, readout=readout).to(dtype)
            ctx, x = _examples_context(dtype)
            out.append((readout, e, ctx, x))
        return out

    @property
    def embedding(self) -> nn.Embedding:
        return self._held("embed")

    def prepare(self, context: CoherenceContext, **kwargs: Any) -> dict[str, Tensor]:
        tokens, mask = context.tokens, context.mask
        B, N = tokens.shape
        emb = self.embedding(tokens)                                          # (B, N, D)
        bos = self.bos.to(emb.dtype).expand(B, 1, -1)
        u = torch.cat([bos, emb[:, :-1]], 1)                                  # u_i reads x_{<i}
        if mask is not None:  # after padding (left or inside) the first real token reads [BOS] too
            prev = F.pad(mask[:, :-1].to(torch.bool), (1, 0))                 # (B, N): x_{i-1} is real
            u = torch.where(prev[..., None], u, bos)
        for layer in self.layers:
            u = layer(u, mask)
        u = self.ln_u(u)                                                      # (B, N, D), once per call
        pos, valid, _ = window_positions(N, self.window, tokens.device)       # (N, W)
        valid, count = real_slots(pos, valid, mask)                           # (1 or B, N, W), (1 or B, N)
        state = {"target": tokens[:, pos], "weight": valid.to(emb.dtype) / count[..., None].to(emb.dtype)}
        r = self.offset.to(emb.dtype)                                         # (W, D)
        E = self.embedding.weight.to(emb.dtype)                               # (V, D)
        if self.readout == "bilinear":  # h-free parts, once per call (see _bilinear_logits)
            scores = self.base(u) @ E.t()                                     # (B, N, V)
            # gathered by index_select (its backward adds in index order; [:, pos]'s did not on many threads)
            base = scores.index_select(1, pos.flatten()).view(B, N, *pos.shape[1:], E.shape[0]) \
                + F.linear(r, self.base.weight) @ E.t()                       # (B, N, W, V)
            state["base"] = (base[..., 1:] - base[..., :1]).transpose(-1, -2)  # relative to class 0: (B, N, V-1, W)
            E1, A = E[1:] - E[:1], self.h_in.weight.to(emb.dtype)            # e_v − e_0: (V-1, D); A: (D, D)
            keys = (self.gate(u)[:, :, None] * E1) @ A                        # Aᵀ((e_v − e_0) ∘ G u_i): (B, N, V-1, D)
            state["gate_blocks"] = band_blocks(keys, min(self.window, N))     # (B, nb, 2W', V-1, D)
            state["gate_off"] = ((F.linear(r, self.gate.weight)[None] * E1[:, None]) @ A).flatten(0, 1)  # (V-1 W, D)
            state["band_idx"] = band_index(min(self.window, N), tokens.device)  # (W', W')
            y = state["target"]                                               # (B, N, W)
            state["y_rel"] = F.one_hot(y, E.shape[0])[..., 1:].to(emb.dtype).transpose(-1, -2)  # (B, N, V-1, W)
        else:
            state["z0"] = u[:, pos] + r                                       # (B, N, W, D)
        return state

    def _bilinear_logits(self, h: Tensor, state: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """Logits relative to class 0, l_ikv − l_ik0 = b'_ikv + (e_v − e_0)ᵀ((G u_i + G r_k) ∘ A h_t)
        (B, N, V-1, W), and their log-normaliser (B, N, W) with the class-0 logit ≡ 0 (log-softmax is
        shift invariant, so ℒ_rev is unchanged).

        A and e_v − e_0 are folded into the h-free keys once (``prepare``): (e_v − e_0)ᵀ(g ∘ A h) =
        h · Aᵀ((e_v − e_0) ∘ g), so a step multiplies h by no D×D matrix, and the gathered
        (B, N, W, D) gate of every window slot is never formed: the scores against G u_{t−k} come from
        blocked matmuls (:func:`band_scores`), those against G r_k from one matmul.
        """
        idx, blocks, off = state["band_idx"], state["gate_blocks"], state["gate_off"]
        rel = state["base"] + band_scores(h, blocks, self.window, idx) + (h @ off.t()).view_as(state["base"])
        if rel.shape[2] == 1:                                                 # two classes: log(1 + e^l)
            return rel, torch.logaddexp(rel[:, :, 0].new_zeros(()), rel[:, :, 0])
        return rel, torch.logsumexp(F.pad(rel, (0, 0, 1, 0)), 2)              # (B, N, W)

    def energy(self, h: Tensor, state: dict[str, Tensor]) -> Tensor:
        if self.readout == "bilinear":
            rel, lse = self._bilinear_logits(h, state)
            nll = lse - (rel * state["y_rel"]).sum(2)                         # (B, N, W)
            return (nll * state["weight"]).sum(-1)                            # (B, N)
        else:
            a = self.h_in(h)                                                  # (B, N, D)
            z = state["z0"] + a[:, :, None]
            z = self.ln_f(z + self.out(F.gelu(self.fc(self.ln_r(z)))))
            logits = z @ self.embedding.weight.to(h.dtype).t()                # (B, N, W, V)
        nll = -F.log_softmax(logits, -1).gather(-1, state["target"][..., None])[..., 0]  # (B, N, W)
        return (nll * state["weight"]).sum(-1)                                # (B, N)

    def grad(self, h: Tensor, state: dict[str, Tensor]) -> Tensor:
        """∇_h Σ_t ℒ_rev; closed form for the bilinear read-out (autograd for 'mlp'):

            ∂ℒ_t/∂l_tkv = w_tk (p_tkv − [v = x_{t−k}]),   ∇_{h_t} = Σ_{k, v≥1} ∂ℒ_t/∂l_tkv Aᵀ((e_v − e_0) ∘ g_tk)

        (g_tk = G u_{t−k} + G r_k; Eq. 12 with the bilinear q_φ): the transpose of the score map.
        """
        if self.readout != "bilinear":
            return super().grad(h, state)
        rel, lse = self._bilinear_logits(h, state)                            # (B, N, V-1, W), (B, N, W)
        r = (torch.exp(rel - lse[:, :, None]) - state["y_rel"]) * state["weight"][:, :, None]  # (B, N, V-1, W)
        return band_apply(r, state["gate_blocks"], self.window, state["band_idx"]) + r.flatten(2) @ state["gate_off"]


# ----------------------------------------------------------------------------- masked reconstruction
@register_energy("coherence_mask")
class MaskedReconstructionEnergy(SharedModules, Energy):
    """ℒ_mask(h_t) = −(1/|M_t|) Σ_{i ∈ M_t} log p_ψ(x_i | h_t, x_{≤t∖M}) (EqT Eq. 13; module docstring).

    p_ψ(· | h_t, slot k) = softmax(E (W_2 GELU(W_1 (h_t + q_k + s_t) + b_1) + b_2)), E the shared
    embedding. Only the masked slots are evaluated; W_1 (q_k + s_t) + b_1 and E W_2 are computed once
    per block call.
    """

    exact = True

    def __init__(self, dim: int, vocab_size: int, *, window: int = 32, mask_prob: float = 0.15,
                 hidden: int | None = None, embedding: nn.Embedding | None = None):
        super().__init__()
        check_int("coherence_mask.dim", dim, min=1)
        check_int("coherence_mask.window", window, min=1)
        check_float("coherence_mask.mask_prob", mask_prob, min=0.0, max=1.0, min_exclusive=True)
        hidden = dim if hidden is None else hidden
        self.dim, self.window, self.mask_prob = dim, window, float(mask_prob)
        self._hold("embed", embedding, lambda: nn.Embedding(vocab_size, dim))
        self.mask_vec = nn.Parameter(torch.zeros(dim))              # [MASK] input
        self.gain = nn.Parameter(torch.ones(window, dim))           # g_k: binds slot and token
        self.query = nn.Parameter(0.02 * torch.randn(window, dim))  # q_k: which slot to reconstruct
        self.fc1, self.fc2 = nn.Linear(dim, hidden), nn.Linear(hidden, dim)

    param_roles = {"mask_vec": "embedding", "gain": "diagonal", "query": "position"}

    @classmethod
    def examples(cls, dtype=torch.float64):
        torch.manual_seed(0)
        e = cls(8, 3, window=4, mask_prob=0.4).to(dtype)
        ctx, x = _examples_context(dtype)
        return [("W4_p0.4", e, ctx, x)]

    @property
    def embedding(self) -> nn.Embedding:
        return self._held("embed")

    def draw_mask(self, valid: Tensor, batch: int, generator: torch.Generator | None,
                  shared: bool = False, start: Tensor | None = None) -> Tensor:
        """(B, N, W) bool: each valid slot masked with probability p, at least one per token that has a valid
        slot (``valid``: (N, W), or (1 or B, N, W) per row; a padded position has none, so no masked slot).
        ``shared``: one (N, W) draw serves every row (:class:`CoherenceContext`.shared_mask), read from each row's
        first real token on (``start``: (B,) its position): a row's mask, and so its output, is the one it gets
        alone, however much left padding it has (the draw over absolute positions gave a left-padded row another
        mask: 3 % off its logits in float64, found by an outside probe)."""
        N, W = valid.shape[-2:]
        u = torch.rand(1 if shared else batch, N, W, generator=generator).to(valid.device)
        if shared and start is not None:  # row b's slot t reads the draw of its own position t − start_b
            idx = (torch.arange(N, device=valid.device)[None, :] - start[:, None]).clamp_min(0)  # (B, N)
            u = u[0][idx]                                                                          # (B, N, W)
        u = torch.where(valid, u, 2.0)
        masked = (u < self.mask_prob) & valid
        first = F.one_hot(u.argmin(-1), W).bool()                    # the valid slot with the smallest u
        masked = masked | (first & ~masked.any(-1, keepdim=True) & valid.any(-1, keepdim=True))
        return masked.expand(batch, N, W)

    def prepare(self, context: CoherenceContext, **kwargs: Any) -> dict[str, Tensor]:
        tokens, mask = context.tokens, context.mask
        B, N = tokens.shape
        pos, valid, count = window_positions(N, self.window, tokens.device)   # (N, W)
        if mask is not None:  # padded positions: in no window, no masked slot of their own
            valid, count = real_slots(pos, valid, mask)                       # (B, N, W), (B, N)
        win = tokens[:, pos]                                                  # (B, N, W)
        start = None if mask is None else mask.to(torch.int8).argmax(1)     # (B,) each row's first real token
        masked = self.draw_mask(valid, B, context.generator, context.shared_mask, start)  # (B, N, W)
        emb = self.embedding(tokens)                                          # (B, N, D)
        gain = self.gain.to(emb.dtype)                                        # (W, D)
        summed = emb if mask is None else emb * mask[..., None].to(emb.dtype)  # a padded token adds nothing
        # Σ_{k < W_t} g_k ∘ e_{t−k}: a causal depthwise convolution (no (B, N, W, D) gather) ...
        s = F.conv1d(F.pad(summed.transpose(1, 2), (self.window - 1, 0)), gain.flip(0).t()[:, None],
                     groups=self.dim)[..., :N].transpose(1, 2)                # (B, N, D)
        # masked slots only: the call's one host read (M varies per draw); all W slots at fixed shape would cost
        # 1 / mask_prob times the (M, V) logits of every step, for no read
        b, t, k = masked.nonzero(as_tuple=True)
        target = win[b, t, k]                                                 # (M,)
        # ... then the masked slots show [MASK] instead of their token: − g_k ∘ (e_{x_i} − [MASK])
        # gathers by index_select and sums by index_add (their backward and forward run in a fixed order on a
        # multi-threaded CPU, where advanced indexing's backward and index_put(accumulate) did not: two identical
        # trainings on 2 threads parted after a few steps)
        bt = b * N + t
        fix = gain.index_select(0, k) * (self.embedding(target) - self.mask_vec.to(emb.dtype))  # (M, D)
        # (count in s's dtype: under bf16 autocast conv1d gives bf16)
        s = s.flatten(0, 1).index_add(0, bt, -fix.to(s.dtype)).view_as(s) / count[..., None].to(s.dtype)
        E = self.embedding.weight.to(emb.dtype)
        pre = (F.linear(s, self.fc1.weight).flatten(0, 1).index_select(0, bt)  # W_1 s_t on (B N) rows, then
               + self.fc1(self.query.to(emb.dtype)).index_select(0, k))       # gathered: (M, hidden)
        return {"bt": bt, "pre": pre,                                         # W_1 (q_k + s_t) + b_1
                "out_w": E @ self.fc2.weight, "out_b": E @ self.fc2.bias,           # E W_2, E b_2
                "target": target, "n": masked.sum(-1).clamp_min(1).to(emb.dtype)}  # n: (B, N) >= 1

    def _logits(self, h: Tensor, state: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """Pre-activation z = W_1 (h_t + q_k + s_t) + b_1 (M, hidden) and logits (M, V) of the masked slots."""
        z = state["pre"] + F.linear(h, self.fc1.weight).flatten(0, 1).index_select(0, state["bt"])  # (M, hidden)
        return z, F.linear(F.gelu(z), state["out_w"], state["out_b"])             # (M, V)

    def energy(self, h: Tensor, state: dict[str, Tensor]) -> Tensor:
        _, logits = self._logits(h, state)
        nll = F.cross_entropy(logits, state["target"], reduction="none")       # (M,)
        out = nll.new_zeros(h.shape[0] * h.shape[1]).index_add(0, state["bt"], nll)
        return (out.view(h.shape[:2]) / state["n"]).to(h.dtype)                # (B, N)

    def grad(self, h: Tensor, state: dict[str, Tensor]) -> Tensor:
        """∇_h Σ_t ℒ_mask in closed form (Eq. 13 through p_ψ):

            ∂/∂logits = (p − onehot(x_i)) / |M_t|,   ∂/∂z = (E W_2)ᵀ∂/∂logits ∘ GELU'(z),   ∇_{h_t} = W_1ᵀ Σ_{i∈M_t} ∂/∂z

        with GELU'(z) = Φ(z) + z φ(z) (the exact, erf GELU; one fused kernel, differentiable again).
        """
        z, logits = self._logits(h, state)
        bt = state["bt"]
        p = torch.softmax(logits, -1) - F.one_hot(state["target"], logits.shape[-1]).to(logits.dtype)
        p = p / state["n"].flatten()[bt, None]                                 # (M, V)
        dz = torch.ops.aten.gelu_backward(p @ state["out_w"], z)                # (E W_2)ᵀ∂ ∘ GELU'(z): (M, hidden)
        acc = dz.new_zeros(h.shape[0] * h.shape[1], dz.shape[-1]).index_add(0, bt, dz)  # (B N, hidden)
        return (acc @ self.fc1.weight).view_as(h).to(h.dtype)                  # (B, N, D)
