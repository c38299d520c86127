"""Tensor manipulation operations of the HAL 1.3 spec (``types.hal``
``OperationType``): RESHAPE, SQUEEZE, EXPAND_DIMS, TRANSPOSE, CONCATENATION,
SPLIT, SLICE, STRIDED_SLICE, GATHER, TILE, FILL, RANK, PAD and PAD_V2.

These ops move data without arithmetic, so one kernel serves every storage
type; only CONCATENATION requantizes (quantized inputs whose scale / zero
point differ from the output's, as the reference's float rescaling does) and
PAD / PAD_V2 pick the quantized pad value.  Validation mirrors Android 11's
reference (``Utils.cpp`` ``validateOperation`` for the ops that bypass the
operation resolver, the ``validate`` / ``prepare`` of the others); run-time
shape and value problems raise OpExecutionError.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from nnhal.hal import HalVersion, OperandType, OperationType
from nnhal.ops.base import (
    NUMPY_DTYPE,
    V1_0,
    V1_1,
    V1_2,
    V1_3,
    ExecContext,
    OpDef,
    OpInfo,
    Signature,
)
from nnhal.ops.fixedpoint import round_half_away
from nnhal.ops.prepared import prepared

T = OperandType
F32, F16, I32 = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32
Q8, Q8S = T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED

# (tensor type, first HAL version) tables, as listed by the spec for each op
_FQ_V1_0 = ((F32, V1_0), (Q8, V1_0), (F16, V1_2), (Q8S, V1_3))
_FQ_V1_1 = ((F32, V1_1), (Q8, V1_1), (F16, V1_2), (Q8S, V1_3))
_FIQ_V1_2 = ((F32, V1_2), (F16, V1_2), (I32, V1_2), (Q8, V1_2), (Q8S, V1_3))


def _sigs(table: Sequence[tuple[OperandType, HalVersion]], tail: Callable[[OperandType], tuple] = lambda t: (),
          outs: Callable[[OperandType], tuple] = lambda t: (t,), **kw) -> list[Signature]:
    """One signature per (type, version): (t, *tail(t)) -> outs(t)."""
    return [Signature((t,) + tuple(tail(t)), tuple(outs(t)), v, **kw) for t, v in table]


def _check_rank_le4(info: OpInfo, *positions: int) -> None:
    # NOTE: the reference checks ranks only when known (an unknown rank is 0)
    for i in positions:
        if info.inputs[i].rank > 4:
            raise info.fail(f"input {i} has rank {info.inputs[i].rank}, at most 4 supported")


def _validate_rank_le4(info: OpInfo) -> None:
    _check_rank_le4(info, 0)


def _int_values(ctx: ExecContext, i: int, what: str, ndim: int | None = 1) -> np.ndarray:
    data = ctx.inputs[i].data
    if ndim is not None and data.ndim != ndim:
        raise ctx.fail(f"{what} must be a {ndim}-D tensor, got shape {list(data.shape)}")
    return data.reshape(-1).astype(np.int64)


def _axis(ctx: ExecContext, axis: int, rank: int) -> int:
    """handleNegativeAxis: axis in [-rank, rank)."""
    if not -rank <= axis < rank:
        raise ctx.fail(f"axis {axis} out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


# --------------------------------------------------------------------------
# RESHAPE


def _reshape_target(shape: np.ndarray) -> tuple:
    """(target, position of -1 or None, product of the other components) of a
    RESHAPE shape operand; ValueError where the reference fails."""
    target = shape.reshape(-1).astype(np.int64)
    stretch = np.flatnonzero(target == -1)
    if len(stretch) > 1:
        raise ValueError("at most one component of the shape may be -1")
    fixed = target[target != -1]
    if np.any(fixed < 0):
        raise ValueError(f"invalid target shape {target.tolist()}")
    count = int(np.prod(fixed)) if len(fixed) else 1
    if len(stretch) and count == 0:
        raise ValueError(f"cannot infer the -1 dimension of {target.tolist()}")
    return tuple(int(d) for d in target), (int(stretch[0]) if len(stretch) else None), count


def _prepare_reshape(info: OpInfo) -> object:
    """The parsed target shape when it is a constant (or the reason every execution fails)."""
    return prepared(_reshape_target, info.constant(1))


def _exec_reshape(ctx: ExecContext) -> list[np.ndarray]:
    x = ctx.inputs[0].data
    st = ctx.state
    if st is None:
        st = prepared(_reshape_target, ctx.inputs[1].data)
    target, stretch, count = st.value(ctx)
    if stretch is not None:
        d = x.size // count
        dims = target[:stretch] + (d,) + target[stretch + 1:]
        count *= d
    else:
        dims = target
    if count != x.size:
        raise ctx.fail(f"cannot reshape {list(x.shape)} ({x.size} elements) to {list(target)}")
    return [x.reshape(dims)]


# --------------------------------------------------------------------------
# SQUEEZE


def _exec_squeeze(ctx: ExecContext) -> list[np.ndarray]:
    x = ctx.inputs[0].data
    rank = x.ndim
    if rank > 4:
        raise ctx.fail(f"input rank {rank} > 4")
    if not ctx.has(1):
        squeeze = [d for d in range(rank) if x.shape[d] == 1]
    else:
        squeeze = []
        for a in _int_values(ctx, 1, "squeeze dims").tolist():
            cur = a + rank if a < 0 else a
            if not (0 <= cur < rank and x.shape[cur] == 1):
                raise ctx.fail(f"cannot squeeze dimension {a} of shape {list(x.shape)}")
            squeeze.append(cur)
    out = [s for d, s in enumerate(x.shape) if d not in squeeze]
    return [x.reshape(out or [1])]


# --------------------------------------------------------------------------
# EXPAND_DIMS


def _exec_expand_dims(ctx: ExecContext) -> list[np.ndarray]:
    x = ctx.inputs[0].data
    axis = _axis(ctx, ctx.scalar(1), x.ndim + 1)
    return [np.expand_dims(x, axis)]


# --------------------------------------------------------------------------
# TRANSPOSE


def _exec_transpose(ctx: ExecContext) -> list[np.ndarray]:
    x = ctx.inputs[0].data
    rank = x.ndim
    if not ctx.has(1):
        # NOTE: an omitted perm is the 2-D matrix transpose only
        if rank != 2:
            raise ctx.fail(f"an omitted perm needs a 2-D input, got rank {rank}")
        return [np.ascontiguousarray(x.T)]
    if rank > 4:
        raise ctx.fail(f"input rank {rank} > 4")
    perm = _int_values(ctx, 1, "perm")
    if len(perm) != rank:
        raise ctx.fail(f"perm has {len(perm)} entries for an input of rank {rank}")
    if np.any((perm < 0) | (perm >= rank)) or len(set(perm.tolist())) != rank:
        raise ctx.fail(f"invalid permutation {perm.tolist()}")
    return [np.ascontiguousarray(np.transpose(x, perm.tolist()))]


# --------------------------------------------------------------------------
# CONCATENATION


def _validate_concatenation(info: OpInfo) -> None:
    n = len(info.inputs) - 1
    t = info.inputs[0].type
    for i in range(1, n):
        if info.inputs[i].type != t:
            raise info.fail(f"input {i} is {info.inputs[i].type.name}, expected {t.name} like input 0")
    if info.inputs[n].type != T.INT32:
        raise info.fail(f"the last input (axis) must be INT32, got {info.inputs[n].type.name}")
    if info.outputs[0].type != t:
        raise info.fail(f"output is {info.outputs[0].type.name}, expected {t.name}")
    if info.version < V1_2 and t == Q8:
        out = info.outputs[0]
        for i in range(n):
            if info.inputs[i].scale != out.scale or info.inputs[i].zero_point != out.zero_point:
                raise info.fail("before HAL 1.2 all quant8 inputs must have the output's scale and zeroPoint")
    _check_rank_le4(info, *range(n))


def _requantize_concat(q: np.ndarray, in_scale: float, in_zp: int, out_scale: float, out_zp: int,
                       signed: bool) -> np.ndarray:
    """The reference's uint8 requantization (int8 goes through uint8 with +128):
    round(q * s + b) + zp_out in single precision, s = in_scale * (1 / out_scale)."""
    off = 128 if signed else 0
    scale = np.float32(in_scale) * (np.float32(1.0) / np.float32(out_scale))
    bias = np.float32(-(in_zp + off)) * scale
    v = (q.astype(np.float32) + np.float32(off)) * scale + bias
    r = round_half_away(v).astype(np.int64) + out_zp + off
    return (np.clip(r, 0, 255) - off).astype(q.dtype)


def _exec_concatenation(ctx: ExecContext) -> list[np.ndarray]:
    n = len(ctx.inputs) - 1
    tensors = ctx.inputs[:n]
    x0 = tensors[0].data
    rank = x0.ndim
    axis = ctx.scalar(n)
    # NOTE: the reference does not accept negative axes here
    if not 0 <= axis < rank:
        raise ctx.fail(f"axis {axis} out of range for rank {rank}")
    if rank > 4:
        raise ctx.fail(f"input rank {rank} > 4")
    for i, t in enumerate(tensors[1:], 1):
        s = t.data.shape
        if len(s) != rank or any(s[d] != x0.shape[d] for d in range(rank) if d != axis):
            raise ctx.fail(f"input {i} has shape {list(s)}, incompatible with {list(x0.shape)} on axis {axis}")
    out = ctx.outputs[0]
    luts = ctx.state.value(ctx) if ctx.state is not None else _concat_luts(tensors, out)
    parts = []
    for t, lut in zip(tensors, luts):
        parts.append(t.data if lut is None else lut.take(t.data.view(np.uint8)))
    return [np.concatenate(parts, axis=axis)]


def _concat_luts(tensors: Sequence, out: object) -> tuple:
    """Per input, None or the 256-entry table requantizing its 8-bit values to
    the output's scale and zero point (entry i: the value whose byte is i),
    made by the reference's own requantization (bit-identical)."""
    luts = []
    for t in tensors:
        lut = None
        if t.type in (Q8, Q8S) and (t.scale != out.scale or t.zero_point != out.zero_point):
            codes = np.arange(256, dtype=np.uint8).view(np.int8 if t.type == Q8S else np.uint8)
            lut = np.ascontiguousarray(_requantize_concat(codes, t.scale, t.zero_point, out.scale, out.zero_point,
                                                          t.type == Q8S))
        luts.append(lut)
    return tuple(luts)


