"""The AIDL HAL's operations in models: the version gate at the HIDL entry points (a model using one is
INVALID_ARGUMENT through getSupportedOperations_1_3 / prepareModel_1_3, as VTS 1.3's "operation type 102"
mutation expects) and on the AIDL face (version 2 takes BATCH_MATMUL, PACK and RESHAPE of int32,
version 3 also MIRROR_PAD, REVERSE and quantized RSQRT); the executor's generic checks (zero-sized
inputs, operands without a value, declared output shapes); one execution of each through the AIDL face
of sample-all."""

from __future__ import annotations

import os
from typing import Any, Callable

import numpy as np
import pytest

import nnhal
from nnhal import aidl, hal
from nnhal.engine.executor import Executor
from nnhal.engine.validation import ValidationError, validate_model
from nnhal.ops.base import OpExecutionError
from tests.aidl_util import FAST, MEDIUM, AidlPools, CountingCallback, prepare, raised, refused_prepare
from tests.driver_util import WAIT_S, Builder, make_model

T, L, OT, V = hal.OperandType, hal.OperandLifeTime, hal.OperationType, hal.HalVersion
S = aidl.ErrorStatus
F32 = T.TENSOR_FLOAT32


def batch_matmul(xs: tuple = (2, 2, 3), ys: tuple = (2, 3, 4), out: tuple = (2, 2, 4),
                 omit_flag: bool = False) -> hal.Model:
    b = Builder()
    x, y = b.input(F32, xs), b.input(F32, ys)
    adj_y = b.operand(T.BOOL, (), L.NO_VALUE) if omit_flag else b.const(T.BOOL, b"\0")
    b.op(OT.BATCH_MATMUL, [x, y, b.const(T.BOOL, b"\0"), adj_y], [b.output(F32, out)])
    return make_model(b)


def pack(dims: tuple = (2, 3), out: tuple = (2, 2, 3)) -> hal.Model:
    b = Builder()
    x, y = b.input(F32, dims), b.input(F32, dims)
    b.op(OT.PACK, [b.i32(0), x, y], [b.output(F32, out)])
    return make_model(b)


def mirror_pad(dims: tuple = (2, 3), out: tuple = (4, 7), mode: int = 1) -> hal.Model:
    b = Builder()
    x = b.input(F32, dims)
    p = b.const(T.TENSOR_INT32, np.array([[1, 1], [2, 2]], np.int32), (2, 2))
    b.op(OT.MIRROR_PAD, [x, p, b.i32(mode)], [b.output(F32, out)])
    return make_model(b)


def reverse(dims: tuple = (2, 3), out: tuple = (2, 3)) -> hal.Model:
    b = Builder()
    x = b.input(F32, dims)
    b.op(OT.REVERSE, [x, b.const(T.TENSOR_INT32, np.array([1], np.int32), (1,))], [b.output(F32, out)])
    return make_model(b)


def reshape_int32() -> hal.Model:
    b = Builder()
    x = b.input(T.TENSOR_INT32, (1, 1, 3, 3))
    b.op(OT.RESHAPE, [x, b.const(T.TENSOR_INT32, np.array([-1], np.int32), (1,))], [b.output(T.TENSOR_INT32, (9,))])
    return make_model(b)


def rsqrt_quant8() -> hal.Model:
    b = Builder()
    x = b.input(T.TENSOR_QUANT8_ASYMM, (4,), scale=0.25, zp=0)
    b.op(OT.RSQRT, [x], [b.output(T.TENSOR_QUANT8_ASYMM, (4,), scale=0.25, zp=0)])
    return make_model(b)


IN_MATRIX = np.arange(6, dtype=np.float32).reshape(2, 3)
CASES: list[tuple[str, Callable[[], hal.Model], V, list, np.ndarray]] = [
    ("BATCH_MATMUL", batch_matmul, V.AIDL_V2,
     [np.ones((2, 2, 3), np.float32), np.ones((2, 3, 4), np.float32)], np.full((2, 2, 4), 3, np.float32)),
    ("PACK", pack, V.AIDL_V2, [IN_MATRIX, IN_MATRIX + 6], np.arange(12, dtype=np.float32).reshape(2, 2, 3)),
    ("RESHAPE int32", reshape_int32, V.AIDL_V2, [np.arange(9, dtype=np.int32).reshape(1, 1, 3, 3)],
     np.arange(9, dtype=np.int32)),
    ("MIRROR_PAD", mirror_pad, V.AIDL_V3, [IN_MATRIX], np.pad(IN_MATRIX, [(1, 1), (2, 2)], "symmetric")),
    ("REVERSE", reverse, V.AIDL_V3, [IN_MATRIX], IN_MATRIX[:, ::-1]),
    ("RSQRT quant8", rsqrt_quant8, V.AIDL_V3, [np.array([1, 4, 16, 64], np.uint8)], np.array([8, 4, 2, 1], np.uint8)),
]
IDS = [c[0] for c in CASES]


