"""Train and test Potts samples come from different Gibbs chains.

``make_potts_dataset`` derives one chain seed per split from ``sample_seed``. Deriving the same seed for
both would make the test set a copy (or a prefix) of the training set: the Bayes loss and every test
metric would then measure memorisation, with no error raised anywhere.
"""

from __future__ import annotations

import torch

from energyformer.data import potts_dataset as PD


def test_train_and_test_use_different_chains():
    """Equal sizes and one sample seed: different chain seeds, and the two splits are not the same samples."""
    cfg = PD.PottsConfig(L=6, C=4, n_train=16, n_test=16, burn_in=5, samples_per_chain=4, sample_seed=3)
    ds = PD.make_potts_dataset(cfg)
    seeds = ds.meta["chain_seeds"]
    assert seeds["train"] != seeds["test"]
    assert not torch.equal(ds.train, ds.test)
