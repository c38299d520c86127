"""CAST QUANTIZE DEQUANTIZE: C++ conversion semantics, std::round,
per-channel and float16 dequantization, and the error paths."""

from __future__ import annotations

import numpy as np
import pytest

from nnhal.hal import OperandType, OperationType, SymmPerChannelQuantParams
from nnhal.ops import fixedpoint as fp
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
from nnhal.ops.registry import REGISTRY
from nnhal.ops.run import run_operation

# every kernel test through validate, prepare (scalars as the model's constants) and execute;
# a test of a kernel's own run-time checks skips validation explicitly (kernel_only)
PHASES = {"scalar_constants": True, "validate": True}

T = OperandType
Op = OperationType


def run(op: OperationType, x: Tensor, out_type: OperandType, scale: float = 0.0, zp: int = 0) -> np.ndarray:
    return run_operation(op, [x], [OutputSpec(out_type, (), scale, zp)], **PHASES)[0]


def tensor(t: OperandType, data, scale: float = 0.0, zp: int = 0, cq=None) -> Tensor:
    return Tensor(t, np.asarray(data, dtype=NUMPY_DTYPE[t]), scale, zp, cq)


def test_cast_float_to_int_truncates_and_uint8_saturates():
    x = tensor(T.TENSOR_FLOAT32, [-300.7, -1.9, -0.5, 0.5, 1.9, 254.9, 300.2])
    np.testing.assert_array_equal(run(Op.CAST, x, T.TENSOR_INT32), [-300, -1, 0, 0, 1, 254, 300])
    np.testing.assert_array_equal(run(Op.CAST, x, T.TENSOR_QUANT8_ASYMM), [0, 0, 0, 0, 1, 254, 255])
    i = tensor(T.TENSOR_INT32, [-5, 3, 1000])
    np.testing.assert_array_equal(run(Op.CAST, i, T.TENSOR_QUANT8_ASYMM), [0, 3, 255])
    np.testing.assert_array_equal(run(Op.CAST, i, T.TENSOR_FLOAT16), np.array([-5, 3, 1000], np.float16))


def test_cast_ignores_quantization_parameters():
    q = tensor(T.TENSOR_QUANT8_ASYMM, [0, 7, 255], scale=0.5, zp=100)
    np.testing.assert_array_equal(run(Op.CAST, q, T.TENSOR_FLOAT32), [0.0, 7.0, 255.0])
    np.testing.assert_array_equal(run(Op.CAST, q, T.TENSOR_INT32), [0, 7, 255])


@pytest.mark.parametrize("t", [T.TENSOR_BOOL8, T.TENSOR_QUANT16_ASYMM, T.TENSOR_QUANT16_SYMM,
                               T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_QUANT8_SYMM])
def test_cast_identity_types(t):
    data = np.array([0, 1, 1, 0]) if t == T.TENSOR_BOOL8 else np.array([-3, 0, 5, 7]) % 100
    out = run(Op.CAST, tensor(t, data), t)
    np.testing.assert_array_equal(out, np.asarray(data, NUMPY_DTYPE[t]))
    match_signature(REGISTRY[Op.CAST], [t], [t])
    with pytest.raises(OpValidationError, match="before HAL"):
        match_signature(REGISTRY[Op.CAST], [t], [t], V1_2)
    with pytest.raises(OpValidationError):
        match_signature(REGISTRY[Op.CAST], [t], [T.TENSOR_FLOAT32])


def test_cast_validation():
    f32, i32 = T.TENSOR_FLOAT32, T.TENSOR_INT32
    match_signature(REGISTRY[Op.CAST], [f32], [i32], V1_2)
    with pytest.raises(OpValidationError, match="before HAL"):
        match_signature(REGISTRY[Op.CAST], [f32], [i32], V1_0)

    def info(ins, outs):
        return OpInfo(Op.CAST, [OperandInfo(f32, ins)], [OperandInfo(i32, outs)])

    REGISTRY[Op.CAST].validate(info((2, 3), (2, 3)))
    REGISTRY[Op.CAST].validate(info((2, 3), ()))
    REGISTRY[Op.CAST].validate(info((2, 3), (0, 0)))
    with pytest.raises(OpValidationError):
        REGISTRY[Op.CAST].validate(info((2, 3), (3, 2)))


