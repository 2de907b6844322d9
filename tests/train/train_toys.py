"""Tiny models and a seeded, resumable data source for the trainer tests (and their subprocesses)."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import torch
from torch import nn

from energyformer.train import TrainConfig, Trainer, seed_everything


class ToyData:
    """Regression samples from a fixed table, shuffled each epoch by its own seeded generator.

    ``state_dict`` holds the permutation, the position and the generator state, so the stream
    resumes exactly. ``nan_from`` (batch count) makes later batches contain NaN. ``sleep`` slows
    ``next_batch`` so a subprocess can be killed mid-run.
    """

    def __init__(self, n: int = 256, dim: int = 8, batch_size: int = 16, seed: int = 0,
                 nan_from: int | None = None, sleep: float = 0.0) -> None:
        g = torch.Generator().manual_seed(1000 + seed)
        self.x = torch.randn(n, dim, generator=g)
        w = torch.randn(dim, 1, generator=g)
        self.y = torch.sin(self.x @ w) + 0.1 * torch.randn(n, 1, generator=g)
        self.n, self.batch_size = n, batch_size
        self.g = torch.Generator().manual_seed(2000 + seed)
        self.perm = torch.randperm(n, generator=self.g)
        self.pos = 0
        self.batches = 0
        self.nan_from = nan_from
        self.sleep = sleep
        self.tokens_per_batch = batch_size

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.sleep:
            time.sleep(self.sleep)
        if self.pos + self.batch_size > self.n:
            self.perm = torch.randperm(self.n, generator=self.g)
            self.pos = 0
        idx = self.perm[self.pos:self.pos + self.batch_size]
        self.pos += self.batch_size
        self.batches += 1
        x, y = self.x[idx], self.y[idx]
        if self.nan_from is not None and self.batches >= self.nan_from:
            x = x * float("nan")
        return x, y

    def state_dict(self) -> dict:
        return {"perm": self.perm.clone(), "pos": self.pos, "batches": self.batches,
                "gen": self.g.get_state()}

    def load_state_dict(self, d: dict) -> None:
        self.perm = d["perm"].clone()
        self.pos = int(d["pos"])
        self.batches = int(d["batches"])
        self.g.set_state(d["gen"])


class ToyMLP(nn.Module):
    def __init__(self, dim: int = 8, hidden: int = 32, dropout: float = 0.1) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, hidden), nn.LayerNorm(hidden), nn.GELU(),
                                 nn.Dropout(dropout), nn.Linear(hidden, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class TiedLM(nn.Module):
    """Embedding tied to the output head (shared tensor) — the safetensors edge case."""

    def __init__(self, vocab: int = 11, dim: int = 6) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.proj = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.emb.weight
        self.register_buffer("scale", torch.tensor(0.5))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(torch.tanh(self.proj(self.emb(idx))) * self.scale))


def mse_loss(model: nn.Module, batch: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, dict]:
    x, y = batch
    loss = torch.nn.functional.mse_loss(model(x).float(), y)
    return loss, {"rmse": math.sqrt(max(loss.item(), 0.0)) if math.isfinite(loss.item()) else float("nan")}


def make_eval_fn(data_seed: int = 0):
    ref = ToyData(seed=data_seed)

    def eval_fn(model: nn.Module) -> dict[str, float]:
        dev = next(model.parameters()).device
        loss = torch.nn.functional.mse_loss(model(ref.x.to(dev)).float(), ref.y.to(dev))
        torch.rand(3)  # consumes RNG on purpose: the trainer must isolate it
        return {"loss": loss.item(), "training_flag": float(model.training)}

    return eval_fn


def build(out_dir: str | Path, *, steps: int = 20, seed: int = 0, data_seed: int = 0,
          dropout: float = 0.1, batch_size: int = 16, sleep: float = 0.0, nan_from: int | None = None,
          with_eval: bool = False, callbacks=None, **cfg_kwargs) -> Trainer:
    """Seed, build model + data and return a Trainer (the way a task would)."""
    seed_everything(seed)
    model = ToyMLP(dropout=dropout)
    data = ToyData(batch_size=batch_size, seed=data_seed, nan_from=nan_from, sleep=sleep)
    kw = dict(steps=steps, seed=seed, log_every=1, eval_every=0, save_every=0, progress=False,
              tensorboard=False, device="cpu", schedule={"kind": "warmup_cosine", "warmup": 0.1},
              lr=1e-2)
    kw.update(cfg_kwargs)
    cfg = TrainConfig(**kw)
    return Trainer(model, cfg, mse_loss, data, make_eval_fn(data_seed) if with_eval else None,
                   out_dir=out_dir, run_config={"task": "toy", "train": cfg.to_dict()},
                   callbacks=callbacks)


def read_metrics(out_dir: str | Path, event: str = "train") -> list[dict]:
    path = Path(out_dir) / "metrics.jsonl"
    return [r for r in (json.loads(line) for line in path.read_text().splitlines() if line.strip())
            if r.get("event") == event]


def main() -> None:
    """CLI used by subprocess tests: ``python script.py OUT_DIR STEPS SAVE_EVERY RESUME SLEEP``."""
    import sys

    out_dir, steps, save_every, resume, sleep = sys.argv[1:6]
    torch.set_num_threads(1)
    trainer = build(out_dir, steps=int(steps), save_every=int(save_every), sleep=float(sleep),
                    keep_checkpoints=3)
    final = trainer.fit(resume=resume == "1")
    print("FINAL " + json.dumps({"loss": final["loss"], "step": final["step"],
                                 "losses": trainer.loss_history}), flush=True)
