"""Energies, one module per family. Importing this package registers them all in ``core.ENERGIES``."""

from .elementwise import ElementwiseEnergy
from .interaction import InteractionEnergy

__all__ = ["ElementwiseEnergy", "InteractionEnergy"]
from .coherence import CoherenceContext, MaskedReconstructionEnergy, ReversePredictionEnergy  # noqa: E402
from .coherence_pointwise import ConfidenceEnergy, ConsistencyEnergy, MemoryEnergy  # noqa: E402

__all__ += ["CoherenceContext", "ReversePredictionEnergy", "MaskedReconstructionEnergy", "ConfidenceEnergy",
            "MemoryEnergy", "ConsistencyEnergy"]
