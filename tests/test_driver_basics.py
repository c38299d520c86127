"""The sample driver's IDevice / IPreparedModel surface against the spec and
VTS BasicTests ("rules everywhere", capabilities, the default preparation,
the inherited 1.0-1.2 methods, request pools, concurrency)."""

from __future__ import annotations

import os
import re
import threading

import numpy as np
import pytest

import nnhal
from nnhal import hal
from nnhal import memory as hal_memory
from nnhal.hal import convert
from tests.driver_util import (
    NO_TIMING,
    WAIT_S,
    CountingExecutionCallback,
    CountingPreparedCallback,
    Pools,
    S,
    T,
    add_model,
    add_model_v1_0,
    device,
    execute_async,
    execute_sync,
    prepare,
    prepared_model,
    vector_model,
    vector_pools,
)

M = hal.MeasureTiming
A = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
B = np.array([[10.0, 20.0], [30.0, 40.0]], np.float32)


@pytest.fixture(scope="module")
def add_prepared():  # noqa: ANN201
    return prepared_model(add_model())


def _add_pools(kind: str = "ashmem", **kw) -> Pools:  # noqa: ANN003
    return Pools([A, B], [16], kind=kind, **kw)


# --------------------------------------------------------------------------
# capabilities and identity


def _positive(p: hal.PerformanceInfo) -> bool:
    return p.execTime > 0 and p.powerUsage > 0


def test_get_capabilities_1_3() -> None:
    status, caps = device().getCapabilities_1_3()
    assert status == S.NONE
    assert isinstance(caps, hal.Capabilities)
    assert _positive(caps.relaxedFloat32toFloat16PerformanceScalar)
    assert _positive(caps.relaxedFloat32toFloat16PerformanceTensor)
    assert _positive(caps.ifPerformance) and _positive(caps.whilePerformance)
    types = [int(p.type) for p in caps.operandPerformance]
    assert types == sorted(types) and len(set(types)) == len(types)
    assert int(T.SUBGRAPH) not in types
    assert all(_positive(p.info) for p in caps.operandPerformance)
    # every non-extension operand type but SUBGRAPH has a figure (OEM ones included, as the reference)
    assert set(types) == {int(t) for t in T if t != T.SUBGRAPH}


def test_get_capabilities_older_versions() -> None:
    dev = device()
    status, c0 = dev.getCapabilities()
    assert status == hal.v1_0.ErrorStatus.NONE
    assert isinstance(c0, hal.v1_0.Capabilities)
    assert _positive(c0.float32Performance) and _positive(c0.quantized8Performance)
    status, c1 = dev.getCapabilities_1_1()
    assert status == S.NONE and isinstance(c1, hal.v1_1.Capabilities)
    assert _positive(c1.relaxedFloat32toFloat16Performance)
    status, c2 = dev.getCapabilities_1_2()
    assert status == S.NONE and isinstance(c2, hal.v1_2.Capabilities)
    types = [int(p.type) for p in c2.operandPerformance]
    assert types == sorted(types)
    assert all(t in hal.v1_2.OperandType._value2member_map_ for t in types)
    assert all(_positive(p.info) for p in c2.operandPerformance)


def test_version_type_name_extensions_cache_files() -> None:
    dev = device()
    status, version = dev.getVersionString()
    assert status == S.NONE and isinstance(version, str) and version
    status, dtype = dev.getType()
    assert status == S.NONE
    assert dtype in (hal.DeviceType.OTHER, hal.DeviceType.CPU, hal.DeviceType.GPU, hal.DeviceType.ACCELERATOR)
    name = dev.name
    assert name.count("-") == 1 and not name.startswith("-") and not name.endswith("-")
    status, extensions = dev.getSupportedExtensions()
    assert status == S.NONE
    for ext in extensions:
        assert ext.name and re.fullmatch(r"[a-z0-9_.]+", ext.name) and "." in ext.name
    status, n_model, n_data = dev.getNumberOfCacheFilesNeeded()
    assert status == S.NONE
    assert 0 <= n_model <= hal.Constant.MAX_NUMBER_OF_CACHE_FILES
    assert 0 <= n_data <= hal.Constant.MAX_NUMBER_OF_CACHE_FILES
    assert dev.getStatus() == hal.DeviceStatus.AVAILABLE


# --------------------------------------------------------------------------
# the default preparation path


def test_default_preparation_and_execution() -> None:
    dev = device()
    model = add_model()
    status, supported = dev.getSupportedOperations_1_3(model)
    assert status == S.NONE and supported == [True]
    cb = CountingPreparedCallback()
    launch = dev.prepareModel_1_3(model, hal.ExecutionPreference.FAST_SINGLE_ANSWER, hal.Priority.MEDIUM,
                                  hal.OptionalTimePoint(), [], [], bytes(32), cb)
    assert launch == S.NONE
    status, prepared = cb.wait(WAIT_S)
    assert status == S.NONE and prepared is not None
    assert cb.calls == [("notify_1_3", S.NONE)]
    with _add_pools() as p:
        status, shapes, timing = execute_sync(prepared, p.request())
        assert status == S.NONE
        assert [(s.dimensions, s.isSufficient) for s in shapes] == [([2, 2], True)]
        assert timing == NO_TIMING
        np.testing.assert_array_equal(p.output(0, np.float32, (2, 2)), A + B)


