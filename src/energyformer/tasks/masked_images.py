"""Masked image modelling on the offline image sets (Hyper-SET seed 002 §5.3, Table 3, App. D.4, Table 18).

The paper follows MaskGIT (Chang et al. 2022): a pretrained VQGAN turns each 256x256 ImageNet-100 image
into a 16x16 grid of codes (codebook 1024); a masking ratio drawn from U[0, 0.4] per image replaces
codes by a learned mask token; the loss is the cross-entropy of the masked codes; evaluation masks
40%, fills the codes by MaskGIT's iterative decoding (T = 24, temperature 1) and compares the decoded
images with the originals (PSNR, SSIM, MS-SSIM, LPIPS, FID).

**The stand-in here.** Neither a pretrained VQGAN nor ImageNet can be had offline, so the tokeniser
is a k-means codebook of p x p pixel patches (:class:`PatchTokenizer`: scikit-learn's seeded
``MiniBatchKMeans`` on the training split's patches; decoding = the centroids), on ``digits``
(8x8, p = 2: a 4x4 grid), ``mnist`` or ``fashion_mnist`` (28x28, p = 4: a 7x7 grid). It is a
vector quantiser with a fixed linear decoder instead of a learned convolutional one: the task (predict
the masked codes from the others, then decode) is the paper's; its ceiling is the tokeniser's own
reconstruction, reported as ``tokenizer_psnr`` / ``tokenizer_ssim``. The codebook is cached as
``<data_dir>/mim_tokenizers/<dataset>-p<p>-k<K>-s<seed>-<hash>.npy`` (keyed by every setting that
changes it). LPIPS and FID need pretrained networks and MS-SSIM needs larger images than 28x28
(five scales of an 11x11 window): none is reported.

``task: {kind: masked_image_modelling}``; model kind ``masked_vision``
(:class:`~energyformer.models.masked_vision.MaskedCodeTransformer`). Metrics (all on seeded masks,
so evaluation is deterministic): ``loss`` and ``accuracy`` (CE and accuracy of the masked codes at
``eval_mask_ratio``, one forward pass), ``unigram_loss`` / ``unigram_accuracy`` (the training codes'
frequencies, add-one smoothed / always the most frequent code),
and after :func:`~energyformer.models.masked_vision.maskgit_decode`: ``decode_accuracy``, ``psnr``,
``ssim`` of the decoded image against the original (on [0, 1]); ``tokenizer_*`` (no masking) and
``unigram_*`` (masked codes set to the most frequent one) bracket them.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import warnings
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor, nn

from ..core.precision import widest_float
from ..data.batching import EpochBatcher, seeded_generator
from ..data.images import ImageDataset, load_image_dataset, patchify, unpatchify
from ..data.text import data_dir
from ..models.masked_vision import maskgit_decode
from ..utils.fields import Seed, SplitSize
from ..utils.config import KindConfig, replace
from ..utils.validate import ConfigError, check_divides, check_int
from .base import Task, TaskConfig, register_task
from .classification import IMAGE_SHAPES, check_image_batch
from .losses import IGNORE, masked_cross_entropy

#: default patch side per set: a 4x4 grid of digits, a 7x7 grid of 28x28 images
DEFAULT_PATCH = {"digits": 2, "mnist": 4, "fashion_mnist": 4}


# ------------------------------------------------------------------------------ tokeniser
class PatchTokenizer:
    """k-means codebook of ``p x p`` patches: the offline stand-in for MaskGIT's VQGAN (Hyper-SET App. D.4).

    ``encode``: uint8 or [0, 1] images (B, C, H, W) -> codes (B, N), each patch's nearest centroid
    (squared Euclidean, float64); ``decode``: codes -> (B, C, H, W) images on [0, 1] made of centroids.
    """

    def __init__(self, centroids: Tensor | np.ndarray, patch_size: int, image_shape: tuple[int, int, int]):
        c = torch.as_tensor(np.asarray(centroids), dtype=torch.float32)
        C, H, W = image_shape
        if c.dim() != 2 or c.shape[1] != C * patch_size * patch_size:
            raise ValueError(f"centroids of shape {tuple(c.shape)}: need (codes, {C * patch_size ** 2})")
        self.centroids, self.patch_size, self.image_shape = c, patch_size, tuple(image_shape)

    @property
    def n_codes(self) -> int:
        return int(self.centroids.shape[0])

    @property
    def num_tokens(self) -> int:
        _, H, W = self.image_shape
        return (H // self.patch_size) * (W // self.patch_size)

    @classmethod
    def fit(cls, images: Tensor, patch_size: int, n_codes: int, seed: int = 0) -> PatchTokenizer:
        """``MiniBatchKMeans(n_codes, random_state=seed)`` on every patch of uint8 ``images``."""
        from sklearn.cluster import MiniBatchKMeans

        x = patchify(images.float() / 255.0, patch_size).reshape(-1, images.shape[1] * patch_size ** 2)
        if x.shape[0] < n_codes:
            raise ConfigError(f"task.codebook_size = {n_codes}: more codes than the {x.shape[0]} training "
                              f"patches to fit k-means on; allowed at most {x.shape[0]} (or use more "
                              f"task.train_examples, or a smaller task.patch_size)")
        km = MiniBatchKMeans(n_clusters=n_codes, random_state=seed, batch_size=4096, n_init=3,
                             max_iter=100).fit(x.numpy())
        return cls(km.cluster_centers_.astype(np.float32), patch_size, tuple(images.shape[1:]))

    def encode(self, images: Tensor, chunk: int = 65536) -> Tensor:
        x = images.float() / 255.0 if images.dtype == torch.uint8 else images.float()
        p = patchify(x, self.patch_size)                        # (B, N, C*p*p)
        flat = p.reshape(-1, p.shape[-1]).double()
        c = self.centroids.to(flat.device, torch.float64)
        cc = c.square().sum(1)                                  # (K,)
        out = [(cc - 2 * flat[i:i + chunk] @ c.T).argmin(1) for i in range(0, flat.shape[0], chunk)]
        return torch.cat(out).reshape(p.shape[:2])              # (B, N); ||x||² is common to all codes

    def decode(self, codes: Tensor) -> Tensor:
        C, H, W = self.image_shape
        patches = self.centroids.to(codes.device)[codes]        # (B, N, C*p*p)
        return unpatchify(patches, self.patch_size, H, W)       # (B, C, H, W)


def load_or_fit_tokenizer(ds: ImageDataset, key: dict[str, Any], patch_size: int, n_codes: int, seed: int,
                          fit_images: int, cache: bool = True) -> PatchTokenizer:
    """The cached codebook for ``key`` (dataset, splits, patch, codes, seed, fit sample), fit on a miss."""
    tag = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:10]
    path = data_dir() / "mim_tokenizers" / f"{ds.name}-p{patch_size}-k{n_codes}-s{seed}-{tag}.npy"
    if cache and path.exists():
        width = ds.image_shape[0] * patch_size * patch_size
        try:
            centroids = np.load(path)
            bad = None if centroids.shape == (n_codes, width) and np.isfinite(centroids).all() else (
                f"shape {centroids.shape} (expected ({n_codes}, {width})) or non-finite values")
        except (OSError, ValueError, EOFError) as err:
            bad = f"{type(err).__name__}: {err}"
        if bad is None:
            return PatchTokenizer(centroids, patch_size, ds.image_shape)
        # a derived file (the fit is deterministic): fit it again and replace it, saying so
        warnings.warn(f"{path}: the cached tokenizer codebook is unreadable ({bad}); fitting it again",
                      stacklevel=2)
    imgs = ds.train.images
    if fit_images < len(imgs):
        idx = torch.randperm(len(imgs), generator=seeded_generator("mim-tokenizer", ds.name, seed))[:fit_images]
        imgs = imgs[idx.sort().values]
    tok = PatchTokenizer.fit(imgs, patch_size, n_codes, seed)
    if cache:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}.npy")
        np.save(tmp, tok.centroids.numpy())
        os.replace(tmp, path)  # atomic: a concurrent run reads the old file or the new one
    return tok


# ------------------------------------------------------------------------------ masks, loss, metrics
def random_mask(counts: Tensor, n: int, generator: torch.Generator | None = None) -> Tensor:
    """(B,) masked counts -> (B, n) bool with exactly ``counts[b]`` True at uniformly random positions."""
    keys = torch.rand((counts.shape[0], n), generator=generator)
    rank = keys.argsort(1).argsort(1)
    return rank < counts.cpu()[:, None]


def eval_mask_count(ratio: float, n: int) -> int:
    """Codes the evaluation masks in each image of ``n`` codes: round(ratio n), at least 1 (the heading of
    ``energyformer eval`` reports this count, which differs from ``ratio`` when ratio n is not whole)."""
    return min(n, max(1, round(ratio * n)))


def masked_accuracy(logits: Tensor, targets: Tensor, mask: Tensor) -> Tensor:
    """Share of the masked positions whose argmax is the target, a 0-d float tensor (NaN when nothing is masked),
    computed on the device: ``#(argmax = target and masked) / #masked``, without boolean indexing's host sync."""
    return ((logits.argmax(-1) == targets) & mask).sum() / mask.sum()


