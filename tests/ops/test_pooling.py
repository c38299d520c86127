"""AVERAGE_POOL_2D, MAX_POOL_2D, L2_POOL_2D against a naive loop reference."""

from __future__ import annotations

import numpy as np
import pytest

from nnhal.hal import OperandType as T
from nnhal.hal import OperationType as Op
from nnhal.ops.base import (
    NUMPY_DTYPE,
    V1_0,
    V1_1,
    V1_2,
    OpExecutionError,
    OpValidationError,
    OutputSpec,
    Tensor,
    match_signature,
)
from nnhal.ops.pooling import explicit_padding
from nnhal.ops.registry import REGISTRY
from nnhal.ops.run import run_operation

# every kernel test through validate, prepare (scalars as the model's constants) and execute
PHASES = {"scalar_constants": True, "validate": True}


def tensor(values, type_=T.TENSOR_FLOAT32, scale=0.0, zp=0) -> Tensor:
    return Tensor(type_, np.asarray(values, NUMPY_DTYPE[type_]), scale, zp)


def i32(v: int) -> Tensor:
    return Tensor(T.INT32, np.array(v, np.int32))


def boolean(v: bool) -> Tensor:
    return Tensor(T.BOOL, np.array(v, np.bool_))


def run(op, inputs, scale=None, zp=None) -> np.ndarray:
    x = inputs[0]
    out = OutputSpec(x.type, (), x.scale if scale is None else scale, x.zero_point if zp is None else zp)
    (res,) = run_operation(op, inputs, [out], **PHASES)
    assert res.dtype == NUMPY_DTYPE[x.type]
    return res


def naive_pool(x, kind, pads, strides, filt, act=0):
    """NHWC float reference: explicit loops, padding excluded."""
    pl, pr, pt, pb = pads
    sw, sh = strides
    fw, fh = filt
    b, h, w, c = x.shape
    oh = (h - fh + sh + pt + pb) // sh
    ow = (w - fw + sw + pl + pr) // sw
    out = np.zeros((b, oh, ow, c), np.float64)
    for n in range(b):
        for i in range(oh):
            for j in range(ow):
                y0, x0 = i * sh - pt, j * sw - pl
                win = x[n, max(y0, 0):min(y0 + fh, h), max(x0, 0):min(x0 + fw, w), :].astype(np.float64)
                win = win.reshape(-1, c)
                if kind == "avg":
                    out[n, i, j] = win.mean(axis=0)
                elif kind == "max":
                    out[n, i, j] = win.max(axis=0)
                else:
                    out[n, i, j] = np.sqrt((win ** 2).mean(axis=0))
    if act == 1:
        out = np.maximum(out, 0)
    elif act == 3:
        out = np.clip(out, 0, 6)
    return out


OPS = {"avg": Op.AVERAGE_POOL_2D, "max": Op.MAX_POOL_2D, "l2": Op.L2_POOL_2D}


@pytest.mark.parametrize("kind", ["avg", "max", "l2"])
@pytest.mark.parametrize("nchw", [False, True])
@pytest.mark.parametrize("pads,strides,filt", [
    ((0, 0, 0, 0), (1, 1), (2, 2)),
    ((1, 2, 0, 1), (2, 1), (3, 2)),
    ((2, 2, 2, 2), (3, 2), (3, 3)),
])
def test_float_explicit(kind, nchw, pads, strides, filt):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 5, 7, 3)).astype(np.float32)
    want = naive_pool(x, kind, pads, strides, filt, act=1)
    xin = x.transpose(0, 3, 1, 2) if nchw else x
    ins = [tensor(xin)] + [i32(v) for v in (*pads, *strides, *filt, 1)] + [boolean(nchw)]
    got = run(OPS[kind], ins)
    if nchw:
        got = got.transpose(0, 2, 3, 1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["avg", "max", "l2"])
