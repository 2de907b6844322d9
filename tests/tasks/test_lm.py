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


def test_evaluate_lm_reads_the_losses_once_whatever_the_number_of_windows(host_reads):
    """The windows' NLL sums stay on the device and are read in one transfer: the host reads of an evaluation do not
    grow with its batches (before: one ``.item()`` per batch, so the host waited for each batch before queueing the
    next). The numbers are those of reading each batch's sum and adding them in Python, exactly."""
    import torch.nn.functional as F

    from energyformer.models.output import ModelOutput

    tok = get_tokenizer("bytes")
    w = EvalWindows.from_text("abcabcabd" * 30, tok, seq_len=16, batch_size=2, cache=False)

    class Bigram(torch.nn.Module):  # reads nothing on the host itself
        def __init__(self):
            super().__init__()
            self.e = torch.nn.Embedding(tok.vocab_size, tok.vocab_size)

        def forward(self, x):
            return ModelOutput(logits=self.e(x))

    torch.manual_seed(0)
    m = Bigram()
    reads = []
    for k in (1, 4):
        with torch.no_grad():
            total, n_tok = 0.0, 0
            for x, y in list(w)[:k]:  # the old loop: one read per batch
                total += F.cross_entropy(m(x).logits.flatten(0, 1), y.flatten(), reduction="sum").item()
                n_tok += y.numel()
        with host_reads() as count:
            res = evaluate_lm(m, w, max_batches=k)
        reads.append(count.n)
        assert res["loss"] == total / n_tok and res["tokens"] == n_tok
    assert reads[0] == reads[1], reads


def test_files_corpus_holds_out_the_last_val_fraction(tmp_path):
    """``corpus: files`` keeps the first ``1 - val_fraction`` of the text for training and the rest for validation:
    1000 characters with val_fraction 0.1 give 900 / 100, and the parts join back to the text. Before, nothing
    checked the sizes: a split that swapped them (100 train / 900 validation) passed."""
    from energyformer.tasks.lm import load_splits

    text = "".join(chr(ord("a") + i % 26) for i in range(1000))
    f = tmp_path / "t.txt"
    f.write_text(text)
    s = load_splits(LMTaskConfig(corpus="files", text_files=[str(f)], val_fraction=0.1))
    assert len(s["train"]) == 900 and len(s["validation"]) == 100
    assert s["validation"] == text[900:] and s["train"] + s["validation"] == text
