"""Detection operations: published NNAPI examples (float32, float16, quant8
asymm / signed, NCHW), naive loop references for ROI_ALIGN / ROI_POOLING /
NMS ordering, zero-sized inputs, and error paths."""

from __future__ import annotations

import numpy as np
import pytest

from nnhal.hal import OperandType as T
from nnhal.hal import OperationType as Op
from nnhal.ops import detection_kernels as K
from nnhal.ops.base import (
    NUMPY_DTYPE,
    V1_2,
    OpExecutionError,
    OpValidationError,
    OutputSpec,
    Tensor,
    match_signature,
)
from nnhal.ops.registry import REGISTRY
from nnhal.ops.run import run_operation

# every kernel test through validate, prepare (scalars as the model's constants) and execute
PHASES = {"scalar_constants": True, "validate": True}

F32, F16, Q8, Q8S, Q16A = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED, \
    T.TENSOR_QUANT16_ASYMM


def tensor(values, type_=F32, scale=0.0, zp=0) -> Tensor:
    return Tensor(type_, np.asarray(values, NUMPY_DTYPE[type_]), scale, zp)


def quant(values, type_, scale, zp) -> Tensor:
    v = np.asarray(values, np.float64) / scale + zp
    lo, hi = {Q8: (0, 255), Q8S: (-128, 127), Q16A: (0, 65535), T.TENSOR_QUANT16_SYMM: (-32768, 32767)}[type_]
    return tensor(np.clip(np.sign(v) * np.floor(np.abs(v) + 0.5), lo, hi), type_, scale, zp)


def i32(v: int) -> Tensor:
    return Tensor(T.INT32, np.array(v, np.int32))


def f32(v: float) -> Tensor:
    return Tensor(T.FLOAT32, np.array(v, np.float32))


def f16(v: float) -> Tensor:
    return Tensor(T.FLOAT16, np.array(v, np.float16))


def boolean(v: bool) -> Tensor:
    return Tensor(T.BOOL, np.array(v, np.bool_))


def run(op, inputs, outputs):
    return run_operation(op, inputs, outputs, **PHASES)


def out(type_, scale=0.0, zp=0) -> OutputSpec:
    return OutputSpec(type_, (), scale, zp)


def assert_close(actual: np.ndarray, expected, type_, scale=0.0, zp=0) -> None:
    """The conformance tolerances (README of the vectors)."""
    e = np.asarray(expected, np.float64)
    if type_ in (Q8, Q8S, Q16A):
        v = e / scale + zp
        e = np.sign(v) * np.floor(np.abs(v) + 0.5)
        tol = 1.0
    elif type_ == F16:
        tol = 5 * 2**-10 * (1 + np.abs(e))
    else:
        tol = 1e-5 + 5 * 2**-23 * np.abs(e)
    a = np.asarray(actual, np.float64).reshape(e.shape)
    assert np.all(np.abs(a - e) <= tol), f"max error {np.max(np.abs(a - e))}\n{a}\n{e}"


# --------------------------------------------------------------------------
# ROI_ALIGN

IMG_4x4 = [-10, -1, 4, -5, -8, -2, 9, 1, 7, -2, 3, -7, -2, 10, -3, 5]
IMG_2x4x8x2 = [
    8.84, 8.88, 7.41, 5.60, 9.95, 4.37, 0.10, 7.64, 6.50, 9.47, 7.55, 3.00, 0.89, 3.01, 6.30, 4.40, 1.64, 6.74,
    6.16, 8.60, 5.85, 3.17, 7.12, 6.79, 5.77, 6.62, 5.13, 8.44, 5.08, 7.12, 2.84, 1.19, 8.37, 0.90, 7.86, 9.69,
    1.97, 1.31, 4.42, 9.89, 0.18, 9.00, 9.30, 0.44, 5.05, 6.47, 1.09, 9.50, 1.30, 2.18, 2.05, 7.74, 7.66, 0.65,
    4.18, 7.14, 5.35, 7.90, 1.04, 1.47, 9.01, 0.95, 4.07, 0.65,
    5.47, 2.64, 0.86, 4.86, 2.38, 2.45, 8.77, 0.06, 3.60, 9.28, 5.84, 8.97, 6.89, 1.43, 3.90, 5.91, 7.40, 9.25,
    3.12, 4.92, 1.87, 3.22, 9.50, 6.73, 2.07, 7.30, 3.07, 4.97, 0.24, 8.91, 1.09, 0.27, 7.29, 6.94, 2.31, 6.88,
    4.33, 1.37, 0.86, 0.46, 6.07, 3.81, 0.86, 6.99, 4.36, 1.92, 8.19, 3.57, 7.90, 6.78, 4.64, 6.82, 6.18, 9.63,
    2.63, 2.33, 1.36, 2.70, 9.99, 9.85, 8.06, 4.80, 7.80, 5.43,
]
ROIS_2 = [4, 4, 28, 12, 4, 4, 32, 16, 7, 1, 29, 15, 1, 7, 9, 11]

# (input shape, input values, rois, batch split, out h, out w, h stride, w stride, h ratio, w ratio, expected,
#  quant (in scale, in zp, out scale, out zp))
ROI_ALIGN_CASES = {
    "square": ([1, 4, 4, 1], IMG_4x4, [2, 2, 4, 4, 0, 0, 8, 8, 2, 0, 4, 8, 0, 2, 8, 4], [0, 0, 0, 0], 2, 2, 2.0, 2.0,
               4, 4, [0.375, 5.125, -0.375, 2.875, -0.5, -0.3125, 3.1875, 1.125, 0.25, 4.25, 4.875, 0.625, -0.1875,
                      1.125, 0.9375, -2.625], (0.25, 128, 0.0625, 128)),
    "fixed_ratio": ([2, 4, 8, 2], IMG_2x4x8x2, ROIS_2, [0, 0, 1, 1], 2, 3, 4.0, 4.0, 4, 4, [
        5.150000, 5.491250, 4.733750, 7.100000, 4.827500, 5.843750, 4.721250, 4.797500, 3.750000, 6.592500,
        5.452500, 3.362500, 4.899396, 5.861696, 4.941504, 5.979741, 3.182904, 6.111551, 5.141833, 4.631891,
        3.903325, 4.627793, 5.537240, 1.356019, 4.845915, 3.618338, 3.301958, 6.250566, 2.930461, 4.269676,
        3.642174, 4.201423, 5.008657, 5.735293, 7.426004, 4.819665, 4.518229, 6.887344, 2.952656, 5.565781,
        3.952786, 2.552812, 5.191667, 6.854167, 3.920000, 6.512500, 4.886250, 5.497708], (0.04, 0, 0.03125, 10)),
    "adaptive_ratio": ([2, 4, 8, 2], IMG_2x4x8x2, ROIS_2, [0, 0, 1, 1], 2, 3, 4.0, 4.0, 0, 0, [
        5.150000, 5.491250, 4.733750, 7.100000, 4.827500, 5.843750, 4.721250, 4.797500, 3.750000, 6.592500,
        5.452500, 3.362500, 4.869884, 5.908148, 4.941701, 5.955718, 3.113403, 6.341898, 5.156389, 4.604016,
        3.881782, 4.616123, 5.690694, 1.237153, 5.028047, 3.560944, 3.157656, 6.395469, 2.896243, 4.336576,
        3.563021, 4.057767, 5.053437, 6.028906, 7.396966, 4.668906, 4.385000, 6.905000, 2.815000, 5.502500,
        4.161667, 1.829167, 5.191667, 6.854167, 3.920000, 6.512500, 5.106667, 5.612500], (0.04, 0, 0.03125, 10)),
    "mixed": ([4, 4, 4, 1], [0] * 32 + IMG_4x4 + [0] * 16, [1, 2, 2, 4, 0, 0, 4, 8, 1, 0, 2, 8, 0, 2, 4, 4, 0, 0, 0, 0],
              [2, 2, 2, 2, 2], 2, 2, 2.0, 1.0, 0, 4, [
                  0.375, 5.125, -0.375, 2.875, -0.5, -0.3125, 3.1875, 1.125, 0.25, 4.25, 4.875, 0.625, -0.1875,
                  1.125, 0.9375, -2.625, -7.4375, -3.3125, -6.8125, -3.4375], (0.25, 128, 0.0625, 128)),
}


