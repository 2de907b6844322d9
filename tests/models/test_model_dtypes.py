"""Whole models cast to another dtype (``model.double()``, ``model.to(torch.bfloat16)``) run on the task's float32
data and agree with the float32 model: float64 to float32 rounding, bf16 weights within bf16 rounding.

Old behaviour (probe S): MHA2nd / MHA2nd1st with bf16 weights crashed in the pseudo-inverse output map
(``pinv_rows`` returned float32, the heads were bf16); the GP regressor fed its float32 input to a float64 or
bf16 embedding ("mat1 and mat2 must have the same dtype") in training and evaluation; bare self-attention's
dynamics (``run`` / ``trajectory``, the denoise evaluation) passed float32 tokens to a float64 or bf16 J
("expected scalar type Double but found Float").
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest
import torch

from energyformer.experiment import build_model, build_task, load_run_config, resolve

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from toy_configs import toy_overrides  # noqa: E402

F64_TOL = dict(rtol=1e-5, atol=1e-6)   # float32 rounding through a toy model (seen: 3e-7 relative)
BF16_REL = 0.05                        # relative L2 error of a bf16-weight model (seen: 0.3 % .. 1.2 %)


def _setup(name: str, tmp_path, extra: tuple[str, ...] = ()):
    cfg = load_run_config(name, toy_overrides(name, tmp_path, "r", ["train.device=cpu", *extra]))
    task = build_task(cfg)
    torch.manual_seed(0)
    model = build_model(resolve(cfg, task), task)
    return task, model, copy.deepcopy(model).double(), copy.deepcopy(model).to(torch.bfloat16)


def _close_bf16(got: torch.Tensor, ref: torch.Tensor) -> None:
    assert got.dtype == torch.bfloat16 and torch.isfinite(got).all()
    err = (got.double() - ref.double()).norm() / ref.double().norm()
    assert err < BF16_REL, float(err)


@pytest.mark.parametrize("name", ["intrinsic/mha2nd", "intrinsic/mha2nd1st"])
def test_newton_heads_lm_in_float64_and_bf16(name, tmp_path):
    """The 'pinv' output map in the weights' dtype (bf16 used to crash: float32 pseudo-inverse, bf16 heads)."""
    task, m32, m64, mbf = _setup(name, tmp_path)
    for m in (m32, m64, mbf):
        m.eval()
    x, y = task.train_data.batch(0)
    with torch.no_grad():
        y32, y64, ybf = (m(x).logits for m in (m32, m64, mbf))
        assert y64.dtype == torch.float64
        torch.testing.assert_close(y64, y32.double(), **F64_TOL)
        _close_bf16(ybf, y32)
        losses = [float(task.loss(m, (x, y))[0].detach()) for m in (m32, m64, mbf)]
    assert losses[1] == pytest.approx(losses[0], rel=1e-5)
    assert losses[2] == pytest.approx(losses[0], rel=BF16_REL)
    ev32, ev64 = task.evaluate(m32), task.evaluate(m64)
    assert ev64["loss"] == pytest.approx(ev32["loss"], rel=1e-5)
    assert task.evaluate(mbf)["loss"] == pytest.approx(ev32["loss"], rel=BF16_REL)


def test_gp_regressor_takes_float32_data_in_its_own_dtype(tmp_path):
    """Forward, training loss and RMSE evaluation of float64 / bf16 regressors on the task's float32 batches
    (both used to crash in the embedding's matmul)."""
    task, m32, m64, mbf = _setup("gp/cem_t2", tmp_path)
    x, y = task.train_data.next_batch()
    assert x.dtype == torch.float32
    with torch.no_grad():
        p32, p64, pbf = m32(x), m64(x), mbf(x)
    assert p64.dtype == torch.float64
    torch.testing.assert_close(p64, p32.double(), **F64_TOL)
    _close_bf16(pbf, p32)
    losses = [float(task.loss(m, (x, y))[0].detach()) for m in (m32, m64, mbf)]
    assert losses[1] == pytest.approx(losses[0], rel=1e-5)
    assert losses[2] == pytest.approx(losses[0], rel=BF16_REL)
    ev = [task.evaluate(m) for m in (m32, m64, mbf)]
    for k in ("train_rmse", "test_rmse"):
        assert ev[1][k] == pytest.approx(ev[0][k], rel=1e-5)
        assert ev[2][k] == pytest.approx(ev[0][k], rel=BF16_REL)


def test_bare_attention_dynamics_take_float32_tokens_in_js_dtype(tmp_path):
    """The denoise evaluation's dynamics (``trajectory`` -> ``run``) on float32 tokens with a float64 / bf16 J
    (both used to crash in the energy's einsum); J drawn non-zero so the states move."""
    task, m32, m64, mbf = _setup("bare_sa/digits_denoise", tmp_path, ("model.init_std=0.3",))
    (x,) = task.train_data.next_batch()
    assert x.dtype == torch.float32
    t32, t64, tbf = (m.trajectory(x, 3) for m in (m32, m64, mbf))
    assert t64.dtype == torch.float64
    assert (t32[-1] - t32[0]).norm() > 0.1 * t32[0].norm()  # the dynamics move the tokens
    torch.testing.assert_close(t64, t32.double(), **F64_TOL)
    _close_bf16(tbf, t32)
    r64 = m64.run(x, steps=2).x
    torch.testing.assert_close(r64, t64[2])
    losses = [float(task.loss(m, (x,))[0].detach()) for m in (m32, m64, mbf)]
    assert losses[1] == pytest.approx(losses[0], rel=1e-5)
    assert losses[2] == pytest.approx(losses[0], rel=BF16_REL)
    # the whole evaluation: the states meet the float32 training memories (it crashed there, tasks/denoise.py)
    e32, e64, ebf = (task.evaluate(m) for m in (m32, m64, mbf))
    assert set(e64) == set(e32) == set(ebf) and any(k.startswith("nearest_t") for k in e32)
    for key in e32:
        assert e64[key] == pytest.approx(e32[key], rel=1e-5, abs=1e-6), key
        if key != "peak_step":   # an argmax over a near-flat curve may move in bf16
            assert ebf[key] == pytest.approx(e32[key], rel=BF16_REL, abs=BF16_REL), key
