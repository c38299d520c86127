"""Tensor manipulation ops (shape family) against numpy / hand-written references."""

from __future__ import annotations

import numpy as np
import pytest

from nnhal.hal import OperandLifeTime as L
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
from nnhal.ops.prepared import Ready
from nnhal.ops.registry import REGISTRY
from nnhal.ops.run import prepare_operation, run_operation, tensor_info

# every kernel test through validate, prepare (scalars as the model's constants) and execute
PHASES = {"scalar_constants": True, "validate": True}

F32, F16, I32 = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32
Q8, Q8S = T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED


def tensor(values, type_=F32, scale=0.0, zp=0) -> Tensor:
    return Tensor(type_, np.asarray(values, NUMPY_DTYPE[type_]), scale, zp)


def ints(values) -> Tensor:
    return tensor(values, I32)


def i32(v: int) -> Tensor:
    return Tensor(T.INT32, np.array(v, np.int32))


def omitted(type_=I32) -> Tensor:
    return Tensor(type_, None)


def run(op, inputs, outputs=None, n_out=1) -> list[np.ndarray]:
    x = inputs[0]
    if outputs is None:
        outputs = [OutputSpec(x.type, (), x.scale, x.zero_point) for _ in range(n_out)]
    res = run_operation(op, inputs, outputs, **PHASES)
    for r, o in zip(res, outputs, strict=True):
        assert r.dtype == o.dtype
    return res


def run1(op, inputs, outputs=None) -> np.ndarray:
    return run(op, inputs, outputs)[0]


def info(op, ins, outs, version=V1_3) -> OpInfo:
    def oi(spec):
        if isinstance(spec, OperandInfo):
            return spec
        t, dims = spec
        return OperandInfo(t, tuple(dims))
    return OpInfo(type=op, inputs=[oi(s) for s in ins], outputs=[oi(s) for s in outs], version=version)


def validate(op, ins, outs, version=V1_3) -> None:
    opdef = REGISTRY[op]
    i = info(op, ins, outs, version)
    match_signature(opdef, [o.type for o in i.inputs], [o.type for o in i.outputs], version)
    if opdef.validate:
        opdef.validate(i)


# --------------------------------------------------------------------------
# RESHAPE


def test_reshape_infers_minus_one():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    out = run1(Op.RESHAPE, [tensor(x), ints([4, -1])])
    np.testing.assert_array_equal(out, x.reshape(4, 6))
    assert run1(Op.RESHAPE, [tensor(x), ints([-1])]).shape == (24,)


@pytest.mark.parametrize("shape", [[5, -1], [-1, -1], [4, 5], [0, -1], [-2, -12]])
def test_reshape_bad_shape_fails(shape):
    with pytest.raises(OpExecutionError):
        run1(Op.RESHAPE, [tensor(np.zeros((2, 12))), ints(shape)])


def test_reshape_quant_keeps_values():
    x = tensor(np.arange(6).reshape(2, 3), Q8S, 0.5, -3)
    out = run1(Op.RESHAPE, [x, ints([3, 2])])
    np.testing.assert_array_equal(out, np.arange(6).reshape(3, 2))


def test_reshape_signatures():
    op = REGISTRY[Op.RESHAPE]
    match_signature(op, [Q8, I32], [Q8], V1_0)
    with pytest.raises(OpValidationError):
        match_signature(op, [F16, I32], [F16], V1_1)  # float16 since 1.2
    with pytest.raises(OpValidationError):
        match_signature(op, [Q8S, I32], [Q8S], V1_2)  # signed since 1.3
    with pytest.raises(OpValidationError):
        match_signature(op, [I32, I32], [I32], V1_3)  # not a RESHAPE type
    with pytest.raises(OpValidationError):
        match_signature(op, [F32, I32], [F16], V1_3)
    with pytest.raises(OpValidationError):
        validate(Op.RESHAPE, [(F32, (1, 1, 1, 1, 2)), (I32, (1,))], [(F32, (2,))])


