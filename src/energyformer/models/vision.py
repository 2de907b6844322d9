"""``VisionTransformer``: images -> patches -> [CLS] + positions -> the layer stack -> a class head.

The image wrapper of every block kind (x-transformers' ``ViTransformerWrapper``; Dosovitskiy et al.
2021, "An image is worth 16x16 words"), registered as model kind ``vision``::

    images (B, C, H, W)
      -> patchify: N = (H/p)(W/p) patches of C·p·p values (row-major, :func:`~energyformer.data.images.patchify`)
      -> [LayerNorm] -> Linear(C·p·p, D) -> [LayerNorm]          (``embed_norm``: the Hyper-SET image code)
      -> prepend a learned [CLS] token (``pool: cls``)             (B, N + 1, D)
      -> + positions: sinusoidal (Hyper-SET App. D.3), learned, or none
      -> LayerStack: ``n_layers`` layers iterated ``iterations`` times (recurrent depth, shared weights)
      -> final norm -> Linear(D, n_classes) on the [CLS] token (or the mean token, ``pool: mean``)

The layers are the library's :class:`~energyformer.blocks.layer.TransformerLayer` (an attention kind
and an MLP kind from the registries), so a baseline and an energy model differ by one config switch:
``gpt`` + ``gelu`` (pre-norm transformer), ``hyperset`` + ``hyperset`` (Hyper-SET), ``et`` + ``identity``
(Energy Transformer), ``crate`` + ``ista`` (CRATE / CRATE-T). Attention is always bidirectional.

**Depth order** with several distinct layers and L iterations (Hyper-SET Fig. 4, the layer-iteration
trade-off): ``stack_order: consecutive`` runs layer 1 L times, then layer 2 L times, ... (the released
Hyper-SET image code; every layer sees iteration indices 0 .. L-1); ``cycle`` runs the stack
(1, 2, ..., 1, 2, ...) L times; both are orders of the one :class:`~energyformer.models.backbone.LayerStack`.
With one layer both are the same.

Initialisation (``init``): ``torch`` (default) keeps PyTorch's default Linear initialisation,
U(±1/√fan_in), and draws the [CLS] token from N(0, 1), as the Hyper-SET authors' image code does
for every model it compares; ``normal`` is the token models' GPT-style N(0, init_std²) with a
LeCun-normal patch projection. At the small widths of CPU-scale runs (d ≈ 100) N(0, 0.02²) makes
every residual branch and the head tiny at the start: a one-layer pre-norm transformer (d = 96,
7x7 patches of MNIST, Adam 1e-3) is at a training loss of 1.81 after 150 steps with it and 1.21
with PyTorch's default (a linear classifier on the pixels: 0.89), measured while building this module. Learned positions are N(0, init_std²). Afterwards every module's own
``after_model_init()`` (zero-initialised step-size networks) and ``reset_energy_parameters()`` (energies
whose parameters have their own scale, e.g. ET's Q/K at 0.002) run, so a block's own initialisation survives.
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field, model_validator
from torch import Tensor, nn

from ..blocks.layer import BlockConfig
from ..core.context import ForwardContext
from ..core.trace import Traces
from ..data.images import patchify
from ..utils.validate import ConfigError, check_divides
from .config import StackConfig
from .init import init_model
from .naming import name_blocks
from .output import ModelOutput
from .registry import MODELS
from .wrapper import SinusoidalPositions


def _vit_block() -> BlockConfig:
    return BlockConfig(attention="gpt", mlp="gelu")


class IteratedStackConfig(StackConfig):
    """The stack keys of the image models (``vision``, ``masked_vision``): the one
    :class:`~energyformer.models.config.StackConfig` with the Hyper-SET image code's defaults (one
    layer, consecutive order, sinusoidal positions, LayerNorm, PyTorch's init, GPT + GELU sublayers)."""

    n_layers: int = Field(1, ge=1)
    """distinct layers (Hyper-SET: 1)"""
    iterations: int = Field(1, ge=1)
    """passes through the layers with shared weights (Hyper-SET images: 12)"""
    stack_order: Literal["cycle", "consecutive"] = "consecutive"
    """with n_layers > 1: each layer L times in turn (Hyper-SET image code) or the stack L times"""
    positions: Literal["sinusoidal", "learned", "none"] = "sinusoidal"
    """absolute positions added to the input tokens (Hyper-SET App. D.3: sinusoidal)"""
    final_norm: Literal["layer", "rms"] = "layer"
    """norm before the head (the Hyper-SET image code: LayerNorm)"""
    init: Literal["torch", "normal"] = "torch"
    """'torch': PyTorch's default Linear init and a N(0, 1) [CLS] token (the Hyper-SET image code, every
    model); 'normal': N(0, init_std²) Linear weights and [CLS] (the token models' GPT-style init)"""
    block: BlockConfig = Field(default_factory=_vit_block)
    """the sublayers of every layer (default: pre-LayerNorm GPT attention + GELU MLP)"""


