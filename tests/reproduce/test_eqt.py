"""reproduce eqt is the study studies/eqt.yaml: both runs of a seed start from the same backbone, the
gpu scale is the issue's preset, and the committed pages re-render byte for byte from their records."""

from pathlib import Path

import torch

from energyformer.experiment import build_model, build_task, load_run_config, resolve
from energyformer.studies import expand, load_study

from .page_check import assert_page_rerenders

PAGE = Path(__file__).resolve().parents[2] / "docs" / "results" / "eqt"


def test_baseline_and_eqt_start_from_the_same_backbone():
    spec = load_study("eqt")
    plans = {p.cell["model"]: p for p in expand(spec, "cpu", seeds=[3], only={"length": ["16"]})}
    sd = {}
    for name, p in plans.items():
        cfg = load_run_config(p.config, [*p.overrides, "task.data.n_test=8"])
        task = build_task(cfg)
        sd[name] = build_model(resolve(cfg, task), task).state_dict()
    # EqT wraps its last layer (layers.<i>.layer.*) beside the refiner; every baseline tensor is there
    eq = {k.replace(".layer.", "."): v for k, v in sd["eqt"].items()}
    assert sd["baseline"].keys() <= eq.keys()
    for k, v in sd["baseline"].items():
        assert torch.equal(v, eq[k]), k


def test_gpu_scale_is_the_issue_preset():
    (p, _) = [q for q in expand(load_study("eqt"), "gpu") if q.cell["length"] == "64"]
    cfg = load_run_config(p.config, p.overrides)
    assert (cfg.model.n_layers, cfg.model.dim, cfg.model.heads) == (6, 256, 8)
    assert cfg.task.batch_size == 256 and cfg.task.data.n_train == 32768 and cfg.train.steps == 3200
    assert cfg.train.lr == 3e-4 and cfg.train.device == "cuda"


def test_committed_pages_rerender_from_their_records_alone(tmp_path):
    assert_page_rerenders(tmp_path, "eqt", PAGE)
    assert "gpu** — not run yet: `energyformer reproduce eqt --scale gpu" in (PAGE / "README.md").read_text()


def test_the_page_is_declared_with_table_2_complete():
    spec = load_study("eqt")
    assert spec.render is None
    table2 = next(b.table for b in spec.report["README.md"] if b.table and b.table.title.startswith("Per-token"))
    assert [int(r["length"]) for r in table2.paper] == [8, 16, 32, 48, 64, 96, 128, 192, 256]
    assert all({"baseline", "k8", "k32"} <= r.keys() for r in table2.paper)
    page = (PAGE / "cpu" / "README.md").read_text()
    for part in ("## Per-token accuracy", "## Convergence", "## Overheads", "## Training", "| **hard-gain**",
                 "| 192 | 51.86 | 59.93 | 59.93 |", "![loss](loss_curve.png)", "![convergence](convergence.png)"):
        assert part in page, part
