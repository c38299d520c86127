"""Tensor manipulation operations of the HAL 1.3 spec (``types.hal``
``OperationType``): RESHAPE, SQUEEZE, EXPAND_DIMS, TRANSPOSE, CONCATENATION,
SPLIT, SLICE, STRIDED_SLICE, GATHER, TILE, FILL, RANK, PAD and PAD_V2; and
those the AIDL HAL adds (``OperationType.aidl``): PACK and RESHAPE of
TENSOR_INT32 (AIDL version 2, feature level 6), MIRROR_PAD and REVERSE
(version 3, feature level 7), as Android 13's reference.

These ops move data without arithmetic, so one kernel serves every storage
type; only CONCATENATION requantizes (quantized inputs whose scale / zero
point differ from the output's, as the reference's float rescaling does) and
PAD / PAD_V2 pick the quantized pad value.  Validation mirrors Android 11's
reference (``Utils.cpp`` ``validateOperation`` for the ops that bypass the
operation resolver, the ``validate`` / ``prepare`` of the others); run-time
shape and value problems raise OpExecutionError.

Parameters given as constants (axes, permutations, begin / end / strides and
masks, split counts, multiples, dims, constant GATHER indices) are parsed in
``prepare`` into a plan per input shape (:class:`nnhal.ops.prepared.PerShape`:
index tuples, output shapes), so an execution is a reshape, a transposed copy,
slices or a take; a parameter given at run time goes through the same parser
in ``execute``.  RANK has nothing to prepare (its answer is ``ndim``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from nnhal.hal import HalVersion, OperandType, OperationType
from nnhal.ops.base import (
    AIDL_V2,
    AIDL_V3,
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
from nnhal.ops.prepared import (
    RUNTIME,
    PerShape,
    constants,
    frozen,
    param,
    planned,
    prepared,
    run_now,
    static_shape,
)

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


def _ints(data: np.ndarray, what: str) -> tuple[int, ...]:
    """A 1-D INT32 parameter tensor's values; ValueError if it is not 1-D."""
    if data.ndim != 1:
        raise ValueError(f"{what} must be a 1-D tensor, got shape {list(data.shape)}")
    v = data.tolist()
    return tuple(v) if data.dtype.kind in "iu" else tuple(int(e) for e in v)


def _norm_axis(axis: int, rank: int) -> int:
    """handleNegativeAxis: axis in [-rank, rank); ValueError otherwise."""
    if not -rank <= axis < rank:
        raise ValueError(f"axis {axis} out of range for rank {rank}")
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


def _squeeze_plan(shape: tuple, dims: np.ndarray | None) -> tuple:
    """The output shape of squeezing ``shape`` (``dims`` None: every 1)."""
    rank = len(shape)
    if rank > 4:
        raise ValueError(f"input rank {rank} > 4")
    if dims is None:
        squeeze = [d for d in range(rank) if shape[d] == 1]
    else:
        squeeze = []
        for a in _ints(dims, "squeeze dims"):
            cur = a + rank if a < 0 else a
            if not (0 <= cur < rank and shape[cur] == 1):
                raise ValueError(f"cannot squeeze dimension {a} of shape {list(shape)}")
            squeeze.append(cur)
    return tuple(s for d, s in enumerate(shape) if d not in squeeze) or (1,)


def _prepare_squeeze(info: OpInfo) -> object:
    dims = param(info, 1)
    if dims is RUNTIME:
        return None
    return PerShape(_squeeze_plan, dims).prime(static_shape(info))


def _exec_squeeze(ctx: ExecContext) -> list[np.ndarray]:
    x = ctx.inputs[0].data
    st = ctx.state
    if st is not None:
        return [x.reshape(st.plan(ctx, x.shape))]
    return [x.reshape(run_now(ctx, _squeeze_plan, x.shape, ctx.inputs[1].data if ctx.has(1) else None))]


# --------------------------------------------------------------------------
# EXPAND_DIMS


