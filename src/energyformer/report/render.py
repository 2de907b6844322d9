"""Render one results page under the page contract and compare it with the committed one (issue 22).

The page's folder is copied to a temporary folder without the page's own files (the generator must write each
of them: one it no longer writes is "not rendered"), the page's generator runs there (``--out TMP``), and
the rendered ``.md`` files are compared byte for byte with the committed ones. ``render_in_place``
then copies back every file the render changed or created; ``check`` only reports. Images a page
references (``![..](x.png)``, ``<img src="x.png">``) must exist beside it, and every PNG the render drew that
a page references is compared with the committed one by what it shows (:func:`figure_differs`: the data digest
``analysis.figures.save_figure`` stores in it), so a figure left stale by new artifacts fails the check while a
figure merely drawn by another matplotlib does not.
"""

from __future__ import annotations

import difflib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import energyformer

from ..analysis.figures import stored_digest
from ..errors import DataError
from .inputs import check_input
from .pages import Page, Reproduce

TIMEOUT_S = 600
_IMAGE = re.compile(r"!\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)|<img\s[^>]*src=[\"']([^\"']+)[\"']")


@dataclass
class PageResult:
    """What rendering (or checking) one page found."""

    page: Page
    status: str                      # "ok" | "differs" | "hand-written" | "missing image" | "failed"
    changed: list[str] = field(default_factory=list)   # files that differ from the committed ones
    diff: str = ""                   # head of the unified diff of the first differing .md
    problems: list[str] = field(default_factory=list)  # one line each
    written: list[str] = field(default_factory=list)   # in place: files copied into the folder (changed or new)
    unchecked: list[str] = field(default_factory=list)  # figures the render keeps as committed (drawn at training
    #                                                      time from run folders that are not committed): not checked

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def referenced_images(md: str) -> list[str]:
    """Relative image paths referenced by a markdown page (links to the web are skipped)."""
    out = []
    for m in _IMAGE.finditer(md):
        ref = (m.group(1) or m.group(2)).split("#")[0]
        if ref and not re.match(r"^[a-z]+:", ref):
            out.append(ref)
    return out


def missing_images(folder: Path, files: tuple[str, ...]) -> list[str]:
    """``FILE: IMAGE`` for every image a page file in ``folder`` references that is not there."""
    out = []
    for name in files:
        path = folder / name
        if path.exists():
            out += [f"{name}: {ref}" for ref in referenced_images(path.read_text())
                    if not (path.parent / ref).exists()]
    return out


