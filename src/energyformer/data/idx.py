"""IDX files (the MNIST / Fashion-MNIST format): a reader with errors that name the file, and a writer.

Format (LeCun, Cortes & Burges, "THE MNIST DATABASE of handwritten digits", file-format section):

* bytes 0-1: zero; byte 2: the element type (``0x08`` uint8, ``0x09`` int8, ``0x0B`` int16,
  ``0x0C`` int32, ``0x0D`` float32, ``0x0E`` float64); byte 3: ``ndim``;
* then ``ndim`` big-endian uint32 dimension sizes;
* then the data, C order, big-endian.

Files may be gzip-compressed (detected from the gzip magic ``1f 8b``, not from the file name).
Every problem (missing file, corrupt gzip, bad magic number, truncated header or data, trailing
bytes, wrong number of dimensions or sizes, image/label count mismatch, labels out of range) raises
a :class:`~energyformer.errors.DataError` whose message names the file.
"""

from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path

import numpy as np

from energyformer.errors import DataError
from energyformer.utils.io import atomic_write_bytes

#: IDX type code -> big-endian numpy dtype.
IDX_DTYPES: dict[int, np.dtype] = {
    0x08: np.dtype(">u1"), 0x09: np.dtype(">i1"), 0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"), 0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8"),
}
_CODES = {dt.newbyteorder("="): code for code, dt in IDX_DTYPES.items()}
_GZIP_MAGIC = b"\x1f\x8b"


def _read_bytes(path: Path) -> bytes:
    """The (decompressed) bytes of ``path``; DataError naming it on any failure."""
    if not path.exists():
        raise DataError(f"IDX file {str(path)!r} not found")
    if not path.is_file():
        raise DataError(f"IDX file {str(path)!r} is not a regular file")
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise DataError(f"IDX file {str(path)!r} cannot be read: {err.strerror}") from None
    if raw[:2] != _GZIP_MAGIC:
        return raw
    try:
        return gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as err:
        raise DataError(f"IDX file {str(path)!r}: corrupt or truncated gzip data ({err})") from None


def parse_idx(data: bytes, name: str = "<bytes>") -> np.ndarray:
    """Parse the bytes of one IDX file into a native-endian array (``name`` is used in errors)."""
    if len(data) < 4:
        raise DataError(f"IDX file {name!r} is truncated: {len(data)} bytes, the header needs 4")
    if data[0] != 0 or data[1] != 0 or data[2] not in IDX_DTYPES:
        raise DataError(
            f"IDX file {name!r} has a bad magic number 0x{data[:4].hex()} (expected 0x0000TTNN: "
            f"type TT in {{{', '.join(f'{c:02x}' for c in IDX_DTYPES)}}}, NN dimensions); "
            f"is it an IDX file?")
    dtype, ndim = IDX_DTYPES[data[2]], data[3]
    if ndim == 0:
        raise DataError(f"IDX file {name!r} declares 0 dimensions")
    header = 4 + 4 * ndim
    if len(data) < header:
        raise DataError(f"IDX file {name!r} is truncated: {len(data)} bytes, the header of a "
                        f"{ndim}-d array needs {header}")
    shape = tuple(int(d) for d in np.frombuffer(data, dtype=">u4", count=ndim, offset=4))
    need = header + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(data) < need:
        raise DataError(f"IDX file {name!r} is truncated: shape {shape} needs {need} bytes, "
                        f"the file has {len(data)}")
    if len(data) > need:
        raise DataError(f"IDX file {name!r} has {len(data) - need} bytes after the data of shape "
                        f"{shape}; is it corrupt?")
    arr = np.frombuffer(data, dtype=dtype, offset=header).reshape(shape)
    return arr.astype(dtype.newbyteorder("="), copy=True)


def read_idx(path: str | os.PathLike, *, ndim: int | None = None,
             shape: tuple[int | None, ...] | None = None) -> np.ndarray:
    """Read one IDX file (plain or gzip) into a native-endian numpy array.

    ``ndim`` / ``shape`` (``None`` entries are free) state what the caller expects; any difference
    is a :class:`DataError` naming the file.
    """
    p = Path(path)
    arr = parse_idx(_read_bytes(p), str(p))
    if ndim is not None and arr.ndim != ndim:
        raise DataError(f"IDX file {str(p)!r} has {arr.ndim} dimensions {arr.shape}; expected {ndim}")
    if shape is not None:
        ok = len(shape) == arr.ndim and all(e is None or e == a for e, a in zip(shape, arr.shape))
        if not ok:
            want = "(" + ", ".join("*" if e is None else str(e) for e in shape) + ")"
            raise DataError(f"IDX file {str(p)!r} has shape {arr.shape}; expected {want}")
    return arr


def read_idx_images(path: str | os.PathLike, *, size: tuple[int, int] | None = None) -> np.ndarray:
    """Read an ``idx3`` uint8 image file as ``(n, 1, H, W)`` uint8 (``size = (H, W)`` if known)."""
    arr = read_idx(path, ndim=3, shape=(None, *size) if size else None)
    if arr.dtype != np.uint8:
        raise DataError(f"IDX file {str(path)!r} holds {arr.dtype} values; images must be uint8")
    return arr[:, None]


def read_idx_labels(path: str | os.PathLike, *, num_classes: int | None = None) -> np.ndarray:
    """Read an ``idx1`` label file as int64 ``(n,)``; labels must lie in ``[0, num_classes)``."""
    arr = read_idx(path, ndim=1)
    if arr.dtype.kind not in "iu":
        raise DataError(f"IDX file {str(path)!r} holds {arr.dtype} values; labels must be integers")
    labels = arr.astype(np.int64)
    if num_classes is not None and labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        raise DataError(f"IDX file {str(path)!r} has labels in [{labels.min()}, {labels.max()}]; "
                        f"expected [0, {num_classes - 1}]")
    return labels


def read_idx_pair(images: str | os.PathLike, labels: str | os.PathLike, *,
                  size: tuple[int, int] | None = None,
                  num_classes: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Images ``(n, 1, H, W)`` uint8 and labels ``(n,)`` int64 from two IDX files of equal count."""
    x = read_idx_images(images, size=size)
    y = read_idx_labels(labels, num_classes=num_classes)
    if x.shape[0] != y.shape[0]:
        raise DataError(f"IDX files {str(images)!r} ({x.shape[0]} images) and {str(labels)!r} "
                        f"({y.shape[0]} labels) do not have the same number of items")
    return x, y


def encode_idx(arr: np.ndarray) -> bytes:
    """The IDX bytes of ``arr`` (uint8, int8, int16, int32, float32 or float64)."""
    a = np.asarray(arr)
    code = _CODES.get(a.dtype.newbyteorder("="))
    if code is None:
        raise ValueError(f"encode_idx: dtype {a.dtype} has no IDX type code")
    if a.ndim == 0 or a.ndim > 255:
        raise ValueError(f"encode_idx: arrays need 1..255 dimensions, got {a.ndim}")
    head = bytes([0, 0, code, a.ndim]) + np.asarray(a.shape, dtype=">u4").tobytes()
    return head + np.ascontiguousarray(a, dtype=IDX_DTYPES[code]).tobytes()


def write_idx(path: str | os.PathLike, arr: np.ndarray, *, compress: bool | None = None) -> Path:
    """Write ``arr`` as an IDX file (atomically); gzip when ``compress`` or the name ends in ``.gz``."""
    p = Path(path)
    data = encode_idx(arr)
    if compress if compress is not None else p.suffix == ".gz":
        data = gzip.compress(data, mtime=0)
    return atomic_write_bytes(p, data, durable=False)
