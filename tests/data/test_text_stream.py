"""Tests for energyformer.data.text_stream: the streamed pieces of a sample join to its decode, for every
tokenizer kind, with no unfinished character printed and no released text rewritten."""

from __future__ import annotations

import random

import pytest

from energyformer.data import tokenizers as K
from energyformer.data.text_stream import TextStream


def _kinds():
    out = [K.get_tokenizer("bytes"), K.get_tokenizer("bytes", eos=True), K.get_tokenizer("bpe"),
           K.get_tokenizer("gpt2")]
    if K.prepare_llama_model(download=False) is not None:
        out.append(K.get_tokenizer("llama"))
    return out


@pytest.mark.parametrize("tok", _kinds(), ids=lambda t: t.name)
def test_pieces_join_to_the_decode_and_never_end_in_half_a_character(tok):
    rng = random.Random(0)
    text = "naïve café — 日本語 🤖\nROMEO: To be, or not  to be?\n\n"
    for ids in (tok.encode(text), [rng.randrange(tok.vocab_size) for _ in range(300)]):
        for chunk in (1, 3):
            stream = TextStream(tok, ids[:2])
            pieces = [stream.push([])]
            for i in range(2, len(ids), chunk):
                pieces.append(stream.push(ids[i:i + chunk]))
                assert "".join(pieces) == tok.decode(ids[:i + chunk]).rstrip("\ufffd")
            pieces.append(stream.finish())
            assert "".join(pieces) == tok.decode(ids) == stream.released
    if tok.name.startswith("bytes"):  # '€' is three bytes: nothing until the third
        stream = TextStream(tok)
        assert [stream.push([b]) for b in "a€".encode()] == ["a", "", "", "€"]
        assert stream.push([0xE2]) == "" and stream.finish() == "\ufffd"  # cut short: the decode's own U+FFFD


class _Rewriting(K.ByteTokenizer):
    """A decode that changes earlier text when a token follows (as a clean-up of ' .' to '.' would)."""

    def decode(self, ids):
        return super().decode(ids).replace(" .", ".")


def test_a_decode_that_rewrites_printed_text_is_held_then_refused():
    stream = TextStream(_Rewriting())
    assert stream.push(b"a ") == "a "
    assert stream.push(b".") == ""  # "a." does not extend "a ": nothing more is released
    with pytest.raises(RuntimeError, match="changed text already printed.*without streaming"):
        stream.finish()
