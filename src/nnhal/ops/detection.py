"""Detection operations of the NNAPI HAL (``OperationType`` in HAL 1.2/1.3
``types.hal``): ROI_ALIGN, ROI_POOLING, AXIS_ALIGNED_BBOX_TRANSFORM,
BOX_WITH_NMS_LIMIT, GENERATE_PROPOSALS, DETECTION_POSTPROCESSING and
HEATMAP_MAX_KEYPOINT.

Signatures follow the reference ``validate`` functions (which accept more
than the spec text in places, e.g. FLOAT16 scale scalars for
DETECTION_POSTPROCESSING); the shape and value rules the reference checks in
``prepare`` are run-time checks here (GENERAL_FAILURE).  Quantized boxes are
TENSOR_QUANT16_ASYMM in units of 1/8.  Every type is computed on real float32
values (converted at the edges exactly as the reference converts them),
except quantized ROI_ALIGN, which accumulates in integers as the reference
does.  Outputs whose size depends on the data (BOX_WITH_NMS_LIMIT,
GENERATE_PROPOSALS) are returned at their computed size.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from nnhal.hal import OperandType, OperationType
from nnhal.ops import detection_kernels as K
from nnhal.ops import memo
from nnhal.ops.base import (
    NUMPY_DTYPE,
    V1_2,
    V1_3,
    ExecContext,
    OpDef,
    OpInfo,
    OutputSpec,
    Signature,
    Tensor,
)
from nnhal.ops.fixedpoint import round_half_away
from nnhal.ops.prepared import frozen
from nnhal.ops.quant import QUANT_RANGE, multiply_by_quantized_multiplier, quantize_multiplier

T = OperandType
F32 = np.float32

TF32, TF16, TI32 = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32
Q8, Q8S, Q16A, Q16S = T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_QUANT16_ASYMM, T.TENSOR_QUANT16_SYMM
I32, F32S, F16S, BOOL = T.INT32, T.FLOAT32, T.FLOAT16, T.BOOL


# --------------------------------------------------------------------------
# edges: real values in, storage values out


def _real(t: Tensor) -> np.ndarray:
    """Real float32 values, as the reference's convertQuantToFloat32 /
    convertFloat16ToFloat32."""
    if t.type in (Q8, Q8S, Q16A, Q16S):
        return ((t.data.astype(F32) - F32(t.zero_point)) * F32(t.scale)).astype(F32)
    return t.data.astype(F32)


def _store(values: np.ndarray, type_: OperandType, scale: float = 0.0, zero_point: int = 0) -> np.ndarray:
    """Real values -> storage dtype (convertFloat32ToQuant: round(v / scale + zp))."""
    if type_ in QUANT_RANGE:
        lo, hi = QUANT_RANGE[type_]
        v = (np.asarray(values, F32) / F32(scale) + F32(zero_point)).astype(F32)
        r = round_half_away(v)
        return np.clip(r, lo, hi).astype(NUMPY_DTYPE[type_])
    return np.asarray(values).astype(np.float16 if type_ == TF16 else F32)


def _run(ctx: ExecContext, fn: Callable[..., Any], *args: Any) -> Any:
    """Calls a kernel; malformed data it reports becomes a run-time failure."""
    try:
        return fn(*args)
    except K.KernelError as e:
        raise ctx.fail(str(e)) from None


def _check(ctx: ExecContext, cond: bool, msg: str) -> None:
    if not cond:
        raise ctx.fail(msg)


def _check_box_quant(ctx: ExecContext, t: Tensor, what: str) -> None:
    """Quantized boxes are in units of 1/8 (scale 0.125, zero point 0)."""
    if t.type == Q16A:
        _check(ctx, t.scale == 0.125, f"{what} must have scale 0.125, got {t.scale}")
        _check(ctx, t.zero_point == 0, f"{what} must have zeroPoint 0, got {t.zero_point}")


def _empty(spec: OutputSpec, shape: tuple) -> np.ndarray:
    return np.zeros(shape, spec.dtype)


# --------------------------------------------------------------------------
# the Prepare/Eval split: scalars parsed once, constant tensors converted once


class _State:
    """A detection operation's prepared state: its scalars parsed by the
    operation's parser (None when one is not a constant: the execution parses
    them with the same function), the real values of its constant tensor
    inputs by position (read-only, shared by executions), and what the
    operation derives from them (``extra``; memos are thread-safe).  Every
    check stays in the execution, in the reference's order: a bad constant
    parameter fails each execution where it did."""

    __slots__ = ("params", "real", "extra")

    def __init__(self, params: tuple | None, real: dict[int, np.ndarray], extra: Any = None) -> None:
        self.params = params
        self.real = real
        self.extra = extra


def _prepare_state(info: OpInfo, scalars: tuple, parse: Callable[..., tuple], reals: tuple) -> _State:
    """The parsed ``scalars`` (if all are constants) and the real values of the
    constant tensor inputs among ``reals``."""
    vals = [info.constant(i) for i in scalars]
    params = None
    if all(v is not None and v.size == 1 for v in vals):  # NOTE: else the execution parses (and fails) as before
        params = parse(*(v.item() for v in vals))
    real = {}
    for i in reals:
        t = info.inputs[i]
        if t.value is not None:
            real[i] = frozen(_real(Tensor(t.type, t.value, t.scale, t.zero_point)))
    return _State(params, real)


def _params(ctx: ExecContext, scalars: tuple, parse: Callable[..., tuple]) -> tuple:
    """The parsed scalars: prepared, else parsed from this execution's values."""
    st = ctx.state
    if st is not None and st.params is not None:
        return st.params
    return parse(*[ctx.scalar(i) for i in scalars])


