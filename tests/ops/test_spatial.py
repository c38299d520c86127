"""RESIZE_*, SPACE_TO_DEPTH, DEPTH_TO_SPACE, SPACE_TO_BATCH_ND,
BATCH_TO_SPACE_ND and CHANNEL_SHUFFLE."""

from __future__ import annotations

import math

import numpy as np
import pytest

from nnhal.hal import OperandType as T
from nnhal.hal import OperationType as Op
from nnhal.ops.base import (
    NUMPY_DTYPE,
    V1_0,
    V1_1,
    V1_2,
    V1_3,
    OperandInfo,
    OpExecutionError,
    OpInfo,
    OpValidationError,
    OutputSpec,
    Tensor,
    match_signature,
)
from nnhal.ops.registry import REGISTRY
from nnhal.ops.run import run_operation

# every kernel test through validate, prepare (scalars as the model's constants) and execute
PHASES = {"scalar_constants": True, "validate": True}


def tensor(values, type_=T.TENSOR_FLOAT32, scale=0.0, zp=0) -> Tensor:
    return Tensor(type_, np.asarray(values, NUMPY_DTYPE[type_]), scale, zp)


def scalar(v, type_=T.INT32) -> Tensor:
    return Tensor(type_, np.array(v, NUMPY_DTYPE[type_]))


def boolean(v: bool) -> Tensor:
    return scalar(v, T.BOOL)


def run(op, inputs, scale=None, zp=None) -> np.ndarray:
    x = inputs[0]
    out = OutputSpec(x.type, (), x.scale if scale is None else scale, x.zero_point if zp is None else zp)
    (res,) = run_operation(op, inputs, [out], **PHASES)
    assert res.dtype == NUMPY_DTYPE[x.type]
    return res


# --------------------------------------------------------------------------
# resize


def naive_bilinear(x, oh, ow, align=False, half=False):
    b, h, w, c = x.shape
    out = np.zeros((b, oh, ow, c))

    def scale(i, o):
        return (i - 1) / (o - 1) if align and o > 1 else i / o

    sh, sw = scale(h, oh), scale(w, ow)
    for i in range(oh):
        fy = (i + 0.5) * sh - 0.5 if half else i * sh
        y0, y1 = max(math.floor(fy), 0), min(math.ceil(fy), h - 1)
        for j in range(ow):
            fx = (j + 0.5) * sw - 0.5 if half else j * sw
            x0, x1 = max(math.floor(fx), 0), min(math.ceil(fx), w - 1)
            dy, dx = fy - y0, fx - x0
            out[:, i, j] = (x[:, y0, x0] * (1 - dy) * (1 - dx) + x[:, y1, x0] * dy * (1 - dx)
                            + x[:, y0, x1] * (1 - dy) * dx + x[:, y1, x1] * dy * dx)
    return out


def naive_nearest(x, oh, ow, align=False, half=False):
    b, h, w, c = x.shape

    def index(i, n_in, n_out):
        s = (n_in - 1) / (n_out - 1) if align and n_out > 1 else n_in / n_out
        v = (i + 0.5) * s if half else i * s
        k = math.floor(v + 0.5) if align else math.floor(v)
        return max(min(k, n_in - 1), 0)

    ys = [index(i, h, oh) for i in range(oh)]
    xs = [index(j, w, ow) for j in range(ow)]
    return x[:, ys][:, :, xs]


@pytest.mark.parametrize("op,naive", [(Op.RESIZE_BILINEAR, naive_bilinear), (Op.RESIZE_NEAREST_NEIGHBOR, naive_nearest)])
@pytest.mark.parametrize("oh,ow", [(5, 7), (2, 3), (1, 1), (8, 8)])
@pytest.mark.parametrize("align,half", [(False, False), (True, False), (False, True)])
@pytest.mark.parametrize("nchw", [False, True])
def test_resize_float(op, naive, oh, ow, align, half, nchw):
    rng = np.random.default_rng(5)
    x = rng.normal(size=(2, 3, 4, 2)).astype(np.float32)
    xin = x.transpose(0, 3, 1, 2) if nchw else x
    got = run(op, [tensor(xin), scalar(ow), scalar(oh), boolean(nchw), boolean(align), boolean(half)])
    if nchw:
        got = got.transpose(0, 2, 3, 1)
    assert got.shape == (2, oh, ow, 2)
    np.testing.assert_allclose(got, naive(x, oh, ow, align, half), rtol=1e-5, atol=1e-5)


