"""A task registered from outside the library trains and evaluates through the CLI (issue 7).

The toy task: each position must output the token at the mirrored position (y_i = x_{N-1-i}), which a
model can only learn with bidirectional attention. The model is one shared layer iterated 2-4 times
during training (sampled per batch) and evaluated at more iterations than it ever trained with.
"""

from __future__ import annotations

from typing import Any, Literal

import pytest
import torch
import torch.nn.functional as F
from pydantic import Field

from energyformer.cli import main
from energyformer.models import MODELS
from energyformer.tasks import TASKS, Task, TaskConfig, register_task

VOCAB = 6


class MirrorConfig(TaskConfig):
    kind: Literal["toy_mirror"] = "toy_mirror"
    length: int = Field(6, ge=2)
    batch_size: int = Field(32, ge=1)


class MirrorBatcher:
    def __init__(self, length: int, batch: int, seed: int):
        self.length, self.batch = length, batch
        self.gen = torch.Generator().manual_seed(seed)

    def next_batch(self):
        x = torch.randint(0, VOCAB, (self.batch, self.length), generator=self.gen)
        return x, x.flip(1)

    def state_dict(self) -> dict[str, Any]:
        return {"gen": self.gen.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.gen.set_state(state["gen"])


def _register() -> None:
    if "toy_mirror" in TASKS.entries:
        return

    @register_task("toy_mirror", MirrorConfig)
    class MirrorTask(Task):
        """Toy: output the token at the mirrored position (needs the future)."""

        model_kinds = ("transformer",)
        main_metric = "accuracy"

        def __init__(self, cfg, *, seed=0, rank=0):
            super().__init__(cfg, seed=seed, rank=rank)
            self.train_data = MirrorBatcher(cfg.length, cfg.batch_size, seed)
            g = torch.Generator().manual_seed(12345)
            self.test_x = torch.randint(0, VOCAB, (256, cfg.length), generator=g)

        def build_model(self, model_cfg):
            return MODELS.build(model_cfg, vocab_size=VOCAB, n_out=VOCAB, causal=False)

        def loss(self, model, batch):
            x, y = batch
            out = model(x)
            return F.cross_entropy(out.logits.flatten(0, 1), y.flatten()), {}

        def evaluate(self, model, split="validation", **options):
            dev = next(model.parameters()).device
            x = self.test_x.to(dev)
            pred = model(x, **options).logits.argmax(-1)
            return {"accuracy": float((pred == x.flip(1)).float().mean())}


@pytest.mark.parametrize("attention", ["llama", "cem"])
def test_registered_bidirectional_recurrent_task_trains_and_evals_deeper(tmp_path, capsys, attention):
    _register()
    cfg = tmp_path / "mirror.yaml"
    cfg.write_text(f"""
name: mirror-{attention}
out_dir: {tmp_path}
task: {{kind: toy_mirror, length: 6}}
model: {{dim: 32, n_layers: 1, heads: 4, iterations: 3, train_iterations: [2, 4], max_seq_len: 8,
        positions: learned, block: {{attention: {attention}}}}}
train: {{steps: 300, lr: 3.0e-3, eval_every: 0, save_every: 0, progress: false, tensorboard: false}}
""")
    assert main(["train", str(cfg)]) == 0
    out = capsys.readouterr().out
    acc = float(out.split("accuracy ")[1].split(";")[0].split(",")[0])
    assert acc > 0.6, out  # chance is 1/6
    run = tmp_path / f"mirror-{attention}"
    assert main(["eval", str(run), "--iterations", "6"]) == 0
    deeper = float(capsys.readouterr().out.split("accuracy ")[1].split()[0])
    assert deeper > 0.4  # runs at twice the trained depth and still works
    assert main(["eval", str(run), "--iterations", "0"]) == 2
    assert "--iterations 0: must be an integer >= 1" in capsys.readouterr().err
