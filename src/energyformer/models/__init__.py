"""Models: token models over one layer stack (:class:`CausalLM`, :class:`TokenEncoder`; the
``transformer`` kind) and vector regressors (the ``regressor`` kind).

Importing this package registers every model kind in :data:`MODELS`.
"""

from .backbone import LayerStack
from .config import ModelConfig
from .encoder import TokenEncoder
from .lm import CausalLM, kv_cache_bytes
from .output import ModelOutput
from .registry import MODELS
from .transformer import build_transformer
from . import regressor  # noqa: F401  (registers "regressor")

__all__ = [
    "MODELS", "ModelConfig", "LayerStack", "ModelOutput", "CausalLM", "TokenEncoder",
    "build_transformer", "kv_cache_bytes",
]
from . import equilibrium  # noqa: E402,F401  (registers "equilibrium")
from . import bare_attention, factored  # noqa: E402,F401  (registers "bare_sa", "factored"; seed 004)
from . import vision  # noqa: F401,E402  (registers "vision": the image wrapper)
from . import masked_vision  # noqa: F401,E402  (registers "masked_vision": masked image modelling, Hyper-SET §5.3)
