"""The generic study page (studies/page.py): tables from records (aggregates, paired differences, best,
the paper's rows), the setup list, plots, and the validation of page blocks."""

import copy
from pathlib import Path

import pytest

from energyformer.studies import load_study
from energyformer.studies.page import PageContext, aggregate, fmt_value, render, render_setup, render_table
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


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_non_finite_record_is_shown_not_a_crash_and_never_best(ctx, bad):
    """A NaN or inf metric in results.json (the runner writes them as they are; a hook may return one) crashed
    the render: statistics.stdev raised (AttributeError 'numerator'), and max over a NaN depended on the order."""
    ctx.data["runs"]["eqt1"]["metrics"]["accuracy"]["k32"] = bad
    t = TableSpec(rows=["model"], columns=[
        {"label": "acc", "metric": "accuracy.k32", "agg": "mean_std", "fmt": ".1f", "best": "max"},
        {"label": "range", "metric": "accuracy.k32", "agg": "mean_range", "fmt": ".1f"},
        {"label": "max", "metric": "accuracy.k32", "agg": "max", "fmt": ".1f"}])
    text = render_table(ctx, t)
    note = f"{'nan' if bad != bad else 'inf'} (non-finite in 1 of 2 seed(s))"
    assert f"| eqt | {note} | {note} | {note} |" in text
    assert "| baseline | **50.5 ± 0.7** | 50.5 [50.0, 51.0] | 51.0 |" in text  # the finite row is best


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
    msg = _err(tmp_path, lambda d: d.update(render="energyformer.analysis.some_report:render"))
    assert "exactly one of render" in msg
    assert "agg" in _err(tmp_path, lambda d: d["report"]["README.md"][0]["table"]["columns"][0].update(agg="median"))
    msg = _err(tmp_path, lambda d: d["report"]["README.md"][0]["table"]["columns"][0].update(where={"kernel": "rbf"}))
    assert "table.columns.where = 'kernel'" in msg
    msg = _err(tmp_path, lambda d: d["report"]["README.md"][0]["table"]["columns"][0].update(reduce={"over": "x", "fn": "m:f"}))
    assert "table.columns.reduce.over = 'x'" in msg


def test_committed_studies_pages_name_real_axes():
    # every committed study loads (its page blocks name axes it has)
    for f in sorted((Path(__file__).resolve().parents[2] / "studies").glob("*.yaml")):
        load_study(f.stem)


def test_column_where_and_reduce_over_an_open_axis(tmp_path):
    spec = load_study(write(tmp_path / "s.yaml"))
    runs = {f"{m}{n}_{s}": _rec(m, n, s, a + int(n) + s) for m, a in (("baseline", 50.0), ("eqt", 90.0))
            for n in ("8", "16") for s in (0, 1)}
    ctx = PageContext(spec, "tiny", "cpu", tmp_path, {"runs": runs}, [])
    t = TableSpec(rows=["model"], columns=[
        {"label": "at 16", "metric": "accuracy.k32", "where": {"length": 16}, "agg": "seeds", "fmt": ".0f"},
        {"label": "lowest", "metric": "accuracy.k32", "agg": "seeds", "fmt": ".0f",
         "reduce": {"over": "length", "fn": "energyformer.analysis.lm_report:lowest"}}])
    text = render_table(ctx, t)
    assert "| baseline | 66 / 67 | 58 / 59 |" in text and "| eqt | 106 / 107 | 98 / 99 |" in text


def test_setup_paragraph_of_migrated_records_and_plot_ticks(ctx, monkeypatch):
    from energyformer.studies.page_spec import PlotSpec
    from energyformer.studies.plots import line_plot

    setup = render_setup(PageContext(ctx.spec, "tiny", "cpu", ctx.out, {**ctx.data, "setup": "**What ran**: x."}, []), {})
    assert setup == "## Setup\n\n**What ran**: x.\n\n- recorded on: cpu\n"
    import matplotlib.pyplot as plt

    figs = []
    monkeypatch.setattr(plt, "close", figs.append)
    spec = PlotSpec(file="p.png", alt="p", y="accuracy.k32", x="length", series="model", logx=True, xticks=[4, 8, 16])
    assert line_plot(ctx, spec, ctx.out / "p.png") is not None
    ax = figs[0].axes[0]
    assert list(ax.get_xticks()) == [4, 8, 16] and [t.get_text() for t in ax.get_xticklabels()] == ["4", "8", "16"]
    assert len(ax.xaxis.get_minorticklocs()) == 0


def test_a_curve_of_pairs_is_plotted_and_the_records_note_is_in_the_setup(ctx):
    """A metric holding [x, y] pairs (a history) is a curve; results.json's ``note`` ends the setup list."""
    from energyformer.studies.page_spec import PlotSpec
    from energyformer.studies.plots import series_points

    for r in ctx.records:
        r["metrics"]["hist"] = [[10, r["metrics"]["accuracy"]["k32"]], [20, 1.0]]
    pts = series_points(ctx, PlotSpec(file="h.png", alt="h", y="hist", pairs=True), {"model": "eqt"})
    assert pts == {10.0: [90.0, 91.0], 20.0: [1.0, 1.0]}
    ctx.data["note"] = "recorded on a busy machine"
    setup = render_setup(ctx, {"lr": "resolved.train.lr"})
    assert setup.endswith("- lr: 0.1\n- recorded on: cpu\n- note: recorded on a busy machine\n")


