"""Reductions of the HAL 1.3 spec (``types.hal`` ``OperationType``): MEAN,
REDUCE_ALL, REDUCE_ANY, REDUCE_MAX, REDUCE_MIN, REDUCE_PROD, REDUCE_SUM,
ARGMAX, ARGMIN and TOPK_V2.

Axes may be negative and repeated; with keep_dims false and every axis
reduced the output shape is [1].  Quantized MEAN follows the reference's
TFLite ``Mean<T, int32>``: an integer sum of the stored values divided by the
element count with C++ truncation (input and output share scale and zero
point).  REDUCE_MAX / MIN work on stored values directly (same quantization
in and out); float16 is computed in float32 and cast back.
"""

from __future__ import annotations

import numpy as np

from nnhal.hal import OperandType, OperationType
from nnhal.ops.base import V1_1, V1_2, V1_3, ExecContext, OpDef, OpInfo, Signature
from nnhal.ops.prepared import prepared

T = OperandType
F32, F16, I32 = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32
Q8, Q8S, B8 = T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_BOOL8


def _validate_rank_le4(info: OpInfo) -> None:
    # NOTE: the reference checks the rank only when it is known (unknown = 0)
    if info.inputs[0].rank > 4:
        raise info.fail(f"input rank {info.inputs[0].rank} > 4")