def _prepare_concatenation(info: OpInfo) -> object:
    return prepared(lambda: _concat_luts(info.inputs[:-1], info.outputs[0]))


# --------------------------------------------------------------------------
# SPLIT


def _exec_split(ctx: ExecContext) -> list[np.ndarray]:
    x = ctx.inputs[0].data
    axis = _axis(ctx, ctx.scalar(1), x.ndim)
    num = ctx.scalar(2)
    if num != len(ctx.outputs):
        raise ctx.fail(f"num_splits {num} does not match the {len(ctx.outputs)} outputs")
    if num <= 0 or x.shape[axis] % num:
        raise ctx.fail(f"num_splits {num} does not evenly divide dimension {axis} of size {x.shape[axis]}")
    return [np.ascontiguousarray(p) for p in np.split(x, num, axis=axis)]


# --------------------------------------------------------------------------
# SLICE


def _exec_slice(ctx: ExecContext) -> list[np.ndarray]:
    x = ctx.inputs[0].data
    rank = x.ndim
    if rank == 0:
        raise ctx.fail("input must have rank >= 1")
    begin = _int_values(ctx, 1, "begin")
    size = _int_values(ctx, 2, "size")
    if len(begin) != rank or len(size) != rank:
        raise ctx.fail(f"begin and size must have {rank} entries")
    index = []
    for d in range(rank):
        b, s, dim = int(begin[d]), int(size[d]), x.shape[d]
        if s == -1:
            s = dim - b
        # NOTE: the reference compares begin with the (unsigned) dimension, so a negative begin fails
        if b < 0 or b > dim or s < 0 or b + s > dim:
            raise ctx.fail(f"slice begin {b} size {int(size[d])} out of range for dimension {d} of size {dim}")
        index.append(slice(b, b + s))
    return [np.ascontiguousarray(x[tuple(index)])]


