"""The Hyper-SET images page (seed 002 §5.2-5.4), rendered from its folder's committed artifacts alone.

:func:`render_folder` writes ``README.md`` (and its figures) from ``results.json``, ``mim.md`` from
``mim.json`` (:mod:`.classification_mim`), and does the same in every subfolder that has them. It reads
nothing else — no run folders, no clock — so the ``.md`` pages are byte-for-byte functions of the
artifacts (the page contract of issue 22).

``results.json``: ``{"page": {...}, "<dataset>": {"runs": {name: row}}}``. A row is a run's
``result.json`` without its config: accuracies, parameters, the test ``confusion`` matrix, and for the
runs that record them ``depth`` (test-time depth curve), ``trajectory`` and ``stats`` (Fig. 5-6;
:mod:`.classification_records`). ``page``: ``notes`` (markdown paragraphs under the introduction),
``benchmark_markdown`` (the table of ``benchmarks/image_models.py``), ``noise`` (a declared noise band
from another page: ``{"values": {metric: band}, "source": text}``), ``missing_records`` (why runs of the
page carry no curve records, e.g. they were not rerun; one text or one per data set: shown where a
figure is not regenerated).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from .classification import per_class_markdown, plot_confusion
from .classification_claims import (
    TRADEOFF, accuracy_claims, claims_markdown, seed_noise, trajectory_claims, verdict_counts,
)
from .classification_report import fmt_params, plot_curves, table1, table4, table5, table_tradeoff

DATASET_NAMES = {"fashion_mnist": "Fashion-MNIST", "mnist": "MNIST", "digits": "digits"}
#: configs whose confusion matrix and per-class table the page shows
CONFUSION_FOR = ("hyperset", "transformer")

INTRO = (
    "Rendered by `energyformer reproduce hyperset-images` from this folder's `results.json` alone "
    "(`--report-only --out DIR` re-renders it); the paper's columns are quoted from its Tables 1, 2, 4 and 5. "
    "**The data sets differ**: the paper reports CIFAR-10/100 and ImageNet-100 after 200 epochs at widths "
    "384-896; we train on 28x28 grey Fashion-MNIST / MNIST for a few epochs at most (each data set's section "
    "says how many) at a quarter of those widths. Our numbers test the *direction* of the paper's claims at "
    "small scale; a claim about the paper's CIFAR / ImageNet numbers themselves is UNTESTABLE here. The "
    "column *trained on* names the device of each run.\n")

RULES = (
    "**How the verdicts are decided** (`energyformer.analysis.verdicts.compare`): a claim \"A > B\" HOLDS when "
    "our margin exceeds the noise band, DOES NOT HOLD when it is below minus the band, and is UNDECIDED in "
    "between; UNTESTABLE where a config was not run, a curve was not recorded, or the claim is about data "
    "we do not have. The noise band of an accuracy claim is the seed spread (max − min over seeds): the "
    "largest spread of the configs run with two seeds is declared as the band of every claim, because most "
    "configs have one seed (each section names where its band comes from); two configs are compared on the "
    "seeds both have. A trajectory claim (Fig. 5-6) compares the change of a statistic from t = 0 to the "
    "trained L with 0, its band the seed spread of that statistic. Parameter counts are exact (band 0).\n")


def _name(ds: str) -> str:
    return DATASET_NAMES.get(ds, ds)


def _noise(data: Mapping[str, Any], ds: str) -> tuple[dict[str, float], str]:
    """(declared noise per metric, where it comes from) for data set ``ds`` of a page."""
    own = seed_noise(data[ds]["runs"])
    if own:
        return own, f"seed spread, {_name(ds)}"
    for other, d in data.items():
        if other not in ("page", ds) and (n := seed_noise(d.get("runs", {}))):
            return n, f"seed spread of the {_name(other)} runs; {_name(ds)} has one seed per config"
    declared = data.get("page", {}).get("noise")
    if declared:
        return dict(declared["values"]), declared["source"]
    return {}, "no seed spread measured"


def _seeds_line(rows: Mapping[str, dict]) -> str:
    parts = []
    for name, r in rows.items():
        if "_seed" not in name or r.get("config_name") not in rows:
            continue
        base = rows[r["config_name"]]
        parts.append(f"{r['config_name']}: test {100 * r['test_accuracy']:.2f}% (seed {r['seed']}) vs "
                     f"{100 * base['test_accuracy']:.2f}% (seed {base['seed']})")
    return ("\nSecond seed: " + "; ".join(parts) + ". This spread is the noise band of the verdicts below.\n"
            if parts else "")


def _records_lines(rows: Mapping[str, dict]) -> str:
    """Which runs carry curve records, at which commit, and what a rerun replaced."""
    out = []
    for name, r in rows.items():
        if "trajectory" not in r and "replaces" not in r:
            continue
        what = "confusion matrix, depth curve, trajectory" if "trajectory" in r else "confusion matrix"
        line = f"* `{name}`: {what}"
        if r.get("git_commit"):
            line += f", trained at commit `{r['git_commit'][:7]}`"
        old = r.get("replaces")
        if old:
            line += (f"; a rerun with the same config and seed, replacing the earlier record wholly "
                     f"(its test accuracy {100 * old['test_accuracy']:.2f}%, validation "
                     f"{100 * old['val_accuracy']:.2f}%; now {100 * r['test_accuracy']:.2f}% / "
                     f"{100 * r['val_accuracy']:.2f}%)")
        out.append(line)
    if not out:
        return ""
    return ("\nRuns with recorded curves (every number of a row comes from that one run):\n\n"
            + "\n".join(out) + "\n")


def _class_table(r: dict) -> str:
    """Per-class accuracy from the committed ``class_acc`` when no confusion matrix was recorded."""
    lines = ["| class | accuracy (%) |", "|---|---:|"]
    lines += [f"| {c} | {100 * a:.1f} |" for c, a in zip(r["classes"], r["class_acc"])]
    return "\n".join(lines)


def _confusion_sections(rows: Mapping[str, dict], ds: str, folder: Path, why: str) -> list[str]:
    text = []
    for name in CONFUSION_FOR:
        r = rows.get(name)
        if r is None:
            continue
        if r.get("confusion") is not None:
            cm = torch.tensor(r["confusion"])
            plot_confusion(cm, r["classes"], folder / f"confusion_{ds}_{name}.png",
                           f"{name} on {_name(ds)} test: {100 * r['test_accuracy']:.2f}%")
            text.append(f"\n### Per-class test accuracy: {name}\n\n![confusion](confusion_{ds}_{name}.png)\n\n"
                        + per_class_markdown(cm, r["classes"]))
        elif r.get("class_acc"):
            text.append(f"\n### Per-class test accuracy: {name}\n\n_The confusion matrix of this run is not in "
                        f"the committed record (only its per-class accuracy); the figure is not regenerated{why}._\n\n"
                        + _class_table(r))
    return text


def _depth_section(rows: Mapping[str, dict], ds: str, folder: Path, why: str) -> list[str]:
    curves = {k: r["depth"] for k, r in rows.items() if r.get("depth")}
    if not curves:
        return ["\n### Accuracy over test-time iterations\n\n_No run of this data set recorded a depth curve; "
                f"the figure is not regenerated{why}._"]
    L = rows[next(iter(curves))]["iterations"]
    examples = next(iter(curves.values())).get("examples")
    plot_curves({k: dict(zip(c["iterations"], c["accuracy"])) for k, c in curves.items()},
                folder / f"depth_{ds}.png", xlabel="iterations at test time", ylabel="validation accuracy (%)",
                title=f"{_name(ds)}: test-time depth", vline=L)
    lines = [f"* {k}: " + ", ".join(f"L={n}: {v:.1f}%" for n, v in zip(c["iterations"], c["accuracy"]))
             for k, c in curves.items()]
    return [f"\n### Accuracy over test-time iterations (validation, {examples:,} images; no claim of the "
            f"paper for images)\n\n![depth](depth_{ds}.png)\n\n" + "\n".join(lines)]


def _trajectory_section(rows: Mapping[str, dict], ds: str, folder: Path, why: str) -> list[str]:
    from .hyperset import plot_energies, plot_rank_angle

    head = "\n### Energy, effective rank and average angle over iterations (Fig. 5-6)\n"
    trajs = {k: r["trajectory"] for k, r in rows.items() if r.get("trajectory")}
    if "hyperset" not in trajs:
        return [head, "_No Hyper-SET trajectory is recorded for this data set: Fig. 5-6 are not regenerated and "
                      f"their claims are UNTESTABLE{why}._"]
    L = rows["hyperset"]["iterations"]
    tr = trajs["hyperset"]
    plot_energies(tr, L, folder / f"energy_{ds}.png",
                  f"Hyper-SET on {_name(ds)}: energy per iteration (trained with {L})")
    plot_rank_angle(trajs, L, folder / f"rank_angle_{ds}.png",
                    f"{_name(ds)} validation: subspace geometry per iteration")
    lines = [head, f"![energies](energy_{ds}.png)\n\n![rank and angle](rank_angle_{ds}.png)\n",
             f"Trajectories on {tr['images']} validation images to t = {tr['iterations']} (2L); the energy figure "
             "shows the run `hyperset`, the rank and angle figure every recorded run; the statistics below are at "
             "the trained L (their verdicts are in the table above)."]
    for name, t in trajs.items():
        s = rows[name]["stats"]
        mean = lambda v: sum(v) / len(v)  # noqa: E731
        e = t["e_total"]
        if e[0] is not None:
            steps = [u for u in range(1, L + 1) if e[u] > e[u - 1]]
            lines.append(f"* `{name}`: E_ATTN + E_FF per image at t = 0, {L // 2}, {L}, {2 * L}: {e[0]:.1f}, "
                         f"{e[L // 2]:.1f}, {e[L]:.1f}, {e[2 * L]:.1f}; it rises at {s['rises']} of {L} steps"
                         + (f" (t = {', '.join(map(str, steps))})" if steps else "") + ".")
        lines.append(f"* `{name}`: mean effective rank per subspace {mean(t['eff_rank'][0]):.2f} at t = 0, "
                     f"{mean(t['eff_rank'][L]):.2f} at t = {L}; mean average angle {mean(t['angle'][0]):.1f}° → "
                     f"{mean(t['angle'][L]):.1f}°; full-space effective rank {t['full_rank'][0]:.2f} → "
                     f"{t['full_rank'][L]:.2f}.")
    return ["\n".join(lines[:3]) + "\n", "\n".join(lines[3:])]


def dataset_section(data: Mapping[str, Any], ds: str, folder: Path) -> str:
    """One data set's section: training, tables, the verdict table, curves and figures."""
    rows = {k: v for k, v in data[ds]["runs"].items()}
    main = {k: v for k, v in rows.items() if "_seed" not in k}
    dn = _name(ds)
    any_row = next(iter(main.values()))
    epochs = any_row["steps"] * any_row["batch_size"] / any_row["train_examples"]
    text = [f"\n## {dn}\n\nTraining: {any_row['steps']} steps of {any_row['batch_size']} images "
            f"({any_row['train_examples']} training images, {epochs:.1f} epochs), test on the official test split.\n"]
    by_dev: dict[str, list[str]] = {}
    for k, r in rows.items():
        by_dev.setdefault(r.get("device", "?"), []).append(k)
    text.append("Trained on: " + "; ".join(f"**{d}**: {', '.join(sorted(v))}" for d, v in sorted(by_dev.items()))
                + ".\n")
    text.append(_records_lines(rows))
    text.append("### Table 1 (single-layer recurrent-depth models) and Table 2's 12-layer transformer\n")
    text.append(table1(main, dn))
    text.append(_seeds_line(rows))
    text.append("\n### Table 4 (alternative energies and fixed step sizes)\n")
    text.append(table4(main, dn))
    text.append("\n### Table 5 (depth-wise LoRA; the paper's column is ImageNet-100)\n")
    text.append(table5(main, dn))
    if any(h in main or t in main for _, _, h, t in TRADEOFF[1:]):
        text.append("\n### Fig. 4 (layer-iteration trade-off at depth 12; the paper gives a figure, CIFAR-100)\n")
        text.append(table_tradeoff(main, dn, {
            "Hyper-SET": [(la, it, h) for la, it, h, _ in TRADEOFF],
            "Transformer": [(la, it, t) for la, it, _, t in TRADEOFF] + [(12, 1, "transformer_12layer")]}))
    noise, src = _noise(data, ds)
    reason = data.get("page", {}).get("missing_records")
    reason = reason.get(ds) if isinstance(reason, dict) else reason
    why = " (see *Curves not recorded* above)" if reason else ""
    if reason:
        text.insert(3, f"\n**Curves not recorded**: {reason}.\n")
    missing = (f"no Hyper-SET trajectory is recorded for this data set, the figure is not regenerated{why}"
               if not rows.get("hyperset", {}).get("trajectory") else "")
    claims = accuracy_claims(rows, noise, src) + trajectory_claims(rows, noise, src, missing=missing)
    text.append(f"\n### Every claim of Tables 1, 2, 4, 5 and Fig. 4-6, with its verdict ({verdict_counts(claims)})\n")
    text.append(f"Test accuracy in %; several values are the seeds of one config. Noise source: {src}.\n")
    text.append(claims_markdown(claims))
    text += _depth_section(rows, ds, folder, why)
    text += _confusion_sections(main, ds, folder, why)
    text += _trajectory_section(rows, ds, folder, why)
    return "\n".join(text)


