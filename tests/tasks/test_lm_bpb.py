"""Bits per byte of a truncated LM evaluation counts the bytes of exactly the targets scored.

``evaluate_lm(..., max_batches)`` (the periodic evaluation) scores the first windows only. It used to divide by the
split's mean bytes per token times the tokens scored (pro rata), which is not the prefix's byte count: with
multi-byte characters at the start of a text the reported bits per byte were far off (3% high on Shakespeare).
"""

import math

import pytest
import torch

from energyformer.data.text import EvalWindows, count_bytes
from energyformer.data.tokenizers import Tokenizer
from energyformer.models.lm import CausalLM, ModelConfig
from energyformer.tasks.lm import evaluate_lm

ALPHABET = "ab €é\n"  # 1, 1, 1, 3, 2, 1 UTF-8 bytes
TEXT = "€é€é" * 10 + "ab ab\n" * 40  # multi-byte characters first: pro rata and exact differ a lot


class Chars(Tokenizer):
    """One id per character of ALPHABET; ``token_bytes`` None (the default): the decoded text is counted."""

    name, vocab_size = "chars", len(ALPHABET)

    def __init__(self) -> None:
        self.token_bytes_calls = 0

    def encode(self, text):
        return [ALPHABET.index(c) for c in text]

    def decode(self, ids):
        return "".join(ALPHABET[i] for i in ids)


class CountingChars(Chars):
    """Chars that counts its own bytes (``token_bytes``), and the calls to it."""

    def token_bytes(self, ids):
        self.token_bytes_calls += 1
        return sum(count_bytes(ALPHABET[i]) for i in ids)


class LossyChars(Chars):
    """Chars whose decoding is not the text (upper case): no exact byte count of a prefix."""

    def decode(self, ids):
        return super().decode(ids).upper()


def _model() -> CausalLM:
    torch.manual_seed(0)
    return CausalLM(ModelConfig(vocab_size=len(ALPHABET), dim=16, n_layers=1, heads=2)).eval()


def _scored_text_bytes(ids: torch.Tensor, n: int) -> int:
    """The UTF-8 bytes of the n scored targets ids[1:n+1], counted here independently of the library."""
    return len("".join(ALPHABET[i] for i in ids[1:n + 1].tolist()).encode("utf-8"))


@pytest.mark.parametrize("tok_cls", [Chars, CountingChars])
def test_truncated_evaluation_bpb_uses_the_bytes_of_the_scored_targets(tok_cls):
    """Old: bpb = total / (ln 2 * n_bytes * n / n_targets), here 1.5 bytes per token where the scored prefix
    (all € and é) has 2.5: the bits per byte came out ~1.7x too high."""
    w = EvalWindows.from_text(TEXT, tok_cls(), seq_len=8, batch_size=2, cache=False)
    res = evaluate_lm(_model(), w, max_batches=1)
    n = int(res["tokens"])
    assert n == 16 < w.n_targets
    exact = _scored_text_bytes(w.data, n)
    assert exact == 40 and w.n_bytes * n / w.n_targets < 25  # the pro-rata count is far off
    assert res["bpb"] == pytest.approx(res["loss"] * n / (math.log(2) * exact), rel=1e-9)


def test_full_evaluation_bpb_is_unchanged_and_a_prefix_count_is_cached():
    """The whole split: n_bytes (the text less its unscored first token), as before. A prefix is counted once."""
    tok = CountingChars()
    w = EvalWindows.from_text(TEXT, tok, seq_len=8, batch_size=2, cache=False)
    assert w.n_bytes == count_bytes(TEXT) - count_bytes(TEXT[0])
    for max_batches in (None, len(w) + 5):
        res = evaluate_lm(_model(), w, max_batches=max_batches)
        assert res["tokens"] == w.n_targets
        assert res["bpb"] == pytest.approx(res["loss"] * w.n_targets / (math.log(2) * w.n_bytes), rel=1e-9)
    calls = tok.token_bytes_calls
    for _ in range(3):  # a periodic evaluation asks for the same prefix every time
        evaluate_lm(_model(), w, max_batches=2)
    assert tok.token_bytes_calls == calls + 1
    assert w.scored_bytes(32) == _scored_text_bytes(w.data, 32)


def test_truncated_evaluation_without_an_exact_byte_count_reports_no_bpb():
    """Windows built without a tokenizer, or with one whose decoding is not the text, cannot count a prefix's
    bytes: no bpb (old: a finite pro-rata value); the whole split still has its bpb."""
    model = _model()
    ref = EvalWindows.from_text(TEXT, Chars(), seq_len=8, batch_size=2, cache=False)
    bare = EvalWindows(ref.data, seq_len=8, batch_size=2, n_bytes=ref.n_bytes)
    lossy = EvalWindows.from_text(TEXT, LossyChars(), seq_len=8, batch_size=2, cache=False)
    for w in (bare, lossy):
        res = evaluate_lm(model, w, max_batches=1)
        assert res["tokens"] == 16 and "bpb" not in res and math.isfinite(res["loss"])
        assert w.scored_bytes(16) is None
        full = evaluate_lm(model, w)
        assert full["bpb"] == pytest.approx(full["loss"] * w.n_targets / (math.log(2) * ref.n_bytes), rel=1e-9)
    with pytest.raises(ValueError, match="n = 9999"):
        bare.scored_bytes(9999)
