"""Parity task (EqT seed 003 §5.1.1): loss, per-length accuracy, config errors."""

import pytest
import torch

from energyformer.models.config import ModelConfig
from energyformer.models.equilibrium import EquilibriumConfig
from energyformer.tasks import TASKS
from energyformer.tasks.parity import ParityTask, ParityTaskConfig

MKW = dict(dim=16, n_layers=1, heads=2, max_seq_len=32, positions="sinusoidal")


def _task(**kw):
    cfg = ParityTaskConfig(data={"length": 8, "n_test": 16}, batch_size=4, eval_lengths=[16], **kw)
    return ParityTask(cfg, seed=0)


@pytest.mark.parametrize("mcfg", [ModelConfig(**MKW), EquilibriumConfig(**MKW, refine={"window": 4})])
def test_loss_and_per_length_accuracy(mcfg):
    task = _task()
    torch.manual_seed(0)
    model = task.build_model(task.resolve_model_config(mcfg))
    loss, metrics = task.loss(model, task.train_data.next_batch())
    assert torch.isfinite(loss) and loss.requires_grad
    if mcfg.kind == "equilibrium":
        assert loss.item() > metrics["ce"] and "eqt/rev" in metrics
    else:
        assert loss.item() == pytest.approx(metrics["ce"])
    m = task.evaluate(model)
    assert set(m) == {"accuracy", "accuracy/L16"} and all(0 <= v <= 1 for v in m.values())
    assert model.training


def test_accuracy_counts_correct_tokens():
    task = _task()

    class Oracle(torch.nn.Module):  # predicts the cumulative parity exactly, or its negation
        def __init__(self, flip):
            super().__init__()
            self.flip, self.p = flip, torch.nn.Parameter(torch.zeros(()))

        def forward(self, x, **_):
            y = (x.cumsum(-1) % 2) ^ self.flip
            return type("O", (), {"logits": torch.nn.functional.one_hot(y, 2).float()})()

    assert task.accuracy(Oracle(0), 8) == 1.0 and task.accuracy(Oracle(1), 16) == 0.0


def test_parity_is_registered_and_bad_configs_fail_clearly():
    assert "parity" in TASKS.names() and TASKS.get("parity").builder is ParityTask
    with pytest.raises(ValueError, match="eval_lengths"):
        ParityTaskConfig(eval_lengths=[0])
    with pytest.raises(ValueError, match="max_seq_len = 32.*>= 64"):
        ParityTask(ParityTaskConfig(data={"length": 64}), seed=0).resolve_model_config(ModelConfig(**MKW))


def test_evaluate_runs_in_eval_mode_whatever_the_callers_mode():
    """Once: ``task.evaluate`` on a model left in training mode (``run_experiment(...).model``) refined EqT with
    K_train = 2 steps instead of K_eval = 8, silently. Every Task.evaluate now runs in eval mode (Task's
    __init_subclass__) and gives the caller's mode back."""
    task = _task()
    torch.manual_seed(0)
    model = task.build_model(task.resolve_model_config(EquilibriumConfig(**MKW, refine={"window": 4})))
    with torch.no_grad():  # a refinement that changes predictions
        for p in model.parameters():
            p.add_(0.5 * torch.randn_like(p))
    seen = []
    model.register_forward_pre_hook(lambda m, args: seen.append(m.training))
    model.train()
    in_train = task.evaluate(model)
    assert model.training and seen and not any(seen)
    model.eval()
    assert task.evaluate(model) == in_train and not model.training

    class Plugin(ParityTask):  # a task defined elsewhere gets the same guarantee
        def evaluate(self, model, split="test", **options):
            return {"training": float(model.training)}

    model.train()
    assert Plugin(task.cfg, seed=0).evaluate(model) == {"training": 0.0} and model.training


def test_eval_names_the_test_set_and_has_no_split_to_choose():
    """`energyformer eval` printed "parity validation split" for what is the fixed test set, and `--split test`
    gave the same numbers under another name: the task has one test set per length, so --split is refused"""
    import argparse

    task = _task()
    torch.manual_seed(0)
    model = task.build_model(task.resolve_model_config(ModelConfig(**MKW)))
    what, metrics = task.eval_from_args(model, argparse.Namespace(split="validation"), {})
    assert what == "parity test set (length 8, 16 sequences)" and metrics == task.evaluate(model)
    assert ParityTask.has_splits is False and "fixed test set" in ParityTask.split_note


def test_accuracy_reads_the_count_once_whatever_the_number_of_batches(host_reads):
    """The correct-token count stays on the device and is read once: the host reads of ``accuracy`` do not grow
    with its batches (before: one ``int()`` per batch, so the host waited for each batch before queueing the next).
    The accuracy is the same number as counting batch by batch."""
    from energyformer.utils.config import replace

    class PerBit(torch.nn.Module):  # logits from each bit alone: right on some tokens, wrong on others
        def __init__(self):
            super().__init__()
            self.e = torch.nn.Embedding(2, 2)

        def forward(self, x, **_):
            return type("O", (), {"logits": self.e(x)})()

    torch.manual_seed(0)
    model = PerBit()
    reads = []
    for bs in (16, 4):
        task = _task(eval_batch_size=bs)
        bits, tgt = replace(task.cfg.data, length=8).test_set()
        with torch.no_grad():
            want = sum(int((model(bits[i:i + bs]).logits.argmax(-1) == tgt[i:i + bs]).sum())
                       for i in range(0, len(bits), bs)) / tgt.numel()
        with host_reads() as count:
            got = task.accuracy(model, 8)
        reads.append(count.n)
        assert got == want and 0 < got < 1
    assert reads[0] == reads[1], reads