# --------------------------------------------------------------------------
# SQUEEZE, EXPAND_DIMS


def test_squeeze_omitted_squeezes_all_ones():
    x = np.arange(6, dtype=np.float32).reshape(1, 2, 1, 3)
    assert run1(Op.SQUEEZE, [tensor(x), omitted()]).shape == (2, 3)
    assert run1(Op.SQUEEZE, [tensor(np.ones((1, 1, 1))), omitted()]).shape == (1,)


def test_squeeze_listed_and_negative_dims():
    x = np.zeros((1, 2, 1, 3), np.float32)
    assert run1(Op.SQUEEZE, [tensor(x), ints([-2])]).shape == (1, 2, 3)
    assert run1(Op.SQUEEZE, [tensor(x), ints([0, 0, 2])]).shape == (2, 3)


@pytest.mark.parametrize("dims", [[1], [4], [-5]])
def test_squeeze_bad_dim_fails(dims):
    with pytest.raises(OpExecutionError):
        run1(Op.SQUEEZE, [tensor(np.zeros((1, 2, 1, 3))), ints(dims)])


def test_squeeze_versions():
    op = REGISTRY[Op.SQUEEZE]
    match_signature(op, [F32, I32], [F32], V1_1)
    with pytest.raises(OpValidationError):
        match_signature(op, [F32, I32], [F32], V1_0)
    assert 1 in op.omittable_inputs


@pytest.mark.parametrize("axis,shape", [(0, (1, 2, 3)), (2, (2, 3, 1)), (-1, (2, 3, 1)), (-3, (1, 2, 3))])
def test_expand_dims(axis, shape):
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    out = run1(Op.EXPAND_DIMS, [ints(x), i32(axis)])
    assert out.shape == shape
    np.testing.assert_array_equal(out.reshape(-1), x.reshape(-1))


@pytest.mark.parametrize("axis", [3, -4])
def test_expand_dims_bad_axis(axis):
    with pytest.raises(OpExecutionError):
        run1(Op.EXPAND_DIMS, [ints(np.zeros((2, 3))), i32(axis)])


# --------------------------------------------------------------------------
# TRANSPOSE


def test_transpose_perm_and_default():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    np.testing.assert_array_equal(run1(Op.TRANSPOSE, [tensor(x), ints([2, 0, 1])]), x.transpose(2, 0, 1))
    y = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(run1(Op.TRANSPOSE, [tensor(y), omitted()]), y.T)


def test_transpose_zero_sized():
    assert REGISTRY[Op.TRANSPOSE].allow_zero_sized
    out = run1(Op.TRANSPOSE, [tensor(np.zeros((0, 3), np.float32)), ints([1, 0])])
    assert out.shape == (3, 0)


@pytest.mark.parametrize("perm", [[0, 1], [0, 1, 3], [0, 0, 1], None])
def test_transpose_bad_perm(perm):
    x = tensor(np.zeros((2, 3, 4)))
    with pytest.raises(OpExecutionError):
        run1(Op.TRANSPOSE, [x, omitted() if perm is None else ints(perm)])


# --------------------------------------------------------------------------
# CONCATENATION


def test_concatenation_float():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.arange(4, dtype=np.float32).reshape(2, 2)
    out = run1(Op.CONCATENATION, [tensor(a), tensor(b), i32(1)])
    np.testing.assert_array_equal(out, np.concatenate([a, b], 1))


def test_concatenation_zero_sized_input():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = run1(Op.CONCATENATION, [tensor(a), tensor(np.zeros((0, 3), np.float32)), i32(0)])
    np.testing.assert_array_equal(out, a)


