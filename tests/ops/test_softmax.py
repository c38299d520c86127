"""SOFTMAX and LOG_SOFTMAX against float numpy references; the quantized
kernel's fixed-point pieces against their real-valued functions."""

from __future__ import annotations

import numpy as np
import pytest

from nnhal.hal import OperandType as T
from nnhal.hal import OperationType as Op
from nnhal.ops import fixedpoint as fp
from nnhal.ops.base import (
    NUMPY_DTYPE,
    V1_0,
    V1_1,
    V1_2,
    V1_3,
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

F32, F16 = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16
Q8, Q8S = T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED


def tensor(values, type_=F32, scale=0.0, zp=0) -> Tensor:
    return Tensor(type_, np.asarray(values, NUMPY_DTYPE[type_]), scale, zp)


def scalar(v, type_=T.FLOAT32) -> Tensor:
    return Tensor(type_, np.array(v, NUMPY_DTYPE[type_]))


def run(op, inputs, scale=0.0, zp=0) -> np.ndarray:
    x = inputs[0]
    out = OutputSpec(x.type, (), scale, zp)
    (res,) = run_operation(op, inputs, [out], **PHASES)
    assert res.dtype == NUMPY_DTYPE[x.type]
    return res


def softmax_ref(x, beta, axis):
    x = np.asarray(x, np.float64)
    e = np.exp((x - x.max(axis=axis, keepdims=True)) * beta)
    return e / e.sum(axis=axis, keepdims=True)


def validate(op, ins, outs, version=V1_3) -> None:
    opdef = REGISTRY[op]
    i = OpInfo(type=op, inputs=[OperandInfo(t, tuple(d)) for t, d in ins],
               outputs=[OperandInfo(t, tuple(d)) for t, d in outs], version=version)
    match_signature(opdef, [o.type for o in i.inputs], [o.type for o in i.outputs], version)
    if opdef.validate:
        opdef.validate(i)


RNG = np.random.default_rng(7)


# --------------------------------------------------------------------------
# float SOFTMAX


@pytest.mark.parametrize("shape,axis", [((5,), 0), ((2, 5), -1), ((2, 3, 4), 1), ((2, 3, 4, 2), 0), ((3, 4), -2)])
def test_softmax_float_axes(shape, axis):
    x = RNG.normal(size=shape).astype(np.float32) * 3
    out = run(Op.SOFTMAX, [tensor(x), scalar(0.7), scalar(axis, T.INT32)])
    np.testing.assert_allclose(out, softmax_ref(x, 0.7, axis), rtol=1e-5, atol=1e-6)


def test_softmax_default_axis_is_last():
    x = RNG.normal(size=(2, 3, 4)).astype(np.float32)
    np.testing.assert_allclose(run(Op.SOFTMAX, [tensor(x), scalar(1.0)]), softmax_ref(x, 1.0, -1), rtol=1e-5)


def test_softmax_float16():
    x = RNG.normal(size=(3, 4)).astype(np.float16)
    out = run(Op.SOFTMAX, [tensor(x, F16), scalar(2.0, T.FLOAT16)])
    np.testing.assert_allclose(out.astype(np.float32), softmax_ref(x, 2.0, -1), rtol=2e-3, atol=1e-3)


def test_softmax_zero_sized():
    assert REGISTRY[Op.SOFTMAX].allow_zero_sized
    assert run(Op.SOFTMAX, [tensor(np.zeros((0, 3), np.float32)), scalar(1.0)]).shape == (0, 3)


def test_softmax_runtime_errors(kernel_only):
    x = tensor(np.zeros((2, 3), np.float32))
    with pytest.raises(OpExecutionError):
        run(Op.SOFTMAX, [x, scalar(0.0)])  # beta must be > 0
    with pytest.raises(OpExecutionError):
        run(Op.SOFTMAX, [x, scalar(1.0), scalar(2, T.INT32)])
    with pytest.raises(OpExecutionError):
        run(Op.SOFTMAX, [tensor(np.zeros((1, 1, 1, 1, 2), np.float32)), scalar(1.0)])


# --------------------------------------------------------------------------
# quantized SOFTMAX


@pytest.mark.parametrize("n,expect", [(1, 255), (2, 128), (4, 64), (8, 32)])
def test_softmax_quant_equal_inputs_exact(n, expect):
    out = run(Op.SOFTMAX, [tensor(np.full((1, n), 77), Q8, 0.1, 10), scalar(1.0)], 1 / 256, 0)
    np.testing.assert_array_equal(out, np.full((1, n), expect))


@pytest.mark.parametrize("beta,scale", [(1.0, 0.5), (0.1, 0.05), (1e-5, 1.0), (2.0, 0.01), (1.0, 1 / 16)])
def test_softmax_quant_within_one_of_float(beta, scale):
    q = RNG.integers(0, 256, (6, 10)).astype(np.uint8)
    out = run(Op.SOFTMAX, [tensor(q, Q8, scale, 128), scalar(beta)], 1 / 256, 0)
    real = (q.astype(np.float64) - 128) * scale
    expect = np.clip(np.round(softmax_ref(real, beta, -1) * 256), 0, 255)
    assert np.max(np.abs(out.astype(int) - expect)) <= 1


def test_softmax_quant_signed_matches_unsigned():
    q = RNG.integers(0, 256, (3, 2, 7)).astype(np.uint8)
    for axis in (0, 1, 2):
        u = run(Op.SOFTMAX, [tensor(q, Q8, 0.2, 100), scalar(1.0), scalar(axis, T.INT32)], 1 / 256, 0)
        s = run(Op.SOFTMAX, [tensor(q.astype(np.int16) - 128, Q8S, 0.2, -28), scalar(1.0), scalar(axis, T.INT32)],
                1 / 256, -128)
        np.testing.assert_array_equal(s.astype(int), u.astype(int) - 128)


def test_softmax_quant_far_below_max_is_zero():
    # differences beyond the Q5.26 input radius give 0 (stored qmin)
    out = run(Op.SOFTMAX, [tensor([[255, 0]], Q8, 1.0, 0), scalar(1.0)], 1 / 256, 0)
    np.testing.assert_array_equal(out, [[255, 0]])


def test_softmax_quant_bad_output_quantization():
    x = tensor([[1, 2]], Q8, 0.5, 0)
    with pytest.raises(OpExecutionError):
        run(Op.SOFTMAX, [x, scalar(1.0)], 1 / 128, 0)
    with pytest.raises(OpExecutionError):
        run(Op.SOFTMAX, [tensor([[1, 2]], Q8S, 0.5, 0), scalar(1.0)], 1 / 256, 0)


def test_fixed_point_helpers():
    a = -np.arange(0, 31 * 64, 7, dtype=np.int64) * (1 << 20)  # Q5.26 values in (-31, 0]
    got = fp.exp_on_negative_values(a, 5) / 2**31
    np.testing.assert_allclose(got, np.exp(a / 2**26), atol=1e-6)
    x = np.arange(0, 2**31, 2**31 // 97, dtype=np.int64)
    got = fp.one_over_one_plus_x_for_x_in_0_1(x) / 2**31
    np.testing.assert_allclose(got, 1 / (1 + x / 2**31), atol=2e-9)


# --------------------------------------------------------------------------
# SOFTMAX validation


def test_softmax_validation():
    validate(Op.SOFTMAX, [(F32, (2, 3)), (T.FLOAT32, ())], [(F32, (2, 3))], V1_0)
    validate(Op.SOFTMAX, [(Q8, (1, 2, 2, 3)), (T.FLOAT32, ())], [(Q8, (1, 2, 2, 3))], V1_0)
    with pytest.raises(OpValidationError):  # rank 3 needs 1.2
        validate(Op.SOFTMAX, [(F32, (2, 3, 4)), (T.FLOAT32, ())], [(F32, (2, 3, 4))], V1_1)
    validate(Op.SOFTMAX, [(F32, (2, 3, 4)), (T.FLOAT32, ())], [(F32, (2, 3, 4))], V1_2)
    with pytest.raises(OpValidationError):  # axis input since 1.2
        validate(Op.SOFTMAX, [(F32, (2, 3)), (T.FLOAT32, ()), (T.INT32, ())], [(F32, (2, 3))], V1_1)
    with pytest.raises(OpValidationError):  # float16 beta for float16 input
        validate(Op.SOFTMAX, [(F16, (2, 3)), (T.FLOAT32, ())], [(F16, (2, 3))])
    with pytest.raises(OpValidationError):
        validate(Op.SOFTMAX, [(Q8S, (2, 3)), (T.FLOAT32, ())], [(Q8S, (2, 3))], V1_2)
    with pytest.raises(OpValidationError):
        validate(Op.SOFTMAX, [(F32, (1, 1, 1, 1, 3)), (T.FLOAT32, ())], [(F32, (1, 1, 1, 1, 3))])


# --------------------------------------------------------------------------
# LOG_SOFTMAX


@pytest.mark.parametrize("shape,axis,beta", [((4,), 0, 1.0), ((2, 3, 5), 1, 0.5), ((2, 1, 3, 2, 2), -1, 3.0)])
def test_log_softmax(shape, axis, beta):
    x = RNG.normal(size=shape).astype(np.float32)
    out = run(Op.LOG_SOFTMAX, [tensor(x), scalar(beta), scalar(axis, T.INT32)])
    np.testing.assert_allclose(out, np.log(softmax_ref(x, beta, axis)), rtol=1e-5, atol=1e-5)


def test_log_softmax_float16_and_errors():
    x = RNG.normal(size=(2, 4)).astype(np.float16)
    out = run(Op.LOG_SOFTMAX, [tensor(x, F16), scalar(1.0, T.FLOAT16), scalar(-1, T.INT32)])
    np.testing.assert_allclose(out.astype(np.float32), np.log(softmax_ref(x, 1.0, -1)), atol=5e-3)
    with pytest.raises(OpExecutionError):
        run(Op.LOG_SOFTMAX, [tensor(x, F16), scalar(1.0, T.FLOAT16), scalar(2, T.INT32)])
    with pytest.raises(OpValidationError):
        validate(Op.LOG_SOFTMAX, [(Q8, (2, 3)), (T.FLOAT32, ()), (T.INT32, ())], [(Q8, (2, 3))])
    with pytest.raises(OpValidationError):  # the axis is required
        validate(Op.LOG_SOFTMAX, [(F32, (2, 3)), (T.FLOAT32, ())], [(F32, (2, 3))])
    with pytest.raises(OpValidationError):
        validate(Op.LOG_SOFTMAX, [(F32, (2, 3)), (T.FLOAT32, ()), (T.INT32, ())], [(F32, (2, 3))], V1_1)


def test_log_softmax_parameters_prepared_or_read_at_run_time():
    from nnhal.ops.run import prepare_operation, tensor_info

    x = tensor(RNG.normal(size=(2, 3, 4)).astype(np.float32))
    ins = [x, scalar(0.7), scalar(1, T.INT32)]
    out = [OutputSpec(F32, ())]
    const = prepare_operation(Op.LOG_SOFTMAX, [tensor_info(t, i > 0) for i, t in enumerate(ins)], out)
    assert const.state is not None and const.state.value(None) == (np.float32(0.7), 1)
    runtime = prepare_operation(Op.LOG_SOFTMAX, [tensor_info(t) for t in ins], out)
    assert runtime.state is None  # NOTE: not constants: execute reads them
    want = const.run(ins)[0]
    np.testing.assert_array_equal(runtime.run(ins)[0].view(np.uint32), want.view(np.uint32))
    # the prepared values are the model's: others at run time do not reach the kernel
    np.testing.assert_array_equal(const.run([x, scalar(5.0), scalar(0, T.INT32)])[0], want)
    # a bad constant axis: the model prepares, each of its executions fails
    bad = [x, scalar(1.0), scalar(3, T.INT32)]
    p = prepare_operation(Op.LOG_SOFTMAX, [tensor_info(t, i > 0) for i, t in enumerate(bad)], out)
    for _ in range(2):
        with pytest.raises(OpExecutionError, match="axis 3"):
            p.run(bad)


@pytest.mark.parametrize("type_,btype", [(F32, T.FLOAT32), (F16, T.FLOAT16)])
@pytest.mark.parametrize("shape,axis,beta", [((20, 300), -1, 1.0), ((7, 30, 5), 1, 0.37), ((3, 4, 5, 6), 0, 25.0)])
def test_log_softmax_bits_as_the_formula(type_, btype, shape, axis, beta):
    """(x - max) * beta - log(sum(exp(...))) with exp, the sum and the difference in
    double, rounded once to the output type."""
    dt = NUMPY_DTYPE[type_]
    x = np.random.default_rng(3).normal(0, 30, shape).astype(dt)
    v = x.astype(np.float32)
    d = (v - v.max(axis=axis, keepdims=True)) * np.float32(np.array(beta, dt).item())
    with np.errstate(all="ignore"):
        want = (d - np.log(np.sum(np.exp(d.astype(np.float64)), axis=axis, keepdims=True))).astype(dt)
    got = run(Op.LOG_SOFTMAX, [tensor(x, type_), scalar(beta, btype), scalar(axis, T.INT32)])
    assert got.tobytes() == want.tobytes()
