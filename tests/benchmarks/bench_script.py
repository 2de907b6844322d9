"""Load a script of benchmarks/ as a module (they are scripts, not a package) for the benchmark tests."""

import sys
from pathlib import Path
from types import ModuleType

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from script_loader import load_file  # noqa: E402

# the scripts' private siblings (``_page``, ``_timing``, ...) are imported by name, as when a script runs: a page
# module loaded on its own (``_cem_page``) needs the folder on the path too
_BENCHMARKS = str(Path(__file__).resolve().parents[2] / "benchmarks")
if _BENCHMARKS not in sys.path:
    sys.path.append(_BENCHMARKS)


def load_bench(name: str) -> ModuleType:
    """benchmarks/<name>.py, executed once per call under the module name ``<name>_bench``."""
    return load_file(f"benchmarks/{name}.py", f"{name}_bench")
