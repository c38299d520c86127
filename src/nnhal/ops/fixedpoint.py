"""Fixed-point and rounding primitives behind every quantized kernel of the HAL 1.3 spec.

Android's reference driver computes quantized operations with gemmlowp's
``FixedPoint<int32/int16, IntegerBits>`` arithmetic and C++ ``std::round``;
matching it bit for bit needs exactly those primitives, so they live here
once (vectorized over numpy int64 arrays holding int32 / int16 values) and
every kernel (activation, softmax, normalization, LSTM, quantize, ...) uses
them. :mod:`nnhal.ops.quant` builds the quantization helpers on top.
"""

from __future__ import annotations

import numpy as np

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
INT16_MIN = -(2**15)
INT16_MAX = 2**15 - 1

# --------------------------------------------------------------------------
# std::round and integer wrap-around


def round_half_away(x: np.ndarray | float) -> np.ndarray:
    """C++ ``std::round``: round half away from zero, on the exact value given.

    The dtype is kept (a float32 value is rounded as the float32 the reference
    holds, a float64 as the double): callers compute the value in the precision
    the reference does, then round it here.
    """
    x = np.asarray(x)
    a = np.abs(x)
    f = np.floor(a)
    # NOTE: a - floor(a) is exact; floor(a + 0.5) is not: 0.49999997f + 0.5f rounds up to 1.0f
    with np.errstate(invalid="ignore"):  # inf - inf: the infinity is kept by f anyway
        r = f + (a - f >= 0.5)
    return np.copysign(r, x)


def round_half_away_int(v: float) -> int:
    """``std::round`` of one value (float32 or double, as given), as a Python int."""
    return int(round_half_away(v))


def wrap32(x: np.ndarray) -> np.ndarray:
    """``static_cast<int32_t>`` of int64 values (two's complement wrap-around)."""
    return ((np.asarray(x, np.int64) + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def wrap16(x: np.ndarray) -> np.ndarray:
    """``static_cast<int16_t>`` of int64 values (two's complement wrap-around)."""
    return ((np.asarray(x, np.int64) + 32768) & 0xFFFF) - 32768


# --------------------------------------------------------------------------
# gemmlowp primitives on int32 values

_NUDGE_POS = np.int64(1 << 30)
_TRUNC_MASK = np.int64((1 << 31) - 1)


def saturating_rounding_doubling_high_mul(a: np.ndarray, b: int | np.ndarray) -> np.ndarray:
    """gemmlowp SaturatingRoundingDoublingHighMul on int32 values (as int64 arrays)."""
    a = np.asarray(a, dtype=np.int64)
    scalar_b = np.ndim(b) == 0
    b64 = np.int64(b) if scalar_b else np.asarray(b, dtype=np.int64)
    ab = a * b64
    # nudge: +2^30 for ab >= 0, 1 - 2^30 for ab < 0
    neg = ab < 0
    s = ab + _NUDGE_POS
    s -= neg * _TRUNC_MASK
    # C++ integer division by 2^31 truncates toward zero: add 2^31 - 1 to negatives, then shift
    s += (s >> 63) & _TRUNC_MASK
    s >>= 31
    if not scalar_b or int(b) == INT32_MIN:
        overflow = (a == INT32_MIN) & (b64 == INT32_MIN)
        if overflow.any():
            s = np.where(overflow, np.int64(INT32_MAX), s)
    return s


def rounding_divide_by_pot(x: np.ndarray, exponent: int | np.ndarray) -> np.ndarray:
    """gemmlowp RoundingDivideByPOT: x / 2^exponent rounded half away from zero."""
    x = np.asarray(x, dtype=np.int64)
    if np.ndim(exponent) == 0:
        e = int(exponent)
        if e == 0:
            return x.copy()
        mask = np.int64((1 << e) - 1)
        threshold = (mask >> 1) + (x < 0)
        return (x >> e) + ((x & mask) > threshold)
    exponent = np.asarray(exponent, dtype=np.int64)
    mask = (np.int64(1) << exponent) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0).astype(np.int64)
    return (x >> exponent) + (remainder > threshold).astype(np.int64)


def saturating_rounding_multiply_by_pot(x: np.ndarray, exponent: int, bits: int = 32) -> np.ndarray:
    """gemmlowp SaturatingRoundingMultiplyByPOT on int<bits> values: a saturating
    left shift for exponent > 0, a rounding right shift for exponent < 0."""
    x = np.asarray(x, np.int64)
    if exponent == 0:
        return x
    if exponent < 0:
        return rounding_divide_by_pot(x, -exponent)
    threshold = (1 << (bits - 1 - exponent)) - 1
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return np.where(x > threshold, hi, np.where(x < -threshold, lo, x << exponent))


def trunc_div(a: np.ndarray, d: int) -> np.ndarray:
    """C integer division by d > 0 (truncates toward zero)."""
    a = np.asarray(a, np.int64)
    q = np.abs(a) // d
    return np.where(a < 0, -q, q)


def saturating_rounding_doubling_high_mul16(a: np.ndarray, b: np.ndarray | int) -> np.ndarray:
    """gemmlowp SaturatingRoundingDoublingHighMul on int16 values (as int64 arrays)."""
    a = np.asarray(a, np.int64)
    b = np.asarray(b, np.int64)
    ab = a * b
    nudge = np.where(ab >= 0, 1 << 14, 1 - (1 << 14))
    q = trunc_div(ab + nudge, 1 << 15)
    return np.where((a == b) & (a == INT16_MIN), INT16_MAX, q)


def rounding_half_sum(a: np.ndarray, b: int) -> np.ndarray:
    """gemmlowp RoundingHalfSum: (a + b + sign) / 2 with C++ truncation."""
    s = np.asarray(a, np.int64) + b
    s = s + np.where(s >= 0, 1, -1)
    return np.where(s >= 0, s >> 1, -((-s) >> 1))


# exp(-2^k) in Q0.31 for the barrel shifter of exp_on_negative_values, k = -2 .. 4
EXP_BARREL = ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308), (2, 39332535),
              (3, 720401), (4, 242))
