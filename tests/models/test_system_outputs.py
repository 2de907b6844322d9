"""A refactor must not change what any system computes (issue 19: "behaviour unchanged").

``tests/fixtures/system_outputs.safetensors`` holds, for one tiny fixed-seed model per system and
variant (CEM, intrinsic attentions, Hyper-SET on Sudoku and images, ET, CRATE-T, EqT, bare SA,
recycled and factored models), its float64 weights (perturbed so zero-initialised parts matter) and
every tensor its forward returns on one fixed batch, written by
``tests/fixtures/make_system_outputs.py`` from the code before the core-seams refactor. Each model is
rebuilt from today's ``configs/`` through the task registry, loads the stored weights strictly, and
must give the same outputs and loss to 1e-10. One deliberate change since: the models with rotary positions
(llama, eqt, eqt_baseline) form RoPE's angles in float64 for a float64 model (``blocks.attention.rope_cos_sin``),
which moved their logits by at most 5.2e-9; their outputs were stored again then, their weights kept. And every
task's loss keeps a float64 model's logits in float64 (``core.precision.at_least_float32``; ``.float()`` had cut
them to float32), which moved the stored losses by at most 5.3e-7 (float32's rounding of them); the losses alone
were stored again, every weight and other output kept bit for bit. And the step network's state RMSNorm takes
float32's epsilon in every dtype (``core.stepsize``; torch's default, the dtype's own, was 2.2e-16 for a float64
model), which moved the four Hyper-SET cases with ``state_norm: true`` (sudoku_hyperset, img_hyperset,
img_hyperset_lora, mim_hyperset) by at most 3.7e-5 in their logits; their outputs were stored again, their weights kept.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
sys.path.insert(0, str(FIXTURES))
from system_cases import CASES, build_case, forward_outputs  # noqa: E402

DATA = load_file(str(FIXTURES / "system_outputs.safetensors"))


@pytest.mark.parametrize("name", list(CASES))
def test_outputs_unchanged(name):
    task, model, batch = build_case(name)
    prefix = f"{name}/param/"
    state = {k[len(prefix):]: v for k, v in DATA.items() if k.startswith(prefix)}
    assert state, f"no stored weights for {name}"
    model.load_state_dict(state, strict=True)
    got = forward_outputs(task, model, batch)
    want = {k[len(f"{name}/out/"):]: v for k, v in DATA.items() if k.startswith(f"{name}/out/")}
    assert sorted(got) == sorted(want)
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=1e-10, atol=1e-10, msg=lambda m: f"{name} {k}: {m}")


def test_perturbation_matters():
    """The stored weights are not the fresh initialisation, so the comparison can fail."""
    task, model, batch = build_case("sudoku_hyperset")
    fresh = forward_outputs(task, model, batch)["call0.logits"]
    assert not torch.allclose(fresh, DATA["sudoku_hyperset/out/call0.logits"])
