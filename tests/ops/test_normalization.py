"""L2_NORMALIZATION, LOCAL_RESPONSE_NORMALIZATION, INSTANCE_NORMALIZATION."""

from __future__ import annotations

import numpy as np
import pytest

from nnhal.hal import OperandType as T
from nnhal.hal import OperationType as Op
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
from nnhal.ops.fixedpoint import inv_sqrt_multiplier, inv_sqrt_multiplier_int
from nnhal.ops.registry import REGISTRY
from nnhal.ops.run import prepare_operation, run_operation, tensor_info

# every kernel test through validate, prepare (scalars as the model's constants) and execute;
# a test of a kernel's own run-time checks skips validation explicitly (kernel_only)
PHASES = {"scalar_constants": True, "validate": True}


def tensor(values, type_=T.TENSOR_FLOAT32, scale=0.0, zp=0) -> Tensor:
    return Tensor(type_, np.asarray(values, NUMPY_DTYPE[type_]), scale, zp)


def scalar(v, type_) -> Tensor:
    return Tensor(type_, np.array(v, NUMPY_DTYPE[type_]))


def run(op, inputs, scale=0.0, zp=0) -> np.ndarray:
    x = inputs[0]
    out = OutputSpec(x.type, (), scale, zp)
    (res,) = run_operation(op, inputs, [out], **PHASES)
    assert res.dtype == NUMPY_DTYPE[x.type] and res.shape == x.data.shape
    return res


# --------------------------------------------------------------------------
# L2_NORMALIZATION


@pytest.mark.parametrize("shape,axis", [((2, 3, 4, 5), None), ((2, 3, 4, 5), 1), ((3, 4), -2), ((6,), 0),
                                        ((2, 3, 4), 2)])
def test_l2_float(shape, axis):
    rng = np.random.default_rng(0)
    x = rng.normal(size=shape).astype(np.float32)
    ins = [tensor(x)] + ([] if axis is None else [scalar(axis, T.INT32)])
    got = run(Op.L2_NORMALIZATION, ins)
    ax = -1 if axis is None else axis
    want = x / np.sqrt((x.astype(np.float64) ** 2).sum(axis=ax, keepdims=True))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_l2_float_zeros_and_float16():
    np.testing.assert_array_equal(run(Op.L2_NORMALIZATION, [tensor(np.zeros((1, 1, 1, 3)))]), 0)
    got = run(Op.L2_NORMALIZATION, [tensor([[3, 4]], T.TENSOR_FLOAT16)])
    np.testing.assert_allclose(got.astype(np.float32), [[0.6, 0.8]], rtol=1e-3)


def test_inv_sqrt_multiplier():
    acc = np.array([2, 3, 5, 100, 1000, 65025, 12345678, 2**29, 2**31 - 1], np.int64)
    mult, shift = inv_sqrt_multiplier(acc, -1)
    assert np.all(shift <= 0)
    approx = mult.astype(np.float64) * 2.0 ** (shift.astype(np.float64) - 31)
    np.testing.assert_allclose(approx, 1 / np.sqrt(acc.astype(np.float64)), rtol=1e-5)
    mult, shift = inv_sqrt_multiplier(np.array([0, 1]), -1)
    np.testing.assert_array_equal(mult, [2**31 - 1, 2**31 - 1])
    np.testing.assert_array_equal(shift, [0, 0])


@pytest.mark.parametrize("type_,zp,out_zp", [(T.TENSOR_QUANT8_ASYMM, 100, 128), (T.TENSOR_QUANT8_ASYMM_SIGNED, -3, 0)])
@pytest.mark.parametrize("axis", [-1, 1])
def test_l2_quant_close_to_float(type_, zp, out_zp, axis):
    rng = np.random.default_rng(2)
    lo, hi = (0, 255) if type_ == T.TENSOR_QUANT8_ASYMM else (-128, 127)
    q = rng.integers(lo, hi + 1, size=(2, 3, 4)).astype(NUMPY_DTYPE[type_])
    got = run(Op.L2_NORMALIZATION, [tensor(q, type_, 0.1, zp), scalar(axis, T.INT32)], 1 / 128, out_zp)
    real = q.astype(np.float64) - zp
    want = real / np.sqrt((real ** 2).sum(axis=axis, keepdims=True))
    want_q = np.clip(np.round(want * 128) + out_zp, lo, hi)
    assert np.abs(got.astype(np.int32) - want_q).max() <= 1


