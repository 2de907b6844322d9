"""The export's tokenizer: ``bytes`` and ``llama`` runs get a ``tokenizer.json`` that ``AutoTokenizer`` loads offline
and that encodes and decodes exactly as energyformer's own; a tokenizer without a Hugging Face form is said in one
line. Before, only ``tokenizers`` BPEs (bpe, gpt2) were written: a bytes or llama export had no tokenizer files,
nothing said so, and ``AutoTokenizer.from_pretrained(OUT)`` failed with a long transformers error although the
README said it loads."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from energyformer.cli import main  # noqa: E402
from energyformer.data.tokenizers import ByteTokenizer, llama_model_path, load_llama  # noqa: E402
from energyformer.experiment import load_run_config, run_experiment  # noqa: E402
from energyformer.export import export_hf  # noqa: E402
from energyformer.export.hf_tokenizer import hf_tokenizer, write_hf_tokenizer  # noqa: E402
from energyformer.models import CausalLM, ModelConfig  # noqa: E402
from energyformer.utils.config import load_config  # noqa: E402

TOY = ["train.steps=2", "train.eval_every=0", "train.save_every=0", "train.progress=false",
       "train.tensorboard=false", "task.seq_len=16", "task.batch_size=2", "task.eval_batch_size=2",
       "task.eval_max_batches=1", "model.dim=16", "model.heads=2", "model.n_layers=1", "model.max_seq_len=16"]
TEXTS = ["", "ROMEO:\nBut, soft!  what light\n\n", " lead and trail ", "\t\r\nx\u00a0y 42",
         "caf\u00e9 \u00e9", "\u65e5\u672c\u8a9e", "\U0001f600\U0001f680!", "e\u0301",
         "Hello<|endoftext|>World", "<s>x</s><unk>"]
NOTE = "no tokenizer written"


def _tiny_lm(vocab: int) -> CausalLM:
    return CausalLM(load_config(ModelConfig, {"vocab_size": vocab, "dim": 8, "n_layers": 1, "heads": 2,
                                              "max_seq_len": 16}))


def _hf_tokenizer(out):
    return AutoTokenizer.from_pretrained(str(out), trust_remote_code=True, local_files_only=True)


def _same_as_ours(tok, ours, texts, bad_ids=()):
    for text in texts:
        ids = ours.encode(text)
        assert tok(text)["input_ids"] == ids, text  # no BOS/EOS added, typed special tokens stay text
        assert tok.decode(ids, skip_special_tokens=True) == ours.decode(ids) == text, text
    for ids in bad_ids:  # ids that are no whole characters decode with the same replacement characters
        assert tok.decode(ids, skip_special_tokens=True) == ours.decode(ids), ids


def test_bytes_run_exports_a_tokenizer_that_generates_as_energyformer(tmp_path, capsys):
    """A ``task.tokenizer=bytes`` run: its export's tokenizer encodes/decodes as ByteTokenizer and the exported model
    with it generates the text of ``energyformer generate --greedy``."""
    cfg = load_run_config("lm/gpt", TOY + ["task.tokenizer=bytes", f"out_dir={tmp_path}", "name=b"])
    run = run_experiment(cfg).run_dir
    out = tmp_path / "hf"
    capsys.readouterr()
    assert main(["export", str(run), str(out)]) == 0
    assert NOTE not in capsys.readouterr().err
    tok, ours = _hf_tokenizer(out), ByteTokenizer()
    _same_as_ours(tok, ours, TEXTS, bad_ids=[[0xE6, 0x97], [0xFF, 0x41, 0xE6], [0xF0, 0x9F, 0x98], list(range(256))])
    assert tok.eos_token_id is None and len(tok) == 256

    prompt = "ROMEO"
    assert main(["generate", str(run), "--prompt", prompt, "--greedy", "--max-new-tokens", "12", "--no-stream"]) == 0
    ref = capsys.readouterr().out.removesuffix("\n")
    hf = AutoModelForCausalLM.from_pretrained(str(out), trust_remote_code=True, local_files_only=True).eval()
    ids = tok(prompt, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        g = hf.generate(ids, max_new_tokens=12, min_new_tokens=12, do_sample=False)
    assert tok.decode(g[0], skip_special_tokens=True) == ref and ref.startswith(prompt)


def test_bytes_with_eos_exports_end_of_text_as_id_256(tmp_path, capsys):
    """``bytes`` with ``eos``: id 256 is the special ``<|endoftext|>`` (dropped by decode, a typed one is text)."""
    ours = ByteTokenizer(eos=True)
    export_hf(_tiny_lm(257), tmp_path / "hf", tokenizer=ours)
    assert NOTE not in capsys.readouterr().err
    tok = _hf_tokenizer(tmp_path / "hf")
    assert tok.eos_token_id == 256 and tok.convert_ids_to_tokens(256) == "<|endoftext|>"
    _same_as_ours(tok, ours, TEXTS, bad_ids=[[104, 256, 105], [256, 0xC3], [0xC3, 256, 0xA9]])


@pytest.mark.skipif(not llama_model_path().is_file(), reason="llama tokenizer not prepared (make data)")
def test_llama_tokenizer_exports_without_sentencepiece(tmp_path, capsys):
    """The llama (SentencePiece) tokenizer is converted: ``AutoTokenizer`` loads it with the ``tokenizers`` library
    alone and it encodes/decodes as sentencepiece, also over a stretch of Shakespeare."""
    pytest.importorskip("sentencepiece")
    from energyformer.data.shakespeare import load_shakespeare

    ours = load_llama()
    export_hf(_tiny_lm(ours.vocab_size), tmp_path / "hf", tokenizer=ours)
    assert NOTE not in capsys.readouterr().err
    assert not (tmp_path / "hf" / "tokenizer.model").exists()  # no sentencepiece model: tokenizer.json only
    tok = _hf_tokenizer(tmp_path / "hf")
    assert (tok.bos_token_id, tok.eos_token_id, tok.unk_token_id) == (1, 2, 0)
    lines = load_shakespeare("validation").split("\n")[:600]
    texts = TEXTS + ["\n".join(lines[i:i + 30]) for i in range(0, len(lines), 30)]
    cut = ours.encode("hello \U0001d518")[:-1]  # 𝔘 is no piece: 4 byte pieces (byte fallback); cut inside it
    assert len(ours.encode("\U0001d518\ua66e")) == 1 + 4 + 3  # "▁" and the bytes of both
    _same_as_ours(tok, ours, texts + ["\U0001d518\ua66e x\U0001d518"], bad_ids=[[1, 0xE6 + 3, 0x97 + 3, 2], cut])


def test_a_tokenizer_without_hugging_face_form_is_said_in_one_line(tmp_path, capsys):
    """Where no tokenizer is written (a tokenizer class without a Hugging Face form, or one whose conversion would
    encode otherwise) the export says so in one line and writes no tokenizer files."""

    class Shouting(ByteTokenizer):  # a ByteTokenizer that encodes otherwise: the conversion must not be written
        def encode(self, text: str) -> list[int]:
            return list(text.upper().encode("utf-8"))

    class Other:
        name, eos_id, vocab_size = "mine", None, 256

    for i, tokenizer in enumerate((Shouting(), Other())):
        out = tmp_path / f"hf{i}"
        export_hf(_tiny_lm(256), out, tokenizer=tokenizer, check=False)
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and NOTE in err[0] and "AutoTokenizer will not load" in err[0], err
        assert ("differs" in err[0]) == (i == 0), err
        assert not (out / "tokenizer.json").exists() and not (out / "tokenizer_config.json").exists()


def test_a_tokenizer_that_decodes_otherwise_is_not_written(tmp_path):
    class Quiet(ByteTokenizer):  # encodes as bytes, decodes otherwise: the conversion would be a silent wrong answer
        def decode(self, ids: list[int]) -> str:
            return super().decode(ids).lower()

    why = hf_tokenizer(Quiet())
    assert isinstance(why, str) and why.startswith("the converted tokenizer differs: it decodes"), why
    assert write_hf_tokenizer(Quiet(), tmp_path) == why and not (tmp_path / "tokenizer.json").exists()


def test_an_end_of_text_id_that_decodes_otherwise_is_not_written():
    class Loud(ByteTokenizer):  # spells end-of-text where energyformer drops it
        def decode(self, ids: list[int]) -> str:
            return super().decode([i for i in ids if i != self.eos_id]) + "<eos>" * ids.count(self.eos_id)

    assert isinstance(hf_tokenizer(Loud(eos=True)), str)
    assert not isinstance(hf_tokenizer(ByteTokenizer(eos=True)), str)


def test_the_written_tokenizer_keeps_spaces_before_punctuation(tmp_path):
    ours = ByteTokenizer()
    assert write_hf_tokenizer(ours, tmp_path) is None
    tok = AutoTokenizer.from_pretrained(str(tmp_path), local_files_only=True)
    for text in ("Hello , world ! It 's a test .", "do n't , ok ?"):
        assert tok.decode(ours.encode(text)) == ours.decode(ours.encode(text)) == text