def test_quantize_rounds_half_away_and_saturates():
    x = tensor(T.TENSOR_FLOAT32, [-0.5, 0.5, 1.5, 2.5, -2.5, 0.49999997, 1000.0, -1000.0])
    np.testing.assert_array_equal(run(Op.QUANTIZE, x, T.TENSOR_QUANT8_ASYMM, 1.0, 10),
                                  [9, 11, 12, 13, 7, 10, 255, 0])
    np.testing.assert_array_equal(run(Op.QUANTIZE, x, T.TENSOR_QUANT8_ASYMM_SIGNED, 1.0, 0),
                                  [-1, 1, 2, 3, -3, 0, 127, -128])
    h = tensor(T.TENSOR_FLOAT16, [0.25, -0.75])
    np.testing.assert_array_equal(run(Op.QUANTIZE, h, T.TENSOR_QUANT8_ASYMM, 0.5, 128), [129, 126])
    assert run(Op.QUANTIZE, tensor(T.TENSOR_FLOAT32, np.zeros((0, 2))), T.TENSOR_QUANT8_ASYMM, 1.0, 0).shape == (0, 2)
    with pytest.raises(OpValidationError):
        match_signature(REGISTRY[Op.QUANTIZE], [T.TENSOR_INT32], [T.TENSOR_QUANT8_ASYMM])


def test_dequantize():
    q = tensor(T.TENSOR_QUANT8_ASYMM, [0, 128, 255], 0.5, 128)
    np.testing.assert_array_equal(run(Op.DEQUANTIZE, q, T.TENSOR_FLOAT32), [-64.0, 0.0, 63.5])
    out16 = run(Op.DEQUANTIZE, q, T.TENSOR_FLOAT16)
    assert out16.dtype == np.float16
    np.testing.assert_array_equal(out16, [-64.0, 0.0, 63.5])
    s = tensor(T.TENSOR_QUANT8_SYMM, [-128, 3], 0.25, 0)
    np.testing.assert_array_equal(run(Op.DEQUANTIZE, s, T.TENSOR_FLOAT32), [-32.0, 0.75])
    signed = tensor(T.TENSOR_QUANT8_ASYMM_SIGNED, [-128, 127], 1.0, -1)
    np.testing.assert_array_equal(run(Op.DEQUANTIZE, signed, T.TENSOR_FLOAT32), [-127.0, 128.0])


def test_dequantize_per_channel(kernel_only):
    cq = SymmPerChannelQuantParams(scales=[0.5, 2.0, 1.0], channelDim=1)
    data = np.array([[1, 2, 3], [-4, -5, -6]])
    out = run(Op.DEQUANTIZE, tensor(T.TENSOR_QUANT8_SYMM_PER_CHANNEL, data, cq=cq), T.TENSOR_FLOAT32)
    np.testing.assert_array_equal(out, data * np.array([0.5, 2.0, 1.0]))
    bad = SymmPerChannelQuantParams(scales=[0.5, 2.0], channelDim=1)
    with pytest.raises(OpExecutionError):
        run(Op.DEQUANTIZE, tensor(T.TENSOR_QUANT8_SYMM_PER_CHANNEL, data, cq=bad), T.TENSOR_FLOAT32)
    info = OpInfo(Op.DEQUANTIZE, [OperandInfo(T.TENSOR_QUANT8_SYMM_PER_CHANNEL, (2, 3), channel_quant=bad)],
                  [OperandInfo(T.TENSOR_FLOAT32, ())])
    with pytest.raises(OpValidationError):
        REGISTRY[Op.DEQUANTIZE].validate(info)


