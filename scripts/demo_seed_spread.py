"""The seed spread of ``energyformer demo``'s metrics: the noise bound its headlines decide by.

The demo trains one seed per run, so it cannot see its own noise. This script collects the metrics of
the same demo trained with several ``train.seed`` values (folders written by
``energyformer demo --out DIR --set train.seed=S``; a folder without the override is seed 0) and
writes ``src/energyformer/demo_noise.json``: per stage, run and metric, the values by seed. The demo's
headline (:func:`energyformer.demo.verdict_line`) uses the spread (max - min) of both runs of a stage
as the bound a single-seed margin must exceed (``analysis.verdicts.Rules.single_seed_bound``).

    for s in 1 2; do energyformer demo --out runs/demo_s$s --set train.seed=$s; done
    python scripts/demo_seed_spread.py --from runs/demo runs/demo_s1 runs/demo_s2
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "src" / "energyformer" / "demo_noise.json"


def seed_of(run: dict) -> int:
    """The ``train.seed`` a demo run was trained with (0: the configs' default, no override)."""
    seeds = [int(o.split("=", 1)[1]) for o in run.get("overrides", []) if o.startswith("train.seed=")]
    return seeds[-1] if seeds else 0


def collect(folders: list[Path]) -> dict:
    """{stage: {run label: {metric: {seed: value}}}} from every ``<folder>/<stage>/results.json``."""
    out: dict = {}
    for folder in folders:
        files = sorted(folder.glob("*/results.json"))
        if not files:
            raise SystemExit(f"{folder}: no <stage>/results.json (give folders written by `energyformer demo --out`)")
        for f in files:
            res = json.loads(f.read_text())
            for label, run in res["runs"].items():
                seed = str(seed_of(run))
                for key, value in run["metrics"].items():
                    slot = out.setdefault(res["name"], {}).setdefault(label, {}).setdefault(key, {})
                    if seed in slot:
                        raise SystemExit(f"{f}: {res['name']}/{label} seed {seed} appears in two folders")
                    slot[seed] = value
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--from", dest="folders", nargs="+", type=Path, required=True, help="demo output folders")
    p.add_argument("--out", type=Path, default=OUT)
    a = p.parse_args(argv)
    data = {"source": "scripts/demo_seed_spread.py over `energyformer demo` trained with train.seed = each seed",
            "stages": collect(a.folders)}
    a.out.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    for stage, runs in data["stages"].items():
        for label, metrics in runs.items():
            for key, by_seed in metrics.items():
                if key in ("eval/ppl", "eval/bpb", "eval/accuracy", "eval/cell_accuracy", "eval/model_loss"):
                    v = list(by_seed.values())
                    print(f"{stage:9s} {label:20s} {key:20s} seeds {sorted(by_seed)} spread {max(v) - min(v):.4g}")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
