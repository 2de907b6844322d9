"""run_info.json across resumes: top-level ``extra`` fields are the latest segment's (the plugins eval must import),
except the per-segment ones (``plugin_checks``): a resume records its own in its ``resumes`` entry and the first
segment's stays (a plugin check that failed before a fix was otherwise lost from the record; probe BA)."""

from __future__ import annotations

import json

import torch

from energyformer.train.runinfo import collect_run_info, write_run_info


def test_plugin_checks_of_every_segment_are_kept(tmp_path):
    info = collect_run_info(0, torch.device("cpu"), 1)
    first = {"plugins": [{"module": "a"}], "plugin_checks": {"energy e": "AssertionError: wrong"}}
    write_run_info(tmp_path, info, extra=first)
    again = {"plugins": [{"module": "b"}], "plugin_checks": {"energy e": "ok"}}
    write_run_info(tmp_path, info, resume={"step": 6, "checkpoint": "x"}, extra=again)
    data = json.loads((tmp_path / "run_info.json").read_text())
    assert data["plugins"] == [{"module": "b"}]                      # the latest: what eval imports
    assert data["plugin_checks"] == {"energy e": "AssertionError: wrong"}  # the first segment's, kept
    assert data["resumes"][-1]["plugin_checks"] == {"energy e": "ok"} and data["resumes"][-1]["step"] == 6
    write_run_info(tmp_path, info, resume={"step": 9, "checkpoint": "y"}, extra={"plugins": []})
    data = json.loads((tmp_path / "run_info.json").read_text())
    assert "plugin_checks" not in data["resumes"][-1] and data["plugin_checks"] == {"energy e": "AssertionError: wrong"}


def test_a_first_segment_without_checks_takes_a_resumes_at_the_top():
    """A run trained without plugins, resumed with one: its checks are the run's first, at the top level."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        info = collect_run_info(0, torch.device("cpu"), 1)
        write_run_info(Path(tmp), info)
        write_run_info(Path(tmp), info, resume={"step": 3, "checkpoint": "x"},
                       extra={"plugin_checks": {"solver s": "ok"}})
        data = json.loads((Path(tmp) / "run_info.json").read_text())
    assert data["plugin_checks"] == {"solver s": "ok"} and "plugin_checks" not in data["resumes"][-1]
