"""Trainer behaviour on tiny models: exact resume, Ctrl-C, divergence, accumulation, precision, records."""

from __future__ import annotations

import json
import math
import warnings

import pytest
import torch
import yaml
from train_toys import TiedLM, ToyData, ToyMLP, build, mse_loss, read_metrics

from energyformer.errors import UserError
from energyformer.train import (
    TrainConfig,
    Trainer,
    TrainingDiverged,
    latest_checkpoint,
    list_checkpoints,
    verify_checkpoint,
)

STEPS = 12


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted run: per-step losses and final weights."""
    out = tmp_path_factory.mktemp("ref")
    t = build(out, steps=STEPS, save_every=4, with_eval=True, eval_every=3)
    final = t.fit()
    return {"losses": list(t.loss_history), "final": final, "out": out,
            "weights": {k: v.clone() for k, v in t.model.state_dict().items()}}


def _fail_on_call(trainer, n, exc):
    """Make the trainer's loss_fn raise ``exc`` on its n-th call (1-based)."""
    inner = trainer.loss_fn
    calls = {"n": 0}

    def loss_fn(model, batch):
        calls["n"] += 1
        if calls["n"] == n:
            raise exc
        return inner(model, batch)

    trainer.loss_fn = loss_fn


def test_resume_after_crash_is_exact(tmp_path, reference):
    t1 = build(tmp_path, steps=STEPS, save_every=4, with_eval=True, eval_every=3)
    _fail_on_call(t1, 11, RuntimeError("boom"))  # crash in step 11; last checkpoint: step 8
    with pytest.raises(RuntimeError, match="boom"):
        t1.fit()
    assert t1.loss_history == reference["losses"][:10]
    assert latest_checkpoint(tmp_path).name == "ckpt-00000008"

    t2 = build(tmp_path, steps=STEPS, save_every=4, with_eval=True, eval_every=3)
    final = t2.fit(resume=True)
    assert t2.loss_history == reference["losses"][8:]  # bit-identical, step by step
    assert final["loss"] == reference["final"]["loss"]
    assert final["eval/loss"] == reference["final"]["eval/loss"]
    for k, v in t2.model.state_dict().items():
        assert torch.equal(v, reference["weights"][k]), k
    # metrics.jsonl: events after the checkpoint from the crashed run were dropped, no duplicates
    train_events = read_metrics(tmp_path)
    assert [e["step"] for e in train_events] == list(range(1, STEPS + 1))
    assert [e["loss"] for e in train_events] == reference["losses"]
    info = json.loads((tmp_path / "run_info.json").read_text())
    assert info["resumes"][0]["step"] == 8


def test_ctrl_c_mid_step_saves_completed_step_and_resumes_exactly(tmp_path, reference):
    t1 = build(tmp_path, steps=STEPS, save_every=4, with_eval=True, eval_every=3)
    _fail_on_call(t1, 7, KeyboardInterrupt())  # inside step 7, after its batch was drawn
    with pytest.raises(KeyboardInterrupt):
        t1.fit()
    assert latest_checkpoint(tmp_path).name == "ckpt-00000006"
    t2 = build(tmp_path, steps=STEPS, save_every=4, with_eval=True, eval_every=3)
    t2.fit(resume=True)
    assert t2.loss_history == reference["losses"][6:]


def _banked(trainer):
    """A persistent buffer that every training step writes in place before its optimizer step (as EqT's memory bank
    is written by the forward pass), and which the loss reads."""
    trainer.model.register_buffer("bank", torch.zeros(()))
    inner = trainer.loss_fn

    def loss_fn(model, batch):
        with torch.no_grad():
            trainer.model.bank.mul_(0.5).add_(batch[0].mean())
        loss, metrics = inner(model, batch)
        return loss * (1 + trainer.model.bank.abs()), metrics

    trainer.loss_fn = loss_fn


