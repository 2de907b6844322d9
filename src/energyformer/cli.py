"""``energyformer`` command line: train | eval | generate | list | config | demo | reproduce | report.

Every subcommand has its own ``--help``. Configs are YAML files (or names under ``configs/``, e.g.
``lm/llama``) with dotted overrides: ``--set model.block.attention.steps=2``. Tasks come from the task
registry: ``eval`` and ``generate`` take the options of the run's task (``eval RUN --help`` lists them).
``--plugin MODULE_OR_FILE.py`` (any command; or ``ENERGYFORMER_PLUGINS``): :func:`~.plugins.import_cli_plugins`.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import shlex
import sys
import warnings

from .cli_errors import debug_env as _debug_env
from .cli_errors import describe_error
from .cli_errors import out_of_memory as _out_of_memory
from .cli_errors import show_warning as _show_warning
from .cli_list import LIST_CHOICES, cmd_list
from .cli_list import no_extra as _no_extra
from .utils.paths import writable_dir
from .utils.validate import ConfigError

EPILOG = """examples:
  energyformer demo                                     # the five systems vs their baselines, minutes on CPU
  energyformer demo --only hyperset                     # one stage
  energyformer train lm/cem_full --set train.steps=500  # train one config
  energyformer train my.yaml --plugin ./myenergy.py     # with your own energy / attention kind (recorded in the run)
  energyformer train lm/cem_full --resume               # continue where it stopped (give the same --set)
  energyformer eval runs/cem_full --text-file my.txt    # perplexity and bits/byte on any UTF-8 text
  energyformer eval runs/RUN --iterations 8             # a recurrent-depth model at more iterations
  energyformer generate runs/cem_full --prompt "ROMEO:" --max-new-tokens 200
  energyformer list configs | energies | solvers | step_sizes | backward_modes | norms | tasks | models |
                   attentions | mlps | preconditioners | tokenizers | positions | keys | reproductions
  energyformer export runs/cem_full --format hf out/cem # a Hugging Face model folder (trust_remote_code)
  energyformer reproduce cem-lm --only model=llama,cem_attn_t1,cem_attn_t2_diag   # CEM seed §4.2 at CPU scale
  energyformer reproduce hyperset-sudoku                # Hyper-SET vs looped transformer, test-time extrapolation
  energyformer reproduce intrinsic-lm                   # MHA vs momentum / Nesterov / Newton attentions
  energyformer report --check                           # every results page still renders from its artifacts
