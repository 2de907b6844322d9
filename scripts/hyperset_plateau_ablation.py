"""Which part of Hyper-SET holds it on the ln 9 plateau? Ablations on one fixed CPU recipe (issue 20, item 2).

Every variant trains on :mod:`energyformer.analysis.plateau_recipe`'s recipe (d 32, 4 heads, L 4, 200 steps of
batch 32, lr 3e-3, freshly augmented boards; the recipe of ``tests/blocks/test_hyperset_plateau.py``) with
one ``model.block`` swapped — the attention energy, the step sizes, one Hyper-SET sublayer against the
looped transformer's — over several seeds of the initialisation (the data stream is the same for all).
A variant "leaves ln 9" at a seed when its last 50 steps' mean loss is below ln 9 − 0.005 (the recipe's
rule). The variants named ``probe_*`` are not library options: they patch the energy's operator inside this
script to isolate one property of the bi-softmax — its uniform part removed (weights softmax_row + softmax_col
− 2/N: near-uniform attention then adds no common drift to every token), its scores from a second projection,
its weights without their normalisers, or the sigmoid energy's weights normalised as a softmax's.

    PYTHONPATH=src python scripts/hyperset_plateau_ablation.py --out docs/results/hyperset/plateau/ablation
    PYTHONPATH=src python scripts/hyperset_plateau_ablation.py --out DIR --variants hyperset,transformer --seeds 0
    PYTHONPATH=src python scripts/hyperset_plateau_ablation.py --render-only docs/results/hyperset/plateau/ablation

A run adds its records to ``DIR/results.json`` (replacing those of the same variant, seed, size and steps) and
renders ``DIR/README.md``; ``--render-only`` measures nothing and writes the page from ``results.json``
alone, byte for byte the same every time.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import platform
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from unittest import mock

import torch

from energyformer.analysis.plateau_recipe import (
    BATCH, DIM, HEADS, ITERATIONS, LN9, LR, MARGIN, STEPS, last50, left_ln9, recipe_losses,
)
from energyformer.errors import DataError, UserError
from energyformer.utils.io import number, read_json, require_keys

LLAMA = {"kind": "llama", "rope": False}
HS_ATTN = {"kind": "hyperset"}
HS_FF = {"kind": "hyperset"}
FIXED = 0.1
#: name -> (what it is, model.block, probe or None); the order is the page's
VARIANTS: dict[str, tuple[str, dict, str | None]] = {
    "transformer": ("looped transformer (the paper's baseline: Llama attention without RoPE, ReLU MLP)",
                    {"attention": LLAMA, "mlp": "relu"}, None),
    "hyperset": ("Hyper-SET, the default (bi-softmax attention, ReLU feed-forward energy, step-size network)",
                 {"attention": HS_ATTN, "mlp": HS_FF}, None),
    "hyperset_sigmoid": ("Hyper-SET with the sigmoid attention energy (Table 19), the rest default",
                         {"attention": {**HS_ATTN, "energy": "sigmoid"}, "mlp": HS_FF}, None),
    "hyperset_negbeta": ("Hyper-SET, bi-softmax at a negative inverse temperature β = −1/√p "
                         "(`attention.beta_scale: -1`: a soft-min, weights favouring the least similar tokens), "
                         "the rest default",
                         {"attention": {**HS_ATTN, "beta_scale": -1.0}, "mlp": HS_FF}, None),
    "hyperset_linear": ("Hyper-SET with the linear attention energy (Table 19), the rest default",
                        {"attention": {**HS_ATTN, "energy": "linear"}, "mlp": HS_FF}, None),
    "hyperset_no_self": ("Hyper-SET, bi-softmax without self-interaction (j ≠ i)",
                         {"attention": {**HS_ATTN, "self_interaction": False}, "mlp": HS_FF}, None),
    "hyperset_fixed": (f"Hyper-SET, fixed step sizes α = γ = {FIXED} (Table 4; no zero start)",
                       {"attention": {**HS_ATTN, "step_size": FIXED}, "mlp": {**HS_FF, "step_size": FIXED}}, None),
    "hyperset_sigmoid_fixed": (f"Hyper-SET, sigmoid attention energy, fixed step sizes {FIXED}",
                               {"attention": {**HS_ATTN, "energy": "sigmoid", "step_size": FIXED},
                                "mlp": {**HS_FF, "step_size": FIXED}}, None),
    "hs_attention+relu_mlp": ("Hyper-SET's attention (step-size network) + the transformer's ReLU MLP",
                              {"attention": HS_ATTN, "mlp": "relu"}, None),
    "hs_attention_fixed+relu_mlp": (f"Hyper-SET's attention at a fixed step {FIXED} + the transformer's ReLU MLP",
                                    {"attention": {**HS_ATTN, "step_size": FIXED}, "mlp": "relu"}, None),
    "hs_sigmoid_attention+relu_mlp": ("Hyper-SET's sigmoid attention (step-size network) + the ReLU MLP",
                                      {"attention": {**HS_ATTN, "energy": "sigmoid"}, "mlp": "relu"}, None),
    "llama_attention+hs_ff": ("the transformer's attention + Hyper-SET's feed-forward (its own step-size network)",
                              {"attention": LLAMA, "mlp": {**HS_FF, "step_size": {"kind": "network"}}}, None),
    "llama_attention+hs_ff_fixed": (f"the transformer's attention + Hyper-SET's feed-forward at a fixed step {FIXED}",
                                    {"attention": LLAMA, "mlp": {**HS_FF, "step_size": FIXED}}, None),
    "probe_centred_hyperset": (
        "probe: Hyper-SET, the default but for the bi-softmax weights minus their uniform part (− 2/N)",
        {"attention": HS_ATTN, "mlp": HS_FF}, "centred"),
    "probe_centred_hyperset_fixed": (
        f"probe: the same with fixed step sizes {FIXED}",
        {"attention": {**HS_ATTN, "step_size": FIXED}, "mlp": {**HS_FF, "step_size": FIXED}}, "centred"),
    "probe_untied_scores+relu_mlp": (
        f"probe: Hyper-SET's attention at a fixed step {FIXED}, its scores from a second projection W_S "
        "(S = β RMSNorm(W_Sᵀx)ᵀ RMSNorm(W_Sᵀx), still symmetric; values and read-out through W), + the ReLU MLP",
        {"attention": {**HS_ATTN, "step_size": FIXED}, "mlp": "relu"}, "untied"),
    "probe_untied_scores_hyperset": (
        "probe: Hyper-SET, the default but for the scores from a second projection W_S (as above)",
        {"attention": HS_ATTN, "mlp": HS_FF}, "untied"),
    "probe_unnormalised_exp_hyperset": (
        "probe: Hyper-SET, the default but for the bi-softmax weights without their normalisers "
        "(exp(S_ij)/N + exp(S_ji)/N: the weights' shape kept, the normalisation dropped)",
        {"attention": HS_ATTN, "mlp": HS_FF}, "unnormalised"),
    "probe_normalised_sigmoid_hyperset": (
        "probe: Hyper-SET with the sigmoid energy's weights σ(1 − σ)(S) normalised to sum 1 per row "
        "(the shape kept, a softmax's normalisation added)",
        {"attention": {**HS_ATTN, "energy": "sigmoid"}, "mlp": HS_FF}, "normalised"),
    "probe_centred_bisoftmax+relu_mlp": (
        f"probe: Hyper-SET's attention at a fixed step {FIXED}, bi-softmax weights minus their uniform part "
        "(− 2/N), + the ReLU MLP", {"attention": {**HS_ATTN, "step_size": FIXED}, "mlp": "relu"}, "centred"),
    "probe_bisoftmax+relu_mlp": (
        "probe control: the same patched operator without the centring (the plain bi-softmax, materialised)",
        {"attention": {**HS_ATTN, "step_size": FIXED}, "mlp": "relu"}, "plain"),
}


def _untied_init(orig):
    """The energy's __init__ plus a second projection W_S for the scores (a probe: the model's initialisation
    then draws it like every Linear)."""
    def init(self, dim, heads, head_dim=None, **kw):
        orig(self, dim, heads, head_dim, **kw)
        self.score_proj = torch.nn.Linear(dim, self.heads * self.head_dim, bias=False)
    return init


def _scores(self, st) -> torch.Tensor:
    """β Q Kᵀ of the state: (B, H, N, N)."""
    return torch.einsum("bhid,bhjd->bhij", st.q, st.k) * self.beta


def _untied_scores(self, st) -> torch.Tensor:
    """β UUᵀ with U = RMSNorm(W_Sᵀ x), the second projection's: (B, H, N, N)."""
    z = self.score_proj(st.context).unflatten(-1, (self.heads, self.head_dim)).transpose(1, 2)  # (B, H, N, p)
    u = self._norm(z, 0)
    return torch.einsum("bhid,bhjd->bhij", u, u) * self.beta