def test_ctrl_c_mid_step_puts_back_a_buffer_the_step_wrote(tmp_path):
    """Probe AT: with EqT's memory term on, a Ctrl-C inside a step saved the completed step's weights beside the
    memory bank the unfinished step had already written; the resumed run wrote it again and went its own way
    (all 41 tensors off after two steps). The buffers a step writes are now copied before each step and put back
    before the Ctrl-C save, so the resumed run is the uninterrupted one, bit for bit."""
    ref = build(tmp_path / "ref", steps=STEPS, save_every=4)
    _banked(ref)
    ref.fit()
    t1 = build(tmp_path / "run", steps=STEPS, save_every=4)
    _fail_on_call(t1, 7, KeyboardInterrupt())  # inside step 7, after the bank was written
    _banked(t1)
    with pytest.raises(KeyboardInterrupt):
        t1.fit()
    assert latest_checkpoint(tmp_path / "run").name == "ckpt-00000006"
    t2 = build(tmp_path / "run", steps=STEPS, save_every=4)
    _banked(t2)
    t2.fit(resume=True)
    assert t2.loss_history == ref.loss_history[6:]
    for k, v in t2.model.state_dict().items():
        assert torch.equal(v, ref.model.state_dict()[k]), k


def test_ctrl_c_between_steps_keeps_the_completed_steps_buffers(tmp_path):
    """A Ctrl-C outside a step (here in the evaluation after step 3) saves the buffers as the completed step left
    them: putting back the copies from before that step (probe AV's mutant) saved step 3's weights beside step 2's
    bank."""
    kw = dict(steps=STEPS, save_every=4, with_eval=True, eval_every=3)
    ref = build(tmp_path / "ref", **kw)
    _banked(ref)
    ref.fit()
    t1 = build(tmp_path / "run", **kw)
    _banked(t1)

    def interrupted():
        raise KeyboardInterrupt

    t1._logged_evaluate = interrupted
    with pytest.raises(KeyboardInterrupt):
        t1.fit()
    assert latest_checkpoint(tmp_path / "run").name == "ckpt-00000003"
    t2 = build(tmp_path / "run", **kw)
    _banked(t2)
    t2.fit(resume=True)
    assert t2.loss_history == ref.loss_history[3:]
    for k, v in t2.model.state_dict().items():
        assert torch.equal(v, ref.model.state_dict()[k]), k


def test_ctrl_c_in_the_first_step_that_writes_a_buffer_saves_nothing(tmp_path, caplog):
    """No copy of a buffer from before the first step that writes it: that step's Ctrl-C saves nothing (the last
    periodic checkpoint stays the one to resume from) and says why."""
    t = build(tmp_path, steps=STEPS, save_every=4)
    t.model.register_buffer("bank", torch.zeros(()))
    inner, calls = t.loss_fn, {"n": 0}

    def loss_fn(model, batch):
        calls["n"] += 1
        if calls["n"] >= 6:
            with torch.no_grad():
                t.model.bank.add_(1.0)
            raise KeyboardInterrupt
        return inner(model, batch)

    t.loss_fn = loss_fn
    with caplog.at_level("WARNING", logger="energyformer.train"), pytest.raises(KeyboardInterrupt):
        t.fit()
    assert "wrote the model buffer(s) bank for the first time; no copy from before it, not saving" in caplog.text
    assert latest_checkpoint(tmp_path).name == "ckpt-00000004"


def test_resume_falls_back_past_corrupt_latest(tmp_path, reference):
    t1 = build(tmp_path, steps=STEPS, save_every=4, keep_checkpoints=3)
    _fail_on_call(t1, 10, RuntimeError("crash"))
    with pytest.raises(RuntimeError):
        t1.fit()
    newest = latest_checkpoint(tmp_path)
    assert newest.name == "ckpt-00000008"
    f = newest / "state.pt"
    f.write_bytes(f.read_bytes()[:100])  # truncated

    t2 = build(tmp_path, steps=STEPS, save_every=4, keep_checkpoints=3)
    with pytest.warns(UserWarning, match=r"ckpt-00000008 is invalid.*state.pt is truncated"):
        t2.fit(resume=True)
    assert t2.loss_history == reference["losses"][4:]
    assert (tmp_path / "ckpt-00000008.corrupt").is_dir()  # kept aside, not deleted
    for p in list_checkpoints(tmp_path):
        verify_checkpoint(p)


def test_nan_loss_stops_and_keeps_last_checkpoint(tmp_path):
    t = build(tmp_path, steps=STEPS, save_every=2, nan_from=6)
    with pytest.raises(TrainingDiverged) as e:
        t.fit()
    assert e.value.step == 6 and math.isnan(e.value.loss)
    assert "step 6" in str(e.value) and "nan" in str(e.value) and "ckpt-00000004" in str(e.value)
    last = latest_checkpoint(tmp_path)
    assert last.name == "ckpt-00000004"
    verify_checkpoint(last)
    assert not (tmp_path / "ckpt-00000006").exists()
    assert all(math.isfinite(p.sum().item()) for p in t.model.parameters())  # no NaN step taken
    events = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert events[-1]["event"] == "diverged" and events[-1]["step"] == 6


