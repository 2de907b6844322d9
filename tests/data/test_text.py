"""Tests for energyformer.data.text: cache dir, Shakespeare, user files, token datasets."""

from __future__ import annotations

import codecs
import hashlib
import math
import re

import pytest

from energyformer.errors import DataError
import torch

from energyformer.data import shakespeare as S
from energyformer.data import text as T
from energyformer.data.tokenizers import ByteTokenizer, get_tokenizer
from energyformer.utils.validate import ConfigError

# --------------------------------------------------------------------------------------------
# data_dir
# --------------------------------------------------------------------------------------------


def test_data_dir_env_wins(tmp_path, monkeypatch):
    monkeypatch.setenv("ENERGYFORMER_DATA", str(tmp_path / "cache"))
    assert T.data_dir() == (tmp_path / "cache").resolve()


def test_data_dir_git_root_then_home(tmp_path, monkeypatch):
    monkeypatch.delenv("ENERGYFORMER_DATA", raising=False)
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "sub" / "dir").mkdir(parents=True)
    monkeypatch.chdir(repo / "sub" / "dir")
    assert T.data_dir() == repo.resolve() / "data_cache"
    outside = tmp_path / "nogit"
    outside.mkdir()
    monkeypatch.chdir(outside)
    monkeypatch.setattr(T, "_git_root", lambda start: None)  # tmp may sit inside a git tree
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert T.data_dir() == tmp_path / "home" / ".cache" / "energyformer"


# --------------------------------------------------------------------------------------------
# Shakespeare
# --------------------------------------------------------------------------------------------


def test_splits_deterministic_disjoint_and_complete():
    a, b = S.shakespeare_splits(), S.shakespeare_splits()
    assert a == b
    assert set(a) == set(T.SPLITS)
    plays = list(S.shakespeare_play_files())
    assert len(plays) == 38
    sets = [set(a[s]) for s in T.SPLITS]
    assert sum(len(s) for s in sets) == len(plays)
    assert set().union(*sets) == set(plays)
    for i in range(3):
        for j in range(i + 1, 3):
            assert not sets[i] & sets[j]
    assert len(a["validation"]) == len(a["test"]) == S.N_HELD_OUT
    assert "hamlet" in plays


def test_split_record_matches_rule():
    meta = S.prepare_shakespeare()
    assert meta["splits"] == S.shakespeare_splits()
    for s in T.SPLITS:
        assert meta["bytes"][s] == T.count_bytes(S.load_shakespeare(s))


def test_convert_markdown_format():
    md = "# Play\n\n**HAMLET**  \nTo be, or not to be:  \nthat is the question.\n\n_Exit_\n"
    out = S.convert_markdown(md)
    assert out == "# Play\n\nHAMLET:\nTo be, or not to be:\nthat is the question.\n\n_Exit_\n"


def test_load_shakespeare_format_and_size():
    val = S.load_shakespeare("validation")
    assert "**" not in val and "  \n" not in val
    speakers = re.findall(r"^([A-Z][A-Z .'-]+):$", val, flags=re.M)
    assert len(speakers) > 100
    train = S.load_shakespeare("train")
    assert 3_500_000 < len(train) < 5_000_000
    assert len(val) < len(train) / 10
    # validation plays do not appear in train (their titles are headings)
    files = S.shakespeare_play_files()
    for name in S.shakespeare_splits()["validation"]:
        title = files[name].read_text("utf-8").splitlines()[0]
        assert title.startswith("# ") and title in val and title + "\n" not in train


def test_load_shakespeare_bad_split():
    with pytest.raises(ConfigError, match=r"split = 'valid'.*'validation'"):
        S.load_shakespeare("valid")


# --------------------------------------------------------------------------------------------
# user text files
# --------------------------------------------------------------------------------------------


