"""The Python documentation sources as a second, larger offline corpus (``task.corpus: pydoc``).

Source: Debian's ``python3.11-doc`` package, ``/usr/share/doc/python3.11/html/_sources/**/*.rst.txt``
(reStructuredText of the Python 3.11 documentation: library reference, C API, tutorial, how-tos;
~500 files, ~11 MB, about 10x the Shakespeare plays). Used by ``reproduce intrinsic-lm`` as the
second corpus (the intrinsic-optimizer seed trains on MiniPile, which is not available offline).

Where the files come from (install time only, ``scripts/prepare_data.py`` / ``make data``):

1. an installed package (``/usr/share/doc/python3.11/html/_sources``), else
2. a given ``.deb`` (``--pydoc-deb``), else
3. ``apt-get download python3.11-doc`` (no root needed; private package lists on a fresh machine),
   whose ``data.tar`` is read in Python (:func:`energyformer.data.image_sources.apt_download`).

The ``.rst.txt`` files are copied to ``<data_dir>/pydoc/files/`` and split **by file** with a salted
sha256 of the relative path: ~5 % validation, ~5 % test, the rest training (no file is in two splits,
so validation text is unseen prose, not a held-out tail of a seen page). Each split is the files'
text in path order joined by a blank line, written to ``<data_dir>/pydoc/{split}.txt``.
Nothing is downloaded at run time: :func:`load_pydoc` raises a :class:`DataError` naming
``make data`` when the corpus is absent.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import warnings
from pathlib import Path

from ..errors import DataError
from ..utils.io import atomic_write_bytes
from ..utils.validate import check_choice
from .text import SPLITS, checked_split, data_dir, note

PACKAGE = "python3.11-doc"
SYSTEM_DIR = Path("/usr/share/doc/python3.11/html/_sources")
_DEB_PREFIX = "usr/share/doc/python3.11/html/_sources/"
SPLIT_SALT = "energyformer-pydoc-v1"
#: 1 in HELD_OUT files goes to validation and 1 in HELD_OUT to test.
HELD_OUT = 20
FETCH_COMMAND = "make data   (or: python scripts/prepare_data.py --pydoc)"


def pydoc_dir() -> Path:
    return data_dir() / "pydoc"


def split_of(relpath: str) -> str:
    """'train', 'validation' or 'test' for a source file (salted sha256 of its relative path)."""
    r = int(hashlib.sha256(f"{SPLIT_SALT}:{relpath}".encode()).hexdigest(), 16) % HELD_OUT
    return "validation" if r == 0 else "test" if r == 1 else "train"


def _from_deb(deb: Path) -> dict[str, bytes]:
    from .image_sources import _deb_data_tar

    out: dict[str, bytes] = {}
    with _deb_data_tar(deb) as tar:
        for m in tar.getmembers():
            name = m.name[2:] if m.name.startswith("./") else m.name
            if name.startswith(_DEB_PREFIX) and name.endswith(".rst.txt") and m.isfile():
                f = tar.extractfile(m)
                assert f is not None
                out[name[len(_DEB_PREFIX):]] = f.read()
    if not out:
        raise DataError(f"{deb} holds no {_DEB_PREFIX}*.rst.txt files: is it {PACKAGE}?")
    return out


def _from_dir(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.rst.txt"))}


def prepare_pydoc(*, download: bool = True, deb: str | Path | None = None, force: bool = False) -> dict:
    """Build ``<data_dir>/pydoc/{train,validation,test}.txt`` + ``meta.json``; idempotent.

    Returns the metadata (files per split, bytes per split, their sha256, the source).
    """
    out = pydoc_dir()
    meta_path = out / "meta.json"
    if not force and all((out / f"{s}.txt").is_file() and checked_split(out / f"{s}.txt", meta_path)[1] is None
                         for s in SPLITS):  # a changed split file or meta.json is prepared again
        return json.loads(meta_path.read_text("utf-8"))
    if deb is not None:
        files, source = _from_deb(Path(deb)), str(deb)
    elif SYSTEM_DIR.is_dir() and any(SYSTEM_DIR.rglob("*.rst.txt")):
        files, source = _from_dir(SYSTEM_DIR), str(SYSTEM_DIR)
    elif download:
        from .image_sources import apt_download

        with tempfile.TemporaryDirectory(prefix="energyformer-apt-") as tmp:
            path = apt_download(PACKAGE, Path(tmp))
            files, source = _from_deb(path), path.name
    else:
        raise DataError(f"the Python documentation corpus is not prepared and {SYSTEM_DIR} is absent; "
                        f"run {FETCH_COMMAND}")
    parts: dict[str, list[str]] = {s: [] for s in SPLITS}
    for rel in sorted(files):
        parts[split_of(rel)].append(rel)
    meta = {"source": source, "salt": SPLIT_SALT, "files": {s: len(v) for s, v in parts.items()},
            "bytes": {}, "sha256": {}}
    for s, rels in parts.items():
        data = b"\n\n".join(files[r].decode("utf-8", "replace").encode("utf-8") for r in rels)
        atomic_write_bytes(out / f"{s}.txt", data)
        meta["bytes"][s] = len(data)
        meta["sha256"][s] = hashlib.sha256(data).hexdigest()
    meta["split_files"] = parts
    atomic_write_bytes(meta_path, json.dumps(meta, indent=1).encode("utf-8"))
    return meta


def load_pydoc(split: str = "train") -> str:
    """Text of one split, checked against the sha256 recorded when it was prepared; a :class:`DataError` naming
    the file and the install step when it is absent or changed (prepared again from an installed
    ``python3.11-doc`` when there is one: a line on stderr for a missing corpus, a warning for a changed one)."""
    check_choice("split", split, SPLITS)
    path = pydoc_dir() / f"{split}.txt"
    if not path.exists():
        if not SYSTEM_DIR.is_dir():
            raise DataError(f"Python documentation corpus not found at {path}: run {FETCH_COMMAND}")
        note(f"preparing the Python documentation corpus in {pydoc_dir()} from {SYSTEM_DIR}")
        prepare_pydoc(download=False)
    data, problem = checked_split(path, path.parent / "meta.json")
    if problem and SYSTEM_DIR.is_dir():
        warnings.warn(f"{problem}; preparing the corpus again from {SYSTEM_DIR}", stacklevel=2)
        prepare_pydoc(download=False, force=True)
        data, problem = checked_split(path, path.parent / "meta.json")
    if problem:
        raise DataError(f"Python documentation corpus: {problem}; run {FETCH_COMMAND}")
    return data.decode("utf-8")
