"""Optimiser kinds: each equals a hand-built torch optimiser; resume is exact for each; state by name."""

from __future__ import annotations

import json
import warnings

import pytest
import torch
from train_toys import ToyMLP, build

from energyformer.train import TrainConfig, build_optimizer, declare_param_roles, save_checkpoint
from energyformer.train.checkpoint import MANIFEST_FILE, STATE_FILE, _sha256, latest_checkpoint
from energyformer.train.optim import _fused
from energyformer.train.resume import load_optimizer_state

CPU = torch.device("cpu")
DECAYED = ["net.0.weight", "net.4.weight"]  # ToyMLP: two Linear weights
NOT_DECAYED = ["net.0.bias", "net.1.weight", "net.1.bias", "net.4.bias"]  # biases, LayerNorm


def _hand_built(kind: str, model: torch.nn.Module, lr: float, wd: float, opt_kw: dict):
    p = dict(model.named_parameters())
    groups = [{"params": [p[n] for n in DECAYED], "weight_decay": wd},
              {"params": [p[n] for n in NOT_DECAYED], "weight_decay": 0.0}]
    if kind == "adamw":
        return torch.optim.AdamW(groups, lr=lr, **opt_kw)
    if kind == "adam":
        return torch.optim.Adam(groups, lr=lr, **opt_kw)
    return torch.optim.SGD(groups, lr=lr, dampening=0.0, **opt_kw)


@pytest.mark.parametrize("opt_cfg, torch_kw", [
    ({"kind": "adamw", "betas": [0.8, 0.9], "eps": 1e-7, "weight_decay": 0.3},
     {"betas": (0.8, 0.9), "eps": 1e-7}),
    ({"kind": "adam", "betas": [0.7, 0.95], "eps": 1e-6, "weight_decay": 0.2},
     {"betas": (0.7, 0.95), "eps": 1e-6}),
    ({"kind": "sgd", "momentum": 0.9, "nesterov": True, "weight_decay": 0.05},
     {"momentum": 0.9, "nesterov": True}),
    ({"kind": "sgd"}, {}),
])
def test_each_kind_steps_like_a_hand_built_torch_optimizer(opt_cfg, torch_kw):
    torch.manual_seed(0)
    ours, theirs = ToyMLP(), ToyMLP()
    theirs.load_state_dict(ours.state_dict())
    cfg = TrainConfig(lr=0.05, optimizer=opt_cfg)
    opt = build_optimizer(ours, cfg, CPU)
    ref = _hand_built(opt_cfg["kind"], theirs, 0.05, cfg.optimizer.weight_decay, torch_kw)
    assert type(opt) is type(ref)
    g = torch.Generator().manual_seed(1)
    for _ in range(3):  # several steps: moments / momentum buffers included
        for a, b in zip(ours.parameters(), theirs.parameters()):
            a.grad = torch.randn(a.shape, generator=g)
            b.grad = a.grad.clone()
        opt.step()
        ref.step()
    for (name, a), b in zip(ours.named_parameters(), theirs.parameters()):
        assert torch.equal(a, b), name
    # and the decayed set really differs from an undecayed run (the test would notice a mix-up)
    if cfg.optimizer.weight_decay > 0:
        assert not torch.equal(ours.net[0].weight, ToyMLP().net[0].weight)


def test_fused_kernel_on_cuda_only_by_default():
    assert _fused(None, torch.device("cuda", 0)) == {"fused": True}
    assert _fused(None, CPU) == {}
    assert _fused(False, torch.device("cuda", 0)) == {}
    assert _fused(True, CPU) == {"fused": True}


STEPS = 12
RESUME_CASES = {
    "sgd-nesterov/warmup_linear": dict(optimizer={"kind": "sgd", "momentum": 0.9, "nesterov": True,
                                                  "weight_decay": 1e-3},
                                       schedule={"kind": "warmup_linear", "warmup": 0.2}),
    "adam/constant": dict(optimizer={"kind": "adam", "weight_decay": 1e-3},
                          schedule={"kind": "constant", "warmup": 0.1}),
    "adamw/warmup_cosine+multipliers": dict(optimizer="adamw", lr_multipliers={"norm": 0.5}),
}


def _crash_at(trainer, n):
    inner, calls = trainer.loss_fn, {"n": 0}

    def loss_fn(model, batch):
        calls["n"] += 1
        if calls["n"] == n:
            raise RuntimeError("crash")
        return inner(model, batch)

    trainer.loss_fn = loss_fn


