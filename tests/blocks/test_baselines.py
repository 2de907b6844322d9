"""The bias-free pre-RMSNorm baseline of Hyper-SET §5 (attention ``llama`` with ``rope: false``, MLP
``relu``): its formula, its parameter names, and that without RoPE bidirectional attention is
permutation-equivariant (with RoPE it is not)."""

import torch
import torch.nn.functional as F

from energyformer.blocks.baselines import LlamaAttention, ReluMLP
from energyformer.blocks.layer import BlockConfig
from energyformer.blocks.registry import SublayerSpec, build_attention, build_mlp
from energyformer.utils.config import load_config


def test_relu_mlp_is_x_plus_w2_relu_w1_rmsnorm_x_without_bias():
    torch.manual_seed(0)
    m = ReluMLP(8, 32)
    x = torch.randn(2, 5, 8)
    h = F.rms_norm(x, (8,), m.norm.weight, 1e-6)
    ref = x + F.relu(h @ m.fc.weight.t()) @ m.proj.weight.t()
    torch.testing.assert_close(m(x), ref)
    assert sorted(n for n, _ in m.named_parameters()) == ["fc.weight", "norm.weight", "proj.weight"]


def test_relu_kind_defaults_to_ratio_4():
    block = load_config(BlockConfig, {"attention": {"kind": "llama", "rope": False}, "mlp": "relu"})
    spec = SublayerSpec(dim=16, heads=4, causal=False, dropout=0.0, mlp_hidden=None)
    mlp = build_mlp(block.mlp, spec)
    assert mlp.fc.weight.shape == (64, 16)
    att = build_attention(block.attention, spec)
    assert isinstance(att, LlamaAttention) and not att.rope


def test_attention_without_rope_is_permutation_equivariant():
    torch.manual_seed(0)
    x = torch.randn(2, 7, 16)
    perm = torch.randperm(7)
    plain = LlamaAttention(16, 4, causal=False, rope=False)
    torch.testing.assert_close(plain(x)[:, perm], plain(x[:, perm]))
    rope = LlamaAttention(16, 4, causal=False)
    rope.load_state_dict(plain.state_dict())
    assert not torch.allclose(rope(x)[:, perm], rope(x[:, perm]), atol=1e-4)


def test_rope_tables_are_built_once_per_forward_and_give_the_same_outputs(op_counts):
    """Llama's cos/sin tables come from ctx.memo: a 2-layer forward builds them once, like a 1-layer one (before:
    arange, pow, cos, sin and the float64 casts ran again in every layer), and the outputs equal those of layers
    that build their own tables (no context); decoding at an offset gets the offset's table, not position 0's."""
    from energyformer.core.context import ForwardContext
    from energyformer.models.lm import CausalLM, ModelConfig

    torch.manual_seed(0)
    x = torch.randn(2, 6, 16)
    layers = [LlamaAttention(16, 4) for _ in range(2)]

    def run(ctx_for):
        ctx = ForwardContext(offset=3)
        y = x
        for layer in layers:
            y = layer(y, ctx_for(ctx))
        return y

    memo = run(lambda ctx: ctx)
    fresh = run(lambda ctx: ForwardContext(offset=ctx.offset))  # a new context per layer: no table shared
    assert torch.equal(memo, fresh)
    assert not torch.equal(memo, layers[1](layers[0](x)))  # offset 0 differs: the offset is part of the key

    def model(n_layers):
        torch.manual_seed(0)
        return CausalLM(ModelConfig(vocab_size=20, dim=16, n_layers=n_layers, heads=4, max_seq_len=16,
                                    positions="none", block=BlockConfig()))

    idx = torch.randint(0, 20, (1, 8))
    one, two = (op_counts(lambda m=model(n): m(idx))[1] for n in (1, 2))
    assert one["cos"] == one["sin"] == 1
    assert all(two[op] == one[op] for op in ("arange", "cos", "sin", "_to_copy", "reciprocal")), (one, two)


def test_gpt_dropout_is_off_in_eval_mode():
    """GPT attention's dropout (inside sdpa), its residual dropout and the GELU MLP's apply in training only: in
    eval mode two forwards are equal, for the sublayer and for a whole model (an outside probe's mutant that kept
    attention dropout on in eval survived the suite, whose fixtures all run with dropout 0)."""
    from energyformer.blocks.baselines import GPTAttention
    from energyformer.models.lm import CausalLM, ModelConfig

    torch.manual_seed(0)
    x = torch.randn(2, 5, 16)
    a = GPTAttention(16, 2, dropout=0.5)
    assert not torch.equal(a(x), a(x))  # training mode: dropout on (so the eval check below means something)
    a.eval()
    assert torch.equal(a(x), a(x))
    m = CausalLM(ModelConfig(vocab_size=20, dim=16, n_layers=2, heads=2, max_seq_len=16, positions="learned",
                             block=BlockConfig(attention="gpt", mlp="gelu", dropout=0.5))).eval()
    idx = torch.randint(0, 20, (2, 8))
    assert torch.equal(m(idx).logits, m(idx).logits)
