"""TokenModel details no test pinned (mutation probe AI): the sinusoid values, the length check, the
embedding dropout and the generic init rule."""

import math

import pytest
import torch

from energyformer.blocks.layer import BlockConfig
from energyformer.models.lm import CausalLM, ModelConfig
from energyformer.models.wrapper import sinusoid_table


def _lm(**kw):
    torch.manual_seed(0)
    return CausalLM(ModelConfig(vocab_size=30, dim=16, n_layers=1, heads=2, max_seq_len=8, **kw))


def test_sinusoid_table_values():
    # Pins Vaswani et al.'s PE[p, 2i] = sin(p / 10000^{2i/D}), PE[p, 2i+1] = cos(...): the other tests only
    # compare the module with this same function, so sin/cos swapped or another base passed.
    pe, D = sinusoid_table(6, 8), 8
    for p in (0, 1, 5):
        for i in range(D // 2):
            a = p / 10000 ** (2 * i / D)
            assert pe[p, 2 * i].item() == pytest.approx(math.sin(a), abs=1e-15)
            assert pe[p, 2 * i + 1].item() == pytest.approx(math.cos(a), abs=1e-15)


def test_one_token_past_max_seq_len_is_a_clear_error():
    # Pins ``offset + N > max_seq_len``: max_seq_len + 1 tokens must give the ValueError naming the limit, not
    # an IndexError from the position table.
    m = _lm(positions="sinusoidal")
    m(torch.zeros(1, 8, dtype=torch.long))
    with pytest.raises(ValueError, match="exceeds model.max_seq_len = 8"):
        m(torch.zeros(1, 9, dtype=torch.long))
    with pytest.raises(ValueError, match="exceeds model.max_seq_len = 8"):
        m(torch.zeros(1, 1, dtype=torch.long), offset=8)


def test_embedding_dropout_applies_in_training_only():
    # Pins the dropout on the embedded input (block.dropout also reaches the embedding, BlockConfig docs).
    m = _lm(block=BlockConfig(attention="gpt", mlp="gelu", dropout=0.5))
    idx = torch.randint(0, 30, (2, 8))
    assert (m.train()(idx, hiddens=True).embedded == 0).any()
    assert not (m.eval()(idx, hiddens=True).embedded == 0).any()


def test_normal_init_uses_init_std_and_zero_biases():
    # Pins init_module: weights ~ N(0, init_std²) with the configured std, biases 0 (GPT's c_attn has one).
    torch.manual_seed(0)
    m = CausalLM(ModelConfig(vocab_size=400, dim=64, n_layers=1, heads=2, init_std=0.3,
                             block=BlockConfig(attention="gpt", mlp="gelu")))
    assert m.embed.weight.std().item() == pytest.approx(0.3, rel=0.05)
    attn = m.layers[0].attn
    assert attn.c_attn.weight.std().item() == pytest.approx(0.3, rel=0.05)
    assert torch.count_nonzero(attn.c_attn.bias) == 0 and torch.count_nonzero(attn.c_proj.bias) == 0
