"""``energyformer eval --iterations N`` / ``--steps K`` on a parity run reach the model (probe Q, F1).

Before the fix ``ParityTask.evaluate`` forwarded only ``steps``: ``eval --iterations N`` on a looped
transformer printed "with --iterations N" next to the trained depth's accuracy, the same for every N."""

import torch

from energyformer.models.config import ModelConfig
from energyformer.tasks.parity import ParityTask, ParityTaskConfig


def _task():
    return ParityTask(ParityTaskConfig(data={"length": 8, "n_test": 32}, batch_size=4, eval_lengths=[16]), seed=0)


def test_every_forward_option_reaches_the_model():
    """Old code: the model saw ``{"steps": 2}`` only; ``iterations`` was dropped."""
    seen = []

    class Spy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.p = torch.nn.Parameter(torch.zeros(()))

        def forward(self, x, **kw):
            seen.append(kw)
            return type("O", (), {"logits": torch.zeros(*x.shape, 2)})()

    _task().evaluate(Spy(), iterations=3, steps=2)
    assert seen and all(kw == {"iterations": 3, "steps": 2} for kw in seen)  # both lengths, every batch


def test_eval_iterations_gives_the_accuracy_at_that_depth():
    """A looped transformer's accuracy at ``iterations=N`` is ``model(bits, iterations=N)``'s; the old code gave
    the trained depth's number for every N."""
    task = _task()
    torch.manual_seed(0)
    mcfg = ModelConfig(dim=16, n_layers=1, heads=2, max_seq_len=16, positions="sinusoidal", iterations=2)
    model = task.build_model(task.resolve_model_config(mcfg)).eval()
    with torch.no_grad():  # an untrained model predicts one class at any depth: make the depths differ
        for p in model.parameters():
            p.add_(torch.randn_like(p))
    bits, tgt = task.cfg.data.test_set(device=torch.device("cpu"))
    got, want = {}, {}
    for n in (1, 2, 8):
        got[n] = task.evaluate(model, iterations=n)["accuracy"]
        with torch.no_grad():
            want[n] = float((model(bits, iterations=n).logits.argmax(-1) == tgt).float().mean())
    assert got == want
    assert len(set(want.values())) > 1  # the depths differ, so a dropped option would show