@pytest.mark.parametrize("case", list(RESUME_CASES))
def test_resume_is_exact_for_each_kind(tmp_path, case):
    kw = RESUME_CASES[case]
    ref = build(tmp_path / "ref", steps=STEPS, save_every=4, **kw)
    ref.fit()
    t1 = build(tmp_path / "run", steps=STEPS, save_every=4, **kw)
    _crash_at(t1, 11)
    with pytest.raises(RuntimeError, match="crash"):
        t1.fit()
    t2 = build(tmp_path / "run", steps=STEPS, save_every=4, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # same config: nothing to warn about
        t2.fit(resume=True)
    assert t2.loss_history == ref.loss_history[8:]  # bit for bit, every step after the checkpoint
    for (name, a), b in zip(t2.model.state_dict().items(), ref.model.state_dict().values()):
        assert torch.equal(a, b), name
    assert type(t2.optimizer).__name__.lower() == {"sgd": "sgd", "adam": "adam",
                                                   "adamw": "adamw"}[case.split("/")[0].split("-")[0]]


def _rewrite_state(ckpt, edit):
    """Edit a checkpoint's state.pt in place and re-sign its manifest."""
    path = ckpt / STATE_FILE
    state = torch.load(path, weights_only=True)
    edit(state)
    torch.save(state, path)
    manifest = json.loads((ckpt / MANIFEST_FILE).read_text())
    manifest["files"][STATE_FILE] = {"size": path.stat().st_size, "sha256": _sha256(path)}
    (ckpt / MANIFEST_FILE).write_text(json.dumps(manifest))


def test_checkpoint_of_the_previous_layout_resumes_exactly_with_a_warning(tmp_path):
    ref = build(tmp_path / "ref", steps=STEPS, save_every=4)
    ref.fit()
    t1 = build(tmp_path / "run", steps=STEPS, save_every=4)
    _crash_at(t1, 11)
    with pytest.raises(RuntimeError):
        t1.fit()

    def to_legacy(state):
        # the flat train config and the two AdamW groups (by ndim) written before roles existed
        cfg = state["train_config"]
        for key in ("betas", "eps", "weight_decay"):
            cfg[key] = cfg["optimizer"][key]
        cfg["warmup"], cfg["final_lr_factor"] = cfg["schedule"]["warmup"], cfg["schedule"]["final_lr_factor"]
        for key in ("optimizer", "schedule", "no_decay_roles", "lr_multipliers"):
            del cfg[key]
        del state["callbacks"]
        opt = state["optimizer"]
        ids = {n: i for g in opt["param_groups"] for n, i in zip(g["names"], g["params"])}
        base = {k: v for k, v in opt["param_groups"][0].items()
                if k not in ("params", "names", "role", "lr_multiplier", "weight_decay")}
        new_ids = {n: i for i, n in enumerate(DECAYED + NOT_DECAYED)}
        opt["state"] = {new_ids[n]: opt["state"][ids[n]] for n in DECAYED + NOT_DECAYED}
        opt["param_groups"] = [
            {**base, "weight_decay": 0.1, "params": [new_ids[n] for n in DECAYED]},
            {**base, "weight_decay": 0.0, "params": [new_ids[n] for n in NOT_DECAYED]}]

    _rewrite_state(latest_checkpoint(tmp_path / "run"), to_legacy)
    t2 = build(tmp_path / "run", steps=STEPS, save_every=4)
    with pytest.warns(UserWarning, match=r"changed train config \(the checkpoint's train config uses "
                                         r"the layout before optimizer/schedule kinds"):
        t2.fit(resume=True)
    assert t2.loss_history == ref.loss_history[8:]  # moments matched to the right parameters


def test_changed_optimizer_kind_restarts_its_state_with_a_warning(tmp_path):
    build(tmp_path, steps=4, save_every=4).fit()
    t = build(tmp_path, steps=6, optimizer={"kind": "sgd", "momentum": 0.5})
    with pytest.warns(UserWarning) as rec:
        final = t.fit(resume=True)
    text = " | ".join(str(w.message) for w in rec)
    assert "optimizer.kind: 'adamw' -> 'sgd'" in text and "optimizer.betas" not in text
    assert "train.optimizer.kind changed from 'adamw' to 'sgd': the optimizer state starts fresh" in text
    assert final["step"] == 6


def test_changed_group_layout_keeps_each_parameters_state():
    torch.manual_seed(0)
    model = ToyMLP()
    opt = build_optimizer(model, TrainConfig(), CPU)
    for _ in range(2):
        model(torch.randn(4, 8)).pow(2).mean().backward()
        opt.step()
    saved = opt.state_dict()
    before = {n: opt.state[p]["exp_avg"].clone() for n, p in model.named_parameters()}
    # a later version declares the LayerNorm gain a "weight" and the first bias a "position":
    declare_param_roles(model.net[1], weight="weight")
    declare_param_roles(model.net[0], bias="position")
    opt2 = build_optimizer(model, TrainConfig(), CPU)
    assert [g["role"] for g in opt2.param_groups] == ["weight", "norm", "bias", "position"]
    assert load_optimizer_state(opt2, saved, model, "test") == []
    for n, p in model.named_parameters():
        assert torch.equal(opt2.state[p]["exp_avg"], before[n]), n
    # hyper-parameters are the current config's, not the checkpoint's
    assert {g["role"]: g["weight_decay"] for g in opt2.param_groups}["weight"] == 0.1
    assert {g["role"]: g["weight_decay"] for g in opt2.param_groups}["position"] == 0.0


def test_state_is_saved_with_group_names(tmp_path):
    model = ToyMLP()
    opt = build_optimizer(model, TrainConfig(), CPU)
    path = save_checkpoint(tmp_path, 1, model, opt)
    groups = torch.load(path / STATE_FILE, weights_only=True)["optimizer"]["param_groups"]
    assert [g["role"] for g in groups] == ["weight", "norm", "bias"]
    assert [n for g in groups for n in g["names"]] == DECAYED + ["net.1.weight", "net.1.bias",
                                                                  "net.0.bias", "net.4.bias"]
