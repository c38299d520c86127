"""Compilation caching and deadlines / bounded queues through the service:
the cache files cross to the service process as file descriptors, the
service's key directory survives a restart of the service, and the QoS
statuses travel back unchanged."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nnhal import hal
from tests.driver_util import (
    WAIT_S,
    CountingExecutionCallback,
    S,
    execute_async,
    execute_sync,
    ms_from_now,
    prepare,
)
from tests.test_driver_cache import TOKEN, Files, Net, load, save
from tests.test_driver_qos import MISSED, RnnPools, rnn_model

M = hal.MeasureTiming


@contextlib.contextmanager
def serve(name: str, run_dir: Path, key_dir: Path, max_queued: int = 128) -> Iterator[Any]:
    """A ``nnhal serve`` process with its own cache key directory and queue
    bound, and a proxy device connected to it; the process is stopped
    (killed if need be) on the way out."""
    from tests.service_util import ServiceProcess

    sp = ServiceProcess(run_dir, name=name, env={"NNHAL_CACHE_KEY_DIR": str(key_dir),
                                                 "NNHAL_MAX_QUEUED": str(max_queued)})
    proxy = None
    try:
        sp.start()
        proxy = sp.connect()
        yield proxy
    finally:
        if proxy is not None:
            proxy.close()
        sp.stop()


@pytest.fixture(scope="module")
def dirs(service_runtime_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return service_runtime_dir, tmp_path_factory.mktemp("key")


@pytest.fixture(scope="module")
def remote(dirs: tuple[Path, Path]) -> Iterator[Any]:
    with serve(f"h6-{os.getpid()}", *dirs) as proxy:
        yield proxy


@pytest.fixture(scope="module")
def net(remote: Any) -> Net:
    n = Net()
    launch, status, prepared = prepare(n.model, remote)
    assert status == S.NONE
    n.expected = n.run(prepared)
    return n


def test_service_cache_round_trip_and_restart(remote, dirs, net, tmp_path) -> None:  # noqa: ANN001
    assert remote.getNumberOfCacheFilesNeeded() == (S.NONE, 1, 1)
    files = Files(tmp_path / "c")
    try:
        mc, dc = files.handles()
        np.testing.assert_array_equal(net.run(save(remote, net.model, mc, dc)), net.expected)
        assert os.path.getsize(files.model[0]) > 0
        status, loaded = load(remote, *files.handles())
        assert status == S.NONE
        np.testing.assert_array_equal(net.run(loaded), net.expected)
        status, loaded = load(remote, *files.handles(), version="1_2")
        assert status == S.NONE
        # a restarted service (same user key) loads the cache written before
        with serve(f"h6r-{os.getpid()}", *dirs) as again:
            status, loaded = load(again, *files.handles())
            assert status == S.NONE
            np.testing.assert_array_equal(net.run(loaded), net.expected)
        # a service with another key does not
        with serve(f"h6k-{os.getpid()}", dirs[0], tmp_path / "other-key") as stranger:
            assert load(stranger, *files.handles()) == (S.GENERAL_FAILURE, None)
    finally:
        files.close()


def test_service_draft_caching_methods(remote, net, tmp_path) -> None:  # noqa: ANN001
    """isCachingSupported and saveToCache (the draft 1.2 interface) cross the
    process boundary too: one handle each, the same format."""
    assert remote.isCachingSupported() == (S.NONE, True)
    prepared = prepare(net.model, remote)[2]
    files = Files(tmp_path / "draft")
    try:
        mc, dc = files.handles()
        assert prepared.saveToCache(mc[0], dc[0], TOKEN) == S.NONE
        status, loaded = load(remote, *files.handles())
        assert status == S.NONE
        np.testing.assert_array_equal(net.run(loaded), net.expected)
        ro_m, ro_d = files.handles([os.O_RDONLY], [os.O_RDONLY])
        assert prepared.saveToCache(ro_m[0], ro_d[0], TOKEN) == S.INVALID_ARGUMENT
    finally:
        files.close()


def test_service_cache_security_and_handles(remote, net, tmp_path) -> None:  # noqa: ANN001
    files = Files(tmp_path / "c")
    try:
        save(remote, net.model, *files.handles())
        good = files.model[0].read_bytes()
        data = bytearray(good)
        data[len(data) // 2] ^= 4
        files.model[0].write_bytes(bytes(data))
        assert load(remote, *files.handles()) == (S.GENERAL_FAILURE, None)
        files.model[0].write_bytes(good + b"\0")
        assert load(remote, *files.handles()) == (S.GENERAL_FAILURE, None)
        files.model[0].write_bytes(good)
        tok = bytearray(TOKEN)
        tok[3] ^= 1
        assert load(remote, *files.handles(), token=bytes(tok)) == (S.GENERAL_FAILURE, None)
        status, loaded = load(remote, *files.handles([os.O_WRONLY], [os.O_RDWR]))
        assert status == S.GENERAL_FAILURE and loaded is None
        status, loaded = load(remote, [], [])
        assert status in (S.INVALID_ARGUMENT, S.GENERAL_FAILURE) and loaded is None
        # a read-only fd on save: prepared, nothing written
        other = Files(tmp_path / "ro")
        try:
            save(remote, net.model, *other.handles([os.O_RDONLY], [os.O_RDWR]))
            assert os.path.getsize(other.model[0]) == os.path.getsize(other.data[0]) == 0
        finally:
            other.close()
        assert load(remote, *files.handles())[0] == S.NONE
    finally:
        files.close()


def test_service_deadlines(remote) -> None:  # noqa: ANN001
    prepared = prepare(rnn_model(), remote)[2]
    fresh = prepare(rnn_model(), remote)[2]  # NOTE: never run: the driver cannot refuse its deadlines at once
    pools = RnnPools()
    try:
        past = hal.OptionalTimePoint(nanosecondsSinceEpoch=max(0, time.monotonic_ns() - 10**9))
        assert execute_sync(prepared, pools.request(), M.NO, past)[0] == S.MISSED_DEADLINE_PERSISTENT
        assert execute_async(prepared, pools.request(), M.NO, past)[1] == S.MISSED_DEADLINE_PERSISTENT
        launch, status, pm = prepare(rnn_model(), remote, deadline=past)
        assert launch == S.NONE and status in MISSED and pm is None
        far = hal.OptionalTimePoint(nanosecondsSinceEpoch=2**63 - 1)
        t0 = time.monotonic()
        assert execute_sync(prepared, pools.request(), M.NO, far)[0] == S.NONE
        full = time.monotonic() - t0
        # the long RNN kernel stops at its deadline in the service process too
        for how in ("sync", "async"):
            t0 = time.monotonic()
            if how == "sync":
                status = execute_sync(fresh, pools.request(), M.NO, ms_from_now(20))[0]
            else:
                status = execute_async(fresh, pools.request(), M.NO, ms_from_now(20))[1]
            elapsed = time.monotonic() - t0
            assert status in MISSED
            assert elapsed < 0.02 + max(0.1, full / 4), (how, elapsed, full)
    finally:
        pools.close()


def test_service_bounded_queue(dirs, tmp_path) -> None:  # noqa: ANN001
    """A service whose queue holds 2 tasks: a burst of asynchronous launches
    beyond workers + 2 gets RESOURCE_EXHAUSTED_TRANSIENT (launch and
    callback); the accepted ones complete."""
    with serve(f"h6q-{os.getpid()}", dirs[0], dirs[1], max_queued=2) as proxy:
        prepared = prepare(rnn_model(), proxy)[2]
        pools = RnnPools()
        try:
            cbs, launches = [], []
            for _ in range(10):
                cb = CountingExecutionCallback()
                launches.append(prepared.execute_1_3(pools.request(), M.NO, hal.OptionalTimePoint(),
                                                     hal.OptionalTimeoutDuration(), cb))
                cbs.append(cb)
            results = [cb.wait(WAIT_S)[0] for cb in cbs]
            assert S.RESOURCE_EXHAUSTED_TRANSIENT in launches
            for launch, status in zip(launches, results):
                assert launch in (S.NONE, S.RESOURCE_EXHAUSTED_TRANSIENT)
                assert status == (S.NONE if launch == S.NONE else S.RESOURCE_EXHAUSTED_TRANSIENT)
            assert launches.count(S.NONE) >= 2
        finally:
            pools.close()


def test_service_high_priority_ahead_of_low_backlog(remote) -> None:  # noqa: ANN001
    """Priorities hold across the process boundary: with a backlog of LOW
    executions queued in the service, a HIGH execution answers before a LOW one."""
    from nnhal.conformance.runner import RequestPools
    from nnhal.tools import bench

    # NOTE: each LOW execution (~10-20 ms) must outlast the 16 launch round trips
    # (~1 ms each), or on a loaded machine the backlog drains before HIGH arrives
    net = bench.mobilenet_v1(128, 0.5, 10)
    model = bench.to_model(bench.lower(net, quant=False))
    high = prepare(model, remote, priority=hal.Priority.HIGH)[2]
    low = prepare(model, remote, priority=hal.Priority.LOW)[2]
    x = np.random.default_rng(0).random((1, 128, 128, 3), np.float32)
    with RequestPools([x], [40]) as p:
        cbs = [CountingExecutionCallback() for _ in range(16)]
        for cb in cbs:
            assert low.execute_1_3(p.request(), M.NO, hal.OptionalTimePoint(), hal.OptionalTimeoutDuration(),
                                   cb) == S.NONE
        assert execute_sync(high, p.request())[0] == S.NONE
        done_at_high = sum(cb.notified for cb in cbs)
        assert execute_sync(low, p.request())[0] == S.NONE
        done_at_low = sum(cb.notified for cb in cbs)
        for cb in cbs:
            assert cb.wait(WAIT_S)[0] == S.NONE
    # NOTE: counted, not timed (robust on a loaded machine): the HIGH execution
    # overtook the backlog, the LOW one waited behind it
    assert done_at_high < done_at_low, (done_at_high, done_at_low)
    assert done_at_high <= len(cbs) // 2
