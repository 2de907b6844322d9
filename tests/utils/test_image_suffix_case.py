"""``check_image_file`` accepts an upper-case suffix.

matplotlib picks the format from the suffix case-insensitively (``fig.PNG`` is written as a PNG), so the
parse-time check must not refuse what the writer accepts; every other test uses lower case.
"""

from __future__ import annotations

from energyformer.utils.paths import check_image_file


def test_upper_case_image_suffix_is_accepted(tmp_path):
    """``fig.PNG`` and ``fig.Pdf`` pass; the path comes back unchanged."""
    for name in ("fig.PNG", "fig.Pdf"):
        assert check_image_file(tmp_path / name).name == name