@pytest.mark.parametrize("preference", list(hal.ExecutionPreference))
def test_every_preference_prepares(preference) -> None:  # noqa: ANN001
    launch, status, prepared = prepare(add_model(), preference=preference)
    assert (launch, status) == (S.NONE, S.NONE) and prepared is not None


def test_conformance_model_prepares_and_runs() -> None:
    vm = vector_model("V1_2/conv2d_dilation", None)
    prepared = prepared_model(vm.build_model())
    with vector_pools(vm) as p:
        status, shapes, _ = execute_sync(prepared, p.request())
        assert status == S.NONE
        o = vm.output_operands()[0]
        got = p.output(0, o.data.dtype, shapes[0].dimensions)
        np.testing.assert_allclose(got, o.data, rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------
# rules everywhere: callbacks, timing, shapes


def test_invalid_model_notifies_once_with_launch_status() -> None:
    model = add_model()
    model.main.operands[0].type = 9999  # invalid operand type
    dev = device()
    status, _ = dev.getSupportedOperations_1_3(model)
    assert status == S.INVALID_ARGUMENT
    cb = CountingPreparedCallback()
    launch = dev.prepareModel_1_3(model, hal.ExecutionPreference.FAST_SINGLE_ANSWER, hal.Priority.MEDIUM,
                                  hal.OptionalTimePoint(), [], [], bytes(32), cb)
    assert launch == S.INVALID_ARGUMENT
    status, prepared = cb.wait(WAIT_S)
    assert status == launch and prepared is None
    assert cb.calls == [("notify_1_3", S.INVALID_ARGUMENT)]


@pytest.mark.parametrize("what", ["preference", "priority"])
def test_bad_preference_or_priority(what: str) -> None:
    dev = device()
    cb = CountingPreparedCallback()
    pref = 3 if what == "preference" else hal.ExecutionPreference.FAST_SINGLE_ANSWER
    prio = -1 if what == "priority" else hal.Priority.MEDIUM
    launch = dev.prepareModel_1_3(add_model(), pref, prio, hal.OptionalTimePoint(), [], [], bytes(32), cb)
    assert launch == S.INVALID_ARGUMENT
    assert cb.wait(WAIT_S) == (S.INVALID_ARGUMENT, None)
    assert len(cb.calls) == 1


def test_invalid_request_async_notifies_once(add_prepared) -> None:  # noqa: ANN001
    with _add_pools() as p:
        req = p.request()
        req.inputs = req.inputs[:1]  # one input removed
        cb = CountingExecutionCallback()
        launch = add_prepared.execute_1_3(req, M.YES, hal.OptionalTimePoint(), hal.OptionalTimeoutDuration(), cb)
        assert launch == S.INVALID_ARGUMENT
        status, shapes, timing = cb.wait(WAIT_S)
        assert status == launch and shapes == [] and timing == NO_TIMING
        assert cb.calls == [("notify_1_3", S.INVALID_ARGUMENT)]
        status, shapes, timing = execute_sync(add_prepared, req, M.YES)
        assert status == S.INVALID_ARGUMENT and shapes == [] and timing == NO_TIMING


def test_successful_async_notifies_once(add_prepared) -> None:  # noqa: ANN001
    with _add_pools() as p:
        cb = CountingExecutionCallback()
        launch = add_prepared.execute_1_3(p.request(), M.NO, hal.OptionalTimePoint(),
                                          hal.OptionalTimeoutDuration(), cb)
        assert launch == S.NONE
        status, shapes, timing = cb.wait(WAIT_S)
        assert status == S.NONE and timing == NO_TIMING and len(shapes) == 1
        assert cb.calls == [("notify_1_3", S.NONE)]


def test_bad_measure_is_invalid(add_prepared) -> None:  # noqa: ANN001
    with _add_pools() as p:
        assert execute_sync(add_prepared, p.request(), 7)[0] == S.INVALID_ARGUMENT


def test_null_callback_is_invalid(add_prepared) -> None:  # noqa: ANN001
    with _add_pools() as p:
        launch = add_prepared.execute_1_3(p.request(), M.NO, hal.OptionalTimePoint(),
                                          hal.OptionalTimeoutDuration(), None)
        assert launch == S.INVALID_ARGUMENT
    launch = device().prepareModel_1_3(add_model(), hal.ExecutionPreference.FAST_SINGLE_ANSWER, hal.Priority.MEDIUM,
                                       hal.OptionalTimePoint(), [], [], bytes(32), None)
    assert launch == S.INVALID_ARGUMENT


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_timing_yes(add_prepared, mode: str) -> None:  # noqa: ANN001
    with _add_pools() as p:
        if mode == "sync":
            status, shapes, timing = execute_sync(add_prepared, p.request(), M.YES)
        else:
            _, status, shapes, timing = execute_async(add_prepared, p.request(), M.YES)
        assert status == S.NONE
        assert timing.timeOnDevice != hal.UINT64_MAX and timing.timeInDriver != hal.UINT64_MAX
        assert timing.timeOnDevice <= timing.timeInDriver


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_output_insufficient_size_comes_with_shapes(mode: str) -> None:
    model = add_model(out_dims=(0, 0))  # dynamic output shape
    prepared = prepared_model(model)
    with Pools([A, B], [15]) as p:
        if mode == "sync":
            status, shapes, timing = execute_sync(prepared, p.request(), M.YES)
        else:
            _, status, shapes, timing = execute_async(prepared, p.request(), M.YES)
        assert status == S.OUTPUT_INSUFFICIENT_SIZE
        assert [(s.dimensions, s.isSufficient) for s in shapes] == [([2, 2], False)]
        assert timing == NO_TIMING
    with Pools([A, B], [16]) as p:
        status, shapes, _ = execute_sync(prepared, p.request())
        assert status == S.NONE and shapes[0].dimensions == [2, 2] and shapes[0].isSufficient
        np.testing.assert_array_equal(p.output(0, np.float32, (2, 2)), A + B)


def test_general_failure_comes_without_shapes() -> None:
    # a conformance model that must fail at execution time
    vm = vector_model("V1_3/while_infinite_loop", "while_infinite_loop")
    prepared = prepared_model(vm.build_model())
    with vector_pools(vm) as p:
        for mode in ("sync", "async"):
            loop = hal.OptionalTimeoutDuration(nanoseconds=1_000_000)
            if mode == "sync":
                status, shapes, timing = execute_sync(prepared, p.request(), M.YES, loop_timeout=loop)
            else:
                _, status, shapes, timing = execute_async(prepared, p.request(), M.YES, loop_timeout=loop)
            assert status in (S.MISSED_DEADLINE_TRANSIENT, S.MISSED_DEADLINE_PERSISTENT)
            assert shapes == [] and timing == NO_TIMING


def test_runtime_failure_general_failure_no_shapes() -> None:
    """A run-time kernel error (GATHER index out of range) is GENERAL_FAILURE, no shapes, no timing."""
    from tests.driver_util import Builder, make_model

    b = Builder()
    x = b.input(T.TENSOR_FLOAT32, (3,))
    idx = b.input(T.TENSOR_INT32, (1,))
    out = b.output(T.TENSOR_FLOAT32, (1,))
    b.op(hal.OperationType.GATHER, [x, b.i32(0), idx], [out])
    prepared = prepared_model(make_model(b))
    with Pools([np.arange(3, dtype=np.float32), np.array([7], np.int32)], [4]) as p:
        status, shapes, timing = execute_sync(prepared, p.request(), M.YES)
        assert status == S.GENERAL_FAILURE and shapes == [] and timing == NO_TIMING
        _, status, shapes, timing = execute_async(prepared, p.request(), M.YES)
        assert status == S.GENERAL_FAILURE and shapes == [] and timing == NO_TIMING
    with Pools([np.arange(3, dtype=np.float32), np.array([2], np.int32)], [4]) as p:
        assert execute_sync(prepared, p.request())[0] == S.NONE
        assert p.output(0, np.float32, (1,))[0] == 2.0


# --------------------------------------------------------------------------
# the inherited 1.0 - 1.2 methods


def _older_models() -> list:
    m13 = add_model()
    return [("1.0", add_model_v1_0()), ("1.1", convert.convert_to_v1_1(m13)), ("1.2", convert.convert_to_v1_2(m13))]


@pytest.mark.parametrize("version,model", _older_models(), ids=["1.0", "1.1", "1.2"])
def test_inherited_supported_operations(version: str, model) -> None:  # noqa: ANN001
    dev = device()
    fn = {"1.0": dev.getSupportedOperations, "1.1": dev.getSupportedOperations_1_1,
          "1.2": dev.getSupportedOperations_1_2}[version]
    status, supported = fn(model)
    assert status == hal.v1_0.ErrorStatus.NONE and supported == [True]
    # a 1.3 status never reaches an older caller; an invalid model is INVALID_ARGUMENT
    bad = add_model_v1_0()
    bad.operands[3].numberOfConsumers = 5
    status, supported = dev.getSupportedOperations(bad)
    assert status == hal.v1_0.ErrorStatus.INVALID_ARGUMENT and supported == []


def _prepare_old(version: str, model) -> tuple:  # noqa: ANN001
    dev = device()
    cb = CountingPreparedCallback()
    pref = hal.ExecutionPreference.SUSTAINED_SPEED
    if version == "1.0":
        launch = dev.prepareModel(model, cb)
    elif version == "1.1":
        launch = dev.prepareModel_1_1(model, pref, cb)
    else:
        launch = dev.prepareModel_1_2(model, pref, [], [], bytes(32), cb)
    status, prepared = cb.wait(WAIT_S)
    return launch, status, prepared, cb.calls


@pytest.mark.parametrize("version,model", _older_models(), ids=["1.0", "1.1", "1.2"])
def test_inherited_prepare_and_execute(version: str, model) -> None:  # noqa: ANN001
    launch, status, prepared, calls = _prepare_old(version, model)
    assert launch == S.NONE and status == S.NONE and prepared is not None
    assert calls == [("notify_1_2" if version == "1.2" else "notify", S.NONE)]
    with _add_pools() as p:
        req0 = p.request_v1_0()
        # execute (1.0): notify(status)
        cb = CountingExecutionCallback()
        assert prepared.execute(req0, cb) == S.NONE
        assert cb.wait(WAIT_S)[0] == S.NONE and cb.calls == [("notify", S.NONE)]
        np.testing.assert_array_equal(p.output(0, np.float32, (2, 2)), A + B)
        # execute_1_2: notify_1_2(status, shapes, timing)
        cb = CountingExecutionCallback()
        assert prepared.execute_1_2(req0, M.YES, cb) == S.NONE
        status, shapes, timing = cb.wait(WAIT_S)
        assert status == S.NONE and cb.calls == [("notify_1_2", S.NONE)]
        assert shapes[0].dimensions == [2, 2] and timing.timeOnDevice <= timing.timeInDriver
        # executeSynchronously
        status, shapes, timing = prepared.executeSynchronously(req0, M.NO)
        assert status == S.NONE and shapes[0].dimensions == [2, 2] and timing == NO_TIMING
        # the 1.3 methods work on a model prepared through an older method too
        assert execute_sync(prepared, p.request())[0] == S.NONE


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_inherited_prepare_invalid_model(version: str) -> None:
    bad = add_model_v1_0()
    bad.operands[0].type = 9999
    if version != "1.0":
        bad = convert.convert_to_v1_1(convert.convert_to_v1_3(add_model_v1_0()))
        bad.operands[0].type = 9999
        if version == "1.2":
            bad = hal.v1_2.Model(operands=[hal.v1_2.Operand(type=o.type, dimensions=o.dimensions,
                                                            numberOfConsumers=o.numberOfConsumers,
                                                            lifetime=o.lifetime, location=o.location)
                                           for o in bad.operands],
                                 operations=[hal.v1_2.Operation(op.type, op.inputs, op.outputs)
                                             for op in bad.operations],
                                 inputIndexes=bad.inputIndexes, outputIndexes=bad.outputIndexes,
                                 operandValues=bad.operandValues)
    launch, status, prepared, calls = _prepare_old(version, bad)
    assert launch == S.INVALID_ARGUMENT and status == S.INVALID_ARGUMENT and prepared is None
    assert len(calls) == 1


def test_inherited_execute_invalid_request(add_prepared) -> None:  # noqa: ANN001
    with _add_pools() as p:
        req0 = p.request_v1_0()
        req0.outputs = []
        cb = CountingExecutionCallback()
        assert add_prepared.execute(req0, cb) == S.INVALID_ARGUMENT
        assert cb.wait(WAIT_S)[0] == S.INVALID_ARGUMENT and len(cb.calls) == 1
        cb = CountingExecutionCallback()
        assert add_prepared.execute_1_2(req0, M.YES, cb) == S.INVALID_ARGUMENT
        status, shapes, timing = cb.wait(WAIT_S)
        assert status == S.INVALID_ARGUMENT and shapes == [] and timing == NO_TIMING
        status, shapes, timing = add_prepared.executeSynchronously(req0, M.YES)
        assert status == S.INVALID_ARGUMENT and shapes == [] and timing == NO_TIMING


def test_1_2_operation_through_1_2_methods() -> None:
    """A 1.2 operation in a HAL 1.2 model is supported and prepares through prepareModel_1_2."""
    vm = vector_model("V1_2/conv2d_dilation", None)
    m12 = convert.convert_to_v1_2(vm.build_model())
    status, supported = device().getSupportedOperations_1_2(m12)
    assert status == S.NONE and all(supported)
    launch, status, prepared, calls = _prepare_old("1.2", m12)
    assert (launch, status) == (S.NONE, S.NONE) and prepared is not None


# --------------------------------------------------------------------------
# caching, memory domains, bursts: not supported yet


def test_prepare_model_from_cache_without_handles() -> None:
    """No cache handles (the driver asks for 1 + 1): refused at launch, the
    callback notified once with the same status (caching itself: test_driver_cache)."""
    dev = device()
    cb = CountingPreparedCallback()
    launch = dev.prepareModelFromCache_1_3(hal.OptionalTimePoint(), [], [], bytes(32), cb)
    assert launch == S.INVALID_ARGUMENT
    assert cb.wait(WAIT_S) == (S.INVALID_ARGUMENT, None) and len(cb.calls) == 1
    cb = CountingPreparedCallback()
    launch = dev.prepareModelFromCache([], [], bytes(32), cb)
    assert launch == S.INVALID_ARGUMENT
    assert cb.wait(WAIT_S) == (S.INVALID_ARGUMENT, None) and cb.calls == [("notify_1_2", S.INVALID_ARGUMENT)]


def test_prepare_with_cache_handles_still_prepares(tmp_path) -> None:  # noqa: ANN001
    """Caching information the driver does not use must not affect preparation."""
    fd = os.open(tmp_path / "c", os.O_RDWR | os.O_CREAT)
    try:
        dev = device()
        cb = hal.PreparedModelCallback()
        launch = dev.prepareModel_1_3(add_model(), hal.ExecutionPreference.FAST_SINGLE_ANSWER, hal.Priority.MEDIUM,
                                      hal.OptionalTimePoint(), [hal.Handle(fds=[fd])], [hal.Handle(fds=[fd])],
                                      bytes(range(32)), cb)
        assert launch == S.NONE
        status, prepared = cb.wait(WAIT_S)
        assert status == S.NONE and prepared is not None
    finally:
        os.close(fd)


def test_allocate_gives_a_buffer(add_prepared) -> None:  # noqa: ANN001
    # NOTE: memory domains in full: tests/test_memory_domains.py
    desc = hal.BufferDesc(dimensions=[2, 2])
    role = hal.BufferRole(modelIndex=0, ioIndex=0, frequency=1.0)
    status, buffer, token = device().allocate(desc, [add_prepared], [role], [])
    assert status == S.NONE and isinstance(buffer, hal.IBuffer) and token > 0


def test_configure_execution_burst_null_channels(add_prepared) -> None:  # noqa: ANN001
    """Bursts are supported (tests/test_burst.py); null queue descriptors are a bad argument."""
    status, burst = add_prepared.configureExecutionBurst(hal.IBurstCallback(), None, None)
    assert status == S.INVALID_ARGUMENT and burst is None


def test_unknown_memory_token_is_invalid(add_prepared) -> None:  # noqa: ANN001
    with _add_pools() as p:
        req = p.request()
        req.pools[1] = hal.MemoryPool(token=7)
        req.outputs[0].location = hal.DataLocation(1, 0, 0)
        assert execute_sync(add_prepared, req)[0] == S.INVALID_ARGUMENT


# --------------------------------------------------------------------------
# request pools


@pytest.mark.parametrize("kind,offset", [("ashmem", 0), ("mmap_fd", 0), ("mmap_fd", 4096 * 3 + 8),
                                         ("hardware_buffer_blob", 0)])
def test_request_pool_kinds(add_prepared, kind: str, offset: int) -> None:  # noqa: ANN001
    with _add_pools(kind, offset=offset) as p:
        status, shapes, _ = execute_sync(add_prepared, p.request())
        assert status == S.NONE
        np.testing.assert_array_equal(p.output(0, np.float32, (2, 2)), A + B)


def test_model_pool_constant_reference_mmap_fd_offset() -> None:
    """CONSTANT_REFERENCE operands in an mmap_fd model pool at a non-zero offset."""
    b = np.array([5.0, 6.0], np.float32)
    from tests.driver_util import Builder, make_model

    builder = Builder()
    x = builder.input(T.TENSOR_FLOAT32, (2,))
    mem = _filled(hal_memory.allocate(64, "mmap_fd", offset=4096 + 12), b"\0" * 8 + b.tobytes())
    c = builder.operand(T.TENSOR_FLOAT32, (2,), hal.OperandLifeTime.CONSTANT_REFERENCE,
                        loc=hal.DataLocation(0, 8, 8))
    out = builder.output(T.TENSOR_FLOAT32, (2,))
    builder.op(hal.OperationType.ADD, [x, c, builder.i32(0)], [out])
    model = make_model(builder)
    model.pools = [mem]
    try:
        prepared = prepared_model(model)
        with Pools([np.array([1.0, 2.0], np.float32)], [8]) as p:
            assert execute_sync(prepared, p.request())[0] == S.NONE
            np.testing.assert_array_equal(p.output(0, np.float32, (2,)), [6.0, 8.0])
    finally:
        hal_memory.free(mem)


def _filled(mem: hal.Memory, data: bytes) -> hal.Memory:
    view = hal_memory.map(mem)
    view[: len(data)] = data
    view.release()
    return mem


def test_bad_pool_closed_fd(add_prepared) -> None:  # noqa: ANN001
    p = _add_pools()
    try:
        req = p.request()
        bad = hal_memory.allocate(16)
        hal_memory.free(bad)
        # NOTE: a high unused number: mapping the other pools dups fds, which may reuse a low one
        bad.handle.fds = [_closed_fd()]
        req.pools[1] = hal.MemoryPool(hidlMemory=bad)
        assert execute_sync(add_prepared, req)[0] == S.INVALID_ARGUMENT
        _, status, shapes, _ = execute_async(add_prepared, req)
        assert status == S.INVALID_ARGUMENT and shapes == []
    finally:
        p.close()


def _closed_fd() -> int:
    fd = 3000
    while True:
        try:
            os.fstat(fd)
        except OSError:
            return fd
        fd += 1


def test_bad_pool_size_beyond_file(add_prepared) -> None:  # noqa: ANN001
    with _add_pools() as p:
        req = p.request()
        big = hal.Memory(name="ashmem", handle=p.out_mem.handle, size=1 << 20)  # the file holds only 16 bytes
        req.pools[1] = hal.MemoryPool(hidlMemory=big)
        assert execute_sync(add_prepared, req)[0] == S.INVALID_ARGUMENT


def test_bad_pool_unknown_name(add_prepared) -> None:  # noqa: ANN001
    with _add_pools() as p:
        req = p.request()
        req.pools[1] = hal.MemoryPool(hidlMemory=hal.Memory(name="gralloc", handle=p.out_mem.handle, size=16))
        assert execute_sync(add_prepared, req)[0] == S.INVALID_ARGUMENT


def test_bad_location_beyond_pool(add_prepared) -> None:  # noqa: ANN001
    with _add_pools() as p:
        req = p.request()
        req.outputs[0].location = hal.DataLocation(1, 8, 16)
        assert execute_sync(add_prepared, req)[0] == S.INVALID_ARGUMENT
        req.outputs[0].location = hal.DataLocation(2, 0, 16)
        assert execute_sync(add_prepared, req)[0] == S.INVALID_ARGUMENT


def test_bad_model_pool_is_invalid() -> None:
    model = add_model()
    model.pools = [hal.Memory(name="ashmem", handle=hal.Handle(fds=[99999]), size=16)]
    assert device().getSupportedOperations_1_3(model)[0] == S.INVALID_ARGUMENT
    launch, status, prepared = prepare(model)
    assert launch == status == S.INVALID_ARGUMENT and prepared is None


# --------------------------------------------------------------------------
# concurrency


def test_concurrent_prepare_and_execute() -> None:
    dev = device()
    shared = prepared_model(add_model((64,)))
    errors: list[str] = []
    rng = np.random.default_rng(1)
    data = [(rng.standard_normal(64).astype(np.float32), rng.standard_normal(64).astype(np.float32))
            for _ in range(8)]

    def worker(k: int) -> None:
        try:
            a, b = data[k]
            # its own preparation
            launch, status, own = prepare(add_model((64,)), dev)
            if (launch, status) != (S.NONE, S.NONE):
                errors.append(f"{k}: prepare {launch} {status}")
                return
            for j, pm in enumerate([shared, own] * 5):
                with Pools([a, b], [256]) as p:
                    if j % 2:
                        status, _, _ = execute_sync(pm, p.request(), M.YES)
                    else:
                        _, status, _, _ = execute_async(pm, p.request(), M.YES)
                    if status != S.NONE:
                        errors.append(f"{k}: status {status}")
                    elif not np.array_equal(p.output(0, np.float32, (64,)), a + b):
                        errors.append(f"{k}: wrong result")
        except Exception as e:  # noqa: BLE001
            errors.append(f"{k}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors


def test_read_only_pools(add_prepared) -> None:  # noqa: ANN001
    """A read-only mmap_fd is fine for inputs; as an output pool it is a bad
    argument (never an exception)."""
    fd = os.memfd_create("ro")
    try:
        os.ftruncate(fd, 64)
        os.pwrite(fd, A.tobytes() + B.tobytes(), 0)
        with _add_pools() as p:
            ro = hal_memory.from_fd(fd, 32, 0, hal_memory.PROT_READ)
            req = p.request()
            req.pools[0] = hal.MemoryPool(hidlMemory=ro)
            assert execute_sync(add_prepared, req)[0] == S.NONE
            np.testing.assert_array_equal(p.output(0, np.float32, (2, 2)), A + B)
            req = p.request()
            req.pools[1] = hal.MemoryPool(hidlMemory=hal_memory.from_fd(fd, 32, 0, hal_memory.PROT_READ))
            status, shapes, _ = execute_sync(add_prepared, req)
            assert status == S.INVALID_ARGUMENT and shapes == []
            _, status, shapes, _ = execute_async(add_prepared, req)
            assert status == S.INVALID_ARGUMENT and shapes == []
            hal_memory.free(ro)
            hal_memory.free(req.pools[1].hidlMemory)
    finally:
        os.close(fd)


def test_non_blob_hardware_buffer_pool_is_invalid(add_prepared) -> None:  # noqa: ANN001
    with _add_pools() as p:
        req = p.request()
        hw = hal_memory.allocate(16, "hardware_buffer")
        req.pools[1] = hal.MemoryPool(hidlMemory=hw)
        assert execute_sync(add_prepared, req)[0] == S.INVALID_ARGUMENT
        hal_memory.free(hw)


@pytest.mark.parametrize("bad", ["no_pool", "both", "location_with_no_value", "garbage"])
def test_malformed_requests(add_prepared, bad: str) -> None:  # noqa: ANN001
    with _add_pools() as p:
        req = p.request()
        if bad == "no_pool":
            req.pools[1] = hal.MemoryPool()
        elif bad == "both":
            req.pools[1] = hal.MemoryPool(hidlMemory=p.out_mem, token=3)
        elif bad == "location_with_no_value":
            req.inputs = [hal.RequestArgument(hasNoValue=True, location=hal.DataLocation(0, 0, 16)), req.inputs[1]]
        else:
            req = "not a request"
        status, shapes, timing = execute_sync(add_prepared, req, M.YES)
        assert status == S.INVALID_ARGUMENT and shapes == [] and timing == NO_TIMING


def _omitting(p: Pools, what: str) -> hal.Request:
    req = p.request()
    if what == "input":
        req.inputs = [hal.RequestArgument(hasNoValue=True), *req.inputs[1:]]
    else:
        req.outputs = [hal.RequestArgument(hasNoValue=True)]
    return req


@pytest.mark.parametrize("what", ["input", "output"])
def test_omitted_required_operand(add_prepared, what: str) -> None:  # noqa: ANN001
    """As the reference: an operation of the resolver (ADD) fails with
    GENERAL_FAILURE; one of CpuExecutor's own switch (RESHAPE) with
    BAD_DATA -> INVALID_ARGUMENT."""
    from tests.driver_util import Builder, make_model

    with _add_pools() as p:
        status, shapes, timing = execute_sync(add_prepared, _omitting(p, what), M.YES)
        assert status == S.GENERAL_FAILURE and shapes == [] and timing == NO_TIMING
    b = Builder()
    x = b.input(T.TENSOR_FLOAT32, (2, 2))
    o = b.output(T.TENSOR_FLOAT32, (4,))
    b.op(hal.OperationType.RESHAPE, [x, b.const(T.TENSOR_INT32, np.array([-1], np.int32), (1,))], [o])
    reshape = prepared_model(make_model(b))
    with Pools([A], [16]) as p:
        status, shapes, timing = execute_sync(reshape, _omitting(p, what), M.YES)
        assert status == S.INVALID_ARGUMENT and shapes == [] and timing == NO_TIMING
        assert execute_sync(reshape, p.request())[0] == S.NONE
        np.testing.assert_array_equal(p.output(0, np.float32, (4,)), A.reshape(-1))


def test_optional_input_omitted_is_fine() -> None:
    """TRANSPOSE's permutation may be omitted (hasNoValue) in the request."""
    from tests.driver_util import Builder, make_model

    b = Builder()
    x = b.input(T.TENSOR_FLOAT32, (2, 3))
    perm = b.input(T.TENSOR_INT32, (2,))
    o = b.output(T.TENSOR_FLOAT32, (3, 2))
    b.op(hal.OperationType.TRANSPOSE, [x, perm], [o])
    prepared = prepared_model(make_model(b))
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    with Pools([x, None], [24]) as p:
        assert execute_sync(prepared, p.request())[0] == S.NONE
        np.testing.assert_array_equal(p.output(0, np.float32, (3, 2)), x.T)


class _NoThreads:
    """A threading.Thread whose start fails (the spec's "task fails to launch")."""

    def __init__(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003
        pass

    def start(self) -> None:
        raise RuntimeError("can't start new thread")


def test_launch_failure_notifies_once_with_same_status(monkeypatch) -> None:  # noqa: ANN001
    """A launch that cannot queue its task (no worker thread can start, or the
    bounded work queue is full) answers with a status and notifies the
    callback once with the same one; the 1.0-1.2 entry points see
    GENERAL_FAILURE (RESOURCE_EXHAUSTED_* is a 1.3 status)."""
    from nnhal.driver import scheduler as sched_mod
    from nnhal.drivers.sample import sample_device

    sched = sched_mod.Scheduler(workers=1, max_queued=8, name="test-launch")
    dev = sample_device("sample-launch", scheduler=sched)
    release = threading.Event()
    busy = threading.Event()
    try:
        prepared = prepared_model(add_model(), dev)
        assert sched.submit(int(hal.Priority.HIGH), lambda: (busy.set(), release.wait(30)))
        assert busy.wait(10)  # NOTE: the only worker slot is taken
        sched.max_queued = 0  # NOTE: saturated: nothing more may queue
        cb = CountingPreparedCallback()
        launch = dev.prepareModel_1_3(add_model(), hal.ExecutionPreference.FAST_SINGLE_ANSWER, hal.Priority.MEDIUM,
                                      hal.OptionalTimePoint(), [], [], bytes(32), cb)
        assert launch == S.RESOURCE_EXHAUSTED_TRANSIENT
        assert cb.wait(0) == (S.RESOURCE_EXHAUSTED_TRANSIENT, None) and len(cb.calls) == 1
        cb = CountingPreparedCallback()
        assert dev.prepareModel(add_model_v1_0(), cb) == S.GENERAL_FAILURE
        assert cb.calls == [("notify", S.GENERAL_FAILURE)]
        with _add_pools() as p:
            cb = CountingExecutionCallback()
            launch = prepared.execute_1_3(p.request(), M.YES, hal.OptionalTimePoint(), hal.OptionalTimeoutDuration(),
                                          cb)
            assert launch == S.RESOURCE_EXHAUSTED_TRANSIENT
            status, shapes, timing = cb.wait(0)
            assert status == S.RESOURCE_EXHAUSTED_TRANSIENT and shapes == [] and timing == NO_TIMING
            assert len(cb.calls) == 1
            cb = CountingExecutionCallback()
            assert prepared.execute(p.request_v1_0(), cb) == S.GENERAL_FAILURE
            assert cb.calls == [("notify", S.GENERAL_FAILURE)]
            # the synchronous path waits in the same queue for a slot (so that priorities hold for it)
            assert execute_sync(prepared, p.request())[0] == S.RESOURCE_EXHAUSTED_TRANSIENT
            assert prepared.executeSynchronously(p.request_v1_0(), M.NO)[0] == S.GENERAL_FAILURE
            release.set()
    finally:
        release.set()
        sched.shutdown()
    # no worker thread can start at all: the same answers
    monkeypatch.setattr(sched_mod.threading, "Thread", _NoThreads)
    sched2 = sched_mod.Scheduler(workers=1, max_queued=8, name="test-nothreads")
    dev2 = sample_device("sample-nothreads", scheduler=sched2)
    cb = CountingPreparedCallback()
    launch = dev2.prepareModel_1_3(add_model(), hal.ExecutionPreference.FAST_SINGLE_ANSWER, hal.Priority.MEDIUM,
                                   hal.OptionalTimePoint(), [], [], bytes(32), cb)
    assert launch == S.RESOURCE_EXHAUSTED_TRANSIENT
    assert cb.wait(0) == (S.RESOURCE_EXHAUSTED_TRANSIENT, None) and len(cb.calls) == 1


def test_input_location_too_short(add_prepared) -> None:  # noqa: ANN001
    with _add_pools() as p:
        req = p.request()
        req.inputs = [hal.RequestArgument(location=hal.DataLocation(0, 0, 12)), req.inputs[1]]
        status, shapes, _ = execute_sync(add_prepared, req)
        assert status == S.INVALID_ARGUMENT and shapes == []


def test_bool_and_scalar_io() -> None:
    """TENSOR_BOOL8 inputs/outputs (any non-zero byte is true, outputs are 0/1)
    and a scalar model input."""
    from tests.driver_util import Builder, make_model

    b = Builder()
    x = b.input(T.TENSOR_BOOL8, (4,))
    o = b.output(T.TENSOR_BOOL8, (4,))
    b.op(hal.OperationType.LOGICAL_NOT, [x], [o])
    y = b.input(T.TENSOR_INT32, (2,))
    s = b.input(T.INT32, ())
    o2 = b.output(T.TENSOR_INT32, (2,))
    b.op(hal.OperationType.ADD, [y, y, s], [o2])  # the activation as a model input
    prepared = prepared_model(make_model(b))
    raw = np.array([0, 1, 7, 0], np.uint8)
    with Pools([raw, np.array([3, -4], np.int32), np.array(0, np.int32)], [4, 8]) as p:
        status, shapes, _ = execute_sync(prepared, p.request())
        assert status == S.NONE
        assert p.output(0, np.uint8, (4,)).tolist() == [1, 0, 0, 1]
        assert p.output(1, np.int32, (2,)).tolist() == [6, -8]


@pytest.mark.parametrize("junk", [None, 7, [None], [hal.Memory(name="ashmem", handle=None, size=16)],
                                  [hal.Memory(name="ashmem", handle=hal.Handle(fds=None), size=16)],
                                  [hal.Memory(name="ashmem", handle=hal.Handle(fds=["x"]), size=16)],
                                  [hal.Memory(name="ashmem", handle=hal.Handle(fds=[0]), size="big")]],
                         ids=repr)
def test_junk_model_pools_are_invalid(junk) -> None:  # noqa: ANN001
    model = add_model()
    model.pools = junk
    assert device().getSupportedOperations_1_3(model) == (S.INVALID_ARGUMENT, [])
    launch, status, prepared = prepare(model)
    assert launch == status == S.INVALID_ARGUMENT and prepared is None


def _if_with_oem_branch(nested: bool) -> hal.Model:
    """main: IF(c, then, else)(x) -> y; ABS(y); ABS(x).  The then-branch holds an
    OEM_OPERATION (not supported), directly or inside a nested IF."""
    from tests.driver_util import Builder, make_model

    F, B = T.TENSOR_FLOAT32, T.TENSOR_BOOL8
    OT = hal.OperationType
    main = Builder()
    then, else_ = Builder(main.values), Builder(main.values)
    x = then.input(F, (2,))
    o = then.output(F, (2,))
    if nested:
        inner_c = then.const(B, np.array([True]), (1,))
        then.op(OT.IF, [inner_c, then.subgraph_ref(2), then.subgraph_ref(1), x], [o])
    else:
        then.op(OT.OEM_OPERATION, [x], [o])
    x = else_.input(F, (2,))
    o = else_.output(F, (2,))
    else_.op(OT.ABS, [x], [o])
    oem = Builder(main.values)
    x = oem.input(F, (2,))
    o = oem.output(F, (2,))
    oem.op(OT.OEM_OPERATION, [x], [o])
    c, x = main.input(B, (1,)), main.input(F, (2,))
    y = main.operand(F, (2,))
    out, out2 = main.output(F, (2,)), main.output(F, (2,))
    main.op(OT.IF, [c, main.subgraph_ref(0), main.subgraph_ref(1), x], [y])
    main.op(OT.ABS, [y], [out])
    main.op(OT.ABS, [x], [out2])
    return make_model(main, then, else_, oem)


@pytest.mark.parametrize("nested", [False, True])
def test_control_flow_supported_only_with_its_subgraphs(nested: bool) -> None:
    """getSupportedOperations_1_3: an IF is supported only if every operation of
    the subgraphs it references (transitively) is; preparing such a model fails
    at launch with GENERAL_FAILURE, notified once."""
    model = _if_with_oem_branch(nested)
    status, supported = device().getSupportedOperations_1_3(model)
    assert status == S.NONE and supported == [False, True, True]
    launch, status, prepared = prepare(model)
    assert launch == status == S.GENERAL_FAILURE and prepared is None


def _add_model(values) -> hal.Model:  # noqa: ANN001
    T, L = hal.OperandType, hal.OperandLifeTime
    ops = [hal.Operand(type=T.TENSOR_FLOAT32, dimensions=[2], numberOfConsumers=1, lifetime=L.SUBGRAPH_INPUT),
           hal.Operand(type=T.TENSOR_FLOAT32, dimensions=[2], numberOfConsumers=1, lifetime=L.CONSTANT_COPY,
                       location=hal.DataLocation(0, 0, 8)),
           hal.Operand(type=T.INT32, numberOfConsumers=1, lifetime=L.CONSTANT_COPY, location=hal.DataLocation(0, 8, 4)),
           hal.Operand(type=T.TENSOR_FLOAT32, dimensions=[2], lifetime=L.SUBGRAPH_OUTPUT)]
    sg = hal.Subgraph(operands=ops, operations=[hal.Operation(hal.OperationType.ADD, [0, 1, 2], [3])],
                      inputIndexes=[0], outputIndexes=[3])
    return hal.Model(main=sg, operandValues=values)


@pytest.mark.parametrize("form", ["bytes", "bytearray", "list", "uint8 array", "memoryview"])
def test_operand_values_as_any_byte_vector(form: str) -> None:
    """``vec<uint8_t>`` may come as bytes, a list of ints or a uint8 array."""
    raw = np.array([1, 2], np.float32).tobytes() + np.array([0], np.int32).tobytes()
    values = {"bytes": raw, "bytearray": bytearray(raw), "list": list(raw),
              "uint8 array": np.frombuffer(raw, np.uint8).copy(), "memoryview": memoryview(raw)}[form]
    model = _add_model(values)
    device = nnhal.get_device("sample-all")
    assert device.getSupportedOperations_1_3(model) == (S.NONE, [True])
    assert model.operandValues is values  # the client's model is left alone


@pytest.mark.parametrize("values", [[1, 2, 300], [1.5] * 12, "abc", [True] * 12])
def test_operand_values_not_bytes_are_invalid(values) -> None:  # noqa: ANN001
    assert nnhal.get_device("sample-all").getSupportedOperations_1_3(_add_model(values))[0] == S.INVALID_ARGUMENT
