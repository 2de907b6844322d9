"""A researcher's own energy from the CLI (probe T, finding 3): ``--plugin MODULE_OR_FILE.py`` (or
``ENERGYFORMER_PLUGINS``) imports it for every command, the run records it in ``run_info.json`` and eval, generate,
export and ``--resume`` import it again; an exported folder loads in a fresh process. Before, the CLI had no way to
import a user's module (``--plugin`` was an unknown argument: only a wrapper script worked), and ``export`` printed
that the folder loads with ``from_pretrained(..., trust_remote_code=True)`` while a fresh process raised "unknown
attention kind" (its self-check loaded the folder in the exporting process, where the plugin was registered)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from energyformer import plugins
from energyformer.blocks.registry import ATTENTIONS
from energyformer.cli import main
from energyformer.core import ENERGIES

TINY = ["model.dim=16", "model.n_layers=1", "model.heads=2", "model.max_seq_len=32", "task.seq_len=16",
        "task.batch_size=2", "task.eval_batch_size=2", "task.eval_max_batches=1", "task.tokenizer=bytes",
        "train.progress=false", "train.tensorboard=false", "train.steps=2", "train.eval_every=0",
        "train.save_every=2", "model.block.attention.steps=1"]

#: a plugin module: the fixture energy (tests/fixtures/quad_attn_energy.py, self-contained) and its registration
PLUGIN = (Path(__file__).parent / "fixtures" / "quad_attn_energy.py").read_text() + '''
from typing import Literal

from energyformer.blocks.registry import ATTENTIONS, AttentionConfig, SublayerSpec
from energyformer.core import DescentConfig, EnergyBlock, register_energy

KIND = "KIND_NAME"

register_energy(KIND + "_energy")(QuadAttn)


class QuadAttnConfig(AttentionConfig, DescentConfig):
    """A plugin's quadratic + softmax attention energy, descended."""
    kind: Literal["KIND_NAME"] = "KIND_NAME"
    step_size: float = 0.5

    @classmethod
    def examples(cls):
        return [{}]


@ATTENTIONS.register(KIND, QuadAttnConfig)
def build(cfg: QuadAttnConfig, spec: SublayerSpec):
    return EnergyBlock.from_config(QuadAttn(spec.dim, spec.causal), cfg, spec.dim, spec.heads)