def _roi_inputs(case, type_, nchw, with_ratio=True):
    shape, img, rois, split, oh, ow, hs, ws, hr, wr, _, q = case
    x = np.asarray(img, np.float64).reshape(shape)
    if nchw:
        x = x.transpose(0, 3, 1, 2)
    r = np.asarray(rois, np.float64).reshape(-1, 4)
    if type_ in (Q8, Q8S):
        zp = q[1] - (128 if type_ == Q8S else 0)
        xt = quant(x, type_, q[0], zp)
        rt = quant(r, Q16A, 0.125, 0)
        sc = f32
    else:
        xt, rt, sc = tensor(x, type_), tensor(r, type_), (f16 if type_ == F16 else f32)
    ins = [xt, rt, tensor(split, T.TENSOR_INT32), i32(oh), i32(ow), sc(hs), sc(ws)]
    if with_ratio:
        ins += [i32(hr), i32(wr)]
    return ins + [boolean(nchw)]


@pytest.mark.parametrize("name", sorted(ROI_ALIGN_CASES))
@pytest.mark.parametrize("type_", [F32, F16, Q8, Q8S])
@pytest.mark.parametrize("nchw", [False, True])
def test_roi_align_published(name, type_, nchw):
    case = ROI_ALIGN_CASES[name]
    q = case[-1]
    o_zp = q[3] - (128 if type_ == Q8S else 0)
    o = out(type_, q[2], o_zp) if type_ in (Q8, Q8S) else out(type_)
    (res,) = run(Op.ROI_ALIGN, _roi_inputs(case, type_, nchw), [o])
    assert res.dtype == NUMPY_DTYPE[type_]
    n = len(case[2]) // 4
    exp = np.asarray(case[10], np.float64).reshape(n, case[4], case[5], case[0][3])
    if nchw:
        exp = exp.transpose(0, 3, 1, 2)
    assert res.shape == exp.shape
    assert_close(res, exp, type_, o.scale, o.zero_point)


def naive_roi_align(x, rois, batch, oh, ow, hs, ws, hr, wr):
    """Direct loops over ROIs, bins and samples (NHWC, float64)."""
    n_b, h, w, c = x.shape
    res = np.zeros((len(rois), oh, ow, c))
    for r, (roi, b) in enumerate(zip(rois, batch, strict=True)):
        x1, y1, x2, y2 = roi[0] / ws, roi[1] / hs, roi[2] / ws, roi[3] / hs
        rw, rh = max(x2 - x1, 1.0), max(y2 - y1, 1.0)
        bw, bh = rw / ow, rh / oh
        sw = wr if wr > 0 else int(np.ceil(bw))
        sh = hr if hr > 0 else int(np.ceil(bh))
        for i in range(oh):
            for j in range(ow):
                acc = np.zeros(c)
                for yi in range(sh):
                    for xi in range(sw):
                        yy = y1 + bh * i + bh / sh * (yi + 0.5)
                        xx = x1 + bw * j + bw / sw * (xi + 0.5)
                        ya, xa = int(np.floor(yy)), int(np.floor(xx))
                        dy, dx = yy - ya, xx - xa
                        if ya >= h - 1:
                            ya, dy = h - 1, 0.0
                        if xa >= w - 1:
                            xa, dx = w - 1, 0.0
                        yb, xb = min(ya + 1, h - 1), min(xa + 1, w - 1)
                        acc += ((1 - dy) * (1 - dx) * x[b, ya, xa] + (1 - dy) * dx * x[b, ya, xb]
                                + dy * (1 - dx) * x[b, yb, xa] + dy * dx * x[b, yb, xb])
                res[r, i, j] = acc / (sh * sw)
    return res


@pytest.mark.parametrize("ratios", [(0, 0), (2, 3), (1, 0)])
def test_roi_align_against_loops(ratios):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(3, 9, 11, 4)).astype(np.float32)
    n = 12
    x1 = rng.uniform(0, 20, n)
    y1 = rng.uniform(0, 16, n)
    rois = np.stack([x1, y1, np.minimum(x1 + rng.uniform(0, 30, n), 22), np.minimum(y1 + rng.uniform(0, 30, n), 18)],
                    axis=1).astype(np.float32)
    batch = rng.integers(0, 3, n).astype(np.int32)
    ins = [tensor(x), tensor(rois), tensor(batch, T.TENSOR_INT32), i32(3), i32(4), f32(2.0), f32(2.0),
           i32(ratios[0]), i32(ratios[1]), boolean(False)]
    (res,) = run(Op.ROI_ALIGN, ins, [out(F32)])
    exp = naive_roi_align(x.astype(np.float64), rois.astype(np.float64), batch, 3, 4, 2.0, 2.0, *ratios)
    np.testing.assert_allclose(res, exp, rtol=1e-5, atol=1e-5)


def test_roi_align_zero_rois():
    ins = [tensor(np.ones((1, 4, 4, 2))), tensor(np.zeros((0, 4))), tensor(np.zeros(0), T.TENSOR_INT32), i32(2),
           i32(3), f32(1.0), f32(1.0), i32(0), i32(0), boolean(True)]
    (res,) = run(Op.ROI_ALIGN, ins, [out(F32)])
    assert res.shape == (0, 4, 2, 3)  # NCHW: depth 4 from the input's dimension 1


@pytest.mark.parametrize("bad", ["batch", "bounds", "order", "negative", "ratio", "quant_scale"])
def test_roi_align_runtime_errors(bad):
    case = list(ROI_ALIGN_CASES["square"])
    ins = _roi_inputs(case, Q8 if bad == "quant_scale" else F32, False)
    if bad == "batch":
        ins[2] = tensor([0, 0, 0, 1], T.TENSOR_INT32)
    elif bad == "bounds":
        ins[1] = tensor(np.array([[0, 0, 9, 2]] * 4))
    elif bad == "order":
        ins[1] = tensor(np.array([[3, 0, 2, 2]] * 4))
    elif bad == "negative":
        ins[1] = tensor(np.array([[-1, 0, 2, 2]] * 4))
    elif bad == "ratio":
        ins[7] = i32(-1)
    else:
        ins[1].scale = 0.25
    o = out(Q8, 0.0625, 128) if bad == "quant_scale" else out(F32)
    with pytest.raises(OpExecutionError):
        run(Op.ROI_ALIGN, ins, [o])


def test_roi_align_signatures():
    op = REGISTRY[Op.ROI_ALIGN]
    ok = [Q8, Q16A, T.TENSOR_INT32, T.INT32, T.INT32, T.FLOAT32, T.FLOAT32, T.INT32, T.INT32, T.BOOL]
    assert match_signature(op, ok, [Q8]).version == V1_2
    with pytest.raises(OpValidationError):
        match_signature(op, [Q8, Q8] + ok[2:], [Q8])  # boxes must be QUANT16_ASYMM
    with pytest.raises(OpValidationError):
        match_signature(op, [F16, F16] + ok[2:], [F16])  # float16 strides are FLOAT16
    with pytest.raises(OpValidationError):
        match_signature(op, [Q8S] + ok[1:], [Q8S], version=V1_2)


