"""Image classification sets as one dataset object: splits, statistics, augmentation, batches, patches.

Sets (all offline; see :mod:`energyformer.data.image_sources` for where they come from):

* ``digits``: scikit-learn's ``load_digits()`` (UCI optical digits, 1,797 8x8 images with values
  0..16, mapped to 0..255 by ``round(v * 255 / 16)``). It has no official test split: a fixed 20%
  (seeded with a constant, independent of ``split_seed``) is the test set. Always available;
  the test default.
* ``mnist`` (60k/10k, 28x28), ``fashion_mnist`` (60k/10k, 28x28): IDX files prepared by ``make data``.
* ``cifar10`` / ``cifar100`` (50k/10k, 3x32x32): the standard python-pickle batches the user has
  (``root``: the folder or the ``.tar.gz``; default ``<data_dir>/cifar-10-batches-py`` or
  ``cifar-100-python``), read by :mod:`energyformer.data.cifar` without running pickle code.

Every set becomes an :class:`ImageDataset`: uint8 images ``(n, C, H, W)``, int64 labels, class
names, ``train`` / ``validation`` / ``test`` splits (validation carved from the official training
set by a seeded permutation, so it is deterministic), and per-channel mean/std of the *training*
split on the [0, 1] scale for normalisation. Augmentation is the light standard one: random crop
after zero padding (Krizhevsky et al. 2012; He et al. 2016 use pad 4 on CIFAR) and horizontal
flips only where a mirrored image is still of its class (clothes, CIFAR objects; never digits).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from einops import rearrange
from pydantic import ValidationInfo, field_validator

from energyformer.data.batching import EpochBatcher, eval_batches, seeded_generator
from energyformer.data.cifar import CIFAR_FOLDERS, load_cifar
from energyformer.data.idx import read_idx_pair
from energyformer.data.image_sources import idx_files
from energyformer.data.text import data_dir
from energyformer.errors import DataError
from energyformer.utils.config import ConfigModel
from energyformer.utils.fields import Seed, SplitSize
from energyformer.utils.validate import ConfigError, check_choice, check_int

IMAGE_SETS = ("digits", "mnist", "fashion_mnist", "cifar10", "cifar100")
IMAGE_SPLITS = ("train", "validation", "test")
FASHION_CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt",
                   "Sneaker", "Bag", "Ankle boot")
DIGIT_CLASSES = tuple(str(i) for i in range(10))
#: Default augmentation per set: (crop padding, horizontal flip).
DEFAULT_AUGMENT = {"digits": (1, False), "mnist": (2, False), "fashion_mnist": (2, True),
                   "cifar10": (4, True), "cifar100": (4, True)}
#: Salt of the fixed digits test split (changing it changes the test set).
DIGITS_TEST_SALT = "energyformer-digits-test-v1"
DIGITS_TEST_FRACTION = 0.2


# ------------------------------------------------------------------------------------ splits
@dataclass(frozen=True, eq=False)
class ImageSplit:
    """One split: ``images`` uint8 ``(n, C, H, W)`` and ``labels`` int64 ``(n,)``."""

    images: torch.Tensor
    labels: torch.Tensor

    def __post_init__(self) -> None:
        x, y = self.images, self.labels
        if x.dtype != torch.uint8 or x.dim() != 4:
            raise DataError(f"images must be uint8 (n, C, H, W); got {x.dtype} {tuple(x.shape)}")
        if y.dtype != torch.long or y.shape != (x.shape[0],):
            raise DataError(f"labels must be int64 ({x.shape[0]},); got {y.dtype} {tuple(y.shape)}")

    def __len__(self) -> int:
        return int(self.labels.shape[0])


@dataclass(frozen=True)
class Normalization:
    """``(x / 255 - mean[c]) / std[c]`` per channel (statistics of the training split)."""

    mean: tuple[float, ...]
    std: tuple[float, ...]

    def _stats(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        m = torch.tensor(self.mean, dtype=torch.float32, device=x.device)[:, None, None]
        s = torch.tensor(self.std, dtype=torch.float32, device=x.device)[:, None, None]
        return m, s

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """uint8 ``(..., C, H, W)`` -> float32 normalised."""
        m, s = self._stats(x)
        return (x.float() / 255.0 - m) / s

    def inverse(self, x: torch.Tensor) -> torch.Tensor:
        """float normalised -> float on the [0, 1] scale."""
        m, s = self._stats(x)
        return x * s + m

    @classmethod
    def fit(cls, images: torch.Tensor, chunk: int = 4096) -> Normalization:
        """Per-channel mean and standard deviation of uint8 ``(n, C, H, W)`` on the [0, 1] scale.

        Accumulated in float64 over chunks of ``chunk`` images (no full-size float copy).
        """
        s1 = torch.zeros(images.shape[1], dtype=torch.float64)
        s2 = torch.zeros_like(s1)
        for i in range(0, images.shape[0], chunk):
            x = images[i:i + chunk].to("cpu", torch.float64).div_(255.0)
            s1 += x.sum(dim=(0, 2, 3))
            s2 += x.square_().sum(dim=(0, 2, 3))
        count = images.shape[0] * images.shape[2] * images.shape[3]
        mean = s1 / count
        std = (s2 / count - mean.square()).clamp_min(0).sqrt().clamp_min(1e-8)
        return cls(tuple(float(v) for v in mean), tuple(float(v) for v in std))


# ------------------------------------------------------------------------------ augmentation
def random_crop(x: torch.Tensor, padding: int, generator: torch.Generator) -> torch.Tensor:
    """Zero-pad ``(B, C, H, W)`` by ``padding`` and crop a random ``H x W`` window per image."""
    check_int("padding", padding, min=0)
    if padding == 0:
        return x
    B, _, H, W = x.shape
    xp = torch.nn.functional.pad(x, (padding,) * 4)  # (B, C, H + 2p, W + 2p)
    oy = torch.randint(0, 2 * padding + 1, (B,), generator=generator).to(x.device)
    ox = torch.randint(0, 2 * padding + 1, (B,), generator=generator).to(x.device)
    rows = (oy[:, None] + torch.arange(H, device=x.device))[:, None, :, None]  # (B, 1, H, 1)
    cols = (ox[:, None] + torch.arange(W, device=x.device))[:, None, None, :]  # (B, 1, 1, W)
    b = torch.arange(B, device=x.device)[:, None, None, None]
    c = torch.arange(x.shape[1], device=x.device)[None, :, None, None]
    return xp[b, c, rows, cols]  # (B, C, H, W)


def random_hflip(x: torch.Tensor, generator: torch.Generator, p: float = 0.5) -> torch.Tensor:
    """Mirror each ``(C, H, W)`` image left-right with probability ``p``."""
    flip = (torch.rand(x.shape[0], generator=generator) < p).to(x.device)
    return torch.where(flip[:, None, None, None], x.flip(-1), x)


@dataclass(frozen=True)
class Augment:
    """Seeded light augmentation of uint8 ``(B, C, H, W)``: random crop (``padding``), then flip."""

    padding: int = 0
    flip: bool = False

    def __post_init__(self) -> None:
        check_int("augment.padding", self.padding, min=0)

    def __call__(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        x = random_crop(x, self.padding, generator)
        return random_hflip(x, generator) if self.flip else x


# ----------------------------------------------------------------------------------- patches
def patchify(x: torch.Tensor, patch_size: int) -> torch.Tensor:
    """``(B, C, H, W) -> (B, N, C*p*p)``: non-overlapping ``p x p`` patches, row-major (ViT order).

    Each patch vector is ordered ``(c, dy, dx)``; ``N = (H / p) (W / p)``.
    """
    check_int("patch_size", patch_size, min=1)
    if x.dim() != 4:
        raise ValueError(f"patchify expects (B, C, H, W), got shape {tuple(x.shape)}")
    H, W = x.shape[-2:]
    if H % patch_size or W % patch_size:
        raise ValueError(f"patchify: image size {H}x{W} is not divisible by patch_size {patch_size}")
    return rearrange(x, "b c (h p1) (w p2) -> b (h w) (c p1 p2)", p1=patch_size, p2=patch_size)


def unpatchify(patches: torch.Tensor, patch_size: int, height: int, width: int) -> torch.Tensor:
    """Inverse of :func:`patchify`: ``(B, N, C*p*p) -> (B, C, H, W)``."""
    p = patch_size
    if height % p or width % p or patches.shape[1] != (height // p) * (width // p):
        raise ValueError(f"unpatchify: {patches.shape[1]} patches of size {p} do not tile "
                         f"{height}x{width}")
    return rearrange(patches, "b (h w) (c p1 p2) -> b c (h p1) (w p2)", h=height // p, p1=p, p2=p)


# ----------------------------------------------------------------------------------- dataset
@dataclass(eq=False)
class ImageDataset:
    """An image classification set with fixed splits, normalisation statistics and batching."""

    name: str
    train: ImageSplit
    validation: ImageSplit
    test: ImageSplit
    classes: tuple[str, ...]
    normalization: Normalization
    augment: Augment
    meta: dict = field(default_factory=dict)

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """``(C, H, W)``."""
        return tuple(self.train.images.shape[1:])  # type: ignore[return-value]

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def split(self, name: str) -> ImageSplit:
        """The ``'train'``, ``'validation'`` or ``'test'`` split."""
        check_choice("split", name, IMAGE_SPLITS)
        return getattr(self, name)

    def batcher(self, batch_size: int, *, split: str = "train", seed: int = 0,
                augment: bool | Augment = True, normalize: bool = True, shuffle: bool = True,
                device: torch.device | str | None = None) -> EpochBatcher:
        """An exactly resumable batcher yielding ``(x, y)``.

        ``x`` is float32 normalised (``normalize``) or uint8, ``(B, C, H, W)``; ``y`` int64 ``(B,)``.
        ``augment``: True = this set's default :attr:`augment`, False = none, or an :class:`Augment`.
        """
        aug = self.augment if augment is True else (augment or None)
        norm = self.normalization if normalize else None

        def transform(batch, gen):
            x, y = batch
            if aug is not None:
                x = aug(x, gen)
            return (norm(x) if norm is not None else x), y

        s = self.split(split)
        return EpochBatcher((s.images, s.labels), batch_size, seed=seed, shuffle=shuffle,
                            transform=transform, device=device, name=f"{self.name}.{split} batcher")

    def subset(self, split: str, n: int | None, seed: int = 0, key: str | None = None) -> ImageDataset:
        """A copy whose ``split`` keeps ``n`` examples drawn by a permutation seeded with ``seed``
        (in their original order); ``n`` None or at least the split's size: unchanged — unless ``key`` names
        the config key ``n`` came from, which must then not exceed the split (a ConfigError naming it). The
        normalisation statistics stay those of the full training split."""
        s = self.split(split)
        if key is not None and n is not None and n > len(s):
            raise ConfigError(f"{key} = {n} exceeds the {len(s)} examples of {self.name}'s {split} split: at most "
                              f"{len(s)}, or null for all")
        if n is None or n >= len(s):
            return self
        check_int(f"{self.name}.{split} subset size", n, min=1)
        perm = torch.randperm(len(s), generator=seeded_generator("image-subset", self.name, split, seed))
        idx = perm[:n].sort().values
        return dataclasses.replace(self, **{split: ImageSplit(s.images[idx], s.labels[idx])},
                                   meta={**self.meta, f"{split}_subset": {"n": n, "seed": seed}})

    def eval_batches(self, split: str = "test", batch_size: int = 256, *, normalize: bool = True,
                     device: torch.device | str | None = None):
        """Every example of ``split`` once, in order: ``(x, y)`` batches, no augmentation."""
        s = self.split(split)
        for x, y in eval_batches((s.images, s.labels), batch_size, device=device):
            yield (self.normalization(x) if normalize else x), y


def _validation_count(validation: float | int, n: int, name: str) -> int:
    if isinstance(validation, bool) or not isinstance(validation, (int, float)):
        raise DataError(f"{name}: validation = {validation!r}: give a fraction in [0, 1) or a count")
    if isinstance(validation, float):
        if not 0 <= validation < 1:
            raise DataError(f"{name}: validation = {validation!r}: a fraction must lie in [0, 1)")
        count = int(round(validation * n))
    else:
        count = validation
    if validation and count == 0:  # asked for a validation split but the fraction rounds to none
        raise DataError(f"{name}: validation = {validation!r} of {n} training examples is 0 examples (the task "
                        f"evaluates on it): give a count >= 1 or a larger fraction")
    if not 0 <= count < n:
        raise DataError(f"{name}: validation = {validation!r} leaves no training examples (n = {n})")
    return count


def carve_validation(images: torch.Tensor, labels: torch.Tensor, validation: float | int,
                     seed: int, name: str = "images") -> tuple[ImageSplit, ImageSplit]:
    """Split off ``validation`` (fraction or count) examples by a permutation seeded with ``seed``.

    Both parts keep the original order of their examples.
    """
    n = int(labels.shape[0])
    k = _validation_count(validation, n, name)
    perm = torch.randperm(n, generator=seeded_generator("image-validation", name, seed))
    val_idx, train_idx = perm[:k].sort().values, perm[k:].sort().values
    return (ImageSplit(images[train_idx], labels[train_idx]),
            ImageSplit(images[val_idx], labels[val_idx]))


def make_image_dataset(name: str, train_images: np.ndarray | torch.Tensor,
                       train_labels: np.ndarray | torch.Tensor, test_images: np.ndarray | torch.Tensor,
                       test_labels: np.ndarray | torch.Tensor, classes: tuple[str, ...], *,
                       validation: float | int = 0.1, split_seed: int = 0, padding: int = 0,
                       flip: bool = False, meta: dict | None = None) -> ImageDataset:
    """Build an :class:`ImageDataset` from arrays (any source); statistics from the train split.

    An empty train or test set, or a requested validation split that rounds to 0 examples, is a DataError
    naming the set (and ``meta['source']``): it used to surface only at evaluation, as an internal error.
    """
    def t(a, dtype):
        return torch.as_tensor(np.ascontiguousarray(a) if isinstance(a, np.ndarray) else a).to(dtype)

    xtr, ytr = t(train_images, torch.uint8), t(train_labels, torch.long)
    test = ImageSplit(t(test_images, torch.uint8), t(test_labels, torch.long))
    ImageSplit(xtr, ytr)  # shape checks
    source = f" ({meta['source']})" if meta and meta.get("source") else ""
    for split, n in (("train", len(ytr)), ("test", len(test))):
        if n == 0:
            raise DataError(f"{name}: the {split} set holds 0 images{source}")
    for split, y in (("train", ytr), ("test", test.labels)):
        if y.numel() and (int(y.min()) < 0 or int(y.max()) >= len(classes)):
            raise DataError(f"{name}: {split} labels in [{int(y.min())}, {int(y.max())}] but "
                            f"{len(classes)} classes")
    if test.images.shape[1:] != xtr.shape[1:]:
        raise DataError(f"{name}: train images {tuple(xtr.shape[1:])} and test images "
                        f"{tuple(test.images.shape[1:])} differ in shape")
    train, val = carve_validation(xtr, ytr, validation, split_seed, name)
    info = {"name": name, "validation": validation, "split_seed": split_seed,
            "sizes": {"train": len(train), "validation": len(val), "test": len(test)}}
    return ImageDataset(name, train, val, test, tuple(classes), Normalization.fit(train.images),
                        Augment(padding, flip), {**info, **(meta or {})})


def _digits() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise DataError("the digits set needs scikit-learn: run `make install` "
                        "(or pip install scikit-learn)") from None
    d = load_digits()
    x = np.rint(d.images * (255.0 / 16.0)).astype(np.uint8)[:, None]  # (1797, 1, 8, 8)
    y = d.target.astype(np.int64)
    perm = torch.randperm(len(y), generator=seeded_generator(DIGITS_TEST_SALT)).numpy()
    k = int(round(DIGITS_TEST_FRACTION * len(y)))
    te, tr = np.sort(perm[:k]), np.sort(perm[k:])
    return x[tr], y[tr], x[te], y[te], {"source": "sklearn.datasets.load_digits",
                                        "test": f"fixed {DIGITS_TEST_FRACTION:.0%} ({DIGITS_TEST_SALT})"}


def load_image_dataset(name: str, *, validation: float | int = 0.1, split_seed: int = 0,
                       root: str | os.PathLike | None = None,
                       label_mode: Literal["fine", "coarse"] = "fine") -> ImageDataset:
    """Load one of :data:`IMAGE_SETS` as an :class:`ImageDataset`.

    ``root`` is for CIFAR only (default ``<data_dir>/cifar-10-batches-py`` /
    ``cifar-100-python``); ``label_mode`` picks CIFAR-100's fine (100) or coarse (20) labels. Either one given
    for a set that does not read it is a ConfigError (:func:`check_cifar_options`).
    A set that is not prepared raises a DataError naming the command that fetches it.
    """
    check_choice("image dataset", name, IMAGE_SETS)
    for key, value in (("root", root), ("label_mode", label_mode)):
        try:
            check_cifar_options(key, value, name)
        except ValueError as err:
            raise ConfigError(f"{key} = {str(value)!r}: {err}") from None
    padding, flip = DEFAULT_AUGMENT[name]
    if name == "digits":
        xtr, ytr, xte, yte, meta = _digits()
        classes = DIGIT_CLASSES
    elif name in ("mnist", "fashion_mnist"):
        files = idx_files(name)
        xtr, ytr = read_idx_pair(files["train-images"], files["train-labels"], size=(28, 28),
                                 num_classes=10)
        xte, yte = read_idx_pair(files["test-images"], files["test-labels"], size=(28, 28),
                                 num_classes=10)
        for split, y in (("train", ytr), ("test", yte)):
            if len(y) == 0:  # well-formed but empty: named here, not as "no batches" at evaluation
                raise DataError(f"{name}: {str(files[split + '-images'])!r} and {str(files[split + '-labels'])!r} "
                                f"hold 0 images")
        classes = DIGIT_CLASSES if name == "mnist" else FASHION_CLASSES
        meta = {"source": str(files["train-images"].parent)}
    else:
        path = Path(root) if root is not None else data_dir() / CIFAR_FOLDERS[name]
        if root is None and not path.exists():
            raise DataError(f"{name}: no data at {str(path)!r}. CIFAR cannot be downloaded here; put "
                            f"the python-pickle folder ({CIFAR_FOLDERS[name]}) or its .tar.gz there, "
                            f"or give root=PATH")
        arr = load_cifar(path, name, label_mode=label_mode)  # type: ignore[arg-type]
        xtr, ytr, xte, yte, classes = (arr.train_images, arr.train_labels, arr.test_images,
                                       arr.test_labels, arr.classes)
        meta = {"source": str(path), "label_mode": label_mode}
    return make_image_dataset(name, xtr, ytr, xte, yte, classes, validation=validation,
                              split_seed=split_seed, padding=padding, flip=flip, meta=meta)


def check_cifar_options(field: str, value: Any, dataset: str | None) -> Any:
    """``root`` (CIFAR only) and ``label_mode = 'coarse'`` (CIFAR-100 only) on a set that does not read them
    are refused (a ValueError the config layer reports as ``task.label_mode = 'coarse': only for dataset
    cifar100 (dataset is digits)``): they used to be ignored without a word. The defaults (``root`` None,
    ``label_mode`` 'fine') always pass, so a resolved config, which lists every key, loads again."""
    if dataset is None:  # the dataset key itself was invalid: that error is reported
        return value
    if field == "root" and value is not None and dataset not in CIFAR_FOLDERS:
        raise ValueError(f"only for datasets {', '.join(CIFAR_FOLDERS)} (dataset is {dataset}, which is not read "
                         f"from a root folder)")
    if field == "label_mode" and value != "fine" and dataset != "cifar100":
        raise ValueError(f"only for dataset cifar100 (dataset is {dataset})")
    return value


class ImageDataConfig(ConfigModel):
    """Which image set to load and how to split it (for tasks; see :func:`load_image_dataset`)."""

    name: Literal["digits", "mnist", "fashion_mnist", "cifar10", "cifar100"] = "digits"
    """image set"""
    validation: SplitSize = 0.1
    """validation examples carved from the official training set: a fraction in (0, 1) or a count >= 1 (the
    task evaluates on it: an empty split gave NaN metrics)"""
    split_seed: Seed = 0
    """seed of the validation carve"""
    root: str | None = None
    """CIFAR only (refused on other sets): the python-pickle folder or .tar.gz (default: in the data cache)"""
    label_mode: Literal["fine", "coarse"] = "fine"
    """CIFAR-100 only (coarse is refused on other sets): 100 fine or 20 coarse labels"""

    @field_validator("root", "label_mode", mode="after")
    @classmethod
    def _cifar_only(cls, value: Any, info: ValidationInfo) -> Any:
        return check_cifar_options(info.field_name, value, info.data.get("name"))

    def load(self) -> ImageDataset:
        return load_image_dataset(self.name, validation=self.validation, split_seed=self.split_seed,
                                  root=self.root, label_mode=self.label_mode)
