import math

import torch

from energyformer.data.text import EvalWindows
from energyformer.data.tokenizers import get_tokenizer
from energyformer.models.lm import CausalLM, ModelConfig
from energyformer.tasks.lm import LMTaskConfig, evaluate_lm
from energyformer.utils.validate import ConfigError

import pytest


def test_evaluate_lm_bits_per_byte_matches_definition():
    tok = get_tokenizer("bytes")
    text = "abcabcabd" * 30
    w = EvalWindows.from_text(text, tok, seq_len=16, batch_size=2, cache=False)
    torch.manual_seed(0)
    m = CausalLM(ModelConfig(vocab_size=tok.vocab_size, dim=16, n_layers=1, heads=2)).eval()
    res = evaluate_lm(m, w)
    assert res["tokens"] == w.n_targets
    # byte tokenizer: one token per byte; the first byte has no context and is not scored (nor counted)
    assert res["bpb"] == pytest.approx(res["loss"] * w.n_targets / (math.log(2) * (len(text) - 1)), rel=1e-9)
    assert res["bpb"] == pytest.approx(res["loss"] / math.log(2), rel=1e-9)  # one byte per scored token
    assert res["ppl"] == pytest.approx(math.exp(res["loss"]))


def test_task_config_errors():
    with pytest.raises(ConfigError, match="tokenizer = 'sentencepiece': allowed values are 'bpe', 'gpt2'"):
        LMTaskConfig(tokenizer="sentencepiece")
    with pytest.raises(ConfigError, match="task.text_files is empty"):
        LMTaskConfig(corpus="files")
    with pytest.raises(ConfigError, match="task.corpus = 'shakespeare' ignores it"):
        LMTaskConfig(text_files=["a.txt"])
