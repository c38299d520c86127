"""Recipes of the shape operations: reshapes, transposes, concatenation,
split, slices, gather, tile, fill, rank, paddings, and the block
re-arrangements (space / depth / batch, channel shuffle)."""

from __future__ import annotations

import numpy as np

from nnhal.conformance.randgraph.recipes.common import (
    OT,
    Q8,
    Build,
    StepFailed,
    T,
    axis,
    nhwc,
    recipe,
)


def _factorize(b: Build, n: int, rank: int) -> list[int]:
    """A shape of ``rank`` dimensions with ``n`` elements."""
    dims = [1] * rank
    left = n
    for k in range(rank - 1):
        divs = [d for d in range(1, left + 1) if left % d == 0]
        dims[k] = b.d.pick(divs)
        left //= dims[k]
    dims[-1] = left
    return dims


@recipe(OT.RESHAPE, "shape", preserving=True)
def reshape(b: Build) -> None:
    x = b.main(ranks=(1, 2, 3, 4))
    o = b.operand(x)
    n = int(np.prod(o.dims))
    shape = _factorize(b, n, b.d.integer(1, 4, simplest=len(o.dims)))
    if b.d.flag(0.3):
        shape[b.d.integer(0, len(shape) - 1)] = -1
    b.ints("shape", shape)
    b.out(o.type)


@recipe(OT.SQUEEZE, "shape")
def squeeze(b: Build) -> None:
    x = b.main(ranks=(1, 2, 3, 4), fits=lambda d: 1 in d)
    o = b.operand(x)
    ones = [k for k, d in enumerate(o.dims) if d == 1]
    if b.d.flag(0.25):
        b.omit("axes")
    else:
        chosen = [k for k in ones if b.d.flag(0.7)] or ones[:1]
        b.ints("axes", [k - len(o.dims) if b.d.flag(0.3) else k for k in chosen])
    b.out(o.type)


@recipe(OT.EXPAND_DIMS, "shape")
def expand_dims(b: Build) -> None:
    x = b.main(ranks=(1, 2, 3))
    o = b.operand(x)
    r = len(o.dims) + 1
    a = b.d.integer(0, r - 1)
    b.param("axis", T.INT32, a - r if b.d.flag(0.3) else a)
    b.out(o.type)


@recipe(OT.TRANSPOSE, "shape")
def transpose(b: Build) -> None:
    x = b.main(ranks=(1, 2, 3, 4))
    o = b.operand(x)
    if len(o.dims) == 2 and b.d.flag(0.3):
        b.omit("perm")  # NOTE: the reference takes an omitted perm for a 2-D input only
    else:
        perm = list(range(len(o.dims)))
        for k in range(len(perm) - 1, 0, -1):  # NOTE: Fisher-Yates from draws (identity the simplest)
            j = b.d.integer(0, k, simplest=k)
            perm[k], perm[j] = perm[j], perm[k]
        b.ints("perm", perm)
    b.out(o.type)


@recipe(OT.CONCATENATION, "shape")
def concatenation(b: Build) -> None:
    x = b.main(ranks=(1, 2, 3, 4))
    o = b.operand(x)
    r = len(o.dims)
    a = b.d.integer(0, r - 1)
    for _ in range(b.d.integer(0, 3, simplest=1)):
        dims = list(o.dims)
        dims[a] = b.d.integer(1, 4)
        if o.type in Q8 and b.d.flag(0.5):
            b.tensor(o.type, dims, scale=o.scale, zp=o.zero_point)
        else:
            b.tensor(o.type, dims)
    b.param("axis", T.INT32, a)  # NOTE: CONCATENATION takes no negative axis
    b.out(o.type, b.d.pick(("same", "auto")))


@recipe(OT.SPLIT, "shape")
def split(b: Build) -> None:
    x = b.main(ranks=(1, 2, 3, 4))
    o = b.operand(x)
    a = axis(b, len(o.dims))
    divs = [d for d in range(1, o.dims[a] + 1) if o.dims[a] % d == 0]
    n = b.d.pick(divs)
    b.param("num_splits", T.INT32, n)
    for _ in range(n):
        b.out(o.type)


@recipe(OT.SLICE, "shape")
def slice_(b: Build) -> None:
    x = b.main(ranks=(1, 2, 3, 4))
    o = b.operand(x)
    begin, size = [], []
    for d in o.dims:
        s = b.d.integer(0, d - 1)
        begin.append(s)
        size.append(-1 if b.d.flag(0.2) else b.d.integer(1, d - s, simplest=d - s))
    b.ints("begin", begin)
    b.ints("size", size)
    b.out(o.type)


