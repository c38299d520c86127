"""Spatial rearrangements of the HAL 1.3 spec: RESIZE_BILINEAR,
RESIZE_NEAREST_NEIGHBOR, SPACE_TO_DEPTH, DEPTH_TO_SPACE, SPACE_TO_BATCH_ND,
BATCH_TO_SPACE_ND and CHANNEL_SHUFFLE.

All image operations work on NHWC; the HAL 1.2 layout flag (NCHW) is handled
by transposing in and out.  Resizing follows the reference: output size
from INT32 sizes or float scales, the HAL 1.3 align_corners /
half_pixel_centers flags, bilinear weights computed in float32 in TFLite's
order and quantized results truncated like its ``static_cast``.
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
)
from nnhal.ops.prepared import Ready, prepared
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


def _block_size(ctx: ExecContext) -> int:
    bs = int(ctx.scalar(1))
    if bs <= 0:
        raise ctx.fail(f"block size {bs} must be positive")
    return bs


def _execute_space_to_depth(ctx: ExecContext) -> list[np.ndarray]:
    nchw = bool(ctx.scalar(2, False))
    x = _to_nhwc(ctx, ctx.inputs[0].data, nchw)
    bs = _block_size(ctx)
    b, h, w, c = x.shape
    if h % bs or w % bs:
        raise ctx.fail(f"height {h} and width {w} must be multiples of the block size {bs}")
    res = x.reshape(b, h // bs, bs, w // bs, bs, c).transpose(0, 1, 3, 2, 4, 5)
    return [_from_nhwc(res.reshape(b, h // bs, w // bs, bs * bs * c), nchw)]


def _execute_depth_to_space(ctx: ExecContext) -> list[np.ndarray]:
    nchw = bool(ctx.scalar(2, False))
    x = _to_nhwc(ctx, ctx.inputs[0].data, nchw)
    bs = _block_size(ctx)
    b, h, w, c = x.shape
    if c % (bs * bs):
        raise ctx.fail(f"depth {c} must be a multiple of block size squared {bs * bs}")
    oc = c // (bs * bs)
    res = x.reshape(b, h, w, bs, bs, oc).transpose(0, 1, 3, 2, 4, 5)
    return [_from_nhwc(res.reshape(b, h * bs, w * bs, oc), nchw)]


def _block_signatures(versions: dict, extra: tuple) -> list[Signature]:
    sigs = []
    for t, v in versions.items():
        sigs.append(Signature((t,) + extra, (t,), v))
        sigs.append(Signature((t,) + extra + (T.BOOL,), (t,), max(v, V1_2)))
    return sigs


# --------------------------------------------------------------------------
# SPACE_TO_BATCH_ND / BATCH_TO_SPACE_ND


def _block_shape(ctx: ExecContext) -> tuple[int, int]:
    block = ctx.inputs[1].data
    if block.shape != (2,):
        raise ctx.fail(f"block shape must be a 1-D tensor of 2 values, got shape {list(block.shape)}")
    bh, bw = int(block[0]), int(block[1])
    if bh < 1 or bw < 1:
        raise ctx.fail(f"block shape {[bh, bw]} must be >= 1")
    return bh, bw


def _execute_space_to_batch(ctx: ExecContext) -> list[np.ndarray]:
    inp = ctx.inputs[0]
    nchw = bool(ctx.scalar(3, False))
    x = _to_nhwc(ctx, inp.data, nchw)
    bh, bw = _block_shape(ctx)
    pads = ctx.inputs[2].data
    if pads.shape != (2, 2):
        raise ctx.fail(f"paddings must be a 2x2 tensor, got shape {list(pads.shape)}")
    if np.any(pads < 0):
        raise ctx.fail("paddings must be non-negative")
    (pt, pb), (pl, pr) = pads.tolist()
    b, h, w, c = x.shape
    ph, pw = h + pt + pb, w + pl + pr
    if ph % bh or pw % bw:
        raise ctx.fail(f"padded size {ph}x{pw} must be a multiple of the block shape {[bh, bw]}")
    # NOTE: quantized tensors pad with the zero point (the real value 0)
    fill = inp.zero_point if inp.type in QUANT_RANGE else 0
    padded = np.pad(x, ((0, 0), (pt, pb), (pl, pr), (0, 0)), constant_values=fill)
    res = padded.reshape(b, ph // bh, bh, pw // bw, bw, c).transpose(2, 4, 0, 1, 3, 5)
    return [_from_nhwc(res.reshape(b * bh * bw, ph // bh, pw // bw, c), nchw)]


def _execute_batch_to_space(ctx: ExecContext) -> list[np.ndarray]:
    nchw = bool(ctx.scalar(2, False))
    x = _to_nhwc(ctx, ctx.inputs[0].data, nchw)
    bh, bw = _block_shape(ctx)
    b, h, w, c = x.shape
    if b % (bh * bw):
        raise ctx.fail(f"batch {b} must be a multiple of the block size {bh * bw}")
    ob = b // (bh * bw)
    res = x.reshape(bh, bw, ob, h, w, c).transpose(2, 3, 0, 4, 1, 5)
    return [_from_nhwc(res.reshape(ob, h * bh, w * bw, c), nchw)]


def _space_to_batch_validate(info: OpInfo) -> None:
    inp = info.inputs[0]
    if inp.type == Q8 and inp.zero_point != 0 and info.version < V1_2:
        raise info.fail("a quantized input with a non-zero zeroPoint needs HAL 1.2")


# --------------------------------------------------------------------------
# CHANNEL_SHUFFLE


def _execute_channel_shuffle(ctx: ExecContext) -> list[np.ndarray]:
    x = ctx.inputs[0].data
    groups = int(ctx.scalar(1))
    axis = int(ctx.scalar(2))
    if not -x.ndim <= axis < x.ndim:
        raise ctx.fail(f"axis {axis} out of range for rank {x.ndim}")
    axis %= x.ndim
    n = x.shape[axis]
    if groups <= 0 or n % groups:
        raise ctx.fail(f"{groups} groups must be positive and divide the axis size {n}")
    _check_same_quant(ctx)
    shape = x.shape[:axis] + (groups, n // groups) + x.shape[axis + 1:]
    res = np.swapaxes(x.reshape(shape), axis, axis + 1).reshape(x.shape)
    return [np.ascontiguousarray(res)]


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
          execute=_execute_space_to_depth, bad_data_on_missing_operand=True),
    OpDef(type=OperationType.DEPTH_TO_SPACE, signatures=_block_signatures(_BLOCK_VERSIONS_1_0, (T.INT32,)),
          execute=_execute_depth_to_space, bad_data_on_missing_operand=True),
    OpDef(type=OperationType.SPACE_TO_BATCH_ND,
          signatures=_block_signatures(_BLOCK_VERSIONS_1_1, (T.TENSOR_INT32, T.TENSOR_INT32)),
          execute=_execute_space_to_batch, validate=_space_to_batch_validate, bad_data_on_missing_operand=True),
    OpDef(type=OperationType.BATCH_TO_SPACE_ND, signatures=_block_signatures(_BLOCK_VERSIONS_1_1, (T.TENSOR_INT32,)),
          execute=_execute_batch_to_space, bad_data_on_missing_operand=True),
    OpDef(
        type=OperationType.CHANNEL_SHUFFLE,
        signatures=[Signature((t, T.INT32, T.INT32), (t,), V1_3 if t == Q8S else V1_2) for t in (F32, F16, Q8, Q8S)],
        execute=_execute_channel_shuffle,
        validate=_channel_shuffle_validate,
    ),
]
