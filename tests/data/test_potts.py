"""Tests for energyformer.data.potts: parameters, exact conditionals, Gibbs sampler vs enumeration,
Bayes-optimal loss, storage and input validation (specs/reconstructed.md §2.2)."""

from __future__ import annotations

import itertools
import json
import math

import pytest
import torch

from energyformer.data import potts as P
from energyformer.data import potts_dataset as PD
from energyformer.errors import ConfigError, DataError


@pytest.fixture(scope="module")
def tiny():
    """L = 4 sites, C = 3 colours (81 states), with fields and beta != 1 so every term matters."""
    return P.random_potts(4, 3, beta=1.5, seed=1, field_std=0.5)


def _null_tv(p: torch.Tensor, n: int, reps: int = 300, seed: int = 0) -> torch.Tensor:
    """TV distances between ``p`` and the empirical law of ``n`` exact i.i.d. draws (the noise)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(reps):
        q = torch.bincount(torch.multinomial(p, n, replacement=True, generator=g),
                           minlength=p.numel()).double() / n
        out.append(0.5 * float((q - p).abs().sum()))
    return torch.tensor(out)


# ----------------------------------------------------------------------------------- parameters
def test_random_parameters():
    m = P.random_potts(seed=3)  # the recommended defaults
    assert (m.L, m.C, m.beta) == (20, 10, 1.0)
    assert torch.equal(m.J, m.J.T) and torch.equal(m.U, m.U.T)
    assert float(m.J.diagonal().abs().max()) == 0 and float(m.h.abs().max()) == 0
    assert m.J.dtype == torch.float64
    assert torch.equal(P.random_potts(seed=3).J, m.J) and not torch.equal(P.random_potts(seed=4).J, m.J)
    big = P.random_potts(200, 40, seed=0)
    off = big.J[torch.triu(torch.ones(200, 200, dtype=torch.bool), 1)]
    assert abs(float(off.var()) * 200 - 1) < 0.05  # entries N(0, 1/L)
    assert abs(float(big.U.var()) - 1) < 0.15  # entries N(0, 1)
    sparse = P.random_potts(200, 3, seed=0, sparsity=0.7)
    zero = float((sparse.J[torch.triu(torch.ones(200, 200, dtype=torch.bool), 1)] == 0).double().mean())
    assert abs(zero - 0.7) < 0.02 and torch.equal(sparse.J, sparse.J.T)


def test_energy_matches_definition(tiny):
    s = tiny.all_states()[[0, 5, 40, 80]]
    for row, H in zip(s.tolist(), tiny.energy(s).tolist()):
        ref = -sum(float(tiny.J[i, j] * tiny.U[row[i], row[j]]) for i in range(4) for j in range(i + 1, 4))
        ref -= sum(float(tiny.h[i, row[i]]) for i in range(4))
        assert H == pytest.approx(ref, abs=1e-12)


def test_all_states_lexicographic(tiny):
    s = tiny.all_states()
    assert s.shape == (81, 4)
    assert s.tolist() == [list(t) for t in itertools.product(range(3), repeat=4)]


# ------------------------------------------------------------------------------- conditionals
def test_conditional_equals_enumeration(tiny):
    states, logp = tiny.enumerate()
    assert float(logp.exp().sum()) == pytest.approx(1.0, abs=1e-12)
    joint = logp.exp().reshape((3,) * 4)  # P[s_0, s_1, s_2, s_3]
    cond = tiny.conditional_log_probs(states).exp()  # (81, 4, 3)
    for n, s in enumerate(states.tolist()):
        for i in range(4):
            idx = list(s)
            idx[i] = slice(None)
            column = joint[tuple(idx)]  # P(s_i = a, s_-i) for a = 0..C-1
            torch.testing.assert_close(cond[n, i], column / column.sum(), atol=1e-13, rtol=0)


def test_conditional_formula_and_nll(tiny):
    s = tiny.all_states()[::7]
    logits = tiny.conditional_logits(s)
    for n, row in enumerate(s.tolist()):
        for i in range(4):
            for a in range(3):
                ref = tiny.beta * (sum(float(tiny.J[i, j] * tiny.U[a, row[j]]) for j in range(4) if j != i)
                                   + float(tiny.h[i, a]))
                assert float(logits[n, i, a]) == pytest.approx(ref, abs=1e-12)
    nll = tiny.masked_token_nll(s)
    torch.testing.assert_close(nll, -torch.log_softmax(logits, -1).gather(2, s[..., None])[..., 0])


# ------------------------------------------------------------------------------------ sampler
def test_gibbs_matches_enumeration(tiny):
    """One sample per independent chain: the empirical law's TV distance to the exact joint must lie
    within the spread of TV distances of exact i.i.d. samples of the same size."""
    _, logp = tiny.enumerate()
    p = logp.exp()
    n = 20000
    s = P.gibbs_sample(tiny, n, burn_in=30, seed=0)
    tv = 0.5 * float((P.empirical_distribution(tiny, s) - p).abs().sum())
    null = _null_tv(p, n)
    assert tv <= float(null.quantile(0.999)) * 1.1, (tv, float(null.mean()))
    # power: a sampler of a slightly different model (beta 1.5 -> 1.3) is detected
    wrong = P.gibbs_sample(P.PottsModel(tiny.J, tiny.U, tiny.h, 1.3), n, burn_in=30, seed=0)
    tv_wrong = 0.5 * float((P.empirical_distribution(tiny, wrong) - p).abs().sum())
    assert tv_wrong > 2 * float(null.quantile(0.999))
    # thinned chains (10 samples per chain, 3 sweeps apart) also have the right law
    thinned = P.gibbs_sample(tiny, n, burn_in=30, thin=3, samples_per_chain=10, seed=1)
    tv_thin = 0.5 * float((P.empirical_distribution(tiny, thinned) - p).abs().sum())
    assert tv_thin <= float(null.quantile(0.999)) * 1.5


def test_gibbs_float64_and_fields_only_model():
    # J = 0: sites are independent with P(s_i = a) = softmax(beta h_i)[a]; exact in closed form
    h = torch.tensor([[2.0, 0.0, -1.0], [0.0, 0.0, 0.0], [-3.0, 1.0, 1.0]], dtype=torch.float64)
    m = P.PottsModel(torch.zeros(3, 3, dtype=torch.float64), torch.eye(3, dtype=torch.float64), h, 0.7)
    s = P.gibbs_sample(m, 30000, burn_in=2, seed=5, dtype=torch.float64)
    for i in range(3):
        freq = torch.bincount(s[:, i], minlength=3).double() / 30000
        torch.testing.assert_close(freq, torch.softmax(0.7 * h[i], 0), atol=0.012, rtol=0)


def test_gibbs_seeds_layout_and_init(tiny):
    a = P.gibbs_sample(tiny, 50, burn_in=3, seed=2)
    assert a.shape == (50, 4) and a.dtype == torch.long
    assert torch.equal(a, P.gibbs_sample(tiny, 50, burn_in=3, seed=2))
    assert not torch.equal(a, P.gibbs_sample(tiny, 50, burn_in=3, seed=3))
    # chain-major layout: with 5 samples per chain, n = 12 takes chains 0, 1 and 2 samples of chain 2
    b = P.gibbs_sample(tiny, 15, burn_in=3, thin=2, samples_per_chain=5, seed=2)
    assert torch.equal(P.gibbs_sample(tiny, 12, burn_in=3, thin=2, samples_per_chain=5, seed=2), b[:12])
    # burn_in = 0 returns the initial states
    init = torch.randint(0, 3, (7, 4))
    assert torch.equal(P.gibbs_sample(tiny, 7, burn_in=0, init=init), init)
    with pytest.raises(DataError, match="init has 6 chains; need M .* = 7"):
        P.gibbs_sample(tiny, 7, burn_in=1, init=init[:6])
    with pytest.raises(ConfigError, match="gibbs thin = 0"):
        P.gibbs_sample(tiny, 7, thin=0)


def test_chain_autocorrelation_decays(tiny):
    rho = P.chain_autocorrelation(tiny, (1, 10), chains=256, burn_in=20)
    assert 0.05 < rho[1] < 1 and abs(rho[10]) < 0.05, rho
    assert P.chain_autocorrelation(P.PottsModel(tiny.J, tiny.U, tiny.h, 0.0), (1,), chains=256)[1] < 0.05


# -------------------------------------------------------------------------------- Bayes loss
def test_bayes_loss_consistent_with_enumeration(tiny):
    exact = tiny.exact_bayes_loss()
    assert 0 < exact < math.log(3)
    s = P.gibbs_sample(tiny, 20000, burn_in=30, seed=4)
    mean, se = P.bayes_loss(tiny, s)
    assert 0 < se < 0.01
    assert abs(mean - exact) < 4 * se, (mean, exact, se)
    # infinite temperature: every conditional is uniform, the loss is log C exactly
    hot = P.PottsModel(tiny.J, tiny.U, tiny.h, 0.0)
    assert hot.exact_bayes_loss() == pytest.approx(math.log(3), abs=1e-12)


# --------------------------------------------------------------------------------- validation
def test_bad_parameters_rejected():
    J = torch.zeros(4, 4, dtype=torch.float64)
    U = torch.eye(3, dtype=torch.float64)
    asym = J.clone()
    asym[0, 1] = 0.5
    with pytest.raises(DataError, match="J must be symmetric; max \\|J - J\\^T\\| = 0.5"):
        P.PottsModel(asym, U)
    diag = J.clone()
    diag[2, 2] = 1.0
    with pytest.raises(DataError, match="zero diagonal"):
        P.PottsModel(diag, U)
    bad_u = U.clone()
    bad_u[0, 2] = 1.0
    with pytest.raises(DataError, match="U must be symmetric"):
        P.PottsModel(J, bad_u)
    with pytest.raises(DataError, match="J must be a square"):
        P.PottsModel(torch.zeros(4, 3, dtype=torch.float64), U)
    with pytest.raises(DataError, match="U must be a square"):
        P.PottsModel(J, torch.zeros(3, 3, 3))
    with pytest.raises(DataError, match="h must have shape \\(L, C\\) = \\(4, 3\\); got \\(3, 4\\)"):
        P.PottsModel(J, U, torch.zeros(3, 4))
    nan = J.clone()
    nan[0, 1] = nan[1, 0] = float("nan")
    with pytest.raises(DataError, match="J has non-finite"):
        P.PottsModel(nan, U)
    with pytest.raises(ConfigError, match="beta = -1.0"):
        P.PottsModel(J, U, beta=-1.0)
    with pytest.raises(ConfigError, match="Potts sparsity = 1.5"):
        P.random_potts(5, 3, sparsity=1.5)


def test_bad_states_rejected(tiny):
    with pytest.raises(DataError, match="colours in \\[0, 3\\]; allowed \\[0, 2\\]"):
        tiny.energy(torch.tensor([[0, 1, 2, 3]]))
    with pytest.raises(DataError, match="colours in \\[-1, 2\\]"):
        tiny.masked_token_nll(torch.tensor([[0, 1, 2, -1]]))
    with pytest.raises(DataError, match="must be an \\(n, L = 4\\) tensor; got shape \\(2, 5\\)"):
        tiny.conditional_logits(torch.zeros(2, 5, dtype=torch.long))
    with pytest.raises(DataError, match="integer colours; got torch.float32"):
        tiny.energy(torch.zeros(2, 4))
    with pytest.raises(DataError, match="exceeds"):
        P.random_potts(20, 10).enumerate()


# ------------------------------------------------------------------------------------ dataset
def test_dataset_save_load_cache_and_batcher(tmp_path, monkeypatch):
    monkeypatch.setenv("ENERGYFORMER_DATA", str(tmp_path))
    cfg = PD.PottsConfig(L=5, C=4, n_train=64, n_test=32, burn_in=20, coupling_seed=7, sample_seed=9)
    ds = PD.load_potts_dataset(cfg)
    folder = tmp_path / "potts" / cfg.key()
    assert (folder / "data.safetensors").is_file() and (folder / "meta.json").is_file()
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["beta"] == 1.0 and meta["config"]["coupling_seed"] == 7
    assert set(meta["chain_seeds"]) == {"train", "test"} and meta["bayes_loss_test"] < math.log(4)
    assert ds.train.shape == (64, 5) and ds.test.shape == (32, 5)
    again = PD.load_potts_dataset(cfg)  # from the cache
    for name in ("train", "test"):
        assert torch.equal(getattr(again, name), getattr(ds, name))
    for name in ("J", "U", "h"):
        assert torch.equal(getattr(again.model, name), getattr(ds.model, name))
    assert again.meta == ds.meta and again.config == cfg
    # the stored parameters regenerate from the stored seeds
    assert torch.equal(P.random_potts(5, 4, seed=7).J, ds.model.J)
    regenerated = PD.make_potts_dataset(cfg)
    assert torch.equal(regenerated.train, ds.train)
    # batches resume exactly
    b = ds.batcher(16, seed=1)
    ref = [b.next_batch()[0] for _ in range(7)]
    c = ds.batcher(16, seed=1)
    c.load_state_dict({**b.state_dict(), "step": 3})
    assert all(torch.equal(c.next_batch()[0], ref[k]) for k in range(3, 7))


def test_corrupt_stored_parameters_rejected(tmp_path):
    from safetensors.torch import load_file, save_file

    cfg = PD.PottsConfig(L=4, C=3, n_train=8, n_test=8, burn_in=2)
    PD.make_potts_dataset(cfg).save(tmp_path)
    t = load_file(tmp_path / "data.safetensors")
    t["J"][0, 1] += 1.0
    save_file(t, tmp_path / "data.safetensors")
    with pytest.raises(DataError, match="J must be symmetric"):
        PD.PottsDataset.load(tmp_path)
    (tmp_path / "data.safetensors").write_bytes(b"garbage")
    with pytest.raises(DataError, match="cannot be read"):
        PD.PottsDataset.load(tmp_path)


def test_config_rejects_unknown_and_bad_values():
    with pytest.raises(ConfigError, match="unknown key 'colours'"):
        PD.PottsConfig(colours=3)
    with pytest.raises(ConfigError, match="C"):
        PD.PottsConfig(C=1)
    assert PD.PottsConfig().key() == PD.PottsConfig().key() != PD.PottsConfig(beta=2.0).key()



@pytest.mark.parametrize("name, content, problem", [
    ("meta.json", b'{"beta": 1.0, ', r"meta\.json cannot be read \(JSONDecodeError"),
    ("meta.json", b"\xff\x00", r"meta\.json cannot be read \(UnicodeDecodeError"),
    ("meta.json", b'{"beta": 1.0}', r"meta\.json lacks 'beta' or 'config'"),
    ("meta.json", b'{"beta": 1.0, "config": {"L": 1}}', r"meta\.json: .*L"),
    ("data.safetensors", b"", r"data\.safetensors cannot be read"),
])
def test_unreadable_file_is_named_with_what_to_do(tmp_path, name, content, problem):
    cfg = PD.PottsConfig(L=4, C=3, n_train=8, n_test=8, burn_in=2)
    PD.make_potts_dataset(cfg).save(tmp_path)
    (tmp_path / name).write_bytes(content)  # the error named the folder, not the file, and no remedy
    with pytest.raises(DataError, match=problem + ".*delete the folder"):
        PD.PottsDataset.load(tmp_path)


def _edit_tensors(path):
    from safetensors.torch import load, save

    t = load(path.read_bytes())
    t["train"][0, 0] = (t["train"][0, 0] + 1) % t["U"].shape[0]
    path.write_bytes(save(t))


def _edit_json(path, **changes):
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


@pytest.mark.parametrize("damage", [
    lambda f: (f / "meta.json").write_text("{"),
    lambda f: (f / "data.safetensors").write_bytes(b"garbage"),
    lambda f: (f / "meta.json").unlink(),
    lambda f: PD.make_potts_dataset(PD.PottsConfig(L=4, C=3, n_train=8, n_test=8, burn_in=2, coupling_seed=1)).save(f),
    lambda f: _edit_tensors(f / "data.safetensors"),  # still valid samples of the same shape: found by the record
    lambda f: _edit_json(f / "meta.json", bayes_loss_test=0.5),
])
def test_corrupt_or_foreign_cache_is_regenerated_with_a_warning(tmp_path, monkeypatch, capsys, damage):
    monkeypatch.setenv("ENERGYFORMER_DATA", str(tmp_path))
    cfg = PD.PottsConfig(L=4, C=3, n_train=8, n_test=8, burn_in=2)
    first = PD.load_potts_dataset(cfg)
    folder = tmp_path / "potts" / cfg.key()
    assert f"energyformer: generating the Potts data set into {folder}" in capsys.readouterr().err
    damage(folder)
    with pytest.warns(UserWarning, match=f"Potts cache {folder}/(meta.json|data.safetensors) .*generating it again"):
        again = PD.load_potts_dataset(cfg)
    assert torch.equal(again.train, first.train) and again.config == cfg
    assert torch.equal(PD.PottsDataset.load(folder).test, first.test)  # rewritten


def test_a_folder_written_before_the_record_is_read_and_a_cache_gains_it(tmp_path, monkeypatch):
    monkeypatch.setenv("ENERGYFORMER_DATA", str(tmp_path))
    cfg = PD.PottsConfig(L=4, C=3, n_train=8, n_test=8, burn_in=2)
    first = PD.load_potts_dataset(cfg)
    meta = tmp_path / "potts" / cfg.key() / "meta.json"
    record = json.loads(meta.read_text()).pop("content_sha256")
    meta.write_text(json.dumps({k: v for k, v in json.loads(meta.read_text()).items() if k != "content_sha256"}))
    assert torch.equal(PD.PottsDataset.load(meta.parent).train, first.train)  # an older folder: checked for validity
    assert torch.equal(PD.load_potts_dataset(cfg).train, first.train)
    assert json.loads(meta.read_text())["content_sha256"] == record  # the cache has its record again
