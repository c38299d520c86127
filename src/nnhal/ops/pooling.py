"""Pooling: AVERAGE_POOL_2D, MAX_POOL_2D and L2_POOL_2D of the HAL 1.3 spec.

Both padding forms (explicit: 10 inputs; implicit SAME/VALID: 7 inputs),
the optional NCHW layout input of HAL 1.2 (11 / 8 inputs), zero-sized
batches, and the fused activation.  Windows are gathered with strided views;
positions that fall in the padding are excluded from every window (also from
the average's element count), as in the TFLite kernels the reference uses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from nnhal.hal import OperandType, OperationType
from nnhal.ops.base import (
    V1_0,
    V1_2,
    V1_3,
    ExecContext,
    OpDef,
    OpInfo,
    Signature,
    fused_activation,
)
from nnhal.ops.prepared import Ready, prepared
from nnhal.ops.quant import QUANT_RANGE, activation_range

T = OperandType

PADDING_SAME = 1
PADDING_VALID = 2


def explicit_padding(in_size: int, stride: int, filter_size: int, scheme: int, dilation: int = 1) -> tuple[int, int]:
    """Android ``calculateExplicitPadding``: (head, tail) padding of an implicit
    padding scheme (1 SAME, 2 VALID; any other value pads nothing)."""
    if scheme != PADDING_SAME:
        return 0, 0
    effective = (filter_size - 1) * dilation + 1
    out_size = (in_size + stride - 1) // stride
    total = (out_size - 1) * stride + effective - in_size
    if total <= 0:
        return 0, 0
    return total // 2, total - total // 2


def out_size(in_size: int, filter_size: int, stride: int, head: int, tail: int) -> int:
    """Android ``computeOutSize`` (C integer division, truncating toward zero)."""
    num = in_size - filter_size + stride + head + tail
    return abs(num) // stride * (1 if num >= 0 else -1)


@dataclass
class PoolParams:
    pad_left: int
    pad_right: int
    pad_top: int
    pad_bottom: int
    stride_w: int
    stride_h: int
    filter_w: int
    filter_h: int
    activation: int
    nchw: bool


def _params(n: int, s: list, shape: tuple) -> PoolParams:
    """The padding, strides, filter and activation from the scalar inputs
    ``s`` (s[i] is input i's value, None if omitted); ValueError where the
    reference fails."""
    if len(shape) != 4:
        raise ValueError(f"input must be 4-D, got rank {len(shape)}")
    if n >= 10:
        vals = [int(s[i]) for i in range(1, 10)]
        nchw = bool(s[10]) if n > 10 and s[10] is not None else False
        p = PoolParams(*vals, nchw=nchw)
    else:
        scheme, sw, sh, fw, fh, act = (int(s[i]) for i in range(1, 7))
        nchw = bool(s[7]) if n > 7 and s[7] is not None else False
        h, w = (shape[2], shape[3]) if nchw else (shape[1], shape[2])
        # NOTE: the reference divides by the strides below only after checking them
        if sw <= 0 or sh <= 0:
            raise ValueError("strides must be positive")
        pl, pr = explicit_padding(w, sw, fw, scheme)
        pt, pb = explicit_padding(h, sh, fh, scheme)
        p = PoolParams(pl, pr, pt, pb, sw, sh, fw, fh, act, nchw)
    if min(p.pad_left, p.pad_right, p.pad_top, p.pad_bottom) < 0:
        raise ValueError("padding must be non-negative")
    if p.stride_w <= 0 or p.stride_h <= 0 or p.filter_w <= 0 or p.filter_h <= 0:
        raise ValueError("strides and filter sizes must be positive")
    if p.activation < 0 or p.activation > 3:
        raise ValueError(f"unsupported fused activation {p.activation}")
    # NOTE: a window lying wholly in the padding would have no element to pool
    if not (p.filter_w > p.pad_left and p.filter_w > p.pad_right and p.filter_h > p.pad_top
            and p.filter_h > p.pad_bottom):
        raise ValueError("padding must be smaller than the filter")
    return p


@dataclass(frozen=True)
class _Plan:
    """Everything a pooling execution needs but the values: computed at
    prepare for the declared input shape (an input of another shape gets
    its own plan, per execution)."""

    shape: tuple
    p: PoolParams
    oh: int
    ow: int
    empty: bool
    pads: tuple  # (top, bottom, left, right)
    count: object  # average: window element counts [1, oh, ow, 1]
    lo: object
    hi: object


def _plan(kind: str, n: int, s: list, shape: tuple, inp: object, out: object) -> _Plan:
    p = _params(n, s, shape)
    # NOTE: the reference gives the output the input's scale and zero point and
    # refuses a model output declared otherwise
    if inp.type in QUANT_RANGE and (out.scale != inp.scale or out.zero_point != inp.zero_point):
        raise ValueError("output scale and zero point must equal the input's")
    b, h, w, c = (shape[0], shape[2], shape[3], shape[1]) if p.nchw else shape
    if h == 0 or w == 0 or c == 0:
        raise ValueError("only the batch dimension may be zero")
    oh = out_size(h, p.filter_h, p.stride_h, p.pad_top, p.pad_bottom)
    ow = out_size(w, p.filter_w, p.stride_w, p.pad_left, p.pad_right)
    if oh < 0 or ow < 0:
        raise ValueError("filter larger than the padded input")
    pads = (p.pad_top, p.pad_bottom, p.pad_left, p.pad_right)
    empty = b == 0 or oh == 0 or ow == 0
    count = lo = hi = None
    if not empty and kind != "max":
        valid = np.ones((h, w), np.int32)
        if any(pads):
            valid = np.pad(valid, ((pads[0], pads[1]), (pads[2], pads[3])))
        vwin = sliding_window_view(valid, (p.filter_h, p.filter_w))
        count = vwin[:: p.stride_h, :: p.stride_w][:oh, :ow].sum(axis=(-2, -1))[None, :, :, None]
        if inp.type not in QUANT_RANGE:
            count = count.astype(np.float32)
    if inp.type in QUANT_RANGE:
        lo, hi = activation_range(p.activation, inp.scale, inp.zero_point, inp.type)
    return _Plan(tuple(shape), p, oh, ow, empty, pads, count, lo, hi)


def _prepare_pool(info: OpInfo) -> object:
    """The plan for the declared input shape, when it and every parameter are known."""
    dims = info.inputs[0].dimensions
    if len(dims) != 4 or 0 in dims or any(i.value is None for i in info.inputs[1:]):
        return None
    vals = [None] + [i.value.item() for i in info.inputs[1:]]
    kind = {OperationType.MAX_POOL_2D: "max", OperationType.L2_POOL_2D: "l2"}.get(info.type, "average")
    return prepared(lambda: _plan(kind, len(info.inputs), vals, tuple(dims), info.inputs[0], info.outputs[0]))


def _pool(ctx: ExecContext, kind: str) -> list[np.ndarray]:
    inp = ctx.inputs[0]
    x = inp.data
    st = ctx.state
    if st is None or (st.__class__ is Ready and st.value(ctx).shape != x.shape):
        s = [None] + [ctx.scalar(i) for i in range(1, len(ctx.inputs))]
        st = prepared(lambda: _plan(kind, len(ctx.inputs), s, x.shape, inp, ctx.outputs[0]))
    plan = st.value(ctx)
    p, oh, ow = plan.p, plan.oh, plan.ow
    if p.nchw:
        x = x.transpose(0, 2, 3, 1)
    b, h, w, c = x.shape
    out_dtype = ctx.outputs[0].dtype
    if plan.empty:
        res = np.zeros((b, oh, ow, c), out_dtype)
        return [res.transpose(0, 3, 1, 2) if p.nchw else res]

    quantized = inp.type in QUANT_RANGE
    if quantized:
        # NOTE: max of the stored values as they are; sums in int64
        vals = x
        fill = np.iinfo(x.dtype).min if kind == "max" else 0
    else:
        vals = x.astype(np.float32, copy=False)
        if kind == "l2":
            vals = vals * vals
        fill = -np.inf if kind == "max" else 0.0
    pt, pb, pl, pr = plan.pads
    if quantized and oh == ow == 1 and p.filter_h == h and p.filter_w == w and not (pt or pb or pl or pr):
        # NOTE: one window over the whole input (a classifier's global pooling): reduced directly, without
        # the window view's Python (exact integer sums: the same values in any order)
        if kind == "max":
            res = x.max(axis=(1, 2), keepdims=True)
        else:
            acc = x.sum(axis=(1, 2), dtype=np.int64, keepdims=True)
            count = plan.count
            res = np.sign(acc) * ((np.abs(acc) + count // 2) // count)
        res = np.clip(res, plan.lo, plan.hi).astype(out_dtype)
        if p.nchw:
            res = res.transpose(0, 3, 1, 2)
        return [np.ascontiguousarray(res)]
    # NOTE: the last window ends inside the tail padding by construction of oh / ow
    if pt or pb or pl or pr:
        padded = np.full((b, h + pt + pb, w + pl + pr, c), fill, vals.dtype)
        padded[:, pt:pt + h, pl:pl + w, :] = vals
    else:
        padded = vals
    win = sliding_window_view(padded, (p.filter_h, p.filter_w), axis=(1, 2))
    win = win[:, : (oh - 1) * p.stride_h + 1 : p.stride_h, : (ow - 1) * p.stride_w + 1 : p.stride_w]

    if kind == "max":
        res = win.max(axis=(-2, -1))
    else:
        count = plan.count
        if quantized:
            # NOTE: TFLite averages the stored values (not q - zeroPoint) and
            # rounds half away from zero with integer division
            acc = win.sum(axis=(-2, -1), dtype=np.int64)
            res = np.sign(acc) * ((np.abs(acc) + count // 2) // count)
        else:
            res = window_sum_f32(win) / count
            if kind == "l2":
                res = np.sqrt(res)

    if quantized:
        res = np.clip(res, plan.lo, plan.hi)
    else:
        res = fused_activation(res.astype(np.float32), p.activation)
    res = res.astype(out_dtype)
    if p.nchw:
        res = res.transpose(0, 3, 1, 2)
    return [np.ascontiguousarray(res)]


# NOTE: from this many output positions (batch x rows x columns) up, one add per window position over every
# output costs less than numpy's reduction, whose inner loop runs over the channels only (timed: 112x112x32
# 2x2/2 271 -> 82 us, 3x3/1 1973 -> 438; 14x14x256 3x3 42 -> 38; a 7x7x1024 global pool, 1 position, stays
# numpy's: 4 vs 25 us)
_SUM_BY_POSITION_MIN = 128


def window_sum_f32(win: np.ndarray) -> np.ndarray:
    """``win.sum(axis=(-2, -1), dtype=np.float32)`` of a float32 window view (batch, rows, columns, channels,
    filter rows, filter columns), the same bits, faster for large windows over many outputs.

    numpy reduces such a view with the channels as its inner loop when their stride is the smallest and
    there are two or more (NHWC): each output value then receives its window's values one by one, filter
    rows outer and columns inner, added to 0.0 -- its loop of adds per value, which this runs as one array
    add per window position in the same order (avg_pool_float_2's 100 x 100 windows over 715 positions of
    3 channels: ~76 -> ~35 ms).  Any other layout (one channel: numpy sums each window row pairwise; NCHW)
    is numpy's own reduction."""
    st = [abs(v) for v in win.strides]
    if (win.ndim != 6 or win.shape[3] < 2 or not st[3] < st[5] <= st[4]
            or math.prod(win.shape[:3]) < _SUM_BY_POSITION_MIN or win.shape[4] * win.shape[5] < 2):
        return win.sum(axis=(-2, -1), dtype=np.float32)
    fh, fw = win.shape[-2:]
    acc = np.zeros(win.shape[:4], np.float32)
    add = np.add
    for i in range(fh):
        row = win[..., i, :]
        for j in range(fw):
            add(acc, row[..., j], out=acc)
    return acc


def _execute_average(ctx: ExecContext) -> list[np.ndarray]:
    return _pool(ctx, "average")


def _execute_max(ctx: ExecContext) -> list[np.ndarray]:
    return _pool(ctx, "max")


def _execute_l2(ctx: ExecContext) -> list[np.ndarray]:
    return _pool(ctx, "l2")


def _signatures(types: list[tuple[OperandType, object]]) -> list[Signature]:
    """Implicit (7 inputs) and explicit (10 inputs) padding forms, each with the
    HAL 1.2 layout flag as an extra trailing input."""
    sigs = []
    for t, version in types:
        implicit = (t,) + (T.INT32,) * 6
        explicit = (t,) + (T.INT32,) * 9
        for ins in (implicit, explicit):
            sigs.append(Signature(ins, (t,), version))
            sigs.append(Signature(ins + (T.BOOL,), (t,), max(version, V1_2)))
    return sigs


_ALL_TYPES = [
    (T.TENSOR_FLOAT32, V1_0),
    (T.TENSOR_QUANT8_ASYMM, V1_0),
    (T.TENSOR_FLOAT16, V1_2),
    (T.TENSOR_QUANT8_ASYMM_SIGNED, V1_3),
]
_FLOAT_TYPES = [(T.TENSOR_FLOAT32, V1_0), (T.TENSOR_FLOAT16, V1_2)]

OPS: list[OpDef] = [
    OpDef(type=OperationType.AVERAGE_POOL_2D, signatures=_signatures(_ALL_TYPES), execute=_execute_average,
          prepare=_prepare_pool, allow_zero_sized=True),
    OpDef(type=OperationType.MAX_POOL_2D, signatures=_signatures(_ALL_TYPES), execute=_execute_max,
          prepare=_prepare_pool, allow_zero_sized=True),
    OpDef(type=OperationType.L2_POOL_2D, signatures=_signatures(_FLOAT_TYPES), execute=_execute_l2,
          prepare=_prepare_pool, allow_zero_sized=True),
]