def test_l2_quant_zeros_and_output_scale_rule():
    q = tensor(np.full((1, 4), 7, np.uint8), T.TENSOR_QUANT8_ASYMM, 0.5, 7)
    np.testing.assert_array_equal(run(Op.L2_NORMALIZATION, [q], 1 / 128, 128), 128)
    with pytest.raises(OpExecutionError, match="1/128"):
        run(Op.L2_NORMALIZATION, [q], 1 / 64, 128)
    with pytest.raises(OpExecutionError, match="zero point"):
        run(Op.L2_NORMALIZATION, [tensor(np.zeros((1, 4), np.int8), T.TENSOR_QUANT8_ASYMM_SIGNED, 0.5)],
            1 / 128, 128)


def test_l2_bad_axis(kernel_only):
    with pytest.raises(OpExecutionError, match="axis"):
        run(Op.L2_NORMALIZATION, [tensor(np.ones((2, 2))), scalar(2, T.INT32)])
    with pytest.raises(OpExecutionError, match="rank"):
        run(Op.L2_NORMALIZATION, [tensor(np.ones((1, 1, 1, 1, 2)))])


def info(op, dims, n_inputs, version, in_type=T.TENSOR_FLOAT32) -> OpInfo:
    ins = [OperandInfo(in_type, dims)] + [OperandInfo(T.INT32, ())] * (n_inputs - 1)
    return OpInfo(type=op, inputs=ins, outputs=[OperandInfo(in_type, dims)], version=version)


def test_l2_validation():
    v = REGISTRY[Op.L2_NORMALIZATION].validate
    v(info(Op.L2_NORMALIZATION, (1, 2, 3, 4), 1, V1_0))
    v(info(Op.L2_NORMALIZATION, (2, 3), 1, V1_2))
    with pytest.raises(OpValidationError):
        v(info(Op.L2_NORMALIZATION, (2, 3), 1, V1_1))
    with pytest.raises(OpValidationError):
        v(info(Op.L2_NORMALIZATION, (1, 2, 3, 4, 5), 2, V1_3))
    sig = REGISTRY[Op.L2_NORMALIZATION]
    assert match_signature(sig, [T.TENSOR_FLOAT32], [T.TENSOR_FLOAT32], V1_0).version == V1_0
    assert match_signature(sig, [T.TENSOR_QUANT8_ASYMM, T.INT32], [T.TENSOR_QUANT8_ASYMM], V1_2)
    for ins, outs, ver in [
        ([T.TENSOR_FLOAT32, T.INT32], [T.TENSOR_FLOAT32], V1_1),            # axis needs 1.2
        ([T.TENSOR_QUANT8_ASYMM], [T.TENSOR_QUANT8_ASYMM], V1_1),           # quant needs 1.2
        ([T.TENSOR_QUANT8_ASYMM_SIGNED], [T.TENSOR_QUANT8_ASYMM_SIGNED], V1_2),
        ([T.TENSOR_FLOAT32, T.FLOAT32], [T.TENSOR_FLOAT32], V1_3),
        ([T.TENSOR_INT32], [T.TENSOR_INT32], V1_3),
    ]:
        with pytest.raises(OpValidationError):
            match_signature(sig, ins, outs, ver)


# --------------------------------------------------------------------------
# LOCAL_RESPONSE_NORMALIZATION