EXP_MINUS_ONE_EIGHTH = 1895147668  # exp(-1/8) in Q0.31
ONE_THIRD = 715827883  # 1/3 in Q0.31


def exp_on_interval_minus_quarter_to_0(a: np.ndarray) -> np.ndarray:
    """exp(a) for a in [-1/4, 0), Q0.31 in and out (Taylor series around -1/8)."""
    srdhm, rdbp = saturating_rounding_doubling_high_mul, rounding_divide_by_pot
    x = a + (1 << 28)
    x2 = srdhm(x, x)
    x3 = srdhm(x2, x)
    x4 = srdhm(x2, x2)
    x4_over_4 = rdbp(x4, 2)
    poly = rdbp(srdhm(x4_over_4 + x3, ONE_THIRD) + x2, 1)
    return EXP_MINUS_ONE_EIGHTH + srdhm(EXP_MINUS_ONE_EIGHTH, x + poly)


def exp_on_negative_values(a: np.ndarray, integer_bits: int) -> np.ndarray:
    """gemmlowp exp_on_negative_values: a <= 0 in Q(integer_bits), result in Q0.31."""
    a = np.asarray(a, np.int64)
    frac_bits = 31 - integer_bits
    one_quarter = 1 << (frac_bits - 2)
    a_mod_quarter_minus_quarter = (a & (one_quarter - 1)) - one_quarter
    result = exp_on_interval_minus_quarter_to_0(
        saturating_rounding_multiply_by_pot(a_mod_quarter_minus_quarter, integer_bits))
    remainder = a_mod_quarter_minus_quarter - a
    for exponent, multiplier in EXP_BARREL:
        if integer_bits > exponent:
            bit = (remainder & (1 << (frac_bits + exponent))) != 0
            result = np.where(bit, saturating_rounding_doubling_high_mul(result, multiplier), result)
    if integer_bits > 5:
        result = np.where(a < -(1 << (36 - integer_bits)), 0, result)
    return np.where(a == 0, INT32_MAX, result)