# --------------------------------------------------------------------------
# ROI_POOLING

ROI_POOL_CASES = {
    "square": ([1, 4, 4, 1], IMG_4x4, [2, 2, 4, 4, 0, 0, 6, 6, 2, 0, 4, 6, 0, 2, 6, 4], [0, 0, 0, 0], 2, 2, 2.0, 2.0,
               0, 0, [-2, 9, -2, 3, -1, 9, 10, 5, -1, 9, 10, 3, -2, 9, 7, 3], (0.25, 128, 0.25, 128)),
    "rect": ([2, 4, 8, 2], IMG_2x4x8x2, [4, 4, 24, 8, 4, 4, 28, 12, 7, 1, 25, 11, 1, 7, 5, 11], [0, 0, 1, 1], 2, 3,
             4.0, 4.0, 0, 0, [
                 6.16, 8.60, 7.12, 6.79, 5.13, 8.44, 7.86, 9.69, 4.42, 9.89, 9.30, 6.47, 7.86, 9.89, 9.30, 9.89, 9.30,
                 9.50, 7.86, 9.89, 9.30, 9.89, 9.30, 9.50, 9.50, 6.73, 9.50, 9.28, 6.89, 8.97, 6.18, 9.63, 9.99, 9.85,
                 9.99, 9.85, 7.29, 6.94, 7.29, 6.94, 2.31, 6.88, 7.90, 6.78, 7.90, 6.82, 4.64, 6.82],
             (0.04, 0, 0.04, 0)),
    "mixed": ([4, 4, 4, 1], [0] * 32 + IMG_4x4 + [0] * 16, [1, 2, 2, 4, 0, 0, 3, 6, 1, 0, 2, 6, 0, 2, 3, 4, 0, 0, 0, 0],
              [2, 2, 2, 2, 2], 2, 2, 2.0, 1.0, 0, 0, [
                  -2, 9, -2, 3, -1, 9, 10, 5, -1, 9, 10, 3, -2, 9, 7, 3, -10, -10, -10, -10], (0.25, 128, 0.25, 128)),
}


@pytest.mark.parametrize("name", sorted(ROI_POOL_CASES))
@pytest.mark.parametrize("type_", [F32, F16, Q8, Q8S])
@pytest.mark.parametrize("nchw", [False, True])
def test_roi_pooling_published(name, type_, nchw):
    case = ROI_POOL_CASES[name]
    q = case[-1]
    shift = 128 if type_ == Q8S else 0
    o = out(type_, q[2], q[3] - shift) if type_ in (Q8, Q8S) else out(type_)
    ins = _roi_inputs(case, type_, nchw, with_ratio=False)
    if type_ in (Q8, Q8S):
        ins[0] = quant(_unquant_img(case, nchw), type_, q[0], q[1] - shift)
    (res,) = run(Op.ROI_POOLING, ins, [o])
    n = len(case[2]) // 4
    exp = np.asarray(case[10], np.float64).reshape(n, case[4], case[5], case[0][3])
    if nchw:
        exp = exp.transpose(0, 3, 1, 2)
    assert res.shape == exp.shape and res.dtype == NUMPY_DTYPE[type_]
    assert_close(res, exp, type_, o.scale, o.zero_point)


def _unquant_img(case, nchw):
    x = np.asarray(case[1], np.float64).reshape(case[0])
    return x.transpose(0, 3, 1, 2) if nchw else x


def test_roi_pooling_against_loops():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(2, 7, 9, 3)).astype(np.float32)
    rois = np.array([[0, 0, 16, 12], [3, 1, 5, 2], [10, 4, 17, 13], [0, 0, 0, 0]], np.float32)
    batch = np.array([0, 1, 1, 0], np.int32)
    ins = [tensor(x), tensor(rois), tensor(batch, T.TENSOR_INT32), i32(3), i32(2), f32(2.0), f32(2.0),
           boolean(False)]
    (res,) = run(Op.ROI_POOLING, ins, [out(F32)])
    for r, (roi, b) in enumerate(zip(rois, batch, strict=True)):
        xs, ys, xe, ye = (int(np.floor(v / 2.0 + 0.5)) for v in roi)
        bw, bh = max(xe - xs + 1, 1) / 2, max(ye - ys + 1, 1) / 3
        for i in range(3):
            for j in range(2):
                h0, h1 = min(int(np.floor(bh * i + ys)), 7), min(int(np.ceil(bh * (i + 1) + ys)), 7)
                w0, w1 = min(int(np.floor(bw * j + xs)), 9), min(int(np.ceil(bw * (j + 1) + xs)), 9)
                exp = x[b, h0:h1, w0:w1].max(axis=(0, 1)) if h1 > h0 and w1 > w0 else np.zeros(3)
                np.testing.assert_array_equal(res[r, i, j], exp)


def test_roi_pooling_rejects_zero_sized_via_flag():
    assert not REGISTRY[Op.ROI_POOLING].allow_zero_sized
    assert REGISTRY[Op.ROI_ALIGN].allow_zero_sized


# --------------------------------------------------------------------------
# AXIS_ALIGNED_BBOX_TRANSFORM

BBOX_ROIS = [100, 150, 400, 430, 120, 60, 122, 61, 10, 20, 20, 50, 50, 120, 150, 250, 400, 100, 1000, 2000]
BBOX_DELTAS = [0.2, 0.2, 0.1, 0.1, 0.3, -0.1, -0.2, 0.1, -0.5, 0.2, 0.2, -0.5, -0.1, -0.1, 2.5, 3, -0.5, -0.5, 1, 1,
               0.5, 0.5, -1.5, -1.2, 0.2, 0.2, -3, -4, 1, -0.5, 0.3, 0.5, 0.3, -0.2, 1.1, -0.8, 0.1, 0.05, -0.5,
               -0.5]
BBOX_EXPECTED = [
    144.22435, 191.276062, 475.775635, 500.723938, 217.190384, 107.276062, 462.809631, 416.723938, 118.778594,
    60.396736, 121.221406, 61.003266, 108.617508, 50.357232, 132.982498, 70.442772, 0.0, 0.0, 23.59140714,
    60.77422571, 18.88435, 45.48208571, 21.11565, 54.51791429, 117.51063714, 209.80948286, 122.48935143,
    212.19050857, 132.50705143, 12.83312286, 255.99999571, 227.16685714, 0.0, 243.1374815, 512.0, 1024.0, 512.0,
    568.7958375, 512.0, 1024.0]


@pytest.mark.parametrize("type_", [F32, F16])
@pytest.mark.parametrize("zero_batch", [False, True])
def test_bbox_transform_published(type_, zero_batch):
    if zero_batch:  # batches without boxes in between
        info = [512, 512, 32, 32, 128, 256, 32, 32, 32, 32, 256, 256, 1024, 512]
        idx = [0, 2, 5, 5, 6]
    else:
        info = [512, 512, 128, 256, 256, 256, 1024, 512]
        idx = [0, 1, 2, 2, 3]
    n_info = len(info) // 2
    ins = [tensor(np.reshape(BBOX_ROIS, (5, 4)), type_), tensor(np.reshape(BBOX_DELTAS, (5, 8)), type_),
           tensor(idx, T.TENSOR_INT32), tensor(np.reshape(info, (n_info, 2)), type_)]
    (res,) = run(Op.AXIS_ALIGNED_BBOX_TRANSFORM, ins, [out(type_)])
    assert res.shape == (5, 8)
    assert_close(res, np.reshape(BBOX_EXPECTED, (5, 8)), type_)


