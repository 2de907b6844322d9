"""The export's OUT folder (energyformer.export.folder): only a
folder carrying the export marker counts as an earlier export, a running export's staging folder and another OUT's
leftovers are never removed, a set-aside export is deleted (not restored) while OUT exists, an empty OUT reached
through a link is filled in place with config.json last."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from energyformer.errors import UserError
from energyformer.export import folder as folder_module
from energyformer.export.folder import MARKER, export_folder, is_export


def _export(out, overwrite=False, files=("model.safetensors", "config.json")):
    with export_folder(out, overwrite) as stage:
        for name in files:
            (stage / name).write_text(json.dumps({MARKER: 1}) if name == "config.json" else "w")


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_folder_with_another_config_json_is_no_earlier_export(tmp_path):
    out = tmp_path / "hf"
    out.mkdir()
    (out / "config.json").write_text(json.dumps({"model_type": "bert"}))  # someone else's model folder
    assert not is_export(out)
    with pytest.raises(UserError, match=r"is not empty \(config.json\) and is not an earlier export"):
        _export(out, overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == ["config.json"]


def test_a_running_exports_staging_folder_is_left_alone(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        running = tmp_path / f".hf.export-{proc.pid}"
        running.mkdir()
        _export(tmp_path / "hf")
        assert running.is_dir() and is_export(tmp_path / "hf")
    finally:
        proc.kill()
        proc.wait()


def test_another_outs_leftovers_are_not_this_exports_to_clean(tmp_path):
    dead = _dead_pid()
    other = tmp_path / f".other.replaced-{dead}"
    other.mkdir()
    _export(tmp_path / "hf")
    assert other.is_dir()


def test_a_set_aside_export_is_removed_not_restored_while_out_exists(tmp_path):
    out = tmp_path / "hf"
    _export(out)
    stale = tmp_path / f".hf.replaced-{_dead_pid()}"
    stale.mkdir()
    (stale / "config.json").write_text(json.dumps({MARKER: 1, "old": True}))
    _export(out, overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]
    assert "old" not in json.loads((out / "config.json").read_text())


def test_a_stale_stage_of_this_pid_is_replaced(tmp_path):
    (tmp_path / f".hf.export-{os.getpid()}").mkdir()
    (tmp_path / f".hf.export-{os.getpid()}" / "half").write_text("x")
    _export(tmp_path / "hf")
    assert sorted(p.name for p in (tmp_path / "hf").iterdir()) == ["config.json", "model.safetensors"]


def test_an_empty_out_behind_a_link_is_filled_in_place(tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    link = tmp_path / "link"
    link.symlink_to(target)
    _export(link)
    assert link.is_symlink() and is_export(target)


def test_an_empty_out_gets_config_json_last(tmp_path, monkeypatch):
    """A kill while an empty OUT is filled leaves no folder that looks like an export."""
    out = tmp_path / "hf"
    out.mkdir()
    real, moved = shutil.move, []

    def move(src, dst):
        if moved:
            raise KeyboardInterrupt  # killed after the first file
        moved.append(src)
        return real(src, dst)

    monkeypatch.setattr(folder_module.shutil, "move", move)
    with pytest.raises(KeyboardInterrupt):
        _export(out, files=("config.json", "model.safetensors", "tokenizer.json"))
    assert not is_export(out)
