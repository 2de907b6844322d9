"""Confusion matrix, per-class accuracy and the PNG, against a hand count."""

import math

import pytest
import torch

from energyformer.analysis.classification import (
    accuracy, confusion_matrix, per_class_accuracy, per_class_markdown, plot_confusion,
)


def test_confusion_matrix_is_the_hand_count():
    g = torch.Generator().manual_seed(0)
    labels = torch.randint(0, 4, (200,), generator=g)
    preds = torch.where(torch.rand(200, generator=g) < 0.7, labels, torch.randint(0, 4, (200,), generator=g))
    cm = confusion_matrix(preds, labels, 4)
    ref = torch.zeros(4, 4, dtype=torch.long)
    for t, p in zip(labels.tolist(), preds.tolist()):
        ref[t, p] += 1
    assert torch.equal(cm, ref)
    assert accuracy(cm) == pytest.approx(float((preds == labels).float().mean()))
    pc = per_class_accuracy(cm)
    for c in range(4):
        sel = labels == c
        assert pc[c] == pytest.approx(float((preds[sel] == c).float().mean()))


def test_missing_class_is_nan_and_bad_classes_are_errors():
    cm = confusion_matrix(torch.tensor([0, 1, 1]), torch.tensor([0, 1, 0]), 3)
    pc = per_class_accuracy(cm)
    assert pc[:2] == [0.5, 1.0] and math.isnan(pc[2])
    with pytest.raises(ValueError, match="n_classes = 3"):
        confusion_matrix(torch.tensor([3]), torch.tensor([0]), 3)
    text = per_class_markdown(cm, ["a", "b", "c"])
    assert "| a | 2 | 50.0 | b (1) |" in text and "| c | 0 | - | - |" in text


def test_plot_writes_a_png(tmp_path):
    cm = torch.tensor([[5, 1], [2, 7]])
    p = plot_confusion(cm, ["x", "y"], tmp_path / "sub" / "cm.png")
    assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 2000


def test_the_drawn_colours_are_row_normalised():
    """Each true class's row sums to 1 in colour (its recall per predicted class); an outside probe's mutant that
    normalised by columns survived, the plot being checked only for a file."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from energyformer.analysis.classification import draw_confusion

    cm = torch.tensor([[8, 2, 0], [1, 1, 2], [0, 0, 0]])
    fig, ax = plt.subplots()
    try:
        frac = torch.as_tensor(draw_confusion(ax, cm, ["a", "b", "c"]).get_array())
    finally:
        plt.close(fig)
    want = torch.tensor([[0.8, 0.2, 0.0], [0.25, 0.25, 0.5], [0.0, 0.0, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(frac, want)
