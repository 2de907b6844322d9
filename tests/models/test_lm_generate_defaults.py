"""CausalLM generation and loss details no test in tests/models pinned (mutation probe AI)."""

import pytest
import torch
import torch.nn.functional as F

from energyformer.models.lm import CausalLM, ModelConfig, kv_cache_bytes


def _lm(**kw):
    torch.manual_seed(0)
    m = CausalLM(ModelConfig(vocab_size=30, dim=16, n_layers=1, heads=2, max_seq_len=16, **kw)).double().eval()
    with torch.no_grad():  # sharper than the initialisation, so a changed computation changes the argmax
        for p in m.parameters():
            p.mul_(4.0)
    return m


@pytest.mark.parametrize("use_cache", [True, False])
def test_temperature_zero_is_greedy(use_cache):
    # Pins ``greedy or temperature == 0`` (docstring: 0 = greedy): without it temperature 0 divides by 0 and
    # the softmax is NaN.
    m, idx = _lm(), torch.randint(0, 30, (2, 4))
    assert torch.equal(m.generate(idx, 4, temperature=0.0, use_cache=use_cache),
                       m.generate(idx, 4, greedy=True, use_cache=use_cache))


def test_generation_runs_the_models_iterations_by_default():
    # Pins ``iterations = cfg.iterations`` in stream: decoding with another number of passes than the forward
    # (1 instead of cfg.iterations = 3) survived, as both cached and uncached paths used the same wrong count.
    m, idx = _lm(iterations=3), torch.randint(0, 30, (2, 6))
    nxt = m(idx).logits[:, -1].argmax(-1, keepdim=True)
    assert torch.equal(m.generate(idx, 1, greedy=True)[:, -1:], nxt)


def test_loss_ignores_minus_100_targets_and_counts_token_0():
    # Pins ignore_index=-100 (the padding label the tasks use): token id 0 is a real target.
    m = _lm()
    idx = torch.randint(0, 30, (2, 5))
    tgt = torch.randint(1, 30, (2, 5))
    tgt[0, 1], tgt[1, 3], tgt[1, 0] = -100, -100, 0
    logits = m(idx).logits
    keep = tgt != -100
    want = F.cross_entropy(logits[keep], tgt[keep])
    torch.testing.assert_close(m(idx, targets=tgt).loss, want)


def test_kv_cache_bytes_counts_bytes_not_elements():
    # Pins element_size(): the float64 cache of one Llama layer over 5 tokens holds K and V of (1, 2, 5, 8).
    m, cache = _lm(), {}
    m(torch.randint(0, 30, (1, 5)), cache=cache)
    assert kv_cache_bytes(cache) == 2 * (1 * 2 * 5 * 8) * 8


@pytest.mark.parametrize("how", [dict(greedy=True), dict(temperature=0.8, top_k=5), dict(greedy=True, use_cache=False)])
@pytest.mark.parametrize("poison", ["nan", "posinf", "all_neginf"])
def test_logits_no_token_can_be_drawn_from_raise_naming_the_step_and_row(how, poison):
    """Probe AQ: a NaN weight made greedy decoding return the NaN's index and then token 0 at every step (argmax of
    all-NaN rows) with no error, and sampling failed inside torch.multinomial. Now one line naming the new token and
    the batch row; a −inf logit alone (a token ruled out) still decodes."""
    from energyformer.errors import NonFiniteOutput, UserError

    m, idx = _lm(), torch.randint(0, 30, (2, 4), generator=torch.Generator().manual_seed(1))
    real = m.head.forward

    def head(x):  # row 1's logits at the third new token (the prompt, then two drawn tokens)
        y = real(x)
        if x.shape[1] == 1 and len(seen) == 2 or x.shape[1] == 6:
            y = y.clone()
            if poison == "all_neginf":
                y[1, -1] = float("-inf")
            else:
                y[1, -1, 3] = float("nan") if poison == "nan" else float("inf")
        seen.append(x.shape[1])
        return y

    seen: list[int] = []
    m.head.forward = head
    with pytest.raises(NonFiniteOutput, match=r"new token 2 are not finite .* batch row\(s\) \[1\]") as err:
        m.generate(idx, 5, **how)
    assert isinstance(err.value, UserError) and "\n" not in str(err.value)
    m.head.forward = lambda x: real(x).index_fill(-1, torch.tensor([3, 7]), float("-inf"))
    out = m.generate(idx, 5, **how)
    assert not ((out[:, 4:] == 3) | (out[:, 4:] == 7)).any()


def test_stream_checks_iterations_before_the_first_token():
    """Probe AQ: ``iterations`` was checked only by the first forward: ``stream(..., iterations=0)`` returned an
    iterator, and ``generate(idx, 0, iterations=0)`` the prompt, where ``steps=0`` raised at once."""
    from energyformer.utils.validate import ConfigError

    m, idx = _lm(), torch.randint(0, 30, (2, 4))
    for call in (lambda: m.stream(idx, 3, iterations=0), lambda: m.generate(idx, 0, iterations=0),
                 lambda: m.stream(idx, 3, iterations=1.5)):
        with pytest.raises(ConfigError, match="iterations"):
            call()


@pytest.mark.parametrize("bad", ["transposed", "flat", "int32", "float"])
def test_targets_of_another_shape_or_dtype_are_one_line_errors(bad):
    """Probe AS: targets with the inputs' number of elements in another shape ((N, B)) were flattened against the
    logits and gave a finite loss of the wrong pairs; other shapes and dtypes failed inside F.cross_entropy."""
    from energyformer.models import MODELS
    from energyformer.models.equilibrium import EquilibriumConfig

    idx = torch.randint(0, 30, (2, 5))
    t = {"transposed": idx.T.contiguous(), "flat": idx.flatten(), "int32": idx.int(), "float": idx.float()}[bad]
    eqt = MODELS.build(EquilibriumConfig(dim=16, n_layers=1, heads=2, max_seq_len=16), vocab_size=30)
    for m in (_lm(), eqt):
        with pytest.raises(ValueError, match=r"targets of shape .* expected token ids \(2, 5\) \(the inputs' shape\)"):
            m(idx, t)
        assert torch.isfinite(m(idx, idx).loss)
