"""Checkpoint format: round trip, tied weights, manifest verification, atomic layout, pruning."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import pytest
import torch
from train_toys import TiedLM, ToyMLP

from energyformer.train import (
    CheckpointError,
    LRSchedule,
    TrainConfig,
    latest_checkpoint,
    latest_valid_checkpoint,
    list_checkpoints,
    load_checkpoint,
    load_model_weights,
    save_checkpoint,
    unwrap_model,
    verify_checkpoint,
)


def _trained(model, steps=3):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = LRSchedule(opt, 1e-2, 10, TrainConfig(schedule={"warmup": 0.2}).schedule)
    for _ in range(steps):
        out = model(torch.randint(0, 11, (4, 5))) if isinstance(model, TiedLM) else model(torch.randn(4, 8))
        out.pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        sched.step()
    return opt, sched


def _assert_same_state(a, b):
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _assert_same_state(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _assert_same_state(x, y)
    else:
        assert a == b


def test_round_trip_weights_bit_identical_and_optimizer_state(tmp_path):
    torch.manual_seed(0)
    model = TiedLM()
    opt, sched = _trained(model)
    extra = {"data": {"pos": 7, "gen": torch.Generator().manual_seed(3).get_state()}}
    path = save_checkpoint(tmp_path, 3, model, opt, sched, extra=extra)
    assert path.name == "ckpt-00000003" and latest_checkpoint(tmp_path) == path
    assert sorted(os.listdir(path)) == ["manifest.json", "model.safetensors", "state.pt"]

    torch.manual_seed(1)
    fresh = TiedLM()
    opt2 = torch.optim.AdamW(fresh.parameters(), lr=5.0)
    sched2 = LRSchedule(opt2, 1e-2, 10, TrainConfig(schedule={"warmup": 0.2}).schedule)
    state = load_checkpoint(path, fresh, opt2, sched2)

    for (n1, t1), (n2, t2) in zip(model.state_dict().items(), fresh.state_dict().items()):
        assert n1 == n2 and torch.equal(t1, t2), n1
    assert fresh.head.weight is fresh.emb.weight  # tie survives loading
    _assert_same_state(opt.state_dict(), opt2.state_dict())
    assert sched2.last_step == 3 and opt2.param_groups[0]["lr"] == opt.param_groups[0]["lr"]
    assert state["step"] == 3 and state["data"]["pos"] == 7
    assert torch.equal(state["data"]["gen"], extra["data"]["gen"])


def test_shared_tensor_stored_once(tmp_path):
    from safetensors import safe_open

    model = TiedLM()
    path = save_checkpoint(tmp_path, 1, model)
    with safe_open(str(path / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
    assert len({"emb.weight", "head.weight"} & keys) == 1


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_unwrap_compiled_module_saves_plain_names(tmp_path):
    model = ToyMLP()
    compiled = torch.compile(model)  # lazy: nothing is compiled until called
    assert unwrap_model(compiled) is model
    path = save_checkpoint(tmp_path, 1, compiled)
    other = ToyMLP()
    load_model_weights(other, path)
    for a, b in zip(model.parameters(), other.parameters()):
        assert torch.equal(a, b)


def test_manifest_records_size_and_sha(tmp_path):
    path = save_checkpoint(tmp_path, 5, ToyMLP())
    manifest = verify_checkpoint(path)
    assert manifest["step"] == 5
    for name in ("model.safetensors", "state.pt"):
        assert manifest["files"][name]["size"] == (path / name).stat().st_size
        assert len(manifest["files"][name]["sha256"]) == 64


def test_truncated_checkpoint_detected_and_previous_intact(tmp_path):
    model = ToyMLP()
    good = save_checkpoint(tmp_path, 10, model, keep=0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    bad = save_checkpoint(tmp_path, 20, model, keep=0)
    f = bad / "model.safetensors"
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2])

    with pytest.raises(CheckpointError) as e:
        load_checkpoint(bad, ToyMLP())
    msg = str(e.value)
    assert "ckpt-00000020" in msg and "model.safetensors" in msg and "truncated" in msg
    assert f"{len(data) // 2} bytes" in msg and f"{len(data)} bytes" in msg

    verify_checkpoint(good)  # untouched
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        found, skipped = latest_valid_checkpoint(tmp_path)
    assert found == good and [p for p, _ in skipped] == [bad]
    assert any("ckpt-00000020" in str(x.message) for x in w)
    # loading a run directory takes the newest valid checkpoint
    m2 = ToyMLP()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert load_model_weights(m2, tmp_path) == good / "model.safetensors"


def test_corrupt_bytes_same_size_detected(tmp_path):
    path = save_checkpoint(tmp_path, 1, ToyMLP())
    f = path / "state.pt"
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0xFF
    f.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"state.pt is corrupt: sha256"):
        verify_checkpoint(path)


def test_missing_manifest_means_incomplete(tmp_path):
    path = save_checkpoint(tmp_path, 1, ToyMLP())
    (path / "manifest.json").unlink()
    with pytest.raises(CheckpointError, match="manifest.json is missing"):
        load_checkpoint(path, ToyMLP())


def test_interrupted_save_leaves_tmp_ignored(tmp_path):
    good = save_checkpoint(tmp_path, 1, ToyMLP())
    (tmp_path / "ckpt-00000002.tmp").mkdir()  # a save killed before its rename
    (tmp_path / "ckpt-00000002.tmp" / "model.safetensors").write_bytes(b"partial")
    assert list_checkpoints(tmp_path) == [good]
    assert latest_checkpoint(tmp_path) == good
    # the next save of that step replaces the stale temporary directory
    p2 = save_checkpoint(tmp_path, 2, ToyMLP())
    verify_checkpoint(p2)
    assert not (tmp_path / "ckpt-00000002.tmp").exists()
    assert (tmp_path / "latest").read_text().strip() == "ckpt-00000002"


def test_stale_tmp_dirs_are_removed_by_the_next_save_and_on_resume(tmp_path):
    """A save killed before its rename leaves ckpt-<step>.tmp/; it used to stay until that very step was
    saved again. Now the next successful save removes every such folder, and so does a resume; a
    checkpoint, one set aside as .corrupt, and other names are never touched."""
    from train_toys import build

    from energyformer.train.checkpoint import remove_stale_tmp

    good = save_checkpoint(tmp_path, 1, ToyMLP())
    for name in ("ckpt-00000007.tmp", "ckpt-00000003.tmp"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "model.safetensors").write_bytes(b"partial")
    keep = ["ckpt-00000005.corrupt", "ckpt-00000006.tmp.notes", "my.tmp", "ckpt-x.tmp"]
    for name in keep:
        (tmp_path / name).mkdir()
    (tmp_path / "ckpt-00000009.tmp").write_text("a file, not a save folder")
    p2 = save_checkpoint(tmp_path, 2, ToyMLP())
    assert not (tmp_path / "ckpt-00000007.tmp").exists() and not (tmp_path / "ckpt-00000003.tmp").exists()
    assert all((tmp_path / name).is_dir() for name in keep) and (tmp_path / "ckpt-00000009.tmp").is_file()
    verify_checkpoint(good)
    verify_checkpoint(p2)
    assert remove_stale_tmp(tmp_path / "absent") == []

    # on resume (before any new save): the trainer's run directory
    run = tmp_path / "run"
    build(run, steps=2, save_every=2).fit()
    (run / "ckpt-00000004.tmp").mkdir()
    (run / "ckpt-00000004.tmp" / "state.pt").write_bytes(b"partial")
    build(run, steps=2, save_every=2).fit(resume=True)  # at the end already: resumes, saves nothing
    assert not (run / "ckpt-00000004.tmp").exists()
    assert [p.name for p in list_checkpoints(run)] == ["ckpt-00000002"]


def test_a_pruning_or_atomic_write_killed_half_way_leaves_nothing_that_stays(tmp_path, monkeypatch):
    """Pruning used to delete a checkpoint in place: a kill mid-delete left ckpt-<step>/ with some of its files, still
    named like a checkpoint. Now it is renamed to ckpt-<step>.pruned/ first; that folder and a killed atomic write's
    temporary file (.metrics.jsonl.<pid>.tmp, its pid gone) are removed by the next save, a live pid's file is kept."""
    import shutil as shutil_module
    import subprocess
    import sys

    from energyformer.train import checkpoint as ckpt_module

    save_checkpoint(tmp_path, 1, ToyMLP())
    real_rmtree = shutil_module.rmtree
    removed = []

    def killed_rmtree(path, *a, **k):  # the kill while pruning: the folder stays, half deleted
        if not Path(path).name.endswith(".pruned"):
            return real_rmtree(path, *a, **k)
        removed.append(Path(path).name)
        next(Path(path).glob("*.safetensors")).unlink()
        raise KeyboardInterrupt

    monkeypatch.setattr(ckpt_module.shutil, "rmtree", killed_rmtree)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(tmp_path, 2, ToyMLP(), keep=1)
    monkeypatch.setattr(ckpt_module.shutil, "rmtree", real_rmtree)
    assert removed == ["ckpt-00000001.pruned"] and [p.name for p in list_checkpoints(tmp_path)] == ["ckpt-00000002"]
    assert latest_valid_checkpoint(tmp_path)[0] == tmp_path / "ckpt-00000002"
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    (tmp_path / f".metrics.jsonl.{proc.pid}.tmp").write_text("{}")
    (tmp_path / f".notes.txt.{os.getpid()}.tmp").write_text("a write in flight")
    save_checkpoint(tmp_path, 3, ToyMLP(), keep=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == [f".notes.txt.{os.getpid()}.tmp", "ckpt-00000003", "latest"]


def test_prune_keeps_newest(tmp_path):
    m = ToyMLP()
    for s in (1, 2, 3, 4):
        save_checkpoint(tmp_path, s, m, keep=2)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["ckpt-00000003", "ckpt-00000004"]
    save_checkpoint(tmp_path, 5, m, keep=0)
    assert len(list_checkpoints(tmp_path)) == 3


def test_state_with_numpy_rejected_when_saving(tmp_path):
    np = pytest.importorskip("numpy")
    with pytest.raises(TypeError, match=r"state\['data'\]\['arr'\] is a numpy.ndarray"):
        save_checkpoint(tmp_path, 1, ToyMLP(), extra={"data": {"arr": np.zeros(3)}})
    assert list_checkpoints(tmp_path) == []


def test_wrong_model_gives_checkpoint_error(tmp_path):
    path = save_checkpoint(tmp_path, 1, ToyMLP())
    with pytest.raises(CheckpointError, match="weights do not fit TiedLM"):
        load_model_weights(TiedLM(), path)


def test_manifest_is_json_with_files(tmp_path):
    path = save_checkpoint(tmp_path, 1, ToyMLP())
    manifest = json.loads((path / "manifest.json").read_text())
    assert set(manifest["files"]) == {"model.safetensors", "state.pt"}


def test_a_replacement_killed_between_its_renames_is_undone(tmp_path):
    """Saving a step that already has a checkpoint moves the old one aside (ckpt-<step>.replaced-<pid>), renames the
    new one into place and deletes the old one. Killed between the renames, the step had no checkpoint and the
    cleanup of ckpt-<step>.tmp/ then deleted the new one too: now the old one is put back (resume and the next save
    both run the cleanup); killed after them, the copy left aside is deleted. Other names are never touched."""
    import shutil

    from energyformer.train.checkpoint import latest_valid_checkpoint, remove_stale_tmp

    old = save_checkpoint(tmp_path, 3, ToyMLP())
    shutil.copytree(old, tmp_path / "ckpt-00000003.tmp")          # the new one, complete, not yet renamed
    old.rename(tmp_path / "ckpt-00000003.replaced-4242")           # the old one, moved aside
    (tmp_path / "ckpt-00000004.replaced-1").mkdir()                # a leftover whose step was never re-saved: put back
    keep = tmp_path / "ckpt-00000002.replaced-x"
    keep.mkdir()
    assert remove_stale_tmp(tmp_path) == [tmp_path / "ckpt-00000003.tmp"]
    verify_checkpoint(tmp_path / "ckpt-00000003")
    assert not (tmp_path / "ckpt-00000003.replaced-4242").exists() and keep.is_dir()
    assert (tmp_path / "ckpt-00000004").is_dir()

    done = tmp_path / "done"                                       # killed after both renames
    new = save_checkpoint(done, 5, ToyMLP())
    shutil.copytree(new, done / "ckpt-00000005.replaced-7")
    remove_stale_tmp(done)
    assert not (done / "ckpt-00000005.replaced-7").exists()
    assert latest_valid_checkpoint(done)[0] == new


def test_an_unreadable_file_with_a_matching_hash_is_named_in_one_short_line(tmp_path):
    """torch.load's weights-only refusal is a paragraph of advice (it was embedded whole, over five lines, in the
    resume warning); the error names the file and the unpickler's own line."""
    import hashlib

    from energyformer.train.checkpoint import MANIFEST_FILE, STATE_FILE

    ckpt = save_checkpoint(tmp_path, 1, ToyMLP())
    (ckpt / STATE_FILE).write_bytes(b"garbage")
    manifest = json.loads((ckpt / MANIFEST_FILE).read_text())
    manifest["files"][STATE_FILE] = {"size": 7, "sha256": hashlib.sha256(b"garbage").hexdigest()}
    (ckpt / MANIFEST_FILE).write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError) as info:
        verify_checkpoint(ckpt)
    msg = str(info.value)
    assert f"cannot read {STATE_FILE} (UnpicklingError: " in msg and "\n" not in msg and len(msg) < 400, msg