@pytest.mark.parametrize("delta_type", [Q8, Q8S])
def test_bbox_transform_quant(delta_type):
    zp = 128 if delta_type == Q8 else 0
    ins = [quant(np.reshape(BBOX_ROIS, (5, 4)), Q16A, 0.125, 0),
           quant(np.reshape(BBOX_DELTAS, (5, 8)), delta_type, 0.05, zp),
           tensor([0, 1, 2, 2, 3], T.TENSOR_INT32),
           quant(np.reshape([512, 512, 128, 256, 256, 256, 1024, 512], (4, 2)), Q16A, 0.125, 0)]
    (res,) = run(Op.AXIS_ALIGNED_BBOX_TRANSFORM, ins, [out(Q16A, 0.125, 0)])
    assert res.dtype == np.uint16
    # deltas are exact multiples of 0.05, so the float result quantized is the reference
    assert_close(res, np.reshape(BBOX_EXPECTED, (5, 8)), Q16A, 0.125, 0)


def test_bbox_transform_zero_rois_and_errors():
    ins = [tensor(np.zeros((0, 4))), tensor(np.zeros((0, 8))), tensor(np.zeros(0), T.TENSOR_INT32),
           tensor([[10, 10]])]
    (res,) = run(Op.AXIS_ALIGNED_BBOX_TRANSFORM, ins, [out(F32)])
    assert res.shape == (0, 8)
    bad = [tensor([[0, 0, 1, 1]]), tensor(np.zeros((1, 4))), tensor([1], T.TENSOR_INT32), tensor([[10, 10]])]
    with pytest.raises(OpExecutionError):
        run(Op.AXIS_ALIGNED_BBOX_TRANSFORM, bad, [out(F32)])
    bad[2] = tensor([0], T.TENSOR_INT32)
    bad[0] = tensor([[2, 0, 1, 1]])
    with pytest.raises(OpExecutionError):
        run(Op.AXIS_ALIGNED_BBOX_TRANSFORM, bad, [out(F32)])


# --------------------------------------------------------------------------
# BOX_WITH_NMS_LIMIT

NMS_SCORES = [
    0.9, 0.95, 0.75, 0.8, 0.7, 0.85, 0.6, 0.9, 0.95, 0.9, 0.65, 0.9, 0.8, 0.85, 0.8, 0.6, 0.6, 0.2, 0.6, 0.8, 0.4,
    0.9, 0.55, 0.6, 0.9, 0.75, 0.7, 0.8, 0.7, 0.85, 0.9, 0.95, 0.75, 0.8, 0.85, 0.8, 0.6, 0.9, 0.95, 0.6, 0.6, 0.2,
    0.5, 0.9, 0.8, 0.9, 0.75, 0.7, 0.9, 0.65, 0.9, 0.9, 0.55, 0.6, 0.6, 0.8, 0.4]
NMS_ROIS = [
    1, 1, 10, 10, 0, 0, 10, 10, 0, 0, 10, 10,
    2, 2, 11, 11, 1, 1, 11, 11, 1, 1, 11, 11,
    3, 3, 12, 12, 2, 2, 12, 12, 2, 2, 12, 12,
    4, 4, 13, 13, 3, 3, 13, 13, 3, 3, 13, 13,
    5, 5, 14, 14, 4, 4, 14, 14, 4, 4, 14, 14,
    6, 6, 15, 15, 5, 5, 15, 15, 5, 5, 15, 15,
    7, 7, 16, 16, 6, 6, 16, 16, 6, 6, 16, 16,
    8, 8, 17, 17, 7, 7, 17, 17, 7, 7, 17, 17,
    9, 9, 18, 18, 8, 8, 18, 18, 8, 8, 18, 18,
    2, 2, 11, 11, 2, 2, 12, 12, 2, 2, 12, 12,
    1, 1, 10, 10, 1, 1, 11, 11, 1, 1, 11, 11,
    5, 5, 14, 14, 5, 5, 15, 15, 5, 5, 15, 15,
    3, 3, 12, 12, 3, 3, 13, 13, 3, 3, 13, 13,
    6, 6, 15, 15, 6, 6, 16, 16, 6, 6, 16, 16,
    0, 0, 1, 1, 0, 0, 2, 2, 0, 0, 2, 2,
    9, 9, 18, 18, 9, 9, 19, 19, 9, 9, 19, 19,
    4, 4, 13, 13, 4, 4, 14, 14, 4, 4, 14, 14,
    8, 8, 17, 17, 8, 8, 18, 18, 8, 8, 18, 18,
    7, 7, 16, 16, 7, 7, 17, 17, 7, 7, 17, 17,
]


def _nms_inputs(type_, kernel, sigma=1.0, max_det=-1):
    sc = np.reshape(NMS_SCORES, (19, 3))
    rois = np.reshape(NMS_ROIS, (19, 12))
    if type_ in (Q8, Q8S):
        zp = 128 if type_ == Q8 else 0
        s, r, fs = quant(sc, type_, 0.01, zp), quant(rois, Q16A, 0.125, 0), f32
    else:
        s, r, fs = tensor(sc, type_), tensor(rois, type_), (f16 if type_ == F16 else f32)
    return [s, r, tensor([0] * 9 + [1] * 10, T.TENSOR_INT32), fs(0.3), i32(max_det), i32(kernel), fs(0.4),
            fs(sigma), fs(0.3)]


GAUSSIAN_SCORES = [0.95, 0.7879927, 0.52485234, 0.47400165, 0.95, 0.6894936, 0.4812244, 0.42367333, 0.95,
                   0.89983034, 0.7879927, 0.52485234, 0.47400165, 0.95, 0.8, 0.6894936, 0.4811337, 0.42367333]
GAUSSIAN_ROIS = [0, 0, 10, 10, 6, 6, 16, 16, 2, 2, 12, 12, 8, 8, 18, 18, 2, 2, 12, 12, 8, 8, 18, 18, 0, 0, 10, 10, 4, 4,
                 14, 14, 1, 1, 11, 11, 0, 0, 2, 2, 7, 7, 17, 17, 3, 3, 13, 13, 9, 9, 19, 19, 3, 3, 13, 13, 0, 0, 2,
                 2, 9, 9, 19, 19, 1, 1, 11, 11, 5, 5, 15, 15]


@pytest.mark.parametrize("type_", [F32, F16])
def test_box_with_nms_gaussian_published(type_):
    sc_t = type_
    outs = [out(sc_t), out(type_), out(T.TENSOR_INT32), out(T.TENSOR_INT32)]
    s, r, c, b = run(Op.BOX_WITH_NMS_LIMIT, _nms_inputs(type_, 2, sigma=0.5), outs)
    assert s.shape == (18,) and r.shape == (18, 4)
    assert_close(s, GAUSSIAN_SCORES, type_)
    np.testing.assert_array_equal(r, np.reshape(GAUSSIAN_ROIS, (18, 4)))
    np.testing.assert_array_equal(c, [1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2])
    np.testing.assert_array_equal(b, [0] * 8 + [1] * 10)


@pytest.mark.parametrize("type_", [Q8, Q8S])
def test_box_with_nms_quant_outputs(type_):
    zp = 128 if type_ == Q8 else 0
    outs = [out(type_, 0.01, zp), out(Q16A, 0.125, 0), out(T.TENSOR_INT32), out(T.TENSOR_INT32)]
    s, r, c, b = run(Op.BOX_WITH_NMS_LIMIT, _nms_inputs(type_, 2, sigma=0.5), outs)
    assert s.dtype == NUMPY_DTYPE[type_] and r.dtype == np.uint16
    assert_close(s, GAUSSIAN_SCORES, type_, 0.01, zp)
    np.testing.assert_array_equal(r, np.reshape(GAUSSIAN_ROIS, (18, 4)) * 8)