def test_implicit_same_matches_explicit(kind):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(1, 6, 5, 2)).astype(np.float32)
    pl, pr = explicit_padding(5, 2, 3, 1)
    pt, pb = explicit_padding(6, 2, 3, 1)
    got = run(OPS[kind], [tensor(x), i32(1), i32(2), i32(2), i32(3), i32(3), i32(0)])
    want = naive_pool(x, kind, (pl, pr, pt, pb), (2, 2), (3, 3))
    assert got.shape == (1, 3, 3, 2)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # VALID: no padding
    got = run(OPS[kind], [tensor(x), i32(2), i32(2), i32(2), i32(3), i32(3), i32(0)])
    np.testing.assert_allclose(got, naive_pool(x, kind, (0, 0, 0, 0), (2, 2), (3, 3)), rtol=1e-5, atol=1e-6)


def test_explicit_padding_helper():
    assert explicit_padding(5, 2, 3, 1) == (1, 1)
    assert explicit_padding(4, 2, 3, 1) == (0, 1)
    assert explicit_padding(4, 1, 1, 1) == (0, 0)
    assert explicit_padding(5, 2, 3, 2) == (0, 0)


def test_float16():
    x = np.arange(16, dtype=np.float16).reshape(1, 4, 4, 1)
    got = run(Op.MAX_POOL_2D, [tensor(x, T.TENSOR_FLOAT16)] + [i32(v) for v in (2, 2, 2, 2, 2, 0)])
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got.reshape(2, 2), [[5, 7], [13, 15]])


def test_quant_average_rounds_stored_values_half_away_from_zero():
    # uint8 [1, 2] -> 1.5 -> 2; int8 [-127, -126] -> -126.5 -> -127 (TFLite kernels)
    u = tensor(np.array([1, 2], np.uint8).reshape(1, 1, 2, 1), T.TENSOR_QUANT8_ASYMM, 0.5, 0)
    ins = [i32(v) for v in (0, 0, 0, 0, 1, 1, 2, 1, 0)]
    assert run(Op.AVERAGE_POOL_2D, [u] + ins).item() == 2
    s = tensor(np.array([-127, -126], np.int8).reshape(1, 1, 2, 1), T.TENSOR_QUANT8_ASYMM_SIGNED, 0.5, 0)
    assert run(Op.AVERAGE_POOL_2D, [s] + ins).item() == -127


def test_quant_padding_excluded_from_count_and_activation():
    x = np.array([[10, 20], [30, 40]], np.uint8).reshape(1, 2, 2, 1)
    ins = [tensor(x, T.TENSOR_QUANT8_ASYMM, 0.5, 20)] + [i32(v) for v in (1, 1, 1, 1, 1, 1, 2, 2, 0)]
    got = run(Op.AVERAGE_POOL_2D, ins)
    want = np.round(naive_pool(x.astype(np.float64), "avg", (1, 1, 1, 1), (1, 1), (2, 2)) + 1e-9)
    np.testing.assert_array_equal(got, want)
    # RELU6 with scale 0.5, zero point 20: clamp to [20, 32]
    ins[-1] = i32(3)
    got = run(Op.MAX_POOL_2D, ins)
    assert got.min() == 20 and got.max() == 32


def test_quant_max_signed():
    x = np.array([-5, 3, -128, 7], np.int8).reshape(1, 2, 2, 1)
    got = run(Op.MAX_POOL_2D, [tensor(x, T.TENSOR_QUANT8_ASYMM_SIGNED, 1.0, -3)]
              + [i32(v) for v in (2, 1, 1, 2, 2, 0)])
    assert got.shape == (1, 1, 1, 1) and got.item() == 7


