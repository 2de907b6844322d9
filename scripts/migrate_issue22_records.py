"""One-off (issue 22): the committed results.json of the old ``reproduce intrinsic-lm`` / ``reproduce eqt``
programs -> the study runner's record format (``energyformer.studies.runner``), keeping every number.

    python scripts/migrate_issue22_records.py intrinsic docs/results/intrinsic/cpu cpu "NOTE"
    python scripts/migrate_issue22_records.py eqt OLD_RESULTS_JSON docs/results/eqt/cpu

Migrated records carry ``config_hash: "migrated"``: the runner never reuses them for a new run (their
configs were resolved by older code), it only renders them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from energyformer.analysis.intrinsic_report import history_points
from energyformer.studies.runner import FORMAT, save_results


def intrinsic(folder: Path, scale: str, note: str) -> None:
    old = json.loads((folder / "results.json").read_text())
    runs = {}
    for name, r in old["runs"].items():
        tps = r["tokens_per_step"]
        over = [*old.get("overrides", []), f"task.corpus={r['corpus']}", f"train.seed={r['seed']}", f"name={name}"]
        runs[name] = {
            "cell": {"variant": r["variant"], "corpus": r["corpus"]}, "seed": r["seed"],
            "config": f"intrinsic/{r['variant']}", "overrides": over, "config_hash": "migrated", "scale": scale,
            "device": "cuda" if "GPU" in r.get("hardware", "") or "H100" in r.get("hardware", "") else "cpu",
            "hardware": r.get("hardware", "x86_64 CPU, 1 thread(s), torch 2.13.0+cpu"),
            "params": r["params"], "steps": r["steps"], "seconds": r["seconds"], "tokens_per_s": r["tokens_per_s"],
            "tokens_per_step": tps, "run_dir": r["run_dir"],
            "resolved": {"task": {"corpus": r["corpus"], "batch_size": tps // 256, "seq_len": 256},
                         "model": r["model"], "train": r["train"]},
            "metrics": {"val_loss": history_points([tuple(h) for h in r["history"]], r["steps"])}}
    save_results(folder / "results.json", {"format": FORMAT, "study": "intrinsic-lm", "scale": scale,
                                           "note": note, "runs": runs})


if __name__ == "__main__":
    kind = sys.argv[1]
    if kind == "intrinsic":
        intrinsic(Path(sys.argv[2]), sys.argv[3], sys.argv[4])
    else:
        from energyformer.analysis.eqt_report import migrate  # noqa: PLC0415

        migrate(Path(sys.argv[2]), Path(sys.argv[3]))
