"""Every relative link in the README and docs/ points at a file of the repository (pages are generated
and move: a folded or renamed page must not leave a dead link behind)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def dead_links(files: list[Path]) -> list[str]:
    out = []
    for f in files:
        for m in _LINK.finditer(f.read_text(encoding="utf-8")):
            target = m.group(1)
            if not target.startswith(("http://", "https://", "mailto:")) and not (f.parent / target).exists():
                out.append(f"{f.relative_to(ROOT)}: {target}")
    return out


def test_no_dead_relative_links():
    files = sorted(ROOT.glob("*.md")) + sorted((ROOT / "docs").rglob("*.md"))
    assert files and dead_links(files) == []


def test_a_dead_link_is_found(tmp_path, monkeypatch):
    page = ROOT / "docs" / "x.md"
    monkeypatch.setattr(Path, "read_text", lambda self, encoding=None: "[a](missing.md) [b](studies.md) [c](https://x)")
    assert dead_links([page]) == ["docs/x.md: missing.md"]
