"""Plain baseline sublayers the energy blocks are compared against (CEM seed §4 uses Llama).

Every sublayer maps (B, N, D) -> (B, N, D) with the residual included and takes a
:class:`~energyformer.core.ForwardContext` (KV cache, position offset, key-padding mask), so a
baseline and an energy block are interchangeable in a layer. Registered kinds:

* attention ``llama`` — :class:`LlamaAttention`: pre-RMSNorm, separate W_Q, W_K, W_V, W_O (no bias),
  RoPE (``rope_theta``; ``rope: false`` for models with absolute positions, e.g. Hyper-SET §5's
  baseline), SDPA.
* attention ``gpt``   — :class:`GPTAttention`: pre-LayerNorm, fused QKV with bias, output projection,
  dropout (GPT-2).
* MLP ``swiglu``      — :class:`SwiGLU`: pre-RMSNorm, W_down(SiLU(W_gate h) ∘ W_up h) (Shazeer 2020);
  default hidden 8/3·D rounded up to 32 (Llama).
* MLP ``gelu``        — :class:`GeluMLP`: pre-LayerNorm, GELU MLP with bias and dropout; default
  hidden 4·D (GPT-2).
* MLP ``relu``        — :class:`ReluMLP`: pre-RMSNorm, W_2 ReLU(W_1 h), no bias, no dropout; default
  hidden 4·D (Hyper-SET §5's baseline: "remove biases and dropout, Pre-Norm with RMSNorm, MLP ratio 4";
  ReLU as in the released code).

Attention is causal or bidirectional (``causal``, given by the model through the builder spec).

Each MLP sublayer also exposes ``branch(x)``, its residual branch alone (pre-norm, dropout and all), and its
forward is ``x + branch(x)``, so the two cannot drift apart. A caller that needs F(x) − x takes the branch
instead of subtracting x from the rounded F(x): EqT's ``coherence_consist`` with ``consist_map: mlp`` (F = this
sublayer) lost every digit of its float32 gradient at ‖x‖ ~ 1e4 with weights ×0.01 to that cancellation.
"""

from typing import Literal

import torch.nn.functional as F
from einops import rearrange
from pydantic import Field
from torch import Tensor, nn

from ..core.attention import sdpa
from ..core.context import ForwardContext
from ..utils.validate import check_choice, check_int
from .attention import append_kv_cache, apply_rope, rope_tables
from .registry import ATTENTIONS, MLPS, AttentionConfig, MLPConfig, SublayerSpec, llama_hidden

#: ε of the baselines' RMSNorms (Llama's; the stock HF Llama's ``rms_norm_eps`` that the export writes)
RMS_EPS = 1e-6


# ----------------------------------------------------------------------------- attention
class LlamaAttentionConfig(AttentionConfig):
    """Llama attention: separate Q/K/V/O without bias, RoPE, pre-RMSNorm."""

    kind: Literal["llama"] = "llama"
    rope_theta: float = Field(10000.0, gt=0)
    """RoPE base θ (Su et al. 2024)"""
    rope: bool = True
    """rotary positions on Q and K; false: none (the model's absolute positions only)"""

    @classmethod
    def examples(cls) -> list[dict]:
        return [{}]


class GPTAttentionConfig(AttentionConfig):
    """GPT-2 attention: fused QKV with bias, pre-LayerNorm, attention and residual dropout."""

    kind: Literal["gpt"] = "gpt"

    @classmethod
    def examples(cls) -> list[dict]:
        return [{}]


