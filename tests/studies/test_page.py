"""The generic study page (studies/page.py): tables from records (aggregates, paired differences, best,
the paper's rows), the setup list, plots, and the validation of page blocks."""

import copy
from pathlib import Path

import pytest

from energyformer.studies import load_study
from energyformer.studies.page import PageContext, aggregate, fmt_value, render, render_table
from energyformer.studies.page_spec import TableSpec
from energyformer.utils.validate import ConfigError

from .tiny import TINY, write


def _rec(model, length, seed, acc, lr=0.1):
    return {"cell": {"model": model, "length": length}, "seed": seed, "hardware": "cpu",
            "resolved": {"train": {"lr": lr}}, "metrics": {"accuracy": {"k32": acc, "curve": [
                {"step": 1, "acc": acc / 2}, {"step": 2, "acc": acc}]}}}


@pytest.fixture
def ctx(tmp_path):
    spec = load_study(write(tmp_path / "s.yaml"))
    runs = {f"{m}{s}": _rec(m, "8", s, a + s) for m, a in (("baseline", 50.0), ("eqt", 90.0)) for s in (0, 1)}
    return PageContext(spec, "tiny", "cpu", tmp_path, {"runs": runs}, [])


def test_fmt_value():
    assert fmt_value(22673, "si") == "22.67K" and fmt_value(6.0, ",d") == "6"
    assert fmt_value([1.0, 2.5], ".1f") == "1.0, 2.5" and fmt_value(None, ".2f") == "–"
    assert aggregate({0: 1.0, 1: 3.0}, "mean") == 2.0 and aggregate({}, "mean") is None
    assert aggregate({0: 1.0, 1: 3.0}, "n") == 2 and aggregate({1: 3.0, 0: 1.0}, "seeds") == [1.0, 3.0]


def test_table_aggregates_minus_best_and_paper(ctx):
    t = TableSpec(rows=["model"], columns=[
        {"label": "acc", "metric": "accuracy.k32", "agg": "mean_std", "fmt": ".1f", "best": "max"},
        {"label": "range", "metric": "accuracy.k32", "agg": "mean_range", "fmt": ".1f"},
        {"label": "gain", "metric": "accuracy.k32", "minus": {"model": "baseline"}, "agg": "seeds", "fmt": "+.0f"},
        {"label": "paper", "paper": "acc"}],
        paper=[{"model": "eqt", "acc": "92.81"}], paper_source="Table 2")
    text = render_table(ctx, t)
    assert "| baseline | 50.5 ± 0.7 | 50.5 [50.0, 51.0] | +0 / +0 | – |" in text
    assert "| eqt | **90.5 ± 0.7** | 90.5 [90.0, 91.0] | +40 / +40 | 92.81 |" in text
    assert "Table 2 (copied, not measured)" in text


def test_render_writes_every_file_with_setup_plot_and_claims(ctx, tmp_path):
    data = {**ctx.spec.model_dump(exclude_none=True), "report": {"README.md": [
        {"setup": {"lr": "resolved.train.lr"}},
        {"plot": {"file": "curve.png", "alt": "curve", "y": "accuracy.curve", "x": "step", "y_key": "acc",
                  "series": "model"}},
        {"claims": "intro"}], "more.md": [{"text": "page {name} at {scale}"}]}}
    spec = load_study(write(tmp_path / "t.yaml", **{k: data[k] for k in ("report",)}))
    paths = render(tmp_path, spec, "tiny", "cpu", ctx.data, [])
    page = (tmp_path / "README.md").read_text()
    assert [p.name for p in paths] == ["README.md", "more.md"]
    assert page.startswith("# tiny parity study — cpu scale") and "- lr: 0.1" in page
    assert "![curve](curve.png)" in page and (tmp_path / "curve.png").stat().st_size > 0
    assert "| claim | paper (source) |" in page and "intro" in page
    assert (tmp_path / "more.md").read_text() == "page tiny at cpu\n"


def test_a_curve_may_be_columns_with_a_vline_and_a_file_included_verbatim(ctx, tmp_path):
    from energyformer.studies.page import render_block
    from energyformer.studies.page_spec import BlockSpec
    from energyformer.studies.plots import series_points

    for r in ctx.data["runs"].values():
        r["metrics"]["accuracy"]["cols"] = {"t": [0, 1, 2], "e": [3.0, None, 1.0]}
    spec = BlockSpec(plot={"file": "cols.png", "alt": "cols", "y": "accuracy.cols", "x": "t", "y_key": "e",
                           "series": "model", "vline": 1}).plot
    assert series_points(ctx, spec, {"model": "eqt"}) == {0.0: [3.0, 3.0], 2.0: [1.0, 1.0]}   # None skipped
    assert render_block(ctx, BlockSpec(plot=spec.model_dump())) == "![cols](cols.png)\n"
    assert (tmp_path / "cols.png").stat().st_size > 0
    (tmp_path / "bench.md").write_text("| a |\n|---|\n")
    assert render_block(ctx, BlockSpec(include="bench.md")) == "| a |\n|---|\n"
    assert render_block(ctx, BlockSpec(include="missing.md")) == ""


def _err(tmp_path, mutate) -> str:
    data = copy.deepcopy(TINY)
    mutate(data)
    with pytest.raises(ConfigError) as e:
        load_study(write(tmp_path / "s.yaml", **data))
    return str(e.value)


def test_page_blocks_are_validated(tmp_path):
    msg = _err(tmp_path, lambda d: d["report"]["README.md"].append({"text": "x", "claims": ""}))
    assert "exactly one of" in msg and "text, claims" in msg
    msg = _err(tmp_path, lambda d: d["report"]["README.md"][0]["table"].update(rows=["kernel"]))
    assert "report.README.md[0].table.rows = 'kernel'" in msg and "seed, model, length" in msg
    msg = _err(tmp_path, lambda d: d["report"]["README.md"][0]["table"]["columns"].append({"label": "x"}))
    assert "exactly one of metric" in msg
    msg = _err(tmp_path, lambda d: d.update(render="energyformer.analysis.eqt_report:render"))
    assert "exactly one of render" in msg
    assert "agg" in _err(tmp_path, lambda d: d["report"]["README.md"][0]["table"]["columns"][0].update(agg="median"))


def test_committed_studies_pages_name_real_axes():
    # every committed study loads (its page blocks name axes it has)
    for f in sorted((Path(__file__).resolve().parents[2] / "studies").glob("*.yaml")):
        load_study(f.stem)