def render_page(data: Mapping[str, Any], folder: Path, title: str) -> str:
    """README.md of one page folder from its ``results.json`` data (figures written beside it)."""
    page = data.get("page", {})
    text = [f"# {title}\n", INTRO, *(f"{n}\n" for n in page.get("notes", [])), RULES]
    for ds in (k for k in data if k != "page"):
        if data[ds].get("runs"):
            text.append(dataset_section(data, ds, folder))
    bench = page.get("benchmark_markdown")
    text.append("\n## Throughput and memory (`benchmarks/image_models.py`)\n" if bench else
                "\n## Throughput and memory\n\n_not run: `python benchmarks/image_models.py --out "
                "OUT/benchmark_cpu.md` writes the table this section includes._")
    if bench:
        text.append(bench)
    body = "\n".join(text).rstrip("\n") + "\n"
    (folder / "README.md").write_text(body)
    return body


TITLE = "Hyper-SET on images at CPU scale (seed 002 §5.2)"


def render_folder(folder: Path, recurse: bool = True) -> list[Path]:
    """Re-render every page of ``folder`` from its artifacts (module docstring); returns the pages written."""
    from .classification_mim import render_mim

    folder = Path(folder)
    written = []
    if (p := folder / "results.json").exists():
        render_page(json.loads(p.read_text()), folder, TITLE)
        written.append(folder / "README.md")
    if (p := folder / "mim.json").exists():
        render_mim(json.loads(p.read_text()), folder)
        written.append(folder / "mim.md")
    if recurse:
        for sub in sorted(d for d in folder.iterdir() if d.is_dir()):
            written += render_folder(sub)
    return written


__all__ = ["render_folder", "render_page", "dataset_section", "DATASET_NAMES", "fmt_params"]
