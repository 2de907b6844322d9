"""Every concrete ``energyformer ...`` command that README.md, docs/*.md and the CLI's own examples (``--help``) show
is one the CLI accepts today: the command and its options parse; a named config loads with its ``--set``
overrides; a listed registry exists; an ``eval`` / ``generate`` option belongs to the task of the run it names
(``runs/NAME``: the config named NAME); a reproduction's options parse and its ``--only`` cells exist. Nothing
trains or runs. Synopsis lines (``NAME``, ``RUN``, ``[--opt]``) and a user's own files (``my.yaml``) are not
commands to check."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from energyformer import cli
from energyformer.cli_list import no_extra
from energyformer.experiment import known_configs, load_run_config
from energyformer.studies import command, plan
from energyformer.studies.spec import load_study

ROOT = Path(__file__).resolve().parents[1]
PLACEHOLDER = re.compile(r"\b(NAME|RUN|FILE|OUT|KEY=VALUE|N)\b|\[|\.\.\.")


ERROR = "energyformer: error: "


def _fenced_commands(path: Path, root: Path = ROOT) -> list[tuple[str, str]]:
    """(where, command) for every ``energyformer`` line inside a fenced block of ``path``, continued lines (a trailing
    backslash) joined; a command shown with its error (the next line ``energyformer: error: ...``) carries it after
    a tab"""
    out, fenced, pending = [], False, ""
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced, pending = not fenced, ""
            continue
        if fenced and line.startswith(ERROR) and out and out[-1][0] == f"{path.relative_to(root)}:{i - 1}":
            out[-1] = (out[-1][0], out[-1][1] + "\t" + line[len(ERROR):])
            continue
        text = pending + line.strip().removeprefix("$ ")
        if not fenced or not text.startswith("energyformer "):
            continue
        if text.endswith("\\"):
            pending = text[:-1].rstrip() + " "
            continue
        pending = ""
        out.append((f"{path.relative_to(root)}:{i}", text))
    return out


def _epilog_commands() -> list[tuple[str, str]]:
    """the examples of ``energyformer --help`` (a line ending in '|' continues on the next)"""
    out, pending = [], ""
    for line in cli.EPILOG.splitlines():
        text = (pending + " " + line.strip()).strip() if pending else line.strip()
        if not text.startswith("energyformer "):
            continue
        if text.split("#")[0].rstrip().endswith("|"):
            pending = text.split("#")[0]
            continue
        pending = ""
        out.append(("energyformer --help", text))
    return out


def documented() -> list[tuple[str, list[str], str]]:
    """(where, argv without 'energyformer', the error the docs show it give or "") of every concrete documented
    command; `list a | b | c` gives one per name"""
    found = [c for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))] for c in _fenced_commands(p)]
    found += _epilog_commands()
    out = []
    for where, text in found:
        text, _, error = text.partition("\t")
        body = text.split(" #")[0].strip()
        if PLACEHOLDER.search(body):
            continue
        argv = shlex.split(body)[1:]
        if argv[:1] == ["list"] and "|" in argv:
            out += [(where, ["list", name], "") for name in " ".join(argv[1:]).replace("|", " ").split()]
        else:
            out.append((where, argv, error))
    return out


COMMANDS = documented()


def test_the_docs_show_commands_of_every_kind():
    """the collection itself works: the README's tour alone has train, eval, generate, list, reproduce, report"""
    kinds = {argv[0] for _, argv, _ in COMMANDS if argv and not argv[0].startswith("-")}
    assert {"train", "eval", "generate", "list", "reproduce", "report", "export", "demo"} <= kinds, kinds
    assert len(COMMANDS) >= 40


def _config_of_run(run: str) -> str:
    """the config a documented run directory ``runs/NAME`` was trained from: the one config named NAME"""
    name = Path(run).name
    hits = [c for c in known_configs() if Path(c).name == name]
    assert hits, f"runs/{name}: no config named {name!r} (the docs name a run no config trains)"
    return hits[0]


@pytest.mark.parametrize("where,argv,error", COMMANDS, ids=[f"{w} {' '.join(a)[:60]}" for w, a, _ in COMMANDS])
def test_a_documented_command_is_accepted(where, argv, error):
    """a command the docs show failing fails with the message they show (up to their '...')"""
    if not error:
        check(where, argv)
        return
    with pytest.raises(Exception) as got:
        check(where, argv)
    shown = error.split("...")[0].rstrip(", ")
    assert str(got.value).startswith(shown), f"{where}: the docs show {shown!r}, the CLI says {got.value}"