def _bisoftmax(s: torch.Tensor) -> torch.Tensor:
    return torch.softmax(s, -1) + torch.softmax(s, -2)


def _centred(s: torch.Tensor) -> torch.Tensor:
    return _bisoftmax(s) - 2.0 / s.shape[-1]


def _unnormalised(s: torch.Tensor) -> torch.Tensor:
    a = torch.exp(s) / s.shape[-1]
    return a + a.transpose(-1, -2)


def _operator(weights, scores=_scores):
    """A patched bi-softmax operator: ``weights(scores(self, st))`` times V, materialised (− it with ``negate``)."""
    def operator(self, st, negate: bool = False):
        y = torch.einsum("bhij,bhjd->bhid", weights(scores(self, st)), st.v)  # (B, H, N, p)
        return -y if negate else y
    return operator


def _normalised_sigmoid_operator(self, st):
    """The sigmoid energy's update with its weights σ(1 − σ)(S) normalised to sum 1 over each row."""
    s = _scores(self, st)
    a = torch.sigmoid(s) * torch.sigmoid(-s)
    return torch.einsum("bhij,bhjd->bhid", a / a.sum(-1, keepdim=True), st.v)


def _probe(probe: str | None):
    """The patch a probe applies to the energy (a no-op context without one)."""
    from energyformer.energies.hyperspherical import BiSoftmaxAttentionEnergy as Bi
    from energyformer.energies.hyperspherical_alt import SigmoidAttentionEnergy

    patches = {
        "plain": lambda: mock.patch.object(Bi, "operator", _operator(_bisoftmax)),
        "centred": lambda: mock.patch.object(Bi, "operator", _operator(_centred)),
        "unnormalised": lambda: mock.patch.object(Bi, "operator", _operator(_unnormalised)),
        "untied": lambda: mock.patch.multiple(Bi, __init__=_untied_init(Bi.__init__),
                                              operator=_operator(_bisoftmax, _untied_scores)),
        "normalised": lambda: mock.patch.object(SigmoidAttentionEnergy, "operator", _normalised_sigmoid_operator),
    }
    return contextlib.nullcontext() if probe is None else patches[probe]()