@pytest.mark.parametrize("type_,dt", [(T.TENSOR_QUANT8_ASYMM, np.uint8), (T.TENSOR_QUANT8_ASYMM_SIGNED, np.int8)])
@pytest.mark.parametrize("nchw", [False, True])
def test_quant_global_pooling(type_, dt, nchw):
    """One window over the whole input (the reduction without window views):
    TFLite's rounding of stored values, the activation, both layouts."""
    info = np.iinfo(dt)
    x = np.random.default_rng(3).integers(info.min, info.max + 1, (2, 3, 4, 5)).astype(dt)
    n = 12
    acc = x.astype(np.int64).sum(axis=(1, 2), keepdims=True)
    avg = np.sign(acc) * ((np.abs(acc) + n // 2) // n)
    for op, want in ((Op.AVERAGE_POOL_2D, avg), (Op.MAX_POOL_2D, x.max(axis=(1, 2), keepdims=True))):
        for act in (0, 1):
            lo = max(int(info.min), 7) if act else int(info.min)  # NOTE: RELU with zero point 7, scale 1
            xin = x.transpose(0, 3, 1, 2) if nchw else x
            ins = [tensor(np.ascontiguousarray(xin), type_, 1.0, 7)] + [i32(v) for v in (2, 1, 1, 4, 3, act)]
            ins.append(boolean(nchw))
            got = run(op, ins)
            if nchw:
                got = got.transpose(0, 2, 3, 1)
            np.testing.assert_array_equal(got, np.clip(want, lo, info.max))


def test_zero_batch():
    x = np.zeros((0, 4, 4, 3), np.float32)
    got = run(Op.AVERAGE_POOL_2D, [tensor(x)] + [i32(v) for v in (2, 2, 2, 2, 2, 0)] + [boolean(False)])
    assert got.shape == (0, 2, 2, 3)
    got = run(Op.MAX_POOL_2D, [tensor(x.transpose(0, 3, 1, 2))] + [i32(v) for v in (2, 2, 2, 2, 2, 0)]
              + [boolean(True)])
    assert got.shape == (0, 3, 2, 2)


@pytest.mark.parametrize("ins,msg", [
    ([i32(v) for v in (2, 0, 0, 0, 1, 1, 2, 2, 0)], "padding"),       # padding >= filter
    ([i32(v) for v in (0, 0, 0, 0, 0, 1, 2, 2, 0)], "positive"),      # zero stride
    ([i32(v) for v in (0, 0, 0, 0, 1, 1, 2, 2, 7)], "activation"),    # bad activation
    ([i32(v) for v in (1, 0, 1, 2, 2, 0)], "positive"),               # implicit, zero stride
])
def test_runtime_errors(ins, msg):
    x = tensor(np.zeros((1, 4, 4, 1), np.float32))
    with pytest.raises(OpExecutionError, match=msg):
        run(Op.AVERAGE_POOL_2D, [x] + ins)


def test_runtime_rank_and_quant_mismatch():
    with pytest.raises(OpExecutionError, match="4-D"):
        run(Op.MAX_POOL_2D, [tensor(np.zeros((4, 4, 1), np.float32))] + [i32(v) for v in (1, 1, 1, 2, 2, 0)])
    q = tensor(np.zeros((1, 2, 2, 1), np.uint8), T.TENSOR_QUANT8_ASYMM, 0.5, 0)
    with pytest.raises(OpExecutionError, match="scale"):
        run(Op.MAX_POOL_2D, [q] + [i32(v) for v in (1, 1, 1, 2, 2, 0)], scale=0.25)


def sig(op, in_types, out_type, version):
    return match_signature(REGISTRY[op], in_types, [out_type], version)


def test_signatures():
    imp = [T.INT32] * 6
    exp = [T.INT32] * 9
    assert sig(Op.AVERAGE_POOL_2D, [T.TENSOR_FLOAT32] + imp, T.TENSOR_FLOAT32, V1_0).version == V1_0
    assert sig(Op.MAX_POOL_2D, [T.TENSOR_QUANT8_ASYMM] + exp, T.TENSOR_QUANT8_ASYMM, V1_0)
    assert sig(Op.L2_POOL_2D, [T.TENSOR_FLOAT16] + exp + [T.BOOL], T.TENSOR_FLOAT16, V1_2)
    with pytest.raises(OpValidationError):  # no quantized L2 pooling
        sig(Op.L2_POOL_2D, [T.TENSOR_QUANT8_ASYMM] + imp, T.TENSOR_QUANT8_ASYMM, V1_2)
    with pytest.raises(OpValidationError):  # layout needs HAL 1.2
        sig(Op.AVERAGE_POOL_2D, [T.TENSOR_FLOAT32] + imp + [T.BOOL], T.TENSOR_FLOAT32, V1_1)
    with pytest.raises(OpValidationError):  # signed needs HAL 1.3
        sig(Op.MAX_POOL_2D, [T.TENSOR_QUANT8_ASYMM_SIGNED] + imp, T.TENSOR_QUANT8_ASYMM_SIGNED, V1_2)
    with pytest.raises(OpValidationError):  # 9 inputs
        sig(Op.MAX_POOL_2D, [T.TENSOR_FLOAT32] + [T.INT32] * 8, T.TENSOR_FLOAT32, V1_2)
    with pytest.raises(OpValidationError):  # output type differs
        sig(Op.MAX_POOL_2D, [T.TENSOR_FLOAT32] + imp, T.TENSOR_FLOAT16, V1_2)
    with pytest.raises(OpValidationError):  # float scalar parameter
        sig(Op.MAX_POOL_2D, [T.TENSOR_FLOAT32] + [T.FLOAT32] + imp[1:], T.TENSOR_FLOAT32, V1_2)


# --------------------------------------------------------------------------
# the float window sum: one add per window position, numpy's reduction's bits


def test_window_sum_has_the_bits_of_numpys_reduction():
    """window_sum_f32 replaces ``win.sum(axis=(-2, -1), dtype=float32)`` where it is faster; on every layout,
    window, stride and value (negative zeros, infinities, NaNs) the bytes must be the same."""
    from numpy.lib.stride_tricks import sliding_window_view

    from nnhal.ops.pooling import _SUM_BY_POSITION_MIN, window_sum_f32

    rng = np.random.default_rng(1)
    fast = 0
    for _ in range(300):
        b, h, w, c = (int(rng.integers(1, 4)), int(rng.integers(1, 60)), int(rng.integers(1, 60)),
                      int(rng.integers(1, 9)))
        fh, fw = int(rng.integers(1, min(h, 12) + 1)), int(rng.integers(1, min(w, 12) + 1))
        sh, sw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        x = (rng.standard_normal((b, h, w, c)) * 10.0 ** int(rng.integers(-3, 6))).astype(np.float32)
        kind = int(rng.integers(0, 4))
        if kind == 1:
            x[x > 0.5] = -0.0
        elif kind == 2:
            x[rng.random(x.shape) < 0.01] = np.inf
        elif kind == 3:
            x[rng.random(x.shape) < 0.01] = np.nan
        for nchw in (False, True):
            xx = np.ascontiguousarray(x.transpose(0, 3, 1, 2)).transpose(0, 2, 3, 1) if nchw else x
            win = sliding_window_view(xx, (fh, fw), axis=(1, 2))[:, ::sh, ::sw]
            assert window_sum_f32(win).tobytes() == win.sum(axis=(-2, -1), dtype=np.float32).tobytes()
            fast += (not nchw and c > 1 and fh * fw > 1 and win[..., 0, 0, 0].size >= _SUM_BY_POSITION_MIN)
    assert fast >= 50  # NOTE: the by-position path was taken often enough to mean something


def test_large_float_average_pool_is_numpys_reduction_bit_for_bit():
    """A large window over many positions (avg_pool_float_2's form) through validate, prepare and execute:
    the bytes of numpy's reduction over the window view, divided by the count."""
    from numpy.lib.stride_tricks import sliding_window_view

    rng = np.random.default_rng(2)
    x = rng.normal(size=(2, 40, 44, 3)).astype(np.float32) * 100
    pads, strides, filt = (5, 5, 5, 5), (2, 2), (20, 20)
    ins = [tensor(x)] + [i32(v) for v in (*pads, *strides, *filt, 0)]
    got = run(OPS["avg"], ins)
    padded = np.zeros((2, 50, 54, 3), np.float32)
    padded[:, 5:45, 5:49] = x
    win = sliding_window_view(padded, (20, 20), axis=(1, 2))[:, ::2, ::2]
    counts = sliding_window_view(np.pad(np.ones((40, 44), np.float32), 5), (20, 20))[::2, ::2].sum(axis=(-2, -1))
    want = (win.sum(axis=(-2, -1), dtype=np.float32) / counts[None, :, :, None].astype(np.float32))
    assert got.shape == want.shape and got.tobytes() == want.astype(np.float32).tobytes()
