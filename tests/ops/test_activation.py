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
    ExecContext,
    OperandInfo,
    OpExecutionError,
    OpInfo,
    OpValidationError,
    OutputSpec,
    Tensor,
    match_signature,
)
from nnhal.ops.quant import activation_range
from nnhal.ops.registry import REGISTRY
from nnhal.ops.run import prepare_operation, run_operation, tensor_info

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


# --------------------------------------------------------------------------
# what prepare computes once (issue 20), and the run-time path that computes it per execution


def codes(t: OperandType) -> np.ndarray:
    """Every value of an 8-bit type, entry i the value whose byte is i."""
    return np.arange(256, dtype=np.uint8).view(NUMPY_DTYPE[t])


def unprepared(op: OperationType, inputs: list[Tensor], out: OutputSpec) -> list:
    """``execute`` without a prepared state: what a runner that skips prepare gets."""
    return REGISTRY[op].execute(ExecContext(op, inputs, [out]))


@pytest.mark.parametrize("t", [Q8, Q8S])
@pytest.mark.parametrize("op", [Op.RELU, Op.RELU1, Op.RELU6])
@pytest.mark.parametrize("scale,zp_off", [(0.05, 100), (0.5, 0), (0.004, 255), (3.0, 128)])
def test_relu_quant_prepared_range_clamps_every_code(t, op, scale, zp_off):
    zp = RANGE[t][0] + zp_off
    x = tensor(t, codes(t).reshape(4, 8, 8), scale, zp)
    out = OutputSpec(t, (), scale, zp)
    p = prepare_operation(op, [x], [out])
    act = {Op.RELU: 1, Op.RELU1: 2, Op.RELU6: 3}[op]
    lo, hi = activation_range(act, scale, zp, t)
    kind, plo, phi = p.state
    assert kind == "quant" and (plo, phi) == (lo, hi) and plo.dtype == phi.dtype == NUMPY_DTYPE[t]
    want = np.clip(x.data.astype(np.int32), lo, hi).astype(NUMPY_DTYPE[t])  # the direct clamp of each code
    got = p.run([x])[0]
    assert got.dtype == NUMPY_DTYPE[t]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(unprepared(op, [x], out)[0], want)
    np.testing.assert_array_equal(p.run([tensor(t, x.data[:, ::2, 1::3], scale, zp)])[0], want[:, ::2, 1::3])


def _relu_where(xf: np.ndarray, lo: float, hi) -> np.ndarray:
    """The reference's std::min(std::max(lo, x), hi) written with comparisons."""
    v = np.where(np.float32(lo) < xf, xf, np.float32(lo))
    hi32 = np.finfo(np.float32).max if hi is None else np.float32(hi)
    return np.where(hi32 < v, hi32, v)


@pytest.mark.parametrize("op,lo,hi", [(Op.RELU, 0.0, None), (Op.RELU1, -1.0, 1.0), (Op.RELU6, 0.0, 6.0)])
def test_relu_float_bits_as_the_reference(op, lo, hi):
    # NOTE: every float16 value, random float32 bit patterns (NaN payloads, subnormals), and the edges
    f16 = np.arange(65536, dtype=np.uint16).view(np.float16)
    rng = np.random.default_rng(5)
    f32 = np.concatenate([f16.astype(np.float32),
                          rng.integers(0, 2**32, 100_000, dtype=np.uint64).astype(np.uint32).view(np.float32),
                          np.array([-0.0, 0.0, 6.0, -1.0, 1.0, np.nextafter(np.float32(6), np.float32(7))],
                                   np.float32)])
    got = run(op, [tensor(T.TENSOR_FLOAT32, f32)], T.TENSOR_FLOAT32)
    np.testing.assert_array_equal(got.view(np.uint32), _relu_where(f32, lo, hi).view(np.uint32))
    got16 = run(op, [tensor(T.TENSOR_FLOAT16, f16)], T.TENSOR_FLOAT16)
    with np.errstate(over="ignore"):  # NOTE: RELU's FLT_MAX bound is inf in float16
        want16 = _relu_where(f16.astype(np.float32), lo, hi).astype(np.float16)
    np.testing.assert_array_equal(got16.view(np.uint16), want16.view(np.uint16))
    out = OutputSpec(T.TENSOR_FLOAT32, ())
    np.testing.assert_array_equal(unprepared(op, [tensor(T.TENSOR_FLOAT32, f32)], out)[0].view(np.uint32),
                                  got.view(np.uint32))


def test_elu_alpha_prepared_or_read_at_run_time():
    x = tensor(T.TENSOR_FLOAT32, np.linspace(-5, 5, 41))
    alpha = tensor(T.FLOAT32, 0.7)
    out = OutputSpec(T.TENSOR_FLOAT32, ())
    const = prepare_operation(Op.ELU, [x, tensor_info(alpha, constant=True)], [out])
    assert const.state is not None and const.state.value(None) == np.float32(0.7)
    runtime = prepare_operation(Op.ELU, [x, alpha], [out])
    assert runtime.state is None  # NOTE: not a constant: execute reads it
    a, b = const.run([x, alpha])[0], runtime.run([x, alpha])[0]
    np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))
    # the prepared alpha is the model's: another value at run time does not reach the kernel
    np.testing.assert_array_equal(const.run([x, tensor(T.FLOAT32, 2.0)])[0], a)


@pytest.mark.parametrize("alpha", [0.5, 1.0, 3.7, -2.0, 0.0])
def test_elu_bits_as_the_formula(alpha):
    """max(0, x) + min(0, alpha * (exp(x) - 1)) in float32, on every float16 value
    and random float32 bit patterns (inf, NaN, overflow of exp included)."""
    f16 = np.arange(65536, dtype=np.uint16).view(np.float16)
    f32 = np.concatenate([f16.astype(np.float32), np.random.default_rng(6).integers(
        0, 2**32, 50_000, dtype=np.uint64).astype(np.uint32).view(np.float32)])
    for x, t, at in ((f32, T.TENSOR_FLOAT32, T.FLOAT32), (f16, T.TENSOR_FLOAT16, T.FLOAT16)):
        a = np.float32(np.array(alpha, x.dtype).item())
        xf = x.astype(np.float32)
        with np.errstate(all="ignore"):
            want = (np.maximum(np.float32(0), xf) + np.minimum(np.float32(0), a * (np.exp(xf) - np.float32(1))))
            want = want.astype(x.dtype)
        got = run(Op.ELU, [tensor(t, x), tensor(at, alpha)], t)
        assert got.dtype == x.dtype and got.tobytes() == want.tobytes()


def test_zero_d_tensors_give_arrays():
    """A 0-d tensor (numpy ufuncs give scalars for it) is an array out of every path."""
    f = tensor(T.TENSOR_FLOAT32, -2.0)
    for op, want in ((Op.RELU, 0.0), (Op.RELU1, -1.0), (Op.RELU6, 0.0)):
        got = run(op, [f], T.TENSOR_FLOAT32)
        assert got.__class__ is np.ndarray and got.shape == () and got == want
    got = run(Op.RELU6, [tensor(Q8, 200, 0.1, 0)], Q8, 0.1, 0)
    assert got.__class__ is np.ndarray and got.shape == () and got == 60
    got = run(Op.ELU, [f, tensor(T.FLOAT32, 1.0)], T.TENSOR_FLOAT32)
    assert got.__class__ is np.ndarray and got.shape == () and got == np.float32(np.exp(np.float32(-2)) - 1)
