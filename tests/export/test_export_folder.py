"""The export's OUT folder: never written into when it holds other files (a run's checkpoint was overwritten,
an earlier export's tokenizer.json stayed beside a model of another vocabulary); ``--overwrite`` replaces only
an earlier export; a failed export leaves OUT as it was."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("transformers")

from energyformer.cli import main  # noqa: E402
from energyformer.experiment import load_run_config, run_experiment  # noqa: E402
from energyformer.export import hf as hf_module  # noqa: E402

TOY = ["train.steps=2", "train.eval_every=0", "train.save_every=0", "train.progress=false",
       "train.tensorboard=false", "task.seq_len=16", "task.batch_size=2", "task.eval_batch_size=2",
       "task.eval_max_batches=1", "model.dim=16", "model.heads=2", "model.n_layers=1", "model.max_seq_len=16"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    out = {}
    for name, tok in (("bpe", "bpe"), ("bytes", "bytes")):
        cfg = load_run_config("lm/llama", TOY + [f"task.tokenizer={tok}", f"out_dir={root}", f"name={name}"])
        out[name] = run_experiment(cfg).run_dir
    return out


def _snapshot(folder):
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _one_line_error(capsys, argv, *needles):
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "internal error" not in err, err
    for n in needles:
        assert n in err, err


def test_export_refuses_a_folder_with_other_files_and_leaves_it_untouched(runs, capsys):
    ckpt = sorted(runs["bpe"].glob("ckpt-*"))[-1]
    before = _snapshot(runs["bpe"])
    for target in (ckpt, runs["bpe"]):  # a checkpoint, a run directory: not earlier exports
        for extra in ([], ["--overwrite"]):
            _one_line_error(capsys, ["export", str(runs["bpe"]), str(target), *extra],
                            f"{target} is not empty", "is not an earlier export")
    assert _snapshot(runs["bpe"]) == before


def test_export_to_a_file_is_refused_in_one_line(runs, tmp_path, capsys):
    f = tmp_path / "afile"
    f.write_text("x")
    _one_line_error(capsys, ["export", str(runs["bpe"]), str(f)], f"{f} is a file", "must be a folder")
    assert f.read_text() == "x"


def test_an_earlier_export_is_replaced_only_with_overwrite_and_nothing_stale_stays(runs, tmp_path, capsys):
    out = tmp_path / "hf"
    out.mkdir()  # an empty folder is fine
    assert main(["export", str(runs["bpe"]), str(out)]) == 0
    assert (out / "tokenizer.json").is_file()
    before = _snapshot(out)
    _one_line_error(capsys, ["export", str(runs["bytes"]), str(out)], "holds an earlier export", "--overwrite")
    assert _snapshot(out) == before
    assert main(["export", str(runs["bytes"]), str(out), "--overwrite"]) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["hf"]  # no staging or replaced folder left behind
    # nothing of the BPE export stays (its tokenizer beside the bytes run's 256-token model): OUT is what a fresh
    # export of the bytes run writes, file for file
    assert main(["export", str(runs["bytes"]), str(tmp_path / "fresh")]) == 0
    assert _snapshot(out) == _snapshot(tmp_path / "fresh") and _snapshot(out) != before
    assert len(json.loads((out / "tokenizer.json").read_text())["model"]["vocab"]) == 256


def test_a_failed_export_leaves_the_earlier_one_in_place(runs, tmp_path, monkeypatch):
    out = tmp_path / "hf"
    assert main(["export", str(runs["bpe"]), str(out)]) == 0
    before = _snapshot(out)

    def broken(model, folder):
        raise hf_module.ExportError("probe logits differ")

    monkeypatch.setattr(hf_module, "check_export", broken)
    assert main(["export", str(runs["bytes"]), str(out), "--overwrite"]) == 2
    assert _snapshot(out) == before
    assert [p.name for p in tmp_path.iterdir()] == ["hf"]


def test_export_into_the_working_folder_and_under_a_file(runs, tmp_path, capsys, monkeypatch):
    """``export RUN .`` in an empty folder fills it in place (it was an internal error: '.' has no name to stage
    beside); OUT under a file is one line naming the path (it was a bare '[Errno 17] File exists')."""
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    assert main(["export", str(runs["bpe"]), "."]) == 0
    assert json.loads((here / "config.json").read_text())["energyformer_checkpoint_step"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["here"]  # the stage is gone
    _one_line_error(capsys, ["export", str(runs["bytes"]), ".", "--overwrite"], "holds the working folder")
    (tmp_path / "afile").write_text("x")
    _one_line_error(capsys, ["export", str(runs["bpe"]), str(tmp_path / "afile" / "sub")],
                    str(tmp_path / "afile"), "it is a file, not a folder")


def test_what_a_killed_export_left_beside_out_is_cleaned_up(runs, tmp_path):
    """A killed export's staging folder (and an earlier export it had set aside) carry a pid that no longer
    runs: the next export removes the stage and puts a set-aside export back where OUT went missing."""
    dead = _dead_pid()
    out = tmp_path / "hf"
    assert main(["export", str(runs["bpe"]), str(out)]) == 0
    before = _snapshot(out)
    (tmp_path / f".hf.export-{dead}").mkdir()
    (tmp_path / f".hf.export-{dead}" / "model.safetensors").write_bytes(b"half")
    out.rename(tmp_path / f".hf.replaced-{dead}")  # killed between its two renames: OUT missing
    assert main(["export", str(runs["bytes"]), str(tmp_path / "other")]) == 0  # another OUT: this one's untouched
    assert not out.exists()
    assert main(["export", str(runs["bytes"]), str(out)]) == 2  # the earlier export is back: needs --overwrite
    assert _snapshot(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf", "other"]


def test_export_names_the_checkpoint_it_read(runs, tmp_path, capsys):
    """An export (an artifact someone ships) names the step it read, and that newer checkpoints were skipped
    as invalid, as eval does; generate says so on stderr."""
    run = tmp_path / "run"
    shutil.copytree(runs["bpe"], run)
    newest = sorted(run.glob("ckpt-*"))[-1]
    older = newest.with_name("ckpt-00000001")
    shutil.copytree(newest, older)
    manifest = json.loads((older / "manifest.json").read_text())
    (older / "manifest.json").write_text(json.dumps({**manifest, "step": 1}))
    weights = next(newest.glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[:100])
    capsys.readouterr()
    assert main(["export", str(run), str(tmp_path / "hf")]) == 0
    said = capsys.readouterr().out
    assert f"(checkpoint step 1; newer checkpoint(s) {newest.name} are invalid, so step 1 was read)" in said, said
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["energyformer_checkpoint_step"] == 1
    assert main(["generate", str(run), "--max-new-tokens", "2", "--greedy"]) == 0
    err = capsys.readouterr().err
    assert "sampling from checkpoint step 1; newer checkpoint(s)" in err and err.count("\n") == 1, err


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_the_export_line_says_how_the_tokenizer_loads(runs, tmp_path, capsys, monkeypatch):
    """The CLI's closing line names AutoTokenizer where tokenizer.json was written, and says there is none
    where it was not (the old line named only the model's loader either way)."""
    capsys.readouterr()
    assert main(["export", str(runs["bpe"]), str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    custom = bool(json.loads((tmp_path / "a" / "config.json").read_text()).get("auto_map"))
    trust = ", trust_remote_code=True" if custom else ""  # (without it transformers asks on the terminal)
    assert f"AutoTokenizer.from_pretrained({str(tmp_path / 'a')!r}{trust})" in out, out
    monkeypatch.setattr(hf_module, "write_hf_tokenizer", lambda tok, folder: "a reason")
    assert main(["export", str(runs["bpe"]), str(tmp_path / "b")]) == 0
    said = capsys.readouterr()
    assert "no tokenizer.json" in said.out and "AutoTokenizer.from" not in said.out, said.out
    assert "no tokenizer written" in said.err and "a reason" in said.err, said.err


def test_the_export_line_of_a_custom_code_folder_trusts_its_code_for_the_tokenizer_too(tmp_path):
    """A custom-code folder (``auto_map``): ``AutoTokenizer.from_pretrained(OUT)`` as the line said it asks
    "Do you wish to run the custom code? [y/N]" and waits (an outside probe); the line now gives
    trust_remote_code=True there, and not for a native folder."""
    for name, config in (("custom", {"auto_map": {"AutoConfig": "x"}}), ("native", {})):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(config))
        (tmp_path / name / "tokenizer.json").write_text("{}")
        line = hf_module.export_message("runs/r", tmp_path / name, "last", "hf")
        said = f"AutoTokenizer.from_pretrained({str(tmp_path / name)!r}, trust_remote_code=True)"
        assert (said in line) == (name == "custom"), line
