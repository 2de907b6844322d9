"""Binary cumulative parity task (EqT seed 003 §5.1.1, Table 2; reconstructed.md §3).

Input: bits b_1 … b_L as tokens 0/1; target y_t = b_1 ⊕ … ⊕ b_t at every position; model: a causal
per-token classifier with 2 classes — the ``transformer`` kind (baseline: the backbone without
refinement) or the ``equilibrium`` kind (EqT). Loss: cross-entropy + the auxiliary losses the blocks
add (EqT: β·λ_i·ℒ_i(h⁽ᴷ⁾)). Metric: per-token accuracy on the fixed test set of ``task.data.length``
and, with ``eval_lengths``, of other lengths (``accuracy/L<length>``).
"""

from __future__ import annotations

from typing import Any, Literal

import torch
import torch.nn.functional as F
from pydantic import Field, field_validator
from torch import nn

from ..core.precision import at_least_float32
from ..data.parity import ParityConfig
from ..utils.config import KindConfig, replace
from .base import Task, TaskConfig, register_task

CLASSES = 2


class ParityTaskConfig(TaskConfig):
    """Cumulative parity: per-token accuracy by length (EqT Table 2)."""

    kind: Literal["parity"] = "parity"
    data: ParityConfig = Field(default_factory=ParityConfig)
    """length, training set (fresh or fixed) and test-set size"""
    batch_size: int = Field(32, ge=1)
    """sequences per training batch"""
    eval_batch_size: int = Field(256, ge=1)
    """sequences per evaluation batch"""
    eval_lengths: list[int] = Field(default_factory=list)
    """extra lengths scored by evaluate (each needs length <= model.max_seq_len)"""

    @field_validator("eval_lengths")
    @classmethod
    def _lengths(cls, v: list[int]) -> list[int]:
        for n in v:
            if n < 1:
                raise ValueError(f"eval_lengths: {n} is not a length; allowed: integers >= 1")
        return v


@register_task("parity", ParityTaskConfig)
class ParityTask(Task):
    """Cumulative parity with a causal 2-class per-token model (module docstring)."""

    has_splits = False  # one fixed test set per length (the paper's Table 2 reports test accuracy)
    split_note = "accuracy on the fixed test set of task.data.length and of each eval_lengths length"

    model_kinds = ("transformer", "equilibrium")
    main_metric = "accuracy"
    lower_is_better = False

    def __init__(self, cfg: ParityTaskConfig, *, seed: int = 0, rank: int = 0):
        super().__init__(cfg, seed=seed, rank=rank)
        self.train_data = cfg.data.batcher(cfg.batch_size, seed=seed * 1000 + rank)

    def resolve_model_config(self, model_cfg: KindConfig) -> KindConfig:
        longest = max([self.cfg.data.length, *self.cfg.eval_lengths])
        if getattr(model_cfg, "max_seq_len", longest) < longest:
            raise ValueError(f"model.max_seq_len = {model_cfg.max_seq_len}: the parity task needs >= {longest} "
                             "(task.data.length / task.eval_lengths)")
        if getattr(model_cfg, "causal", None) is False:
            raise ValueError("model.causal = False: cumulative parity is scored causally; leave it unset or true")
        updates: dict[str, Any] = {}
        if model_cfg.vocab_size != 2:
            updates["vocab_size"] = 2
        if model_cfg.kind == "transformer" and model_cfg.causal is None:
            updates["causal"] = True
        return replace(model_cfg, **updates) if updates else model_cfg

    def build_model(self, model_cfg: KindConfig) -> nn.Module:
        from ..models.registry import MODELS

        return MODELS.build(model_cfg, vocab_size=2, n_out=CLASSES, causal=True)

    def callbacks(self, model: nn.Module) -> list:
        """The model's schedules (EqT: γ annealing, K curriculum) as trainer callbacks."""
        inner = getattr(model, "module", model)
        return inner.callbacks() if hasattr(inner, "callbacks") else []

    def loss(self, model: nn.Module, batch: tuple) -> tuple[torch.Tensor, dict[str, float]]:
        x, y = batch                     # (B, L) bits and targets
        out = model(x)                   # logits (B, L, 2); both model kinds take (idx) alone
        ce = F.cross_entropy(at_least_float32(out.logits.flatten(0, 1)), y.flatten())
        return self.add_aux_losses(ce, out, {"ce": ce.detach()})  # a tensor: read after the backward

    @torch.no_grad()
    def accuracy(self, model: nn.Module, length: int, *, n: int | None = None, **forward: Any) -> float:
        """Per-token accuracy on the fixed test set of ``length`` (first ``n`` sequences). ``forward`` (``steps``,
        ``iterations``: eval's test-time options) goes to every forward call (one left None: the model's own
        value); only ``steps`` was passed once, so ``eval --iterations N`` printed the trained depth's accuracy.
        The count of correct tokens stays on the device (int64, exact) and is read once at the end: a read per batch
        kept the host from queueing the next batch until this one had finished."""
        dev = next(model.parameters()).device
        data = replace(self.cfg.data, length=length, n_test=n or self.cfg.data.n_test)
        bits, tgt = data.test_set(device=dev)
        correct: torch.Tensor | int = 0
        total = 0
        kw = {k: v for k, v in forward.items() if v is not None}
        for i in range(0, len(bits), self.cfg.eval_batch_size):
            xb, yb = bits[i:i + self.cfg.eval_batch_size], tgt[i:i + self.cfg.eval_batch_size]
            pred = model(xb, **kw).logits.argmax(-1)
            correct = correct + (pred == yb).sum()
            total += yb.numel()
        return int(correct) / total

    def eval_from_args(self, model, args, forward_options):
        return f"parity test set (length {self.cfg.data.length}, {self.cfg.data.n_test} sequences)", \
            self.evaluate(model, **forward_options)

    def evaluate(self, model: nn.Module, split: str = "validation", **options: Any) -> dict[str, float]:
        """Accuracy at ``task.data.length`` and each ``eval_lengths`` length; ``options`` (eval's ``--steps``,
        ``--iterations``) go to the model. ``split`` is ignored: one fixed test set per length."""
        was = model.training
        model.eval()
        try:
            out = {"accuracy": self.accuracy(model, self.cfg.data.length, **options)}
            for n in self.cfg.eval_lengths:
                out[f"accuracy/L{n}"] = self.accuracy(model, n, **options)
        finally:
            model.train(was)
        return out
