"""Comparisons and logic of the HAL 1.3 spec: EQUAL, NOT_EQUAL, GREATER,
GREATER_EQUAL, LESS, LESS_EQUAL (broadcasting, TENSOR_BOOL8 result),
LOGICAL_AND, LOGICAL_OR, LOGICAL_NOT and SELECT.

Quantized inputs are compared as real values, ``(q - zeroPoint) * scale`` in
float, as the reference does (each input with its own scale); SELECT
requantizes both quantized inputs to the output's scale.  Both depend only on
the 8-bit code: ``prepare`` tables them for the 256 codes of each input (the
same computation, so bit-identical), ``execute`` looks them up.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from nnhal.hal import OperandType, OperationType
from nnhal.ops.base import NUMPY_DTYPE, V1_2, V1_3, ExecContext, OpDef, OpInfo, Signature, Tensor
from nnhal.ops.broadcast import broadcast_shape, lookup, requantize_table

T = OperandType
Q8 = (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)

_COMPARE: dict[OperationType, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    OperationType.EQUAL: np.equal,
    OperationType.NOT_EQUAL: np.not_equal,
    OperationType.GREATER: np.greater,
    OperationType.GREATER_EQUAL: np.greater_equal,
    OperationType.LESS: np.less,
    OperationType.LESS_EQUAL: np.less_equal,
}


# NOTE: up to this many elements an 8-bit input's real values are looked up in its prepared
# table (fewer numpy calls); beyond, computed (numpy's take widens the indexes: slower per element)
_TABLE_MAX_SIZE = 2048


def _compare_values(t: Tensor, table: object = None) -> np.ndarray:
    if table is not None and t.data.size <= _TABLE_MAX_SIZE:
        return lookup(table, t.data)  # NOTE: the prepared real value of each 8-bit code
    if t.type in Q8:
        return _real_values(t.data, t.scale, t.zero_point)
    if t.type == T.TENSOR_BOOL8:
        return t.data.astype(np.uint8)
    return t.data


def _real_values(q: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    # NOTE: int * float in the reference: single precision
    return (q.astype(np.int32) - zero_point).astype(np.float32) * np.float32(scale)


def _real_table(t: object) -> object:
    """The real value of each of an 8-bit operand's 256 codes (entry i: the code
    whose byte is i), as the comparison computes it; None for other types."""
    if t.type not in Q8:
        return None
    table = _real_values(np.arange(256, dtype=np.uint8).view(NUMPY_DTYPE[t.type]), t.scale, t.zero_point)
    table.flags.writeable = False
    return table


def _prepare_compare(info: OpInfo) -> object:
    """Quantized inputs: the real value of every code of each (they depend only
    on the operands' scale and zeroPoint); None otherwise."""
    a, b = info.inputs[0], info.inputs[1]
    if a.type not in Q8:
        return None
    return _real_table(a), _real_table(b)


def _execute_compare(ctx: ExecContext) -> list[np.ndarray]:
    a, b = ctx.inputs[0], ctx.inputs[1]
    shape = broadcast_shape(ctx, a.shape, b.shape)
    ta = tb = None
    if a.type in Q8:
        ta, tb = ctx.state if ctx.state is not None else (_real_table(a), _real_table(b))
    res = _COMPARE[ctx.type](_compare_values(a, ta), _compare_values(b, tb))
    if res.shape == shape and res.__class__ is np.ndarray:
        return [res]  # NOTE: a fresh bool array
    return [np.broadcast_to(res, shape).astype(np.bool_)]


def _execute_logical(ctx: ExecContext) -> list[np.ndarray]:
    a, b = ctx.inputs[0], ctx.inputs[1]
    shape = broadcast_shape(ctx, a.shape, b.shape)
    x, y = a.data.astype(np.bool_), b.data.astype(np.bool_)
    res = np.logical_and(x, y) if ctx.type == OperationType.LOGICAL_AND else np.logical_or(x, y)
    return [np.broadcast_to(res, shape).copy()]


def _execute_logical_not(ctx: ExecContext) -> list[np.ndarray]:
    return [np.logical_not(ctx.inputs[0].data.astype(np.bool_))]


def _select_tables(a: object, b: object, out: object) -> object:
    """Quantized SELECT: each input's requantization to the output as a table of
    its 256 codes (they depend only on the scales and zeroPoints); None otherwise."""
    if a.type not in Q8:
        return None
    return (requantize_table(a.type, a.scale, a.zero_point, out.scale, out.zero_point, out.type),
            requantize_table(b.type, b.scale, b.zero_point, out.scale, out.zero_point, out.type))


def _prepare_select(info: OpInfo) -> object:
    return _select_tables(info.inputs[1], info.inputs[2], info.outputs[0])


def _execute_select(ctx: ExecContext) -> list[np.ndarray]:
    cond, a, b = ctx.inputs
    out = ctx.outputs[0]
    if cond.shape != a.shape:
        raise ctx.fail(f"condition shape {list(cond.shape)} differs from input 1 shape {list(a.shape)}")
    if a.shape != b.shape:
        raise ctx.fail(f"input 1 shape {list(a.shape)} differs from input 2 shape {list(b.shape)}")
    if a.type in Q8:
        ta, tb = ctx.state if ctx.state is not None else _select_tables(a, b, out)
        x, y = lookup(ta, a.data), lookup(tb, b.data)
    else:
        x, y = a.data, b.data
    return [np.where(cond.data.astype(np.bool_), x, y).astype(out.dtype, copy=False)]


_COMPARE_TYPES = [(T.TENSOR_BOOL8, V1_2), (T.TENSOR_FLOAT16, V1_2), (T.TENSOR_FLOAT32, V1_2), (T.TENSOR_INT32, V1_2),
                  (T.TENSOR_QUANT8_ASYMM, V1_2), (T.TENSOR_QUANT8_ASYMM_SIGNED, V1_3)]
_SELECT_TYPES = [(T.TENSOR_FLOAT16, V1_2), (T.TENSOR_FLOAT32, V1_2), (T.TENSOR_INT32, V1_2),
                 (T.TENSOR_QUANT8_ASYMM, V1_2), (T.TENSOR_QUANT8_ASYMM_SIGNED, V1_3)]
_B = T.TENSOR_BOOL8

OPS: list[OpDef] = [
    *[
        OpDef(type=op, signatures=[Signature((t, t), (_B,), v) for t, v in _COMPARE_TYPES], execute=_execute_compare,
              prepare=_prepare_compare)
        for op in _COMPARE
    ],
    OpDef(type=OperationType.LOGICAL_AND, signatures=[Signature((_B, _B), (_B,), V1_2)], execute=_execute_logical),
    OpDef(type=OperationType.LOGICAL_OR, signatures=[Signature((_B, _B), (_B,), V1_2)], execute=_execute_logical),
    OpDef(type=OperationType.LOGICAL_NOT, signatures=[Signature((_B,), (_B,), V1_2)], execute=_execute_logical_not),
    OpDef(type=OperationType.SELECT, signatures=[Signature((_B, t, t), (t,), v) for t, v in _SELECT_TYPES],
          execute=_execute_select, prepare=_prepare_select),
]
