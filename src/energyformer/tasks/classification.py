"""Image classification task (Hyper-SET seed 002 §5.2, App. D.3): images -> ``vision`` model -> classes.

``task: {kind: image_classification, dataset: digits | mnist | fashion_mnist | cifar10 | cifar100}``
with the offline image sets of :mod:`energyformer.data.images` (validation carved from the official
training set by a seeded permutation; normalisation statistics of the training split; the set's light
default augmentation). Loss: cross-entropy (+ label smoothing, + the blocks' auxiliary losses).
Metrics: loss, accuracy; ``per_class=True`` adds each class's accuracy and the confusion matrix;
``task.eval_iterations`` adds the accuracy at other iteration counts (test-time depth).

``energyformer eval RUN [--split test] [--confusion PNG]`` prints per-class accuracy and writes the
confusion matrix (default ``RUN/confusion_<split>.png``).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F
from pydantic import Field, ValidationInfo, field_validator
from torch import nn

from ..core.precision import at_least_float32
from ..utils.paths import writable_image
from ..analysis.classification import (
    confusion_matrix, per_class_accuracy, per_class_markdown, plot_confusion, predict,
)
from ..data.cifar import CIFAR_CLASS_COUNTS, CIFAR_FOLDERS
from ..data.images import ImageDataset, check_cifar_options, load_image_dataset
from ..utils.fields import IterationCounts, Seed, SplitSize
from ..utils.config import KindConfig, replace
from ..utils.validate import check_divides
from .base import Task, TaskConfig, check_batch_size, register_task

def check_image_batch(cfg: Any, n: int) -> None:
    """One-line ConfigError when ``task.batch_size`` exceeds the ``n`` training images of an image task's ``cfg``
    (the batcher's own error named neither key)."""
    check_batch_size(cfg.batch_size, n, f"training images of {cfg.dataset}",
                     f" (task.train_examples = {cfg.train_examples}): lower task.batch_size (or give more training "
                     "examples)")


#: (channels, side, classes) of each set, known without loading it (config-time checks)
IMAGE_SHAPES = {"digits": (1, 8, 10), "mnist": (1, 28, 10), "fashion_mnist": (1, 28, 10),
                "cifar10": (3, 32, 10), "cifar100": (3, 32, 100)}


class ImageClassificationConfig(TaskConfig):
    """Image classification on an offline image set (accuracy, per-class accuracy, confusion matrix)."""

    kind: Literal["image_classification"] = "image_classification"
    dataset: Literal["digits", "mnist", "fashion_mnist", "cifar10", "cifar100"] = "digits"
    """image set (digits ships with scikit-learn; MNIST / Fashion-MNIST come from `make data`)"""
    validation: SplitSize = 0.1
    """validation examples carved from the official training set: a fraction in (0, 1) or a count >= 1"""
    split_seed: Seed = 0
    """seed of the validation carve and of train_examples' draw"""
    train_examples: int | None = Field(None, ge=1)
    """train on this many training examples (a seeded draw; None: all): CPU-scale runs"""
    eval_examples: int | None = Field(None, ge=1)
    """evaluate on this many examples of the split (a seeded draw; None: all)"""
    root: str | None = None
    """CIFAR only (refused on other sets): the python-pickle folder or .tar.gz (default: in the data cache)"""
    label_mode: Literal["fine", "coarse"] = "fine"
    """CIFAR-100 only (coarse is refused on other sets): 100 fine or 20 coarse labels"""
    augment: bool = True
    """the set's light augmentation (random crop after zero padding; flips where a mirror keeps the class)"""
    batch_size: int = Field(128, ge=1)
    """images per training micro-batch (Hyper-SET Table 9: 128)"""
    eval_batch_size: int = Field(500, ge=1)
    """images per evaluation batch"""
    label_smoothing: float = Field(0.0, ge=0, lt=1)
    """cross-entropy label smoothing"""
    eval_iterations: IterationCounts = Field(default_factory=list)
    """extra iteration counts at which the periodic evaluation also reports accuracy (test-time depth)"""

    @field_validator("root", "label_mode", mode="after")
    @classmethod
    def _cifar_only(cls, value: Any, info: ValidationInfo) -> Any:
        """``root`` needs a CIFAR set and ``label_mode = 'coarse'`` CIFAR-100 (they were ignored otherwise)."""
        return check_cifar_options(info.field_name, value, info.data.get("dataset"))


@register_task("image_classification", ImageClassificationConfig)
class ImageClassificationTask(Task):
    """Cross-entropy on class labels; accuracy (main metric), per-class accuracy, confusion matrix."""

    model_kinds = ("vision",)
    main_metric = "accuracy"
    lower_is_better = False

    def __init__(self, cfg: ImageClassificationConfig, *, seed: int = 0, rank: int = 0):
        super().__init__(cfg, seed=seed, rank=rank)
        self._data: ImageDataset | None = None
        self._train_data = None

    # ------------------------------------------------------------------ data (loaded on first use)
    @property
    def data(self) -> ImageDataset:
        if self._data is None:
            c = self.cfg
            ds = load_image_dataset(c.dataset, validation=c.validation, split_seed=c.split_seed, root=c.root,
                                    label_mode=c.label_mode)
            self._data = ds.subset("train", c.train_examples, c.split_seed, key="task.train_examples")
        return self._data

    @property
    def classes(self) -> tuple[str, ...]:
        return self.data.classes

    @property
    def train_data(self):  # type: ignore[override]
        if self._train_data is None:
            check_image_batch(self.cfg, len(self.data.train))
            b = self.data.batcher(self.cfg.batch_size, split="train", seed=self.seed + 1000 * self.rank,
                                  augment=self.cfg.augment)
            b.tokens_per_batch = self.cfg.batch_size  # the trainer's tokens/s = images/s
            self._train_data = b
        return self._train_data

    @train_data.setter
    def train_data(self, value: Any) -> None:
        self._train_data = value

    # ------------------------------------------------------------------ model
    @staticmethod
    def _shape(cfg: ImageClassificationConfig) -> tuple[int, int, int]:
        ch, side, n = IMAGE_SHAPES[cfg.dataset]
        if cfg.dataset in CIFAR_FOLDERS:  # the count load_cifar checks its meta file against (coarse CIFAR-100: 20)
            n = CIFAR_CLASS_COUNTS[(cfg.dataset, cfg.label_mode if cfg.dataset == "cifar100" else "fine")]
        return ch, side, n

    @classmethod
    def check_config(cls, task_cfg: ImageClassificationConfig, model_cfg: KindConfig) -> None:
        """Checked when the run config is loaded: the patch size divides the set's image side."""
        _, side, _ = cls._shape(task_cfg)
        p = getattr(model_cfg, "patch_size", None)
        if p is not None:
            check_divides("model.patch_size", p, side, f"the {task_cfg.dataset} image side")

    def resolve_model_config(self, model_cfg: KindConfig) -> KindConfig:
        ch, side, n = self._shape(self.cfg)
        if (model_cfg.channels, model_cfg.image_size, model_cfg.n_classes) == (ch, side, n):
            return model_cfg
        return replace(model_cfg, channels=ch, image_size=side, n_classes=n)

    def build_model(self, model_cfg: KindConfig) -> nn.Module:
        from ..models.vision import VisionTransformer

        return VisionTransformer(model_cfg)

    # ------------------------------------------------------------------ training
    def loss(self, model: nn.Module, batch: tuple) -> tuple[torch.Tensor, dict[str, float]]:
        x, y = batch
        out = model(x)
        logits = at_least_float32(out.logits)
        loss = F.cross_entropy(logits, y, label_smoothing=self.cfg.label_smoothing)
        metrics = {"acc": (logits.argmax(-1) == y).float().mean().detach()}  # read by the trainer after backward
        return self.add_aux_losses(loss, out, metrics)

    # ------------------------------------------------------------------ evaluation
    def batches(self, split: str):
        """Evaluation batches of ``split`` (``eval_examples`` of it when set), normalised, in order."""
        ds = self.data.subset(split, self.cfg.eval_examples, self.cfg.split_seed) if split != "train" else self.data
        return ds.eval_batches(split, self.cfg.eval_batch_size)

    def evaluate(self, model: nn.Module, split: str = "validation", per_class: bool = False,
                 **options: Any) -> dict[str, Any]:
        """loss, accuracy (and ``accuracy@L`` for ``task.eval_iterations``); with ``per_class`` also
        ``class_acc`` (list) and ``confusion`` (nested list, rows = true class)."""
        was_training = model.training
        model.eval()
        try:
            preds, labels, loss = predict(model, self.batches(split), **options)
            n = len(labels)
            res: dict[str, Any] = {"loss": loss / n, "accuracy": float((preds == labels).float().mean()),
                                   "examples": float(n)}
            if "iterations" not in options:
                for it in self.cfg.eval_iterations:
                    p, lab, _ = predict(model, self.batches(split), **{**options, "iterations": it})
                    res[f"accuracy@{it}"] = float((p == lab).float().mean())
            if per_class:
                cm = confusion_matrix(preds, labels, len(self.classes))
                res["class_acc"] = per_class_accuracy(cm)
                res["confusion"] = cm.tolist()
        finally:
            model.train(was_training)
        return res

    @classmethod
    def add_eval_args(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--confusion", metavar="PNG", type=writable_image("--confusion"),
                            help="where to write the confusion matrix (default: RUN/confusion_<split>.png)")

    def eval_from_args(self, model, args, forward_options):
        res = self.evaluate(model, args.split, per_class=True, **forward_options)
        cm = torch.tensor(res.pop("confusion"))
        res.pop("class_acc")
        path = Path(args.confusion) if getattr(args, "confusion", None) else Path(args.run) / f"confusion_{args.split}.png"
        suffix = "".join(f", {k} {v}" for k, v in forward_options.items())
        plot_confusion(cm, self.classes, path, f"{self.cfg.dataset} {args.split}: accuracy "
                       f"{100 * res['accuracy']:.2f}%{suffix}")
        print(per_class_markdown(cm, self.classes))
        print(f"confusion matrix: {path}")
        return f"{self.cfg.dataset} {args.split} split", res

    def format_metrics(self, m: dict[str, Any]) -> str:
        m = {k.removeprefix("eval/"): v for k, v in m.items()}
        out = []
        if "examples" in m:
            out.append(f"{int(m['examples'])} images")
        out.append(f"loss {m.get('loss', float('nan')):.4f}")
        out.append(f"accuracy {100 * m.get('accuracy', float('nan')):.2f}%")
        out += [f"{k} {100 * v:.2f}%" for k, v in m.items() if k.startswith("accuracy@")]
        return ", ".join(out)


__all__ = ["ImageClassificationConfig", "ImageClassificationTask", "IMAGE_SHAPES"]
