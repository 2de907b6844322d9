"""CIFAR-10 / CIFAR-100 from the standard python-pickle batches, read without running pickle code.

Layout (Krizhevsky, "Learning Multiple Layers of Features from Tiny Images", 2009; the "python
version" of https://www.cs.toronto.edu/~kriz/cifar.html):

* CIFAR-10, folder ``cifar-10-batches-py``: ``data_batch_1`` .. ``data_batch_5``, ``test_batch``
  (dicts with ``data`` uint8 ``(n, 3072)`` and ``labels``), ``batches.meta`` (``label_names``).
* CIFAR-100, folder ``cifar-100-python``: ``train``, ``test`` (``data``, ``fine_labels``,
  ``coarse_labels``), ``meta`` (``fine_label_names``, ``coarse_label_names``).
* Each row of ``data`` is 1024 red, 1024 green, 1024 blue values, each a row-major 32x32 plane,
  so ``data.reshape(n, 3, 32, 32)`` is ``(n, C, H, W)``.

The batches were written by Python 2's cPickle. Pickle can call any importable function, so the
files are read with :class:`SafeUnpickler`, which admits only the few numpy reconstructors an array
needs (plus ``_codecs.encode`` for Latin-1 byte strings) and refuses every other global with a
:class:`~energyformer.errors.DataError` naming the file; after loading, the result must consist of
plain containers, strings, numbers and non-object numpy arrays. ``root`` may be the extracted
folder or the downloaded ``.tar.gz`` (read in memory, nothing is extracted to disk).

Malformed data is a DataError naming the file, never a silent guess: labels must be integers (floats that
are whole numbers pass; ``1.9`` is not truncated to class 1), the meta file must list exactly the set's
class count (:data:`CIFAR_CLASS_COUNTS`: a model head is sized from that fixed count before the data is
read, so a 12-name or 5-name meta file would otherwise fail deep inside training or evaluation), and a
truncated or corrupt archive is reported with the archive (and member) named.
"""

from __future__ import annotations

import io
import os
import pickle
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from energyformer.errors import DataError

try:  # numpy >= 2 (numpy.core is a deprecated alias there)
    from numpy._core.multiarray import scalar as _np_scalar
    from numpy._core.numeric import _frombuffer as _np_frombuffer
except ImportError:  # pragma: no cover - numpy 1.x
    from numpy.core.multiarray import scalar as _np_scalar
    from numpy.core.numeric import _frombuffer as _np_frombuffer

CIFAR10_FILES = {"train": tuple(f"data_batch_{i}" for i in range(1, 6)), "test": ("test_batch",),
                 "meta": "batches.meta"}
CIFAR100_FILES = {"train": ("train",), "test": ("test",), "meta": "meta"}
CIFAR_FOLDERS = {"cifar10": "cifar-10-batches-py", "cifar100": "cifar-100-python"}
CIFAR_IMAGE = (3, 32, 32)
#: classes of each set and label mode (the official files; the model head is sized from these)
CIFAR_CLASS_COUNTS = {("cifar10", "fine"): 10, ("cifar100", "fine"): 100, ("cifar100", "coarse"): 20}
#: what a truncated or corrupt .tar.gz raises while it is listed or read (gzip: EOFError, zlib.error)
_ARCHIVE_ERRORS = (tarfile.TarError, OSError, EOFError, zlib.error)


def _numpy_reconstruct(subtype: Any, shape: Any, dtype: Any) -> np.ndarray:
    if subtype is not np.ndarray:
        raise pickle.UnpicklingError(f"array subtype {subtype!r} is not numpy.ndarray")
    return np.ndarray.__new__(np.ndarray, shape, _numpy_dtype(dtype))


def _numpy_dtype(*args: Any) -> np.dtype:
    dt = np.dtype(*args)
    if dt.hasobject:
        raise pickle.UnpicklingError(f"object dtype {dt!r} is not allowed")
    return dt


def _numpy_scalar(dtype: Any, *args: Any) -> Any:
    if not isinstance(dtype, np.dtype) or dtype.hasobject:
        raise pickle.UnpicklingError(f"numpy scalar of dtype {dtype!r} is not allowed")
    return _np_scalar(dtype, *args)


def _numpy_frombuffer(buf: Any, dtype: Any, shape: Any, order: Any) -> np.ndarray:
    return _np_frombuffer(buf, _numpy_dtype(dtype), shape, order)


def _latin1_encode(obj: Any, encoding: str = "utf-8", errors: str = "strict") -> bytes:
    """Python 3 pickles ``bytes`` at protocol < 3 as ``_codecs.encode(text, 'latin1')``."""
    if not isinstance(obj, str) or encoding not in ("latin1", "latin-1") or errors != "strict":
        raise pickle.UnpicklingError(f"_codecs.encode({type(obj).__name__}, {encoding!r}) is not allowed")
    return obj.encode("latin1")


