"""The image wrapper (model kind 'vision'): shapes, tokens, pooling, positions, depth order, test-time
iterations, traces per (block, iteration), initialisation rules, config errors."""

import pytest
import torch

from energyformer.data.images import patchify
from energyformer.models import MODELS
from energyformer.models.vision import VisionConfig, VisionTransformer
from energyformer.utils.validate import ConfigError


def _cfg(**kw):
    base = dict(image_size=8, channels=1, n_classes=10, patch_size=2, dim=16, heads=2, iterations=2)
    return VisionConfig(**{**base, **kw})


def _images(b=3, c=1, s=8, seed=0):
    return torch.randn(b, c, s, s, generator=torch.Generator().manual_seed(seed))


def test_registered_and_shapes():
    assert MODELS.get("vision").config is VisionConfig
    m = VisionTransformer(_cfg())
    out = m(_images())
    assert out.logits.shape == (3, 10)
    assert m.tokens(_images()).shape == (3, 17, 16)  # 16 patches + [CLS]
    m2 = VisionTransformer(_cfg(pool="mean", positions="learned", channels=3))
    assert m2.tokens(_images(c=3)).shape == (3, 16, 16)
    assert m2(_images(c=3)).logits.shape == (3, 10)


def test_tokens_are_patches_then_cls_and_positions():
    torch.manual_seed(0)
    m = VisionTransformer(_cfg(positions="none"))
    x = _images()
    tok = m.tokens(x)
    torch.testing.assert_close(tok[:, 1:], m.embed.proj(patchify(x, 2)))
    torch.testing.assert_close(tok[:, 0], m.cls_token[0].expand(3, -1))
    ms = VisionTransformer(_cfg(positions="sinusoidal"))
    ms.load_state_dict(m.state_dict())
    diff = ms.tokens(x) - tok
    torch.testing.assert_close(diff[0], diff[1])  # the same positions for every image
    from energyformer.models.wrapper import SinusoidalPositions

    torch.testing.assert_close(diff[0], SinusoidalPositions(17, 16)())  # [CLS] at position 0


def test_init_rules():
    """'torch': PyTorch's Linear defaults and a N(0, 1) [CLS] (the reference image code); 'normal':
    N(0, init_std^2) with a LeCun-normal patch projection (unit-scale patch tokens)."""
    torch.manual_seed(0)
    m = VisionTransformer(_cfg(dim=64, heads=4, image_size=28, patch_size=7))
    w = m.layers[0].mlp.fc.weight  # Linear(64, 256): U(-1/8, 1/8)
    assert float(w.abs().max()) <= 1 / 8 and float(w.std()) > 0.06
    assert 0.8 < float(m.cls_token.std()) < 1.2
    n = VisionTransformer(_cfg(dim=64, heads=4, image_size=28, patch_size=7, init="normal"))
    assert abs(float(n.layers[0].mlp.fc.weight.std()) - 0.02) < 0.003
    assert float(n.cls_token.std()) < 0.05
    with torch.no_grad():
        tok = n.embed.proj(patchify(torch.randn(64, 1, 28, 28), 7))
    assert 0.6 < float(tok.std()) < 1.5  # comparable to the sinusoidal positions


def test_iterations_override_and_traces_per_iteration():
    torch.manual_seed(0)
    from energyformer.blocks.layer import BlockConfig

    m = VisionTransformer(_cfg(block=BlockConfig(attention={"kind": "et", "step_size": 0.5}, mlp="identity")))
    x = _images()
    out = m(x, trace=True)
    assert sorted(out.traces) == [("layers.0.attn", 0), ("layers.0.attn", 1)]
    out4 = m(x, trace=True, iterations=4)
    assert len(out4.traces) == 4
    assert not torch.allclose(out.logits, out4.logits)


def test_consecutive_order_runs_each_layer_L_times_in_turn():
    m = VisionTransformer(_cfg(n_layers=2, iterations=3))
    assert m.layers.order == "consecutive"
    calls = []
    for i, layer in enumerate(m.layers):
        layer.register_forward_hook(lambda mod, a, o, i=i: calls.append(i))
    out = m(_images(), hiddens=True)
    assert calls == [0, 0, 0, 1, 1, 1]
    assert list(out.hiddens) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]  # execution order
    mc = VisionTransformer(_cfg(n_layers=2, iterations=3, stack_order="cycle"))
    calls.clear()
    for i, layer in enumerate(mc.layers):
        layer.register_forward_hook(lambda mod, a, o, i=i: calls.append(i))
    mc(_images())
    assert calls == [0, 1, 0, 1, 0, 1]


def test_one_layer_orders_agree():
    torch.manual_seed(0)
    a = VisionTransformer(_cfg(stack_order="consecutive"))
    b = VisionTransformer(_cfg(stack_order="cycle"))
    b.load_state_dict(a.state_dict())
    x = _images()
    torch.testing.assert_close(a(x).logits, b(x).logits)


def test_energy_parameters_keep_their_own_init():
    from energyformer.blocks.layer import BlockConfig

    m = VisionTransformer(_cfg(dim=64, heads=4, block=BlockConfig(attention="et", mlp="identity")))
    wq = m.layers[0].attn.energy.attention.wq
    assert 0.0015 < float(wq.std()) < 0.0025  # ET's N(0, 0.002^2), not the model's 0.02


def test_config_errors_name_key_value_and_allowed():
    with pytest.raises(ConfigError, match=r"patch_size = 3: must divide image_size = 8 \(allowed: 1, 2, 4, 8\)"):
        _cfg(patch_size=3)
    with pytest.raises(ConfigError, match="heads = 3"):
        _cfg(heads=3)
    with pytest.raises(ConfigError, match="pool"):
        _cfg(pool="max")
    with pytest.raises(ConfigError, match="image_size is not set"):
        VisionTransformer(VisionConfig())
    with pytest.raises(ValueError, match=r"this model takes \(B, 1, 8, 8\)"):
        VisionTransformer(_cfg())(_images(s=10))


def test_raw_integer_pixels_are_refused():
    """uint8 pixels 0..255 would be cast to floats 255 times the normalised scale: a finite wrong answer."""
    model = VisionTransformer(_cfg())
    with pytest.raises(ValueError, match=r"images of dtype torch.uint8: this model takes floating-point images"):
        model((_images() * 50).clamp(0, 255).to(torch.uint8))


def test_call_time_steps_are_checked_as_the_token_models_do():
    """Probe AS: a vision model with a block that has no descent steps took ``steps=-1`` (and any value) silently."""
    m = VisionTransformer(_cfg())
    for steps in (-1, 2):
        with pytest.raises(ConfigError, match=f"steps = {steps}: a 'vision' model has no energy descent steps"):
            m(_images(), steps=steps)
    cem = VisionTransformer(_cfg(block={"attention": {"kind": "cem", "steps": 2}}))
    with pytest.raises(ConfigError, match="steps = -1: a 'vision' model takes steps as an integer >= "):
        cem(_images(), steps=-1)
    assert cem(_images(), steps=3).logits.shape == (3, 10)
