"""Potts data sets: a configuration (:class:`PottsConfig`), the train/test samples of one generalised Potts model
with the parameters that generated them (:class:`PottsDataset`), its files and its cache folder (split from
:mod:`energyformer.data.potts`, the model and its sampler).

A data set is stored with its parameters and seeds in the data cache as ``data.safetensors`` (J, U, h, train,
test) + ``meta.json`` (beta, seeds, sampler settings, and ``content_sha256``: the sha256 of the tensor file's bytes
followed by meta.json's other keys, so that an edit of either — also one that leaves valid parameters and samples —
is found when the folder is read).
"""

from __future__ import annotations

import hashlib
import json
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch
from pydantic import Field

from energyformer.data.batching import EpochBatcher, derive_seed
from energyformer.data.potts import PottsModel, bayes_loss, gibbs_sample, random_potts
from energyformer.data.text import data_dir, note
from energyformer.errors import DataError, brief
from energyformer.utils.config import ConfigModel
from energyformer.utils.fields import Seed
from energyformer.utils.io import atomic_write_bytes, atomic_write_text

#: version of the files' layout (also part of the cache key)
_FORMAT_VERSION = 1


class PottsConfig(ConfigModel):
    """A generalised-Potts data set (§2.2; defaults are the [REC] values)."""

    L: int = Field(20, ge=2)
    """sequence length (sites)"""
    C: int = Field(10, ge=2, le=256)
    """number of colours"""
    beta: float = Field(1.0, ge=0)
    """inverse temperature"""
    sparsity: float = Field(0.0, ge=0, le=1)
    """probability that a pair coupling J_ij is zero"""
    field_std: float = Field(0.0, ge=0)
    """standard deviation of the fields h (0: no fields)"""
    coupling_seed: Seed = 0
    """seed of J, U, h"""
    sample_seed: Seed = 0
    """seed of the Gibbs chains (train and test use different derived seeds)"""
    n_train: int = Field(25600, ge=1)
    """training sequences"""
    n_test: int = Field(3200, ge=1)
    """test sequences"""
    burn_in: int = Field(1000, ge=0)
    """Gibbs sweeps before the first sample"""
    thin: int = Field(10, ge=1)
    """sweeps between samples of one chain"""
    samples_per_chain: int = Field(32, ge=1)
    """samples recorded per chain, thin sweeps apart (1: every sample from its own chain). With the
    default model the lag-5 autocorrelation of the energy is already ~0 (chain_autocorrelation),
    so samples 10 sweeps apart are effectively independent, at 1/20 of the cost of one chain each"""

    def key(self) -> str:
        """A short hash naming this data set's cache folder."""
        text = json.dumps({"v": _FORMAT_VERSION, **self.model_dump()}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(eq=False)
class PottsDataset:
    """Samples of one Potts model with the parameters that generated them.

    ``train`` / ``test``: long ``(n, L)``; ``meta``: config, seeds and the Monte-Carlo Bayes loss
    on the test set (``bayes_loss_test`` with its standard error).
    """

    model: PottsModel
    train: torch.Tensor
    test: torch.Tensor
    config: PottsConfig
    meta: dict = field(default_factory=dict)

    def batcher(self, batch_size: int, *, seed: int = 0, split: str = "train",
                device: torch.device | str | None = None) -> EpochBatcher:
        """Exactly resumable batches of sequences ``(B, L)`` (one-tuple ``(s,)``) from ``split``."""
        data = {"train": self.train, "test": self.test}
        if split not in data:
            raise DataError(f"Potts split {split!r}: allowed values are 'train', 'test'")
        return EpochBatcher((data[split],), batch_size, seed=seed, device=device,
                            name=f"potts.{split} batcher")

    def save(self, folder: str | Path) -> Path:
        """Write ``data.safetensors`` (J, U, h, train, test) and ``meta.json`` atomically."""
        from safetensors.torch import save

        folder = Path(folder)
        store = torch.uint8 if self.model.C <= 256 else torch.int32  # colours are small integers
        tensors = {**self.model.tensors(), "train": self.train.to(store).cpu().contiguous(),
                   "test": self.test.to(store).cpu().contiguous()}
        meta = {"format_version": _FORMAT_VERSION, "beta": self.model.beta,
                "config": self.config.model_dump(), **self.meta}
        data = save(tensors, metadata={"beta": repr(self.model.beta)})
        atomic_write_bytes(folder / "data.safetensors", data)
        atomic_write_text(folder / "meta.json", json.dumps({**meta, _RECORD: _content_sha256(data, meta)}, indent=1))
        return folder

    @classmethod
    def load(cls, folder: str | Path) -> PottsDataset:
        """Read a folder written by :meth:`save`; parameters and samples are validated again.

        Every problem (a missing, unreadable or inconsistent ``meta.json`` or ``data.safetensors``) is a
        :class:`DataError` naming the file; a cache folder of :func:`load_potts_dataset` is regenerated instead.
        """
        try:
            return _load_dataset(Path(folder))
        except DataError as err:
            raise DataError(f"{err}; {_REWRITE_HINT}") from None


_RECORD = "content_sha256"


def _content_sha256(data: bytes, meta: dict) -> str:
    """sha256 of ``data.safetensors``' bytes, then ``meta`` (less the record itself) as sorted JSON."""
    rest = {k: v for k, v in meta.items() if k != _RECORD}
    return hashlib.sha256(data + json.dumps(rest, sort_keys=True).encode()).hexdigest()


def _load_dataset(folder: Path) -> PottsDataset:
    """:meth:`PottsDataset.load` without its hint: each problem is a DataError naming the file it is in. A folder
    written before the record existed (no ``content_sha256``) is read on its validity checks alone."""
    meta_path, data_path = folder / "meta.json", folder / "data.safetensors"
    meta, data = _read_meta(meta_path), _read_bytes(data_path)
    t = _read_tensors(data_path, data)
    try:
        cfg, beta = PottsConfig(**meta["config"]), float(meta["beta"])
    except (TypeError, ValueError) as err:  # ConfigError is a ValueError
        raise DataError(f"{meta_path}: {' '.join(str(err).split())[:200]}") from None
    try:
        model = PottsModel(t["J"], t["U"], t["h"], beta)
        train, test = model.check_states(t["train"], "train"), model.check_states(t["test"], "test")
    except (DataError, TypeError, ValueError) as err:
        raise DataError(f"{data_path}: {' '.join(str(err).split())[:200]}") from None
    if _RECORD in meta and meta[_RECORD] != _content_sha256(data, meta):  # valid, but not what was written
        raise DataError(f"{data_path} or {meta_path} changed since they were written (their sha256 is not "
                        f"{meta_path.name}'s {_RECORD})")
    extra = {k: v for k, v in meta.items() if k not in ("format_version", "beta", "config", _RECORD)}
    return PottsDataset(model, train, test, cfg, extra)


_REWRITE_HINT = ("delete the folder (a data-cache folder potts/<key> is generated again on next use) or write "
                 "it again with PottsDataset.save")


def _read_meta(path: Path) -> dict:
    """``meta.json`` of a saved data set: a dict with ``beta`` and ``config``, else a DataError naming it."""
    try:
        meta = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise DataError(f"{path} cannot be read ({brief(err)})") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("config"), dict) or "beta" not in meta:
        raise DataError(f"{path} lacks 'beta' or 'config'")
    return meta


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as err:
        raise DataError(f"{path} cannot be read ({brief(err)})") from None


