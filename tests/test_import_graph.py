"""No import circle in ``src/energyformer`` (issue 19): the module-level import graph (imports under
``TYPE_CHECKING`` and inside functions excluded) has no cycle, and the core modules that used to
close one (``core.backward`` imported ``core.implicit`` at its bottom) import alone in a fresh
interpreter."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PKG = "energyformer"


def _modules(root: Path) -> dict[str, Path]:
    out = {}
    for f in (root / PKG).rglob("*.py"):
        parts = list(f.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = f
    return out


def _edges(mods: dict[str, Path]) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, f in mods.items():
        is_pkg = f.name == "__init__.py"

        def target(level: int, module: str | None) -> str:
            base = m.split(".") if is_pkg else m.split(".")[:-1]
            base = base[:len(base) - (level - 1)] if level > 1 else base
            return ".".join(base + ([module] if module else []))

        def visit(nodes):
            for n in nodes:
                if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test):
                    continue
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                if isinstance(n, ast.ClassDef):
                    visit(n.body)
                elif isinstance(n, (ast.If, ast.Try, ast.With)):
                    for block in (getattr(n, "body", []), getattr(n, "orelse", []), getattr(n, "finalbody", [])):
                        visit(block)
                    for h in getattr(n, "handlers", []):
                        visit(h.body)
                elif isinstance(n, ast.Import):
                    edges[m].update(a.name for a in n.names if a.name.startswith(PKG))
                elif isinstance(n, ast.ImportFrom):
                    tgt = target(n.level, n.module) if n.level else n.module
                    if tgt and tgt.startswith(PKG):
                        for a in n.names:
                            sub = f"{tgt}.{a.name}"
                            edges[m].add(sub if sub in mods else tgt)

        visit(ast.parse(f.read_text()).body)
    return edges


def cycles(root: Path) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    mods = _modules(root)
    edges = _edges(mods)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in mods:
                continue
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in mods:
        if v not in index:
            strong(v)
    return found


def test_no_import_cycle_in_src():
    assert cycles(SRC) == []


def test_the_checker_finds_a_cycle(tmp_path):
    pkg = tmp_path / PKG
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .b import x\n")
    (pkg / "b.py").write_text("x = 1\nfrom . import a  # noqa\n")
    assert cycles(tmp_path) == [[f"{PKG}.a", f"{PKG}.b"]]


@pytest.mark.parametrize("module", ["core.backward", "core.implicit", "core.solver", "core.sublayer",
                                    "blocks.hyperset", "blocks.equilibrium"])
def test_core_modules_import_alone_in_a_fresh_interpreter(module):
    code = f"import {PKG}.{module}; from {PKG}.core import BACKWARD_MODES; assert 'implicit' in BACKWARD_MODES.names()"
    res = subprocess.run([sys.executable, "-c", code], env={"PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"},
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
