"""BATCH_MATMUL (AIDL version 2) through validate -> prepare -> execute: float32 / float16 against
numpy in float64, int32 sums that wrap, quant8 signed against a scalar Python-int transcription of the
reference's requantization (TFLite's reference BatchMatMul with FullyConnectedParams), the adjoint
flags, broadcasting, the run-time failures of the reference's prepare, and the version gate."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from nnhal.hal import HalVersion as V
from nnhal.hal import OperandType as T
from nnhal.hal import OperationType as Op
from nnhal.ops.base import NUMPY_DTYPE, OpExecutionError, OpValidationError, OutputSpec, Tensor
from nnhal.ops.run import run_operation

PHASES = {"scalar_constants": True, "validate": True, "version": V.AIDL_V2}
F32, F16, I32, Q8S = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM_SIGNED
RNG = np.random.default_rng(7)


def flag(v: bool) -> Tensor:
    return Tensor(T.BOOL, np.array(v))


def matmul(x: Tensor, y: Tensor, adj_x: bool = False, adj_y: bool = False, out: OutputSpec | None = None,
           **kw: object) -> np.ndarray:
    out = out or OutputSpec(x.type, ())
    res = run_operation(Op.BATCH_MATMUL, [x, y, flag(adj_x), flag(adj_y)], [out], **{**PHASES, **kw})[0]
    assert res.dtype == NUMPY_DTYPE[out.type]
    return res


def swap(a: np.ndarray, adj: bool) -> np.ndarray:
    return np.swapaxes(a, -1, -2) if adj else a


SHAPES = [  # (x, y) before the adjoints, each the product's [..., m, k] x [..., k, n]
    ((3, 4), (4, 5)), ((1, 2, 3), (1, 3, 4)), ((2, 2, 3), (2, 3, 1)), ((2, 3, 1, 6), (2, 3, 6, 2)),
    ((2, 3, 4), (1, 4, 2)), ((2, 1, 2, 3), (1, 1, 3, 2)),  # NOTE: input 1's batch dimensions of 1 broadcast
]


@pytest.mark.parametrize("xs,ys", SHAPES)
@pytest.mark.parametrize("adj_x,adj_y", list(itertools.product((False, True), repeat=2)))
@pytest.mark.parametrize("t", [F32, F16])
def test_float_against_numpy(xs: tuple, ys: tuple, adj_x: bool, adj_y: bool, t: T) -> None:
    a, b = RNG.uniform(-2, 2, xs).astype(NUMPY_DTYPE[t]), RNG.uniform(-2, 2, ys).astype(NUMPY_DTYPE[t])
    got = matmul(Tensor(t, swap(a, adj_x).copy()), Tensor(t, swap(b, adj_y).copy()), adj_x, adj_y)
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    assert got.shape == xs[:-2] + (xs[-2], ys[-1])
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-5 if t == F32 else 2e-3, atol=1e-5)


def test_float16_is_one_rounding_of_the_float32_result() -> None:
    a, b = RNG.uniform(-4, 4, (3, 7)).astype(np.float16), RNG.uniform(-4, 4, (7, 2)).astype(np.float16)
    want = (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float16)
    np.testing.assert_array_equal(matmul(Tensor(F16, a), Tensor(F16, b)), want)


def test_int32_sums_wrap_as_cpp_int32() -> None:
    a = np.array([[2**30, 2**30, 3], [-(2**31), 1, 1]], np.int32)
    b = np.array([[2, 1], [2, 1], [1, 1]], np.int32)
    want = ((a.astype(np.int64) @ b.astype(np.int64) + 2**31) % 2**32 - 2**31).astype(np.int32)
    got = matmul(Tensor(I32, a), Tensor(I32, b))
    np.testing.assert_array_equal(got, want)
    assert got[0, 0] == 3  # NOTE: 2^32 + 3 wrapped


# --------------------------------------------------------------------------
# quant8 signed: an independent scalar transcription of the reference


def _srdhm(a: int, b: int) -> int:
    if a == b == -(2**31):
        return 2**31 - 1
    ab = a * b
    nudge = (1 << 30) if ab >= 0 else 1 - (1 << 30)
    return _trunc_div(ab + nudge, 1 << 31)


def _trunc_div(a: int, d: int) -> int:
    q = abs(a) // d
    return q if a >= 0 else -q


def _rdbp(x: int, e: int) -> int:
    mask = (1 << e) - 1
    rem = x & mask
    threshold = (mask >> 1) + (1 if x < 0 else 0)
    return (x >> e) + (1 if rem > threshold else 0)


def _wrap(v: int) -> int:
    return (v + 2**31) % 2**32 - 2**31


def _quantize_multiplier(real: float) -> tuple[int, int]:
    m, e = math.frexp(real)
    q = int(math.floor(abs(m) * 2**31 + 0.5)) * (1 if m >= 0 else -1)  # NOTE: std::round of a double
    if q == 2**31:
        q, e = q // 2, e + 1
    return (0, 0) if e < -31 else (q, e)


def reference_quant(a: np.ndarray, za: int, sa: float, b: np.ndarray, zb: int, sb: float, so: float,
                    zo: int) -> np.ndarray:
    """Android 13's batchMatMulQuantized on 2-D matrices, one element at a time in Python ints."""
    real = float(np.float32(sa) * np.float32(sb)) / float(np.float32(so))
    q, shift = _quantize_multiplier(real)
    out = np.empty((a.shape[0], b.shape[1]), np.int8)
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            total = _wrap(sum((int(a[i, k]) - za) * (int(b[k, j]) - zb) for k in range(a.shape[1])))
            v = _rdbp(_srdhm(_wrap(total * (1 << max(shift, 0))), q), max(-shift, 0)) + zo
            out[i, j] = min(127, max(-128, v))
    return out