def test_dequantize_signatures_and_rank(kernel_only):
    q8, f32, f16 = T.TENSOR_QUANT8_ASYMM, T.TENSOR_FLOAT32, T.TENSOR_FLOAT16
    match_signature(REGISTRY[Op.DEQUANTIZE], [q8], [f32], V1_0)
    with pytest.raises(OpValidationError, match="before HAL"):
        match_signature(REGISTRY[Op.DEQUANTIZE], [q8], [f16], V1_0)
    with pytest.raises(OpValidationError):
        match_signature(REGISTRY[Op.DEQUANTIZE], [q8], [q8])
    with pytest.raises(OpExecutionError):
        run(Op.DEQUANTIZE, tensor(q8, np.zeros((1, 1, 1, 1, 1)), 1.0, 0), f32)
    assert run(Op.DEQUANTIZE, tensor(q8, np.zeros((0, 4)), 1.0, 0), f32).shape == (0, 4)


@pytest.mark.parametrize("in_t", [T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_QUANT8_SYMM])
@pytest.mark.parametrize("out_t", [T.TENSOR_FLOAT32, T.TENSOR_FLOAT16])
@pytest.mark.parametrize("scale", [0.37, 1e-45, 3e38])
def test_dequantize_table_equals_the_computation(in_t, out_t, scale):
    """An 8-bit input is dequantized through the 256-entry table prepare builds:
    every code gives exactly what the computation gives (overflow to inf included)."""
    from nnhal.ops.run import prepare_operation, tensor_info

    zp = 0 if in_t == T.TENSOR_QUANT8_SYMM else (3 if in_t == T.TENSOR_QUANT8_ASYMM_SIGNED else 130)
    codes = np.arange(256, dtype=np.uint8).view(NUMPY_DTYPE[in_t]).reshape(4, 8, 8)
    x = Tensor(in_t, codes, scale, zp)
    p = prepare_operation(OperationType.DEQUANTIZE, [tensor_info(x)], [OutputSpec(out_t, ())])
    assert p.state is not None and p.state.shape == (256,)
    (got,) = p.run([x])
    p.state = None  # the computation itself
    (want,) = p.run([x])
    assert got.dtype == want.dtype == NUMPY_DTYPE[out_t] and got.shape == (4, 8, 8)
    np.testing.assert_array_equal(got.view(np.uint8 if got.itemsize == 1 else f"u{got.itemsize}"),
                                  want.view(np.uint8 if want.itemsize == 1 else f"u{want.itemsize}"))
    (strided,) = prepare_operation(OperationType.DEQUANTIZE, [tensor_info(x)], [OutputSpec(out_t, ())]).run(
        [Tensor(in_t, codes[:, ::2, 1::3], scale, zp)])
    np.testing.assert_array_equal(strided, want[:, ::2, 1::3])


# --------------------------------------------------------------------------
# what prepare computes once (issue 20), and the run-time path that computes it per execution


@pytest.mark.parametrize("in_t", [T.TENSOR_FLOAT32, T.TENSOR_FLOAT16])
@pytest.mark.parametrize("out_t,scale,zp", [(T.TENSOR_QUANT8_ASYMM, 0.1, 128), (T.TENSOR_QUANT8_ASYMM_SIGNED, 3.0, -7),
                                             (T.TENSOR_QUANT8_ASYMM, 1e-3, 0)])
