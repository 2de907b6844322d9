"""TokenModel's call checks (models/wrapper.py): what ``CausalLM`` / ``TokenEncoder`` refuse instead of computing a
finite wrong answer or failing deep inside a layer — a float mask (an additive 0 / -inf mask cast to bool would
hide exactly the real tokens), token ids of the wrong shape, dtype or range, a negative offset, an empty sequence,
``steps`` on a model with no descent steps and ``iterations`` below 1."""

import re

import pytest
import torch

from energyformer.models import CausalLM, ModelConfig, TokenEncoder
from energyformer.utils.config import load_config
from energyformer.utils.validate import ConfigError

CEM = {"attention": {"kind": "cem"}, "mlp": {"kind": "cem"}}


def _model(cls=CausalLM, block=None, **kw):
    torch.manual_seed(0)
    cfg = {"dim": 16, "heads": 2, "n_layers": 1, "vocab_size": 11, "max_seq_len": 12, **kw}
    if block:
        cfg["block"] = block
    model = cls(load_config(ModelConfig, cfg)) if cls is CausalLM else cls(load_config(ModelConfig, cfg), n_out=3)
    return model.eval()


IDX = torch.randint(0, 11, (2, 6), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("cls,block", [(CausalLM, None), (CausalLM, CEM), (TokenEncoder, None)],
                         ids=["llama", "cem", "encoder"])
@pytest.mark.parametrize("mask", [torch.zeros(2, 6), torch.full((2, 6), float("nan")), torch.ones(2, 6).long()],
                         ids=["additive-float", "nan", "long"])
def test_non_bool_masks_are_refused(cls, block, mask):
    model = _model(cls, block)
    with pytest.raises(ValueError, match=r"mask of dtype torch\.\w+: expected torch\.bool"):
        model(IDX, mask=mask)


def test_a_bool_mask_still_hides_padding():
    model = _model(TokenEncoder)
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[1, 4:] = False
    out = model(IDX, mask=mask).logits
    changed = IDX.clone()
    changed[1, 4:] = (changed[1, 4:] + 1) % 11  # the hidden tokens change: the real ones' logits do not
    torch.testing.assert_close(model(changed, mask=mask).logits[1, :4], out[1, :4])


@pytest.mark.parametrize("idx,says", [
    (torch.randint(0, 11, (6,)), r"idx of shape \(6,\) and dtype torch.int64: expected token ids \(B, N\)"),
    (torch.rand(2, 6), r"idx of shape \(2, 6\) and dtype torch.float32: expected token ids"),
    (torch.ones(2, 6, dtype=torch.bool), "dtype torch.bool: expected token ids"),
    (torch.zeros(2, 0, dtype=torch.long), r"idx of shape \(2, 0\): expected at least one token per row"),
    (torch.full((2, 6), 11), r"token ids outside \[0, 11\) \(model.vocab_size\): min 11, max 11"),
    (torch.full((2, 6), -1), r"token ids outside \[0, 11\) \(model.vocab_size\): min -1, max -1"),
    (torch.ones(2, 6, dtype=torch.uint8), r"dtype torch.uint8: expected token ids \(B, N\) of dtype torch.int64 or"),
    (torch.ones(2, 6, dtype=torch.int16), "dtype torch.int16: expected token ids"),
    (torch.ones(2, 6, dtype=torch.long, device="meta"), r"idx on device meta, the model on cpu: move the token ids"),
], ids=["1-d", "float", "bool", "empty", "too-large", "negative", "uint8", "int16", "meta"])
@pytest.mark.parametrize("block", [None, CEM], ids=["llama", "cem"])
def test_bad_token_ids_are_one_line_errors(block, idx, says):
    with pytest.raises(ValueError, match=says):
        _model(block=block)(idx)


@pytest.mark.parametrize("offset,says", [(-3, "offset = -3: must be an integer >= 0"),
                                         (1.5, "offset = 1.5: must be an integer"),
                                         (True, "offset = True: must be an integer")])
def test_offset_must_be_a_non_negative_integer(offset, says):
    with pytest.raises(ValueError, match=f"^{re.escape(says)}$"):
        _model()(IDX, offset=offset)


def test_steps_on_a_model_without_descent_steps_is_refused():
    with pytest.raises(ConfigError, match=r"steps = 2: a 'transformer' model has no energy descent steps to set"):
        _model()(IDX, steps=2)
    cem = _model(block=CEM)
    for bad in (0, -2):
        with pytest.raises(ConfigError, match=rf"steps = {bad}: a 'transformer' model takes steps as an integer >= 1"):
            cem(IDX, steps=bad)
    assert torch.isfinite(cem(IDX, steps=3).logits).all()


@pytest.mark.parametrize("iterations,says", [(0, "iterations = 0: must be an integer >= 1"),
                                             (-1, "iterations = -1: must be an integer >= 1"),
                                             (2.0, "iterations = 2.0: must be an integer")])
def test_iterations_below_one_are_refused(iterations, says):
    with pytest.raises(ValueError, match=f"^{re.escape(says)}$"):
        _model()(IDX, iterations=iterations)
