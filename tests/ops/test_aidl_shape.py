"""The AIDL HAL's tensor operations through validate -> prepare -> execute: PACK and RESHAPE of
TENSOR_INT32 (AIDL version 2), MIRROR_PAD and REVERSE (version 3), against numpy (np.stack, np.pad's
"reflect" / "symmetric", np.flip) on every operand type across ranks and axes, Android's spec cases
(runtime/test/specs/AIDL_V3/mirror_pad*.mod.py, reverse.mod.py), what the model validation refuses,
what the reference's prepare fails at execution, and the version gate."""

from __future__ import annotations

import itertools
from typing import Any, Optional, Sequence

import numpy as np
import pytest

from nnhal.hal import HalVersion as V
from nnhal.hal import OperandLifeTime as L
from nnhal.hal import OperandType as T
from nnhal.hal import OperationType as Op
from nnhal.ops.base import NUMPY_DTYPE, OperandInfo, OpExecutionError, OpValidationError, OutputSpec, Tensor
from nnhal.ops.run import prepare_operation, run_operation

# every kernel test through validate, prepare (parameters as the model's constants) and execute
PHASES: dict[str, Any] = {"validate": True}

F32, F16, I32, Q8, Q8S = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM,
                          T.TENSOR_QUANT8_ASYMM_SIGNED)
TYPES = (F32, F16, I32, Q8, Q8S)
QUANT = {Q8: (0.125, 4), Q8S: (0.25, -9)}  # NOTE: the spec files' quantizations
RNG = np.random.default_rng(11)


def data(t: T, shape: Sequence[int]) -> np.ndarray:
    """Distinct-ish values of type t (quantized: the raw integers)."""
    if t in (Q8, Q8S):
        lo, hi = (0, 256) if t == Q8 else (-128, 128)
        return RNG.integers(lo, hi, shape).astype(NUMPY_DTYPE[t])
    if t == I32:
        return RNG.integers(-1000, 1000, shape).astype(np.int32)
    return RNG.uniform(-30, 30, shape).astype(NUMPY_DTYPE[t])


def tensor(t: T, values: Any) -> Tensor:
    scale, zp = QUANT.get(t, (0.0, 0))
    return Tensor(t, np.asarray(values, NUMPY_DTYPE[t]), scale, zp)


def out_spec(t: T, dims: Sequence[int] = ()) -> OutputSpec:
    scale, zp = QUANT.get(t, (0.0, 0))
    return OutputSpec(t, tuple(dims), scale, zp)


def ints(values: Any) -> Tensor:
    return Tensor(I32, np.asarray(values, np.int32))


def i32(v: int) -> Tensor:
    return Tensor(T.INT32, np.array(v, np.int32))


def run(op: Op, ins: list[Tensor], out: OutputSpec, version: V = V.AIDL_V3,
        constants: Optional[Sequence[bool]] = None) -> np.ndarray:
    """The operation with every input but input 0 (PACK: input 0 only) a constant by default."""
    if constants is None:
        constants = [i == 0 for i in range(len(ins))] if op == Op.PACK else [i > 0 for i in range(len(ins))]
    res = run_operation(op, ins, [out], constants=constants, version=version, **PHASES)[0]
    assert res.dtype == out.dtype
    return res


def info(t: T, dims: Sequence[int], scale: float = 0.0, zp: int = 0, value: Any = None) -> OperandInfo:
    life = L.CONSTANT_COPY if value is not None else L.SUBGRAPH_INPUT
    return OperandInfo(t, tuple(dims), scale, zp, lifetime=life,
                       value=None if value is None else np.asarray(value, NUMPY_DTYPE[t]))


def validate(op: Op, ins: list[OperandInfo], out: OperandInfo, version: V = V.AIDL_V3) -> None:
    prepare_operation(op, ins, [out], version=version)


# --------------------------------------------------------------------------
# PACK


