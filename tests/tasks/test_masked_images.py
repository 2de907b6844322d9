"""The masked_image_modelling task (Hyper-SET §5.3 stand-in): the k-means tokeniser, masks, the
masked-only loss, PSNR / SSIM on hand-computed cases, deterministic evaluation, config errors, and a
short digits run of the Transformer and Hyper-SET configs that beats the unigram baseline."""

import math

import numpy as np
import pytest
import torch

from energyformer.data.images import load_image_dataset
from energyformer.experiment import build_task, load_run_config, resolve, run_experiment
from energyformer.tasks.masked_images import (
    PatchTokenizer, load_or_fit_tokenizer, masked_cross_entropy, psnr, random_mask, ssim,
)
from energyformer.utils.validate import ConfigError

TASK = ["task.kind=masked_image_modelling", "task.dataset=digits", "task.codebook_size=64"]
SMALL = ["model.dim=32", "model.heads=2", "model.iterations=3"]
QUIET = ["train.progress=false", "train.tensorboard=false", "train.eval_every=0", "train.save_every=0"]


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ENERGYFORMER_DATA", str(tmp_path / "data"))  # the codebook cache; digits need no files


@pytest.fixture(scope="module")
def digits():
    return load_image_dataset("digits")


def test_tokenizer_round_trips_centroids_and_is_deterministic(digits):
    tok = PatchTokenizer.fit(digits.train.images, 2, 64, seed=0)
    assert tok.centroids.shape == (64, 4) and tok.num_tokens == 16
    assert len(torch.unique(tok.centroids, dim=0)) == 64
    codes = torch.randint(0, 64, (10, 16), generator=torch.Generator().manual_seed(0))
    img = tok.decode(codes)                                   # (10, 1, 8, 8) made of centroids
    assert img.shape == (10, 1, 8, 8) and torch.equal(tok.encode(img), codes)
    enc = tok.encode(digits.test.images[:50])
    assert torch.equal(tok.encode(tok.decode(enc)), enc)
    assert torch.equal(PatchTokenizer.fit(digits.train.images, 2, 64, seed=0).centroids, tok.centroids)
    assert not torch.equal(PatchTokenizer.fit(digits.train.images, 2, 64, seed=1).centroids, tok.centroids)


