"""Death and recovery: the service killed (SIGKILL) in the middle of
preparations and executions answers every client callback within 5 s
(DEVICE_UNAVAILABLE or the real result, exactly once), later calls return
DEVICE_UNAVAILABLE at once, and a restarted service is reachable again;
SIGTERM answers what is pending and removes the socket; clients that die
leave nothing behind in the service (descriptors, threads, memory)."""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import numpy as np
import pytest

from nnhal import hal
from tests.driver_util import (
    OT,
    Builder,
    CountingExecutionCallback,
    CountingPreparedCallback,
    Pools,
    T,
    add_model,
    execute_sync,
    make_model,
    prepared_model,
    vector_model,
    vector_pools,
)
from tests.service_util import client_deaths, proc_counts, settled

S = hal.ErrorStatus
M = hal.MeasureTiming
ANSWER_S = 5.0
N = 96 * 96


def slow_model(steps: int = 120) -> hal.Model:
    """A chain of ``steps`` ADDs on a float32 vector (milliseconds per execution)."""
    b = Builder()
    a = b.input(T.TENSOR_FLOAT32, [N])
    act = b.i32(0)
    cur = a
    for k in range(steps):
        nxt = b.output(T.TENSOR_FLOAT32, [N]) if k == steps - 1 else b.operand(T.TENSOR_FLOAT32, [N])
        b.op(OT.ADD, [cur, a, act], [nxt])
        cur = nxt
    return make_model(b)


def slow_pools() -> Pools:
    return Pools([np.ones(N, np.float32)], [N * 4])


def wait_all(cbs: list, t_kill: float) -> float:
    """Waits for every callback; the latest answer, in seconds after the kill."""
    latest = 0.0
    for cb in cbs:
        cb.wait(ANSWER_S + 5)
        latest = max(latest, time.monotonic() - t_kill)
    return latest


def test_sigkill_mid_work_answers_everyone(service_factory: Any) -> None:
    sp = service_factory()
    dev = sp.connect()
    # NOTE: enough queued work (64 executions of 300 ADDs) that the kill, sent once the first answer is in,
    # lands while most of it is pending even when this process is starved for a while (tests run 2 at once)
    pm = prepared_model(slow_model(300), dev)
    pools = [slow_pools() for _ in range(64)]
    prep_cbs, exec_cbs, sync_results = [], [], []
    try:
        for _ in range(8):
            cb = CountingPreparedCallback()
            assert dev.prepareModel_1_3(slow_model(200), 1, 1, None, [], [], bytes(32), cb) == S.NONE
            prep_cbs.append(cb)
        for p in pools:
            cb = CountingExecutionCallback()
            assert pm.execute_1_3(p.request(), M.NO, None, None, cb) == S.NONE
            exec_cbs.append(cb)

        def sync_loop(p: Pools) -> None:
            while True:
                st = pm.executeSynchronously_1_3(p.request(), M.NO, None, None)[0]
                sync_results.append((time.monotonic(), st))
                if st != S.NONE:
                    return

        threads = [threading.Thread(target=sync_loop, args=(pools[k],), daemon=True) for k in range(3)]
        for t in threads:
            t.start()
        # NOTE: killed once the first execution has answered, while the rest still run or wait
        # (a fixed sleep let a fast machine finish everything first)
        end = time.monotonic() + 30
        while not any(cb.calls for cb in exec_cbs) and time.monotonic() < end:
            time.sleep(0.001)
        # NOTE: one execution that is certainly pending at the kill, however starved this process is: an infinite
        # WHILE loop under the longest loop timeout (15 s)
        loop_vm = vector_model("V1_3/while_infinite_loop", "while_infinite_loop")
        loop_pm = prepared_model(loop_vm.build_model(), dev)
        loop_pools = vector_pools(loop_vm)
        loop_cb = CountingExecutionCallback()
        longest = hal.OptionalTimeoutDuration(nanoseconds=int(hal.LoopTimeoutDurationNs.MAXIMUM))
        assert loop_pm.execute_1_3(loop_pools.request(), M.NO, None, longest, loop_cb) == S.NONE
        exec_cbs.append(loop_cb)
        pools.append(loop_pools)
        t_kill = time.monotonic()
        sp.kill()
        latest = wait_all(prep_cbs + exec_cbs, t_kill)
        for t in threads:
            t.join(ANSWER_S)
            assert not t.is_alive(), "a synchronous call still blocks after the service died"
        assert latest < ANSWER_S, f"callbacks answered {latest:.2f} s after the kill"
        for cb in prep_cbs:
            assert len(cb.calls) == 1, cb.calls  # exactly once
            assert cb.calls[0][1] in (S.NONE, S.DEVICE_UNAVAILABLE)
        for cb in exec_cbs:
            assert len(cb.calls) == 1, cb.calls
            assert cb.calls[0][1] in (S.NONE, S.DEVICE_UNAVAILABLE)
        statuses = [cb.calls[0][1] for cb in prep_cbs + exec_cbs]
        assert loop_cb.calls[0][1] == S.DEVICE_UNAVAILABLE  # work was pending when it died
        assert sync_results[-1][1] == S.DEVICE_UNAVAILABLE
        print(f"\n{statuses.count(S.DEVICE_UNAVAILABLE)} of {len(statuses)} callbacks answered DEVICE_UNAVAILABLE, "
              f"the last {latest * 1000:.0f} ms after SIGKILL")

        # afterwards: every call returns at once
        t0 = time.monotonic()
        with slow_pools() as p:
            assert pm.executeSynchronously_1_3(p.request(), M.NO, None, None)[0] == S.DEVICE_UNAVAILABLE
            cb = CountingExecutionCallback()
            assert pm.execute_1_3(p.request(), M.NO, None, None, cb) == S.DEVICE_UNAVAILABLE
            assert cb.wait(1)[0] == S.DEVICE_UNAVAILABLE and len(cb.calls) == 1
            assert pm.executeFenced(p.request(), [], M.NO, None, None, None)[0] == S.DEVICE_UNAVAILABLE
        cb = CountingPreparedCallback()
        assert dev.prepareModel_1_3(add_model(), 1, 1, None, [], [], bytes(32), cb) == S.DEVICE_UNAVAILABLE
        assert cb.wait(1) == (S.DEVICE_UNAVAILABLE, None)
        assert dev.getVersionString()[0] == S.DEVICE_UNAVAILABLE
        assert dev.getStatus() == hal.DeviceStatus.UNKNOWN
        assert time.monotonic() - t0 < 2.0

        # recovery: the same name again
        sp2 = service_factory(name=sp.name)
        dev2 = sp2.connect()
        pm2 = prepared_model(add_model(), dev2)
        with Pools([np.ones((2, 2), np.float32), np.ones((2, 2), np.float32)], [16]) as p:
            assert execute_sync(pm2, p.request())[0] == S.NONE
            np.testing.assert_array_equal(p.output(0, np.float32, (2, 2)), np.full((2, 2), 2, np.float32))
        dev2.close()
    finally:
        for p in pools:
            p.close()


