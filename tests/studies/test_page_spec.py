"""A study's page blocks (studies/page_spec.py) are validated at load like the rest of the study: a column with both
metric and paper, an empty block, an axis the study lacks in a table's group or columns' minus, a plot's panel or a
table's where, ``tail: 0`` or ``smooth: 0``, and a column reducer or hook that is not module:function are each one
ConfigError naming the key."""

import copy

import pytest

from energyformer.studies import load_study
from energyformer.utils.validate import ConfigError

from .tiny import TINY, write

COL = {"label": "acc", "metric": "accuracy.k32"}


def _table(**kw):
    return {"table": {"rows": ["length", "model"], "columns": [dict(COL)], **kw}}


def _refused(tmp_path, blocks) -> str:
    data = copy.deepcopy(TINY)
    data["report"] = {"README.md": blocks}
    with pytest.raises(ConfigError) as err:
        load_study(write(tmp_path / "s.yaml", **data))
    assert "\n" not in str(err.value)
    return str(err.value)


@pytest.mark.parametrize("blocks, said", [
    ([_table(columns=[{**COL, "paper": "test"}])], "column 'acc': give exactly one of metric (ours) or paper"),
    ([{}], "a page block has exactly one of text, setup, table, plot, figure, claims, section, include; got none"),
    ([_table(group="width")], "report.README.md[0].table.group = 'width': allowed axes seed, model, length"),
    ([_table(columns=[{**COL, "minus": {"width": "1"}}])],
     "report.README.md[0].table.columns.minus = 'width': allowed axes seed, model, length"),
    ([{"plot": {"file": "a.png", "alt": "a", "y": "train_ce", "panel": "width"}}],
     "report.README.md[0].plot.panel = 'width': allowed axes seed, model, length"),
    ([_table(where={"width": "1"})], "report.README.md[0].table.where = 'width': allowed axes seed, model, length"),
    ([_table(columns=[{**COL, "tail": 0}])], "tail"),
    ([{"plot": {"file": "a.png", "alt": "a", "y": "train_ce", "smooth": 0}}], "smooth"),
    ([_table(columns=[{**COL, "reduce": {"over": "model", "fn": "no_colon"}}])], "'no_colon': must be module:function"),
    ([_table(columns=[{**COL, "reduce": {"over": "model", "fn": "mod:fn-extra"}}])],
     "'mod:fn-extra': must be module:function"),
    ([{"figure": {"fn": "mod:fn-extra", "file": "f.png", "alt": "f"}}],
     "report.README.md[0].figure.fn = 'mod:fn-extra': must be module:function"),
    ([{"section": "no_colon"}], "report.README.md[0].section = 'no_colon': must be module:function"),
], ids=["metric-and-paper", "empty-block", "group", "columns-minus", "plot-panel", "table-where", "tail-0", "smooth-0",
        "reduce-fn", "hook-trailing-text", "figure-fn", "section"])
def test_a_page_block_mistake_is_refused_naming_it(tmp_path, blocks, said):
    assert said in _refused(tmp_path, blocks)
