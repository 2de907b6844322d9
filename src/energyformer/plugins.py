"""Plugins: a researcher's own module registering energies, attention kinds, tasks or solvers.

Given to every CLI command as ``--plugin MODULE_OR_FILE.py`` or ``ENERGYFORMER_PLUGINS`` (:func:`import_cli_plugins`);
a run records the plugins it was trained with in ``run_info.json`` (``plugins``: the module name and, for a file, its
absolute path; :func:`run_plugins`), and reloading the run (eval, generate, export, ``train --resume``) imports them
first (:func:`load_recorded_plugins`). A kind registered by a module outside the package that was not given as a
plugin (a script importing its module before calling the library) is recorded by its module's name. A training run
also records (and warns about) the property checks of every energy and solver registered outside the package
(:func:`foreign_checks`).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .utils.validate import ConfigError

PLUGINS_ENV = "ENERGYFORMER_PLUGINS"
#: plugins imported in this process, in order: ``{"module": name}``, and ``"file"`` (absolute) for a file plugin
LOADED_PLUGINS: list[dict[str, str]] = []
_MODULE_RE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
_HOW = f"give --plugin MODULE or --plugin PATH.py (or {PLUGINS_ENV}=a,b)"


def plugins_from_env() -> list[str]:
    """The plugins ``ENERGYFORMER_PLUGINS`` names (comma-separated module names or ``.py`` paths)."""
    return [s.strip() for s in os.environ.get(PLUGINS_ENV, "").split(",") if s.strip()]


def import_cli_plugins(given: Sequence[str]) -> list[dict[str, str]]:
    """The CLI's plugins: those ``ENERGYFORMER_PLUGINS`` names, then every ``--plugin``, imported after the
    package's own registrations (so that its kinds keep their order in listings and error messages)."""
    from . import energies, models, tasks  # noqa: F401

    return import_plugins(plugins_from_env(), said=PLUGINS_ENV) + import_plugins(given)


def import_plugins(specs: Sequence[str], said: str = "--plugin") -> list[dict[str, str]]:
    """Import each plugin: an importable module name (``mylab.energies``: ``importlib.import_module``) or a path
    to a ``.py`` file (imported as the module named by its stem; its folder is appended to ``sys.path`` so that it
    can import its siblings). Importing registers what it defines (``register_energy``, ``ATTENTIONS.register``,
    ...). A plugin already imported is skipped. A plugin that does not import is a one-line :class:`ConfigError`
    naming it and its error. Returns the records (also appended to :data:`LOADED_PLUGINS`)."""
    return [_import_plugin(spec, said) for spec in specs]


def _import_plugin(spec: str, said: str, file: str | None = None) -> dict[str, str]:
    is_file = file is not None or spec.endswith(".py") or "/" in spec or os.sep in spec
    if is_file:
        path = Path(file or spec).expanduser().resolve()
        if not path.is_file() or path.suffix != ".py":
            raise ConfigError(f"{said} {spec!r}: no Python file {path} (a plugin is an importable module name or "
                              f"the path of a .py file)")
        if not path.stem.isidentifier():  # imported under a name no import statement can name: `my.plug` is
            # module `plug` of package `my`, so an export (which copies and imports the plugin) could never load it
            raise ConfigError(f"{said} {spec!r}: {path.stem!r} is not a Python module name (letters, digits and _, "
                              f"not starting with a digit): rename the file")
        rec = {"module": path.stem, "file": str(path)}
        have = sys.modules.get(path.stem)
        if have is not None and Path(getattr(have, "__file__", None) or "").resolve() != path:
            raise ConfigError(f"{said} {spec!r}: another module named {path.stem!r} is already imported "
                              f"({getattr(have, '__file__', None) or 'built in'}): rename the plugin file")
        if have is None:
            if str(path.parent) not in sys.path:
                sys.path.append(str(path.parent))
            loader_spec = importlib.util.spec_from_file_location(path.stem, path)
            module = importlib.util.module_from_spec(loader_spec)  # type: ignore[arg-type]
            sys.modules[path.stem] = module
            try:
                loader_spec.loader.exec_module(module)  # type: ignore[union-attr]
            except Exception as err:  # noqa: BLE001 - one line naming the plugin
                del sys.modules[path.stem]
                raise _import_error(said, spec, err) from err
    else:
        if not _MODULE_RE.match(spec):
            raise ConfigError(f"{said} {spec!r}: not a module name (letters, digits, _ and dots) nor a .py path")
        rec = {"module": spec}
        try:
            importlib.import_module(spec)
        except Exception as err:  # noqa: BLE001 - one line naming the plugin
            raise _import_error(said, spec, err) from err
    if rec not in LOADED_PLUGINS:
        LOADED_PLUGINS.append(rec)
    return rec


