"""Every error a user can cause ends in one line and a non-zero exit (issue 9, classes 3-6)."""

from __future__ import annotations

import json
import random
import sys
import warnings
from pathlib import Path

import pytest
import torch

from energyformer.cli import main
from energyformer.experiment import RunConfig
from energyformer.utils.config_help import config_fields

sys.path.insert(0, str(Path(__file__).resolve().parent / "fixtures"))
from cli_tiny import TINY, train_tiny  # noqa: E402
from cli_tiny import sets as _sets  # noqa: E402

def _one_line_error(capsys, code, argv) -> str:
    got = main(argv)
    err = capsys.readouterr().err.strip()
    assert got == code, (argv, got, err)
    assert err.startswith("energyformer: error: ") and "\n" not in err and "Traceback" not in err, err
    return err


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return train_tiny(tmp_path_factory.mktemp("runs"))


def test_text_file_inputs(trained, tmp_path, capsys):
    cases = {"empty.txt": b"", "binary.bin": b"\x00\x01\x02abc", "latin1.txt": b"caf\xe9\n", "one.txt": b"a"}
    for name, content in cases.items():
        (tmp_path / name).write_bytes(content)
    assert "is empty" in _one_line_error(capsys, 2, ["eval", str(trained), "--text-file", str(tmp_path / "empty.txt")])
    assert "looks binary" in _one_line_error(capsys, 2, ["eval", str(trained), "--text-file", str(tmp_path / "binary.bin")])
    assert "not valid UTF-8: line 1, column 4" in _one_line_error(
        capsys, 2, ["eval", str(trained), "--text-file", str(tmp_path / "latin1.txt")])
    assert "too short to evaluate" in _one_line_error(
        capsys, 2, ["eval", str(trained), "--text-file", str(tmp_path / "one.txt")])
    assert "is a directory" in _one_line_error(capsys, 2, ["eval", str(trained), "--text-file", str(tmp_path)])
    assert "not found" in _one_line_error(capsys, 2, ["eval", str(trained), "--text-file", str(tmp_path / "no.txt")])
    # a split beside the file evaluated instead of one (it was silently ignored)
    (tmp_path / "ok.txt").write_text("some text to score " * 20)
    assert "--split test: --text-file is evaluated instead of a split; give one or the other" in _one_line_error(
        capsys, 2, ["eval", str(trained), "--split", "test", "--text-file", str(tmp_path / "ok.txt")])


def test_run_directories_and_checkpoints(trained, tmp_path, capsys):
    empty = tmp_path / "norun"
    empty.mkdir()
    assert "config.yaml not found" in _one_line_error(capsys, 2, ["eval", str(empty)])
    (empty / "config.yaml").write_text((trained / "config.yaml").read_text())
    assert "no valid checkpoint in run directory" in _one_line_error(capsys, 2, ["eval", str(empty)])
    # resuming with a changed model shape
    err = _one_line_error(capsys, 2, ["train", "lm/llama", "--resume", *_sets(
        TINY + ["train.steps=3", "name=tiny", f"out_dir={trained.parent}", "model.dim=32"])])
    assert "model.dim:" in err and "-> 32" in err and "continues only under its own model" in err
    # an output path under a file
    (tmp_path / "afile").write_text("x")
    err = _one_line_error(capsys, 1, ["train", "lm/llama", *_sets(TINY + ["train.steps=1", f"out_dir={tmp_path / 'afile'}"])])
    assert "not a directory" in err or "exists" in err
    # the run directory itself a file: named with the keys that choose it (it was "[Errno 17] File exists")
    err = _one_line_error(capsys, 2, ["train", "lm/llama", *_sets(TINY + ["train.steps=1", f"out_dir={tmp_path}",
                                                                           "name=afile"])])
    assert f"the run directory {tmp_path / 'afile'} (out_dir/name) is a file" in err


