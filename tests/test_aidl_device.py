"""The AIDL ``IDevice`` face (nnhal.aidl.get_device), per interface version,
on sample-all and on the README's example backend (unchanged): every method's
happy path and the errors the AIDL VTS names, raised as ServiceSpecificError
(a refused preparation also notifies its callback), the version gate, hints,
caching and memory domains through the front end."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import nnhal
from nnhal import aidl, hal
from nnhal import memory as hal_memory
from tests.aidl_util import (
    FAST,
    MEDIUM,
    NUMPY_DRIVER,
    CountingCallback,
    add_aidl,
    add_pools,
    fd_count,
    free,
    memory,
    prepare,
    raised,
    refused_prepare,
    settles_at,
)
from tests.driver_util import OT, WAIT_S, Builder, T, make_model

S = aidl.ErrorStatus
VERSIONS = [1, 2, 3, 4]
DEVICES = ["sample-all", NUMPY_DRIVER]
SERVICE = "service"  # sample-all's AIDL face through a service (nnhal.aidl.connect): the same answers
SAMPLE = ["sample-all", SERVICE]


@pytest.fixture(scope="module")
def faces(service_process: Any) -> Iterator[Callable[..., aidl.IDevice]]:
    """``faces(name, version=4)``: the AIDL IDevice of ``name`` in process, or
    of sample-all through this module's service for SERVICE."""
    conns: dict[int, Any] = {}

    def get(name: str, version: int = 4) -> aidl.IDevice:
        if name != SERVICE:
            return aidl.get_device(name, version)
        if version not in conns:
            conns[version] = service_process.connect_aidl(version)
        return conns[version]

    yield get
    for dev in conns.values():
        dev.close()


def sub_model() -> aidl.Model:
    """ADD then SUB: the example backend runs ADD, not SUB."""
    b = Builder()
    x, y = b.input(T.TENSOR_FLOAT32, [2]), b.input(T.TENSOR_FLOAT32, [2])
    act = b.i32(0)
    t, out = b.operand(T.TENSOR_FLOAT32, [2]), b.output(T.TENSOR_FLOAT32, [2])
    b.op(OT.ADD, [x, y, act], [t])
    b.op(OT.SUB, [t, y, act], [out])
    return aidl.convert.from_canonical(make_model(b))


@pytest.mark.parametrize("name", [*DEVICES, SERVICE])
@pytest.mark.parametrize("version", VERSIONS)
def test_the_queries(name: str, version: int, faces: Any) -> None:
    dev = faces(name, version)
    assert dev.getInterfaceVersion() == version
    assert dev.getInterfaceHash() == aidl.HASHES[version]
    caps = dev.getCapabilities()
    assert type(caps) is aidl.Capabilities
    types = [int(p.type) for p in caps.operandPerformance]
    assert types == sorted(types) and aidl.OperandType.SUBGRAPH not in types  # BasicTests.GetCapabilitiesTest
    assert all(type(p.type) is aidl.OperandType for p in caps.operandPerformance)  # no OEM types in AIDL
    assert all(p.info.execTime > 0 and p.info.powerUsage > 0 for p in caps.operandPerformance)
    assert caps.ifPerformance.execTime > 0 and caps.whilePerformance.powerUsage > 0
    files = dev.getNumberOfCacheFilesNeeded()
    assert type(files) is aidl.NumberOfCacheFiles
    assert (files.numModelCache, files.numDataCache) == ((0, 0) if name == NUMPY_DRIVER else (1, 1))
    assert dev.getSupportedExtensions() == []
    assert dev.getType() == aidl.DeviceType.CPU
    assert isinstance(dev.getVersionString(), str) and dev.getVersionString()


def test_the_device_of_a_version_beyond_the_binding() -> None:
    for version in (0, 5, "4", True):
        with pytest.raises(ValueError):
            aidl.get_device("sample-all", version)
    with pytest.raises(LookupError):
        aidl.get_device("no-such-device")


@pytest.mark.parametrize("name", [*DEVICES, SERVICE])
def test_get_supported_operations(name: str, faces: Any) -> None:
    dev = faces(name)
    assert dev.getSupportedOperations(add_aidl()) == [True]
    assert dev.getSupportedOperations(sub_model()) == [True, name != NUMPY_DRIVER]
    cycle = add_aidl()
    cycle.main.operations[0].outputs = [0]  # writes its own input
    for model in (cycle, aidl.Model(), None, "model", hal.Model(), add_aidl().main):
        assert raised(lambda m=model: dev.getSupportedOperations(m)) == S.INVALID_ARGUMENT, model