_ALLOWED_GLOBALS: dict[tuple[str, str], Any] = {
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): _numpy_dtype,
    ("numpy.core.multiarray", "_reconstruct"): _numpy_reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): _numpy_reconstruct,
    ("numpy.core.multiarray", "scalar"): _numpy_scalar,
    ("numpy._core.multiarray", "scalar"): _numpy_scalar,
    ("numpy.core.numeric", "_frombuffer"): _numpy_frombuffer,
    ("numpy._core.numeric", "_frombuffer"): _numpy_frombuffer,
    ("_codecs", "encode"): _latin1_encode,
}


class SafeUnpickler(pickle.Unpickler):
    """An unpickler that resolves only numpy-array globals; everything else is refused.

    Plain containers (dict, list, tuple, set), str/bytes and numbers need no globals at all.
    """

    def __init__(self, file: Any, name: str):
        super().__init__(file, encoding="bytes")
        self.name = name

    def find_class(self, module: str, name: str) -> Any:  # noqa: D102 (pickle hook)
        fn = _ALLOWED_GLOBALS.get((module, name))
        if fn is None:
            raise DataError(
                f"{self.name}: refusing to unpickle global {module}.{name}: a CIFAR batch holds only "
                f"dicts, lists, strings and numpy arrays (the file is corrupt or not a CIFAR batch, "
                f"and loading it with plain pickle could run arbitrary code)")
        return fn

    def persistent_load(self, pid: Any) -> Any:  # noqa: D102 (pickle hook)
        raise DataError(f"{self.name}: persistent ids are not allowed in a CIFAR batch")


_PLAIN = (str, bytes, int, float, bool, type(None), np.generic)


def _check_plain(obj: Any, name: str, depth: int = 0) -> None:
    if depth > 20:
        raise DataError(f"{name}: nesting deeper than 20 levels; not a CIFAR batch")
    if isinstance(obj, np.ndarray):
        if obj.dtype.hasobject:
            raise DataError(f"{name}: object arrays are not allowed in a CIFAR batch")
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _check_plain(k, name, depth + 1)
            _check_plain(v, name, depth + 1)
    elif isinstance(obj, (list, tuple, set, frozenset)):
        for v in obj:
            _check_plain(v, name, depth + 1)
    elif not isinstance(obj, _PLAIN) or (isinstance(obj, np.generic) and obj.dtype.hasobject):
        raise DataError(f"{name}: unexpected object of type {type(obj).__name__} in a CIFAR batch")


def safe_unpickle(data: bytes, name: str) -> Any:
    """Unpickle ``data`` with :class:`SafeUnpickler`; any failure is a DataError naming ``name``."""
    try:
        obj = SafeUnpickler(io.BytesIO(data), name).load()
    except DataError:
        raise
    except Exception as err:  # pickle raises many types for corrupt input
        raise DataError(f"{name}: not a readable pickle ({type(err).__name__}: {err})") from None
    _check_plain(obj, name)
    return obj


def _str_keys(d: Any, name: str) -> dict[str, Any]:
    if not isinstance(d, dict):
        raise DataError(f"{name}: expected a dict, found {type(d).__name__}")
    return {k.decode("latin1") if isinstance(k, bytes) else str(k): v for k, v in d.items()}


def _names(value: Any, name: str, key: str) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)) or not value:
        raise DataError(f"{name}: {key!r} must be a non-empty list of class names")
    return tuple(v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in value)


class _Source:
    """Reads member files from a folder or from a ``.tar.gz`` archive (in memory)."""

    def __init__(self, root: Path, folder: str):
        self.root = root
        self.tar: tarfile.TarFile | None = None
        if root.is_file():
            try:
                self.tar = tarfile.open(root, "r:*")
            except _ARCHIVE_ERRORS as err:
                raise DataError(f"CIFAR archive {str(root)!r} cannot be opened: {err}") from None
            try:  # listing reads the whole (compressed) stream: a truncated archive fails here
                self.members = {m.name: m for m in self.tar.getmembers() if m.isfile()}
            except _ARCHIVE_ERRORS as err:
                self.tar.close()
                raise DataError(f"CIFAR archive {str(root)!r} is corrupt or truncated "
                                f"({type(err).__name__}: {err})") from None
            self.prefix = folder + "/"
        elif root.is_dir():
            self.dir = root / folder if (root / folder).is_dir() else root
        else:
            raise DataError(f"CIFAR data {str(root)!r} not found")

    def read(self, fname: str) -> tuple[bytes, str]:
        if self.tar is not None:
            key = self.prefix + fname
            if key not in self.members:
                raise DataError(f"CIFAR archive {str(self.root)!r} has no member {key!r}")
            try:
                f = self.tar.extractfile(self.members[key])
                assert f is not None
                return f.read(), f"{self.root}:{key}"
            except _ARCHIVE_ERRORS as err:
                raise DataError(f"CIFAR archive {str(self.root)!r}: member {key!r} is corrupt or truncated "
                                f"({type(err).__name__}: {err})") from None
        p = self.dir / fname
        if not p.is_file():
            raise DataError(f"CIFAR file {str(p)!r} not found (expected the standard python-pickle "
                            f"layout: {', '.join(CIFAR10_FILES['train'][:1])} ... or train/test/meta)")
        return p.read_bytes(), str(p)

    def close(self) -> None:
        if self.tar is not None:
            self.tar.close()


