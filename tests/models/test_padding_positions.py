"""Absolute positions under a key-padding mask (TokenModel.positions): a padded row's real tokens get the positions
they have unpadded, in one call and across KV-cached calls."""

from __future__ import annotations

import pytest
import torch

from energyformer.blocks.layer import BlockConfig
from energyformer.models.encoder import TokenEncoder
from energyformer.models.lm import CausalLM, ModelConfig

KINDS = {"gpt, learned": ("learned", BlockConfig(attention="gpt", mlp="gelu")),
         "mha, sinusoidal": ("sinusoidal", BlockConfig(attention="mha", mlp="gelu")),
         "cem, learned": ("learned", BlockConfig(attention="cem", mlp="cem"))}


def _lm(name):
    pos, block = KINDS[name]
    torch.manual_seed(0)
    m = CausalLM(ModelConfig(vocab_size=40, dim=16, n_layers=2, heads=2, max_seq_len=16, positions=pos, block=block))
    with torch.no_grad():  # sharper than the initialisation: positions matter to the logits
        for p in m.parameters():
            p.mul_(3.0)
    return m.double().eval()


@pytest.mark.parametrize("name", list(KINDS))
def test_a_left_padded_row_is_the_row_alone(name):
    """Once: positions counted every slot, so left padding shifted a row's learned or sinusoidal positions and
    an exported model's batched generation differed from the same prompt alone."""
    m = _lm(name)
    g = torch.Generator().manual_seed(1)
    a, b = torch.randint(1, 40, (1, 7), generator=g), torch.randint(1, 40, (1, 4), generator=g)
    batch = torch.cat([a, torch.cat([torch.zeros(1, 3, dtype=torch.long), b], 1)])
    mask = torch.ones_like(batch, dtype=torch.bool)
    mask[1, :3] = False
    out = m(batch, mask=mask).logits
    torch.testing.assert_close(out[1, 3:], m(b).logits[0], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(out[0], m(a).logits[0], rtol=1e-10, atol=1e-10)
    # the prompt through the cache, then tokens without a mask: each row continues from its own count
    cache, more = {}, torch.randint(1, 40, (2, 2), generator=g)
    m(batch, mask=mask, cache=cache)
    step = m(more, cache=cache, offset=7).logits
    torch.testing.assert_close(step[1], m(torch.cat([b, more[1:]], 1)).logits[0, 4:], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(step[0], m(torch.cat([a, more[:1]], 1)).logits[0, 7:], rtol=1e-10, atol=1e-10)


def test_an_encoder_row_padded_on_either_side_is_the_row_alone():
    torch.manual_seed(0)
    m = TokenEncoder(ModelConfig(vocab_size=12, dim=16, n_layers=1, heads=2, max_seq_len=16, positions="learned",
                                 iterations=2, block=BlockConfig(attention="gpt", mlp="gelu")), 5, causal=False)
    m = m.double().eval()
    x = torch.randint(0, 12, (1, 6), generator=torch.Generator().manual_seed(2))
    alone = m(x).logits[0]
    for left in (0, 2, 5):
        row = torch.cat([torch.zeros(1, left, dtype=torch.long), x, torch.zeros(1, 5 - left, dtype=torch.long)], 1)
        mask = torch.zeros_like(row, dtype=torch.bool)
        mask[0, left:left + 6] = True
        torch.testing.assert_close(m(row, mask=mask).logits[0, left:left + 6], alone, rtol=1e-10, atol=1e-10)


def test_without_a_mask_positions_and_the_cache_are_as_before():
    m = _lm("gpt, learned")
    cache = {}
    m(torch.randint(1, 40, (2, 5)), cache=cache)
    assert "_positions" not in cache  # the slot appears only once a call had a mask