@pytest.mark.parametrize("name", SAMPLE)
def test_what_aidl_cannot_mean_is_an_invalid_argument(name: str, faces: Any) -> None:
    """OEM types (AIDL has none), a model operand with padding, an extra
    params union with two members set: INVALID_ARGUMENT at the boundary."""
    dev = faces(name)
    oem = add_aidl()
    oem.main.operands[0].type = int(hal.OperandType.TENSOR_OEM_BYTE)
    padded = add_aidl()
    padded.main.operands[2].location.padding = 4
    two = add_aidl()
    two.main.operands[0].extraParams = aidl.OperandExtraParams(channelQuant=aidl.SymmPerChannelQuantParams(),
                                                                extension=b"")
    oem_op = add_aidl()
    oem_op.main.operations[0].type = int(hal.OperationType.OEM_OPERATION)
    sign = add_aidl()
    sign.main.operands[0].type = (0x8001 << 16) | 1  # an extension prefix of 16 bits: AIDL's has 15
    for model in (oem, padded, two, oem_op, sign):
        assert raised(lambda m=model: dev.getSupportedOperations(m)) == S.INVALID_ARGUMENT
        assert refused_prepare(lambda cb, m=model: dev.prepareModel(m, FAST, MEDIUM, -1, [], [], bytes(32), cb)) \
            == (S.INVALID_ARGUMENT, S.INVALID_ARGUMENT)


def test_an_extension_through_the_aidl_face() -> None:
    """example-fibonacci's extension types and operation (Android's com.example.fibonacci)."""
    from tests.test_extensions_hal import fib_model

    model = aidl.convert.from_canonical(fib_model())
    dev = aidl.get_device("example-fibonacci")
    assert [e.name for e in dev.getSupportedExtensions()] == ["com.example.fibonacci"]
    assert dev.getSupportedOperations(model) == [True]
    assert prepare(dev, model).getInterfaceVersion() == 4
    assert aidl.get_device().getSupportedOperations(model) == [False]  # sample-all does not declare it


@pytest.mark.parametrize("name", [*DEVICES, "litert-cpu", "sample-quant"])
def test_prepare_and_execute(name: str) -> None:
    """Every driver serves the AIDL face: the reference, a partial driver, litert-cpu, a plugin backend."""
    try:
        dev = aidl.get_device(name)
    except LookupError as e:  # NOTE: litert-cpu needs the optional LiteRT dependency
        pytest.skip(str(e))
    if not all(dev.getSupportedOperations(add_aidl())):
        assert name == "sample-quant"  # float32 ADD is not for it: refused alike through both faces
        assert nnhal.get_device(name).getSupportedOperations_1_3(aidl.convert.to_canonical(add_aidl()))[1] == [False]
        return
    pm = prepare(dev, add_aidl())
    assert pm.getInterfaceVersion() == 4
    with add_pools() as pools:
        result = pm.executeSynchronously(pools.aidl_request(), False, -1, -1)
        assert result == aidl.ExecutionResult(True, [aidl.OutputShape([2, 2], True)], aidl.Timing(-1, -1))
        np.testing.assert_array_equal(pools.output(0, np.float32, (2, 2)), [[10, 11], [12, 13]])


