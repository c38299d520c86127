"""CONV_2D DEPTHWISE_CONV_2D GROUPED_CONV_2D TRANSPOSE_CONV_2D FULLY_CONNECTED
against slow direct references written here (loops over output positions,
int64 sums, then the TFLite requantization of quant.py), bit for bit for the
quantized types; NCHW/NHWC, padding schemes, strides, dilation, depth
multiplier, groups, per-channel filters, zero batches, prepared vs
unprepared execution, and the validation / run-time error paths."""

from __future__ import annotations

import numpy as np
import pytest

from nnhal.hal import OperandLifeTime, OperandType, OperationType, SymmPerChannelQuantParams
from nnhal.ops import conv_kernels as ck
from nnhal.ops.base import (
    NUMPY_DTYPE,
    V1_0,
    V1_2,
    ExecContext,
    OperandInfo,
    OpExecutionError,
    OpInfo,
    OpValidationError,
    OutputSpec,
    Tensor,
    match_signature,
)
from nnhal.ops.quant import QUANT_RANGE, activation_range, multiply_by_quantized_multiplier, quantize_multiplier
from nnhal.ops.registry import REGISTRY
from nnhal.ops.run import prepare_operation

T = OperandType
Op = OperationType
F32, F16, Q8, Q8S, PC, I32 = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_QUANT8_ASYMM,
                              T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_QUANT8_SYMM_PER_CHANNEL, T.TENSOR_INT32)
CONST = OperandLifeTime.CONSTANT_COPY
rng = np.random.default_rng(1234)


# --------------------------------------------------------------------------
# building and running operations


class Operand:
    def __init__(self, t, data, scale=0.0, zp=0, cq=None, const=True):
        self.t, self.data, self.scale, self.zp, self.cq, self.const = t, data, scale, zp, cq, const

    def tensor(self) -> Tensor:
        data = None if self.data is None else np.asarray(self.data, NUMPY_DTYPE[self.t])
        return Tensor(self.t, data, self.scale, self.zp, self.cq)

    def info(self) -> OperandInfo:
        data = None if self.data is None else np.asarray(self.data, NUMPY_DTYPE[self.t])
        dims = () if data is None else tuple(data.shape)
        return OperandInfo(self.t, dims, self.scale, self.zp, self.cq,
                           CONST if self.const else OperandLifeTime.SUBGRAPH_INPUT, data if self.const else None)


def scalar(v) -> Operand:
    return Operand(T.BOOL if isinstance(v, bool) else T.INT32, v)


def run(op, operands: list[Operand], out_t, out_scale=0.0, out_zp=0, prepared=True, version=V1_2 + 1):
    p = prepare_operation(op, [o.info() for o in operands], [OperandInfo(out_t, (), out_scale, out_zp)],
                          version=version)
    if not prepared:
        p.state = None  # NOTE: execute must also work without a prepared state (non-constant operands)
    return p.run([o.tensor() for o in operands])[0]


# --------------------------------------------------------------------------
# slow references (NHWC; loops over output positions)


def ref_conv(x, w, pads, strides, dil=(1, 1), groups=1):
    """x [N,H,W,C] (int64 zero-point shifted or float64), w [Cout,kh,kw,C/groups]."""
    n, h, wd, c = x.shape
    cout, kh, kw, cg = w.shape
    pt, pb, pl, pr = pads
    sh, sw = strides
    dh, dw = dil
    oh = (h + pt + pb - ((kh - 1) * dh + 1)) // sh + 1
    ow = (wd + pl + pr - ((kw - 1) * dw + 1)) // sw + 1
    og = cout // groups
    out = np.zeros((n, oh, ow, cout), x.dtype)
    for b in range(n):
        for oy in range(oh):
            for ox in range(ow):
                for co in range(cout):
                    g = co // og
                    s = 0
                    for i in range(kh):
                        for j in range(kw):
                            iy, ix = oy * sh - pt + i * dh, ox * sw - pl + j * dw
                            if 0 <= iy < h and 0 <= ix < wd:
                                s += np.dot(x[b, iy, ix, g * cg:(g + 1) * cg], w[co, i, j])
                    out[b, oy, ox, co] = s
    return out


def ref_depthwise(x, w, pads, strides, dil, mult):
    """Depthwise is grouped convolution with one input channel per group:
    output channel oc reads input channel oc // mult."""
    assert w.shape[3] == x.shape[3] * mult
    return ref_conv(x, w.transpose(3, 1, 2, 0), pads, strides, dil, groups=x.shape[3])


def ref_transpose(x, w, pads, strides, out_hw):
    n, h, wd, c = x.shape
    cout, kh, kw, _ = w.shape
    pt, pl = pads
    sh, sw = strides
    oh, ow = out_hw
    out = np.zeros((n, oh, ow, cout), x.dtype)
    for b in range(n):
        for iy in range(h):
            for ix in range(wd):
                for i in range(kh):
                    for j in range(kw):
                        oy, ox = iy * sh - pt + i, ix * sw - pl + j
                        if 0 <= oy < oh and 0 <= ox < ow:
                            out[b, oy, ox] += w[:, i, j, :] @ x[b, iy, ix]
    return out


def ref_requant(acc, bias, in_scale, f_scales, out_scale, out_zp, act, t):
    """Android: double(float(in*filter)) / out_scale -> QuantizeMultiplier per channel."""
    res = np.empty(acc.shape, np.int64)
    for ch in range(acc.shape[-1]):
        ips = float(np.float32(np.float32(in_scale) * np.float32(f_scales[ch])))
        q, sh = quantize_multiplier(ips / float(np.float32(out_scale)))
        res[..., ch] = multiply_by_quantized_multiplier(acc[..., ch] + bias[ch], q, sh)
    lo, hi = activation_range(act, out_scale, out_zp, t)
    return np.clip(res + out_zp, lo, hi)


def fact(x, act):
    return {0: x, 1: np.maximum(x, 0), 2: np.clip(x, -1, 1), 3: np.clip(x, 0, 6)}[act]


def rand_q(t, shape, zp_spread=None):
    lo, hi = QUANT_RANGE[t]
    return rng.integers(lo, hi + 1, size=shape)


def nchw(a):
    return np.ascontiguousarray(a.transpose(0, 3, 1, 2))


# --------------------------------------------------------------------------
# CONV_2D


CONV_CASES = [
    # x shape, (cout, kh, kw), pads (t, b, l, r), strides (h, w), dilation (h, w)
    ((2, 5, 6, 3), (4, 3, 3), (1, 1, 1, 1), (1, 1), (1, 1)),
    ((1, 7, 7, 2), (3, 3, 2), (0, 2, 1, 0), (2, 3), (1, 1)),
    ((1, 8, 9, 3), (2, 2, 3), (1, 0, 2, 1), (1, 2), (2, 3)),
    ((3, 4, 4, 5), (6, 1, 1), (0, 0, 0, 0), (1, 1), (1, 1)),
    ((1, 6, 5, 4), (3, 1, 1), (0, 0, 0, 0), (2, 2), (1, 1)),
]


