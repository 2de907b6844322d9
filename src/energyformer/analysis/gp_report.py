"""Metric hooks of the ``cem-gp`` study (``studies/cem-gp.yaml``; its page is declared there).

:func:`fit` (train / test RMSE, the last epoch's training loss), :func:`size` (parameters and matmul FLOPs
of one forward pass of 100 samples) and :func:`recursion` (CEM blocks: what the trained block does inside
its recursion on test inputs); the claim reducer :func:`worst_rise`. The seed's Table 3 (Appendix E) is the
study's ``paper:`` rows; nothing here is typed in from a paper or a run.
"""

from __future__ import annotations

import math

import torch

#: Table 3's six models, in its order
MODELS = ("Plain", "Gated", "CEM-T1", "CEM-T2", "CEM-T4", "CEM-T8")


# ----------------------------------------------------------------------------- metric hooks
def fit(run) -> dict[str, float]:
    """Metric hook: final train / test RMSE and the mean training loss of the last epoch."""
    res, task = run.result, run.config.task
    per_epoch = math.ceil(task.n_train / task.batch_size)
    last = res.loss_history[-per_epoch:]
    return {"train_rmse": res.final["eval/train_rmse"], "test_rmse": res.final["eval/test_rmse"],
            "final_train_loss": sum(last) / max(len(last), 1)}


def size(run) -> dict:
    """Metric hook: exact parameters and matmul FLOPs (analytic and FlopCounterMode) of the run's regressor."""
    from ..models.params import count_params
    from ..models.regressor import GPRegressor, analytic_flops, measured_flops

    cfg = run.config.model
    torch.manual_seed(0)
    net = GPRegressor(cfg)
    return {"params": count_params(net)["total"], "flops": analytic_flops(cfg), "flops_measured": measured_flops(net),
            "hidden": cfg.h, "dim": cfg.dim, "block": cfg.block.kind, "steps": getattr(cfg.block, "steps", 1)}


def recursion(run, n: int = 500) -> dict | None:
    """Metric hook (CEM blocks): on ``n`` test inputs, the mean energy ξ(u_t | h) per step, the mean step
    norm ‖x_{t+1} − x_t‖, the state norm ‖x‖ before and after the block and the step size η in use."""
    from ..core import ForwardContext

    if run.config.model.block.kind != "cem":
        return None
    _, model, task = run.trained()
    ctx = ForwardContext(traces={})
    with torch.no_grad():
        z = model.embed(task.data.x_test[:n].to(next(model.parameters()).device))[:, None, :]
        out = model.block(z, ctx)
    trace = next(iter(ctx.traces.values()))
    eta = model.block.solver.step_size(0, z, z)
    return {"energy": trace.mean_energy(), "step_norm": trace.mean_step_norm(),
            "state_norm_start": float(z.norm(dim=-1).mean()), "state_norm_end": float(out.norm(dim=-1).mean()),
            "eta": float(eta.detach() if isinstance(eta, torch.Tensor) else eta)}


def worst_rise(labels: list[str], values: list[float]) -> float | None:
    """Reducer over the model axis: the larger test-RMSE rise of the steps T2 -> T4 and T4 -> T8 (positive:
    a step beyond T2 made it worse); None unless all three ran."""
    v = dict(zip(labels, values))
    if not {"CEM-T2", "CEM-T4", "CEM-T8"} <= set(v):
        return None
    return max(v["CEM-T4"] - v["CEM-T2"], v["CEM-T8"] - v["CEM-T4"])
