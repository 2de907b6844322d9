"""``atomic_write_bytes`` / ``atomic_write_text`` rename their temporary file into place.

A copy instead of the rename would give the same content (so content tests pass) but leave a
``.<name>.<pid>.tmp`` beside every checkpoint and cache file, and the target would be written in place,
not atomically: a crash mid-copy leaves a truncated file under the real name.
"""

from __future__ import annotations

from energyformer.utils.io import atomic_write_bytes, atomic_write_text


def test_only_the_target_remains(tmp_path):
    """After two writes (one over an existing file) the folder holds just the two targets."""
    atomic_write_bytes(tmp_path / "a.bin", b"x" * 10, durable=False)
    atomic_write_bytes(tmp_path / "a.bin", b"y", durable=False)
    atomic_write_text(tmp_path / "b.txt", "hi", durable=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.bin", "b.txt"]
    assert (tmp_path / "a.bin").read_bytes() == b"y"