class VisionConfig(IteratedStackConfig):
    """Image classifier over patches: patch embedding, [CLS], positions, layer stack, class head."""

    kind: Literal["vision"] = "vision"
    image_size: int | None = Field(None, ge=1)
    """side of the (square) input images (set by the task from its data set)"""
    channels: int | None = Field(None, ge=1)
    """input channels (set by the task)"""
    n_classes: int | None = Field(None, ge=2)
    """number of classes (set by the task)"""
    patch_size: int = Field(4, ge=1)
    """side p of the square patches; must divide image_size (Hyper-SET CIFAR: 4, an 8x8 grid)"""
    pool: Literal["cls", "mean"] = "cls"
    """classify the learned [CLS] token (Hyper-SET App. D.3) or the mean of the final tokens"""
    embed_norm: bool = False
    """LayerNorm before and after the patch projection (the Hyper-SET image code's embedding)"""

    @model_validator(mode="after")
    def _check_image(self):
        if self.image_size is not None:
            check_divides("patch_size", self.patch_size, self.image_size, "image_size =")
        return self

    def check_resolved(self) -> None:
        """Raise if the task-given sizes are missing (a model needs them)."""
        missing = [k for k in ("image_size", "channels", "n_classes") if getattr(self, k) is None]
        if missing:
            raise ConfigError(f"model.{missing[0]} is not set: the image_classification task sets "
                              f"{', '.join(missing)} from its data set (or give them when building directly)")

    @property
    def num_patches(self) -> int:
        self.check_resolved()
        return (self.image_size // self.patch_size) ** 2

    @property
    def num_tokens(self) -> int:
        """Sequence length the layers see: patches (+ 1 for [CLS])."""
        return self.num_patches + (self.pool == "cls")


class PatchEmbedding(nn.Module):
    """(B, C, H, W) -> (B, N, D): non-overlapping p x p patches, [LayerNorm], Linear, [LayerNorm]."""

    def __init__(self, channels: int, patch_size: int, dim: int, norm: bool = False):
        super().__init__()
        f = channels * patch_size * patch_size
        self.patch_size = patch_size
        self.norm_in = nn.LayerNorm(f) if norm else nn.Identity()
        self.proj = nn.Linear(f, dim)
        self.norm_out = nn.LayerNorm(dim) if norm else nn.Identity()

    def forward(self, images: Tensor) -> Tensor:
        x = patchify(images, self.patch_size)  # (B, N, C*p*p)
        return self.norm_out(self.proj(self.norm_in(x)))  # (B, N, D)


@MODELS.register("vision", VisionConfig)
class VisionTransformer(nn.Module):
    """Image classifier: patches + [CLS] + positions -> layer stack (iterated) -> norm -> head.

    ``forward(images, *, trace, stats, iterations, steps, hiddens) -> ModelOutput``; ``iterations``
    overrides the number of passes (test-time depth), ``steps`` the step budget of every energy block.
    Parameter names: ``embed.*``, ``cls_token``, ``pos`` (learned), ``layers.{i}.attn|mlp``, ``norm``,
    ``head``.
    """

    param_roles = {"cls_token": "embedding", "pos": "embedding"}

    def __init__(self, cfg: VisionConfig):
        super().__init__()
        cfg.check_resolved()
        self.cfg = cfg
        D = cfg.dim
        self.embed = PatchEmbedding(cfg.channels, cfg.patch_size, D, cfg.embed_norm)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, D)) if cfg.pool == "cls" else None
        n = cfg.num_tokens
        if cfg.positions == "learned":
            self.pos = nn.Parameter(torch.zeros(1, n, D))
        elif cfg.positions == "sinusoidal":
            self.pos_table = SinusoidalPositions(n, D)  # no parameters; exact in every dtype
        self.drop = nn.Dropout(cfg.block.dropout)
        self.layers = cfg.build_stack(causal=False)
        self.norm = nn.LayerNorm(D) if cfg.final_norm == "layer" else nn.RMSNorm(D, eps=1e-6)
        self.head = nn.Linear(D, cfg.n_classes)
        self.reset_parameters()
        name_blocks(self)

    def reset_parameters(self) -> None:
        """The one init pass (:mod:`energyformer.models.init`) with this model's extras: a LeCun-normal
        patch projection under 'normal', the [CLS] token and learned positions."""
        std, torch_init = self.cfg.init_std, self.cfg.init == "torch"

        def extra() -> None:
            if not torch_init:  # LeCun normal: unit-scale patch tokens, the scale of sinusoidal positions
                nn.init.normal_(self.embed.proj.weight, std=self.embed.proj.in_features ** -0.5)
            with torch.no_grad():
                if self.cls_token is not None:
                    nn.init.normal_(self.cls_token, std=1.0 if torch_init else std)
                if isinstance(getattr(self, "pos", None), nn.Parameter):
                    nn.init.normal_(self.pos, std=std)

        init_model(self, self.cfg.init, std, extra)

    def tokens(self, images: Tensor) -> Tensor:
        """The layer stack's input: (B, C, H, W) -> (B, N(+1), D) patch tokens, [CLS], positions."""
        c = self.cfg
        if images.dim() != 4 or tuple(images.shape[1:]) != (c.channels, c.image_size, c.image_size):
            raise ValueError(f"images of shape {tuple(images.shape)}: this model takes (B, {c.channels}, "
                             f"{c.image_size}, {c.image_size})")
        if not images.dtype.is_floating_point:  # e.g. uint8 pixels 0..255: the data pipeline scales to floats
            raise ValueError(f"images of dtype {images.dtype}: this model takes floating-point images (the "
                             f"normalised pixels of the data pipeline, energyformer.data.images), not raw pixels")
        x = self.embed(images.to(self.embed.proj.weight.dtype))  # (B, N, D)
        if self.cls_token is not None:
            x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)  # (B, N + 1, D)
        if c.positions == "learned":
            x = x + self.pos
        elif c.positions == "sinusoidal":
            x = x + self.pos_table()[None].to(x.dtype)
        return self.drop(x)

    def pool(self, x: Tensor) -> Tensor:
        """(B, N, D) final tokens -> (B, D) the [CLS] token or the mean token."""
        return x[:, 0] if self.cfg.pool == "cls" else x.mean(1)

    def forward(self, images: Tensor, *, trace: bool = False, stats: bool = False,
                iterations: int | None = None, steps: int | None = None, hiddens: bool = False) -> ModelOutput:
        """images (B, C, H, W) float -> logits (B, n_classes) (+ traces, stats, auxiliary losses,
        hidden states per (layer, iteration))."""
        if steps is not None:  # as TokenModel.context: steps = -1 ran silently (probe AS)
            from .options import check_forward_options

            check_forward_options(self, {"steps": steps}, self.cfg.kind, flags=False)
        ctx = ForwardContext(traces=Traces() if trace else None, stats={} if stats else None,
                             steps=steps, inputs=images)
        states = {} if hiddens else None
        x = self.layers(self.tokens(images), ctx, iterations, states)  # (B, N, D)
        logits = self.head(self.norm(self.pool(x)))                   # (B, n_classes)
        return ModelOutput.of(logits, ctx, hiddens=states)
