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


def test_generate_shows_the_prompt_with_the_first_token_not_before_a_failing_forward():
    """The prompt used to be emitted before the first forward ran, so an error there (e.g. an energy refused for
    cached decoding) was printed glued to it ("ROMEO:energyformer: error: ..."); now nothing is emitted before the
    first token, and a working stream still emits the prompt followed by the sample."""
    import argparse
    from types import SimpleNamespace

    from energyformer.tasks.lm import LMTask

    tok = get_tokenizer("bytes")
    task = SimpleNamespace(tokenizer=tok, _document_start=lambda: [0])
    args = argparse.Namespace(prompt="ROMEO:", max_new_tokens=2, temperature=None, top_k=None, greedy=True,
                              seed=0, stream=True)
    param = torch.nn.Parameter(torch.zeros(1))

    def failing(*a, **k):
        raise ConfigError("refused")
        yield

    out: list[str] = []
    model = SimpleNamespace(parameters=lambda: iter([param]), stream=failing)
    with pytest.raises(ConfigError, match="refused"):
        LMTask.generate(task, model, argparse.Namespace(**vars(args)), emit=out.append)
    assert out == []
    model.stream = lambda *a, **k: iter([torch.tensor([[ord("a")]]), torch.tensor([[ord("b")]])])
    text = LMTask.generate(task, model, argparse.Namespace(**vars(args)), emit=out.append)
    assert "".join(out) == text == "ROMEO:ab"
