"""CausalLM generation and loss details no test in tests/models pinned (mutation probe AI)."""

import pytest
import torch
import torch.nn.functional as F

from energyformer.models.lm import CausalLM, ModelConfig, kv_cache_bytes


def _lm(**kw):
    torch.manual_seed(0)
    m = CausalLM(ModelConfig(vocab_size=30, dim=16, n_layers=1, heads=2, max_seq_len=16, **kw)).double().eval()
    with torch.no_grad():  # sharper than the initialisation, so a changed computation changes the argmax
        for p in m.parameters():
            p.mul_(4.0)
    return m


@pytest.mark.parametrize("use_cache", [True, False])
def test_temperature_zero_is_greedy(use_cache):
    # Pins ``greedy or temperature == 0`` (docstring: 0 = greedy): without it temperature 0 divides by 0 and
    # the softmax is NaN.
    m, idx = _lm(), torch.randint(0, 30, (2, 4))
    assert torch.equal(m.generate(idx, 4, temperature=0.0, use_cache=use_cache),
                       m.generate(idx, 4, greedy=True, use_cache=use_cache))


def test_generation_runs_the_models_iterations_by_default():
    # Pins ``iterations = cfg.iterations`` in stream: decoding with another number of passes than the forward
    # (1 instead of cfg.iterations = 3) survived, as both cached and uncached paths used the same wrong count.
    m, idx = _lm(iterations=3), torch.randint(0, 30, (2, 6))
    nxt = m(idx).logits[:, -1].argmax(-1, keepdim=True)
    assert torch.equal(m.generate(idx, 1, greedy=True)[:, -1:], nxt)


def test_loss_ignores_minus_100_targets_and_counts_token_0():
    # Pins ignore_index=-100 (the padding label the tasks use): token id 0 is a real target.
    m = _lm()
    idx = torch.randint(0, 30, (2, 5))
    tgt = torch.randint(1, 30, (2, 5))
    tgt[0, 1], tgt[1, 3], tgt[1, 0] = -100, -100, 0
    logits = m(idx).logits
    keep = tgt != -100
    want = F.cross_entropy(logits[keep], tgt[keep])
    torch.testing.assert_close(m(idx, targets=tgt).loss, want)


def test_kv_cache_bytes_counts_bytes_not_elements():
    # Pins element_size(): the float64 cache of one Llama layer over 5 tokens holds K and V of (1, 2, 5, 8).
    m, cache = _lm(), {}
    m(torch.randint(0, 30, (1, 5)), cache=cache)
    assert kv_cache_bytes(cache) == 2 * (1 * 2 * 5 * 8) * 8