def _axis(ctx: ExecContext, axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise ctx.fail(f"axis {axis} out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def _reduce_axes(ctx: ExecContext) -> tuple[np.ndarray, tuple[int, ...], list[int]]:
    """Input data, the (deduplicated, non-negative) axes to reduce and the output shape."""
    x = ctx.inputs[0].data
    rank = x.ndim
    if rank > 4:
        raise ctx.fail(f"input rank {rank} > 4")
    st = ctx.state
    if st is None:
        st = prepared(_axes_param, ctx.inputs[1].data, ctx.inputs[2].data)
        if st is None:
            raise ctx.fail("axes and keep_dims must have values")
    raw, keep = st.value(ctx)
    axes = tuple(sorted({_axis(ctx, a, rank) for a in raw}))
    out = [1 if d in axes else s for d, s in enumerate(x.shape) if keep or d not in axes]
    return x, axes, out or [1]


def _axes_param(axes_t: np.ndarray, keep: np.ndarray) -> tuple[tuple[int, ...], bool]:
    """(the axes as given, keep_dims); ValueError where the reference fails."""
    if axes_t.ndim != 1:
        raise ValueError(f"axes must be a 1-D tensor, got shape {list(axes_t.shape)}")
    # NOTE: MEAN's keep_dims is an INT32 ("if positive"), the others' a BOOL
    return tuple(int(a) for a in axes_t.tolist()), bool(keep.item() > 0)


def _prepare_reduce(info: OpInfo) -> object:
    """The axes and keep_dims, when constants (normalized against the rank at execute)."""
    return prepared(_axes_param, info.constant(1), info.constant(2))


def _float_reduce(ctx: ExecContext, fn) -> list[np.ndarray]:
    x, axes, out = _reduce_axes(ctx)
    r = fn(x.astype(np.float32), axes)
    return [np.asarray(r).reshape(out).astype(ctx.outputs[0].dtype)]


# --------------------------------------------------------------------------
# MEAN


def _exec_mean(ctx: ExecContext) -> list[np.ndarray]:
    x, axes, out = _reduce_axes(ctx)
    if ctx.inputs[0].type in (Q8, Q8S):
        count = int(np.prod([x.shape[a] for a in axes])) if axes else 1
        s = np.sum(x.astype(np.int64), axis=axes)
        # NOTE: C++ integer division of the int32 sum (truncates toward zero)
        q = np.where(s >= 0, s // count, -((-s) // count)) if count else s
        return [np.asarray(q).reshape(out).astype(x.dtype)]
    return _float_reduce(ctx, lambda v, a: np.mean(v, axis=a, dtype=np.float32))


# --------------------------------------------------------------------------
# REDUCE_*


def _prod(v: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    # NOTE: the reference's reducer returns 0 when either factor is 0 (so 0 * inf is 0, not nan)
    zero = np.any(v == 0, axis=axes)
    p = np.prod(np.where(v == 0, 1, v).astype(np.float64), axis=axes)
    return np.where(zero, 0.0, p).astype(np.float32)


def _exec_reduce_prod(ctx: ExecContext) -> list[np.ndarray]:
    return _float_reduce(ctx, _prod)


def _exec_reduce_sum(ctx: ExecContext) -> list[np.ndarray]:
    return _float_reduce(ctx, lambda v, a: np.sum(v, axis=a, dtype=np.float32))


def _stored_reduce(fn):
    def execute(ctx: ExecContext) -> list[np.ndarray]:
        x, axes, out = _reduce_axes(ctx)
        # NOTE: max / min / all / any on stored values (quantization is the same in and out)
        return [np.asarray(fn(x, axis=axes)).reshape(out)]
    return execute


# --------------------------------------------------------------------------
# ARGMAX, ARGMIN


def _scalar_param(v: np.ndarray) -> int:
    """An INT32 scalar parameter (ARGMAX / ARGMIN's axis, TOPK_V2's k) as an int."""
    return int(v.item())


def _prepare_scalar_param(info: OpInfo) -> object:
    """Input 1 (the axis / k), when a constant; checked against the input's shape at execute."""
    return prepared(_scalar_param, info.constant(1))


def _param(ctx: ExecContext) -> int:
    st = ctx.state
    return st.value(ctx) if st is not None else _scalar_param(ctx.inputs[1].data)


def _arg(fn):
    def execute(ctx: ExecContext) -> list[np.ndarray]:
        x = ctx.inputs[0].data
        axis = _axis(ctx, _param(ctx), x.ndim)
        # NOTE: numpy returns the first extreme element, like the reference's strict comparison
        r = fn(x, axis=axis).astype(np.int32, copy=False)
        return [r.reshape([s for d, s in enumerate(x.shape) if d != axis] or [1])]
    return execute


# --------------------------------------------------------------------------
# TOPK_V2


def _exec_topk(ctx: ExecContext) -> list[np.ndarray]:
    x = ctx.inputs[0].data
    k = _param(ctx)
    if x.ndim == 0:
        raise ctx.fail("input must have rank >= 1")
    n = x.shape[-1]
    if not 0 < k <= n:
        raise ctx.fail(f"k = {k} out of range (0, {n}]")
    # NOTE: the reference sorts (value, index) pairs descending, so among equal
    # values the larger index comes first: a stable sort of the reversed rows
    rev = x[..., ::-1].astype(np.float64)
    order = np.argsort(-rev, axis=-1, kind="stable")[..., :k]
    idx = n - 1 - order
    return [np.take_along_axis(x, idx, axis=-1), idx.astype(np.int32)]


# --------------------------------------------------------------------------

_MAXMIN = ((F16, V1_2), (F32, V1_2), (Q8, V1_2), (Q8S, V1_3))
_PRODSUM = ((F16, V1_2), (F32, V1_2))
_ARG = ((F16, V1_2), (F32, V1_2), (I32, V1_2), (Q8, V1_2), (Q8S, V1_3))


def _reduce_sigs(table) -> list[Signature]:
    return [Signature((t, I32, T.BOOL), (t,), v) for t, v in table]


def _reduce_op(op: OperationType, table, execute) -> OpDef:
    return OpDef(op, _reduce_sigs(table), execute, validate=_validate_rank_le4, prepare=_prepare_reduce)


OPS: list[OpDef] = [
    OpDef(OperationType.MEAN,
          [Signature((t, I32, T.INT32), (t,), v) for t, v in ((F32, V1_1), (Q8, V1_1), (F16, V1_2), (Q8S, V1_3))],
          _exec_mean, validate=_validate_rank_le4, prepare=_prepare_reduce, bad_data_on_missing_operand=True),
    _reduce_op(OperationType.REDUCE_ALL, ((B8, V1_2),), _stored_reduce(np.all)),
    _reduce_op(OperationType.REDUCE_ANY, ((B8, V1_2),), _stored_reduce(np.any)),
    _reduce_op(OperationType.REDUCE_MAX, _MAXMIN, _stored_reduce(np.max)),
    _reduce_op(OperationType.REDUCE_MIN, _MAXMIN, _stored_reduce(np.min)),
    _reduce_op(OperationType.REDUCE_PROD, _PRODSUM, _exec_reduce_prod),
    _reduce_op(OperationType.REDUCE_SUM, _PRODSUM, _exec_reduce_sum),
    OpDef(OperationType.ARGMAX, [Signature((t, T.INT32), (I32,), v) for t, v in _ARG], _arg(np.argmax),
          prepare=_prepare_scalar_param, bad_data_on_missing_operand=True),
    OpDef(OperationType.ARGMIN, [Signature((t, T.INT32), (I32,), v) for t, v in _ARG], _arg(np.argmin),
          prepare=_prepare_scalar_param, bad_data_on_missing_operand=True),
    OpDef(OperationType.TOPK_V2, [Signature((t, T.INT32), (t, I32), v) for t, v in _ARG], _exec_topk,
          prepare=_prepare_scalar_param),
]