# --------------------------------------------------------------------------
# STRIDED_SLICE


def _clamped_index(index: int, dim: int, positive_stride: bool) -> int:
    """The reference's ClampedIndex."""
    if positive_stride:
        return dim if index >= dim else min(max(index, -dim), dim) % dim if dim else 0
    return -1 if index < -dim else min(max(index, -dim), dim - 1) % dim if dim else -1


def _exec_strided_slice(ctx: ExecContext) -> list[np.ndarray]:
    x = ctx.inputs[0].data
    rank = x.ndim
    if rank > 4:
        raise ctx.fail(f"input rank {rank} > 4")
    begin = _int_values(ctx, 1, "begin")
    end = _int_values(ctx, 2, "end")
    strides = _int_values(ctx, 3, "strides")
    if not len(begin) == len(end) == len(strides) == rank:
        raise ctx.fail(f"begin, end and strides must have {rank} entries")
    begin_mask, end_mask, shrink_mask = ctx.scalar(4), ctx.scalar(5), ctx.scalar(6)
    index, out_dims = [], []
    for d in range(rank):
        dim, stride = x.shape[d], int(strides[d])
        if stride == 0:
            raise ctx.fail(f"stride {d} is zero")
        pos = stride > 0
        b = (0 if pos else dim - 1) if begin_mask & (1 << d) else _clamped_index(int(begin[d]), dim, pos)
        e = (dim if pos else -1) if end_mask & (1 << d) else _clamped_index(int(end[d]), dim, pos)
        n = max(-((b - e) // stride), 0)  # ceil((e - b) / stride)
        if shrink_mask & (1 << d):
            # NOTE: only a positive stride and a slice of size 1 may shrink an axis
            if stride <= 0 or n != 1:
                raise ctx.fail(f"shrinking axis {d} needs a positive stride and a slice of size 1")
        else:
            out_dims.append(n)
        index.append(b + stride * np.arange(n, dtype=np.int64))
    out = x[np.ix_(*index)] if rank else x
    return [out.reshape(out_dims or [1])]


# --------------------------------------------------------------------------
# GATHER


def _exec_gather(ctx: ExecContext) -> list[np.ndarray]:
    x = ctx.inputs[0].data
    axis = _axis(ctx, ctx.scalar(1), x.ndim)
    indices = ctx.inputs[2].data.astype(np.int64)
    if np.any((indices < 0) | (indices >= x.shape[axis])):
        raise ctx.fail(f"indices out of range [0, {x.shape[axis]})")
    return [np.take(x, indices, axis=axis)]


# --------------------------------------------------------------------------
# TILE


def _exec_tile(ctx: ExecContext) -> list[np.ndarray]:
    x = ctx.inputs[0].data
    multiples = _int_values(ctx, 1, "multiples")
    if len(multiples) != x.ndim:
        raise ctx.fail(f"multiples has {len(multiples)} entries for an input of rank {x.ndim}")
    if np.any(multiples < 0):
        raise ctx.fail(f"negative multiples {multiples.tolist()}")
    return [np.tile(x, multiples.tolist())]


# --------------------------------------------------------------------------
# FILL, RANK


def _exec_fill(ctx: ExecContext) -> list[np.ndarray]:
    dims = _int_values(ctx, 0, "dims")
    if np.any(dims < 0):
        raise ctx.fail(f"negative dimensions {dims.tolist()}")
    return [np.full(dims.tolist(), ctx.inputs[1].data, dtype=ctx.outputs[0].dtype)]


def _exec_rank(ctx: ExecContext) -> list[np.ndarray]:
    return [np.array(ctx.inputs[0].data.ndim, dtype=np.int32)]


_RANK_TYPES = (F16, F32, I32, Q8, T.TENSOR_QUANT16_SYMM, T.TENSOR_BOOL8, T.TENSOR_QUANT8_SYMM_PER_CHANNEL,
               T.TENSOR_QUANT16_ASYMM, T.TENSOR_QUANT8_SYMM, Q8S)


# --------------------------------------------------------------------------
# PAD, PAD_V2


def _validate_pad(info: OpInfo) -> None:
    _check_rank_le4(info, 0)
    # NOTE: a quant8 PAD with a nonzero zero point (pad value = logical zero) needs HAL 1.2
    if info.type == OperationType.PAD and info.inputs[0].type == Q8 and info.inputs[0].zero_point != 0 \
            and info.version < V1_2:
        raise info.fail("quant8 input with a nonzero zeroPoint needs HAL 1.2")


def _pad_amounts(p: np.ndarray) -> tuple:
    """((before, after) per dimension) of a paddings operand; ValueError where the reference fails."""
    if p.ndim != 2 or p.shape[1] != 2:
        raise ValueError(f"paddings must have shape [rank, 2], got {list(p.shape)}")
    if np.any(p < 0):
        raise ValueError("paddings must be >= 0")
    return tuple((int(a), int(b)) for a, b in p.astype(np.int64).tolist())


def _pad_value(t: OperandType, zero_point: int, dtype: np.dtype, v: object) -> np.ndarray:
    """PAD (``v`` None): the reference pads quantized tensors with the zero
    point it gives the output, which it copies from the input (the spec
    requires them equal).  PAD_V2: the reference reads the INT32 pad value's
    low byte as the element type."""
    if v is None:
        v = zero_point if t in (Q8, Q8S) else 0
    elif t in (Q8, Q8S):
        b = int(v) & 0xFF
        v = b - 256 if t == Q8S and b >= 128 else b
    return np.array(v).astype(dtype)


def _prepare_pad(info: OpInfo) -> object:
    """Paddings and pad value, when constants: (amounts, value) or why every execution fails."""
    x = info.inputs[0]
    v = None
    if info.type == OperationType.PAD_V2:
        v = info.constant(2)
        if v is None:
            return None
        v = v.item()
    p = info.constant(1)
    if p is None:
        return None
    return prepared(lambda: (_pad_amounts(p), _pad_value(x.type, x.zero_point, NUMPY_DTYPE[x.type], v)))


def _exec_pad(ctx: ExecContext) -> list[np.ndarray]:
    xt = ctx.inputs[0]
    x = xt.data
    st = ctx.state
    if st is None:
        v = ctx.scalar(2) if ctx.type == OperationType.PAD_V2 else None
        st = prepared(lambda: (_pad_amounts(ctx.inputs[1].data), _pad_value(xt.type, xt.zero_point, x.dtype, v)))
    amounts, value = st.value(ctx)
    if len(amounts) != x.ndim:
        raise ctx.fail(f"paddings must have shape [{x.ndim}, 2], got [{len(amounts)}, 2]")
    out = np.full(tuple(d + a + b for d, (a, b) in zip(x.shape, amounts)), value, x.dtype)
    out[tuple(slice(a, a + d) for d, (a, _) in zip(x.shape, amounts))] = x
    return [out]


# --------------------------------------------------------------------------

OPS: list[OpDef] = [
    OpDef(OperationType.RESHAPE, _sigs(_FQ_V1_0, lambda t: (I32,)), _exec_reshape, validate=_validate_rank_le4,
          prepare=_prepare_reshape, bad_data_on_missing_operand=True),
    OpDef(OperationType.SQUEEZE, _sigs(_FQ_V1_1, lambda t: (I32,)), _exec_squeeze, validate=_validate_rank_le4,
          omittable_inputs=frozenset({1})),
    OpDef(OperationType.EXPAND_DIMS, _sigs(_FIQ_V1_2, lambda t: (T.INT32,)), _exec_expand_dims, bad_data_on_missing_operand=True),
    OpDef(OperationType.TRANSPOSE, _sigs(_FQ_V1_1, lambda t: (I32,)), _exec_transpose, validate=_validate_rank_le4,
          omittable_inputs=frozenset({1}), allow_zero_sized=True),
    # NOTE: n >= 1 tensors then the INT32 axis; the signature admits the types,
    # _validate_concatenation their order
    OpDef(OperationType.CONCATENATION,
          [Signature((t,), (t,), v, variadic_inputs=frozenset({t, T.INT32}), min_variadic_inputs=1)
           for t, v in _FQ_V1_0],
          _exec_concatenation, validate=_validate_concatenation, prepare=_prepare_concatenation,
          allow_zero_sized=True),
    OpDef(OperationType.SPLIT,
          [Signature((t, T.INT32, T.INT32), (t,), v, variadic_outputs=t) for t, v in _FIQ_V1_2], _exec_split, bad_data_on_missing_operand=True),
    OpDef(OperationType.SLICE, _sigs(_FIQ_V1_2, lambda t: (I32, I32)), _exec_slice, allow_zero_sized=True),
    OpDef(OperationType.STRIDED_SLICE, _sigs(_FQ_V1_1, lambda t: (I32, I32, I32, T.INT32, T.INT32, T.INT32)),
          _exec_strided_slice, validate=_validate_rank_le4),
    OpDef(OperationType.GATHER, _sigs(_FIQ_V1_2, lambda t: (T.INT32, I32)), _exec_gather),
    OpDef(OperationType.TILE, _sigs(_FIQ_V1_2, lambda t: (I32,)), _exec_tile, bad_data_on_missing_operand=True),
    OpDef(OperationType.FILL,
          [Signature((I32, s), (t,), V1_3) for t, s in ((F16, T.FLOAT16), (F32, T.FLOAT32), (I32, T.INT32))],
          _exec_fill),
    OpDef(OperationType.RANK, [Signature((frozenset(_RANK_TYPES),), (T.INT32,), V1_3)], _exec_rank),
    OpDef(OperationType.PAD, _sigs(_FQ_V1_1, lambda t: (I32,)), _exec_pad, validate=_validate_pad, prepare=_prepare_pad,
          bad_data_on_missing_operand=True),
    OpDef(OperationType.PAD_V2,
          _sigs(((F32, V1_2), (F16, V1_2), (Q8, V1_2), (Q8S, V1_3)),
                lambda t: (I32, {F32: T.FLOAT32, F16: T.FLOAT16}.get(t, T.INT32))),
          _exec_pad, validate=_validate_rank_le4, prepare=_prepare_pad, bad_data_on_missing_operand=True),
]