def _real_in(ctx: ExecContext, i: int) -> np.ndarray:
    """Input i's real values: prepared for a constant, else converted now."""
    st = ctx.state
    if st is not None:
        a = st.real.get(i)
        if a is not None:
            return a
    return _real(ctx.inputs[i])


# --------------------------------------------------------------------------
# ROI_ALIGN / ROI_POOLING


def _roi_common(ctx: ExecContext, p: tuple):
    x, rois, bidx = ctx.inputs[0], ctx.inputs[1], ctx.inputs[2]
    nchw = p[-1]
    _check(ctx, x.data.ndim == 4, f"input must be 4-D, got {list(x.shape)}")
    _check(ctx, rois.data.ndim == 2, f"ROIs must be 2-D, got {list(rois.shape)}")
    _check(ctx, bidx.data.ndim >= 1, "batch split must be 1-D")
    xd = np.transpose(x.data, (0, 2, 3, 1)) if nchw else x.data
    num_rois = rois.shape[0]
    _check(ctx, rois.shape[1] == 4, f"ROIs must be [num_rois, 4], got {list(rois.shape)}")
    _check(ctx, bidx.shape[0] == num_rois, "batch split size must equal the number of ROIs")
    out_h, out_w, h_stride, w_stride = p[:4]
    _check(ctx, out_h > 0 and out_w > 0, "output height and width must be positive")
    _check(ctx, h_stride > 0 and w_stride > 0, "height and width ratios must be positive")
    return xd, nchw, out_h, out_w, h_stride, w_stride


def _roi_output(arr_nhwc: np.ndarray, nchw: bool) -> np.ndarray:
    return np.ascontiguousarray(np.transpose(arr_nhwc, (0, 3, 1, 2))) if nchw else arr_nhwc


def _requant(acc: np.ndarray, real: float) -> np.ndarray:
    if not 0.0 <= real < 1.0:
        raise K.KernelError(f"output multiplier {real} must be in [0, 1)")
    q, shift = quantize_multiplier(real)
    return multiply_by_quantized_multiplier(acc, q, shift)


def _requant_memo(mults: memo.Memo) -> Callable[[np.ndarray, float], np.ndarray]:
    """:func:`_requant` with the quantized multipliers remembered per real multiplier
    (they depend on the scales and the sampling ratios: constants, or few values)."""

    def requant(acc: np.ndarray, real: float) -> np.ndarray:
        if not 0.0 <= real < 1.0:
            raise K.KernelError(f"output multiplier {real} must be in [0, 1)")
        q, shift = mults.get_or_compute(real, lambda: quantize_multiplier(real))
        return multiply_by_quantized_multiplier(acc, q, shift)

    return requant


_ROI_ALIGN_SCALARS = (3, 4, 5, 6, 7, 8, 9)
_ROI_POOL_SCALARS = (3, 4, 5, 6, 7)


def _parse_roi_align(out_h: int, out_w: int, h_stride: float, w_stride: float, h_ratio: int, w_ratio: int,
                     layout: bool) -> tuple:
    return int(out_h), int(out_w), float(h_stride), float(w_stride), int(h_ratio), int(w_ratio), bool(layout)


