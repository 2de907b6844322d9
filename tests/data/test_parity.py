"""Tests for energyformer.data.parity: cumulative XOR targets, seeded generation, the fixed test sets
(EqT, specs/reconstructed.md §3) and exactly resumable batching."""

from __future__ import annotations

import hashlib
from functools import reduce
from operator import xor

import pytest
import torch

from energyformer.data import parity as Q
from energyformer.errors import ConfigError, DataError

#: Fingerprints of the fixed 4,096-sequence test sets; a change here changes every reported number.
FINGERPRINTS = {8: "8d4710476330f9dd", 16: "0fbd9e0bbb6f55a7", 32: "5b667ec5dc51beb2",
                48: "a71264d5daccea04", 64: "e2e8ae894733c7dc", 96: "6479842396519ee6",
                128: "292520f56ed7ec72", 192: "01a5e0a212d4fafc", 256: "20d1bccd6f946424"}


def test_targets_are_cumulative_xor():
    bits, targets = Q.make_parity(200, 37, seed=0)
    for b, y in zip(bits.tolist(), targets.tolist()):
        assert y == [reduce(xor, b[:t + 1]) for t in range(37)]
    assert Q.cumulative_parity(torch.tensor([1, 0, 1, 1, 0, 0, 1])).tolist() == [1, 1, 0, 1, 1, 1, 0]
    as_bool = Q.cumulative_parity(torch.tensor([[True, True, False, True]]))
    assert as_bool.dtype == torch.bool and as_bool.tolist() == [[True, False, False, True]]


def test_bad_bits_rejected():
    with pytest.raises(DataError, match="must be 0 or 1; found values in \\[0, 2\\]"):
        Q.cumulative_parity(torch.tensor([0, 2, 1]))
    with pytest.raises(DataError, match="integers or bool; got torch.float32"):
        Q.cumulative_parity(torch.tensor([0.0, 1.0]))
    with pytest.raises(ConfigError, match="parity length = 0"):
        Q.make_parity(4, 0)


def test_seeds_reproducible():
    a, ya = Q.make_parity(64, 32, seed=5)
    b, yb = Q.make_parity(64, 32, seed=5)
    assert torch.equal(a, b) and torch.equal(ya, yb)
    assert a.shape == (64, 32) and a.dtype == torch.long
    assert not torch.equal(a, Q.make_parity(64, 32, seed=6)[0])
    torch.manual_seed(123)  # the global RNG plays no part
    assert torch.equal(Q.make_parity(64, 32, seed=5)[0], a)
    big, _ = Q.make_parity(4096, 64, seed=0)
    assert abs(float(big.float().mean()) - 0.5) < 0.01


def test_test_sets_fixed():
    sets = Q.parity_test_sets()
    assert sorted(sets) == list(Q.PARITY_LENGTHS) == [8, 16, 32, 48, 64, 96, 128, 192, 256]
    for length, (bits, targets) in sets.items():
        assert bits.shape == targets.shape == (Q.PARITY_TEST_SIZE, length) == (4096, length)
        assert torch.equal(targets, Q.cumulative_parity(bits))
        assert Q.set_fingerprint(bits) == FINGERPRINTS[length], length
    # the documented rule, recomputed independently: first `length` bits of sha256(salt:L:k:0)
    digest = hashlib.sha256(f"{Q.PARITY_TEST_SALT}:64:17:0".encode()).digest()
    expect = [int(c) for c in "".join(f"{byte:08b}" for byte in digest)[:64]]
    assert sets[64][0][17].tolist() == expect
    # fewer sequences are a prefix; longer-than-256 lengths use more digest blocks
    assert torch.equal(Q.parity_test_set(32, 10)[0], sets[32][0][:10])
    long_bits, _ = Q.parity_test_set(300, 3)
    assert long_bits.shape == (3, 300)
    # the test set is not what a training seed draws
    assert not torch.equal(Q.make_parity(4096, 64, seed=0)[0], sets[64][0])


def test_batcher_resumes_exactly():
    ref = Q.ParityBatcher(48, 16, seed=3)
    batches = [ref.next_batch() for _ in range(6)]
    assert all(torch.equal(y, Q.cumulative_parity(b)) for b, y in batches)
    assert not torch.equal(batches[0][0], batches[1][0])
    resumed = Q.ParityBatcher(48, 16)
    resumed.load_state_dict({**ref.state_dict(), "step": 2})
    for k in range(2, 6):
        b, y = resumed.next_batch()
        assert torch.equal(b, batches[k][0]) and torch.equal(y, batches[k][1])
    assert torch.equal(ref.batch(4)[0], batches[4][0])  # random access
    with pytest.raises(DataError, match="length = 48 does not match this batcher's length = 64"):
        Q.ParityBatcher(64, 16).load_state_dict(ref.state_dict())


def test_fixed_training_set_batcher_and_config():
    cfg = Q.ParityConfig(length=16, n_train=100, n_test=50)
    a = cfg.batcher(32, seed=1)
    ref = [a.next_batch() for _ in range(7)]  # 3 batches per epoch: crosses two epochs
    b = cfg.batcher(32, seed=1)
    b.load_state_dict({**a.state_dict(), "step": 4})
    for k in range(4, 7):
        bits, targets = b.next_batch()
        assert torch.equal(bits, ref[k][0]) and torch.equal(targets, Q.cumulative_parity(bits))
    train_bits, _ = Q.make_parity(100, 16, seed=0)
    assert all(any(torch.equal(row, t) for t in train_bits) for row in ref[0][0])
    bits, targets = cfg.test_set()
    assert torch.equal(bits, Q.parity_test_set(16)[0][:50])
    assert isinstance(Q.ParityConfig(length=8).batcher(4), Q.ParityBatcher)
    with pytest.raises(ConfigError, match="unknown key 'lenght'"):
        Q.ParityConfig(lenght=8)
