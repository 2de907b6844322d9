"""Token models over one layer stack: :class:`CausalLM`, :class:`TokenEncoder`; the ``transformer`` kind.

Importing this package registers the ``transformer`` model kind in :data:`MODELS`.
"""

from .backbone import LayerStack
from .config import ModelConfig
from .encoder import EncoderOutput, TokenEncoder
from .lm import CausalLM, LMOutput, kv_cache_bytes
from .registry import MODELS
from .transformer import build_transformer

__all__ = [
    "MODELS", "ModelConfig", "LayerStack", "CausalLM", "LMOutput", "TokenEncoder", "EncoderOutput",
    "build_transformer", "kv_cache_bytes",
]