@pytest.mark.parametrize("t", TYPES)
@pytest.mark.parametrize("shape", [(3,), (2, 3), (2, 1, 4), (1, 2, 3, 2)])
def test_pack_against_np_stack(t: T, shape: tuple) -> None:
    for n in (1, 2, 4):
        tensors = [data(t, shape) for _ in range(n)]
        for axis in range(len(shape) + 1):
            got = run(Op.PACK, [i32(axis), *(tensor(t, a) for a in tensors)], out_spec(t), V.AIDL_V2)
            np.testing.assert_array_equal(got, np.stack(tensors, axis))


def test_pack_spec_example() -> None:
    a, b = np.arange(12).reshape(3, 4), np.arange(12, 24).reshape(3, 4)
    got = run(Op.PACK, [i32(1), tensor(F32, a), tensor(F32, b)], out_spec(F32, (3, 2, 4)), V.AIDL_V2)
    np.testing.assert_array_equal(got.reshape(-1), [0, 1, 2, 3, 12, 13, 14, 15, 4, 5, 6, 7, 16, 17, 18, 19, 8, 9,
                                                    10, 11, 20, 21, 22, 23])


@pytest.mark.parametrize("axis,shapes,message", [
    (-1, [(2, 3), (2, 3)], "axis -1 out of range"),
    (3, [(2, 3), (2, 3)], r"axis 3 out of range \[0, 3\)"),
    (0, [(2, 3), (3, 2)], "input tensor 1 has shape"),
    (1, [(2, 3), (2, 4)], "input tensor 1 has shape"),
])
def test_pack_run_time_failures(axis: int, shapes: list, message: str) -> None:
    ins = [i32(axis), *(tensor(F32, np.zeros(s)) for s in shapes)]
    with pytest.raises(OpExecutionError, match=message):
        run(Op.PACK, ins, out_spec(F32), V.AIDL_V2)
    with pytest.raises(OpExecutionError, match=message):  # NOTE: the axis given at run time
        run(Op.PACK, ins, out_spec(F32), V.AIDL_V2, constants=[False] * len(ins))


def test_pack_rank_0_tensors_fail(kernel_only: None) -> None:
    with pytest.raises(OpExecutionError, match="rank >= 1"):
        run(Op.PACK, [i32(0), Tensor(F32, np.array(1.0, np.float32))], out_spec(F32), V.AIDL_V2)


def test_pack_constant_and_run_time_axis_agree(paths_agree: Any) -> None:
    ins = [i32(2), tensor(Q8S, data(Q8S, (2, 3))), tensor(Q8S, data(Q8S, (2, 3)))]
    other = [i32(2), tensor(Q8S, data(Q8S, (4, 1))), tensor(Q8S, data(Q8S, (4, 1)))]
    _, results = paths_agree(Op.PACK, ins, [out_spec(Q8S)], {0}, other, version=V.AIDL_V2)
    assert [r[0][1] for r in results] == [(2, 3, 2), (4, 1, 2), (2, 3, 2)]


@pytest.mark.parametrize("ins,out,message", [
    ([info(T.INT32, ()), info(Q8, (2,), 0.5, 4), info(Q8, (2,), 0.25, 4)], info(Q8, (), 0.5, 4), "input 2 is quantized"),
    ([info(T.INT32, ()), info(Q8S, (2,), 0.5, 4)], info(Q8S, (), 0.5, 3), "input 1 is quantized"),
    ([info(T.INT32, ()), info(F32, (2,)), info(F32, (2, 2))], info(F32, ()), "input 2 has rank 2, expected 1"),
    ([info(T.INT32, ()), info(F32, (2, 2))], info(F32, (1, 2)), "input 1 has rank 2, expected 1"),
    ([info(T.INT32, ()), info(F32, (2,)), info(F16, (2,))], info(F32, ()), "does not accept"),
    ([info(T.INT32, ()), info(F32, (2,))], info(F16, ()), "does not accept"),
    ([info(I32, (1,)), info(F32, (2,))], info(F32, ()), "does not accept"),
    ([info(T.INT32, ())], info(F32, ()), "does not accept"),
    ([info(T.INT32, ()), info(T.TENSOR_BOOL8, (2,))], info(T.TENSOR_BOOL8, ()), "does not accept"),
])
def test_pack_model_time_refusals(ins: list, out: OperandInfo, message: str) -> None:
    with pytest.raises(OpValidationError, match=message):
        validate(Op.PACK, ins, out, V.AIDL_V2)