@pytest.mark.parametrize("type_,zp_out", [(Q8, 120), (Q8S, -7)])
def test_concatenation_requantizes(type_, zp_out):
    lo, hi = (0, 255) if type_ == Q8 else (-128, 127)
    rng = np.random.default_rng(0)
    a = rng.integers(lo, hi + 1, (2, 5))
    b = rng.integers(lo, hi + 1, (2, 3))
    ta, tb = tensor(a, type_, 0.25, lo + 10), tensor(b, type_, 0.1, zp_out)
    out_spec = OutputSpec(type_, (), 0.1, zp_out)
    out = run1(Op.CONCATENATION, [ta, tb, i32(1)], [out_spec])
    real_a = (a - (lo + 10)) * 0.25
    expect_a = np.clip(np.round(real_a / 0.1) + zp_out, lo, hi)
    assert np.max(np.abs(out[:, :5].astype(int) - expect_a)) <= 1
    np.testing.assert_array_equal(out[:, 5:], b)  # same quantization: copied


def test_concatenation_bad_runtime_inputs():
    a = tensor(np.zeros((2, 3)))
    with pytest.raises(OpExecutionError):
        run1(Op.CONCATENATION, [a, tensor(np.zeros((3, 3))), i32(1)])  # dim 0 differs
    with pytest.raises(OpExecutionError):
        run1(Op.CONCATENATION, [a, a, i32(-1)])  # the reference rejects negative axes
    with pytest.raises(OpExecutionError):
        run1(Op.CONCATENATION, [a, tensor(np.zeros((2, 3, 1))), i32(0)])


def test_concatenation_validation():
    validate(Op.CONCATENATION, [(F32, (2, 3)), (F32, (2, 3)), (T.INT32, ())], [(F32, (2, 6))], V1_0)
    validate(Op.CONCATENATION, [(F32, (2, 3)), (T.INT32, ())], [(F32, (2, 3))], V1_0)
    with pytest.raises(OpValidationError):  # axis not last
        validate(Op.CONCATENATION, [(F32, (2, 3)), (T.INT32, ()), (F32, (2, 3))], [(F32, (4, 3))])
    with pytest.raises(OpValidationError):  # mixed tensor types
        validate(Op.CONCATENATION, [(F32, (2, 3)), (F16, (2, 3)), (T.INT32, ())], [(F32, (4, 3))])
    with pytest.raises(OpValidationError):  # no tensor input
        validate(Op.CONCATENATION, [(T.INT32, ())], [(F32, (4, 3))])
    q_in = OperandInfo(Q8, (2, 3), 0.5, 3)
    q_out = OperandInfo(Q8, (4, 3), 0.25, 3)
    axis = OperandInfo(T.INT32, ())
    validate(Op.CONCATENATION, [q_in, q_in, axis], [q_out], V1_2)
    with pytest.raises(OpValidationError):  # different scales need HAL 1.2
        validate(Op.CONCATENATION, [q_in, q_in, axis], [q_out], V1_1)


# --------------------------------------------------------------------------
# SPLIT


def test_split():
    x = np.arange(24, dtype=np.float32).reshape(2, 6, 2)
    specs = [OutputSpec(F32, ()) for _ in range(3)]
    outs = run(Op.SPLIT, [tensor(x), i32(-2), i32(3)], specs)
    for o, e in zip(outs, np.split(x, 3, axis=1), strict=True):
        np.testing.assert_array_equal(o, e)


@pytest.mark.parametrize("axis,num,n_out", [(1, 4, 4), (1, 2, 3), (3, 2, 2)])
def test_split_bad(axis, num, n_out):
    with pytest.raises(OpExecutionError):
        run(Op.SPLIT, [tensor(np.zeros((2, 6, 2))), i32(axis), i32(num)], n_out=n_out)


def test_split_signature_any_output_count():
    op = REGISTRY[Op.SPLIT]
    match_signature(op, [I32, T.INT32, T.INT32], [I32] * 5, V1_2)
    with pytest.raises(OpValidationError):
        match_signature(op, [I32, T.INT32, T.INT32], [I32, F32], V1_2)