@pytest.mark.parametrize("sa,za,sb,zb,so,zo", [
    (0.25, 0, 0.5, -64, 1.0, -128),  # NOTE: the vectors' quantization
    (0.1, 3, 0.07, -5, 0.05, 10),
    (0.5, -20, 0.5, 7, 0.03, 0),  # NOTE: a multiplier above 1: MultiplyByQuantizedMultiplier's left shift
    (0.01, 127, 0.002, -128, 0.3, -1),  # NOTE: a small multiplier, extreme zero points
])
@pytest.mark.parametrize("adj_x,adj_y", [(False, False), (True, False), (False, True), (True, True)])
def test_quant8_signed_against_the_reference_transcription(sa: float, za: int, sb: float, zb: int, so: float,
                                                          zo: int, adj_x: bool, adj_y: bool) -> None:
    a = RNG.integers(-128, 128, (5, 9)).astype(np.int8)
    b = RNG.integers(-128, 128, (9, 4)).astype(np.int8)
    got = matmul(Tensor(Q8S, swap(a, adj_x).copy(), sa, za), Tensor(Q8S, swap(b, adj_y).copy(), sb, zb),
                 adj_x, adj_y, OutputSpec(Q8S, (), so, zo))
    np.testing.assert_array_equal(got, reference_quant(a, za, sa, b, zb, sb, so, zo))


def test_quant8_signed_batches_and_saturation() -> None:
    a = RNG.integers(-128, 128, (2, 3, 6)).astype(np.int8)
    b = RNG.integers(-128, 128, (2, 6, 3)).astype(np.int8)
    got = matmul(Tensor(Q8S, a, 0.5, 0), Tensor(Q8S, b, 0.5, 0), out=OutputSpec(Q8S, (), 0.01, 0))
    for k in range(2):
        np.testing.assert_array_equal(got[k], reference_quant(a[k], 0, 0.5, b[k], 0, 0.5, 0.01, 0))
    assert {-128, 127} <= set(got.ravel().tolist())


def test_constant_operands_and_flags_given_at_run_time(paths_agree) -> None:  # noqa: ANN001
    """A constant input (converted once at prepare) and adjoint flags given at run time: the same bits."""
    x = Tensor(Q8S, RNG.integers(-128, 128, (2, 4, 3)).astype(np.int8), 0.2, 1)
    y = Tensor(Q8S, RNG.integers(-128, 128, (2, 5, 3)).astype(np.int8), 0.3, -2)
    out = [OutputSpec(Q8S, (), 0.4, 3)]
    ins = [x, y, flag(False), flag(True)]
    _, results = paths_agree(Op.BATCH_MATMUL, ins, out, {1, 2, 3}, version=V.AIDL_V2)
    assert isinstance(results[0], list) and results[0][0][1] == (2, 4, 5)
    other = [Tensor(Q8S, x.data[:, :2], 0.2, 1), y, flag(False), flag(True)]  # NOTE: another run-time shape
    paths_agree(Op.BATCH_MATMUL, ins, out, {1}, other, version=V.AIDL_V2)
    f = [Tensor(F32, RNG.uniform(-1, 1, (3, 2)).astype(np.float32)), Tensor(F32, RNG.uniform(-1, 1, (3, 4))
                                                                            .astype(np.float32)), flag(True),
         flag(False)]
    paths_agree(Op.BATCH_MATMUL, f, [OutputSpec(F32, ())], {0, 2, 3}, version=V.AIDL_V2)