def test_pack_ranks_as_the_reference_checks_them() -> None:
    """An output of rank 1 leaves the inputs' rank open (the reference's 0 means "not determined");
    unknown input ranks pass."""
    validate(Op.PACK, [info(T.INT32, ()), info(F32, (2, 2)), info(F32, ())], info(F32, (2,)), V.AIDL_V2)
    validate(Op.PACK, [info(T.INT32, ()), info(F32, ()), info(F32, (2, 2))], info(F32, ()), V.AIDL_V2)


# --------------------------------------------------------------------------
# MIRROR_PAD

MODES = {0: "reflect", 1: "symmetric"}


def mirror_pad(x: Tensor, paddings: Any, mode: int, t: Optional[T] = None, **kw: Any) -> np.ndarray:
    return run(Op.MIRROR_PAD, [x, ints(np.asarray(paddings).reshape(-1, 2)), i32(mode)], out_spec(t or x.type),
               **kw)


@pytest.mark.parametrize("t", TYPES)
@pytest.mark.parametrize("mode", [0, 1])
@pytest.mark.parametrize("shape", [(1,), (4,), (3, 1), (2, 5), (3, 2, 4), (2, 3, 1, 3), (2, 1, 2, 2, 3)])
def test_mirror_pad_against_np_pad(t: T, mode: int, shape: tuple) -> None:
    x = data(t, shape)
    limits = [d - (mode == 0) for d in shape]
    cases = [[(0, 0)] * len(shape), [(m, m) for m in limits], [(m, 0) for m in limits], [(0, m) for m in limits]]
    cases += [[(int(RNG.integers(0, m + 1)), int(RNG.integers(0, m + 1))) for m in limits] for _ in range(4)]
    for pads in cases:
        got = mirror_pad(tensor(t, x), pads, mode)
        np.testing.assert_array_equal(got, np.pad(x, pads, mode=MODES[mode]), err_msg=f"{pads}")


@pytest.mark.parametrize("t", TYPES)
def test_mirror_pad_spec_cases(t: T) -> None:
    """runtime/test/specs/AIDL_V3/mirror_pad_tensorflow.mod.py's examples (the TensorFlow documentation's),
    and mirror_pad.mod.py's shapes and paddings ("two": rank 10; "three": symmetric at its maximum)."""
    x = tensor(t, [[1, 2, 3], [4, 5, 6]])
    np.testing.assert_array_equal(mirror_pad(x, [1, 1, 2, 2], 1).reshape(-1), [
        2, 1, 1, 2, 3, 3, 2, 2, 1, 1, 2, 3, 3, 2, 5, 4, 4, 5, 6, 6, 5, 5, 4, 4, 5, 6, 6, 5])
    np.testing.assert_array_equal(mirror_pad(tensor(t, [1, 2, 3]), [0, 2], 0), [1, 2, 3, 2, 1])
    np.testing.assert_array_equal(mirror_pad(tensor(t, [1, 2, 3]), [0, 2], 1), [1, 2, 3, 3, 2])
    one = data(t, (2, 3))
    for mode in (0, 1):
        np.testing.assert_array_equal(mirror_pad(tensor(t, one), [0, 1, 1, 2], mode),
                                      np.pad(one, [(0, 1), (1, 2)], MODES[mode]))
    dims = [1, 2, 1, 2, 1, 2, 1, 2, 1, 2]
    pads = [0, 0, 0, 1, 0, 1, 1, 0, 1, 0, 1, 2, 1, 1, 2, 1, 0, 1, 0, 2]
    two = data(t, dims)
    sym = np.array(pads).reshape(-1, 2)
    np.testing.assert_array_equal(mirror_pad(tensor(t, two), sym, 1), np.pad(two, sym.tolist(), "symmetric"))
    ref = np.minimum(sym, np.array(dims)[:, None] - 1)  # NOTE: the spec's clampReflectPadding
    np.testing.assert_array_equal(mirror_pad(tensor(t, two), ref, 0), np.pad(two, ref.tolist(), "reflect"))
    three = data(t, (3, 4, 5, 6))
    pads3 = [[3, 3], [4, 2], [1, 5], [1, 1]]
    np.testing.assert_array_equal(mirror_pad(tensor(t, three), pads3, 1), np.pad(three, pads3, "symmetric"))


