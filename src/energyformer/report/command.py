"""``energyformer report [NAME...] [--check] [--list]``: every results page from its committed artifacts.

Without ``--check`` the named pages (default: all) are re-rendered in place and the README's results
section is rewritten from them. With ``--check`` nothing is written: each page is rendered into a
temporary folder and compared with the committed one; the exit status is 1 when any page differs,
references a missing image, is hand-written, or when the README section is out of date. One line of
progress per page.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import UserError
from ..utils.cliargs import int_at_least
from ..utils.yaml_files import checkout_root
from .pages import Registry
from .readme import build_section, current_section, replace_section
from .render import PageResult, render_page


def repo_root() -> Path:
    """The repository this package lives in (``src/energyformer/report`` -> the root). An installed package (a wheel)
    lives in none: a one-line error then, where every page failed with its folder "not found"."""
    root = checkout_root()
    if root is None or not (root / "docs" / "results").is_dir():
        raise UserError(f"energyformer report renders the results pages of a checkout of the repository, and this "
                        f"package ({Path(__file__).resolve().parents[1]}) is not in one; give the checkout's folder "
                        f"with --root")
    return root


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``energyformer report`` (also used by :func:`run`'s own parser)."""
    p.add_argument("names", nargs="*", metavar="NAME", help="pages to render (default: all; see --list)")
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 when a committed page or the README section differs from its render")
    p.add_argument("--list", action="store_true", help="list the pages and what renders each, then exit")
    p.add_argument("--root", type=Path, default=None, help="repository root (default: this package's)")
    p.add_argument("--diff-lines", type=int_at_least(0), default=40,
                   help="lines of unified diff shown per differing page (0: none)")


def _line(res: PageResult) -> str:
    where = ", ".join(f"{res.page.folder}/{f}" for f in res.page.files)
    if res.status == "ok":
        kept = (f" ({len(res.unchecked)} figure(s) drawn at training time, kept as committed: not checked)"
                if res.unchecked else "")
        return f"ok            {res.page.name:24s} {where}{kept}"
    detail = "; ".join([f"differs: {', '.join(res.changed)}"] * bool(res.changed) + res.problems)
    return f"{res.status.upper():13s} {res.page.name:24s} {where}: {detail}"


def _written_line(res: PageResult) -> str:
    """``updated NAME FILES`` naming every file an in-place render wrote (a changed page, a re-drawn or
    restored figure), else ``unchanged NAME``."""
    if not res.written:
        return f"{'unchanged':13s} {res.page.name}"
    return f"{'updated':13s} {res.page.name:24s} {', '.join(f'{res.page.folder}/{f}' for f in res.written)}"


def _list(reg: Registry, root: Path) -> int:
    for p in reg.pages:
        files = ", ".join(f"{p.folder}/{f}" for f in p.files)
        print(f"{p.name:24s} {files}\n{'':24s}   {p.describe()}")
    for a in reg.artifacts:
        print(f"{'(artifact)':24s} {a.folder}/{a.file}\n{'':24s}   {a.source}")
    for path in reg.unregistered(root):
        print(f"{'(unregistered)':24s} {path}")
    return 0


def run(argv: list[str] | None = None, registry: Registry | None = None) -> int:
    """``energyformer report ARGV`` (``registry``: another set of pages, e.g. in tests)."""
    p = argparse.ArgumentParser(prog="energyformer report", description=__doc__)
    add_arguments(p)
    return execute(p.parse_args(argv), registry)


def execute(a: argparse.Namespace, registry: Registry | None = None) -> int:
    """Render or check the pages ``a.names`` (all when empty) and the README section; the exit status."""
    reg = registry or Registry()
    root = (a.root or repo_root()).resolve()
    if a.list:
        return _list(reg, root)
    pages = reg.select(a.names)
    failed = 0
    for page in pages:
        try:
            res = render_page(page, root, in_place=not a.check, diff_lines=a.diff_lines)
        except UserError as err:
            msg = str(err).removeprefix(f"report {page.name}: ")
            print(f"{'FAILED':13s} {page.name:24s} {msg}", flush=True)
            failed += 1
            continue
        if not a.check and res.status == "differs":
            res.status = "ok"
        print(_line(res) if a.check or res.status != "ok" else _written_line(res), flush=True)
        if a.check and res.diff:
            print(res.diff)
        failed += not res.ok and (a.check or res.status != "hand-written")
    if not a.names:  # the section summarises every page: only a run over all of them rewrites or checks it
        failed += _readme(reg, root, check=a.check)
    unregistered = reg.unregistered(root)
    for path in unregistered:
        print(f"{'UNREGISTERED':13s} {path}: no page entry says how it is made (energyformer.report.pages)")
    failed += len(unregistered) if a.check else 0
    if failed:
        print(f"energyformer report: {failed} problem(s)", file=sys.stderr)
    return 1 if failed else 0


def _readme(reg: Registry, root: Path, *, check: bool) -> int:
    path = root / "README.md"
    text = path.read_text()
    section = build_section(list(reg.pages), root, reg.artifacts)
    if current_section(text, path) == section:
        print(f"{'ok' if check else 'unchanged':13s} {'README results':24s} README.md")
        return 0
    if check:
        print(f"{'DIFFERS':13s} {'README results':24s} README.md: the generated results section is out of date "
              f"(run `energyformer report`)")
        return 1
    path.write_text(replace_section(text, section, path))
    print(f"{'updated':13s} {'README results':24s} README.md")
    return 0