def test_box_with_nms_max_detections_and_empty():
    outs = [out(F32), out(F32), out(T.TENSOR_INT32), out(T.TENSOR_INT32)]
    s, r, c, b = run(Op.BOX_WITH_NMS_LIMIT, _nms_inputs(F32, 0, max_det=2), outs)
    assert s.shape == (4,) and list(b) == [0, 0, 1, 1]
    ins = _nms_inputs(F32, 0)
    ins[3] = f32(0.99)  # nothing above the score threshold
    s, r, c, b = run(Op.BOX_WITH_NMS_LIMIT, ins, outs)
    assert s.shape == (0,) and r.shape == (0, 4) and c.shape == (0,) and b.shape == (0,)
    ins = [tensor(np.zeros((0, 3))), tensor(np.zeros((0, 12))), tensor(np.zeros(0), T.TENSOR_INT32)] + ins[3:]
    s, r, c, b = run(Op.BOX_WITH_NMS_LIMIT, ins, outs)
    assert r.shape == (0, 4)


def test_box_with_nms_errors():
    outs = [out(F32), out(F32), out(T.TENSOR_INT32), out(T.TENSOR_INT32)]
    ins = _nms_inputs(F32, 3)
    with pytest.raises(OpExecutionError):
        run(Op.BOX_WITH_NMS_LIMIT, ins, outs)
    ins = _nms_inputs(F32, 0)
    ins[1] = tensor(np.zeros((19, 8)))
    with pytest.raises(OpExecutionError):
        run(Op.BOX_WITH_NMS_LIMIT, ins, outs)
    op = REGISTRY[Op.BOX_WITH_NMS_LIMIT]
    with pytest.raises(OpValidationError):
        match_signature(op, [Q8, F32, T.TENSOR_INT32, T.FLOAT32, T.INT32, T.INT32, T.FLOAT32, T.FLOAT32, T.FLOAT32],
                        [Q8, Q16A, T.TENSOR_INT32, T.TENSOR_INT32])


def _naive_nms_order(scores, boxes, cand, max_det, iou_thr):
    """The in-place swap algorithm, one element at a time."""
    sel = list(cand)
    start, end, n = 0, len(sel), 0
    while start < end and n < max_det:
        m = max(range(start, end), key=lambda i: (scores[sel[i]], -i))
        sel[start], sel[m] = sel[m], sel[start]
        i = start + 1
        while i < end:
            if K.iou_one_to_many(boxes[sel[start]], boxes[sel[i]][None])[0] >= iou_thr:
                end -= 1
                sel[i], sel[end] = sel[end], sel[i]
            else:
                i += 1
        start += 1
        n += 1
    return sel[:start]


def test_nms_order_matches_swap_algorithm():
    rng = np.random.default_rng(3)
    for _ in range(20):
        n = 40
        xy = rng.uniform(0, 20, (n, 2))
        boxes = np.concatenate([xy, xy + rng.uniform(1, 8, (n, 2))], axis=1).astype(np.float32)
        scores = rng.choice([0.1, 0.2, 0.3, 0.4], n).astype(np.float32)  # many ties
        cand = rng.permutation(n)[:30]
        got = K.nms_single_class(scores.copy(), boxes, cand, 12, 0.3)
        assert list(got) == _naive_nms_order(scores, boxes, cand, 12, np.float32(0.3))


# --------------------------------------------------------------------------
# GENERATE_PROPOSALS, DETECTION_POSTPROCESSING (small hand-checked cases)


def test_generate_proposals_single_anchor():
    # 1 batch, 2x2 positions, 1 anchor of size 2 at the origin, stride 4; deltas 0
    scores = tensor(np.array([0.9, 0.8, 0.7, 0.95]).reshape(1, 2, 2, 1))
    deltas = tensor(np.zeros((1, 2, 2, 4)))
    anchors = tensor([[0, 0, 2, 2]])
    info = tensor([[8, 8]])
    ins = [scores, deltas, anchors, info, f32(4), f32(4), i32(-1), i32(-1), f32(0.5), f32(0.0), boolean(False)]
    s, r, b = run(Op.GENERATE_PROPOSALS, ins, [out(F32), out(F32), out(T.TENSOR_INT32)])
    np.testing.assert_allclose(s, [0.95, 0.9, 0.8, 0.7])
    np.testing.assert_allclose(r, [[4, 4, 6, 6], [0, 0, 2, 2], [4, 0, 6, 2], [0, 4, 2, 6]])
    np.testing.assert_array_equal(b, [0, 0, 0, 0])
    # min_size filters everything: an empty result
    ins[9] = f32(5.0)
    s, r, b = run(Op.GENERATE_PROPOSALS, ins, [out(F32), out(F32), out(T.TENSOR_INT32)])
    assert s.shape == (0,) and r.shape == (0, 4)


def test_detection_postprocessing_regular_and_fast():
    scores = tensor(np.array([[[0.0, 0.9, 0.1], [0.0, 0.8, 0.7], [0.0, 0.2, 0.6]]]))
    deltas = tensor(np.zeros((1, 3, 4)))
    anchors = tensor([[1, 1, 2, 2], [1.1, 1.1, 2, 2], [5, 5, 2, 2]])  # [ctr_y, ctr_x, h, w]
    base = [scores, deltas, anchors, f32(10), f32(10), f32(5), f32(5)]
    tail = [i32(3), i32(1), i32(3), f32(0.0), f32(0.5), boolean(False)]
    outs = [out(F32), out(F32), out(T.TENSOR_INT32), out(T.TENSOR_INT32)]
    s, r, c, n = run(Op.DETECTION_POSTPROCESSING, base + [boolean(True)] + tail, outs)
    assert s.shape == (1, 3) and r.shape == (1, 3, 4)
    np.testing.assert_allclose(s[0], [0.9, 0.7, 0.6])
    np.testing.assert_array_equal(c[0], [0, 1, 1])
    assert n[0] == 3
    s, r, c, n = run(Op.DETECTION_POSTPROCESSING, base + [boolean(False)] + tail, outs)
    np.testing.assert_allclose(s[0], [0.9, 0.6, 0.0])
    np.testing.assert_array_equal(c[0], [0, 1, 0])
    np.testing.assert_allclose(r[0, 0], [0, 0, 2, 2])
    assert n[0] == 2


# --------------------------------------------------------------------------
# HEATMAP_MAX_KEYPOINT


def test_heatmap_peak_refinement():
    # a paraboloid peaking at (y, x) = (2.3, 1.6) on a 5x5 map: the quadratic fit finds it exactly
    yy, xx = np.mgrid[0:5, 0:5].astype(np.float64)
    hm = 10 - (yy - 2.3) ** 2 - 0.5 * (xx - 1.6) ** 2
    heat = tensor(hm.reshape(1, 5, 5, 1))
    boxes = tensor([[0, 0, 10, 20]])
    s, k = run(Op.HEATMAP_MAX_KEYPOINT, [heat, boxes, boolean(False)], [out(F32), out(F32)])
    np.testing.assert_allclose(s, [[10.0]], rtol=1e-5)
    np.testing.assert_allclose(k, [[[(1.6 + 0.5) / 5 * 10, (2.3 + 0.5) / 5 * 20]]], rtol=1e-5)
    s2, k2 = run(Op.HEATMAP_MAX_KEYPOINT, [tensor(hm.reshape(1, 1, 5, 5)), boxes, boolean(True)],
                 [out(F32), out(F32)])
    np.testing.assert_allclose(s2, s)
    np.testing.assert_allclose(k2, k)


