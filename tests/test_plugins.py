"""Plugin import rules (plugins module docstrings): ENERGYFORMER_PLUGINS is comma-separated and imported before
``--plugin``; a file plugin's folder is importable by it; a plugin is imported (and recorded) once; a failed import
is one line naming the plugin and leaves nothing half-imported; an export's relative record is read from its folder."""

from __future__ import annotations

import sys

import pytest

from energyformer import plugins
from energyformer.utils.validate import ConfigError
import json


@pytest.fixture
def forget():
    loaded, path = list(plugins.LOADED_PLUGINS), list(sys.path)

    def reset():
        for m in [m for m in sys.modules if m.startswith("efprobe")]:
            del sys.modules[m]
        plugins.LOADED_PLUGINS[:] = loaded

    reset()
    yield reset
    reset()
    sys.path[:] = path


def _file(folder, stem, text="X = 1\n"):
    path = folder / f"{stem}.py"
    path.write_text(text)
    return path


def test_the_environment_names_several_plugins_imported_before_the_options(tmp_path, forget, monkeypatch):
    a, b, c = (_file(tmp_path, s) for s in ("efprobe_a", "efprobe_b", "efprobe_c"))
    monkeypatch.setenv("ENERGYFORMER_PLUGINS", f" {a} ,{b},")
    got = plugins.import_cli_plugins([str(c)])
    assert [r["module"] for r in got] == ["efprobe_a", "efprobe_b", "efprobe_c"]
    assert [r["module"] for r in plugins.LOADED_PLUGINS[-3:]] == ["efprobe_a", "efprobe_b", "efprobe_c"]


def test_a_file_plugin_imports_its_siblings(tmp_path, forget):
    _file(tmp_path, "efprobe_sibling", "VALUE = 7\n")
    main = _file(tmp_path, "efprobe_main", "from efprobe_sibling import VALUE\n")
    assert plugins.import_plugins([str(main)]) == [{"module": "efprobe_main", "file": str(main.resolve())}]
    assert sys.modules["efprobe_main"].VALUE == 7


def test_a_plugin_given_twice_is_imported_and_recorded_once(tmp_path, forget):
    path = _file(tmp_path, "efprobe_once",
                 "import builtins\nbuiltins.efprobe_count = getattr(builtins, 'efprobe_count', 0) + 1\n")
    import builtins

    before = len(plugins.LOADED_PLUGINS)
    plugins.import_plugins([str(path), str(path)])
    plugins.import_plugins([str(path)])
    try:
        assert builtins.efprobe_count == 1 and len(plugins.LOADED_PLUGINS) == before + 1
    finally:
        del builtins.efprobe_count


def test_a_plugin_that_fails_is_not_left_half_imported(tmp_path, forget):
    path = _file(tmp_path, "efprobe_broken", "raise ValueError('bad value\\nsecond line')\n")
    with pytest.raises(ConfigError) as err:
        plugins.import_plugins([str(path)])
    assert str(err.value) == f"--plugin {str(path)!r} does not import: ValueError: bad value"
    assert "efprobe_broken" not in sys.modules
    path.write_text("X = 2\n")  # mended: the same session imports it
    plugins.import_plugins([str(path)])
    assert sys.modules["efprobe_broken"].X == 2


def test_a_module_not_found_says_where_modules_are_looked_for(forget):
    with pytest.raises(ConfigError, match=r"does not import: ModuleNotFoundError: .*\(a module is found on sys.path"):
        plugins.import_plugins(["efprobe_no_such_module"])


@pytest.mark.parametrize("spec", ["efprobe bad", "efprobe-x", "1efprobe"])
def test_a_spec_that_is_no_module_name_is_refused(spec, forget):
    with pytest.raises(ConfigError, match=f"--plugin {spec!r}: not a module name"):
        plugins.import_plugins([spec])


