"""RELU RELU1 RELU6 LOGISTIC TANH ELU HARD_SWISH PRELU: float kernels against
numpy, quantized kernels against the real-valued function (within one
quantum) and on hand-checked integer cases, plus the error paths."""

from __future__ import annotations

import numpy as np
import pytest

from nnhal.hal import OperandType, OperationType
from nnhal.ops.activation import fixed_logistic, fixed_tanh
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
Q8 = T.TENSOR_QUANT8_ASYMM
Q8S = T.TENSOR_QUANT8_ASYMM_SIGNED
RANGE = {Q8: (0, 255), Q8S: (-128, 127)}


def tensor(t: OperandType, data, scale: float = 0.0, zp: int = 0) -> Tensor:
    return Tensor(t, np.asarray(data, dtype=NUMPY_DTYPE[t]), scale, zp)


def run(op: OperationType, inputs: list[Tensor], out_type: OperandType, scale: float = 0.0, zp: int = 0):
    return run_operation(op, inputs, [OutputSpec(out_type, (), scale, zp)], **PHASES)[0]


def all_values(t: OperandType) -> np.ndarray:
    lo, hi = RANGE[t]
    return np.arange(lo, hi + 1)


def quant_ref(real: np.ndarray, scale: float, zp: int, t: OperandType) -> np.ndarray:
    lo, hi = RANGE[t]
    return np.clip(np.floor(real / scale + 0.5) + zp, lo, hi)


@pytest.mark.parametrize("op,lo,hi", [(Op.RELU, 0, np.inf), (Op.RELU1, -1, 1), (Op.RELU6, 0, 6)])
def test_relu_float(op, lo, hi):
    x = np.array([-7.0, -1.5, -0.5, 0.0, 0.5, 1.5, 5.0, 7.0], np.float32)
    for t in (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16):
        out = run(op, [tensor(t, x)], t)
        assert out.dtype == NUMPY_DTYPE[t]
        np.testing.assert_array_equal(out, np.clip(x, lo, hi))


@pytest.mark.parametrize("t", [Q8, Q8S])
@pytest.mark.parametrize("op,lo,hi", [(Op.RELU, 0, np.inf), (Op.RELU1, -1, 1), (Op.RELU6, 0, 6)])
def test_relu_quant(t, op, lo, hi):
    q = all_values(t)
    scale, zp = 0.05, RANGE[t][0] + 100
    out = run(op, [tensor(t, q, scale, zp)], t, scale, zp)
    want = quant_ref(np.clip((q - zp) * scale, lo, hi), scale, zp, t)
    np.testing.assert_array_equal(out, want)


def test_fixed_point_functions_are_accurate():
    raw = np.linspace(-15.9 * 2**27, 15.9 * 2**27, 5001).astype(np.int64)
    x = raw / 2**27
    assert np.abs(fixed_logistic(raw, 4) / 2**31 - 1 / (1 + np.exp(-x))).max() < 1e-6
    assert np.abs(fixed_tanh(raw, 4) / 2**31 - np.tanh(x)).max() < 1e-6
    assert fixed_logistic(np.array([0]), 4)[0] == 2**30 and fixed_tanh(np.array([0]), 4)[0] == 0


@pytest.mark.parametrize("t", [Q8, Q8S])
@pytest.mark.parametrize("scale", [0.5, 0.1, 1 / 16, 0.01])
def test_logistic_quant_within_one(t, scale):
    q = all_values(t)
    zp = RANGE[t][0] + 128
    out_zp = 0 if t == Q8 else -128
    out = run(Op.LOGISTIC, [tensor(t, q, scale, zp)], t, 1 / 256, out_zp)
    want = quant_ref(1 / (1 + np.exp(-(q - zp) * scale)), 1 / 256, out_zp, t)
    assert np.abs(out.astype(int) - want).max() <= 1


@pytest.mark.parametrize("t", [Q8, Q8S])
@pytest.mark.parametrize("scale", [0.5, 0.1, 1 / 16, 0.01])
def test_tanh_quant_within_one(t, scale):
    q = all_values(t)
    zp = RANGE[t][0] + 128
    out_zp = 128 if t == Q8 else 0
    out = run(Op.TANH, [tensor(t, q, scale, zp)], t, 1 / 128, out_zp)
    want = quant_ref(np.tanh((q - zp) * scale), 1 / 128, out_zp, t)
    assert np.abs(out.astype(int) - want).max() <= 1


def test_logistic_tanh_quant_require_fixed_output_params():
    with pytest.raises(OpExecutionError):
        run(Op.LOGISTIC, [tensor(Q8, [1, 2], 0.1, 128)], Q8, 1 / 128, 0)
    with pytest.raises(OpExecutionError):
        run(Op.TANH, [tensor(Q8S, [1, 2], 0.1, 0)], Q8S, 1 / 128, 128)


def test_logistic_tanh_float():
    x = np.array([-20.0, -1.0, 0.0, 0.5, 20.0], np.float32)
    np.testing.assert_allclose(run(Op.LOGISTIC, [tensor(T.TENSOR_FLOAT32, x)], T.TENSOR_FLOAT32),
                               1 / (1 + np.exp(-x.astype(np.float64))), rtol=1e-6)
    np.testing.assert_allclose(run(Op.TANH, [tensor(T.TENSOR_FLOAT16, x)], T.TENSOR_FLOAT16).astype(np.float64),
                               np.tanh(x), rtol=1e-3)


def hard_swish(x: np.ndarray) -> np.ndarray:
    return x * np.clip(x + 3, 0, 6) / 6


