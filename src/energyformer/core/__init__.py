"""Core abstractions: Energy, Solver, Preconditioner, EnergyBlock, Trace."""

from .block import EnergyBlock, ForwardContext
from .energy import ENERGIES, Energy, register_energy
from .precond import (
    PRECONDITIONERS, DiagLowRankPrecond, DiagonalPrecond, IdentityPrecond, Preconditioner,
    make_preconditioner,
)
from .solver import SOLVERS, GradientDescent, Solver, SolverResult, register_solver
from .trace import Trace, Traces

__all__ = [
    "ENERGIES", "Energy", "register_energy", "EnergyBlock", "ForwardContext", "PRECONDITIONERS",
    "Preconditioner", "IdentityPrecond", "DiagonalPrecond", "DiagLowRankPrecond",
    "make_preconditioner", "SOLVERS", "Solver", "SolverResult", "GradientDescent",
    "register_solver", "Trace", "Traces",
]
