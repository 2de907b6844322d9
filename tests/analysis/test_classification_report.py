"""The Hyper-SET image report's tables on made-up rows (no training)."""

from energyformer.analysis.classification_report import table1, table4


def _row(acc: float, params: int = 100_000, width: int = 96) -> dict:
    return {"test_accuracy": acc, "val_accuracy": acc, "params": {"total": params}, "width": width,
            "train_images_per_s": 100.0, "device": "cpu"}


def test_tables_list_configs_not_run():
    rows = {"transformer": _row(0.7)}
    t1 = table1(rows, "Fashion-MNIST")
    assert "| Transformer (`transformer`) | 96 | 100.0K | 70.00 | 70.00 | cpu |" in t1
    assert "(`hyperset`) | — | — | not run" in t1
    assert t1.count("not run") == 2 * (len(t1.splitlines()) - 3)  # every row but the header and transformer
    assert "sigmoid attention (`hyperset_sigmoid`) | — | not run | 85.93" in table4(rows, "Fashion-MNIST")
