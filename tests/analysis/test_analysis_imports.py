"""Nothing in ``analysis/`` imports ``reproduce/`` or ``experiment.py`` (issue 22: analysis reads records and
run directories handed to it; it never drives a run). Every import counts, also those inside functions."""
from __future__ import annotations

import ast
from pathlib import Path

ANALYSIS = Path(__file__).resolve().parents[2] / "src" / "energyformer" / "analysis"
FORBIDDEN = ("energyformer.reproduce", "energyformer.experiment")
#: modules allowed to break the rule (none: every analysis module is held to it)
KNOWN: set[str] = set()


def _imports(path: Path) -> set[str]:
    out = set()
    for n in ast.walk(ast.parse(path.read_text())):
        if isinstance(n, ast.Import):
            out.update(a.name for a in n.names)
        elif isinstance(n, ast.ImportFrom):
            if n.level:   # relative to energyformer.analysis
                base = ["energyformer", "analysis"][: 3 - n.level] if n.level <= 2 else []
                mod = ".".join(base + ([n.module] if n.module else []))
            else:
                mod = n.module or ""
            out.add(mod)
            out.update(f"{mod}.{a.name}" for a in n.names)
    return out


def _violations() -> dict[str, list[str]]:
    bad = {}
    for f in sorted(ANALYSIS.glob("*.py")):
        hits = sorted(m for m in _imports(f) if m.startswith(FORBIDDEN))
        if hits:
            bad[f"energyformer.analysis.{f.stem}"] = hits
    return bad


def test_analysis_imports_neither_reproduce_nor_experiment():
    bad = {m: hits for m, hits in _violations().items() if m not in KNOWN}
    assert not bad, f"analysis modules importing reproduce/ or experiment.py: {bad}"


def test_the_checker_sees_relative_and_function_level_imports(tmp_path):
    f = tmp_path / "x.py"
    f.write_text("def g():\n    from ..reproduce.bare_sa import SCALES\n    from .. import experiment\n")
    assert {"energyformer.reproduce.bare_sa", "energyformer.experiment"} <= _imports(f)
