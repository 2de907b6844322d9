"""Depth as iteration: one layer stack iterated L times, traces and KV caches keyed by (block, iteration)."""

import pytest
import torch

from energyformer.blocks import BlockConfig, CEMAttentionConfig, CEMMLPConfig
from energyformer.core import ForwardContext
from energyformer.models import CausalLM, LayerStack, ModelConfig, kv_cache_bytes

class Pass(torch.nn.Module):
    def forward(self, x, ctx=None):
        return x


FULL_CEM = BlockConfig(attention=CEMAttentionConfig(steps=2), mlp=CEMMLPConfig(steps=2))


def _lm(block=FULL_CEM, **kw) -> CausalLM:
    torch.manual_seed(0)
    base = dict(vocab_size=40, dim=32, n_layers=1, heads=4, max_seq_len=32, block=block)
    return CausalLM(ModelConfig(**{**base, **kw})).double().eval()


def test_three_iterations_give_three_traces_per_energy_block():
    m = _lm(n_layers=2, iterations=3)
    out = m(torch.randint(0, 40, (2, 6)), trace=True)
    blocks = ["layers.0.attn", "layers.0.mlp", "layers.1.attn", "layers.1.mlp"]
    assert list(out.traces) == [(b, it) for it in range(3) for b in blocks]  # in execution order
    for tr in out.traces.values():
        assert tr.steps == 2 and tr.energy_tensor().shape == (3, 2, 6)
    assert len(m(torch.randint(0, 40, (2, 6)), trace=True, iterations=5).traces) == 5 * 4  # call-time override


def test_steps_override_reaches_every_energy_block():
    m = _lm(iterations=2)
    out = m(torch.randint(0, 40, (1, 5)), trace=True, steps=4)
    assert len(out.traces) == 4 and all(tr.steps == 4 for tr in out.traces.values())


def test_shared_weights_iterated_equal_the_stack_applied_again():
    m = _lm(iterations=3)
    idx = torch.randint(0, 40, (2, 7))
    x = m.drop(m.embed(idx))
    layer = m.layers[0]
    for it in range(3):
        x = layer(x, ForwardContext(iteration=it, iterations=3))
    torch.testing.assert_close(m(idx).logits, m.head(m.norm(x)), rtol=0, atol=1e-12)
    assert sum(p.numel() for p in m.parameters()) == sum(p.numel() for p in _lm().parameters())


def test_input_injection_adds_the_embedding_before_every_later_pass():
    m = _lm(iterations=3, input_injection="add")
    idx = torch.randint(0, 40, (2, 7))
    e = m.embed(idx)
    x = e
    for it in range(3):
        x = m.layers[0](x + (e if it else 0), ForwardContext(iteration=it))
    torch.testing.assert_close(m(idx).logits, m.head(m.norm(x)), rtol=0, atol=1e-12)
    # with one pass, injection changes nothing
    one, one_inj = _lm(), _lm(input_injection="add")
    torch.testing.assert_close(one(idx).logits, one_inj(idx).logits, rtol=0, atol=0)



def test_input_injection_passes_the_embeddings_gradient_through_every_later_pass():
    """The injected embedding is the graph's own, not a detached copy: the embedding's gradient equals the explicit
    loop's, where every later pass adds e again (a detached injection left those terms out and every forward test
    still passed: mutation probe AI)."""
    m = _lm(iterations=3, input_injection="add")
    idx = torch.randint(0, 40, (2, 7), generator=torch.Generator().manual_seed(1))
    got = torch.autograd.grad(m(idx).logits.sum(), m.embed.weight)[0]
    e = m.embed(idx)
    x = e
    for it in range(3):
        x = m.layers[0](x + (e if it else 0), ForwardContext(iteration=it))
    want = torch.autograd.grad(m.head(m.norm(x)).sum(), m.embed.weight)[0]
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)

def test_training_iterations_sampled_per_batch_from_torch_rng_eval_fixed():
    stack = LayerStack([Pass()], iterations=6, train_iterations=(2, 4))
    stack.train()
    torch.manual_seed(123)
    state = torch.get_rng_state()
    draws = [stack.num_iterations() for _ in range(200)]
    assert set(draws) == {2, 3, 4}
    torch.set_rng_state(state)  # a resumed run restores torch's RNG state: the same counts follow
    assert [stack.num_iterations() for _ in range(200)] == draws
    stack.eval()
    assert {stack.num_iterations() for _ in range(20)} == {6}
    ctx = ForwardContext()
    stack(torch.zeros(1, 2, 3), ctx, iterations=9)
    assert ctx.iterations == 9 and ctx.iteration == 8
    stack.train()
    assert len({_count(stack) for _ in range(50)}) == 3


def _count(stack):
    ctx = ForwardContext()
    stack(torch.zeros(1, 1, 1), ctx)
    return ctx.iterations


def test_stack_slicing_and_bad_counts():
    stack = LayerStack([Pass(), Pass()], iterations=2)
    assert isinstance(stack[:1], LayerStack) and len(stack[:1]) == 1
    with pytest.raises(ValueError, match="iterations = 0"):
        stack(torch.zeros(1, 1, 1), ForwardContext(), iterations=0)
    with pytest.raises(ValueError, match=r"train_iterations\[1\] = 1: must be an integer >= 2"):
        LayerStack([], train_iterations=(2, 1))


@pytest.mark.parametrize("block", [BlockConfig(), FULL_CEM, BlockConfig(attention="gpt", mlp="gelu")],
                         ids=["llama", "full_cem", "gpt"])
def test_kv_cache_holds_one_entry_per_iteration_and_matches_recompute(block):
    m = _lm(block, iterations=3, input_injection="add")
    idx = torch.randint(0, 40, (2, 5))
    cache: dict = {}
    m(idx, cache=cache)
    filled = {k: v for k, v in cache.items() if v}  # (a CEM MLP gets an empty slot per iteration)
    assert sorted(filled) == ["layers.0.attn", "layers.0.attn@1", "layers.0.attn@2"]
    for slot in filled.values():
        assert slot["k"].shape[2] == 5  # every token, once per iteration
    plain: dict = {}
    _lm(block)(idx, cache=plain)
    assert kv_cache_bytes(cache) == 3 * kv_cache_bytes(plain)
    a = m.generate(idx, 8, greedy=True)
    b = m.generate(idx, 8, greedy=True, use_cache=False)
    assert torch.equal(a, b)
    # incremental forward with the cache gives the full forward's logits
    full = m(torch.cat([idx, a[:, 5:7]], 1)).logits
    cache = {}
    m(idx, cache=cache)
    step = m(a[:, 5:7], cache=cache, offset=5).logits
    torch.testing.assert_close(step, full[:, 5:7], rtol=1e-10, atol=1e-10)


def test_generate_uses_fixed_iterations_even_in_training_mode():
    m = _lm(iterations=2, train_iterations=(1, 3)).train()
    m.drop.p = 0.0
    idx = torch.randint(0, 40, (1, 4))
    assert torch.equal(m.generate(idx, 5, greedy=True), m.generate(idx, 5, greedy=True, use_cache=False))


def test_cached_forward_never_samples_the_count():
    stack = LayerStack([Pass()], iterations=5, train_iterations=(1, 2)).train()
    ctx = ForwardContext(cache={})
    stack(torch.zeros(1, 1, 1), ctx)
    assert ctx.iterations == 5