def test_eval_says_its_test_time_settings_and_names_them_when_memory_runs_out(trained, capsys, monkeypatch):
    """`eval --iterations 100000` ran out of memory with advice naming model.dim and batch sizes, not the flag; and
    an evaluation at another depth printed the header of a default one"""
    from energyformer.tasks.lm import LMTask

    assert main(["eval", str(trained), "--iterations", "2"]) == 0
    out = capsys.readouterr()
    assert " split with --iterations 2: " in out.out
    assert ("--iterations 2: this 'transformer' model was trained with 1 iteration (not recurrent): its whole layer "
            "stack runs 2 times") in out.err

    def oom(*a, **k):
        raise RuntimeError("CUDA out of memory. Tried to allocate 20.00 GiB")

    monkeypatch.setattr(LMTask, "eval_from_args", oom)
    monkeypatch.setattr(warnings, "filters", [("ignore", None, UserWarning, None, 0), *warnings.filters])
    err = _one_line_error(capsys, 1, ["eval", str(trained), "--iterations", "100000"])
    assert "not enough memory for this evaluation with --iterations 100000 (memory grows with them" in err
    assert "model.dim" not in _one_line_error(capsys, 1, ["eval", str(trained), "--iterations", "100000"])


def test_eval_names_the_checkpoint_and_the_fallback(trained, tmp_path, capsys):
    text = tmp_path / "t.txt"
    text.write_text("To be, or not to be, that is the question.\n" * 4)
    assert main(["eval", str(trained), "--text-file", str(text)]) == 0
    assert "(checkpoint step 2)" in capsys.readouterr().out
    state = trained / "ckpt-00000002" / "state.pt"
    good = state.read_bytes()
    state.write_bytes(good[:-10])  # truncate the newest checkpoint
    try:
        assert main(["eval", str(trained), "--text-file", str(text)]) == 0
        out = capsys.readouterr().out
        assert "checkpoint step 1; newer checkpoint(s) ckpt-00000002 are invalid" in out
    finally:
        state.write_bytes(good)


def test_non_finite_eval_exits_non_zero(trained, tmp_path, capsys):
    import shutil

    from safetensors.torch import load_file, save_file

    from energyformer.train import checkpoint as C

    run = tmp_path / "nan"
    shutil.copytree(trained, run)
    for ck in run.glob("ckpt-*"):
        w = load_file(str(ck / C.MODEL_FILE))
        w = {k: torch.full_like(v, float("nan")) for k, v in w.items()}
        save_file(w, str(ck / C.MODEL_FILE), metadata={"format": "pt"})
        man = json.loads((ck / C.MANIFEST_FILE).read_text())
        man["files"][C.MODEL_FILE] = {"size": (ck / C.MODEL_FILE).stat().st_size, "sha256": C._sha256(ck / C.MODEL_FILE)}
        (ck / C.MANIFEST_FILE).write_text(json.dumps(man))
    # a poisoned checkpoint is not valid: nothing to evaluate, said in one line
    assert "non-finite" in _one_line_error(capsys, 2, ["eval", str(run)])


def test_devices_sizes_and_generate_arguments(trained, capsys):
    assert "train.device" in _one_line_error(capsys, 2, ["config", "lm/llama", "--set", "train.device=tpu"])
    if not torch.cuda.is_available():
        assert "CUDA is not available" in _one_line_error(capsys, 2, ["eval", str(trained), "--device", "cuda"])
    err = _one_line_error(capsys, 1, ["train", "lm/llama", *_sets(TINY + ["model.dim=4194304", "model.heads=1",
                                                                            "name=huge", "train.steps=1"])])
    assert "not enough memory" in err
    for args, msg in ((["--temperature", "-1"], "--temperature -1.0"), (["--temperature", "nan"], "--temperature nan"),
                      (["--top-k", "0"], "--top-k 0"), (["--prompt", "\udcff"], "--prompt is not valid text")):
        assert msg in _one_line_error(capsys, 2, ["generate", str(trained), "--max-new-tokens", "2", *args])
    assert main(["generate", str(trained), "--max-new-tokens", "2", "--temperature", "0"]) == 0
    # a sampling option beside --greedy is refused (it was dropped without a word)
    for args, msg in ((["--temperature", "0.7"], "--temperature 0.7: --greedy takes no sampling options"),
                      (["--temperature", "0.7", "--top-k", "5"], "--temperature 0.7 --top-k 5: --greedy takes")):
        assert msg in _one_line_error(capsys, 2, ["generate", str(trained), "--max-new-tokens", "2", "--greedy", *args])
    assert main(["generate", str(trained), "--max-new-tokens", "2", "--greedy"]) == 0
    # --steps below what the model takes: one message, whatever the value (it said ">= 0" for -1, then ">= 1")
    for steps in ("-1", "0"):
        err = _one_line_error(capsys, 2, ["eval", str(trained), "--steps", steps])
        assert f"--steps {steps}: a 'transformer' model has no energy descent steps" in err, err


