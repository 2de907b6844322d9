"""metrics.jsonl read back (train.metrics.read_events) and trimmed for a resume (truncate_metrics)."""

from __future__ import annotations

import pytest

from energyformer.errors import DataError
from energyformer.train.metrics import read_events, truncate_metrics


def _file(tmp_path, text: str):
    p = tmp_path / "metrics.jsonl"
    p.write_text(text)
    return p


def test_read_events_in_order_skipping_blank_lines(tmp_path):
    p = _file(tmp_path, '{"event": "train", "step": 1}\n\n{"event": "eval", "step": 1}\n')
    assert read_events(p) == [{"event": "train", "step": 1}, {"event": "eval", "step": 1}]


def test_a_bad_line_names_file_and_line_or_is_skipped_when_asked(tmp_path):
    p = _file(tmp_path, '{"step": 1}\n{"step": 2, "lo\n')   # a half-written last line of a killed run
    with pytest.raises(DataError, match=r"metrics.jsonl:2: not a JSON line"):
        read_events(p)
    assert read_events(p, skip_bad=True) == [{"step": 1}]


def test_truncate_keeps_the_events_up_to_the_checkpoint(tmp_path):
    p = _file(tmp_path, '{"step": 1}\n{"step": 2}\n{"step": 3, "x\n{"step": 4}\n')
    truncate_metrics(p, 2)
    assert read_events(p) == [{"step": 1}, {"step": 2}]