def test_an_exports_relative_record_is_read_from_its_folder(tmp_path, forget, monkeypatch):
    (tmp_path / "export").mkdir()
    _file(tmp_path / "export", "efprobe_exported", "Y = 3\n")
    monkeypatch.chdir(tmp_path)  # not the export folder
    plugins.import_recorded([{"module": "efprobe_exported", "file": "efprobe_exported.py"}], folder=tmp_path / "export")
    assert sys.modules["efprobe_exported"].Y == 3


def test_an_unknown_kind_error_hints_at_plugins_once():
    hint = plugins.plugin_hint(ConfigError("model.block.attention.kind = 'quad': unknown attention kind 'quad'"))
    assert hint.startswith(" (a plugin's kind? give --plugin MODULE")
    assert plugins.plugin_hint(ConfigError("unknown attention kind 'quad' (a plugin's kind? ...)")) == ""
    assert plugins.plugin_hint(ConfigError("model.dim = -5: must be >= 1")) == ""


def test_a_module_inside_a_plugins_package_is_covered_by_it():
    assert plugins.covered("efprobe_lab.energies", [{"module": "efprobe_lab"}])
    assert not plugins.covered("efprobe_lab2", [{"module": "efprobe_lab"}])


# Plugin files whose module name is taken, and recorded plugins that are gone (plugins module docstrings): a file
# plugin named like a module already imported from elsewhere is refused (importing it would silently keep the other
# module, and the run would record a plugin that never ran); a run whose recorded plugin file is gone and whose module
# does not import says both, in one line.


def test_a_plugin_file_named_like_an_imported_module_is_refused(tmp_path, forget):
    path = tmp_path / "json.py"  # `json` is imported already, from the standard library
    path.write_text("RAN = True\n")
    with pytest.raises(ConfigError, match=r"another module named 'json' is already imported .*rename the plugin file"):
        plugins.import_plugins([str(path)])
    assert not hasattr(sys.modules["json"], "RAN")
    assert all(p.get("file") != str(path) for p in plugins.LOADED_PLUGINS)


def test_a_run_whose_plugin_file_is_gone_says_so_and_that_its_module_does_not_import(tmp_path, forget):
    gone = tmp_path / "efprobe_gone.py"
    (tmp_path / "run_info.json").write_text(json.dumps({"plugins": [{"module": "efprobe_gone", "file": str(gone)}]}))
    with pytest.raises(ConfigError) as err:
        plugins.load_recorded_plugins(tmp_path)
    msg = str(err.value)
    assert (f"was trained with the plugin module 'efprobe_gone' (file {gone}), which is no longer there, and no "
            f"module 'efprobe_gone' imports: ModuleNotFoundError") in msg, msg
    assert "\n" not in msg


def test_a_kind_from_a_module_whose_name_only_starts_with_energyformer_is_a_plugins():
    """Only the ``energyformer`` package's own modules are the library: ``energyformer_contrib`` is a plugin, and a
    run using its kind records it (eval, generate and export import it again)."""
    from energyformer.utils.config import KindConfig

    class ContribConfig(KindConfig):
        kind: str = "contrib"

    class OwnConfig(KindConfig):
        kind: str = "own"

    ContribConfig.__module__ = "energyformer_contrib.attention"
    OwnConfig.__module__ = "energyformer.models.own"
    assert plugins.foreign_kinds({"a": ContribConfig(), "b": OwnConfig()}) == [
        ("a.kind", "contrib", "energyformer_contrib.attention")]


def test_a_kind_defined_in_the_running_script_is_warned_about_not_recorded(forget):
    """A kind from ``__main__`` cannot be imported again by eval / generate / export: a warning says so, and the
    run records no ``__main__`` plugin (which would import the wrong script, or none)."""
    from energyformer.utils.config import KindConfig

    class ScriptConfig(KindConfig):
        kind: str = "mine"

    ScriptConfig.__module__ = "__main__"
    with pytest.warns(UserWarning, match=r"a.kind = 'mine' is defined in the script being run \(__main__\)"):
        got = plugins.run_plugins({"a": ScriptConfig()})
    assert got == list(plugins.LOADED_PLUGINS)


