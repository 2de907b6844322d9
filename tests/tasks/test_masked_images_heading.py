"""The ``energyformer eval`` heading of a masked-image run names the mask applied (probe Q, F4).

The evaluation masks round(eval_mask_ratio N) codes per image. Before the fix the heading printed the configured
ratio ("40% masked") while 2 of 4 codes (50%, digits with 4x4 patches) or 6 of 16 (37.5%, 2x2 patches) were
masked, as the ``masked_fraction`` metric said."""

import argparse

import pytest

from energyformer.experiment import build_task, load_run_config, resolve

BASE = ["task.kind=masked_image_modelling", "task.dataset=digits", "task.codebook_size=16", "task.decode=false",
        "task.eval_examples=8", "model.dim=16", "model.heads=2", "model.iterations=1"]


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ENERGYFORMER_DATA", str(tmp_path / "data"))  # the codebook cache; digits need no files


@pytest.mark.parametrize("patch, shown, fraction", [(4, "2 of 4 codes masked (50%)", 0.5),
                                                    (2, "6 of 16 codes masked (37.5%)", 0.375)])
def test_heading_shows_the_fraction_actually_masked(patch, shown, fraction):
    cfg = load_run_config(None, BASE + [f"task.patch_size={patch}"])
    task = build_task(cfg)
    model = task.build_model(resolve(cfg, task).model)
    where, res = task.eval_from_args(model, argparse.Namespace(split="test"), {})
    assert shown in where and "40%" not in where                 # old code: "..., 40% masked, ..."
    assert res["masked_fraction"] == pytest.approx(fraction)


def test_eval_mask_count_rounds_and_keeps_one():
    from energyformer.tasks.masked_images import eval_mask_count  # new: the count the mask and heading share

    assert [eval_mask_count(0.4, n) for n in (1, 4, 16, 49)] == [1, 2, 6, 20]
    assert eval_mask_count(1.0, 16) == 16 and eval_mask_count(0.01, 16) == 1
