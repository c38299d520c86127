"""Spatial rearrangements of the HAL 1.3 spec: RESIZE_BILINEAR,
RESIZE_NEAREST_NEIGHBOR, SPACE_TO_DEPTH, DEPTH_TO_SPACE, SPACE_TO_BATCH_ND,
BATCH_TO_SPACE_ND and CHANNEL_SHUFFLE.

All image operations work on NHWC; the HAL 1.2 layout flag (NCHW) is handled
by transposing in and out.  Resizing follows the reference: output size
from INT32 sizes or float scales, the HAL 1.3 align_corners /
half_pixel_centers flags, bilinear weights computed in float32 in TFLite's
order and quantized results truncated like its ``static_cast``.

The block rearrangements parse their constant block sizes, paddings, groups
and layout flag in ``prepare`` into a plan per input shape (a 6-D view, a
permutation and the output shape, the NCHW layout folded into the
permutation), so an execution is one transposed copy (SPACE_TO_BATCH_ND: into
a buffer of the pad value first).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nnhal.hal import OperandLifeTime, OperandType, OperationType
from nnhal.ops import memo
from nnhal.ops.base import (
    V1_0,
    V1_1,
    V1_2,
    V1_3,
    ExecContext,
    OpDef,
    OpInfo,
    Signature,
    Tensor,
)
from nnhal.ops.prepared import RUNTIME, PerShape, Ready, param, prepared, run_now, static_shape
from nnhal.ops.quant import QUANT_RANGE

T = OperandType

F32, F16, Q8, Q8S = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED


def _to_nhwc(ctx: ExecContext, x: np.ndarray, nchw: bool) -> np.ndarray:
    if x.ndim != 4:
        raise ctx.fail(f"input must be 4-D, got rank {x.ndim}")
    return x.transpose(0, 2, 3, 1) if nchw else x


def _from_nhwc(x: np.ndarray, nchw: bool) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2) if nchw else x)


def _check_same_quant(ctx: ExecContext) -> None:
    """The reference gives the output the input's scale and zero point and
    refuses a model output declared otherwise."""
    inp, out = ctx.inputs[0], ctx.outputs[0]
    if inp.type in QUANT_RANGE and (out.scale != inp.scale or out.zero_point != inp.zero_point):
        raise ctx.fail("output scale and zero point must equal the input's")


# --------------------------------------------------------------------------
# RESIZE_BILINEAR / RESIZE_NEAREST_NEIGHBOR


def _resize_scale(in_size: int, out_size: int, align_corners: bool) -> np.float32:
    if align_corners and out_size > 1:
        return np.float32(in_size - 1) / np.float32(out_size - 1)
    return np.float32(in_size) / np.float32(out_size)


def _bilinear_coords(out_size: int, in_size: int, scale: np.float32, half_pixel: bool):
    """TFLite ``ComputeInterpolationValues`` for every output index:
    (scaled position, lower index, upper index), in float32."""
    v = np.arange(out_size, dtype=np.float32)
    if half_pixel:
        pos = (v + np.float32(0.5)) * scale - np.float32(0.5)
    else:
        pos = v * scale
    lower = np.maximum(np.floor(pos).astype(np.int64), 0)
    upper = np.minimum(np.ceil(pos).astype(np.int64), in_size - 1)
    return pos, lower, upper


def _bilinear_table(h: int, w: int, oh: int, ow: int, align: bool, half: bool) -> tuple:
    """What a bilinear resize of an h x w image to oh x ow needs beside the
    pixels: the source rows / columns and the float32 weights, shaped to
    broadcast over NHWC (depends only on the sizes and flags)."""
    y, y0, y1 = _bilinear_coords(oh, h, _resize_scale(h, oh, align), half)
    xs, x0, x1 = _bilinear_coords(ow, w, _resize_scale(w, ow, align), half)
    one = np.float32(1)
    dy = (y - y0.astype(np.float32))[None, :, None, None]
    dx = (xs - x0.astype(np.float32))[None, None, :, None]
    return y0, y1, x0, x1, dy, one - dy, dx, one - dx


def _resize_bilinear(x: np.ndarray, table: tuple, quantized: bool, dtype: np.dtype) -> np.ndarray:
    y0, y1, x0, x1, dy, ndy, dx, ndx = table
    xf = x.astype(np.float32)
    rows0, rows1 = xf[:, y0], xf[:, y1]
    # NOTE: the same products and sum order as TFLite's reference kernel
    res = rows0[:, :, x0] * ndy * ndx
    res += rows1[:, :, x0] * dy * ndx
    res += rows0[:, :, x1] * ndy * dx
    res += rows1[:, :, x1] * dy * dx
    if quantized:
        # NOTE: static_cast<T>(float) truncates toward zero
        lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max
        np.trunc(res, out=res)
        np.clip(res, lo, hi, out=res)
    return res.astype(dtype)


def _nearest_index(out_size: int, in_size: int, scale: np.float32, align: bool, half: bool) -> np.ndarray:
    v = np.arange(out_size, dtype=np.float32)
    pos = (v + np.float32(0.5)) * scale if half else v * scale
    floor = np.floor(pos)
    # NOTE: roundf rounds half away from zero (positions are never negative);
    # pos - floor(pos) is exact, unlike pos + 0.5
    idx = floor + (pos - floor >= np.float32(0.5)) if align else floor
    idx = np.minimum(idx.astype(np.int64), in_size - 1)
    return np.maximum(idx, 0) if half else idx


def _nearest_table(h: int, w: int, oh: int, ow: int, align: bool, half: bool) -> tuple:
    return (_nearest_index(oh, h, _resize_scale(h, oh, align), align, half),
            _nearest_index(ow, w, _resize_scale(w, ow, align), align, half))


def _resize_params(is_int: bool, sw: Any, sh: Any, nchw: Any, align: Any, half: Any) -> tuple:
    """The parsed scalars: (nchw, align, half, sizes) where sizes is ("int",
    oh, ow) or ("scale", float32 h scale, float32 w scale).  Raises
    ValueError where the reference fails whatever the input."""
    nchw, align, half = bool(nchw), bool(align), bool(half)
    if align and half:
        raise ValueError("half_pixel_centers requires align_corners to be false")
    if is_int:
        return nchw, align, half, ("int", int(sh), int(sw))
    return nchw, align, half, ("scale", np.float32(sh), np.float32(sw))


class _ResizeState:
    """The parsed scalars (Ready / Failed, or None when one is not a constant)
    and the per-input-size tables, computed once per size (at prepare when the
    input's shape is known)."""

    __slots__ = ("params", "tables")

    def __init__(self, params: Any) -> None:
        self.params = params
        self.tables = memo.Memo(8)


def _scalar_or_default(info: OpInfo, i: int, default: Any) -> Any:
    """A scalar input's constant value, its default when absent / omitted, or
    None when it is given at run time."""
    if i >= len(info.inputs) or info.inputs[i].lifetime == OperandLifeTime.NO_VALUE:
        return default
    v = info.inputs[i].value
    return None if v is None else v.item()


def _prepare_resize(info: OpInfo, bilinear: bool) -> _ResizeState:
    is_int = info.inputs[2].type == T.INT32
    args = [_scalar_or_default(info, 1, None), _scalar_or_default(info, 2, None),
            _scalar_or_default(info, 3, False), _scalar_or_default(info, 4, False),
            _scalar_or_default(info, 5, False)]
    st = _ResizeState(prepared(_resize_params, is_int, *args))
    dims = info.inputs[0].dimensions
    if isinstance(st.params, Ready) and len(dims) == 4 and all(dims):
        nchw, align, half, sizes = st.params.value(None)
        h, w = (dims[2], dims[3]) if nchw else (dims[1], dims[2])
        try:
            size = _out_size(sizes, h, w)
        except (ValueError, OverflowError):  # NOTE: an infinite / NaN scale: every execution fails on it
            return st
        if size[0] > 0 and size[1] > 0:
            fn = _bilinear_table if bilinear else _nearest_table
            st.tables.put((h, w), fn(h, w, size[0], size[1], align, half))
    return st


def _out_size(sizes: tuple, h: int, w: int) -> tuple[int, int]:
    if sizes[0] == "int":
        return sizes[1], sizes[2]
    # NOTE: new size = floor(size * scale) in single precision
    return int(np.floor(np.float32(h) * sizes[1])), int(np.floor(np.float32(w) * sizes[2]))


def _resize(ctx: ExecContext, bilinear: bool) -> list[np.ndarray]:
    inp, out = ctx.inputs[0], ctx.outputs[0]
    st = ctx.state
    params = st.params if isinstance(st, _ResizeState) else None
    if params is None:
        params = prepared(_resize_params, ctx.inputs[2].type == T.INT32, ctx.scalar(1), ctx.scalar(2),
                          ctx.scalar(3, False), ctx.scalar(4, False), ctx.scalar(5, False))
        if params is None:
            raise ctx.fail("the output size is missing")
    nchw, align, half, sizes = params.value(ctx)
    x = _to_nhwc(ctx, inp.data, nchw)
    b, h, w, c = x.shape
    if h == 0 or w == 0 or c == 0:
        raise ctx.fail("only the batch dimension may be zero")
    try:
        oh, ow = _out_size(sizes, h, w)
    except (ValueError, OverflowError):
        raise ctx.fail(f"scales {sizes[1]}, {sizes[2]} give no finite output size") from None
    if oh <= 0 or ow <= 0:
        raise ctx.fail(f"output size {oh}x{ow} must be positive")
    _check_same_quant(ctx)
    if b == 0:
        return [_from_nhwc(np.zeros((0, oh, ow, c), out.dtype), nchw)]
    fn = _bilinear_table if bilinear else _nearest_table
    if isinstance(st, _ResizeState) and st.params is not None:
        table = st.tables.get_or_compute((h, w), lambda: fn(h, w, oh, ow, align, half))
    else:
        table = fn(h, w, oh, ow, align, half)
    if bilinear:
        res = _resize_bilinear(x, table, inp.type in QUANT_RANGE, out.dtype)
    else:
        yi, xi = table
        res = x[:, yi][:, :, xi]
    return [_from_nhwc(res, nchw)]


def _execute_bilinear(ctx: ExecContext) -> list[np.ndarray]:
    return _resize(ctx, True)


def _execute_nearest(ctx: ExecContext) -> list[np.ndarray]:
    return _resize(ctx, False)


def _resize_signatures(bilinear: bool) -> list[Signature]:
    """(tensor type, size/scale scalar type, first HAL version) with the layout
    flag (HAL 1.2) and align_corners / half_pixel_centers (HAL 1.3)."""
    combos = [
        (F32, T.INT32, V1_0), (F32, T.FLOAT32, V1_2),
        (F16, T.INT32, V1_2), (F16, T.FLOAT16, V1_2),
        (Q8, T.INT32, V1_2), (Q8, T.FLOAT32, V1_2),
        (Q8S, T.INT32, V1_3), (Q8S, T.FLOAT32, V1_3),
    ]
    sigs = []
    for t, s, v in combos:
        base = (t, s, s)
        if bilinear:
            sigs.append(Signature(base, (t,), v))
        sigs.append(Signature(base + (T.BOOL,), (t,), max(v, V1_2)))
        sigs.append(Signature(base + (T.BOOL,), (t,), V1_3, optional=(T.BOOL, T.BOOL)))
    return sigs


# --------------------------------------------------------------------------
# SPACE_TO_DEPTH / DEPTH_TO_SPACE
#
# Each is one copy: the input viewed with the block split out of its axes,
# transposed and reshaped, in the model's own layout (NHWC or NCHW: the
# NCHW permutation folds the layout change in, no transpose in and out).


def _any_runtime(*values: Any) -> bool:
    return any(v is RUNTIME for v in values)


def _nchw_flag(v: Any) -> bool:
    return bool(v) if v is not None else False


def _check_rank4(shape: tuple) -> None:
    if len(shape) != 4:
        raise ValueError(f"input must be 4-D, got rank {len(shape)}")


def _block(bs: Any) -> int:
    bs = int(bs)
    if bs <= 0:
        raise ValueError(f"block size {bs} must be positive")
    return bs


def _space_to_depth_plan(shape: tuple, bs: Any, nchw: bool) -> tuple:
    """(6-D view, permutation, output shape) of SPACE_TO_DEPTH on ``shape``."""
    _check_rank4(shape)
    bs = _block(bs)
    b, h, w, c = (shape[0], shape[2], shape[3], shape[1]) if nchw else shape
    if h % bs or w % bs:
        raise ValueError(f"height {h} and width {w} must be multiples of the block size {bs}")
    oh, ow, oc = h // bs, w // bs, bs * bs * c
    if nchw:
        # NOTE: output channel (i * bs + j) * c + k is input channel k at block offset (i, j)
        return (b, c, oh, bs, ow, bs), (0, 3, 5, 1, 2, 4), (b, oc, oh, ow)
    return (b, oh, bs, ow, bs, c), (0, 1, 3, 2, 4, 5), (b, oh, ow, oc)


def _depth_to_space_plan(shape: tuple, bs: Any, nchw: bool) -> tuple:
    """(6-D view, permutation, output shape) of DEPTH_TO_SPACE on ``shape``."""
    _check_rank4(shape)
    bs = _block(bs)
    b, h, w, c = (shape[0], shape[2], shape[3], shape[1]) if nchw else shape
    if c % (bs * bs):
        raise ValueError(f"depth {c} must be a multiple of block size squared {bs * bs}")
    oc = c // (bs * bs)
    if nchw:
        return (b, bs, bs, oc, h, w), (0, 3, 4, 1, 5, 2), (b, oc, h * bs, w * bs)
    return (b, h, w, bs, bs, oc), (0, 1, 3, 2, 4, 5), (b, h * bs, w * bs, oc)


def _prepare_block(info: OpInfo, fn: Any) -> object:
    bs, nchw = param(info, 1), param(info, 2)
    if _any_runtime(bs, nchw) or bs is None:
        return None
    return PerShape(fn, bs.item(), _nchw_flag(None if nchw is None else nchw.item())).prime(static_shape(info))


def _rearrange(ctx: ExecContext, fn: Any) -> list[np.ndarray]:
    x = ctx.inputs[0].data
    st = ctx.state
    if st is not None:
        view, perm, out = st.plan(ctx, x.shape)
    else:
        view, perm, out = run_now(ctx, fn, x.shape, ctx.scalar(1), _nchw_flag(ctx.scalar(2)))
    return [np.ascontiguousarray(x.reshape(view).transpose(perm)).reshape(out)]


def _execute_space_to_depth(ctx: ExecContext) -> list[np.ndarray]:
    return _rearrange(ctx, _space_to_depth_plan)


def _execute_depth_to_space(ctx: ExecContext) -> list[np.ndarray]:
    return _rearrange(ctx, _depth_to_space_plan)


def _block_signatures(versions: dict, extra: tuple) -> list[Signature]:
    sigs = []
    for t, v in versions.items():
        sigs.append(Signature((t,) + extra, (t,), v))
        sigs.append(Signature((t,) + extra + (T.BOOL,), (t,), max(v, V1_2)))
    return sigs


# --------------------------------------------------------------------------
# SPACE_TO_BATCH_ND / BATCH_TO_SPACE_ND


def _block_shape(block: np.ndarray) -> tuple[int, int]:
    if block.shape != (2,):
        raise ValueError(f"block shape must be a 1-D tensor of 2 values, got shape {list(block.shape)}")
    bh, bw = int(block[0]), int(block[1])
    if bh < 1 or bw < 1:
        raise ValueError(f"block shape {[bh, bw]} must be >= 1")
    return bh, bw


def _space_to_batch_plan(shape: tuple, block: np.ndarray, pads: np.ndarray, nchw: bool) -> tuple:
    """(padded shape, where the input goes in it, 6-D view, permutation,
    output shape): pad into a buffer of the fill value, then one copy."""
    _check_rank4(shape)
    bh, bw = _block_shape(block)
    if pads.shape != (2, 2):
        raise ValueError(f"paddings must be a 2x2 tensor, got shape {list(pads.shape)}")
    if np.any(pads < 0):
        raise ValueError("paddings must be non-negative")
    (pt, pb), (pl, pr) = pads.tolist()
    b, h, w, c = (shape[0], shape[2], shape[3], shape[1]) if nchw else shape
    ph, pw = h + pt + pb, w + pl + pr
    if ph % bh or pw % bw:
        raise ValueError(f"padded size {ph}x{pw} must be a multiple of the block shape {[bh, bw]}")
    oh, ow, ob = ph // bh, pw // bw, b * bh * bw
    if nchw:
        # NOTE: output batch (i * bw + j) * b + n is input batch n at block offset (i, j)
        return ((b, c, ph, pw), (slice(None), slice(None), slice(pt, pt + h), slice(pl, pl + w)),
                (b, c, oh, bh, ow, bw), (3, 5, 0, 1, 2, 4), (ob, c, oh, ow))
    return ((b, ph, pw, c), (slice(None), slice(pt, pt + h), slice(pl, pl + w)),
            (b, oh, bh, ow, bw, c), (2, 4, 0, 1, 3, 5), (ob, oh, ow, c))


def _space_to_batch_fill(t: Tensor) -> Any:
    # NOTE: quantized tensors pad with the zero point (the real value 0)
    return t.zero_point if t.type in QUANT_RANGE else 0


def _prepare_space_to_batch(info: OpInfo) -> object:
    block, pads, nchw = param(info, 1), param(info, 2), param(info, 3)
    if _any_runtime(block, pads, nchw) or block is None or pads is None:
        return None
    return PerShape(_space_to_batch_plan, block, pads,
                    _nchw_flag(None if nchw is None else nchw.item())).prime(static_shape(info))


def _execute_space_to_batch(ctx: ExecContext) -> list[np.ndarray]:
    inp = ctx.inputs[0]
    x = inp.data
    st = ctx.state
    if st is not None:
        padded, inner, view, perm, out = st.plan(ctx, x.shape)
    else:
        padded, inner, view, perm, out = run_now(ctx, _space_to_batch_plan, x.shape, ctx.inputs[1].data,
                                                 ctx.inputs[2].data, _nchw_flag(ctx.scalar(3)))
    if padded != x.shape:
        buf = np.full(padded, _space_to_batch_fill(inp), x.dtype)
        buf[inner] = x
        x = buf
    return [np.ascontiguousarray(x.reshape(view).transpose(perm)).reshape(out)]


def _batch_to_space_plan(shape: tuple, block: np.ndarray, nchw: bool) -> tuple:
    """(6-D view, permutation, output shape) of BATCH_TO_SPACE_ND on ``shape``."""
    _check_rank4(shape)
    bh, bw = _block_shape(block)
    b, h, w, c = (shape[0], shape[2], shape[3], shape[1]) if nchw else shape
    if b % (bh * bw):
        raise ValueError(f"batch {b} must be a multiple of the block size {bh * bw}")
    ob = b // (bh * bw)
    if nchw:
        return (bh, bw, ob, c, h, w), (2, 3, 4, 0, 5, 1), (ob, c, h * bh, w * bw)
    return (bh, bw, ob, h, w, c), (2, 3, 0, 4, 1, 5), (ob, h * bh, w * bw, c)


def _prepare_batch_to_space(info: OpInfo) -> object:
    block, nchw = param(info, 1), param(info, 2)
    if _any_runtime(block, nchw) or block is None:
        return None
    return PerShape(_batch_to_space_plan, block, _nchw_flag(None if nchw is None else nchw.item())).prime(
        static_shape(info))


def _execute_batch_to_space(ctx: ExecContext) -> list[np.ndarray]:
    x = ctx.inputs[0].data
    st = ctx.state
    if st is not None:
        view, perm, out = st.plan(ctx, x.shape)
    else:
        view, perm, out = run_now(ctx, _batch_to_space_plan, x.shape, ctx.inputs[1].data, _nchw_flag(ctx.scalar(2)))
    return [np.ascontiguousarray(x.reshape(view).transpose(perm)).reshape(out)]


def _space_to_batch_validate(info: OpInfo) -> None:
    inp = info.inputs[0]
    if inp.type == Q8 and inp.zero_point != 0 and info.version < V1_2:
        raise info.fail("a quantized input with a non-zero zeroPoint needs HAL 1.2")


# --------------------------------------------------------------------------
# CHANNEL_SHUFFLE


def _channel_shuffle_plan(shape: tuple, groups: Any, axis: Any, same_quant: bool) -> tuple:
    """(view with the axis split into (groups, size / groups), permutation swapping the two)."""
    groups, axis = int(groups), int(axis)
    rank = len(shape)
    if not -rank <= axis < rank:
        raise ValueError(f"axis {axis} out of range for rank {rank}")
    axis %= rank
    n = shape[axis]
    if groups <= 0 or n % groups:
        raise ValueError(f"{groups} groups must be positive and divide the axis size {n}")
    if not same_quant:
        raise ValueError("output scale and zero point must equal the input's")
    view = shape[:axis] + (groups, n // groups) + shape[axis + 1:]
    perm = tuple(range(axis)) + (axis + 1, axis) + tuple(range(axis + 2, rank + 1))
    return view, perm


def _same_quant(inp: Any, out: Any) -> bool:
    """The reference gives the output the input's scale and zero point and
    refuses a model output declared otherwise."""
    return inp.type not in QUANT_RANGE or (out.scale == inp.scale and out.zero_point == inp.zero_point)


def _prepare_channel_shuffle(info: OpInfo) -> object:
    groups, axis = param(info, 1), param(info, 2)
    if _any_runtime(groups, axis) or groups is None or axis is None:
        return None
    return PerShape(_channel_shuffle_plan, groups.item(), axis.item(),
                    _same_quant(info.inputs[0], info.outputs[0])).prime(static_shape(info))


def _execute_channel_shuffle(ctx: ExecContext) -> list[np.ndarray]:
    x = ctx.inputs[0].data
    st = ctx.state
    if st is not None:
        view, perm = st.plan(ctx, x.shape)
    else:
        view, perm = run_now(ctx, _channel_shuffle_plan, x.shape, ctx.scalar(1), ctx.scalar(2),
                             _same_quant(ctx.inputs[0], ctx.outputs[0]))
    return [np.ascontiguousarray(x.reshape(view).transpose(perm)).reshape(x.shape)]


def _channel_shuffle_validate(info: OpInfo) -> None:
    if len(info.inputs[0].dimensions) > 4:
        raise info.fail(f"input rank {len(info.inputs[0].dimensions)} > 4")


# --------------------------------------------------------------------------

_BLOCK_VERSIONS_1_0 = {F32: V1_0, Q8: V1_0, F16: V1_2, Q8S: V1_3}
_BLOCK_VERSIONS_1_1 = {F32: V1_1, Q8: V1_1, F16: V1_2, Q8S: V1_3}

OPS: list[OpDef] = [
    OpDef(type=OperationType.RESIZE_BILINEAR, signatures=_resize_signatures(True), execute=_execute_bilinear,
          prepare=lambda info: _prepare_resize(info, True), allow_zero_sized=True),
    OpDef(type=OperationType.RESIZE_NEAREST_NEIGHBOR, signatures=_resize_signatures(False),
          execute=_execute_nearest, prepare=lambda info: _prepare_resize(info, False), allow_zero_sized=True),
    OpDef(type=OperationType.SPACE_TO_DEPTH, signatures=_block_signatures(_BLOCK_VERSIONS_1_0, (T.INT32,)),
          execute=_execute_space_to_depth, prepare=lambda info: _prepare_block(info, _space_to_depth_plan),
          bad_data_on_missing_operand=True),
    OpDef(type=OperationType.DEPTH_TO_SPACE, signatures=_block_signatures(_BLOCK_VERSIONS_1_0, (T.INT32,)),
          execute=_execute_depth_to_space, prepare=lambda info: _prepare_block(info, _depth_to_space_plan),
          bad_data_on_missing_operand=True),
    OpDef(type=OperationType.SPACE_TO_BATCH_ND,
          signatures=_block_signatures(_BLOCK_VERSIONS_1_1, (T.TENSOR_INT32, T.TENSOR_INT32)),
          execute=_execute_space_to_batch, validate=_space_to_batch_validate, prepare=_prepare_space_to_batch,
          bad_data_on_missing_operand=True),
    OpDef(type=OperationType.BATCH_TO_SPACE_ND, signatures=_block_signatures(_BLOCK_VERSIONS_1_1, (T.TENSOR_INT32,)),
          execute=_execute_batch_to_space, prepare=_prepare_batch_to_space,
          bad_data_on_missing_operand=True),
    OpDef(
        type=OperationType.CHANNEL_SHUFFLE,
        signatures=[Signature((t, T.INT32, T.INT32), (t,), V1_3 if t == Q8S else V1_2) for t in (F32, F16, Q8, Q8S)],
        execute=_execute_channel_shuffle,
        validate=_channel_shuffle_validate,
        prepare=_prepare_channel_shuffle,
    ),
]