def test_resize_by_scale_and_defaults():
    x = np.arange(6, dtype=np.float32).reshape(1, 2, 3, 1)
    got = run(Op.RESIZE_BILINEAR, [tensor(x), scalar(1.5, T.FLOAT32), scalar(2.0, T.FLOAT32)])
    assert got.shape == (1, 4, 4, 1)  # floor(3 * 1.5), 2 * 2
    np.testing.assert_allclose(got, naive_bilinear(x, 4, 4), rtol=1e-6)
    x16 = x.astype(np.float16)
    got = run(Op.RESIZE_NEAREST_NEIGHBOR, [tensor(x16, T.TENSOR_FLOAT16), scalar(2.0, T.FLOAT16),
                                           scalar(0.5, T.FLOAT16), boolean(False)])
    assert got.shape == (1, 1, 6, 1)
    np.testing.assert_array_equal(got.ravel(), [0, 0, 1, 1, 2, 2])


def test_resize_quant_truncates_and_keeps_types():
    # (0 + 3) / 2 = 1.5 -> 1 for uint8; (-3 + 0) / 2 = -1.5 -> -1 for int8 (static_cast)
    u = tensor(np.array([0, 3], np.uint8).reshape(1, 1, 2, 1), T.TENSOR_QUANT8_ASYMM, 0.5, 0)
    got = run(Op.RESIZE_BILINEAR, [u, scalar(4), scalar(1), boolean(False), boolean(False), boolean(True)])
    assert got.dtype == np.uint8
    s = tensor(np.array([-3, 0], np.int8).reshape(1, 1, 2, 1), T.TENSOR_QUANT8_ASYMM_SIGNED, 0.5, 0)
    got_s = run(Op.RESIZE_BILINEAR, [s, scalar(3), scalar(1), boolean(False), boolean(True)])
    np.testing.assert_array_equal(got_s.ravel(), [-3, -1, 0])
    got_n = run(Op.RESIZE_NEAREST_NEIGHBOR, [s, scalar(4), scalar(1), boolean(False)])
    np.testing.assert_array_equal(got_n.ravel(), [-3, -3, 0, 0])


def test_resize_zero_batch_and_errors():
    x = tensor(np.zeros((0, 2, 2, 3), np.float32))
    assert run(Op.RESIZE_BILINEAR, [x, scalar(3), scalar(5)]).shape == (0, 5, 3, 3)
    assert run(Op.RESIZE_NEAREST_NEIGHBOR, [tensor(np.zeros((0, 3, 2, 2))), scalar(3), scalar(5),
                                            boolean(True)]).shape == (0, 3, 5, 3)
    x = tensor(np.ones((1, 2, 2, 1), np.float32))
    with pytest.raises(OpExecutionError, match="half_pixel"):
        run(Op.RESIZE_BILINEAR, [x, scalar(3), scalar(3), boolean(False), boolean(True), boolean(True)])
    with pytest.raises(OpExecutionError, match="positive"):
        run(Op.RESIZE_BILINEAR, [x, scalar(0), scalar(3)])
    with pytest.raises(OpExecutionError, match="positive"):
        run(Op.RESIZE_BILINEAR, [x, scalar(0.1, T.FLOAT32), scalar(1.0, T.FLOAT32)])
    with pytest.raises(OpExecutionError, match="4-D"):
        run(Op.RESIZE_BILINEAR, [tensor(np.ones((2, 2, 1))), scalar(3), scalar(3)])
    q = tensor(np.ones((1, 2, 2, 1), np.uint8), T.TENSOR_QUANT8_ASYMM, 0.5, 0)
    with pytest.raises(OpExecutionError, match="scale"):
        run(Op.RESIZE_BILINEAR, [q, scalar(3), scalar(3)], scale=1.0)


