"""``README.md`` of a folder of ``benchmarks/hyperset_gpu.py`` outputs (``docs/results/hyperset/gpu_h100/``):
issue 20's speed target with its verdict, from the committed verbatim outputs only (issue 22's page contract).

Every ``gpu_throughput*.md`` in the folder is one run (the commit that ran is the last ``_`` part of the file
name; the header's may be the device copy's stale HEAD). Its ``### <precision>, <mode>`` tables give per model
the tokens/s ratio to the looped transformer's in the same interleaved run (median [min, max]); rows ending in
", CUDA graph" ran each step as one graph against the transformer's graphed step, and a run whose setup line
names torch.compile compiled every other model (its CUDA-graph rows ran eager, as in any run). "Hyper-SET" is
the library's default at the commit that ran. Runs written before the header carried a date are *undated*: the
newest dated run with a row decides; without one, the undated runs decide only where they all agree. Called by
``python benchmarks/hyperset_gpu.py --render-only DIR``; measures nothing.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _page  # noqa: E402  (sibling scripts: the pages' writer, and gpu_lm's page for the same rule and rows)
from _gpu_lm_page import GRAPH, Target, run_name, table_row, verdict  # noqa: E402

_DEVICE = re.compile(r"^device: (.*?); .*?(?:; (\d{4}-\d\d-\d\d \d\d:\d\d UTC))?\s*$")
_SECTION = re.compile(r"^### (\w+)(?: autocast)?, (\w+)\s*$")
MODEL = "Hyper-SET"
TARGETS = ((Target("Hyper-SET ≥ 1.0× the looped transformer's training tokens/s (d 768, L 24, bf16 autocast)",
                   MODEL, 0, 1.0), False),
           (Target("the same, each step one CUDA graph", MODEL, 0, 1.0, suffix=GRAPH), False),
           (Target("the same, every model under torch.compile", MODEL, 0, 1.0), True))


def parse(path: Path) -> dict:
    """{'file', 'commit', 'device', 'date' (None: undated), 'compiled', 'rows': {(precision, mode, model): row}}
    with rows as :func:`_gpu_lm_page.parse`'s (median, min, max, None, None | what stopped it)"""
    lines = _page.read_input(path).splitlines()
    head = next((i for i, line in enumerate(lines) if _DEVICE.match(line)), None)
    if head is None or head + 1 >= len(lines):
        raise SystemExit(f"{path}: no 'device: …' header line (is it a hyperset_gpu.py output?)")
    m = _DEVICE.match(lines[head])
    run = {"file": path.name, "commit": path.stem.rsplit("_", 1)[-1], "device": m.group(1), "date": m.group(2),
           "compiled": "torch.compile" in lines[head + 1], "rows": {}}
    section = None
    for n, line in enumerate(lines, 1):
        if s := _SECTION.match(line):
            section = s.groups()
        elif section and line.startswith("| ") and not line.startswith(("| model", "|---")):
            model, row = table_row(path, n, line, 3, "hyperset_gpu.py")
            run["rows"][(*section, model)] = row[:3] + (None, None) if row[4] is None else row  # peak GiB: no ratio
    return run


def decide(seen: list[tuple[dict, tuple]], t: Target) -> tuple[str, str, str]:
    """(run, measured, verdict) of the target: the newest dated run with the row, else the undated ones"""
    dated = [(r, row) for r, row in seen if r["date"]]
    if dated:
        r, row = dated[-1]
        return (run_name(r), *verdict(t, row))
    each = [verdict(t, row) for _, row in seen]
    runs = ", ".join(run_name(r) for r, _ in seen)
    verdicts = {v for _, v in each}
    return runs, "; ".join(m for m, _ in each), verdicts.pop() if len(verdicts) == 1 else \
        "UNDECIDED (undated runs disagree)"


def render(folder: Path) -> str:
    files = sorted(folder.glob("gpu_throughput*.md"))
    if not files:
        raise SystemExit(f"{folder}: no gpu_throughput*.md (the committed benchmarks/hyperset_gpu.py outputs this "
                         "page is made from)")
    runs = sorted((parse(f) for f in files), key=lambda r: (r["date"] or "", r["file"]))
    out = ["# Hyper-SET on one GPU: issue 20's speed target", "",
           "Rendered by `python benchmarks/hyperset_gpu.py --render-only DIR` from the verbatim "
           "`benchmarks/hyperset_gpu.py` outputs committed beside this page; measures nothing. Ratio: Hyper-SET's "
           "training tokens/s over the looped transformer's in the same interleaved run, median [min, max] over the "
           "repeats; \"Hyper-SET\" is the library's default at the commit that ran. Verdict rule: MET when the "
           "median passes the target (\"on the median\" when the minimum does not), UNDECIDED when the median "
           "equals it at the table's two decimals, else NOT MET. The newest dated "
           "run with the row decides; runs from before the header carried a date decide only where they all "
           "agree. Every run is listed below.", "",
           "| target (issue 20) | run | measured | verdict |", "|---|---|---|---|"]
    detail = ["", "## Every run", "", "| target | run | measured | verdict |", "|---|---|---|---|"]
    for t, compiled in TARGETS:
        seen = [(r, r["rows"][("bf16", "training", t.model + t.suffix)]) for r in runs
                if (r["compiled"] == compiled or t.suffix == GRAPH)  # a compiled run's graphed rows ran eager
                and ("bf16", "training", t.model + t.suffix) in r["rows"]]
        if not seen:
            out.append(f"| {t.text} | — | not measured | UNTESTABLE (no run has the row) |")
            continue
        out.append(f"| {t.text} | {' | '.join(decide(seen, t))} |")
        detail += [f"| {t.text} | {run_name(r)} | {' | '.join(verdict(t, row))} |" for r, row in seen]
    out += detail + ["", "## Runs", "", "| file | code (commit) | device | date | torch.compile |",
                     "|---|---|---|---|---|"]
    out += [f"| [{r['file']}]({r['file']}) | {r['commit']} | {r['device']} | {r['date'] or 'undated'} | "
            f"{'yes' if r['compiled'] else 'no'} |" for r in runs]
    return "\n".join(out) + "\n"


def write(folder: Path) -> Path:
    _page.write_page(folder, "README.md", render(folder))
    return folder / "README.md"
