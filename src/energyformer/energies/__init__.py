"""Energies, one module per family. Importing this package registers them all in ``core.ENERGIES``."""

from .elementwise import ElementwiseEnergy
from .interaction import InteractionEnergy

__all__ = ["ElementwiseEnergy", "InteractionEnergy"]
from .coherence import CoherenceContext, MaskedReconstructionEnergy, ReversePredictionEnergy  # noqa: E402
from .coherence_pointwise import ConfidenceEnergy, ConsistencyEnergy, MemoryEnergy  # noqa: E402

__all__ += ["CoherenceContext", "ReversePredictionEnergy", "MaskedReconstructionEnergy", "ConfidenceEnergy",
            "MemoryEnergy", "ConsistencyEnergy"]
from .hyperspherical import BiSoftmaxAttentionEnergy, ReLUFFEnergy  # noqa: E402  (Hyper-SET)
from .hyperspherical_alt import (  # noqa: E402  (Hyper-SET Tables 19-20)
    GatedFFEnergy, LinearAttentionEnergy, SigmoidAttentionEnergy, SoftmaxFFEnergy,
)

__all__ += ["BiSoftmaxAttentionEnergy", "ReLUFFEnergy", "SigmoidAttentionEnergy", "LinearAttentionEnergy",
            "SoftmaxFFEnergy", "GatedFFEnergy"]
from .free_energy import ElasticPotential, HelmholtzFreeEnergy, MultiHeadFreeEnergy, SumOfSquaresEnergy  # noqa: E402
from .intrinsic_heads import GeluFFNField, LinearAttentionHeads, MHAHeads  # noqa: E402
from .newton import LiteHeads, NewtonHeads  # noqa: E402

__all__ += ["ElasticPotential", "HelmholtzFreeEnergy", "MultiHeadFreeEnergy", "SumOfSquaresEnergy",
            "MHAHeads", "LinearAttentionHeads", "GeluFFNField", "NewtonHeads", "LiteHeads"]
from .pseudolikelihood import PseudoLikelihoodEnergy  # noqa: E402  (bare self-attention, seed 004)
from .crate import LassoEnergy, SubspaceAttentionEnergy  # noqa: E402  (CRATE / CRATE-T)
from .energy_transformer import EnergyLayerNorm, EnergyTransformerEnergy, ETAttentionEnergy  # noqa: E402  (ET)
from .hopfield import HopfieldEnergy  # noqa: E402  (ET's Hopfield memory)

__all__ += ["HopfieldEnergy", "ETAttentionEnergy", "EnergyTransformerEnergy", "EnergyLayerNorm",
            "SubspaceAttentionEnergy", "LassoEnergy"]