BROKEN = '''
import torch
from energyformer.core import Energy, Solver, register_energy, register_solver
from energyformer.core.solver import GDConfig
from typing import Literal


class SignFlip(Energy):
    """E_i = ½‖x_i − c_i‖², its "gradient" pointing uphill."""
    token_local = True

    @classmethod
    def examples(cls, dtype=torch.float64):
        g = torch.Generator().manual_seed(0)
        return [("d4", cls(), *(torch.randn(2, 3, 4, generator=g, dtype=dtype) for _ in range(2)))]

    def energy(self, x, c):
        return 0.5 * (x - c).pow(2).sum(-1)

    def grad(self, x, c):
        return c - x


class NoExamples(SignFlip):
    @classmethod
    def examples(cls, dtype=torch.float64):
        raise NotImplementedError


class EmptyExamples(SignFlip):
    @classmethod
    def examples(cls, dtype=torch.float64):
        return []


class NoReference(SignFlip):
    """Inexact, without reference_direction: a failure, not "no examples" (check_energy's NotImplementedError)."""
    exact = False

    def grad(self, x, c):
        return x - c


class GlobalDraws(SignFlip):
    """Its examples draw from the global generator; a fixed twin is registered under its name later."""

    @classmethod
    def examples(cls, dtype=torch.float64):
        return [("d4", cls(), torch.randn(2, 3, 4, dtype=dtype), torch.randn(2, 3, 4, dtype=dtype))]


class RaisesInExamples(SignFlip):
    @classmethod
    def examples(cls, dtype=torch.float64):
        torch.set_default_dtype(torch.float64)  # side effects on the whole process, then a bug
        torch.set_grad_enabled(False)
        raise KeyError("missing")


class AscentConfig(GDConfig):
    kind: Literal["efchk_ascent"] = "efchk_ascent"


register_energy("efchk_signflip")(SignFlip)
register_energy("efchk_noexamples")(NoExamples)
register_energy("efchk_empty")(EmptyExamples)
register_energy("efchk_noref")(NoReference)
register_energy("efchk_draws")(GlobalDraws)
register_energy("efchk_raises")(RaisesInExamples)


@register_solver("efchk_ascent", AscentConfig)
class Ascent(Solver):
    def update(self, energy, x, u, state, memory, eta):
        return -eta * energy.direction(u, state, self.precond), memory
'''