def conv_operands(x, w, b, pads, strides, dil, act, layout, t, f_t, bias_t, xq=(0.0, 0), fq=(0.0, 0), cq=None,
                  bscale=0.0, const=True):
    ops = [Operand(t, x, *xq), Operand(f_t, w, fq[0], fq[1], cq, const=const), Operand(bias_t, b, bscale, const=const),
           scalar(pads[2]), scalar(pads[3]), scalar(pads[0]), scalar(pads[1]), scalar(strides[1]), scalar(strides[0]),
           scalar(act)]
    if layout is not None:
        ops.append(scalar(layout))
        if dil != (1, 1):
            ops += [scalar(dil[1]), scalar(dil[0])]
    return ops


@pytest.mark.parametrize("case", CONV_CASES)
@pytest.mark.parametrize("use_nchw", [False, True])
@pytest.mark.parametrize("act", [0, 1, 3])
def test_conv_float(case, use_nchw, act):
    xs, (cout, kh, kw), pads, strides, dil = case
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal((cout, kh, kw, xs[3])).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    want = fact(ref_conv(x.astype(np.float64), w.astype(np.float64), pads, strides, dil) + b, act)
    xin = nchw(x) if use_nchw else x
    got = run(Op.CONV_2D, conv_operands(xin, w, b, pads, strides, dil, act, use_nchw, F32, F32, F32), F32)
    if use_nchw:
        got = got.transpose(0, 2, 3, 1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", CONV_CASES)
@pytest.mark.parametrize("t", [Q8, Q8S])
@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("act", [0, 1, 2])
@pytest.mark.parametrize("prepared", [True, False])
def test_conv_quant_bit_exact(case, t, per_channel, act, prepared):
    xs, (cout, kh, kw), pads, strides, dil = case
    lo, hi = QUANT_RANGE[t]
    x = rand_q(t, xs)
    xzp = int(rng.integers(lo, hi + 1))
    xscale = 0.05
    if per_channel:
        w = rng.integers(-127, 128, size=(cout, kh, kw, xs[3]))
        fscales = list(rng.uniform(0.002, 0.02, cout).astype(np.float32))
        fq, cq, f_t, wzp = (0.0, 0), SymmPerChannelQuantParams(scales=fscales, channelDim=0), PC, 0
        bscale = 0.0
    else:
        w = rand_q(t, (cout, kh, kw, xs[3]))
        wzp = int(rng.integers(lo, hi + 1))
        fscales = [0.01] * cout
        fq, cq, f_t = (0.01, wzp), None, t
        bscale = float(np.float32(np.float32(xscale) * np.float32(0.01)))
    b = rng.integers(-3000, 3000, size=cout)
    oscale, ozp = 0.07 * (kh * kw * xs[3]) ** 0.5 / 4, int(rng.integers(lo, hi + 1))
    acc = ref_conv(x.astype(np.int64) - xzp, w.astype(np.int64) - wzp, pads, strides, dil)
    want = ref_requant(acc, b, xscale, fscales, oscale, ozp, act, t)
    for use_nchw in (False, True):
        xin = nchw(x) if use_nchw else x
        got = run(Op.CONV_2D, conv_operands(xin, w, b, pads, strides, dil, act, use_nchw, t, f_t, I32,
                                            (xscale, xzp), fq, cq, bscale), t, oscale, ozp, prepared=prepared)
        if use_nchw:
            got = got.transpose(0, 2, 3, 1)
        assert got.dtype == NUMPY_DTYPE[t]
        np.testing.assert_array_equal(got, want)


def test_conv_quant_long_reduction_blocks():
    """K * max|x| * max|w| > 2^24: the GEMM runs in exact blocks."""
    xs, cout = (1, 3, 3, 1300), 3
    x = rng.choice([0, 255], size=xs)
    w = rng.choice([0, 255], size=(cout, 1, 1, xs[3]))
    b = np.zeros(cout, np.int64)
    assert ck.exact_block(xs[3], 255, 255) is not None
    acc = ref_conv(x.astype(np.int64), w.astype(np.int64), (0, 0, 0, 0), (1, 1))
    xscale, fscale = 0.5, 0.5
    oscale = 3000.0
    want = ref_requant(acc, b, xscale, [fscale] * cout, oscale, 0, 0, Q8)
    got = run(Op.CONV_2D, conv_operands(x, w, b, (0, 0, 0, 0), (1, 1), (1, 1), 0, None, Q8, Q8, I32,
                                        (xscale, 0), (fscale, 0), None, 0.25), Q8, oscale, 0)
    np.testing.assert_array_equal(got, want)


def test_conv_implicit_padding_and_float16():
    x = rng.standard_normal((1, 7, 6, 2)).astype(np.float16)
    w = rng.standard_normal((3, 3, 2, 2)).astype(np.float16)
    b = rng.standard_normal(3).astype(np.float16)
    for scheme, sh, sw in ((1, 2, 2), (2, 1, 2), (1, 1, 1)):
        pt, pb = ck.explicit_padding(7, sh, 1, 3, scheme)
        pl, pr = ck.explicit_padding(6, sw, 1, 2, scheme)
        want = ref_conv(x.astype(np.float64), w.astype(np.float64), (pt, pb, pl, pr), (sh, sw)) + b
        ops = [Operand(F16, x), Operand(F16, w), Operand(F16, b), scalar(scheme), scalar(sw), scalar(sh), scalar(0)]
        got = run(Op.CONV_2D, ops, F16)
        assert got.dtype == np.float16
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=5e-3, atol=5e-3)


def test_explicit_padding_same():
    assert ck.explicit_padding(224, 2, 1, 3, 1) == (0, 1)
    assert ck.explicit_padding(5, 1, 2, 3, 1) == (2, 2)
    assert ck.explicit_padding(5, 1, 1, 3, 2) == (0, 0)
    assert ck.out_size(224, 3, 2, 1, 0, 1) == 112


def test_conv_zero_batch():
    x = np.zeros((0, 4, 4, 2), np.float32)
    w = rng.standard_normal((3, 2, 2, 2)).astype(np.float32)
    got = run(Op.CONV_2D, conv_operands(x, w, np.zeros(3, np.float32), (0, 0, 0, 0), (2, 2), (1, 1), 0, False,
                                        F32, F32, F32), F32)
    assert got.shape == (0, 2, 2, 3)
    got = run(Op.CONV_2D, conv_operands(nchw(x).astype(np.uint8), w.astype(np.uint8), np.zeros(3, np.int32),
                                        (0, 0, 0, 0), (2, 2), (1, 1), 0, True, Q8, Q8, I32, (0.5, 1), (0.5, 2),
                                        None, 0.25), Q8, 1.0, 0)
    assert got.shape == (0, 3, 2, 2) and got.dtype == np.uint8
    # as the reference, an empty output skips execution and so the bias scale check
    got = run(Op.CONV_2D, conv_operands(x.astype(np.uint8), w.astype(np.uint8), np.zeros(3, np.int32),
                                        (0, 0, 0, 0), (2, 2), (1, 1), 0, None, Q8, Q8, I32, (0.5, 1), (0.5, 2),
                                        None, 0.3), Q8, 1.0, 0)
    assert got.shape == (0, 2, 2, 3)


