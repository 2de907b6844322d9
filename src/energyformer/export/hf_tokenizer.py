"""The run's tokenizer as Hugging Face files for an export: ``tokenizer.json`` and ``tokenizer_config.json``.

=============  ==========================================================================================
tokenizer      written as (``tokenizer_class: PreTrainedTokenizerFast``)
=============  ==========================================================================================
``bpe``,       its ``tokenizers`` byte-level BPE, as is
``gpt2``
``bytes``      built here with ``tokenizers``: the 256 byte symbols (GPT-2's byte-to-character map) as ids
               0..255 with no merges, the ByteLevel pre-tokenizer and decoder without a prefix space, and with
               ``eos`` the special ``<|endoftext|>`` as id 256
``llama``      the SentencePiece BPE model converted as transformers' Llama converter does: its pieces and ids
               as is, merges ordered by piece score, spaces as "▁" plus the dummy prefix, byte fallback, the
               control pieces (``<unk>``, ``<s>``, ``</s>``) as special tokens
=============  ==========================================================================================

So ``AutoTokenizer.from_pretrained(OUT)`` loads every one offline with the ``tokenizers`` library alone (no
``sentencepiece``, no download). As in energyformer, no BOS/EOS is added and a typed special token
(``<|endoftext|>``, ``<s>``) is text (``split_special_tokens``); ``decode(ids, skip_special_tokens=True)`` gives
energyformer's ``decode``.

A tokenizer is written only once it encodes and decodes :data:`PROBE` exactly as the run's own (ASCII, runs of
spaces, newlines, digits, multi-byte UTF-8, typed special tokens): one that cannot be built (another tokenizer
class, a SentencePiece model that is not a plain BPE) or that disagrees is not written, and the reason comes
back for the export to print, because a tokenizer that tokenises differently from the one the model was trained
with would be a silent wrong answer. Two known differences of llama's, both in ids that ``encode`` never gives
(transformers' own Llama tokenizer has them too): ``<unk>`` (id 0; byte fallback spells every character)
decodes as "" where sentencepiece writes " ⁇ ", and a run of byte pieces that is not UTF-8 as a whole gives one
U+FFFD per byte, where sentencepiece keeps the run's whole characters ([<0x41>, <0xFF>]: "��", not "A�"). A run
cut inside a character (the end of a sample) decodes the same.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..data.tokenizers import EOT, ByteTokenizer, SentencePieceTokenizer

#: Texts a written tokenizer must encode (and decode back) exactly as the run's own.
PROBE = ("", "ROMEO:\nBut, soft!  what light\n\nthrough yonder window breaks?", "  leading and trailing spaces  ",
         "\t\r\n tab\u00a0nbsp", "1st of 2023: 3.14159", "caf\u00e9, \u65e5\u672c, \U0001f600, e\u0301, \u200b",
         "Hello<|endoftext|>World <s>x</s><unk>")

_SPACE = "\u2581"  # SentencePiece's "▁"


def byte_to_char() -> dict[int, str]:
    """GPT-2's byte -> printable character map (the alphabet of the ``tokenizers`` ByteLevel pre-tokenizer)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("\u00a1"), ord("\u00ac") + 1),
            *range(ord("\u00ae"), ord("\u00ff") + 1)]
    out, extra = {b: chr(b) for b in keep}, 0
    for b in range(256):
        if b not in out:
            out[b] = chr(256 + extra)
            extra += 1
    return out


