"""EQUAL NOT_EQUAL GREATER GREATER_EQUAL LESS LESS_EQUAL LOGICAL_AND
LOGICAL_OR LOGICAL_NOT SELECT: broadcasting, quantized inputs compared as
real values, requantizing SELECT and the error paths."""

from __future__ import annotations

import numpy as np
import pytest

from nnhal.hal import OperandType, OperationType
from nnhal.ops.base import (
    NUMPY_DTYPE,
    V1_2,
    ExecContext,
    OpExecutionError,
    OpValidationError,
    OutputSpec,
    Tensor,
    match_signature,
)
from nnhal.ops.broadcast import requantize
from nnhal.ops.comparison import _TABLE_MAX_SIZE
from nnhal.ops.registry import REGISTRY
from nnhal.ops.run import prepare_operation, run_operation

# every kernel test through validate, prepare (scalars as the model's constants) and execute
PHASES = {"scalar_constants": True, "validate": True}

T = OperandType
Op = OperationType
B = T.TENSOR_BOOL8


def tensor(t: OperandType, data, scale: float = 0.0, zp: int = 0) -> Tensor:
    return Tensor(t, np.asarray(data, dtype=NUMPY_DTYPE[t]), scale, zp)


def run(op: OperationType, inputs: list[Tensor], out_type: OperandType = B, scale: float = 0.0, zp: int = 0):
    return run_operation(op, inputs, [OutputSpec(out_type, (), scale, zp)], **PHASES)[0]


COMPARE = {Op.EQUAL: np.equal, Op.NOT_EQUAL: np.not_equal, Op.GREATER: np.greater,
           Op.GREATER_EQUAL: np.greater_equal, Op.LESS: np.less, Op.LESS_EQUAL: np.less_equal}


@pytest.mark.parametrize("op", list(COMPARE))
@pytest.mark.parametrize("t", [T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32, B])
def test_compare_broadcast(op, t):
    a = np.array([[0, 1, 2], [2, 1, 0]])
    b = np.array([1, 1, 0])
    if t == B:
        a, b = a > 0, b > 0
    out = run(op, [tensor(t, a), tensor(t, b)])
    assert out.dtype == np.bool_ and out.shape == (2, 3)
    np.testing.assert_array_equal(out, COMPARE[op](a, b))


@pytest.mark.parametrize("op", list(COMPARE))
@pytest.mark.parametrize("t", [T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED])
def test_compare_quant_as_real_values(op, t):
    lo = -128 if t == T.TENSOR_QUANT8_ASYMM_SIGNED else 0
    qa = np.array([lo + 10, lo + 12, lo + 14])  # scale 1, zp lo + 12: -2, 0, 2
    qb = np.array([lo + 100])  # scale 0.5, zp lo + 100: 0
    out = run(op, [tensor(t, qa, 1.0, lo + 12), tensor(t, qb, 0.5, lo + 100)])
    np.testing.assert_array_equal(out, COMPARE[op](np.array([-2, 0, 2]), 0))


def test_compare_errors():
    with pytest.raises(OpExecutionError):
        run(Op.LESS, [tensor(T.TENSOR_INT32, [1, 2, 3]), tensor(T.TENSOR_INT32, [1, 2])])
    with pytest.raises(OpValidationError):
        match_signature(REGISTRY[Op.EQUAL], [T.TENSOR_INT32, T.TENSOR_INT32], [T.TENSOR_INT32])
    with pytest.raises(OpValidationError):
        match_signature(REGISTRY[Op.EQUAL], [T.TENSOR_INT32, T.TENSOR_FLOAT32], [B])
    with pytest.raises(OpValidationError, match="before HAL"):
        match_signature(REGISTRY[Op.GREATER], [T.TENSOR_QUANT8_ASYMM_SIGNED] * 2, [B], V1_2)
    match_signature(REGISTRY[Op.GREATER], [T.TENSOR_QUANT8_ASYMM] * 2, [B], V1_2)


def test_logical():
    a = tensor(B, [[True, False], [True, True]])
    b = tensor(B, [False, True])
    np.testing.assert_array_equal(run(Op.LOGICAL_AND, [a, b]), [[False, False], [False, True]])
    np.testing.assert_array_equal(run(Op.LOGICAL_OR, [a, b]), [[True, True], [True, True]])
    np.testing.assert_array_equal(run(Op.LOGICAL_NOT, [b]), [True, False])
    with pytest.raises(OpValidationError):
        match_signature(REGISTRY[Op.LOGICAL_AND], [T.TENSOR_INT32] * 2, [B])


def test_select():
    cond = tensor(B, [True, False, True])
    a = tensor(T.TENSOR_FLOAT32, [1.0, 2.0, 3.0])
    b = tensor(T.TENSOR_FLOAT32, [-1.0, -2.0, -3.0])
    np.testing.assert_array_equal(run(Op.SELECT, [cond, a, b], T.TENSOR_FLOAT32), [1.0, -2.0, 3.0])


def test_select_quant_requantizes_to_output():
    t = T.TENSOR_QUANT8_ASYMM
    cond = tensor(B, [True, False])
    a = tensor(t, [110, 120], 0.5, 100)  # 5, 10
    b = tensor(t, [10, 14], 1.0, 10)  # 0, 4
    # 5 / 2 + 50 = 52.5 rounds away from zero
    np.testing.assert_array_equal(run(Op.SELECT, [cond, a, b], t, 2.0, 50), [53, 52])


