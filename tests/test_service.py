"""The driver as a service (nnhal serve / nnhal.connect): every IDevice and
IPreparedModel method through the proxies, callbacks across processes
exactly once, isolation between clients, discovery and the registry
directory, the peer credential check, and the CLI."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import nnhal
from nnhal import fence, hal
from nnhal import memory as hal_memory
from nnhal.service import registry, server
from nnhal.service.client import RemotePreparedModel, ServiceUnavailable
from tests.driver_util import (
    WAIT_S,
    CountingExecutionCallback,
    CountingPreparedCallback,
    Pools,
    add_model,
    add_model_v1_0,
    execute_async,
    execute_sync,
    prepare,
    prepared_model,
)

S = hal.ErrorStatus
M = hal.MeasureTiming
X = np.array([[1, 2], [3, 4]], np.float32)
Y = np.array([[10, 20], [30, 40]], np.float32)


def add_pools() -> Pools:
    return Pools([X, Y], [16])


def check_sum(pools: Pools) -> None:
    np.testing.assert_array_equal(pools.output(0, np.float32, (2, 2)), X + Y)


@pytest.fixture(scope="module")
def remote_pm(service: Any) -> Any:
    return prepared_model(add_model(), service)


# --------------------------------------------------------------------------
# IDevice


def test_device_getters_as_in_process(service: Any, device: Any) -> None:
    for name in ("getVersionString", "getType", "getSupportedExtensions", "getNumberOfCacheFilesNeeded"):
        assert getattr(service, name)() == getattr(device, name)(), name
    assert service.getStatus() == device.getStatus()
    assert isinstance(service.getStatus(), hal.DeviceStatus)
    for name, cls in (("getCapabilities", hal.v1_0.Capabilities), ("getCapabilities_1_1", hal.v1_1.Capabilities),
                      ("getCapabilities_1_2", hal.v1_2.Capabilities), ("getCapabilities_1_3", hal.Capabilities)):
        status, caps = getattr(service, name)()
        assert status == S.NONE and isinstance(caps, cls), name
    # NOTE: performance figures are measured in each process; the operand types listed are the same
    remote = [p.type for p in service.getCapabilities_1_3()[1].operandPerformance]
    local = [p.type for p in device.getCapabilities_1_3()[1].operandPerformance]
    assert remote == local


def test_supported_operations_every_version(service: Any, device: Any) -> None:
    m13 = add_model()
    m10 = add_model_v1_0()
    assert service.getSupportedOperations_1_3(m13) == device.getSupportedOperations_1_3(m13) == (S.NONE, [True])
    for name, model in (("getSupportedOperations", m10), ("getSupportedOperations_1_1", hal.convert.convert_to_v1_1(m10)),
                        ("getSupportedOperations_1_2", hal.convert.convert_to_v1_2(m10))):
        assert getattr(service, name)(model) == getattr(device, name)(model), name


def test_invalid_models_answered_as_in_process(service: Any, device: Any) -> None:
    bad_index = add_model()
    bad_index.main.inputIndexes = [0, 99]
    bad_enum = add_model()
    bad_enum.main.operands[0].type = 77  # not an OperandType: rejected by the wire schema
    bad_type = add_model()
    bad_type.main.operands[0].dimensions = "two"  # a str where the HAL has vec<uint32_t>
    for model in (bad_index, bad_enum, bad_type):
        assert service.getSupportedOperations_1_3(model) == device.getSupportedOperations_1_3(model)
        launch, status, prepared = prepare(model, service)
        assert (launch, status, prepared) == (S.INVALID_ARGUMENT, S.INVALID_ARGUMENT, None)


def test_operand_values_forms_accepted_as_in_process(service: Any) -> None:
    model = add_model()
    model.operandValues = list(model.operandValues)  # the driver accepts a list of ints for vec<uint8_t>
    model.relaxComputationFloat32toFloat16 = 0
    pm = prepared_model(model, service)
    with add_pools() as pools:
        assert execute_sync(pm, pools.request())[0] == S.NONE
        check_sum(pools)


def test_prepare_every_version(service: Any) -> None:
    m10 = add_model_v1_0()
    for name, args, notify in (("prepareModel", (m10,), "notify"),
                               ("prepareModel_1_1", (hal.convert.convert_to_v1_1(m10), 1), "notify"),
                               ("prepareModel_1_2", (hal.convert.convert_to_v1_2(m10), 1, [], [], bytes(32)),
                                "notify_1_2")):
        cb = CountingPreparedCallback()
        assert getattr(service, name)(*args, cb) == S.NONE
        status, pm = cb.wait(WAIT_S)
        assert status == S.NONE and isinstance(pm, RemotePreparedModel), name
        assert [c[0] for c in cb.calls] == [notify]
        with add_pools() as pools:
            assert pm.executeSynchronously(pools.request_v1_0(), M.NO)[0] == S.NONE
            check_sum(pools)


def test_cache_methods_as_in_process(service: Any, device: Any) -> None:
    assert service.isCachingSupported() == device.isCachingSupported()
    for dev in (service, device):
        cb = CountingPreparedCallback()
        launch = dev.prepareModelFromCache_1_3(hal.OptionalTimePoint(), [], [], bytes(32), cb)
        status, pm = cb.wait(WAIT_S)
        assert launch == status != S.NONE and pm is None and [c[0] for c in cb.calls] == ["notify_1_3"]
        cb = CountingPreparedCallback()
        launch = dev.prepareModelFromCache([], [], bytes(32), cb)
        assert launch == cb.wait(WAIT_S)[0] != S.NONE and [c[0] for c in cb.calls] == ["notify_1_2"]


def test_prepare_without_callback_is_invalid(service: Any, device: Any) -> None:
    args = (add_model(), 1, 1, hal.OptionalTimePoint(), [], [], bytes(32))
    assert service.prepareModel_1_3(*args, None) == device.prepareModel_1_3(*args, None) == S.INVALID_ARGUMENT
    assert service.prepareModel_1_3(*args, object()) == S.INVALID_ARGUMENT  # no notify_1_3 to call


def test_prepare_keywords(service: Any) -> None:
    cb = hal.PreparedModelCallback()
    launch = service.prepareModel_1_3(model=add_model(), preference=1, priority=1, deadline=None, modelCache=[],
                                      dataCache=[], token=bytes(32), callback=cb)
    assert launch == S.NONE and cb.wait(WAIT_S)[0] == S.NONE


# --------------------------------------------------------------------------
# IPreparedModel


def test_execute_every_path(remote_pm: Any) -> None:
    with add_pools() as pools:
        for measure in (M.NO, M.YES):
            assert execute_sync(remote_pm, pools.request(), measure)[0] == S.NONE
            check_sum(pools)
            assert execute_async(remote_pm, pools.request(), measure)[:2] == (S.NONE, S.NONE)
            check_sum(pools)
        cb = CountingExecutionCallback()
        assert remote_pm.execute(pools.request_v1_0(), cb) == S.NONE
        assert cb.wait(WAIT_S)[0] == S.NONE and [c[0] for c in cb.calls] == ["notify"]
        cb = CountingExecutionCallback()
        assert remote_pm.execute_1_2(pools.request_v1_0(), M.YES, cb) == S.NONE
        assert cb.wait(WAIT_S)[0] == S.NONE and [c[0] for c in cb.calls] == ["notify_1_2"]
        status, shapes, _ = remote_pm.executeSynchronously(pools.request_v1_0(), M.NO)
        assert status == S.NONE and shapes == [hal.OutputShape([2, 2], True)]
        check_sum(pools)


def test_execute_fenced_through_the_service(remote_pm: Any) -> None:
    with add_pools() as pools:
        before = fence.create()
        fence.signal(before)
        status, sync, info = remote_pm.executeFenced(pools.request(), [before], M.YES, None, None, None)
        fence.close(before)
        assert status == S.NONE and info is not None
        if sync is not None and sync.fds:
            assert fence.wait(sync, WAIT_S)
            fence.close(sync)
        status, launched, fenced = info.getExecutionInfo()
        assert status == S.NONE and isinstance(launched, hal.Timing) and isinstance(fenced, hal.Timing)
        check_sum(pools)


def test_execute_invalid_request_answered_once(remote_pm: Any) -> None:
    with add_pools() as pools:
        req = pools.request()
        req.inputs[0].location.poolIndex = 7
        assert execute_sync(remote_pm, req)[0] == S.INVALID_ARGUMENT
        launch, status, _, _ = execute_async(remote_pm, req)  # asserts exactly one notify_1_3
        assert launch == status == S.INVALID_ARGUMENT
        req.pools[0].hidlMemory.handle.fds = [987654]  # not an open descriptor here
        assert execute_sync(remote_pm, req)[0] == S.INVALID_ARGUMENT
        assert execute_async(remote_pm, req)[:2] == (S.INVALID_ARGUMENT, S.INVALID_ARGUMENT)


def test_memory_tokens_are_per_client(remote_pm: Any) -> None:
    with add_pools() as pools:
        req = pools.request()
        req.pools[0] = hal.MemoryPool(token=1)  # never given to this client (nor to anyone, maybe)
        assert execute_sync(remote_pm, req)[0] == S.INVALID_ARGUMENT
        assert execute_async(remote_pm, req)[:2] == (S.INVALID_ARGUMENT, S.INVALID_ARGUMENT)


def test_objects_of_another_client_are_null(service: Any, service_process: Any, remote_pm: Any) -> None:
    other = service_process.connect()
    try:
        foreign = prepared_model(add_model(), other)
        desc = hal.BufferDesc(dimensions=[2, 2])
        roles = [hal.BufferRole(modelIndex=0, ioIndex=0, frequency=1.0)]
        # a prepared model of another connection reaches the driver as null, as in process a null one
        assert service.allocate(desc, [foreign], roles, [])[0] == service.allocate(desc, [None], roles, [])[0]
        status, buf, token = service.allocate(desc, [foreign], roles, [])
        assert status != S.NONE and buf is None and token == 0
        # a local (in-process) prepared model is no object of the service either
        local = prepared_model(add_model())
        assert service.allocate(desc, [local], roles, [])[0] != S.NONE
        # the foreign model still works on its own connection
        with add_pools() as pools:
            assert execute_sync(foreign, pools.request())[0] == S.NONE
    finally:
        other.close()


def test_allocate_copy_and_execute_with_a_token(service: Any, remote_pm: Any) -> None:
    desc = hal.BufferDesc(dimensions=[2, 2])
    status, buf, token = service.allocate(desc, [remote_pm], [hal.BufferRole(0, 0, 1.0)], [])
    if status == S.GENERAL_FAILURE and buf is None:
        pytest.skip("the driver does not support memory domains (IDevice.allocate)")
    assert status == S.NONE and buf is not None and token > 0
    src = hal_memory.allocate(16)
    v = hal_memory.map(src)
    v[:] = X.tobytes()
    v.release()
    assert buf.copyFrom(src, [2, 2]) == S.NONE
    with add_pools() as pools:
        req = pools.request()
        req.pools.append(hal.MemoryPool(token=token))
        req.inputs[0].location = hal.DataLocation(poolIndex=2, offset=0, length=0)
        assert execute_sync(remote_pm, req)[0] == S.NONE
        check_sum(pools)
    dst = hal_memory.allocate(16)
    assert buf.copyTo(dst) == S.NONE
    np.testing.assert_array_equal(np.frombuffer(bytes(hal_memory.map(dst)), np.float32).reshape(2, 2), X)
    # closed as in process: the token is invalid, the copies fail
    buf.close()
    buf.close()  # idempotent
    assert buf.copyTo(dst) == S.GENERAL_FAILURE and buf.copyFrom(src, [2, 2]) == S.GENERAL_FAILURE
    with add_pools() as pools:
        req = pools.request()
        req.pools.append(hal.MemoryPool(token=token))
        req.inputs[0].location = hal.DataLocation(poolIndex=2, offset=0, length=0)
        assert execute_sync(remote_pm, req)[0] == S.INVALID_ARGUMENT
    hal_memory.free(src)
    hal_memory.free(dst)


def test_burst_through_the_service(remote_pm: Any) -> None:
    burst_mod = pytest.importorskip("nnhal.burst")
    with burst_mod.BurstController(remote_pm) as burst:
        for k in range(5):
            with Pools([X * k, Y], [16]) as pools:
                status, shapes, _ = burst.execute(pools.request(), M.NO)
                assert status == S.NONE and shapes == [hal.OutputShape([2, 2], True)]
                np.testing.assert_array_equal(pools.output(0, np.float32, (2, 2)), X * k + Y)
                burst.freeMemory(pools.in_mem)  # IBurstContext.freeMemory through the service


class _Reentrant(hal.IExecutionCallback):
    """A user callback that calls the service again from inside notify."""

    def __init__(self, pm: Any, pools: Pools):
        self.pm, self.pools, self.inner = pm, pools, None
        self.done = threading.Event()
        self.count = 0

    def notify_1_3(self, status: Any, outputShapes: list, timing: Any) -> None:
        self.count += 1
        self.inner = self.pm.executeSynchronously_1_3(self.pools.request(), M.NO, None, None)[0]
        self.done.set()


def test_callback_may_call_the_service(remote_pm: Any) -> None:
    with add_pools() as pools:
        cb = _Reentrant(remote_pm, pools)
        assert remote_pm.execute_1_3(pools.request(), M.NO, None, None, cb) == S.NONE
        assert cb.done.wait(WAIT_S) and cb.inner == S.NONE and cb.count == 1


def test_many_threads_one_connection(remote_pm: Any) -> None:
    errors: list = []

    def work(k: int) -> None:
        try:
            for j in range(20):
                with Pools([X * k, Y * j], [16]) as pools:
                    if j % 2:
                        st = execute_async(remote_pm, pools.request())[1]
                    else:
                        st = execute_sync(remote_pm, pools.request())[0]
                    assert st == S.NONE
                    np.testing.assert_array_equal(pools.output(0, np.float32, (2, 2)), X * k + Y * j)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[0]


def test_dropped_prepared_models_are_released(service: Any, service_process: Any) -> None:
    from tests.service_util import proc_counts

    def cycle() -> None:
        pm = prepared_model(add_model(), service)
        with add_pools() as pools:
            assert execute_sync(pm, pools.request())[0] == S.NONE

    for _ in range(5):
        cycle()
    service.getStatus()  # carries the releases
    base = proc_counts(service_process.pid)["fds"]
    for _ in range(30):
        cycle()
    service.getStatus()
    assert proc_counts(service_process.pid)["fds"] <= base + 2


# --------------------------------------------------------------------------
# discovery, registry, credentials, CLI


def test_connect_unknown_names_the_registry() -> None:
    with pytest.raises(ServiceUnavailable) as e:
        nnhal.connect("nobody-here")
    assert str(registry.runtime_dir(create=False)) in str(e.value)
    assert isinstance(e.value, LookupError)


@pytest.mark.parametrize("name", ["sampleall", "-abc", "abc-", "a-b-c", "a b-c", "../x-y", "", "a/b-c"])
def test_instance_names_validated(name: str) -> None:
    with pytest.raises(ValueError):
        registry.validate_name(name)


def test_serve_refuses_a_bad_name(service_runtime_dir: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "nnhal", "serve", "--name", "nodash"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode != 0 and "exactly one '-'" in r.stderr


def test_list_devices_shows_services(service_process: Any) -> None:
    names = nnhal.list_devices()
    assert names[0] == "sample-all" and service_process.name in names
    assert service_process.name in nnhal.list_services()
    r = subprocess.run([sys.executable, "-m", "nnhal", "devices"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "sample-all (in process)" in r.stdout and f"{service_process.name} (service)" in r.stdout


def test_stale_socket_removed(service_runtime_dir: Path) -> None:
    path = service_runtime_dir / "stale-one.sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.close()  # bound, nobody listens: stale
    assert "stale-one" not in nnhal.list_services()
    assert not path.exists()


def test_second_service_with_the_same_name_refused(service_factory: Any) -> None:
    sp = service_factory()
    r = subprocess.run([sys.executable, "-m", "nnhal", "serve", "--name", sp.name], capture_output=True, text=True,
                       timeout=60, env=sp.env)
    assert r.returncode != 0 and "already runs" in r.stderr
    assert sp.connect().getStatus() == hal.DeviceStatus.AVAILABLE


def test_registry_directory_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    open_dir = tmp_path / "open"
    open_dir.mkdir(mode=0o755)
    os.chmod(open_dir, 0o755)
    monkeypatch.setenv("NNHAL_RUNTIME_DIR", str(open_dir))
    with pytest.raises(registry.RegistryError, match="0700"):
        registry.runtime_dir()
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    monkeypatch.setenv("NNHAL_RUNTIME_DIR", str(link))
    with pytest.raises(registry.RegistryError, match="symlink"):
        registry.runtime_dir()
    fresh = tmp_path / "fresh"
    monkeypatch.setenv("NNHAL_RUNTIME_DIR", str(fresh))
    assert registry.runtime_dir() == fresh and (os.stat(fresh).st_mode & 0o777) == 0o700
    monkeypatch.delenv("NNHAL_RUNTIME_DIR")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert registry.runtime_dir(create=False) == tmp_path / "nnhal"
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert registry.runtime_dir(create=False) == Path(f"/tmp/nnhal-{os.getuid()}")


def test_peer_credentials_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    uid = os.getuid()
    assert server.peer_allowed((123, uid, 0))
    assert not server.peer_allowed((123, uid + 1, 0))
    assert not server.peer_allowed((123, 0, 0), uid=1000)
    a, b = socket.socketpair()
    assert server.peer_credentials(a)[1] == uid and server.peer_credentials(a)[0] == os.getpid()
    # a connection from another uid (simulated) is closed before anything is read
    svc = server.Service.__new__(server.Service)
    svc._lock = threading.Lock()
    svc.connections = set()
    monkeypatch.setattr(server, "peer_credentials", lambda s: (4242, uid + 1, 0))
    svc._admit(a)
    b.settimeout(5)
    assert b.recv(10) == b""  # refused: closed
    b.close()


def test_bench_ipc_prints_every_mode() -> None:
    r = subprocess.run([sys.executable, "-m", "nnhal", "bench", "--ipc", "--runs", "60", "--rounds", "2",
                        "--warmup", "5"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    for mode in ("bare socket round trip", "in process (sync)", "service sync", "service async", "service burst",
                 "service fenced", "target: service sync <= 3 x bare + in process"):
        assert mode in r.stdout, r.stdout


def test_more_threads_than_call_channels(remote_pm: Any) -> None:
    """Beyond the service's call channels per client, calls go through the
    main connection (its pool of workers): all answered, all correct."""
    n = server.MAX_CALL_CHANNELS + 6
    barrier = threading.Barrier(n)
    results: list = []

    def work(k: int) -> None:
        with Pools([X * k, Y], [16]) as pools:
            barrier.wait(60)  # every thread holds its channel at once
            st = execute_sync(remote_pm, pools.request())[0]
            ok = np.array_equal(pools.output(0, np.float32, (2, 2)), X * k + Y)
            barrier.wait(60)
            results.append((st, ok))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(results) == n and all(st == S.NONE and ok for st, ok in results)
