"""Pooling: AVERAGE_POOL_2D, MAX_POOL_2D and L2_POOL_2D of the HAL 1.3 spec.

Both padding forms (explicit: 10 inputs; implicit SAME/VALID: 7 inputs),
the optional NCHW layout input of HAL 1.2 (11 / 8 inputs), zero-sized
batches, and the fused activation.  Windows are gathered with strided views;
positions that fall in the padding are excluded from every window (also from
the average's element count), as in the TFLite kernels the reference uses.
"""

from __future__ import annotations

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
    Signature,
    fused_activation,
)
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


def _params(ctx: ExecContext) -> PoolParams:
    n = len(ctx.inputs)
    x = ctx.inputs[0].data
    if x.ndim != 4:
        raise ctx.fail(f"input must be 4-D, got rank {x.ndim}")
    if n >= 10:
        vals = [int(ctx.scalar(i)) for i in range(1, 10)]
        nchw = bool(ctx.scalar(10, False))
        p = PoolParams(*vals, nchw=nchw)
    else:
        scheme, sw, sh, fw, fh, act = (int(ctx.scalar(i)) for i in range(1, 7))
        nchw = bool(ctx.scalar(7, False))
        h, w = (x.shape[2], x.shape[3]) if nchw else (x.shape[1], x.shape[2])
        # NOTE: the reference divides by the strides below only after checking them
        if sw <= 0 or sh <= 0:
            raise ctx.fail("strides must be positive")
        pl, pr = explicit_padding(w, sw, fw, scheme)
        pt, pb = explicit_padding(h, sh, fh, scheme)
        p = PoolParams(pl, pr, pt, pb, sw, sh, fw, fh, act, nchw)
    if min(p.pad_left, p.pad_right, p.pad_top, p.pad_bottom) < 0:
        raise ctx.fail("padding must be non-negative")
    if p.stride_w <= 0 or p.stride_h <= 0 or p.filter_w <= 0 or p.filter_h <= 0:
        raise ctx.fail("strides and filter sizes must be positive")
    if p.activation < 0 or p.activation > 3:
        raise ctx.fail(f"unsupported fused activation {p.activation}")
    # NOTE: a window lying wholly in the padding would have no element to pool
    if not (p.filter_w > p.pad_left and p.filter_w > p.pad_right and p.filter_h > p.pad_top
            and p.filter_h > p.pad_bottom):
        raise ctx.fail("padding must be smaller than the filter")
    return p


def _check_same_quant(ctx: ExecContext) -> None:
    """The reference gives the output the input's scale and zero point and
    refuses a model output declared otherwise."""
    inp, out = ctx.inputs[0], ctx.outputs[0]
    if inp.type in QUANT_RANGE and (out.scale != inp.scale or out.zero_point != inp.zero_point):
        raise ctx.fail("output scale and zero point must equal the input's")


def _pool(ctx: ExecContext, kind: str) -> list[np.ndarray]:
    p = _params(ctx)
    _check_same_quant(ctx)
    inp = ctx.inputs[0]
    x = inp.data
    if p.nchw:
        x = x.transpose(0, 2, 3, 1)
    b, h, w, c = x.shape
    if h == 0 or w == 0 or c == 0:
        raise ctx.fail("only the batch dimension may be zero")
    oh = out_size(h, p.filter_h, p.stride_h, p.pad_top, p.pad_bottom)
    ow = out_size(w, p.filter_w, p.stride_w, p.pad_left, p.pad_right)
    if oh < 0 or ow < 0:
        raise ctx.fail("filter larger than the padded input")
    out_dtype = ctx.outputs[0].dtype
    if b == 0 or oh == 0 or ow == 0:
        res = np.zeros((b, oh, ow, c), out_dtype)
        return [res.transpose(0, 3, 1, 2) if p.nchw else res]

    quantized = inp.type in QUANT_RANGE
    if quantized:
        vals = x.astype(np.int32)
        fill = np.iinfo(np.int32).min if kind == "max" else 0
    else:
        vals = x.astype(np.float32, copy=False)
        if kind == "l2":
            vals = vals * vals
        fill = -np.inf if kind == "max" else 0.0
    # NOTE: the last window ends inside the tail padding by construction of oh / ow
    pad = ((0, 0), (p.pad_top, p.pad_bottom), (p.pad_left, p.pad_right), (0, 0))
    no_pad = p.pad_top == p.pad_bottom == p.pad_left == p.pad_right == 0
    padded = vals if no_pad else np.pad(vals, pad, constant_values=fill)
    win = sliding_window_view(padded, (p.filter_h, p.filter_w), axis=(1, 2))
    win = win[:, : (oh - 1) * p.stride_h + 1 : p.stride_h, : (ow - 1) * p.stride_w + 1 : p.stride_w]

    if kind == "max":
        res = win.max(axis=(-2, -1))
    else:
        valid = np.ones((h, w), np.int32)
        if not no_pad:
            valid = np.pad(valid, pad[1:3])
        vwin = sliding_window_view(valid, (p.filter_h, p.filter_w))
        count = vwin[:: p.stride_h, :: p.stride_w][:oh, :ow].sum(axis=(-2, -1))[None, :, :, None]
        if quantized:
            # NOTE: TFLite averages the stored values (not q - zeroPoint) and
            # rounds half away from zero with integer division
            acc = win.sum(axis=(-2, -1), dtype=np.int64)
            res = np.sign(acc) * ((np.abs(acc) + count // 2) // count)
        else:
            res = win.sum(axis=(-2, -1), dtype=np.float32) / count.astype(np.float32)
            if kind == "l2":
                res = np.sqrt(res)

    if quantized:
        lo, hi = activation_range(p.activation, inp.scale, inp.zero_point, inp.type)
        res = np.clip(res, lo, hi)
    else:
        res = fused_activation(res.astype(np.float32), p.activation)
    res = res.astype(out_dtype)
    if p.nchw:
        res = res.transpose(0, 3, 1, 2)
    return [np.ascontiguousarray(res)]


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
          allow_zero_sized=True),
    OpDef(type=OperationType.MAX_POOL_2D, signatures=_signatures(_ALL_TYPES), execute=_execute_max,
          allow_zero_sized=True),
    OpDef(type=OperationType.L2_POOL_2D, signatures=_signatures(_FLOAT_TYPES), execute=_execute_l2,
          allow_zero_sized=True),
]