def _parse_roi_pool(out_h: int, out_w: int, h_stride: float, w_stride: float, layout: bool) -> tuple:
    return int(out_h), int(out_w), float(h_stride), float(w_stride), bool(layout)


def _prepare_roi_align(info: OpInfo) -> _State:
    quantized = info.inputs[0].type in (Q8, Q8S)
    st = _prepare_state(info, _ROI_ALIGN_SCALARS, _parse_roi_align, () if quantized else (1,))
    if quantized:
        st.extra = _requant_memo(memo.Memo(16))
    return st


def _prepare_roi_pool(info: OpInfo) -> _State:
    return _prepare_state(info, _ROI_POOL_SCALARS, _parse_roi_pool, (1,))


def execute_roi_align(ctx: ExecContext) -> list[np.ndarray]:
    p = _params(ctx, _ROI_ALIGN_SCALARS, _parse_roi_align)
    xd, nchw, out_h, out_w, h_stride, w_stride = _roi_common(ctx, p)
    x, rois, bidx = ctx.inputs[0], ctx.inputs[1], ctx.inputs[2]
    n_b, in_h, in_w, depth = xd.shape
    _check(ctx, min(n_b, in_h, in_w, depth) > 0, "every input dimension must be positive")
    h_ratio, w_ratio = p[4], p[5]
    _check(ctx, h_ratio >= 0 and w_ratio >= 0, "sampling ratios must be non-negative")
    _check_box_quant(ctx, rois, "ROIs")
    out = ctx.outputs[0]
    num_rois = rois.shape[0]
    if num_rois == 0:
        return [_roi_output(_empty(out, (0, out_h, out_w, depth)), nchw)]
    if x.type in (Q8, Q8S):
        lo, hi = QUANT_RANGE[x.type]
        requant = ctx.state.extra if ctx.state is not None and ctx.state.extra is not None else _requant
        res = _run(ctx, K.roi_align_quant, xd, x.zero_point, rois.data, bidx.data, out_h, out_w, h_stride,
                   w_stride, h_ratio, w_ratio, x.scale, out.scale, out.zero_point, lo, hi, requant)
        res = res.astype(out.dtype)
    else:
        res = _run(ctx, K.roi_align_float, xd, _real_in(ctx, 1), bidx.data, out_h, out_w, h_stride, w_stride,
                   h_ratio, w_ratio).astype(out.dtype)
    return [_roi_output(res, nchw)]


def execute_roi_pooling(ctx: ExecContext) -> list[np.ndarray]:
    xd, nchw, out_h, out_w, h_stride, w_stride = _roi_common(ctx, _params(ctx, _ROI_POOL_SCALARS, _parse_roi_pool))
    x, rois, bidx = ctx.inputs[0], ctx.inputs[1], ctx.inputs[2]
    _check_box_quant(ctx, rois, "ROIs")
    # NOTE: an empty bin holds the input's zero point (0 for floats), as the reference
    empty = x.zero_point if x.type in (Q8, Q8S) else 0
    res = _run(ctx, K.roi_pool, xd, _real_in(ctx, 1), bidx.data, out_h, out_w, h_stride, w_stride, empty)
    return [_roi_output(res.astype(ctx.outputs[0].dtype), nchw)]


# --------------------------------------------------------------------------
# AXIS_ALIGNED_BBOX_TRANSFORM


def execute_bbox_transform(ctx: ExecContext) -> list[np.ndarray]:
    rois, deltas, batches, info = ctx.inputs[:4]
    _check(ctx, rois.data.ndim == 2 and deltas.data.ndim == 2 and batches.data.ndim == 1
           and info.data.ndim == 2, "ROIs, deltas and image info must be 2-D, batches 1-D")
    num_rois = rois.shape[0]
    num_classes = deltas.shape[1] // 4
    _check(ctx, num_classes > 0, "deltas must hold at least one class")
    _check(ctx, info.shape[0] > 0, "image info must hold at least one batch")
    _check(ctx, rois.shape[1] == 4, "ROIs must be [num_rois, 4]")
    _check(ctx, deltas.shape[0] == num_rois and deltas.shape[1] == 4 * num_classes,
           "deltas must be [num_rois, num_classes * 4]")
    _check(ctx, batches.shape[0] == num_rois, "batches must be [num_rois]")
    _check(ctx, info.shape[1] == 2, "image info must be [batches, 2]")
    _check_box_quant(ctx, rois, "ROIs")
    _check_box_quant(ctx, info, "image info")
    out = ctx.outputs[0]
    if num_rois == 0:
        return [_empty(out, (0, num_classes * 4))]
    res = _run(ctx, K.bbox_transform, _real_in(ctx, 0), _real_in(ctx, 1), batches.data, _real_in(ctx, 3))
    # NOTE: the reference fixes a quantized output's scale at 0.125 and its zero point at 0
    return [_store(res, out.type, 0.125, 0)]


