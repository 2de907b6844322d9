"""What a checkpoint's state may hold (train/state_checks.py): plain values and tensors only, named where not;
the tensors holding NaN or inf named by their path."""

import numpy as np
import pytest
import torch

from energyformer.train.state_checks import check_plain, nonfinite_tensors


def test_check_plain_names_the_path_of_an_object_weights_only_loading_would_refuse():
    check_plain({"step": 3, "rng": [torch.zeros(2), (1.5, None)], "dtype": torch.float32, "shape": torch.Size([2])})
    with pytest.raises(TypeError, match=r"state\['data'\]\[1\] is a numpy.ndarray; .*torch.from_numpy"):
        check_plain({"data": [0, np.zeros(3)]})
    with pytest.raises(TypeError, match=r"state: key \(1, 2\) of type tuple cannot be saved"):
        check_plain({(1, 2): 0})


def test_nonfinite_tensors_names_each_nested_tensor_with_nan_or_inf():
    state = {"w": torch.tensor([1.0, float("nan")]), "opt": [{"m": torch.tensor([float("inf")])}, torch.ones(1)],
             "ids": torch.tensor([1, 2]), "empty": torch.zeros(0)}
    assert nonfinite_tensors(state) == ["w", "opt[0].m"]
    assert nonfinite_tensors({"a": torch.ones(2)}) == []
