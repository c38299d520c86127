"""Recipes of the spatial operations: the convolutions (plain, depthwise,
grouped, transposed; implicit and explicit padding, strides, dilations,
layouts, per-tensor and per-channel quantized filters), pooling, resizing,
fully connected."""

from __future__ import annotations

import numpy as np

from nnhal.conformance.randgraph.graph import QUANT
from nnhal.conformance.randgraph.recipes.common import (
    FLOATS,
    OT,
    Build,
    StepFailed,
    T,
    act,
    nhwc,
    recipe,
    scalar_type,
)

PC = T.TENSOR_QUANT8_SYMM_PER_CHANNEL
SCHEMES = ("SAME", "VALID")


def _image(b: Build, nchw: bool, min_hw: tuple[int, int] = (1, 1), c: int = 0) -> int:
    """Input 0: a 4-D image (the anchor when it fits), at least ``min_hw`` high and wide."""
    def fits(d: tuple) -> bool:
        n, h, w, ch = nhwc(d, nchw)
        return h >= min_hw[0] and w >= min_hw[1] and (c == 0 or ch == c) and h * w * ch * n <= 2048

    def make() -> tuple:
        n = b.d.integer(1, 2)
        h = b.d.integer(min_hw[0], min_hw[0] + 6)
        w = b.d.integer(min_hw[1], min_hw[1] + 6)
        ch = c or b.d.integer(1, 6)
        return (n, ch, h, w) if nchw else (n, h, w, ch)
    return b.main(ranks=(4,), fits=fits, make=make)


