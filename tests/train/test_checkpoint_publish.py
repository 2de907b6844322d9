"""A checkpoint folder appears by one rename of its complete ``.tmp`` folder (mutation probe AI)."""

from __future__ import annotations

import os

import torch

from energyformer.train import checkpoint as ck
from energyformer.train import save_checkpoint


def test_the_checkpoint_is_published_by_renaming_the_complete_tmp_folder(tmp_path, monkeypatch):
    # Pins the atomic publish: writing the files into ckpt-<step>/ by a copy (or in place) leaves a torn
    # checkpoint under its final name when killed; every test passed with shutil.copytree(tmp, final).
    renames = []
    real = os.replace

    def spy(src, dst):
        renames.append((os.fspath(src), os.fspath(dst)))
        return real(src, dst)

    monkeypatch.setattr(ck.os, "replace", spy)
    final = save_checkpoint(tmp_path, 3, torch.nn.Linear(2, 2), keep=0)
    assert (os.fspath(tmp_path / "ckpt-00000003.tmp"), os.fspath(final)) in renames
    assert not (tmp_path / "ckpt-00000003.tmp").exists()


def test_pruning_never_deletes_the_checkpoint_just_written(tmp_path):
    # Pins ``if old != final`` in the pruning: a save of an older step than the newest on disk (resuming past a
    # corrupt checkpoint) sorts before the newest, so [:-keep] holds it; it must survive its own save.
    m = torch.nn.Linear(2, 2)
    save_checkpoint(tmp_path, 100, m, keep=0)
    save_checkpoint(tmp_path, 200, m, keep=0)
    final = save_checkpoint(tmp_path, 150, m, keep=1)
    assert final.is_dir()
    ck.verify_checkpoint(final)