def _prepare_bbox_transform(info: OpInfo) -> _State:
    # NOTE: no scalars; the ROIs, deltas and image info are usually data, the image info of a
    # fixed-size model a constant
    return _prepare_state(info, (), tuple, (0, 1, 3))


# --------------------------------------------------------------------------
# BOX_WITH_NMS_LIMIT


def execute_box_with_nms_limit(ctx: ExecContext) -> list[np.ndarray]:
    scores, rois, batches = ctx.inputs[:3]
    _check(ctx, scores.data.ndim == 2 and rois.data.ndim == 2 and batches.data.ndim == 1,
           "scores and ROIs must be 2-D, batches 1-D")
    num_rois, num_classes = scores.shape
    _check(ctx, rois.shape[0] == num_rois and rois.shape[1] == 4 * num_classes,
           "ROIs must be [num_rois, num_classes * 4]")
    _check(ctx, batches.shape[0] == num_rois, "batches must be [num_rois]")
    _check(ctx, num_classes > 1, "there must be more than one class")
    if scores.type in (Q8, Q8S):
        _check_box_quant(ctx, rois, "ROIs")
    score_thr, max_det, kernel, iou_thr, nms_thr = _params(ctx, _NMS_SCALARS, _parse_nms)
    o_sc, o_roi, o_cls, o_b = ctx.outputs
    if num_rois == 0:
        return [_empty(o_sc, (0,)), _empty(o_roi, (0, 4)), _empty(o_cls, (0,)), _empty(o_b, (0,))]
    if isinstance(kernel, str):
        raise ctx.fail(kernel)
    sc_all = _real_in(ctx, 0)
    roi_all = _real_in(ctx, 1)
    bdata = batches.data.astype(np.int64)
    # NOTE: boxes of one batch are consecutive; a batch is a run of equal indices
    starts = np.flatnonzero(np.concatenate([[True], bdata[1:] != bdata[:-1]]))
    ends = np.append(starts[1:], num_rois)
    out_scores, out_rois, out_cls, out_b = [], [], [], []
    raw_boxes = rois.data.reshape(num_rois * num_classes, 4)
    for s, e in zip(starts, ends, strict=True):
        n_b = e - s
        block = roi_all[s:e].reshape(-1, 4)
        # NOTE: the reference checks the first n_b boxes of the batch's block (not one per ROI)
        chk = block[:n_b]
        _check(ctx, bool(np.all(chk[:, 0] <= chk[:, 2]) and np.all(chk[:, 1] <= chk[:, 3])),
               "invalid box: x2 < x1 or y2 < y1")
        sc = sc_all[s:e].reshape(-1).copy()
        sel = K.nms_multi_class(sc, block, num_classes, score_thr, max_det, max_det, iou_thr, kernel, nms_thr)
        sel = sel[K.sort_class_then_desc(sel % num_classes, sc[sel])]
        out_scores.append(sc[sel])
        out_rois.append(raw_boxes[s * num_classes + sel])
        out_cls.append((sel % num_classes).astype(np.int32))
        out_b.append(np.full(sel.size, bdata[s], np.int32))
    sc_out = np.concatenate(out_scores)
    if o_sc.type in (Q8, Q8S):
        # NOTE: the output score keeps the input's scale and zero point
        sc_out = _store(sc_out, o_sc.type, scores.scale, scores.zero_point)
    else:
        sc_out = sc_out.astype(o_sc.dtype)
    return [sc_out, np.concatenate(out_rois).astype(o_roi.dtype).reshape(-1, 4),
            np.concatenate(out_cls), np.concatenate(out_b)]


_NMS_SCALARS = (3, 4, 5, 6, 7, 8)


def _parse_nms(score_thr: float, max_det: int, kind: int, iou_thr: float, sigma: float, nms_thr: float) -> tuple:
    """(score threshold, max detections, the NMS kernel or the message of its
    error, IoU threshold, NMS score threshold)."""
    iou_thr = float(iou_thr)
    try:
        kernel: Any = K.nms_kernel(int(kind), iou_thr, float(sigma))
    except K.KernelError as e:
        kernel = str(e)  # NOTE: raised where the reference fails: with some ROIs only
    return F32(score_thr), int(max_det), kernel, iou_thr, float(nms_thr)


