"""A transformer layer = attention-like sublayer + MLP-like sublayer, each chosen by kind.

"CEM attention + Llama MLP", "Llama attention + CEM MLP" and "full CEM" (seed §4.1-4.3) are each one
switch, e.g. ``block: {attention: {kind: cem, steps: 2, precond: diag_low_rank}, mlp: swiglu}``.
Each kind has its own config section (:mod:`energyformer.blocks.registry`); a bare name is shorthand
for ``{kind: name}`` with that kind's defaults.

``attn_reuse`` / ``mlp_reuse`` apply a sublayer several times with the same weights — the *plain
layer reuse* baseline of seed Fig. 3c / Fig. 4, to contrast with CEM's within-layer recursion
(``attention.steps`` / ``mlp.steps`` of the ``cem`` kinds), where keys and gates are computed once and
only the query side is iterated. Each application of a reused sublayer has its own KV-cache slot and
trace (``ForwardContext.reuse``), so plain reuse decodes with a KV cache like any other layer.
"""

from dataclasses import replace

from pydantic import Field, model_validator
from torch import Tensor, nn

from ..core.context import ForwardContext
from ..utils.config import ConfigModel
from .registry import ATTENTIONS, MLPS, SublayerSpec, build_attention, build_mlp


class BlockConfig(ConfigModel):
    """Which sublayers make a layer (each kind with its own options), dropout and plain reuse."""

    attention: ATTENTIONS.type("llama") = ATTENTIONS.field("llama")
    """attention sublayer: a kind name or {kind: NAME, ...that kind's options}"""
    mlp: MLPS.type("swiglu") = MLPS.field("swiglu")
    """MLP sublayer: a kind name or {kind: NAME, ...that kind's options}"""
    dropout: float = Field(0.0, ge=0, lt=1)
    """dropout probability, handed to the sublayers that have dropout (and the embedding)"""
    attn_reuse: int = Field(1, ge=1)
    """apply the attention sublayer this many times with the same weights (plain reuse)"""
    mlp_reuse: int = Field(1, ge=1)
    """apply the MLP sublayer this many times with the same weights (plain reuse)"""

    @model_validator(mode="after")
    def _kinds_match_registry(self):
        # A config object passed directly is not re-dispatched: make sure it belongs to its kind.
        for key, reg in (("attention", ATTENTIONS), ("mlp", MLPS)):
            cfg = getattr(self, key)
            if not isinstance(cfg, reg.get(cfg.kind).config):
                raise ValueError(f"{key} = {type(cfg).__name__}(kind={cfg.kind!r}): {reg.what} kind "
                                 f"{cfg.kind!r} takes a {reg.get(cfg.kind).config.__name__}")
        return self


class TransformerLayer(nn.Module):
    """x -> mlp^r(attn^r(x)) with r-fold plain reuse (default 1). Shapes (B, N, D) throughout."""

    def __init__(self, cfg: BlockConfig, spec: SublayerSpec):
        super().__init__()
        spec = replace(spec, shared={})  # build-time references between this layer's sublayers
        self.attn = build_attention(cfg.attention, spec)
        self.mlp = build_mlp(cfg.mlp, spec)
        self.attn_reuse, self.mlp_reuse = cfg.attn_reuse, cfg.mlp_reuse

    def forward(self, x: Tensor, ctx: ForwardContext | None = None) -> Tensor:  # (B, N, D)
        if ctx is not None:
            ctx.layer_input = x  # what step sizes with condition 'layer' see (Hyper-SET's shared network)
        # application r >= 1 of a reused sublayer keeps its own KV-cache slot, trace and statistics
        # (ForwardContext.reuse): its keys are computed from the state after application r - 1
        for sub, times in ((self.attn, self.attn_reuse), (self.mlp, self.mlp_reuse)):
            for r in range(times):
                if ctx is not None:
                    ctx.reuse = r
                x = sub(x, ctx)
        if ctx is not None:
            ctx.reuse = 0
        return x