def psnr(x: Tensor, y: Tensor) -> Tensor:
    """Per-image PSNR in dB of images on [0, 1]: 10 log10(1 / MSE), (B, ...) -> (B,); MSE floored at 1e-10."""
    mse = (x.float() - y.float()).square().flatten(1).mean(1)
    return 10 * torch.log10(1.0 / mse.clamp_min(1e-10))


def ssim(x: Tensor, y: Tensor, win_size: int = 7, data_range: float = 1.0, k1: float = 0.01,
         k2: float = 0.03) -> Tensor:
    """Per-image SSIM (Wang et al. 2004, Eq. 13) of (B, C, H, W), averaged over windows and channels.

    Uniform ``win_size`` x ``win_size`` windows at every valid position and sample (co)variances
    (factor n/(n-1)): scikit-image's ``structural_similarity`` defaults (whose mean is over the same
    valid positions), not the Gaussian 11x11 window, which does not fit 8x8 digits.
    """
    check_int("win_size", win_size, min=2)
    if x.shape != y.shape or x.dim() != 4 or min(x.shape[-2:]) < win_size:
        raise ValueError(f"ssim: images {tuple(x.shape)} / {tuple(y.shape)} must be equal (B, C, H, W) "
                         f"with H, W >= win_size = {win_size}")
    x, y = x.double(), y.double()
    f = lambda t: F.avg_pool2d(t, win_size, stride=1)  # noqa: E731  (B, C, H-w+1, W-w+1)
    n = win_size * win_size
    ux, uy = f(x), f(y)
    vx = (f(x * x) - ux * ux) * n / (n - 1)
    vy = (f(y * y) - uy * uy) * n / (n - 1)
    vxy = (f(x * y) - ux * uy) * n / (n - 1)
    c1, c2 = (k1 * data_range) ** 2, (k2 * data_range) ** 2
    s = (2 * ux * uy + c1) * (2 * vxy + c2) / ((ux * ux + uy * uy + c1) * (vx + vy + c2))
    return s.flatten(1).mean(1).float()