# --------------------------------------------------------------------------
# SLICE, STRIDED_SLICE


def test_slice():
    x = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    out = run1(Op.SLICE, [ints(x), ints([1, 0, 1]), ints([-1, 2, 3])])
    np.testing.assert_array_equal(out, x[1:, 0:2, 1:4])


def test_slice_zero_sized():
    assert REGISTRY[Op.SLICE].allow_zero_sized
    out = run1(Op.SLICE, [tensor(np.zeros((0, 3))), ints([0, 1]), ints([-1, 2])])
    assert out.shape == (0, 2)


@pytest.mark.parametrize("begin,size", [([-1, 0], [1, 1]), ([1, 0], [2, 1]), ([0, 0], [1, -2]), ([0], [1])])
def test_slice_bad(begin, size):
    with pytest.raises(OpExecutionError):
        run1(Op.SLICE, [tensor(np.zeros((2, 3))), ints(begin), ints(size)])


def strided(x, begin, end, strides, bm=0, em=0, sm=0):
    return run1(Op.STRIDED_SLICE, [tensor(x), ints(begin), ints(end), ints(strides), i32(bm), i32(em), i32(sm)])


@pytest.mark.parametrize("b,e,s", [
    (1, 5, 1), (-4, -1, 1), (0, 10, 2), (5, 1, -1), (-1, -7, -2), (-10, 10, 3), (4, 4, 1), (10, 0, -3), (3, 1, 1),
])
def test_strided_slice_1d_like_python(b, e, s):
    x = np.arange(6, dtype=np.float32)
    np.testing.assert_array_equal(strided(x, [b], [e], [s]), x[b:e:s])


def test_strided_slice_masks_and_shrink():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    out = strided(x, [1, 2, 3], [2, 0, 0], [1, -1, -2], bm=0b000, em=0b110, sm=0b001)
    np.testing.assert_array_equal(out, x[1, 2::-1, 3::-2])
    out = strided(x, [1, 5, 0], [2, 9, 3], [1, 1, 1], bm=0b010, em=0b010)
    np.testing.assert_array_equal(out, x[1:2, :, 0:3])
    assert strided(x, [1, 1, 1], [2, 2, 2], [1, 1, 1], sm=0b111).shape == (1,)


@pytest.mark.parametrize("b,e,s,sm", [([0], [2], [1], 1), ([1], [0], [-1], 1), ([0], [1], [0], 0)])
def test_strided_slice_bad(b, e, s, sm):
    with pytest.raises(OpExecutionError):
        strided(np.arange(4, dtype=np.float32), b, e, s, sm=sm)


# --------------------------------------------------------------------------
# GATHER, TILE, FILL, RANK


def test_gather_higher_rank_indices():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    idx = np.array([[2, 0], [1, 1]], np.int32)
    out = run1(Op.GATHER, [tensor(x), i32(-1), ints(idx)])
    np.testing.assert_array_equal(out, np.take(x, idx, axis=2))
    assert out.shape == (2, 3, 2, 2)


@pytest.mark.parametrize("idx", [[3], [-1]])
def test_gather_bad_index(idx):
    with pytest.raises(OpExecutionError):
        run1(Op.GATHER, [tensor(np.zeros((3, 2))), i32(0), ints(idx)])


def test_tile():
    x = np.arange(6, dtype=np.uint8).reshape(2, 3)
    out = run1(Op.TILE, [tensor(x, Q8, 0.5, 1), ints([2, 3])])
    np.testing.assert_array_equal(out, np.tile(x, (2, 3)))
    with pytest.raises(OpExecutionError):
        run1(Op.TILE, [tensor(x, Q8, 0.5, 1), ints([2])])


