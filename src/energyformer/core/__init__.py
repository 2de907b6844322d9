"""Core abstractions: Energy, Solver, Preconditioner, EnergyBlock, Trace."""

from .block import EnergyBlock, ForwardContext
from .checks import check_descent, check_energy, check_grad, check_reference
from .composite import CompositeEnergy
from .energy import ENERGIES, Energy, register_energy
from .precond import (
    PRECONDITIONERS, DiagLowRankPrecond, DiagonalPrecond, IdentityPrecond, Preconditioner,
    make_preconditioner,
)
from .quadratic import QuadraticEnergy
from .solver import SOLVERS, GradientDescent, Solver, SolverResult, register_solver
from .trace import Trace, Traces

__all__ = [
    "ENERGIES", "Energy", "register_energy", "CompositeEnergy", "QuadraticEnergy",
    "check_energy", "check_grad", "check_descent", "check_reference", "EnergyBlock", "ForwardContext", "PRECONDITIONERS",
    "Preconditioner", "IdentityPrecond", "DiagonalPrecond", "DiagLowRankPrecond",
    "make_preconditioner", "SOLVERS", "Solver", "SolverResult", "GradientDescent",
    "register_solver", "Trace", "Traces",
]