def run_one(job: tuple[str, int, int, int, int]) -> dict:
    """Train one (variant, seed, steps, d, L); returns its record."""
    name, seed, steps, dim, iterations = job
    _, block, probe = VARIANTS[name]
    t0 = time.perf_counter()
    with _probe(probe):
        losses = recipe_losses(block, steps=steps, seed=seed, dim=dim, iterations=iterations)
    return {"variant": name, "seed": seed, "steps": steps, "dim": dim, "iterations": iterations,
            "last50": round(last50(losses), 5),
            "left_ln9": left_ln9(losses), "means25": [round(sum(losses[i:i + 25]) / len(losses[i:i + 25]), 5)
                                                      for i in range(0, len(losses), 25)],
            "seconds": round(time.perf_counter() - t0, 1),
            "date": f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC"}


def _run(r: dict) -> tuple[int, int, int]:
    """A record's run: (d, L, steps)."""
    return r["dim"], r["iterations"], r["steps"]


def measure(out: Path, names: list[str], seeds: list[int], steps: int, jobs: int, dim: int = DIM,
            iterations: int = ITERATIONS) -> list[dict]:
    """Run every (variant, seed), merge into ``out/results.json``; returns the new records."""
    todo = [(n, s, steps, dim, iterations) for n in names for s in seeds]
    new = []
    with ProcessPoolExecutor(max_workers=jobs) if jobs > 1 else contextlib.nullcontext() as pool:
        for rec in (pool.map(run_one, todo) if pool else map(run_one, todo)):  # one job: in this process
            print(f"{rec['variant']} seed {rec['seed']}: last 50 {rec['last50']:.4f} "
                  f"{'leaves' if rec['left_ln9'] else 'stays at'} ln 9 ({rec['seconds']:.0f} s)", flush=True)
            new.append(rec)
    path = out / "results.json"
    old = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {"records": []}
    key = {(r["variant"], r["seed"], *_run(r)) for r in new}
    records = [r for r in old["records"] if (r["variant"], r["seed"], *_run(r)) not in key] + new
    records.sort(key=lambda r: (_run(r), list(VARIANTS).index(r["variant"]) if r["variant"] in VARIANTS else 99,
                                r["seed"]))
    meta = {"recipe": {"dim": DIM, "heads": HEADS, "iterations": ITERATIONS, "batch": BATCH, "lr": LR},
            "machine": f"CPU ({platform.machine()}), 1 torch thread per run, {jobs} run(s) at once; "
                       f"torch {torch.__version__}; python {platform.python_version()}"}
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"meta": meta, "records": records}, indent=1) + "\n", encoding="utf-8")
    return new