@pytest.mark.parametrize("out_type,value", [(F32, T.FLOAT32), (F16, T.FLOAT16), (I32, T.INT32)])
def test_fill(out_type, value):
    v = Tensor(value, np.array(3, NUMPY_DTYPE[value]))
    out = run1(Op.FILL, [ints([2, 3]), v], [OutputSpec(out_type, ())])
    np.testing.assert_array_equal(out, np.full((2, 3), 3))
    with pytest.raises(OpValidationError):
        match_signature(REGISTRY[Op.FILL], [I32, T.FLOAT32], [F16], V1_3)
    with pytest.raises(OpValidationError):
        match_signature(REGISTRY[Op.FILL], [I32, T.INT32], [I32], V1_2)


def test_rank():
    out = run1(Op.RANK, [tensor(np.zeros((2, 1, 3)), T.TENSOR_BOOL8)], [OutputSpec(T.INT32, ())])
    assert out.shape == () and out == 3
    match_signature(REGISTRY[Op.RANK], [T.TENSOR_QUANT8_SYMM_PER_CHANNEL], [T.INT32], V1_3)
    with pytest.raises(OpValidationError):
        match_signature(REGISTRY[Op.RANK], [T.TENSOR_FLOAT32], [T.TENSOR_INT32], V1_3)


# --------------------------------------------------------------------------
# PAD, PAD_V2


def test_pad_float_and_quant_zero_point():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    pads = ints([[1, 0], [0, 2]])
    np.testing.assert_array_equal(run1(Op.PAD, [tensor(x), pads]), np.pad(x, [[1, 0], [0, 2]]))
    q = run1(Op.PAD, [tensor(x, Q8, 0.5, 7), pads])
    np.testing.assert_array_equal(q, np.pad(x, [[1, 0], [0, 2]], constant_values=7))


def test_pad_v2_values():
    x = np.arange(4, dtype=np.float32).reshape(2, 2)
    pads = ints([[0, 1], [1, 0]])
    out = run1(Op.PAD_V2, [tensor(x), pads, Tensor(T.FLOAT32, np.array(-1.5, np.float32))])
    np.testing.assert_array_equal(out, np.pad(x, [[0, 1], [1, 0]], constant_values=-1.5))
    out = run1(Op.PAD_V2, [tensor(x, Q8S, 0.5, 0), pads, i32(-9)])
    np.testing.assert_array_equal(out, np.pad(x, [[0, 1], [1, 0]], constant_values=-9))


def test_pad_bad_paddings():
    with pytest.raises(OpExecutionError):
        run1(Op.PAD, [tensor(np.zeros((2, 2))), ints([[0, -1], [0, 0]])])
    with pytest.raises(OpExecutionError):
        run1(Op.PAD, [tensor(np.zeros((2, 2))), ints([[0, 1]])])


def test_pad_validation():
    pads = OperandInfo(I32, (2, 2))
    validate(Op.PAD, [OperandInfo(Q8, (2, 2), 0.5, 0), pads], [OperandInfo(Q8, (3, 3), 0.5, 0)], V1_1)
    with pytest.raises(OpValidationError):  # nonzero zero point needs 1.2
        validate(Op.PAD, [OperandInfo(Q8, (2, 2), 0.5, 3), pads], [OperandInfo(Q8, (3, 3), 0.5, 3)], V1_1)
    with pytest.raises(OpValidationError):  # PAD_V2 quant pad value is INT32
        validate(Op.PAD_V2, [(Q8, (2, 2)), (I32, (2, 2)), (T.FLOAT32, ())], [(Q8, (3, 3))])
    with pytest.raises(OpValidationError):
        validate(Op.PAD_V2, [(F32, (2, 2)), (I32, (2, 2)), (T.FLOAT32, ())], [(F32, (3, 3))], V1_1)
    with pytest.raises(OpValidationError):
        validate(Op.PAD, [(F32, (1, 1, 1, 1, 1)), (I32, (5, 2))], [(F32, (1, 1, 1, 1, 1))])


