"""Recipes of the detection operations: ROI_ALIGN, ROI_POOLING,
HEATMAP_MAX_KEYPOINT, AXIS_ALIGNED_BBOX_TRANSFORM, BOX_WITH_NMS_LIMIT,
GENERATE_PROPOSALS, DETECTION_POSTPROCESSING.

Boxes are ``(x1, y1, x2, y2)`` inside the image, quantized boxes
TENSOR_QUANT16_ASYMM in eighths (scale 0.125, zeroPoint 0, as the reference
requires).  What selects, sorts or suppresses (scores, boxes, indices) is a
new operand with distinct values: a computed value's last bit would pick
another box."""

from __future__ import annotations

import numpy as np

from nnhal.conformance.randgraph.recipes.common import OT, Build, T, nhwc, recipe

BOX = (0.125, 0)  # TENSOR_QUANT16_ASYMM boxes
Q16A, Q16S = T.TENSOR_QUANT16_ASYMM, T.TENSOR_QUANT16_SYMM


def _boxes(b: Build, n: int, height: float, width: float, per_row: int = 1) -> np.ndarray:
    """``n`` rows of ``per_row`` boxes inside [0, width] x [0, height], on the 1/8 grid."""
    rng = np.random.default_rng(b.d.seed())
    x = np.sort(rng.uniform(0, width, (n, per_row, 2)), axis=-1)
    y = np.sort(rng.uniform(0, height, (n, per_row, 2)), axis=-1)
    boxes = np.stack([x[..., 0], y[..., 0], x[..., 1] + 0.5, y[..., 1] + 0.5], axis=-1)
    boxes = np.minimum(boxes, [width, height, width, height])
    return (np.round(boxes * 8) / 8).reshape(n, 4 * per_row)


def _box_tensor(b: Build, t: T, values: np.ndarray) -> int:
    if t == Q16A:
        return b.tensor(t, values.shape, scale=BOX[0], zp=BOX[1], value=np.rint(values * 8).astype(np.uint16),
                        connect=False)
    return b.tensor(t, values.shape, value=values.astype(np.float16 if t == T.TENSOR_FLOAT16 else np.float32),
                    connect=False)


def _distinct(b: Build, t: T, dims: tuple, lo: float = 0.05, hi: float = 0.95) -> int:
    """Scores: distinct values in (lo, hi), at least a quantization step apart."""
    rng = np.random.default_rng(b.d.seed())
    n = int(np.prod(dims))
    if t in (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED):
        zp = 0 if t == T.TENSOR_QUANT8_ASYMM else -128
        q = (rng.permutation(np.arange(13, 243))[:n] + zp).astype(np.uint8 if zp == 0 else np.int8)
        return b.tensor(t, dims, scale=1.0 / 256, zp=zp, value=q.reshape(dims), connect=False)
    v = lo + (hi - lo) * (rng.permutation(n) + rng.uniform(0.2, 0.8, n)) / n
    return b.tensor(t, dims, value=v.reshape(dims).astype(np.float16 if t == T.TENSOR_FLOAT16 else np.float32),
                    connect=False)


def _roi(b: Build) -> None:
    align = b.op == OT.ROI_ALIGN
    t, box_t, fs = b.sig.inputs[0], b.sig.inputs[1], b.sig.inputs[5]
    nchw = b.d.flag(0.35)
    x = b.main(t, ranks=(4,), fits=lambda d: min(d) >= 1 and int(np.prod(d)) <= 1024)
    n, h, w, c = nhwc(b.operand(x).dims, nchw)
    stride = b.d.pick((1.0, 2.0, 0.5, 4.0))
    rois = b.d.integer(1, 4)
    _box_tensor(b, box_t, _boxes(b, rois, h * stride, w * stride))
    b.tensor(T.TENSOR_INT32, (rois,), domain="index", limit=n, role="param", connect=False)
    b.param("output_h", T.INT32, b.d.integer(1, 4, simplest=2))
    b.param("output_w", T.INT32, b.d.integer(1, 4, simplest=2))
    b.param("height_stride", fs, stride)
    b.param("width_stride", fs, stride)
    if align:
        b.param("sampling_h", T.INT32, b.d.integer(0, 3))
        b.param("sampling_w", T.INT32, b.d.integer(0, 3))
    b.param("layout", T.BOOL, nchw, "NCHW" if nchw else "NHWC")
    b.out(t, b.d.pick(("same", "auto")) if align else "same")