def _bytes_backend(tok: ByteTokenizer) -> tuple[Any, dict]:
    """ByteTokenizer's ids (byte value; end-of-text 256) as a ``tokenizers`` byte-level model without merges."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    chars = byte_to_char()
    backend = Tokenizer(models.BPE({chars[b]: b for b in range(256)}, []))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    if tok.eos_id is not None:
        backend.add_special_tokens([AddedToken(EOT, special=True)])
    return backend, {"eos_token": EOT if tok.eos_id is not None else None}


def _sentencepiece_backend(tok: SentencePieceTokenizer) -> tuple[Any, dict] | str:
    """A SentencePiece BPE model as a ``tokenizers`` BPE (see the module docstring), or why it cannot be."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers

    sp = tok.processor
    try:
        from sentencepiece import sentencepiece_model_pb2
        proto = sentencepiece_model_pb2.ModelProto()
        proto.ParseFromString(sp.serialized_model_proto())
    except Exception as err:  # ImportError (protobuf), or protobuf's own DecodeError
        return f"its SentencePiece model cannot be read here ({type(err).__name__}: {err})"
    spec, norm = proto.trainer_spec, proto.normalizer_spec
    if spec.model_type != sentencepiece_model_pb2.TrainerSpec.BPE:
        return "its SentencePiece model is not a BPE model (only BPE models convert)"
    if norm.precompiled_charsmap or norm.remove_extra_whitespaces or spec.treat_whitespace_as_suffix:
        return "its SentencePiece model normalises text (only the identity normaliser converts)"
    n = sp.get_piece_size()
    user = sentencepiece_model_pb2.ModelProto.SentencePiece.USER_DEFINED
    if any(sp.is_unused(i) or p.type == user for i, p in enumerate(proto.pieces)):
        return "its SentencePiece model has user-defined or unused pieces"
    vocab = {sp.id_to_piece(i): i for i in range(n)}
    special = [i for i in range(n) if sp.is_control(i) or sp.is_unknown(i)]
    merges = []
    for i in range(n):
        if i in special or sp.is_byte(i):
            continue
        piece = sp.id_to_piece(i)
        for k in range(1, len(piece)):
            left, right = piece[:k], piece[k:]
            if left in vocab and right in vocab:
                merges.append((-sp.get_score(i), vocab[left], vocab[right], left, right))
    merges.sort()  # SentencePiece merges the pair whose piece scores highest first
    unk = sp.id_to_piece(sp.unk_id())
    backend = Tokenizer(models.BPE(vocab, [(a, b) for *_, a, b in merges], unk_token=unk, fuse_unk=True,
                                   byte_fallback=spec.byte_fallback))
    spaces = [normalizers.Replace(" ", _SPACE)]
    backend.normalizer = normalizers.Sequence([normalizers.Prepend(_SPACE), *spaces] if norm.add_dummy_prefix
                                              else spaces)
    steps = [decoders.Replace(_SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    backend.decoder = decoders.Sequence(steps + [decoders.Strip(" ", 1, 0)] if norm.add_dummy_prefix else steps)
    backend.add_special_tokens([AddedToken(sp.id_to_piece(i), special=True, normalized=False) for i in special])
    names = {"bos_token": tok.bos_id, "eos_token": tok.eos_id, "unk_token": sp.unk_id()}
    return backend, {k: sp.id_to_piece(i) for k, i in names.items() if i is not None}


def _disagreement(backend: Any, tok: Any) -> str | None:
    """Where ``backend`` encodes or decodes a :data:`PROBE` text otherwise than ``tok`` (None: nowhere)."""
    backend.encode_special_tokens = True  # a typed special token is text (what split_special_tokens does)
    for text in PROBE:
        ids, got = tok.encode(text), backend.encode(text, add_special_tokens=False).ids
        if got != ids:
            return f"it encodes {text!r} as {got}, energyformer as {ids}"
        ids = ids + [tok.eos_id] if tok.eos_id is not None else ids
        got_text, text = backend.decode(ids, skip_special_tokens=True), tok.decode(ids)
        if got_text != text:
            return f"it decodes {ids} as {got_text!r}, energyformer as {text!r}"
    return None


def hf_tokenizer(tok: Any) -> tuple[Any, dict] | str:
    """``(tokenizers.Tokenizer, tokenizer_config entries)`` for the run's tokenizer ``tok``, checked against it on
    :data:`PROBE`; or, where there is none, why (a phrase for the export's message)."""
    if isinstance(tok, ByteTokenizer):
        made = _bytes_backend(tok)
    elif isinstance(tok, SentencePieceTokenizer):
        made = _sentencepiece_backend(tok)
    elif getattr(tok, "backend", None) is not None:  # HFTokenizer: bpe, gpt2
        made = tok.backend, {"eos_token": EOT if tok.eos_id is not None else None}
    else:
        return f"class {type(tok).__name__} is none of energyformer's tokenizer kinds"
    if isinstance(made, str):
        return made
    wrong = _disagreement(made[0], tok)
    return f"the converted tokenizer differs: {wrong}" if wrong else made


def write_hf_tokenizer(tok: Any, out: Path) -> str | None:
    """Write ``tokenizer.json`` and ``tokenizer_config.json`` of ``tok`` into ``out``; None when written, else why
    not (nothing is written then)."""
    made = hf_tokenizer(tok)
    if isinstance(made, str):
        return made
    backend, names = made
    backend.save(str(out / "tokenizer.json"))
    # split_special_tokens: a typed "<|endoftext|>" (or "<s>") is text, as energyformer encodes it, not the token
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", **names, "clean_up_tokenization_spaces": False,
           "split_special_tokens": True}
    (out / "tokenizer_config.json").write_text(json.dumps({k: v for k, v in cfg.items() if v is not None}, indent=1))
    return None