@pytest.mark.parametrize("shape,pads,mode,message", [
    ((3,), [3, 0], 0, r"padding \(3, 0\) of dimension 0 \(size 3\) exceeds 2 \(REFLECT\)"),
    ((3,), [0, 4], 1, r"exceeds 3 \(SYMMETRIC\)"),
    ((1, 2), [0, 1, 0, 0], 0, r"exceeds 0 \(REFLECT\)"),
    ((3,), [-1, 0], 1, "paddings must be >= 0"),
    ((3,), [0, 0], 2, "mode 2: 0 .REFLECT. or 1 .SYMMETRIC."),
    ((3,), [0, 0], -1, "mode -1"),
])
def test_mirror_pad_run_time_failures(shape: tuple, pads: list, mode: int, message: str) -> None:
    x = tensor(F32, np.ones(shape))
    with pytest.raises(OpExecutionError, match=message):
        mirror_pad(x, pads, mode)
    with pytest.raises(OpExecutionError, match=message):  # NOTE: paddings and mode given at run time
        mirror_pad(x, pads, mode, constants=[False] * 3)


def test_mirror_pad_paddings_of_the_wrong_shape_at_run_time() -> None:
    """Paddings of unknown shape pass the model validation; the reference's prepare checks them."""
    ins = [info(F32, (2, 2)), info(I32, ()), info(T.INT32, (), value=0)]
    prep = prepare_operation(Op.MIRROR_PAD, ins, [OutputSpec(F32, ())], version=V.AIDL_V3)
    x = Tensor(F32, np.ones((2, 2), np.float32))
    for p in (np.zeros((3, 2)), np.zeros((2, 3)), np.zeros(4)):
        with pytest.raises(OpExecutionError, match="paddings must have shape"):
            prep.run([x, ints(p), i32(0)])
    np.testing.assert_array_equal(prep.run([x, ints([[1, 1], [0, 1]]), i32(1)])[0], np.ones((4, 3)))


def test_mirror_pad_rank_0_fails(kernel_only: None) -> None:
    with pytest.raises(OpExecutionError, match="rank >= 1"):
        run(Op.MIRROR_PAD, [Tensor(F32, np.array(1.0, np.float32)), ints(np.zeros((0, 2))), i32(0)], out_spec(F32))


def test_mirror_pad_constant_and_run_time_parameters_agree(paths_agree: Any) -> None:
    ins = [tensor(Q8, data(Q8, (3, 4))), ints([[2, 1], [0, 3]]), i32(0)]
    other = [tensor(Q8, data(Q8, (5, 4))), ints([[2, 1], [0, 3]]), i32(0)]
    small = [tensor(Q8, data(Q8, (2, 4))), ints([[2, 1], [0, 3]]), i32(0)]  # NOTE: 2 > 2 - 1: fails both ways
    _, results = paths_agree(Op.MIRROR_PAD, ins, [out_spec(Q8)], {1, 2}, other, small, version=V.AIDL_V3)
    assert results[0][0][1] == (6, 7) and results[1][0][1] == (8, 7) and "exceeds" in results[2]