def test_eval_and_generate_check_device(trained, capsys, monkeypatch):
    """``--device foo`` / ``gpu`` / ``meta`` once ran silently on the CPU; train.device's own check now refuses
    them, and a missing GPU is reported against --device (it named train.device)."""
    allowed = "allowed values are 'auto', 'cpu', 'cuda', 'cuda:N' (N an integer), 'mps'"
    for cmd in ("eval", "generate"):
        for spec in ("foo", "gpu", "meta", "cuda:x", ""):
            err = _one_line_error(capsys, 2, [cmd, str(trained), "--device", spec])
            assert err == f"energyformer: error: --device {spec!r}: {allowed}", err
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
        err = _one_line_error(capsys, 2, [cmd, str(trained), "--device", "cuda"])
        assert err == "energyformer: error: --device 'cuda': CUDA is not available here; use 'auto' or 'cpu'", err
        monkeypatch.undo()
    assert main(["generate", str(trained), "--max-new-tokens", "2", "--device", "cpu"]) == 0
    assert "auto | cpu | cuda | cuda:N | mps" in " ".join(_help(capsys, ["eval", "--help"]).split())


def _help(capsys, argv) -> str:
    with pytest.raises(SystemExit):
        main(argv)
    return capsys.readouterr().out


def test_config_classes(tmp_path, capsys):
    assert "unknown key" in _one_line_error(capsys, 2, ["config", "lm/llama", "--set", "trian.lr=1"])
    assert "finite" in _one_line_error(capsys, 2, ["config", "lm/llama", "--set", "train.lr=inf"])
    assert "no path separators" in _one_line_error(capsys, 2, ["config", "lm/llama", "--set", "name=../x"])
    assert "no path separators" in _one_line_error(capsys, 2, ["config", "lm/llama", "--set", "name="])
    assert "ignores it" in _one_line_error(capsys, 2, ["config", "lm/llama", "--set", "task.text_files=[a.txt]"])
    assert "exceeds model.max_seq_len" in _one_line_error(capsys, 2, [
        "config", "lm/gpt", "--set", "task.seq_len=4096"])
    # without a position table too (RoPE / ALiBi): generate would read a shorter context than training used
    assert "the context generate reads" in _one_line_error(capsys, 2, [
        "config", "lm/cem_full", "--set", "task.seq_len=32", "--set", "model.max_seq_len=16"])
    dup = tmp_path / "dup.yaml"
    dup.write_text("name: a\nname: b\n")
    assert "dup.yaml:2: duplicate key 'name'" in _one_line_error(capsys, 2, ["config", str(dup)])
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing\n")
    assert "is empty" in _one_line_error(capsys, 2, ["config", str(empty)])
    assert "is a directory" in _one_line_error(capsys, 2, ["config", str(tmp_path)])
    assert "--steps 0" in _one_line_error(capsys, 2, ["demo", "--steps", "0"])


def _bad_values(type_name: str, rng: random.Random) -> list:
    common = ["[1, 2", "{a: 1}", "", "nan", "inf", "-inf", "1e400", "kinds_that_do_not_exist"]
    if "int" in type_name:
        common += ["2.5", "-7", "999999999999999999999", "abc"]
    if "float" in type_name:
        common += ["-1e30", "abc", "[]"]
    if "bool" in type_name:
        common += ["maybe", "2"]
    return rng.sample(common, k=min(4, len(common)))


def test_config_fuzz_gives_one_line_errors_and_no_tracebacks(capsys, monkeypatch):
    """Wrong types, out-of-range numbers, unknown kinds, NaN/inf, huge values, empty strings and
    unknown keys, for every key of every registered kind (seeded sample). ``main`` parses with one
    parser built once (building argparse's tree was 90 % of each of the ~25k calls)."""
    import functools

    from energyformer import cli

    monkeypatch.setattr(cli, "build_parser", functools.cache(cli.build_parser))
    rng = random.Random(0)
    rows = config_fields(RunConfig)
    for key, type_name, _, _ in rows:
        select = []
        while "[kind=" in key:  # choose the kinds first: task[kind=gp].n_train -> task.kind=gp, task.n_train
            head, rest = key.split("[kind=", 1)
            kind, tail = rest.split("]", 1)
            select.append(f"{head}.kind={kind}")
            key = head + tail
        for value in _bad_values(type_name, rng):
            sets = select + [f"{key}={value}"]
            code = main(["config", *_sets(sets)])
            captured = capsys.readouterr()
            assert "Traceback" not in captured.err and captured.err.count("\n") <= 1, (sets, captured.err)
            if code != 0:
                assert code == 2 and captured.err.startswith("energyformer: error: "), (sets, code, captured.err)
    for key, _, _, _ in rng.sample(rows, 10):
        code = main(["config", "--set", f"{key.split('[')[0]}.no_such_key=1"])
        err = capsys.readouterr().err
        assert code == 2 and err.startswith("energyformer: error: ") and err.count("\n") == 1, err