#: a record's keys read by the page and whether each is an integer (else a number; left_ln9 a bool, means25 a list)
RECORD_NUMBERS = {"seed": True, "steps": True, "dim": True, "iterations": True, "last50": False}


def _checked_records(records, path: Path) -> list[dict]:
    """``records`` when each is a mapping with the keys the page reads, of the right types; else a DataError
    naming the file, the record and the key."""
    if not isinstance(records, list):
        raise DataError(f"{path}: 'records' is a {type(records).__name__}, expected a list of run records")
    for i, r in enumerate(records):
        where = f"{path}: records[{i}]"
        if not isinstance(r, dict):
            raise DataError(f"{where}: a {type(r).__name__}, expected a run record (a mapping)")
        require_keys(r, ("variant", *RECORD_NUMBERS, "left_ln9", "means25", "date"), where)
        for key, integer in RECORD_NUMBERS.items():
            number(r[key], f"{where}.{key}", integer=integer)
            if integer and not isinstance(r[key], int):
                raise DataError(f"{where}.{key}: {r[key]!r} is not an integer")
        if not isinstance(r["left_ln9"], bool):
            raise DataError(f"{where}.left_ln9: {r['left_ln9']!r} is not true or false")
        if not isinstance(r["means25"], list):
            raise DataError(f"{where}.means25: {r['means25']!r} is not a list of numbers")
        for j, v in enumerate(r["means25"]):
            number(v, f"{where}.means25[{j}]")
    return records


