"""Quantized arithmetic with the TFLite reference rounding.

Two primitives carry every quantized kernel, so results match Android's
reference driver bit for bit: :func:`quantize_multiplier` turns a real
multiplier into a Q31 fixed-point multiplier and a shift (once, in prepare)
and :func:`multiply_by_quantized_multiplier` applies it (rounding doubling
high multiply, then rounding right shift), vectorized over numpy int64.
"""

from __future__ import annotations

import math

import numpy as np

from nnhal.hal import OperandType
from nnhal.ops.base import NUMPY_DTYPE
from nnhal.ops.fixedpoint import (  # noqa: F401  (re-exported: the kernels' one import of quantized math)
    INT32_MAX,
    INT32_MIN,
    round_half_away,
    round_half_away_int,
    rounding_divide_by_pot,
    saturating_rounding_doubling_high_mul,
)

# (min, max) of each quantized type's stored integer
QUANT_RANGE: dict[OperandType, tuple[int, int]] = {
    OperandType.TENSOR_QUANT8_ASYMM: (0, 255),
    OperandType.TENSOR_QUANT8_ASYMM_SIGNED: (-128, 127),
    OperandType.TENSOR_QUANT8_SYMM: (-128, 127),
    OperandType.TENSOR_QUANT8_SYMM_PER_CHANNEL: (-128, 127),
    OperandType.TENSOR_QUANT16_ASYMM: (0, 65535),
    OperandType.TENSOR_QUANT16_SYMM: (-32768, 32767),
}


def quantize_multiplier(real: float) -> tuple[int, int]:
    """TFLite ``QuantizeMultiplier``: real ~= q * 2^(shift - 31), q in [2^30, 2^31).

    Returns (q, shift); shift > 0 is a left shift."""
    if real == 0.0:
        return 0, 0
    mantissa, shift = math.frexp(real)
    q = _round_half_away_double(mantissa * (1 << 31))  # NOTE: std::round (double), not Python's banker's round
    if q == (1 << 31):
        q //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    return q, shift


def quantize_multipliers(real: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`quantize_multiplier` of every value of ``real`` (float64, finite, >= 0): int64 (q, shift)
    arrays, the same values (frexp and the rounding are exact on doubles)."""
    real = np.asarray(real, np.float64)
    mantissa, shift = np.frexp(real)
    q = round_half_away(mantissa * float(1 << 31)).astype(np.int64)
    shift = shift.astype(np.int64)
    top = q == (1 << 31)
    q = np.where(top, q // 2, q)
    shift = shift + top
    zero = (real == 0.0) | (shift < -31)
    return np.where(zero, 0, q), np.where(zero, 0, shift)


def _round_half_away_double(x: float) -> int:
    """``std::round`` of a double (a Python float), as a Python int: round_half_away_int without numpy."""
    a = abs(x)
    f = math.floor(a)
    r = f + (1 if a - f >= 0.5 else 0)  # NOTE: a - floor(a) is exact; a + 0.5 is not
    return r if x >= 0 else -r


def quantize_multiplier_smaller_than_one(real: float) -> tuple[int, int]:
    """Android's ``QuantizeMultiplierSmallerThanOneExp``: 0 < real < 1;
    returns (q, shift) with shift <= 0 (a right shift of -shift)."""
    if not 0.0 < real < 1.0:
        raise ValueError(f"multiplier {real} not in (0, 1)")
    q, shift = quantize_multiplier(real)
    return q, shift


def quantize_multiplier_greater_than_one(real: float) -> tuple[int, int]:
    """Android's ``QuantizeMultiplierGreaterThanOne``: real > 1; returns
    (q, left_shift) with left_shift >= 0."""
    if not real > 1.0:
        raise ValueError(f"multiplier {real} not > 1")
    return quantize_multiplier(real)


def multiply_by_quantized_multiplier(x: np.ndarray, q: int | np.ndarray, shift: int | np.ndarray) -> np.ndarray:
    """TFLite ``MultiplyByQuantizedMultiplier``: round(x * q * 2^(shift-31)).

    ``q`` and ``shift`` may be arrays broadcasting against ``x`` (per-channel)."""
    x = np.asarray(x, dtype=np.int64)
    shift = np.asarray(shift, dtype=np.int64)
    left = np.maximum(shift, 0)
    right = np.maximum(-shift, 0)
    # NOTE: the reference shifts in int32 and wraps; values here never exceed it in practice
    return rounding_divide_by_pot(saturating_rounding_doubling_high_mul(x << left, q), right)


def multiply_by_quantized_multiplier_smaller_than_one(x: np.ndarray, q: int, shift: int) -> np.ndarray:
    """Android ``MultiplyByQuantizedMultiplierSmallerThanOneExp`` (shift <= 0)."""
    return rounding_divide_by_pot(saturating_rounding_doubling_high_mul(x, q), -shift)


def multiply_by_quantized_multiplier_greater_than_one(x: np.ndarray, q: int, left_shift: int) -> np.ndarray:
    """Android ``MultiplyByQuantizedMultiplierGreaterThanOne``."""
    return saturating_rounding_doubling_high_mul(np.asarray(x, np.int64) << left_shift, q)


def quantize(real: np.ndarray, scale: float, zero_point: int, type_: OperandType) -> np.ndarray:
    """Float -> quantized with round-half-away-from-zero (std::round) and clamping."""
    lo, hi = QUANT_RANGE[type_]
    scaled = np.asarray(real, dtype=np.float32) / np.float32(scale)
    rounded = round_half_away(scaled)  # NOTE: of the float32 quotient, as the reference
    return np.clip(rounded + zero_point, lo, hi).astype(NUMPY_DTYPE[type_])


def activation_range(act: int, scale: float, zero_point: int, type_: OperandType) -> tuple[int, int]:
    """Android ``CalculateActivationRangeUint8/Int8``: the quantized clamp of a
    fused activation (0 NONE, 1 RELU, 2 RELU1, 3 RELU6)."""
    qmin, qmax = QUANT_RANGE[type_]

    def q(v: float) -> int:
        # NOTE: the reference divides in single precision
        return zero_point + round_half_away_int(np.float32(v) / np.float32(scale))

    if act == 1:
        return max(qmin, q(0.0)), qmax
    if act == 2:
        return max(qmin, q(-1.0)), min(qmax, q(1.0))
    if act == 3:
        return max(qmin, q(0.0)), min(qmax, q(6.0))
    return qmin, qmax

