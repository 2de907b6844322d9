"""Every results page from its committed artifacts: ``energyformer report`` (issue 22).

``pages``   the registry: each page under ``docs/results/`` and the command that renders it
``inputs``  checked readers of a page's committed inputs (file and line named; truncation refused)
``render``  render one page into a temporary copy of its folder; compare; copy back in place
``readme``  the README's generated results section (verdict rows read from the pages)
``command`` the ``energyformer report [NAME...] [--check] [--list]`` command line
"""

from .pages import ARTIFACTS, PAGES, Artifact, Page, Registry, Reproduce, Script

__all__ = ["ARTIFACTS", "PAGES", "Artifact", "Page", "Registry", "Reproduce", "Script"]