@pytest.mark.slow
def test_ctrl_c_prints_the_resume_command(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(
        [str(Path(__file__).resolve().parents[1] / "src"), os.environ.get("PYTHONPATH", "")]))
    sets = _sets(TINY + ["train.steps=100000", "train.save_every=20", "name=intr", f"out_dir={tmp_path}"])
    proc = subprocess.Popen([sys.executable, "-m", "energyformer.cli", "train", "lm/llama", *sets], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            # a shell without job control starts background jobs with SIGINT ignored, and
                            # Python keeps an inherited SIG_IGN: give the child the default disposition
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    # stdout is not a pipe: an unread pipe fills up with the training log and blocks the child's writes
    deadline = time.time() + 120
    while not list((tmp_path / "intr").glob("ckpt-*[0-9]")):
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            pytest.fail(f"no checkpoint appeared (exit {proc.poll()}): {proc.communicate()[1][-2000:]}")
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    lines = [x for x in err.strip().splitlines() if x.strip()]
    assert len(lines) <= 2 and "Traceback" not in err, err
    assert "energyformer train lm/llama --resume --set" in lines[-1] and "name=intr" in lines[-1], err


def test_own_text_files_are_kept_absolute_and_a_changed_text_refuses_to_resume(tmp_path, capsys, monkeypatch):
    """task.text_files given relative: the run's config keeps them absolute, so eval from another directory reads
    the same file (it read whatever in/corp.txt the current directory held, or said not found); resuming after
    the text changed is a one-line error naming the checkpoint (it was an internal ValueError when the token
    count changed, and silent training on other data when it did not)."""
    (tmp_path / "in").mkdir()
    corp = tmp_path / "in" / "corp.txt"
    corp.write_text("the quick brown fox jumps over the lazy dog. " * 40)
    monkeypatch.chdir(tmp_path)
    sets = TINY + ["task.corpus=files", "task.text_files=[in/corp.txt]", "task.tokenizer=bytes", "name=own",
                   f"out_dir={tmp_path / 'runs'}", "train.save_every=2"]
    assert main(["train", "lm/llama", *_sets(sets + ["train.steps=2"])]) == 0
    capsys.readouterr()
    cfg = (tmp_path / "runs" / "own" / "config.yaml").read_text()
    assert str(corp) in cfg and "- in/corp.txt" not in cfg
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "in").mkdir(parents=True)
    (elsewhere / "in" / "corp.txt").write_text("another text entirely, " * 50)
    monkeypatch.chdir(elsewhere)
    assert main(["eval", str(tmp_path / "runs" / "own")]) == 0
    here = capsys.readouterr().out
    monkeypatch.chdir(tmp_path)
    assert main(["eval", str(tmp_path / "runs" / "own")]) == 0
    assert capsys.readouterr().out == here
    corp.write_text(corp.read_text().upper())  # the same length, other tokens
    err = _one_line_error(capsys, 2, ["train", "lm/llama", "--resume", *_sets(sets + ["train.steps=4"])])
    assert "cannot resume from" in err and "the training data changed since the state was saved" in err


def test_every_tasks_file_options_are_its_eval_options():
    """``Task.eval_file_options`` (refused beside ``eval --split``) name options its own eval parser takes."""
    import argparse

    import energyformer.tasks  # noqa: F401  (registers the tasks)
    from energyformer.tasks.base import TASKS

    named = 0
    for name in TASKS.names():
        task = TASKS.get(name).builder
        p = argparse.ArgumentParser()
        task.add_eval_args(p)
        dests = {a.dest for a in p._actions}
        assert set(task.eval_file_options) <= dests, name
        named += len(task.eval_file_options)
    assert named >= 2  # --text-file (lm), --puzzles (sudoku)


