import pytest
import torch

from energyformer.blocks.cem import CEMAttentionConfig, CEMMLPConfig
from energyformer.blocks.layer import BlockConfig
from energyformer.core import Trace
from energyformer.models.lm import CausalLM, ModelConfig, kv_cache_bytes
from energyformer.models.params import count_params

VARIANTS = {
    "llama": BlockConfig(),
    "gpt": BlockConfig(attention="gpt", mlp="gelu"),
    "cem_attn": BlockConfig(attention=CEMAttentionConfig(steps=2, precond="diag_low_rank")),
    "cem_mlp": BlockConfig(mlp=CEMMLPConfig(steps=2, precond="diagonal")),
    "full_cem": BlockConfig(attention=CEMAttentionConfig(steps=2), mlp=CEMMLPConfig(steps=2)),
    "reuse": BlockConfig(attn_reuse=2, mlp_reuse=2),
    "cem_reuse": BlockConfig(attention=CEMAttentionConfig(), mlp=CEMMLPConfig(steps=2), attn_reuse=2, mlp_reuse=3),
}


def _model(name, **kw):
    torch.manual_seed(0)
    pos = "learned" if name == "gpt" else "none"
    return CausalLM(ModelConfig(vocab_size=50, dim=32, n_layers=2, heads=4, max_seq_len=32,
                                positions=pos, block=VARIANTS[name], **kw)).double()