def _read_tensors(path: Path, data: bytes) -> dict[str, torch.Tensor]:
    """The tensors in ``data`` (``path``'s bytes: J, U, h, train, test), else a DataError naming the file."""
    from safetensors.torch import load

    try:
        t = load(data)
    except Exception as err:  # safetensors' own error type for a bad header
        raise DataError(f"{path} cannot be read ({brief(err)})") from None
    missing = {"J", "U", "h", "train", "test"} - set(t)
    if missing:
        raise DataError(f"{path} lacks {', '.join(sorted(missing))}")
    return t


def make_potts_dataset(cfg: PottsConfig, *, device: torch.device | str | None = None) -> PottsDataset:
    """Draw the parameters (``coupling_seed``) and sample train and test sets (``sample_seed``)."""
    model = random_potts(cfg.L, cfg.C, beta=cfg.beta, seed=cfg.coupling_seed, sparsity=cfg.sparsity,
                         field_std=cfg.field_std)
    kw = dict(burn_in=cfg.burn_in, thin=cfg.thin, samples_per_chain=cfg.samples_per_chain, device=device)
    seeds = {s: derive_seed("potts-split", cfg.sample_seed, s) & (2**31 - 1) for s in ("train", "test")}
    train = gibbs_sample(model, cfg.n_train, seed=seeds["train"], **kw).cpu()
    test = gibbs_sample(model, cfg.n_test, seed=seeds["test"], **kw).cpu()
    loss, se = bayes_loss(model, test)
    meta = {"chain_seeds": seeds, "bayes_loss_test": loss, "bayes_loss_test_se": se,
            "uniform_loss": math.log(cfg.C)}
    return PottsDataset(model, train, test, cfg, meta)


def load_potts_dataset(cfg: PottsConfig | None = None, *, cache: bool = True,
                       device: torch.device | str | None = None) -> PottsDataset:
    """The data set of ``cfg`` from ``<data_dir>/potts/<cfg.key()>``, generated and saved on first use (a line
    on stderr names the folder). A cache folder that cannot be read, or holds another configuration's data, is
    generated again with a warning naming the file."""
    cfg = cfg or PottsConfig()
    folder = data_dir() / "potts" / cfg.key()
    if cache and ((folder / "meta.json").exists() or (folder / "data.safetensors").exists()):
        ds, problem = _cached(folder, cfg)
        if ds is not None:
            return ds
        warnings.warn(f"Potts cache {problem}; generating it again", stacklevel=2)
    elif cache:
        note(f"generating the Potts data set into {folder} (cached for later runs)")
    ds = make_potts_dataset(cfg, device=device)
    if cache:
        ds.save(folder)
    return ds


def _cached(folder: Path, cfg: PottsConfig) -> tuple[PottsDataset | None, str | None]:
    """``(the data set cached in folder, None)`` when it loads and is ``cfg``'s (configuration and sizes), else
    ``(None, what is wrong)``, naming the file."""
    try:
        ds = _load_dataset(folder)
    except DataError as err:
        return None, str(err)
    if ds.config != cfg or ds.train.shape != (cfg.n_train, cfg.L) or ds.test.shape != (cfg.n_test, cfg.L):
        return None, f"{folder / 'meta.json'} describes another configuration than the one its folder is named for"
    if _RECORD not in _read_meta(folder / "meta.json"):  # written before the record: add it, so later edits show
        ds.save(folder)
    return ds, None