@pytest.mark.parametrize("name", SAMPLE)
def test_a_refused_preparation_raises_and_notifies(name: str, faces: Any) -> None:
    """ValidateModel / BasicTests.CycleTest: the launch raises INVALID_ARGUMENT
    and the callback hears it once, with no prepared model."""
    dev = faces(name)
    cycle = add_aidl()
    cycle.main.operations[0].outputs = [0]
    calls = [
        lambda cb: dev.prepareModel(cycle, FAST, MEDIUM, -1, [], [], bytes(32), cb),
        lambda cb: dev.prepareModel(add_aidl(), 7, MEDIUM, -1, [], [], bytes(32), cb),  # preference
        lambda cb: dev.prepareModel(add_aidl(), FAST, -1, -1, [], [], bytes(32), cb),  # priority
        lambda cb: dev.prepareModel(add_aidl(), FAST, MEDIUM, -2, [], [], bytes(32), cb),  # deadline
        lambda cb: dev.prepareModel("model", FAST, MEDIUM, -1, [], [], bytes(32), cb),
        lambda cb: dev.prepareModelWithConfig(cycle, aidl.PrepareModelConfig(FAST, MEDIUM), cb),
        lambda cb: dev.prepareModelWithConfig(add_aidl(), "config", cb),
        lambda cb: dev.prepareModelFromCache(-7, [], [], bytes(32), cb),
    ]
    for call in calls:
        assert refused_prepare(call) == (S.INVALID_ARGUMENT, S.INVALID_ARGUMENT)
    for callback in (None, object(), "cb"):
        assert raised(lambda c=callback: dev.prepareModel(add_aidl(), FAST, MEDIUM, -1, [], [], bytes(32), c)) \
            == S.INVALID_ARGUMENT


def test_an_unsupported_operation_fails_the_preparation() -> None:
    dev = aidl.get_device(NUMPY_DRIVER)
    assert refused_prepare(lambda cb: dev.prepareModel(sub_model(), FAST, MEDIUM, -1, [], [], bytes(32), cb)) \
        == (S.GENERAL_FAILURE, S.GENERAL_FAILURE)


@pytest.mark.parametrize("name", SAMPLE)
def test_a_deadline_already_passed(name: str, faces: Any) -> None:
    dev = faces(name)
    cb = CountingCallback()
    dev.prepareModel(add_aidl(), FAST, MEDIUM, 0, [], [], bytes(32), cb)  # NOTE: 0 ns on the steady clock: passed
    assert cb.wait(WAIT_S) == (S.MISSED_DEADLINE_PERSISTENT, None)
    pm = prepare(dev, add_aidl(), deadline=2**62)
    with add_pools() as pools:
        assert raised(lambda: pm.executeSynchronously(pools.aidl_request(), False, 0, -1)) in (
            S.MISSED_DEADLINE_PERSISTENT, S.MISSED_DEADLINE_TRANSIENT)


@pytest.mark.parametrize("priority", list(aidl.Priority))
def test_every_priority(priority: aidl.Priority) -> None:
    pm = prepare(aidl.get_device(), add_aidl(), priority=priority)
    assert pm.prepared.priority == priority


# --------------------------------------------------------------------------
# version 4: prepareModelWithConfig and its hints


@pytest.mark.parametrize("name", SAMPLE)
def test_prepare_model_with_config_and_hints(name: str, faces: Any) -> None:
    dev = faces(name)
    hints = [aidl.TokenValuePair(token=(0x7AAA << 16) | 0xB, value=b"\x01"), aidl.TokenValuePair(1, b"")]
    names = [aidl.ExtensionNameAndPrefix(name="vendor.test.test_extension", prefix=0x7AAA)]
    cb = CountingCallback()
    dev.prepareModelWithConfig(add_aidl(), aidl.PrepareModelConfig(FAST, MEDIUM, -1, [], [], bytes(32), hints,
                                                                   names), cb)
    status, pm = cb.wait(WAIT_S)
    assert status == S.NONE and pm.getInterfaceVersion() == 4
    bad = [
        ([aidl.TokenValuePair(1, b"a"), aidl.TokenValuePair(1, b"b")], []),  # a token twice
        ([aidl.TokenValuePair(2**31, b"")], []),  # not an int32
        (["hint"], []),
        ([], [aidl.ExtensionNameAndPrefix("NoPeriod", 1)]),  # Android's isValidExtensionName
        ([], [aidl.ExtensionNameAndPrefix("a.b", 1), aidl.ExtensionNameAndPrefix("a.b", 2)]),  # a name twice
        ([], [aidl.ExtensionNameAndPrefix("a.b", 1), aidl.ExtensionNameAndPrefix("a.c", 1)]),  # a prefix twice
        (None, []),
    ]
    for hints, names in bad:
        config = aidl.PrepareModelConfig(FAST, MEDIUM, -1, [], [], bytes(32), hints, names)
        assert refused_prepare(lambda cb, c=config: dev.prepareModelWithConfig(add_aidl(), c, cb)) == \
            (S.INVALID_ARGUMENT, S.INVALID_ARGUMENT), (hints, names)