def test_quantize_prepared_parameters_give_the_computation(in_t, out_t, scale, zp):
    from nnhal.ops.quant import QUANT_RANGE
    from nnhal.ops.run import prepare_operation

    rng = np.random.default_rng(6)
    halves = (np.arange(-300, 300, dtype=np.float32) + np.float32(0.5)) * np.float32(scale)  # quotients near k + 1/2
    x = np.concatenate([rng.normal(0, 20, 2000), halves, np.nextafter(halves, np.float32(np.inf)),
                        np.nextafter(halves, np.float32(-np.inf)), np.float32([0.49999997, -0.49999997]) * scale,
                        [np.nan, np.inf, -np.inf, -0.0, 0.0]]).astype(NUMPY_DTYPE[in_t])
    if in_t == T.TENSOR_FLOAT32:  # NOTE: and random bit patterns (NaN payloads, subnormals, huge values)
        x = np.concatenate([x, rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32).view(np.float32)])
    else:  # every float16 value
        x = np.concatenate([x, np.arange(65536, dtype=np.uint16).view(np.float16)])
    xt = tensor(in_t, x)
    out = OutputSpec(out_t, (), scale, zp)
    p = prepare_operation(Op.QUANTIZE, [xt], [out])
    lo, hi = QUANT_RANGE[out_t]
    assert p.state == (np.float32(scale), np.float32(zp), np.float32(lo - zp), np.float32(hi - zp))
    assert all(v.dtype == np.float32 for v in p.state)
    # the direct computation: std::round(x / scale) + zeroPoint in float, clamped (NaN -> min)
    with np.errstate(all="ignore"):
        v = fp.round_half_away(xt.data.astype(np.float32) / np.float32(scale)) + np.float32(zp)
    want = np.clip(np.nan_to_num(v, nan=lo), lo, hi).astype(NUMPY_DTYPE[out_t])
    np.testing.assert_array_equal(p.run([xt])[0], want)
    np.testing.assert_array_equal(REGISTRY[Op.QUANTIZE].execute(ExecContext(Op.QUANTIZE, [xt], [out]))[0], want)


@pytest.mark.parametrize("src", [T.TENSOR_FLOAT16, T.TENSOR_FLOAT32, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM])
@pytest.mark.parametrize("dst", [T.TENSOR_FLOAT16, T.TENSOR_FLOAT32, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM])
def test_cast_conversion_chosen_at_prepare(src, dst):
    from nnhal.ops.run import prepare_operation

    values = np.array([-300.7, -1.5, 0.0, 0.5, 2.9, 254.6, 60000.0]) if src in (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16) \
        else np.array([-300, -1, 0, 1, 255, 256, 70000])
    x = tensor(src, values % 256 if src == T.TENSOR_QUANT8_ASYMM else values)
    out = OutputSpec(dst, ())
    p = prepare_operation(Op.CAST, [x], [out])
    assert callable(p.state)
    got = p.run([x])[0]
    assert got.dtype == NUMPY_DTYPE[dst] and got.shape == x.data.shape
    np.testing.assert_array_equal(REGISTRY[Op.CAST].execute(ExecContext(Op.CAST, [x], [out]))[0], got)
    if src == dst:
        assert got is not x.data
        np.testing.assert_array_equal(got, x.data)


@pytest.mark.parametrize("first,last", [(125, 127), (135, 136)])  # exponent fields: [2^-2, 1) and [2^8, 2^10)
def test_quantize_float32_rounding_is_std_round(first, last):
    """QUANTIZE rounds its clamped float32 quotient in float32 (trunc(v + copysign(HALF_DOWN, v))): equal to
    std::round (the float64 form, exact) on every float32 of the binades where it could go wrong (next to one half,
    and at the widest clamped quotients), both signs.  (Every float32 below 1024 was checked once the same way.)"""
    from nnhal.ops.conversion import HALF_DOWN

    for sign in (0, 1):
        bits = np.arange(first << 23, (last + 1) << 23, dtype=np.uint32) | np.uint32(sign << 31)
        v = bits.view(np.float32)
        t = np.copysign(HALF_DOWN, v)
        t += v
        w = np.copysign(np.float64(0.5), v)
        w += v
        assert np.array_equal(np.trunc(t), np.trunc(w))


def test_quantize_zero_d():
    got = run(Op.QUANTIZE, tensor(T.TENSOR_FLOAT32, -2.0), T.TENSOR_QUANT8_ASYMM, 0.5, 10)
    assert got.__class__ is np.ndarray and got.shape == () and got == 6