@dataclass(frozen=True)
class CifarArrays:
    """One CIFAR set as numpy arrays: images uint8 ``(n, 3, 32, 32)``, labels int64 ``(n,)``."""

    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray
    classes: tuple[str, ...]


def _int_labels(value: Any, name: str, key: str) -> np.ndarray:
    """``value`` as int64 labels: integers, or floats that are whole numbers; anything else (``1.9``, NaN,
    booleans, strings) is a DataError naming the file. A plain ``int64`` cast would truncate 1.9 to 1."""
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError):  # ragged nesting
        raise DataError(f"{name}: {key!r} must be a list of integers; found a ragged "
                        f"{type(value).__name__}") from None
    if arr.dtype.kind == "f":
        bad = ~np.isfinite(arr) | (arr != np.round(arr))
        if bad.any():
            raise DataError(f"{name}: {key!r} must be integers; found {float(arr[bad].reshape(-1)[0])!r} "
                            f"({int(bad.sum())} of {arr.size} labels are not whole numbers)")
    elif arr.dtype.kind not in "iu":
        raise DataError(f"{name}: {key!r} must be integers; found {arr.dtype} values")
    return arr.astype(np.int64)


def _read_batch(src: _Source, fname: str, label_key: str, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    raw, name = src.read(fname)
    d = _str_keys(safe_unpickle(raw, name), name)
    for key in ("data", label_key):
        if key not in d:
            raise DataError(f"{name}: no {key!r} entry (keys: {', '.join(sorted(d))})")
    data = d["data"]
    size = int(np.prod(CIFAR_IMAGE))
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != size:
        shape = getattr(data, "shape", None)
        raise DataError(f"{name}: 'data' must be a uint8 array of shape (n, {size}); found "
                        f"{type(data).__name__} {getattr(data, 'dtype', '')} {shape}")
    labels = _int_labels(d[label_key], name, label_key)
    if labels.shape != (data.shape[0],):
        raise DataError(f"{name}: {data.shape[0]} images but {labels.size} {label_key!r}")
    if labels.size and (labels.min() < 0 or labels.max() >= n_classes):
        raise DataError(f"{name}: {label_key!r} in [{labels.min()}, {labels.max()}], expected "
                        f"[0, {n_classes - 1}] ({n_classes} classes in the meta file)")
    return data.reshape(-1, *CIFAR_IMAGE), labels


def load_cifar(root: str | os.PathLike, kind: Literal["cifar10", "cifar100"] = "cifar10", *,
               label_mode: Literal["fine", "coarse"] = "fine") -> CifarArrays:
    """Read CIFAR-10 or CIFAR-100 from ``root`` (the python-pickle folder, its parent, or the .tar.gz).

    ``label_mode`` picks CIFAR-100's 100 fine or 20 coarse labels (ignored for CIFAR-10).
    """
    if kind not in CIFAR_FOLDERS:
        raise DataError(f"CIFAR kind {kind!r}: allowed values are 'cifar10', 'cifar100'")
    if label_mode not in ("fine", "coarse"):
        raise DataError(f"CIFAR label_mode {label_mode!r}: allowed values are 'fine', 'coarse'")
    files = CIFAR10_FILES if kind == "cifar10" else CIFAR100_FILES
    if kind == "cifar10":
        label_key, names_key = "labels", "label_names"
    else:
        label_key, names_key = f"{label_mode}_labels", f"{label_mode}_label_names"
    src = _Source(Path(root), CIFAR_FOLDERS[kind])
    try:
        raw, name = src.read(files["meta"])
        meta = _str_keys(safe_unpickle(raw, name), name)
        if names_key not in meta:
            raise DataError(f"{name}: no {names_key!r} entry (keys: {', '.join(sorted(meta))})")
        classes = _names(meta[names_key], name, names_key)
        expected = CIFAR_CLASS_COUNTS[(kind, "fine" if kind == "cifar10" else label_mode)]
        if len(classes) != expected:
            raise DataError(f"{name}: {names_key!r} has {len(classes)} class names, expected {expected} "
                            f"({kind}{' ' + label_mode if kind == 'cifar100' else ''}; the model head has "
                            f"{expected} outputs)")
        parts = {s: [_read_batch(src, f, label_key, len(classes)) for f in files[s]]
                 for s in ("train", "test")}
    finally:
        src.close()
    cat = {s: (np.concatenate([x for x, _ in p]), np.concatenate([y for _, y in p]))
           for s, p in parts.items()}
    return CifarArrays(cat["train"][0], cat["train"][1], cat["test"][0], cat["test"][1], classes)
