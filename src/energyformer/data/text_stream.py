"""Text of a growing token sequence, piece by piece, for printing a sample while it is drawn.

Decoding token by token is wrong for byte-level tokenizers: one character can span several tokens (its
first bytes alone decode to U+FFFD), and a tokenizer's decode may join or clean up across a token
boundary. :class:`TextStream` therefore decodes the whole sequence after each token and hands out only
text that a longer sequence cannot change: a new piece is released when the decoded text still begins
with everything released so far, with trailing U+FFFD held back (an unfinished character); the rest
comes with :meth:`TextStream.finish`. The pieces joined equal ``tokenizer.decode(all ids)`` — or, should
a decode rewrite text already released, :meth:`finish` raises rather than leave a different text printed.
"""

from __future__ import annotations

from collections.abc import Iterable

from .tokenizers import Tokenizer

_UNFINISHED = "\ufffd"  # what an incomplete UTF-8 sequence decodes to (errors="replace", byte-level BPE, ...)


class TextStream:
    """``push(ids) -> new text`` as tokens arrive, ``finish() -> the rest``; starts from ``prompt`` ids."""

    def __init__(self, tokenizer: Tokenizer, prompt: Iterable[int] = ()) -> None:
        self.tokenizer = tokenizer
        self.ids = list(prompt)
        self.released = ""

    def push(self, ids: Iterable[int]) -> str:
        """Append ``ids``; return the text that is now final (possibly '')."""
        self.ids.extend(int(i) for i in ids)
        text = self.tokenizer.decode(self.ids)
        if not text.startswith(self.released):
            return ""  # the decode changed released text; wait (finish() checks the end)
        stable = text.rstrip(_UNFINISHED)
        piece = stable[len(self.released):]
        self.released += piece
        return piece

    def finish(self) -> str:
        """The rest of the text: ``released + finish() == tokenizer.decode(ids)``."""
        text = self.tokenizer.decode(self.ids)
        if not text.startswith(self.released):
            raise RuntimeError(f"tokenizer {self.tokenizer.name!r}: decoding the whole sample changed text already "
                               f"printed ({self.released[-40:]!r} is not a prefix of it); rerun without streaming")
        piece = text[len(self.released):]
        self.released = text
        return piece