def test_zero_sized_flags():
    for op in (Op.RESHAPE, Op.PAD, Op.GATHER, Op.STRIDED_SLICE, Op.SQUEEZE, Op.TILE, Op.SPLIT):
        assert not REGISTRY[op].allow_zero_sized
    assert REGISTRY[Op.CONCATENATION].allow_zero_sized


def test_constant_lifetime_not_required():
    # NOTE: the reference accepts non-constant shape / perm / paddings inputs
    i = info(Op.RESHAPE, [(F32, (2, 3)), OperandInfo(I32, (1,), lifetime=L.SUBGRAPH_INPUT)], [(F32, (6,))])
    REGISTRY[Op.RESHAPE].validate(i)


# --------------------------------------------------------------------------
# the Prepare/Eval split: constant parameters parsed once, plans per input shape


def f32s(*shape) -> Tensor:
    return tensor(np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) - 3)


def q8s(*shape) -> Tensor:
    return tensor((np.arange(int(np.prod(shape))) * 7 % 251).astype(np.uint8).reshape(shape), Q8, 0.5, 3)


def out(t=F32, n=1, scale=0.0, zp=0) -> list[OutputSpec]:
    return [OutputSpec(t, (), scale, zp) for _ in range(n)]


# (operation, inputs, outputs, positions of the constants, other data inputs (same constants))
PREPARED_CASES = {
    "expand_dims": (Op.EXPAND_DIMS, [f32s(2, 3), i32(-1)], out(), {1}, [f32s(4)], [f32s(1, 2, 3, 4)]),
    "expand_dims_front": (Op.EXPAND_DIMS, [q8s(2, 3), i32(0)], out(Q8, 1, 0.5, 3), {1}, [q8s(5)]),
    "squeeze": (Op.SQUEEZE, [f32s(1, 3, 1), ints([0, -1])], out(), {1}, [f32s(1, 2, 1)], [f32s(2, 1, 1)]),
    "squeeze_omitted": (Op.SQUEEZE, [f32s(1, 3, 1), omitted()], out(), {1}, [f32s(1, 1, 4)], [f32s(2, 3)]),
    "transpose": (Op.TRANSPOSE, [f32s(2, 3, 4), ints([2, 0, 1])], out(), {1}, [f32s(4, 1, 2)], [f32s(2, 3)]),
    "transpose_omitted": (Op.TRANSPOSE, [q8s(2, 3), omitted()], out(Q8, 1, 0.5, 3), {1}, [q8s(5, 1)],
                          [q8s(2, 2, 2)]),
    "split": (Op.SPLIT, [f32s(2, 4, 3), i32(1), i32(2)], out(n=2), {1, 2}, [f32s(1, 6)], [f32s(2, 3)]),
    "split_negative_axis": (Op.SPLIT, [f32s(2, 6), i32(-1), i32(3)], out(n=3), {1, 2}, [f32s(3, 3)], [f32s(3)]),
    "slice": (Op.SLICE, [f32s(3, 4), ints([1, 0]), ints([2, -1])], out(), {1, 2}, [f32s(4, 2)], [f32s(2, 4)],
              [f32s(3, 4, 1)]),
    "strided_slice": (Op.STRIDED_SLICE, [f32s(3, 4, 5), ints([1, 3, -1]), ints([3, 0, -6]), ints([1, -1, -2]),
                                         i32(0b000), i32(0b010), i32(0b000)], out(), set(range(1, 7)),
                      [f32s(2, 2, 2)], [f32s(6, 7, 8)], [f32s(1, 1, 1)]),
    "strided_slice_shrink": (Op.STRIDED_SLICE, [q8s(2, 3), ints([1, 0]), ints([2, 3]), ints([1, 2]),
                                                i32(0), i32(0b10), i32(0b01)], out(Q8, 1, 0.5, 3), set(range(1, 7)),
                             [q8s(3, 5)], [q8s(1, 3)]),
    "gather_constant_indices": (Op.GATHER, [f32s(3, 4), i32(-1), ints([[3, 0], [1, 1]])], out(), {1, 2},
                                [f32s(2, 5)], [f32s(2, 3)]),
    "gather_runtime_indices": (Op.GATHER, [f32s(3, 4), i32(0), ints([2, 0])], out(), {1}, [f32s(5, 1)],
                               [f32s(2, 2)]),
    "tile": (Op.TILE, [q8s(2, 3), ints([2, 1])], out(Q8, 1, 0.5, 3), {1}, [q8s(1, 1)], [q8s(3, 2)]),
    "tile_zero": (Op.TILE, [f32s(2, 3), ints([0, 3])], out(), {1}, [f32s(1, 2)]),
    "fill": (Op.FILL, [ints([2, 3]), Tensor(T.FLOAT32, np.array(1.5, np.float32))], out(), {0, 1},
             [ints([2, 3]), Tensor(T.FLOAT32, np.array(-2.5, np.float32))]),
}