def _expand_dims_plan(shape: tuple, axis: int) -> tuple:
    """The output shape: ``shape`` with a 1 inserted at ``axis``."""
    a = _norm_axis(int(axis), len(shape) + 1)
    return shape[:a] + (1,) + shape[a:]


def _prepare_expand_dims(info: OpInfo) -> object:
    axis = param(info, 1)
    if axis is RUNTIME or axis is None:
        return None
    return PerShape(_expand_dims_plan, axis.item()).prime(static_shape(info))


def _exec_expand_dims(ctx: ExecContext) -> list[np.ndarray]:
    x = ctx.inputs[0].data
    st = ctx.state
    if st is not None:
        return [x.reshape(st.plan(ctx, x.shape))]
    return [x.reshape(run_now(ctx, _expand_dims_plan, x.shape, ctx.scalar(1)))]


# --------------------------------------------------------------------------
# TRANSPOSE


def _transpose_plan(rank: int, perm: np.ndarray | None) -> tuple:
    """The axis permutation for an input of ``rank`` (``perm`` None: the 2-D matrix transpose only)."""
    if perm is None:
        if rank != 2:
            raise ValueError(f"an omitted perm needs a 2-D input, got rank {rank}")
        return (1, 0)
    if rank > 4:
        raise ValueError(f"input rank {rank} > 4")
    p = _ints(perm, "perm")
    if len(p) != rank:
        raise ValueError(f"perm has {len(p)} entries for an input of rank {rank}")
    if any(a < 0 or a >= rank for a in p) or len(set(p)) != rank:
        raise ValueError(f"invalid permutation {list(p)}")
    return p


def _prepare_transpose(info: OpInfo) -> object:
    perm = param(info, 1)
    if perm is RUNTIME:
        return None
    return PerShape(_transpose_plan, perm).prime(info.inputs[0].rank or None)


def _exec_transpose(ctx: ExecContext) -> list[np.ndarray]:
    x = ctx.inputs[0].data
    st = ctx.state
    if st is not None:
        perm = st.plan(ctx, x.ndim)
    else:
        perm = run_now(ctx, _transpose_plan, x.ndim, ctx.inputs[1].data if ctx.has(1) else None)
    return [np.ascontiguousarray(x.transpose(perm))]


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


def _split_plan(shape: tuple, axis: int, num: int, n_out: int) -> tuple:
    """One index (a tuple of slices) per output."""
    a = _norm_axis(int(axis), len(shape))
    num = int(num)
    if num != n_out:
        raise ValueError(f"num_splits {num} does not match the {n_out} outputs")
    if num <= 0 or shape[a] % num:
        raise ValueError(f"num_splits {num} does not evenly divide dimension {a} of size {shape[a]}")
    step = shape[a] // num
    head = (slice(None),) * a
    return tuple(head + (slice(k * step, (k + 1) * step),) for k in range(num))


def _prepare_split(info: OpInfo) -> object:
    axis, num = param(info, 1), param(info, 2)
    if axis is RUNTIME or num is RUNTIME or axis is None or num is None:
        return None
    return PerShape(_split_plan, axis.item(), num.item(), len(info.outputs)).prime(static_shape(info))


def _exec_split(ctx: ExecContext) -> list[np.ndarray]:
    x = ctx.inputs[0].data
    st = ctx.state
    if st is not None:
        index = st.plan(ctx, x.shape)
    else:
        index = run_now(ctx, _split_plan, x.shape, ctx.scalar(1), ctx.scalar(2), len(ctx.outputs))
    return [np.ascontiguousarray(x[i]) for i in index]


# --------------------------------------------------------------------------
# SLICE


