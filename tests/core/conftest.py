"""Test support for tests/core: make ``core_toys`` (toy energies for solver tests) importable."""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