@pytest.mark.parametrize("ins,out,message", [
    ([info(F32, (2, 2)), info(I32, (2, 2, 1)), info(T.INT32, ())], info(F32, ()), r"shape \[rank, 2\]"),
    ([info(F32, (2, 2)), info(I32, (2, 3)), info(T.INT32, ())], info(F32, ()), r"shape \[rank, 2\]"),
    ([info(F32, (2, 2)), info(I32, (3, 2)), info(T.INT32, ())], info(F32, ()), "for an input of rank 2"),
    ([info(F32, (2, 2)), info(I32, (2, 2)), info(T.INT32, ())], info(F32, (4,)), "output rank 1 differs"),
    ([info(Q8, (2,), 0.5, 1), info(I32, (1, 2)), info(T.INT32, ())], info(Q8, (), 0.5, 2), "quantized"),
    ([info(Q8S, (2,), 0.5, 1), info(I32, (1, 2)), info(T.INT32, ())], info(Q8S, (), 0.25, 1), "quantized"),
    ([info(F32, (2,)), info(T.TENSOR_FLOAT32, (1, 2)), info(T.INT32, ())], info(F32, ()), "does not accept"),
    ([info(F32, (2,)), info(I32, (1, 2)), info(T.FLOAT32, ())], info(F32, ()), "does not accept"),
    ([info(F32, (2,)), info(I32, (1, 2)), info(T.INT32, ())], info(F16, ()), "does not accept"),
    ([info(T.TENSOR_BOOL8, (2,)), info(I32, (1, 2)), info(T.INT32, ())], info(T.TENSOR_BOOL8, ()),
     "does not accept"),
])
def test_mirror_pad_model_time_refusals(ins: list, out: OperandInfo, message: str) -> None:
    with pytest.raises(OpValidationError, match=message):
        validate(Op.MIRROR_PAD, ins, out)


def test_mirror_pad_unknown_dimensions_pass_validation() -> None:
    validate(Op.MIRROR_PAD, [info(F32, ()), info(I32, (0, 0)), info(T.INT32, ())], info(F32, ()))
    validate(Op.MIRROR_PAD, [info(F32, (0, 0)), info(I32, (0, 2)), info(T.INT32, ())], info(F32, (0, 0)))


# --------------------------------------------------------------------------
# REVERSE


def reverse(x: Tensor, axis: int, **kw: Any) -> np.ndarray:
    return run(Op.REVERSE, [x, ints([axis])], out_spec(x.type), **kw)


@pytest.mark.parametrize("t", TYPES)
@pytest.mark.parametrize("rank", range(1, 9))
def test_reverse_against_np_flip(t: T, rank: int) -> None:
    shape = tuple(int(d) for d in RNG.integers(1, 4, rank))
    x = data(t, shape)
    for axis in range(rank):
        np.testing.assert_array_equal(reverse(tensor(t, x), axis), np.flip(x, axis))


@pytest.mark.parametrize("t", TYPES)
def test_reverse_spec_cases(t: T) -> None:
    """runtime/test/specs/AIDL_V3/reverse.mod.py."""
    np.testing.assert_array_equal(reverse(tensor(t, [6, 7, 8]), 0), [8, 7, 6])
    x = tensor(t, np.arange(24).reshape(2, 3, 4))
    chain = itertools.chain
    np.testing.assert_array_equal(reverse(x, 0).reshape(-1), list(chain(range(12, 24), range(0, 12))))
    np.testing.assert_array_equal(reverse(x, 1).reshape(-1), list(chain(
        range(8, 12), range(4, 8), range(0, 4), range(20, 24), range(16, 20), range(12, 16))))
    np.testing.assert_array_equal(reverse(x, 2).reshape(-1), [v for b in range(6) for v in range(4 * b + 3,
                                                                                                 4 * b - 1, -1)])


@pytest.mark.parametrize("shape,axis,message", [
    ((2, 3), -1, r"axis -1 out of range \[0, 2\)"),
    ((2, 3), 2, r"axis 2 out of range"),
    ((1,) * 9, 0, "input rank 9, supported 1 to 8"),
])
def test_reverse_run_time_failures(shape: tuple, axis: int, message: str) -> None:
    x = tensor(F32, np.ones(shape))
    with pytest.raises(OpExecutionError, match=message):
        reverse(x, axis)
    with pytest.raises(OpExecutionError, match=message):
        reverse(x, axis, constants=[False, False])


