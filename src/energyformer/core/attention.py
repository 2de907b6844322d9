"""The attention kit: visibility masks, SDPA dispatch and the KV cache, in one place.

Every attention in the library (the plain baselines, CEM's interaction energy, the intrinsic
optimizers' free energies, Hyper-SET's and CRATE's subspace energies) builds its masks, calls fused
attention and appends to its cache slot through these functions.

**Positions.** Queries sit at the *last* ``Nq`` of ``Nk`` key positions (decoding with a KV cache:
query ``a`` has position ``i = Nk − Nq + a``). Key ``j`` is visible to query ``i`` when

    causal:      j ≤ i                       (hides the future; Vaswani et al. 2017 §3.2.3)
    window w:    i − j < w (causal) or |i − j| < w (bidirectional)   (sliding-window / local attention,
                 Beltagy et al. 2020 "Longformer" §3.1)
    key padding: key_mask[b, j] is True      ((B, Nk) bool, True = real token)

and a query always sees itself, so no softmax row is empty (a padded query's output is then
defined, meaningless, and never read by a real token).

**SDPA dispatch** (:func:`sdpa`): without a padding mask or window the fused paths of
``F.scaled_dot_product_attention`` are used — ``is_causal=True`` for square causal calls, no mask at
all for bidirectional attention or a single decoded token; otherwise the boolean mask of
:func:`visible` is passed. An energy that builds its mask once in ``prepare`` (a key-padding mask
reused by every descent step) passes it as ``mask=``.

**Where attention is not this kit** (each says why at the spot): CEM's fused path
(:func:`energyformer.energies.interaction_paths.attend_fused`) appends a null key to read p_ii out of
the same call, so its causal call is shifted by one (a square ``is_causal`` call on [null ; keys]
with a padded query); the blocked CEM path, the chunked log-sum-exp and the column softmax of
Hyper-SET's bi-softmax materialise score blocks (an energy or a softmax over queries, which SDPA
does not return).

**KV cache** (:func:`append_cache`): a cache slot is a plain dict owned by one block and iteration
(:meth:`~energyformer.core.context.ForwardContext.cache_slot`); it holds this block's tensors under
their names (keys ``k``, values ``v``, normalised inputs ``h``, ...) concatenated along the
sequence axis, and the key-padding mask of every cached key under ``mask`` (only once some call
had one).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["visible", "sdpa", "append_cache", "append_key_mask", "concat_key_mask", "masked_softmax",
           "masked_logsumexp", "key_padding_mask"]


# ----------------------------------------------------------------------------- masks
def visible(nq: int, nk: int, causal: bool, key_mask: Tensor | None, device, window: int | None = None,
            ) -> Tensor | None:
    """Bool mask (1 or B, 1, Nq, Nk), True = query i may see key j; None = every key visible.

    nq, nk: query and key counts (queries are the last ``nq`` of the ``nk`` positions);
    causal: hide keys j > i; key_mask: (B, Nk) bool, True = real key; window: hide keys with
    i − j ≥ window (causal) or |i − j| ≥ window (bidirectional); None = no window.
    A query always sees itself.
    """
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
        raise ValueError(f"window = {window!r}: must be an integer >= 1 or None")
    if not causal and key_mask is None and window is None:
        return None
    i = (nk - nq) + torch.arange(nq, device=device)[:, None]  # (Nq, 1) query positions
    j = torch.arange(nk, device=device)[None, :]               # (1, Nk) key positions
    vis = (j <= i) if causal else torch.ones(nq, nk, dtype=torch.bool, device=device)  # (Nq, Nk)
    if window is not None:
        vis = vis & ((i - j).abs() < window)
    vis = vis[None, None]                                      # (1, 1, Nq, Nk)
    if key_mask is not None:
        vis = (vis & key_mask[:, None, None, :].to(torch.bool)) | (i == j)[None, None]  # (B, 1, Nq, Nk)
    return vis


def key_padding_mask(mask: Tensor | None) -> Tensor | None:
    """(B, N) key-padding mask (True = real token) -> the SDPA mask (B, 1, 1, N) hiding padded keys
    from every query, or None. For bidirectional attentions whose queries are their keys."""
    return None if mask is None else mask.to(torch.bool)[:, None, None, :]


def _hidden_and_empty(vis: Tensor) -> tuple[Tensor, Tensor]:
    """(keys to put at −inf, queries that see no key (…, Nq|1, 1)): an empty row keeps its finite logits, so its
    softmax / log-sum-exp and their gradients stay finite before the caller zeroes it."""
    empty = ~vis.any(-1, keepdim=True)
    return ~vis & ~empty, empty


def masked_softmax(logits: Tensor, vis: Tensor | None) -> Tensor:
    """softmax over the last axis with invisible keys at −inf. logits: (B, H, Nq, Nk).

    A query that sees no key (a lone real token without self-interaction, say) gets all-zero weights and a
    zero gradient — the convention of PyTorch's SDPA, which the fused paths call, so reference and fused
    paths agree; the plain softmax of an all −inf row is NaN, and its gradient NaN even where multiplied by 0."""
    if vis is None:
        return torch.softmax(logits, dim=-1)
    hidden, empty = _hidden_and_empty(vis)
    return torch.softmax(logits.masked_fill(hidden, float("-inf")), dim=-1).masked_fill(empty, 0.0)


def masked_logsumexp(logits: Tensor, vis: Tensor | None) -> Tensor:
    """log Σ_j exp(logits_ij) over the visible keys j. logits: (B, H, Nq, Nk) -> (B, H, Nq).

    A query that sees no key has 0 (an empty sum contributes no term to an energy; −inf made the energy −inf
    and its gradient NaN), with a zero gradient, as :func:`masked_softmax` gives it zero weights."""
    if vis is None:
        return torch.logsumexp(logits, dim=-1)
    hidden, empty = _hidden_and_empty(vis)
    return torch.logsumexp(logits.masked_fill(hidden, float("-inf")), dim=-1).masked_fill(empty[..., 0], 0.0)


# ----------------------------------------------------------------------------- SDPA dispatch
def sdpa(q: Tensor, k: Tensor, v: Tensor, causal: bool, key_mask: Tensor | None, dropout: float = 0.0,
         scale: float | None = None, window: int | None = None, mask: Tensor | None = None) -> Tensor:
    """softmax(scale · q kᵀ + mask) v over (B, H, N, ·) with the visibility of :func:`visible`.

    Picks the fused SDPA call: ``is_causal`` for square causal calls, no mask for bidirectional
    attention or one causal query (the last position sees every key), else an explicit bool mask.
    ``mask``: a bool visibility mask built once per block call and reused by every step (from
    :func:`visible` or :func:`key_padding_mask`; True = visible); it replaces ``causal`` /
    ``key_mask`` / ``window``, which must then be False / None / None.
    """
    if mask is not None:
        if causal or key_mask is not None or window is not None:
            raise ValueError("sdpa: give either mask or causal / key_mask / window, not both")
        return _query_nans(F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout, scale=scale), q)
    nq, nk = q.shape[2], k.shape[2]
    if key_mask is None and window is None:
        if causal and nq == nk:
            return _query_nans(F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout,
                                                              scale=scale), q)
        if not causal or nq == 1:
            return _query_nans(F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, scale=scale), q)
    mask = visible(nq, nk, causal, key_mask, q.device, window)
    return _query_nans(F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout, scale=scale), q)


def _query_nans(out: Tensor, q: Tensor) -> Tensor:
    """``out`` (B, H, Nq, Dv) with NaN in every row whose query (B, H, Nq, Dq) is not finite. PyTorch's CPU SDPA
    returns zeros for a query row holding a NaN or an inf (float32 without a mask, and with one at 64 tokens in bf16
    and float16: a finite wrong output that the residual then hid — a NaN weight in W_Q gave finite logits; probes AS,
    AV), where its other paths give NaN. One reduction of q (N·D against the call's N²·D); CPU only, where it was
    seen (CUDA: tests/core)."""
    if q.device.type != "cpu":
        return out
    return out.masked_fill(~q.isfinite().all(-1, keepdim=True), float("nan"))  # (not q.sum() * 0: a sum can overflow)


# ----------------------------------------------------------------------------- KV cache
def concat_key_mask(old: Tensor | None, new: Tensor | None, n_old: int, n_new: int, batch: int,
                    device: torch.device) -> Tensor | None:
    """Key-padding mask (B, n_old + n_new) of cached + new keys; None when neither part has one."""
    if old is None and new is None:
        return None
    if old is None:
        old = torch.ones(batch, n_old, dtype=torch.bool, device=device)
    if new is None:
        new = torch.ones(batch, n_new, dtype=torch.bool, device=device)
    return torch.cat([old, new.to(torch.bool)], dim=1)


def append_key_mask(cache: dict | None, mask: Tensor | None, n_old: int, n_new: int, batch: int,
                    device: torch.device) -> Tensor | None:
    """The key mask (B, Nk) of all keys so far (None: all real); stored in ``cache['mask']`` when a
    cache is given. ``mask``: (B, n_new) bool of this call's tokens, checked."""
    if mask is not None and tuple(mask.shape) != (batch, n_new):
        raise ValueError(f"key mask of shape {tuple(mask.shape)}: expected (batch, tokens) = {(batch, n_new)}")
    if cache is None:
        return None if mask is None else mask.to(torch.bool)
    full = concat_key_mask(cache.get("mask"), mask, n_old, n_new, batch, device)
    if full is not None:
        cache["mask"] = full
    return full


def append_cache(cache: dict | None, mask: Tensor | None, seq_dims: Mapping[str, int] | None = None,
                 **new: Tensor) -> tuple[dict[str, Tensor], Tensor | None]:
    """Append this call's tensors and key mask to a cache slot; return all of them and the key mask.

    cache:    the slot (a dict, filled in place) or None (no cache: the tensors are returned as given);
    mask:     (B, n) bool key-padding mask of this call's tokens (True = real) or None;
    seq_dims: the sequence axis of each named tensor (default 2: (B, H, n, ·) heads layout;
              1 for (B, n, D) inputs);
    new:      this call's tensors by name. Returns ({name: cached + new}, key mask (B, Nk) or None).
    """
    dims = dict(seq_dims or {})
    first_name, first = next(iter(new.items()))
    d0 = dims.get(first_name, 2)
    B, n = first.shape[0], first.shape[d0]
    n_old = 0
    out = dict(new)
    if cache is not None:
        if first_name in cache:
            n_old = cache[first_name].shape[d0]
        for name, t in new.items():
            if name in cache:
                out[name] = torch.cat([cache[name], t], dim=dims.get(name, 2))
            cache[name] = out[name]
    return out, append_key_mask(cache, mask, n_old, n, B, first.device)
