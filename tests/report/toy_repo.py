"""A toy repository for the report command's tests: one page, ``docs/results/toy``, rendered by the script
``render_toy.py`` from its ``results.json``, and a README with the results section's markers."""

from __future__ import annotations

from pathlib import Path

from energyformer.report.readme import BEGIN, END


def toy_repo(root: Path, generator: str, results: str, readme_tail: str = "") -> Path:
    (root / "render_toy.py").write_text(generator)
    folder = root / "docs/results/toy"
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(results)
    (root / "README.md").write_text(f"# repo\n\n{BEGIN}\n{END}\n{readme_tail}")
    return root