def test_columns_index_key_and_tail_of_list_metrics(ctx):
    for s, r in enumerate(ctx.records):
        r["metrics"]["ce"] = [9.0, 1.0 + s % 2, 3.0 + s % 2]
    t = TableSpec(rows=["model"], where={"model": "eqt"}, columns=[
        {"label": "steps", "metric": "accuracy.curve", "key": "step", "agg": "first", "fmt": "d"},
        {"label": "first", "metric": "accuracy.curve.0.acc", "agg": "mean", "fmt": ".2f"},
        {"label": "last", "metric": "ce.-1", "agg": "seeds", "fmt": ".0f"},
        {"label": "tail", "metric": "ce", "tail": 2, "agg": "mean_range", "fmt": ".1f"}])
    # eqt seeds 0, 1: acc 90, 91 -> curve[0] = acc / 2; ce of its runs [9, 1, 3] and [9, 2, 4]
    assert "| eqt | 1, 2 | 45.25 | 3 / 4 | 2.5 [2.0, 3.0] |" in render_table(ctx, t)


def test_plot_curves_keyed_by_x_samples_per_x_and_reference_lines(ctx, tmp_path):
    from energyformer.studies.page_spec import PlotSpec
    from energyformer.studies.plots import line_plot, series_points

    for r in ctx.records:
        r["metrics"]["by_n"] = {"4": {"acc": 0.5}, "2": {"acc": 0.25}}
        r["metrics"]["heads"] = [[1.0, 3.0], [2.0, 4.0]]
        r["metrics"]["ce"] = [1.0, 3.0, 5.0, 7.0, 9.0]
    one = {"model": "eqt", "seed": "0"}
    assert series_points(ctx, PlotSpec(file="a.png", alt="a", y="by_n", y_key="acc"), one) == {2.0: [0.25], 4.0: [0.5]}
    assert series_points(ctx, PlotSpec(file="a.png", alt="a", y="heads", x_start=0), one) == {0.0: [1.0, 3.0],
                                                                                              1.0: [2.0, 4.0]}
    assert series_points(ctx, PlotSpec(file="a.png", alt="a", y="ce", smooth=2), one) == {1.5: [2.0], 3.5: [6.0]}
    spec = PlotSpec(file="p.png", alt="p", y="ce", series="model", hlines=[0.69], vline="resolved.train.lr",
                    paper=[{"x": 1, "y": 2.0}, {"x": 1, "y": 4.0}, {"model": "eqt", "x": 2, "y": 1.0}])
    assert line_plot(ctx, spec, tmp_path / "p.png").stat().st_size > 0


def test_text_fills_placeholders(ctx):
    from energyformer.studies.page import _text

    assert _text(ctx, "{runs} runs of {name} at {scale}.") == "4 runs of tiny at cpu.\n"


def test_keys_tables_names_and_the_note(ctx, tmp_path):
    for r in ctx.data["runs"].values():
        r["metrics"]["options"] = {"plain": {"acc": 1.0 + r["seed"]}, "clamped": {"acc": 3.0}}
    data = {**ctx.data, "note": "Old runs.", "probes": {"memory": {"big": {"mib": 2.0}, "small": {"mib": 1.0}}}}
    ctx = PageContext(ctx.spec, "tiny", "cpu", tmp_path, data, [])
    t = TableSpec(rows=["model"], where={"model": "eqt"}, keys="accuracy.curve", key_label="k",
                  columns=[{"label": "acc", "metric": "acc"}])
    assert render_table(ctx, t) == ""          # a list, not a dict: no keys, no rows
    t = TableSpec(rows=["model"], keys="options", key_label="option", names={"eqt": "EqT", "clamped": "clamp"},
                  columns=[{"label": "acc", "metric": "acc", "agg": "mean_std", "fmt": ".1f"}])
    text = render_table(ctx, t)
    assert text.index("| EqT | plain | 1.5 ± 0.7 |") < text.index("| EqT | clamp | 3.0 ± 0.0 |")  # keys in order
    t = TableSpec(keys="probes.memory", key_label="model", columns=[{"label": "MiB", "metric": "mib"}])
    text = render_table(ctx, t)
    assert "| model | MiB |" in text and "| big | 2 |" in text and "| small | 1 |" in text
    with pytest.raises(ValueError, match="rows = \\[\\]: a table needs rows"):
        TableSpec(columns=[{"label": "x", "metric": "x"}])


