"""Markdown tables for the generated pages (results pages, the README's results section, the demo's report)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def md_table(header: Sequence[str], rows: Iterable[Sequence[object]], *, escape: bool = False) -> list[str]:
    """The lines of a GitHub markdown table: ``| a | b |``, the ``|---|---|`` rule, one line per row (cells
    through ``str``). ``escape``: a ``|`` inside a cell written ``\\|`` (cells taken from records, which may hold
    one); off, cells are written as they are (cells already in markdown)."""
    cell = (lambda v: str(v).replace("|", "\\|")) if escape else str
    return (["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            + ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows])