def naive_lrn(x, radius, bias, alpha, beta, axis):
    x = np.moveaxis(x.astype(np.float64), axis, -1)
    out = np.empty_like(x)
    n = x.shape[-1]
    for i in range(n):
        s = (x[..., max(0, i - radius):min(n, i + radius + 1)] ** 2).sum(axis=-1)
        out[..., i] = x[..., i] / (bias + alpha * s) ** beta
    return np.moveaxis(out, -1, axis)


@pytest.mark.parametrize("shape,axis,radius", [((1, 2, 2, 6), None, 2), ((2, 5, 3), 1, 1), ((7,), 0, 10),
                                               ((2, 4, 3, 2), -3, 0)])
def test_lrn(shape, axis, radius):
    rng = np.random.default_rng(3)
    x = rng.normal(size=shape).astype(np.float32)
    ins = [tensor(x), scalar(radius, T.INT32), scalar(1.5, T.FLOAT32), scalar(0.3, T.FLOAT32),
           scalar(0.75, T.FLOAT32)]
    if axis is not None:
        ins.append(scalar(axis, T.INT32))
    got = run(Op.LOCAL_RESPONSE_NORMALIZATION, ins)
    np.testing.assert_allclose(got, naive_lrn(x, radius, 1.5, 0.3, 0.75, -1 if axis is None else axis),
                               rtol=1e-5, atol=1e-6)


def test_lrn_float16_and_validation():
    x = np.array([[1, 2, 3, 4]], np.float16)
    ins = [tensor(x, T.TENSOR_FLOAT16), scalar(1, T.INT32)] + [scalar(v, T.FLOAT16) for v in (1.0, 1.0, 0.5)]
    got = run(Op.LOCAL_RESPONSE_NORMALIZATION, ins)
    np.testing.assert_allclose(got.astype(np.float32), naive_lrn(x, 1, 1.0, 1.0, 0.5, -1), rtol=2e-3)
    op = REGISTRY[Op.LOCAL_RESPONSE_NORMALIZATION]
    f32 = [T.TENSOR_FLOAT32, T.INT32, T.FLOAT32, T.FLOAT32, T.FLOAT32]
    assert match_signature(op, f32, [T.TENSOR_FLOAT32], V1_0)
    with pytest.raises(OpValidationError):
        match_signature(op, f32 + [T.INT32], [T.TENSOR_FLOAT32], V1_1)
    with pytest.raises(OpValidationError):  # float16 tensor with float32 scalars
        match_signature(op, [T.TENSOR_FLOAT16] + f32[1:], [T.TENSOR_FLOAT16], V1_3)
    with pytest.raises(OpValidationError):  # no quantized LRN
        match_signature(op, [T.TENSOR_QUANT8_ASYMM] + f32[1:], [T.TENSOR_QUANT8_ASYMM], V1_3)
    with pytest.raises(OpValidationError):
        op.validate(info(Op.LOCAL_RESPONSE_NORMALIZATION, (2, 3), 5, V1_1))
    op.validate(info(Op.LOCAL_RESPONSE_NORMALIZATION, (2, 3), 6, V1_2))


# --------------------------------------------------------------------------
# INSTANCE_NORMALIZATION


