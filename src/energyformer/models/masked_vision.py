"""``MaskedCodeTransformer``: masked image modelling over a grid of image codes (MaskGIT; Hyper-SET §5.3).

Hyper-SET seed 002 §5.3 and App. D.4 follow MaskGIT (Chang et al. 2022): an image is a grid of
discrete codes, a random subset is replaced by a learned mask token, and a bidirectional transformer
predicts the codebook entry at every position (cross-entropy on the masked ones). Registered as model
kind ``masked_vision``::

    codes (B, N) in {0 .. K-1}, mask (B, N) bool
      -> ids = codes, with K (the mask token) where mask       (vocabulary K + 1: Table 15's 1025)
      -> Embedding(K + 1, D) [-> LayerNorm]                    (B, N, D)
      -> + positions: sinusoidal (Table 15), learned, or none
      -> LayerStack: ``n_layers`` layers iterated ``iterations`` times (the same stack as ``vision``)
      -> final norm -> Linear(D, K)                            logits (B, N, K)

The layers are the library's :class:`~energyformer.blocks.layer.TransformerLayer`, built exactly as in
:mod:`energyformer.models.vision` (the one ``LayerStack``, consecutive order by default), so the Transformer
(``gpt`` + ``gelu``) and Hyper-SET (``hyperset`` + ``hyperset``) are one config switch apart.

:func:`maskgit_decode` is MaskGIT's iterative decoding (Chang et al. 2022 §3.2, Eq. 3 and the cosine
mask schedule): at step t of T every still-masked position gets a sampled code, the least confident
of them are masked again so that ⌊k₀ cos(π t / 2T)⌋ stay masked (k₀ = the image's masked count), and
positions that were never masked are never touched.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor, nn

from ..core.context import ForwardContext
from ..core.precision import widest_float
from ..core.trace import Traces
from ..utils.validate import ConfigError, check_int
from .init import init_model
from .naming import name_blocks
from .output import ModelOutput
from .registry import MODELS
from .sampling import tempered
from .vision import IteratedStackConfig
from .wrapper import ID_DTYPES, SinusoidalPositions


class MaskedVisionConfig(IteratedStackConfig):
    """Masked code model: code embedding + mask token + positions, layer stack, codebook head
    (the stack keys are :class:`~energyformer.models.vision.IteratedStackConfig`'s, as for ``vision``)."""

    kind: Literal["masked_vision"] = "masked_vision"
    n_codes: int | None = Field(None, ge=2)
    """codebook size K (set by the task from its tokeniser); the mask token is id K"""
    num_tokens: int | None = Field(None, ge=1)
    """codes per image N (set by the task: the tokeniser's grid)"""
    embed_norm: bool = False
    """LayerNorm after the code embedding"""

    def check_resolved(self) -> None:
        """Raise if the task-given sizes are missing."""
        missing = [k for k in ("n_codes", "num_tokens") if getattr(self, k) is None]
        if missing:
            raise ConfigError(f"model.{missing[0]} is not set: the masked_image_modelling task sets "
                              f"{', '.join(missing)} from its tokeniser (or give them when building directly)")


@MODELS.register("masked_vision", MaskedVisionConfig)
class MaskedCodeTransformer(nn.Module):
    """Bidirectional code predictor (MaskGIT's transformer; Hyper-SET §5.3 / App. D.4, Table 15).

    ``forward(codes, mask, *, trace, stats, iterations, steps, hiddens) -> ModelOutput``; masked positions
    see the learned mask token (embedding row K) whatever their code. Parameter names: ``embed``,
    ``pos`` (learned), ``layers.{i}.attn|mlp``, ``norm``, ``head``.
    """

    param_roles = {"pos": "embedding"}

    def __init__(self, cfg: MaskedVisionConfig):
        super().__init__()
        cfg.check_resolved()
        self.cfg = cfg
        D, K, N = cfg.dim, cfg.n_codes, cfg.num_tokens
        self.embed = nn.Embedding(K + 1, D)  # row K: the learned mask token
        self.embed_norm = nn.LayerNorm(D) if cfg.embed_norm else nn.Identity()
        if cfg.positions == "learned":
            self.pos = nn.Parameter(torch.zeros(1, N, D))
        elif cfg.positions == "sinusoidal":
            self.pos_table = SinusoidalPositions(N, D)  # no parameters; exact in every dtype
        self.drop = nn.Dropout(cfg.block.dropout)
        self.layers = cfg.build_stack(causal=False)
        self.norm = nn.LayerNorm(D) if cfg.final_norm == "layer" else nn.RMSNorm(D, eps=1e-6)
        self.head = nn.Linear(D, K)
        self.reset_parameters()
        name_blocks(self)

    @property
    def mask_id(self) -> int:
        return int(self.cfg.n_codes)

    def reset_parameters(self) -> None:
        """The one init pass (:mod:`energyformer.models.init`) with ``cfg.init``; learned positions
        N(0, init_std²)."""

        def extra() -> None:
            if isinstance(getattr(self, "pos", None), nn.Parameter):
                with torch.no_grad():
                    nn.init.normal_(self.pos, std=self.cfg.init_std)

        init_model(self, self.cfg.init, self.cfg.init_std, extra)

    def input_ids(self, codes: Tensor, mask: Tensor | None) -> Tensor:
        """(B, N) codes and bool mask -> ids with the mask token K at masked positions (checked)."""
        c = self.cfg
        if codes.dim() != 2 or codes.shape[1] != c.num_tokens:
            raise ValueError(f"codes of shape {tuple(codes.shape)}: this model takes (B, {c.num_tokens})")
        if codes.dtype not in ID_DTYPES:  # uint8 codes failed in masked_fill (K past 255) or the embedding
            raise ValueError(f"codes of dtype {codes.dtype}: this model takes integer codebook indices (int64 or "
                             f"int32; B, {c.num_tokens}) in [0, {self.mask_id}] ({self.mask_id}: the mask token)")
        if mask is None:
            return codes
        if mask.shape != codes.shape or mask.dtype != torch.bool:
            raise ValueError(f"mask must be bool of the codes' shape {tuple(codes.shape)}; got "
                             f"{mask.dtype} {tuple(mask.shape)}")
        return codes.masked_fill(mask, self.mask_id)

    def forward(self, codes: Tensor, mask: Tensor | None = None, *, trace: bool = False, stats: bool = False,
                iterations: int | None = None, steps: int | None = None, hiddens: bool = False) -> ModelOutput:
        """codes (B, N) long, mask (B, N) bool -> logits (B, N, K) over the codebook."""
        ids = self.input_ids(codes, mask)
        ctx = ForwardContext(traces=Traces() if trace else None, stats={} if stats else None,
                             steps=steps, inputs=ids)
        try:
            x = self.embed_norm(self.embed(ids))  # (B, N, D)
        except IndexError as e:  # CPU; CUDA asserts on the device instead
            raise ValueError(f"codes outside [0, {self.mask_id}] (the codebook, then {self.mask_id}: the mask "
                             f"token): min {int(ids.min())}, max {int(ids.max())}") from e
        if self.cfg.positions == "learned":
            x = x + self.pos
        elif self.cfg.positions == "sinusoidal":
            x = x + self.pos_table()[None].to(x.dtype)
        states = {} if hiddens else None
        x = self.layers(self.drop(x), ctx, iterations, states)  # (B, N, D)
        logits = self.head(self.norm(x))                         # (B, N, K)
        return ModelOutput.of(logits, ctx, hiddens=states)


# ------------------------------------------------------------------------------ iterative decoding
def cosine_schedule(masked: Tensor, step: int, steps: int) -> Tensor:
    """Positions still masked after ``step`` of ``steps``: ⌊k₀ cos(π/2 · step/steps)⌋ (MaskGIT §3.2),
    exactly 0 at the last step. ``masked``: (B,) initial masked counts k₀ -> (B,) long."""
    check_int("step", step, min=0)
    check_int("steps", steps, min=1)
    if step >= steps:
        return torch.zeros_like(masked)
    return torch.floor(masked.to(widest_float(masked.device)) * math.cos(0.5 * math.pi * step / steps)).long()


def _gumbel(shape: torch.Size, generator: torch.Generator | Sequence[torch.Generator] | None,
            device: torch.device) -> Tensor:
    """Gumbel noise of ``shape`` (B, ...), drawn on the CPU (the same on every device); with one generator per row,
    row b's noise comes from ``generator[b]`` alone."""
    if isinstance(generator, Sequence):
        u = torch.stack([torch.rand(shape[1:], generator=g) for g in generator])
    else:
        u = torch.rand(shape, generator=generator)
    u = u.clamp_(1e-20, 1.0 - 1e-7)
    return (-torch.log(-torch.log(u))).to(device)


@torch.no_grad()
def maskgit_decode(model: nn.Module, codes: Tensor, mask: Tensor, steps: int = 8, temperature: float = 1.0,
                   randomize_temperature: float = 4.5,
                   generator: torch.Generator | Sequence[torch.Generator] | None = None,
                   **forward_options: Any) -> Tensor:
    """Fill the masked codes by MaskGIT's iterative decoding; (B, N) codes, (B, N) bool -> (B, N) codes.

    Each step t = 1..T: one forward pass on the current codes with the still-masked positions as mask
    tokens; a code is sampled at every still-masked position (Gumbel-max at ``temperature``; 0 =
    argmax); its confidence is its log-probability plus ``randomize_temperature`` · (1 − t/T) ·
    Gumbel noise (MaskGIT's annealed randomisation); the ⌊k₀ cos(π t / 2T)⌋ least confident stay
    masked (at least one position is filled per step while any remain) and the others keep their
    sample. Unmasked positions are returned unchanged. Noise comes from ``generator`` (CPU) so a
    seeded call is deterministic on every device; given one generator per row (B of them), each image's noise is
    its own, so an image decodes the same in any batch (one shared generator hands a row the noise of its place).
    """
    check_int("steps", steps, min=1)
    if isinstance(generator, Sequence) and len(generator) != codes.shape[0]:
        raise ValueError(f"{len(generator)} generators for {codes.shape[0]} rows: give one per row, or one in all")
    for name, value in (("temperature", temperature), ("randomize_temperature", randomize_temperature)):
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
            raise ValueError(f"{name} = {value!r}: must be a finite number >= 0")
    if mask.shape != codes.shape or mask.dtype != torch.bool:
        raise ValueError(f"mask must be bool of the codes' shape {tuple(codes.shape)}")
    k0 = mask.sum(1)                                             # (B,)
    cur = codes.masked_fill(mask, 0)                             # the masked values are never read
    still = mask.clone()
    pos = torch.arange(codes.shape[1], device=codes.device).expand_as(codes)
    for t in range(1, steps + 1):
        if not bool(still.any()):
            break
        logits = model(cur, still, **forward_options).logits.float()  # (B, N, K)
        if temperature > 0:
            logits = tempered(logits, temperature)
            sampled = (logits + _gumbel(logits.shape, generator, logits.device)).argmax(-1)  # (B, N)
        else:
            sampled = logits.argmax(-1)
        conf = F.log_softmax(logits, -1).gather(-1, sampled[..., None])[..., 0]  # (B, N)
        if randomize_temperature > 0:
            conf = conf + randomize_temperature * (1.0 - t / steps) * _gumbel(conf.shape, generator, conf.device)
        conf = conf.masked_fill(~still, float("inf"))            # fixed positions are never re-masked
        keep = torch.minimum(cosine_schedule(k0, t, steps), (still.sum(1) - 1).clamp_min(0))  # (B,)
        order = conf.argsort(dim=1, stable=True)                 # least confident first
        rank = torch.empty_like(order).scatter_(1, order, pos)   # rank of each position
        new_still = still & (rank < keep[:, None])
        fill = still & ~new_still
        cur = torch.where(fill, sampled, cur)
        still = new_still
    return torch.where(mask, cur, codes)


__all__ = ["MaskedVisionConfig", "MaskedCodeTransformer", "maskgit_decode",
           "cosine_schedule"]
