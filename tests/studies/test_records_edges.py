"""Record checks (studies/records.py, _out_of_range / _bad_field) at edges test_runner.py leaves open."""

from energyformer.studies.records import _bad_field


def _rec(**metrics):
    return {"seed": 0, "cell": {"n": 4}, "metrics": metrics}


def test_a_standard_deviation_of_an_accuracy_is_not_range_checked():
    """_out_of_range: "a standard error or deviation (``_se``, ``_std``) ... [is] not checked": an accuracy's std
    in % may exceed 100 of nothing (it is not an accuracy)."""
    assert _bad_field(_rec(accuracy={"k32_std": 150.0, "k32_se": 150.0}), "r") is None
    assert _bad_field(_rec(accuracy={"k32": 150.0}), "r") is not None