'''


def _sets(items):
    return [a for kv in items for a in ("--set", kv)]


def _plugin(folder, module: str, kind: str):
    """Write a plugin registering attention kind ``kind`` (energy ``kind + '_energy'``) as ``folder/module.py``."""
    path = folder / f"{module}.py"
    path.write_text(PLUGIN.replace("KIND_NAME", kind))
    return path


@pytest.fixture
def forget():
    """``forget()``: as a new process would be, without the plugins' registrations and modules (and at the end)."""
    kinds, energies = set(ATTENTIONS.entries), set(ENERGIES)
    loaded, path = list(plugins.LOADED_PLUGINS), list(sys.path)

    def reset():
        for k in set(ATTENTIONS.entries) - kinds:
            del ATTENTIONS.entries[k]
        for k in set(ENERGIES) - energies:
            del ENERGIES[k]
        for m in [m for m in sys.modules if m.startswith("efplug")]:
            del sys.modules[m]
        plugins.LOADED_PLUGINS[:] = loaded

    yield reset
    reset()
    sys.path[:] = path


def _one_line_error(capsys, needles):
    err = capsys.readouterr().err.strip()
    assert err.startswith("energyformer: error:") and "\n" not in err, err
    for n in needles:
        assert n in err, (n, err)


def test_plugin_trains_evaluates_generates_and_resumes(tmp_path, capsys, forget):
    plug = _plugin(tmp_path, "efplug_quad", "cli_quad")
    ov = TINY + ["model.block.attention.kind=cli_quad", "name=mine", f"out_dir={tmp_path}"]
    assert main(["train", "lm/llama", "--plugin", str(plug), *_sets(ov)]) == 0
    run = tmp_path / "mine"
    info = json.loads((run / "run_info.json").read_text())
    assert info["plugins"] == [{"module": "efplug_quad", "file": str(plug)}]
    assert info["plugin_checks"]["energy cli_quad_energy"] == "ok"  # the plugin's energy passed core.check_energy
    forget()  # eval, generate and --resume in a "new process": the run's record imports the plugin
    capsys.readouterr()
    assert main(["eval", str(run)]) == 0 and "perplexity" in capsys.readouterr().out
    forget()
    assert main(["generate", str(run), "--prompt", "RO", "--max-new-tokens", "3", "--greedy"]) == 0
    assert capsys.readouterr().out.startswith("RO")
    forget()
    assert main(["train", "lm/llama", "--resume", *_sets(ov + ["train.steps=4"])]) == 0  # (no --plugin given)
    assert "step 4: saved" in capsys.readouterr().out
    forget()  # the plugin file moved away: one line naming the plugin and how to give it
    plug.rename(tmp_path / "elsewhere.py")
    assert main(["eval", str(run)]) == 2
    _one_line_error(capsys, [f"{run} was trained with the plugin module 'efplug_quad'", str(plug), "--plugin"])
    forget()  # a kind the config uses with no plugin loaded: the error says how plugins are given
    assert main(["config", "lm/llama", "--unresolved", *_sets(["model.block.attention.kind=cli_quad"])]) == 2
    _one_line_error(capsys, ["unknown attention kind 'cli_quad'", "--plugin"])
    assert main(["--plugin", str(tmp_path / "elsewhere.py"), "list", "attentions"]) == 0
    assert "cli_quad" in capsys.readouterr().out


def test_plugins_from_the_environment_and_import_errors_are_one_line(tmp_path, capsys, forget, monkeypatch):
    _plugin(tmp_path, "efplug_env", "env_quad")
    monkeypatch.setenv("ENERGYFORMER_PLUGINS", str(tmp_path / "efplug_env.py"))
    assert main(["list", "attentions"]) == 0 and "env_quad" in capsys.readouterr().out
    monkeypatch.delenv("ENERGYFORMER_PLUGINS")
    assert main(["list", "energies", "--plugin", "efplug_no_such_module"]) == 2
    _one_line_error(capsys, ["--plugin 'efplug_no_such_module' does not import: ModuleNotFoundError"])
    (tmp_path / "efplug_bad.py").write_text("def broken(:\n")
    assert main(["--plugin", str(tmp_path / "efplug_bad.py"), "list", "energies"]) == 2
    _one_line_error(capsys, ["efplug_bad.py' does not import: SyntaxError"])
    monkeypatch.setenv("ENERGYFORMER_PLUGINS", str(tmp_path / "efplug_missing.py"))
    assert main(["list", "energies"]) == 2
    _one_line_error(capsys, ["ENERGYFORMER_PLUGINS", "efplug_missing.py", "no Python file"])
    monkeypatch.delenv("ENERGYFORMER_PLUGINS")
    for stem in ("efplug.dotted", "1efplug", "ef-plug"):  # trained, then no export could import it (`my.plug`)
        (tmp_path / f"{stem}.py").write_text("X = 1\n")
        assert main(["--plugin", str(tmp_path / f"{stem}.py"), "list", "energies"]) == 2
        _one_line_error(capsys, [f"{stem!r} is not a Python module name", "rename the file"])
        assert stem not in sys.modules


_LOAD = """import sys, torch
from transformers import AutoModelForCausalLM
m = AutoModelForCausalLM.from_pretrained(sys.argv[1], trust_remote_code=True, local_files_only=True)
print(type(m).__name__, tuple(m(input_ids=torch.tensor([[1, 2, 3]])).logits.shape))
"""


def test_export_of_a_plugin_run_loads_in_a_fresh_process(tmp_path, capsys, forget):
    pytest.importorskip("transformers")
    plug = _plugin(tmp_path, "efplug_exp", "exp_quad")
    ov = TINY + ["model.block.attention.kind=exp_quad", "name=mine", f"out_dir={tmp_path}"]
    assert main(["train", "lm/llama", "--plugin", str(plug), *_sets(ov)]) == 0
    forget()
    out = tmp_path / "hf"
    capsys.readouterr()
    assert main(["export", str(tmp_path / "mine"), str(out)]) == 0  # its self-check loads it in a fresh process
    printed = capsys.readouterr().out
    assert "plugin file(s) efplug_exp copied into" in printed
    config = json.loads((out / "config.json").read_text())
    assert config["energyformer_plugins"] == [{"module": "efplug_exp", "file": "plugins/efplug_exp.py"}]
    plug.unlink()  # the folder alone is enough: the plugin's copy travels with it
    empty = tmp_path / "elsewhere"
    empty.mkdir()
    proc = subprocess.run([sys.executable, "-c", _LOAD, str(out)], cwd=empty, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "EnergyformerForCausalLM (1, 3, 256)" in proc.stdout


def test_export_refuses_a_folder_that_does_not_load_in_a_fresh_process(tmp_path, forget):
    """A package plugin importable only in the exporting process (here: its folder put on sys.path in-process) is
    not copied; the fresh-process check finds that the folder does not load and says so, naming the plugin."""
    pytest.importorskip("transformers")
    from energyformer.export import ExportError, export_hf
    from energyformer.experiment import load_run_config, run_experiment

    pkg = tmp_path / "site" / "efplug_pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(PLUGIN.replace("KIND_NAME", "pkg_quad"))
    sys.path.insert(0, str(tmp_path / "site"))
    plugins.import_plugins(["efplug_pkg"])
    cfg = load_run_config("lm/llama", TINY + ["model.block.attention.kind=pkg_quad", f"out_dir={tmp_path}"])
    res = run_experiment(cfg)
    assert json.loads((res.run_dir / "run_info.json").read_text())["plugins"] == [{"module": "efplug_pkg"}]
    with pytest.raises(ExportError, match=r"does not load in a fresh Python process .*plugin module 'efplug_pkg'"):
        export_hf(res.model, tmp_path / "hf")