@pytest.mark.parametrize("t", [Q8, Q8S])
@pytest.mark.parametrize("in_scale,out_scale", [(0.078125, 0.03125), (0.05, 0.02), (0.5, 0.25), (0.01, 0.005)])
def test_hard_swish_quant_within_one(t, in_scale, out_scale):
    q = all_values(t)
    zp = RANGE[t][0] + 128
    out_zp = RANGE[t][0] + 20
    out = run(Op.HARD_SWISH, [tensor(t, q, in_scale, zp)], t, out_scale, out_zp)
    want = quant_ref(hard_swish((q - zp) * in_scale), out_scale, out_zp, t)
    assert np.abs(out.astype(int) - want).max() <= 1


def test_hard_swish_quant_reference_rounding():
    # 39 * 0.078125 = 3.046875 -> 97.5 on scale 1/32: the reference's fixed point gives 97
    assert run(Op.HARD_SWISH, [tensor(Q8, [167], 0.078125, 128)], Q8, 0.03125, 0)[0] == 97


def test_hard_swish_float_and_zero_sized():
    x = np.array([-4.0, -3.0, -1.0, 0.0, 1.0, 3.0, 4.0], np.float32)
    np.testing.assert_allclose(run(Op.HARD_SWISH, [tensor(T.TENSOR_FLOAT32, x)], T.TENSOR_FLOAT32), hard_swish(x),
                               rtol=1e-6)
    assert run(Op.HARD_SWISH, [tensor(T.TENSOR_FLOAT16, np.zeros((0, 3)))], T.TENSOR_FLOAT16).shape == (0, 3)
    assert run(Op.RELU, [tensor(T.TENSOR_FLOAT32, np.zeros((2, 0)))], T.TENSOR_FLOAT32).shape == (2, 0)


def test_elu():
    x = np.array([-3.0, -0.5, 0.0, 2.0], np.float32)
    alpha = 0.5
    want = np.where(x > 0, x, alpha * (np.exp(x) - 1))
    out = run(Op.ELU, [tensor(T.TENSOR_FLOAT32, x), tensor(T.FLOAT32, alpha)], T.TENSOR_FLOAT32)
    np.testing.assert_allclose(out, want, rtol=1e-6)
    out16 = run(Op.ELU, [tensor(T.TENSOR_FLOAT16, x), tensor(T.FLOAT16, alpha)], T.TENSOR_FLOAT16)
    np.testing.assert_allclose(out16.astype(np.float64), want, rtol=1e-3)


def test_prelu_float_broadcast():
    x = np.array([[-2.0, 1.0], [3.0, -4.0]], np.float32)
    alpha = np.array([0.5, 0.25], np.float32)
    out = run(Op.PRELU, [tensor(T.TENSOR_FLOAT32, x), tensor(T.TENSOR_FLOAT32, alpha)], T.TENSOR_FLOAT32)
    np.testing.assert_array_equal(out, [[-1.0, 1.0], [3.0, -1.0]])


@pytest.mark.parametrize("t", [Q8, Q8S])
def test_prelu_quant_within_one(t):
    q = all_values(t).reshape(-1, 1)
    lo = RANGE[t][0]
    a = np.array([lo + 50, lo + 200])
    sx, zx, sa, za, so, zo = 0.1, lo + 128, 0.01, lo + 100, 0.2, lo + 120
    out = run(Op.PRELU, [tensor(t, q, sx, zx), tensor(t, a, sa, za)], t, so, zo)
    xr, ar = (q - zx) * sx, (a - za) * sa
    want = quant_ref(np.where(xr >= 0, xr, xr * ar), so, zo, t)
    assert out.shape == (q.size, 2) and np.abs(out.astype(int) - want).max() <= 1


def test_signatures_and_validation(kernel_only):
    f32, f16 = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16
    match_signature(REGISTRY[Op.LOGISTIC], [Q8], [Q8], V1_0)
    with pytest.raises(OpValidationError, match="before HAL"):
        match_signature(REGISTRY[Op.TANH], [Q8], [Q8], V1_0)
    with pytest.raises(OpValidationError, match="before HAL"):
        match_signature(REGISTRY[Op.HARD_SWISH], [f32], [f32], V1_2)
    with pytest.raises(OpValidationError):
        match_signature(REGISTRY[Op.ELU], [f16, T.FLOAT32], [f16])
    with pytest.raises(OpValidationError):
        match_signature(REGISTRY[Op.RELU], [T.TENSOR_INT32], [T.TENSOR_INT32])
    with pytest.raises(OpValidationError):
        match_signature(REGISTRY[Op.PRELU], [f32, f16], [f32])
    info = OpInfo(Op.RELU, [OperandInfo(f32, (1, 2, 3, 4, 5))], [OperandInfo(f32, ())])
    with pytest.raises(OpValidationError):
        REGISTRY[Op.RELU].validate(info)
    with pytest.raises(OpExecutionError):
        run(Op.RELU6, [tensor(f32, np.zeros((1, 1, 1, 1, 1)))], f32)
    with pytest.raises(OpExecutionError):
        run(Op.PRELU, [tensor(f32, np.zeros((2, 3))), tensor(f32, np.zeros(2))], f32)


def test_relu_float_special_values_as_the_reference():
    x = tensor(T.TENSOR_FLOAT32, [np.nan, np.inf, -np.inf])
    np.testing.assert_array_equal(run(Op.RELU, [x], T.TENSOR_FLOAT32), [0.0, np.finfo(np.float32).max, 0.0])
    np.testing.assert_array_equal(run(Op.RELU1, [x], T.TENSOR_FLOAT32), [-1.0, 1.0, -1.0])
