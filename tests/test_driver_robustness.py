"""The driver never raises or hangs on a malformed argument.

Fuzz-style: every IDevice / IPreparedModel method of the sample driver gets
None, values of the wrong type, models and requests with garbage in any
field, huge indexes and negative numbers.  Each call must come back with an
ErrorStatus (INVALID_ARGUMENT where the spec says the argument is invalid),
and every callback passed to the driver must be notified exactly once, with
the launch status when the launch failed.
"""

from __future__ import annotations

import copy
import math
import os
import time
from typing import Any, Callable, Iterator

import numpy as np
import pytest

from nnhal import hal
from nnhal import memory as hal_memory
from nnhal.conformance.vts.basic import if_model

S = hal.ErrorStatus
T = hal.OperandType
L = hal.OperandLifeTime
Op = hal.OperationType
WAIT_S = 30.0

# values of the wrong type or out of range for any field
def _junk_id(value: Any) -> str:
    """A test id that is the same in every process (xdist workers must collect the same ids)."""
    return "object()" if type(value) is object else repr(value)


JUNK: tuple = (None, -1, 2**31, 2**32 + 7, 2**64, -(2**63) - 1, 1.5, math.nan, "x", b"\xff", [], [None], {}, object())

_CALLBACKS: list[Any] = []  # every counting callback handed out, checked at the end