# ------------------------------------------------------------------------------ task
class MaskedImageConfig(TaskConfig):
    """Masked image modelling on k-means patch codes (Hyper-SET §5.3 / App. D.4 at CPU scale)."""

    kind: Literal["masked_image_modelling"] = "masked_image_modelling"
    dataset: Literal["digits", "mnist", "fashion_mnist"] = "digits"
    """image set (digits ships with scikit-learn; MNIST / Fashion-MNIST come from `make data`)"""
    validation: SplitSize = 0.1
    """validation examples carved from the official training set: a fraction in (0, 1) or a count >= 1"""
    split_seed: Seed = 0
    """seed of the validation carve and of the subsets' draws"""
    train_examples: int | None = Field(None, ge=1)
    """train on this many training images (a seeded draw; None: all)"""
    eval_examples: int | None = Field(None, ge=1)
    """evaluate on this many images of the split (a seeded draw; None: all)"""
    patch_size: int | None = Field(None, ge=1)
    """tokeniser patch side p (None: digits 2, 28x28 sets 4); must divide the image side"""
    codebook_size: int = Field(256, ge=2)
    """k-means codes K (the paper's VQGAN: 1024); the model's vocabulary is K + 1 with the mask token"""
    tokenizer_seed: Seed = 0
    """seed of MiniBatchKMeans and of its sample of training images"""
    tokenizer_images: int = Field(10000, ge=1)
    """training images whose patches fit the codebook"""
    cache_tokenizer: bool = True
    """keep the codebook in <data_dir>/mim_tokenizers (false: fit every time)"""
    max_mask_ratio: float = Field(0.4, gt=0, le=1)
    """training masks round(r N) codes (at least 1) per image, r ~ U[0, max_mask_ratio] (App. D.4: 0.4)"""
    eval_mask_ratio: float = Field(0.4, gt=0, le=1)
    """evaluation masks round(ratio N) codes per image at seeded positions (Table 3: 40%)"""
    decode_steps: int = Field(8, ge=1)
    """MaskGIT decoding steps T (the paper: 24, over a 16x16 grid)"""
    temperature: float = Field(1.0, ge=0)
    """sampling temperature of the decoding (App. D.4: 1; 0 = argmax)"""
    randomize_temperature: float = Field(4.5, ge=0)
    """scale of the annealed Gumbel noise on the confidences (MaskGIT / Maskgit-pytorch: 4.5; 0 = none)"""
    decode: bool = True
    """run the iterative decoding (PSNR, SSIM) in every evaluation"""
    eval_seed: Seed = 0
    """seed of the evaluation masks and of the decoding's samples"""
    batch_size: int = Field(128, ge=1)
    """images per training micro-batch"""
    eval_batch_size: int = Field(500, ge=1)
    """images per evaluation batch"""