@recipe(OT.STRIDED_SLICE, "shape")
def strided_slice(b: Build) -> None:
    x = b.main(ranks=(1, 2, 3, 4))
    o = b.operand(x)
    begin, end, strides = [], [], []
    shrink = 0
    for k, d in enumerate(o.dims):
        stride = b.d.pick((1, 2, -1, 3, -2))
        lo, hi = b.d.integer(0, d - 1), b.d.integer(0, d - 1, simplest=d - 1)
        if stride > 0:
            s, e = min(lo, hi), max(lo, hi) + 1
        else:
            # NOTE: a negative stride ends before index 0 at -d - 1 (-1 would be the last element)
            s, e = max(lo, hi), min(lo, hi) - 1 if min(lo, hi) else -d - 1
        if stride > 0 and e - s == 1 and b.d.flag(0.4):
            shrink |= 1 << k
        if b.d.flag(0.25):
            s -= d  # NOTE: negative indices count from the end
        if 0 <= e < d and b.d.flag(0.25):
            e -= d
        begin.append(s)
        end.append(e)
        strides.append(stride)
    b.ints("begin", begin)
    b.ints("end", end)
    b.ints("strides", strides)
    r = len(o.dims)
    b.param("begin_mask", T.INT32, b.d.integer(0, (1 << r) - 1) if b.d.flag(0.3) else 0)
    b.param("end_mask", T.INT32, b.d.integer(0, (1 << r) - 1) if b.d.flag(0.3) else 0)
    b.param("shrink_axis_mask", T.INT32, shrink if shrink != (1 << r) - 1 else 0)
    b.out(o.type)


@recipe(OT.GATHER, "shape")
def gather(b: Build) -> None:
    x = b.main(ranks=(1, 2, 3, 4))
    o = b.operand(x)
    a = axis(b, len(o.dims))
    rank = b.d.integer(1, max(1, 4 - len(o.dims) + 1))
    b.tensor(T.TENSOR_INT32, b.shape(rank, 1, 4), domain="index", limit=o.dims[a], role="param", connect=False)
    b.out(o.type)


@recipe(OT.TILE, "shape")
def tile(b: Build) -> None:
    x = b.main(ranks=(1, 2, 3, 4))
    o = b.operand(x)
    b.ints("multiples", [b.d.integer(1, 3) for _ in o.dims])
    b.out(o.type)


@recipe(OT.FILL, "shape", anchor_input=1)
def fill(b: Build) -> None:
    dims = b.shape(b.d.integer(1, 4))
    b.ints("dims", list(dims))
    st = b.sig.inputs[1]
    value = b.d.integer(-5, 5) if st == T.INT32 else b.d.pick((1.5, 0.0, -2.25, 3.0))
    b.param("value", st, value)
    b.uniform_ok = True
    b.out(b.sig.outputs[0], None)


def _fill_anchor(sig: object) -> frozenset:
    # NOTE: FILL takes no data tensor: it starts a chain of its output type
    return frozenset({sig.outputs[0]})


fill.anchor = _fill_anchor


@recipe(OT.RANK, "shape")
def rank(b: Build) -> None:
    b.main(ranks=(1, 2, 3, 4))
    b.out(T.INT32, None)


def _paddings(b: Build, dims: tuple) -> list[list[int]]:
    return [[b.d.integer(0, 2), b.d.integer(0, 2)] if b.d.flag(0.7) else [0, 0] for _ in dims]


@recipe(OT.PAD, "shape")
def pad(b: Build) -> None:
    x = b.main(ranks=(1, 2, 3, 4))
    o = b.operand(x)
    p = _paddings(b, o.dims)
    b.ints("paddings", [v for row in p for v in row], (len(o.dims), 2))
    b.out(o.type)


@recipe(OT.PAD_V2, "shape")
def pad_v2(b: Build) -> None:
    x = b.main(ranks=(1, 2, 3, 4))
    o = b.operand(x)
    p = _paddings(b, o.dims)
    b.ints("paddings", [v for row in p for v in row], (len(o.dims), 2))
    st = b.sig.inputs[2]
    if st == T.INT32:
        lo, hi = (0, 255) if o.type == T.TENSOR_QUANT8_ASYMM else (-128, 127)
        b.param("pad_value", st, b.d.integer(lo, hi, simplest=o.zero_point))
    else:
        b.param("pad_value", st, b.d.pick((0.0, 1.5, -3.0)))
    b.out(o.type)