def _case_inputs(inputs, other):
    """``other`` (the data inputs first, then the parameters) completed with ``inputs``' parameters."""
    return list(other) + list(inputs[len(other):])


@pytest.mark.parametrize("name", sorted(PREPARED_CASES))
def test_prepared_and_runtime_paths_agree(name, paths_agree):
    op, inputs, outputs, constant, *others = PREPARED_CASES[name]
    others = [_case_inputs(inputs, o) for o in others] if op != Op.FILL else others
    prep, results = paths_agree(op, inputs, outputs, constant, *others)
    assert prep.state is not None
    assert isinstance(results[0], list)  # NOTE: the declared shape runs
    if op != Op.FILL:
        # NOTE: the plan of the declared shape was made at prepare, one per further shape after
        key = inputs[0].data.ndim if op == Op.TRANSPOSE else inputs[0].shape
        assert isinstance(prep.state.plans.get(key), Ready)


def test_prepared_plan_for_the_declared_shape_and_per_shape_after():
    x = f32s(2, 3, 4)
    prep = prepare_operation(Op.STRIDED_SLICE, [tensor_info(x)] + [tensor_info(t, True) for t in (
        ints([0, 0, 0]), ints([2, 3, 4]), ints([1, 1, 2]), i32(0), i32(0), i32(0))], out())
    assert len(prep.state.plans) == 1
    params = [ints([0, 0, 0]), ints([2, 3, 4]), ints([1, 1, 2]), i32(0), i32(0), i32(0)]
    for _ in range(3):
        (r,) = prep.run([x, *params])
        np.testing.assert_array_equal(r, x.data[:, :, ::2])
    assert len(prep.state.plans) == 1
    y = f32s(3, 4, 5)
    (r,) = prep.run([y, *params])
    np.testing.assert_array_equal(r, y.data[:2, :3, :4:2])
    assert len(prep.state.plans) == 2


def test_runtime_parameters_leave_no_state():
    x = f32s(2, 3)
    for op, params in ((Op.TRANSPOSE, [ints([1, 0])]), (Op.TILE, [ints([1, 2])]), (Op.EXPAND_DIMS, [i32(0)]),
                       (Op.SLICE, [ints([0, 0]), ints([1, 1])])):
        prep = prepare_operation(op, [tensor_info(t) for t in [x, *params]], out())
        assert prep.state is None
        prep.run([x, *params])