@pytest.mark.parametrize("name", list(VARIANTS))
def test_causal_model_is_causal(name):
    m = _model(name).eval()
    idx = torch.randint(0, 50, (1, 12))
    base = m(idx).logits
    for j in (3, 11):
        idx2 = idx.clone()
        idx2[0, j] = (idx2[0, j] + 1) % 50
        out = m(idx2).logits
        torch.testing.assert_close(out[:, :j], base[:, :j], rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", ["llama", "gpt", "cem_attn", "full_cem", "reuse", "cem_reuse"])
def test_kv_cache_generation_matches_recompute(name):
    m = _model(name).eval()
    idx = torch.randint(0, 50, (2, 5))
    a = m.generate(idx, 10, greedy=True)
    b = m.generate(idx, 10, greedy=True, use_cache=False)
    assert torch.equal(a, b)


@pytest.mark.parametrize("name", ["llama", "gpt", "full_cem", "reuse"])
def test_kv_cache_generation_past_the_window_matches_recompute(name):
    """Once: past max_seq_len the cached path restarted on one token fewer than the window the uncached path
    reads, so the two generated different tokens from there on."""
    torch.manual_seed(0)
    pos = "learned" if name == "gpt" else "none"
    m = CausalLM(ModelConfig(vocab_size=50, dim=32, n_layers=2, heads=4, max_seq_len=8, positions=pos,
                             block=VARIANTS[name])).double().eval()
    with torch.no_grad():  # sharper than the initialisation, so a changed context changes the argmax
        for p in m.parameters():
            p.mul_(4.0)
    idx = torch.randint(0, 50, (3, 5))
    a = m.generate(idx, 24, greedy=True)
    assert torch.equal(a, m.generate(idx, 24, greedy=True, use_cache=False))


def test_traces_cover_every_energy_block_and_energy_decreases_at_small_step():
    cfg = BlockConfig(attention=CEMAttentionConfig(steps=3, step_size=0.05),
                      mlp=CEMMLPConfig(steps=3, step_size=0.05))
    m = _model("full_cem")
    m = CausalLM(ModelConfig(vocab_size=50, dim=32, n_layers=2, heads=4, block=cfg))
    out = m(torch.randint(0, 50, (2, 10)), trace=True)
    assert list(out.traces) == [("layers.0.attn", 0), ("layers.0.mlp", 0), ("layers.1.attn", 0), ("layers.1.mlp", 0)]
    for name, tr in out.traces.items():
        assert isinstance(tr, Trace) and tr.steps == 3 and len(tr.energy) == 4
        assert tr.energy_tensor().shape == (4, 2, 10)
        assert tr.exact is False  # RMSNorm inside the loop
    assert m(torch.randint(0, 50, (2, 10))).traces is None  # off by default


def test_plain_reuse_keeps_one_trace_and_cache_slot_per_application():
    """Once: a reused sublayer's second application overwrote the first's trace, and KV-cached decoding
    raised NotImplementedError (``energyformer generate`` on configs/lm/attn_plain_reuse.yaml failed)."""
    m = _model("cem_reuse").eval()
    idx = torch.randint(0, 50, (2, 7))
    out = m(idx, trace=True)
    names = [f"layers.{i}.{s}" for i in range(2) for s in ("attn", "attn#1", "mlp", "mlp#1", "mlp#2")]
    assert list(out.traces) == [(n, 0) for n in names]
    first, second = (out.traces[(name, 0)].energy_tensor() for name in ("layers.0.mlp", "layers.0.mlp#1"))
    assert not torch.equal(first, second)
    cache = {}
    m(idx[:, :4], cache=cache)
    held = sorted(k for k, slot in cache.items() if slot)  # the MLPs' slots stay empty
    assert held == ["layers.0.attn", "layers.0.attn#1", "layers.1.attn", "layers.1.attn#1"]
    step = m(idx[:, 4:], cache=cache, offset=4).logits
    torch.testing.assert_close(step, out.logits[:, 4:], rtol=1e-10, atol=1e-10)


def test_param_parts_and_cache_bytes():
    llama, cem = _model("llama"), _model("full_cem")
    pl, pc = count_params(llama), count_params(cem)
    assert pl["total"] == sum(v for k, v in pl.items() if k != "total")
    assert pc["embedding"] == pl["embedding"] == 50 * 32
    assert pc["attention"] < 0.6 * pl["attention"] and pc["mlp"] < 0.7 * pl["mlp"]
    cache_l, cache_c = {}, {}
    idx = torch.randint(0, 50, (1, 8))
    llama(idx, cache=cache_l)
    cem_nodiag = CausalLM(ModelConfig(vocab_size=50, dim=32, n_layers=2, heads=4, block=BlockConfig(
        attention=CEMAttentionConfig(diagonal="none")))).double()
    cem_nodiag(idx, cache=cache_c)
    assert kv_cache_bytes(cache_c) * 2 == kv_cache_bytes(cache_l)  # K = V: half the bytes


def test_model_config_errors():
    with pytest.raises(ValueError, match="heads"):
        ModelConfig(dim=30, heads=4)
    with pytest.raises(ValueError, match=r"attention.kind = 'flash'.*registered: llama, gpt, cem"):
        BlockConfig(attention="flash")


@pytest.mark.parametrize("attention", ["llama", "gpt", "cem"])
@pytest.mark.parametrize("mlp", ["swiglu", "gelu", "cem"])
def test_param_parts_for_every_sublayer_kind(attention, mlp):
    m = CausalLM(ModelConfig(vocab_size=50, dim=32, n_layers=2, heads=4, block=BlockConfig(attention=attention, mlp=mlp)))
    parts = count_params(m)
    own = lambda part: sum(p.numel() for layer in m.layers for p in getattr(layer, part).parameters())  # noqa: E731
    assert parts["attention"] == own("attn") and parts["mlp"] == own("mlp")
    assert parts["other"] == sum(p.numel() for p in m.norm.parameters())
    assert parts["total"] == sum(p.numel() for p in m.parameters())


def test_sinusoidal_positions_are_fixed_and_not_saved():
    m = CausalLM(ModelConfig(vocab_size=50, dim=12, n_layers=1, heads=2, max_seq_len=8, positions="sinusoidal"))
    t = m.pos()
    assert t.shape == (8, 12) and not any(k.startswith("pos.") for k in m.state_dict())
    torch.testing.assert_close(t[3, 4], torch.tensor(3 / 10000 ** (4 / 12)).sin())
    torch.testing.assert_close(t[3, 5], torch.tensor(3 / 10000 ** (4 / 12)).cos())
    with pytest.raises(ValueError, match="exceeds model.max_seq_len = 8"):
        m(torch.zeros(1, 9, dtype=torch.long))


@pytest.mark.parametrize("name", ["llama", "full_cem"])
@pytest.mark.parametrize("kwargs,message", [
    ({"temperature": -1}, "temperature = -1: must be a finite number >= 0 (0 = greedy)"),
    ({"temperature": float("nan")}, "temperature = nan: must be a finite number >= 0 (0 = greedy)"),
    ({"temperature": float("inf"), "greedy": True}, "temperature = inf: must be a finite number >= 0"),
    ({"top_k": 0}, "top_k = 0: must be an integer >= 1, or None for no top-k filter"),
    ({"top_k": 2.5}, "top_k = 2.5: must be an integer >= 1, or None for no top-k filter"),
    ({"max_new_tokens": -1}, "max_new_tokens = -1: must be an integer >= 0"),
])
def test_generate_rejects_bad_sampling_arguments_in_one_line(name, kwargs, message):
    """Once: a negative temperature sampled from the inverted distribution, top_k=0 was a shape error."""
    m = _model(name).eval()
    kwargs = {"max_new_tokens": 3, **kwargs}
    with pytest.raises(ValueError) as err:
        m.generate(torch.randint(0, 50, (1, 4)), **kwargs)
    assert str(err.value).startswith(message) and "\n" not in str(err.value), str(err.value)


@pytest.mark.parametrize("name", ["llama", "cem_attn", "full_cem"])
def test_generate_rejects_an_empty_prompt_in_one_line(name):
    """Once: ``IndexError: index -1 is out of bounds`` (Llama) or ``torch.cat(): expected a non-empty
    list`` (CEM); the forward pass's own check (TokenModel.context) now answers for generate too."""
    m = _model(name).eval()
    for idx, msg in ((torch.zeros(2, 0, dtype=torch.long), "idx of shape (2, 0): expected at least one token"),
                     (torch.zeros(5, dtype=torch.long), "idx of shape (5,) and dtype torch.int64: expected")):
        for use_cache in (True, False):
            with pytest.raises(ValueError) as err:
                m.generate(idx, 3, use_cache=use_cache)
            assert str(err.value).startswith(msg) and "\n" not in str(err.value), str(err.value)
    out = m.generate(torch.zeros(1, 1, dtype=torch.long), 3, temperature=0.5, top_k=1)  # the least prompt
    assert out.shape == (1, 4)


@pytest.mark.parametrize("name", ["llama", "full_cem"])
def test_a_tiny_temperature_samples_the_argmax(name):
    """temperature 1e-40 is allowed (finite, > 0): the logits are shifted by their maximum before the division,
    so the others go to -inf and the maximum stays 0 (divided first, inf - inf made the softmax nan and
    multinomial raise)."""
    m = _model(name).eval()
    idx = torch.randint(0, 50, (2, 4), generator=torch.Generator().manual_seed(3))
    out = m.generate(idx, 5, temperature=1e-40, generator=torch.Generator().manual_seed(0))
    assert torch.equal(out, m.generate(idx, 5, greedy=True))


@pytest.mark.parametrize("temperature", [1e-46, 5e-324, 1e-40])
def test_a_temperature_below_float32s_range_is_still_greedy(temperature):
    """Python floats float32 rounds to 0: the logits were divided in float32 (0 / 0 = nan), sampling raised."""
    m = _model("llama").eval()
    idx = torch.randint(0, 50, (2, 4), generator=torch.Generator().manual_seed(3))
    out = m.generate(idx, 4, temperature=temperature, generator=torch.Generator().manual_seed(0))
    assert torch.equal(out, m.generate(idx, 4, greedy=True))


@pytest.mark.parametrize("temperature", [1.0, 1e30, 1e39, 1e300])
def test_top_k_1_is_greedy_at_any_temperature(temperature):
    """top-k filters the raw logits: at a temperature float32 rounded to inf every tempered logit was 0, nothing
    was filtered and sampling was uniform over the vocabulary."""
    m = _model("llama").eval()
    idx = torch.randint(0, 50, (2, 4), generator=torch.Generator().manual_seed(3))
    out = m.generate(idx, 4, temperature=temperature, top_k=1, generator=torch.Generator().manual_seed(0))
    assert torch.equal(out, m.generate(idx, 4, greedy=True))


def test_generate_checks_are_the_clis_checks():
    """One source of truth: ``energyformer generate`` runs check_sampling with the CLI's option names."""
    from energyformer.models.lm import check_sampling

    for args, message in (((2, -1.0, 50), "--temperature -1.0: must be a finite number >= 0 (0 = greedy)"),
                          ((2, 0.8, 0), "--top-k 0: must be an integer >= 1"),
                          ((-1, 0.8, 50), "--max-new-tokens -1: must be an integer >= 0")):
        with pytest.raises(ValueError) as err:
            check_sampling(*args, cli=True)
        assert str(err.value) == message
    check_sampling(0, 0, None)


def test_a_float64_models_loss_is_float64():
    """The loss upcast low-precision logits with ``.float()``, which also cut a float64 model's loss (and so its
    gradients) to float32 (1e-8 off; an outside probe)."""
    torch.manual_seed(0)
    m = CausalLM(ModelConfig(vocab_size=11, dim=16, n_layers=1, heads=2)).double()
    idx = torch.randint(0, 11, (2, 7))
    out = m(idx, idx)
    want = torch.nn.functional.cross_entropy(out.logits.flatten(0, 1), idx.flatten())
    assert out.loss.dtype == torch.float64
    torch.testing.assert_close(out.loss, want, rtol=1e-15, atol=0)


@pytest.mark.parametrize("use_cache", [True, False])
def test_stream_draws_the_tokens_generate_draws(use_cache):
    """``stream`` is ``generate`` one token at a time: the same tokens from the same generator state, past the
    window too; its arguments are checked before the first token is asked for."""
    m = _model("cem_reuse").eval()
    idx = torch.randint(0, 50, (1, 5), generator=torch.Generator().manual_seed(1))
    kw = dict(temperature=0.9, top_k=7, use_cache=use_cache)
    whole = m.generate(idx, 40, generator=torch.Generator().manual_seed(3), **kw)
    steps = list(m.stream(idx, 40, generator=torch.Generator().manual_seed(3), **kw))
    assert len(steps) == 40 and all(s.shape == (1, 1) for s in steps)
    assert torch.equal(torch.cat([idx, *steps], 1), whole)
    with pytest.raises(ValueError, match="temperature = -1"):
        m.stream(idx, 3, temperature=-1)


def test_top_k_samples_among_the_k_largest_logits_not_only_the_largest():
    """top_k = 8 keeps the 8 largest logits: at a high temperature 40 seeds draw several of them and nothing
    else (an outside probe's mutant kept the largest only, ``values[:, :1]`` for ``[:, -1:]``: sampling was greedy
    and no test noticed)."""
    m = _model("llama").eval()
    idx = torch.randint(0, 50, (1, 4), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        top = set(torch.topk(m(idx).logits[0, -1], 8).indices.tolist())
    firsts = {int(m.generate(idx, 1, temperature=100.0, top_k=8, generator=torch.Generator().manual_seed(s))[0, -1])
              for s in range(40)}
    assert len(firsts) > 1 and firsts <= top, (firsts, top)


def test_the_lm_head_shares_the_embedding_by_default():
    """``tie_embeddings`` None ties the head of a language model (it predicts the vocabulary) to the embedding:
    one Parameter, not a copy; False unties it. Only the HF export test checked the default before (an outside
    probe's mutant that defaulted to untied survived the model tests)."""
    cfg = dict(vocab_size=50, dim=16, n_layers=1, heads=2, max_seq_len=16)
    m = CausalLM(ModelConfig(**cfg))
    assert m.head.weight is m.embed.weight
    untied = CausalLM(ModelConfig(**cfg, tie_embeddings=False))
    assert untied.head.weight is not untied.embed.weight
    n = lambda model: sum(p.numel() for p in model.parameters())  # noqa: E731
    assert n(untied) - n(m) == 50 * 16  # the tied head adds no parameters