def _prepare_nms(info: OpInfo) -> _State:
    return _prepare_state(info, _NMS_SCALARS, _parse_nms, (0, 1))


# --------------------------------------------------------------------------
# GENERATE_PROPOSALS


_GP_SCALARS = (4, 5, 6, 7, 8, 9, 10)


def _parse_gp(h_stride: float, w_stride: float, pre: int, post: int, iou_thr: float, min_size: float,
              layout: bool) -> tuple:
    return F32(h_stride), F32(w_stride), int(pre), int(post), float(iou_thr), F32(min_size), bool(layout)


def _anchor_grid(anc: np.ndarray, h: int, w: int, h_stride: np.float32, w_stride: np.float32) -> np.ndarray:
    """Every anchor shifted to every position of the h x w grid: [h * w * num_anchors, 4]."""
    shift_w = (np.arange(w, dtype=F32) * w_stride).astype(F32)
    shift_h = (np.arange(h, dtype=F32) * h_stride).astype(F32)
    shifts = np.stack(np.broadcast_arrays(shift_w[None, :], shift_h[:, None], shift_w[None, :], shift_h[:, None]),
                      axis=-1)                                                  # [h, w, 4]
    return frozen((anc[None, None, :, :] + shifts[:, :, None, :]).astype(F32).reshape(-1, 4))


# the most anchor boxes a grid made at prepare holds (16 bytes each)
_GRID_LIMIT = 1 << 20


def _prepare_gp(info: OpInfo) -> _State:
    st = _prepare_state(info, _GP_SCALARS, _parse_gp, (2, 3))
    anc = st.real.get(2)
    if st.params is not None and anc is not None:
        # NOTE: constant anchors and strides: the grid per feature map size, the declared one made now
        grids = memo.Memo(4)
        st.extra = grids
        dims = info.inputs[0].dimensions
        if len(dims) == 4 and 0 not in dims and anc.ndim == 2 and anc.shape[1:] == (4,):
            h, w = (dims[2], dims[3]) if st.params[6] else (dims[1], dims[2])
            # NOTE: a declared shape costs nothing to claim: a grid beyond the bound waits for real data
            if h * w * anc.shape[0] <= _GRID_LIMIT:
                grids.put((h, w), _anchor_grid(anc, h, w, st.params[0], st.params[1]))
    return st


def execute_generate_proposals(ctx: ExecContext) -> list[np.ndarray]:
    scores, deltas, anchors, info = ctx.inputs[:4]
    h_stride, w_stride, pre, post, iou_thr, min_size, nchw = _params(ctx, _GP_SCALARS, _parse_gp)
    _check(ctx, scores.data.ndim == 4 and deltas.data.ndim == 4, "scores and deltas must be 4-D")
    _check(ctx, anchors.data.ndim == 2 and info.data.ndim == 2, "anchors and image info must be 2-D")
    sc = _real(scores)
    dl = _real(deltas)
    if nchw:
        sc = np.transpose(sc, (0, 2, 3, 1))
        dl = np.transpose(dl, (0, 2, 3, 1))
    n_b, h, w, a = sc.shape
    _check(ctx, dl.shape == (n_b, h, w, a * 4), "deltas must be [batches, height, width, num_anchors * 4]")
    _check(ctx, info.shape == (n_b, 2), "image info must be [batches, 2]")
    _check(ctx, anchors.shape == (a, 4), "anchors must be [num_anchors, 4]")
    if scores.type == Q8:
        # NOTE: the reference checks these for TENSOR_QUANT8_ASYMM only
        _check(ctx, anchors.scale == 0.125, "anchors must have scale 0.125")
        _check_box_quant(ctx, info, "image info")
    info_r = _real_in(ctx, 3)
    grids = ctx.state.extra if ctx.state is not None else None
    if grids is not None:
        grid = grids.get_or_compute((h, w), lambda: _anchor_grid(ctx.state.real[2], h, w, h_stride, w_stride))
    else:
        grid = _anchor_grid(_real_in(ctx, 2), h, w, h_stride, w_stride)
    size = grid.shape[0]
    out_s, out_r, out_b = [], [], []
    for b in range(n_b):
        boxes = _run(ctx, K.bbox_transform, grid, dl[b].reshape(size, 4), np.zeros(size, np.int32),
                     info_r[b:b + 1])
        s_b = sc[b].reshape(-1)
        select = np.arange(size, dtype=np.int64)
        if 0 < pre < size:
            select = K.sort_desc(s_b)[:pre]
        bx = boxes[select]
        bw = bx[:, 2] - bx[:, 0]
        bh = bx[:, 3] - bx[:, 1]
        xc = bx[:, 0] + bw / F32(2)
        yc = bx[:, 1] + bh / F32(2)
        keep = (bw > min_size) & (bh > min_size) & (xc < info_r[b, 1]) & (yc < info_r[b, 0])
        sel = K.nms_single_class(s_b, boxes, select[keep], post, iou_thr)
        out_s.append(s_b[sel])
        out_r.append(boxes[sel])
        out_b.append(np.full(sel.size, b, np.int32))
    o_sc, o_roi, _ = ctx.outputs
    s_all = np.concatenate(out_s)
    r_all = np.concatenate(out_r).reshape(-1, 4)
    if o_sc.type in (Q8, Q8S):
        s_all = _store(s_all, o_sc.type, scores.scale, scores.zero_point)
        # NOTE: the reference fixes the ROI output's quantization only for TENSOR_QUANT8_ASYMM
        r_scale, r_zp = (0.125, 0) if scores.type == Q8 else (o_roi.scale, o_roi.zero_point)
        r_all = _store(r_all, o_roi.type, r_scale, r_zp)
    else:
        s_all = s_all.astype(o_sc.dtype)
        r_all = r_all.astype(o_roi.dtype)
    return [s_all, r_all, np.concatenate(out_b)]