def test_resize_signatures():
    bil, nn = REGISTRY[Op.RESIZE_BILINEAR], REGISTRY[Op.RESIZE_NEAREST_NEIGHBOR]
    f32 = T.TENSOR_FLOAT32
    assert match_signature(bil, [f32, T.INT32, T.INT32], [f32], V1_0).version == V1_0
    assert match_signature(bil, [f32, T.FLOAT32, T.FLOAT32], [f32], V1_2)
    assert match_signature(nn, [T.TENSOR_QUANT8_ASYMM, T.FLOAT32, T.FLOAT32, T.BOOL], [T.TENSOR_QUANT8_ASYMM], V1_2)
    assert match_signature(bil, [f32, T.INT32, T.INT32, T.BOOL, T.BOOL, T.BOOL], [f32], V1_3)
    for op, ins, outs, ver in [
        (bil, [f32, T.FLOAT32, T.FLOAT32], [f32], V1_1),                 # scale needs 1.2
        (bil, [f32, T.INT32, T.INT32, T.BOOL], [f32], V1_1),             # layout needs 1.2
        (bil, [f32, T.INT32, T.INT32, T.BOOL, T.BOOL], [f32], V1_2),     # align_corners needs 1.3
        (bil, [f32, T.FLOAT16, T.FLOAT16], [f32], V1_3),                 # scalar type mismatch
        (bil, [T.TENSOR_FLOAT16, T.FLOAT32, T.FLOAT32], [T.TENSOR_FLOAT16], V1_3),
        (bil, [f32, T.INT32, T.FLOAT32], [f32], V1_3),                   # mixed scalars
        (bil, [T.TENSOR_QUANT8_ASYMM, T.INT32, T.INT32], [T.TENSOR_QUANT8_ASYMM], V1_1),
        (nn, [f32, T.INT32, T.INT32], [f32], V1_3),                      # layout is required
        (nn, [T.TENSOR_QUANT8_ASYMM_SIGNED, T.INT32, T.INT32, T.BOOL], [T.TENSOR_QUANT8_ASYMM_SIGNED], V1_2),
    ]:
        with pytest.raises(OpValidationError):
            match_signature(op, ins, outs, ver)


# --------------------------------------------------------------------------
# SPACE_TO_DEPTH / DEPTH_TO_SPACE