BAD_CONSTANTS = {
    "expand_dims_axis": (Op.EXPAND_DIMS, [f32s(2, 3), i32(3)], "axis 3 out of range"),
    "squeeze_dim_not_1": (Op.SQUEEZE, [f32s(1, 3), ints([1])], "cannot squeeze dimension 1"),
    "squeeze_dims_2d": (Op.SQUEEZE, [f32s(1, 3), ints([[0]])], "must be a 1-D tensor"),
    "transpose_repeated": (Op.TRANSPOSE, [f32s(2, 3), ints([0, 0])], "invalid permutation"),
    "transpose_rank": (Op.TRANSPOSE, [f32s(2, 3), ints([0, 1, 2])], "3 entries for an input of rank 2"),
    "transpose_omitted_3d": (Op.TRANSPOSE, [f32s(2, 3, 4), omitted()], "omitted perm needs a 2-D input"),
    "split_axis": (Op.SPLIT, [f32s(2, 3), i32(2), i32(1)], "axis 2 out of range"),
    "split_uneven": (Op.SPLIT, [f32s(2, 3), i32(1), i32(2)], "does not evenly divide"),
    "split_count": (Op.SPLIT, [f32s(2, 4), i32(1), i32(0)], "does not match"),
    "slice_negative_begin": (Op.SLICE, [f32s(2, 3), ints([-1, 0]), ints([1, 1])], "out of range"),
    "slice_too_long": (Op.SLICE, [f32s(2, 3), ints([1, 0]), ints([2, 1])], "out of range"),
    "strided_slice_zero_stride": (Op.STRIDED_SLICE, [f32s(4), ints([0]), ints([2]), ints([0]), i32(0), i32(0),
                                                     i32(0)], "stride 0 is zero"),
    "strided_slice_shrink": (Op.STRIDED_SLICE, [f32s(4), ints([0]), ints([2]), ints([1]), i32(0), i32(0),
                                                i32(1)], "shrinking axis 0"),
    "gather_axis": (Op.GATHER, [f32s(2, 3), i32(2), ints([0])], "axis 2 out of range"),
    "gather_index_high": (Op.GATHER, [f32s(2, 3), i32(1), ints([3])], r"indices out of range \[0, 3\)"),
    "gather_index_negative": (Op.GATHER, [f32s(2, 3), i32(0), ints([0, -1])], r"indices out of range \[0, 2\)"),
    "tile_negative": (Op.TILE, [f32s(2, 3), ints([1, -1])], "negative multiples"),
    "tile_rank": (Op.TILE, [f32s(2, 3), ints([1])], "1 entries for an input of rank 2"),
    "fill_negative": (Op.FILL, [ints([2, -3]), Tensor(T.FLOAT32, np.array(1, np.float32))], "negative dimensions"),
}


@pytest.mark.parametrize("name", sorted(BAD_CONSTANTS))
def test_bad_constant_parameter_fails_every_execution(name, paths_agree):
    """Prepare accepts the model (its executions fail, as the reference's do);
    every execution fails with OpExecutionError, the run-time path the same."""
    op, inputs, match = BAD_CONSTANTS[name]
    constant = set(range(len(inputs))) if op == Op.FILL else set(range(1, len(inputs)))
    outputs = out(n=max(int(inputs[2].data), 1) if op == Op.SPLIT else 1)
    prep, results = paths_agree(op, inputs, outputs, constant)
    assert prep.state is not None
    assert all(isinstance(r, str) for r in results)
    for _ in range(2):
        with pytest.raises(OpExecutionError, match=match):
            prep.run(inputs)


def test_rank_has_nothing_to_prepare():
    # NOTE: its answer is the input's ndim, one attribute read: a prepared answer saves nothing
    assert REGISTRY[Op.RANK].prepare is None


def test_bad_constant_parameter_is_general_failure_through_the_driver():
    """The model is prepared; each execution is GENERAL_FAILURE."""
    from tests.driver_util import Builder, Pools, S, execute_sync, make_model, prepared_model

    for op, param in ((Op.TRANSPOSE, np.array([0, 0], np.int32)), (Op.TILE, np.array([1, -2], np.int32))):
        b = Builder()
        x = b.input(F32, (2, 3))
        o = b.output(F32, (0, 0))
        b.op(op, [x, b.const(I32, param, (2,))], [o])
        pm = prepared_model(make_model(b))
        for _ in range(2):
            with Pools([np.ones((2, 3), np.float32)], [64]) as p:
                assert execute_sync(pm, p.request())[0] == S.GENERAL_FAILURE
