"""FLOOR ABS EXP LOG NEG RSQRT SIN SQRT against numpy in float64, int32
variants, float16 rounding and the error paths."""

from __future__ import annotations

import math

import numpy as np
import pytest

from nnhal.hal import HalVersion, OperandType, OperationType
from nnhal.ops.base import (
    NUMPY_DTYPE,
    V1_0,
    V1_2,
    OperandInfo,
    OpExecutionError,
    OpInfo,
    OpValidationError,
    OutputSpec,
    Tensor,
    match_signature,
)
from nnhal.ops.registry import REGISTRY
from nnhal.ops.run import run_operation

# every kernel test through validate, prepare (scalars as the model's constants) and execute;
# a test of a kernel's own run-time checks skips validation explicitly (kernel_only)
PHASES = {"scalar_constants": True, "validate": True}

T = OperandType
Op = OperationType


def run(op: OperationType, t: OperandType, data) -> np.ndarray:
    x = Tensor(t, np.asarray(data, NUMPY_DTYPE[t]))
    return run_operation(op, [x], [OutputSpec(t, ())], **PHASES)[0]


REFS = {
    Op.FLOOR: math.floor, Op.ABS: abs, Op.EXP: math.exp, Op.LOG: math.log, Op.NEG: lambda v: -v,
    Op.RSQRT: lambda v: 1 / math.sqrt(v), Op.SIN: math.sin, Op.SQRT: math.sqrt,
}


@pytest.mark.parametrize("op", list(REFS))
@pytest.mark.parametrize("t,rtol", [(T.TENSOR_FLOAT32, 1e-6), (T.TENSOR_FLOAT16, 1e-3)])
def test_float_against_python_math(op, t, rtol):
    values = np.array([[0.25, 1.5], [2.75, 7.0]])
    out = run(op, t, values)
    assert out.dtype == NUMPY_DTYPE[t] and out.shape == (2, 2)
    want = np.vectorize(REFS[op])(values.astype(NUMPY_DTYPE[t]).astype(np.float64))
    np.testing.assert_allclose(out.astype(np.float64), want, rtol=rtol)


def test_int32_abs_neg_wrap():
    np.testing.assert_array_equal(run(Op.ABS, T.TENSOR_INT32, [-3, 4, -(2**31)]), [3, 4, -(2**31)])
    np.testing.assert_array_equal(run(Op.NEG, T.TENSOR_INT32, [-3, 4, -(2**31)]), [3, -4, -(2**31)])


def test_special_values():
    out = run(Op.LOG, T.TENSOR_FLOAT32, [0.0, -1.0])
    assert out[0] == -np.inf and np.isnan(out[1])
    assert run(Op.RSQRT, T.TENSOR_FLOAT32, [0.0])[0] == np.inf
    np.testing.assert_array_equal(run(Op.FLOOR, T.TENSOR_FLOAT32, [-0.5, 2.0, -2.0]), [-1.0, 2.0, -2.0])


def test_signatures():
    f32, f16, i32 = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32
    match_signature(REGISTRY[Op.FLOOR], [f32], [f32], V1_0)
    with pytest.raises(OpValidationError, match="before HAL"):
        match_signature(REGISTRY[Op.FLOOR], [f16], [f16], V1_0)
    with pytest.raises(OpValidationError, match="before HAL"):
        match_signature(REGISTRY[Op.ABS], [i32], [i32], V1_2)
    match_signature(REGISTRY[Op.NEG], [i32], [i32], V1_2)
    for op in (Op.EXP, Op.LOG, Op.RSQRT, Op.SIN, Op.SQRT, Op.FLOOR):
        with pytest.raises(OpValidationError):
            match_signature(REGISTRY[op], [i32], [i32])
    with pytest.raises(OpValidationError):
        match_signature(REGISTRY[Op.EXP], [f32], [f16])
    with pytest.raises(OpValidationError):
        match_signature(REGISTRY[Op.SQRT], [T.TENSOR_QUANT8_ASYMM], [T.TENSOR_QUANT8_ASYMM])