def test_heatmap_errors():
    heat = tensor(np.zeros((1, 5, 5, 1)))
    with pytest.raises(OpExecutionError):
        run(Op.HEATMAP_MAX_KEYPOINT, [heat, tensor([[3, 0, 1, 1]]), boolean(False)], [out(F32), out(F32)])
    with pytest.raises(OpExecutionError):
        run(Op.HEATMAP_MAX_KEYPOINT, [tensor(np.zeros((1, 5, 4, 1))), tensor([[0, 0, 1, 1]]), boolean(False)],
            [out(F32), out(F32)])
    with pytest.raises(OpValidationError):
        match_signature(REGISTRY[Op.HEATMAP_MAX_KEYPOINT], [Q8, Q8, T.BOOL], [Q8, Q16A])


@pytest.mark.parametrize("n", [5, 30, 31, 200, 1500])
def test_tie_sorts_are_valid_orders(n):
    rng = np.random.default_rng(n)
    keys = rng.integers(0, 4, n).astype(np.float32)
    p = K.sort_desc(keys)
    assert sorted(p.tolist()) == list(range(n))
    assert np.all(np.diff(keys[p]) <= 0)
    if n <= 30:  # the library sort is an insertion sort there: stable
        np.testing.assert_array_equal(p, np.argsort(-keys, kind="stable"))
    cls = rng.integers(0, 3, n)
    q = K.sort_class_then_desc(cls, keys)
    pairs = list(zip(cls[q].tolist(), (-keys[q]).tolist(), strict=True))
    assert pairs == sorted(pairs)
    rows = K.sort_rows_desc(np.stack([keys, keys[::-1]]))
    np.testing.assert_array_equal(rows[0], p)


@pytest.mark.parametrize("type_", [Q8, Q8S])
def test_heatmap_quant(type_):
    yy, xx = np.mgrid[0:4, 0:4].astype(np.float64)
    hm = 2 - 0.1 * (yy - 1.2) ** 2 - 0.1 * (xx - 2.1) ** 2
    zp = 128 if type_ == Q8 else 0
    heat = quant(hm.reshape(1, 4, 4, 1), type_, 0.01, zp)
    boxes = quant([[8, 16, 40, 48]], Q16A, 0.125, 0)
    s, k = run(Op.HEATMAP_MAX_KEYPOINT, [heat, boxes, boolean(False)], [out(type_, 0.01, zp), out(Q16A, 0.125, 0)])
    assert s.dtype == NUMPY_DTYPE[type_] and k.dtype == np.uint16 and k.shape == (1, 1, 2)
    # the float path on the dequantized heatmap, quantized
    sf, kf = run(Op.HEATMAP_MAX_KEYPOINT, [tensor(heat.dequantize()), tensor([[8, 16, 40, 48]]), boolean(False)],
                 [out(F32), out(F32)])
    assert_close(s, sf, type_, 0.01, zp)
    assert_close(k, kf, Q16A, 0.125, 0)


def test_heatmap_ignores_nan():
    yy, xx = np.mgrid[0:5, 0:5].astype(np.float32)
    hm = (10 - (yy - 3) ** 2 - (xx - 3) ** 2).reshape(1, 5, 5, 1)
    hm[0, 0, 0, 0] = np.nan  # never the maximum
    s, k = run(Op.HEATMAP_MAX_KEYPOINT, [tensor(hm), tensor([[0, 0, 5, 5]]), boolean(False)], [out(F32), out(F32)])
    np.testing.assert_allclose(s, [[10.0]], rtol=1e-5)
    np.testing.assert_allclose(k, [[[3.5, 3.5]]], rtol=1e-5)


def test_tie_order_matches_the_cpp_library():
    # orders produced by libc++'s std::sort (the reference's library) for these keys
    n = 45
    keys = np.array([((i * 7) % 5) / 4 for i in range(n)])
    classes = np.array([(i * 3) % 2 for i in range(n)])
    by_score = [22, 42, 2, 37, 32, 27, 17, 7, 12, 9, 14, 19, 44, 24, 39, 29, 4, 34, 11, 1, 16, 6, 41, 21, 26, 31,
                36, 43, 8, 13, 18, 23, 38, 28, 3, 33, 35, 30, 5, 25, 40, 20, 15, 10, 0]
    by_class = [22, 42, 2, 32, 12, 44, 34, 4, 14, 24, 6, 36, 26, 16, 38, 8, 28, 18, 0, 20, 30, 10, 40, 17, 27, 37, 7,
                19, 29, 9, 39, 21, 11, 31, 41, 1, 23, 13, 3, 33, 43, 5, 15, 35, 25]
    np.testing.assert_array_equal(K.sort_desc(keys), by_score)
    np.testing.assert_array_equal(K.sort_class_then_desc(classes, keys), by_class)


def test_max_element_semantics():
    nan = np.nan
    assert int(K.max_element(np.array([1.0, 3.0, 3.0, 2.0]))) == 1  # first maximum
    assert int(K.max_element(np.array([1.0, nan, 3.0]))) == 2  # a later NaN never wins
    assert int(K.max_element(np.array([nan, 5.0, 3.0]))) == 0  # a first NaN always does
    np.testing.assert_array_equal(K.max_element(np.array([[nan, 1.0], [0.0, 2.0]]), axis=1), [0, 1])


def test_roi_pooling_nan_only_when_first_in_bin():
    x = np.array([[1.0, np.nan], [np.nan, 0.5]], np.float32).reshape(1, 2, 2, 1)
    ins = [tensor(x), tensor([[0, 0, 1, 1], [1, 0, 1, 1]]), tensor([0, 0], T.TENSOR_INT32), i32(1), i32(1),
           f32(1.0), f32(1.0), boolean(False)]
    (res,) = run(Op.ROI_POOLING, ins, [out(F32)])
    assert res[0, 0, 0, 0] == 1.0  # bin [0:2, 0:2] starts at 1.0: the NaNs are skipped
    assert np.isnan(res[1, 0, 0, 0])  # bin [0:2, 1:2] starts at NaN


def test_roi_align_chunked_sampling(monkeypatch):
    case = ROI_ALIGN_CASES["adaptive_ratio"]
    whole = run(Op.ROI_ALIGN, _roi_inputs(case, Q8, False), [out(Q8, 0.03125, 10)])[0]
    monkeypatch.setattr(K, "_GATHER_BUDGET", 1)  # one ROI per chunk
    np.testing.assert_array_equal(run(Op.ROI_ALIGN, _roi_inputs(case, Q8, False), [out(Q8, 0.03125, 10)])[0], whole)


# --------------------------------------------------------------------------
# the Prepare/Eval split: constant parameters and tensors prepared once


def _gp_inputs(type_=F32, anchor_scale=0.125):
    scores = np.array([0.9, 0.8, 0.7, 0.95, 0.3, 0.85, 0.6, 0.5]).reshape(1, 2, 2, 2)
    deltas = np.linspace(-0.3, 0.3, 32).reshape(1, 2, 2, 8)
    anchors = np.array([[0, 0, 2, 2], [1, 0, 4, 3]])
    info = np.array([[8, 8]])
    if type_ in (Q8, Q8S):
        zp = 128 if type_ == Q8 else 0
        ins = [quant(scores, type_, 0.01, zp), quant(deltas, type_, 0.01, zp),
               quant(anchors, T.TENSOR_QUANT16_SYMM, anchor_scale, 0), quant(info, Q16A, 0.125, 0)]
        sc = f32
    else:
        ins = [tensor(scores, type_), tensor(deltas, type_), tensor(anchors, type_), tensor(info, type_)]
        sc = f16 if type_ == F16 else f32
    return ins + [sc(4), sc(4), i32(6), i32(4), sc(0.5), sc(0.5), boolean(False)]


