"""The AIDL face of a service (``nnhal.aidl.connect``), beyond the device and
execution tests that also run through it (test_aidl_device,
test_aidl_execution): both faces of one service at once; an AIDL burst
passes a memory's descriptors once per token; clients cannot reach each
other's objects or memory tokens; connecting and ``open_device``; no
descriptor or thread left behind on either side."""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Optional

import numpy as np
import pytest

import nnhal
from nnhal import aidl, hal
from nnhal import memory as hal_memory
from nnhal.service import slots, transport
from tests.aidl_util import add_aidl, add_pools, fd_count, prepare, raised, settles_at
from tests.driver_util import add_model, execute_sync, prepared_model
from tests.service_util import settled

S = aidl.ErrorStatus
EXPECTED = [[10, 11], [12, 13]]  # add_pools: arange(4) + 10


@pytest.fixture(scope="module")
def dev(service_process: Any) -> Any:
    d = service_process.connect_aidl()
    yield d
    d.close()


def _out(pools: Any) -> np.ndarray:
    return pools.output(0, np.float32, (2, 2))


class SentFds:
    """Counts the descriptors this process sends per frame (the client's side of every call)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.counts: list[int] = []
        send = transport.Channel.send

        def counting(chan: Any, body: bytes, fds: Any = None) -> None:
            self.counts.append(len(fds or []))
            send(chan, body, fds)

        monkeypatch.setattr(transport.Channel, "send", counting)

    def during(self, fn: Any) -> int:
        """The descriptors sent while ``fn()`` runs."""
        start = len(self.counts)
        fn()
        return sum(self.counts[start:])


# --------------------------------------------------------------------------
# one service, two faces


def test_the_wire_table_is_the_interfaces_own() -> None:
    """Every method of every interface, with its parameters, version, out
    parameters and descriptor positions, as the binding declares them."""
    import inspect

    from nnhal.service import aidl_wire

    for iface in aidl.INTERFACES:
        specs = aidl_wire.SPECS[iface.__name__]
        assert set(specs) == {*aidl.METHODS[iface.__name__], *aidl_wire.META}
        for name, spec in specs.items():
            params = [n for n in inspect.signature(getattr(iface, name)).parameters if n != "self"]
            assert [n for n, _ in spec.params] == params
            assert spec.since == aidl.METHODS[iface.__name__].get(name, hal.HalVersion.AIDL_V1)
    info = aidl_wire.SPECS["IFencedExecutionCallback"]["getExecutionInfo"]
    assert info.in_types == () and info.result_types[1:] == (Optional[aidl.Timing],) * 2
    assert aidl_wire.SPECS["IPreparedModelCallback"]["notify"].oneway
    assert aidl_wire.SPECS["IDevice"]["prepareModel"].callback == 7
    assert [n for n, s in aidl_wire.SPECS["IPreparedModel"].items() if s.arg_fds] == [
        "executeSynchronously", "executeFenced", "createReusableExecution", "executeSynchronouslyWithConfig",
        "executeFencedWithConfig"]


def test_both_faces_of_one_service(service_process: Any, dev: Any) -> None:
    hidl = service_process.connect()
    try:
        assert hidl.getVersionString() == (hal.ErrorStatus.NONE, dev.getVersionString())
        apm = prepare(dev, add_aidl())
        hpm = prepared_model(add_model(), hidl)
        with add_pools() as pools:
            assert apm.executeSynchronously(pools.aidl_request(), False, -1, -1).outputSufficientSize
            np.testing.assert_array_equal(_out(pools), EXPECTED)
        with add_pools(b=np.full((2, 2), 20, np.float32)) as pools:
            assert execute_sync(hpm, pools.request())[0] == hal.ErrorStatus.NONE
            np.testing.assert_array_equal(_out(pools), np.add(EXPECTED, 10))
    finally:
        hidl.close()


def test_connect_and_open_device(service_process: Any) -> None:
    for version in (0, 5, "4", True):
        with pytest.raises(ValueError):
            aidl.connect(service_process.name, version)
    with pytest.raises(LookupError, match="no service named"):
        aidl.connect("no-such")
    with pytest.raises(LookupError):
        aidl.open_device("no-such")
    remote = aidl.open_device(service_process.name, 3)
    try:
        assert remote.getInterfaceVersion() == 3 and not isinstance(remote, nnhal.driver.aidl.AidlDevice)
    finally:
        remote.close()
    assert isinstance(aidl.open_device("sample-all", 2), nnhal.driver.aidl.AidlDevice)


def test_a_refused_call_says_why(dev: Any) -> None:
    pm = prepare(dev, add_aidl())
    with pytest.raises(aidl.ServiceSpecificError) as e:
        pm.executeSynchronously(aidl.Request(), False, -1, -1)
    assert e.value.status is S.INVALID_ARGUMENT and e.value.message  # the face's reason, carried across
    with pytest.raises(aidl.ServiceSpecificError) as e:
        pm.executeSynchronously(aidl.Request(), False, -1)  # one argument short: refused here, never sent
    assert e.value.status is S.INVALID_ARGUMENT


# --------------------------------------------------------------------------
# AIDL bursts: memories by token


def test_a_burst_passes_memories_once_per_token(dev: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    sent = SentFds(monkeypatch)
    pm = prepare(dev, add_aidl())
    burst = pm.configureExecutionBurst()
    with add_pools() as pools:
        req = pools.aidl_request()

        def run(tokens: list[int]) -> None:
            assert burst.executeSynchronously(req, tokens, False, -1, -1).outputSufficientSize

        assert sent.during(lambda: run([1, 2])) == 2
        for _ in range(3):
            assert sent.during(lambda: run([1, 2])) == 0  # the service holds both memories
        np.testing.assert_array_equal(_out(pools), EXPECTED)
        # the kept memory is the client's own shared memory: new inputs in it are read
        view = hal_memory.map(pools.in_mem)
        view[:16] = np.full(4, 100, np.float32).tobytes()
        view.release()
        assert sent.during(lambda: run([1, 2])) == 0
        np.testing.assert_array_equal(_out(pools), np.full((2, 2), 110))
        assert sent.during(lambda: run([-1, 2])) == 1  # no identity: sent every time
        assert sent.during(lambda: run([-1, 2])) == 1
        burst.releaseMemoryResource(1)
        assert sent.during(lambda: run([1, 2])) == 1  # released: sent again, once
        assert sent.during(lambda: run([1, 2])) == 0
        # a token the client believes the service holds and it does not: told, everything is sent again
        burst.tokens.confirm([7])
        assert sent.during(lambda: run([7, 2])) == 2
        assert sent.during(lambda: run([7, 2])) == 0
        assert burst.executeSynchronouslyWithConfig(req, [7, 2], aidl.ExecutionConfig(), -1).outputSufficientSize


def test_the_burst_token_tables_are_bounded(dev: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(slots, "CLIENT_TOKENS", 2)
    sent = SentFds(monkeypatch)
    burst = prepare(dev, add_aidl()).configureExecutionBurst()
    sets = [add_pools() for _ in range(3)]
    try:
        for k, pools in enumerate(sets):
            assert sent.during(lambda p=pools, k=k: burst.executeSynchronously(
                p.aidl_request(), [2 * k, 2 * k + 1], False, -1, -1)) == 2
            assert len(burst.tokens) == 2  # the least recently used are forgotten (and the service told)
        assert sent.during(lambda: burst.executeSynchronously(sets[0].aidl_request(), [0, 1], False, -1, -1)) == 2
        assert sent.during(lambda: burst.executeSynchronously(sets[0].aidl_request(), [0, 1], False, -1, -1)) == 0
    finally:
        for pools in sets:
            pools.close()


def test_a_burst_runs_one_execution_at_a_time(dev: Any) -> None:
    """A second execution on a burst while one runs: GENERAL_FAILURE, as in process."""
    from tests.test_service_death import slow_model, slow_pools

    pm = prepare(dev, aidl.convert.from_canonical(slow_model(200)))
    burst = pm.configureExecutionBurst()
    results: list = []
    with slow_pools() as p1, slow_pools() as p2:
        def run(pools: Any, token: int) -> None:
            results.append(raised(lambda: burst.executeSynchronously(aidl.convert.from_canonical(pools.request()),
                                                                     [token, token + 1], False, -1, -1)))

        threads = [threading.Thread(target=run, args=(p, 2 * k)) for k, p in enumerate((p1, p2, p1, p2))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    assert None in results and set(results) <= {None, S.GENERAL_FAILURE}, results


# --------------------------------------------------------------------------
# isolation


def test_clients_cannot_reach_each_others_objects(service_process: Any, dev: Any) -> None:
    other = service_process.connect_aidl()
    try:
        pm = prepare(dev, add_aidl())
        role = aidl.BufferRole(0, 0, 1.0)
        db = dev.allocate(aidl.BufferDesc([2, 2]), [aidl.IPreparedModelParcel(pm)], [role, aidl.BufferRole(0, 1, 1.0)],
                          [])
        src = hal_memory.allocate_filled(np.full(4, 5, np.float32).tobytes())
        try:
            db.buffer.copyFrom(aidl.convert.from_canonical(src), [])
        finally:
            hal_memory.free(src)
        other_pm = prepare(other, add_aidl())
        with add_pools() as pools:
            req = pools.aidl_request()
            req.pools.append(aidl.RequestMemoryPool(token=db.token))
            req.inputs[1] = aidl.RequestArgument(location=aidl.DataLocation(poolIndex=2))
            assert pm.executeSynchronously(req, False, -1, -1).outputSufficientSize
            np.testing.assert_array_equal(_out(pools), [[5, 6], [7, 8]])
            # the other client's request naming this client's memory token: refused before the driver sees it
            assert raised(lambda: other_pm.executeSynchronously(req, False, -1, -1)) == S.INVALID_ARGUMENT
            assert raised(lambda: other_pm.configureExecutionBurst().executeSynchronously(
                req, [-1, -1, -1], False, -1, -1)) == S.INVALID_ARGUMENT
        # another connection's prepared model is a null one here
        assert raised(lambda: other.allocate(aidl.BufferDesc(), [aidl.IPreparedModelParcel(pm)], [role], [])) \
            == S.INVALID_ARGUMENT
        # the token dies with its buffer
        token = db.token
        del db
        with add_pools() as pools:
            req = pools.aidl_request()
            req.pools.append(aidl.RequestMemoryPool(token=token))
            assert raised(lambda: pm.executeSynchronously(req, False, -1, -1)) == S.INVALID_ARGUMENT
    finally:
        other.close()


# --------------------------------------------------------------------------
# leaks


def _every_executor(dev: Any, pm: Any) -> None:
    with add_pools() as pools:
        req = pools.aidl_request()
        pm.executeSynchronously(req, True, -1, -1)
        fenced = pm.executeFenced(req, [], True, -1, -1, -1)
        os.close(fenced.syncFence)
        fenced.callback.getExecutionInfo(aidl.Timing(), aidl.Timing())
        burst = pm.configureExecutionBurst()
        burst.executeSynchronously(req, [1, 2], False, -1, -1)
        burst.executeSynchronously(req, [1, 2], False, -1, -1)
        execution = pm.createReusableExecution(req, aidl.ExecutionConfig())
        execution.executeSynchronously(-1)
        os.close(execution.executeFenced([], -1, -1).syncFence)
        db = dev.allocate(aidl.BufferDesc(), [aidl.IPreparedModelParcel(pm)], [aidl.BufferRole(0, 0, 1.0)], [])
        del db, burst, execution, fenced


def test_no_descriptor_or_thread_leaks(service_process: Any) -> None:
    """Every executor, many times, on a connection of its own: nothing left in
    this process; and nothing left in the service once the connection closes."""
    sp = service_process
    warm = sp.connect_aidl()
    _every_executor(warm, prepare(warm, add_aidl()))  # NOTE: what the service makes once (workers, pools)
    warm.close()
    base = settled(sp.pid, {"fds": 0, "threads": 0}, timeout=1.0)
    here = fd_count()
    threads = threading.active_count()
    dev = sp.connect_aidl()
    pm = prepare(dev, add_aidl())
    for _ in range(3):
        _every_executor(dev, pm)
    del pm
    dev.close()
    assert settles_at(here), (fd_count(), here)
    end = time.monotonic() + 5
    while threading.active_count() > threads and time.monotonic() < end:
        time.sleep(0.02)
    assert threading.active_count() <= threads
    after = settled(sp.pid, base)
    assert after["fds"] <= base["fds"] and after["threads"] <= base["threads"], (base, after)

