"""``export_hf`` / ``load_hf`` / the exported model: which
models go out as a stock Llama, what config.json and generation_config.json record, the logit check refusing a
folder that does not match, load_hf's errors and eval mode, an untied Llama, the HF loss's shift, generation past
max_seq_len and non-persistent buffers."""
from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("transformers")
from transformers import AutoModelForCausalLM  # noqa: E402

from energyformer.data.tokenizers import ByteTokenizer  # noqa: E402
from energyformer.export import ExportError, export_hf, export_run, load_hf  # noqa: E402
from energyformer.export.hf import check_export, is_llama  # noqa: E402
from energyformer.models import CausalLM, ModelConfig  # noqa: E402

LLAMA = dict(vocab_size=32, dim=16, heads=2, n_layers=1, max_seq_len=16, positions="none", final_norm="rms",
             block={"attention": "llama", "mlp": "swiglu"})


def _lm(seed=0, **kw):
    """A tiny model that goes out in the custom-code layout (learned positions: no stock Llama)."""
    torch.manual_seed(seed)
    return CausalLM(ModelConfig.model_validate({"vocab_size": 40, "dim": 16, "n_layers": 1, "heads": 2,
                                                "max_seq_len": 8, "positions": "learned", **kw}))


def _hf(out):
    return AutoModelForCausalLM.from_pretrained(str(out), trust_remote_code=True, local_files_only=True).eval()


@pytest.mark.parametrize("change", [{"positions": "learned"}, {"final_norm": "layer"}, {"iterations": 2},
                                    {"block": {**LLAMA["block"], "attn_reuse": 2}}])
def test_only_the_plain_llama_goes_out_as_a_stock_llama(change):
    assert is_llama(ModelConfig.model_validate(LLAMA))
    assert not is_llama(ModelConfig.model_validate({**LLAMA, **change}))


def test_config_records_the_run_config_and_the_tokenizers_end_of_text(tmp_path):
    run = {"task": {"name": "lm"}, "train": {"steps": 3}}
    export_hf(_lm(vocab_size=257), tmp_path / "hf", tokenizer=ByteTokenizer(eos=True), run_config=run)
    config = json.loads((tmp_path / "hf/config.json").read_text())
    assert config["energyformer_run"] == run and config["eos_token_id"] == 256
    assert json.loads((tmp_path / "hf/generation_config.json").read_text())["eos_token_id"] == 256


def test_the_logit_check_refuses_a_folder_of_another_model(tmp_path):
    export_hf(_lm(0), tmp_path / "hf")
    check_export(_lm(0), tmp_path / "hf")
    with pytest.raises(ExportError, match=r"export check failed: .* logits .* away from the run's"):
        check_export(_lm(1), tmp_path / "hf")


def test_load_hf_without_config_json_names_it(tmp_path):
    with pytest.raises(ExportError, match=r"config.json not found: is .* an exported model folder"):
        load_hf(tmp_path)


def test_export_run_refuses_an_unknown_format_first(tmp_path):
    with pytest.raises(ExportError, match=r"--format 'onnx': allowed formats: hf"):
        export_run(tmp_path / "no-run", tmp_path / "out", format="onnx")


def test_an_untied_llama_loads_back_untied_in_eval_mode(tmp_path):
    torch.manual_seed(0)
    model = CausalLM(ModelConfig.model_validate({**LLAMA, "tie_embeddings": False}))
    export_hf(model, tmp_path / "hf")
    assert json.loads((tmp_path / "hf/config.json").read_text())["tie_word_embeddings"] is False
    back = load_hf(tmp_path / "hf")
    assert back.head.weight is not back.embed.weight and not back.training
    torch.testing.assert_close(back.head.weight, model.head.weight)


def test_the_exported_models_loss_predicts_the_next_token(tmp_path):
    model = _lm().eval()
    export_hf(model, tmp_path / "hf")
    assert type(_hf(tmp_path / "hf")).__name__ == "EnergyformerForCausalLM"
    idx = torch.randint(0, 40, (2, 8), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        loss = _hf(tmp_path / "hf")(input_ids=idx, labels=idx).loss
        logits = model(idx).logits
    torch.testing.assert_close(loss, F.cross_entropy(logits[:, :-1].flatten(0, 1), idx[:, 1:].flatten()))


def test_generation_past_max_seq_len_slides_the_window_as_energyformer(tmp_path):
    model = _lm().eval()
    export_hf(model, tmp_path / "hf")
    prompt = torch.randint(0, 40, (1, 6), generator=torch.Generator().manual_seed(2))
    g = _hf(tmp_path / "hf").generate(prompt, max_new_tokens=7, min_new_tokens=7, do_sample=False)
    assert torch.equal(g, model.generate(prompt, 7, greedy=True))


def test_sinusoidal_positions_survive_the_hugging_face_load(tmp_path):
    """Non-persistent buffers (a position table) are not in the weights: the folder recomputes them."""
    model = _lm(positions="sinusoidal").eval()
    export_hf(model, tmp_path / "hf", check=False)
    idx = torch.randint(0, 40, (2, 8), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(_hf(tmp_path / "hf")(input_ids=idx).logits, model(idx).logits, atol=1e-5, rtol=0)