roi_align = recipe(OT.ROI_ALIGN, "detection")(_roi)
roi_pooling = recipe(OT.ROI_POOLING, "detection")(_roi)


@recipe(OT.HEATMAP_MAX_KEYPOINT, "detection")
def heatmap_max_keypoint(b: Build) -> None:
    t, box_t = b.sig.inputs[0], b.sig.inputs[1]
    nchw = b.d.flag(0.35)
    size, k, n = b.d.integer(2, 5), b.d.integer(1, 3), b.d.integer(1, 3)
    dims = (n, k, size, size) if nchw else (n, size, size, k)
    _distinct(b, t, dims, -4.0, 4.0)
    _box_tensor(b, box_t, _boxes(b, n, 32.0, 32.0))
    b.param("layout", T.BOOL, nchw, "NCHW" if nchw else "NHWC")
    b.out(t, "same")
    b.out(box_t, BOX if box_t == Q16A else None)


@recipe(OT.AXIS_ALIGNED_BBOX_TRANSFORM, "detection", anchor_input=1)
def axis_aligned_bbox_transform(b: Build) -> None:
    box_t, delta_t = b.sig.inputs[0], b.sig.inputs[1]
    a = b.operand(b.anchor) if b.anchor is not None else None
    if a is not None and a.type == delta_t and len(a.dims) == 2 and a.dims[1] % 4 == 0:
        rois, classes = a.dims[0], a.dims[1] // 4
    else:
        rois, classes = b.d.integer(1, 4), b.d.integer(1, 3)
    batches = b.d.integer(1, 2)
    size = (b.d.pick((32.0, 16.0, 64.0)), b.d.pick((32.0, 24.0, 64.0)))
    _box_tensor(b, box_t, _boxes(b, rois, *size))
    b.main(delta_t, dims=(rois, 4 * classes), domain="small")
    b.tensor(T.TENSOR_INT32, (rois,), value=np.sort(np.random.default_rng(b.d.seed()).integers(0, batches, rois))
             .astype(np.int32), role="param", connect=False)
    _box_tensor(b, box_t, np.tile(np.array([size], np.float64), (batches, 1)))
    b.out(box_t, BOX if box_t == Q16A else None)


@recipe(OT.BOX_WITH_NMS_LIMIT, "detection")
def box_with_nms_limit(b: Build) -> None:
    t, box_t, fs = b.sig.inputs[0], b.sig.inputs[1], b.sig.inputs[3]
    rois, classes = b.d.integer(1, 6), b.d.integer(2, 4)
    _distinct(b, t, (rois, classes))
    _box_tensor(b, box_t, _boxes(b, rois, 32.0, 32.0, classes))
    batch = np.sort(np.random.default_rng(b.d.seed()).integers(0, 2, rois)).astype(np.int32)
    b.tensor(T.TENSOR_INT32, (rois,), value=batch, role="param", connect=False)
    b.param("score_threshold", fs, b.d.pick((0.0, 0.3, 0.1)))
    b.param("max_detections", T.INT32, b.d.pick((-1, 3, 1, 10)))
    kernel = b.d.integer(0, 2)
    b.param("kernel", T.INT32, kernel, ("hard", "linear", "gaussian")[kernel])
    b.param("iou_threshold", fs, b.d.pick((0.5, 0.3, 0.7)))
    b.param("sigma", fs, b.d.pick((0.5, 1.0)))
    b.param("nms_score_threshold", fs, b.d.pick((0.0, 0.2)))
    b.out(t, "same")
    b.out(box_t, BOX if box_t == Q16A else None)
    b.out(T.TENSOR_INT32, None)
    b.out(T.TENSOR_INT32, None)


