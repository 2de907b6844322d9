"""Special functions needed to *evaluate* energies (not only their gradients).

``silu_integral(z) = φ(z) = ∫_{-∞}^z t σ(t) dt = z·softplus(z) + Li₂(−e^z)``  (CEM seed Eq. 11, φ = ∫SiLU)

Li₂ is the dilogarithm. We evaluate it only on [−1, 0] through the Bernoulli series in
``u = −log(1 − w)``:  Li₂(w) = Σ_n B_n u^{n+1} / (n+1)!,  |u| ≤ log 2 < 2π  (fast convergence), and reach
arguments below −1 (z > 0) with the inversion Li₂(−x) + Li₂(−1/x) = −π²/6 − ½ log² x. For z > 0 this gives

    φ(z) = z²/2 + z·softplus(−z) − π²/6 − Li₂(−e^{−z})

which has no cancellation for large z. Everything is built from differentiable torch ops, so autograd of
φ is an independent check that φ' = SiLU (tests/energies/test_special.py).
"""

from __future__ import annotations

import math
from fractions import Fraction

import torch
import torch.nn.functional as F
from torch import Tensor

# Bernoulli numbers B_0..B_22 (B_1 = -1/2 convention); odd ones beyond B_1 vanish.
_BERNOULLI = {
    0: Fraction(1), 1: Fraction(-1, 2), 2: Fraction(1, 6), 4: Fraction(-1, 30), 6: Fraction(1, 42),
    8: Fraction(-1, 30), 10: Fraction(5, 66), 12: Fraction(-691, 2730), 14: Fraction(7, 6),
    16: Fraction(-3617, 510), 18: Fraction(43867, 798), 20: Fraction(-174611, 330),
    22: Fraction(854513, 138),
}
# coefficients c_n = B_n / (n+1)! for n = 0..22: Li₂(w) = Σ c_n u^{n+1}
_COEF = [float(_BERNOULLI.get(n, 0) / math.factorial(n + 1)) for n in range(23)]
_PI2_6 = math.pi ** 2 / 6


def _li2_of_u(u: Tensor) -> Tensor:
    """Li₂(w) given u = −log(1 − w), valid for |u| ≤ log 2 (w in [−1, 0])."""
    acc = torch.zeros_like(u)
    for c in reversed(_COEF):  # Horner in u
        acc = acc * u + c
    return acc * u


def dilog_neg_exp(z: Tensor) -> Tensor:
    """Li₂(−e^z) for z ≤ 0 (argument in [−1, 0)); callers clamp z."""
    return _li2_of_u(-F.softplus(z))


def silu_integral(z: Tensor) -> Tensor:
    """φ(z) = ∫_{-∞}^z t·sigmoid(t) dt, stable for all real z; φ' = SiLU, φ(−∞) = 0, φ(0) = −π²/12.

    Evaluated in float64 for lower-precision inputs (where the device has it; the result in z's dtype): near
    z = 0 the terms' derivatives are O(1) and cancel to SiLU(z) ≈ z/2, so autograd of the float32 series lost
    all of φ' at |z| ~ 1e-6 (bf16: at 1e-3); the value itself is well conditioned either way."""
    if z.dtype != torch.float64 and z.device.type != "mps":
        return _silu_integral(z.double()).to(z.dtype)
    return _silu_integral(z)


def _silu_integral(z: Tensor) -> Tensor:
    zn = z.clamp(max=0.0)
    zp = z.clamp(min=0.0)
    neg = zn * F.softplus(zn) + dilog_neg_exp(zn)
    pos = 0.5 * zp * zp + zp * F.softplus(-zp) - _PI2_6 - dilog_neg_exp(-zp)
    return torch.where(z <= 0, neg, pos)