@pytest.mark.parametrize("name", SAMPLE)
@pytest.mark.parametrize("version", [1, 2, 3])
def test_methods_after_the_version_are_unknown_transactions(version: int, name: str, faces: Any) -> None:
    dev = faces(name, version)
    with pytest.raises(aidl.TransactionError) as e:
        dev.prepareModelWithConfig(add_aidl(), aidl.PrepareModelConfig(), aidl.PreparedModelCallback())
    assert e.value.status == aidl.TransactionError.UNKNOWN_TRANSACTION
    pm = prepare(dev, add_aidl())
    assert pm.getInterfaceVersion() == version
    with add_pools() as pools:
        req, config = pools.aidl_request(), aidl.ExecutionConfig()
        for call in (lambda: pm.createReusableExecution(req, config),
                     lambda: pm.executeSynchronouslyWithConfig(req, config, -1),
                     lambda: pm.executeFencedWithConfig(req, [], config, -1, -1),
                     lambda: pm.configureExecutionBurst().executeSynchronouslyWithConfig(req, [-1, -1], config, -1)):
            with pytest.raises(aidl.TransactionError):
                call()
        assert pm.configureExecutionBurst().executeSynchronously(req, [-1, -1], False, -1, -1).outputSufficientSize


def test_operations_of_later_feature_levels_are_invalid_at_a_version() -> None:
    """BATCH_MATMUL (AIDL version 2) in a model sent at version 1: INVALID_ARGUMENT;
    a model is validated as of the version of the call (a prepared model keeps it)."""
    b = Builder()
    x, y = b.input(T.TENSOR_FLOAT32, [1, 2, 2]), b.input(T.TENSOR_FLOAT32, [1, 2, 2])
    out = b.output(T.TENSOR_FLOAT32, [1, 2, 2])
    b.op(102, [x, y, b.const(T.BOOL, b"\0"), b.const(T.BOOL, b"\0")], [out])
    model = aidl.convert.from_canonical(make_model(b))
    assert model.main.operations[0].type is aidl.OperationType.BATCH_MATMUL
    v1 = aidl.get_device("sample-all", 1)
    assert raised(lambda: v1.getSupportedOperations(model)) == S.INVALID_ARGUMENT
    assert refused_prepare(lambda cb: v1.prepareModel(model, FAST, MEDIUM, -1, [], [], bytes(32), cb)) \
        == (S.INVALID_ARGUMENT, S.INVALID_ARGUMENT)
    for version in VERSIONS:
        assert prepare(aidl.get_device("sample-all", version), add_aidl()).prepared.version == \
            hal.HalVersion.AIDL_V1 + version - 1
    if "BATCH_MATMUL" not in hal.OperationType.__members__:
        pytest.skip("BATCH_MATMUL is not an operation of this checkout yet (the AIDL operations land separately)")
    assert aidl.get_device("sample-all", 2).getSupportedOperations(model) == [True]


# --------------------------------------------------------------------------
# compilation caching


def _cache_fds(tmp_path: Any, tag: str, flags: int = os.O_RDWR) -> tuple[list[int], list[int]]:
    return ([os.open(tmp_path / f"{tag}.model", flags | os.O_CREAT, 0o600)],
            [os.open(tmp_path / f"{tag}.data", flags | os.O_CREAT, 0o600)])