# --------------------------------------------------------------------------
# what the reference's prepare refuses at execution, what the model validation refuses


@pytest.mark.parametrize("xs,ys,adj_x,adj_y,message", [
    ((2, 3), (1, 3, 4), False, False, "ranks differ"),
    ((3,), (3,), False, False, "rank 1"),
    ((1, 1, 1, 2, 3), (1, 1, 1, 3, 4), False, False, "rank 5"),
    ((2, 3), (2, 4), False, False, "cannot multiply"),
    ((2, 3), (4, 3), False, False, "cannot multiply"),
    ((3, 2), (3, 4), False, False, "cannot multiply"),
    ((2, 3), (4, 3), True, True, "cannot multiply"),
    ((1, 2, 3), (2, 3, 4), False, False, "batch dimensions"),  # NOTE: the reference writes past its output
    ((3, 2, 3), (2, 3, 4), False, False, "batch dimensions"),
    ((0, 3), (3, 4), False, False, "matrix dimension is 0"),
])
def test_run_time_failures(xs: tuple, ys: tuple, adj_x: bool, adj_y: bool, message: str) -> None:
    x, y = Tensor(F32, np.ones(xs, np.float32)), Tensor(F32, np.ones(ys, np.float32))
    with pytest.raises(OpExecutionError, match=message):
        matmul(x, y, adj_x, adj_y)


def test_the_output_shape_follows_the_adjoints() -> None:
    x, y = Tensor(F32, np.ones((2, 3, 4), np.float32)), Tensor(F32, np.ones((2, 5, 3), np.float32))
    assert matmul(x, y, True, True).shape == (2, 4, 5)
    np.testing.assert_array_equal(matmul(x, y, True, True), np.full((2, 4, 5), 3, np.float32))


@pytest.mark.parametrize("types,message", [
    ((F32, F16, T.BOOL, T.BOOL, F32), "does not accept"),
    ((F32, F32, T.BOOL, T.BOOL, F16), "does not accept"),
    ((F32, F32, T.INT32, T.BOOL, F32), "does not accept"),
    ((T.TENSOR_QUANT8_ASYMM,) * 2 + (T.BOOL, T.BOOL, T.TENSOR_QUANT8_ASYMM), "does not accept"),
    ((F32, F32, T.BOOL, F32), "does not accept"),  # NOTE: three inputs (the flags are not omittable)
])
def test_model_time_refusals(types: tuple, message: str) -> None:
    def value(t: T) -> np.ndarray:
        return np.array(False) if t == T.BOOL else np.zeros((2, 2), NUMPY_DTYPE[t]) if t != T.INT32 else \
            np.array(0, np.int32)

    ins = [Tensor(t, value(t), 0.5 if "QUANT" in t.name else 0.0) for t in types[:-1]]
    with pytest.raises(OpValidationError, match=message):
        run_operation(Op.BATCH_MATMUL, ins, [OutputSpec(types[-1], (), 0.5 if "QUANT" in types[-1].name else 0)],
                      **PHASES)


@pytest.mark.parametrize("version", [V.V1_0, V.V1_2, V.V1_3, V.AIDL_V1])
def test_invalid_before_aidl_version_2(version: V) -> None:
    x = Tensor(F32, np.ones((2, 2), np.float32))
    with pytest.raises(OpValidationError, match="before HAL AIDL_V2"):
        matmul(x, x, version=version)
    for later in (V.AIDL_V2, V.AIDL_V3, V.AIDL_V4):
        np.testing.assert_array_equal(matmul(x, x, version=later), np.full((2, 2), 2, np.float32))


def test_without_a_prepared_state() -> None:
    """The reference check's dry runs execute without prepare: the same results."""
    from dataclasses import replace

    from nnhal.ops.run import prepare_operation

    x = Tensor(Q8S, RNG.integers(-128, 128, (2, 3, 5)).astype(np.int8), 0.3, 2)
    y = Tensor(Q8S, RNG.integers(-128, 128, (1, 5, 4)).astype(np.int8), 0.2, -1)
    ins = [x, y, flag(False), flag(False)]
    prep = prepare_operation(Op.BATCH_MATMUL, ins, [OutputSpec(Q8S, (), 0.5, 7)], version=V.AIDL_V2)
    np.testing.assert_array_equal(replace(prep, state=None).run(ins)[0], prep.run(ins)[0])