def test_foreign_energies_and_solvers_are_checked_and_reported(tmp_path, forget, monkeypatch):
    """probe AX: a plugin's sign-flipped energy and ascending solver trained without a word; a run now records
    core.check_energy / check_solver of everything registered outside the package (experiment.run_experiment
    warns about each failure) -- the package's own registrations are not among them."""
    from energyformer.core import ENERGIES, SOLVERS

    import torch

    monkeypatch.setattr(plugins, "_CHECKED", {})
    before_e, before_s = dict(ENERGIES), dict(SOLVERS.entries)
    (tmp_path / "efprobe_broken.py").write_text(BROKEN)
    (tmp_path / "energyformer_contrib.py").write_text(  # a plugin whose name starts like the package's: still foreign
        "from efprobe_broken import SignFlip\nfrom energyformer.core import register_energy\n"
        "register_energy('efchk_contrib')(type('Contrib', (SignFlip,), {}))\n")
    try:
        plugins.import_plugins([str(tmp_path / "efprobe_broken.py"), str(tmp_path / "energyformer_contrib.py")])
        rng = torch.get_rng_state()
        checks = plugins.foreign_checks()
        assert torch.equal(torch.get_rng_state(), rng)  # examples() drew from the global generator: restored
        assert torch.get_default_dtype() == torch.float32 and torch.is_grad_enabled()  # one set them: restored
        fixed = type("GlobalDraws", (ENERGIES["efchk_signflip"],), {"grad": lambda self, x, c: x - c})
        ENERGIES["efchk_draws"] = fixed  # a fixed class under a name checked before: checked again
        del ENERGIES["efchk_empty"]      # an unregistered one: no longer reported
        again = plugins.foreign_checks()
    finally:
        ENERGIES.clear(), ENERGIES.update(before_e)
        SOLVERS.entries.clear(), SOLVERS.entries.update(before_s)
        sys.modules.pop("energyformer_contrib", None)
    mine = {k: v for k, v in checks.items() if "efchk" in k}
    assert set(mine) == {f"energy efchk_{n}" for n in ("signflip", "noexamples", "empty", "noref", "draws",
                                                        "contrib", "raises")} | {"solver efchk_ascent"}, checks
    assert mine["energy efchk_raises"] == "not checked: examples() raised KeyError: 'missing'"
    assert mine["energy efchk_signflip"].startswith("AssertionError: SignFlip.grad != autograd of energy")
    assert mine["energy efchk_contrib"].startswith("AssertionError: Contrib.grad != autograd of energy")
    assert mine["energy efchk_noexamples"] == "not checked: the energy has no examples()"
    assert mine["energy efchk_empty"] == "not checked: examples() is empty"
    assert mine["energy efchk_noref"].startswith("NotImplementedError: NoReference has exact = False and must "
                                                 "implement reference_direction")
    assert mine["energy efchk_draws"].startswith("AssertionError: GlobalDraws.grad != autograd")
    assert mine["solver efchk_ascent"].startswith("AssertionError: solver kind 'efchk_ascent' does not descend")
    assert not [k for k in checks if k.split()[1] in before_e or k.split()[1] in before_s]
    assert again["energy efchk_draws"] == "ok" and "energy efchk_empty" not in again


def test_a_training_run_warns_about_a_failing_plugin_energy_and_records_the_checks(tmp_path, forget, monkeypatch):
    """experiment.run_experiment: each foreign check that fails or checked nothing is a warning, and run_info.json
    holds them all under plugin_checks."""
    from energyformer.core import ENERGIES, SOLVERS
    from energyformer.experiment import load_run_config, run_experiment

    monkeypatch.setattr(plugins, "_CHECKED", {})
    before_e, before_s = dict(ENERGIES), dict(SOLVERS.entries)
    (tmp_path / "efprobe_broken2.py").write_text(BROKEN)
    tiny = ["model.dim=16", "model.n_layers=1", "model.heads=2", "model.max_seq_len=32", "task.seq_len=16",
            "task.batch_size=2", "task.eval_batch_size=2", "task.eval_max_batches=1", "task.tokenizer=bytes",
            "train.progress=false", "train.tensorboard=false", "train.steps=1", "train.eval_every=0",
            "train.save_every=1", f"out_dir={tmp_path}", "name=run"]
    try:
        plugins.import_plugins([str(tmp_path / "efprobe_broken2.py")])
        with pytest.warns(UserWarning) as seen:
            run_experiment(load_run_config("lm/llama", tiny))
    finally:
        ENERGIES.clear(), ENERGIES.update(before_e)
        SOLVERS.entries.clear(), SOLVERS.entries.update(before_s)
    said = [str(w.message) for w in seen]
    outside = "(registered outside energyformer)"
    assert any(m.startswith(f"energy efchk_signflip {outside} fails its property check") for m in said)
    assert f"energy efchk_noexamples {outside} is not checked: the energy has no examples()" in said
    info = json.loads((tmp_path / "run" / "run_info.json").read_text())
    assert info["plugin_checks"]["energy efchk_signflip"].startswith("AssertionError")
    assert info["plugin_checks"]["solver efchk_ascent"].startswith("AssertionError")