def _gp_outs(type_=F32):
    if type_ in (Q8, Q8S):
        return [out(type_, 0.01, 128 if type_ == Q8 else 0), out(Q16A, 0.125, 0), out(T.TENSOR_INT32)]
    return [out(type_), out(type_), out(T.TENSOR_INT32)]


def _dp_inputs(regular: bool, scale: float = 10.0):
    scores = tensor(np.array([[[0.0, 0.9, 0.1], [0.0, 0.8, 0.7], [0.0, 0.2, 0.6]]]))
    deltas = tensor(np.array([[[0.1, -0.2, 0.3, 0.05], [0.0, 0.1, -0.1, 0.2], [0.3, 0.3, 0.0, -0.2]]]))
    anchors = tensor([[1, 1, 2, 2], [1.1, 1.1, 2, 2], [5, 5, 2, 2]])
    return [scores, deltas, anchors, f32(scale), f32(10), f32(5), f32(5), boolean(regular), i32(3), i32(1), i32(3),
            f32(0.0), f32(0.5), boolean(False)]


def _split_cases() -> dict:
    """name -> (op, inputs, outputs, positions of the data inputs: the others may be constants)."""
    o4 = [out(F32), out(F32), out(T.TENSOR_INT32), out(T.TENSOR_INT32)]
    q = ROI_ALIGN_CASES["fixed_ratio"][-1]
    bbox = [tensor(np.reshape(BBOX_ROIS, (5, 4))), tensor(np.reshape(BBOX_DELTAS, (5, 8))),
            tensor([0, 1, 2, 2, 3], T.TENSOR_INT32), tensor(np.reshape([512, 512, 128, 256, 256, 256, 1024, 512],
                                                                       (4, 2)))]
    bbox_q = [quant(np.reshape(BBOX_ROIS, (5, 4)), Q16A, 0.125, 0), quant(np.reshape(BBOX_DELTAS, (5, 8)), Q8, 0.05,
                                                                          128),
              tensor([0, 1, 2, 2, 3], T.TENSOR_INT32),
              quant(np.reshape([512, 512, 128, 256, 256, 256, 1024, 512], (4, 2)), Q16A, 0.125, 0)]
    yy, xx = np.mgrid[0:5, 0:5].astype(np.float64)
    hm = (10 - (yy - 2.3) ** 2 - 0.5 * (xx - 1.6) ** 2).reshape(1, 5, 5, 1)
    return {
        "roi_align_float": (Op.ROI_ALIGN, _roi_inputs(ROI_ALIGN_CASES["fixed_ratio"], F32, False), [out(F32)], {0}),
        "roi_align_quant_adaptive": (Op.ROI_ALIGN, _roi_inputs(ROI_ALIGN_CASES["adaptive_ratio"], Q8, True),
                                     [out(Q8, q[2], q[3])], {0, 2}),
        "roi_align_quant_fixed": (Op.ROI_ALIGN, _roi_inputs(ROI_ALIGN_CASES["fixed_ratio"], Q8S, False),
                                  [out(Q8S, q[2], q[3] - 128)], {0, 1, 2}),
        "roi_pooling": (Op.ROI_POOLING, _roi_inputs(ROI_POOL_CASES["rect"], F16, True, with_ratio=False), [out(F16)],
                        {0}),
        "bbox_transform": (Op.AXIS_ALIGNED_BBOX_TRANSFORM, bbox, [out(F32)], {0, 1, 2}),
        "bbox_transform_quant": (Op.AXIS_ALIGNED_BBOX_TRANSFORM, bbox_q, [out(Q16A, 0.125, 0)], {1}),
        "nms_gaussian": (Op.BOX_WITH_NMS_LIMIT, _nms_inputs(F32, 2, sigma=0.5), o4, {0, 1, 2}),
        "nms_hard_quant": (Op.BOX_WITH_NMS_LIMIT, _nms_inputs(Q8, 0),
                           [out(Q8, 0.01, 128), out(Q16A, 0.125, 0), out(T.TENSOR_INT32), out(T.TENSOR_INT32)], {0}),
        "generate_proposals": (Op.GENERATE_PROPOSALS, _gp_inputs(), _gp_outs(), {0, 1}),
        "generate_proposals_quant": (Op.GENERATE_PROPOSALS, _gp_inputs(Q8), _gp_outs(Q8), {0, 1, 3}),
        "detection_postprocessing_regular": (Op.DETECTION_POSTPROCESSING, _dp_inputs(True), o4, {0, 1}),
        "detection_postprocessing_fast": (Op.DETECTION_POSTPROCESSING, _dp_inputs(False), o4, {0, 1}),
        "heatmap": (Op.HEATMAP_MAX_KEYPOINT, [tensor(hm), tensor([[0, 0, 10, 20]]), boolean(False)],
                    [out(F32), out(F32)], {0}),
        "heatmap_quant": (Op.HEATMAP_MAX_KEYPOINT, [quant(hm / 10, Q8S, 0.01, 0),
                                                     quant([[8, 16, 40, 48]], Q16A, 0.125, 0), boolean(False)],
                          [out(Q8S, 0.01, 0), out(Q16A, 0.125, 0)], {0}),
    }


def _prepared_pair(op, ins, outs, data):
    from nnhal.ops.run import prepare_operation, tensor_info

    const = prepare_operation(op, [tensor_info(t, constant=k not in data) for k, t in enumerate(ins)], outs)
    dynamic = prepare_operation(op, [tensor_info(t) for t in ins], outs)
    return const, dynamic


@pytest.mark.parametrize("name", sorted(_split_cases()))
def test_prepared_parameters_equal_run_time_parameters(name):
    """Constant scalars parsed once and constant tensors converted once (ROIs,
    image info, anchors and the anchor grid, the NMS kernel, ROI_ALIGN's
    quantized multipliers) give the outputs of the run-time path (the vectors
    give most of them as model inputs), bit for bit, execution after
    execution, and the same through the compilation cache (prepared again on
    load: the cache stores nothing of them)."""
    from tests.prepared_util import assert_cache_round_trip, assert_same_outputs

    op, ins, outs, data = _split_cases()[name]
    const, dynamic = _prepared_pair(op, ins, outs, data)
    assert const.state.params is not None and not dynamic.state.params and not dynamic.state.real
    want = dynamic.run(ins)
    for _ in range(2):
        assert_same_outputs(const.run(ins), want)
    assert_cache_round_trip(op, ins, outs, [k not in data for k in range(len(ins))], want)


def test_generate_proposals_anchor_grid_per_feature_map_size():
    """The anchor grid of the declared feature map size is made at prepare; an
    execution on another size (dynamic shapes) makes and remembers its own."""
    from tests.prepared_util import assert_same_outputs

    from nnhal.hal import OperandLifeTime
    from nnhal.ops.base import OperandInfo
    from nnhal.ops.run import prepare_operation, tensor_info

    ins, outs = _gp_inputs(), _gp_outs()
    infos = [tensor_info(t, constant=k not in (0, 1)) for k, t in enumerate(ins)]
    const = prepare_operation(Op.GENERATE_PROPOSALS, infos, outs)
    assert list(const.state.extra._d) == [(2, 2)]
    unknown = list(infos)
    unknown[0] = OperandInfo(F32, (0, 0, 0, 0), lifetime=OperandLifeTime.SUBGRAPH_INPUT)
    lazy = prepare_operation(Op.GENERATE_PROPOSALS, unknown, outs, validate=False)
    assert len(lazy.state.extra) == 0
    dynamic = prepare_operation(Op.GENERATE_PROPOSALS, [tensor_info(t) for t in ins], outs)
    assert_same_outputs(lazy.run(ins), dynamic.run(ins))
    assert list(lazy.state.extra._d) == [(2, 2)]
    # a 3 x 1 feature map on the grid prepared for 2 x 2
    other = list(ins)
    other[0] = tensor(np.array([0.9, 0.8, 0.7, 0.95, 0.3, 0.85]).reshape(1, 3, 1, 2))
    other[1] = tensor(np.linspace(-0.3, 0.3, 24).reshape(1, 3, 1, 8))
    assert_same_outputs(const.run(other), dynamic.run(other))
    assert sorted(const.state.extra._d) == [(2, 2), (3, 1)]