def test_sigterm_answers_pending_and_removes_the_socket(service_factory: Any) -> None:
    sp = service_factory()
    dev = sp.connect()
    pm = prepared_model(slow_model(), dev)
    pools = [slow_pools() for _ in range(16)]
    cbs = []
    try:
        for p in pools:
            cb = CountingExecutionCallback()
            assert pm.execute_1_3(p.request(), M.NO, None, None, cb) == S.NONE
            cbs.append(cb)
        t0 = time.monotonic()
        assert sp.terminate(timeout=15) == 0
        wait_all(cbs, t0)
        for cb in cbs:
            assert len(cb.calls) == 1 and cb.calls[0][1] in (S.NONE, S.DEVICE_UNAVAILABLE), cb.calls
        assert not sp.socket_path.exists()
        assert pm.executeSynchronously_1_3(pools[0].request(), M.NO, None, None)[0] == S.DEVICE_UNAVAILABLE
    finally:
        for p in pools:
            p.close()


def _client_then_die(path_env: str, name: str, k: int) -> None:
    """In a forked child: connect, hold prepared models, a buffer, a burst and
    running executions, then die without any cleanup."""
    os.environ["NNHAL_RUNTIME_DIR"] = path_env
    import nnhal

    dev = nnhal.connect(name)
    pm = prepared_model(add_model(), dev)
    pm2 = prepared_model(slow_model(20), dev)
    held: list = [pm, pm2]
    status, buf, _ = dev.allocate(hal.BufferDesc(dimensions=[2, 2]), [pm], [hal.BufferRole(0, 0, 1.0)], [])
    held.append(buf)
    try:
        from nnhal.burst import BurstController

        burst = BurstController(pm)
        with Pools([np.ones((2, 2), np.float32)] * 2, [16]) as p:
            burst.execute(p.request(), M.NO)
        held.append(burst)
    except ImportError:
        pass
    p = slow_pools()
    for _ in range(3):
        pm2.execute_1_3(p.request(), M.NO, None, None, hal.ExecutionCallback())
    if k % 2:
        cb = hal.PreparedModelCallback()
        dev.prepareModel_1_3(slow_model(60), 1, 1, None, [], [], bytes(32), cb)
    os.kill(os.getpid(), signal.SIGKILL)


def test_client_deaths_leave_nothing_behind(service_factory: Any) -> None:
    sp = service_factory()
    client_deaths(10, sp, _client_then_die)  # warm-up: the driver's and the service's pools of threads and memory
    before = settled(sp.pid, {"fds": 0, "threads": 0}, timeout=3.0)
    time.sleep(1.0)
    before = proc_counts(sp.pid)
    t0 = time.monotonic()
    client_deaths(100, sp, _client_then_die)
    after = settled(sp.pid, before)
    print(f"\nservice after 100 client deaths ({time.monotonic() - t0:.1f} s): fds {before['fds']} -> {after['fds']}, "
          f"threads {before['threads']} -> {after['threads']}, RSS {before['rss_kb']} -> {after['rss_kb']} kB")
    assert after["fds"] <= before["fds"]
    assert after["threads"] <= before["threads"]
    assert after["rss_kb"] - before["rss_kb"] < 16 * 1024  # kB: no growth with the number of dead clients
    dev = sp.connect()
    pm = prepared_model(add_model(), dev)
    with Pools([np.ones((2, 2), np.float32)] * 2, [16]) as p:
        assert execute_sync(pm, p.request())[0] == S.NONE
    dev.close()


@pytest.fixture(autouse=True)
def _quiet(quiet_driver: None) -> None:
    return None
