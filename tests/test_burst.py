"""Bursts (HAL 1.2 configureExecutionBurst): the packet codec, the client's
BurstController against the in-process driver, and the server's robustness
as VTS's ValidateBurst.cpp checks it (malformed packets, a result larger than
the result queue, zeroed padding), plus getMemories failures, freeMemory,
concurrent bursts and teardown without leaked threads or fds."""

from __future__ import annotations

import copy
import os
import random
import struct
import threading
import time
from typing import Any

import numpy as np
import pytest

from nnhal import hal
from nnhal import memory as hal_memory
from nnhal.burst import BurstController, BurstError
from nnhal.conformance.vts.burst import RawBurst, datums, serialization_mutations
from nnhal.platform import burst_packets as bp
from nnhal.platform.fmq import MessageQueue
from tests.driver_util import Pools, add_model, prepared_model, wait_until

S = hal.ErrorStatus
NO_TIMING = hal.Timing()
WAIT_S = 10.0


@pytest.fixture(scope="module")
def add_pm() -> Any:
    return prepared_model(add_model((2, 2)))


def _add_pools(a: float = 1.0, b: float = 2.0) -> Pools:
    x = np.full((2, 2), a, np.float32)
    y = np.arange(4, dtype=np.float32).reshape(2, 2) * b
    return Pools([x, y], [16])


def _expected(a: float = 1.0, b: float = 2.0) -> np.ndarray:
    return np.full((2, 2), a, np.float32) + np.arange(4, dtype=np.float32).reshape(2, 2) * b


def _burst_threads(idle: bool = False) -> list[threading.Thread]:
    """The threads serving a burst (``idle``: and those waiting for the next one)."""
    return [t for t in threading.enumerate() if t.name == "nnhal-burst" or (idle and t.name == "nnhal-burst-idle")]


# ---------------------------------------------------------------------------
# the codec


def _request_args() -> tuple[list, list]:
    ins = [hal.RequestArgument(location=hal.DataLocation(0, 0, 16), dimensions=[2, 2]),
           hal.RequestArgument(hasNoValue=True)]
    outs = [hal.RequestArgument(location=hal.DataLocation(1, 4, 8), dimensions=[0, 7, 3])]
    return ins, outs


def test_request_codec_round_trip() -> None:
    ins, outs = _request_args()
    raw = bp.encode_request(ins, outs, [3, 0, 2**31 - 1, -5], 1)
    assert len(raw) == bp.DATUM_SIZE * bp.request_packet_length(ins, outs, 4) == 24 * 14
    p = bp.decode_request(raw)
    assert p.inputs == ins and p.outputs == outs and p.slots == [3, 0, 2**31 - 1, -5] and p.measure == 1


def test_result_codec_round_trip_and_padding() -> None:
    shapes = [hal.OutputShape([1, 2, 3], True), hal.OutputShape([], False)]
    timing = hal.Timing(5, 2**64 - 1)
    raw = bp.encode_result(S.OUTPUT_INSUFFICIENT_SIZE, shapes, timing)
    assert bp.decode_result(raw) == (S.OUTPUT_INSUFFICIENT_SIZE, shapes, timing)
    # padding zero: the discriminator's 7 bytes; isSufficient's 3; every unused tail
    for k in range(0, len(raw), 24):
        d = raw[k:k + 24]
        assert d[1:8] == bytes(7)
        if d[0] == bp.RES_OPERAND_INFORMATION:
            assert d[9:12] == bytes(3) and d[16:] == bytes(8)
    with pytest.raises(bp.PacketError):
        bp.encode_result(S.MISSED_DEADLINE_TRANSIENT, [], timing)  # not a 1.0 status


