"""Flash-style Triton kernel for CEM attention's averages (``attn_path: kernel``; issue 21, docs/cem.md).

For one batch row, queries i (positions offset + i) and keys j, with q already scaled by 1/τ and the
shared-diagonal query ud = d∘u/τ (CEM seed Eq. 1, 12, App. B; see :mod:`.interaction_paths`):

    s_ijk = q_ik·k_jk + ud_i·h_j − m_k |i − j| + δ_k [j = i]        (hidden: −∞; self always visible)
    oq_ik = Σ_j p_ijk k_jk          (B, H, Nq, Dr)    keys are the values (W_V = W_K)
    hs_i  = Σ_k Σ_j p_ijk h_j = ((Σ_k P_k) H)_i      (B, Nq, D)   the gradient read-out's h-term / d
    lse_ik = log Σ_j e^{s_ijk}     (B, H, Nq)

Flash-style: one program per (query tile, batch row) walks the key tiles; no N×N tensor exists in
memory. The shared-diagonal tile ``ud hᵀ`` is computed **once per tile** and reused by every head
(heads are an unrolled loop inside the program), and the h read-out multiplies the head-summed
probabilities by H once per tile. Forward in two passes (pass 1: every head's running max and sum →
lse; pass 2: normalised probabilities → oq and hs), because Σ_k P_k needs every head's final
normaliser. Backward (with dS_k = P_k ∘ (dP_k − Δ_k) + g_lse P_k, dP_k = dOq_k K_kᵀ + dHs Hᵀ, the
second term shared): a query-tile kernel (Δ_k's h part, then dq_k and d(ud) = (Σ_k dS_k) H) and a
key-tile kernel (dk_k = dS_kᵀ q_k + P_kᵀ dOq_k and dh = (Σ_k dS_k)ᵀ ud + (Σ_k P_k)ᵀ dHs). Per-head
running state lives in the output buffers, which each program owns row-wise (no atomics).

Scores, softmax and accumulators run in float32 (float64 for float64 inputs); bf16 inputs are
multiplied in bf16 with float32 accumulation; float32 products use IEEE (no TF32). On CPU the kernels
run through Triton's interpreter (``TRITON_INTERPRET``, set here for CPU tensors only): slow, for tests.

Covered: causal and bidirectional, key padding, ALiBi, self bias, queries at an offset (chunked
prefill and KV-cache decoding), shared diagonal or none, the gradient read-out's head-summed h term or
no h term (Algorithm 1). Not covered (the energy raises, naming the option): a per-head diagonal and
per-head value factors (per-head preconditioner banks with a diagonal), which need per-head h averages.
Block sizes are not tuned for any GPU.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
from pathlib import Path

import torch
from einops import rearrange
from torch import Tensor


def triton_available() -> bool:
    return importlib.util.find_spec("triton") is not None


@functools.lru_cache(maxsize=2)
def _kernels(interpret: bool):
    """The module ``cem_triton.py`` (kernels ``_fwd``, ``_bwd_q``, ``_bwd_kv``), jitted for the GPU or
    for Triton's CPU interpreter. Triton fixes the mode of its own library when it is first imported,
    so one process has one mode: if triton is not imported yet, ``TRITON_INTERPRET`` is set here to
    what the first tensor's device needs; otherwise a mismatch is a clear error."""
    if "triton" not in sys.modules:
        os.environ["TRITON_INTERPRET"] = "1" if interpret else "0"
    import triton

    if bool(triton.knobs.runtime.interpret) != interpret:
        need = "CPU tensors need TRITON_INTERPRET=1" if interpret else "CUDA tensors need TRITON_INTERPRET unset"
        raise RuntimeError(f"attn_path = 'kernel': triton was imported with TRITON_INTERPRET="
                           f"{os.environ.get('TRITON_INTERPRET')!r}; {need} before triton's first import")
    name = f"{__package__}._cem_triton_{'interpreted' if interpret else 'compiled'}"
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("cem_triton.py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _pow2(n: int, lo: int = 16) -> int:
    return max(lo, 1 << (max(1, n) - 1).bit_length())


def _launch_args(tl, q: Tensor, hm: Tensor | None, causal: bool, has_g: bool, has_hs: bool,
                 alibi: bool, delta: bool, kmask: bool, block_m: int, block_n: int) -> dict:
    B, H, nq, R = q.shape
    D = 1 if hm is None else hm.shape[-1]
    acc = tl.float64 if q.dtype == torch.float64 else tl.float32
    return dict(H=H, R=R, D=D, RP=_pow2(R), DP=_pow2(D), HP=_pow2(H, 2), BM=block_m, BN=block_n,
                CAUSAL=causal, HAS_G=has_g, HAS_HS=has_hs, HAS_ALIBI=alibi, HAS_DELTA=delta,
                HAS_KMASK=kmask, PREC="ieee", ACC=acc,
                UPCAST=q.device.type != "cuda" and q.dtype in (torch.bfloat16, torch.float16))


class _CEMAttention(torch.autograd.Function):
    """(oq, hs, lse) of the module docstring with the kernels' own backward."""

    @staticmethod
    def forward(ctx, q, k, ud, hm, delta, slopes, kmask, causal, offset, has_hs, block_m, block_n):
        B, H, nq, R = q.shape
        nk = k.shape[2]
        acc_dt = torch.float64 if q.dtype == torch.float64 else torch.float32
        dummy = q.new_zeros(1)
        has_g = ud is not None
        kern = _kernels(q.device.type != "cuda")
        meta = _launch_args(kern.tl, q, hm, causal, has_g, has_hs, slopes is not None, delta is not None,
                            kmask is not None, block_m, block_n)
        oq = torch.zeros(B, H, nq, R, device=q.device, dtype=acc_dt)
        hs = torch.zeros(B, nq, meta["D"] if has_hs else 1, device=q.device, dtype=acc_dt)
        lse = torch.empty(B, H, nq, device=q.device, dtype=acc_dt)
        m, l = torch.empty_like(lse), torch.empty_like(lse)  # running max and sum (p = e^{s − m} / l)
        args = [q, k, ud if has_g else dummy, hm if hm is not None else dummy,
                slopes if slopes is not None else dummy, delta if delta is not None else dummy,
                kmask if kmask is not None else dummy]
        kern._fwd[(-(-nq // block_m), B)](*args, oq, hs, lse, m, l, nq, nk, offset, **meta)
        ctx.save_for_backward(q, k, ud, hm, delta, slopes, kmask, oq, m, l)
        ctx.meta, ctx.offset = meta, offset
        return oq, (hs if has_hs else None), lse

    @staticmethod
    def backward(ctx, goq, ghs, glse):
        q, k, ud, hm, delta, slopes, kmask, oq, m, l = ctx.saved_tensors
        meta, offset = ctx.meta, ctx.offset
        B, H, nq, R = q.shape
        nk = k.shape[2]
        acc_dt = oq.dtype
        goq = torch.zeros_like(oq) if goq is None else goq.to(acc_dt).contiguous()
        dlt = (goq * oq).sum(-1)  # (B, H, Nq) Δ's k part; the kernel adds the h part
        if glse is not None:
            dlt = dlt - glse.to(acc_dt)
        dlt = dlt.contiguous()
        has_hs = meta["HAS_HS"]
        if has_hs:
            ghs = torch.zeros(B, nq, meta["D"], device=q.device, dtype=acc_dt) if ghs is None else ghs
            ghs = ghs.to(q.dtype).contiguous()
        goq_in = goq.to(q.dtype).contiguous()
        dummy = q.new_zeros(1)
        dq = torch.zeros(B, H, nq, R, device=q.device, dtype=acc_dt)
        dk = torch.zeros(B, H, nk, R, device=q.device, dtype=acc_dt)
        dud = torch.zeros(B, nq, meta["D"], device=q.device, dtype=acc_dt) if ud is not None else dummy
        dh = torch.zeros(B, nk, meta["D"], device=q.device, dtype=acc_dt) if hm is not None else dummy
        ddiag = torch.zeros(B, H, nq, device=q.device, dtype=acc_dt) if delta is not None else dummy
        ins = [q, k, ud if ud is not None else dummy, hm if hm is not None else dummy,
               slopes if slopes is not None else dummy, delta if delta is not None else dummy,
               kmask if kmask is not None else dummy, m, l, goq_in, ghs if has_hs else dummy, dlt]
        kern = _kernels(q.device.type != "cuda")
        kern._bwd_q[(-(-nq // meta["BM"]), B)](*ins, dq, dud, ddiag, nq, nk, offset, **meta)
        kern._bwd_kv[(-(-nk // meta["BN"]), B)](*ins, dk, dh, nq, nk, offset, **meta)
        return (dq.to(q.dtype), dk.to(k.dtype), None if ud is None else dud.to(ud.dtype),
                None if hm is None else dh.to(hm.dtype), None if delta is None else ddiag.sum((0, 2)).to(delta.dtype),
                None, None, None, None, None, None, None)


def cem_attention(q: Tensor, k: Tensor, ud: Tensor | None, hm: Tensor | None, *, slopes: Tensor | None,
                  delta: Tensor | None, key_mask: Tensor | None, causal: bool, offset: int, h_sum: bool,
                  block_m: int = 16, block_n: int = 16) -> tuple[Tensor, Tensor | None, Tensor]:
    """(oq (B, H, Nq, Dr), hs (B, Nq, D) or None, lse (B, H, Nq)) — module docstring.

    q: (B, H, Nq, Dr) = W_Q u / τ; k: (B, H, Nk, Dr); ud: (B, Nq, D) = d∘u/τ or None (no diagonal);
    hm: (B, Nk, D) normalised context (needed when ud is given or ``h_sum``); slopes, delta: (H,) ALiBi
    slopes and self bias or None; key_mask: (B, Nk) bool (True = real) or None. Differentiable in q, k,
    ud, hm and delta (slopes are fixed). float64, float32 or bfloat16 operands (one dtype)."""
    dt = q.dtype
    if dt not in (torch.float64, torch.float32, torch.bfloat16, torch.float16):
        raise ValueError(f"cem_attention: dtype {dt} is not supported (float64, float32, bfloat16, float16)")
    acc_dt = torch.float64 if dt == torch.float64 else torch.float32
    q, k = q.contiguous(), k.to(dt).contiguous()
    ud = None if ud is None else ud.to(dt).contiguous()
    hm = None if hm is None or (ud is None and not h_sum) else hm.to(dt).contiguous()
    slopes = None if slopes is None else slopes.to(device=q.device, dtype=acc_dt).contiguous()
    delta = None if delta is None else delta.to(acc_dt).contiguous()
    kmask = None if key_mask is None else key_mask.to(device=q.device, dtype=torch.int8).contiguous()
    return _CEMAttention.apply(q, k, ud, hm, delta, slopes, kmask, bool(causal), int(offset), bool(h_sum),
                               block_m, block_n)


# ------------------------------------------------------------------------------ the energy's path
def kernel_covers(plan) -> bool:
    """Whether the kernel computes this read-out plan: no h-term or the head-summed one ('sum')."""
    return plan.h_mode in (None, "sum") and plan.lr is None


def attend_kernel(e, u: Tensor, st, bs, plan, need_logz: bool):
    """The attention averages (:class:`~.interaction_paths.Averages`) of queries u (B, Nq, D) through
    :func:`cem_attention`; ``bs`` is the state's :class:`~.interaction_paths.BlockedState` (keys and
    h in the product dtype)."""
    from .interaction_paths import Averages

    H = e.heads
    # projections outside the no-autocast region (as the blocked path): bf16 under bf16 autocast
    q = rearrange(e.wq(u) * (1.0 / e.tau), "b n (h r) -> b h n r", h=H).to(bs.cdt)  # (B, H, Nq, Dr)
    ud = None if e.d is None else (u * (e.d / e.tau)).to(bs.cdt)                     # (B, Nq, D)
    h_sum = plan.h_mode == "sum"
    with torch.autocast(u.device.type, enabled=False):
        oq, hs, lse = cem_attention(
            q, bs.k, ud, bs.h, slopes=e.slopes if e.alibi else None, delta=e.self_bias,
            key_mask=st.key_mask, causal=e.causal, offset=st.offset, h_sum=h_sum)
        hterm = hs * plan.c.to(hs.dtype) if h_sum else None  # d ∘ ((Σ_k P_k) H): (B, Nq, D)
    return Averages(oq=oq, hterm=hterm, logz=lse if need_logz else None)
