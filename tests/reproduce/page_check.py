"""The page contract of a reproduction, as one assertion: a copy of the committed page folder (no run
directories anywhere) re-renders to the same .md files with ``--report-only`` alone."""
from __future__ import annotations

import shutil
from pathlib import Path

from energyformer.reproduce import REPRODUCTIONS


def assert_page_rerenders(tmp_path: Path, reproduction: str, page: Path, files: list[str] | None = None) -> Path:
    """Render ``reproduction --report-only`` on a copy of ``page`` and compare ``files`` (default: every .md
    under it) with the committed ones; returns the copy."""
    out = tmp_path / page.name
    shutil.copytree(page, out)
    assert REPRODUCTIONS[reproduction].main()(["--report-only", "--out", str(out)]) == 0
    for md in files or [str(p.relative_to(page)) for p in page.rglob("*.md")]:
        assert (out / md).read_text() == (page / md).read_text(), md
    return out