def check(where: str, argv: list[str]) -> None:
    """raise unless ``energyformer *argv`` would be accepted (parsed, its config, task options and cells checked)"""
    parser = cli.build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
    except SystemExit as e:
        if e.code == 0 and ("--help" in argv or "-h" in argv):
            return
        raise AssertionError(f"{where}: `energyformer {shlex.join(argv)}` does not parse") from None
    cmd = args.cmd
    if cmd in ("train", "config"):
        assert not extra, (where, extra)
        if not Path(args.config).name.startswith("my"):   # a user's own file
            load_run_config(args.config, args.overrides)
    elif cmd in ("eval", "generate"):
        cfg = load_run_config(_config_of_run(args.run))
        task = cli._tasks().entries[cfg.task.kind].builder
        add = task.add_eval_args if cmd == "eval" else task.add_generate_args
        assert cmd == "eval" or task.can_generate, f"{where}: task {cfg.task.kind!r} does not generate"
        targs, rest = cli._task_parser(f"energyformer {cmd}", add).parse_known_args(extra)
        no_extra(rest, f"{where}: {cmd} of a {cfg.task.kind!r} run")
    elif cmd == "reproduce":
        spec = load_study(args.which)
        a = command.parser(args.which, spec).parse_args(list(args.args) + list(extra))
        if not a.report_only:
            plan.expand(spec, a.scale or command.default_scale(spec), seeds=a.seeds, only=command.parse_only(a.only), sets=a.sets)
    else:
        assert not extra, (where, extra)


def test_a_wrong_option_or_config_in_the_docs_would_be_caught(tmp_path):
    """the checks above fail on a renamed option, a missing config, an option of another task and an axis label
    a study does not have"""
    bad = [["train", "lm/no_such_config"], ["eval", "runs/cem_full", "--puzzles", "x.csv"],
           ["eval", "runs/sudoku_hyperset", "--no-such-option", "1"], ["reproduce", "cem-gp", "--only", "kernel=nope"],
           ["list", "no_such_registry"]]
    for argv in bad:
        with pytest.raises((AssertionError, SystemExit, Exception)):
            check("test", argv)
    doc = tmp_path / "x.md"
    doc.write_text("```bash\nenergyformer train lm/llama \\\n  --set train.steps=5  # two lines\n```\n"
                   "energyformer train outside/a/block\n"
                   "```\n$ energyformer list nope\nenergyformer: error: no ...\n```\n")
    assert _fenced_commands(doc, tmp_path) == [
        ("x.md:3", "energyformer train lm/llama --set train.steps=5  # two lines"),
        ("x.md:7", "energyformer list nope\tno ...")]
    with pytest.raises(AssertionError, match="the docs show"):   # a documented error the CLI no longer gives
        test_a_documented_command_is_accepted("x.md:7", ["config", "lm/llama", "--set", "task.kind=sudokuu"],
                                              "task.kind = 'sudoku': something else")


def python_examples(path: Path) -> list[str]:
    """the ```python blocks of ``path``, in order"""
    return re.findall(r"^```python\n(.*?)^```", path.read_text(encoding="utf-8"), flags=re.S | re.M)


def test_the_readmes_python_examples_run(tmp_path):
    """README's "Adding a new energy" examples run as printed, in order, in a fresh process (they register an
    energy and an MLP kind): the block, its descent steps, the kind's registration, the public checks; the check of
    'my_attn' (a reader's own attention kind) runs on the package's llama attention."""
    blocks = python_examples(ROOT / "README.md")
    assert len(blocks) == 3 and "register_energy" in blocks[0] and "MLPS.register" in blocks[1]
    assert "check_energy(" in blocks[2] and "check_solver(" in blocks[2]
    code = "\n".join(blocks).replace('"my_attn"', '"llama"')  # 'my_mlp' is the example's own kind
    code += "\nassert y.shape == (2, 5, 64) and torch.isfinite(y).all()\nprint('examples ran')\n"
    script = tmp_path / "readme_examples.py"
    script.write_text(code)
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert r.returncode == 0 and "examples ran" in r.stdout, r.stderr[-3000:]