class PrepareCallback(hal.PreparedModelCallback):
    """Counts notifications (the ready callback ignores repeats)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0
        _CALLBACKS.append(self)

    def notify(self, status: Any, preparedModel: Any) -> None:
        self.count += 1
        super().notify(status, preparedModel)

    def notify_1_2(self, status: Any, preparedModel: Any) -> None:
        self.count += 1
        super().notify_1_2(status, preparedModel)

    def notify_1_3(self, status: Any, preparedModel: Any) -> None:
        self.count += 1
        super().notify_1_3(status, preparedModel)


class ExecCallback(hal.ExecutionCallback):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0
        _CALLBACKS.append(self)

    def notify(self, status: Any) -> None:
        self.count += 1
        super().notify(status)

    def notify_1_2(self, status: Any, outputShapes: Any, timing: Any) -> None:
        self.count += 1
        super().notify_1_2(status, outputShapes, timing)

    def notify_1_3(self, status: Any, outputShapes: Any, timing: Any) -> None:
        self.count += 1
        super().notify_1_3(status, outputShapes, timing)


class RaisingCallback(hal.IPreparedModelCallback, hal.IExecutionCallback):
    """A client callback that blows up: the driver must survive it."""

    def __init__(self) -> None:
        self.count = 0
        _CALLBACKS.append(self)

    def _boom(self, *args: Any) -> None:
        self.count += 1
        raise RuntimeError("client callback failure")

    notify = notify_1_2 = notify_1_3 = _boom


def _is_status(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x in S._value2member_map_


# --------------------------------------------------------------------------
# base models


def add_model() -> hal.Model:
    """out = in0 + c (c a CONSTANT_REFERENCE in an ashmem pool, activation a
    CONSTANT_COPY)."""
    pool = hal_memory.allocate(16)
    hal_memory.map(pool)[:16] = np.arange(4, dtype=np.float32).tobytes()
    operands = [
        hal.Operand(type=T.TENSOR_FLOAT32, dimensions=[2, 2], numberOfConsumers=1, lifetime=L.SUBGRAPH_INPUT),
        hal.Operand(type=T.TENSOR_FLOAT32, dimensions=[2, 2], numberOfConsumers=1, lifetime=L.CONSTANT_REFERENCE,
                    location=hal.DataLocation(0, 0, 16)),
        hal.Operand(type=T.INT32, numberOfConsumers=1, lifetime=L.CONSTANT_COPY, location=hal.DataLocation(0, 0, 4)),
        hal.Operand(type=T.TENSOR_FLOAT32, dimensions=[2, 2], lifetime=L.SUBGRAPH_OUTPUT),
    ]
    main = hal.Subgraph(operands=operands, operations=[hal.Operation(Op.ADD, [0, 1, 2], [3])], inputIndexes=[0],
                        outputIndexes=[3])
    return hal.Model(main=main, operandValues=bytes(4), pools=[pool])


def per_channel_model() -> hal.Model:
    """out = DEQUANTIZE(in), in a TENSOR_QUANT8_SYMM_PER_CHANNEL input."""
    operands = [
        hal.Operand(type=T.TENSOR_QUANT8_SYMM_PER_CHANNEL, dimensions=[2, 3], numberOfConsumers=1,
                    lifetime=L.SUBGRAPH_INPUT,
                    extraParams=hal.OperandExtraParams(
                        channelQuant=hal.SymmPerChannelQuantParams(scales=[0.5, 0.25], channelDim=0))),
        hal.Operand(type=T.TENSOR_FLOAT32, dimensions=[2, 3], lifetime=L.SUBGRAPH_OUTPUT),
    ]
    main = hal.Subgraph(operands=operands, operations=[hal.Operation(Op.DEQUANTIZE, [0], [1])], inputIndexes=[0],
                        outputIndexes=[1])
    return hal.Model(main=main)


BASES: dict[str, Callable[[], hal.Model]] = {"add": add_model, "per-channel": per_channel_model,
                                             "if": lambda: if_model(1, 1)}


# --------------------------------------------------------------------------
# corrupting a model: (path, value) pairs, each applied to a fresh copy


def _fields(obj: Any, path: str) -> Iterator[tuple[str, Any, Any]]:
    """(path, container, key) of every field and list element under obj."""
    if isinstance(obj, (hal.Model, hal.Subgraph, hal.Operand, hal.Operation, hal.DataLocation,
                        hal.OperandExtraParams, hal.SymmPerChannelQuantParams, hal.Memory, hal.Handle,
                        hal.ExtensionNameAndPrefix, hal.Request, hal.RequestArgument, hal.MemoryPool)):
        for name in obj.__dataclass_fields__:
            sub = f"{path}.{name}" if path else name
            yield sub, obj, name
            yield from _fields(getattr(obj, name), sub)
    elif isinstance(obj, list):
        for k, item in enumerate(obj):
            sub = f"{path}[{k}]"
            yield sub, obj, k
            yield from _fields(item, sub)


def _set(container: Any, key: Any, value: Any) -> None:
    if isinstance(key, str):
        setattr(container, key, value)
    else:
        container[key] = value


def _still_valid(path: str, value: Any, model: hal.Model) -> bool:
    """Corruptions that happen to leave a valid model (not junk for that field)."""
    if isinstance(value, list) and not value and (path.endswith("referenced") or path.endswith("extensionNameToPrefix")
                                                  or path.endswith("ints")):
        return not (path.endswith("referenced") and any(o.lifetime == L.SUBGRAPH for o in model.main.operands))
    if path.endswith(".dimensions") and isinstance(value, list) and not value:
        # unknown rank is allowed for non-constant operands in HAL 1.3
        return True
    if path == "operandValues" and (isinstance(value, bytes) or value == []):
        # a vec<uint8_t> may also be given as a list of ints: [] is an empty one
        return all(o.lifetime != L.CONSTANT_COPY for sg in [model.main, *model.referenced] for o in sg.operands)
    if path.endswith("relaxComputationFloat32toFloat16"):
        return isinstance(value, bool) or (type(value) is int and value in (0, 1))
    if path.endswith("ints"):
        return isinstance(value, list) and all(isinstance(v, int) for v in value)
    if ".scales[" in path:
        return isinstance(value, (int, float)) and value > 0  # any positive number is a scale
    return False


# fewer junk values inside referenced subgraphs: they are checked by the same code as main
SHORT_JUNK: tuple = (None, -1, 2**64, "x", [None])


def model_corruptions(base: hal.Model) -> Iterator[tuple[str, hal.Model]]:
    for path, _, _ in list(_fields(base, "")):
        for value in SHORT_JUNK if path.startswith("referenced[") else JUNK:
            model = copy.deepcopy(base)
            # NOTE: deepcopy duplicates the pools' fd numbers, not the fds: fine, nothing is closed
            target = next((c, k) for p, c, k in _fields(model, "") if p == path)
            original = target[0][target[1]] if isinstance(target[1], int) else getattr(*target)
            if original is value or (type(original) is type(value) and original == value):
                continue  # not a change
            _set(*target, value)
            if not _still_valid(path, value, model):
                yield f"{path} = {value!r}", model


def _check_prepare(device: hal.IDevice, model: Any, what: str, invalid: bool = True, older: bool = True) -> None:
    """getSupportedOperations* and prepareModel* (the 1.0-1.2 ones too when
    ``older``) give INVALID_ARGUMENT (``invalid``) or at least a status."""
    methods = ("getSupportedOperations_1_3", "getSupportedOperations_1_2", "getSupportedOperations_1_1",
               "getSupportedOperations")
    for method in methods if older else methods[:1]:
        status, supported = getattr(device, method)(model)
        assert _is_status(status), (what, method, status)
        if invalid:
            assert status == S.INVALID_ARGUMENT, (what, method, S(status).name)
            assert not supported, (what, method)
    cb = PrepareCallback()
    launch = device.prepareModel_1_3(model, hal.ExecutionPreference.FAST_SINGLE_ANSWER, hal.Priority.MEDIUM,
                                     hal.OptionalTimePoint(), [], [], bytes(32), cb)
    assert _is_status(launch), (what, launch)
    status, prepared = cb.wait(WAIT_S)
    if invalid:
        assert launch == S.INVALID_ARGUMENT and status == S.INVALID_ARGUMENT and prepared is None, \
            (what, S(launch).name, S(status).name)
    elif launch != S.NONE:
        assert status == launch and prepared is None, (what, launch, status)
    if not older:
        return
    for method, args in (("prepareModel", ()), ("prepareModel_1_1", (hal.ExecutionPreference.LOW_POWER,)),
                         ("prepareModel_1_2", (hal.ExecutionPreference.LOW_POWER, [], [], bytes(32)))):
        cb = PrepareCallback()
        launch = getattr(device, method)(model, *args, cb)
        assert _is_status(launch), (what, method, launch)
        status, prepared = cb.wait(WAIT_S)
        if invalid:
            assert launch == S.INVALID_ARGUMENT and status == S.INVALID_ARGUMENT and prepared is None, \
                (what, method, S(launch).name, S(status).name)


def _check_corruptions(device: hal.IDevice, base: str) -> None:
    model = BASES[base]()
    try:
        _check_prepare(device, model, "the base model", invalid=False)  # sanity: the base is valid
        assert device.getSupportedOperations_1_3(model)[0] == S.NONE
        n = 0
        problems = []
        for what, bad in model_corruptions(model):
            try:
                # NOTE: the 1.0-1.2 methods share the 1.3 path; every 4th corruption is enough for them
                _check_prepare(device, bad, what, older=n % 4 == 0)
            except Exception as e:  # noqa: BLE001 - collect them all
                problems.append(f"{what}: {type(e).__name__}: {e}")
            n += 1
        assert n > 100
        assert not problems, f"{len(problems)} of {n}:\n" + "\n".join(problems)
    finally:
        for p in model.pools:
            hal_memory.free(p)


@pytest.mark.parametrize("base", list(BASES))
def test_corrupted_models(device: hal.IDevice, base: str) -> None:
    _check_corruptions(device, base)


@pytest.mark.parametrize("junk", JUNK + (hal.Model(), hal.Subgraph(), hal.Request(), hal.v1_0.Model(),
                                         hal.v1_2.Model()), ids=_junk_id)
def test_junk_instead_of_a_model(device: hal.IDevice, junk: Any) -> None:
    _check_prepare(device, junk, repr(junk))


def test_v1_0_model_with_junk_fields(device: hal.IDevice) -> None:
    v0 = hal.v1_0
    base = v0.Model(
        operands=[v0.Operand(type=v0.OperandType.TENSOR_FLOAT32, dimensions=[2], numberOfConsumers=1,
                             lifetime=v0.OperandLifeTime.MODEL_INPUT),
                  v0.Operand(type=v0.OperandType.TENSOR_FLOAT32, dimensions=[2], numberOfConsumers=1,
                             lifetime=v0.OperandLifeTime.MODEL_INPUT),
                  v0.Operand(type=v0.OperandType.INT32, numberOfConsumers=1,
                             lifetime=v0.OperandLifeTime.CONSTANT_COPY, location=hal.DataLocation(0, 0, 4)),
                  v0.Operand(type=v0.OperandType.TENSOR_FLOAT32, dimensions=[2],
                             lifetime=v0.OperandLifeTime.MODEL_OUTPUT)],
        operations=[v0.Operation(v0.OperationType.ADD, [0, 1, 2], [3])], inputIndexes=[0, 1], outputIndexes=[3],
        operandValues=bytes(4))
    status, _ = device.getSupportedOperations(base)
    assert status == S.NONE
    for name in ("operands", "operations", "inputIndexes", "outputIndexes", "operandValues", "pools"):
        for value in (None, -1, "x", [None], [2**40]):
            bad = copy.deepcopy(base)
            setattr(bad, name, value)
            _check_prepare(device, bad, f"v1_0 {name} = {value!r}")
    for field in ("type", "dimensions", "numberOfConsumers", "scale", "zeroPoint", "lifetime", "location"):
        for value in (None, -1, 2**40, "x"):
            bad = copy.deepcopy(base)
            setattr(bad.operands[0], field, value)
            _check_prepare(device, bad, f"v1_0 operands[0].{field} = {value!r}")


# --------------------------------------------------------------------------
# the other prepareModel arguments


def test_prepare_with_junk_arguments(device: hal.IDevice) -> None:
    model = add_model()
    good = dict(model=model, preference=hal.ExecutionPreference.FAST_SINGLE_ANSWER, priority=hal.Priority.MEDIUM,
                deadline=hal.OptionalTimePoint(), modelCache=[], dataCache=[], token=bytes(32))
    try:
        for arg in ("preference", "priority", "deadline"):
            for value in JUNK + (hal.OptionalTimePoint(nanosecondsSinceEpoch=-5),
                                 hal.OptionalTimePoint(nanosecondsSinceEpoch="x")):
                if arg != "deadline" and isinstance(value, hal.OptionalTimePoint):
                    continue
                if arg == "deadline" and value is None:
                    continue  # NOTE: None is the Python spelling of "no deadline"
                args = dict(good, **{arg: value})
                cb = PrepareCallback()
                launch = device.prepareModel_1_3(*args.values(), cb)
                status, prepared = cb.wait(WAIT_S)
                assert launch == S.INVALID_ARGUMENT and status == S.INVALID_ARGUMENT and prepared is None, \
                    (arg, value, launch, status)
        for arg in ("modelCache", "dataCache", "token"):
            for value in JUNK:
                args = dict(good, **{arg: value})
                cb = PrepareCallback()
                launch = device.prepareModel_1_3(*args.values(), cb)
                assert _is_status(launch), (arg, value, launch)
                status, prepared = cb.wait(WAIT_S)
                assert (prepared is not None) == (status == S.NONE), (arg, value, status)
                if launch != S.NONE:
                    assert status == launch
        # preference through the 1.1 / 1.2 methods
        for value in JUNK:
            for method, extra in (("prepareModel_1_1", ()), ("prepareModel_1_2", ([], [], bytes(32)))):
                cb = PrepareCallback()
                launch = getattr(device, method)(model, value, *extra, cb)
                status, prepared = cb.wait(WAIT_S)
                assert launch == S.INVALID_ARGUMENT and status == S.INVALID_ARGUMENT, (method, value, launch)
    finally:
        for p in model.pools:
            hal_memory.free(p)


@pytest.mark.parametrize("callback", [None, 5, "cb", object()], ids=_junk_id)
def test_prepare_with_a_junk_callback(device: hal.IDevice, callback: Any) -> None:
    model = add_model()
    try:
        for launch in (
                device.prepareModel_1_3(model, hal.ExecutionPreference.FAST_SINGLE_ANSWER, hal.Priority.MEDIUM,
                                        hal.OptionalTimePoint(), [], [], bytes(32), callback),
                device.prepareModel_1_2(model, hal.ExecutionPreference.FAST_SINGLE_ANSWER, [], [], bytes(32),
                                        callback),
                device.prepareModel_1_1(model, hal.ExecutionPreference.FAST_SINGLE_ANSWER, callback),
                device.prepareModel(model, callback)):
            assert launch == S.INVALID_ARGUMENT
    finally:
        for p in model.pools:
            hal_memory.free(p)


def test_raising_callbacks_do_not_hurt_the_driver(device: hal.IDevice) -> None:
    model = add_model()
    try:
        cb = RaisingCallback()
        assert device.prepareModel_1_3(model, hal.ExecutionPreference.FAST_SINGLE_ANSWER, hal.Priority.MEDIUM,
                                       hal.OptionalTimePoint(), [], [], bytes(32), cb) == S.NONE
        bad = RaisingCallback()
        assert device.prepareModel_1_3(None, hal.ExecutionPreference.FAST_SINGLE_ANSWER, hal.Priority.MEDIUM,
                                       hal.OptionalTimePoint(), [], [], bytes(32), bad) == S.INVALID_ARGUMENT
        _wait_for(lambda: cb.count == 1)
        assert bad.count == 1
        # the driver still works
        assert device.getSupportedOperations_1_3(model)[0] == S.NONE
    finally:
        for p in model.pools:
            hal_memory.free(p)


def _wait_for(cond: Callable[[], bool], timeout: float = WAIT_S) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)


def test_other_device_methods_with_junk(device: hal.IDevice) -> None:
    for method in ("getCapabilities", "getCapabilities_1_1", "getCapabilities_1_2", "getCapabilities_1_3",
                   "getVersionString", "getType", "getSupportedExtensions", "getNumberOfCacheFilesNeeded"):
        result = getattr(device, method)()
        assert result[0] == S.NONE, method
    assert device.getStatus() in hal.DeviceStatus._value2member_map_
    for value in JUNK:
        cb = PrepareCallback()
        status = device.prepareModelFromCache_1_3(value, value, value, value, cb)
        assert _is_status(status) and status != S.NONE
        assert cb.wait(WAIT_S) == (status, None)
        cb = PrepareCallback()
        status = device.prepareModelFromCache(value, value, value, cb)
        assert _is_status(status) and status != S.NONE
        assert cb.wait(WAIT_S)[1] is None
        assert _is_status(device.prepareModelFromCache_1_3(value, [], [], bytes(32), value))
        status, buffer, token = device.allocate(value, value, value, value)
        assert status in (S.INVALID_ARGUMENT, S.GENERAL_FAILURE) and buffer is None and token == 0
        status, buffer, token = device.allocate(hal.BufferDesc(dimensions=[value]), [value],
                                                [hal.BufferRole(modelIndex=value, ioIndex=value, frequency=value)],
                                                [])
        assert status in (S.INVALID_ARGUMENT, S.GENERAL_FAILURE) and buffer is None and token == 0


# --------------------------------------------------------------------------
# executions


class Prepared:
    """The ADD model prepared, with a valid request (in pool 0, out pool 1)."""

    def __init__(self, device: hal.IDevice):
        self.model = add_model()
        cb = hal.PreparedModelCallback()
        device.prepareModel_1_3(self.model, hal.ExecutionPreference.FAST_SINGLE_ANSWER, hal.Priority.MEDIUM,
                                hal.OptionalTimePoint(), [], [], bytes(32), cb)
        status, self.prepared = cb.wait(WAIT_S)
        assert status == S.NONE
        self.in_mem = hal_memory.allocate(16)
        hal_memory.map(self.in_mem)[:16] = np.ones(4, np.float32).tobytes()
        self.out_mem = hal_memory.allocate(16)

    def request(self) -> hal.Request:
        return hal.Request(inputs=[hal.RequestArgument(location=hal.DataLocation(0, 0, 16))],
                           outputs=[hal.RequestArgument(location=hal.DataLocation(1, 0, 16))],
                           pools=[hal.MemoryPool(hidlMemory=self.in_mem), hal.MemoryPool(hidlMemory=self.out_mem)])

    def close(self) -> None:
        for m in (self.in_mem, self.out_mem, *self.model.pools):
            hal_memory.free(m)


@pytest.fixture(scope="module")
def prepared(device: hal.IDevice) -> Iterator[Prepared]:
    p = Prepared(device)
    yield p
    p.close()


def _closed_fd() -> int:
    r, w = os.pipe()
    os.close(r)
    os.close(w)
    return r


def request_corruptions(valid: hal.Request, in_mem: hal.Memory) -> Iterator[tuple[str, hal.Request]]:
    for path, _, _ in list(_fields(valid, "")):
        for value in JUNK:
            if path.endswith("dimensions") and value == []:
                continue  # no dimensions: take the model's, valid
            if path.endswith(".ints") or path.endswith("handle.ints"):
                continue
            request = copy.deepcopy(valid)
            target = next((c, k) for p, c, k in _fields(request, "") if p == path)
            original = target[0][target[1]] if isinstance(target[1], int) else getattr(*target)
            if original is value or (type(original) is type(value) and original == value):
                continue  # not a change
            _set(*target, value)
            yield f"{path} = {value!r}", request
    for what, pool in (
            ("empty MemoryPool", hal.MemoryPool()),
            ("token -1", hal.MemoryPool(token=-1)),
            ("unknown token", hal.MemoryPool(token=12345)),
            ("both members", hal.MemoryPool(hidlMemory=in_mem, token=1)),
            ("closed fd", hal.MemoryPool(hidlMemory=hal.Memory("ashmem", hal.Handle(fds=[_closed_fd()]), 16))),
            ("size beyond the file", hal.MemoryPool(hidlMemory=hal.Memory("ashmem", in_mem.handle, 1 << 30))),
            ("unknown memory name", hal.MemoryPool(hidlMemory=hal.Memory("bogus", in_mem.handle, 16))),
            ("hardware_buffer (not blob)", hal.MemoryPool(hidlMemory=hal.Memory("hardware_buffer", in_mem.handle,
                                                                                16)))):
        request = copy.deepcopy(valid)
        request.pools[0] = pool
        yield f"pools[0] = {what}", request
    for field, value in (("offset", 2**63), ("length", 2**63), ("offset", 4), ("length", 17), ("length", 8)):
        request = copy.deepcopy(valid)
        setattr(request.inputs[0].location, field, value)
        yield f"inputs[0].location.{field} = {value}", request
    for dims in ([2, 2, 1], [4, 1], [2**40, 1], [0, 2]):
        request = copy.deepcopy(valid)
        request.inputs[0].dimensions = dims
        yield f"inputs[0].dimensions = {dims}", request
    request = copy.deepcopy(valid)
    request.inputs[0] = hal.RequestArgument(hasNoValue=True, location=hal.DataLocation(0, 0, 16))
    yield "hasNoValue with a location", request


def _check_execution(prepared: hal.IPreparedModel, request: Any, what: str, measure: Any = hal.MeasureTiming.NO,
                     deadline: Any = None, timeout: Any = None, invalid: bool = True) -> None:
    deadline = hal.OptionalTimePoint() if deadline is None else deadline
    timeout = hal.OptionalTimeoutDuration() if timeout is None else timeout
    expected = {S.INVALID_ARGUMENT} if invalid else set(S)

    cb = ExecCallback()
    launch = prepared.execute_1_3(request, measure, deadline, timeout, cb)
    status, shapes, timing = cb.wait(WAIT_S)
    assert launch in expected and status in expected, (what, "execute_1_3", launch, status)
    if launch != S.NONE:
        assert status == launch, (what, launch, status)
    if status not in (S.NONE, S.OUTPUT_INSUFFICIENT_SIZE):
        assert not shapes and timing == hal.Timing(), (what, shapes, timing)

    status, shapes, timing = prepared.executeSynchronously_1_3(request, measure, deadline, timeout)
    assert status in expected, (what, "executeSynchronously_1_3", status)
    if status not in (S.NONE, S.OUTPUT_INSUFFICIENT_SIZE):
        assert not shapes and timing == hal.Timing(), (what, shapes, timing)

    status, fence, callback = prepared.executeFenced(request, [], measure, deadline, timeout,
                                                     hal.OptionalTimeoutDuration())
    assert status in expected, (what, "executeFenced", status)
    if status != S.NONE:
        assert fence is None and callback is None, what


def _check_old_executions(prepared: hal.IPreparedModel, request: Any, what: str, measure: Any = hal.MeasureTiming.NO,
                          invalid: bool = True) -> None:
    expected = {S.INVALID_ARGUMENT} if invalid else set(S)
    cb = ExecCallback()
    launch = prepared.execute(request, cb)  # NOTE: no measure argument in 1.0
    status = cb.wait(WAIT_S)[0]
    if invalid and measure == hal.MeasureTiming.NO:
        assert launch in expected and status in expected, (what, "execute", launch, status)
    assert _is_status(launch) and (launch == S.NONE or status == launch), (what, launch, status)
    cb = ExecCallback()
    launch = prepared.execute_1_2(request, measure, cb)
    status = cb.wait(WAIT_S)[0]
    assert launch in expected and status in expected, (what, "execute_1_2", launch, status)
    status, shapes, timing = prepared.executeSynchronously(request, measure)
    assert status in expected, (what, "executeSynchronously", status)


def test_valid_request_runs(prepared: Prepared) -> None:
    _check_execution(prepared.prepared, prepared.request(), "valid", invalid=False)
    status, shapes, _ = prepared.prepared.executeSynchronously_1_3(prepared.request(), hal.MeasureTiming.NO,
                                                                   hal.OptionalTimePoint(),
                                                                   hal.OptionalTimeoutDuration())
    assert status == S.NONE


def test_corrupted_requests(prepared: Prepared) -> None:
    n = 0
    problems = []
    for what, request in request_corruptions(prepared.request(), prepared.in_mem):
        try:
            _check_execution(prepared.prepared, request, what)
            _check_old_executions(prepared.prepared, request, what)
        except Exception as e:  # noqa: BLE001 - collect them all
            problems.append(f"{what}: {type(e).__name__}: {e}")
        n += 1
    assert n > 100
    assert not problems, f"{len(problems)} of {n}:\n" + "\n".join(problems)


@pytest.mark.parametrize("junk", JUNK + (hal.Model(), hal.v1_0.Request(), hal.Request(pools=[None])), ids=_junk_id)
def test_junk_instead_of_a_request(prepared: Prepared, junk: Any) -> None:
    _check_execution(prepared.prepared, junk, repr(junk))
    _check_old_executions(prepared.prepared, junk, repr(junk))


def test_junk_execution_arguments(prepared: Prepared) -> None:
    p = prepared.prepared
    for value in JUNK + (hal.MeasureTiming.YES + 1,):
        _check_execution(p, prepared.request(), f"measure {value!r}", measure=value)
        _check_old_executions(p, prepared.request(), f"measure {value!r}", measure=value)
    for value in JUNK + (hal.OptionalTimePoint(nanosecondsSinceEpoch=-1),
                         hal.OptionalTimePoint(nanosecondsSinceEpoch="x")):
        if value is None:
            continue
        _check_execution(p, prepared.request(), f"deadline {value!r}", deadline=value)
    for value in JUNK + (hal.OptionalTimeoutDuration(nanoseconds=-1),
                         hal.OptionalTimeoutDuration(nanoseconds="x")):
        if value is None:
            continue
        _check_execution(p, prepared.request(), f"loopTimeoutDuration {value!r}", timeout=value)


def test_junk_fenced_arguments(prepared: Prepared) -> None:
    p = prepared.prepared

    def fenced(wait_for: Any = (), duration: Any = None) -> tuple:
        return p.executeFenced(prepared.request(), list(wait_for) if isinstance(wait_for, tuple) else wait_for,
                               hal.MeasureTiming.NO, hal.OptionalTimePoint(), hal.OptionalTimeoutDuration(),
                               hal.OptionalTimeoutDuration() if duration is None else duration)

    assert fenced()[0] == S.NONE
    bad_fences = [[None], [5], ["x"], [hal.Handle()], [hal.Handle(fds=[-1])], [hal.Handle(fds=[_closed_fd()])],
                  [hal.Handle(fds=[2**40])], [hal.Handle(fds=[None])], [hal.Handle(fds=["x"])], 5, "x", object()]
    for wait_for in bad_fences:
        status, fence, callback = fenced(wait_for)
        assert (status, fence, callback) == (S.INVALID_ARGUMENT, None, None), (wait_for, status)
    for duration in JUNK + (hal.OptionalTimeoutDuration(nanoseconds=-1),
                            hal.OptionalTimeoutDuration(nanoseconds="x")):
        if duration is None:
            continue
        status, fence, callback = fenced((), duration)
        assert (status, fence, callback) == (S.INVALID_ARGUMENT, None, None), (duration, status)


@pytest.mark.parametrize("callback", [None, 5, "cb", object()], ids=_junk_id)
def test_execute_with_a_junk_callback(prepared: Prepared, callback: Any) -> None:
    p = prepared.prepared
    assert p.execute_1_3(prepared.request(), hal.MeasureTiming.NO, hal.OptionalTimePoint(),
                         hal.OptionalTimeoutDuration(), callback) == S.INVALID_ARGUMENT
    assert p.execute_1_2(prepared.request(), hal.MeasureTiming.NO, callback) == S.INVALID_ARGUMENT
    assert p.execute(prepared.request(), callback) == S.INVALID_ARGUMENT


def test_raising_execution_callback(prepared: Prepared) -> None:
    p = prepared.prepared
    good, bad = RaisingCallback(), RaisingCallback()
    assert p.execute_1_3(prepared.request(), hal.MeasureTiming.NO, hal.OptionalTimePoint(),
                         hal.OptionalTimeoutDuration(), good) == S.NONE
    assert p.execute_1_3(None, hal.MeasureTiming.NO, hal.OptionalTimePoint(), hal.OptionalTimeoutDuration(),
                         bad) == S.INVALID_ARGUMENT
    _wait_for(lambda: good.count == 1)
    assert bad.count == 1
    status, _, _ = p.executeSynchronously_1_3(prepared.request(), hal.MeasureTiming.NO, hal.OptionalTimePoint(),
                                              hal.OptionalTimeoutDuration())
    assert status == S.NONE


def test_burst_with_junk(prepared: Prepared) -> None:
    for value in JUNK:
        result = prepared.prepared.configureExecutionBurst(value, value, value)
        assert _is_status(result[0]) and result[0] != S.NONE and result[1] is None


def test_callbacks_notified_exactly_once() -> None:
    """Runs last in this module: every callback handed to the driver above was
    notified exactly once (late duplicate notifications included)."""
    if not _CALLBACKS:
        pytest.skip("no callback was handed out (run with the whole module)")
    time.sleep(0.2)
    counts = [cb.count for cb in _CALLBACKS]
    assert all(c == 1 for c in counts), sorted(set(counts))
