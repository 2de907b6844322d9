"""The masked_vision model kind (Hyper-SET §5.3 / App. D.4, MaskGIT): shapes, the learned mask token,
config errors, Transformer and Hyper-SET one switch apart, and MaskGIT's iterative decoding (fills
every masked code on the cosine schedule, never touches the others, deterministic given its seed)."""

import math

import pytest
import torch

from energyformer.models import MODELS, ModelOutput
from energyformer.models.masked_vision import (
    MaskedCodeTransformer, MaskedVisionConfig, cosine_schedule, maskgit_decode,
)
from energyformer.utils.config import load_config
from energyformer.utils.validate import ConfigError

K, N = 12, 9
HYPERSET = {"attention": {"kind": "hyperset", "step_size": {"kind": "network", "embed_dim": 16,
                                                             "condition": "x0", "groups": 2}},
            "mlp": {"kind": "hyperset", "hidden": 16, "step_size": "shared"}}


def model(block=None, **kw) -> MaskedCodeTransformer:
    torch.manual_seed(0)
    cfg = MaskedVisionConfig(n_codes=K, num_tokens=N, dim=16, heads=2, iterations=2,
                             **({"block": block} if block else {}), **kw)
    return MaskedCodeTransformer(cfg)


def test_shapes_and_the_mask_token_hides_the_code():
    m = model().eval()
    codes = torch.randint(0, K, (3, N))
    mask = torch.zeros(3, N, dtype=torch.bool)
    mask[:, 2] = True
    out = m(codes, mask)
    assert isinstance(out, ModelOutput) and out.logits.shape == (3, N, K)
    other = codes.clone()
    other[:, 2] = (codes[:, 2] + 1) % K  # a different code under the mask: the model cannot see it
    assert torch.equal(m(other, mask).logits, out.logits)
    assert not torch.equal(m(other).logits, m(codes).logits)  # unmasked, it can
    assert m.embed.num_embeddings == K + 1  # the paper's vocabulary 1025 = 1024 codes + mask


def test_transformer_and_hyperset_are_one_switch_apart():
    t, h = model(), model(block=HYPERSET)
    assert type(t.layers) is type(h.layers) and len(t.layers) == len(h.layers) == 1
    codes = torch.randint(0, K, (2, N))
    mask = torch.rand(2, N) < 0.5
    assert h(codes, mask).logits.shape == t(codes, mask).logits.shape == (2, N, K)
    assert sum(p.numel() for p in h.parameters()) != sum(p.numel() for p in t.parameters())
    assert MODELS.get("masked_vision").config is MaskedVisionConfig


def test_config_errors_name_key_value_and_allowed():
    with pytest.raises(ConfigError, match="heads = 3: must divide dim = 16"):
        load_config(MaskedVisionConfig, {"dim": 16, "heads": 3})
    with pytest.raises(ConfigError, match="patch_sise"):
        load_config(MaskedVisionConfig, {"patch_sise": 4})
    with pytest.raises(ConfigError, match="positions"):
        load_config(MaskedVisionConfig, {"positions": "rotary"})
    with pytest.raises(ConfigError, match="model.n_codes is not set"):
        MaskedCodeTransformer(MaskedVisionConfig())
    with pytest.raises(ValueError, match=r"codes of shape \(2, 4\)"):
        model()(torch.zeros(2, 4, dtype=torch.long))


@pytest.mark.parametrize("codes, message", [
    (torch.full((2, N), K + 1), r"codes outside \[0, 12\] .*max 13"),      # past the mask token
    (torch.full((2, N), -1), r"codes outside \[0, 12\] .*min -1"),
    (torch.zeros(2, N), r"codes of dtype torch.float32: .*integer codebook indices"),
    (torch.zeros(2, N, dtype=torch.uint8), r"codes of dtype torch.uint8: .*integer codebook indices \(int64 or int32"),
])
def test_bad_codes_are_named_with_the_allowed_range(codes, message):
    """Codes out of range or of a float dtype used to end in torch's "index out of range in self" /
    "Expected tensor for argument #1 'indices'"; the mask token's id K itself is allowed (already masked)."""
    with pytest.raises(ValueError, match=message):
        model()(codes)
    assert model()(torch.full((2, N), K)).logits.shape == (2, N, K)


