"""Energies, one module per family. Importing this package registers them all in ``core.ENERGIES``."""

from .elementwise import ElementwiseEnergy
from .interaction import InteractionEnergy

__all__ = ["ElementwiseEnergy", "InteractionEnergy"]
from .pseudolikelihood import PseudoLikelihoodEnergy  # noqa: E402  (bare self-attention, seed 004)
