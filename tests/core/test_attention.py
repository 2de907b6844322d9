"""The attention kit (core/attention.py): masks, SDPA dispatch against an explicit softmax, KV cache."""

import pytest
import torch

from energyformer.core.attention import append_cache, key_padding_mask, sdpa, visible

D64 = torch.float64


def _reference(q, k, v, vis):
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if vis is not None:
        s = s.masked_fill(~vis, float("-inf"))
    return s.softmax(-1) @ v


def test_visible_causal_window_and_padding():
    vis = visible(3, 5, True, None, "cpu")[0, 0]  # queries at positions 2, 3, 4
    assert vis.tolist() == [[j <= i for j in range(5)] for i in (2, 3, 4)]
    win = visible(5, 5, True, None, "cpu", window=2)[0, 0]
    assert win.tolist() == [[0 <= i - j < 2 for j in range(5)] for i in range(5)]
    both = visible(4, 4, False, None, "cpu", window=2)[0, 0]
    assert both.tolist() == [[abs(i - j) < 2 for j in range(4)] for i in range(4)]
    km = torch.tensor([[True, False, True, True]])
    pad = visible(4, 4, False, km, "cpu")[0, 0]
    assert pad[:, 1].tolist() == [False, True, False, False]  # padded key hidden, but seen by itself
    assert visible(4, 4, False, None, "cpu") is None
    with pytest.raises(ValueError, match="window = 0"):
        visible(4, 4, True, None, "cpu", window=0)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("nq", [1, 3, 6])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("window", [None, 2])
def test_sdpa_matches_explicit_softmax(causal, nq, padded, window):
    g = torch.Generator().manual_seed(nq)
    q = torch.randn(2, 2, nq, 4, generator=g, dtype=D64)
    k, v = (torch.randn(2, 2, 6, 4, generator=g, dtype=D64) for _ in range(2))
    km = torch.tensor([[True] * 6, [True, True, False, True, False, True]]) if padded else None
    got = sdpa(q, k, v, causal, km, window=window)
    ref = _reference(q, k, v, visible(nq, 6, causal, km, "cpu", window))
    torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-12)


def test_append_cache_equals_one_call():
    g = torch.Generator().manual_seed(0)
    k = torch.randn(2, 3, 5, 4, generator=g)  # (B, H, N, Dh)
    h = torch.randn(2, 5, 8, generator=g)     # (B, N, D)
    mask = torch.tensor([[True] * 5, [True, True, True, False, True]])
    cache: dict = {}
    append_cache(cache, None, seq_dims={"h": 1}, k=k[:, :, :2], h=h[:, :2])  # no mask in the first call
    out, km = append_cache(cache, mask[:, 2:], seq_dims={"h": 1}, k=k[:, :, 2:], h=h[:, 2:])
    torch.testing.assert_close(out["k"], k)
    torch.testing.assert_close(out["h"], h)
    assert km.tolist() == [[True] * 5, [True, True, True, False, True]]  # the first call had no mask: all real
    assert cache["k"] is out["k"] and cache["mask"] is km
    plain, km0 = append_cache(None, mask, k=k)
    assert plain["k"] is k and km0 is mask
    with pytest.raises(ValueError, match="key mask of shape"):
        append_cache(None, mask[:, :3], k=k)


def test_key_padding_mask():
    assert key_padding_mask(None) is None
    m = key_padding_mask(torch.tensor([[1, 0, 1]]))
    assert m.shape == (1, 1, 1, 3) and m.dtype == torch.bool and m.tolist() == [[[[True, False, True]]]]


def test_sdpa_with_a_prepared_mask():
    """An energy's mask built once in prepare (CRATE, Hyper-SET key padding) goes through ``mask=``."""
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 2, 5, 4, generator=g, dtype=D64) for _ in range(3))
    km = torch.tensor([[True, True, False, True, False], [True] * 5])
    mask = key_padding_mask(km)  # (B, 1, 1, N): padded keys hidden from every query, themselves included
    torch.testing.assert_close(sdpa(q, k, v, False, None, mask=mask), _reference(q, k, v, mask))
    assert not torch.allclose(sdpa(q, k, v, False, None, mask=mask), sdpa(q, k, v, False, None))
    with pytest.raises(ValueError, match="either mask or"):
        sdpa(q, k, v, True, None, mask=mask)


