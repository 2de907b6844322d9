"""TokenEncoder: bidirectional per-token model over the iterated backbone; key-padding masks."""

import pytest
import torch
import torch.nn.functional as F

from energyformer.blocks import BlockConfig, CEMAttentionConfig, CEMMLPConfig
from energyformer.models import MODELS, CausalLM, ModelConfig, TokenEncoder
from energyformer.utils.config import ConfigModel, load_config
from energyformer.utils.validate import ConfigError

BLOCKS = {
    "llama": BlockConfig(),
    "gpt": BlockConfig(attention="gpt", mlp="gelu"),
    "full_cem": BlockConfig(attention=CEMAttentionConfig(steps=2, precond="diag_low_rank"),
                            mlp=CEMMLPConfig(steps=2)),
}


def _encoder(name="full_cem", n_out=5, causal=None, **kw) -> TokenEncoder:
    torch.manual_seed(0)
    cfg = ModelConfig(**{**dict(vocab_size=12, dim=32, n_layers=1, heads=4, max_seq_len=16,
                                positions="sinusoidal", block=BLOCKS[name]), **kw})
    m = TokenEncoder(cfg, n_out, causal=causal).double().eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # zero-initialised parts (CEM diagonal, self bias, precond V) should matter
        for p in m.parameters():
            p.add_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.05)
    return m


@pytest.mark.parametrize("name", list(BLOCKS))
def test_bidirectional_output_at_position_0_depends_on_later_tokens(name):
    m = _encoder(name, iterations=2)
    assert not m.causal
    idx = torch.randint(0, 12, (1, 8))
    idx2 = idx.clone()
    idx2[0, 7] = (idx2[0, 7] + 1) % 12
    assert not torch.allclose(m(idx2).logits[:, 0], m(idx).logits[:, 0])