"""


DEVICE_HELP = "auto | cpu | cuda | cuda:N | mps (default: cpu; auto picks CUDA, then MPS, then CPU)"


def _add_plugin(p: argparse.ArgumentParser, dest: str) -> None:
    p.add_argument("--plugin", dest=dest, action="append", metavar="MODULE_OR_FILE.py", help="import a module that "
                   "registers energies / kinds / tasks first (repeatable; also ENERGYFORMER_PLUGINS=a,b); a run "
                   "records it, and eval / generate / export / --resume import it again")


def _add_overrides(p: argparse.ArgumentParser) -> None:
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="dotted config override, repeatable (e.g. --set train.lr=1e-3)")


def _registries() -> None:
    """Import the packages whose modules register energies, tasks and models."""
    from . import energies, models, tasks  # noqa: F401


def cmd_train(a, extra) -> int:
    from .experiment import load_run_config, run_experiment

    _no_extra(extra, "train")
    cfg = load_run_config(a.config, a.overrides + ([f"out_dir={a.out}"] if a.out else []), resume=a.resume)
    with _training_log(not cfg.train.progress):  # no bar: the trainer's step lines and saves are the progress
        res = run_experiment(cfg, resume=a.resume)
    metrics = {k: v for k, v in res.final.items() if k.startswith("eval/")}
    print(f"\n{cfg.name}: {res.task.format_metrics(metrics) if metrics else 'no evaluation'}; "
          f"{res.seconds:.0f} s; checkpoints in {res.run_dir}")
    return 0


@contextlib.contextmanager
def _training_log(on: bool):
    """While ``on``, print the trainer's INFO lines (``step N/M loss ...``, ``step N: saved ...``) to stdout: with
    train.progress=false they are the run's progress, and no handler printed them (nothing until the summary)."""
    import logging

    if not on:
        yield
        return
    log = logging.getLogger("energyformer.train")
    handler, level = logging.StreamHandler(sys.stdout), log.level
    handler.setFormatter(logging.Formatter("%(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        yield
    finally:
        log.removeHandler(handler)
        log.setLevel(level)


def _forward_options(a) -> dict:
    opts = {}
    if a.iterations is not None:
        if a.iterations < 1:
            raise ConfigError(f"--iterations {a.iterations}: must be an integer >= 1")
        opts["iterations"] = a.iterations
    if a.steps is not None:  # the least value each model takes (0 or 1) is checked against the model: one
        opts["steps"] = a.steps  # message for --steps -1 and --steps 0 (it said ">= 0", then ">= 1")
    return opts


def _untrained_depth(model_cfg, options: dict) -> str | None:
    """The warning for ``--iterations N`` (N != 1) on a model trained at one iteration only (``iterations`` 1, no
    ``train_iterations``): its whole stack then runs N times, a depth it never saw. None otherwise."""
    n = options.get("iterations", 1)
    if getattr(model_cfg, "iterations", None) != 1 or getattr(model_cfg, "train_iterations", None) or n == 1:
        return None
    return (f"--iterations {n}: this {model_cfg.kind!r} model was trained with 1 iteration (not recurrent): its whole "
            f"layer stack runs {n} times, a depth it never trained at")


def _device(spec: str):
    """``--device`` of eval and generate as a ``torch.device``, checked as ``train.device`` is (the same allowed
    values and resolution), its errors naming ``--device``."""
    from .train.device import DEVICE_ALLOWED, DEVICE_RE, resolve_device

    if not DEVICE_RE.match(spec):
        raise ConfigError(f"--device {spec!r}: {DEVICE_ALLOWED}")
    return resolve_device(spec, said=f"--device {spec!r}")


class _TaskOptionParser(argparse.ArgumentParser):
    """A task's own eval/generate options, parsed after the run is loaded: a bad value is one line (argparse's
    usage block and exit would come after the model was built, and tests could not catch it)."""

    def error(self, message: str):  # type: ignore[override]
        raise ConfigError(message)


def _task_parser(prog: str, add) -> argparse.ArgumentParser:
    p = _TaskOptionParser(prog=prog, add_help=False)
    add(p)
    return p


def cmd_eval(a, extra) -> int:
    import torch

    from .experiment import load_trained
    from .models.options import check_forward_options

    cfg, model, task = load_trained(a.run, _device(a.device))
    tp = _task_parser(f"energyformer eval RUN (task {task.name})", type(task).add_eval_args)
    targs, rest = tp.parse_known_args(extra)
    _no_extra(rest, f"eval of a {task.name!r} run")
    for k, v in vars(targs).items():
        setattr(a, k, v)
    if a.split is not None and not task.has_splits:
        raise ConfigError(f"--split {a.split}: a {task.name!r} run has no splits to choose from "
                          f"(its evaluation always reports {task.split_note})")
    given = [o for o in task.eval_file_options if getattr(targs, o, None)]
    if a.split is not None and given:
        raise ConfigError(f"--split {a.split}: --{given[0].replace('_', '-')} is evaluated instead of a split; "
                          "give one or the other")
    a.split = a.split or "validation"
    options = _forward_options(a)
    check_forward_options(model, options, cfg.model.kind)
    said_depth = _untrained_depth(cfg.model, options)
    if said_depth:  # legal (test-time recurrence), rarely what was meant
        warnings.warn(said_depth, stacklevel=1)
    said = ", ".join(f"--{k} {v}" for k, v in options.items())
    try:
        with torch.no_grad():
            where, res = task.eval_from_args(model, a, options)
    except (MemoryError, RuntimeError) as err:
        if options and _out_of_memory(err):
            raise MemoryError(f"not enough memory for this evaluation with {said} (memory grows with them: try "
                              "smaller values)") from err
        raise
    where += f" with {said}" if said else ""  # a test-time setting, not the run's own: the line says so
    from .train import checkpoint_step

    step = checkpoint_step(task.checkpoint)
    print(f"{where}: {task.format_metrics(res)} (checkpoint step {step}{task.checkpoint_note})")
    bad = [k for k, v in res.items() if isinstance(v, float) and not math.isfinite(v)]
    if bad:
        print(f"energyformer: error: non-finite {', '.join(bad)}: the model's weights or this input give "
              f"inf/NaN", file=sys.stderr)
        return 1
    return 0


def cmd_generate(a, extra) -> int:
    import warnings

    import torch

    from .experiment import load_trained
    from .models.options import check_forward_options
    from .train import checkpoint_step

    cfg, model, task = load_trained(a.run, _device(a.device))
    if task.checkpoint_note:  # stdout is the sample; which weights made it goes to stderr
        warnings.warn(f"{a.run}: sampling from checkpoint step {checkpoint_step(task.checkpoint)}"
                      f"{task.checkpoint_note}", stacklevel=1)
    if not task.can_generate:
        raise ConfigError(f"task {task.name!r} does not generate (runs of tasks that do: "
                          f"{', '.join(n for n, e in _tasks().entries.items() if e.builder.can_generate)})")
    tp = _task_parser(f"energyformer generate RUN (task {task.name})", type(task).add_generate_args)
    targs, rest = tp.parse_known_args(extra)
    _no_extra(rest, f"generate of a {task.name!r} run")
    options = _forward_options(a)  # test-time depth and step budget, checked against the model as eval's
    check_forward_options(model, options, cfg.model.kind)
    said_depth = _untrained_depth(cfg.model, options)
    if said_depth:
        warnings.warn(said_depth, stacklevel=1)
    targs.iterations, targs.steps = options.get("iterations"), options.get("steps")
    def emit(piece: str) -> None:  # the sample on stdout as it is drawn (--no-stream: once, at the end)
        sys.stdout.write(piece)
        sys.stdout.flush()

    with torch.no_grad():
        task.generate(model, targs, emit=emit)
    print()
    return 0


def _tasks():
    from .tasks import TASKS

    return TASKS


def cmd_config(a, extra) -> int:
    """The config as train records it in RUN/config.yaml: the task fills the model keys it sets (the tokenizer's
    vocabulary, Sudoku's 10 symbols, Potts' sizes); without that step ``config`` showed ``model.vocab_size: 4096``
    for a run that trains 50257 tokens. ``--unresolved`` skips the task (no data read) and says so."""
    from .experiment import build_task, load_run_config, resolve
    from .utils.config import dumps_yaml

    _no_extra(extra, "config")
    cfg = load_run_config(a.config, a.overrides)
    if a.unresolved:
        print("# unresolved: the model keys the task sets at train time (model.vocab_size, input and output sizes) "
              "are not filled in")
    print(dumps_yaml(cfg if a.unresolved else resolve(cfg, build_task(cfg, rank=0))), end="")
    return 0


def cmd_demo(a, extra) -> int:
    from .demo import main as demo_main

    _no_extra(extra, "demo")
    if a.steps is not None and a.steps < 1:
        raise ConfigError(f"--steps {a.steps}: must be an integer >= 1")
    return demo_main(a.out, a.steps, a.overrides, a.only, debug=a.debug or _debug_env())


def cmd_export(a, extra) -> int:
    from .export import export_run
    from .export.hf import export_message

    _no_extra(extra, "export")
    out, which = export_run(a.run, a.out, a.format, overwrite=a.overwrite)
    print(export_message(a.run, out, which, a.format))
    return 0


def cmd_reproduce(a, extra) -> int:
    from .reproduce import resolve

    rest = list(a.args) + list(extra)
    return resolve(a.which)(rest) or 0


def cmd_report(a, extra) -> int:
    from .report.command import execute

    _no_extra(extra, "report")
    return execute(a)


def build_parser() -> argparse.ArgumentParser:
    from .reproduce import REPRODUCTIONS

    p = _Parser(
        prog="energyformer", description="Transformer layers as energy minimisation: train, evaluate and "
        "compare energy blocks (CEM, ...) against Llama/GPT baselines.", epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--debug", action="store_true", help="show Python tracebacks (also ENERGYFORMER_DEBUG=1)")
    p.add_argument("--version", action=_Version, nargs=0,
                   help="show the version (with torch's and the git commit) and exit")
    _add_plugin(p, "plugins_before")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    t = sub.add_parser("train", help="train one config", description="Train one config (a YAML path or a "
                       "name under configs/, e.g. lm/llama). Writes checkpoints, metrics.jsonl, TensorBoard "
                       "logs and the resolved config to OUT_DIR/NAME.")
    t.add_argument("config", help="config name (see `energyformer list configs`) or YAML path")
    t.add_argument("--resume", action="store_true", help="continue from the newest valid checkpoint")
    t.add_argument("--out", type=writable_dir("--out"), help="output root (overrides out_dir)")
    _add_overrides(t)
    t.set_defaults(fn=cmd_train)

    e = sub.add_parser("eval", help="evaluate a trained run", formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Evaluate a trained run on a split of its task's data (or on the task's "
                       "own inputs, e.g. --text-file for language models).",
                       epilog_of=lambda: _task_options_help("eval"))
    e.add_argument("run", help="run directory (contains config.yaml and checkpoints)")
    e.add_argument("--split", default=None, choices=["validation", "test"],
                   help="split to evaluate (default: validation)")
    e.add_argument("--iterations", type=int, help="recurrent-depth models: number of iterations (test-time depth)")
    e.add_argument("--steps", type=int, help="energy blocks: descent steps per block (test-time step budget)")
    e.add_argument("--device", default="cpu", help=DEVICE_HELP)
    e.set_defaults(fn=cmd_eval)

    g = sub.add_parser("generate", help="sample from a trained run",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Generate with a trained run (tasks that generate, e.g. lm: KV-cache "
                       "sampling, greedy or temperature / top-k).",
                       epilog_of=lambda: _task_options_help("generate"))
    g.add_argument("run", help="run directory")
    g.add_argument("--iterations", type=int, help="recurrent-depth models: number of iterations (test-time depth)")
    g.add_argument("--steps", type=int, help="energy blocks: descent steps per block (test-time step budget)")
    g.add_argument("--device", default="cpu", help=DEVICE_HELP)
    g.set_defaults(fn=cmd_generate)

    ls = sub.add_parser("list", help="list configs, registries or config keys",
                        description="List what the library knows: experiment configs under configs/ (with "
                        "their one-line description), registered energies, solvers, tasks, models, "
                        "attention and MLP kinds, reproductions, or every config key with its type and default.")
    ls.add_argument("what", nargs="?", default="configs",
                    choices=list(LIST_CHOICES), help="what to list (default: configs)")
    ls.set_defaults(fn=cmd_list)

    c = sub.add_parser("config", help="print a resolved config (after overrides)",
                       description="Print the fully resolved YAML of a config after --set overrides, as train "
                       "records it in RUN/config.yaml, without training: the task is built so that the model keys "
                       "it sets (model.vocab_size from the tokenizer, input and output sizes from the data) show "
                       "train's values; a data set not yet in the data folder is prepared and cached first, as "
                       "train would. Errors name the key, the value and what is allowed.")
    c.add_argument("config", nargs="?", default=None, help="config name or YAML path (default: all defaults)")
    _add_overrides(c)
    c.add_argument("--unresolved", action="store_true",
                   help="do not build the task: print the config before the task sets its model keys "
                   "(model.vocab_size and the input/output sizes keep their config values; no data is read)")
    c.set_defaults(fn=cmd_config)

    d = sub.add_parser("demo", help="the five systems, each against its baseline, in a few minutes on CPU",
                       description="One small comparison per system: CEM vs Llama and NagMHA vs MHA (Shakespeare "
                       "LM), Hyper-SET vs looped Transformer (Sudoku, also at more iterations than trained), "
                       "EqT vs baseline (parity), bare SA vs recycled transformer (Potts, against the Bayes "
                       "optimum). Progress per stage; one report page OUT/report.md with one figure per system.")
    d.add_argument("--out", default="runs/demo")
    d.add_argument("--only", action="append", metavar="NAME",
                   help="run only this stage (repeatable): cem, intrinsic, hyperset, eqt, bare_sa; the report "
                   "keeps the other stages' earlier results")
    d.add_argument("--steps", type=int, help="override the step budget of every run")
    _add_overrides(d)
    d.set_defaults(fn=cmd_demo)

    x = sub.add_parser("export", help="export a trained run (Hugging Face model folder)",
                       description="Export a trained language-model run as a Hugging Face model folder (config.json, "
                       "model.safetensors; custom modelling code for energy models, a stock LlamaForCausalLM for "
                       "the Llama baseline), checked by loading it back with transformers.")
    x.add_argument("run", help="run directory")
    x.add_argument("out", help="output folder (new or empty; --overwrite replaces an earlier export)")
    x.add_argument("--format", default="hf", choices=["hf"], help="export format (default: hf)")
    x.add_argument("--overwrite", action="store_true",
                   help="replace OUT when it holds an earlier export (OUT must otherwise be new or empty)")
    x.set_defaults(fn=cmd_export)

    desc = "\n".join(f"  {k:18s} {r.description}" for k, r in REPRODUCTIONS.items())
    r = sub.add_parser("reproduce", help="reproduce a paper's headline result at CPU scale",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Reproduce a paper result at CPU scale. Arguments after the name go to that "
                       f"reproduction (try `energyformer reproduce NAME --help`).\n\n{desc}")
    r.add_argument("which", metavar="NAME", help="a reproduction above, or the path of a study file of your own "
                   "(PATH.yaml: configs x grid x seeds, metrics and claims with their rules; docs/studies.md)")
    r.add_argument("args", nargs=argparse.REMAINDER)
    r.set_defaults(fn=cmd_reproduce)

    from .report.command import add_arguments

    rp = sub.add_parser("report", help="re-render the results pages from their committed artifacts (--check, --list)",
                        description="Re-render the results pages under docs/results/ and the README's results "
                        "section from the artifacts committed beside them; --check compares and writes nothing "
                        "(exit 1 when a page or the README section differs).")
    add_arguments(rp)
    rp.set_defaults(fn=cmd_report)
    for sp in (s for s in sub.choices.values() if s is not r):  # `train X --plugin P`, as `--plugin P train X`
        _add_plugin(sp, "plugins")
    return p


class _Version(argparse.Action):
    """``--version``, its text worked out only when asked (it runs git): :func:`train.runinfo.version_text`."""

    def __call__(self, parser, namespace, values, option_string=None):
        from .train.runinfo import version_text

        print(version_text())  # on stdout, as argparse's own version action
        parser.exit()


class _Parser(argparse.ArgumentParser):
    """``epilog_of``: a function giving the epilog, called when the help is first formatted — the task options of
    ``eval`` / ``generate`` import every task (seconds), which every other command and every parse skipped before
    the help asked for them. Sub-commands' parsers are of this class too (argparse's default)."""

    def __init__(self, *args, epilog_of=None, **kwargs):
        super().__init__(*args, **kwargs)
        self._epilog_of = epilog_of

    def format_help(self) -> str:
        if self._epilog_of is not None:
            self.epilog, self._epilog_of = self._epilog_of(), None
        return super().format_help()


def _task_options_help(which: str) -> str:
    try:
        tasks = _tasks()
    except Exception:  # pragma: no cover - help must never fail
        return ""
    lines = ["options of the run's task:"]
    for name, e in tasks.entries.items():
        cls = e.builder
        if which == "generate" and not cls.can_generate:
            continue
        tp = argparse.ArgumentParser(prog=name, add_help=False)
        (cls.add_eval_args if which == "eval" else cls.add_generate_args)(tp)
        acts = [x for x in tp._actions if x.option_strings]
        if not acts:
            continue
        lines.append(f"  task {name}:")
        for act in acts:
            meta = f" {act.metavar or act.dest.upper()}" if act.nargs != 0 else ""
            lines.append(f"    {', '.join(act.option_strings)}{meta}  {act.help or ''}")
    return "\n".join(lines) if len(lines) > 1 else ""


def main(argv: list[str] | None = None) -> int:
    import warnings

    try:  # builds the task options' help: imports torch, a second or two in which a Ctrl-C printed a traceback
        parser = build_parser()
        args, extra = parser.parse_known_args(argv)
    except KeyboardInterrupt:
        if _debug_env():
            raise
        print("\nenergyformer: interrupted", file=sys.stderr)
        return 130
    debug = args.debug or _debug_env()
    if not debug:
        warnings.showwarning = _show_warning
    if extra and args.cmd in ("list", "config", "demo", "train", "export"):
        parser.error(f"unrecognised arguments: {' '.join(extra)}")
    try:
        given = (args.plugins_before or []) + (getattr(args, "plugins", None) or [])  # (reproduce: its own args)
        if given or os.environ.get("ENERGYFORMER_PLUGINS", "").strip():
            from .plugins import import_cli_plugins

            import_cli_plugins(given)
        return args.fn(args, extra)
    except BrokenPipeError:  # `energyformer list keys | head`: the reader closed the pipe; stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # (Python's docs: no second error when stdout is flushed at exit)
        return 141  # 128 + SIGPIPE, as a shell reports a process the pipe stopped
    except KeyboardInterrupt:
        if debug:
            raise
        hint = ""
        if args.cmd == "train":
            cmd = ["energyformer", "train", args.config, "--resume"] + (["--out", str(args.out)] if args.out else [])
            cmd += [x for o in args.overrides for x in ("--set", o)]
            hint = "; continue with: " + shlex.join(cmd)  # quoted: pasted, `--set 'k={a: 2}'` stays one argument
        print(f"\nenergyformer: interrupted{hint}", file=sys.stderr)
        return 130
    except Exception as err:  # noqa: BLE001 - every error a user can cause ends in one line
        if debug:
            raise
        msg, code = describe_error(err)
        print(f"energyformer: error: {msg}", file=sys.stderr)
        return code


if __name__ == "__main__":
    raise SystemExit(main())