def _slice_plan(shape: tuple, begin: np.ndarray, size: np.ndarray) -> tuple:
    """The index (a tuple of slices) of the slice."""
    rank = len(shape)
    if rank == 0:
        raise ValueError("input must have rank >= 1")
    b_, s_ = _ints(begin, "begin"), _ints(size, "size")
    if len(b_) != rank or len(s_) != rank:
        raise ValueError(f"begin and size must have {rank} entries")
    index = []
    for d in range(rank):
        b, s, dim = b_[d], s_[d], shape[d]
        if s == -1:
            s = dim - b
        # NOTE: the reference compares begin with the (unsigned) dimension, so a negative begin fails
        if b < 0 or b > dim or s < 0 or b + s > dim:
            raise ValueError(f"slice begin {b} size {s_[d]} out of range for dimension {d} of size {dim}")
        index.append(slice(b, b + s))
    return tuple(index)


def _prepare_slice(info: OpInfo) -> object:
    begin, size = param(info, 1), param(info, 2)
    if begin is RUNTIME or size is RUNTIME or begin is None or size is None:
        return None
    return PerShape(_slice_plan, begin, size).prime(static_shape(info))


def _exec_slice(ctx: ExecContext) -> list[np.ndarray]:
    x = ctx.inputs[0].data
    st = ctx.state
    if st is not None:
        index = st.plan(ctx, x.shape)
    else:
        index = run_now(ctx, _slice_plan, x.shape, ctx.inputs[1].data, ctx.inputs[2].data)
    return [np.ascontiguousarray(x[index])]


# --------------------------------------------------------------------------
# STRIDED_SLICE


def _clamped_index(index: int, dim: int, positive_stride: bool) -> int:
    """The reference's ClampedIndex."""
    if positive_stride:
        return dim if index >= dim else min(max(index, -dim), dim) % dim if dim else 0
    return -1 if index < -dim else min(max(index, -dim), dim - 1) % dim if dim else -1


