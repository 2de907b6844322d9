"""Vector regressors with one MLP-like block: Plain / Gated / CEM-T (CEM seed Appendix E, Table 3).

Model (all variants): ``x (B, in_dim) -> Linear(in_dim, d) -> block on (B, 1, d) -> Linear(d, 1)``; the
latent state of the block has the model dimension ``d`` ("the latent state dimension is set equal to
the model dimension", Table 3 caption). The block is an MLP sublayer of the library's registry
(:data:`~energyformer.blocks.registry.MLPS`), configured by its own section ``block: {kind: ..., ...}``;
the three of Table 3, each with the residual included:

* Plain  ``{kind: gelu, norm: rms}``: pre-norm MLP ``x + W2 GELU(W1 RMSNorm(x) + b1) + b2``.
* Gated  ``{kind: swiglu}``: pre-norm SwiGLU MLP ``x + Wd(SiLU(Wg n) ∘ Wu n)``, ``n = RMSNorm(x)`` (Eq. 6).
* CEM-T  ``{kind: cem, steps: T}``: :class:`energyformer.blocks.cem.CEMMLP` (Eq. 15, 17; Algorithm 1).

Checkpoints of the earlier hand-written Plain / Gated blocks (``block.up`` / ``block.down``,
``block.gate``) load through a state-dict pre-hook that renames them.

Sizes (:data:`DEFAULT_SIZES`, the hidden size when the section sets none): ``d = 16``. The paper's counts say ``2 d h + rest ≈ 22.66K`` (CEM,
weights W, V) and ``3 d h + rest ≈ 33.94K`` (gated), i.e. ``d h ≈ 11.28K`` and a small rest;
``d = 16`` is the smallest power of two above the input dimension for which RMSNorm of the (biased)
embedding loses no information (an affine 10-dim subspace missing the origin meets each ray once),
giving ``h = 702`` (CEM), ``h = 703`` (gated) and ``h = 1023`` (plain): 22,673 / 33,953 / 33,984
parameters with RMSNorm weights.

FLOPs convention (:func:`analytic_flops`): matrix multiplications only, 2 FLOPs per multiply-add,
counted for one forward pass of a batch of :data:`FLOPS_BATCH` = 100 samples; norms, activations,
biases and the residual adds are not counted. This equals what ``torch.utils.flop_counter``'s
``FlopCounterMode`` reports (:func:`measured_flops`). Per sample, CEM-T costs ``2dh`` (gate γ, once)
``+ 4dh T`` (V and Vᵀ per step) ``+ 2·10·d + 2d`` (embedding, read-out); the paper's FLOPs
(6.73M for T = 1 and +4.35M per extra step) are consistent with a batch of ≈ 97–100 such samples
(:func:`fit_flops_batch` fits it).
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from pydantic import Field
from torch import Tensor, nn

from ..blocks.registry import MLPS, SublayerSpec, build_mlp
from ..core import ForwardContext
from ..utils.config import KindConfig
from .registry import MODELS

FLOPS_BATCH = 100
DEFAULT_DIM = 16
#: Table 3 hidden sizes by MLP kind (Plain = gelu, Gated = swiglu, CEM = cem) at d = 16
DEFAULT_SIZES = {"gelu": 1023, "swiglu": 703, "cem": 702}


class RegressorConfig(KindConfig):
    """A vector regressor: embedding, one MLP sublayer (Plain / Gated / CEM-T), linear read-out."""

    kind: Literal["regressor"] = "regressor"
    block: MLPS.type("cem") = MLPS.field("cem")
    """the MLP sublayer section: {kind: gelu, norm: rms} (Plain), swiglu (Gated), {kind: cem, steps: T}"""
    dim: int = Field(DEFAULT_DIM, ge=1)
    """model (= latent state) dimension d"""
    in_dim: int = Field(10, ge=1)
    """input dimension (set by the task)"""

    def spec(self) -> SublayerSpec:
        """The sublayer spec: width d, one token (no attention), the Table 3 hidden size as default."""
        return SublayerSpec(dim=self.dim, heads=1, causal=False, mlp_hidden=DEFAULT_SIZES.get(self.block.kind))

    @property
    def h(self) -> int:
        """The block's hidden size: its section's ``hidden``, else the Table 3 size of its kind."""
        return self.block.hidden_size(self.spec())


_OLD_NAMES = {"gelu": {"up.": "fc.", "down.": "proj."},
              "swiglu": {"gate.": "w_gate.", "up.": "w_up.", "down.": "w_down."}}


@MODELS.register("regressor", RegressorConfig)
class GPRegressor(nn.Module):
    """``Linear(in_dim, d) -> block (one token, (B, 1, d)) -> Linear(d, 1)``; forward (B, in_dim) -> (B,)."""

    def __init__(self, cfg: RegressorConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Linear(cfg.in_dim, cfg.dim)
        self.block = build_mlp(cfg.block, cfg.spec())
        self.readout = nn.Linear(cfg.dim, 1)
        self._register_load_state_dict_pre_hook(self._rename_old_block)

    def _rename_old_block(self, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
        """Old checkpoints (hand-written Plain / Gated blocks): block.up/down/gate -> the MLP kind's names."""
        renames = _OLD_NAMES.get(self.cfg.block.kind, {})
        head = prefix + "block."
        for key in [k for k in state_dict if k.startswith(head)]:
            for old, new in renames.items():
                if key[len(head):].startswith(old):
                    state_dict[head + new + key[len(head) + len(old):]] = state_dict.pop(key)
                    break

    def forward(self, x: Tensor, steps: int | None = None) -> Tensor:
        """x (B, in_dim) float -> predictions (B,); ``steps``: the energy block's step count at test time (a CEM
        block's T, ``energyformer eval --steps``; refused for blocks without descent steps)."""
        if x.dim() != 2 or x.shape[1] != self.cfg.in_dim or not x.dtype.is_floating_point:
            raise ValueError(f"x of shape {tuple(x.shape)} and dtype {x.dtype}: this model takes floating-point "
                             f"inputs (B, {self.cfg.in_dim}) (model.in_dim = {self.cfg.in_dim})")
        # the data are float32; a float64 or bf16 model takes them in its own dtype (as the vision model does)
        z = self.embed(x.to(self.embed.weight.dtype))[:, None, :]  # (B, 1, d): one token per sample
        return self.readout(self.block(z, None if steps is None else ForwardContext(steps=steps)))[:, 0, 0]  # (B,)