def test_load_text_files_one_and_many(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("héllo\n", "utf-8")
    b.write_text("wörld", "utf-8")
    assert T.load_text_files(a) == "héllo\n"
    assert T.load_text_files([str(a), b]) == "héllo\n\n\nwörld"
    assert T.load_text_files([a, b], separator="") == "héllo\nwörld"


def test_load_text_files_bad_utf8_names_file_and_line(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_bytes("line one\nline two ok\nthird \xff here\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"bad\.txt.*not valid UTF-8: line 3, column 7"):
        T.load_text_files([bad])


def test_load_text_files_missing_and_empty(tmp_path):
    missing = tmp_path / "nope.txt"
    with pytest.raises(DataError, match="nope.txt"):
        T.load_text_files(missing)
    with pytest.raises(DataError, match="no text files given"):
        T.load_text_files([])


@pytest.mark.parametrize("content, message", [
    (b"", "is empty"), (b"  \n\t\n", "is empty"), (b"abc\n\x00\x01\x02", "looks binary \\(NUL byte on line 2\\)"),
    (b"ok\nbad \xff byte", "not valid UTF-8: line 2, column 5"),
])
def test_unusable_text_files_are_named_errors(tmp_path, content, message):
    f = tmp_path / "input.txt"
    f.write_bytes(content)
    with pytest.raises(DataError, match=f"input.txt.*{message}"):
        T.load_text_files(f)
    with pytest.raises(DataError, match="is a directory"):
        T.load_text_files(tmp_path)


def test_a_byte_order_mark_is_not_text(tmp_path):
    """A UTF-8 BOM (Windows editors write one) is a file signature: dropped as utf-8-sig does, so it is
    neither scored as a character nor counted as bytes; a file holding only a BOM is empty."""
    f, g = tmp_path / "bom.txt", tmp_path / "plain.txt"
    f.write_bytes(codecs.BOM_UTF8 + "héllo\n".encode())
    g.write_text("wörld", "utf-8")
    assert T.load_text_files(f) == "héllo\n"
    assert T.load_text_files([g, f]) == "wörld\n\nhéllo\n"
    assert T.count_bytes(T.load_text_files(f)) == len("héllo\n".encode())
    f.write_bytes(codecs.BOM_UTF8 + b" \n")
    with pytest.raises(DataError, match="bom.txt.*is empty"):
        T.load_text_files(f)
    f.write_bytes(codecs.BOM_UTF8 + b"ok\n\xff")
    with pytest.raises(DataError, match="bom.txt.*not valid UTF-8: line 2, column 1"):
        T.load_text_files(f)


def test_count_bytes():
    assert T.count_bytes("aé日") == 1 + 2 + 3


# --------------------------------------------------------------------------------------------
# token datasets
# --------------------------------------------------------------------------------------------


def test_encode_corpus_caches(tmp_path, monkeypatch):
    monkeypatch.setenv("ENERGYFORMER_DATA", str(tmp_path))
    tok = ByteTokenizer()
    ids = T.encode_corpus("abc é", tok)
    assert ids.dtype == torch.long and ids.dim() == 1
    assert ids.tolist() == list("abc é".encode())
    files = list((tmp_path / "tokens").glob("bytes-*.npy"))
    assert len(files) == 1
    calls = []
    monkeypatch.setattr(tok, "encode", lambda s: calls.append(s) or [])
    monkeypatch.setattr(tok, "encode_long", lambda s: calls.append(s) or [])
    assert torch.equal(T.encode_corpus("abc é", tok), ids) and not calls  # loaded from cache



def _npy(arr) -> bytes:
    import io
    import numpy as np

    buf = io.BytesIO()
    np.save(buf, np.asarray(arr))
    return buf.getvalue()


@pytest.mark.parametrize("content, problem", [
    (b"", "cannot be read \\(EOFError"),
    (_npy(list(range(50)))[:-20], "cannot be read \\(ValueError"),  # truncated
    (bytes(range(256)) * 4, "cannot be read \\(ValueError"),  # random bytes ('pickled data')
    (_npy([[1, 2], [3, 4]]), "not a 1-D array of token ids"),
    (_npy([1.5, 2.0]), "not a 1-D array of token ids"),
    (_npy([1, 300]), "ids outside \\[0, 256\\)"),
])
def test_corrupt_token_cache_is_encoded_again_with_a_warning(tmp_path, monkeypatch, content, problem):
    monkeypatch.setenv("ENERGYFORMER_DATA", str(tmp_path))
    ids = T.encode_corpus("abc é", ByteTokenizer())
    (path,) = (tmp_path / "tokens").glob("bytes-*.npy")
    path.write_bytes(content)  # was an internal error (EOFError, ValueError) or foreign ids used silently
    with pytest.warns(UserWarning, match=f"token cache {re.escape(str(path))} .*{problem}.*encoding the text again"):
        assert torch.equal(T.encode_corpus("abc é", ByteTokenizer()), ids)
    assert torch.equal(T.encode_corpus("abc é", ByteTokenizer()), ids)  # rewritten: no warning now

def test_lm_batcher_shapes_and_targets():
    data = torch.arange(1000)
    b = T.LMBatcher(data, batch_size=4, seq_len=16, seed=3)
    x, y = next(b)
    assert x.shape == y.shape == (4, 16) and x.dtype == torch.long
    assert torch.equal(y, x + 1)  # contiguous windows shifted by one
    assert int(y.max()) <= 999


def test_lm_batcher_resume_exact():
    data = torch.randint(0, 50, (5000,), generator=torch.Generator().manual_seed(0))
    run = T.LMBatcher(data, batch_size=3, seq_len=8, seed=7)
    uninterrupted = [next(run) for _ in range(10)]

    first = T.LMBatcher(data, batch_size=3, seq_len=8, seed=7)
    for _ in range(4):
        next(first)
    state = first.state_dict()
    assert state == {"seed": 7, "step": 4, "batch_size": 3, "seq_len": 8, "n_tokens": 5000,
                     "tokens_sha256": hashlib.sha256(data.numpy().tobytes()).hexdigest()}
    resumed = T.LMBatcher(data, batch_size=3, seq_len=8, seed=999)
    resumed.load_state_dict(dict(state))
    for k in range(4, 10):
        x, y = next(resumed)
        assert torch.equal(x, uninterrupted[k][0]) and torch.equal(y, uninterrupted[k][1])
    other_seed = T.LMBatcher(data, batch_size=3, seq_len=8, seed=8)
    assert not torch.equal(next(other_seed)[0], uninterrupted[0][0])
    with pytest.raises(DataError, match="seq_len"):
        T.LMBatcher(data, batch_size=3, seq_len=9).load_state_dict(state)


def test_lm_batcher_refuses_to_resume_on_other_tokens():
    """The training text changed since the checkpoint: another token count was an internal ValueError, and the
    same count with other ids resumed silently on other data; both are a DataError saying so. A state saved
    before the sha256 was kept is checked on its count."""
    data = torch.randint(0, 50, (500,), generator=torch.Generator().manual_seed(0))
    state = T.LMBatcher(data, batch_size=3, seq_len=8).state_dict()
    other = data.clone()
    other[17] = (other[17] + 1) % 50
    for new in (torch.cat([data, data[:5]]), other):
        with pytest.raises(DataError, match=r"the training data changed since the state was saved: it was 500 "
                                            r"tokens \(sha256 [0-9a-f]{12}…\), this run's text gives"):
            T.LMBatcher(new, batch_size=3, seq_len=8).load_state_dict(dict(state))
    legacy = {k: v for k, v in state.items() if k != "tokens_sha256"}
    T.LMBatcher(other, batch_size=3, seq_len=8).load_state_dict(legacy)  # same count: accepted
    with pytest.raises(DataError, match="it was 500 tokens, this run's text gives 505"):
        T.LMBatcher(torch.cat([data, data[:5]]), batch_size=3, seq_len=8).load_state_dict(legacy)


def test_lm_batcher_refuses_to_resume_beside_other_held_out_texts():
    """The run's validation/test texts are recorded with the data state (held_out_sha256): resuming beside other
    ones would switch the texts its evaluations score mid-run; a state without the record resumes."""
    data = torch.randint(0, 50, (500,), generator=torch.Generator().manual_seed(0))
    state = T.LMBatcher(data, batch_size=3, seq_len=8, held_out_sha256="a" * 64).state_dict()
    assert state["held_out_sha256"] == "a" * 64
    with pytest.raises(DataError, match="the validation/test text changed since the state was saved"):
        T.LMBatcher(data, batch_size=3, seq_len=8, held_out_sha256="b" * 64).load_state_dict(dict(state))
    T.LMBatcher(data, batch_size=3, seq_len=8, held_out_sha256="a" * 64).load_state_dict(dict(state))
    legacy = {k: v for k, v in state.items() if k != "held_out_sha256"}
    T.LMBatcher(data, batch_size=3, seq_len=8, held_out_sha256="b" * 64).load_state_dict(legacy)
    assert "held_out_sha256" not in T.LMBatcher(data, batch_size=3, seq_len=8).state_dict()


def test_lm_batcher_too_short():
    with pytest.raises(ValueError, match="need at least 11"):
        T.LMBatcher(torch.arange(10), batch_size=1, seq_len=10)


@pytest.mark.parametrize("n,seq_len,batch_size", [(101, 10, 3), (100, 10, 4), (11, 10, 2)])
def test_eval_windows_cover_every_target_once(n, seq_len, batch_size):
    data = torch.arange(n)
    ev = T.EvalWindows(data, seq_len=seq_len, batch_size=batch_size)
    targets, batches = [], list(ev)
    assert len(batches) == len(ev)
    for x, y in batches:
        assert x.shape == y.shape and x.shape[0] <= batch_size and x.shape[1] <= seq_len
        assert torch.equal(y, x + 1)
        targets += y.flatten().tolist()
    assert targets == list(range(1, n))
    assert ev.n_tokens == n and ev.n_targets == n - 1


def test_eval_windows_from_text_and_bpb(tmp_path, monkeypatch):
    monkeypatch.setenv("ENERGYFORMER_DATA", str(tmp_path))
    text = "to be or not to be — that is the question\n" * 5
    ev = T.EvalWindows.from_text(text, ByteTokenizer(), seq_len=32, batch_size=2)
    # the first token has no context and is not scored: its byte is not counted either
    assert ev.n_bytes == T.count_bytes(text) - 1 == ev.n_targets
    # a uniform model over 256 bytes costs exactly 8 bits per byte (the first byte counted, 8 · 419/420 before)
    nll = ev.n_targets * math.log(256)
    assert ev.bits_per_byte(nll) == pytest.approx(8.0, rel=1e-12)
    # a multi-byte first character, and BPE: the first token's own bytes are left out
    w = T.EvalWindows.from_text("é" + text, ByteTokenizer(), seq_len=32, batch_size=2, cache=False)
    assert w.n_bytes == T.count_bytes(text) + 1  # the first of é's two bytes is the unscored token
    w = T.EvalWindows.from_text(text, get_tokenizer("bpe"), seq_len=32, batch_size=2, cache=False)
    first = get_tokenizer("bpe").decode(w.data[:1].tolist())
    assert text.startswith(first) and w.n_bytes == T.count_bytes(text) - T.count_bytes(first) < T.count_bytes(text)
    # a BPE first token inside é (byte-level: its first byte alone) leaves out that one byte
    w = T.EvalWindows.from_text("é" + text, get_tokenizer("bpe"), seq_len=32, batch_size=2, cache=False)
    assert w.n_bytes == T.count_bytes("é" + text) - get_tokenizer("bpe").token_bytes(w.data[:1].tolist())
    assert get_tokenizer("bpe").token_bytes(get_tokenizer("bpe").encode("é" + text)) == T.count_bytes("é" + text)
    with pytest.raises(ValueError, match="n_bytes"):
        T.bits_per_byte(1.0, 0)


def test_unigram_baseline_on_real_text():
    tok = get_tokenizer("bpe")
    train = T.encode_corpus(S.load_shakespeare("train"), tok)
    val = T.encode_corpus(S.load_shakespeare("validation"), tok)
    ppl = T.unigram_perplexity(train, val, tok.vocab_size)
    assert 50 < ppl < tok.vocab_size / 4
    # uniform counts give exactly the vocabulary size
    assert T.unigram_perplexity([], [0, 1, 2], 10) == pytest.approx(10.0)
    with pytest.raises(ValueError, match="eval_ids has ids outside"):
        T.unigram_perplexity([0], [10], 10)


def test_eval_windows_of_a_tokenizer_that_cannot_count_bytes_use_its_decoded_first_token(tmp_path, monkeypatch):
    """A tokenizer without its own byte count (``Tokenizer.token_bytes`` None, the default): the first token's
    bytes are those of its decoded text where that is a prefix of the text."""
    from energyformer.data.tokenizers import Tokenizer

    class Chars(Tokenizer):
        name, vocab_size = "chars", 0x110000

        def encode(self, text):
            return [ord(c) for c in text]

        def decode(self, ids):
            return "".join(map(chr, ids))

    monkeypatch.setenv("ENERGYFORMER_DATA", str(tmp_path))
    assert Chars().token_bytes([233]) is None
    w = T.EvalWindows.from_text("é and more", Chars(), seq_len=4, cache=False)
    assert w.n_bytes == T.count_bytes(" and more") == T.count_bytes("é and more") - 2


def test_lm_batcher_draws_every_window_the_last_included():
    """Tokens arange(6) with seq_len 4 hold two windows (starts 0 and 1; the last needs token 5 as its target):
    both are drawn over 200 batches. Before, nothing checked the range: a batcher that never drew the last
    window passed."""
    b = T.LMBatcher(torch.arange(6), batch_size=1, seq_len=4, seed=0)
    starts = {int(b.batch(k)[0][0, 0]) for k in range(200)}
    assert starts == {0, 1}
