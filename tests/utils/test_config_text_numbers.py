"""A number typed for a text key is kept as typed: ``--set name=1e-3`` named the run '0.001' (YAML read a number,
then pydantic turned it back into other text), ``010`` became '10', ``0x1F`` '31', ``1_000`` '1000', ``out_dir=2024.10``
'2024.1', and a YAML file's ``name: 1e3`` '1000.0'. Number keys still read the number."""

from __future__ import annotations

import copy
import pickle

import pytest
import yaml

from energyformer.experiment import load_run_config
from energyformer.utils.config import dumps_yaml, to_dict
from energyformer.utils.yaml_files import parse_value, read_yaml


@pytest.mark.parametrize("typed", ["1e-3", "010", "0x1F", "1_000", "2024.10", "1e3", "7", "12"])
def test_a_text_key_gets_the_text_typed(typed):
    cfg = load_run_config("lm/llama", [f"name={typed}", f"out_dir={typed}"])
    assert cfg.name == typed and cfg.out_dir == typed


def test_number_keys_read_the_number_and_the_saved_config_is_plain(tmp_path):
    cfg = load_run_config("lm/llama", ["train.steps=1e3", "train.lr=3e-4", "task.batch_size=0x10", "name=1e-3"])
    assert cfg.train.steps == 1000 and type(cfg.train.steps) is int
    assert cfg.train.lr == 3e-4 and type(cfg.train.lr) is float and cfg.task.batch_size == 16
    text = dumps_yaml(to_dict(cfg))  # yaml.safe_dump: an int/float subclass left in the config would not dump
    assert yaml.safe_load(text)["name"] == "1e-3" and yaml.safe_load(text)["train"]["steps"] == 1000


def test_a_yaml_file_keeps_the_text_too(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("base: lm/llama\nname: 1e3\ntask: {text_files: [2024.10], corpus: files}\ntrain: {steps: 1_000}\n")
    cfg = load_run_config(str(f), [])
    assert cfg.name == "1e3" and cfg.train.steps == 1000
    assert cfg.task.text_files[0].endswith("/2024.10")


def test_a_parsed_number_survives_pickle_and_deepcopy(tmp_path):
    """Before: ``pickle.loads`` / ``copy.deepcopy`` of a parsed number raised TypeError (``__new__`` missing 'text'),
    so a raw mapping or an ``Any`` field's value could not be copied or sent to a spawned worker."""
    f = tmp_path / "c.yaml"
    f.write_text("a: 1e-3\nb: [010, 0x1F]\n")
    for data in (read_yaml(f), {"a": parse_value("1e-3"), "b": parse_value("[010, 0x1F]")}):
        for copied in (pickle.loads(pickle.dumps(data)), copy.deepcopy(data)):
            assert copied == {"a": 0.001, "b": [10, 31]}
            assert [str(copied["a"]), *map(str, copied["b"])] == ["1e-3", "010", "0x1F"]


def test_a_date_typed_for_a_text_key_is_that_text(tmp_path):
    """Before: YAML read ``2024-01-05`` as a ``datetime.date`` and the text key refused it ("name =
    datetime.date(2024, 1, 5): input should be a valid string"); no key takes a date."""
    f = tmp_path / "c.yaml"
    f.write_text("base: lm/llama\nname: 2024-01-05\n")
    assert load_run_config(str(f), []).name == "2024-01-05"
    assert load_run_config("lm/llama", ["name=2024-01-05", "out_dir=2024-01-05 10:30:00"]).name == "2024-01-05"
    assert parse_value("2024-01-05T10:30:00Z") == "2024-01-05T10:30:00Z"
