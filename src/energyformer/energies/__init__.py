"""Energies, one module per family. Importing this package registers them all in ``core.ENERGIES``."""

from .elementwise import ElementwiseEnergy
from .interaction import InteractionEnergy

__all__ = ["ElementwiseEnergy", "InteractionEnergy"]
from .crate import LassoEnergy, SubspaceAttentionEnergy  # noqa: E402  (CRATE / CRATE-T)
from .energy_transformer import EnergyLayerNorm, EnergyTransformerEnergy, ETAttentionEnergy  # noqa: E402  (ET)
from .hopfield import HopfieldEnergy  # noqa: E402  (ET's Hopfield memory)

__all__ += ["HopfieldEnergy", "ETAttentionEnergy", "EnergyTransformerEnergy", "EnergyLayerNorm",
            "SubspaceAttentionEnergy", "LassoEnergy"]
