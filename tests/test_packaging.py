"""A built wheel is a working install: it carries the library's configs/ and studies/ (setup.py copies them into
``energyformer/_data``), and an installed ``energyformer`` finds them from any folder. Before, the wheel held the
code only: `energyformer list configs` listed 0 and `energyformer train lm/llama` was "not found" outside a
checkout."""

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("configs", "studies")


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def test_a_built_wheel_carries_the_configs_and_studies_and_finds_them_installed(tmp_path):
    tree = tmp_path / "tree"  # a copy: the build writes build/ and *.egg-info beside the sources
    tree.mkdir()
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md"):
        shutil.copy2(ROOT / name, tree / name)
    for name in ("src", *FOLDERS):
        shutil.copytree(ROOT / name, tree / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(tmp_path / "dist"), str(tree)], check=True, env=env, capture_output=True, timeout=300)
    (whl,) = (tmp_path / "dist").glob("energyformer-*.whl")
    names = set(zipfile.ZipFile(whl).namelist())
    for folder in FOLDERS:
        want = {f"energyformer/_data/{folder}/{f}" for f in _files(ROOT / folder)}
        assert want and want <= names, sorted(want - names)[:5]

    site, elsewhere = tmp_path / "site", tmp_path / "elsewhere"
    zipfile.ZipFile(whl).extractall(site)  # a pure-Python wheel's install
    elsewhere.mkdir()
    probe = ("import json, energyformer\n"
             "from energyformer.experiment import configs_dir, known_configs, load_run_config\n"
             "from energyformer.studies import known_studies, load_study, studies_dir\n"
             "load_run_config('hyperset/sudoku_et', [])  # a config with a base: to resolve\n"
             "load_study('hyperset-sudoku')\n"
             "print(json.dumps({'pkg': energyformer.__file__, 'configs': str(configs_dir()), 'known': known_configs(),\n"
             "                  'studies': str(studies_dir()), 'known_studies': known_studies()}))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=elsewhere, env={**env, "PYTHONPATH": str(site)},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert Path(got["pkg"]).is_relative_to(site), got["pkg"]  # the wheel's code ran, not the checkout's
    assert got["configs"] == str(site / "energyformer" / "_data" / "configs")
    assert got["studies"] == str(site / "energyformer" / "_data" / "studies")
    assert got["known"] == [f[:-5] for f in _files(ROOT / "configs")]
    assert got["known_studies"] == sorted(f[:-5] for f in _files(ROOT / "studies"))
    # `report` renders a checkout's pages: from the wheel, one line saying so (every page "not found" before)
    rep = subprocess.run([sys.executable, "-m", "energyformer", "report", "--check"], cwd=elsewhere,
                         env={**env, "PYTHONPATH": str(site)}, capture_output=True, text=True, timeout=120)
    assert rep.returncode != 0 and "checkout" in rep.stderr and "not found" not in rep.stdout + rep.stderr, rep