def test_plot_points_of_a_dict_sweep_and_of_list_rows():
    from energyformer.studies.page_spec import PlotSpec
    from energyformer.studies.plots import _points

    spec = PlotSpec(file="q.png", alt="q", y="test.ce")
    assert _points({"1": 2.0, "8": 1.0, "3": 1.5, "note": 0.0}, spec, None) == [(1.0, 2.0), (3.0, 1.5), (8.0, 1.0)]
    rows = PlotSpec(file="t.png", alt="t", y="timing.curve", x="1", y_key="2")
    assert _points([[100, 1.5, 2.2], [200, 3.0, 2.0], [300]], rows, None) == [(1.5, 2.2), (3.0, 2.0)]


def test_the_scale_note_of_migrated_records_is_called_the_preset(tmp_path):
    """A scale's note describes its preset; records migrated from the old program did not run it (the intrinsic
    GPU page's header gave the preset's width and tokens for runs of another size): the header says so."""
    data = copy.deepcopy(TINY)
    data["scales"]["cpu"] = {"note": "width 384, 6.6M tokens a run."}
    spec = load_study(write(tmp_path / "s.yaml", **data))
    runs = {"b0": {**_rec("baseline", "8", 0, 50.0), "config_hash": "migrated"},
            "e0": {**_rec("eqt", "8", 0, 90.0), "config_hash": "migrated"}}
    (tmp_path / "out").mkdir()
    render(tmp_path / "out", spec, "tiny", "cpu", {"runs": runs}, [])
    head = (tmp_path / "out" / "README.md").read_text().split("\n\n")[1]
    assert head.endswith("--report-only --out DIR` (DIR: the folder above this one; study `studies/tiny.yaml`; 2 "
                         "runs). Scale preset (these runs were recorded before it by "
                         "the old program: their own settings are below): width 384, 6.6M tokens a run."), head
    runs["e0"].pop("config_hash")
    render(tmp_path / "out", spec, "tiny", "cpu", {"runs": runs}, [])
    assert "Scale preset (1 of these runs were" in (tmp_path / "out" / "README.md").read_text()


def _page(tmp_path, runs):
    return PageContext(load_study(write(tmp_path / "s.yaml")), "tiny", "cpu", tmp_path, {"runs": runs}, [])


def _acc(model, length, seed, acc):
    return {"cell": {"model": model, "length": length}, "seed": seed, "metrics": {"acc": acc}}


def test_several_runs_of_one_seed_show_their_mean(tmp_path):
    """Two runs of one cell and seed (acc 80 and 90) are averaged: 85.0 (an outside probe's mutant that kept the
    last run, 90.0, survived)."""
    ctx = _page(tmp_path, {"a": _acc("eqt", "8", 0, 80.0), "b": _acc("eqt", "8", 0, 90.0)})
    t = TableSpec(rows=["model"], columns=[{"label": "acc", "metric": "acc", "agg": "mean", "fmt": ".1f"}])
    assert "| eqt | 85.0 |" in render_table(ctx, t)


def test_a_paper_row_goes_beside_the_row_matching_all_its_labels(tmp_path):
    """With rows model x length the paper's {model: eqt, length: 8} number is on eqt/8 only, not on eqt/16 that
    shares one label (an outside probe's mutant matching any label survived: the one test had one row axis)."""
    ctx = _page(tmp_path, {"a": _acc("eqt", "8", 0, 80.0), "b": _acc("eqt", "16", 0, 70.0)})
    t = TableSpec(rows=["model", "length"], columns=[
        {"label": "acc", "metric": "acc", "agg": "mean", "fmt": ".1f"}, {"label": "paper", "paper": "acc"}],
        paper=[{"model": "eqt", "length": "8", "acc": "92.8"}])
    text = render_table(ctx, t)
    assert "| eqt | 8 | 80.0 | 92.8 |" in text and "| eqt | 16 | 70.0 | – |" in text, text


def test_a_columns_scale_multiplies(tmp_path):
    """``scale: 100`` shows 0.8 as 80.0 (no test used scale; an outside probe's mutant that divided survived)."""
    ctx = _page(tmp_path, {"a": _acc("eqt", "8", 0, 0.8), "b": _acc("baseline", "8", 0, 0.5)})
    t = TableSpec(rows=["model"], columns=[
        {"label": "acc %", "metric": "acc", "agg": "mean", "fmt": ".1f", "scale": 100}])
    text = render_table(ctx, t)
    assert "| eqt | 80.0 |" in text and "| baseline | 50.0 |" in text, text


def test_a_scaled_minus_column_scales_the_difference_once(tmp_path):
    """``scale: 100`` on a ``minus`` column shows (0.8 - 0.5) x 100 = 30.0. Found writing the scale test: the
    paired side came from column_values, which had scaled it already, so the page showed -4920.0."""
    ctx = _page(tmp_path, {"a": _acc("eqt", "8", 0, 0.8), "b": _acc("baseline", "8", 0, 0.5)})
    t = TableSpec(rows=["model"], where={"model": "eqt"}, columns=[
        {"label": "gain", "metric": "acc", "minus": {"model": "baseline"}, "agg": "mean", "fmt": ".1f", "scale": 100}])
    assert "| eqt | 30.0 |" in render_table(ctx, t)