def test_cosine_schedule():
    k0 = torch.tensor([0, 1, 20, 49])
    counts = [cosine_schedule(k0, t, 8) for t in range(9)]
    assert torch.equal(counts[0], k0) and torch.equal(counts[8], torch.zeros(4, dtype=torch.long))
    for a, b in zip(counts, counts[1:]):
        assert bool((b <= a).all())
    assert int(counts[4][2]) == math.floor(20 * math.cos(math.pi / 4))



def test_cosine_schedule_makes_no_float64_on_a_device_without_it():
    """MaskGIT decoding's schedule on a (fake) MPS tensor: no float64 there (a TypeError on MPS), the same counts"""
    from torch._subclasses.fake_tensor import FakeTensorMode

    seen = []
    with FakeTensorMode(), _DtypeSpy(seen):
        cosine_schedule(torch.zeros(4, dtype=torch.long, device="mps"), 3, 8)
    assert seen and torch.float64 not in seen, seen
    k0 = torch.arange(0, 5000, 7)
    assert torch.equal(cosine_schedule(k0, 3, 8), torch.floor(k0 * math.cos(0.5 * math.pi * 3 / 8)).long())


class _DtypeSpy(torch.overrides.TorchFunctionMode):
    """the dtypes of every tensor a torch function returns inside it"""

    def __init__(self, seen: list):
        super().__init__()
        self.seen = seen

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if isinstance(out, torch.Tensor):
            self.seen.append(out.dtype)
        return out

class Spy(torch.nn.Module):
    """Fixed logits (argmax = (position + 3) mod K); records the mask of every call."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(()))
        self.masks = []

    def forward(self, codes, mask, **_):
        self.masks.append(mask.clone())
        B, n = codes.shape
        logits = torch.full((B, n, K), -5.0)
        logits[:, torch.arange(n), (torch.arange(n) + 3) % K] = 5.0
        return ModelOutput(logits=logits + self.w)


@pytest.mark.parametrize("temperature", [0.0, 1e-40, 1.0])
def test_decoding_fills_every_masked_code_on_the_cosine_schedule(temperature):
    codes = torch.randint(0, K, (4, N))
    mask = torch.zeros(4, N, dtype=torch.bool)
    mask[0, :5] = mask[1, 3:] = mask[2, ::2] = True  # row 3: nothing masked
    spy = Spy()
    out = maskgit_decode(spy, codes, mask, steps=4, temperature=temperature,
                         generator=torch.Generator().manual_seed(0))
    assert torch.equal(out[~mask], codes[~mask])                 # unmasked codes never change
    assert ((out >= 0) & (out < K)).all()
    if temperature < 1e-30:                                      # argmax: exactly the model's codes
        want = ((torch.arange(N) + 3) % K).expand(4, N)
        assert torch.equal(out[mask], want[mask])
    k0 = mask.sum(1)
    assert len(spy.masks) == 4 and torch.equal(spy.masks[0], mask)
    for t, m in enumerate(spy.masks[1:], start=1):              # masks only shrink, on the schedule
        assert bool((m <= spy.masks[t - 1]).all())
        want = torch.minimum(cosine_schedule(k0, t, 4), (spy.masks[t - 1].sum(1) - 1).clamp_min(0))
        assert torch.equal(m.sum(1), want)


def test_decoding_with_a_real_model_is_deterministic_given_its_seed():
    m = model(block=HYPERSET).eval()
    codes = torch.randint(0, K, (5, N))
    mask = torch.rand(5, N) < 0.4
    a = maskgit_decode(m, codes, mask, steps=3, generator=torch.Generator().manual_seed(1))
    b = maskgit_decode(m, codes, mask, steps=3, generator=torch.Generator().manual_seed(1))
    assert torch.equal(a, b) and torch.equal(a[~mask], codes[~mask])
    with pytest.raises(ValueError, match="temperature = -1"):
        maskgit_decode(m, codes, mask, temperature=-1)


@pytest.mark.parametrize("name, value", [("temperature", float("nan")), ("temperature", -1.0),
                                         ("randomize_temperature", float("inf"))])
def test_decoding_refuses_a_temperature_that_is_not_a_finite_number_at_least_0(name, value):
    codes, mask = torch.zeros(1, N, dtype=torch.long), torch.ones(1, N, dtype=torch.bool)
    with pytest.raises(ValueError, match=f"^{name} = {value!r}: must be a finite number >= 0$"):
        maskgit_decode(Spy(), codes, mask, **{name: value})
