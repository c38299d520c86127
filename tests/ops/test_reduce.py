"""MEAN, REDUCE_*, ARGMAX / ARGMIN and TOPK_V2 against numpy and loop references."""

from __future__ import annotations

import numpy as np
import pytest

from nnhal.hal import OperandType as T
from nnhal.hal import OperationType as Op
from nnhal.ops.base import (
    NUMPY_DTYPE,
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
from nnhal.ops.run import prepare_operation, run_operation, tensor_info

# every kernel test through validate, prepare (scalars as the model's constants) and execute
PHASES = {"scalar_constants": True, "validate": True}

F32, F16, I32 = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32
Q8, Q8S, B8 = T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_BOOL8


def tensor(values, type_=F32, scale=0.0, zp=0) -> Tensor:
    return Tensor(type_, np.asarray(values, NUMPY_DTYPE[type_]), scale, zp)


def ints(values) -> Tensor:
    return tensor(values, I32)


def i32(v: int) -> Tensor:
    return Tensor(T.INT32, np.array(v, np.int32))


def boolean(v: bool) -> Tensor:
    return Tensor(T.BOOL, np.array(v, np.bool_))


def run(op, inputs, out_types=None) -> list[np.ndarray]:
    x = inputs[0]
    out_types = out_types or [x.type]
    outputs = [OutputSpec(t, (), x.scale, x.zero_point) for t in out_types]
    res = run_operation(op, inputs, outputs, **PHASES)
    for r, o in zip(res, outputs, strict=True):
        assert r.dtype == o.dtype
    return res


def run1(op, inputs, out_types=None) -> np.ndarray:
    return run(op, inputs, out_types)[0]


def validate(op, ins, outs, version=V1_3) -> None:
    opdef = REGISTRY[op]
    i = OpInfo(type=op, inputs=[OperandInfo(t, tuple(d)) for t, d in ins],
               outputs=[OperandInfo(t, tuple(d)) for t, d in outs], version=version)
    match_signature(opdef, [o.type for o in i.inputs], [o.type for o in i.outputs], version)
    if opdef.validate:
        opdef.validate(i)


X = np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 7.5


# --------------------------------------------------------------------------
# MEAN


@pytest.mark.parametrize("axes,keep", [([1], 1), ([0, -1], 0), ([2, -1, 2], 0), ([0, 1, 2], 0), ([0, 1, 2], 1)])
def test_mean_float(axes, keep):
    out = run1(Op.MEAN, [tensor(X), ints(axes), i32(keep)])
    ax = tuple(sorted({a % 3 for a in axes}))
    expect = np.mean(X, axis=ax, keepdims=bool(keep))
    np.testing.assert_allclose(out, expect.reshape(expect.shape or (1,)), rtol=1e-6)


def test_mean_keep_dims_is_positive_int():
    assert run1(Op.MEAN, [tensor(X), ints([1]), i32(-1)]).shape == (2, 4)
    assert run1(Op.MEAN, [tensor(X), ints([1]), i32(2)]).shape == (2, 1, 4)


def test_mean_quant_truncates_like_cpp():
    # int32 sum of the stored values divided with truncation toward zero
    q = np.array([[-127, -126, -121, -120], [1, 2, 4, 4]], np.int8)
    out = run1(Op.MEAN, [tensor(q, Q8S, 0.8, -123), ints([1]), i32(0)])
    np.testing.assert_array_equal(out, [-123, 2])  # -123.5 -> -123, 2.75 -> 2
    u = np.array([[1, 2, 7, 9]], np.uint8)
    np.testing.assert_array_equal(run1(Op.MEAN, [tensor(u, Q8, 0.5, 3), ints([-1]), i32(1)]), [[4]])


def test_mean_float16():
    x = X.astype(np.float16)
    out = run1(Op.MEAN, [tensor(x, F16), ints([2]), i32(0)])
    np.testing.assert_allclose(out, X.mean(axis=2), rtol=1e-3)


def test_mean_bad_axis():
    with pytest.raises(OpExecutionError):
        run1(Op.MEAN, [tensor(X), ints([3]), i32(0)])
    with pytest.raises(OpExecutionError):
        run1(Op.MEAN, [tensor(X), ints([[0]]), i32(0)])


def test_mean_signatures():
    validate(Op.MEAN, [(Q8, (2, 2)), (I32, (1,)), (T.INT32, ())], [(Q8, (2,))], V1_1)
    with pytest.raises(OpValidationError):  # keep_dims is INT32 for MEAN
        validate(Op.MEAN, [(F32, (2, 2)), (I32, (1,)), (T.BOOL, ())], [(F32, (2,))])
    with pytest.raises(OpValidationError):
        validate(Op.MEAN, [(F16, (2, 2)), (I32, (1,)), (T.INT32, ())], [(F16, (2,))], V1_1)
    with pytest.raises(OpValidationError):
        validate(Op.MEAN, [(F32, (1, 1, 1, 1, 2)), (I32, (1,)), (T.INT32, ())], [(F32, (2,))])


# --------------------------------------------------------------------------
# REDUCE_*


@pytest.mark.parametrize("op,fn", [(Op.REDUCE_SUM, np.sum), (Op.REDUCE_PROD, np.prod), (Op.REDUCE_MAX, np.max),
                                   (Op.REDUCE_MIN, np.min)])
@pytest.mark.parametrize("axes,keep", [([1], False), ([-1, 0, 2], True), ([0, 1, 2], False)])
def test_reduce_float(op, fn, axes, keep):
    x = X / 4
    out = run1(op, [tensor(x), ints(axes), boolean(keep)])
    expect = fn(x, axis=tuple(sorted({a % 3 for a in axes})), keepdims=keep)
    np.testing.assert_allclose(out, expect.reshape(expect.shape or (1,)), rtol=1e-5)


def test_reduce_prod_zero_times_inf_is_zero():
    x = np.array([[0.0, np.inf], [2.0, 3.0]], np.float32)
    np.testing.assert_array_equal(run1(Op.REDUCE_PROD, [tensor(x), ints([1]), boolean(False)]), [0.0, 6.0])


def test_reduce_prod_float16():
    x = np.array([[1.5, 2.0, -3.0]], np.float16)
    np.testing.assert_array_equal(run1(Op.REDUCE_PROD, [tensor(x, F16), ints([1]), boolean(False)]), [-9.0])


@pytest.mark.parametrize("type_", [Q8, Q8S])
def test_reduce_max_min_quant(type_):
    q = np.array([[3, 100, 7], [50, 2, 9]])
    t = tensor(q, type_, 0.5, 1)
    np.testing.assert_array_equal(run1(Op.REDUCE_MAX, [t, ints([1]), boolean(False)]), [100, 50])
    np.testing.assert_array_equal(run1(Op.REDUCE_MIN, [t, ints([0]), boolean(True)]), [[3, 2, 7]])


def test_reduce_all_any():
    b = np.array([[True, False], [True, True]])
    np.testing.assert_array_equal(run1(Op.REDUCE_ALL, [tensor(b, B8), ints([1]), boolean(False)]), [False, True])
    np.testing.assert_array_equal(run1(Op.REDUCE_ANY, [tensor(b, B8), ints([0, 1]), boolean(False)]), [True])


def test_reduce_bad_axis():
    with pytest.raises(OpExecutionError):
        run1(Op.REDUCE_SUM, [tensor(X), ints([-4]), boolean(False)])


def test_reduce_signatures():
    with pytest.raises(OpValidationError):  # SUM / PROD are float only
        validate(Op.REDUCE_SUM, [(Q8, (2,)), (I32, (1,)), (T.BOOL, ())], [(Q8, (1,))])
    with pytest.raises(OpValidationError):  # MAX signed since 1.3
        validate(Op.REDUCE_MAX, [(Q8S, (2,)), (I32, (1,)), (T.BOOL, ())], [(Q8S, (1,))], V1_2)
    with pytest.raises(OpValidationError):  # since 1.2
        validate(Op.REDUCE_ANY, [(B8, (2,)), (I32, (1,)), (T.BOOL, ())], [(B8, (1,))], V1_1)
    with pytest.raises(OpValidationError):  # keep_dims is BOOL
        validate(Op.REDUCE_MIN, [(F32, (2,)), (I32, (1,)), (T.INT32, ())], [(F32, (1,))])
    with pytest.raises(OpValidationError):
        validate(Op.REDUCE_MIN, [(F32, (1, 1, 1, 1, 2)), (I32, (1,)), (T.BOOL, ())], [(F32, (1,))])
    validate(Op.REDUCE_MIN, [(F32, ()), (I32, (1,)), (T.BOOL, ())], [(F32, ())])  # unknown rank


# --------------------------------------------------------------------------
# ARGMAX / ARGMIN


@pytest.mark.parametrize("type_", [F32, F16, I32, Q8, Q8S])
def test_argmax_argmin_first_index_on_ties(type_):
    x = np.array([[1, 5, 5, 0], [2, 2, 0, 0]])
    t = tensor(x, type_, 1.0, 0)
    np.testing.assert_array_equal(run1(Op.ARGMAX, [t, i32(1)], [I32]), [1, 0])
    np.testing.assert_array_equal(run1(Op.ARGMIN, [t, i32(-1)], [I32]), [3, 2])
    np.testing.assert_array_equal(run1(Op.ARGMAX, [t, i32(0)], [I32]), [1, 0, 0, 0])


def test_argmax_rank1_output_is_1d():
    out = run1(Op.ARGMAX, [tensor([1.0, 3.0, 2.0]), i32(0)], [I32])
    assert out.shape == (1,) and out[0] == 1


def test_argmax_bad_axis_and_signature():
    with pytest.raises(OpExecutionError):
        run1(Op.ARGMAX, [tensor([1.0, 2.0]), i32(1)], [I32])
    with pytest.raises(OpValidationError):
        validate(Op.ARGMIN, [(F32, (2,)), (T.INT32, ())], [(F32, (1,))])


# --------------------------------------------------------------------------
# TOPK_V2


def topk_reference(row, k):
    pairs = sorted(((v, i) for i, v in enumerate(row.tolist())), reverse=True)[:k]
    return [p[0] for p in pairs], [p[1] for p in pairs]


@pytest.mark.parametrize("type_", [F32, F16, I32, Q8, Q8S])
def test_topk_ties_larger_index_first(type_):
    x = np.array([[3, 1, 3, 2, 3], [0, 0, 1, 0, 1]])
    values, indices = run(Op.TOPK_V2, [tensor(x, type_, 0.5, 2), i32(3)], [type_, I32])
    for r in range(2):
        ev, ei = topk_reference(x[r], 3)
        np.testing.assert_array_equal(values[r], ev)
        np.testing.assert_array_equal(indices[r], ei)
    assert indices.dtype == np.int32


def test_topk_random_rows():
    x = np.random.default_rng(1).integers(-5, 5, (4, 2, 9)).astype(np.float32)
    values, indices = run(Op.TOPK_V2, [tensor(x), i32(4)], [F32, I32])
    for idx in np.ndindex(4, 2):
        ev, ei = topk_reference(x[idx], 4)
        np.testing.assert_array_equal(values[idx], ev)
        np.testing.assert_array_equal(indices[idx], ei)


@pytest.mark.parametrize("k", [0, 6])
def test_topk_bad_k(k):
    with pytest.raises(OpExecutionError):
        run(Op.TOPK_V2, [tensor(np.zeros((2, 5))), i32(k)], [F32, I32])


def test_not_zero_sized():
    for op in (Op.MEAN, Op.REDUCE_SUM, Op.ARGMAX, Op.TOPK_V2):
        assert not REGISTRY[op].allow_zero_sized


# --------------------------------------------------------------------------
# ARGMAX / ARGMIN / TOPK_V2: the axis / k parsed once at prepare (issue 20)


def prepare_with(op, inputs, out_types, constant: bool):
    """The operation prepared with input 1 (axis / k) a model constant or a model input."""
    x = inputs[0]
    outputs = [OutputSpec(t, (), x.scale, x.zero_point) for t in out_types]
    infos = [tensor_info(t, constant and i == 1) for i, t in enumerate(inputs)]
    return prepare_operation(op, infos, outputs)


def bits(arrays) -> list:
    return [(a.dtype.str, a.shape, a.tobytes()) for a in arrays]


@pytest.mark.parametrize("op,param,out_types", [(Op.ARGMAX, 1, [I32]), (Op.ARGMIN, -3, [I32]),
                                                (Op.TOPK_V2, 3, [F32, I32])])
def test_arg_topk_parameter_prepared_or_read_at_run_time(op, param, out_types):
    x = tensor(np.random.default_rng(7).integers(-4, 4, (3, 4, 5)).astype(np.float32))
    ins = [x, i32(param)]
    const = prepare_with(op, ins, out_types, constant=True)
    assert const.state is not None and const.state.value(None) == param
    runtime = prepare_with(op, ins, out_types, constant=False)
    assert runtime.state is None  # NOTE: not a constant: execute reads it
    want = const.run(ins)
    assert bits(runtime.run(ins)) == bits(want)
    # the prepared value is the model's: another value at run time does not reach the kernel
    assert bits(const.run([x, i32(0)])) == bits(want)


@pytest.mark.parametrize("op,param,out_types,match", [(Op.ARGMAX, 3, [I32], "axis"), (Op.ARGMIN, -4, [I32], "axis"),
                                                      (Op.TOPK_V2, 0, [F32, I32], "k = 0"),
                                                      (Op.TOPK_V2, 6, [F32, I32], "k = 6")])
def test_arg_topk_bad_constant_fails_every_execution_not_prepare(op, param, out_types, match):
    x = tensor(np.zeros((2, 3, 5), np.float32))
    ins = [x, i32(param)]
    for constant in (True, False):
        p = prepare_with(op, ins, out_types, constant)  # NOTE: the model is valid; its executions are not
        for _ in range(2):
            with pytest.raises(OpExecutionError, match=match):
                p.run(ins)
