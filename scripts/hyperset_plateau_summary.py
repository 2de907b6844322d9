"""Summarise the plateau probes (``scripts/hyperset_plateau_probe.py`` outputs) into one CSV (issue 20).

    PYTHONPATH=src python scripts/hyperset_plateau_summary.py docs/results/hyperset/plateau

One row per run and probe step: the mean training loss of the 50 steps before it, the probe batch's
loss and cell accuracy, |α_0| and |γ_0| (Hyper-SET), and at the first and the last iteration the RMS of
the token state, the attention entropy (1 = uniform) and the mean cosine between the tokens of a board.
Reads every ``*.json`` in the folder (the released code's run has no per-iteration records: blanks).
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

FIELDS = ["run", "step", "train_loss_50", "probe_loss", "probe_cell_acc", "alpha_abs", "gamma_abs",
          "x_rms_first", "x_rms_last", "entropy_first", "entropy_last", "token_cos_first", "token_cos_last"]


def rows(name: str, data: dict) -> list[dict]:
    losses = {r["step"]: r.get("loss", r.get("train", {}).get("loss")) for r in data["records"]}
    out = []
    for r in data["records"]:
        if "probe_loss" not in r:
            continue
        s = r["step"]
        window = [losses[k] for k in range(max(0, s - 50), s) if losses.get(k) is not None]
        its, ss = r.get("iterations") or [], r.get("step_sizes") or []
        row = {"run": name, "step": s, "train_loss_50": sum(window) / len(window) if window else None,
               "probe_loss": r["probe_loss"], "probe_cell_acc": r["probe_cell_acc"],
               "alpha_abs": ss[0]["alpha_abs"] if ss else r.get("alpha_abs"),
               "gamma_abs": ss[0]["gamma_abs"] if ss else r.get("gamma_abs")}
        for key, field in (("attn_in_rms", "x_rms"), ("attn_entropy", "entropy"), ("token_cos", "token_cos")):
            row[f"{field}_first"] = its[0].get(key) if its else None
            row[f"{field}_last"] = its[-1].get(key) if its else None
        out.append(row)
    return out


def main(argv=None) -> int:
    folder = Path((argv or sys.argv[1:] or ["docs/results/hyperset/plateau"])[0])
    table = [row for f in sorted(folder.glob("*.json")) for row in rows(f.stem, json.loads(f.read_text()))]
    with open(folder / "summary.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, FIELDS)
        w.writeheader()
        for row in table:
            w.writerow({k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in row.items()})
    print(f"wrote {folder / 'summary.csv'} ({len(table)} rows)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
