"""Bursts across the process boundary: the queues' descriptors and the
callback's memories cross as fds; malformed packets leave the service alive
and correct; a service killed while a client waits for a burst result gives
DEVICE_UNAVAILABLE within seconds, not a hang."""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

from nnhal import hal
from nnhal.burst import BurstController
from nnhal.conformance.vts.burst import RawBurst, bad_entries, datums
from nnhal.platform import burst_packets as bp
from tests.driver_util import Pools, add_model, prepared_model
from tests.test_burst import NO_TIMING, _add_pools, _expected

S = hal.ErrorStatus


def test_malformed_packets_leave_the_service_serving(service_factory: Any) -> None:
    sp = service_factory()
    dev = sp.connect()
    try:
        pm = prepared_model(add_model((2, 2)), dev)
        pools = _add_pools()
        raw = RawBurst(pm, {0: pools.in_mem, 1: pools.out_mem})
        try:
            assert raw.status == S.NONE
            req = pools.request()
            good = bp.encode_request(req.inputs, req.outputs, [0, 1], 1)
            assert raw.send(good)[0] == S.NONE
            d = datums(good)
            variants = [b"".join(d[:k] + d[k + 1:]) for k in range(len(d))]
            variants += [b"".join(d[:k] + [e] + d[k:]) for k in range(len(d) + 1) for e in bad_entries()]
            variants += [bytes(range(24)) * 3, good[:48], bp.encode_request(req.inputs, req.outputs, [0, 99], 0)]
            for v in variants:
                assert raw.send(v)[1:] == ([], NO_TIMING)
                assert raw.send(v)[0] != S.NONE
            assert raw.send(good)[0] == S.NONE
            np.testing.assert_array_equal(pools.output(0, np.float32, [2, 2]), _expected())
        finally:
            raw.close()
        # and the service still answers everything else
        assert pm.executeSynchronously_1_3(req, hal.MeasureTiming.NO, None, None)[0] == S.NONE
        with BurstController(pm) as b:
            assert b.execute(req)[0] == S.NONE
        pools.close()
    finally:
        dev.close()


def test_service_killed_during_a_burst_execution(service_factory: Any) -> None:
    from tests.test_service_death import slow_model, slow_pools

    sp = service_factory()
    dev = sp.connect()
    try:
        pm = prepared_model(slow_model(400), dev)
        burst = BurstController(pm)
        with slow_pools() as pools:
            assert burst.execute(pools.request())[0] == S.NONE
            killed: list = []
            killer = threading.Timer(0.05, lambda: (killed.append(time.monotonic()), sp.kill()))
            killer.start()
            t_end = time.monotonic() + 10
            status = S.NONE
            while status == S.NONE and time.monotonic() < t_end:  # executions until the kill lands
                status, shapes, timing = burst.execute(pools.request())
            assert status == S.DEVICE_UNAVAILABLE and shapes == [] and timing == NO_TIMING
            assert killed and time.monotonic() - killed[0] < 5.0
            killer.join(10)
            assert burst.execute(pools.request()) == (S.DEVICE_UNAVAILABLE, [], NO_TIMING)
        burst.close()
    finally:
        dev.close()


def test_concurrent_bursts_through_the_service(service_factory: Any) -> None:
    sp = service_factory()
    dev = sp.connect()
    try:
        pm = prepared_model(add_model((2, 2)), dev)
        errors: list = []

        def worker(k: int) -> None:
            try:
                with BurstController(pm) as b, _add_pools(float(k)) as pools:
                    for _ in range(25):
                        assert b.execute(pools.request())[0] == S.NONE
                        np.testing.assert_array_equal(pools.output(0, np.float32, [2, 2]), _expected(float(k)))
                    with Pools([np.ones((2, 2), np.float32)] * 2, [15]) as short:  # OUTPUT_INSUFFICIENT_SIZE
                        assert b.execute(short.request())[0] == S.OUTPUT_INSUFFICIENT_SIZE
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors, errors
    finally:
        dev.close()