@pytest.mark.parametrize("name,build,first,inputs,expected", CASES, ids=IDS)
def test_valid_from_its_version(name: str, build: Callable, first: V, inputs: list, expected: np.ndarray) -> None:
    model = build()
    for version in V:
        if version < first:
            with pytest.raises(ValidationError) as e:
                validate_model(model, [], version)
            assert e.value.status == hal.ErrorStatus.INVALID_ARGUMENT
            assert version < V.V1_3 or f"before HAL {first.name}" in str(e.value)
        else:
            validate_model(model, [], version)
    outs = Executor(model, []).run(inputs)
    np.testing.assert_array_equal(outs[0], expected)
    # NOTE: without the prepared states too (the reference check's dry runs skip prepare)
    unprepared = Executor(model, [], states=[[None] * len(model.main.operations)])
    np.testing.assert_array_equal(unprepared.run(inputs)[0], expected)


@pytest.mark.parametrize("name,build,first,inputs,expected", CASES, ids=IDS)
def test_the_hidl_entry_points_refuse_them(name: str, build: Callable, first: V, inputs: list,
                                           expected: np.ndarray, quiet_driver: None) -> None:
    dev = nnhal.get_device("sample-all")
    model = build()
    assert dev.getSupportedOperations_1_3(model)[0] == hal.ErrorStatus.INVALID_ARGUMENT
    cb = hal.PreparedModelCallback()
    assert dev.prepareModel_1_3(model, hal.ExecutionPreference.FAST_SINGLE_ANSWER, hal.Priority.MEDIUM,
                                hal.OptionalTimePoint(), [], [], bytes(32), cb) == hal.ErrorStatus.INVALID_ARGUMENT
    assert cb.wait()[0] == hal.ErrorStatus.INVALID_ARGUMENT


@pytest.mark.parametrize("name,build,first,inputs,expected", CASES, ids=IDS)
def test_through_the_aidl_face(name: str, build: Callable, first: V, inputs: list, expected: np.ndarray,
                               quiet_driver: None) -> None:
    model = aidl.convert.from_canonical(build())
    for version in (1, 2, 3, 4):
        dev = aidl.get_device("sample-all", version)
        if V.AIDL_V1 + version - 1 < first:
            assert raised(dev.getSupportedOperations, model) == aidl.ErrorStatus.INVALID_ARGUMENT
            assert refused_prepare(lambda cb, dev=dev: dev.prepareModel(
                model, aidl.ExecutionPreference.FAST_SINGLE_ANSWER, aidl.Priority.MEDIUM, -1, [], [], bytes(32),
                cb)) == (aidl.ErrorStatus.INVALID_ARGUMENT, aidl.ErrorStatus.INVALID_ARGUMENT)
            continue
        assert dev.getSupportedOperations(model) == [True]
        pm = prepare(dev, model)
        with AidlPools(inputs, [max(expected.nbytes, 1)]) as pools:
            result = pm.executeSynchronously(pools.aidl_request(), False, -1, -1)
            assert result.outputSufficientSize and result.outputShapes[0].dimensions == list(expected.shape)
            np.testing.assert_array_equal(pools.output(0, expected.dtype, expected.shape), expected)


# --------------------------------------------------------------------------
# the executor's generic checks, as for every operation the reference registers without
# allowZeroSizedInput / allowOmittedOperand


@pytest.mark.parametrize("model,inputs", [
    (batch_matmul((0, 2, 3), (0, 3, 4), (0, 0, 0)), [np.ones((0, 2, 3), np.float32), np.ones((0, 3, 4), np.float32)]),
    (pack((0, 0), (0, 0, 0)), [np.ones((0, 3), np.float32)] * 2),
    (mirror_pad((0, 0), (0, 0)), [np.ones((2, 0), np.float32)]),
    (reverse((0, 0), (0, 0)), [np.ones((0, 3), np.float32)]),
], ids=["BATCH_MATMUL", "PACK", "MIRROR_PAD", "REVERSE"])
def test_zero_sized_inputs_fail_the_execution(model: hal.Model, inputs: list) -> None:
    validate_model(model, [], V.AIDL_V3)
    with pytest.raises(OpExecutionError, match="does not support zero-sized tensors"):
        Executor(model, []).run(inputs)