@pytest.mark.parametrize("nchw", [False, True])
def test_instance_norm(nchw):
    rng = np.random.default_rng(4)
    x = rng.normal(size=(2, 3, 4, 5)).astype(np.float32)  # NHWC
    gamma, beta, eps = 1.5, -0.25, 1e-3
    mean = x.mean(axis=(1, 2), keepdims=True, dtype=np.float64)
    var = ((x - mean) ** 2).mean(axis=(1, 2), keepdims=True)
    want = (x - mean) * gamma / np.sqrt(var + eps) + beta
    xin = x.transpose(0, 3, 1, 2) if nchw else x
    ins = [tensor(xin)] + [scalar(v, T.FLOAT32) for v in (gamma, beta, eps)] + [scalar(nchw, T.BOOL)]
    got = run(Op.INSTANCE_NORMALIZATION, ins)
    if nchw:
        got = got.transpose(0, 2, 3, 1)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_instance_norm_float16_and_errors():
    x = np.array([1, 2, 3, 4], np.float16).reshape(1, 2, 2, 1)
    ins = [tensor(x, T.TENSOR_FLOAT16)] + [scalar(v, T.FLOAT16) for v in (1.0, 0.0, 0.0)] + [scalar(False, T.BOOL)]
    got = run(Op.INSTANCE_NORMALIZATION, ins)
    np.testing.assert_allclose(got.ravel().astype(np.float32), (np.arange(1, 5) - 2.5) / np.sqrt(1.25), rtol=2e-3)
    ins[0] = tensor(np.ones((2, 2, 2), np.float16), T.TENSOR_FLOAT16)
    with pytest.raises(OpExecutionError, match="4-D"):
        run(Op.INSTANCE_NORMALIZATION, ins)
    op = REGISTRY[Op.INSTANCE_NORMALIZATION]
    with pytest.raises(OpValidationError):
        match_signature(op, [T.TENSOR_FLOAT32, T.FLOAT32, T.FLOAT32, T.FLOAT32, T.BOOL], [T.TENSOR_FLOAT32], V1_1)
    with pytest.raises(OpValidationError):  # layout is required
        match_signature(op, [T.TENSOR_FLOAT32, T.FLOAT32, T.FLOAT32, T.FLOAT32], [T.TENSOR_FLOAT32], V1_3)


# --------------------------------------------------------------------------
# parameters parsed once at prepare (issue 20), or at each execution when not constants


def prepare_with(op, inputs, constant: bool, scale=0.0, zp=0):
    """The operation prepared with its scalar inputs model constants or model inputs."""
    infos = [tensor_info(t, constant and i > 0) for i, t in enumerate(inputs)]
    return prepare_operation(op, infos, [OutputSpec(inputs[0].type, (), scale, zp)])


def same_bits(a: np.ndarray, b: np.ndarray) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


RNG = np.random.default_rng(8)
X4 = RNG.normal(size=(2, 3, 4, 5)).astype(np.float32)
PARAM_CASES = [
    (Op.L2_NORMALIZATION, [tensor(X4), scalar(-3, T.INT32)], [tensor(X4), scalar(0, T.INT32)]),
    (Op.LOCAL_RESPONSE_NORMALIZATION,
     [tensor(X4), scalar(2, T.INT32), scalar(1.5, T.FLOAT32), scalar(0.3, T.FLOAT32), scalar(0.75, T.FLOAT32),
      scalar(1, T.INT32)],
     [tensor(X4), scalar(0, T.INT32), scalar(1.0, T.FLOAT32), scalar(1.0, T.FLOAT32), scalar(0.5, T.FLOAT32),
      scalar(-1, T.INT32)]),
    (Op.INSTANCE_NORMALIZATION,
     [tensor(X4), scalar(1.5, T.FLOAT32), scalar(-0.25, T.FLOAT32), scalar(1e-3, T.FLOAT32), scalar(True, T.BOOL)],
     [tensor(X4), scalar(1.0, T.FLOAT32), scalar(0.0, T.FLOAT32), scalar(1.0, T.FLOAT32), scalar(False, T.BOOL)]),
]


@pytest.mark.parametrize("op,ins,other", PARAM_CASES)
def test_parameters_prepared_or_read_at_run_time(op, ins, other):
    const = prepare_with(op, ins, constant=True)
    assert const.state is not None
    runtime = prepare_with(op, ins, constant=False)
    assert runtime.state is None  # NOTE: not constants: execute reads them
    want = const.run(ins)[0]
    same_bits(runtime.run(ins)[0], want)
    # the prepared values are the model's: others at run time do not reach the kernel
    same_bits(const.run(other)[0], want)
    assert not np.array_equal(runtime.run(other)[0], want)