def _mutations(raw: bytes, datum: int) -> list[bytes]:
    """Malformed variants of a packet: truncated, grown, padding set, bad discriminator/bool."""
    n = len(raw) // 24
    out = [raw[:24 * k] + raw[24 * (k + 1):] for k in range(n)]  # one datum removed
    out += [raw + raw[-24:], raw[:24] * 2 + raw[24:]]  # one inserted
    for k in range(n):
        d = bytearray(raw)
        d[24 * k] = 0x7F  # unknown discriminator
        out.append(bytes(d))
        d = bytearray(raw)
        d[24 * k + 2] = 1  # padding after the discriminator
        out.append(bytes(d))
        d = bytearray(raw)
        d[24 * k + 23] ^= 0xFF  # tail byte (padding of most members)
        out.append(bytes(d))
    d = bytearray(raw)
    d[datum] = 2  # a bool that is neither 0 nor 1
    out.append(bytes(d))
    return out


def test_decoders_reject_malformed_packets() -> None:
    ins, outs = _request_args()
    raw = bp.encode_request(ins, outs, [0, 1], 0)
    bad = [m for m in _mutations(raw, 24 + 4) if m != raw]
    for m in bad:
        try:
            p = bp.decode_request(m)
        except bp.PacketError:
            continue
        # the only accepted mutations change a value (not the layout): a tail byte of a 20-byte member
        assert m[:24] == raw[:24] and len(m) == len(raw), p
    res = bp.encode_result(S.NONE, [hal.OutputShape([2, 2], True)], hal.Timing(1, 2))
    for m in _mutations(res, 24 + 8):
        if m == res:
            continue
        try:
            bp.decode_result(m)
        except bp.PacketError:
            continue
        assert len(m) == len(res) and m[-24] == bp.RES_EXECUTION_TIMING  # a timing byte changed
    for junk in (b"", b"\x00" * 23, b"\x00" * 25, bytes(range(48))):
        with pytest.raises(bp.PacketError):
            bp.decode_request(junk)
        with pytest.raises(bp.PacketError):
            bp.decode_result(junk)
    rng = random.Random(7)
    for _ in range(2000):
        junk = bytes(rng.getrandbits(8) for _ in range(24 * rng.randint(1, 6)))
        for dec in (bp.decode_request, bp.decode_result):
            try:
                dec(junk)
            except bp.PacketError:
                pass


# ---------------------------------------------------------------------------
# the controller


def test_burst_matches_sync(add_pm: Any) -> None:
    with BurstController(add_pm) as b, _add_pools(3.0, 5.0) as pools:
        for measure in (hal.MeasureTiming.NO, hal.MeasureTiming.YES, hal.MeasureTiming.NO):
            status, shapes, timing = b.execute(pools.request(), measure)
            assert status == S.NONE
            assert shapes == [hal.OutputShape([2, 2], True)]
            if measure == hal.MeasureTiming.NO:
                assert timing == NO_TIMING
            else:
                assert timing.timeOnDevice <= timing.timeInDriver < 10**7
            np.testing.assert_array_equal(pools.output(0, np.float32, [2, 2]), _expected(3.0, 5.0))
        # the 1.0 form of the request works too
        assert b.execute(pools.request_v1_0(), hal.MeasureTiming.NO)[0] == S.NONE


class _CountingPM:
    """A prepared model whose burst callbacks are counted (wraps the real one)."""

    def __init__(self, inner: Any):
        self.inner, self.asked, self.freed, self.context = inner, [], [], None

    def configureExecutionBurst(self, callback: Any, req: Any, res: Any) -> tuple:
        outer = self

        class CB(hal.IBurstCallback):
            def getMemories(self, slots: list) -> tuple:
                outer.asked.append(list(slots))
                return callback.getMemories(slots)

        status, ctx = self.inner.configureExecutionBurst(CB(), req, res)
        self.context = ctx

        class Ctx(hal.IBurstContext):
            def freeMemory(self, slot: int) -> None:
                outer.freed.append(slot)
                ctx.freeMemory(slot)

        return status, Ctx()