class LlamaAttention(nn.Module):
    """Llama multi-head attention sublayer with RoPE (separate Q/K/V/O)."""

    part = "attention"

    def __init__(self, dim: int, heads: int, rope_theta: float = 10000.0, causal: bool = True, rope: bool = True):
        super().__init__()
        check_int("heads", heads, min=1)
        if dim % heads or (rope and (dim // heads) % 2):
            raise ValueError(f"heads = {heads}: must divide dim = {dim} into an even head size")
        self.heads, self.head_dim, self.theta, self.causal = heads, dim // heads, rope_theta, causal
        self.rope = bool(rope)
        self.norm = nn.RMSNorm(dim, eps=RMS_EPS)
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        self.qualname = ""

    def forward(self, x: Tensor, ctx: ForwardContext | None = None) -> Tensor:  # (B, N, D)
        h = self.norm(x)
        q, k, v = (rearrange(w(h), "b n (h d) -> b h n d", h=self.heads) for w in (self.wq, self.wk, self.wv))
        if self.rope:
            cos, sin = rope_tables(ctx, x.shape[1], self.head_dim, self.theta, q.dtype, x.device)  # once per forward
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        k, v, key_mask = append_kv_cache(ctx, self.qualname, k, v)  # (B, H, Nk, Dh)
        o = sdpa(q, k, v, self.causal, key_mask)
        return x + self.wo(rearrange(o, "b h n d -> b n (h d)"))


class GPTAttention(nn.Module):
    """GPT-2 attention sublayer (pre-LayerNorm, fused QKV with bias, dropout)."""

    part = "attention"

    def __init__(self, dim: int, heads: int, dropout: float = 0.0, causal: bool = True):
        super().__init__()
        check_int("heads", heads, min=1)
        if dim % heads:
            raise ValueError(f"heads = {heads}: must divide dim = {dim}")
        self.heads, self.dropout, self.causal = heads, dropout, causal
        self.norm = nn.LayerNorm(dim)
        self.c_attn = nn.Linear(dim, 3 * dim)
        self.c_proj = nn.Linear(dim, dim)
        self.resid_drop = nn.Dropout(dropout)
        self.qualname = ""

    def forward(self, x: Tensor, ctx: ForwardContext | None = None) -> Tensor:  # (B, N, D)
        q, k, v = rearrange(self.c_attn(self.norm(x)), "b n (t h d) -> t b h n d", t=3, h=self.heads)
        k, v, key_mask = append_kv_cache(ctx, self.qualname, k, v)
        o = sdpa(q, k, v, self.causal, key_mask, self.dropout if self.training else 0.0)
        return x + self.resid_drop(self.c_proj(rearrange(o, "b h n d -> b n (h d)")))


@ATTENTIONS.register("llama", LlamaAttentionConfig)
def build_llama_attention(cfg: LlamaAttentionConfig, spec: SublayerSpec) -> LlamaAttention:
    """Llama attention: RoPE (optional), separate Q/K/V/O, pre-RMSNorm (no dropout)."""
    return LlamaAttention(spec.dim, spec.heads, cfg.rope_theta, causal=spec.causal, rope=cfg.rope)


@ATTENTIONS.register("gpt", GPTAttentionConfig)
def build_gpt_attention(cfg: GPTAttentionConfig, spec: SublayerSpec) -> GPTAttention:
    """GPT-2 attention: fused QKV with bias, pre-LayerNorm, dropout."""
    return GPTAttention(spec.dim, spec.heads, spec.dropout, causal=spec.causal)


# ----------------------------------------------------------------------------- MLP
class SwiGLUConfig(MLPConfig):
    """Llama gated MLP (SwiGLU); default hidden 8/3·D rounded up to 32."""

    kind: Literal["swiglu"] = "swiglu"

    def default_hidden(self, dim: int) -> int:
        return llama_hidden(dim)

    @classmethod
    def examples(cls) -> list[dict]:
        return [{}]


class GeluMLPConfig(MLPConfig):
    """GPT-2 MLP (GELU, bias, dropout); default hidden 4·D."""

    kind: Literal["gelu"] = "gelu"
    norm: Literal["layer", "rms"] = "layer"
    """pre-norm: LayerNorm (GPT-2) or RMSNorm (the CEM seed's Plain regressor, Table 3)"""

    def default_hidden(self, dim: int) -> int:
        return 4 * dim

    @classmethod
    def examples(cls) -> list[dict]:
        return [{}]


class ReluMLPConfig(MLPConfig):
    """Plain pre-RMSNorm ReLU MLP without bias or dropout (Hyper-SET §5's baseline); default hidden 4·D."""

    kind: Literal["relu"] = "relu"

    def default_hidden(self, dim: int) -> int:
        return 4 * dim

    @classmethod
    def examples(cls) -> list[dict]:
        return [{}]


class SwiGLU(nn.Module):
    """Llama gated MLP sublayer: x + W_down(SiLU(W_gate h) ∘ W_up h), h = RMSNorm(x)."""

    part = "mlp"

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.norm = nn.RMSNorm(dim, eps=RMS_EPS)
        self.w_gate = nn.Linear(dim, hidden, bias=False)
        self.w_up = nn.Linear(dim, hidden, bias=False)
        self.w_down = nn.Linear(hidden, dim, bias=False)
        self.qualname = ""

    def branch(self, x: Tensor) -> Tensor:  # (B, N, D)
        """The residual branch alone, W_down(SiLU(W_gate h) ∘ W_up h), h = RMSNorm(x) (module docstring)."""
        h = self.norm(x)
        return self.w_down(F.silu(self.w_gate(h)) * self.w_up(h))

    def forward(self, x: Tensor, ctx: ForwardContext | None = None) -> Tensor:  # (B, N, D)
        return x + self.branch(x)


class GeluMLP(nn.Module):
    """GPT-2 MLP sublayer: x + Dropout(W2 GELU(W1 Norm(x) + b1) + b2), Norm = LayerNorm (or RMSNorm)."""

    part = "mlp"

    def __init__(self, dim: int, hidden: int, dropout: float = 0.0, norm: str = "layer"):
        super().__init__()
        check_choice("norm", norm, ("layer", "rms"))
        self.norm = nn.LayerNorm(dim) if norm == "layer" else nn.RMSNorm(dim, eps=RMS_EPS)
        self.fc = nn.Linear(dim, hidden)
        self.proj = nn.Linear(hidden, dim)
        self.drop = nn.Dropout(dropout)
        self.qualname = ""

    def branch(self, x: Tensor) -> Tensor:  # (B, N, D)
        """The residual branch alone, Dropout(W2 GELU(W1 Norm(x) + b1) + b2) (module docstring)."""
        return self.drop(self.proj(F.gelu(self.fc(self.norm(x)))))

    def forward(self, x: Tensor, ctx: ForwardContext | None = None) -> Tensor:  # (B, N, D)
        return x + self.branch(x)


class ReluMLP(nn.Module):
    """x + W_2 ReLU(W_1 RMSNorm(x)), no bias (Hyper-SET §5: "remove biases and dropout, Pre-Norm with RMSNorm")."""

    part = "mlp"

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.norm = nn.RMSNorm(dim, eps=RMS_EPS)
        self.fc = nn.Linear(dim, hidden, bias=False)
        self.proj = nn.Linear(hidden, dim, bias=False)
        self.qualname = ""

    def branch(self, x: Tensor) -> Tensor:  # (B, N, D)
        """The residual branch alone, W_2 ReLU(W_1 RMSNorm(x)) (module docstring)."""
        return self.proj(F.relu(self.fc(self.norm(x))))

    def forward(self, x: Tensor, ctx: ForwardContext | None = None) -> Tensor:  # (B, N, D)
        return x + self.branch(x)


@MLPS.register("swiglu", SwiGLUConfig)
def build_swiglu(cfg: SwiGLUConfig, spec: SublayerSpec) -> SwiGLU:
    """Llama SwiGLU MLP, pre-RMSNorm, no bias (no dropout)."""
    return SwiGLU(spec.dim, cfg.hidden_size(spec))


@MLPS.register("gelu", GeluMLPConfig)
def build_gelu_mlp(cfg: GeluMLPConfig, spec: SublayerSpec) -> GeluMLP:
    """GPT-2 GELU MLP, pre-LayerNorm (or RMSNorm), bias, dropout."""
    return GeluMLP(spec.dim, cfg.hidden_size(spec), spec.dropout, cfg.norm)


@MLPS.register("relu", ReluMLPConfig)
def build_relu_mlp(cfg: ReluMLPConfig, spec: SublayerSpec) -> ReluMLP:
    """Pre-RMSNorm ReLU MLP, no bias, no dropout (Hyper-SET §5's baseline)."""
    return ReluMLP(spec.dim, cfg.hidden_size(spec))
