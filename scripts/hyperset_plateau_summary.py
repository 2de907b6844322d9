"""Summarise the plateau probes (``scripts/hyperset_plateau_probe.py`` outputs) into one CSV and the page (issue 20).

    PYTHONPATH=src python scripts/hyperset_plateau_summary.py docs/results/hyperset/plateau
    PYTHONPATH=src python scripts/hyperset_plateau_summary.py --render-only docs/results/hyperset/plateau

The first form writes ``summary.csv``: one row per run and probe step — the mean training loss of the 50
steps before it, the probe batch's loss and cell accuracy, |α_0| and |γ_0| (Hyper-SET), and at the first
and the last iteration the RMS of the token state, the attention entropy (1 = uniform) and the mean cosine
between the tokens of a board. It reads every ``*.json`` in the folder (the released code's run has no
per-iteration records: blanks).

``--render-only DIR`` measures nothing and writes ``DIR/README.md`` from the JSON files and the authors'
Fig. 3a curve (``paper_fig3a_board_acc.csv``) in DIR alone, byte for byte the same every time
(:func:`energyformer.analysis.hyperset_plateau.render`).
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from energyformer.analysis.hyperset_plateau import FIELDS, render, rows
from energyformer.errors import UserError
from energyformer.utils.io import read_json


def write_summary(folder: Path) -> int:
    """``folder/summary.csv`` from every probe file in ``folder``; returns the number of rows."""
    table = [row for f in sorted(folder.glob("*.json"))
             for row in rows(f.stem, read_json(f))]
    with open(folder / "summary.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, FIELDS)
        w.writeheader()
        for row in table:
            w.writerow({k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in row.items()})
    return len(table)


def main(argv=None) -> int:
    """The command line; a damaged input is one line on stderr naming the file (exit status 2)."""
    try:
        return _main(argv)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


def _main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", nargs="?", type=Path, default=Path("docs/results/hyperset/plateau"))
    ap.add_argument("--render-only", type=Path, metavar="DIR", help="write DIR/README.md from DIR's files alone")
    a = ap.parse_args(argv)
    if a.render_only:
        (a.render_only / "README.md").write_text(render(a.render_only), encoding="utf-8")
        print(f"wrote {a.render_only / 'README.md'}")
        return 0
    n = write_summary(a.folder)
    print(f"wrote {a.folder / 'summary.csv'} ({n} rows)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