def test_a_closed_pipe_stops_the_output_quietly():
    """`energyformer list keys | head -1` printed 'energyformer: error: Broken pipe' with exit status 1"""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "energyformer.cli", "list", "keys"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.readline()
    proc.stdout.close()  # the reader goes away, as head does
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141 and err == "", err


def test_an_empty_out_dir_is_refused():
    """`--set out_dir=` wrote the run into the current folder"""
    from energyformer.experiment import load_run_config
    from energyformer.utils.validate import ConfigError

    with pytest.raises(ConfigError, match="out_dir = '': string should have at least 1 character"):
        load_run_config("lm/llama", ["out_dir="])


def test_a_mistyped_config_name_gets_the_closest_name_not_every_name(capsys):
    """it listed all ~80 config names on one line, with no suggestion"""
    err = _one_line_error(capsys, 2, ["config", "gp/cem_t99"])
    assert "did you mean 'gp/cem_t8'?" in err and "gp/: gp/cem_t1, " in err and "lm/llama" not in err
    err = _one_line_error(capsys, 2, ["config", "lm/lama"])
    assert "did you mean 'lm/llama'?" in err and "`energyformer list configs` lists all" in err and len(err) < 200


def test_a_bad_value_in_a_runs_config_names_the_file(trained, tmp_path, capsys):
    import shutil

    run = tmp_path / "bad"
    shutil.copytree(trained, run)
    cfg = run / "config.yaml"
    cfg.write_text(cfg.read_text().replace("  dim: 16\n", "  dim: -5\n", 1))
    err = _one_line_error(capsys, 2, ["eval", str(run)])
    assert err.startswith(f"energyformer: error: {cfg}: model.dim = -5"), err


def test_generate_and_eval_edges(trained, tmp_path, capsys):
    """Found by an outside probe of the LM commands: a seed past 64 bits and ``--split test`` on a files corpus were
    internal errors; an empty prompt started from token id 0 and printed it (a NUL byte, '!', '<unk>'); a typed
    '<|endoftext|>' became the special token and vanished; ``--temperature 0 --top-k 3`` dropped the top-k without a
    word; a second ``--text-file`` replaced the first."""
    gen = ["generate", str(trained), "--max-new-tokens", "0"]
    for seed in ("18446744073709551616", "-1", "x"):
        assert "--seed" in _one_line_error(capsys, 2, [*gen, "--seed", seed])
    assert main([*gen, "--seed", "18446744073709551615"]) == 0
    assert "--top-k 3: --temperature 0 is greedy" in _one_line_error(capsys, 2, [*gen, "--temperature", "0",
                                                                                  "--top-k", "3"])
    capsys.readouterr()
    assert main([*gen, "--prompt", "Hello<|endoftext|>World"]) == 0
    assert capsys.readouterr().out == "Hello<|endoftext|>World\n"
    assert main([*gen, "--prompt", ""]) == 0  # the BPE tokenizer's end-of-text token starts the document
    assert capsys.readouterr().out == "\n"
    text = tmp_path / "mine.txt"
    text.write_text("To be or not to be, that is the question. " * 20)
    out = tmp_path / "runs"
    assert main(["train", "lm/llama", *_sets(TINY + ["train.steps=1", "name=f", f"out_dir={out}", "task.corpus=files",
                                                      f"task.text_files=[{text}]", "task.tokenizer=bytes"])]) == 0
    err = _one_line_error(capsys, 2, ["eval", str(out / "f"), "--split", "test"])
    assert "--split test: this run's corpus (files) has only validation" in err, err
    assert "has no end-of-text token" in _one_line_error(capsys, 2, ["generate", str(out / "f"), "--prompt", ""])
    other = tmp_path / "other.txt"
    other.write_text("Something else entirely, to be scored. " * 10)
    assert main(["eval", str(out / "f"), "--text-file", str(text), "--text-file", str(other)]) == 0
    assert f"{text}, {other}: " in capsys.readouterr().out
    # the files edited since training: the run's validation split is another text now (it was scored silently)
    text.write_text("To be or not to be, that is the question. " * 19 + "Another ending entirely, as it turns out.")
    err = _one_line_error(capsys, 2, ["eval", str(out / "f")])
    assert f"this run's validation/test text ({text}) changed since it was trained" in err, err
    assert main(["eval", str(out / "f"), "--text-file", str(text)]) == 0