def test_a_checkpoint_published_before_the_pointer_moved_is_the_latest(tmp_path):
    """A kill between a checkpoint's rename and the ``latest`` pointer's update leaves the pointer on the older one:
    the newer complete checkpoint is the latest (probe Z: with the comparison flipped, a resume silently restarted
    from the older checkpoint and trained those steps again)."""
    torch.manual_seed(0)
    model = ToyMLP()
    opt, sched = _trained(model)
    first = save_checkpoint(tmp_path, 1, model, opt, sched)
    second = save_checkpoint(tmp_path, 2, model, opt, sched)
    (tmp_path / "latest").write_text(first.name)   # the pointer as the kill left it
    assert latest_checkpoint(tmp_path) == second
    assert latest_valid_checkpoint(tmp_path)[0] == second


@pytest.mark.parametrize("damage", ["no size", "string size", "renamed", "latest not utf-8"])
def test_a_damaged_manifest_pointer_or_name_falls_back_to_the_newest_valid_checkpoint(tmp_path, damage):
    """A manifest entry without an integer size raised KeyError / TypeError past the checks (``internal error``,
    and no fall-back to the valid older checkpoint); a non-UTF-8 ``latest`` raised UnicodeDecodeError; a folder
    renamed to a later step was trusted (resume retrained from its real step and overwrote the genuine checkpoint
    of that step). Each is now a CheckpointError naming the checkpoint and what is wrong, and the newest valid
    checkpoint is used (probe AC)."""
    model = ToyMLP()
    good = save_checkpoint(tmp_path, 4, model, keep=0)
    bad = save_checkpoint(tmp_path, 6, model, keep=0)
    manifest = json.loads((bad / "manifest.json").read_text())
    if damage == "renamed":
        bad = bad.rename(tmp_path / "ckpt-00000009")
        with pytest.raises(CheckpointError, match=r"ckpt-00000009: its name says step 9, its manifest.json says "
                                                  r"step 6"):
            verify_checkpoint(bad)
    elif damage == "latest not utf-8":
        (tmp_path / "latest").write_bytes(b"\xff\xfe\x00bad\n")
        verify_checkpoint(bad)
        assert latest_checkpoint(tmp_path) == bad  # the highest step
        return
    else:
        entry = manifest["files"]["model.safetensors"]
        if damage == "no size":
            del entry["size"]
        else:
            entry["size"] = str(entry["size"])
        (bad / "manifest.json").write_text(json.dumps(manifest))
        with pytest.raises(CheckpointError, match=r"ckpt-00000006: manifest.json is unreadable \(entry model"):
            verify_checkpoint(bad)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        found, skipped = latest_valid_checkpoint(tmp_path)
    assert found == good and [p for p, _ in skipped] == [bad]
