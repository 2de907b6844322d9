"""``energyformer`` command line: train | eval | generate | list | demo | reproduce | config.

Every subcommand has its own ``--help``. Configs are YAML files (or names under ``configs/``, e.g.
``lm/llama``) with dotted overrides: ``--set model.block.cem_attention.steps=2``.
"""

from __future__ import annotations

import argparse
import sys

from .utils.validate import ConfigError

EPILOG = """examples:
  energyformer demo                                     # tiny Llama vs tiny CEM, a few minutes on CPU
  energyformer train lm/cem_full --set train.steps=500  # train one config
  energyformer train lm/cem_full --resume               # continue exactly where it stopped
  energyformer eval runs/cem_full --text-file my.txt    # perplexity and bits/byte on any UTF-8 text
  energyformer generate runs/cem_full --prompt "ROMEO:" --max-new-tokens 200
  energyformer list configs | energies | solvers | tasks | keys
  energyformer reproduce cem-lm --suite recursion       # seed §4.2 at CPU scale
  energyformer reproduce cem-gp                         # seed Table 3 (GP regression)
"""


def _add_overrides(p: argparse.ArgumentParser) -> None:
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="dotted config override, repeatable (e.g. --set train.lr=1e-3)")


def cmd_train(a) -> int:
    from .experiment import load_run_config, run_experiment

    cfg = load_run_config(a.config, a.overrides + ([f"out_dir={a.out}"] if a.out else []))
    res = run_experiment(cfg, resume=a.resume)
    f = res.final
    print(f"\n{cfg.name}: validation loss {f.get('eval/loss', float('nan')):.4f}, "
          f"perplexity {f.get('eval/ppl', float('nan')):.2f}, bits/byte {f.get('eval/bpb', float('nan')):.3f}; "
          f"{res.tokens_per_s:.0f} tokens/s; checkpoints in {res.run_dir}")
    return 0


def cmd_eval(a) -> int:
    import torch

    from .data.text import EvalWindows, load_text_files
    from .experiment import load_trained
    from .tasks.lm import evaluate_lm

    cfg, model, task = load_trained(a.run, a.device)
    if a.text_file:
        windows = EvalWindows.from_text(load_text_files(a.text_file), task.tokenizer, cfg.data.seq_len,
                                        cfg.data.eval_batch_size, cache=False)
        where = ", ".join(a.text_file)
    else:
        windows, where = task.windows[a.split], f"{cfg.data.corpus} {a.split} split"
    with torch.no_grad():
        res = evaluate_lm(model, windows, None, torch.device(a.device))
    print(f"{where}: {int(res['tokens'])} tokens, loss {res['loss']:.4f} nats/token, "
          f"perplexity {res['ppl']:.2f}, bits/byte {res['bpb']:.4f}")
    return 0


def cmd_generate(a) -> int:
    import torch

    from .experiment import load_trained

    cfg, model, task = load_trained(a.run, a.device)
    ids = task.tokenizer.encode(a.prompt) or [0]
    idx = torch.tensor([ids], device=a.device)
    g = torch.Generator(device=a.device).manual_seed(a.seed)
    out = model.generate(idx, a.max_new_tokens, temperature=a.temperature, top_k=a.top_k,
                         greedy=a.greedy, generator=g)
    print(task.tokenizer.decode(out[0].tolist()))
    return 0


def cmd_list(a) -> int:
    from . import energies  # noqa: F401  (registers energies)
    from .core import ENERGIES, SOLVERS
    from .experiment import RunConfig, configs_dir
    from .utils.config import format_config_help

    what = a.what
    if what == "configs":
        for p in sorted(configs_dir().rglob("*.yaml")):
            first = p.read_text().splitlines()[0] if p.read_text() else ""
            print(f"{str(p.relative_to(configs_dir()).with_suffix('')):34s} {first.lstrip('# ')}")
    elif what == "energies":
        for k, cls in sorted(ENERGIES.items()):
            print(f"{k:20s} {cls.__name__:22s} {(cls.__doc__ or '').strip().splitlines()[0]}")
    elif what == "solvers":
        for k, cls in sorted(SOLVERS.items()):
            print(f"{k:20s} {cls.__name__:22s} {(cls.__doc__ or '').strip().splitlines()[0]}")
    elif what == "tasks":
        print("lm                  causal language modelling (Shakespeare or --text-file), ppl and bits/byte")
        print("gp                  Gaussian-process regression, CEM seed Table 3 (energyformer reproduce cem-gp)")
    elif what == "keys":
        print(format_config_help(RunConfig))
    return 0


