"""KV-cache contract of energy blocks: an energy that reads other tokens fills its cache slot, or decoding refuses.

Old behaviour: ``EnergyBlock`` passed the slot to ``prepare`` and never checked it. A user's attention energy
that took ``cache`` through ``**kw`` (as ``Energy.prepare``'s docstring allowed) trained and evaluated right, but
``generate`` (cached) let each new token attend only to itself: other tokens than the uncached model, no error.
"""

from typing import Literal

import pytest
import torch
from torch import Tensor, nn

from energyformer.blocks import ATTENTIONS, MLPS, AttentionConfig
from energyformer.core import EnergyBlock, ForwardContext, GradientDescent
from energyformer.core.attention import append_cache, visible
from energyformer.core.energy import Energy, is_token_local
from energyformer.core.sublayer import DescentConfig
from energyformer.models.lm import CausalLM, ModelConfig
from energyformer.utils.config import load_config
from energyformer.utils.validate import ConfigError


class LeakyAttn(Energy):
    """E_i = ½‖x_i‖² − logsumexp_{j ≤ i} x_iᵀ W h_j: reads every earlier token, and drops ``cache`` in ``**kw``."""

    def __init__(self, dim: int):
        super().__init__()
        self.W = nn.Parameter(torch.randn(dim, dim) / dim ** 0.5)

    def keys(self, context, mask, cache):
        return context[:, None], mask  # (B, 1, N, D): this call's tokens only

    def prepare(self, context, mask=None, **kw):
        k, key_mask = self.keys(context, mask, kw.get("cache"))
        return k, visible(context.shape[1], k.shape[2], True, key_mask, context.device)

    def energy(self, x, state):
        k, vis = state
        s = torch.einsum("bnd,de,bhme->bhnm", x, self.W.to(x.dtype), k)  # (B, 1, Nq, Nk)
        s = s.masked_fill(~vis, float("-inf")) if vis is not None else s
        return 0.5 * x.pow(2).sum(-1) - torch.logsumexp(s, -1)[:, 0]


class CachedAttn(LeakyAttn):
    """The same energy, appending its keys to the slot (Energy.prepare's contract)."""

    def keys(self, context, mask, cache):
        kv, key_mask = append_cache(cache, mask, k=context[:, None])
        return kv["k"], key_mask


class LocalPull(Energy):
    """E_i = ½‖x_i − W h_i‖²: token-local, declared, so it needs no cache even in an attention sublayer."""

    token_local = True

    def __init__(self, dim: int):
        super().__init__()
        self.W = nn.Linear(dim, dim, bias=False)

    def prepare(self, context, **kw):
        return self.W(context)

    def energy(self, x, target):
        return 0.5 * (x - target).pow(2).sum(-1)


VARIANTS = {"leaky": LeakyAttn, "cached": CachedAttn, "local": LocalPull}


class UserAttnConfig(AttentionConfig, DescentConfig):
    """A user's attention kind (this file's tests only)."""

    kind: Literal["user_cache_attn"] = "user_cache_attn"
    variant: Literal["leaky", "cached", "local"] = "leaky"

    @classmethod
    def examples(cls):
        return [{}]


@pytest.fixture
def user_kind():
    ATTENTIONS.register("user_cache_attn", UserAttnConfig)(
        lambda cfg, spec: EnergyBlock.from_config(VARIANTS[cfg.variant](spec.dim), cfg, spec.dim, spec.heads))
    yield
    del ATTENTIONS.entries["user_cache_attn"]


def _lm(attention, mlp="swiglu", seed=0) -> CausalLM:
    cfg = load_config(ModelConfig, {"vocab_size": 13, "dim": 16, "n_layers": 2, "heads": 4, "max_seq_len": 16,
                                    "block": {"attention": attention, "mlp": mlp}})
    torch.manual_seed(seed)
    m = CausalLM(cfg).double().eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # every parameter nonzero (zero-initialised gates, step-size nets act)
        for p in m.parameters():
            p.add_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.3)
    return m


IDX = torch.tensor([[1, 5, 2, 7, 3, 9, 4]])


