"""The wheel carries the library's configs/ and studies/ (setuptools reads everything else from pyproject.toml).

They live beside src/ in the repository, where `energyformer train lm/llama`, `reproduce` and `demo` find them in a
checkout or an editable install; a built wheel copies them into the package as ``energyformer/_data/configs`` and
``energyformer/_data/studies`` (``utils.yaml_files.library_folder``), so an installed command finds them too.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
LIBRARY_FOLDERS = ("configs", "studies")


class BuildPyWithLibraryFolders(build_py):
    def run(self):
        super().run()
        for name in LIBRARY_FOLDERS:
            src = ROOT / name
            if not src.is_dir():  # (an sdist made without them: MANIFEST.in grafts both)
                raise FileNotFoundError(f"{src}: the library's {name}/ folder is missing; the wheel needs it")
            dst = Path(self.build_lib) / "energyformer" / "_data" / name
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


setup(cmdclass={"build_py": BuildPyWithLibraryFolders})