def naive_space_to_depth(x, bs):
    b, h, w, c = x.shape
    out = np.zeros((b, h // bs, w // bs, c * bs * bs), x.dtype)
    for i in range(h):
        for j in range(w):
            out[:, i // bs, j // bs, ((i % bs) * bs + j % bs) * c:((i % bs) * bs + j % bs + 1) * c] = x[:, i, j]
    return out


@pytest.mark.parametrize("nchw", [False, True])
def test_space_depth_roundtrip(nchw):
    x = np.arange(2 * 4 * 6 * 3, dtype=np.float32).reshape(2, 4, 6, 3)
    want = naive_space_to_depth(x, 2)
    xin = x.transpose(0, 3, 1, 2) if nchw else x
    got = run(Op.SPACE_TO_DEPTH, [tensor(xin), scalar(2), boolean(nchw)])
    back = run(Op.DEPTH_TO_SPACE, [tensor(got), scalar(2), boolean(nchw)])
    if nchw:
        got = got.transpose(0, 2, 3, 1)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(back, xin)


def test_depth_to_space_spec_example_and_errors():
    # the spec's 1.0 example: [1, 1, 1, 4] with block 2 -> [1, 2, 2, 1]
    q = tensor(np.array([1, 2, 3, 4], np.uint8).reshape(1, 1, 1, 4), T.TENSOR_QUANT8_ASYMM, 0.5, 3)
    got = run(Op.DEPTH_TO_SPACE, [q, scalar(2)])
    np.testing.assert_array_equal(got.reshape(2, 2), [[1, 2], [3, 4]])
    with pytest.raises(OpExecutionError, match="multiple"):
        run(Op.DEPTH_TO_SPACE, [tensor(np.ones((1, 1, 1, 3))), scalar(2)])
    with pytest.raises(OpExecutionError, match="multiple"):
        run(Op.SPACE_TO_DEPTH, [tensor(np.ones((1, 3, 2, 1))), scalar(2)])
    with pytest.raises(OpExecutionError, match="positive"):
        run(Op.SPACE_TO_DEPTH, [tensor(np.ones((1, 2, 2, 1))), scalar(0)])
    with pytest.raises(OpExecutionError, match="4-D"):
        run(Op.SPACE_TO_DEPTH, [tensor(np.ones((2, 2, 1))), scalar(1)])
    op = REGISTRY[Op.SPACE_TO_DEPTH]
    assert match_signature(op, [T.TENSOR_QUANT8_ASYMM, T.INT32], [T.TENSOR_QUANT8_ASYMM], V1_0)
    with pytest.raises(OpValidationError):
        match_signature(op, [T.TENSOR_FLOAT32, T.INT32, T.BOOL], [T.TENSOR_FLOAT32], V1_1)
    with pytest.raises(OpValidationError):
        match_signature(op, [T.TENSOR_FLOAT16, T.INT32], [T.TENSOR_FLOAT16], V1_1)
    with pytest.raises(OpValidationError):
        match_signature(op, [T.TENSOR_INT32, T.INT32], [T.TENSOR_INT32], V1_3)


# --------------------------------------------------------------------------
# SPACE_TO_BATCH_ND / BATCH_TO_SPACE_ND


def naive_space_to_batch(x, bh, bw, pads, fill):
    (pt, pb), (pl, pr) = pads
    p = np.pad(x, ((0, 0), (pt, pb), (pl, pr), (0, 0)), constant_values=fill)
    b, h, w, c = p.shape
    out = np.zeros((b * bh * bw, h // bh, w // bw, c), x.dtype)
    for ob in range(out.shape[0]):
        ib, shift = ob % b, ob // b
        sy, sx = shift // bw, shift % bw
        out[ob] = p[ib, sy::bh, sx::bw]
    return out


@pytest.mark.parametrize("nchw", [False, True])
def test_space_to_batch_and_back(nchw):
    rng = np.random.default_rng(6)
    x = rng.integers(0, 255, size=(2, 5, 4, 3)).astype(np.uint8)
    pads = [[1, 0], [0, 2]]
    want = naive_space_to_batch(x, 3, 2, pads, 9)
    xin = x.transpose(0, 3, 1, 2) if nchw else x
    ins = [tensor(xin, T.TENSOR_QUANT8_ASYMM, 0.5, 9), tensor([3, 2], T.TENSOR_INT32), tensor(pads, T.TENSOR_INT32),
           boolean(nchw)]
    got = run(Op.SPACE_TO_BATCH_ND, ins)
    back = run(Op.BATCH_TO_SPACE_ND, [tensor(got, T.TENSOR_QUANT8_ASYMM, 0.5, 9), tensor([3, 2], T.TENSOR_INT32),
                                      boolean(nchw)])
    if nchw:
        got = got.transpose(0, 2, 3, 1)
        back = back.transpose(0, 2, 3, 1)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(back[:, 1:6, 0:4], x)  # crop the padding back off


def test_space_to_batch_spec_example_and_errors():
    x = np.arange(1, 17, dtype=np.float32).reshape(1, 4, 4, 1)
    got = run(Op.SPACE_TO_BATCH_ND, [tensor(x), tensor([2, 2], T.TENSOR_INT32), tensor([[0, 0], [0, 0]], T.TENSOR_INT32)])
    np.testing.assert_array_equal(got.ravel(), [1, 3, 9, 11, 2, 4, 10, 12, 5, 7, 13, 15, 6, 8, 14, 16])
    for block, pads, msg in [([2, 2], [[0, 1], [0, 0]], "multiple"), ([0, 2], [[0, 0], [0, 0]], ">= 1"),
                             ([2, 2], [[-2, 0], [0, 0]], "non-negative"), ([2, 2, 1], [[0, 0], [0, 0]], "block"),
                             ([2, 2], [[0, 0, 0, 0]], "paddings")]:
        with pytest.raises(OpExecutionError, match=msg):
            run(Op.SPACE_TO_BATCH_ND, [tensor(x), tensor(block, T.TENSOR_INT32), tensor(pads, T.TENSOR_INT32)])
    with pytest.raises(OpExecutionError, match="multiple"):
        run(Op.BATCH_TO_SPACE_ND, [tensor(np.ones((3, 1, 1, 1))), tensor([2, 1], T.TENSOR_INT32)])


def test_batch_space_validation():
    s2b, b2s = REGISTRY[Op.SPACE_TO_BATCH_ND], REGISTRY[Op.BATCH_TO_SPACE_ND]
    q8, ti = T.TENSOR_QUANT8_ASYMM, T.TENSOR_INT32
    assert match_signature(s2b, [q8, ti, ti], [q8], V1_1)
    assert match_signature(b2s, [T.TENSOR_FLOAT32, ti], [T.TENSOR_FLOAT32], V1_1)
    with pytest.raises(OpValidationError):  # a 1.1 operation
        match_signature(b2s, [T.TENSOR_FLOAT32, ti], [T.TENSOR_FLOAT32], V1_0)
    with pytest.raises(OpValidationError):
        match_signature(b2s, [T.TENSOR_FLOAT32, ti, T.BOOL], [T.TENSOR_FLOAT32], V1_1)
    with pytest.raises(OpValidationError):
        match_signature(s2b, [q8, ti, T.INT32], [q8], V1_3)

    def info(zp, version):
        ins = [OperandInfo(q8, (1, 2, 2, 1), 0.5, zp), OperandInfo(ti, (2,)), OperandInfo(ti, (2, 2))]
        return OpInfo(Op.SPACE_TO_BATCH_ND, ins, [OperandInfo(q8, ())], version)

    s2b.validate(info(0, V1_1))
    s2b.validate(info(5, V1_2))
    with pytest.raises(OpValidationError, match="zeroPoint"):
        s2b.validate(info(5, V1_1))


# --------------------------------------------------------------------------
# CHANNEL_SHUFFLE


@pytest.mark.parametrize("axis", [0, 1, -1, 2])
def test_channel_shuffle(axis):
    x = np.arange(2 * 6 * 3 * 12, dtype=np.int8).reshape(2, 6, 3, 12)
    ax = axis % 4
    n = x.shape[ax]
    groups = 2 if n % 3 else 3
    got = run(Op.CHANNEL_SHUFFLE, [tensor(x, T.TENSOR_QUANT8_ASYMM_SIGNED, 0.5, 1), scalar(groups), scalar(axis)])
    gs = n // groups
    perm = [(k % groups) * gs + k // groups for k in range(n)]
    np.testing.assert_array_equal(got, np.take(x, perm, axis=ax))


def test_channel_shuffle_errors():
    x = tensor(np.ones((2, 6), np.float32))
    with pytest.raises(OpExecutionError, match="groups"):
        run(Op.CHANNEL_SHUFFLE, [x, scalar(4), scalar(1)])
    with pytest.raises(OpExecutionError, match="groups"):
        run(Op.CHANNEL_SHUFFLE, [x, scalar(0), scalar(1)])
    with pytest.raises(OpExecutionError, match="axis"):
        run(Op.CHANNEL_SHUFFLE, [x, scalar(2), scalar(2)])
    op = REGISTRY[Op.CHANNEL_SHUFFLE]
    assert match_signature(op, [T.TENSOR_FLOAT16, T.INT32, T.INT32], [T.TENSOR_FLOAT16], V1_2)
    with pytest.raises(OpValidationError):
        match_signature(op, [T.TENSOR_QUANT8_ASYMM_SIGNED, T.INT32, T.INT32], [T.TENSOR_QUANT8_ASYMM_SIGNED], V1_2)
    with pytest.raises(OpValidationError):
        op.validate(OpInfo(Op.CHANNEL_SHUFFLE, [OperandInfo(T.TENSOR_FLOAT32, (1, 2, 3, 4, 5))],
                           [OperandInfo(T.TENSOR_FLOAT32, ())], V1_3))


@pytest.mark.parametrize("op", [Op.RESIZE_BILINEAR, Op.RESIZE_NEAREST_NEIGHBOR])
def test_resize_prepared_once(op):
    """Constant sizes and flags are parsed at prepare and the coordinate
    tables of the declared input size built there; another input size gets its
    own table at run time; the results equal those of run-time scalars."""
    from nnhal.ops.run import prepare_operation, tensor_info

    rng = np.random.default_rng(3)
    x1 = tensor(rng.standard_normal((1, 3, 5, 2)).astype(np.float32))
    x2 = tensor(rng.standard_normal((2, 4, 2, 2)).astype(np.float32))
    scalars = [scalar(2.5, T.FLOAT32), scalar(1.5, T.FLOAT32), boolean(False), boolean(False), boolean(True)]
    out = [OutputSpec(T.TENSOR_FLOAT32, ())]
    const = prepare_operation(op, [tensor_info(x1)] + [tensor_info(s, True) for s in scalars], out)
    assert len(const.state.tables) == 1  # the declared 3 x 5 input's table
    dynamic = prepare_operation(op, [tensor_info(t) for t in [x1, *scalars]], out)
    for x in (x1, x2, x1):
        (a,) = const.run([x, *scalars])
        (b,) = dynamic.run([x, *scalars])
        np.testing.assert_array_equal(a, b)
    assert len(const.state.tables) == 2
    assert len(dynamic.state.tables) == 0  # run-time scalars: nothing remembered
    bad = [scalar(3), scalar(3), boolean(False), boolean(True), boolean(True)]
    failing = prepare_operation(op, [tensor_info(x1)] + [tensor_info(s, True) for s in bad], out)
    for _ in range(2):  # every execution fails as the reference does, prepare did not
        with pytest.raises(OpExecutionError, match="half_pixel"):
            failing.run([x1, *bad])


@pytest.mark.parametrize("v", [np.inf, np.nan])
def test_resize_non_finite_scale_fails_at_execution(v):
    """Prepare does not fail on it; every execution does, cleanly."""
    x = tensor(np.ones((1, 2, 2, 1), np.float32))
    s = scalar(v, T.FLOAT32)
    with pytest.raises(OpExecutionError, match="finite"):
        run(Op.RESIZE_BILINEAR, [x, s, s])


# --------------------------------------------------------------------------
# the Prepare/Eval split: constant block sizes, paddings, groups, layouts


def arange(*shape, type_=T.TENSOR_FLOAT32, zp=0) -> Tensor:
    v = np.arange(int(np.prod(shape))).reshape(shape)
    if type_ == T.TENSOR_FLOAT32:
        return tensor(v.astype(np.float32) - 5, type_)
    return tensor((v * 7 % 200).astype(NUMPY_DTYPE[type_]), type_, 0.5, zp)


def ti(v) -> Tensor:
    return tensor(v, T.TENSOR_INT32)


def same_out(x: Tensor) -> list[OutputSpec]:
    return [OutputSpec(x.type, (), x.scale, x.zero_point)]


Q8A, Q8S_ = T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED
# (operation, data input, parameters (all constants in the prepared form), other data inputs ([x]))
PREPARED_CASES = {
    "space_to_depth": (Op.SPACE_TO_DEPTH, arange(2, 4, 6, 3), [scalar(2)], [arange(1, 2, 2, 5)], [arange(1, 3, 2, 1)]),
    "space_to_depth_nchw": (Op.SPACE_TO_DEPTH, arange(2, 3, 4, 6, type_=Q8A, zp=3), [scalar(2), boolean(True)],
                            [arange(1, 1, 6, 2, type_=Q8A, zp=3)]),
    "depth_to_space": (Op.DEPTH_TO_SPACE, arange(1, 2, 3, 8), [scalar(2), boolean(False)], [arange(2, 1, 1, 4)],
                       [arange(1, 1, 1, 6)]),
    "depth_to_space_nchw": (Op.DEPTH_TO_SPACE, arange(2, 9, 2, 3, type_=Q8S_, zp=-2), [scalar(3), boolean(True)],
                            [arange(1, 18, 1, 1, type_=Q8S_, zp=-2)], [arange(1, 4, 1, 1, type_=Q8S_, zp=-2)]),
    "space_to_batch": (Op.SPACE_TO_BATCH_ND, arange(2, 5, 4, 3, type_=Q8A, zp=9), [ti([3, 2]), ti([[1, 0], [0, 2]])],
                       [arange(1, 2, 2, 1, type_=Q8A, zp=9)], [arange(1, 3, 3, 1, type_=Q8A, zp=9)]),
    "space_to_batch_nchw": (Op.SPACE_TO_BATCH_ND, arange(2, 3, 5, 4, type_=Q8S_, zp=-7),
                            [ti([3, 2]), ti([[1, 0], [0, 2]]), boolean(True)],
                            [arange(1, 1, 2, 2, type_=Q8S_, zp=-7)]),
    "space_to_batch_no_padding": (Op.SPACE_TO_BATCH_ND, arange(1, 4, 4, 1), [ti([2, 2]), ti([[0, 0], [0, 0]])],
                                  [arange(2, 2, 6, 3)]),
    "batch_to_space": (Op.BATCH_TO_SPACE_ND, arange(6, 2, 1, 3), [ti([3, 2])], [arange(12, 1, 1, 1)],
                       [arange(4, 1, 1, 1)]),
    "batch_to_space_nchw": (Op.BATCH_TO_SPACE_ND, arange(4, 3, 2, 1, type_=Q8A, zp=1), [ti([1, 4]), boolean(True)],
                            [arange(8, 1, 1, 2, type_=Q8A, zp=1)]),
    "channel_shuffle": (Op.CHANNEL_SHUFFLE, arange(2, 3, 12, type_=Q8S_, zp=1), [scalar(3), scalar(-1)],
                        [arange(1, 6, type_=Q8S_, zp=1)], [arange(4, 4, type_=Q8S_, zp=1)]),
    "channel_shuffle_axis0": (Op.CHANNEL_SHUFFLE, arange(6, 2), [scalar(2), scalar(0)], [arange(4, 1, 1, 3)]),
}


@pytest.mark.parametrize("name", sorted(PREPARED_CASES))
def test_prepared_and_runtime_paths_agree(name, paths_agree):
    op, x, params, *others = PREPARED_CASES[name]
    inputs = [x, *params]
    prep, results = paths_agree(op, inputs, same_out(x), set(range(1, len(inputs))),
                                *[[*o, *params] for o in others])
    assert isinstance(results[0], list)
    assert len(prep.state.plans) == 1 + len(others)  # NOTE: the declared shape's plan made at prepare


@pytest.mark.parametrize("nchw", [False, True])
def test_prepared_space_batch_and_depth_match_the_naive_forms(nchw, paths_agree):
    rng = np.random.default_rng(11)
    x = rng.integers(0, 255, size=(2, 5, 4, 3)).astype(np.uint8)
    xin = x.transpose(0, 3, 1, 2) if nchw else x
    q = tensor(xin, Q8A, 0.5, 9)
    pads = [[1, 0], [0, 2]]
    _, [res, *_] = paths_agree(Op.SPACE_TO_BATCH_ND, [q, ti([3, 2]), ti(pads), boolean(nchw)], same_out(q), {1, 2, 3})
    got = np.frombuffer(res[0][2], np.uint8).reshape(res[0][1])
    np.testing.assert_array_equal(got.transpose(0, 2, 3, 1) if nchw else got, naive_space_to_batch(x, 3, 2, pads, 9))
    y = tensor(rng.standard_normal((2, 4, 6, 3)).astype(np.float32))
    yin = tensor(y.data.transpose(0, 3, 1, 2)) if nchw else y
    _, [res, *_] = paths_agree(Op.SPACE_TO_DEPTH, [yin, scalar(2), boolean(nchw)], same_out(y), {1, 2})
    got = np.frombuffer(res[0][2], np.float32).reshape(res[0][1])
    np.testing.assert_array_equal(got.transpose(0, 2, 3, 1) if nchw else got, naive_space_to_depth(y.data, 2))


BAD_CONSTANTS = {
    "space_to_depth_zero_block": (Op.SPACE_TO_DEPTH, arange(1, 2, 2, 1), [scalar(0)], "block size 0 must be positive"),
    "space_to_depth_negative_block": (Op.SPACE_TO_DEPTH, arange(1, 2, 2, 1), [scalar(-2), boolean(True)],
                                      "block size -2 must be positive"),
    "space_to_depth_not_multiple": (Op.SPACE_TO_DEPTH, arange(1, 3, 2, 1), [scalar(2)], "multiples of the block"),
    "depth_to_space_negative_block": (Op.DEPTH_TO_SPACE, arange(1, 1, 1, 4), [scalar(-1)], "must be positive"),
    "depth_to_space_depth": (Op.DEPTH_TO_SPACE, arange(1, 1, 1, 3), [scalar(2)], "multiple of block size squared"),
    "space_to_batch_zero_block": (Op.SPACE_TO_BATCH_ND, arange(1, 2, 2, 1), [ti([0, 1]), ti([[0, 0], [0, 0]])],
                                  ">= 1"),
    "space_to_batch_negative_padding": (Op.SPACE_TO_BATCH_ND, arange(1, 2, 2, 1), [ti([1, 1]), ti([[0, -1], [0, 0]])],
                                        "non-negative"),
    "space_to_batch_not_multiple": (Op.SPACE_TO_BATCH_ND, arange(1, 3, 2, 1), [ti([2, 2]), ti([[0, 0], [0, 0]])],
                                    "multiple of the block shape"),
    "space_to_batch_block_shape": (Op.SPACE_TO_BATCH_ND, arange(1, 2, 2, 1), [ti([2]), ti([[0, 0], [0, 0]])],
                                   "2 values"),
    "batch_to_space_negative_block": (Op.BATCH_TO_SPACE_ND, arange(4, 1, 1, 1), [ti([-2, 2])], ">= 1"),
    "batch_to_space_batch": (Op.BATCH_TO_SPACE_ND, arange(3, 1, 1, 1), [ti([2, 1])], "multiple of the block size"),
    "channel_shuffle_zero_groups": (Op.CHANNEL_SHUFFLE, arange(2, 6), [scalar(0), scalar(1)], "positive"),
    "channel_shuffle_groups": (Op.CHANNEL_SHUFFLE, arange(2, 6), [scalar(4), scalar(1)], "divide the axis size 6"),
    "channel_shuffle_axis": (Op.CHANNEL_SHUFFLE, arange(2, 6), [scalar(2), scalar(2)], "axis 2 out of range"),
}


@pytest.mark.parametrize("name", sorted(BAD_CONSTANTS))
def test_bad_constant_parameter_fails_every_execution(name, paths_agree):
    """Prepare accepts the model; every execution fails with OpExecutionError, the run-time path the same."""
    op, x, params, match = BAD_CONSTANTS[name]
    inputs = [x, *params]
    prep, results = paths_agree(op, inputs, same_out(x), set(range(1, len(inputs))), validate=False)
    assert prep.state is not None and all(isinstance(r, str) for r in results)
    for _ in range(2):
        with pytest.raises(OpExecutionError, match=match):
            prep.run(inputs)


def test_channel_shuffle_output_quantization_checked_once():
    """The output's scale / zero point (model data) is checked by the prepared plan: every execution fails."""
    x = arange(2, 6, type_=Q8A, zp=3)
    bad = [OutputSpec(Q8A, (), 0.25, 3)]
    from nnhal.ops.run import prepare_operation, tensor_info

    prep = prepare_operation(Op.CHANNEL_SHUFFLE, [tensor_info(x), tensor_info(scalar(2), True),
                                                  tensor_info(scalar(1), True)], bad, validate=False)
    for _ in range(2):
        with pytest.raises(OpExecutionError, match="scale and zero point"):
            prep.run([x, scalar(2), scalar(1)])
