"""Saving report figures: one place for the folder creation, the file write, closing the figure — and the
figure's data digest, which lets ``energyformer report --check`` tell a stale figure from a re-drawn one.

A PNG's bytes depend on matplotlib's version, its fonts and its antialiasing as much as on the data, so two
renders of the same artifacts on two machines rarely agree byte for byte. What a results figure must agree on
is what it shows: :func:`figure_digest` hashes that — per axes its title, labels, scales and legend; every
line's label and points; the points of every filled area or scatter (as a set: matplotlib's versions order a
polygon's vertices differently); bars; images' pixel values; the figure's and the axes' free texts — every
number rounded to 6 significant digits, tick positions and labels left out (matplotlib chooses them). It is
stored in the PNG as the text chunk :data:`DATA_KEY` (``savefig``'s metadata), beside no ``Software`` entry
(the version string would differ between machines too); :func:`stored_digest` reads it back.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

#: the PNG text chunk that holds a figure's data digest
DATA_KEY = "energyformer-data"


def _num(v) -> str:
    return f"{float(v):.6g}"


def _points(xy) -> list[list[str]]:
    return [[_num(a) for a in p] for p in xy]


def _array_digest(a) -> str:
    import numpy as np

    v = np.round(np.asarray(np.ma.filled(np.ma.asarray(a, dtype=np.float64), np.nan)), 6)
    return hashlib.sha256(str(v.shape).encode() + np.ascontiguousarray(v, dtype="<f8").tobytes()).hexdigest()


def _axes_record(ax) -> dict:
    from matplotlib.patches import Rectangle

    legend = ax.get_legend()
    rec = {"title": [ax.get_title(loc) for loc in ("left", "center", "right")], "x": ax.get_xlabel(),
           "y": ax.get_ylabel(), "scale": [ax.get_xscale(), ax.get_yscale()],
           "legend": [t.get_text() for t in legend.get_texts()] if legend else [],
           "lines": [[ln.get_label(), _points(ln.get_xydata())] for ln in ax.get_lines()],
           "texts": [t.get_text() for t in ax.texts],
           "bars": [[_num(p.get_x()), _num(p.get_y()), _num(p.get_width()), _num(p.get_height())]
                    for p in ax.patches if isinstance(p, Rectangle)],
           "images": [_array_digest(im.get_array()) for im in ax.get_images()]}
    areas = []
    for c in ax.collections:
        pts = {tuple(p) for path in c.get_paths() for p in _points(path.vertices)}
        pts |= {tuple(p) for p in _points(c.get_offsets())} if len(c.get_offsets()) > 1 else set()
        areas.append(sorted(pts))
    rec["areas"] = areas
    return rec


def figure_digest(fig) -> str:
    """A SHA-256 of what ``fig`` shows (the module's docstring): equal for the same data drawn by any
    matplotlib, different when a plotted number, label or title changes."""
    rec = {"texts": [t.get_text() for t in fig.texts],
           "suptitle": fig._suptitle.get_text() if getattr(fig, "_suptitle", None) else "",
           "axes": [_axes_record(ax) for ax in fig.get_axes()]}
    return hashlib.sha256(json.dumps(rec, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def save_figure(fig, path: str | Path, dpi: int = 110) -> Path:
    """Write ``fig`` to ``path`` (parent folders created) with its data digest in the PNG's metadata, close it,
    and return the path."""
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # PNG: no Software entry (its version string differs between machines), the data digest; other formats as
    # matplotlib writes them (SVG and PDF take other metadata keys)
    meta = {"Software": None, DATA_KEY: figure_digest(fig)} if path.suffix.lower() == ".png" else None
    fig.savefig(path, dpi=dpi, metadata=meta)
    plt.close(fig)
    return path


def stored_digest(path: str | Path) -> str | None:
    """The data digest a PNG written by :func:`save_figure` holds, or None (another writer, or not a PNG)."""
    from PIL import Image

    try:
        with Image.open(path) as im:
            return getattr(im, "text", {}).get(DATA_KEY)
    except (OSError, ValueError):
        return None