@recipe(OT.GENERATE_PROPOSALS, "detection")
def generate_proposals(b: Build) -> None:
    t, delta_t, anchor_t, info_t = b.sig.inputs[:4]
    fs = b.sig.inputs[4]
    nchw = b.d.flag(0.35)
    n, h, w, a = b.d.integer(1, 2), b.d.integer(1, 3), b.d.integer(1, 3), b.d.integer(1, 3)
    _distinct(b, t, (n, a, h, w) if nchw else (n, h, w, a))
    if delta_t in (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED):
        zp = 128 if delta_t == T.TENSOR_QUANT8_ASYMM else 0
        b.tensor(delta_t, (n, 4 * a, h, w) if nchw else (n, h, w, 4 * a), scale=0.05, zp=zp, domain="small",
                 connect=False)
    else:
        b.tensor(delta_t, (n, 4 * a, h, w) if nchw else (n, h, w, 4 * a), domain="unit", connect=False)
    anchors = _boxes(b, a, 16.0, 16.0)
    if anchor_t == Q16S:
        b.tensor(anchor_t, (a, 4), scale=0.125, zp=0, value=np.rint(anchors * 8).astype(np.int16), connect=False)
    else:
        _box_tensor(b, anchor_t, anchors)
    stride = b.d.pick((4.0, 2.0, 8.0))
    _box_tensor(b, info_t, np.tile(np.array([[h * stride, w * stride]]), (n, 1)))
    b.param("height_stride", fs, stride)
    b.param("width_stride", fs, stride)
    b.param("pre_nms_top_n", T.INT32, b.d.pick((-1, 4, 8)))
    b.param("post_nms_top_n", T.INT32, b.d.pick((-1, 2, 5)))
    b.param("iou_threshold", fs, b.d.pick((0.5, 0.3, 0.7)))
    b.param("min_size", fs, b.d.pick((1.0, 0.0, 2.0)))
    b.param("layout", T.BOOL, nchw, "NCHW" if nchw else "NHWC")
    b.out(t, "same")
    b.out(info_t if info_t != T.TENSOR_FLOAT16 else t, BOX if info_t == Q16A else None)
    b.out(T.TENSOR_INT32, None)


@recipe(OT.DETECTION_POSTPROCESSING, "detection")
def detection_postprocessing(b: Build) -> None:
    t, fs = b.sig.inputs[0], b.sig.inputs[3]
    n, anchors, classes = b.d.integer(1, 2), b.d.integer(1, 6), b.d.integer(2, 4)
    _distinct(b, t, (n, anchors, classes))
    b.tensor(t, (n, anchors, 4), domain="unit", connect=False)
    boxes = _boxes(b, anchors, 1.0, 1.0)
    b.tensor(t, (anchors, 4), value=boxes.astype(np.float16 if t == T.TENSOR_FLOAT16 else np.float32),
             connect=False)
    for name in ("y_scale", "x_scale", "h_scale", "w_scale"):
        b.param(name, fs, b.d.pick((10.0, 5.0, 1.0)))
    b.param("regular_nms", T.BOOL, b.d.flag(0.5))
    max_det = b.d.integer(1, 5)
    b.param("max_detections", T.INT32, max_det)
    b.param("max_classes_per_detection", T.INT32, b.d.integer(1, 2))
    b.param("max_detections_per_class", T.INT32, b.d.integer(1, 3))
    b.param("iou_threshold", fs, b.d.pick((0.5, 0.3)))
    b.param("score_threshold", fs, b.d.pick((0.0, 0.2)))
    b.param("background_in_label", T.BOOL, b.d.flag(0.5))
    b.out(t, None)
    b.out(t, None)
    b.out(T.TENSOR_INT32, None)
    b.out(T.TENSOR_INT32, None)
