"""The Hyper-SET image report's tables and orderings on made-up rows (no training)."""

from energyformer.analysis.classification_report import orderings, orderings_markdown, table1, table4


def _row(acc: float, params: int = 100_000, width: int = 96) -> dict:
    return {"test_accuracy": acc, "val_accuracy": acc, "params": {"total": params}, "width": width,
            "train_images_per_s": 100.0, "device": "cpu"}


def _claim(claims, start):
    return next(c for c in claims if c["claim"].startswith(start))


def test_orderings_say_holds_does_not_hold_and_not_run():
    rows = {"hyperset": _row(0.60), "transformer": _row(0.70), "et": _row(0.50), "crate": _row(0.65),
            "crate_t_code": _row(0.40), "crate_t": _row(0.10), "hyperset_wide": _row(0.72),
            "hyperset_fixed01": _row(0.55)}
    claims = orderings(rows)
    assert _claim(claims, "Hyper-SET ≥ Transformer")["here"] is False      # 60 < 70
    assert _claim(claims, "Hyper-SET ≥ Transformer")["paper"] is True      # 90.11 >= 89.90
    assert _claim(claims, "wider Hyper-SET")["here"] is True               # 72 >= 70
    assert _claim(claims, "Energy Transformer is the lowest")["here"] is False  # CRATE-T 40 < ET 50
    rows["crate_t_code"] = _row(0.66)  # the exact crate_t (10) is not one of the paper's Table 1 models
    assert _claim(orderings(rows), "Energy Transformer is the lowest")["here"] is True
    assert _claim(claims, "learned step sizes > fixed 0.1")["here"] is True  # 60 > 55
    assert _claim(claims, "learned step sizes > both")["here"] is None     # fixed 0.5 not run
    md = orderings_markdown(claims)
    assert "**DOES NOT HOLD**" in md and "HOLDS" in md and "not run" in md


def test_tables_list_configs_not_run():
    rows = {"transformer": _row(0.7)}
    t1 = table1(rows, "Fashion-MNIST")
    assert "| Transformer (`transformer`) | 96 | 100.0K | 70.00 | 70.00 | cpu |" in t1
    assert "(`hyperset`) | — | — | not run" in t1
    assert t1.count("not run") == 2 * (len(t1.splitlines()) - 3)  # every row but the header and transformer
    assert "sigmoid attention (`hyperset_sigmoid`) | — | not run | 85.93" in table4(rows, "Fashion-MNIST")
