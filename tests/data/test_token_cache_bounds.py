"""A token cache holding the id ``vocab_size`` (one past the last) is foreign and encoded again.

``_cached_tokens`` checks ids lie in ``[0, vocab_size)``; an off-by-one (``> vocab_size``) would load an id that
indexes past the embedding table, an error deep in training instead of a re-encode with a warning.
"""

from __future__ import annotations

import numpy as np
import pytest

from energyformer.data.text import encode_corpus
from energyformer.data.tokenizers import ByteTokenizer


def test_cache_with_id_equal_to_vocab_size_is_reencoded(tmp_path, monkeypatch):
    monkeypatch.setenv("ENERGYFORMER_DATA", str(tmp_path))
    tok, text = ByteTokenizer(), "abc"
    first = encode_corpus(text, tok)
    (path,) = (tmp_path / "tokens").glob("*.npy")
    np.save(path, np.array([97, 98, 256], dtype=np.uint16))
    with pytest.warns(UserWarning, match="outside"):
        again = encode_corpus(text, tok)
    assert again.tolist() == first.tolist() == [97, 98, 99]
