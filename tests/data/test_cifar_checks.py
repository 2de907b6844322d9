"""Malformed CIFAR files and empty image sets are one-line DataErrors naming the file, not silent guesses or
internal errors later in training (tiny hand-written batches; no real CIFAR needed)."""

from __future__ import annotations

import pickle
import tarfile
import zlib
from pathlib import Path

import numpy as np
import pytest

from energyformer.data import cifar as CF
from energyformer.data import idx as X
from energyformer.data import image_sources as S
from energyformer.data import images as I
from energyformer.errors import ConfigError, DataError


def _cifar10(root: Path, n_classes: int = 10, labels=None) -> Path:
    """A 2-images-per-batch CIFAR-10 folder under ``root``; ``labels`` replaces test_batch's labels."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    names = [f"c{i}".encode() for i in range(n_classes)]
    (folder / "batches.meta").write_bytes(pickle.dumps({b"label_names": names}, protocol=2))
    for fname in [*CF.CIFAR10_FILES["train"], "test_batch"]:
        ys = labels if (fname == "test_batch" and labels is not None) else [0, min(n_classes, 10) - 1]
        batch = {b"data": rng.integers(0, 256, (2, 3072), dtype=np.uint8), b"labels": ys}
        (folder / fname).write_bytes(pickle.dumps(batch, protocol=2))
    return folder


def test_labels_must_be_integers(tmp_path):
    """Old: np.asarray(labels, dtype=int64) truncated 1.9 to class 1 (and 0.5 to 0) without a word."""
    for i, (labels, found) in enumerate([([1.9, 0.0], "1.9"), (np.array([0.5, 1.0]), "0.5"),
                                         ([float("nan"), 1.0], "nan"), (["a", "b"], "<U1")]):
        _cifar10(tmp_path / str(i), labels=labels)
        with pytest.raises(DataError, match=f"test_batch: 'labels' must be integers; found.*{found}"):
            CF.load_cifar(tmp_path / str(i), "cifar10")
    _cifar10(tmp_path / "whole", labels=[3.0, 7.0])  # floats that are whole numbers are exact: accepted
    arr = CF.load_cifar(tmp_path / "whole", "cifar10")
    assert arr.test_labels.dtype == np.int64 and arr.test_labels.tolist() == [3, 7]


def _tgz(tmp_path: Path) -> Path:
    _cifar10(tmp_path / "src")
    tgz = tmp_path / "cifar-10-python.tar.gz"
    with tarfile.open(tgz, "w:gz") as tar:
        tar.add(tmp_path / "src" / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    return tgz


def test_truncated_archive_named(tmp_path):
    """Old: "internal error (EOFError: Compressed file ended ...)" from getmembers(), outside the try."""
    tgz = _tgz(tmp_path)
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(tgz.read_bytes()[:5000])
    with pytest.raises(DataError, match=r"CIFAR archive '.*cut\.tar\.gz' is corrupt or truncated \(EOFError"):
        CF.load_cifar(cut, "cifar10")


def test_unreadable_member_named(tmp_path, monkeypatch):
    """Old: a member whose bytes fail to decompress raised zlib.error from extractfile().read() unwrapped."""
    tgz = _tgz(tmp_path)

    def broken(self, member):
        raise zlib.error("invalid stored block lengths")
    monkeypatch.setattr(tarfile.TarFile, "extractfile", broken)
    with pytest.raises(DataError, match=r"cifar-10-python\.tar\.gz'.*member 'cifar-10-batches-py/batches\.meta' "
                                        r"is corrupt or truncated \(error: invalid stored"):
        CF.load_cifar(tgz, "cifar10")


@pytest.mark.parametrize("n_classes", [12, 5])
def test_meta_class_count_checked(tmp_path, n_classes):
    """Old: 12 names -> IndexError (target 10 out of bounds) in training; 5 names -> a 10-way head on a 5-class
    set and an internal error in eval's confusion matrix."""
    _cifar10(tmp_path, n_classes=n_classes)
    with pytest.raises(DataError, match=f"batches.meta: 'label_names' has {n_classes} class names, expected 10"):
        I.load_image_dataset("cifar10", root=tmp_path, validation=1)


def test_cifar100_coarse_count_checked(tmp_path):
    folder = tmp_path / "cifar-100-python"
    folder.mkdir()
    meta = {b"fine_label_names": [b"f"] * 100, b"coarse_label_names": [b"c"] * 19}
    (folder / "meta").write_bytes(pickle.dumps(meta, protocol=2))
    with pytest.raises(DataError, match="meta: 'coarse_label_names' has 19 class names, expected 20"):
        CF.load_cifar(tmp_path, "cifar100", label_mode="coarse")


# ------------------------------------------------------------------------------------ empty sets
def _mnist(root: Path, n_train: int, n_test: int) -> None:
    folder = root / "mnist"
    rng = np.random.default_rng(0)
    for split, n in (("train", n_train), ("test", n_test)):
        X.write_idx(folder / S.MNIST_FILES[f"{split}-images"], rng.integers(0, 256, (n, 28, 28), dtype=np.uint8))
        X.write_idx(folder / S.MNIST_FILES[f"{split}-labels"], rng.integers(0, 10, n).astype(np.uint8))


@pytest.mark.parametrize("n_train, n_test, empty", [(6, 0, "t10k"), (0, 2, "train")])
def test_empty_idx_split_names_files(tmp_path, monkeypatch, n_train, n_test, empty):
    """Old: an empty (well-formed) test set loaded, then eval failed with "internal error (ValueError: predict:
    no batches)"; an empty training set said only "leaves no training examples (n = 0)"."""
    monkeypatch.setenv("ENERGYFORMER_DATA", str(tmp_path))
    _mnist(tmp_path, n_train, n_test)
    with pytest.raises(DataError, match=f"mnist: '.*{empty}-images-idx3-ubyte' and '.*{empty}-labels-idx1-ubyte' "
                                        "hold 0 images"):
        I.load_image_dataset("mnist", validation=1)


def test_empty_arrays_and_empty_validation_refused():
    """Old: an empty test array made a dataset whose evaluation failed internally; a validation fraction that
    rounds to 0 examples gave an empty validation split (the same internal error at the first evaluation)."""
    x, y = np.zeros((4, 1, 2, 2), np.uint8), np.arange(4) % 2
    with pytest.raises(DataError, match=r"toy: the test set holds 0 images \(here\)"):
        I.make_image_dataset("toy", x, y, x[:0], y[:0], ("a", "b"), validation=1, meta={"source": "here"})
    with pytest.raises(DataError, match="toy: validation = 0.1 of 4 training examples is 0 examples"):
        I.make_image_dataset("toy", x, y, x, y, ("a", "b"), validation=0.1)
    assert len(I.make_image_dataset("toy", x, y, x, y, ("a", "b"), validation=0).validation) == 0  # asked for none


def test_load_image_dataset_refuses_cifar_options_elsewhere(tmp_path):
    """Old: load_image_dataset('digits', root=..., label_mode='coarse') ignored both; CIFAR-10 ignored coarse."""
    with pytest.raises(ConfigError, match="root = '/nowhere': only for datasets cifar10, cifar100"):
        I.load_image_dataset("digits", root="/nowhere")
    _cifar10(tmp_path)
    with pytest.raises(ConfigError, match="label_mode = 'coarse': only for dataset cifar100 \\(dataset is cifar10"):
        I.load_image_dataset("cifar10", root=tmp_path, label_mode="coarse")