def test_conv_errors():
    x = rng.standard_normal((1, 4, 4, 2)).astype(np.float32)
    w = rng.standard_normal((3, 2, 2, 2)).astype(np.float32)
    b = np.zeros(3, np.float32)
    # wrong operand type (bias of another type) -> signature mismatch
    with pytest.raises(OpValidationError):
        match_signature(REGISTRY[Op.CONV_2D], [F32, F32, I32] + [T.INT32] * 4, [F32])
    # layout flag needs HAL 1.2
    with pytest.raises(OpValidationError):
        match_signature(REGISTRY[Op.CONV_2D], [F32, F32, F32] + [T.INT32] * 4 + [T.BOOL], [F32], V1_0)
    # only one dilation factor
    ops = conv_operands(x, w, b, (0, 0, 0, 0), (1, 1), (1, 1), 0, False, F32, F32, F32) + [scalar(2)]
    with pytest.raises(OpValidationError):
        run(Op.CONV_2D, ops, F32)
    # rank 3 input rejected at model time
    with pytest.raises(OpValidationError):
        run(Op.CONV_2D, conv_operands(x[0], w, b, (0, 0, 0, 0), (1, 1), (1, 1), 0, None, F32, F32, F32), F32)
    # channel mismatch / bad stride / padding wider than the filter at run time
    with pytest.raises(OpExecutionError):
        run(Op.CONV_2D, conv_operands(x, w[..., :1], b, (0, 0, 0, 0), (1, 1), (1, 1), 0, None, F32, F32, F32), F32)
    with pytest.raises(OpExecutionError):
        run(Op.CONV_2D, conv_operands(x, w, b, (0, 0, 0, 0), (0, 1), (1, 1), 0, None, F32, F32, F32), F32)
    with pytest.raises(OpExecutionError):
        run(Op.CONV_2D, conv_operands(x, w, b, (2, 0, 0, 0), (1, 1), (1, 1), 0, None, F32, F32, F32), F32)
    # quantized: bias scale != input scale * filter scale fails at execution
    xq, wq, bq = x.astype(np.uint8), w.astype(np.uint8), np.zeros(3, np.int32)
    ops = conv_operands(xq, wq, bq, (0, 0, 0, 0), (1, 1), (1, 1), 0, None, Q8, Q8, I32, (0.5, 0), (0.5, 0), None, 0.3)
    with pytest.raises(OpExecutionError):
        run(Op.CONV_2D, ops, Q8, 1.0, 0)
    # before HAL 1.2: output scale must exceed input scale * filter scale
    ops = conv_operands(xq, wq, bq, (0, 0, 0, 0), (1, 1), (1, 1), 0, None, Q8, Q8, I32, (0.5, 0), (0.5, 0), None, 0.25)
    with pytest.raises(OpValidationError):
        run(Op.CONV_2D, ops, Q8, 0.2, 0, version=V1_0)
    run(Op.CONV_2D, ops, Q8, 0.2, 0, version=V1_2)
    # per-channel filter with channelDim != 0
    cq = SymmPerChannelQuantParams(scales=[0.5] * 3, channelDim=3)
    ops = conv_operands(xq, w.astype(np.int8), bq, (0, 0, 0, 0), (1, 1), (1, 1), 0, None, Q8, PC, I32, (0.5, 0),
                        (0.0, 0), cq)
    with pytest.raises(OpValidationError):
        run(Op.CONV_2D, ops, Q8, 1.0, 0)


# --------------------------------------------------------------------------
# DEPTHWISE_CONV_2D


DW_CASES = [
    # x shape, (kh, kw), mult, pads, strides, dilation
    ((2, 6, 7, 3), (3, 3), 1, (1, 1, 1, 1), (1, 1), (1, 1)),
    ((1, 9, 9, 4), (3, 3), 1, (0, 1, 0, 1), (2, 2), (1, 1)),
    ((1, 8, 10, 2), (2, 3), 3, (1, 0, 2, 1), (3, 3), (1, 1)),
    ((1, 9, 9, 3), (3, 2), 2, (2, 2, 1, 1), (1, 1), (2, 3)),
    ((1, 11, 11, 2), (3, 3), 1, (1, 1, 1, 1), (2, 2), (2, 2)),
]


def dw_operands(x, w, b, pads, strides, dil, mult, act, layout, t, f_t, bias_t, xq=(0.0, 0), fq=(0.0, 0),
                cq=None, bscale=0.0):
    ops = [Operand(t, x, *xq), Operand(f_t, w, fq[0], fq[1], cq), Operand(bias_t, b, bscale),
           scalar(pads[2]), scalar(pads[3]), scalar(pads[0]), scalar(pads[1]), scalar(strides[1]), scalar(strides[0]),
           scalar(mult), scalar(act)]
    if layout is not None:
        ops.append(scalar(layout))
        if dil != (1, 1):
            ops += [scalar(dil[1]), scalar(dil[0])]
    return ops


