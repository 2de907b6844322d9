"""``TokenEncoder``: a bidirectional token model with a per-token head (x-transformers' ``TransformerWrapper``
with an ``Encoder``).

token ids (B, N) [+ key-padding mask (B, N)] -> embedding (+ learned / sinusoidal positions) -> the
layer stack iterated L times (:mod:`energyformer.models.backbone`) with ``causal=False`` -> final norm
-> linear head with ``n_out`` classes per token -> logits (B, N, n_out), plus the energy blocks'
traces and the auxiliary losses the blocks added. The task owns the loss (e.g. cross-entropy on the
blanks of a Sudoku, on the masked tokens of an MLM, on every prefix parity bit).
"""

from __future__ import annotations

from torch import Tensor

from .config import ModelConfig
from .output import ModelOutput
from .wrapper import TokenModel


class TokenEncoder(TokenModel):
    """Per-token classifier over a (by default bidirectional) transformer backbone.

    n_out:  classes per token (None: ``cfg.vocab_size``, e.g. masked-token prediction).
    causal: the task's choice (default False); ``cfg.causal``, when set, must agree with it.
    """

    def __init__(self, cfg: ModelConfig, n_out: int | None = None, *, causal: bool | None = None):
        if causal is not None and cfg.causal is not None and causal != cfg.causal:
            raise ValueError(f"model.causal = {cfg.causal} but the encoder was asked for causal = {causal}")
        causal = causal if causal is not None else (cfg.causal if cfg.causal is not None else False)
        n_out = cfg.vocab_size if n_out is None else n_out
        if isinstance(n_out, bool) or not isinstance(n_out, int) or n_out < 1:
            raise ValueError(f"n_out = {n_out!r}: must be an integer >= 1 (classes per token)")
        super().__init__(cfg, n_out, causal=causal)

    def forward(
        self, idx: Tensor, mask: Tensor | None = None, *, trace: bool = False, stats: bool = False,
        iterations: int | None = None, steps: int | None = None, hiddens: bool = False,
    ) -> ModelOutput:
        """idx: (B, N) token ids; mask: (B, N) bool, True = real token (padded keys are never attended).

        ``iterations`` overrides the number of passes (e.g. evaluate at more passes than trained),
        ``steps`` the step budget of every energy block; ``hiddens`` returns the state after every
        (layer, iteration).
        """
        ctx = self.context(idx, mask=mask, trace=trace, stats=stats, steps=steps)
        states = {} if hiddens else None
        logits = self.body(idx, ctx, iterations, states)  # (B, N, n_out)
        return ModelOutput.of(logits, ctx, hiddens=states)