def test_a_ctrl_c_while_the_parser_is_built_is_one_line(capsys, monkeypatch):
    """Building the parser imports torch (the task options' help): a Ctrl-C in that second printed a traceback."""
    import energyformer.cli as cli

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.delenv("ENERGYFORMER_DEBUG", raising=False)
    monkeypatch.setattr(cli, "build_parser", interrupted)
    assert main(["list", "configs"]) == 130
    assert capsys.readouterr().err == "\nenergyformer: interrupted\n"


def test_list_keys_shows_a_keys_whole_first_paragraph():
    """``list keys`` cut a multi-line help at its first line break (46 keys ended mid-clause)."""
    from energyformer.utils.config_help import format_config_help

    rows = format_config_help(RunConfig).splitlines()
    row = next(line for line in rows if line.lstrip().startswith("train.grad_accum "))
    assert row.endswith("so the step is that of the whole batch)"), row


def test_generate_prints_the_sample_as_it_is_drawn(trained, capsys, monkeypatch):
    """``generate`` printed nothing until the last token; now each token's text is written (and flushed) as it is
    drawn, and the whole output is the same text as ``--no-stream``'s single write and the model's own decode."""
    import sys

    from energyformer.experiment import load_trained

    writes = []
    real = sys.stdout.write
    monkeypatch.setattr(sys.stdout, "write", lambda s: (writes.append(s), real(s))[1])
    argv = ["generate", str(trained), "--prompt", "ROMEO:", "--max-new-tokens", "12", "--seed", "5"]
    assert main(argv) == 0
    streamed, live = capsys.readouterr().out, [w for w in writes if w]
    writes.clear()
    assert main([*argv, "--no-stream"]) == 0
    assert capsys.readouterr().out == streamed and [w for w in writes if w] == [streamed[:-1], "\n"]
    assert len(live) > 3 and "".join(live) == streamed and live[0].startswith("ROMEO:"), live
    _, model, task = load_trained(trained, torch.device("cpu"))
    ids = model.generate(torch.tensor([task.tokenizer.encode("ROMEO:")]), 12, temperature=0.8, top_k=50,
                         generator=torch.Generator().manual_seed(5))
    assert streamed == task.tokenizer.decode(ids[0].tolist()) + "\n"


def test_generate_takes_the_test_time_depth_as_eval_does(trained, capsys):
    """``generate --iterations / --steps`` (probe AQ: eval and CausalLM.generate took them, the command did not):
    the sample is the model's own decode at that depth, the untrained-depth warning as for eval, and a value the model
    does not take is one line, as eval's."""
    from energyformer.experiment import load_trained

    argv = ["generate", str(trained), "--prompt", "ROMEO:", "--max-new-tokens", "8", "--seed", "5"]
    assert main([*argv, "--iterations", "3"]) == 0
    out, err = capsys.readouterr()
    assert "warning: --iterations 3: this 'transformer' model was trained with 1 iteration" in err
    _, model, task = load_trained(trained, torch.device("cpu"))
    prompt = torch.tensor([task.tokenizer.encode("ROMEO:")])
    deep, plain = (task.tokenizer.decode(model.generate(prompt, 8, temperature=0.8, top_k=50, iterations=n,
                                                        generator=torch.Generator().manual_seed(5))[0].tolist()) + "\n"
                   for n in (3, 1))
    assert out == deep and deep != plain
    assert "--iterations 0: must be an integer >= 1" in _one_line_error(capsys, 2, [*argv, "--iterations", "0"])
    assert "--steps 2: a 'transformer' model has no energy descent steps" in _one_line_error(
        capsys, 2, [*argv, "--steps", "2"])


def test_the_untrained_depth_warning_is_for_single_iteration_models_only():
    """--iterations N warns only for a model trained at one iteration alone: not for a looped model, nor for one
    trained at sampled depths (train_iterations) whose evaluation count happens to be 1, nor for N = 1."""
    from energyformer.cli import _untrained_depth
    from energyformer.models import ModelConfig

    base = dict(vocab_size=10, dim=16, heads=2, n_layers=1)
    assert "trained with 1 iteration" in _untrained_depth(ModelConfig(**base), {"iterations": 3})
    assert _untrained_depth(ModelConfig(**base), {"iterations": 1}) is None
    assert _untrained_depth(ModelConfig(**base), {"steps": 2}) is None
    assert _untrained_depth(ModelConfig(**base, iterations=4), {"iterations": 8}) is None
    assert _untrained_depth(ModelConfig(**base, train_iterations=[2, 4]), {"iterations": 8}) is None