def _strided_slice_plan(shape: tuple, begin: np.ndarray, end: np.ndarray, strides: np.ndarray,
                        begin_mask: int, end_mask: int, shrink_mask: int) -> tuple:
    """(index: a tuple of slices, output shape)."""
    rank = len(shape)
    if rank > 4:
        raise ValueError(f"input rank {rank} > 4")
    begin_, end_, strides_ = _ints(begin, "begin"), _ints(end, "end"), _ints(strides, "strides")
    if not len(begin_) == len(end_) == len(strides_) == rank:
        raise ValueError(f"begin, end and strides must have {rank} entries")
    begin_mask, end_mask, shrink_mask = int(begin_mask), int(end_mask), int(shrink_mask)
    index, out_dims = [], []
    for d in range(rank):
        dim, stride = shape[d], strides_[d]
        if stride == 0:
            raise ValueError(f"stride {d} is zero")
        pos = stride > 0
        b = (0 if pos else dim - 1) if begin_mask & (1 << d) else _clamped_index(begin_[d], dim, pos)
        e = (dim if pos else -1) if end_mask & (1 << d) else _clamped_index(end_[d], dim, pos)
        n = max(-((b - e) // stride), 0)  # ceil((e - b) / stride)
        if shrink_mask & (1 << d):
            # NOTE: only a positive stride and a slice of size 1 may shrink an axis
            if stride <= 0 or n != 1:
                raise ValueError(f"shrinking axis {d} needs a positive stride and a slice of size 1")
        else:
            out_dims.append(n)
        if n == 0:
            index.append(slice(0, 0))
        else:
            # NOTE: elements b, b + stride, ... (n of them); a stop before index 0 is None
            stop = b + stride * n
            index.append(slice(b, stop if stop >= 0 else None, stride))
    return tuple(index) if index else ..., tuple(out_dims) or (1,)


def _prepare_strided_slice(info: OpInfo) -> object:
    args = [param(info, i) for i in range(1, 7)]
    if any(a is RUNTIME or a is None for a in args):
        return None
    return PerShape(_strided_slice_plan, *args[:3], *(a.item() for a in args[3:])).prime(static_shape(info))


def _exec_strided_slice(ctx: ExecContext) -> list[np.ndarray]:
    x = ctx.inputs[0].data
    st = ctx.state
    if st is not None:
        index, out = st.plan(ctx, x.shape)
    else:
        index, out = run_now(ctx, _strided_slice_plan, x.shape, ctx.inputs[1].data, ctx.inputs[2].data,
                             ctx.inputs[3].data, ctx.scalar(4), ctx.scalar(5), ctx.scalar(6))
    return [np.ascontiguousarray(x[index]).reshape(out)]


# --------------------------------------------------------------------------
# GATHER


def _gather_plan(shape: tuple, axis: int, indices: np.ndarray | None) -> tuple:
    """(axis, size of the axis, the constant indices checked, or None)."""
    a = _norm_axis(int(axis), len(shape))
    dim = shape[a]
    if indices is not None:
        if _out_of_range(indices, dim):
            raise ValueError(f"indices out of range [0, {dim})")
        indices = frozen(indices.astype(np.intp))
    return a, dim, indices


def _out_of_range(indices: np.ndarray, dim: int) -> bool:
    if indices.dtype == np.int32:
        # NOTE: seen as uint32, a negative index is >= 2**31, beyond any dimension: one comparison
        return bool((indices.view(np.uint32) >= dim).any())
    return bool(((indices < 0) | (indices >= dim)).any())


def _prepare_gather(info: OpInfo) -> object:
    axis, indices = param(info, 1), param(info, 2)
    if axis is RUNTIME or axis is None:
        return None
    if indices is RUNTIME:
        indices = None
    elif indices is None:
        return None
    return PerShape(_gather_plan, axis.item(), indices).prime(static_shape(info))


def _exec_gather(ctx: ExecContext) -> list[np.ndarray]:
    x = ctx.inputs[0].data
    st = ctx.state
    if st is not None:
        axis, dim, indices = st.plan(ctx, x.shape)
    else:
        axis, dim, indices = run_now(ctx, _gather_plan, x.shape, ctx.scalar(1), None)
    if indices is None:
        indices = ctx.inputs[2].data
        if indices.dtype == np.int32:
            # NOTE: one call: seen as uint32 a negative index is out of bounds too, and take raises on it
            try:
                return [np.take(x, indices.view(np.uint32), axis=axis)]
            except IndexError:
                raise ctx.fail(f"indices out of range [0, {dim})") from None
        if _out_of_range(indices, dim):
            raise ctx.fail(f"indices out of range [0, {dim})")
    return [np.take(x, indices, axis=axis)]


# --------------------------------------------------------------------------
# TILE


def _tile_plan(shape: tuple, multiples: np.ndarray) -> tuple:
    """(input viewed with a 1 before each axis, that shape with the
    multiples in place of the 1s, output shape): a tile is one broadcast copy."""
    m = _ints(multiples, "multiples")
    if len(m) != len(shape):
        raise ValueError(f"multiples has {len(m)} entries for an input of rank {len(shape)}")
    if any(k < 0 for k in m):
        raise ValueError(f"negative multiples {list(m)}")
    src = tuple(v for d in shape for v in (1, d))
    wide = tuple(v for k, d in zip(m, shape) for v in (k, d))
    return src, wide, tuple(k * d for k, d in zip(m, shape))


def _prepare_tile(info: OpInfo) -> object:
    multiples = param(info, 1)
    if multiples is RUNTIME or multiples is None:
        return None
    return PerShape(_tile_plan, multiples).prime(static_shape(info))


def _exec_tile(ctx: ExecContext) -> list[np.ndarray]:
    x = ctx.inputs[0].data
    st = ctx.state
    if st is not None:
        src, wide, out = st.plan(ctx, x.shape)
    else:
        src, wide, out = run_now(ctx, _tile_plan, x.shape, ctx.inputs[1].data)
    res = np.empty(wide, x.dtype)
    res[...] = x.reshape(src)
    return [res.reshape(out)]


# --------------------------------------------------------------------------
# FILL, RANK


def _fill_shape(dims: np.ndarray) -> tuple:
    shape = _ints(dims, "dims")
    if any(d < 0 for d in shape):
        raise ValueError(f"negative dimensions {list(shape)}")
    return shape


def _prepare_fill(info: OpInfo) -> object:
    return prepared(_fill_shape, info.constant(0))


def _exec_fill(ctx: ExecContext) -> list[np.ndarray]:
    st = ctx.state
    shape = st.value(ctx) if st is not None else run_now(ctx, _fill_shape, ctx.inputs[0].data)
    return [np.full(shape, ctx.inputs[1].data, dtype=ctx.outputs[0].dtype)]


# NOTE: RANK has nothing to prepare: its answer is the input's ndim, one attribute read
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
# The AIDL HAL's tensor operations (Android 13's Pack.cpp, MirrorPad.cpp, Reverse.cpp): the model
# checks of common/types/operations/src (types, ranks where known, one quantization), the rest in the
# reference's prepare, which runs at execution (a violation fails it: GENERAL_FAILURE)

_AIDL_TYPES = (F16, F32, Q8, Q8S, I32)


def _check_same_quant(info: OpInfo, positions: Sequence[int]) -> None:
    """Quantized inputs at ``positions`` have the output's scale and zero point (compared as the
    reference's float and int32 are)."""
    out = info.outputs[0]
    if out.type not in (Q8, Q8S):
        return
    for i in positions:
        x = info.inputs[i]
        if np.float32(x.scale) != np.float32(out.scale) or x.zero_point != out.zero_point:
            raise info.fail(f"input {i} is quantized with scale {x.scale}, zeroPoint {x.zero_point}; the output "
                            f"with scale {out.scale}, zeroPoint {out.zero_point}")


def _validate_pack(info: OpInfo) -> None:
    _check_same_quant(info, range(1, len(info.inputs)))
    # NOTE: as the reference: the inputs' known ranks agree, and are one less than the output's when
    # that is known and above 1 (a rank-1 output leaves it open)
    rank = info.outputs[0].rank - 1 if info.outputs[0].rank else 0
    for i, x in enumerate(info.inputs[1:], 1):
        if x.rank and rank and x.rank != rank:
            raise info.fail(f"input {i} has rank {x.rank}, expected {rank}")
        rank = rank or x.rank


def _pack_plan(shapes: tuple, axis: int) -> int:
    """The axis, checked against the tensors' shapes (all the same, of rank >= 1)."""
    first = shapes[0]
    if not first:
        raise ValueError("the input tensors must have rank >= 1")
    for i, s in enumerate(shapes[1:], 1):
        if s != first:
            raise ValueError(f"input tensor {i} has shape {list(s)}, tensor 0 {list(first)}")
    if not 0 <= axis <= len(first):
        raise ValueError(f"axis {axis} out of range [0, {len(first) + 1})")
    return axis


def _prepare_pack(info: OpInfo) -> object:
    axis = constants(info, 0)
    shapes = [static_shape(info, i) for i in range(1, len(info.inputs))]
    return axis and PerShape(_pack_plan, int(axis[0])).prime(None if None in shapes else tuple(shapes))


def _exec_pack(ctx: ExecContext) -> list[np.ndarray]:
    tensors = [t.data for t in ctx.inputs[1:]]
    return [np.stack(tensors, planned(ctx, tuple(t.shape for t in tensors), _pack_plan, ctx.scalar(0)))]


_REFLECT, _SYMMETRIC = 0, 1


def _validate_mirror_pad(info: OpInfo) -> None:
    x, p, out = info.inputs[0], info.inputs[1], info.outputs[0]
    if p.rank and (p.rank != 2 or p.dimensions[1] not in (0, 2)):
        raise info.fail(f"paddings must have shape [rank, 2], got {list(p.dimensions)}")
    _check_same_quant(info, (0,))
    if x.rank and p.rank and p.dimensions[0] and p.dimensions[0] != x.rank:
        raise info.fail(f"paddings of shape {list(p.dimensions)} for an input of rank {x.rank}")
    if x.rank and out.rank and out.rank != x.rank:
        raise info.fail(f"output rank {out.rank} differs from the input's {x.rank}")


def _mirror_index(size: int, before: int, after: int, mode: int) -> np.ndarray:
    """The input index of each output position along one axis: mirrored about the first and last
    element (REFLECT) or about the edges (SYMMETRIC)."""
    i = np.arange(-before, size + after)
    edge = 1 if mode == _SYMMETRIC else 0
    i = np.where(i < 0, -i - edge, i)
    return np.where(i >= size, 2 * size - 2 + edge - i, i)


def _mirror_pad_plan(shape: tuple, paddings: np.ndarray, mode: int) -> tuple:
    """The output as an open-mesh index of the input (np.ix_); ValueError where the reference's prepare fails."""
    if not shape:
        raise ValueError("the input must have rank >= 1")
    if mode not in (_REFLECT, _SYMMETRIC):
        raise ValueError(f"mode {mode}: 0 (REFLECT) or 1 (SYMMETRIC)")
    amounts = _pad_amounts(paddings)
    if len(amounts) != len(shape):
        raise ValueError(f"paddings must have shape [{len(shape)}, 2], got {list(paddings.shape)}")
    for d, (size, (a, b)) in enumerate(zip(shape, amounts)):
        limit = size - (mode == _REFLECT)
        if a > limit or b > limit:
            raise ValueError(f"padding ({a}, {b}) of dimension {d} (size {size}) exceeds {limit} "
                             f"({'REFLECT' if mode == _REFLECT else 'SYMMETRIC'})")
    return np.ix_(*(frozen(_mirror_index(size, a, b, mode)) for size, (a, b) in zip(shape, amounts)))


def _prepare_mirror_pad(info: OpInfo) -> object:
    params = constants(info, 1, 2)
    return params and PerShape(_mirror_pad_plan, params[0], int(params[1])).prime(static_shape(info))


def _exec_mirror_pad(ctx: ExecContext) -> list[np.ndarray]:
    x = ctx.inputs[0].data
    return [x[planned(ctx, x.shape, _mirror_pad_plan, ctx.inputs[1].data, ctx.scalar(2))]]


def _validate_reverse(info: OpInfo) -> None:
    x, a, out = info.inputs[0], info.inputs[1], info.outputs[0]
    if a.rank and (a.rank != 1 or a.dimensions[0] not in (0, 1)):
        raise info.fail(f"the axis must be a tensor of shape [1], got {list(a.dimensions)}")
    _check_same_quant(info, (0,))
    if x.rank and out.rank and out.rank != x.rank:
        raise info.fail(f"output rank {out.rank} differs from the input's {x.rank}")


def _reverse_plan(rank: int, axis: np.ndarray) -> int:
    if not 1 <= rank <= 8:
        raise ValueError(f"input rank {rank}, supported 1 to 8")
    if axis.shape != (1,):
        raise ValueError(f"the axis must be a tensor of shape [1], got {list(axis.shape)}")
    a = int(axis[0])
    if not 0 <= a < rank:
        raise ValueError(f"axis {a} out of range [0, {rank})")
    return a


def _prepare_reverse(info: OpInfo) -> object:
    axis = constants(info, 1)
    return axis and PerShape(_reverse_plan, *axis).prime(info.inputs[0].rank or None)


def _exec_reverse(ctx: ExecContext) -> list[np.ndarray]:
    x = ctx.inputs[0].data
    return [np.ascontiguousarray(np.flip(x, planned(ctx, x.ndim, _reverse_plan, ctx.inputs[1].data)))]


# --------------------------------------------------------------------------

OPS: list[OpDef] = [
    OpDef(OperationType.RESHAPE, _sigs(_FQ_V1_0 + ((I32, AIDL_V2),), lambda t: (I32,)), _exec_reshape,
          validate=_validate_rank_le4,
          prepare=_prepare_reshape, bad_data_on_missing_operand=True),
    OpDef(OperationType.SQUEEZE, _sigs(_FQ_V1_1, lambda t: (I32,)), _exec_squeeze, validate=_validate_rank_le4,
          prepare=_prepare_squeeze, omittable_inputs=frozenset({1})),
    OpDef(OperationType.EXPAND_DIMS, _sigs(_FIQ_V1_2, lambda t: (T.INT32,)), _exec_expand_dims,
          prepare=_prepare_expand_dims, bad_data_on_missing_operand=True),
    OpDef(OperationType.TRANSPOSE, _sigs(_FQ_V1_1, lambda t: (I32,)), _exec_transpose, validate=_validate_rank_le4,
          prepare=_prepare_transpose, omittable_inputs=frozenset({1}), allow_zero_sized=True),
    # NOTE: n >= 1 tensors then the INT32 axis; the signature admits the types,
    # _validate_concatenation their order
    OpDef(OperationType.CONCATENATION,
          [Signature((t,), (t,), v, variadic_inputs=frozenset({t, T.INT32}), min_variadic_inputs=1)
           for t, v in _FQ_V1_0],
          _exec_concatenation, validate=_validate_concatenation, prepare=_prepare_concatenation,
          allow_zero_sized=True),
    OpDef(OperationType.SPLIT,
          [Signature((t, T.INT32, T.INT32), (t,), v, variadic_outputs=t) for t, v in _FIQ_V1_2], _exec_split,
          prepare=_prepare_split, bad_data_on_missing_operand=True),
    OpDef(OperationType.SLICE, _sigs(_FIQ_V1_2, lambda t: (I32, I32)), _exec_slice, prepare=_prepare_slice,
          allow_zero_sized=True),
    OpDef(OperationType.STRIDED_SLICE, _sigs(_FQ_V1_1, lambda t: (I32, I32, I32, T.INT32, T.INT32, T.INT32)),
          _exec_strided_slice, validate=_validate_rank_le4, prepare=_prepare_strided_slice),
    OpDef(OperationType.GATHER, _sigs(_FIQ_V1_2, lambda t: (T.INT32, I32)), _exec_gather, prepare=_prepare_gather),
    OpDef(OperationType.TILE, _sigs(_FIQ_V1_2, lambda t: (I32,)), _exec_tile, prepare=_prepare_tile,
          bad_data_on_missing_operand=True),
    OpDef(OperationType.FILL,
          [Signature((I32, s), (t,), V1_3) for t, s in ((F16, T.FLOAT16), (F32, T.FLOAT32), (I32, T.INT32))],
          _exec_fill, prepare=_prepare_fill),
    OpDef(OperationType.RANK, [Signature((frozenset(_RANK_TYPES),), (T.INT32,), V1_3)], _exec_rank),
    OpDef(OperationType.PAD, _sigs(_FQ_V1_1, lambda t: (I32,)), _exec_pad, validate=_validate_pad, prepare=_prepare_pad,
          bad_data_on_missing_operand=True),
    OpDef(OperationType.PAD_V2,
          _sigs(((F32, V1_2), (F16, V1_2), (Q8, V1_2), (Q8S, V1_3)),
                lambda t: (I32, {F32: T.FLOAT32, F16: T.FLOAT16}.get(t, T.INT32))),
          _exec_pad, validate=_validate_rank_le4, prepare=_prepare_pad, bad_data_on_missing_operand=True),
    # NOTE: the axis, then one or more tensors
    OpDef(OperationType.PACK,
          [Signature((T.INT32,), (t,), AIDL_V2, variadic_inputs=t, min_variadic_inputs=1) for t in _AIDL_TYPES],
          _exec_pack, validate=_validate_pack, prepare=_prepare_pack),
    OpDef(OperationType.MIRROR_PAD, [Signature((t, I32, T.INT32), (t,), AIDL_V3) for t in _AIDL_TYPES],
          _exec_mirror_pad, validate=_validate_mirror_pad, prepare=_prepare_mirror_pad),
    OpDef(OperationType.REVERSE, [Signature((t, I32), (t,), AIDL_V3) for t in _AIDL_TYPES],
          _exec_reverse, validate=_validate_reverse, prepare=_prepare_reverse),
]
