"""The resume check compares models, not spellings: a checkpoint whose recorded config uses an older
spelling of today's keys (issue 19: ``norm_in_loop`` / ``init`` at the sublayer's top level, now under
``norm``) continues under the same model; a real change is still refused."""

import copy

import pytest

from energyformer.errors import ConfigError
from energyformer.experiment import load_run_config, normalise_model_config
from energyformer.train.resume import check_model_config
from energyformer.utils.config import to_dict


def _old_spelling(run: dict) -> dict:
    old = copy.deepcopy(run)
    for part in ("attention", "mlp"):
        sub = old["model"]["block"][part]
        norm = sub.pop("norm")
        sub["norm_in_loop"], sub["init"] = norm["in_loop"], norm["init"]
    return old


def test_an_old_spelling_of_the_same_model_resumes(tmp_path):
    run = to_dict(load_run_config("lm/cem_full"))
    saved = _old_spelling(run)
    with pytest.raises(ConfigError, match="model config differs"):  # compared as written: a false change
        check_model_config(saved, run, "ckpt", tmp_path)
    check_model_config(saved, run, "ckpt", tmp_path, normalise_model_config)


def test_a_changed_model_is_still_refused_after_normalising(tmp_path):
    run = to_dict(load_run_config("lm/cem_full"))
    saved = _old_spelling(run)
    saved["model"]["block"]["attention"]["norm_in_loop"] = False
    with pytest.raises(ConfigError, match="in_loop"):
        check_model_config(saved, run, "ckpt", tmp_path, normalise_model_config)