def cmd_config(a) -> int:
    from .experiment import load_run_config
    from .utils.config import dumps_yaml

    print(dumps_yaml(load_run_config(a.config, a.overrides)), end="")
    return 0


def cmd_demo(a) -> int:
    from .reproduce.demo import main as demo_main

    return demo_main(a.out, a.steps, a.overrides)


def cmd_reproduce(a) -> int:
    if a.which == "cem-lm":
        from .reproduce.cem_lm import main as m
    else:
        from .reproduce.cem_gp import main as m
    return m(a.args) or 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="energyformer", description="Transformer layers as energy minimisation: train, evaluate and "
        "compare energy blocks (CEM, ...) against Llama/GPT baselines.", epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    t = sub.add_parser("train", help="train one config", description="Train one config (a YAML path or a "
                       "name under configs/, e.g. lm/llama). Writes checkpoints, metrics.jsonl, TensorBoard "
                       "logs and the resolved config to OUT_DIR/NAME.")
    t.add_argument("config", help="config name (see `energyformer list configs`) or YAML path")
    t.add_argument("--resume", action="store_true", help="continue from the newest valid checkpoint")
    t.add_argument("--out", help="output root (overrides out_dir)")
    _add_overrides(t)
    t.set_defaults(fn=cmd_train)

    e = sub.add_parser("eval", help="perplexity and bits/byte of a trained run",
                       description="Evaluate a trained run on a split of its corpus or on any UTF-8 text file(s).")
    e.add_argument("run", help="run directory (contains config.yaml and checkpoints)")
    e.add_argument("--split", default="validation", choices=["validation", "test"])
    e.add_argument("--text-file", nargs="+", help="evaluate on these UTF-8 files instead")
    e.add_argument("--device", default="cpu")
    e.set_defaults(fn=cmd_eval)

    g = sub.add_parser("generate", help="sample text from a trained run", description="Sample with a KV cache: "
                       "greedy, or temperature / top-k sampling.")
    g.add_argument("run", help="run directory")
    g.add_argument("--prompt", default="\n")
    g.add_argument("--max-new-tokens", type=int, default=200)
    g.add_argument("--temperature", type=float, default=0.8)
    g.add_argument("--top-k", type=int, default=50)
    g.add_argument("--greedy", action="store_true")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--device", default="cpu")
    g.set_defaults(fn=cmd_generate)

    ls = sub.add_parser("list", help="list configs, energies, solvers, tasks or config keys",
                        description="List what the library knows: experiment configs under configs/ (with "
                        "their one-line description), registered energies and solvers, tasks, or every "
                        "config key with its type and default.")
    ls.add_argument("what", nargs="?", default="configs", choices=["configs", "energies", "solvers", "tasks", "keys"],
                    help="what to list (default: configs)")
    ls.set_defaults(fn=cmd_list)

    c = sub.add_parser("config", help="print a resolved config (after overrides)",
                       description="Print the fully resolved YAML of a config after --set overrides, "
                       "without running anything; errors name the key, the value and what is allowed.")
    c.add_argument("config", nargs="?", default=None, help="config name or YAML path (default: all defaults)")
    _add_overrides(c)
    c.set_defaults(fn=cmd_config)

    d = sub.add_parser("demo", help="train a tiny Llama and a tiny CEM model and compare them",
                       description="Train a tiny Llama baseline and a tiny full-CEM model on Shakespeare for a "
                       "few minutes on CPU; print the comparison table, save a loss plot and a sample.")
    d.add_argument("--out", default="runs/demo")
    d.add_argument("--steps", type=int, help="override the step budget of both runs")
    _add_overrides(d)
    d.set_defaults(fn=cmd_demo)

    r = sub.add_parser("reproduce", help="reproduce a paper's headline result at CPU scale",
                       description="cem-lm: CEM seed §4 LM comparisons; cem-gp: CEM seed Table 3. "
                       "Arguments after the name go to that reproduction (try `reproduce cem-lm --help`).")
    r.add_argument("which", choices=["cem-lm", "cem-gp"])
    r.add_argument("args", nargs=argparse.REMAINDER)
    r.set_defaults(fn=cmd_reproduce)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except (ConfigError, FileNotFoundError, FileExistsError) as err:
        print(f"energyformer: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
