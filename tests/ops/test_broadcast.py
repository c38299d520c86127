"""ADD MUL SUB DIV POW MAXIMUM MINIMUM: kernels against independent numpy
references, the reference's integer rounding on hand-checked cases, and the
validation / run-time error paths."""

from __future__ import annotations

import numpy as np
import pytest

from nnhal.hal import OperandType, OperationType
from nnhal.ops import memo
from nnhal.ops.base import (
    NUMPY_DTYPE,
    V1_0,
    V1_1,
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
from nnhal.ops.broadcast import requantize
from nnhal.ops.registry import REGISTRY
from nnhal.ops.run import prepare_operation, run_operation

# every kernel test through validate, prepare (scalars as the model's constants) and execute;
# a test of a kernel's own run-time checks skips validation explicitly (kernel_only)
PHASES = {"scalar_constants": True, "validate": True}

T = OperandType
Op = OperationType


def tensor(t: OperandType, data, scale: float = 0.0, zp: int = 0) -> Tensor:
    return Tensor(t, np.asarray(data, dtype=NUMPY_DTYPE[t]), scale, zp)


def run(op: OperationType, inputs: list[Tensor], out_type: OperandType, scale: float = 0.0, zp: int = 0):
    return run_operation(op, inputs, [OutputSpec(out_type, (), scale, zp)], **PHASES)[0]


def act(v: int) -> Tensor:
    return tensor(T.INT32, v)


def quant_ref(real: np.ndarray, scale: float, zp: int, lo: int, hi: int) -> np.ndarray:
    return np.clip(np.floor(real / scale + 0.5) + zp, lo, hi)


rng = np.random.default_rng(0)


@pytest.mark.parametrize("op,fn", [(Op.ADD, np.add), (Op.SUB, np.subtract), (Op.MUL, np.multiply),
                                   (Op.DIV, np.divide)])
@pytest.mark.parametrize("activation,lo,hi", [(0, -np.inf, np.inf), (1, 0, np.inf), (2, -1, 1), (3, 0, 6)])
def test_float_broadcast_with_activation(op, fn, activation, lo, hi):
    a = rng.uniform(-8, 8, (2, 1, 3)).astype(np.float32)
    b = rng.uniform(0.5, 8, (4, 1)).astype(np.float32)
    out = run(op, [tensor(T.TENSOR_FLOAT32, a), tensor(T.TENSOR_FLOAT32, b), act(activation)], T.TENSOR_FLOAT32)
    assert out.shape == (2, 4, 3) and out.dtype == np.float32
    np.testing.assert_allclose(out, np.clip(fn(a, b), lo, hi), rtol=1e-6)


def test_float16_computed_in_float32():
    a = np.array([1.5, 2.25, -3.0], np.float16)
    b = np.array([0.5], np.float16)
    out = run(Op.ADD, [tensor(T.TENSOR_FLOAT16, a), tensor(T.TENSOR_FLOAT16, b), act(0)], T.TENSOR_FLOAT16)
    assert out.dtype == np.float16
    np.testing.assert_array_equal(out, np.array([2.0, 2.75, -2.5], np.float16))


@pytest.mark.parametrize("t,lo,hi", [(T.TENSOR_QUANT8_ASYMM, 0, 255), (T.TENSOR_QUANT8_ASYMM_SIGNED, -128, 127)])
@pytest.mark.parametrize("op,fn", [(Op.ADD, np.add), (Op.SUB, np.subtract)])
def test_quant_add_sub_within_one_of_real(t, lo, hi, op, fn):
    qa = rng.integers(lo, hi + 1, (3, 4))
    qb = rng.integers(lo, hi + 1, (4,))
    sa, za, sb, zb, so, zo = 0.5, lo + 100, 0.25, lo + 30, 1.0, lo + 128
    out = run(op, [tensor(t, qa, sa, za), tensor(t, qb, sb, zb), act(0)], t, so, zo)
    real = fn((qa - za) * sa, (qb - zb) * sb)
    assert np.abs(out.astype(int) - quant_ref(real, so, zo, lo, hi)).max() <= 1


def test_quant_sub_rounds_like_the_reference():
    # 0 - 5 with scale 1 -> -0.5 on output scale 10: the reference's integer path gives -1
    t = T.TENSOR_QUANT8_ASYMM
    out = run(Op.SUB, [tensor(t, [0, 5], 1.0, 0), tensor(t, [5, 0], 1.0, 0), act(0)], t, 10.0, 120)
    np.testing.assert_array_equal(out, [119, 121])


def test_quant_add_fused_relu_clamps_at_zero_point():
    t = T.TENSOR_QUANT8_ASYMM
    out = run(Op.ADD, [tensor(t, [0, 200], 1.0, 100), tensor(t, [100, 100], 1.0, 100), act(1)], t, 1.0, 128)
    np.testing.assert_array_equal(out, [128, 228])


@pytest.mark.parametrize("t,lo,hi", [(T.TENSOR_QUANT8_ASYMM, 0, 255), (T.TENSOR_QUANT8_ASYMM_SIGNED, -128, 127)])
def test_quant_mul_within_one_of_real(t, lo, hi):
    qa = rng.integers(lo, hi + 1, (5, 3))
    qb = rng.integers(lo, hi + 1, (5, 1))
    sa, za, sb, zb, so, zo = 0.05, lo + 128, 0.1, lo + 120, 0.5, lo + 127
    out = run(Op.MUL, [tensor(t, qa, sa, za), tensor(t, qb, sb, zb), act(0)], t, so, zo)
    real = ((qa - za) * sa) * ((qb - zb) * sb)
    assert np.abs(out.astype(int) - quant_ref(real, so, zo, lo, hi)).max() <= 1


@pytest.mark.parametrize("t", [T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED])
@pytest.mark.parametrize("activation", [0, 1, 3])
def test_quant_mul_table_is_the_reference_arithmetic_on_every_pair(t, activation):
    """Quantized MUL reads a table prepared for every pair of 8-bit codes: equal to the reference's integer
    arithmetic (the zero-point-shifted codes multiplied, MultiplyByQuantizedMultiplierSmallerThanOne, the
    output zero point added, clamped to the activation's range), on every pair and on a broadcast of
    strided views; the same without a prepared state."""
    from nnhal.ops.quant import activation_range, multiply_by_quantized_multiplier_smaller_than_one, quantize_multiplier

    lo = 0 if t == T.TENSOR_QUANT8_ASYMM else -128
    sa, za, sb, zb, so, zo = 0.07, lo + 131, 0.11, lo + 90, 0.9, lo + 126
    m, shift = quantize_multiplier(float(np.float32(sa) * np.float32(sb)) / float(np.float32(so)))
    alo, ahi = activation_range(activation, so, zo, t)

    def reference(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        prod = (x.astype(np.int64) - za) * (y.astype(np.int64) - zb)
        return np.clip(multiply_by_quantized_multiplier_smaller_than_one(prod, m, shift) + zo, alo, ahi)

    a = tensor(t, codes(t).reshape(256, 1), sa, za)
    b = tensor(t, codes(t).reshape(1, 256), sb, zb)
    out = OutputSpec(t, (), so, zo)
    fused = OperandInfo(T.INT32, (), value=np.int32(activation))
    p = prepare_operation(Op.MUL, [a, b, fused], [out])
    got = p.run([a, b, act(activation)])[0]
    assert got.dtype == NUMPY_DTYPE[t] and got.shape == (256, 256)
    np.testing.assert_array_equal(got.astype(np.int64), reference(a.data, b.data))
    a2 = tensor(t, codes(t).reshape(16, 16)[::2, ::3], sa, za)  # strided views, broadcast against each other
    b2 = tensor(t, codes(t)[::-51][:6], sb, zb)
    got2 = p.run([a2, b2, act(activation)])[0]
    np.testing.assert_array_equal(got2.astype(np.int64), reference(a2.data, b2.data))
    ctx = ExecContext(Op.MUL, [a, b, act(activation)], [out])
    np.testing.assert_array_equal(REGISTRY[Op.MUL].execute(ctx)[0], got)


def test_int32_arithmetic_and_floor_division():
    a = tensor(T.TENSOR_INT32, [5, -5, 7, -7, 3])
    b = tensor(T.TENSOR_INT32, [2, 2, -2, -2, 0])
    np.testing.assert_array_equal(run(Op.DIV, [a, b, act(0)], T.TENSOR_INT32), [2, -3, -4, 3, 0])
    np.testing.assert_array_equal(run(Op.ADD, [a, b, act(0)], T.TENSOR_INT32), [7, -3, 5, -9, 3])
    np.testing.assert_array_equal(run(Op.MUL, [a, b, act(0)], T.TENSOR_INT32), [10, -10, -14, 14, 0])
    big = tensor(T.TENSOR_INT32, [2**31 - 1])
    assert run(Op.ADD, [big, tensor(T.TENSOR_INT32, [1]), act(0)], T.TENSOR_INT32)[0] == -(2**31)


def test_int32_requires_no_activation():
    a = tensor(T.TENSOR_INT32, [1])
    with pytest.raises(OpExecutionError):
        run(Op.ADD, [a, a, act(1)], T.TENSOR_INT32)


def test_zero_sized_and_incompatible_shapes(kernel_only):
    z = tensor(T.TENSOR_FLOAT32, np.zeros((0, 2)))
    one = tensor(T.TENSOR_FLOAT32, np.ones((1, 2)))
    assert run(Op.ADD, [z, one, act(0)], T.TENSOR_FLOAT32).shape == (0, 2)
    assert REGISTRY[Op.ADD].allow_zero_sized
    with pytest.raises(OpExecutionError):
        run(Op.ADD, [tensor(T.TENSOR_FLOAT32, np.ones((2, 3))), tensor(T.TENSOR_FLOAT32, np.ones(2)), act(0)],
            T.TENSOR_FLOAT32)
    with pytest.raises(OpExecutionError):
        run(Op.MUL, [tensor(T.TENSOR_FLOAT32, np.ones((1, 1, 1, 1, 2))), one, act(0)], T.TENSOR_FLOAT32)


def test_signatures():
    f32, f16, q8, i32 = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_QUANT8_ASYMM, T.TENSOR_INT32
    match_signature(REGISTRY[Op.ADD], [f32, f32, T.INT32], [f32], V1_0)
    match_signature(REGISTRY[Op.ADD], [q8, q8, T.INT32], [q8], V1_0)
    match_signature(REGISTRY[Op.SUB], [f32, f32, T.INT32], [f32], V1_1)
    with pytest.raises(OpValidationError, match="before HAL"):
        match_signature(REGISTRY[Op.SUB], [f32, f32, T.INT32], [f32], V1_0)
    with pytest.raises(OpValidationError, match="before HAL"):
        match_signature(REGISTRY[Op.SUB], [q8, q8, T.INT32], [q8], V1_1)
    with pytest.raises(OpValidationError, match="before HAL"):
        match_signature(REGISTRY[Op.ADD], [i32, i32, T.INT32], [i32], V1_2)
    for bad_in, bad_out in [([f32, f16, T.INT32], [f32]), ([f32, f32], [f32]), ([f32, f32, T.INT32], [f16]),
                            ([f32, f32, T.FLOAT32], [f32])]:
        with pytest.raises(OpValidationError):
            match_signature(REGISTRY[Op.ADD], bad_in, bad_out)
    with pytest.raises(OpValidationError):
        match_signature(REGISTRY[Op.DIV], [q8, q8, T.INT32], [q8])
    with pytest.raises(OpValidationError):
        match_signature(REGISTRY[Op.POW], [i32, i32], [i32])
    match_signature(REGISTRY[Op.MAXIMUM], [i32, i32], [i32], V1_2)


def _info(op, in_dims, scales=(1.0, 1.0, 1.0), t=T.TENSOR_FLOAT32):
    ins = [OperandInfo(t, d, s) for d, s in zip(in_dims, scales[:2], strict=True)] + [OperandInfo(T.INT32, ())]
    return OpInfo(op, ins, [OperandInfo(t, (), scales[2])])


def test_validate_rank_and_mul_output_scale():
    REGISTRY[Op.ADD].validate(_info(Op.ADD, [(1, 2, 3, 4), ()]))
    with pytest.raises(OpValidationError):
        REGISTRY[Op.ADD].validate(_info(Op.ADD, [(1, 2, 3, 4, 5), (1,)]))
    REGISTRY[Op.MUL].validate(_info(Op.MUL, [(2,), (2,)], (0.5, 0.5, 0.3), T.TENSOR_QUANT8_ASYMM))
    with pytest.raises(OpValidationError):
        REGISTRY[Op.MUL].validate(_info(Op.MUL, [(2,), (2,)], (0.5, 0.5, 0.25), T.TENSOR_QUANT8_ASYMM))


def test_pow_max_min():
    base = tensor(T.TENSOR_FLOAT32, [[2.0, 3.0]])
    exp = tensor(T.TENSOR_FLOAT32, [[2.0], [0.5]])
    np.testing.assert_allclose(run(Op.POW, [base, exp], T.TENSOR_FLOAT32), [[4, 9], [2**0.5, 3**0.5]], rtol=1e-6)
    a = tensor(T.TENSOR_INT32, [1, 5, -3])
    b = tensor(T.TENSOR_INT32, [2])
    np.testing.assert_array_equal(run(Op.MAXIMUM, [a, b], T.TENSOR_INT32), [2, 5, 2])
    np.testing.assert_array_equal(run(Op.MINIMUM, [a, b], T.TENSOR_INT32), [1, 2, -3])


def test_quant_max_min_requantize_to_output_scale():
    t = T.TENSOR_QUANT8_ASYMM
    a = tensor(t, [127, 123, 255], 0.5, 127)  # 0, -2, 64
    b = tensor(t, [100, 97, 0], 1.0, 100)  # 0, -3, -100
    # on scale 2 / zero point 80: a -> 80, 79, 112 ; b -> 80, 78.5 -> 79 (std::round), 30
    np.testing.assert_array_equal(run(Op.MINIMUM, [a, b], t, 2.0, 80), [80, 79, 30])
    np.testing.assert_array_equal(run(Op.MAXIMUM, [a, b], t, 2.0, 80), [80, 79, 112])


# --------------------------------------------------------------------------
# what prepare computes once (issue 20), and the run-time path that computes it per execution


def codes(t: OperandType) -> np.ndarray:
    """Every value of an 8-bit type, entry i the value whose byte is i."""
    return np.arange(256, dtype=np.uint8).view(NUMPY_DTYPE[t])


@pytest.mark.parametrize("t", [T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED])
@pytest.mark.parametrize("op", [Op.MAXIMUM, Op.MINIMUM])
@pytest.mark.parametrize("qa,qb,qo", [((0.5, 27), (1.0, 0), (2.0, 80)), ((0.01, 128), (0.02, 3), (0.015, 100)),
                                      ((1.0, 0), (1.0, 0), (1.0, 0)), ((0.3, 255), (7.0, 200), (0.05, 10))])
def test_quant_max_min_tables_are_the_requantization_of_every_code(t, op, qa, qb, qo):
    off = -128 if t == T.TENSOR_QUANT8_ASYMM_SIGNED else 0
    (sa, za), (sb, zb), (so, zo) = [(s, z + off) for s, z in (qa, qb, qo)]
    # every pair of codes: a along rows, b along columns
    a = tensor(t, codes(t).reshape(256, 1), sa, za)
    b = tensor(t, codes(t).reshape(1, 256), sb, zb)
    out = OutputSpec(t, (), so, zo)
    p = prepare_operation(op, [a, b], [out])
    ta, tb = p.state
    assert not ta.flags.writeable and not tb.flags.writeable
    ra = requantize(codes(t), sa, za, so, zo, t)  # the direct computation, code by code
    rb = requantize(codes(t), sb, zb, so, zo, t)
    np.testing.assert_array_equal(ta, ra)
    np.testing.assert_array_equal(tb, rb)
    x, y = ra.reshape(256, 1), rb.reshape(1, 256)
    want = (np.where(y < x, y, x) if op == Op.MINIMUM else np.where(x < y, y, x)).astype(NUMPY_DTYPE[t])
    got = p.run([a, b])[0]
    assert got.dtype == NUMPY_DTYPE[t] and got.shape == (256, 256)
    np.testing.assert_array_equal(got, want)
    # without a prepared state (a runner that skips prepare), the same tables at run time
    np.testing.assert_array_equal(REGISTRY[op].execute(ExecContext(op, [a, b], [out]))[0], want)


def test_float_max_min_and_pow_have_no_state():
    f = tensor(T.TENSOR_FLOAT32, [1.0, np.nan, -0.0])
    g = tensor(T.TENSOR_FLOAT32, [np.nan, 2.0, 0.0])
    out = OutputSpec(T.TENSOR_FLOAT32, ())
    for op in (Op.MAXIMUM, Op.MINIMUM):
        assert prepare_operation(op, [f, g], [out]).state is None
    # std::max(x, y) = x < y ? y : x, std::min(x, y) = y < x ? y : x: NaN and signed zeros as C++
    np.testing.assert_array_equal(run(Op.MAXIMUM, [f, g], T.TENSOR_FLOAT32).view(np.uint32),
                                  np.array([1.0, np.nan, -0.0], np.float32).view(np.uint32))
    np.testing.assert_array_equal(run(Op.MINIMUM, [f, g], T.TENSOR_FLOAT32).view(np.uint32),
                                  np.array([1.0, np.nan, -0.0], np.float32).view(np.uint32))


def test_broadcast_shapes_remembered_and_refused_each_time(kernel_only):
    a = tensor(T.TENSOR_FLOAT32, np.ones((2, 3)))
    b = tensor(T.TENSOR_FLOAT32, np.ones((2, 1)))
    bad = tensor(T.TENSOR_FLOAT32, np.ones(2))
    for _ in range(2):  # NOTE: the second time from the memo
        assert run(Op.MAXIMUM, [a, b], T.TENSOR_FLOAT32).shape == (2, 3)
        assert run(Op.POW, [b, a], T.TENSOR_FLOAT32).shape == (2, 3)
        with pytest.raises(OpExecutionError, match="do not broadcast"):
            run(Op.MAXIMUM, [a, bad], T.TENSOR_FLOAT32)
    with memo.limit(1):  # entries evicted while in use
        for shapes in [((2, 3), (3,)), ((4, 1), (1, 5)), ((2, 3), (2,))]:
            x, y = (tensor(T.TENSOR_FLOAT32, np.ones(s)) for s in shapes)
            try:
                want = np.broadcast_shapes(*shapes)
            except ValueError:
                with pytest.raises(OpExecutionError):
                    run(Op.MINIMUM, [x, y], T.TENSOR_FLOAT32)
            else:
                assert run(Op.MINIMUM, [x, y], T.TENSOR_FLOAT32).shape == want


def test_quant_max_min_zero_d():
    t = T.TENSOR_QUANT8_ASYMM
    for op, want in ((Op.MAXIMUM, 30), (Op.MINIMUM, 20)):
        got = run(op, [tensor(t, 20, 1.0, 0), tensor(t, 30, 1.0, 0)], t, 1.0, 0)
        assert got.__class__ is np.ndarray and got.shape == () and got == want
