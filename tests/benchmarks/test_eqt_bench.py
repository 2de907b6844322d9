"""benchmarks/eqt.py --json writes the per-round ratios the eqt study's page reads (tiny sizes; no timing claims)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_json_output_is_what_the_page_reads(tmp_path):
    out = tmp_path / "overheads.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "eqt.py"), "--length", "8", "--batch", "2",
                    "--repeats", "2", "--json", str(out)], check=True, capture_output=True, text=True,
                   env={"PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1", "PATH": ""}, timeout=300)
    ov = json.loads(out.read_text())
    assert len(ov["ratios"]["train EqT K=2"]) == 2 and len(ov["ratios"]["infer EqT K=8"]) == 2
    assert all(r > 0 for rs in ov["ratios"].values() for r in rs)
    assert ov["params"][1] > ov["params"][0] and "--repeats 2" in ov["source"]
