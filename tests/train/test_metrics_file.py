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
    p = _file(tmp_path, '{"step": 1}\n{"step": 2}\n{"step": 3}\n{"step": 4}\n\n{"step": 5, "x')
    with pytest.warns(UserWarning, match=r"metrics.jsonl:6: dropped a half-written last line"):
        truncate_metrics(p, 2)
    assert read_events(p) == [{"step": 1}, {"step": 2}]


def test_truncate_drops_only_a_broken_last_line(tmp_path):
    """A run killed mid-write leaves a half-written LAST line: dropped. The same line anywhere else is
    not from a kill (a hand edit, a damaged file): it stops the resume naming file and line, and the
    file is left as it was, so no event is lost silently."""
    text = '{"step": 1}\n{"step": 2, "loss": 1.0\n{"step": 3}\n'   # a '}' missing on line 2
    p = _file(tmp_path, text)
    with pytest.raises(DataError, match=r"metrics.jsonl:2: not a JSON line"):
        truncate_metrics(p, 3)
    assert p.read_text() == text


@pytest.mark.parametrize("line, what", [
    ("[1, 2]", r"metrics.jsonl:2: the line is an array \(\[1, 2\]\), not an event: each line must be a JSON "
               r"object"),
    ('"text"', r"metrics.jsonl:2: the line is a string"),
    ("7", r"metrics.jsonl:2: the line is a number"),
    ('{"event": "train", "step": null}', r'metrics.jsonl:2: "step" = null: must be an integer >= 0'),
    ('{"event": "train", "step": "3"}', r'metrics.jsonl:2: "step" = "3": must be an integer >= 0'),
    ('{"event": "train", "step": 2.5}', r'metrics.jsonl:2: "step" = 2.5: must be an integer >= 0'),
    ('{"event": "train", "step": true}', r'metrics.jsonl:2: "step" = true: must be an integer >= 0'),
    ('{"event": "train", "step": -1}', r'metrics.jsonl:2: "step" = -1: must be an integer >= 0'),
])
@pytest.mark.parametrize("where", ["middle", "last"])
def test_truncate_names_file_and_line_of_a_line_that_is_no_event(tmp_path, line, what, where):
    """Valid JSON that is not an event object, or a bad step, used to end --resume in an internal
    AttributeError / TypeError; a kill cannot write it, so even as the last line it is an error."""
    text = '{"step": 1}\n' + line + "\n" + ('{"step": 2}\n' if where == "middle" else "")
    p = _file(tmp_path, text)
    with pytest.raises(DataError, match=what):
        truncate_metrics(p, 5)
    assert p.read_text() == text


def test_read_events_refuses_a_line_that_is_not_an_object(tmp_path):
    p = _file(tmp_path, '{"step": 1}\n[1, 2]\n')
    with pytest.raises(DataError, match=r"metrics.jsonl:2: the line is an array"):
        read_events(p)
    assert read_events(p, skip_bad=True) == [{"step": 1}]


def test_bytes_that_are_not_utf8_name_the_line(tmp_path):
    p = tmp_path / "metrics.jsonl"
    p.write_bytes(b'{"step": 1}\n{"step": 2, "x": "\xff"}\n')
    with pytest.raises(DataError, match=r"metrics.jsonl:2: not UTF-8 text"):
        truncate_metrics(p, 5)
    with pytest.raises(DataError, match=r"metrics.jsonl:2: not UTF-8 text"):
        read_events(p)


def test_a_malformed_metrics_file_stops_a_resume_before_anything_is_written(tmp_path):
    """Through the trainer: the resume stops with the DataError, and neither metrics.jsonl nor the run
    records (run_info.json's resumes, config.yaml) are touched."""
    from train_toys import build

    build(tmp_path, steps=4, save_every=2).fit()
    metrics = tmp_path / "metrics.jsonl"
    lines = metrics.read_text().splitlines()
    lines[1] = lines[1][:-1]
    metrics.write_text("\n".join(lines) + "\n")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    with pytest.raises(DataError, match=r"metrics.jsonl:2: not a JSON line"):
        build(tmp_path, steps=4, save_every=2).fit(resume=True)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before
