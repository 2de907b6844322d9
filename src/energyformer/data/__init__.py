"""Data: text corpora and tokenizers (``text``, ``shakespeare``, ``tokenizers``); other sets in sibling modules."""

from energyformer.data.shakespeare import load_shakespeare, prepare_shakespeare, shakespeare_splits
from energyformer.data.text import (
    SPLITS,
    EvalWindows,
    LMBatcher,
    bits_per_byte,
    count_bytes,
    data_dir,
    encode_corpus,
    load_text_files,
    unigram_perplexity,
)
from energyformer.data.tokenizers import (
    TOKENIZER_KINDS,
    ByteTokenizer,
    HFTokenizer,
    SentencePieceTokenizer,
    Tokenizer,
    get_tokenizer,
    prepare_llama_model,
)

__all__ = [
    "SPLITS", "EvalWindows", "LMBatcher", "bits_per_byte", "count_bytes", "data_dir",
    "encode_corpus", "load_shakespeare", "load_text_files", "prepare_shakespeare",
    "shakespeare_splits", "unigram_perplexity", "TOKENIZER_KINDS", "ByteTokenizer",
    "HFTokenizer", "SentencePieceTokenizer", "Tokenizer", "get_tokenizer", "prepare_llama_model",
]