def test_memories_cached_by_slot_and_freed(add_pm: Any) -> None:
    pm = _CountingPM(add_pm)
    with BurstController(pm, max_slots=4) as b:
        p1 = _add_pools()
        for _ in range(3):
            assert b.execute(p1.request())[0] == S.NONE
        assert pm.asked == [[0, 1]]  # asked once, then cached
        # a new Memory object for the same shared memory (a dup of the fd) keeps its slot
        same = hal.Request(inputs=p1.in_args, outputs=p1.out_args,
                           pools=[hal.MemoryPool(hidlMemory=hal_memory.dup(p1.in_mem)),
                                  hal.MemoryPool(hidlMemory=hal_memory.dup(p1.out_mem))])
        assert b.execute(same)[0] == S.NONE
        assert pm.asked == [[0, 1]]
        # freeMemory: forgotten on both sides; the next use binds it again
        b.freeMemory(p1.out_mem)
        assert pm.freed == [1]
        assert b.execute(p1.request())[0] == S.NONE
        assert pm.asked == [[0, 1], [1]]
        # more memories than max_slots: the least recently used are freed in the driver
        others = [_add_pools(float(k)) for k in range(3)]
        for k, p in enumerate(others):
            assert b.execute(p.request())[0] == S.NONE
            np.testing.assert_array_equal(p.output(0, np.float32, [2, 2]), _expected(float(k)))
        assert len(pm.freed) >= 3
        # a closed fd whose number is reused by another memory never aliases the old slot
        p1.close()
        fresh = _add_pools(9.0)
        assert b.execute(fresh.request())[0] == S.NONE
        np.testing.assert_array_equal(fresh.output(0, np.float32, [2, 2]), _expected(9.0))
        for p in [*others, fresh]:
            p.close()


def test_removing_an_input_or_output_is_invalid(add_pm: Any) -> None:
    """VTS ValidateRequest: every request with one input or output removed, through the burst."""
    with BurstController(add_pm) as b, _add_pools() as pools:
        req = pools.request()
        for field in ("inputs", "outputs"):
            for k in range(len(getattr(req, field))):
                args = list(getattr(req, field))
                del args[k]
                bad = hal.Request(**{**req.__dict__, field: args})
                assert b.execute(bad) == (S.INVALID_ARGUMENT, [], NO_TIMING)
        assert b.execute(req)[0] == S.NONE


def test_controller_rejects_what_a_1_2_burst_cannot_carry(add_pm: Any) -> None:
    with BurstController(add_pm) as b, _add_pools() as pools:
        req = pools.request()
        token = hal.Request(inputs=req.inputs, outputs=req.outputs, pools=[req.pools[0], hal.MemoryPool(token=1)])
        assert b.execute(token)[0] == S.INVALID_ARGUMENT
        closed = hal_memory.dup(pools.out_mem)
        hal_memory.free(closed)
        closed.handle.fds = [1 << 20]
        assert b.execute(hal.Request(req.inputs, req.outputs, [req.pools[0], hal.MemoryPool(closed)]))[0] == \
            S.INVALID_ARGUMENT
        assert b.execute(req, measure=7)[0] == S.INVALID_ARGUMENT  # the driver validates MeasureTiming
        assert b.execute(req)[0] == S.NONE


def test_dynamic_output_and_insufficient_size_through_the_burst() -> None:
    pm = prepared_model(add_model((2, 2), out_dims=[0, 0]))
    with BurstController(pm) as b:
        with _add_pools() as pools:
            assert b.execute(pools.request())[:2] == (S.NONE, [hal.OutputShape([2, 2], True)])
        with Pools([np.ones((2, 2), np.float32)] * 2, [15]) as short:
            assert b.execute(short.request()) == (S.OUTPUT_INSUFFICIENT_SIZE, [hal.OutputShape([2, 2], False)],
                                                  NO_TIMING)


# ---------------------------------------------------------------------------
# the server, driven by hand (as ValidateBurst.cpp does: the VTS suite's RawBurst and packet mutations)


