"""Comparisons and logic of the HAL 1.3 spec: EQUAL, NOT_EQUAL, GREATER,
GREATER_EQUAL, LESS, LESS_EQUAL (broadcasting, TENSOR_BOOL8 result),
LOGICAL_AND, LOGICAL_OR, LOGICAL_NOT and SELECT.

Quantized inputs are compared as real values, ``(q - zeroPoint) * scale`` in
float, as the reference does (each input with its own scale); SELECT
requantizes both quantized inputs to the output's scale.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from nnhal.hal import OperandType, OperationType
from nnhal.ops.base import V1_2, V1_3, ExecContext, OpDef, Signature, Tensor
from nnhal.ops.broadcast import broadcast_shape, requantize

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


def _compare_values(t: Tensor) -> np.ndarray:
    if t.type in Q8:
        # NOTE: int * float in the reference: single precision
        return (t.data.astype(np.int32) - t.zero_point).astype(np.float32) * np.float32(t.scale)
    if t.type == T.TENSOR_BOOL8:
        return t.data.astype(np.uint8)
    return t.data


def _execute_compare(ctx: ExecContext) -> list[np.ndarray]:
    a, b = ctx.inputs[0], ctx.inputs[1]
    shape = broadcast_shape(ctx, a.shape, b.shape)
    res = _COMPARE[ctx.type](_compare_values(a), _compare_values(b))
    return [np.broadcast_to(res, shape).astype(np.bool_)]


def _execute_logical(ctx: ExecContext) -> list[np.ndarray]:
    a, b = ctx.inputs[0], ctx.inputs[1]
    shape = broadcast_shape(ctx, a.shape, b.shape)
    x, y = a.data.astype(np.bool_), b.data.astype(np.bool_)
    res = np.logical_and(x, y) if ctx.type == OperationType.LOGICAL_AND else np.logical_or(x, y)
    return [np.broadcast_to(res, shape).copy()]


def _execute_logical_not(ctx: ExecContext) -> list[np.ndarray]:
    return [np.logical_not(ctx.inputs[0].data.astype(np.bool_))]


def _execute_select(ctx: ExecContext) -> list[np.ndarray]:
    cond, a, b = ctx.inputs
    out = ctx.outputs[0]
    if cond.shape != a.shape:
        raise ctx.fail(f"condition shape {list(cond.shape)} differs from input 1 shape {list(a.shape)}")
    if a.shape != b.shape:
        raise ctx.fail(f"input 1 shape {list(a.shape)} differs from input 2 shape {list(b.shape)}")
    if a.type in Q8:
        x = requantize(a.data, a.scale, a.zero_point, out.scale, out.zero_point, out.type)
        y = requantize(b.data, b.scale, b.zero_point, out.scale, out.zero_point, out.type)
    else:
        x, y = a.data, b.data
    return [np.where(cond.data.astype(np.bool_), x, y).astype(out.dtype)]


_COMPARE_TYPES = [(T.TENSOR_BOOL8, V1_2), (T.TENSOR_FLOAT16, V1_2), (T.TENSOR_FLOAT32, V1_2), (T.TENSOR_INT32, V1_2),
                  (T.TENSOR_QUANT8_ASYMM, V1_2), (T.TENSOR_QUANT8_ASYMM_SIGNED, V1_3)]
_SELECT_TYPES = [(T.TENSOR_FLOAT16, V1_2), (T.TENSOR_FLOAT32, V1_2), (T.TENSOR_INT32, V1_2),
                 (T.TENSOR_QUANT8_ASYMM, V1_2), (T.TENSOR_QUANT8_ASYMM_SIGNED, V1_3)]
_B = T.TENSOR_BOOL8

OPS: list[OpDef] = [
    *[
        OpDef(type=op, signatures=[Signature((t, t), (_B,), v) for t, v in _COMPARE_TYPES], execute=_execute_compare)
        for op in _COMPARE
    ],
    OpDef(type=OperationType.LOGICAL_AND, signatures=[Signature((_B, _B), (_B,), V1_2)], execute=_execute_logical),
    OpDef(type=OperationType.LOGICAL_OR, signatures=[Signature((_B, _B), (_B,), V1_2)], execute=_execute_logical),
    OpDef(type=OperationType.LOGICAL_NOT, signatures=[Signature((_B,), (_B,), V1_2)], execute=_execute_logical_not),
    OpDef(type=OperationType.SELECT, signatures=[Signature((_B, t, t), (t,), v) for t, v in _SELECT_TYPES],
          execute=_execute_select),
]
