"""Equilibrium transformer (EqT; seed 003 §3.4 Eq. 17, Algorithm 1): a causal backbone whose blocks
propose f and an Equilibrium Refinement Module (:mod:`energyformer.blocks.equilibrium`) refines it.

    x⁰ = embed(tokens) (+ positions);  for ℓ = 1 … L:  f = layer_ℓ(x^{ℓ−1}),
    x^ℓ = ERM(f) if ℓ is refined else f;   logits = head(LayerNorm(x^L))

``refine.placement`` refines after the last layer (default; the ERM is described as an augmentation
of a layer and the parity model's +8% parameters fit one ERM) or after every layer. The model's
final norm is Alg. 1's closing LayerNorm (``final_norm: layer`` by default), so with ℒ ≡ 0 or
K = 0 the model is exactly its backbone followed by that LayerNorm, and a ``transformer`` model with
the same backbone keys is the baseline ("the same backbone without refinement").

Model kind ``equilibrium`` (``model: {kind: equilibrium, ..., refine: {...}}``): every key of the
``transformer`` kind plus ``refine``. A task builds it like the transformer kind:
``MODELS.build(cfg, vocab_size=V)`` is a next-token LM over V tokens, ``n_out=C`` a per-token
classifier with C classes (cumulative parity). Attention is always causal (refinement of token t
reads x_{≤t} only, so the whole model stays causal).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from torch import Tensor

from ..blocks.equilibrium import EquilibriumRefiner, RefineConfig, RefinedLayer
from ..utils.config import replace
from ..utils.validate import ConfigError
from .config import ModelConfig
from .lm import token_cross_entropy
from .naming import name_blocks
from .output import ModelOutput
from .registry import MODELS
from .wrapper import TokenModel


class EquilibriumConfig(ModelConfig):
    """Equilibrium transformer: the transformer backbone keys plus the ERM (``refine``)."""

    kind: Literal["equilibrium"] = "equilibrium"
    final_norm: Literal["rms", "layer"] = "layer"
    """norm before the head: Alg. 1's closing LayerNorm (default) or RMSNorm"""
    refine: RefineConfig = Field(default_factory=RefineConfig)
    """the Equilibrium Refinement Module: energy, α, γ, K_train / K_eval, stopping, β, backward"""

    def backbone(self):
        """The ``transformer`` config of the same backbone (the baseline without refinement)."""
        data = self.model_dump(exclude={"kind", "refine"})
        return ModelConfig.model_validate(data)


class EquilibriumModel(TokenModel):
    """Causal backbone + ERMs (module docstring). ``n_out`` None: next-token LM over the vocabulary."""

    def __init__(self, cfg: EquilibriumConfig, n_out: int | None = None):
        if cfg.causal is False:
            raise ConfigError("model.causal = False: the equilibrium transformer is autoregressive "
                              "(causal attention); remove model.causal or set it to true")
        super().__init__(cfg, cfg.vocab_size if n_out is None else n_out, causal=True)
        rc = cfg.refine
        which = range(cfg.n_layers) if rc.placement == "every" else [cfg.n_layers - 1]
        for i in which:
            layer = self.layers[i]
            refiner = EquilibriumRefiner(rc, cfg.dim, cfg.heads, cfg.vocab_size, self.n_out, embedding=self.embed,
                                         head=self.head, final_norm=self.norm, mlp=getattr(layer, "mlp", None))
            refiner.energy.apply(self._init)
            self.layers[i] = RefinedLayer(layer, refiner)
        name_blocks(self)

    def refiners(self) -> list[EquilibriumRefiner]:
        return [m for m in self.modules() if isinstance(m, EquilibriumRefiner)]

    def callbacks(self) -> list:
        """Trainer callbacks of the ERMs' schedules (γ annealing, K curriculum)."""
        return [cb for r in self.refiners() for cb in r.callbacks()]

    def forward_options(self) -> dict[str, int]:
        """Call-time ``iterations`` and ``steps`` (models/options.py); ``steps = 0`` is K = 0, the
        proposal without refinement (the paper's ablation)."""
        return {"iterations": 1, "steps": 0}

    def forward(self, idx: Tensor, targets: Tensor | None = None, *, mask: Tensor | None = None,
                trace: bool = False, stats: bool = False, iterations: int | None = None,
                steps: int | None = None, hiddens: bool = False) -> ModelOutput:
        """idx, targets: (B, N); ``steps`` overrides every ERM's K (e.g. K_eval = 32)."""
        ctx = self.context(idx, mask=mask, trace=trace, stats=stats, steps=steps)
        states = {} if hiddens else None
        logits = self.body(idx, ctx, iterations, states)  # (B, N, n_out)
        loss = None
        if targets is not None:
            loss = token_cross_entropy(logits, targets)
        return ModelOutput.of(logits, ctx, loss=loss, hiddens=states)


@MODELS.register("equilibrium", EquilibriumConfig)
def build_equilibrium(cfg: EquilibriumConfig, *, vocab_size: int | None = None, n_out: int | None = None,
                      causal: bool | None = None) -> EquilibriumModel:
    """Equilibrium transformer with the task's head: n_out None -> next-token LM, an int -> per-token classes."""
    if causal is False:
        raise ConfigError("the equilibrium transformer is causal; this task asked for a bidirectional model")
    if vocab_size is not None and vocab_size != cfg.vocab_size:
        cfg = replace(cfg, vocab_size=vocab_size)
    return EquilibriumModel(cfg, n_out)
