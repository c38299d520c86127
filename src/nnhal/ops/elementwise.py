"""Unary elementwise math of the HAL 1.3 spec: FLOOR, ABS, EXP, LOG, NEG,
RSQRT, SIN and SQRT.

All float kernels compute in float32 (float16 tensors are widened and the
result rounded back, as the reference does); ABS and NEG also take
TENSOR_INT32 (ABS since HAL 1.3), which wraps like C++ int32.  RSQRT takes
TENSOR_QUANT8_ASYMM(_SIGNED) since the AIDL HAL's version 3 (feature level 7),
computed as Android 13's ``Elementwise.cpp`` does: dequantized in float32,
1 / sqrt, divided by the output scale, ``std::round``ed, plus the output zero
point, clamped (a NaN, from a negative input, to the type's maximum as
``std::min`` / ``std::max`` order it); by a 256-entry table made at prepare.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from nnhal.hal import HalVersion, OperandType, OperationType
from nnhal.ops import lut
from nnhal.ops.base import AIDL_V3, V1_0, V1_2, V1_3, ExecContext, OpDef, OpInfo, Signature
from nnhal.ops.broadcast import check_max_rank, validate_max_rank
from nnhal.ops.quant import QUANT_RANGE, round_half_away

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


def _rsqrt_quant(ctx: ExecContext) -> np.ndarray:
    """The reference's quantized RSQRT (``makeQuantized`` over ``1.f / std::sqrt``), in float32 throughout."""
    x, out = ctx.inputs[0], ctx.outputs[0]
    lo, hi = QUANT_RANGE[out.type]
    real = (x.data.astype(np.int32) - np.int32(x.zero_point)).astype(np.float32) * np.float32(x.scale)
    with np.errstate(all="ignore"):  # NOTE: 0 gives +inf, a negative value NaN: both saturate below
        q = np.float32(out.zero_point) + round_half_away(_rsqrt(real) / np.float32(out.scale))
    # NOTE: std::min(max, v) keeps max for a NaN v (the comparison is false), then std::max keeps it
    q = np.where(np.isnan(q), np.float32(hi), q)
    return np.clip(q, lo, hi).astype(out.dtype)


def _execute_rsqrt(ctx: ExecContext) -> list[np.ndarray]:
    if ctx.inputs[0].type in lut.QUANT8:
        return [lut.lookup(ctx, _rsqrt_quant)]
    return _execute(ctx)


_FLOATS = [(T.TENSOR_FLOAT32, V1_2), (T.TENSOR_FLOAT16, V1_2)]
_QUANT8_AIDL_V3 = [(T.TENSOR_QUANT8_ASYMM, AIDL_V3), (T.TENSOR_QUANT8_ASYMM_SIGNED, AIDL_V3)]

OPS: list[OpDef] = [
    OpDef(type=OperationType.FLOOR, signatures=_unary_signatures([(T.TENSOR_FLOAT32, V1_0), (T.TENSOR_FLOAT16, V1_2)]),
          execute=_execute, validate=_validate_floor),
    OpDef(type=OperationType.ABS, signatures=_unary_signatures(_FLOATS + [(T.TENSOR_INT32, V1_3)]), execute=_execute),
    OpDef(type=OperationType.NEG, signatures=_unary_signatures(_FLOATS + [(T.TENSOR_INT32, V1_2)]), execute=_execute),
    *[
        OpDef(type=op, signatures=_unary_signatures(_FLOATS), execute=_execute)
        for op in (OperationType.EXP, OperationType.LOG, OperationType.SIN, OperationType.SQRT)
    ],
    # NOTE: the input and output quantizations may differ (a table per pair, made at prepare)
    OpDef(type=OperationType.RSQRT, signatures=_unary_signatures(_FLOATS + _QUANT8_AIDL_V3),
          execute=_execute_rsqrt, prepare=lut.preparer({OperationType.RSQRT: _rsqrt_quant})),
]