def _import_error(said: str, spec: str, err: Exception) -> ConfigError:
    text = str(err).strip().splitlines()
    hint = (" (a module is found on sys.path / PYTHONPATH; a file: give its path, e.g. ./mymodule.py)"
            if isinstance(err, ModuleNotFoundError) and err.name == spec.split(".")[0] else "")
    return ConfigError(f"{said} {spec!r} does not import: {type(err).__name__}: {text[0] if text else ''}{hint}")


def recorded_plugins(run_dir: str | Path) -> list[dict[str, str]]:
    """The ``plugins`` a run directory's ``run_info.json`` records (none when it has no such file or key)."""
    from .train.runinfo import RUN_INFO_FILE

    path = Path(run_dir) / RUN_INFO_FILE
    try:
        plugins = json.loads(path.read_text()).get("plugins") or []
    except (OSError, ValueError, AttributeError):
        return []
    return [p for p in plugins if isinstance(p, dict) and isinstance(p.get("module"), str)]


def import_recorded(records: Sequence[dict[str, str]], folder: str | Path | None = None) -> None:
    """Import each recorded plugin (``{"module", "file"?}``) not imported yet: its file when it is there (relative
    to ``folder`` when one is given: an export's copy; else an absolute path), else the module by name. The one
    rule for reloading a run (:func:`load_recorded_plugins`) and an exported folder
    (``export.hf.load_export_plugins``); a plugin that does not import raises :class:`RecordedPluginError` (the
    record and the import's ConfigError)."""
    for rec in records:
        if rec["module"] in sys.modules:
            continue
        file = rec.get("file")
        path = None  # (a relative file without a folder is an export's copy read elsewhere: the module by name)
        if file:
            path = (Path(folder) / file).resolve() if folder is not None else Path(file)
        try:
            if path is not None and path.is_absolute() and path.is_file():
                _import_plugin(str(path), "plugin", file=str(path))
            else:
                _import_plugin(rec["module"], "plugin")
        except ConfigError as err:
            raise RecordedPluginError(rec, err) from None


class RecordedPluginError(ConfigError):
    """A recorded plugin that does not import: ``record`` and the import's ``error`` (for the caller's message)."""

    def __init__(self, record: dict[str, str], error: ConfigError):
        super().__init__(str(error))
        self.record, self.error = record, error


def load_recorded_plugins(run_dir: str | Path) -> None:
    """Import the plugins ``run_dir`` was trained with (:func:`recorded_plugins`): the recorded file when it is still
    there, else the module by name. One that does not import is a one-line error naming it and how to give it."""
    try:
        import_recorded(recorded_plugins(run_dir))
    except RecordedPluginError as failed:
        rec, file = failed.record, failed.record.get("file")
        cause = failed.error.__cause__ or failed.error
        where = f"module {rec['module']!r}" + (f" (file {file})" if file else "")
        gone = f", which is no longer there, and no module {rec['module']!r} imports" if file else ""
        raise ConfigError(f"{run_dir} was trained with the plugin {where}{gone}: {type(cause).__name__}: "
                          f"{str(cause).strip().splitlines()[0] if str(cause).strip() else ''}; {_HOW}") from None


def plugin_hint(err: ConfigError) -> str:
    """" (a plugin's kind? ...)" after an unknown-kind error that does not mention plugins, else ""."""
    text = str(err)
    return f" (a plugin's kind? {_HOW})" if "unknown" in text and " kind " in text and "plugin" not in text else ""


