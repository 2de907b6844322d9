"""What an image run records for its page: the depth curve, the trajectory (JSON-ready) and its statistics."""

import json
import math

import pytest
import torch

from energyformer.analysis.classification_records import STATS, depth_curve, geometry_record, trajectory_stats
from energyformer.models import MODELS


def test_depth_curve_counts_and_percent():
    seen = []
    c = depth_curve(lambda n: seen.append(n) or n / 10, 4)
    assert c == {"iterations": [2, 4, 6, 8], "accuracy": [20.0, 40.0, 60.0, 80.0]}
    assert seen == [2, 4, 6, 8]
    assert depth_curve(lambda n: 0.5, 1)["iterations"] == [1, 2]  # 0.5 and 1.5 round to 1 and 2, no zero


def _record(e_total, rank0=(1.0, 2.0), rankL=(2.0, 3.0)):
    T = len(e_total)
    return {"e_attn": [0.5 * e for e in e_total], "e_ff": [0.5 * e for e in e_total], "e_total": list(e_total),
            "eff_rank": [list(rank0)] + [list(rankL)] * (T - 1), "angle": [[60.0, 70.0]] + [[80.0, 90.0]] * (T - 1),
            "full_rank": [5.0] * T}


def test_trajectory_stats_on_a_made_up_record():
    s = trajectory_stats(_record([10.0, 11.0, 9.0, 8.0, 20.0]), 3)  # t = 4 is beyond L = 3: not counted
    assert set(s) == set(STATS)
    assert s["d_energy_total"] == -2.0 and s["d_energy_attn"] == -1.0 and s["d_energy_ff"] == -1.0
    assert s["max_rise"] == 1.0 and s["rises"] == 1
    assert s["d_eff_rank"] == 1.0 and s["d_angle"] == 20.0 and s["d_full_rank"] == 0.0
    falling = trajectory_stats(_record([10.0, 9.0, 8.0, 7.0]), 3)
    assert falling["max_rise"] == -1.0 and falling["rises"] == 0
    with pytest.raises(ValueError, match="trained = 4"):
        trajectory_stats(_record([1.0, 1.0, 1.0, 1.0]), 4)


def test_trajectory_stats_without_energies():
    rec = _record([1.0, 1.0, 1.0])
    rec["e_attn"] = rec["e_ff"] = rec["e_total"] = [None] * 3
    s = trajectory_stats(rec, 2)
    assert s["d_energy_total"] is None and s["max_rise"] is None and s["d_eff_rank"] == 1.0


def test_geometry_record_of_a_tiny_vision_model_is_json():
    torch.manual_seed(0)
    cfg = MODELS.get("vision").config.model_validate(
        {"kind": "vision", "image_size": 8, "channels": 1, "n_classes": 3, "patch_size": 4, "dim": 16, "heads": 2,
         "iterations": 2, "block": {"attention": "hyperset", "mlp": {"kind": "hyperset", "hidden": 16}}})
    model = MODELS.build(cfg)
    rec = geometry_record(model, torch.randn(3, 1, 8, 8), 4)
    assert rec["images"] == 3 and rec["iterations"] == 4 and len(rec["e_total"]) == 5
    assert all(math.isfinite(v) for v in rec["e_total"]) and len(rec["eff_rank"][0]) == 2
    json.dumps(rec)  # plain lists and floats
    s = trajectory_stats(rec, 2)
    assert all(s[k] is not None for k in STATS)