def test_floor_rank_limit(kernel_only):
    info = OpInfo(Op.FLOOR, [OperandInfo(T.TENSOR_FLOAT32, (1, 1, 1, 1, 2))], [OperandInfo(T.TENSOR_FLOAT32, ())])
    with pytest.raises(OpValidationError):
        REGISTRY[Op.FLOOR].validate(info)
    with pytest.raises(OpExecutionError):
        run(Op.FLOOR, T.TENSOR_FLOAT32, np.ones((1, 1, 1, 1, 2)))
    # other unary ops have no rank limit
    assert run(Op.EXP, T.TENSOR_FLOAT32, np.zeros((1, 1, 1, 1, 2))).shape == (1, 1, 1, 1, 2)


def test_zero_sized_inputs_are_not_allowed():
    for op in REFS:
        assert not REGISTRY[op].allow_zero_sized


# --------------------------------------------------------------------------
# RSQRT of quantized tensors (AIDL version 3): Android 13's Elementwise.cpp makeQuantized, transcribed one
# value at a time (C++ float arithmetic as numpy float32 scalars; std::round, std::min / std::max as written)


def _rsqrt_quant_reference(v: int, in_scale: float, in_zp: int, out_scale: float, out_zp: int, lo: int,
                           hi: int) -> int:
    f32 = np.float32
    x = f32(v - in_zp) * f32(in_scale)
    with np.errstate(all="ignore"):
        res = f32(1.0) / np.sqrt(x)
        q = res / f32(out_scale)
    if np.isfinite(q):
        r = math.floor(abs(float(q)) + 0.5)
        q = f32(math.copysign(r, float(q)))
    q = f32(out_zp) + q
    m = q if q < f32(hi) else f32(hi)  # NOTE: std::min(hi, q): hi unless q < hi (a NaN keeps hi)
    m = m if f32(lo) < m else f32(lo)  # NOTE: std::max(lo, m)
    return int(m)


@pytest.mark.parametrize("t", [T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED])
@pytest.mark.parametrize("in_q,out_q", [((0.25, 0), (0.25, 0)), ((0.125, 10), (0.01, 75)), ((0.003, -3), (0.07, -100)),
                                        ((1.7, 100), (0.0009, 0)), ((0.5, 127), (2.0, -128))])
def test_rsqrt_quant8_every_value(t: T, in_q: tuple, out_q: tuple) -> None:
    lo, hi = (0, 255) if t == T.TENSOR_QUANT8_ASYMM else (-128, 127)
    clamp = lambda zp: min(hi, max(lo, zp))  # noqa: E731
    (si, zi), (so, zo) = (in_q[0], clamp(in_q[1])), (out_q[0], clamp(out_q[1]))
    values = np.arange(lo, hi + 1).astype(NUMPY_DTYPE[t])
    got = run_operation(Op.RSQRT, [Tensor(t, values, si, zi)], [OutputSpec(t, (), so, zo)],
                        version=HalVersion.AIDL_V3, **PHASES)[0]
    want = [_rsqrt_quant_reference(int(v), si, zi, so, zo, lo, hi) for v in values]
    np.testing.assert_array_equal(got.astype(np.int64), want)
    assert got[values == zi][0] == hi  # NOTE: 0 -> +inf -> the maximum; a negative value -> NaN -> the maximum too
    if zi > lo:
        assert got[values == zi - 1][0] == hi


def test_rsqrt_quant8_needs_aidl_version_3() -> None:
    x = Tensor(T.TENSOR_QUANT8_ASYMM, np.array([4, 16], np.uint8), 0.25, 0)
    out = [OutputSpec(T.TENSOR_QUANT8_ASYMM, (), 0.25, 0)]
    for version in (HalVersion.V1_2, HalVersion.V1_3, HalVersion.AIDL_V1, HalVersion.AIDL_V2):
        with pytest.raises(OpValidationError, match="before HAL AIDL_V3"):
            run_operation(Op.RSQRT, [x], out, version=version, **PHASES)
    np.testing.assert_array_equal(run_operation(Op.RSQRT, [x], out, version=HalVersion.AIDL_V3, **PHASES)[0],
                                  [4, 2])