def test_an_operand_without_a_value_fails_the_execution() -> None:
    """The spec calls the adjoint flags optional, but Android's reference takes exactly four inputs and
    registers BATCH_MATMUL without allowOmittedOperand: a flag without a value fails every execution."""
    model = batch_matmul(omit_flag=True)
    validate_model(model, [], V.AIDL_V2)
    with pytest.raises(OpExecutionError, match="input 3 .* is required but has no value"):
        Executor(model, []).run([np.ones((2, 2, 3), np.float32), np.ones((2, 3, 4), np.float32)])


@pytest.mark.parametrize("model,inputs", [
    (mirror_pad(out=(4, 6)), [IN_MATRIX]),
    (pack(out=(2, 3, 2)), [IN_MATRIX, IN_MATRIX]),
    (batch_matmul(out=(2, 2, 3)), [np.ones((2, 2, 3), np.float32), np.ones((2, 3, 4), np.float32)]),
], ids=["MIRROR_PAD", "PACK", "BATCH_MATMUL"])
def test_a_declared_output_shape_the_result_contradicts(model: hal.Model, inputs: list) -> None:
    with pytest.raises(OpExecutionError, match="incompatible with the declared dimensions"):
        Executor(model, []).run(inputs)


def test_results_of_dynamic_output_shapes() -> None:
    """Outputs of unknown dimensions get the computed shapes (the reference's prepare sets them)."""
    outs = Executor(mirror_pad(out=(0, 0), mode=0), []).run([IN_MATRIX])
    np.testing.assert_array_equal(outs[0], np.pad(IN_MATRIX, [(1, 1), (2, 2)], "reflect"))
    outs = Executor(pack(out=(0, 0, 0)), []).run([IN_MATRIX, IN_MATRIX])
    assert outs[0].shape == (2, 2, 3)


@pytest.mark.parametrize("device", ["sample-all", "litert-cpu"])
def test_compilation_cache_round_trip(device: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A model of every AIDL operation saved to the compilation cache and loaded: the prepared states
    (plans, converted constants, tables) rebuilt at load give the same results."""
    if device == "litert-cpu":
        pytest.importorskip("ai_edge_litert")
    monkeypatch.setenv("NNHAL_CACHE_KEY_DIR", str(tmp_path / "key"))
    b = Builder()
    x = b.input(F32, (2, 3))
    w = b.const(F32, np.arange(12, dtype=np.float32).reshape(3, 4), (3, 4))
    m = b.operand(F32, (2, 4))
    b.op(OT.BATCH_MATMUL, [x, w, b.const(T.BOOL, b"\0"), b.const(T.BOOL, b"\0")], [m])
    p = b.operand(F32, (2, 2, 4))
    b.op(OT.PACK, [b.i32(1), m, m], [p])
    r = b.operand(F32, (2, 2, 4))
    b.op(OT.REVERSE, [p, b.const(T.TENSOR_INT32, np.array([2], np.int32), (1,))], [r])
    pads = b.const(T.TENSOR_INT32, np.array([[0, 1], [1, 0], [2, 2]], np.int32), (3, 2))
    b.op(OT.MIRROR_PAD, [r, pads, b.i32(0)], [b.output(F32, (3, 3, 8))])
    model = aidl.convert.from_canonical(make_model(b))
    xv = np.arange(6, dtype=np.float32).reshape(2, 3)
    mm = xv @ np.arange(12, dtype=np.float32).reshape(3, 4)
    want = np.pad(np.flip(np.stack([mm, mm], 1), 2), [(0, 1), (1, 0), (2, 2)], "reflect")
    dev = aidl.get_device(device, 3)
    fds = [os.open(tmp_path / name, os.O_RDWR | os.O_CREAT, 0o600) for name in ("model", "data")]
    try:
        cb = CountingCallback()
        dev.prepareModel(model, FAST, MEDIUM, -1, fds[:1], fds[1:], bytes(range(32)), cb)
        assert cb.wait(WAIT_S)[0] == S.NONE
        cb = CountingCallback()
        dev.prepareModelFromCache(-1, fds[:1], fds[1:], bytes(range(32)), cb)
        status, pm = cb.wait(WAIT_S)
        assert status == S.NONE
        with AidlPools([xv], [want.nbytes]) as pools:
            assert pm.executeSynchronously(pools.aidl_request(), False, -1, -1).outputSufficientSize
            np.testing.assert_allclose(pools.output(0, np.float32, want.shape), want, rtol=1e-6)
    finally:
        for fd in fds:
            os.close(fd)