def test_reverse_axis_of_the_wrong_shape_at_run_time() -> None:
    prep = prepare_operation(Op.REVERSE, [info(F32, (2, 2)), info(I32, ())], [OutputSpec(F32, ())], version=V.AIDL_V3)
    x = Tensor(F32, np.arange(4, dtype=np.float32).reshape(2, 2))
    for a in ([0, 1], [[0]], []):
        with pytest.raises(OpExecutionError, match="shape \\[1\\]"):
            prep.run([x, ints(np.array(a, np.int32))])
    np.testing.assert_array_equal(prep.run([x, ints([1])])[0], [[1, 0], [3, 2]])


def test_reverse_rank_0_fails(kernel_only: None) -> None:
    with pytest.raises(OpExecutionError, match="input rank 0"):
        reverse(Tensor(F32, np.array(1.0, np.float32)), 0)


def test_reverse_constant_and_run_time_axis_agree(paths_agree: Any) -> None:
    ins = [tensor(I32, data(I32, (2, 3, 4))), ints([2])]
    other = [tensor(I32, data(I32, (5, 1, 2))), ints([2])]
    flat = [tensor(I32, data(I32, (5, 1))), ints([2])]  # NOTE: rank 2: axis 2 fails both ways
    _, results = paths_agree(Op.REVERSE, ins, [out_spec(I32)], {1}, other, flat, version=V.AIDL_V3)
    assert "out of range" in results[2]


@pytest.mark.parametrize("ins,out,message", [
    ([info(F32, (2,)), info(I32, (2,))], info(F32, ()), r"shape \[1\]"),
    ([info(F32, (2,)), info(I32, (1, 1))], info(F32, ()), r"shape \[1\]"),
    ([info(F32, (2, 2)), info(I32, (1,))], info(F32, (4,)), "output rank 1 differs"),
    ([info(Q8, (2,), 0.5, 1), info(I32, (1,))], info(Q8, (), 0.5, 0), "quantized"),
    ([info(F32, (2,)), info(T.INT32, ())], info(F32, ()), "does not accept"),
    ([info(F32, (2,)), info(I32, (1,))], info(I32, ()), "does not accept"),
])
def test_reverse_model_time_refusals(ins: list, out: OperandInfo, message: str) -> None:
    with pytest.raises(OpValidationError, match=message):
        validate(Op.REVERSE, ins, out)


# --------------------------------------------------------------------------
# RESHAPE of TENSOR_INT32; the version gate of them all


def test_reshape_int32() -> None:
    x = Tensor(I32, np.arange(1, 10, dtype=np.int32).reshape(1, 1, 3, 3))
    got = run_operation(Op.RESHAPE, [x, ints([-1])], [OutputSpec(I32, (9,))], constants=[False, True],
                        version=V.AIDL_V2)[0]
    np.testing.assert_array_equal(got, np.arange(1, 10))


@pytest.mark.parametrize("op,ins,out,first", [
    (Op.PACK, [info(T.INT32, (), value=0), info(F32, (2,))], info(F32, ()), V.AIDL_V2),
    (Op.RESHAPE, [info(I32, (2, 2)), info(I32, (1,), value=[-1])], info(I32, ()), V.AIDL_V2),
    (Op.MIRROR_PAD, [info(Q8S, (2,), 0.5, 0), info(I32, (1, 2)), info(T.INT32, ())], info(Q8S, (), 0.5, 0),
     V.AIDL_V3),
    (Op.REVERSE, [info(F16, (2,)), info(I32, (1,))], info(F16, ()), V.AIDL_V3),
])
def test_valid_from_their_aidl_version_only(op: Op, ins: list, out: OperandInfo, first: V) -> None:
    for version in V:
        if version < first:
            with pytest.raises(OpValidationError, match=f"before HAL {first.name}"):
                validate(op, ins, out, version)
        else:
            validate(op, ins, out, version)
