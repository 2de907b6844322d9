"""ByteTokenizer with ``eos``: the end-of-text id 256 (and any id outside 0..255) stands for no text.

``decode`` drops it and ``token_bytes`` counts it as zero bytes: bits-per-byte of a truncated evaluation divides
by ``token_bytes``, so counting the special id as a byte would bias every score on text with separators.
"""

from __future__ import annotations

from energyformer.data.tokenizers import ByteTokenizer


def test_eos_and_out_of_range_ids_are_dropped_by_decode():
    tok = ByteTokenizer(eos=True)
    assert tok.decode([104, 256, 105, -1, 300]) == "hi"


def test_eos_counts_no_bytes():
    tok = ByteTokenizer(eos=True)
    ids = tok.encode("é!") + [tok.eos_id]
    assert tok.token_bytes(ids) == 3
