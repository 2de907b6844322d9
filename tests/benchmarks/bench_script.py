"""Load a script of benchmarks/ as a module (they are scripts, not a package) for the benchmark tests."""

import sys
from pathlib import Path
from types import ModuleType

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from script_loader import load_file  # noqa: E402


def load_bench(name: str) -> ModuleType:
    """benchmarks/<name>.py, executed once per call under the module name ``<name>_bench``."""
    return load_file(f"benchmarks/{name}.py", f"{name}_bench")
