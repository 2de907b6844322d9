"""``energyformer list WHAT``: the rows (name, one-line description) of the configs, every registry and the
reproductions, and ``list keys`` (every config key with its type, default and help)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .utils.validate import ConfigError


def no_extra(extra: list[str], what: str) -> None:
    """Refuse arguments a subcommand does not take (one line naming them)."""
    if extra:
        raise ConfigError(f"unrecognised argument(s) for {what}: {' '.join(extra)}")


def _first_line(text: str | None) -> str:
    lines = (text or "").strip().splitlines()
    return lines[0] if lines else ""


def _registry_rows(registry: Any) -> list[tuple[str, str]]:
    """(kind, one-line description) of a :class:`~energyformer.utils.config.Registry` or a name -> class dict."""
    entries = getattr(registry, "entries", None)
    if entries is not None:
        return [(k, e.doc) for k, e in entries.items()]
    return [(k, f"{cls.__name__:26s} {_first_line(cls.__doc__)}") for k, cls in sorted(registry.items())]


def listings() -> dict[str, Callable[[], list[tuple[str, str]]]]:
    """``energyformer list WHAT``: WHAT -> the rows (name, description) of one registry lookup."""
    from .cli import _registries

    _registries()
    from .blocks.registry import ATTENTIONS, MLPS
    from .core import BACKWARD_MODES, ENERGIES, NORMS, SOLVERS, STEP_SIZES
    from .core.precond import PRECONDITIONERS
    from .data.tokenizers import TOKENIZERS
    from .experiment import configs_dir
    from .models import MODELS
    from .models.wrapper import POSITIONS
    from .reproduce import REPRODUCTIONS
    from .tasks import TASKS

    def configs() -> list[tuple[str, str]]:
        rows = []
        for p in sorted(configs_dir().rglob("*.yaml")):
            text = p.read_text()
            first = text.splitlines()[0] if text else ""
            rows.append((str(p.relative_to(configs_dir()).with_suffix("")), first.lstrip("# ")))
        return rows

    def tasks() -> list[tuple[str, str]]:  # the model kinds in one column, as wide as its longest entry
        kinds = {k: ", ".join(e.builder.model_kinds) for k, e in TASKS.entries.items()}
        width = max(map(len, kinds.values()), default=0)
        return [(k, f"models: {kinds[k]:{width}s} {e.doc}") for k, e in TASKS.entries.items()]

    registries = {"energies": ENERGIES, "solvers": SOLVERS, "step_sizes": STEP_SIZES,
                  "backward_modes": BACKWARD_MODES, "norms": NORMS, "models": MODELS,
                  "attentions": ATTENTIONS, "mlps": MLPS, "preconditioners": PRECONDITIONERS,
                  "tokenizers": TOKENIZERS, "positions": POSITIONS}
    out: dict[str, Callable[[], list[tuple[str, str]]]] = {"configs": configs, "tasks": tasks}
    out.update({name: (lambda r=reg: _registry_rows(r)) for name, reg in registries.items()})
    out["reproductions"] = lambda: [(k, r.description) for k, r in REPRODUCTIONS.items()]
    return out


LIST_CHOICES = ("configs", "energies", "solvers", "step_sizes", "backward_modes", "norms", "tasks", "models",
                "attentions", "mlps", "preconditioners", "tokenizers", "positions", "reproductions", "keys")


def cmd_list(a, extra) -> int:
    no_extra(extra, "list")
    if a.what == "keys":
        from .experiment import RunConfig
        from .utils.config_help import format_config_help

        print(format_config_help(RunConfig))
        return 0
    rows = listings()[a.what]()
    width = max([16] + [len(k) + 2 for k, _ in rows])
    for name, text in rows:
        print(f"{name:{width}s} {text}".rstrip())
    return 0