def test_a_query_that_sees_no_key_gets_zero_weights_and_a_zero_term_as_in_sdpa():
    """masked_softmax gave NaN for a row with no visible key (and NaN gradients even where multiplied by 0), and
    masked_logsumexp −inf; SDPA (the fused paths) gives zero weights there."""
    from energyformer.core.attention import masked_logsumexp, masked_softmax

    s = torch.randn(1, 1, 3, 3, dtype=D64, requires_grad=True)
    vis = torch.tensor([[True, False, True], [False, False, False], [True, True, True]])[None, None]
    p, lse = masked_softmax(s, vis), masked_logsumexp(s, vis)
    assert p[0, 0, 1].tolist() == [0.0, 0.0, 0.0] and lse[0, 0, 1] == 0.0
    v = torch.randn(1, 1, 3, 2, dtype=D64)
    q = torch.randn(1, 1, 3, 2, dtype=D64)
    torch.testing.assert_close(masked_softmax(q @ q.mT / 2 ** 0.5, vis) @ v, sdpa(q, q, v, False, None, mask=vis))
    torch.testing.assert_close(p[0, 0, [0, 2]], s[0, 0, [0, 2]].masked_fill(~vis[0, 0, [0, 2]], -torch.inf)
                               .softmax(-1))
    torch.testing.assert_close(lse[0, 0, 2], s[0, 0, 2].logsumexp(-1))
    g, = torch.autograd.grad((p * torch.randn_like(p)).sum() + lse.sum(), s)
    assert torch.isfinite(g).all() and g[0, 0, 1].abs().sum() == 0


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_query_that_sees_no_key_gets_zeros_on_cuda_too(dtype):
    """``masked_softmax`` gives a query with no visible key zero weights because PyTorch's SDPA does (CPU, 2.13):
    the fused paths call SDPA with the bool mask, and their reference paths use ``masked_softmax``. CUDA's
    backends for a bool mask (memory-efficient, cuDNN, math) have differed across versions (NaN rows): every one
    this torch offers must give zeros and a finite gradient, or the fused paths need their own zeroing."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 5, 16, generator=g).to("cuda", dtype).requires_grad_() for _ in range(3))
    vis = torch.ones(2, 1, 5, 5, dtype=torch.bool, device="cuda")
    vis[0, :, 2] = False      # query 2 of the first sequence sees no key
    ran = []
    for backend in (SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.MATH):
        try:
            with sdpa_kernel(backend):
                y = sdpa(q, k, v, False, None, mask=vis)
        except RuntimeError:      # a backend this build or card does not offer for these inputs
            continue
        ran.append(backend)
        assert torch.equal(y[0, :, 2], torch.zeros_like(y[0, :, 2])), (backend, y[0, :, 2])
        (gq, gk, gv) = torch.autograd.grad(y.float().square().sum(), (q, k, v))
        assert all(torch.isfinite(t).all() for t in (gq, gk, gv)), backend
    assert SDPBackend.MATH in ran


def _poisoned_queries(device, dtype, nq=6, nk=6):
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 2, n, 8, generator=g).to(device, dtype) for n in (nq, nk, nk))
    q[0, 1, nq - 1, 3] = float("nan")
    q[1, 0, 0, 5] = float("inf")
    return q, k, v


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("call", ["causal", "bidirectional", "one-query", "key-mask", "mask"])
def test_a_query_that_is_not_finite_gives_nan_not_zeros(dtype, call):
    """PyTorch's CPU SDPA returns zeros for a query row holding a NaN or an inf (float32 without a mask), a finite
    wrong output the residual hid: a NaN weight in W_Q gave finite logits (probe AS). Every branch of :func:`sdpa`
    now gives NaN in such rows, and the rows of finite queries as before (a query that sees no key keeps its zeros)."""
    nq = 1 if call == "one-query" else 6
    q, k, v = _poisoned_queries("cpu", dtype, nq=nq)
    km = torch.tensor([[True] * 6, [False] + [True] * 5])
    kw = {"causal": dict(causal=True, key_mask=None), "bidirectional": dict(causal=False, key_mask=None),
          "one-query": dict(causal=True, key_mask=None), "key-mask": dict(causal=True, key_mask=km),
          "mask": dict(causal=False, key_mask=None, mask=key_padding_mask(km))}[call]
    y = sdpa(q, k, v, **kw)
    bad = ~torch.isfinite(q).all(-1)  # (B, H, Nq)
    assert torch.isnan(y[bad]).all()
    fine = sdpa(q.nan_to_num(0.0, 0.0, 0.0), k, v, **kw)
    assert torch.equal(y[~bad], fine[~bad])
    huge = q.nan_to_num(0.0, 0.0, 0.0)
    huge[..., :4] = torch.finfo(dtype).max / 2  # finite, but a row sum overflows: still no NaN
    assert not torch.isnan(sdpa(huge, k * 0, v, **kw)).any()


def test_a_nan_in_a_query_weight_reaches_the_logits():
    """Probe AS's case: the GPT baseline with one NaN in its fused q/k/v projection (a query row of every token)
    gave all-finite logits 0.04 off the clean ones."""
    from energyformer.blocks import BlockConfig
    from energyformer.models import CausalLM, ModelConfig

    torch.manual_seed(0)
    m = CausalLM(ModelConfig(vocab_size=11, dim=16, n_layers=1, heads=2, max_seq_len=8, positions="learned",
                             block=BlockConfig(attention="gpt", mlp="gelu"))).eval()
    idx = torch.randint(0, 11, (2, 5))
    with torch.no_grad():
        m.layers[0].attn.c_attn.weight[0, 0] = float("nan")
    assert torch.isnan(m(idx).logits).all()


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cudas_sdpa_backends_carry_a_non_finite_query_into_its_row(dtype):
    """:func:`sdpa`'s NaN guard for non-finite queries runs on the CPU only, where PyTorch's SDPA gives zeros; on
    CUDA every backend must give NaN in that row by itself (raw F.scaled_dot_product_attention), or the guard is
    needed there too (``core.attention._query_nans``)."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = _poisoned_queries("cuda", dtype)
    bad = ~torch.isfinite(q).all(-1)
    ran = []
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION,
                    SDPBackend.MATH):
        for causal in (True, False):
            try:
                with sdpa_kernel(backend):
                    y = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            except RuntimeError:
                continue
            ran.append(backend)
            assert torch.isnan(y[bad]).all(), (backend, causal, y[bad])
    assert SDPBackend.MATH in ran


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("call", ["key-mask", "mask"])
def test_the_masked_calls_guard_a_non_finite_query_where_cpu_sdpa_gives_zeros(dtype, call):
    """Probe AV: at 6 tokens CPU SDPA's masked path gives NaN for a bad query by itself, so the test above cannot
    see the guard on the masked branches; at 64 tokens in bf16 / float16 it gives zeros (checked here, so the case
    keeps testing the guard), and :func:`sdpa` NaN."""
    import torch.nn.functional as F

    q, k, v = _poisoned_queries("cpu", dtype, nq=64, nk=64)
    q[0, 1, 63, 3] = float("inf")
    km = torch.ones(2, 64, dtype=torch.bool)
    km[1, 0] = False
    kw = dict(causal=True, key_mask=km) if call == "key-mask" else dict(causal=False, key_mask=None,
                                                                        mask=key_padding_mask(km))
    raw_mask = visible(64, 64, True, km, "cpu") if call == "key-mask" else key_padding_mask(km)
    raw = F.scaled_dot_product_attention(q, k, v, attn_mask=raw_mask)
    assert torch.equal(raw[0, 1, 63], torch.zeros_like(raw[0, 1, 63]))
    assert torch.isnan(sdpa(q, k, v, **kw)[0, 1, 63]).all()
