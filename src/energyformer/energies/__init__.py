"""Energies, one module per family. Importing this package registers them all in ``core.ENERGIES``."""

from .elementwise import ElementwiseEnergy
from .interaction import InteractionEnergy

__all__ = ["ElementwiseEnergy", "InteractionEnergy"]
from .free_energy import ElasticPotential, HelmholtzFreeEnergy, MultiHeadFreeEnergy, SumOfSquaresEnergy  # noqa: E402
from .intrinsic_heads import GeluFFNField, LinearAttentionHeads, MHAHeads  # noqa: E402
from .newton import LiteHeads, NewtonHeads  # noqa: E402

__all__ += ["ElasticPotential", "HelmholtzFreeEnergy", "MultiHeadFreeEnergy", "SumOfSquaresEnergy",
            "MHAHeads", "LinearAttentionHeads", "GeluFFNField", "NewtonHeads", "LiteHeads"]
