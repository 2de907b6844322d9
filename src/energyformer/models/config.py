"""``ModelConfig``: the ``transformer`` model kind (``model: {kind: transformer, ...}`` in a run config).

:class:`StackConfig` holds the keys of every model built on the one :class:`LayerStack` (token
models, ``vision``, ``masked_vision``, ``equilibrium``): width, heads, distinct layers × iterations,
depth order, sublayers, MLP width, positions, final norm and the initialisation rule; it builds the
stack. One config describes the backbone shared by every token model: width, heads, layer stack, sublayers
(``block``), positions, and depth as iteration (``iterations``, ``train_iterations``,
``input_injection``; see :mod:`energyformer.models.backbone`). Which head sits on top (next-token LM,
per-token classifier) and whether attention is causal are the task's decisions, unless ``causal``
is set here. Example::

    model:
      kind: transformer
      dim: 128
      n_layers: 1
      heads: 4
      iterations: 8                 # eval (and training, unless train_iterations is given)
      train_iterations: [2, 6]      # sampled per batch
      input_injection: add
      block:
        attention: {kind: cem, steps: 2, precond: diag_low_rank}
        mlp: {kind: cem, steps: 2}
"""

from collections.abc import Iterable
from typing import Literal

from pydantic import Field, model_validator

from ..blocks.layer import BlockConfig, TransformerLayer
from ..blocks.registry import SublayerSpec
from ..utils.config import KindConfig
from .backbone import LayerStack


class StackConfig(KindConfig):
    """The keys of every model built on the one :class:`LayerStack` (a base: each model kind adds its
    own keys and may change these defaults): width, heads, layers × iterations, order, sublayers, init."""

    dim: int = Field(128, ge=1)
    """model width D"""
    n_layers: int = Field(4, ge=1)
    """layers in the stack (distinct weights)"""
    heads: int = Field(4, ge=1)
    """attention heads (must divide dim)"""
    mlp_hidden: int | None = Field(None, ge=1)
    """MLP hidden size for every MLP kind (None: each kind's default, e.g. 4·dim GELU, 8/3·dim SwiGLU)"""
    positions: Literal["none", "learned", "sinusoidal"] = "none"
    """absolute positions added to the embedding (RoPE / ALiBi live in the attention)"""
    final_norm: Literal["rms", "layer"] = "rms"
    """norm before the head: RMSNorm or LayerNorm"""
    init: Literal["normal", "torch"] = "normal"
    """'normal': every Linear / Embedding weight from N(0, init_std²), biases zero (GPT-style);
    'torch': PyTorch's default init of each module (Linear U(±1/√fan_in), Embedding N(0, 1))"""
    init_std: float = Field(0.02, gt=0)
    """std of the 'normal' init (and of learned positions)"""
    iterations: int = Field(1, ge=1)
    """passes through the layer stack with shared weights (eval; training too unless train_iterations)"""
    train_iterations: tuple[int, int] | None = None
    """[min, max]: training passes sampled uniformly per batch (torch RNG); None: use iterations"""
    input_injection: Literal["none", "add"] = "none"
    """'add': add the embedded input to the state before every pass after the first"""
    stack_order: Literal["cycle", "consecutive"] = "cycle"
    """with n_layers > 1: the stack L times (cycle) or each layer L times in turn (consecutive, the
    Hyper-SET image code)"""
    block: BlockConfig = Field(default_factory=BlockConfig)
    """the sublayers of every layer"""

    @model_validator(mode="after")
    def _check(self):
        if self.dim % self.heads:
            raise ValueError(f"heads = {self.heads}: must divide dim = {self.dim}")
        if self.train_iterations is not None:
            lo, hi = self.train_iterations
            if not 1 <= lo <= hi:
                raise ValueError(f"train_iterations = {[lo, hi]}: must be [min, max] with 1 <= min <= max")
        return self

    def spec(self, causal: bool) -> SublayerSpec:
        """What every sublayer builder gets from this model (see :class:`SublayerSpec`)."""
        return SublayerSpec(dim=self.dim, heads=self.heads, causal=causal, dropout=self.block.dropout,
                            mlp_hidden=self.mlp_hidden)

    def build_stack(self, causal: bool, layers: Iterable | None = None) -> LayerStack:
        """``n_layers`` :class:`TransformerLayer` s (or the given ``layers``) iterated ``iterations``
        times in ``stack_order``."""
        if layers is None:
            spec = self.spec(causal)
            layers = (TransformerLayer(self.block, spec) for _ in range(self.n_layers))
        return LayerStack(layers, iterations=self.iterations, train_iterations=self.train_iterations,
                          input_injection=self.input_injection, order=self.stack_order)


class ModelConfig(StackConfig):
    """Transformer backbone: embedding, a layer stack iterated L times, final norm, a task head."""

    kind: Literal["transformer"] = "transformer"
    vocab_size: int = Field(4096, ge=1)
    """input vocabulary size (set by the task from its tokenizer)"""
    max_seq_len: int = Field(256, ge=1)
    """longest sequence (learned / sinusoidal position tables, generation window)"""
    tie_embeddings: bool | None = None
    """share the input embedding with the output head (None: when the head predicts the vocabulary)"""
    causal: bool | None = None
    """causal attention (None: the task decides; a causal LM requires true)"""

    @property
    def hidden(self) -> int:
        """The MLP hidden size the chosen MLP kind will use."""
        return self.block.mlp.hidden_size(self.spec(causal=True))
