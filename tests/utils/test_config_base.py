"""Config inheritance (issue 22 item 5): ``base:`` names the config a variant derives from."""

from pathlib import Path

import pytest

from energyformer.errors import ConfigError
from energyformer.experiment import RunConfig, load_run_config
from energyformer.utils.config import read_yaml
from energyformer.utils.yaml_files import LIBRARY_CONFIGS


def _write(root: Path, name: str, text: str) -> Path:
    p = root / "configs" / f"{name}.yaml"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


def test_variant_states_only_what_differs(tmp_path):
    _write(tmp_path, "lm/base", "name: b\nmodel: {dim: 32, n_layers: 2, heads: 2, block: {attention: "
           "{kind: cem, steps: 2}, dropout: 0.1}}\ntrain: {steps: 10, lr: 1.0e-3}\n")
    v = _write(tmp_path, "lm/variant", "base: lm/base\nname: v\nmodel: {block: {attention: {steps: 3}}}\n"
               "train: {lr: 2.0e-3}\n")
    data = read_yaml(v)
    assert "base" not in data and data["name"] == "v"
    assert data["model"]["dim"] == 32 and data["model"]["block"]["dropout"] == 0.1
    assert data["model"]["block"]["attention"] == {"kind": "cem", "steps": 3}
    assert data["train"] == {"steps": 10, "lr": 2.0e-3}
    cfg = load_run_config(str(v), ["train.steps=5"])  # overrides still win over both files
    assert isinstance(cfg, RunConfig) and cfg.train.steps == 5 and cfg.model.block.attention.steps == 3


def test_another_kind_replaces_the_section_and_chains_follow(tmp_path):
    _write(tmp_path, "a", "model: {block: {attention: {kind: cem, steps: 2}, mlp: swiglu}}\n")
    _write(tmp_path, "b", "base: a\nmodel: {block: {attention: {kind: gpt}}}\n")
    c = _write(tmp_path, "sub/c", "base: b\nmodel: {block: {mlp: gelu}}\n")
    block = read_yaml(c)["model"]["block"]
    assert block == {"attention": {"kind": "gpt"}, "mlp": "gelu"}  # no cem 'steps' carried into gpt


def test_relative_yaml_path_base(tmp_path):
    (tmp_path / "x.yaml").write_text("name: x\ntrain: {steps: 3}\n")
    (tmp_path / "y.yaml").write_text("base: x.yaml\nname: y\n")
    assert read_yaml(tmp_path / "y.yaml") == {"name": "y", "train": {"steps": 3}}


def test_a_config_kept_anywhere_can_derive_from_a_library_config(tmp_path):
    """``base: lm/llama`` in a file outside any configs/ folder was looked up beside it only ("not found")."""
    mine = tmp_path / "mine.yaml"
    mine.write_text("base: lm/llama\nname: mine\nmodel: {dim: 48}\n")
    lib = read_yaml(LIBRARY_CONFIGS / "lm" / "llama.yaml")
    got = read_yaml(mine)
    assert got == {**lib, "name": "mine", "model": {**lib.get("model", {}), "dim": 48}}
    (tmp_path / "lm").mkdir()  # a config of that name beside the file still wins
    (tmp_path / "lm" / "llama.yaml").write_text("name: local\n")
    assert read_yaml(mine) == {"name": "mine", "model": {"dim": 48}}


@pytest.mark.parametrize("files, match", [
    ({"p": "base: q\n", "q": "base: p\n"}, "inheritance cycle"),
    ({"p": "base: nowhere\n"}, "base = 'nowhere': no such config"),
    ({"p": "base: 3\n"}, "base = 3: must be a config name"),
])
def test_bad_bases_are_one_line_errors(tmp_path, files, match):
    for name, text in files.items():
        _write(tmp_path, name, text)
    with pytest.raises(ConfigError, match=match):
        read_yaml(tmp_path / "configs" / "p.yaml")


def test_unknown_key_in_a_variant_is_still_named(tmp_path):
    _write(tmp_path, "lm/base", "model: {dim: 32}\n")
    v = _write(tmp_path, "lm/v", "base: lm/base\nmodel: {dimm: 64}\n")
    with pytest.raises(ConfigError, match="model.dimm"):
        load_run_config(str(v))