def test_vts_remove_add_mutate_datum(add_pm: Any) -> None:
    pools = _add_pools()
    raw = RawBurst(add_pm, {0: pools.in_mem, 1: pools.out_mem})
    try:
        assert raw.status == S.NONE
        req = pools.request()
        good = bp.encode_request(req.inputs, req.outputs, [0, 1], hal.MeasureTiming.YES)
        assert raw.send(good)[0] == S.NONE
        variants = [packet for _, _, packet in serialization_mutations(good)]  # the VTS suite's own
        assert len(variants) > 100
        for k, v in enumerate(variants):
            status, shapes, timing = raw.send(v)
            assert status != S.NONE and shapes == [] and timing == NO_TIMING, (k, status)
        # ... and the burst still works
        assert raw.send(good)[0] == S.NONE
        np.testing.assert_array_equal(pools.output(0, np.float32, [2, 2]), _expected())
    finally:
        raw.close()
        pools.close()


def test_hostile_packets_truncated_random_and_bad_values(add_pm: Any, quiet_driver: None) -> None:
    pools = _add_pools()
    raw = RawBurst(add_pm, {0: pools.in_mem, 1: pools.out_mem})
    try:
        req = pools.request()
        good = bp.encode_request(req.inputs, req.outputs, [0, 1], 0)
        cases = [good[:24 * k] for k in range(1, len(good) // 24)]  # truncated
        cases += _mutations(good, 24 + 4)
        rng = random.Random(1)
        cases += [bytes(rng.getrandbits(8) for _ in range(24 * rng.randint(1, 40))) for _ in range(100)]
        dims10 = hal.RequestArgument(location=req.inputs[0].location, dimensions=[2] * 10)
        zero = hal.RequestArgument(location=req.inputs[0].location, dimensions=[0, 2])
        cases += [
            bp.encode_request(req.inputs, req.outputs, [0, 7], 0),  # unknown pool identifier
            bp.encode_request(req.inputs, req.outputs, [0, -1], 0),
            bp.encode_request(req.inputs, req.outputs, [0, 1], 2),  # bad measureTiming
            bp.encode_request(req.inputs, req.outputs, [0, 1], -1),
            bp.encode_request([dims10, req.inputs[1]], req.outputs, [0, 1], 0),  # 10 dimensions
            bp.encode_request([zero, req.inputs[1]], req.outputs, [0, 1], 0),  # dimension 0 for an input
            bp.encode_request(req.inputs, req.outputs, [0], 0),  # a pool missing
            bp.encode_request(req.inputs, req.outputs, list(range(300)), 0),  # more pools than a burst serves
            bp.encode_request(req.inputs, req.outputs, [0, 1, 1], 0),  # a pool too many: fine? (unused pool)
        ]
        for k, c in enumerate(cases):
            if c == good:
                continue
            status, shapes, timing = raw.send(c)
            if k == len(cases) - 1:
                continue  # an extra, unused pool is a valid request
            assert status != S.NONE and shapes == [] and timing == NO_TIMING, (k, status)
        assert raw.send(good)[0] == S.NONE
        np.testing.assert_array_equal(pools.output(0, np.float32, [2, 2]), _expected())
    finally:
        raw.close()
        pools.close()


def test_get_memories_failures(add_pm: Any, quiet_driver: None) -> None:
    """A callback that raises, says no, answers too few, garbage, or unusable memories."""
    pools = _add_pools()
    raw = RawBurst(add_pm, {0: pools.in_mem, 1: pools.out_mem})
    try:
        req = pools.request()
        good = bp.encode_request(req.inputs, req.outputs, [0, 1], 0)
        closed = hal_memory.allocate(16)
        hal_memory.free(closed)
        closed.handle.fds = [1 << 20]

        def boom(slots: list) -> tuple:
            raise RuntimeError("the client died")

        def slow(slots: list) -> tuple:
            time.sleep(0.2)
            return S.NONE, [pools.in_mem, pools.out_mem][:len(slots)]

        answers = [(boom, S.GENERAL_FAILURE), ((S.INVALID_ARGUMENT, []), S.INVALID_ARGUMENT),
                   ((S.GENERAL_FAILURE, [pools.in_mem, pools.out_mem]), S.GENERAL_FAILURE),
                   ((S.NONE, [pools.in_mem]), S.GENERAL_FAILURE), ((S.NONE, [1, 2]), S.GENERAL_FAILURE),
                   ("garbage", S.GENERAL_FAILURE), ((99, []), S.GENERAL_FAILURE), (None, S.NONE),
                   ((S.NONE, [pools.in_mem, closed]), S.INVALID_ARGUMENT),
                   ((S.NONE, [pools.in_mem, hal.Memory("ashmem", hal.Handle([], []), 16)]), S.INVALID_ARGUMENT)]
        for answer, expected in answers:
            raw.answer = answer
            if answer is None:
                raw.answer = None
            # a fresh burst per answer: slots already cached are not asked again
            fresh = RawBurst(add_pm, {0: pools.in_mem, 1: pools.out_mem})
            fresh.answer = raw.answer
            try:
                status, shapes, timing = fresh.send(good)
                assert status == expected, (answer, status)
                fresh.answer = None
                assert fresh.send(good)[0] == S.NONE  # once the client answers properly, it works
            finally:
                fresh.close()
        raw.answer = slow
        assert raw.send(good)[0] == S.NONE
    finally:
        raw.close()
        pools.close()


def test_result_larger_than_the_result_queue(add_pm: Any) -> None:
    """ValidateBurst's validateBurstFmqLength: an error, no shapes, no timing, no fallback."""
    pools = _add_pools()
    small = RawBurst(add_pm, {0: pools.in_mem, 1: pools.out_mem}, result_length=3)
    try:
        req = pools.request()
        assert bp.result_packet_length([hal.OutputShape([2, 2], True)]) == 5
        status, shapes, timing = small.send(bp.encode_request(req.inputs, req.outputs, [0, 1], 0))
        assert (status, shapes, timing) == (S.GENERAL_FAILURE, [], NO_TIMING)
    finally:
        small.close()
    with BurstController(add_pm, result_channel_length=4) as b:
        assert b.execute(pools.request()) == (S.GENERAL_FAILURE, [], NO_TIMING)
    pools.close()


def test_result_padding_is_zero(add_pm: Any) -> None:
    pools = _add_pools()
    raw = RawBurst(add_pm, {0: pools.in_mem, 1: pools.out_mem})
    try:
        req = pools.request()
        res = raw.send_raw(bp.encode_request(req.inputs, req.outputs, [0, 1], 1))
        assert len(res) == 24 * 5
        for d in datums(res):
            assert d[1:8] == bytes(7)
            if d[0] == bp.RES_OPERAND_INFORMATION:
                assert d[9:12] == bytes(3) and d[16:] == bytes(8)
            elif d[0] == bp.RES_PACKET_INFORMATION:
                assert d[20:] == bytes(4)
            elif d[0] == bp.RES_DIMENSION:
                assert d[12:] == bytes(12)
    finally:
        raw.close()
        pools.close()


def test_configure_rejects_bad_arguments(add_pm: Any, quiet_driver: None) -> None:
    req = MessageQueue.create(bp.DATUM_SIZE, 16, "writer")
    res = MessageQueue.create(bp.DATUM_SIZE, 16, "reader")
    tiny = MessageQueue.create(bp.DATUM_SIZE, 1, "reader")
    other = MessageQueue.create(16, 16, "reader")
    cb = hal.IBurstCallback()
    cb.getMemories = lambda slots: (S.INVALID_ARGUMENT, [])  # type: ignore[method-assign]
    try:
        assert wait_until(lambda: not _burst_threads())  # the bursts of earlier tests have ended
        before = len(os.listdir("/proc/self/fd"))
        rd, sd = req.descriptor(), res.descriptor()
        for args in [(None, rd, sd), (object(), rd, sd), (cb, None, sd), (cb, rd, None), (cb, rd, hal.Handle()),
                     (cb, rd, tiny.descriptor()), (cb, other.descriptor(), sd), (cb, rd, "x"),
                     (cb, hal.Handle(fds=rd.fds, ints=[*rd.ints[:3], 10**9]), sd)]:
            assert add_pm.configureExecutionBurst(*args) == (S.INVALID_ARGUMENT, None), args
        assert len(os.listdir("/proc/self/fd")) == before
        assert not _burst_threads()
    finally:
        for q in (req, res, tiny, other):
            q.close()


# ---------------------------------------------------------------------------
# concurrency and teardown


def test_concurrent_bursts_on_one_prepared_model(add_pm: Any) -> None:
    errors: list = []

    def worker(k: int) -> None:
        try:
            with BurstController(add_pm) as b, _add_pools(float(k)) as pools:
                for _ in range(30):
                    assert b.execute(pools.request())[0] == S.NONE
                    np.testing.assert_array_equal(pools.output(0, np.float32, [2, 2]), _expected(float(k)))
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors


def test_close_leaks_no_thread_or_fd(add_pm: Any) -> None:
    with _add_pools() as pools:
        # warm up lazily created things (logging, the driver's workers)
        with BurstController(add_pm) as b:
            b.execute(pools.request())
        assert wait_until(lambda: not _burst_threads(idle=True))
        fds = len(os.listdir("/proc/self/fd"))
        threads = threading.active_count()
        for _ in range(20):
            b = BurstController(add_pm)
            assert b.execute(pools.request())[0] == S.NONE
            b.close()
            b.close()  # idempotent
            assert b.execute(pools.request())[0] != S.NONE  # closed
        assert wait_until(lambda: not _burst_threads())
        assert wait_until(lambda: len(os.listdir("/proc/self/fd")) == fds), (len(os.listdir("/proc/self/fd")), fds)
        # NOTE: a server thread waits half a second for the next burst, then ends
        assert wait_until(lambda: not _burst_threads(idle=True))
        assert threading.active_count() == threads


def test_bursts_one_after_another_run_on_one_server_thread(add_pm: Any) -> None:
    """A burst configured after another one ended is served by the thread that served it (no thread started
    per burst); the thread ends half a second after its last burst."""
    with _add_pools() as pools:
        seen = set()
        for _ in range(5):
            assert wait_until(lambda: not _burst_threads())  # the last burst's thread has gone idle
            with BurstController(add_pm) as b:
                assert b.execute(pools.request())[0] == S.NONE
                seen.update(_burst_threads())
        assert len(seen) == 1
        assert wait_until(lambda: not _burst_threads(idle=True))


def test_context_close_and_driver_death(add_pm: Any) -> None:
    """The service closes the context when the client disconnects; a client
    still executing gets DEVICE_UNAVAILABLE at once, and every later call too."""
    with _add_pools() as pools:
        b = BurstController(add_pm)
        assert b.execute(pools.request())[0] == S.NONE
        b.context.close()
        b.context.close()  # idempotent
        assert not b.context.alive
        t0 = time.monotonic()
        assert b.execute(pools.request()) == (S.DEVICE_UNAVAILABLE, [], NO_TIMING)
        assert time.monotonic() - t0 < 1.0
        assert b.execute(pools.request())[0] == S.DEVICE_UNAVAILABLE
        b.close()


def test_a_result_that_never_comes_times_out() -> None:
    """A driver that accepts the burst but never answers: execute returns after its timeout."""

    class Mute(hal.IPreparedModel):
        def configureExecutionBurst(self, callback: Any, req: Any, res: Any) -> tuple:
            self.req, self.res = MessageQueue.open(req, 24, "reader"), MessageQueue.open(res, 24, "writer")
            return S.NONE, hal.IBurstContext()

    pm = Mute()
    b = BurstController(pm, timeout=0.2)
    with _add_pools() as pools:
        t0 = time.monotonic()
        assert b.execute(pools.request()) == (S.GENERAL_FAILURE, [], NO_TIMING)
        assert 0.15 < time.monotonic() - t0 < 2.0
        assert b.execute(pools.request())[0] == S.GENERAL_FAILURE  # out of step: the burst is over
    b.close()
    pm.req.close()
    pm.res.close()


def test_configure_failure_raises_burst_error() -> None:
    class NoBurst(hal.IPreparedModel):
        def configureExecutionBurst(self, callback: Any, req: Any, res: Any) -> tuple:
            return S.GENERAL_FAILURE, None

    fds = len(os.listdir("/proc/self/fd"))
    with pytest.raises(BurstError) as e:
        BurstController(NoBurst())
    assert e.value.status == S.GENERAL_FAILURE
    assert BurstController.create(NoBurst()) == (S.GENERAL_FAILURE, None)
    assert len(os.listdir("/proc/self/fd")) == fds


def test_corrupt_request_queue_ends_only_that_burst(add_pm: Any, quiet_driver: None) -> None:
    with _add_pools() as pools, BurstController(add_pm) as good:
        evil = BurstController(add_pm)
        hdr = memoryview(evil._requests._mm)  # noqa: SLF001 - the test plays the hostile client
        struct.pack_into("=Q", hdr, 16, 10**6)  # write counter far beyond the capacity
        hdr.release()
        evil._requests._signal(b"\x01")  # noqa: SLF001
        assert wait_until(lambda: not evil.context.alive)
        assert evil.execute(pools.request())[0] in (S.DEVICE_UNAVAILABLE, S.GENERAL_FAILURE)
        evil.close()
        assert good.execute(pools.request())[0] == S.NONE


def test_idle_burst_does_not_spin(add_pm: Any) -> None:
    with BurstController(add_pm):
        time.sleep(0.05)
        c0 = time.process_time()
        time.sleep(0.5)
        assert time.process_time() - c0 < 0.1


def test_in_process_benchmark_measures_both() -> None:
    """The figures behind `python -m nnhal.tools.burstbench` (and bench --ipc)."""
    from nnhal.tools import burstbench

    res = burstbench.measure(runs=40, rounds=2, warmup=5)
    assert set(res) == {"sync", "burst"} and all(len(v) == 40 and (v > 0).all() for v in res.values())
    lines = burstbench.summary(res)
    assert any("burst / sync" in line for line in lines)


def test_close_from_another_thread_ends_a_waiting_execution() -> None:
    """A driver that never answers: close() in another thread ends the wait at once."""

    class Mute(hal.IPreparedModel):
        def configureExecutionBurst(self, callback: Any, req: Any, res: Any) -> tuple:
            self.req, self.res = MessageQueue.open(req, 24, "reader"), MessageQueue.open(res, 24, "writer")
            return S.NONE, hal.IBurstContext()

    pm = Mute()
    b = BurstController(pm)  # no timeout: only close() or the driver's death ends the wait
    with _add_pools() as pools:
        threading.Timer(0.2, b.close).start()
        t0 = time.monotonic()
        assert b.execute(pools.request())[0] == S.DEVICE_UNAVAILABLE
        assert time.monotonic() - t0 < 2.0
    pm.req.close()
    pm.res.close()


def _with_byte(data: bytes, at: int, value: int) -> bytes:
    return data[:at] + bytes([value]) + data[at + 1:]


def test_hostile_driver_results_give_errors_not_hangs() -> None:
    """A driver answering each request with a malformed result packet: the
    controller returns GENERAL_FAILURE each time and keeps working."""
    answers = [bytes(range(24)),  # unknown discriminator
               bp.encode_result(S.NONE, [], hal.Timing())[:24],  # truncated
               _with_byte(bp.encode_result(S.NONE, [hal.OutputShape([2], True)], hal.Timing()), 24 + 8, 2),  # bool 2
               struct.pack("<B7xIiI4x", 0, 2, 42, 0) + struct.pack("<B7xQQ", 3, 1, 2),  # status 42
               bp.encode_result(S.NONE, [], hal.Timing()) + bytes(24),  # a datum too many
               bp.encode_result(S.NONE, [hal.OutputShape([2, 2], True)], hal.Timing(1, 2))]  # finally a good one

    class Liar(hal.IPreparedModel):
        def configureExecutionBurst(self, callback: Any, req: Any, res: Any) -> tuple:
            self.req, self.res = MessageQueue.open(req, 24, "reader"), MessageQueue.open(res, 24, "writer")

            def serve() -> None:
                try:
                    for a in answers:
                        self.req.read_packet_blocking(WAIT_S)
                        self.res.write_blocking(a, WAIT_S)
                except Exception:  # noqa: BLE001 - the test ended
                    pass

            threading.Thread(target=serve, daemon=True).start()
            return S.NONE, hal.IBurstContext()

    pm = Liar()
    b = BurstController(pm, timeout=WAIT_S)
    with _add_pools() as pools:
        for _ in answers[:-1]:
            assert b.execute(pools.request()) == (S.GENERAL_FAILURE, [], NO_TIMING)
        assert b.execute(pools.request()) == (S.NONE, [hal.OutputShape([2, 2], True)], hal.Timing(1, 2))
    b.close()
    pm.req.close()
    pm.res.close()


def test_cached_pools_of_a_shrunk_unsealed_memory_cannot_fault(add_pm: Any, quiet_driver: None) -> None:
    """The server keeps a burst's memories open across executions; one that is
    not sealed against shrinking is read with pread (never mapped), so a
    client that shrinks it afterwards gets an error, not a SIGBUS."""
    fds = []
    mems = []
    for size in (32, 16):
        fd = os.memfd_create("unsealed", os.MFD_CLOEXEC)  # no F_SEAL_SHRINK
        os.ftruncate(fd, size)
        fds.append(fd)
        mems.append(hal_memory.from_fd(fd, size))
    view = hal_memory.open_pool(mems[0], writable=True)
    view.view[0:32] = np.arange(8, dtype=np.float32).tobytes()
    view.close()
    args = [hal.RequestArgument(location=hal.DataLocation(0, 0, 16)),
            hal.RequestArgument(location=hal.DataLocation(0, 16, 16))]
    out = [hal.RequestArgument(location=hal.DataLocation(1, 0, 16))]
    req = hal.Request(inputs=args, outputs=out, pools=[hal.MemoryPool(hidlMemory=m) for m in mems])
    try:
        with BurstController(add_pm) as b:
            assert b.execute(req)[0] == S.NONE
            os.ftruncate(fds[0], 0)  # the input pool shrinks under the cached pool
            assert b.execute(req)[0] != S.NONE
            os.ftruncate(fds[0], 32)
            os.ftruncate(fds[1], 0)  # and now the output pool
            assert b.execute(req)[0] != S.NONE
            os.ftruncate(fds[1], 16)
            assert b.execute(req)[0] == S.NONE  # grown back: the same cached memories work again
    finally:
        for m in mems:
            hal_memory.free(m)
        for fd in fds:
            os.close(fd)


def test_repeated_results_are_new_objects(add_pm: Any) -> None:
    """The controller decodes a repeated answer once; the caller still gets its own objects."""
    with BurstController(add_pm) as b, _add_pools(1.0, 2.0) as pools:
        first = b.execute(pools.request(), hal.MeasureTiming.NO)
        first[1][0].dimensions.append(99)
        first[2].timeOnDevice = 5
        second = b.execute(pools.request(), hal.MeasureTiming.NO)
        assert second[0] == S.NONE and second[1] == [hal.OutputShape([2, 2], True)] and second[2] == NO_TIMING
        # a changed request (another output location) is decoded anew by the driver
        req = copy.deepcopy(pools.request())
        req.outputs[0].location.length += 4
        assert b.execute(req, hal.MeasureTiming.NO)[0] == S.INVALID_ARGUMENT
        assert b.execute(pools.request(), hal.MeasureTiming.NO)[0] == S.NONE
