"""The Python documentation corpus: deterministic split by file, idempotent preparation, clear error."""

import pytest

from energyformer.data import pydoc
from energyformer.errors import DataError


def test_split_is_deterministic_by_file_and_mostly_train():
    names = [f"library/mod{i}.rst.txt" for i in range(2000)]
    splits = [pydoc.split_of(n) for n in names]
    assert splits == [pydoc.split_of(n) for n in names]
    frac = {s: splits.count(s) / len(splits) for s in ("train", "validation", "test")}
    assert 0.03 < frac["validation"] < 0.07 and 0.03 < frac["test"] < 0.07


def test_prepare_from_an_installed_tree(tmp_path, monkeypatch):
    src = tmp_path / "_sources"
    for i in range(60):
        (src / "library").mkdir(parents=True, exist_ok=True)
        (src / "library" / f"m{i}.rst.txt").write_text(f"Module {i}\n=======\n\ntext {i}\n")
    monkeypatch.setattr(pydoc, "SYSTEM_DIR", src)
    monkeypatch.setenv("ENERGYFORMER_DATA", str(tmp_path / "cache"))
    meta = pydoc.prepare_pydoc(download=False)
    assert sum(meta["files"].values()) == 60
    texts = {s: pydoc.load_pydoc(s) for s in ("train", "validation", "test")}
    for rel in meta["split_files"]["validation"]:
        assert (src / rel).read_text() in texts["validation"]
        assert (src / rel).read_text() not in texts["train"]
    assert pydoc.prepare_pydoc(download=False) == meta  # idempotent


def test_missing_corpus_names_the_install_step(tmp_path, monkeypatch):
    monkeypatch.setattr(pydoc, "SYSTEM_DIR", tmp_path / "absent")
    monkeypatch.setenv("ENERGYFORMER_DATA", str(tmp_path / "cache"))
    with pytest.raises(DataError, match="make data"):
        pydoc.load_pydoc("train")



def _prepared(tmp_path, monkeypatch):
    src = tmp_path / "_sources" / "library"
    src.mkdir(parents=True)
    for i in range(60):
        (src / f"m{i}.rst.txt").write_text(f"Module {i}\n=======\n\ntext {i}\n")
    monkeypatch.setattr(pydoc, "SYSTEM_DIR", src.parent)
    monkeypatch.setenv("ENERGYFORMER_DATA", str(tmp_path / "cache"))
    pydoc.prepare_pydoc(download=False)
    return tmp_path / "cache" / "pydoc"


def test_changed_split_file_names_file_and_install_step(tmp_path, monkeypatch):
    folder = _prepared(tmp_path, monkeypatch)
    monkeypatch.setattr(pydoc, "SYSTEM_DIR", tmp_path / "absent")
    (folder / "validation.txt").write_bytes(b"\xff\xfe binary")  # was an internal UnicodeDecodeError
    with pytest.raises(DataError, match=r"pydoc/validation\.txt is not the file that was prepared.*make data"):
        pydoc.load_pydoc("validation")
    (folder / "meta.json").write_text("{")
    with pytest.raises(DataError, match=r"pydoc/meta\.json cannot be read.*make data"):
        pydoc.load_pydoc("train")


def test_changed_split_file_is_prepared_again_from_the_installed_tree(tmp_path, monkeypatch):
    folder = _prepared(tmp_path, monkeypatch)
    want = (folder / "test.txt").read_text()
    (folder / "test.txt").write_text(want[:10])  # was scored silently
    with pytest.warns(UserWarning, match=r"test\.txt is not the file that was prepared.*preparing the corpus again"):
        assert pydoc.load_pydoc("test") == want