def newton_reciprocal(a: np.ndarray) -> np.ndarray:
    """The Q2.29 Newton-Raphson estimate of 1 / ((1 + a) / 2), a in Q0.31
    (shared by one_over_one_plus_x_for_x_in_0_1, logistic and tanh)."""
    srdhm = saturating_rounding_doubling_high_mul
    half_denominator = rounding_half_sum(a, INT32_MAX)
    x = 1515870810 + srdhm(half_denominator, -1010580540)  # 48/17 - 32/17 * d
    for _ in range(3):
        one_minus = (1 << 29) - srdhm(half_denominator, x)
        x = x + saturating_rounding_multiply_by_pot(srdhm(x, one_minus), 2)
    return x


def one_over_one_plus_x_for_x_in_0_1(a: np.ndarray) -> np.ndarray:
    """gemmlowp one_over_one_plus_x_for_x_in_0_1: Q0.31 in and out."""
    # NOTE: ExactMulByPot<-1> only relabels Q2.29 as Q1.30; Rescale<0> then shifts left by 1
    return saturating_rounding_multiply_by_pot(newton_reciprocal(a), 1)


def inv_sqrt_multiplier(value: np.ndarray | int, reverse_shift: int) -> tuple[np.ndarray, np.ndarray]:
    """TFLite / QuantUtils ``GetInvSqrtQuantizedMultiplierExp`` on non-negative
    int32 values (an array or one int): (multiplier, shift * reverse_shift),
    with reverse_shift -1 giving 1/sqrt(value) ~= multiplier * 2^(shift - 31);
    value <= 1 gives (INT32_MAX, 0)."""
    srdhm = saturating_rounding_doubling_high_mul
    acc = np.asarray(value, np.int64)
    small = acc <= 1
    x = np.where(small, 2, acc)
    shift = np.full(x.shape, 11, np.int64)
    while np.any(big := x >= (1 << 29)):
        x = np.where(big, x // 4, x)
        shift += big
    bit_length = np.frexp(x.astype(np.float64))[1].astype(np.int64)  # exact for ints < 2^53
    pairs = ((32 - bit_length) - 1) // 2 - 1
    shift -= pairs
    x = x << (2 * pairs)
    # Newton-Raphson for 1/sqrt in fixed point with 3 integer bits (raw / 2^28)
    half_input = rounding_divide_by_pot(x >> 1, 1)
    half_three = (1 << 28) + (1 << 27)
    r = np.full(x.shape, 1 << 28, np.int64)
    for _ in range(5):
        r3 = saturating_rounding_multiply_by_pot(srdhm(srdhm(r, r), r), 6)  # F9 -> F3
        r = saturating_rounding_multiply_by_pot(wrap32(srdhm(half_three, r) - srdhm(half_input, r3)), 3)
    r = srdhm(r, 1518500250)  # * sqrt(2)/2
    neg = shift < 0
    r = np.where(neg, wrap32(r << np.where(neg, -shift, 0)), r)
    shift = np.where(neg, 0, shift)
    return np.where(small, INT32_MAX, r), np.where(small, 0, shift * reverse_shift)


# --------------------------------------------------------------------------
# the same primitives on one Python int (a few values: no numpy call per step)


def srdhm_int(a: int, b: int) -> int:
    """saturating_rounding_doubling_high_mul on one int32 pair."""
    if a == b == INT32_MIN:
        return INT32_MAX
    ab = a * b
    s = ab + ((1 << 30) if ab >= 0 else 1 - (1 << 30))
    return s >> 31 if s >= 0 else -((-s) >> 31)  # NOTE: C++ division truncates toward zero


def rounding_divide_by_pot_int(x: int, e: int) -> int:
    """rounding_divide_by_pot on one int."""
    mask = (1 << e) - 1
    return (x >> e) + ((x & mask) > (mask >> 1) + (x < 0))


def saturating_rounding_multiply_by_pot_int(x: int, e: int) -> int:
    """saturating_rounding_multiply_by_pot (32 bits) on one int."""
    if e == 0:
        return x
    if e < 0:
        return rounding_divide_by_pot_int(x, -e)
    t = (1 << (31 - e)) - 1
    return INT32_MAX if x > t else INT32_MIN if x < -t else x << e


def wrap32_int(x: int) -> int:
    """``static_cast<int32_t>`` of one int."""
    return ((x + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def inv_sqrt_multiplier_int(value: int, reverse_shift: int) -> tuple[int, int]:
    """:func:`inv_sqrt_multiplier` of one non-negative int32 value (the layer
    normalizations of QUANTIZED_LSTM and L2_NORMALIZATION need one per row: no
    numpy call per step).  The gemmlowp steps are written out in place (about
    twice as fast as calling the helpers above for each)."""
    if value <= 1:
        return INT32_MAX, 0
    x, shift = int(value), 11
    while x >= (1 << 29):
        x //= 4
        shift += 1
    pairs = ((32 - x.bit_length()) - 1) // 2 - 1  # NOTE: bit_length is frexp's exponent of x
    shift -= pairs
    x <<= 2 * pairs
    half_input = rounding_divide_by_pot_int(x >> 1, 1)
    half_three = (1 << 28) + (1 << 27)
    nudge, nudge_neg = 1 << 30, (1 << 30) - 1  # NOTE: srdhm: -((-(ab + 1 - 2^30)) >> 31) for ab < 0
    r = 1 << 28
    for _ in range(5):
        # r3 = saturating_rounding_multiply_by_pot(srdhm(srdhm(r, r), r), 6)
        a = INT32_MAX if r == INT32_MIN else (r * r + nudge) >> 31
        ab = a * r
        if a == r == INT32_MIN:
            b = INT32_MAX
        else:
            b = (ab + nudge) >> 31 if ab >= 0 else -((nudge_neg - ab) >> 31)
        r3 = INT32_MAX if b > 0x1FFFFFF else INT32_MIN if b < -0x1FFFFFF else b << 6
        # r = saturating_rounding_multiply_by_pot(wrap32(srdhm(half_three, r) - srdhm(half_input, r3)), 3)
        ab = half_three * r
        p = (ab + nudge) >> 31 if ab >= 0 else -((nudge_neg - ab) >> 31)
        ab = half_input * r3
        if half_input == r3 == INT32_MIN:
            q = INT32_MAX
        else:
            q = (ab + nudge) >> 31 if ab >= 0 else -((nudge_neg - ab) >> 31)
        d = ((p - q + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)
        r = INT32_MAX if d > 0xFFFFFFF else INT32_MIN if d < -0xFFFFFFF else d << 3
    ab = r * 1518500250  # * sqrt(2)/2
    r = (ab + nudge) >> 31 if ab >= 0 else -((nudge_neg - ab) >> 31)
    if shift < 0:
        r, shift = wrap32_int(r << -shift), 0
    return r, shift * reverse_shift


def one_over_one_plus_x_for_x_in_0_1_int(a: int) -> int:
    """one_over_one_plus_x_for_x_in_0_1 on one int (see newton_reciprocal)."""
    s = a + INT32_MAX
    s += 1 if s >= 0 else -1
    hd = s >> 1 if s >= 0 else -((-s) >> 1)  # rounding_half_sum
    x = 1515870810 + srdhm_int(hd, -1010580540)
    for _ in range(3):
        one_minus = (1 << 29) - srdhm_int(hd, x)
        x = x + saturating_rounding_multiply_by_pot_int(srdhm_int(x, one_minus), 2)
    return saturating_rounding_multiply_by_pot_int(x, 1)
