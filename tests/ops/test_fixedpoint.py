"""The fixed-point and rounding primitives every quantized kernel shares
(nnhal.ops.fixedpoint): std::round's edge cases, wrap-around and gemmlowp exp."""

from __future__ import annotations

import math

import numpy as np
import pytest

from nnhal.hal import OperandType as T
from nnhal.ops import fixedpoint as fp
from nnhal.ops import quant

F32 = np.float32
JUST_BELOW_HALF = np.nextafter(F32(0.5), F32(0))  # 0.49999997f


def test_round_half_away_float32_edges():
    # NOTE: values chosen where floor(x + 0.5) or banker's rounding differs from C++ std::round
    x = np.array([JUST_BELOW_HALF, 0.5, -0.5, 1.5, 2.5, -2.5, -JUST_BELOW_HALF, 0.0, -0.0, 8388607.5,
                  16777215.0, 3.4e38, -3.4e38], F32)
    want = np.array([0, 1, -1, 2, 3, -3, -0.0, 0, -0.0, 8388608, 16777215, 3.4e38, -3.4e38], F32)
    got = fp.round_half_away(x)
    assert got.dtype == np.float32  # rounded as the float the reference holds, no widening
    np.testing.assert_array_equal(got, want)
    assert math.copysign(1, got[6]) == -1  # std::round(-0.49999997f) is -0.0


def test_round_half_away_double_edges():
    below = np.nextafter(0.5, 0.0)  # 0.49999999999999994
    big = 2.0**52 + 1  # odd integer: x + 0.5 is not representable and rounds up
    x = np.array([below, 0.5, -0.5, 2.5, big, -big, 1e300, np.inf, -np.inf])
    np.testing.assert_array_equal(fp.round_half_away(x), [0, 1, -1, 3, big, -big, 1e300, np.inf, -np.inf])
    assert np.isnan(fp.round_half_away(np.nan))
    assert fp.round_half_away_int(below) == 0
    assert fp.round_half_away_int(F32(2.5)) == 3
    assert fp.round_half_away_int(-2.5) == -3


def test_quantize_rounds_like_std_round():
    # NOTE: quantize once rounded 0.49999997f to 1 with floor(x + 0.5) in float32
    q = quant.quantize(np.array([JUST_BELOW_HALF, 0.5, -0.5, 2.5, -2.5, 1e9, -1e9], F32), 1.0, 0,
                       T.TENSOR_QUANT8_ASYMM_SIGNED)
    np.testing.assert_array_equal(q, [0, 1, -1, 3, -3, 127, -128])
    q = quant.quantize(np.array([JUST_BELOW_HALF, 0.5, 2.5], F32), 1.0, 10, T.TENSOR_QUANT8_ASYMM)
    np.testing.assert_array_equal(q, [10, 11, 13])


def test_quantize_multiplier_rounds_half_away():
    # 0.5 + 2^-32 -> mantissa * 2^31 = 2^30 + 0.5: std::round gives 2^30 + 1
    q, shift = quant.quantize_multiplier(0.5 + 2.0**-32)
    assert (q, shift) == ((1 << 30) + 1, 0)


def test_wrap():
    np.testing.assert_array_equal(fp.wrap32(np.array([2**31, -(2**31) - 1, 5])), [-(2**31), 2**31 - 1, 5])
    np.testing.assert_array_equal(fp.wrap16(np.array([32768, -32769, -7])), [-32768, 32767, -7])


@pytest.mark.parametrize("exponent,want", [(1, [2**31 - 1, -(2**31), 6]), (-1, [2**29, -(2**29), 2]),
                                           (0, [2**30, -(2**30), 3])])
def test_saturating_rounding_multiply_by_pot(exponent, want):
    np.testing.assert_array_equal(
        fp.saturating_rounding_multiply_by_pot(np.array([2**30, -(2**30), 3]), exponent), want)


def test_exp_on_negative_values_all_integer_bits():
    for bits in (0, 2, 4, 5, 6):
        a = -np.arange(0, 2**31 - 1, 2**31 // 331, dtype=np.int64)
        got = fp.exp_on_negative_values(a, bits) / 2**31
        np.testing.assert_allclose(got, np.exp(a / 2.0 ** (31 - bits)), atol=3e-6)


def test_inv_sqrt_multiplier_int_equals_the_array_version():
    rng = np.random.default_rng(5)
    vals = [*range(0, 300), *(int(v) for v in rng.integers(0, 2**31, 3000)),
            *(2**k + d for k in range(31) for d in (-1, 0, 1)), 2**31 - 1]
    a = np.array(vals, np.int64)
    for rev in (-1, 1):
        q, s = fp.inv_sqrt_multiplier(a, rev)
        assert [fp.inv_sqrt_multiplier_int(v, rev) for v in vals] == list(zip(q.tolist(), s.tolist()))
