"""Masked-token modelling (MLM) on generalised Potts data (Rende et al. 2024; seed 004 "Recycling on
generalized Potts model"; reconstructed.md §2.2).

Sequences ``s ∈ {0..C-1}^L`` from :mod:`energyformer.data.potts`. Training masks ``n_masked`` random
sites per sequence (token id C) and takes the cross-entropy of the masked sites (backprop models:
``transformer`` = recycled / stacked transformer encoder, ``factored`` attention). ``bare_sa`` is
trained instead on the pseudo-likelihood of the clean sequences with its closed-form Hebbian gradient
(:meth:`~energyformer.models.bare_attention.BareSelfAttention.local_loss`): no masking and no
backpropagation through its dynamics.

Evaluation masks one fixed site per sequence (chosen by a generator seeded with ``eval_seed`` and the
split) and reports cross-entropy and accuracy on it, beside the **Bayes-optimal** loss and accuracy
of the same (sequence, site) pairs from the stored Potts parameters (``-log P(s_i | s_-i)`` and the
argmax of the exact conditional): ``excess_loss = loss - bayes_loss``. With ``n_masked = 1`` (the
default) training and evaluation see the same problem; more masked sites make the reference a lower
bound. Recurrent models (``recurrent = True``) are also evaluated at every q in ``eval_iterations``
(``loss_q{q}``, ``accuracy_q{q}``). For bare self-attention the readout scale is not learned, so the
cross-entropy is also given at a scale calibrated on training sequences (``loss_cal``), and the model's
own conditional without dynamics (``cond_loss``, ``cond_accuracy``; float64, exact at any scale of J,
multi-head J included; it grows with ‖J‖, so a J that blew up in training shows there first).

Splits: ``train`` minus its last ``n_validation`` sequences (training), those (``validation``, used for
periodic evaluation and hyper-parameter choices), and the stored ``test`` set.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from ..data.batching import EpochBatcher, seeded_generator
from ..data.potts_dataset import PottsConfig, PottsDataset, load_potts_dataset
from ..models import MODELS
from ..models.backbone import LayerStack
from ..train.callbacks import ProjectionCallback
from ..train.checkpoint import unwrap_model
from ..utils.fields import IterationCounts, Seed
from ..utils.config import KindConfig, replace
from ..utils.validate import ConfigError
from .base import Task, TaskConfig, check_batch_size, register_task
from .losses import masked_cross_entropy


class PottsMLMConfig(TaskConfig):
    """Masked-token prediction on generalised Potts sequences, with the Bayes-optimal loss as reference."""

    kind: Literal["potts_mlm"] = "potts_mlm"
    data: PottsConfig = Field(default_factory=PottsConfig)
    """the Potts data set (generated once and cached)"""
    n_validation: int = Field(2560, ge=1)
    """training sequences held out as the validation split"""
    batch_size: int = Field(256, ge=1)
    """sequences per training batch (the follow-up paper's 256)"""
    n_masked: int = Field(1, ge=1)
    """sites masked per training sequence (1: the Bayes reference is exact)"""
    eval_sequences: int | None = Field(None, ge=1)
    """sequences evaluated per split (None: all)"""
    eval_iterations: IterationCounts = Field(default_factory=lambda: [1, 2, 3, 4, 6, 8])
    """q values at which recurrent models are evaluated (sweep)"""
    calibrate_sequences: int = Field(2048, ge=1)
    """training sequences used to calibrate bare self-attention's readout scale"""
    eval_seed: Seed = 0
    """seed of the site masked in each evaluated sequence"""


def mask_sites(s: torch.Tensor, n: int, C: int, generator: torch.Generator | None = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """Mask ``n`` distinct random sites per row of ``s`` (B, L): (ids with masked = C, bool mask (B, L))."""
    r = torch.rand(s.shape, generator=generator).to(s.device)
    sites = r.argsort(dim=1)[:, :n]
    masked = torch.zeros_like(s, dtype=torch.bool).scatter_(1, sites, True)
    return s.masked_fill(masked, C), masked


def calibrate_scale(raw: torch.Tensor, target: torch.Tensor, lo: float = 1e-2, hi: float = 1e4) -> float:
    """Scale s in [lo, hi] minimising the mean CE of ``softmax(s · raw)`` (raw (n, C), target (n,)), found on log s
    by SciPy's bounded Brent search (``minimize_scalar(method='bounded')``): the CE is convex in s, so unimodal.
    Where the CE is flat to float64 (targets separable by raw's argmax: it falls towards 0 as s grows) any scale of
    the flat part is a minimiser, and the one returned is not fixed beyond that."""
    from scipy.optimize import minimize_scalar  # (here: SciPy's import costs every command's start ~0.4 s)

    raw = raw.double()

    def ce(log_s: float) -> float:
        return float(F.cross_entropy(math.exp(log_s) * raw, target))

    res = minimize_scalar(ce, bounds=(math.log(lo), math.log(hi)), method="bounded", options={"xatol": 1e-10})
    return math.exp(float(res.x))


def is_recurrent(model: nn.Module) -> bool:
    """Whether a model is meant to be run at any number of iterations q: it says so (``recurrent``), or it
    is a transformer whose layer stack is one recycled block or is iterated (``n_layers == 1``,
    ``iterations > 1`` or ``train_iterations``); a stack of distinct layers run once is not."""
    flag = getattr(model, "recurrent", None)
    if flag is not None:
        return bool(flag)
    cfg = getattr(model, "cfg", None)
    if not isinstance(getattr(model, "layers", None), LayerStack) or cfg is None:
        return False
    return cfg.n_layers == 1 or cfg.iterations > 1 or cfg.train_iterations is not None


def _check_sizes(cfg: PottsMLMConfig) -> None:
    if cfg.n_validation >= cfg.data.n_train:
        raise ConfigError(f"task.n_validation = {cfg.n_validation}: must be below the {cfg.data.n_train} training "
                          f"sequences (task.data.n_train)")
    if cfg.n_masked > cfg.data.L:
        raise ConfigError(f"task.n_masked = {cfg.n_masked}: must be at most L = {cfg.data.L} (task.data.L)")


@register_task("potts_mlm", PottsMLMConfig)
class PottsMLMTask(Task):
    """MLM on Potts data: CE/accuracy on masked sites vs the Bayes-optimal loss; q sweeps for recurrent models."""

    model_kinds = ("transformer", "factored", "bare_sa")
    main_metric = "loss"

    def __init__(self, cfg: PottsMLMConfig, *, seed: int = 0, rank: int = 0):
        super().__init__(cfg, seed=seed, rank=rank)
        self.data: PottsDataset = load_potts_dataset(cfg.data)
        _check_sizes(cfg)  # also here: a task built without a run config (tests, scripts)
        n = self.data.train.shape[0]
        self.splits = {"train": self.data.train[: n - cfg.n_validation],
                       "validation": self.data.train[n - cfg.n_validation:], "test": self.data.test}
        check_batch_size(cfg.batch_size, len(self.splits["train"]), "training sequences",
                         " (at most that many per batch)")
        self.train_data = EpochBatcher((self.splits["train"],), cfg.batch_size, seed=seed + 1000 * rank,
                                       name="potts_mlm train batcher")
        self.train_data.tokens_per_batch = cfg.batch_size * self.L  # type: ignore[attr-defined]

    @property
    def L(self) -> int:
        return self.data.model.L

    @property
    def C(self) -> int:
        return self.data.model.C

    # ------------------------------------------------------------------ model
    @classmethod
    def check_config(cls, task_cfg: PottsMLMConfig, model_cfg: KindConfig) -> None:
        _check_sizes(task_cfg)  # at config time (`energyformer config` too), not once the data are built
        if model_cfg.kind == "transformer":
            if model_cfg.causal:
                raise ValueError("model.causal = True: masked-token prediction needs bidirectional "
                                 "attention (leave model.causal unset or false)")
            if model_cfg.positions != "none" and model_cfg.max_seq_len < task_cfg.data.L:
                raise ValueError(f"model.max_seq_len = {model_cfg.max_seq_len}: below the sequence "
                                 f"length task.data.L = {task_cfg.data.L}")
        for key, want in (("n_tokens", task_cfg.data.L), ("n_colours", task_cfg.data.C)):
            have = getattr(model_cfg, key, None)
            if have is not None and have != want:
                raise ValueError(f"model.{key} = {have}: the data have {want} "
                                 f"(task.data.{'L' if key == 'n_tokens' else 'C'}); leave it unset")

    def resolve_model_config(self, model_cfg: KindConfig) -> KindConfig:
        L, C = self.L, self.C
        if model_cfg.kind == "transformer":
            return model_cfg if model_cfg.vocab_size == C + 1 else replace(model_cfg, vocab_size=C + 1)
        upd: dict[str, Any] = {"n_tokens": L, "n_colours": C}
        if model_cfg.kind == "bare_sa":
            upd["dim"] = model_cfg.dim if model_cfg.dim is not None else C
            upd["objective"] = model_cfg.objective or "codebook"
        if all(getattr(model_cfg, k) == v for k, v in upd.items()):
            return model_cfg
        return replace(model_cfg, **upd)

    def build_model(self, model_cfg: KindConfig) -> nn.Module:
        if model_cfg.kind == "transformer":
            return MODELS.build(model_cfg, vocab_size=self.C + 1, n_out=self.C, causal=False)
        return MODELS.build(model_cfg)

    def callbacks(self, model: nn.Module) -> list:
        cfg = getattr(unwrap_model(model), "cfg", None)
        return [ProjectionCallback(name="frobenius")] if getattr(cfg, "frobenius", None) else []

    # ------------------------------------------------------------------ training
    def loss(self, model: nn.Module, batch: tuple) -> tuple[torch.Tensor, dict[str, float]]:
        (s,) = batch
        if hasattr(unwrap_model(model), "local_loss"):  # bare self-attention: pseudo-likelihood, no masking, no BPTT
            return model(s, local_loss=True)  # through the wrapper's forward: DDP all-reduces J's gradient
        idx, masked = mask_sites(s, self.cfg.n_masked, self.C)
        out = model(idx)
        return self.add_aux_losses(masked_cross_entropy(out.logits, s, masked), out)

    # ------------------------------------------------------------------ evaluation
    def eval_set(self, split: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(sequences (n, L), masked ids (n, L), masked-site mask (n, L)) of a split, sites fixed by eval_seed."""
        if split not in self.splits:
            raise ValueError(f"split {split!r}: allowed values are 'train', 'validation', 'test'")
        s = self.splits[split]
        n = s.shape[0] if self.cfg.eval_sequences is None else min(self.cfg.eval_sequences, s.shape[0])
        s = s[:n]
        idx, masked = mask_sites(s, 1, self.C, seeded_generator("potts-mlm-eval", self.cfg.eval_seed, split))
        return s, idx, masked

    def bayes_reference(self, split: str) -> dict[str, float]:
        """Bayes-optimal loss and accuracy on the evaluated (sequence, site) pairs of ``split``."""
        s, _, masked = self.eval_set(split)
        lp = self.data.model.conditional_log_probs(s)  # (n, L, C), float64
        nll = -lp.gather(2, s.to(lp.device)[..., None])[..., 0][masked]
        acc = (lp.argmax(-1) == s.to(lp.device))[masked].double().mean()
        return {"bayes_loss": float(nll.mean()), "bayes_accuracy": float(acc),
                "bayes_loss_se": float(nll.std() / math.sqrt(nll.numel()))}

    @torch.no_grad()
    def _logits(self, model: nn.Module, idx: torch.Tensor, chunk: int = 1024, **options: Any) -> torch.Tensor:
        dev = next(model.parameters()).device
        return torch.cat([model(idx[i:i + chunk].to(dev), **options).logits.float().cpu()
                          for i in range(0, idx.shape[0], chunk)])

    def _metrics(self, logits: torch.Tensor, s: torch.Tensor, masked: torch.Tensor) -> tuple[float, float]:
        lg, tgt = logits[masked], s[masked]
        return float(F.cross_entropy(lg, tgt)), float((lg.argmax(-1) == tgt).double().mean())

    @torch.no_grad()
    def evaluate(self, model: nn.Module, split: str = "validation", sweep: bool = True,
                 **options: Any) -> dict[str, float]:
        """Metrics on ``split`` (see the module docstring). ``options`` (iterations, steps) go to the model;
        ``sweep`` evaluates recurrent models at every q of ``eval_iterations`` as well."""
        s, idx, masked = self.eval_set(split)
        out = self.bayes_reference(split)
        inner = unwrap_model(model)
        bare = hasattr(inner, "local_loss")
        qs: list[int | None] = [None]
        if sweep and is_recurrent(inner) and "iterations" not in options:
            qs += list(self.cfg.eval_iterations)
        cal = None
        if bare:
            cs = self.splits["train"][: self.cfg.calibrate_sequences]
            cidx, cmask = mask_sites(cs, 1, self.C, seeded_generator("potts-mlm-cal", self.cfg.eval_seed))
            cal = (cs, cidx, cmask)
            # float64: at a large J the CE is a small difference of large logits
            cl = inner.conditional_logits(idx.to(next(inner.parameters()).device)).cpu()
            out["cond_loss"], out["cond_accuracy"] = self._metrics(cl, s, masked)
        for q in qs:
            opts = dict(options) if q is None else {**options, "iterations": q}
            logits = self._logits(model, idx, **opts)
            loss, acc = self._metrics(logits, s, masked)
            sfx = "" if q is None else f"_q{q}"
            out[f"loss{sfx}"], out[f"accuracy{sfx}"] = loss, acc
            if bare:
                scale = inner.cfg.readout_scale
                craw = self._logits(model, cal[1], **opts)[cal[2]] / scale
                best = calibrate_scale(craw, cal[0][cal[2]])
                out[f"loss_cal{sfx}"] = self._metrics(logits * (best / scale), s, masked)[0]
                out[f"readout_scale{sfx}"] = best
        out["excess_loss"] = out.get("loss_cal", out["loss"]) - out["bayes_loss"]
        return out

    def eval_fn(self, split: str = "validation"):
        def fn(model: nn.Module) -> dict[str, float]:
            return self.evaluate(model, split, sweep=False)

        return fn

    def eval_from_args(self, model, args, forward_options):
        return (f"Potts MLM {args.split} split (L={self.L}, C={self.C})",
                self.evaluate(model, args.split, **forward_options))