# --------------------------------------------------------------------------
# DETECTION_POSTPROCESSING


def execute_detection_postprocessing(ctx: ExecContext) -> list[np.ndarray]:
    scores, deltas, anchors = ctx.inputs[:3]
    _check(ctx, scores.data.ndim == 3 and deltas.data.ndim == 3, "scores and deltas must be 3-D")
    _check(ctx, anchors.data.ndim == 2, "anchors must be 2-D")
    n_b, n_a, n_c = scores.shape
    box_len = deltas.shape[2]
    _check(ctx, deltas.shape[0] == n_b and deltas.shape[1] == n_a, "deltas must be [batches, num_anchors, *]")
    _check(ctx, anchors.shape == (n_a, 4), "anchors must be [num_anchors, 4]")
    sy, sx, sh, sw, regular, max_det, max_cls, max_per_cls, score_thr, iou_thr, bg = _params(
        ctx, _DP_SCALARS, _parse_dp)
    _check(ctx, sy > 0 and sx > 0 and sh > 0 and sw > 0, "box scales must be positive")
    _check(ctx, score_thr >= 0 and iou_thr >= 0, "score and IoU thresholds must be non-negative")
    _check(ctx, n_c > 1, "there must be more than one class")
    _check(ctx, box_len >= 4, "the box encoding must hold at least 4 values")
    _check(ctx, max_det > 0, "max_num_detections must be positive")
    if regular:
        _check(ctx, max_per_cls > 0, "max detections per class must be positive")
        n_out = max_det
    else:
        _check(ctx, max_cls > 0, "max classes per detection must be positive")
        n_out = max_det * max_cls
    sc = _real(scores)
    dl = _real(deltas)
    st = ctx.state
    ay, ax, ah, aw = st.extra if st is not None and st.extra is not None else _anchor_columns(_real(anchors))
    out_s = np.zeros((n_b, n_out), F32)
    out_r = np.zeros((n_b, n_out, 4), F32)
    out_c = np.zeros((n_b, n_out), np.int32)
    out_n = np.zeros((n_b,), np.int32)
    label_shift = 0 if bg else 1
    with np.errstate(over="ignore", invalid="ignore"):
        for b in range(n_b):
            d = dl[b]
            yc = ay + ah * d[:, 0] / sy
            xc = ax + aw * d[:, 1] / sx
            hh = ah * K.expf(d[:, 2] / sh) * F32(0.5)
            wh = aw * K.expf(d[:, 3] / sw) * F32(0.5)
            boxes = np.stack([yc - hh, xc - wh, yc + hh, xc + wh], axis=1).astype(F32)
            s_b = sc[b]
            if regular:
                flat = s_b.reshape(-1).copy()
                sel = K.nms_multi_class(flat, np.repeat(boxes, n_c, axis=0), n_c, score_thr, max_det, max_per_cls,
                                        iou_thr)
                k = sel.size
                out_s[b, :k] = flat[sel]
                out_r[b, :k] = boxes[sel // n_c]
                out_c[b, :k] = sel % n_c - label_shift
                out_n[b] = k
            else:
                n_cls = min(n_c - 1, max_cls)
                rest = s_b[:, 1:]
                max_scores = np.take_along_axis(rest, K.max_element(rest, axis=1)[:, None], axis=1)[:, 0]
                cand = np.flatnonzero(max_scores > score_thr)
                sel = K.nms_single_class(max_scores, boxes, cand, max_det, iou_thr)
                if sel.size:
                    cls = K.sort_rows_desc(s_b[sel, 1:])[:, :n_cls] + 1            # [k, n_cls]
                    k = sel.size * n_cls
                    out_s[b, :k] = s_b[sel[:, None], cls].reshape(-1)
                    out_r[b, :k] = np.repeat(boxes[sel], n_cls, axis=0)
                    out_c[b, :k] = (cls - label_shift).reshape(-1)
                out_n[b] = sel.size * n_cls
    o_s, o_r, _, _ = ctx.outputs
    return [out_s.astype(o_s.dtype), out_r.astype(o_r.dtype), out_c, out_n]


_DP_SCALARS = tuple(range(3, 14))


def _parse_dp(sy: float, sx: float, sh: float, sw: float, regular: bool, max_det: int, max_cls: int,
              max_per_cls: int, score_thr: float, iou_thr: float, bg: bool) -> tuple:
    return (F32(sy), F32(sx), F32(sh), F32(sw), bool(regular), int(max_det), int(max_cls), int(max_per_cls),
            F32(score_thr), F32(iou_thr), bool(bg))


def _anchor_columns(anc: np.ndarray) -> tuple:
    """The anchors' [y center, x center, height, width] columns, each contiguous."""
    return tuple(frozen(np.ascontiguousarray(anc[:, k])) for k in range(4))


def _prepare_dp(info: OpInfo) -> _State:
    st = _prepare_state(info, _DP_SCALARS, _parse_dp, (2,))
    anc = st.real.get(2)
    if anc is not None and anc.ndim == 2 and anc.shape[1] == 4:
        st.extra = _anchor_columns(anc)  # NOTE: the execution checks the anchors' shape first
    return st


# --------------------------------------------------------------------------
# HEATMAP_MAX_KEYPOINT


def execute_heatmap_max_keypoint(ctx: ExecContext) -> list[np.ndarray]:
    heat, boxes = ctx.inputs[:2]
    (nchw,) = _params(ctx, _HEATMAP_SCALARS, _parse_heatmap)
    _check(ctx, heat.data.ndim == 4, "heatmap must be 4-D")
    _check(ctx, boxes.data.ndim == 2, "boxes must be 2-D")
    n = heat.shape[0]
    size = heat.shape[2]
    _check(ctx, heat.shape[3 if nchw else 1] == size, "heatmaps must be square")
    _check(ctx, size >= 2, "heatmap size must be at least 2")
    _check(ctx, boxes.shape[0] == n and boxes.shape[1] == 4, "boxes must be [num_boxes, 4]")
    if heat.type in (Q8, Q8S):
        # NOTE: the 1.3 spec text says zeroPoint -128 with a signed heatmap; the
        # reference requires 0 for both, and a QUANT16_ASYMM zero point of -128 is invalid
        _check_box_quant(ctx, boxes, "boxes")
    hm = _real(heat)
    if nchw:
        hm = np.transpose(hm, (0, 2, 3, 1))
    tol = 1e-3 if heat.type == TF16 else 1e-5
    score, kp = _run(ctx, K.heatmap_max_keypoint, hm, _real_in(ctx, 1), tol, tol)
    o_s, o_k = ctx.outputs
    if heat.type in (Q8, Q8S):
        return [_store(score, o_s.type, o_s.scale, o_s.zero_point), _store(kp, o_k.type, 0.125, 0)]
    return [score.astype(o_s.dtype), kp.astype(o_k.dtype)]


_HEATMAP_SCALARS = (2,)


def _parse_heatmap(layout: bool) -> tuple:
    return (bool(layout),)


def _prepare_heatmap(info: OpInfo) -> _State:
    return _prepare_state(info, _HEATMAP_SCALARS, _parse_heatmap, (1,))


# --------------------------------------------------------------------------
# signatures (the reference validate functions)


def _roi_sigs(extra: tuple) -> list[Signature]:
    sigs = []
    for t, box, fs, v in ((TF32, TF32, F32S, V1_2), (TF16, TF16, F16S, V1_2), (Q8, Q16A, F32S, V1_2),
                          (Q8S, Q16A, F32S, V1_3)):
        sigs.append(Signature((t, box, TI32, I32, I32, fs, fs) + extra + (BOOL,), (t,), v))
    return sigs


_NMS_SIGS = [
    Signature((TF32, TF32, TI32, F32S, I32, I32, F32S, F32S, F32S), (TF32, TF32, TI32, TI32), V1_2),
    Signature((TF16, TF16, TI32, F16S, I32, I32, F16S, F16S, F16S), (TF16, TF16, TI32, TI32), V1_2),
    Signature((Q8, Q16A, TI32, F32S, I32, I32, F32S, F32S, F32S), (Q8, Q16A, TI32, TI32), V1_2),
    Signature((Q8S, Q16A, TI32, F32S, I32, I32, F32S, F32S, F32S), (Q8S, Q16A, TI32, TI32), V1_3),
]

_GP_SIGS = [
    Signature((TF32, TF32, TF32, TF32, F32S, F32S, I32, I32, F32S, F32S, BOOL), (TF32, TF32, TI32), V1_2),
    Signature((TF16, TF16, TF16, TF16, F16S, F16S, I32, I32, F16S, F16S, BOOL), (TF16, TF16, TI32), V1_2),
    Signature((Q8, Q8, Q16S, Q16A, F32S, F32S, I32, I32, F32S, F32S, BOOL), (Q8, Q16A, TI32), V1_2),
    Signature((Q8S, Q8S, Q16S, Q16A, F32S, F32S, I32, I32, F32S, F32S, BOOL), (Q8S, Q16A, TI32), V1_3),
]

_DP_SIGS = [
    Signature((t, t, t, s, s, s, s, BOOL, I32, I32, I32, s, s, BOOL), (t, t, TI32, TI32), V1_2)
    for t, s in ((TF32, F32S), (TF16, F16S))
]

_BBOX_SIGS = [
    Signature((TF32, TF32, TI32, TF32), (TF32,), V1_2),
    Signature((TF16, TF16, TI32, TF16), (TF16,), V1_2),
    Signature((Q16A, Q8, TI32, Q16A), (Q16A,), V1_2),
    Signature((Q16A, Q8S, TI32, Q16A), (Q16A,), V1_3),
]

_HEATMAP_SIGS = [
    Signature((TF32, TF32, BOOL), (TF32, TF32), V1_2),
    Signature((TF16, TF16, BOOL), (TF16, TF16), V1_2),
    Signature((Q8, Q16A, BOOL), (Q8, Q16A), V1_2),
    Signature((Q8S, Q16A, BOOL), (Q8S, Q16A), V1_3),
]

# NOTE: no save_state: the prepared states are parsed scalars and values derived from the model's
# constants (real values, anchor grids, multipliers); a cached model prepares them again on load, and
# the cache keeps nothing of them
OPS: list[OpDef] = [
    OpDef(OperationType.ROI_ALIGN, _roi_sigs((I32, I32)), execute_roi_align, prepare=_prepare_roi_align,
          allow_zero_sized=True),
    OpDef(OperationType.ROI_POOLING, _roi_sigs(()), execute_roi_pooling, prepare=_prepare_roi_pool),
    OpDef(OperationType.AXIS_ALIGNED_BBOX_TRANSFORM, _BBOX_SIGS, execute_bbox_transform,
          prepare=_prepare_bbox_transform, allow_zero_sized=True),
    OpDef(OperationType.BOX_WITH_NMS_LIMIT, _NMS_SIGS, execute_box_with_nms_limit, prepare=_prepare_nms,
          allow_zero_sized=True),
    OpDef(OperationType.GENERATE_PROPOSALS, _GP_SIGS, execute_generate_proposals, prepare=_prepare_gp),
    OpDef(OperationType.DETECTION_POSTPROCESSING, _DP_SIGS, execute_detection_postprocessing, prepare=_prepare_dp),
    OpDef(OperationType.HEATMAP_MAX_KEYPOINT, _HEATMAP_SIGS, execute_heatmap_max_keypoint,
          prepare=_prepare_heatmap),
]
