"""Instrumented Sudoku training: where does Hyper-SET's initial plateau come from? (issue 20, item 2)

    PYTHONPATH=src python scripts/hyperset_plateau_probe.py hyperset/sudoku_hyperset --steps 600 \
        --out docs/results/hyperset/plateau/hyperset_d64_L8.json [--set KEY=VALUE ...]

Builds the run config's task and model exactly as ``energyformer train`` does (same optimiser, parameter
groups, schedule, clipping), trains ``--steps`` steps in a plain loop and logs, every ``--probe-every``
steps, on one fixed training batch (the learning-rate schedule is the config's, over ``train.steps``):

* loss and cell accuracy on the blanks;
* per parameter group (embedding, positions, W, D, step-size network, norms, head, other): the gradient
  norm before clipping and the relative update ‖Δθ‖/‖θ‖ of the optimiser step;
* per iteration t of the layer (forward hooks on the sublayers): the RMS of the token state x_t, the RMS
  of the attention and feed-forward updates, E_ATTN and E_FF at x_t (Hyper-SET; per board), the mean
  |α_t| and |γ_t| (Hyper-SET) and the mean row-softmax entropy of the attention scores relative to
  log N (1 = uniform attention; Hyper-SET's symmetric scores, and the transformer's q·k scores), and the
  mean cosine between the token states of a board (1 = every token the same).

Writes one JSON file (the config, the device, the per-step records). Not a test and not a benchmark:
a measurement script whose outputs are committed under ``docs/results/hyperset/plateau/``.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from pathlib import Path

import torch
import torch.nn.functional as F

GROUPS = (("embed", "embedding"), ("pos", "positions"), ("attn.energy.proj", "W"),
          ("mlp.energy.proj", "D"), ("attn.solver.step_size", "step_net"), ("gain", "sphere_gain"),
          ("norm", "norms"), ("head", "head"), ("attn", "attn_other"), ("mlp", "mlp_other"))


def group_of(name: str) -> str:
    for key, label in GROUPS:
        if key in name:
            return label
    return "other"


def _norms(model) -> dict[str, float]:
    acc: dict[str, float] = {}
    for n, p in model.named_parameters():
        if p.grad is not None:
            g = group_of(n)
            acc[g] = acc.get(g, 0.0) + float(p.grad.detach().float().pow(2).sum())
    return {k: math.sqrt(v) for k, v in acc.items()}


def _entropy(scores: torch.Tensor) -> float:
    """Mean row-softmax entropy / log N of scores (..., N, N)."""
    p = scores.float().softmax(-1)
    h = -(p * p.clamp_min(1e-30).log()).sum(-1)
    return float(h.mean() / math.log(scores.shape[-1]))


class Recorder:
    """Forward hooks on every attention and MLP sublayer: per-iteration statistics of one forward."""

    def __init__(self, model):
        self.rows: list[dict] = []
        self.on = False
        self.handles = []
        for name, m in model.named_modules():
            if name.endswith(".attn") or name.endswith(".mlp"):
                self.handles.append(m.register_forward_hook(self._hook(name.rsplit(".", 1)[-1])))

    def _hook(self, part: str):
        def hook(mod, args, out):
            if not self.on:
                return
            x = args[0].detach()
            ctx = args[1] if len(args) > 1 else None
            it = getattr(ctx, "iteration", 0) if ctx is not None else 0
            while len(self.rows) <= it:
                self.rows.append({})
            row = self.rows[it]
            row[f"{part}_in_rms"] = float(x.float().pow(2).mean().sqrt())
            row[f"{part}_update_rms"] = float((out.detach() - x).float().pow(2).mean().sqrt())
            if part == "attn":  # mean cosine between the tokens of a board (1: every token the same)
                u = F.normalize(x.float(), dim=-1)
                n = u.shape[1]
                row["token_cos"] = float(((u @ u.transpose(1, 2)).sum((1, 2)) - n).mean() / (n * (n - 1)))
            energy = getattr(mod, "energy", None)
            if energy is not None and hasattr(mod, "energy_at"):  # Hyper-SET sublayer
                row[f"E_{part}"] = float(mod.energy_at(x, it).sum(-1).mean())
            if part == "attn":
                if energy is not None and hasattr(energy, "spherical"):
                    z = energy.spherical(x)  # (B, H, N, p)
                    row["attn_entropy"] = _entropy(energy.beta * z @ z.transpose(-1, -2))
                else:
                    q, k = self._qk(mod, x)
                    if q is not None:
                        row["attn_entropy"] = _entropy(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]))
        return hook

    @staticmethod
    def _qk(mod, x):
        """Queries and keys (B, H, N, p) of the baselines (gpt: fused c_attn; llama: wq, wk, no RoPE)."""
        h = mod.norm(x)
        if hasattr(mod, "c_attn"):
            q, k, _ = mod.c_attn(h).chunk(3, dim=-1)
        elif hasattr(mod, "wq"):
            q, k = mod.wq(h), mod.wk(h)
        else:
            return None, None
        return [t.unflatten(-1, (mod.heads, -1)).transpose(1, 2) for t in (q, k)]


def step_sizes(model, batch) -> list[dict]:
    """Mean |α_t|, |γ_t| and mean α_t, γ_t per iteration from the Hyper-SET step-size network."""
    from energyformer.blocks.hyperset import HyperSETAttention
    from energyformer.core.stepsize import NetworkStepSize

    att = next((m for m in model.modules() if isinstance(m, HyperSETAttention)), None)
    if att is None or not isinstance(att.step, NetworkStepSize):
        return []
    with torch.no_grad():
        x0 = model.drop(model.embed(batch) + (model.pos(torch.arange(batch.shape[1])) if model.pos is not None else 0))
        out = []
        for t in range(model.cfg.iterations):
            cond = x0  # condition 'input': x0 at every t; 'layer' / 'iterate': x0 at t = 0 only
            a, g = att.step(t, cond, cond).chunk(2, dim=-1)
            out.append({"alpha_abs": float(a.abs().mean()), "alpha_mean": float(a.mean()),
                        "gamma_abs": float(g.abs().mean()), "gamma_mean": float(g.mean())})
    return out


def main(argv=None) -> int:
    from energyformer.experiment import build_model, build_task, load_run_config, resolve
    from energyformer.train.optim import build_optimizer
    from energyformer.train.schedule import LRSchedule

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("config")
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--probe-every", type=int, default=25)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", required=True)
    p.add_argument("--set", dest="overrides", action="append", default=[])
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    cfg = load_run_config(a.config, a.overrides)
    task = build_task(cfg, rank=0)
    cfg = resolve(cfg, task)
    model = build_model(cfg, task)
    tc = cfg.train
    opt = build_optimizer(model, tc, torch.device("cpu"))
    sched = LRSchedule(opt, tc.lr, tc.steps, tc.schedule)  # the config's schedule, cut at --steps
    probe_p, probe_t = task.train_data.next_batch()
    rec = Recorder(model)
    records, t0 = [], time.perf_counter()
    for step in range(a.steps + 1):
        if step % a.probe_every == 0 or step == a.steps:
            model.eval()
            rec.rows, rec.on = [], True
            with torch.no_grad():
                logits = model(probe_p).logits
            rec.on = False
            blanks = probe_t >= 0
            acc = float((logits.argmax(-1) == probe_t)[blanks].float().mean())
            ploss = float(F.cross_entropy(logits.flatten(0, 1), probe_t.flatten(), ignore_index=-100))
            records.append({"step": step, "probe_loss": ploss, "probe_cell_acc": acc,
                            "iterations": rec.rows, "step_sizes": step_sizes(model, probe_p)})
            model.train()
            _write(a, records, t0)
            print(f"step {step}: probe loss {ploss:.4f}, cell acc {acc:.3f} ({time.perf_counter() - t0:.0f} s)",
                  flush=True)
        if step == a.steps:
            break
        batch = task.train_data.next_batch()
        loss, _ = task.loss(model, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = _norms(model)
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        if tc.grad_clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
        opt.step()
        sched.step()
        upd: dict[str, list[float]] = {}
        for n, q in model.named_parameters():
            g = group_of(n)
            d, w = float((q.detach() - before[n]).pow(2).sum()), float(before[n].pow(2).sum())
            u = upd.setdefault(g, [0.0, 0.0])
            u[0] += d
            u[1] += w
        rel = {g: math.sqrt(d) / max(math.sqrt(w), 1e-30) for g, (d, w) in upd.items()}
        row = {"step": step, "loss": float(loss.detach()), "grad_norm": gnorm, "rel_update": rel}
        if step % a.probe_every == 0:
            records[-1]["train"] = row
        else:
            records.append({"step": step, "loss": float(loss.detach())})
    print(f"wrote {a.out} ({_write(a, records, t0)} s)")
    return 0


def _write(a, records: list[dict], t0: float) -> float:
    """Write the JSON so far (a partial file is usable when a run is stopped); returns the seconds."""
    seconds = round(time.perf_counter() - t0, 1)
    out = {"config": a.config, "overrides": a.overrides, "steps": a.steps, "device": "cpu",
           "threads": a.threads, "torch": torch.__version__, "platform": platform.platform(),
           "seconds": seconds, "records": records}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out))
    return seconds


if __name__ == "__main__":
    raise SystemExit(main())