@pytest.mark.parametrize("op,ins", [
    (Op.L2_NORMALIZATION, [tensor(X4), scalar(4, T.INT32)]),
    (Op.LOCAL_RESPONSE_NORMALIZATION,
     [tensor(X4), scalar(2, T.INT32), scalar(1.5, T.FLOAT32), scalar(0.3, T.FLOAT32), scalar(0.75, T.FLOAT32),
      scalar(-5, T.INT32)]),
])
def test_bad_constant_axis_fails_every_execution_not_prepare(op, ins):
    for constant in (True, False):
        p = prepare_with(op, ins, constant)  # NOTE: the model is valid; its executions are not
        for _ in range(2):
            with pytest.raises(OpExecutionError, match="axis"):
                p.run(ins)


@pytest.mark.parametrize("type_,scale,zp", [(T.TENSOR_QUANT8_ASYMM, 1 / 64, 128), (T.TENSOR_QUANT8_ASYMM, 1 / 128, 0),
                                            (T.TENSOR_QUANT8_ASYMM_SIGNED, 1 / 128, 128)])
def test_l2_quant_bad_output_quantization_fails_every_execution_not_prepare(type_, scale, zp):
    ins = [tensor(np.ones((2, 4)), type_, 0.5, 0), scalar(-1, T.INT32)]
    p = prepare_with(Op.L2_NORMALIZATION, ins, True, scale, zp)
    for _ in range(2):
        with pytest.raises(OpExecutionError, match="1/128"):
            p.run(ins)


def test_inv_sqrt_multiplier_int_equals_the_array_version():
    rng = np.random.default_rng(9)
    edges = [2**k + d for k in range(31) for d in (-1, 0, 1)] + [2**31 - 1]
    values = np.array(sorted({v for v in list(range(5000)) + edges + rng.integers(0, 2**31, 20000).tolist()
                              if 0 <= v < 2**31}), np.int64)
    mult, shift = inv_sqrt_multiplier(values, -1)
    got = [inv_sqrt_multiplier_int(v, -1) for v in values.tolist()]
    np.testing.assert_array_equal(np.array(got, np.int64), np.stack([mult, shift], axis=1))
    assert inv_sqrt_multiplier_int(12345, 1) == (int(inv_sqrt_multiplier(12345, -1)[0]),
                                                 -int(inv_sqrt_multiplier(12345, -1)[1]))


@pytest.mark.parametrize("type_,zp", [(T.TENSOR_QUANT8_ASYMM, 100), (T.TENSOR_QUANT8_ASYMM_SIGNED, -3)])
@pytest.mark.parametrize("axis", [-1, 0])
def test_l2_quant_many_rows_as_few(type_, zp, axis):
    """More rows than the per-row Python path takes (the numpy inverse square root):
    each row as it is alone."""
    lo, hi = (0, 255) if type_ == T.TENSOR_QUANT8_ASYMM else (-128, 127)
    q = RNG.integers(lo, hi + 1, size=(100, 6)).astype(NUMPY_DTYPE[type_])
    q[3] = zp  # NOTE: a row of zeros (acc <= 1) among them
    q = q if axis == -1 else np.ascontiguousarray(q.T)
    out_zp = 128 if type_ == T.TENSOR_QUANT8_ASYMM else 0
    many = run(Op.L2_NORMALIZATION, [tensor(q, type_, 0.1, zp), scalar(axis, T.INT32)], 1 / 128, out_zp)
    for r in range(0, 100, 3):
        row = q[r:r + 1] if axis == -1 else q[:, r:r + 1]
        one = run(Op.L2_NORMALIZATION, [tensor(row, type_, 0.1, zp), scalar(axis, T.INT32)], 1 / 128, out_zp)
        np.testing.assert_array_equal(many[r:r + 1] if axis == -1 else many[:, r:r + 1], one)