@pytest.mark.parametrize("name", SAMPLE)
def test_compilation_caching(name: str, faces: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cache files (ParcelFileDescriptors) written and read, in process and through a service."""
    monkeypatch.setenv("NNHAL_CACHE_KEY_DIR", str(tmp_path / "key"))
    dev = faces(name)
    token = bytes(range(32))
    model_fds, data_fds = _cache_fds(tmp_path, "a")
    try:
        cb = CountingCallback()
        dev.prepareModel(add_aidl(), FAST, MEDIUM, -1, model_fds, data_fds, token, cb)
        assert cb.wait(WAIT_S)[0] == S.NONE
        assert os.fstat(model_fds[0]).st_size > 0 and os.fstat(data_fds[0]).st_size > 0
        cb = CountingCallback()
        dev.prepareModelFromCache(-1, model_fds, data_fds, token, cb)
        status, pm = cb.wait(WAIT_S)
        assert status == S.NONE and isinstance(pm, aidl.IPreparedModel)
        with add_pools() as pools:
            assert pm.executeSynchronously(pools.aidl_request(), False, -1, -1).outputSufficientSize
        # the wrong number of files, a write-only one (VTS CompilationCachingTests): refused, raised and notified
        wrong = [(model_fds * 2, data_fds), ([], data_fds), (model_fds, ["fd"])]
        for m, d in wrong:
            assert refused_prepare(lambda cb, m=m, d=d: dev.prepareModelFromCache(-1, m, d, token, cb)) == \
                (S.INVALID_ARGUMENT, S.INVALID_ARGUMENT)
        wm, wd = _cache_fds(tmp_path, "a", os.O_WRONLY)
        try:
            assert refused_prepare(lambda cb: dev.prepareModelFromCache(-1, wm, wd, token, cb)) == \
                (S.GENERAL_FAILURE, S.GENERAL_FAILURE)
        finally:
            for fd in wm + wd:
                os.close(fd)
        # bad caching arguments do not fail a preparation: it is not saved
        cb = CountingCallback()
        dev.prepareModel(add_aidl(), FAST, MEDIUM, -1, model_fds * 2, data_fds, token, cb)
        assert cb.wait(WAIT_S)[0] == S.NONE
    finally:
        for fd in model_fds + data_fds:
            os.close(fd)


def test_a_device_without_caching_answers_general_failure() -> None:
    dev = aidl.get_device(NUMPY_DRIVER)
    assert refused_prepare(lambda cb: dev.prepareModelFromCache(-1, [], [], bytes(32), cb)) == \
        (S.GENERAL_FAILURE, S.GENERAL_FAILURE)


# --------------------------------------------------------------------------
# memory domains


def _role(io: int = 0, model: int = 0, probability: float = 1.0) -> aidl.BufferRole:
    return aidl.BufferRole(modelIndex=model, ioIndex=io, probability=probability)


@pytest.mark.parametrize("name", SAMPLE)
def test_allocate_copy_and_execute_with_a_device_buffer(name: str, faces: Any) -> None:
    dev = faces(name)
    pm = prepare(dev, add_aidl())
    parcel = [aidl.IPreparedModelParcel(pm)]
    db = dev.allocate(aidl.BufferDesc([2, 2]), parcel, [_role(0), _role(1)], [_role(0)])
    assert type(db) is aidl.DeviceBuffer and db.token > 0 and isinstance(db.buffer, aidl.IBuffer)
    src, dst = hal_memory.allocate_filled(np.full(4, 5, np.float32).tobytes()), hal_memory.allocate(16)
    small = hal_memory.allocate(8)
    try:
        assert raised(lambda: db.buffer.copyTo(memory(dst))) == S.GENERAL_FAILURE  # uninitialized
        assert db.buffer.copyFrom(memory(src), []) is None
        db.buffer.copyTo(memory(dst))
        assert bytes(hal_memory.map(dst)) == bytes(hal_memory.map(src))
        with add_pools() as pools:
            req = pools.aidl_request()
            req.pools.append(aidl.RequestMemoryPool(token=db.token))
            req.inputs[1] = aidl.RequestArgument(location=aidl.DataLocation(poolIndex=2))
            pm.executeSynchronously(req, False, -1, -1)
            np.testing.assert_array_equal(pools.output(0, np.float32, (2, 2)), [[5, 6], [7, 8]])
            req.outputs[0] = aidl.RequestArgument(location=aidl.DataLocation(poolIndex=2))  # in and out: refused
            assert raised(lambda: pm.executeSynchronously(req, False, -1, -1)) == S.INVALID_ARGUMENT
            req.pools[2] = aidl.RequestMemoryPool(token=-3)
            assert raised(lambda: pm.executeSynchronously(req, False, -1, -1)) == S.INVALID_ARGUMENT
        # errors of copyFrom / copyTo (MemoryDomainCopyTest); a failed copyFrom leaves it uninitialized
        assert raised(lambda: db.buffer.copyFrom(memory(dst), [2, 3])) == S.INVALID_ARGUMENT
        assert raised(lambda: db.buffer.copyTo(memory(dst))) == S.GENERAL_FAILURE
        for junk, sendable in ((None, False), (aidl.Memory(), True), (aidl.Memory(ashmem=aidl.Ashmem(-1, 16)), False),
                               ("m", False), (memory(small), True)):
            db.buffer.copyFrom(memory(src), [2, 2])
            assert raised(lambda j=junk: db.buffer.copyTo(j)) == S.INVALID_ARGUMENT
            assert raised(lambda j=junk: db.buffer.copyFrom(j, [])) == S.INVALID_ARGUMENT
            # NOTE: through a service, what cannot travel (no Memory, no descriptor) is refused before the driver,
            # as binder refuses to parcel it: the copy never started, the buffer keeps its contents
            left = S.GENERAL_FAILURE if sendable or name != SERVICE else None
            assert raised(lambda: db.buffer.copyTo(memory(dst))) == left
    finally:
        free(src, dst, small)


@pytest.mark.parametrize("name", SAMPLE)
def test_allocate_refuses_what_vts_names(name: str, faces: Any) -> None:
    """MemoryDomainAllocateTest: empty roles, a null or foreign prepared model,
    an index out of range, a probability outside (0, 1], a role twice."""
    dev = faces(name)
    pm = prepare(dev, add_aidl())
    other = prepare(aidl.get_device(NUMPY_DRIVER), add_aidl())
    desc, parcel = aidl.BufferDesc(), [aidl.IPreparedModelParcel(pm)]
    cases = [
        (desc, parcel, [], []),
        (desc, [aidl.IPreparedModelParcel(None)], [_role()], []),
        (desc, [aidl.IPreparedModelParcel(other)], [_role()], []),
        (desc, [pm], [_role()], []),  # not in a parcel
        (desc, parcel, [_role(model=1)], []),
        (desc, parcel, [_role(io=2)], []),
        (desc, parcel, [], [_role(io=1)]),
        (desc, parcel, [_role(probability=0.0)], []),
        (desc, parcel, [_role(probability=1.5)], []),
        (desc, parcel, [_role(), _role()], []),
        (aidl.BufferDesc([3, 3]), parcel, [_role()], []),  # dimensions conflict
        (desc, parcel, [hal.BufferRole()], []),
        (None, parcel, [_role()], []),
        (desc, None, [_role()], []),
    ]
    for case in cases:
        assert raised(lambda c=case: dev.allocate(*c)) == S.INVALID_ARGUMENT, case


# --------------------------------------------------------------------------
# descriptors


def test_no_descriptor_leaks(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NNHAL_CACHE_KEY_DIR", str(tmp_path / "key"))
    dev = aidl.get_device()
    before = None
    for k in range(4):
        if k == 1:  # NOTE: after one round: what the process makes once (the fence watcher, the workers) is made
            before = fd_count()
        pm = prepare(dev, add_aidl())
        with add_pools() as pools:
            req = pools.aidl_request()
            pm.executeSynchronously(req, True, -1, -1)
            fenced = pm.executeFenced(req, [], True, -1, -1, -1)
            os.close(fenced.syncFence)
            burst = pm.configureExecutionBurst()
            burst.executeSynchronously(req, [1, 2], False, -1, -1)
            execution = pm.createReusableExecution(req, aidl.ExecutionConfig())
            execution.executeSynchronously(-1)
            db = dev.allocate(aidl.BufferDesc(), [aidl.IPreparedModelParcel(pm)], [_role()], [])
            del burst, execution, db, fenced, pm
        nnhal.get_device("sample-all").pool_cache.clear()
    assert settles_at(before), (fd_count(), before)


# --------------------------------------------------------------------------
# every method of every interface, per version


class _Spy:
    """A face object whose AIDL method calls are recorded (``called``: "IDevice.allocate", ...)."""

    def __init__(self, iface: str, target: Any, called: set):
        self.target, self._iface, self._called = target, iface, called

    def __getattr__(self, name: str) -> Any:
        self._called.add(f"{self._iface}.{name}")
        return getattr(self.target, name)


@pytest.mark.parametrize("name", [*DEVICES, SERVICE])
@pytest.mark.parametrize("version", VERSIONS)
def test_every_method_of_the_version(name: str, version: int, tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
                                     faces: Any) -> None:
    """A happy path through each method the version has, on both devices in
    process and on sample-all through a service (nnhal.aidl.connect: every
    method crosses the process boundary); the spy checks that nothing of the
    version's interfaces was left out."""
    called: set[str] = set()

    def spy(iface: str, target: Any) -> Any:
        return _Spy(iface, target, called)

    dev = spy("IDevice", faces(name, version))
    for query in ("getCapabilities", "getNumberOfCacheFilesNeeded", "getSupportedExtensions", "getType",
                  "getVersionString"):
        getattr(dev, query)()
    assert dev.getSupportedOperations(add_aidl()) == [True]
    if name != NUMPY_DRIVER:
        monkeypatch.setenv("NNHAL_CACHE_KEY_DIR", str(tmp_path / "key"))
        files = _cache_fds(tmp_path, "v")
        try:
            cb = CountingCallback()
            dev.prepareModel(add_aidl(), FAST, MEDIUM, -1, *files, bytes(32), cb)
            assert cb.wait(WAIT_S)[0] == S.NONE
            cb = CountingCallback()
            dev.prepareModelFromCache(-1, *files, bytes(32), cb)
            status, pm = cb.wait(WAIT_S)
            assert status == S.NONE and pm.getInterfaceVersion() == version
        finally:
            for fd in files[0] + files[1]:
                os.close(fd)
    else:  # the example backend has no compilation cache
        assert refused_prepare(lambda cb: dev.prepareModelFromCache(-1, [], [], bytes(32), cb)) == \
            (S.GENERAL_FAILURE, S.GENERAL_FAILURE)
    pm = spy("IPreparedModel", prepare(dev, add_aidl()))
    with add_pools() as pools:
        req = pools.aidl_request()
        assert pm.executeSynchronously(req, True, -1, -1).outputSufficientSize
        fenced = pm.executeFenced(req, [], True, -1, -1, -1)
        os.close(fenced.syncFence)
        assert spy("IFencedExecutionCallback", fenced.callback).getExecutionInfo() in (S.NONE, S.GENERAL_FAILURE)
        burst = spy("IBurst", pm.configureExecutionBurst())
        assert burst.executeSynchronously(req, [0, 1], False, -1, -1).outputSufficientSize
        burst.releaseMemoryResource(0)
        db = dev.allocate(aidl.BufferDesc(), [aidl.IPreparedModelParcel(pm.target)], [_role()], [_role()])
        buffer = spy("IBuffer", db.buffer)
        src = hal_memory.allocate_filled(np.ones(4, np.float32).tobytes())
        try:
            buffer.copyFrom(memory(src), [2, 2])
            buffer.copyTo(memory(src))
        finally:
            hal_memory.free(src)
        if version >= 4:
            config = aidl.ExecutionConfig(measureTiming=True)
            assert pm.executeSynchronouslyWithConfig(req, config, -1).outputSufficientSize
            os.close(pm.executeFencedWithConfig(req, [], config, -1, -1).syncFence)
            assert burst.executeSynchronouslyWithConfig(req, [-1, -1], config, -1).outputSufficientSize
            execution = spy("IExecution", pm.createReusableExecution(req, config))
            assert execution.executeSynchronously(-1).outputSufficientSize
            os.close(execution.executeFenced([], -1, -1).syncFence)
            cb = CountingCallback()
            dev.prepareModelWithConfig(add_aidl(), aidl.PrepareModelConfig(FAST, MEDIUM), cb)
            assert cb.wait(WAIT_S)[0] == S.NONE
    hal_version = hal.HalVersion.AIDL_V1 + version - 1
    expected = {f"{i}.{m}" for i, ms in aidl.METHODS.items() for m, v in ms.items()
                if v <= hal_version and i not in ("IPreparedModelCallback",)}
    assert expected - called == set()
    assert {"IPreparedModelCallback.notify"} == {f"IPreparedModelCallback.{m}" for m in aidl.METHODS[
        "IPreparedModelCallback"]}  # the client's: called by the driver (CountingCallback counts it)


def test_the_readme_example_runs() -> None:
    import re

    from tests.aidl_util import ROOT

    text = (ROOT / "README.md").read_text()
    code = re.search(r"```python\n(.*?)```", text[text.index("\n## The AIDL HAL"):], re.S).group(1)
    with add_pools() as pools:
        scope = {"model": add_aidl(), "request": pools.aidl_request()}
        exec(compile(code, "README.md", "exec"), scope)  # noqa: S102 - the README's own example
        assert scope["status"] == S.NONE and scope["result"].outputSufficientSize
        np.testing.assert_array_equal(pools.output(0, np.float32, (2, 2)), [[10, 11], [12, 13]])
