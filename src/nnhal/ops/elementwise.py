"""Unary elementwise math of the HAL 1.3 spec: FLOOR, ABS, EXP, LOG, NEG,
RSQRT, SIN and SQRT.

All float kernels compute in float32 (float16 tensors are widened and the
result rounded back, as the reference does); ABS and NEG also take
TENSOR_INT32 (ABS since HAL 1.3), which wraps like C++ int32.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from nnhal.hal import HalVersion, OperandType, OperationType
from nnhal.ops.base import V1_0, V1_2, V1_3, ExecContext, OpDef, OpInfo, Signature
from nnhal.ops.broadcast import check_max_rank, validate_max_rank

T = OperandType


def _unary_signatures(types: list[tuple[OperandType, HalVersion]]) -> list[Signature]:
    return [Signature((t,), (t,), v) for t, v in types]


def _rsqrt(x: np.ndarray) -> np.ndarray:
    return np.float32(1.0) / np.sqrt(x)


_FLOAT_FUNCS: dict[OperationType, Callable[[np.ndarray], np.ndarray]] = {
    OperationType.FLOOR: np.floor,
    OperationType.ABS: np.abs,
    OperationType.EXP: np.exp,
    OperationType.LOG: np.log,
    OperationType.NEG: np.negative,
    OperationType.RSQRT: _rsqrt,
    OperationType.SIN: np.sin,
    OperationType.SQRT: np.sqrt,
}


def _execute(ctx: ExecContext) -> list[np.ndarray]:
    x = ctx.inputs[0]
    out = ctx.outputs[0]
    if ctx.type == OperationType.FLOOR:
        check_max_rank(ctx, 4, 0)
    func = _FLOAT_FUNCS[ctx.type]
    data = x.data
    with np.errstate(all="ignore"):
        # NOTE: int32: -INT32_MIN and abs(INT32_MIN) wrap to INT32_MIN, as in C++; float32 as it
        # is (the function makes a new array); float16 in float32, rounded back
        res = func(data if data.dtype != np.float16 else data.astype(np.float32))
    return [np.asarray(res).astype(out.dtype, copy=False)]


def _validate_floor(info: OpInfo) -> None:
    validate_max_rank(info, 4, 0)


_FLOATS = [(T.TENSOR_FLOAT32, V1_2), (T.TENSOR_FLOAT16, V1_2)]

OPS: list[OpDef] = [
    OpDef(type=OperationType.FLOOR, signatures=_unary_signatures([(T.TENSOR_FLOAT32, V1_0), (T.TENSOR_FLOAT16, V1_2)]),
          execute=_execute, validate=_validate_floor),
    OpDef(type=OperationType.ABS, signatures=_unary_signatures(_FLOATS + [(T.TENSOR_INT32, V1_3)]), execute=_execute),
    OpDef(type=OperationType.NEG, signatures=_unary_signatures(_FLOATS + [(T.TENSOR_INT32, V1_2)]), execute=_execute),
    *[
        OpDef(type=op, signatures=_unary_signatures(_FLOATS), execute=_execute)
        for op in (OperationType.EXP, OperationType.LOG, OperationType.RSQRT, OperationType.SIN, OperationType.SQRT)
    ],
]