def analytic_flops(cfg: RegressorConfig, batch: int = FLOPS_BATCH) -> int:
    """Matmul FLOPs (2 per multiply-add) of one forward pass on ``batch`` samples (module docstring)."""
    d, h, kind = cfg.dim, cfg.h, cfg.block.kind
    io = 2 * cfg.in_dim * d + 2 * d  # embedding + read-out
    if kind == "gelu":
        core = 4 * d * h
    elif kind == "swiglu":
        core = 6 * d * h
    elif kind == "cem":
        core = 2 * d * h + 4 * d * h * cfg.block.steps  # gamma = W h once; V, V^T per step
    else:
        raise ValueError(f"analytic_flops: no formula for MLP kind {kind!r} (gelu, swiglu, cem)")
    return batch * (core + io)


def measured_flops(model: nn.Module, batch: int = FLOPS_BATCH) -> int:
    """FLOPs of ``model`` on a random batch as counted by ``torch.utils.flop_counter.FlopCounterMode``."""
    from torch.utils.flop_counter import FlopCounterMode

    x = torch.randn(batch, model.cfg.in_dim)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(x)
    return int(counter.get_total_flops())


def fit_flops_batch(per_sample: dict[str, float], paper_flops: dict[str, float]) -> float:
    """Batch size B minimising the relative squared error of ``B * per_sample[m]`` vs ``paper_flops[m]``."""
    names = [m for m in per_sample if m in paper_flops]
    if not names:
        raise ValueError("fit_flops_batch: no model appears in both per_sample and paper_flops")
    num = sum(per_sample[m] / paper_flops[m] for m in names)
    den = sum((per_sample[m] / paper_flops[m]) ** 2 for m in names)
    return num / den