@pytest.mark.parametrize("case", DW_CASES)
@pytest.mark.parametrize("use_nchw", [False, True])
def test_depthwise_float(case, use_nchw):
    xs, (kh, kw), mult, pads, strides, dil = case
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal((1, kh, kw, xs[3] * mult)).astype(np.float32)
    b = rng.standard_normal(xs[3] * mult).astype(np.float32)
    want = fact(ref_depthwise(x.astype(np.float64), w.astype(np.float64), pads, strides, dil, mult) + b, 3)
    xin = nchw(x) if use_nchw else x
    layout = use_nchw if (use_nchw or dil != (1, 1)) else None
    got = run(Op.DEPTHWISE_CONV_2D, dw_operands(xin, w, b, pads, strides, dil, mult, 3, layout, F32, F32, F32), F32)
    if use_nchw:
        got = got.transpose(0, 2, 3, 1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", DW_CASES)
@pytest.mark.parametrize("t", [Q8, Q8S])
@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("act", [0, 3])
def test_depthwise_quant_bit_exact(case, t, per_channel, act):
    xs, (kh, kw), mult, pads, strides, dil = case
    lo, hi = QUANT_RANGE[t]
    cout = xs[3] * mult
    x = rand_q(t, xs)
    xzp, xscale = int(rng.integers(lo, hi + 1)), 0.1
    if per_channel:
        w = rng.integers(-127, 128, size=(1, kh, kw, cout))
        fscales = list(rng.uniform(0.005, 0.05, cout).astype(np.float32))
        fq, cq, f_t, wzp, bscale = (0.0, 0), SymmPerChannelQuantParams(scales=fscales, channelDim=3), PC, 0, 0.0
    else:
        w = rand_q(t, (1, kh, kw, cout))
        wzp = int(rng.integers(lo, hi + 1))
        fscales = [0.02] * cout
        fq, cq, f_t = (0.02, wzp), None, t
        bscale = float(np.float32(np.float32(xscale) * np.float32(0.02)))
    b = rng.integers(-2000, 2000, size=cout)
    oscale, ozp = 0.4, int(rng.integers(lo, hi + 1))
    acc = ref_depthwise(x.astype(np.int64) - xzp, w.astype(np.int64) - wzp, pads, strides, dil, mult)
    want = ref_requant(acc, b, xscale, fscales, oscale, ozp, act, t)
    for use_nchw in (False, True):
        xin = nchw(x) if use_nchw else x
        layout = use_nchw if (use_nchw or dil != (1, 1)) else None
        got = run(Op.DEPTHWISE_CONV_2D, dw_operands(xin, w, b, pads, strides, dil, mult, act, layout, t, f_t, I32,
                                                    (xscale, xzp), fq, cq, bscale), t, oscale, ozp)
        if use_nchw:
            got = got.transpose(0, 2, 3, 1)
        np.testing.assert_array_equal(got, want)


def test_depthwise_errors():
    x = rng.standard_normal((1, 4, 4, 2)).astype(np.float32)
    w = rng.standard_normal((1, 2, 2, 4)).astype(np.float32)
    b = np.zeros(4, np.float32)
    with pytest.raises(OpExecutionError):  # multiplier * channels != filter channels
        run(Op.DEPTHWISE_CONV_2D, dw_operands(x, w, b, (0, 0, 0, 0), (1, 1), (1, 1), 1, 0, None, F32, F32, F32), F32)
    cq = SymmPerChannelQuantParams(scales=[0.5] * 4, channelDim=0)
    ops = dw_operands(x.astype(np.uint8), w.astype(np.int8), b.astype(np.int32), (0, 0, 0, 0), (1, 1), (1, 1), 2, 0,
                      None, Q8, PC, I32, (0.5, 0), (0.0, 0), cq)
    with pytest.raises(OpValidationError):
        run(Op.DEPTHWISE_CONV_2D, ops, Q8, 1.0, 0)


# --------------------------------------------------------------------------
# GROUPED_CONV_2D


@pytest.mark.parametrize("t", [F32, Q8, Q8S])
@pytest.mark.parametrize("use_nchw", [False, True])
def test_grouped(t, use_nchw):
    xs, g, cout, kh, kw = (2, 5, 6, 6), 3, 6, 3, 2
    pads, strides = (1, 0, 0, 1), (2, 1)
    if t == F32:
        x = rng.standard_normal(xs).astype(np.float32)
        w = rng.standard_normal((cout, kh, kw, xs[3] // g)).astype(np.float32)
        b = rng.standard_normal(cout).astype(np.float32)
        want = fact(ref_conv(x.astype(np.float64), w.astype(np.float64), pads, strides, groups=g) + b, 1)
        xq = fq = (0.0, 0)
        bt, bscale, oscale, ozp = F32, 0.0, 0.0, 0
    else:
        lo, hi = QUANT_RANGE[t]
        x, w = rand_q(t, xs), rand_q(t, (cout, kh, kw, xs[3] // g))
        xq, fq = (0.1, int(rng.integers(lo, hi + 1))), (0.03, int(rng.integers(lo, hi + 1)))
        b = rng.integers(-500, 500, size=cout)
        bt, bscale = I32, float(np.float32(np.float32(0.1) * np.float32(0.03)))
        oscale, ozp = 0.3, int(rng.integers(lo, hi + 1))
        acc = ref_conv(x.astype(np.int64) - xq[1], w.astype(np.int64) - fq[1], pads, strides, groups=g)
        want = ref_requant(acc, b, 0.1, [0.03] * cout, oscale, ozp, 1, t)
    xin = nchw(x) if use_nchw else x
    ops = [Operand(t, xin, *xq), Operand(t, w, *fq), Operand(bt, b, bscale), scalar(pads[2]), scalar(pads[3]),
           scalar(pads[0]), scalar(pads[1]), scalar(strides[1]), scalar(strides[0]), scalar(g), scalar(1),
           scalar(use_nchw)]
    got = run(Op.GROUPED_CONV_2D, ops, t, oscale, ozp)
    if use_nchw:
        got = got.transpose(0, 2, 3, 1)
    if t == F32:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    else:
        np.testing.assert_array_equal(got, want)
    with pytest.raises(OpExecutionError):  # groups do not divide the channels
        ops[9] = scalar(4)
        run(Op.GROUPED_CONV_2D, ops, t, oscale, ozp)


# --------------------------------------------------------------------------
# TRANSPOSE_CONV_2D


@pytest.mark.parametrize("t", [F32, Q8, Q8S, "pc"])
@pytest.mark.parametrize("use_nchw", [False, True])
@pytest.mark.parametrize("geom", [((1, 3, 4, 2), 3, 3, (2, 2), (1, 0, 1, 0)), ((2, 4, 3, 3), 2, 4, (3, 1), (0, -1, 2, 1))])
def test_transpose_conv(t, use_nchw, geom):
    xs, cout, k, strides, pads = geom
    kh, kw = k, k - 1
    pt, pb, pl, pr = pads
    oh = xs[1] * strides[0] + kh - strides[0] - pt - pb
    ow = xs[2] * strides[1] + kw - strides[1] - pl - pr
    per_channel = t == "pc"
    t = Q8 if per_channel else t
    if t == F32:
        x = rng.standard_normal(xs).astype(np.float32)
        w = rng.standard_normal((cout, kh, kw, xs[3])).astype(np.float32)
        b = rng.standard_normal(cout).astype(np.float32)
        want = ref_transpose(x.astype(np.float64), w.astype(np.float64), (pt, pl), strides, (oh, ow)) + b
        xq, fq, cq, f_t, bt, bscale, oscale, ozp = (0.0, 0), (0.0, 0), None, F32, F32, 0.0, 0.0, 0
    else:
        lo, hi = QUANT_RANGE[t]
        x = rand_q(t, xs)
        xq = (0.2, int(rng.integers(lo, hi + 1)))
        if per_channel:
            w = rng.integers(-127, 128, size=(cout, kh, kw, xs[3]))
            fscales = list(rng.uniform(0.01, 0.03, cout).astype(np.float32))
            fq, cq, f_t, wzp, bscale = (0.0, 0), SymmPerChannelQuantParams(scales=fscales, channelDim=0), PC, 0, 0.0
        else:
            w = rand_q(t, (cout, kh, kw, xs[3]))
            wzp = int(rng.integers(lo, hi + 1))
            fscales = [0.02] * cout
            fq, cq, f_t = (0.02, wzp), None, t
            bscale = float(np.float32(np.float32(0.2) * np.float32(0.02)))
        b = rng.integers(-500, 500, size=cout)
        bt, oscale, ozp = I32, 0.5, int(rng.integers(lo, hi + 1))
        acc = ref_transpose(x.astype(np.int64) - xq[1], w.astype(np.int64) - wzp, (pt, pl), strides, (oh, ow))
        want = ref_requant(acc, b, 0.2, fscales, oscale, ozp, 0, t)
    xin = nchw(x) if use_nchw else x
    ops = [Operand(t, xin, *xq), Operand(f_t, w, fq[0], fq[1], cq), Operand(bt, b, bscale), scalar(pl), scalar(pr),
           scalar(pt), scalar(pb), scalar(strides[1]), scalar(strides[0]), scalar(0), scalar(use_nchw)]
    got = run(Op.TRANSPOSE_CONV_2D, ops, t, oscale, ozp)
    if use_nchw:
        got = got.transpose(0, 2, 3, 1)
    assert got.shape == (xs[0], oh, ow, cout)
    if t == F32:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    else:
        np.testing.assert_array_equal(got, want)


def test_transpose_conv_implicit_same():
    x = rng.standard_normal((1, 4, 4, 2)).astype(np.float32)
    w = rng.standard_normal((3, 3, 3, 2)).astype(np.float32)
    b = np.zeros(3, np.float32)
    ops = [Operand(F32, x), Operand(F32, w), Operand(F32, b), Operand(I32, np.array([1, 8, 8, 3])), scalar(1),
           scalar(2), scalar(2), scalar(0), scalar(False)]
    got = run(Op.TRANSPOSE_CONV_2D, ops, F32)
    pt, pb = ck.explicit_padding(8, 2, 1, 3, 1, transpose=True)
    assert got.shape == (1, 8, 8, 3)
    want = ref_transpose(x.astype(np.float64), w.astype(np.float64), (pt, pt), (2, 2), (8, 8))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    ops[3] = Operand(I32, np.array([1, 8, 8]))
    with pytest.raises(OpExecutionError):
        run(Op.TRANSPOSE_CONV_2D, ops, F32)


# --------------------------------------------------------------------------
# FULLY_CONNECTED


@pytest.mark.parametrize("t", [F32, F16, Q8, Q8S])
@pytest.mark.parametrize("xs", [(3, 10), (2, 2, 5), (1, 4), (4, 1, 1, 10)])
def test_fully_connected(t, xs):
    units, in_size = 7, (10 if xs[-1] == 10 else (5 if xs[-1] == 5 else 4))
    if xs == (2, 2, 5):
        in_size = 10
    batch = int(np.prod(xs)) // in_size
    if t in (F32, F16):
        x = rng.standard_normal(xs).astype(NUMPY_DTYPE[t])
        w = rng.standard_normal((units, in_size)).astype(NUMPY_DTYPE[t])
        b = rng.standard_normal(units).astype(NUMPY_DTYPE[t])
        want = fact(x.reshape(batch, in_size).astype(np.float64) @ w.T.astype(np.float64) + b, 2)
        got = run(Op.FULLY_CONNECTED, [Operand(t, x), Operand(t, w), Operand(t, b), scalar(2)], t)
        tol = 1e-5 if t == F32 else 5e-3
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol)
        return
    lo, hi = QUANT_RANGE[t]
    x, w = rand_q(t, xs), rand_q(t, (units, in_size))
    xq, fq = (0.1, int(rng.integers(lo, hi + 1))), (0.05, int(rng.integers(lo, hi + 1)))
    b = rng.integers(-500, 500, size=units)
    acc = (x.reshape(batch, in_size).astype(np.int64) - xq[1]) @ (w.astype(np.int64) - fq[1]).T
    oscale, ozp = 0.3, int(rng.integers(lo, hi + 1))
    want = ref_requant(acc, b, 0.1, [0.05] * units, oscale, ozp, 2, t)
    bscale = float(np.float32(np.float32(0.1) * np.float32(0.05)))
    for prepared in (True, False):
        got = run(Op.FULLY_CONNECTED, [Operand(t, x, *xq), Operand(t, w, *fq), Operand(I32, b, bscale), scalar(2)],
                  t, oscale, ozp, prepared=prepared)
        np.testing.assert_array_equal(got, want)


def test_fully_connected_shapes_and_errors():
    w = np.ones((3, 4), np.float32)
    b = np.zeros(3, np.float32)
    got = run(Op.FULLY_CONNECTED, [Operand(F32, np.zeros((0, 4), np.float32)), Operand(F32, w), Operand(F32, b),
                                   scalar(0)], F32)
    assert got.shape == (0, 3)
    with pytest.raises(OpValidationError):  # 6 values are not rows of 4
        run(Op.FULLY_CONNECTED, [Operand(F32, np.zeros((2, 3), np.float32)), Operand(F32, w), Operand(F32, b),
                                 scalar(0)], F32)
    with pytest.raises(OpValidationError):  # bias length != units
        run(Op.FULLY_CONNECTED, [Operand(F32, np.zeros((2, 4), np.float32)), Operand(F32, w),
                                 Operand(F32, np.zeros(2, np.float32)), scalar(0)], F32)
    with pytest.raises(OpValidationError):
        match_signature(REGISTRY[Op.FULLY_CONNECTED], [Q8, PC, I32, T.INT32], [Q8])
    with pytest.raises(OpValidationError):
        match_signature(REGISTRY[Op.FULLY_CONNECTED], [F16, F16, F16, T.INT32], [F16], V1_0)


# --------------------------------------------------------------------------
# the requantization itself


@pytest.mark.parametrize("t", [Q8, Q8S])
def test_requant_matches_tflite(t):
    """Requant (float and int64 paths) == MultiplyByQuantizedMultiplier, on
    random values, exact ties of both roundings, and huge accumulators."""
    lo_t, hi_t = QUANT_RANGE[t]
    for real in [0.5, 0.25, 2 ** -7, 1 / 3, 0.0123, 0.731, 1.7, 3.0, 2 ** -12, 3.1e-5, 0.9999999]:
        q, shift = quantize_multiplier(real)
        nch = 3
        bias = rng.integers(-5000, 5000, size=nch)
        r = max(-shift, 0)
        base = rng.integers(-(1 << 22), 1 << 22, size=(40, nch))
        # values around the output range, with exact ties of the final shift
        near = rng.integers(-600, 600, size=(40, nch)) * (1 << r) // max(1, int(real * (1 << r)) or 1)
        # smallest v with SRDHM(v, q) == t, for t on exact ties of the final rounding shift
        tvals = [k * (1 << r) + (1 << r) // 2 for k in range(-40, 40)]
        tv = np.array([-((-(2 * t_ - 1) * (1 << 30)) // q) for t_ in tvals], np.int64) >> max(shift, 0)
        ties = tv.reshape(-1, 1) - bias
        acc = np.concatenate([base, near, np.broadcast_to(ties, (80, nch)),
                              np.array([[-(1 << 30), 1 << 30, 0]])]).astype(np.int64)
        for act in (0, 1, 3):
            for zp in (lo_t, 0, hi_t - 3):
                lo, hi = activation_range(act, 0.05, zp, t)
                want = np.clip(multiply_by_quantized_multiplier(acc + bias, q, shift) + zp, lo, hi)
                rq = ck.Requant(q=np.full(nch, q, np.int64), shift=np.full(nch, shift, np.int64),
                                bias=bias.astype(np.int64), zp=zp, lo=lo, hi=hi, out_dtype=NUMPY_DTYPE[t],
                                fast32=True)
                got = rq.apply(acc.astype(np.float64), acc.shape[0], 1)
                np.testing.assert_array_equal(got, want, err_msg=f"real={real} act={act} zp={zp}")
                got = rq.apply(acc.astype(np.float32), acc.shape[0], 1)
                np.testing.assert_array_equal(got, want, err_msg=f"float32 real={real} act={act} zp={zp}")
                rq.use_float = False
                got = rq.apply(acc.astype(np.float64), acc.shape[0], 1)
                np.testing.assert_array_equal(got, want, err_msg=f"int path real={real} act={act} zp={zp}")


def test_requant_multiplier_power_of_two_negative_one():
    """q == 2^30 (a power-of-two multiplier): acc*q == -2^30 is not a negative tie."""
    q, shift = quantize_multiplier(2 ** -5)
    assert q == 1 << 30
    acc = np.arange(-200, 200, dtype=np.int64).reshape(-1, 1)
    want = np.clip(multiply_by_quantized_multiplier(acc, q, shift) + 10, 0, 255)
    rq = ck.Requant(q=np.array([q]), shift=np.array([shift]), bias=np.zeros(1, np.int64), zp=10, lo=0, hi=255,
                    out_dtype=np.dtype(np.uint8))
    np.testing.assert_array_equal(rq.apply(acc.astype(np.float32), acc.shape[0], 1), want)


def test_parallel_paths_match_serial(monkeypatch):
    """Row-split threads (forced on small tensors) give the same bits."""
    x = rng.integers(0, 256, size=(2, 9, 11, 6))
    w = rng.integers(0, 256, size=(1, 3, 3, 6))
    b = rng.integers(-500, 500, size=6)
    bscale = float(np.float32(np.float32(0.1) * np.float32(0.02)))
    ops = dw_operands(x, w, b, (1, 1, 1, 1), (2, 2), (1, 1), 1, 0, None, Q8, Q8, I32, (0.1, 100), (0.02, 120), None,
                      bscale)
    wc = rng.integers(0, 256, size=(5, 3, 3, 6))
    cops = conv_operands(x, wc, b[:5], (1, 0, 1, 0), (1, 2), (1, 1), 0, None, Q8, Q8, I32, (0.1, 100),
                         (0.02, 120), None, bscale)
    xf = rng.standard_normal((1, 12, 10, 4)).astype(np.float32)
    fops = dw_operands(xf, rng.standard_normal((1, 3, 3, 4)).astype(np.float32), np.ones(4, np.float32),
                       (1, 1, 1, 1), (1, 1), (1, 1), 1, 3, None, F32, F32, F32)
    serial = [run(Op.DEPTHWISE_CONV_2D, ops, Q8, 0.3, 90), run(Op.CONV_2D, cops, Q8, 0.5, 100),
              run(Op.DEPTHWISE_CONV_2D, fops, F32)]
    monkeypatch.setattr(ck, "PARALLEL_MIN", 8)
    monkeypatch.setattr(ck, "THREADS", 3)
    monkeypatch.setattr(ck, "_cores_free", lambda: True)
    par = [run(Op.DEPTHWISE_CONV_2D, ops, Q8, 0.3, 90), run(Op.CONV_2D, cops, Q8, 0.5, 100),
           run(Op.DEPTHWISE_CONV_2D, fops, F32)]
    for a, b_ in zip(serial, par):
        np.testing.assert_array_equal(a, b_)


def test_grouped_quant_long_reduction_blocks():
    """Batched group products in exact float32 blocks summed in float64."""
    g, cg, cout = 2, 400, 4
    x = rng.choice([0, 255], size=(1, 2, 2, g * cg))
    w = rng.choice([0, 255], size=(cout, 1, 1, cg))
    b = np.zeros(cout, np.int64)
    assert ck.exact_block(cg, 255, 255) is not None
    acc = ref_conv(x.astype(np.int64), w.astype(np.int64), (0, 0, 0, 0), (1, 1), groups=g)
    want = ref_requant(acc, b, 0.5, [0.5] * cout, 3000.0, 0, 0, Q8)
    ops = [Operand(Q8, x, 0.5, 0), Operand(Q8, w, 0.5, 0), Operand(I32, b, 0.25), scalar(0), scalar(0), scalar(0),
           scalar(0), scalar(1), scalar(1), scalar(g), scalar(0), scalar(False)]
    np.testing.assert_array_equal(run(Op.GROUPED_CONV_2D, ops, Q8, 3000.0, 0), want)


@pytest.mark.parametrize("t", [Q8, Q8S])
def test_requant_float32_path_exhaustive(t):
    """The verified float32 requantization (with its negative-tie stage when
    the zero point is above the clamp) equals the int64 one on every
    accumulator of a wide range (multipliers with ties of both roundings)."""
    lo_t, hi_t = QUANT_RANGE[t]
    acc = np.arange(-(1 << 18), 1 << 18, dtype=np.int64).reshape(-1, 1)
    used = used_corr = 0
    for real in [0.5, 2 ** -7, 1 / 3, 0.0123, 1.7, 2 ** -12, 3.1e-5, 0.00391, 0.0009765625]:
        q, shift = quantize_multiplier(real)
        for act in (0, 3):
            for zp in (lo_t, hi_t - 7):
                bias = rng.integers(-3000, 3000, size=2)
                lo, hi = activation_range(act, 0.05, zp, t)
                want = np.clip(multiply_by_quantized_multiplier(acc + bias, q, shift) + zp, lo, hi)
                rq = ck.Requant(q=np.full(2, q, np.int64), shift=np.full(2, shift, np.int64),
                                bias=bias.astype(np.int64), zp=zp, lo=lo, hi=hi, out_dtype=NUMPY_DTYPE[t],
                                fast32=True)
                got = rq.apply(np.broadcast_to(acc, (acc.shape[0], 2)).astype(np.float32), acc.shape[0], 1)
                np.testing.assert_array_equal(got, want, err_msg=f"real={real} act={act} zp={zp}")
                used += rq.f32 is not None
                used_corr += rq.need_corr and rq.f32 is not None
    assert used > 0 and used_corr > 0


@pytest.mark.parametrize("k", [300, 500, 1100])
def test_quant_conv_long_reduction_exact(k):
    """1x1 quantized CONV_2D whose reduction needs several exact float32
    blocks (two summed in float32, more in float64) == an int64 reference,
    for every activation and a prepared (constant) or run-time filter."""
    Life = OperandLifeTime
    r = np.random.default_rng(k)
    for trial in range(8):
        n_out, hw = int(r.integers(3, 40)), int(r.integers(1, 7))
        zx, zw, zo = (int(v) for v in r.integers(0, 256, 3))
        sx, sw, so = 0.02, 0.01, float(np.float32(10 ** r.uniform(-1.5, 1)))
        x = r.integers(0, 256, (1, hw, hw, k)).astype(np.uint8)
        w = r.integers(0, 256, (n_out, 1, 1, k)).astype(np.uint8)
        b = r.integers(-20000, 20000, n_out).astype(np.int32)
        act = trial % 4
        bs = float(np.float32(np.float32(sx) * np.float32(sw)))
        spec = [(Q8, x, sx, zx), (Q8, w, sw, zw), (OperandType.TENSOR_INT32, b, bs, 0)] + \
               [(OperandType.INT32, np.array(v, np.int32), 0.0, 0) for v in (1, 1, 1, act)]
        const = trial % 2 == 0
        infos = [OperandInfo(t, d.shape, s, z, None, Life.CONSTANT_COPY if (i > 0 and const) else
                             Life.TEMPORARY_VARIABLE, d if (i > 0 and const) else None)
                 for i, (t, d, s, z) in enumerate(spec)]
        out = OperandInfo(Q8, (1, hw, hw, n_out), so, zo, None, Life.TEMPORARY_VARIABLE, None)
        op = REGISTRY[OperationType.CONV_2D]
        state = op.prepare(OpInfo(type=OperationType.CONV_2D, inputs=infos, outputs=[out]))
        ctx = ExecContext(type=OperationType.CONV_2D, inputs=[Tensor(t, d, s, z) for t, d, s, z in spec],
                          outputs=[OutputSpec(Q8, (1, hw, hw, n_out), so, zo)], state=state)
        got = op.execute(ctx)[0]
        acc = (x.reshape(-1, k).astype(np.int64) - zx) @ (w.reshape(n_out, k).astype(np.int64) - zw).T + b
        q, shift = quantize_multiplier(bs / so)
        lo, hi = activation_range(act, so, zo, Q8)
        want = np.clip(multiply_by_quantized_multiplier(acc, q, shift) + zo, lo, hi).reshape(got.shape)
        np.testing.assert_array_equal(got, want, err_msg=f"trial {trial}")


def test_requant_float32_with_channel_fixups():
    """Channels without a float32 fit are redone on the exact path after the
    float32 pass: the whole result still equals the int64 one."""
    r = np.random.default_rng(7)
    acc = np.arange(-(1 << 17), 1 << 17, 3, dtype=np.int64)
    found = 0
    for trial in range(200):
        q, shift = quantize_multiplier(float(10 ** r.uniform(-3.3, -2)))
        nch = 16
        bias = r.integers(-5000, 5000, size=nch)
        zp = int(r.integers(0, 256))
        lo, hi = activation_range(int(r.integers(0, 2)), 0.05, zp, Q8)
        rq = ck.Requant(q=np.full(nch, q, np.int64), shift=np.full(nch, shift, np.int64), bias=bias.astype(np.int64),
                        zp=zp, lo=lo, hi=hi, out_dtype=np.dtype(np.uint8), fast32=True)
        if rq.f32_fix is None:
            continue
        found += 1
        a = np.broadcast_to(acc[:, None], (acc.size, nch))
        want = np.clip(multiply_by_quantized_multiplier(a + bias, q, shift) + zp, lo, hi)
        # width 2: the fixed-up columns repeat along the width
        got = rq.apply(np.repeat(a, 2, axis=0).reshape(acc.size, 2 * nch).astype(np.float32), acc.size, 2)
        for j in range(2):
            np.testing.assert_array_equal(got.reshape(acc.size, 2, nch)[:, j], want, err_msg=f"trial {trial}")
        if found >= 5:
            break
    assert found > 0


def test_quant_conv_input_zero_point_folded():
    """3x3 SAME-padded quantized CONV_2D with constant filter and bias: the
    GEMM on raw codes (padding holding the zero point, the zero point folded
    into the bias) equals an int64 reference."""
    Life = OperandLifeTime
    r = np.random.default_rng(11)
    used = 0
    for trial in range(12):
        cin, n_out, hw, stride = int(r.integers(1, 9)), int(r.integers(1, 20)), int(r.integers(3, 12)), 1 + trial % 2
        zx, zw, zo = (int(v) for v in r.integers(1, 256, 3))
        sx, sw, so = 0.02, 0.01, float(np.float32(10 ** r.uniform(-2.5, -0.5)))
        x = r.integers(0, 256, (2, hw, hw, cin)).astype(np.uint8)
        w = r.integers(0, 256, (n_out, 3, 3, cin)).astype(np.uint8)
        b = r.integers(-2000, 2000, n_out).astype(np.int32)
        act = (3, 1, 0)[trial % 3]
        bs = float(np.float32(np.float32(sx) * np.float32(sw)))
        spec = [(Q8, x, sx, zx), (Q8, w, sw, zw), (OperandType.TENSOR_INT32, b, bs, 0)] + \
               [(OperandType.INT32, np.array(v, np.int32), 0.0, 0) for v in (1, stride, stride, act)]
        infos = [OperandInfo(t, d.shape, s, z, None, Life.TEMPORARY_VARIABLE if i == 0 else Life.CONSTANT_COPY,
                             None if i == 0 else d) for i, (t, d, s, z) in enumerate(spec)]
        oh = -(-hw // stride)
        out = OperandInfo(Q8, (2, oh, oh, n_out), so, zo, None, Life.TEMPORARY_VARIABLE, None)
        op = REGISTRY[OperationType.CONV_2D]
        state = op.prepare(OpInfo(type=OperationType.CONV_2D, inputs=infos, outputs=[out]))
        used += act in state.fold or ("fold", act) in state.bounded  # NOTE: a static plan keeps its own
        ctx = ExecContext(type=OperationType.CONV_2D, inputs=[Tensor(t, d, s, z) for t, d, s, z in spec],
                          outputs=[OutputSpec(Q8, (2, oh, oh, n_out), so, zo)], state=state)
        got = op.execute(ctx)[0]
        # int64 reference: SAME padding of zero-point-shifted values
        pad_total = max((oh - 1) * stride + 3 - hw, 0)
        top = pad_total // 2
        xs = np.zeros((2, hw + pad_total, hw + pad_total, cin), np.int64)
        xs[:, top:top + hw, top:top + hw] = x.astype(np.int64) - zx
        ws = w.astype(np.int64) - zw
        acc = np.zeros((2, oh, oh, n_out), np.int64)
        for i in range(3):
            for j in range(3):
                patch = xs[:, i:i + (oh - 1) * stride + 1:stride, j:j + (oh - 1) * stride + 1:stride]
                acc += patch @ ws[:, i, j, :].T
        q, shift = quantize_multiplier(bs / so)
        lo, hi = activation_range(act, so, zo, Q8)
        want = np.clip(multiply_by_quantized_multiplier(acc + b, q, shift) + zo, lo, hi)
        np.testing.assert_array_equal(got, want, err_msg=f"trial {trial}")
    assert used > 0


@pytest.mark.parametrize("fold", [True, False])
def test_quant_conv_1x1_zero_point_paths(fold):
    """1x1 quantized CONV_2D on raw input codes: with the zero point folded
    into the bias, or (fold disabled) a column of ones against a
    zero-point row of the filter; both equal an int64 reference."""
    Life = OperandLifeTime
    r = np.random.default_rng(12)
    used = 0
    for trial in range(12):
        k, n_out, hw = int(r.integers(1, 64)), int(r.integers(1, 24)), int(r.integers(1, 9))
        zx, zw, zo = (int(v) for v in r.integers(1, 256, 3))
        sx, sw, so = 0.02, 0.01, float(np.float32(10 ** r.uniform(-2.5, -0.5)))
        x = r.integers(0, 256, (1, hw, hw, k)).astype(np.uint8)
        w = r.integers(0, 256, (n_out, 1, 1, k)).astype(np.uint8)
        b = r.integers(-2000, 2000, n_out).astype(np.int32)
        act = (0, 3)[trial % 2]
        bs = float(np.float32(np.float32(sx) * np.float32(sw)))
        spec = [(Q8, x, sx, zx), (Q8, w, sw, zw), (OperandType.TENSOR_INT32, b, bs, 0)] + \
               [(OperandType.INT32, np.array(v, np.int32), 0.0, 0) for v in (1, 1, 1, act)]
        # NOTE: the input's height and width unknown at prepare: no static plan, the general path's forms
        infos = [OperandInfo(t, (1, 0, 0, k) if i == 0 else d.shape, s, z, None,
                             Life.TEMPORARY_VARIABLE if i == 0 else Life.CONSTANT_COPY, None if i == 0 else d)
                 for i, (t, d, s, z) in enumerate(spec)]
        out = OperandInfo(Q8, (1, hw, hw, n_out), so, zo, None, Life.TEMPORARY_VARIABLE, None)
        op = REGISTRY[OperationType.CONV_2D]
        state = op.prepare(OpInfo(type=OperationType.CONV_2D, inputs=infos, outputs=[out]))
        if not fold:
            state.fold.clear()
            used += state.zrow is not None
        else:
            used += bool(state.fold)
        ctx = ExecContext(type=OperationType.CONV_2D, inputs=[Tensor(t, d, s, z) for t, d, s, z in spec],
                          outputs=[OutputSpec(Q8, (1, hw, hw, n_out), so, zo)], state=state)
        got = op.execute(ctx)[0]
        acc = (x.reshape(-1, k).astype(np.int64) - zx) @ (w.reshape(n_out, k).astype(np.int64) - zw).T + b
        q, shift = quantize_multiplier(bs / so)
        lo, hi = activation_range(act, so, zo, Q8)
        want = np.clip(multiply_by_quantized_multiplier(acc, q, shift) + zo, lo, hi).reshape(got.shape)
        np.testing.assert_array_equal(got, want, err_msg=f"trial {trial}")
    assert used > 0


@pytest.mark.parametrize("nonzero", [257, 258, 300])
def test_quant_fc_l1_bound_exact(nonzero):
    """A long reduction (K * max|x| * max|w| far above 2^24) whose filter
    columns have few nonzero weights: one float32 product, exact since
    max|x| * |w|_1 <= 2^24; extreme inputs, compared with an int64 reference."""
    k, units = 2000, 3
    w = np.full((units, k), 128, np.uint8)  # zero point 128: zero weights
    w[:, :nonzero] = np.where(np.arange(nonzero) % 2, 255, 0)[None, :] if nonzero == 300 else 255
    w[1, :nonzero] = 1  # -127: the other sign
    x = np.full((2, k), 255, np.uint8)
    x[1, ::2] = 0
    b = np.array([7, -7, 0], np.int32)
    sx, sw, so = 0.5, 0.5, 0.25 * 2 ** 17
    spec = [(Q8, x, sx, 0), (Q8, w, sw, 128), (OperandType.TENSOR_INT32, b, 0.25, 0),
            (OperandType.INT32, np.array(0, np.int32), 0.0, 0)]
    op = REGISTRY[OperationType.FULLY_CONNECTED]
    infos = [OperandInfo(t, d.shape, s, z, None, OperandLifeTime.CONSTANT_COPY if i else
                         OperandLifeTime.TEMPORARY_VARIABLE, d if i else None) for i, (t, d, s, z) in enumerate(spec)]
    state = op.prepare(OpInfo(type=OperationType.FULLY_CONNECTED, inputs=infos,
                              outputs=[OperandInfo(Q8, (2, units), so, 100, None, OperandLifeTime.TEMPORARY_VARIABLE,
                                                   None)]))
    ctx = ExecContext(type=OperationType.FULLY_CONNECTED, inputs=[Tensor(t, d, s, z) for t, d, s, z in spec],
                      outputs=[OutputSpec(Q8, (2, units), so, 100)], state=state)
    got = op.execute(ctx)[0]
    acc = x.astype(np.int64) @ (w.astype(np.int64) - 128).T + b
    q, shift = quantize_multiplier(0.25 / so)
    want = np.clip(multiply_by_quantized_multiplier(acc, q, shift) + 100, 0, 255)
    np.testing.assert_array_equal(got, want)


def test_prepare_is_authoritative_and_never_fails_for_run_time_refusals():
    """Prepare computes the filter and multipliers once; parameters the
    reference refuses when it runs (here per-channel scales whose products
    overflow float32: an infinite multiplier) do not fail the preparation but
    every execution, with the same message, and nothing is recomputed."""
    x = rng.integers(0, 255, (1, 3, 3, 2)).astype(np.uint8)
    w = rng.integers(-5, 5, (3, 1, 1, 2)).astype(np.int8)
    b = np.zeros(3, np.int32)
    cq = SymmPerChannelQuantParams(scales=[0.5, 3e38, 0.25], channelDim=0)
    ops = conv_operands(x, w, b, (0, 0, 0, 0), (1, 1), (1, 1), 0, None, Q8, PC, I32, (2.0, 128), (0.0, 0), cq)
    p = prepare_operation(Op.CONV_2D, [o.info() for o in ops], [OperandInfo(Q8, (), 1.0, 0)], version=V1_2)
    assert p.state.mult_error and p.state.filter is not None
    messages = set()
    for _ in range(2):
        with pytest.raises(OpExecutionError) as e:
            p.run([o.tensor() for o in ops])
        messages.add(str(e.value))
    assert len(messages) == 1
    # a valid model: the prepared requantization is the one every execution uses
    cq = SymmPerChannelQuantParams(scales=[0.5, 0.75, 0.25], channelDim=0)
    ops = conv_operands(x, w, b, (0, 0, 0, 0), (1, 1), (1, 1), 0, None, Q8, PC, I32, (2.0, 128), (0.0, 0), cq)
    p = prepare_operation(Op.CONV_2D, [o.info() for o in ops], [OperandInfo(Q8, (), 1.0, 0)], version=V1_2)
    assert p.state.mult_error is None and 0 in p.state.requant
    first = p.run([o.tensor() for o in ops])[0]
    unprepared = run(Op.CONV_2D, ops, Q8, 1.0, 0, prepared=False, version=V1_2)
    np.testing.assert_array_equal(first, unprepared)
def test_a_padding_far_larger_than_the_tensors_is_refused_not_allocated():
    """Found by fuzzing .tflite files through nnhal run: a huge dilation with padding to match asks the
    depthwise kernel for a padded copy of terabytes; it is GENERAL_FAILURE with the size, at once."""
    x = rng.standard_normal((1, 4, 4, 2)).astype(np.float32)
    w = rng.standard_normal((1, 2, 2, 2)).astype(np.float32)
    b = np.zeros(2, np.float32)
    big = 1 << 20
    ops = dw_operands(x, w, b, (big, big, big, big), (1, 1), (2 * big, 2 * big), 1, 0, False, F32, F32, F32)
    with pytest.raises(OpExecutionError, match="GiB"):
        run(Op.DEPTHWISE_CONV_2D, ops, F32)


def test_a_zero_stride_with_implicit_padding_fails_as_a_bad_stride():
    """SAME padding divides by the stride: the stride is checked first (was a ZeroDivisionError)."""
    x = rng.standard_normal((1, 4, 4, 2)).astype(np.float32)
    w = rng.standard_normal((2, 2, 2, 2)).astype(np.float32)
    ops = [Operand(F32, x), Operand(F32, w), Operand(F32, np.zeros(2, np.float32)), scalar(1), scalar(0), scalar(1),
           scalar(0)]
    with pytest.raises((OpExecutionError, OpValidationError), match="strides must be positive"):
        run(Op.CONV_2D, ops, F32)