def test_select_shape_errors():
    a = tensor(T.TENSOR_INT32, [1, 2])
    with pytest.raises(OpExecutionError):
        run(Op.SELECT, [tensor(B, [True]), a, a], T.TENSOR_INT32)
    with pytest.raises(OpExecutionError):
        run(Op.SELECT, [tensor(B, [True, False]), a, tensor(T.TENSOR_INT32, [[1, 2]])], T.TENSOR_INT32)
    with pytest.raises(OpValidationError):
        match_signature(REGISTRY[Op.SELECT], [T.TENSOR_INT32] * 3, [T.TENSOR_INT32])


# --------------------------------------------------------------------------
# what prepare computes once (issue 20), and the run-time path that computes it per execution


def codes(t: OperandType) -> np.ndarray:
    """Every value of an 8-bit type, entry i the value whose byte is i."""
    return np.arange(256, dtype=np.uint8).view(NUMPY_DTYPE[t])


def real(q: np.ndarray, scale: float, zp: int) -> np.ndarray:
    """The reference's real value of stored ints: (q - zeroPoint) * scale in single precision."""
    return (q.astype(np.int32) - zp).astype(np.float32) * np.float32(scale)


@pytest.mark.parametrize("t", [T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED])
@pytest.mark.parametrize("op", list(COMPARE))
@pytest.mark.parametrize("qa,qb", [((1.0, 12), (0.5, 100)), ((0.1, 128), (0.1, 128)), ((0.3, 0), (0.7, 255))])
def test_compare_quant_tables_are_the_real_value_of_every_code(t, op, qa, qb):
    off = -128 if t == T.TENSOR_QUANT8_ASYMM_SIGNED else 0
    (sa, za), (sb, zb) = (qa[0], qa[1] + off), (qb[0], qb[1] + off)
    # every pair of codes; a large enough to be computed, b looked up in its table
    a = tensor(t, np.tile(codes(t), 12).reshape(-1, 1), sa, za)
    b = tensor(t, codes(t).reshape(1, 256), sb, zb)
    out = OutputSpec(B, ())
    p = prepare_operation(op, [a, b], [out])
    ta, tb = p.state
    np.testing.assert_array_equal(ta, real(codes(t), sa, za))
    np.testing.assert_array_equal(tb, real(codes(t), sb, zb))
    want = COMPARE[op](real(a.data, sa, za), real(b.data, sb, zb))
    got = p.run([a, b])[0]
    assert got.dtype == np.bool_ and got.shape == (12 * 256, 256)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(REGISTRY[op].execute(ExecContext(op, [a, b], [out]))[0], want)
    # a few values (through the table) and many (computed) give the same bits
    assert a.data.size > _TABLE_MAX_SIZE >= 256
    small = p.run([tensor(t, codes(t).reshape(256, 1), sa, za), b])[0]
    np.testing.assert_array_equal(small, want[:256])


def test_compare_other_types_have_no_state():
    for t in (T.TENSOR_FLOAT32, T.TENSOR_INT32, B):
        x = tensor(t, [1, 0])
        assert prepare_operation(Op.LESS, [x, x], [OutputSpec(B, ())]).state is None


@pytest.mark.parametrize("t", [T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED])
def test_select_quant_tables_are_the_requantization_of_every_code(t):
    off = -128 if t == T.TENSOR_QUANT8_ASYMM_SIGNED else 0
    cond = tensor(B, np.arange(256) % 3 == 0)
    a = tensor(t, codes(t), 0.5, 100 + off)
    b = tensor(t, codes(t)[::-1], 0.03, 7 + off)
    out = OutputSpec(t, (), 0.25, 60 + off)
    p = prepare_operation(Op.SELECT, [cond, a, b], [out])
    ta, tb = p.state
    ra = requantize(codes(t), 0.5, 100 + off, 0.25, 60 + off, t)  # the direct computation, code by code
    rb = requantize(codes(t), 0.03, 7 + off, 0.25, 60 + off, t)
    np.testing.assert_array_equal(ta, ra)
    np.testing.assert_array_equal(tb, rb)
    want = np.where(cond.data, ra, rb[::-1]).astype(NUMPY_DTYPE[t])
    np.testing.assert_array_equal(p.run([cond, a, b])[0], want)
    np.testing.assert_array_equal(REGISTRY[Op.SELECT].execute(ExecContext(Op.SELECT, [cond, a, b], [out]))[0], want)
    f = tensor(T.TENSOR_FLOAT32, [1.0, 2.0])
    assert prepare_operation(Op.SELECT, [tensor(B, [True, False]), f, f], [OutputSpec(T.TENSOR_FLOAT32, ())]) \
        .state is None


def test_quant_zero_d():
    t = T.TENSOR_QUANT8_ASYMM
    got = run(Op.LESS, [tensor(t, 2, 0.1, 0), tensor(t, 3, 0.1, 0)])
    assert got.__class__ is np.ndarray and got.shape == () and got
    got = run(Op.SELECT, [tensor(B, True), tensor(t, 2, 0.1, 0), tensor(t, 3, 0.1, 0)], t, 0.1, 0)
    assert got.__class__ is np.ndarray and got.shape == () and got == 2
