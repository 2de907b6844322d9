"""One experiment = a task, a model and a training config, loaded from YAML with dotted overrides.

    config -> task (data, model) -> Trainer -> checkpoints + metrics -> analysis/report  (DESIGN.md)
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .models.lm import CausalLM, ModelConfig
from .models.params import count_params
from .tasks.lm import LMDataConfig, LMTask, lm_loss
from .train import TrainConfig, Trainer, seed_everything
from .utils.config import load_config, to_dict
from .utils.validate import check_choice


@dataclass
class RunConfig:
    """A whole run. ``model.vocab_size`` is set from the tokenizer (the resolved config records it)."""

    name: str = "run"
    task: str = "lm"
    out_dir: str = "runs"
    model: ModelConfig = field(default_factory=ModelConfig)
    data: LMDataConfig = field(default_factory=LMDataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def __post_init__(self):
        check_choice("task", self.task, ("lm",))

    @property
    def run_dir(self) -> Path:
        return Path(self.out_dir) / self.name


def configs_dir() -> Path:
    """The repository's ``configs/`` folder (next to ``src/``), or ``./configs``."""
    here = Path(__file__).resolve().parents[2] / "configs"
    return here if here.is_dir() else Path("configs")


def resolve_config_path(name: str) -> Path:
    """A YAML path, or a config name like ``lm/llama`` looked up under ``configs/``."""
    p = Path(name)
    if p.suffix in (".yaml", ".yml") and p.exists():
        return p
    cand = configs_dir() / (name if name.endswith((".yaml", ".yml")) else f"{name}.yaml")
    if cand.exists():
        return cand
    known = sorted(str(q.relative_to(configs_dir()).with_suffix("")) for q in configs_dir().rglob("*.yaml"))
    raise FileNotFoundError(f"config {name!r} not found (a YAML path, or one of: {', '.join(known)})")


def load_run_config(name_or_path: str | None, overrides=()) -> RunConfig:
    src = None if name_or_path is None else resolve_config_path(name_or_path)
    return load_config(RunConfig, src, list(overrides))


def build_lm(cfg: RunConfig, task: LMTask) -> CausalLM:
    if cfg.model.vocab_size != task.vocab_size:
        cfg.model = dataclasses.replace(cfg.model, vocab_size=task.vocab_size)
    seed_everything(cfg.train.seed)
    return CausalLM(cfg.model)


@dataclass
class RunResult:
    name: str
    run_dir: Path
    params: dict[str, int]
    final: dict[str, float]
    loss_history: list[float]
    tokens_per_s: float
    seconds: float
    task: LMTask | None = None  # the task the run trained on (data, tokenizer), for reports


def check_run_dir(cfg: RunConfig, resume: bool, overwrite: bool = False) -> None:
    """Refuse to start a new run on top of an old one's checkpoints (unless resuming or overwriting)."""
    old = sorted(cfg.run_dir.glob("ckpt-*")) if cfg.run_dir.is_dir() else []
    if not old or resume:
        return
    if overwrite:
        shutil.rmtree(cfg.run_dir)
        return
    raise FileExistsError(
        f"{cfg.run_dir} already holds checkpoints ({old[-1].name}): use --resume to continue it, "
        f"--set name=OTHER or --out DIR for a new run, or delete it")


def run_experiment(cfg: RunConfig, resume: bool = False, overwrite: bool = False) -> RunResult:
    """Train (or resume) one run and return its summary. ``overwrite`` deletes an old run's directory."""
    check_run_dir(cfg, resume, overwrite)
    task = LMTask(cfg.data, seed=cfg.train.seed)
    model = build_lm(cfg, task)
    trainer = Trainer(model, cfg.train, lm_loss, task.train_data, task.eval_fn("validation"),
                      out_dir=cfg.run_dir, run_config=to_dict(cfg))
    t0 = time.perf_counter()
    final = trainer.fit(resume=resume)
    secs = time.perf_counter() - t0
    tokens = final.get("tokens", len(trainer.loss_history) * cfg.data.batch_size * cfg.data.seq_len)
    return RunResult(cfg.name, cfg.run_dir, count_params(model), final, list(trainer.loss_history),
                     float(tokens) / max(secs, 1e-9), secs, task)


def load_trained(run_dir: str | Path, device: str | torch.device = "cpu") -> tuple[RunConfig, CausalLM, LMTask]:
    """Rebuild a trained LM from its run directory (resolved config + newest valid checkpoint)."""
    from .train import load_model_weights

    run_dir = Path(run_dir)
    cfg_path = run_dir / "config.yaml"
    if not cfg_path.exists():
        raise FileNotFoundError(f"{cfg_path} not found: is {run_dir} a run directory?")
    cfg = load_config(RunConfig, cfg_path)
    task = LMTask(cfg.data, seed=cfg.train.seed)
    model = CausalLM(dataclasses.replace(cfg.model, vocab_size=task.vocab_size))
    load_model_weights(model, run_dir)
    return cfg, model.to(device).eval(), task
