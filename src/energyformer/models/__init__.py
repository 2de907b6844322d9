"""Models: backbones, heads and wrappers. Importing this package registers every model kind."""

from .registry import MODELS
from . import regressor  # noqa: F401  (registers "regressor")

__all__ = ["MODELS"]