def _padding(b: Build, explicit: bool, kernel: tuple[int, int], dilation: tuple[int, int] = (1, 1)) -> tuple:
    """Explicit paddings (left, right, top, bottom) or an implicit scheme; returns what the output size needs."""
    if explicit:
        pads = tuple(b.d.integer(0, max(0, (kernel[k // 2 ^ 1] - 1) * dilation[k // 2 ^ 1])) for k in range(4))
        return ("explicit", pads)
    return ("implicit", b.d.pick((1, 2)))


def _emit_padding(b: Build, pad: tuple) -> None:
    if pad[0] == "explicit":
        for name, v in zip(("pad_left", "pad_right", "pad_top", "pad_bottom"), pad[1]):
            b.param(name, T.INT32, v, record=False)
        b.params["padding"] = pad[1]
    else:
        b.param("padding", T.INT32, pad[1], SCHEMES[pad[1] - 1])


def _min_hw(pad: tuple, kernel: tuple[int, int], dilation: tuple[int, int]) -> tuple[int, int]:
    """The smallest input height and width with an output of at least 1."""
    eff = [(k - 1) * dl + 1 for k, dl in zip(kernel, dilation)]
    if pad[0] == "explicit":
        pl, pr, pt, pb = pad[1]
        return max(1, eff[0] - pt - pb), max(1, eff[1] - pl - pr)
    return (1, 1) if pad[1] == 1 else (eff[0], eff[1])


def _stride(b: Build) -> tuple[int, int]:
    s = (b.d.integer(1, 3), b.d.integer(1, 3))
    return s


def _emit_stride(b: Build, s: tuple[int, int]) -> None:
    b.param("stride_w", T.INT32, s[1], record=False)
    b.param("stride_h", T.INT32, s[0], record=False)
    b.params["stride"] = s


def _filter(b: Build, t: T, dims: tuple, in_scale: float, channel_dim: int) -> tuple[int, float]:
    """A filter tensor (per-channel: a scale per output channel); returns it and its scale (0: per channel)."""
    if t == PC:
        scales = tuple(float(np.float32(b.d.real(0.005, 0.2, steps=24, log=True))) for _ in range(dims[channel_dim]))
        b.params["filter_quant"] = "per-channel"
        return b.tensor(t, dims, scale=0.0, zp=0, channel=(scales, channel_dim), role="weight"), 0.0
    if t in QUANT:
        scale, zp = b.quant(t)
        scale = float(np.float32(scale / 8))
        b.params["filter_quant"] = "per-tensor"
        return b.tensor(t, dims, scale=scale, zp=zp, role="weight", connect=False), scale
    return b.tensor(t, dims, domain="unit", role="weight"), 0.0


def _bias(b: Build, t: T, n: int, in_scale: float, f_scale: float) -> None:
    if t == T.TENSOR_INT32:
        scale = float(np.float32(np.float32(in_scale) * np.float32(f_scale))) if f_scale else 0.0
        rng = np.random.default_rng(b.d.seed())
        real = rng.uniform(-2, 2, n)
        step = scale if scale else in_scale * 0.05
        value = np.rint(real / step).astype(np.int32)
        b.tensor(t, (n,), scale=scale, zp=0, value=value, role="weight", connect=False)
    else:
        b.tensor(t, (n,), domain="small", role="weight")


def _dilation_tail(b: Build, n_opt: int, dilation: tuple[int, int]) -> None:
    """The optional dilation inputs of CONV_2D / DEPTHWISE_CONV_2D (after the layout)."""
    if n_opt == 3:
        b.param("dilation_w", T.INT32, dilation[1], record=False)
        b.param("dilation_h", T.INT32, dilation[0], record=False)
        b.params["dilation"] = dilation


def _conv(b: Build) -> None:
    """CONV_2D, DEPTHWISE_CONV_2D, GROUPED_CONV_2D."""
    op = b.op
    n_req = len(b.sig.inputs)
    explicit = {OT.CONV_2D: 10, OT.DEPTHWISE_CONV_2D: 11, OT.GROUPED_CONV_2D: 12}[op] == n_req
    n_opt = b.optional()
    if n_opt == 2:
        n_opt = 3  # NOTE: a layout and one dilation factor alone is not a form the HAL has
    nchw = (n_opt >= 1 or op == OT.GROUPED_CONV_2D) and b.d.flag(0.35)
    dilation = (b.d.integer(1, 3), b.d.integer(1, 3)) if n_opt == 3 else (1, 1)
    kernel = (b.d.integer(1, 4, simplest=3), b.d.integer(1, 4, simplest=3))
    stride = _stride(b)
    pad = _padding(b, explicit, kernel, dilation)
    groups = b.d.integer(1, 3, simplest=2) if op == OT.GROUPED_CONV_2D else 1
    mult = b.d.integer(1, 3) if op == OT.DEPTHWISE_CONV_2D else 1
    c_need = groups * b.d.integer(1, 3) if op == OT.GROUPED_CONV_2D else 0
    x = _image(b, nchw, _min_hw(pad, kernel, dilation), c=c_need)
    xo = b.operand(x)
    n, h, w, c = nhwc(xo.dims, nchw)
    if c % groups:
        raise StepFailed("channels not divisible by the groups")
    if op == OT.DEPTHWISE_CONV_2D:
        out_c = c * mult
        fdims = (1, kernel[0], kernel[1], out_c)
        cdim = 3
    else:
        out_c = groups * b.d.integer(1, 3) if op == OT.GROUPED_CONV_2D else b.d.integer(1, 6)
        fdims = (out_c, kernel[0], kernel[1], c // groups)
        cdim = 0
    _, f_scale = _filter(b, b.sig.inputs[1], fdims, xo.scale, cdim)
    _bias(b, b.sig.inputs[2], out_c, xo.scale, f_scale)
    _emit_padding(b, pad)
    _emit_stride(b, stride)
    if op == OT.DEPTHWISE_CONV_2D:
        b.param("depth_multiplier", T.INT32, mult)
    if op == OT.GROUPED_CONV_2D:
        b.param("groups", T.INT32, groups)
    act(b)
    if op == OT.GROUPED_CONV_2D or n_opt >= 1:
        b.param("layout", T.BOOL, nchw, "NCHW" if nchw else "NHWC")
    if op != OT.GROUPED_CONV_2D:
        _dilation_tail(b, n_opt, dilation)
    b.params["kernel"] = kernel
    b.out(xo.type, "auto")


conv_2d = recipe(OT.CONV_2D, "conv", preserving=True)(_conv)
depthwise_conv_2d = recipe(OT.DEPTHWISE_CONV_2D, "conv", preserving=True)(_conv)
grouped_conv_2d = recipe(OT.GROUPED_CONV_2D, "conv")(_conv)


@recipe(OT.TRANSPOSE_CONV_2D, "conv")
def transpose_conv_2d(b: Build) -> None:
    explicit = len(b.sig.inputs) == 11
    nchw = b.d.flag(0.35)
    kernel = (b.d.integer(1, 4, simplest=3), b.d.integer(1, 4, simplest=3))
    stride = _stride(b)
    x = _image(b, nchw)
    xo = b.operand(x)
    n, h, w, c = nhwc(xo.dims, nchw)
    out_c = b.d.integer(1, 5)
    _, f_scale = _filter(b, b.sig.inputs[1], (out_c, kernel[0], kernel[1], c), xo.scale, 0)
    _bias(b, b.sig.inputs[2], out_c, xo.scale, f_scale)
    if explicit:
        pads = tuple(b.d.integer(0, k - 1) for k in (kernel[1], kernel[1], kernel[0], kernel[0]))
        _emit_padding(b, ("explicit", pads))
    else:
        scheme = b.d.pick((1, 2))
        oh = h * stride[0] if scheme == 1 else (h - 1) * stride[0] + kernel[0]
        ow = w * stride[1] if scheme == 1 else (w - 1) * stride[1] + kernel[1]
        b.ints("output_shape", (n, out_c, oh, ow) if nchw else (n, oh, ow, out_c))
        b.param("padding", T.INT32, scheme, SCHEMES[scheme - 1])
    _emit_stride(b, stride)
    act(b)
    b.param("layout", T.BOOL, nchw, "NCHW" if nchw else "NHWC")
    b.params["kernel"] = kernel
    b.out(xo.type, "auto")


def _pool(b: Build) -> None:
    explicit = len(b.sig.inputs) in (10, 11)
    has_layout = len(b.sig.inputs) in (8, 11)
    nchw = has_layout and b.d.flag(0.35)
    kernel = (b.d.integer(1, 4, simplest=2), b.d.integer(1, 4, simplest=2))
    stride = _stride(b)
    pad = ("explicit", tuple(b.d.integer(0, k - 1) for k in (kernel[1], kernel[1], kernel[0], kernel[0]))) \
        if explicit else ("implicit", b.d.pick((1, 2)))
    x = _image(b, nchw, _min_hw(pad, kernel, (1, 1)))
    xo = b.operand(x)
    _emit_padding(b, pad)
    _emit_stride(b, stride)
    b.param("filter_w", T.INT32, kernel[1], record=False)
    b.param("filter_h", T.INT32, kernel[0], record=False)
    b.params["kernel"] = kernel
    act(b)
    if has_layout:
        b.param("layout", T.BOOL, nchw, "NCHW" if nchw else "NHWC")
    b.out(xo.type)


average_pool_2d = recipe(OT.AVERAGE_POOL_2D, "pooling", preserving=True)(_pool)
max_pool_2d = recipe(OT.MAX_POOL_2D, "pooling", preserving=True)(_pool)
l2_pool_2d = recipe(OT.L2_POOL_2D, "pooling", preserving=True)(_pool)


def _resize(b: Build) -> None:
    has_layout = len(b.sig.inputs) >= 4
    nchw = has_layout and b.d.flag(0.35)
    x = _image(b, nchw)
    xo = b.operand(x)
    n, h, w, c = nhwc(xo.dims, nchw)
    by_scale = b.sig.inputs[1] in (T.FLOAT32, T.FLOAT16)
    if by_scale:
        sh, sw = b.d.pick((2.0, 0.5, 1.5, 3.0, 0.75)), b.d.pick((2.0, 0.5, 1.5, 3.0, 0.75))
        if int(h * sh) < 1 or int(w * sw) < 1:
            raise StepFailed("scaled to nothing")
        st = scalar_type(xo.type) if xo.type in FLOATS else T.FLOAT32
        b.param("scale_w", st, sw)
        b.param("scale_h", st, sh)
    else:
        b.param("output_w", T.INT32, b.d.integer(1, 9, simplest=2 * w if 2 * w <= 9 else w))
        b.param("output_h", T.INT32, b.d.integer(1, 9, simplest=2 * h if 2 * h <= 9 else h))
    if has_layout:
        b.param("layout", T.BOOL, nchw, "NCHW" if nchw else "NHWC")
    n_opt = b.optional()
    if n_opt:
        align = b.d.flag(0.4)
        b.param("align_corners", T.BOOL, align)
        if n_opt > 1:
            b.param("half_pixel_centers", T.BOOL, (not align) and b.d.flag(0.5))
    b.out(xo.type)


resize_bilinear = recipe(OT.RESIZE_BILINEAR, "spatial")(_resize)
resize_nearest_neighbor = recipe(OT.RESIZE_NEAREST_NEIGHBOR, "spatial")(_resize)


@recipe(OT.FULLY_CONNECTED, "conv")
def fully_connected(b: Build) -> None:
    x = b.main(ranks=(2, 3, 4), fits=lambda d: 1 <= d[-1] <= 64)
    xo = b.operand(x)
    k = xo.dims[-1]
    units = b.d.integer(1, 8)
    _, f_scale = _filter(b, b.sig.inputs[1], (units, k), xo.scale, 0)
    _bias(b, b.sig.inputs[2], units, xo.scale, f_scale)
    act(b)
    b.out(xo.type, "auto")