def foreign_kinds(config: Any, where: str = "") -> list[tuple[str, str, str]]:
    """``(key, kind, module)`` of every registry kind in ``config`` (a config model, walked through its fields,
    lists and dicts) whose config class is defined outside the ``energyformer`` package: what a plugin added."""
    from pydantic import BaseModel

    from .utils.config import KindConfig

    out: list[tuple[str, str, str]] = []
    if isinstance(config, KindConfig) and not type(config).__module__.startswith("energyformer."):
        out.append((f"{where}kind" if where else "kind", str(config.kind), type(config).__module__))
    if isinstance(config, BaseModel):
        for name in type(config).model_fields:
            out += foreign_kinds(getattr(config, name), f"{where}{name}.")
    elif isinstance(config, (list, tuple)):
        for i, v in enumerate(config):
            out += foreign_kinds(v, f"{where}{i}.")
    elif isinstance(config, dict):
        for k, v in config.items():
            out += foreign_kinds(v, f"{where}{k}.")
    return out


def covered(module: str, plugins: Sequence[dict[str, str]]) -> bool:
    """Whether importing ``plugins`` imports ``module`` (it is one of them or inside one's package)."""
    return any(module == p["module"] or module.startswith(p["module"] + ".") for p in plugins)


def run_plugins(cfg: Any) -> list[dict[str, str]]:
    """The plugins a run records: every plugin loaded in this process, then the module of each kind its config
    uses that was registered outside the package and outside any loaded plugin (a script that imported its own
    module before calling the library). A kind defined in the running script itself (``__main__``) cannot be
    imported again: a warning says so."""
    import warnings

    plugins = list(LOADED_PLUGINS)
    for key, kind, module in foreign_kinds(cfg):
        if covered(module, plugins):
            continue
        if module == "__main__":
            warnings.warn(f"{key} = {kind!r} is defined in the script being run (__main__): eval, generate and "
                          f"export of this run cannot import it; move it to a module and {_HOW}", stacklevel=2)
            continue
        plugins.append({"module": module})
    return plugins


#: :func:`foreign_checks`' results in this process, by registration ("energy NAME" / "solver NAME") and the class
#: registered under it (a fixed class registered again under the same name is checked again)
_CHECKED: dict[tuple[str, int], str] = {}


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"[:300]


def foreign_checks() -> dict[str, str]:
    """The property checks of every energy and solver kind registered outside the package (a plugin's or a script's),
    once per process: ``core.check_energy`` on each of an energy's ``examples()`` (float64: one value per token, grad
    = autograd, descent or its reference, three preconditioners, with and without a key mask) and
    ``core.check_solver`` on a solver kind. ``{"energy NAME" | "solver NAME": "ok" | what failed}``; empty when
    nothing foreign is registered. A layer whose gradient is not that of its energy trained without a word before
    (probe AX); a run records these results in ``run_info.json`` and warns about each failure. The global random
    generators, the default dtype and the grad mode are left as they were (``examples()`` may change them)."""
    import torch

    from .core import ENERGIES, SOLVERS
    from .train.rng import fork_rng

    def foreign(obj: Any) -> bool:
        return not (getattr(obj, "__module__", "") or "").startswith("energyformer.")

    todo = [(f"energy {n}", c, c) for n, c in ENERGIES.items() if foreign(c)]
    todo += [(f"solver {n}", n, SOLVERS.get(n).builder) for n in SOLVERS.names() if foreign(SOLVERS.get(n).builder)]
    dtype, grad = torch.get_default_dtype(), torch.is_grad_enabled()
    with fork_rng():  # and the default dtype and grad mode: a plugin's examples() may set them (probe BA)
        try:
            for key, what, cls in todo:
                if (key, id(cls)) not in _CHECKED:
                    _CHECKED[key, id(cls)] = _check_one(key, what)
        finally:
            torch.set_default_dtype(dtype)
            torch.set_grad_enabled(grad)
    return {key: _CHECKED[key, id(cls)] for key, _, cls in todo}


def _check_one(key: str, what: Any) -> str:
    """``check_energy`` on each of an energy class's examples, or ``check_solver`` on a solver kind: "ok", "not
    checked: ..." or the first line of what failed."""
    from .core import check_energy, check_solver

    try:
        if key.startswith("energy "):
            try:
                examples = what.examples()
            except NotImplementedError:  # only here: check_energy's own (no reference_direction) is a failure
                return "not checked: the energy has no examples()"
            except Exception as err:  # noqa: BLE001 - its examples, not its maths
                return f"not checked: examples() raised {_first_line(err)}"
            for _, energy, context, x in examples:
                check_energy(energy, context, x)
            return "ok" if examples else "not checked: examples() is empty"
        check_solver(what)
        return "ok"
    except Exception as err:  # noqa: BLE001 - recorded and warned about, never raised into training
        return _first_line(err)