def render(folder: Path) -> str:
    """``folder/README.md`` from ``folder/results.json`` alone."""
    data = read_json(folder / "results.json")
    require_keys(data, ("meta", "records"), f"{folder / 'results.json'}")
    meta, records = data["meta"], _checked_records(data["records"], folder / "results.json")
    r = meta["recipe"]
    dates = sorted({x["date"] for x in records})
    when = dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}"
    lines = ["# What holds Hyper-SET on the ln 9 plateau: ablations on one CPU recipe (issue 20)", "",
             "Generated by `python scripts/hyperset_plateau_ablation.py --render-only DIR` from `results.json` "
             f"beside it (measured {when} on {meta['machine']}). Recipe "
             f"(`energyformer.analysis.plateau_recipe`, the one of `tests/blocks/test_hyperset_plateau.py`): "
             f"d {r['dim']}, {r['heads']} heads, one layer iterated L = {r['iterations']} times, batch {r['batch']}, "
             f"AdamW lr {r['lr']:g} constant, freshly augmented Sudoku boards (36-60 givens); the seed is the "
             "initialisation's, the data are the same for every seed; a section at another size changes d and L "
             "only. A variant **leaves ln 9** at a seed when "
             f"the mean loss of its last 50 steps is below ln 9 − {MARGIN} = {LN9 - MARGIN:.4f} (ln 9 = {LN9:.4f}: "
             "the loss of knowing nothing beyond the givens).", ""]
    for run in sorted({_run(x) for x in records}):
        recs = [x for x in records if _run(x) == run]
        lines += [f"## d {run[0]}, L {run[1]}, {run[2]} steps", "",
                  "| variant | what it is | seeds | leaves ln 9 | last-50 loss, median [min, max] |"
                  " 25-step means (seed of the median) |", "|---|---|---|---|---|---|"]
        for name in dict.fromkeys(x["variant"] for x in recs):
            mine = sorted((x for x in recs if x["variant"] == name), key=lambda x: x["last50"])
            vals = [x["last50"] for x in mine]
            mid = mine[(len(mine) - 1) // 2]
            what = VARIANTS[name][0] if name in VARIANTS else "(no longer defined)"
            seeds = ", ".join(str(x["seed"]) for x in sorted(mine, key=lambda x: x["seed"]))
            lines.append(f"| `{name}` | {what} | {seeds}"
                         f" | {sum(x['left_ln9'] for x in mine)} of {len(mine)} | {statistics.median(vals):.4f} "
                         f"[{min(vals):.4f}, {max(vals):.4f}] | {' '.join(f'{v:.4f}' for v in mid['means25'])} |")
        lines.append("")
    lines += _reading(records)
    return "\n".join(lines) + "\n"


def _reading(records: list[dict]) -> list[str]:
    """The page's reading: which variants leave ln 9 at every seed, which at none (from the records)."""
    out = ["## Reading", ""]
    for run in sorted({_run(x) for x in records}):
        by: dict[str, list[bool]] = {}
        for x in records:
            if _run(x) == run:
                by.setdefault(x["variant"], []).append(x["left_ln9"])
        every = [f"`{n}`" for n, v in by.items() if all(v)]
        none = [f"`{n}`" for n, v in by.items() if not any(v)]
        some = [f"`{n}`" for n, v in by.items() if any(v) and not all(v)]
        out.append(f"At d {run[0]}, L {run[1]}, {run[2]} steps, leave ln 9 at every seed: "
                   f"{', '.join(every) or 'none'}; at no seed: {', '.join(none) or 'none'}; "
                   f"at some seeds: {', '.join(some) or 'none'}.")
        out.append("")
    return out


def main(argv: list[str] | None = None) -> None:
    """The command line; a damaged input is one line on stderr naming the file (exit status 2)."""
    try:
        _main(argv)
    except UserError as err:
        raise SystemExit(f"error: {err}") from None


def _main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, help="folder of results.json and README.md")
    ap.add_argument("--render-only", type=Path, metavar="DIR",
                    help="measure nothing: DIR/README.md from DIR/results.json")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated; default: all")
    ap.add_argument("--seeds", default="0,1,2", help="initialisation seeds, comma-separated")
    ap.add_argument("--steps", type=int, default=STEPS)
    ap.add_argument("--dim", type=int, default=DIM, help=f"model width (the recipe's: {DIM}; {HEADS} heads)")
    ap.add_argument("--iterations", type=int, default=ITERATIONS, help=f"L (the recipe's: {ITERATIONS})")
    ap.add_argument("--jobs", type=int, default=2, help="runs at once (one torch thread each)")
    args = ap.parse_args(argv)
    if args.render_only:
        if not (args.render_only / "results.json").is_file():
            ap.error(f"--render-only {args.render_only}: no results.json there (write it with --out DIR first)")
        (args.render_only / "README.md").write_text(render(args.render_only), encoding="utf-8")
        print(args.render_only / "README.md")
        return
    if args.out is None:
        ap.error("give --out DIR (or --render-only DIR)")
    names = [n.strip() for n in args.variants.split(",") if n.strip()]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        ap.error(f"--variants: unknown {', '.join(unknown)}; allowed: {', '.join(VARIANTS)}")
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        ap.error(f"--seeds = {args.seeds!r}: allowed comma-separated integers")
    for key in ("steps", "jobs", "dim", "iterations"):
        if getattr(args, key) < 1:
            ap.error(f"--{key} = {getattr(args, key)}: must be at least 1")
    if args.dim % HEADS:
        ap.error(f"--dim = {args.dim}: must be a multiple of the recipe's {HEADS} heads")
    measure(args.out, names, seeds, args.steps, args.jobs, args.dim, args.iterations)
    (args.out / "README.md").write_text(render(args.out), encoding="utf-8")
    print(args.out / "README.md")


if __name__ == "__main__":
    sys.exit(main())