# --------------------------------------------------------------------------
# block re-arrangements


def _layout_dims(b: Build, nchw: bool, n: int = 0, h: int = 0, w: int = 0, c: int = 0) -> tuple[int, ...]:
    """A 4-D shape (``n``, ``h``, ``w``, ``c`` where given, else drawn) in the layout."""
    n = n or b.d.integer(1, 2)
    h = h or b.d.integer(1, 6)
    w = w or b.d.integer(1, 6)
    c = c or b.d.integer(1, 4)
    return (n, c, h, w) if nchw else (n, h, w, c)


def _layout_last(b: Build, nchw: bool, without: int, x: int) -> None:
    """The layout flag, where the signature has more than ``without`` inputs, and the result (as ``x``)."""
    if len(b.sig.inputs) > without:
        b.param("layout", T.BOOL, nchw, "NCHW" if nchw else "NHWC")
    b.out(b.operand(x).type)


@recipe(OT.SPACE_TO_DEPTH, "shape")
def space_to_depth(b: Build) -> None:
    block = b.d.integer(2, 3)
    nchw = len(b.sig.inputs) > 2 and b.d.flag(0.35)
    x = b.main(ranks=(4,), fits=lambda d: nhwc(d, nchw)[1] % block == 0 and nhwc(d, nchw)[2] % block == 0,
               make=lambda: _layout_dims(b, nchw, h=block * b.d.integer(1, 3), w=block * b.d.integer(1, 3)))
    b.param("block_size", T.INT32, block)
    _layout_last(b, nchw, 2, x)


@recipe(OT.DEPTH_TO_SPACE, "shape")
def depth_to_space(b: Build) -> None:
    block = b.d.integer(2, 3)
    nchw = len(b.sig.inputs) > 2 and b.d.flag(0.35)
    x = b.main(ranks=(4,), fits=lambda d: nhwc(d, nchw)[3] % (block * block) == 0,
               make=lambda: _layout_dims(b, nchw, c=block * block * b.d.integer(1, 2)))
    b.param("block_size", T.INT32, block)
    _layout_last(b, nchw, 2, x)


@recipe(OT.SPACE_TO_BATCH_ND, "shape")
def space_to_batch_nd(b: Build) -> None:
    nchw = len(b.sig.inputs) > 3 and b.d.flag(0.35)
    block = [b.d.integer(1, 3, simplest=2), b.d.integer(1, 3, simplest=2)]
    pads = [b.d.integer(0, 2) for _ in range(4)]
    x = b.main(ranks=(4,), fits=lambda d: (nhwc(d, nchw)[1] + pads[0] + pads[1]) % block[0] == 0 and
               (nhwc(d, nchw)[2] + pads[2] + pads[3]) % block[1] == 0,
               make=lambda: _layout_dims(b, nchw, h=block[0] * b.d.integer(1, 3) + 3 * block[0] - pads[0] - pads[1],
                                         w=block[1] * b.d.integer(1, 3) + 3 * block[1] - pads[2] - pads[3]))
    b.ints("block_shape", block)
    b.ints("paddings", pads, (2, 2))
    _layout_last(b, nchw, 3, x)


@recipe(OT.BATCH_TO_SPACE_ND, "shape")
def batch_to_space_nd(b: Build) -> None:
    nchw = len(b.sig.inputs) > 2 and b.d.flag(0.35)
    block = [b.d.integer(1, 3, simplest=2), b.d.integer(1, 3, simplest=2)]
    x = b.main(ranks=(4,), fits=lambda d: d[0] % (block[0] * block[1]) == 0,
               make=lambda: _layout_dims(b, nchw, n=block[0] * block[1] * b.d.integer(1, 2)))
    b.ints("block_shape", block)
    _layout_last(b, nchw, 2, x)


@recipe(OT.CHANNEL_SHUFFLE, "shape", preserving=True)
def channel_shuffle(b: Build) -> None:
    x = b.main(ranks=(1, 2, 3, 4))
    o = b.operand(x)
    r = len(o.dims)
    a = b.d.integer(0, r - 1, simplest=r - 1)
    divs = [g for g in range(1, o.dims[a] + 1) if o.dims[a] % g == 0]
    if len(divs) < 2:
        raise StepFailed("no group count divides the axis")
    b.param("groups", T.INT32, b.d.pick(divs[1:] + divs[:1]))
    b.param("axis", T.INT32, a - r if b.d.flag(0.3) else a)
    b.out(o.type)
