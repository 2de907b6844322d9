"""analysis/figures.py: a figure's data digest — the same for the same data however it is drawn, different when
a plotted number or label changes — stored in the PNG and read back."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from energyformer.analysis.figures import figure_digest, save_figure, stored_digest  # noqa: E402
from energyformer.report.render import figure_differs  # noqa: E402


def _fig(ys=(1.0, 2.0, 1.5), label="ours", band=True, size=(4, 3)):
    fig, ax = plt.subplots(figsize=size)
    ax.plot([0, 1, 2], list(ys), marker=".", label=label)
    if band:
        ax.fill_between([0, 1, 2], [y - 0.1 for y in ys], [y + 0.1 for y in ys], alpha=0.2)
    ax.bar([3], [0.5])
    ax.imshow([[0.0, 1.0], [0.5, 0.25]], extent=(4, 5, 0, 1))
    ax.set_title("loss")
    ax.legend()
    return fig


def test_digest_follows_the_data_not_the_drawing():
    base = figure_digest(_fig())
    assert figure_digest(_fig(size=(8, 5))) == base          # another size: the same data
    assert figure_digest(_fig(ys=(1.0, 2.0, 1.4))) != base  # one point moved
    assert figure_digest(_fig(label="theirs")) != base       # a label
    assert figure_digest(_fig(band=False)) != base           # the band gone
    assert figure_digest(_fig(ys=(1.0, 2.0, 1.5 + 1e-9))) == base  # below the 6 significant digits kept
    plt.close("all")


def test_saved_png_carries_its_digest_and_check_compares_by_it(tmp_path):
    a, b, c = tmp_path / "a.png", tmp_path / "b.png", tmp_path / "c.png"
    digest = figure_digest(_fig())
    save_figure(_fig(), a, dpi=60)
    save_figure(_fig(), b, dpi=90)   # other bytes (another drawing), the same data
    save_figure(_fig(ys=(3.0, 2.0, 1.0)), c, dpi=60)
    assert stored_digest(a) == stored_digest(b) == digest
    assert a.read_bytes() != b.read_bytes()
    assert figure_differs(a, b) is None and figure_differs(a, a) is None
    assert "shows other data" in figure_differs(a, c)
    fig = _fig()
    fig.savefig(tmp_path / "plain.png", dpi=60)   # no digest: bytes decide
    plt.close(fig)
    assert stored_digest(tmp_path / "plain.png") is None
    assert "committed figure has no data digest" in figure_differs(tmp_path / "plain.png", a)
    assert "render has no data digest" in figure_differs(a, tmp_path / "plain.png")
    (tmp_path / "x.txt").write_text("not a png")
    assert stored_digest(tmp_path / "x.txt") is None
