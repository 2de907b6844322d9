"""``README.md`` of a folder of ``benchmarks/gpu_lm.py`` outputs (``docs/results/cem/gpu_h100/``): issue 21's
targets with their verdicts, from the committed verbatim outputs only (issue 22's page contract).

Every ``gpu_lm*.md`` in the folder is one run: its header names the device and the date (its ``commit`` is the
device copy's git HEAD, which may be stale: the code that ran is the commit in the file name, ``gpu_lm_<commit>.md``
or ``gpu_lm_<label>_<commit>.md``), and each ``### N = …, B = …, <precision>, <mode>`` table gives per model
the tokens/s ratio to Llama's in the same interleaved run (median [min, max]) and the peak step memory ratio.
Rows ending in ", CUDA graph" ran each step as one CUDA graph, against Llama's graphed step. A run whose setup
line names torch.compile (``gpu_lm.py --compile MODE``) compiled every other row, its Llama baseline too: those
rows count for the targets under train.compile (the model name plus ``COMPILED``), never for the eager ones.
Called by ``python benchmarks/gpu_lm.py --render-only DIR``; measures nothing.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _page  # noqa: E402  (a sibling script: the benchmark pages' writer)

AUTO, PAPER, GRAPH = "full CEM T=1 (auto path)", "paper configuration (T=2, D+LR)", ", CUDA graph"
COMPILED = ", torch.compile"  # a compiled run's rows other than the CUDA-graph ones (train.compile's step)
_HEAD = re.compile(r"^device: (.*?); .*?(\d{4}-\d\d-\d\d \d\d:\d\d UTC)\s*$")
_SECTION = re.compile(r"^### N = (\d+), B = (\d+), (\w+)(?: autocast)?, (\w+)\s*$")
_RATIO = re.compile(r"^([\d.]+) \[([\d.]+), ([\d.]+)\]$")


class Target(NamedTuple):
    """One of issue 21's targets: ``model`` (with ``suffix``) at sequence length ``n``, bf16 training;
    ``memory``: the peak step memory ratio must be at most ``bound``, else the tokens/s ratio at least it."""

    text: str
    model: str
    n: int
    bound: float
    memory: bool = False
    suffix: str = ""


_HOW = {"": "", GRAPH: " (CUDA graphs)", COMPILED: " (train.compile)"}
TARGETS = tuple(
    t for g in ("", GRAPH, COMPILED) for t in (
        Target(f"full CEM T=1 ≥ 0.8× Llama's training tokens/s at N = 1,024{_HOW[g]}", AUTO, 1024, 0.8, suffix=g),
        Target(f"full CEM T=1 ≥ 0.7× Llama's training tokens/s at N = 4,096{_HOW[g]}", AUTO, 4096, 0.7, suffix=g))) + (
    Target("full CEM T=1 peak training memory ≤ 1.3× Llama's at N = 1,024", AUTO, 1024, 1.3, memory=True),
    Target("full CEM T=1 peak training memory ≤ 1.3× Llama's at N = 4,096", AUTO, 4096, 1.3, memory=True),
    Target("paper configuration (T=2, D+LR) ≥ 0.35× Llama's training tokens/s at N = 1,024", PAPER, 1024, 0.35),
)


def table_row(path: Path, n: int, line: str, ratio_col: int, what: str) -> tuple[str, tuple]:
    """(model, row) of a benchmark table's line ``n``: row (median, min, max, memory ratio or None, None) where
    cell ``ratio_col`` holds a ratio, else (None, None, None, None, what stopped it: the cell before it, where
    the benchmark writes OOM or the error); memory: the last cell. Any other line is a one-line error."""
    cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
    if len(cells) != 5:
        raise SystemExit(f"{path}:{n}: not a {what} table row (5 cells): {line[:80]!r}")
    m = _RATIO.match(cells[ratio_col])
    if m is None:
        return cells[0], (None, None, None, None, cells[ratio_col - 1])
    return cells[0], (*map(float, m.groups()), None if cells[4] in ("n/a", "—") else float(cells[4]), None)


def parse(path: Path) -> dict:
    """{'file', 'commit', 'device', 'date', 'rows': {(N, B, precision, mode, model): row}}; a row is (median, min,
    max, memory ratio or None, None) for a measured model, (None, None, None, None, what) for one that did not
    run ('OOM' or the error gpu_lm.py wrote)"""
    lines = _page.read_input(path).splitlines()
    at = next((i for i, line in enumerate(lines) if _HEAD.match(line)), None)
    if at is None:
        raise SystemExit(f"{path}: no 'device: …; … YYYY-MM-DD HH:MM UTC' header line (is it a gpu_lm.py output?)")
    head = _HEAD.match(lines[at])
    compiled = at + 1 < len(lines) and "torch.compile" in lines[at + 1]
    run = {"file": path.name, "commit": path.stem.rsplit("_", 1)[-1], "device": head.group(1),
           "date": head.group(2), "rows": {}}
    section = None
    for n, line in enumerate(lines, 1):
        if m := _SECTION.match(line):
            section = (int(m.group(1)), int(m.group(2)), m.group(3), m.group(4))
        elif section and line.startswith("| ") and not line.startswith(("| model", "|---")):
            model, row = table_row(path, n, line, 2, "gpu_lm.py")
            run["rows"][(*section, model + (COMPILED if compiled and not model.endswith(GRAPH) else ""))] = row
    return run


def verdict(t: Target, row: tuple) -> tuple[str, str]:
    """(measured, verdict) of target ``t`` on one row (median, min, max, memory ratio)"""
    med, lo, hi, mem, failed = row
    if failed is not None:
        return failed, "NOT MET (out of memory)" if failed == "OOM" else f"UNTESTABLE (did not run: {failed})"
    if t.memory:
        if mem is None:
            return "not measured", "UNTESTABLE (no memory column)"
        return f"{mem:.2f}×", "MET" if mem <= t.bound else "NOT MET"
    measured = f"{med:.2f}× [{lo:.2f}, {hi:.2f}]"
    if med < t.bound:
        return measured, "NOT MET"
    if med == t.bound:  # the table's two decimals cannot tell 0.996 from 1.004
        return measured, "UNDECIDED (the median equals the target at the table's two decimals)"
    return measured, "MET" if lo >= t.bound else f"MET on the median (min {lo:.2f} below {t.bound:g})"


def render(folder: Path) -> str:
    files = sorted(folder.glob("gpu_lm*.md"))
    if not files:
        raise SystemExit(f"{folder}: no gpu_lm*.md (the committed benchmarks/gpu_lm.py outputs this page is made from)")
    runs = sorted((parse(f) for f in files), key=lambda r: (r["date"], r["file"]))
    out = ["# CEM on one GPU: issue 21's targets", "",
           "Rendered by `python benchmarks/gpu_lm.py --render-only DIR` from the verbatim `benchmarks/gpu_lm.py` "
           "outputs committed beside this page; measures nothing. Ratio: the model's tokens/s (or peak step "
           "memory) over Llama's in the same interleaved run, median [min, max] over the repeats; rows with "
           "CUDA graphs ran every step as one graph, against Llama's graphed step; train.compile rows compiled "
           "every model, Llama too (`gpu_lm.py --compile`). \"full CEM T=1 (auto path)\" is "
           "the library's default launch at the commit that ran. Verdict rule: a speed target is MET when the "
           "median passes it (\"on the median\" when the minimum does not), UNDECIDED when the median equals it at "
           "the table's two decimals, else NOT MET; the memory target is "
           "MET when the ratio is at most the bound. The newest run with the row decides; every run is listed "
           "below it.", "",
           "| target (issue 21; bf16 autocast, training) | newest run | measured | verdict |", "|---|---|---|---|"]
    detail = ["", "## Every run", "", "| target | run | measured | verdict |", "|---|---|---|---|"]
    for t in TARGETS:
        seen = [(r, r["rows"][key]) for r in runs
                for key in [k for k in r["rows"] if k[0] == t.n and k[2] == "bf16" and k[3] == "training"
                            and k[4] == t.model + t.suffix]]
        if not seen:
            out.append(f"| {t.text} | — | not measured | UNTESTABLE (no run has the row) |")
            continue
        for r, row in seen:
            detail.append(f"| {t.text} | {run_name(r)} | {' | '.join(verdict(t, row))} |")
        r, row = seen[-1]
        out.append(f"| {t.text} | {run_name(r)} | {' | '.join(verdict(t, row))} |")
    out += detail + ["", "## Runs", "", "| file | code (commit) | device | date |", "|---|---|---|---|"]
    out += [f"| [{r['file']}]({r['file']}) | {r['commit']} | {r['device']} | {r['date']} |" for r in runs]
    return "\n".join(out) + "\n"


def run_name(run: dict) -> str:
    """the run as a link to its file, with its date where the header had one"""
    return f"[{run['commit']}]({run['file']})" + (f", {run['date']}" if run["date"] else "")


def write(folder: Path) -> Path:
    _page.write_page(folder, "README.md", render(folder))
    return folder / "README.md"