def test_tokenizer_cache_is_keyed_and_reloaded(digits, tmp_path):
    key = {"dataset": "digits", "patch": 2, "codes": 16, "seed": 0}
    a = load_or_fit_tokenizer(digits, key, 2, 16, 0, 500)
    files = list((tmp_path / "data" / "mim_tokenizers").glob("digits-p2-k16-s0-*.npy"))
    assert len(files) == 1
    assert torch.equal(load_or_fit_tokenizer(digits, key, 2, 16, 0, 500).centroids, a.centroids)
    load_or_fit_tokenizer(digits, {**key, "fit_images": 400}, 2, 16, 0, 400)
    assert len(list(files[0].parent.glob("*.npy"))) == 2
    # a corrupt cache file (truncated; or another shape) is fitted again with a warning naming it, not an internal
    # error: the fit is deterministic, so the same codebook comes back and replaces it
    good = files[0].read_bytes()
    for broken in (good[: len(good) // 3], good[: len(good) - 5], b"not an npy file"):
        files[0].write_bytes(broken)
        with pytest.warns(UserWarning, match=f"{files[0].name}: the cached tokenizer codebook is unreadable"):
            again = load_or_fit_tokenizer(digits, key, 2, 16, 0, 500)
        assert torch.equal(again.centroids, a.centroids) and files[0].read_bytes() == good
    import numpy as np

    np.save(files[0], np.zeros((3, 4), dtype=np.float32))
    with pytest.warns(UserWarning, match=r"shape \(3, 4\) \(expected \(16, 4\)\)"):
        assert torch.equal(load_or_fit_tokenizer(digits, key, 2, 16, 0, 500).centroids, a.centroids)


def test_masks_cover_the_requested_fraction():
    counts = torch.tensor([0, 1, 7, 16])
    m = random_mask(counts, 16, torch.Generator().manual_seed(0))
    assert torch.equal(m.sum(1), counts)
    cfg = load_run_config(None, TASK)
    task = build_task(cfg)
    N = 16
    rates = []
    for _ in range(20):
        codes, mask = task.train_data.next_batch()
        k = mask.sum(1)
        assert codes.shape == mask.shape == (128, N)
        assert int(k.min()) >= 1 and int(k.max()) <= round(0.4 * N)
        rates.append(float(mask.float().mean()))
    assert 0.15 < sum(rates) / len(rates) < 0.25               # E[r] = 0.2
    es = task.eval_set("test")
    assert bool((es["mask"].sum(1) == round(0.4 * N)).all())
    assert torch.equal(build_task(cfg).eval_set("test")["mask"], es["mask"])  # seeded, deterministic


def test_loss_counts_masked_positions_only():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 7, generator=g)
    targets = torch.randint(0, 7, (2, 5), generator=g)
    mask = torch.tensor([[True, False, True, False, False], [False, False, False, True, False]])
    loss = masked_cross_entropy(logits, targets, mask)
    other = targets.clone()
    other[0, 1] = (other[0, 1] + 1) % 7                      # an unmasked target
    assert torch.equal(masked_cross_entropy(logits, other, mask), loss)
    other[0, 0] = (other[0, 0] + 1) % 7                      # a masked one
    assert not torch.equal(masked_cross_entropy(logits, other, mask), loss)
    want = -torch.log_softmax(logits, -1).gather(-1, targets[..., None])[..., 0][mask].mean()
    assert torch.allclose(loss, want)


def test_loss_items_are_the_masked_codes():
    """What the loss averages over: the trainer weighs accumulated micro-batches by it (the masking ratio varies)."""
    from energyformer.tasks.masked_images import MaskedImageTask

    codes = torch.zeros(3, 6, dtype=torch.long)
    mask = torch.tensor([[True] * 6, [True, False] * 3, [False] * 5 + [True]])
    assert MaskedImageTask.loss_items(None, (codes, mask)) == 10


def _ssim_loops(x: np.ndarray, y: np.ndarray, w: int = 7) -> float:
    """SSIM written out window by window (Wang et al. 2004 Eq. 13, sample covariances)."""
    c1, c2 = 0.01 ** 2, 0.03 ** 2
    vals = []
    for i in range(x.shape[0] - w + 1):
        for j in range(x.shape[1] - w + 1):
            a, b = x[i:i + w, j:j + w].ravel(), y[i:i + w, j:j + w].ravel()
            ma, mb = a.mean(), b.mean()
            va, vb = a.var(ddof=1), b.var(ddof=1)
            cov = ((a - ma) * (b - mb)).sum() / (a.size - 1)
            vals.append((2 * ma * mb + c1) * (2 * cov + c2) / ((ma ** 2 + mb ** 2 + c1) * (va + vb + c2)))
    return float(np.mean(vals))


def test_psnr_and_ssim_on_known_cases():
    zero, tenth = torch.zeros(2, 1, 8, 8), torch.full((2, 1, 8, 8), 0.1)
    assert torch.allclose(psnr(zero, tenth), torch.tensor([20.0, 20.0]))       # MSE 0.01
    assert torch.allclose(psnr(zero, torch.full_like(zero, 0.5)), torch.tensor(10 * math.log10(4.0)))
    x = torch.rand(3, 1, 10, 9, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(ssim(x, x), torch.ones(3))
    a, b = torch.full((1, 1, 8, 8), 0.5), torch.full((1, 1, 8, 8), 0.25)        # zero variance: luminance only
    want = (2 * 0.5 * 0.25 + 1e-4) / (0.5 ** 2 + 0.25 ** 2 + 1e-4)
    assert float(ssim(a, b)) == pytest.approx(want, rel=1e-6)
    y = (x + 0.2 * torch.randn(x.shape, generator=torch.Generator().manual_seed(1))).clamp(0, 1)
    for i in range(3):
        assert float(ssim(x[i:i + 1], y[i:i + 1])) == pytest.approx(_ssim_loops(x[i, 0].numpy(), y[i, 0].numpy()),
                                                                    rel=1e-5)
    with pytest.raises(ValueError, match="win_size = 7"):
        ssim(torch.zeros(1, 1, 6, 6), torch.zeros(1, 1, 6, 6))


def test_ssim_matches_scikit_image():
    from skimage import metrics  # a dev dependency (pyproject), so this runs in CI
    g = np.random.default_rng(0)
    x = g.random((3, 16, 20))
    y = np.clip(x + 0.2 * g.standard_normal(x.shape), 0, 1)
    want = metrics.structural_similarity(x, y, data_range=1.0, channel_axis=0)
    assert float(ssim(torch.tensor(x)[None], torch.tensor(y)[None])) == pytest.approx(want, rel=1e-5)


def test_config_errors_name_key_value_and_allowed():
    with pytest.raises(ConfigError, match=r"task.patch_size = 3: must divide the digits image side 8 "
                                          r"\(allowed: 1, 2, 4, 8\)"):
        load_run_config(None, TASK + ["task.patch_size=3"])
    with pytest.raises(ConfigError, match="max_mask_ratio"):
        load_run_config(None, TASK + ["task.max_mask_ratio=1.5"])
    with pytest.raises(ConfigError, match="dataset"):
        load_run_config(None, TASK + ["task.dataset=cifar10"])
    with pytest.raises(ConfigError, match="mask_ratio_max"):
        load_run_config(None, TASK + ["task.mask_ratio_max=0.3"])
    with pytest.raises(ConfigError, match=r"model.n_codes = 32: the tokeniser gives 64"):
        load_run_config(None, TASK + ["model.n_codes=32"])
    with pytest.raises(ConfigError, match="model.kind"):
        load_run_config(None, TASK + ["model.kind=vision"])


def test_evaluate_is_deterministic_and_complete():
    cfg = load_run_config(None, TASK + SMALL + ["task.decode_steps=3"])
    task = build_task(cfg)
    m = resolve(cfg, task).model
    assert (m.n_codes, m.num_tokens) == (64, 16)
    model = task.build_model(m)
    a, b = task.evaluate(model, "test"), task.evaluate(model, "test")
    assert a == b and model.training
    assert {"loss", "accuracy", "decode_accuracy", "psnr", "ssim", "tokenizer_psnr", "unigram_accuracy"} <= set(a)
    assert a["masked_fraction"] == pytest.approx(round(0.4 * 16) / 16)
    assert a["psnr"] <= a["tokenizer_psnr"] + 1e-6 or a["decode_accuracy"] < 1
    assert "masked accuracy" in task.format_metrics(a)


def test_evaluate_without_float64_sums_in_float32(monkeypatch):
    """On MPS (no float64: the float64 sums were a TypeError, so the task's evaluation failed there) the sums are
    float32 (``widest_float``, emulated here on the CPU) and the metrics those of the float64 sums."""
    import energyformer.tasks.masked_images as mi

    cfg = load_run_config(None, TASK + SMALL + ["task.decode_steps=3"])
    task = build_task(cfg)
    model = task.build_model(resolve(cfg, task).model)
    wide = task.evaluate(model, "test")
    made = []
    monkeypatch.setattr(mi, "widest_float", lambda device: made.append(device) or torch.float32)
    narrow = task.evaluate(model, "test")
    assert made and set(narrow) == set(wide)
    for key, v in wide.items():
        assert narrow[key] == pytest.approx(v, rel=1e-5, abs=1e-6), key


def test_evaluation_does_not_depend_on_the_eval_batch_size():
    """One generator served the decoding noise of every batch in turn, so an image's noise depended on where the
    batch boundaries fell: decode accuracy, PSNR and SSIM changed with task.eval_batch_size (an outside probe).
    Now each image draws from its own generator (its index in the split)."""
    res = []
    for bs in (500, 7):
        cfg = load_run_config(None, TASK + SMALL + ["task.decode_steps=3", f"task.eval_batch_size={bs}",
                                                    "task.eval_examples=40"])
        task = build_task(cfg)
        torch.manual_seed(0)
        res.append(task.evaluate(task.build_model(resolve(cfg, task).model), "test"))
    for key in ("decode_accuracy", "psnr", "ssim", "loss", "accuracy"):
        assert res[0][key] == pytest.approx(res[1][key], rel=1e-6, abs=1e-9), key


@pytest.mark.parametrize("config", ["images/mim_transformer", "images/mim_hyperset"])
def test_short_digits_run_beats_the_unigram_baseline(config, tmp_path):
    """~25 epochs on digits (1,293 images, batch 64, 500 steps) with the shipped configs shrunk (d = 32,
    2 iterations): at 40% masking the masked-code CE must beat the unigram baseline (training code
    frequencies) by 0.5 nats and the decoded images its fill by 1 dB PSNR.

    Masked *accuracy* is not the criterion: the background code is ~27% of all positions and the other
    k-means codes are near neighbours of one another, so at this budget accuracy moves only a few
    points above always-the-background (Transformer ~29% vs 27%; Hyper-SET ~27%), while CE drops
    from 3.52 to ~2.8 (measured while writing this test)."""
    over = TASK + ["task.patch_size=2", "task.batch_size=64", "task.eval_examples=null", "task.decode_steps=4",
                   "model.dim=32", "model.heads=2", "model.iterations=2", "train.steps=500", "train.lr=2e-3",
                   f"out_dir={tmp_path}", "name=r"] + QUIET
    if "hyperset" in config:
        over += ["model.block.mlp.hidden=32", "model.block.attention.step_size.embed_dim=32"]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        res = run_experiment(load_run_config(config, over))
    finally:
        torch.set_num_threads(threads)
    f = {k.removeprefix("eval/"): v for k, v in res.final.items()}
    assert f["loss"] <= f["unigram_loss"] - 0.5, f"{config}: masked CE {f['loss']:.3f} vs unigram {f['unigram_loss']:.3f}"
    assert f["psnr"] >= f["unigram_psnr"] + 1.0, f"{config}: PSNR {f['psnr']:.2f} vs unigram fill {f['unigram_psnr']:.2f}"
    assert f["accuracy"] > f["unigram_accuracy"] - 0.02


def test_codebook_larger_than_the_patch_count_is_a_config_error(digits):
    """Issue 25 class 3: this was reported as 'internal error (ValueError ...)'."""
    from energyformer.errors import ConfigError

    images = digits.train.images[:2]  # 2 digits images of 8x8 at patch 4: 8 patches
    with pytest.raises(ConfigError, match=r"task.codebook_size = 64: more codes than the 8 training patches"):
        PatchTokenizer.fit(images, 4, 64, seed=0)


def test_training_loss_and_accuracy_read_nothing_on_the_host(host_reads):
    """The step's loss and its ``acc`` metric are the masked-only mean CE and accuracy to 1e-12 (float64), value and
    gradient, with no host sync, forward or backward. Before, both indexed the logits with the bool mask (a
    ``nonzero`` per step each, and one more in the backward), which on an accelerator waited for the whole forward.
    Nothing masked: NaN loss and accuracy, as the mean of no positions was before."""
    from types import SimpleNamespace

    from energyformer.models.output import ModelOutput
    from energyformer.tasks.masked_images import MaskedImageTask

    g = torch.Generator().manual_seed(0)
    codes = torch.randint(0, 7, (4, 6), generator=g)
    mask = torch.rand(4, 6, generator=g) < 0.5
    w = torch.randn(7, 7, generator=g, dtype=torch.float64, requires_grad=True)
    model = lambda c, m: ModelOutput(logits=w[c] * 3)  # noqa: E731  (B, N, K) float64
    task = SimpleNamespace(add_aux_losses=MaskedImageTask.add_aux_losses)
    with host_reads() as reads:
        loss, metrics = MaskedImageTask.loss(task, model, (codes, mask))
        (grad,) = torch.autograd.grad(loss, w)
    assert reads.n == 0
    lg = w[codes] * 3
    want = torch.nn.functional.cross_entropy(lg[mask], codes[mask])
    (want_grad,) = torch.autograd.grad(want, w)
    assert abs(float(loss.detach()) - float(want.detach())) < 1e-12
    assert torch.allclose(grad, want_grad, rtol=0, atol=1e-12)
    assert float(metrics["acc"]) == float((lg[mask].argmax(-1) == codes[mask]).float().mean())
    from energyformer.tasks.masked_images import masked_accuracy

    none = torch.zeros_like(mask)
    assert math.isnan(float(masked_cross_entropy(lg, codes, none)))
    assert math.isnan(float(masked_accuracy(lg, codes, none)))


def test_evaluate_reads_the_host_once_and_matches_the_masked_means(host_reads):
    """``evaluate`` without decoding sums on the model's device and reads once after the loop (a float() per batch
    and bool indexing made the host wait for every batch's forward: 3 reads per batch, and a ``nonzero`` each);
    its loss and accuracy are the masked-only means over the whole split, batch by batch."""
    cfg = load_run_config(None, TASK + SMALL + ["task.eval_batch_size=7", "task.eval_examples=20"])
    task = build_task(cfg)
    torch.manual_seed(0)
    model = task.build_model(resolve(cfg, task).model)
    es = task.eval_set("test")  # built (and its reference metrics read) once, outside the count
    with torch.no_grad(), host_reads() as reads:
        res = task.evaluate(model, "test", decode=False)
    assert reads.n == 1, reads.n
    model.eval()
    with torch.no_grad():
        lg = model(es["codes"], es["mask"]).logits.double()
    m = es["mask"]
    want_ce = torch.nn.functional.cross_entropy(lg[m], es["codes"][m])
    assert res["loss"] == pytest.approx(float(want_ce), rel=1e-5)
    assert res["accuracy"] == float((lg[m].argmax(-1) == es["codes"][m]).double().mean())
    assert res["masked_fraction"] == float(m.double().mean())