def _env() -> dict[str, str]:
    """The environment of a generator: this package first on the path, one thread, no display."""
    env = dict(os.environ)
    src = str(Path(energyformer.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join([src] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.setdefault("OMP_NUM_THREADS", "1")
    env["MPLBACKEND"] = "Agg"
    return env


def run_generator(page: Page, out: Path, root: Path) -> None:
    """Run the page's generator with ``out`` as its folder; a failure is a DataError with its last line.

    It runs in ``out``'s parent (a temporary folder), so a render that reads a relative path outside its
    folder (``runs/...``) finds nothing there, as the page contract requires."""
    gen = page.generator
    if gen is None:
        raise DataError(f"report {page.name}: hand-written, nothing renders it ({page.why})")
    argv = gen.argv(out) if isinstance(gen, Reproduce) else gen.argv(out, root)
    try:
        proc = subprocess.run(argv, cwd=out.parent, env=_env(), capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise DataError(f"report {page.name}: `{gen.describe()}` ran past {TIMEOUT_S} s (a render trains "
                        f"nothing; it should take seconds)") from None
    if proc.returncode != 0:
        lines = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
        last = lines[-1].strip() if lines else f"exit status {proc.returncode}"
        last = last.replace(str(out), page.folder)
        raise DataError(f"report {page.name}: `{gen.describe()}` failed: {last}")


def figure_differs(committed: Path, rendered: Path) -> str | None:
    """Why a committed PNG is not the rendered one, or None when they show the same: equal bytes, or equal data
    digests (``analysis.figures.figure_digest``). A committed figure without a digest (drawn before digests, or by
    another writer) counts as different where its bytes differ: nothing says what it shows."""
    if committed.read_bytes() == rendered.read_bytes():
        return None
    old, new = stored_digest(committed), stored_digest(rendered)
    if new is None:
        return "its render has no data digest and other bytes (a figure not written by analysis.figures.save_figure)"
    if old is None:
        return "the committed figure has no data digest (drawn before digests) and other bytes"
    return None if old == new else "it shows other data than the committed figure (data digests differ)"


def _check_inputs(page: Page, folder: Path) -> None:
    """Every input the page declares exists, decodes and parses (:func:`.inputs.check_input`): a damaged one is
    a DataError naming it (and its line), before the generator runs."""
    for name in page.inputs:
        if not (folder / name).is_file():
            raise DataError(f"report {page.name}: {page.folder}/{name} not found (the committed artifact this "
                            f"page is rendered from)")
        try:
            check_input(folder / name, f"{page.folder}/{name}")
        except DataError as err:
            raise DataError(f"report {page.name}: {err}") from None


def _diff_head(old: str, new: str, name: str, lines: int) -> str:
    diff = difflib.unified_diff(old.splitlines(), new.splitlines(), f"committed/{name}", f"rendered/{name}",
                                lineterm="", n=1)
    out = list(diff)
    if lines <= 0:
        return ""
    more = f"\n... ({len(out) - lines} more diff lines)" if len(out) > lines else ""
    return "\n".join(out[:lines]) + more


def _changed_files(committed: Path, rendered: Path) -> list[str]:
    out = []
    for f in sorted(rendered.rglob("*")):
        if f.is_file():
            rel = f.relative_to(rendered)
            old = committed / rel
            if not old.is_file() or old.read_bytes() != f.read_bytes():
                out.append(str(rel))
    return out


def render_page(page: Page, root: Path, *, in_place: bool, diff_lines: int = 40) -> PageResult:
    """Render ``page`` into a temporary copy of its folder; compare, and copy back when ``in_place``."""
    folder = root / page.folder
    if not page.generated:
        return PageResult(page, "hand-written", problems=[f"hand-written: not checkable ({page.why})"])
    if not folder.is_dir():
        raise DataError(f"report {page.name}: folder {page.folder} not found")
    _check_inputs(page, folder)
    with tempfile.TemporaryDirectory(prefix=f"report-{page.name}-") as tmp:
        work = Path(tmp) / folder.name
        shutil.copytree(folder, work)
        for name in page.files:  # the render must write its own files: a committed copy compared with itself
            (work / name).unlink(missing_ok=True)  # passed a page its generator no longer writes, hand edits and all
        before = {p: p.stat().st_mtime_ns for p in work.rglob("*.png")}
        run_generator(page, work, root)
        res = PageResult(page, "ok")
        for name in page.files:
            new = work / name
            if not new.is_file():
                res.problems.append(f"{name}: not rendered")
                continue
            old = folder / name
            old_text = old.read_text() if old.is_file() else ""
            if old_text != new.read_text():
                res.changed.append(name)
                if not res.diff:
                    res.diff = _diff_head(old_text, new.read_text(), name, diff_lines)
        for rel in sorted({(Path(name).parent / r).as_posix() for name in page.files if (work / name).is_file()
                           for r in referenced_images((work / name).read_text())}):
            drawn, kept = work / rel, folder / rel
            if rel.lower().endswith(".png") and drawn.is_file() and before.get(drawn) == drawn.stat().st_mtime_ns:
                res.unchecked.append(rel)  # the render did not redraw it: comparing it with itself proves nothing
            elif rel.lower().endswith(".png") and drawn.is_file() and kept.is_file():
                why = figure_differs(kept, drawn)
                if why:
                    res.changed.append(rel)
                    res.diff = res.diff or f"figure {rel}: {why}"
        stray = [f for f in _changed_files(folder, work) if f.endswith(".md") and f not in page.files
                 and not (folder / f).exists()]
        res.problems += [f"{f}: rendered but not committed" for f in stray]
        images = missing_images(work, page.files) if in_place else missing_images(folder, page.files)
        if in_place:
            for rel in _changed_files(folder, work):
                if rel.endswith(".md") and rel not in page.files:
                    continue  # another page's file, or a stray one: never overwritten here
                (folder / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(work / rel, folder / rel)
                res.written.append(rel)
        else:
            images += [i for i in missing_images(work, page.files) if i not in images]
    res.problems += [f"missing image {i}" for i in images]
    if res.changed and not in_place:
        res.status = "differs"
    elif images:
        res.status = "missing image"
    elif res.problems:
        res.status = "failed"
    return res