@pytest.mark.parametrize("name", list(BLOCKS))
def test_causal_encoder_and_causal_lm_stay_causal_when_iterated(name):
    enc = _encoder(name, causal=True, iterations=3, input_injection="add")
    torch.manual_seed(0)
    lm = CausalLM(ModelConfig(vocab_size=12, dim=32, n_layers=1, heads=4, iterations=3,
                              block=BLOCKS[name])).double().eval()
    idx = torch.randint(0, 12, (2, 8))
    for m in (enc, lm):
        base = m(idx).logits
        for j in (2, 7):
            idx2 = idx.clone()
            idx2[:, j] = (idx2[:, j] + 1) % 12
            torch.testing.assert_close(m(idx2).logits[:, :j], base[:, :j], rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", list(BLOCKS))
def test_padded_tokens_do_not_influence_real_tokens(name):
    m = _encoder(name, iterations=3, input_injection="add")
    idx = torch.randint(0, 12, (3, 8))
    mask = torch.tensor([[1] * 8, [1] * 5 + [0] * 3, [1] * 2 + [0] * 6], dtype=torch.bool)
    base = m(idx, mask).logits
    idx2 = torch.where(mask, idx, torch.randint(0, 12, idx.shape))
    idx2[~mask] = (idx[~mask] + 1 + torch.arange(int((~mask).sum())) % 11) % 12  # surely different
    out = m(idx2, mask).logits
    torch.testing.assert_close(out[mask], base[mask], rtol=0, atol=1e-12)
    # a padded sequence gives its real tokens the logits of the unpadded (shorter) sequence
    torch.testing.assert_close(m(idx[1:2, :5]).logits[0], base[1, :5], rtol=1e-10, atol=1e-10)
    assert not torch.allclose(m(idx2).logits[1, :5], base[1, :5])  # without the mask they would


def test_encoder_returns_traces_per_iteration_and_aux_losses():
    m = _encoder("full_cem", iterations=3)
    out = m(torch.randint(0, 12, (2, 6)), trace=True)
    assert out.logits.shape == (2, 6, 5)
    assert sorted(out.traces) == sorted((b, it) for b in ("layers.0.attn", "layers.0.mlp") for it in range(3))
    assert out.aux_losses == {} and out.stats is None
    assert m(torch.randint(0, 12, (2, 6))).traces is None


def test_toy_recurrent_depth_encoder_trains_with_sampled_iterations_and_evaluates_deeper():
    """1 shared bidirectional layer, L ~ U{2..4} per batch in training, L = 6 at evaluation.

    Toy task: every position predicts the sequence's last token (needs right context)."""
    torch.manual_seed(0)
    cfg = load_config(ModelConfig, {
        "vocab_size": 6, "dim": 32, "n_layers": 1, "heads": 4, "max_seq_len": 8, "positions": "learned",
        "iterations": 6, "train_iterations": [2, 4], "input_injection": "add",
        "block": {"attention": {"kind": "cem", "steps": 1}, "mlp": {"kind": "cem", "steps": 1}}})
    m = MODELS.build(cfg, n_out=6, causal=False)
    assert isinstance(m, TokenEncoder) and not m.causal
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(0)

    def batch(n=64):
        x = torch.randint(0, 6, (n, 6), generator=g)
        return x, x[:, -1:].expand(-1, 6)

    seen, losses = set(), []
    m.train()
    for _ in range(40):
        x, y = batch()
        out = m(x, trace=True)
        seen.add(max(it for _, it in out.traces) + 1)
        loss = F.cross_entropy(out.logits.flatten(0, 1), y.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert seen == {2, 3, 4}  # the training count was sampled per batch from [2, 4]
    assert sum(losses[-5:]) / 5 < 0.6 * sum(losses[:5]) / 5, losses
    m.eval()
    x, y = batch(256)
    with torch.no_grad():
        out = m(x, trace=True)  # eval: cfg.iterations = 6 > 4, the most it trained with
        acc = (out.logits.argmax(-1) == y).float().mean().item()
    assert {it for _, it in out.traces} == set(range(6)) and len(out.traces) == 12
    assert torch.isfinite(out.logits).all() and acc > 0.5, acc


def test_builder_and_causal_flag():
    cfg = ModelConfig(vocab_size=12, dim=16, n_layers=1, heads=2)
    assert isinstance(MODELS.build(cfg, vocab_size=30), CausalLM)
    assert MODELS.build(cfg, vocab_size=30).embed.num_embeddings == 30
    enc = MODELS.build(cfg, n_out=3)
    assert isinstance(enc, TokenEncoder) and enc.causal is False and enc.head.out_features == 3
    assert MODELS.build(cfg, n_out=3, causal=True).causal is True  # the task's default
    forced = ModelConfig(vocab_size=12, dim=16, n_layers=1, heads=2, causal=True)
    assert MODELS.build(forced, n_out=3, causal=False).causal is True  # the config wins over the task
    with pytest.raises(ConfigError, match=r"model.causal = False: a causal language model .* needs causal"):
        CausalLM(ModelConfig(causal=False))
    with pytest.raises(ValueError, match="model.causal = True but the encoder was asked for causal = False"):
        TokenEncoder(forced, 3, causal=False)
    with pytest.raises(ValueError, match="tie_embeddings = True: the head has 3 outputs"):
        TokenEncoder(ModelConfig(vocab_size=12, dim=16, n_layers=1, heads=2, tie_embeddings=True), 3)
    mlm = TokenEncoder(cfg)  # n_out = vocab: tied like an LM head
    assert mlm.head.weight is mlm.embed.weight and enc.head.weight is not enc.embed.weight


def test_bad_model_kind_and_model_config_errors():
    class Run(ConfigModel):
        model: MODELS.type("transformer") = MODELS.field("transformer")

    assert isinstance(load_config(Run, {"model": {"dim": 16, "heads": 2}}).model, ModelConfig)
    with pytest.raises(ConfigError) as err:
        load_config(Run, {"model": {"kind": "transformr"}})
    msg = str(err.value)
    assert "model.kind = 'transformr'" in msg and "registered: transformer" in msg and "\n" not in msg
    with pytest.raises(ConfigError, match=r"train_iterations = \[4, 2\]: must be \[min, max\] with 1 <= min <= max"):
        ModelConfig(train_iterations=[4, 2])
    with pytest.raises(ConfigError, match="input_injection = 'concat'"):
        ModelConfig(input_injection="concat")
    with pytest.raises(ConfigError) as err:
        load_config(Run, {"model": {"block": {"attention": {"steps": 2}}}})
    msg = str(err.value)  # (utils.config renders the nested path as "model: block: ... 'attention.steps'")
    assert "attention.steps' for attention kind 'llama'; kinds that accept it: cem" in msg and "\n" not in msg