@register_task("masked_image_modelling", MaskedImageConfig)
class MaskedImageTask(Task):
    """CE of the masked codes; masked accuracy (main metric), PSNR / SSIM after MaskGIT decoding."""

    model_kinds = ("masked_vision",)
    main_metric = "accuracy"
    lower_is_better = False

    def __init__(self, cfg: MaskedImageConfig, *, seed: int = 0, rank: int = 0):
        super().__init__(cfg, seed=seed, rank=rank)
        self._data: ImageDataset | None = None
        self._tokenizer: PatchTokenizer | None = None
        self._codes: dict[str, Tensor] = {}
        self._train_data = None
        self._eval_cache: dict[str, dict[str, Any]] = {}

    # ------------------------------------------------------------------ sizes (no data needed)
    @staticmethod
    def patch(cfg: MaskedImageConfig) -> int:
        return cfg.patch_size if cfg.patch_size is not None else DEFAULT_PATCH[cfg.dataset]

    @classmethod
    def grid_tokens(cls, cfg: MaskedImageConfig) -> int:
        side = IMAGE_SHAPES[cfg.dataset][1]
        return (side // cls.patch(cfg)) ** 2

    @classmethod
    def check_config(cls, task_cfg: MaskedImageConfig, model_cfg: KindConfig) -> None:
        """Checked when the run config is loaded: the patch divides the side; task-given sizes agree."""
        side, p = IMAGE_SHAPES[task_cfg.dataset][1], cls.patch(task_cfg)
        check_divides("task.patch_size", p, side, f"the {task_cfg.dataset} image side")
        for key, want in (("n_codes", task_cfg.codebook_size), ("num_tokens", cls.grid_tokens(task_cfg))):
            have = getattr(model_cfg, key, None)
            if have is not None and have != want:
                raise ValueError(f"model.{key} = {have}: the tokeniser gives {want} (task.codebook_size, "
                                 f"task.patch_size); leave it unset")

    def resolve_model_config(self, model_cfg: KindConfig) -> KindConfig:
        upd = {"n_codes": self.cfg.codebook_size, "num_tokens": self.grid_tokens(self.cfg)}
        if all(getattr(model_cfg, k) == v for k, v in upd.items()):
            return model_cfg
        return replace(model_cfg, **upd)

    def build_model(self, model_cfg: KindConfig) -> nn.Module:
        from ..models.masked_vision import MaskedCodeTransformer

        return MaskedCodeTransformer(model_cfg)

    # ------------------------------------------------------------------ data (built on first use)
    @property
    def data(self) -> ImageDataset:
        if self._data is None:
            c = self.cfg
            ds = load_image_dataset(c.dataset, validation=c.validation, split_seed=c.split_seed)
            self._data = ds.subset("train", c.train_examples, c.split_seed, key="task.train_examples")
        return self._data

    @property
    def tokenizer(self) -> PatchTokenizer:
        if self._tokenizer is None:
            c = self.cfg
            key = {"dataset": c.dataset, "validation": c.validation, "split_seed": c.split_seed,
                   "train_examples": c.train_examples, "patch": self.patch(c), "codes": c.codebook_size,
                   "seed": c.tokenizer_seed, "fit_images": c.tokenizer_images, "version": 1}
            self._tokenizer = load_or_fit_tokenizer(self.data, key, self.patch(c), c.codebook_size,
                                                    c.tokenizer_seed, c.tokenizer_images, c.cache_tokenizer)
        return self._tokenizer

    def codes(self, split: str) -> Tensor:
        """The tokeniser's codes (n, N) of every image of ``split`` (computed once)."""
        if split not in self._codes:
            self._codes[split] = self.tokenizer.encode(self.data.split(split).images)
        return self._codes[split]

    @property
    def unigram_code(self) -> int:
        """The most frequent training code (the unigram baseline's prediction)."""
        return int(torch.bincount(self.codes("train").flatten(), minlength=self.cfg.codebook_size).argmax())

    def train_mask(self, batch: tuple[Tensor], gen: torch.Generator) -> tuple[Tensor, Tensor]:
        """Batch transform: (codes,) -> (codes, mask), r ~ U[0, max_mask_ratio] per image (App. D.4)."""
        (codes,) = batch
        B, N = codes.shape
        r = torch.rand(B, generator=gen) * self.cfg.max_mask_ratio
        counts = (r * N).round().long().clamp(1, N)
        return codes, random_mask(counts, N, gen).to(codes.device)

    @property
    def train_data(self):  # type: ignore[override]
        if self._train_data is None:
            check_image_batch(self.cfg, len(self.data.train))
            b = EpochBatcher((self.codes("train"),), self.cfg.batch_size, seed=self.seed + 1000 * self.rank,
                             transform=self.train_mask, name="masked_image_modelling train batcher")
            b.tokens_per_batch = self.cfg.batch_size  # type: ignore[attr-defined]  (tokens/s = images/s)
            self._train_data = b
        return self._train_data

    @train_data.setter
    def train_data(self, value: Any) -> None:
        self._train_data = value

    # ------------------------------------------------------------------ training
    def loss(self, model: nn.Module, batch: tuple) -> tuple[torch.Tensor, dict[str, float]]:
        codes, mask = batch
        out = model(codes, mask)
        loss = masked_cross_entropy(out.logits, codes, mask)
        with torch.no_grad():
            acc = masked_accuracy(out.logits, codes, mask)
        metrics = {"acc": acc, "masked": mask.float().mean()}  # tensors: the trainer reads them after backward
        return self.add_aux_losses(loss, out, metrics)

    def loss_items(self, batch: tuple) -> int:
        """The masked codes of the batch (its masking ratio varies): what :meth:`loss` averages over."""
        return int(batch[1].sum())

    # ------------------------------------------------------------------ evaluation
    def eval_set(self, split: str) -> dict[str, Any]:
        """images (n, C, H, W) uint8, codes (n, N), fixed seeded mask (n, N) and the model-free
        references (tokeniser ceiling, unigram fill) of ``split`` (``eval_examples`` of it)."""
        if split not in self._eval_cache:
            c = self.cfg
            if split not in ("train", "validation", "test"):
                raise ValueError(f"split {split!r}: allowed values are 'train', 'validation', 'test'")
            s = self.data.split(split)
            idx = torch.arange(len(s))
            if c.eval_examples is not None and c.eval_examples < len(s):
                idx = torch.randperm(len(s), generator=seeded_generator("mim-eval", c.split_seed, split))
                idx = idx[:c.eval_examples].sort().values
            images, codes = s.images[idx], self.codes(split)[idx]
            n, N = codes.shape
            k = eval_mask_count(c.eval_mask_ratio, N)
            mask = random_mask(torch.full((n,), k), N, seeded_generator("mim-eval-mask", c.eval_seed, split))
            target = images.float() / 255.0
            tok = self.tokenizer.decode(codes)
            uni = self.tokenizer.decode(codes.masked_fill(mask, self.unigram_code))
            freq = torch.bincount(self.codes("train").flatten(), minlength=c.codebook_size).double() + 1.0
            ref = {"unigram_loss": float(-(freq / freq.sum()).log()[codes[mask]].mean()),
                   "tokenizer_psnr": float(psnr(tok, target).mean()), "tokenizer_ssim": float(ssim(tok, target).mean()),
                   "unigram_accuracy": float((codes[mask] == self.unigram_code).double().mean()),
                   "unigram_psnr": float(psnr(uni, target).mean()), "unigram_ssim": float(ssim(uni, target).mean())}
            self._eval_cache[split] = {"images": images, "codes": codes, "mask": mask, "ref": ref}
        return self._eval_cache[split]

    @torch.no_grad()
    def evaluate(self, model: nn.Module, split: str = "validation", decode: bool | None = None,
                 **options: Any) -> dict[str, float]:
        """Metrics on ``split`` (module docstring); ``options`` (iterations, steps) go to the model."""
        c = self.cfg
        decode = c.decode if decode is None else decode
        es = self.eval_set(split)
        was_training = model.training
        model.eval()
        dev = next(model.parameters()).device
        # float64 sums on the model's device, read once after the loop (a float() per batch made the host wait for
        # every batch's forward); the masked positions are selected by ignore_index and & mask, not bool indexing
        wide = widest_float(dev)  # float64 sums (float32 on MPS, which has none)
        sums = torch.zeros(6, dtype=wide, device=dev)  # ce, correct, masked, decoded, psnr, ssim
        n = es["codes"].shape[0]
        try:
            for i in range(0, n, c.eval_batch_size):
                codes = es["codes"][i:i + c.eval_batch_size].to(dev)                  # (b, N)
                mask = es["mask"][i:i + c.eval_batch_size].to(dev)                    # (b, N) bool
                logits = model(codes, mask, **options).logits.float()                # (b, N, K)
                ce = F.cross_entropy(logits.flatten(0, 1), codes.masked_fill(~mask, IGNORE).flatten(),
                                     ignore_index=IGNORE, reduction="sum")
                sums[:3] += torch.stack([ce.to(wide), ((logits.argmax(-1) == codes) & mask).sum().to(wide),
                                         mask.sum().to(wide)])
                if decode:
                    # each image's own noise (its index in the split): the metrics do not depend on the batching
                    gens = [seeded_generator("mim-decode", c.eval_seed, split, j) for j in range(i, i + len(codes))]
                    filled = maskgit_decode(model, codes, mask, c.decode_steps, c.temperature,
                                            c.randomize_temperature, gens, **options)
                    rec = self.tokenizer.decode(filled.cpu())  # the tokeniser decodes on the host
                    target = es["images"][i:i + c.eval_batch_size].float() / 255.0
                    sums[3:] += torch.stack([((filled == codes) & mask).sum().cpu().double(),
                                             psnr(rec, target).sum().double(),
                                             ssim(rec, target).sum().double()]).to(dev, wide)
        finally:
            model.train(was_training)
        sums = dict(zip(("ce", "correct", "masked", "decoded", "psnr", "ssim"), sums.tolist()))
        res = {"loss": sums["ce"] / sums["masked"], "accuracy": sums["correct"] / sums["masked"],
               "examples": float(n), "masked_fraction": sums["masked"] / es["codes"].numel()}
        if decode:
            res.update(decode_accuracy=sums["decoded"] / sums["masked"], psnr=sums["psnr"] / n,
                       ssim=sums["ssim"] / n)
        res.update(es["ref"])
        return res

    def eval_from_args(self, model, args, forward_options):
        """The heading names the mask applied, k of N codes (``round(eval_mask_ratio N)``, the ``masked_fraction``
        metric), not the configured ratio: "40% masked" was printed where 2 of 4 (50%) or 6 of 16 were masked."""
        c = self.cfg
        res = self.evaluate(model, args.split, **forward_options)
        N = self.eval_set(args.split)["codes"].shape[1]
        k = eval_mask_count(c.eval_mask_ratio, N)
        where = (f"{c.dataset} {args.split} split, {c.codebook_size} codes of {self.patch(c)}x{self.patch(c)} "
                 f"patches, {k} of {N} codes masked ({100 * k / N:.3g}%), {c.decode_steps} decoding steps")
        return where, res

    def format_metrics(self, m: dict[str, Any]) -> str:
        m = {k.removeprefix("eval/"): v for k, v in m.items()}
        out = [f"{int(m['examples'])} images"] if "examples" in m else []
        out.append(f"masked CE {m.get('loss', math.nan):.4f}, masked accuracy {100 * m.get('accuracy', math.nan):.2f}% "
                   f"(unigram {m.get('unigram_loss', math.nan):.4f} / "
                   f"{100 * m.get('unigram_accuracy', math.nan):.2f}%)")
        if "psnr" in m:
            out.append(f"decoded: accuracy {100 * m['decode_accuracy']:.2f}%, PSNR {m['psnr']:.3f} dB, "
                       f"SSIM {m['ssim']:.4f}")
        if "tokenizer_psnr" in m:
            out.append(f"tokeniser ceiling PSNR {m['tokenizer_psnr']:.3f} / SSIM {m['tokenizer_ssim']:.4f}; "
                       f"unigram fill {m['unigram_psnr']:.3f} / {m['unigram_ssim']:.4f}")
        return ", ".join(out)


__all__ = ["MaskedImageConfig", "MaskedImageTask", "PatchTokenizer", "load_or_fit_tokenizer", "random_mask",
           "masked_cross_entropy", "masked_accuracy", "eval_mask_count", "psnr", "ssim"]
