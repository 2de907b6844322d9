"""Core abstractions: Energy, Solver (step rule + shared loop), StepSize, Preconditioner,
EnergyBlock, Trace, and the one sublayer config shape (DescentConfig). Importing this package
registers the core energies (quadratic, composite), the solvers (gd, momentum, nesterov, proximal,
ista, sphere), the backward modes (unroll, truncated, implicit), the step-size kinds and the norm
kinds (rms, layer, none; ``energy_layer`` comes with :mod:`energyformer.energies`)."""

from .backward import (
    BACKWARD_MODES, BackwardMode, Truncated, TruncatedConfig, Unroll, UnrollConfig, make_backward_mode,
    register_backward_mode,
)
from .block import EnergyBlock, ForwardContext
from .checks import (
    check_attention_kind, check_descent, check_energy, check_energy_dtypes, check_grad, check_mlp_kind,
    check_reference,
)
from .composite import CompositeEnergy
from .energy import ENERGIES, Energy, register_energy
from .implicit import Implicit, ImplicitConfig
from .norm import NORMS, LayerNormConfig, NoNormConfig, NormConfig, RMSNormConfig, make_norm
from .momentum import Momentum, MomentumConfig, Nesterov, NesterovConfig
from .precond import (
    PRECONDITIONERS, DiagLowRankPrecond, DiagonalPrecond, IdentityPrecond, Preconditioner,
    make_preconditioner,
)
from .projected import ISTA, ISTAConfig, SphereConfig, SphereDescent
from .proximal import ProximalConfig, ProximalGradient
from .quadratic import QuadraticEnergy
from .solver_checks import check_solver
from .solver import (
    SOLVERS, Budget, Descent, GDConfig, GradientDescent, Solver, SolverConfig, SolverResult,
    SolverStats, register_solver,
)
from .stepsize import (
    STEP_SIZES, FixedStepSize, FixedStepSizeConfig, LearnedStepSize, LearnedStepSizeConfig,
    NetworkStepSize, NetworkStepSizeConfig, PerIterationStepSize, PerIterationStepSizeConfig, StepSize,
    StepSizeField, StepSizeGroup, make_step_size,
)
from .sublayer import DescentConfig, build_solver, migrate_descent
from .trace import Trace, Traces, key_label

__all__ = [
    "ENERGIES", "Energy", "register_energy", "CompositeEnergy", "QuadraticEnergy",
    "check_energy", "check_grad", "check_descent", "check_reference", "check_energy_dtypes", "check_attention_kind",
    "check_mlp_kind", "check_solver",
    "EnergyBlock", "ForwardContext",
    "PRECONDITIONERS", "Preconditioner", "IdentityPrecond", "DiagonalPrecond", "DiagLowRankPrecond",
    "make_preconditioner",
    "SOLVERS", "Solver", "Budget", "ISTA", "ISTAConfig", "SphereDescent", "SphereConfig",
    "DescentConfig", "build_solver", "migrate_descent", "StepSizeGroup", "SolverConfig", "SolverResult", "SolverStats", "Descent",
    "register_solver", "GradientDescent", "GDConfig", "Momentum", "MomentumConfig", "Nesterov",
    "NesterovConfig", "ProximalGradient", "ProximalConfig",
    "BACKWARD_MODES", "BackwardMode", "Unroll", "UnrollConfig", "Truncated", "TruncatedConfig", "Implicit",
    "ImplicitConfig", "make_backward_mode", "register_backward_mode",
    "STEP_SIZES", "StepSize", "StepSizeField", "make_step_size", "FixedStepSize", "FixedStepSizeConfig",
    "LearnedStepSize", "LearnedStepSizeConfig", "PerIterationStepSize", "PerIterationStepSizeConfig",
    "NetworkStepSize", "NetworkStepSizeConfig",
    "NORMS", "NormConfig", "RMSNormConfig", "LayerNormConfig", "NoNormConfig", "make_norm",
    "Trace", "Traces", "key_label",
]