def test_grad_accumulation_matches_full_batch(tmp_path):
    full = build(tmp_path / "full", steps=6, dropout=0.0, batch_size=16, grad_accum=1)
    half = build(tmp_path / "half", steps=6, dropout=0.0, batch_size=8, grad_accum=2)
    full.fit()
    half.fit()
    assert half.loss_history == pytest.approx(full.loss_history, rel=1e-5, abs=1e-6)
    for a, b in zip(full.model.parameters(), half.model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    # tokens are counted per micro-batch
    assert read_metrics(tmp_path / "half")[-1]["tokens"] == read_metrics(tmp_path / "full")[-1]["tokens"]


def test_bf16_autocast_runs_on_cpu(tmp_path):
    seen = []

    def loss_fn(model, batch):
        x, y = batch
        out = model(x)
        seen.append(out.dtype)
        return torch.nn.functional.mse_loss(out.float(), y), {}

    t = Trainer(ToyMLP(dropout=0.0), TrainConfig(steps=3, precision="bf16", device="cpu",
                                                 progress=False, tensorboard=False, log_every=1),
                loss_fn, ToyData(), out_dir=tmp_path)
    final = t.fit()
    assert seen and all(d == torch.bfloat16 for d in seen)
    assert math.isfinite(final["loss"])
    assert all(p.dtype == torch.float32 for p in t.model.parameters())  # master weights stay fp32


def test_records_metrics_run_info_config_tensorboard(tmp_path):
    t = build(tmp_path, steps=6, log_every=2, with_eval=True, eval_every=3, tensorboard=True)
    final = t.fit()
    train = read_metrics(tmp_path)
    assert [e["step"] for e in train] == [2, 4, 6]
    for e in train:
        for key in ("lr", "loss", "tokens_per_s", "elapsed_s", "tokens", "grad_norm", "train/rmse"):
            assert key in e, key
    assert train[1]["loss"] == pytest.approx(sum(t.loss_history[2:4]) / 2)
    evals = read_metrics(tmp_path, "eval")
    assert [e["step"] for e in evals] == [3, 6]
    assert evals[-1]["eval/training_flag"] == 0.0  # eval_fn saw model.eval()
    assert all(0 <= e["eval_s"] <= e["elapsed_s"] for e in evals)  # its own duration: training time = the rest
    assert t.model.training  # train mode restored
    assert final["eval/loss"] == evals[-1]["eval/loss"] and final["step"] == 6

    info = json.loads((tmp_path / "run_info.json").read_text())
    for key in ("start_time", "seed", "python", "torch", "packages", "git"):
        assert key in info, key
    assert info["seed"] == 0 and info["torch"] == torch.__version__
    assert "commit" in info["git"]
    cfg = yaml.safe_load((tmp_path / "config.yaml").read_text())
    assert cfg["task"] == "toy" and cfg["train"]["steps"] == 6
    assert list((tmp_path / "tb").glob("events.out.tfevents.*"))


def test_fresh_fit_refuses_dir_with_checkpoints(tmp_path):
    build(tmp_path, steps=2).fit()
    with pytest.raises(UserError, match="already holds checkpoints.*resume=True"):
        build(tmp_path, steps=2).fit()


def test_resume_without_checkpoint_starts_fresh(tmp_path):
    with pytest.warns(UserWarning, match="no valid checkpoint"):
        final = build(tmp_path, steps=2).fit(resume=True)
    assert final["step"] == 2


def test_trainer_rejects_bad_data(tmp_path):
    with pytest.raises(TypeError, match="state_dict"):
        Trainer(ToyMLP(), TrainConfig(steps=1), mse_loss, object(), out_dir=tmp_path)
    no_batches = type("NoBatches", (), {"state_dict": lambda self: {},
                                        "load_state_dict": lambda self, s: None})()
    with pytest.raises(TypeError, match="next_batch"):
        Trainer(ToyMLP(), TrainConfig(steps=1), mse_loss, no_batches, out_dir=tmp_path)


def test_run_config_with_tuples_and_no_warnings(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t = Trainer(ToyMLP(), TrainConfig(steps=2, device="cpu", progress=False, tensorboard=False),
                    mse_loss, ToyData(), out_dir=tmp_path, run_config={"model": {"shape": (1, 2)}})
        t.fit()
    assert yaml.safe_load((tmp_path / "config.yaml").read_text()) == {"model": {"shape": [1, 2]}}


def test_iterator_data_source_is_accepted(tmp_path):
    class IterData(ToyData):
        def __next__(self):
            return self.next_batch()

    data = IterData()
    data_next_only = type("NoNextBatch", (), {
        "__init__": lambda self: setattr(self, "d", IterData()),
        "__next__": lambda self: next(self.d),
        "state_dict": lambda self: self.d.state_dict(),
        "load_state_dict": lambda self, s: self.d.load_state_dict(s),
    })()
    for i, src in enumerate((data, data_next_only)):
        t = Trainer(ToyMLP(), TrainConfig(steps=2, device="cpu", progress=False, tensorboard=False),
                    mse_loss, src, out_dir=tmp_path / str(i))
        assert t.fit()["step"] == 2


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only fallback")
def test_device_auto_falls_back_and_cuda_is_a_clear_error():
    from energyformer.train import resolve_device
    from energyformer.utils.validate import ConfigError

    assert resolve_device("auto").type in ("cpu", "mps")
    with pytest.raises(ConfigError, match=r"train.device = 'cuda': CUDA is not available"):
        resolve_device("cuda")


@pytest.mark.parametrize("exc, cls", [(ValueError("predict: no batches"), "EvaluationFailed"),
                                      (UserError("task.validation = 0: no batches"), "EvaluationUserError")])
def test_failing_final_evaluation_keeps_the_final_checkpoint(tmp_path, exc, cls):
    """Issue 25 class 1: the last step's checkpoint is written before the final evaluation, so a
    run with save_every = 0 whose evaluation raises keeps its trained weights, and the error names
    the step and the checkpoint (a user error stays a UserError: one line, exit code 2)."""
    from energyformer.train.contract import EvaluationFailed

    t = build(tmp_path, steps=3, save_every=0, with_eval=True, eval_every=0)

    def bad_eval(model):
        raise exc

    t.eval_fn = bad_eval
    with pytest.raises(EvaluationFailed) as info:
        t.fit()
    assert type(info.value).__name__ == cls
    assert isinstance(info.value, UserError) == (cls == "EvaluationUserError")
    ckpts = list_checkpoints(tmp_path)
    assert [p.name for p in ckpts] == [latest_checkpoint(tmp_path).name] and "3" in ckpts[-1].name
    verify_checkpoint(ckpts[-1])
    assert f"step 3" in str(info.value) and ckpts[-1].name in str(info.value)
    assert info.value.__cause__ is exc
    # the saved weights are the trained ones; resuming just evaluates (here: fails again, same way)
    t2 = build(tmp_path, steps=3, save_every=0, with_eval=True)
    t2.eval_fn = bad_eval
    with pytest.raises(EvaluationFailed):
        t2.fit(resume=True)
    torch.testing.assert_close(t2.model.state_dict(), t.model.state_dict())


def test_failing_periodic_evaluation_after_a_save_names_the_checkpoint(tmp_path):
    t = build(tmp_path, steps=6, save_every=2, with_eval=True, eval_every=2)
    inner, calls = t.eval_fn, {"n": 0}

    def eval_fn(model):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("boom")
        return inner(model)

    t.eval_fn = eval_fn
    from energyformer.train.contract import EvaluationFailed

    with pytest.raises(EvaluationFailed, match="step 4") as info:
        t.fit()
    assert "ckpt" in str(info.value) and latest_checkpoint(tmp_path).name in str(info.value)


def test_fit_resumed_at_its_last_step_returns_the_documented_values(tmp_path):
    """fit(resume=True) on a run already at train.steps trains nothing; it returned no ``loss`` nor ``lr``
    (fit documents both): now the checkpoint's last loss and the last step's learning rate."""
    first = build(tmp_path / "r", steps=3, with_eval=True).fit()
    again = build(tmp_path / "r", steps=3, with_eval=True).fit(resume=True)
    assert again["step"] == first["step"] == 3
    assert again["loss"] == first["loss"] and again["lr"] == pytest.approx(first["lr"])
