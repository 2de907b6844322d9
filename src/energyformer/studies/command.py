"""``energyformer reproduce NAME`` for a study (``studies/NAME.yaml``, or ``PATH.yaml``: a study file of your own):
run it, then render its pages.

    energyformer reproduce NAME|PATH.yaml [--scale cpu|gpu] [--seeds S ...] [--jobs N] [--set KEY=VALUE ...]
                                [--only AXIS=LABEL[,LABEL...] ...] [--out DIR] [--runs DIR] [--report-only [--check]]

``--out`` is the page folder (default: the study's ``page``): the records of a scale are
``OUT/<scale>/results.json``, its page ``OUT/<scale>/README.md`` (+ figures) and ``OUT/README.md`` the
index over the scales. ``--report-only`` trains nothing and re-renders every page of OUT from the
records committed there, reading nothing else (no run directories, no clock): the page contract of
``energyformer report``; with ``--check`` it writes nothing and exits 1 when a page differs (:func:`check_pages`).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ..utils.cliargs import count, seed
from ..utils.paths import check_writable_dir
from ..utils.validate import ConfigError
from .claims import ClaimRow, evaluate
from .page import render as render_page
from .preflight import check_study_file_name, default_runs, study_arg, study_file, study_origin
from .runner import hook, is_migrated, load_results, outdated_text, run_study
from .spec import StudySpec, load_study


def parse_only(items: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for it in items:
        axis, eq, labels = it.partition("=")
        if not eq or not axis or not labels:
            raise ConfigError(f"--only {it!r}: give AXIS=LABEL[,LABEL...]")
        out.setdefault(axis, []).extend(labels.split(","))
    return out


def command_line(name: str, spec: StudySpec, scale: str) -> str:
    """the command that runs ``scale`` into the index's folder, named DIR on the page (the same page text wherever
    the folder is: the committed one, a user's --out, or report's temporary copy)"""
    return f"energyformer reproduce {study_arg(name)} --scale {scale} --out DIR"


def render_index(name: str, spec: StudySpec, out: Path, rendered: dict[str, list[ClaimRow]]) -> str:
    """``OUT/README.md``: the study, one line per scale (its page or "not run yet" with the command),
    and every claim's verdict at each scale run."""
    lines = [f"# {spec.title}", "",
             f"Seed `{spec.paper.seed}`, {spec.paper.section}. Study: `{study_file(name)}` (configs × grid × "
             "seeds × scales, metrics and claims with their rules; format in `docs/studies.md`). Every page "
             f"here is generated from the committed `results.json` by `energyformer reproduce {study_arg(name)} "
             f"--report-only --out DIR` (DIR: this folder; the study's own is `{spec.page}`).", "", "## Scales", ""]
    for scale, sc in spec.scales.items():
        note = f" {sc.note}" if sc.note else ""
        if scale in rendered:
            data = load_results(out / scale / "results.json", name, scale)
            hw = sorted({r.get("hardware", "unrecorded hardware") for r in data["runs"].values()})
            counts: dict[str, int] = {}
            for row in rendered[scale]:
                counts[str(row.outcome.verdict)] = counts.get(str(row.outcome.verdict), 0) + 1
            verdicts = ", ".join(f"{n} {v}" for v, n in counts.items()) or "no claims"
            old = sum(map(is_migrated, data["runs"].values()))
            if old:
                preset = f" ({sc.note.rstrip('. ')})" if sc.note else ""
                note = (f" {old} of the runs were recorded before this study by the old program (their settings "
                        f"are on the page); the study's {scale} preset{preset} has not been run through the study "
                        f"runner: `{command_line(name, spec, scale)}` would retrain them.")
            stale = outdated_text(spec, scale, data["runs"])
            lines.append(f"* **{scale}** — [{scale}/README.md]({scale}/README.md): {len(data['runs'])} runs on "
                         f"{'; '.join(hw)}; claims: {verdicts}.{note}" + (f" {stale}" if stale else ""))
        else:
            lines.append(f"* **{scale}** — not run yet: `{command_line(name, spec, scale)}`.{note}")
    if rendered:
        scales = list(rendered)
        lines += ["", "## Verdicts by scale", "", "| claim | " + " | ".join(scales) + " |",
                  "|---|" + ":---:|" * len(scales)]
        keys: list[tuple[str, str | None]] = []
        text: dict[tuple[str, str | None], str] = {}
        for rows in rendered.values():
            for r in rows:
                k = (r.claim.id, r.label)
                if k not in text:
                    keys.append(k)
                    text[k] = f"**{r.claim.id}** {r.claim.text}" + (f" ({r.claim.per} = {r.label})" if r.label else "")
        for k in keys:
            cells = [next((str(r.outcome.verdict) for r in rendered[s] if (r.claim.id, r.label) == k), "–")
                     for s in scales]
            lines.append(f"| {text[k]} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def render_pages(name: str, spec: StudySpec, out: Path) -> list[Path]:
    """Re-render every scale page with records in ``out`` and the index; returns the .md files written."""
    written, rendered = [], {}
    for scale in spec.scales:
        path = out / scale / "results.json"
        if not path.exists():
            continue
        data = load_results(path, name, scale)
        rows = evaluate(spec, data["runs"], data.get("probes", {}), scale)
        (hook(spec.render) if spec.render else render_page)(out / scale, spec, name, scale, data, rows)
        rendered[scale] = rows
        written.append(out / scale / "README.md")
    (out / "README.md").write_text(render_index(name, spec, out, rendered))
    return [*written, out / "README.md"]


def default_scale(spec: StudySpec) -> str | None:
    return "cpu" if "cpu" in spec.scales else None


def parser(name: str, spec: StudySpec) -> argparse.ArgumentParser:
    """``energyformer reproduce NAME``'s options for the study ``spec`` (its scales and axes in the help)."""
    p = argparse.ArgumentParser(prog=f"energyformer reproduce {name}", description=spec.title)
    p.add_argument("--scale", choices=list(spec.scales), default=None, help=f"(default {default_scale(spec)})")
    p.add_argument("--seeds", type=seed, nargs="+", help="seeds (default: the scale's or the study's)")
    p.add_argument("--jobs", type=count, default=None, help="runs trained at once, each in its own process "
                   "(default 1)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="dotted override applied to every run (repeatable)")
    p.add_argument("--only", action="append", default=[], metavar="AXIS=LABEL[,LABEL]",
                   help=f"run only these grid cells (axes: {', '.join(spec.runs.axes) or 'none'})")
    p.add_argument("--out", default=spec.page, help=f"page folder (default {spec.page})")
    p.add_argument("--runs", default=None, help=f"run directories (default {default_runs(name, 'SCALE')})")
    p.add_argument("--report-only", action="store_true",
                   help="train nothing; re-render OUT's pages from the records committed in OUT")
    p.add_argument("--check", action="store_true",
                   help="with --report-only: write nothing; exit 1 when a page in OUT differs from its render (a hand "
                        "edit, or pages older than the records or the code); figures are not compared")
    return p


def check_pages(name: str, spec: StudySpec, out: Path) -> int:
    """``--report-only --check``: OUT's pages rendered into a temporary copy of OUT and compared, file by file, with
    OUT's own (``energyformer report --check`` for a study of your own, whose pages ``report`` does not know: a hand
    edit of a verdict went unnoticed; probe AZ). Prints ``ok`` / ``DIFFERS`` per page (with a unified diff);
    returns 1 when any differs."""
    import difflib
    import shutil
    import tempfile

    status = 0
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "out"
        shutil.copytree(out, copy)
        here = name  # a user's file as the copy's records name it (relative to their folder: records.load_results)
        if study_origin(name) is not None:
            here = str(copy / "_" / os.path.relpath(study_origin(name), (out / "_").resolve()))
        for f in render_pages(here, spec, copy):
            rel = f.relative_to(copy)
            have = (out / rel).read_text() if (out / rel).exists() else ""
            want = f.read_text()
            if have == want:
                print(f"ok       {out / rel}")
                continue
            status = 1
            print(f"DIFFERS  {out / rel}: not what the records render (`--report-only` without --check rewrites it)")
            diff = difflib.unified_diff(have.splitlines(), want.splitlines(), "committed", "rendered", lineterm="", n=1)
            print("\n".join(list(diff)[:40]))
    return status


def main(name: str, argv: list[str] | None = None) -> int:
    check_study_file_name(name)
    spec = load_study(name)
    a = parser(name, spec).parse_args(argv)
    if a.check and not a.report_only:
        raise ConfigError("--check compares OUT's pages with their render and trains nothing: give it with "
                          "--report-only")
    if a.report_only:  # it renders every scale's records as they are: options of a run would be ignored
        given = [opt for opt, v in (("--scale", a.scale), ("--seeds", a.seeds), ("--jobs", a.jobs),
                                    ("--set", a.sets), ("--only", a.only), ("--runs", a.runs)) if v]
        if given:
            raise ConfigError(f"--report-only trains nothing and renders every scale's records in OUT as they are: "
                              f"{', '.join(given)} would be ignored (allowed with it: --out)")
    a.scale, a.jobs = a.scale or default_scale(spec), a.jobs or 1
    out = Path(a.out)
    if not a.report_only and a.scale == "gpu" and not any(s.startswith("train.device=") for s in a.sets):
        import torch

        if not torch.cuda.is_available():  # the gpu presets train for hours on a CPU
            raise ConfigError("--scale gpu: the preset is sized for one GPU and no CUDA device is available here; "
                              "run it on a GPU machine, use --scale cpu, or force it with --set train.device=cpu")
    if not a.report_only:  # both folders writable before any run starts
        runs = check_writable_dir(a.runs if a.runs else default_runs(name, a.scale), "--runs")
        check_writable_dir(out, "--out")
        run_study(spec, name, a.scale, out / a.scale, runs, jobs=a.jobs, seeds=a.seeds, only=parse_only(a.only),
                  sets=a.sets)
    elif not out.is_dir():
        raise ConfigError(f"--out {a.out}: no such folder (give a page folder holding <scale>/results.json)")
    else:  # the records OUT holds are this study's (errors name OUT's files, not --check's copy), and there are some
        held = [s for s in spec.scales if (out / s / "results.json").exists()]
        index = out / "README.md"  # an unrelated README.md became a "not run yet" index (probe BA); this study's not
        if not held and index.exists() and index.read_text().split("\n", 1)[0] != f"# {spec.title}":
            raise ConfigError(f"--out {a.out}: holds no records of this study (<scale>/results.json for scale "
                              f"{' or '.join(spec.scales)}) and a README.md it would overwrite: give the study's page "
                              "folder")
        for s in held:
            load_results(out / s / "results.json", name, s)
        if a.check:
            return check_pages(name, spec, out)
        check_writable_dir(out, "--out")
    for f in render_pages(name, spec, out):
        print(f"wrote {f}")
    return 0
