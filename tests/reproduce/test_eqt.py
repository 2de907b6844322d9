"""`energyformer reproduce eqt` end to end at a toy size: results page, JSON, plots, re-rendering."""

import json

import pytest

from energyformer.reproduce import REPRODUCTIONS


@pytest.mark.slow
def test_reproduce_eqt_writes_the_results_page(tmp_path):
    main = REPRODUCTIONS["eqt"].main()
    assert main(["--lengths", "8", "--seeds", "0", "--train-steps", "2", "--n-test", "8", "--timing-repeats", "2",
                 "--out", str(tmp_path), "--runs", str(tmp_path / "runs")]) == 0
    res = json.loads((tmp_path / "results.json").read_text())
    (run,) = res["runs"]
    assert set(run["accuracy"]) == {"baseline", "eqt_k8", "eqt_k32", "eqt_k0"}
    assert len(run["curves"]["baseline"]) == len(run["curves"]["eqt"]) == 2   # from the runs' metrics.jsonl
    assert len(run["timing"]["train_step_ratio"]) == 2 and run["timing"]["infer_ratio_k8"][0] > 0
    for name in ("baseline", "eqt"):   # each model is one Trainer run
        d = tmp_path / "runs" / f"L8_seed0_{name}"
        assert (d / "metrics.jsonl").exists() and (d / "result.json").exists() and list(d.glob("ckpt-*/*.safetensors"))
    assert len(res["summary"]["convergence_by_step"]) == 32 and res["summary"]["params_pct"] > 0
    page = (tmp_path / "README.md").read_text()
    assert "| 8 | 100.0 | 100.0 |" in page            # the paper's numbers beside ours
    assert "not run (no length >= 64)" in page          # no hard length run: said, not hidden
    assert (tmp_path / "loss_curve.png").stat().st_size > 0 and (tmp_path / "convergence.png").exists()
    out2 = tmp_path / "again"
    assert main(["--from-results", str(tmp_path / "results.json"), "--out", str(out2)]) == 0
    assert (out2 / "README.md").read_text().split("wall time")[1] == page.split("wall time")[1]