def _cached_logits(m: CausalLM, idx: Tensor = IDX) -> tuple[Tensor, dict]:
    cache, out, pos = {}, [], 0
    for n in (4, 1, 2):  # a prefill, then decoding steps
        out.append(m(idx[:, pos:pos + n], cache=cache, offset=pos).logits)
        pos += n
    return torch.cat(out, 1), cache



def test_attention_energy_that_drops_the_cache_is_refused_by_generate(user_kind):
    """Old code: generate decoded with each new token seeing only itself (tokens != uncached), no error."""
    m = _lm({"kind": "user_cache_attn", "variant": "leaky", "steps": 2})
    m(IDX)  # training and eval (no cache) are unaffected
    assert m.generate(IDX, 3, greedy=True, use_cache=False).shape == (1, 10)
    with pytest.raises(ConfigError) as err:
        m.generate(IDX, 3, greedy=True)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("layers.0.attn: the LeakyAttn energy left its KV-cache slot empty")
    assert "append the keys/values it reads to the cache slot in prepare" in msg and "token_local = True" in msg


def test_bare_block_with_a_cache_and_an_undeclared_energy_is_refused():
    """A block outside any model (no sublayer part) is held to the contract too; old code returned x unchanged
    in what it read from other tokens."""
    torch.manual_seed(0)
    blk = EnergyBlock(LeakyAttn(8), GradientDescent(step_size=0.5), steps=2)
    x = torch.randn(1, 3, 8)
    blk(x)  # no cache: fine
    with pytest.raises(ConfigError, match=r"^EnergyBlock@\w+: the LeakyAttn energy left its KV-cache slot empty"):
        blk(x, ForwardContext(cache={}))


@pytest.mark.parametrize("variant", ["cached", "local"])
def test_a_correct_user_energy_decodes_as_the_uncached_model(user_kind, variant):
    """An energy that fills its slot, or one declared token-local, decodes with the cache exactly as without."""
    m = _lm({"kind": "user_cache_attn", "variant": variant, "steps": 2})
    inc, cache = _cached_logits(m)
    torch.testing.assert_close(inc, m(IDX).logits, rtol=1e-10, atol=1e-10)
    assert bool(cache["layers.0.attn"]) is (variant == "cached")
    assert torch.equal(m.generate(IDX, 4, greedy=True), m.generate(IDX, 4, greedy=True, use_cache=False))


def test_declaring_an_energy_cross_token_holds_it_to_the_cache_even_as_an_mlp():
    """token_local = False wins over the MLP sublayer's position-wise default."""
    class Cross(LeakyAttn):
        token_local = False

    blk = EnergyBlock(Cross(8), GradientDescent(step_size=0.5), steps=1)
    blk.part = "mlp"
    assert not is_token_local(blk.energy, "mlp") and is_token_local(LeakyAttn(8), "mlp")
    with pytest.raises(ConfigError, match="Cross energy left its KV-cache slot empty"):
        blk(torch.randn(1, 2, 8), ForwardContext(cache={}))


def _causal(reg, name) -> bool:
    return getattr(reg.get(name).config, "supports_causal", True)


KINDS = ([("attention", k) for k in ATTENTIONS.names() if _causal(ATTENTIONS, k)]
         + [("mlp", k) for k in MLPS.names() if _causal(MLPS, k)])


@pytest.mark.parametrize("part,kind", KINDS, ids=[f"{p}-{k}" for p, k in KINDS])
def test_every_registered_kind_meets_the_contract_and_decodes_as_uncached(part, kind):
    """Every causal attention and MLP kind of the package: its energy blocks are token-local exactly in the MLP
    sublayer and fill their slot otherwise, and cached decoding equals the full forward pass (is_token_local is
    new: this failed to import on the old code, which never checked the slot)."""
    m = _lm(kind if part == "attention" else "llama", kind if part == "mlp" else "swiglu")
    inc, cache = _cached_logits(m)
    torch.testing.assert_close(inc, m(IDX).logits, rtol=1e-9, atol=1e-9)
    blocks = [(n, b) for n, b in m.named_modules() if isinstance(b, EnergyBlock)]
    for name, blk in blocks:
        local = is_token_local(blk.energy, getattr(blk, "part", None))
        assert local is (blk.part == "mlp"), name
        assert local or cache[blk.qualname], f"{name}: slot left empty"