def _with(ins: list, **changes) -> list:
    ins = list(ins)
    for k, v in changes.items():
        ins[int(k[1:])] = v
    return ins


def _bad_cases() -> dict:
    c = _split_cases()
    q = [out(Q8, 0.01, 128), out(Q16A, 0.125, 0), out(T.TENSOR_INT32), out(T.TENSOR_INT32)]
    o4 = [out(F32), out(F32), out(T.TENSOR_INT32), out(T.TENSOR_INT32)]
    _, roi, roi_out, _ = c["roi_align_float"]
    _, pool, pool_out, _ = c["roi_pooling"]
    _, bbox_q, bbox_out, _ = c["bbox_transform_quant"]
    return {
        "roi_align_height_0": (Op.ROI_ALIGN, _with(roi, i3=i32(0)), roi_out, {0}),
        "roi_align_negative_ratio": (Op.ROI_ALIGN, _with(roi, i8=i32(-1)), roi_out, {0}),
        "roi_pooling_stride_0": (Op.ROI_POOLING, _with(pool, i5=f16(0.0)), pool_out, {0}),
        "roi_pooling_rois_out_of_bounds": (Op.ROI_POOLING, _with(pool, i1=tensor([[0, 0, 90, 90]] * 4, F16)),
                                           pool_out, {0}),
        "bbox_image_info_scale": (Op.AXIS_ALIGNED_BBOX_TRANSFORM, _with(bbox_q, i3=quant([[512, 512]] * 4, Q16A, 0.25,
                                                                                         0)),
                                  bbox_out, {1}),
        "nms_unknown_kernel": (Op.BOX_WITH_NMS_LIMIT, _nms_inputs(F32, 3), o4, {0, 1, 2}),
        "nms_unknown_kernel_quant": (Op.BOX_WITH_NMS_LIMIT, _nms_inputs(Q8, 7), q, {0}),
        "generate_proposals_anchor_scale": (Op.GENERATE_PROPOSALS, _gp_inputs(Q8, anchor_scale=0.25), _gp_outs(Q8),
                                            {0, 1}),
        "detection_postprocessing_scale_0": (Op.DETECTION_POSTPROCESSING, _dp_inputs(True, 0.0), o4, {0, 1}),
        "detection_postprocessing_anchors_shape": (Op.DETECTION_POSTPROCESSING,
                                                   _with(_dp_inputs(False), i2=tensor([[1, 1, 2, 2]] * 2)), o4, {0, 1}),
        "heatmap_invalid_box": (Op.HEATMAP_MAX_KEYPOINT, _with(c["heatmap"][1], i1=tensor([[30, 0, 10, 20]])),
                                c["heatmap"][2], {0}),
    }


@pytest.mark.parametrize("name", sorted(_bad_cases()))
def test_bad_constant_fails_every_execution(name):
    """A bad constant (a parameter, ROIs, image info, anchors, boxes) is
    prepared without error; every execution fails with OpExecutionError
    (GENERAL_FAILURE), as when it is a model input."""
    op, ins, outs, data = _bad_cases()[name]
    const, dynamic = _prepared_pair(op, ins, outs, data)
    for prepared in (const, dynamic, const):
        with pytest.raises(OpExecutionError):
            prepared.run(ins)


def test_unknown_nms_kernel_without_rois_still_runs():
    """The reference builds the NMS kernel only when there are ROIs: a bad
    constant kernel with zero ROIs gives empty outputs, prepared or not."""
    ins = _nms_inputs(F32, 3)
    ins[:3] = [tensor(np.zeros((0, 3))), tensor(np.zeros((0, 12))), tensor(np.zeros(0), T.TENSOR_INT32)]
    o4 = [out(F32), out(F32), out(T.TENSOR_INT32), out(T.TENSOR_INT32)]
    const, dynamic = _prepared_pair(Op.BOX_WITH_NMS_LIMIT, ins, o4, {0, 1, 2})
    assert isinstance(const.state.params[2], str)
    for prepared in (const, dynamic):
        assert [a.shape for a in prepared.run(ins)] == [(0,), (0, 4), (0,), (0,)]


def test_prepared_memos_from_many_threads():
    """Executions share the prepared state; the memos they fill (anchor grids
    per feature map size, ROI_ALIGN multipliers per sampling ratio) are locked
    and bounded: bounded to one entry, with sizes alternating between threads,
    every result is the one an execution gets alone."""
    import threading

    from nnhal.ops import memo

    gp_ins, gp_outs = _gp_inputs(), _gp_outs()
    gp_other = list(gp_ins)
    gp_other[0] = tensor(np.array([0.9, 0.8, 0.7, 0.95, 0.3, 0.85]).reshape(1, 3, 1, 2))
    gp_other[1] = tensor(np.linspace(-0.3, 0.3, 24).reshape(1, 3, 1, 8))
    op, roi_ins, roi_outs, data = _split_cases()["roi_align_quant_adaptive"]
    jobs = []
    for o, ins_list, outs, d in ((Op.GENERATE_PROPOSALS, [gp_ins, gp_other], gp_outs, {0, 1}),
                                 (op, [roi_ins], roi_outs, data)):
        const, dynamic = _prepared_pair(o, ins_list[0], outs, d)
        jobs += [(const, ins, [a.tobytes() for a in dynamic.run(ins)]) for ins in ins_list]
    failures = []

    def work(k: int) -> None:
        for r in range(20):
            const, ins, want = jobs[(k + r) % len(jobs)]
            if [a.tobytes() for a in const.run(ins)] != want:
                failures.append(k)

    with memo.limit(1):
        threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not failures


def test_generate_proposals_grid_of_a_huge_declared_shape_waits_for_data():
    """A declared feature map costs nothing to claim: beyond the bound, no grid is
    made at prepare (a hostile model cannot make prepare allocate it)."""
    from nnhal.hal import OperandLifeTime
    from nnhal.ops.base import OperandInfo
    from nnhal.ops.run import prepare_operation, tensor_info

    ins, outs = _gp_inputs(), _gp_outs()
    infos = [tensor_info(t, constant=k not in (0, 1)) for k, t in enumerate(ins)]
    infos[0] = OperandInfo(F32, (1, 60000, 60000, 2), lifetime=OperandLifeTime.SUBGRAPH_INPUT)
    infos[1] = OperandInfo(F32, (1, 60000, 60000, 8), lifetime=OperandLifeTime.SUBGRAPH_INPUT)
    huge = prepare_operation(Op.GENERATE_PROPOSALS, infos, outs)
    assert len(huge.state.extra) == 0
    dynamic = prepare_operation(Op.GENERATE_PROPOSALS, [tensor_info(t) for t in ins], outs)
    assert [a.tobytes() for a in huge.run(ins)] == [a.tobytes() for a in dynamic.run(ins)]
