"""Request memories cached by slot on a service call channel
(nnhal.service.slots): the client's and the service's tables on their own,
then through a service: results stay right when pools change content, are
freed and recycled; a forged or unknown slot is INVALID_ARGUMENT and the
service keeps serving; a client whose slots the service lost recovers; the
service holds no descriptor of a client thread that ended."""

from __future__ import annotations

import copy
import gc
import os
import socket
import threading
import time
from typing import Any

import numpy as np
import pytest

from nnhal import hal
from nnhal import memory as hal_memory
from nnhal.service import transport, wire
from nnhal.service.slots import UNKNOWN_SLOT, ClientSlots, ServiceSlots, memory_key
from nnhal.service.transport import Channel
from tests.driver_util import Pools, add_model, execute_sync, prepared_model
from tests.service_util import proc_counts

S = hal.ErrorStatus
X = np.array([[1, 2], [3, 4]], np.float32)
Y = np.array([[10, 20], [30, 40]], np.float32)


def _request(*mems: hal.Memory) -> hal.Request:
    return hal.Request(inputs=[], outputs=[], pools=[hal.MemoryPool(hidlMemory=m) for m in mems])


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


# --------------------------------------------------------------------------
# the client's table


def test_client_sends_a_memory_once_then_its_slot() -> None:
    a, b = hal_memory.allocate(64), hal_memory.allocate(64)
    try:
        cs = ClientSlots()
        req = _request(a, b)
        sent, slots, forget = cs.prepare(req)
        assert slots == [1, 2] and forget == [] and sent.pools[0].hidlMemory is a
        assert req.pools[0].hidlMemory is a  # the caller's request is left alone
        sent, slots2, _ = cs.prepare(req)
        assert slots2 == slots and all(p.hidlMemory is None and p.token is None for p in sent.pools)
        # the same shared memory in a new hal.Memory object is the same slot; twice in one request, sent once
        sent, slots3, _ = cs.prepare(_request(hal_memory.dup(a), a))
        assert slots3 == [1, 1] and sent.pools[0].hidlMemory is None
    finally:
        hal_memory.free(a)
        hal_memory.free(b)


def test_client_does_not_cache_what_it_cannot_identify() -> None:
    cs = ClientSlots()
    closed = hal_memory.allocate(16)
    hal_memory.free(closed)  # no fds left
    token_pool = hal.MemoryPool(token=5)
    bad = hal.Memory(name="ashmem", handle=hal.Handle(fds=["x"]), size=16)
    req = hal.Request(pools=[hal.MemoryPool(hidlMemory=closed), token_pool, hal.MemoryPool(hidlMemory=bad)])
    sent, slots, _ = cs.prepare(req)
    assert slots == [0, 0, 0] and sent.pools == req.pools and len(cs) == 0
    v10 = hal.v1_0.Request(inputs=[], outputs=[], pools=[])
    assert cs.prepare(v10) == (v10, None, [])


def test_a_recycled_descriptor_number_is_a_new_slot() -> None:
    cs = ClientSlots()
    a = hal_memory.allocate(64)
    held = hal_memory.dup(a)  # NOTE: as the service holds a copy, the inode stays in use
    try:
        _, s1, _ = cs.prepare(_request(a))
        fd = a.handle.fds[0]
        hal_memory.free(a)
        b = hal_memory.allocate(64)
        if b.handle.fds[0] != fd:  # make b use a's old number
            os.dup2(b.handle.fds[0], fd)
            os.close(b.handle.fds[0])
            b.handle.fds = [fd]
        _, s2, _ = cs.prepare(_request(b))
        assert s2 != s1
        hal_memory.free(b)
    finally:
        hal_memory.free(held)


def test_client_evicts_the_least_recently_used_and_forgets_collected_memories() -> None:
    cs = ClientSlots(max_slots=2)
    mems = [hal_memory.allocate(32) for _ in range(3)]
    try:
        _, s0, _ = cs.prepare(_request(mems[0]))
        _, s1, _ = cs.prepare(_request(mems[1]))
        cs.prepare(_request(mems[0]))  # mems[0] used again: mems[1] is the oldest now
        _, s2, forget = cs.prepare(_request(mems[2]))
        assert forget == s1 and len(cs) == 2
        # a byte limit too
        big = ClientSlots(max_bytes=40)
        big.prepare(_request(mems[0]))
        _, _, forget = big.prepare(_request(mems[1]))
        assert len(forget) == 1
    finally:
        for m in mems:
            hal_memory.free(m)
    # a hal.Memory the client drops is forgotten with the next call
    cs = ClientSlots()
    m = hal_memory.allocate(32)
    _, (slot,), _ = cs.prepare(_request(m))
    hal_memory.free(m)
    del m
    gc.collect()
    assert len(cs) == 0
    other = hal_memory.allocate(32)
    try:
        _, _, forget = cs.prepare(_request(other))
        assert forget == [slot]
    finally:
        hal_memory.free(other)


def test_memory_key_names_kind_size_ints_and_files() -> None:
    a = hal_memory.allocate(32)
    try:
        key = memory_key(a)
        assert key is not None and key[:2] == ("ashmem", 32)
        assert memory_key(hal_memory.dup(a))[3] == key[3]
        assert memory_key(hal.Memory(name="ashmem", handle=hal.Handle(fds=[]), size=32)) is None
    finally:
        hal_memory.free(a)


# --------------------------------------------------------------------------
# the service's table


def test_service_caches_substitutes_and_frees() -> None:
    base = _open_fds()
    a, b = hal_memory.allocate(64), hal_memory.allocate(64)
    ss = ServiceSlots(max_slots=2)
    req = _request(a, b)
    err, all_cached = ss.resolve(req, [1, 2], [])
    assert (err, all_cached) == ("", True) and len(ss) == 2
    assert req.pools[0].hidlMemory is not a and memory_key(req.pools[0].hidlMemory) == memory_key(a)
    hal_memory.free(a)
    hal_memory.free(b)  # the client's copies are gone; the service's stay usable
    req = hal.Request(pools=[hal.MemoryPool(), hal.MemoryPool()])
    assert ss.resolve(req, [2, 1], []) == ("", True)
    pool = ss.pool(req.pools[0].hidlMemory, True)
    assert ss.pool(req.pools[0].hidlMemory, True) is pool  # opened once
    # forget one, then the other is evicted by newer ones
    assert ss.resolve(hal.Request(pools=[]), [], [2]) == ("", True) and len(ss) == 1
    c = hal_memory.allocate(16)
    for s in (3, 4):
        assert ss.resolve(_request(c), [s], [])[0] == ""
    assert len(ss) == 2
    err, _ = ss.resolve(hal.Request(pools=[hal.MemoryPool()]), [1], [])
    assert err.startswith(UNKNOWN_SLOT)
    hal_memory.free(c)
    ss.close()
    assert len(ss) == 0 and _open_fds() == base


@pytest.mark.parametrize("slots, pools, message", [
    ([7], [hal.MemoryPool()], UNKNOWN_SLOT),
    ([1, 2], [hal.MemoryPool()], "memory slots for"),
    ([-1], [hal.MemoryPool()], "negative"),
    ([1], [hal.MemoryPool(hidlMemory=hal.Memory(), token=3)], "a memory slot and a token"),
])
def test_service_rejects_bad_slots(slots: list, pools: list, message: str) -> None:
    ss = ServiceSlots()
    err, _ = ss.resolve(hal.Request(pools=pools), slots, [])
    assert message in err
    ss.close()


def test_service_leaves_an_unusable_memory_to_the_driver() -> None:
    ss = ServiceSlots()
    req = hal.Request(pools=[hal.MemoryPool(hidlMemory=hal.Memory(name="ashmem", handle=hal.Handle(fds=[10 ** 6]),
                                                                   size=8))])
    assert ss.resolve(req, [1], []) == ("", False) and len(ss) == 0
    ss.close()


# --------------------------------------------------------------------------
# through a service


@pytest.fixture(scope="module")
def remote_pm(service: Any) -> Any:
    return prepared_model(add_model(), service)


def test_results_follow_the_pools_content_and_recycled_memories(remote_pm: Any) -> None:
    for k in range(3):
        with Pools([X * k, Y], [16]) as pools:
            for j in range(3):
                v = hal_memory.map(pools.in_mem)
                v[:16] = (X * (k + j)).tobytes()  # new content in the same (cached) memory
                v.release()
                assert execute_sync(remote_pm, pools.request())[0] == S.NONE
                np.testing.assert_array_equal(pools.output(0, np.float32, (2, 2)), X * (k + j) + Y)
        # freed here: the next Pools may get the same descriptor numbers for new memories


def test_many_memories_cycle_through_the_slots(remote_pm: Any) -> None:
    for k in range(40):  # more than the client keeps: the oldest are forgotten on the way
        with Pools([X, Y * k], [16]) as pools:
            assert execute_sync(remote_pm, pools.request())[0] == S.NONE
            np.testing.assert_array_equal(pools.output(0, np.float32, (2, 2)), X + Y * k)


def test_client_recovers_when_the_service_lost_a_slot(remote_pm: Any) -> None:
    with Pools([X, Y], [16]) as pools:
        assert execute_sync(remote_pm, pools.request())[0] == S.NONE
        local = remote_pm._conn._local
        # make this thread's table claim slots the service never saw
        for entry in local.slots._lru.values():
            entry.slot += 10_000
        assert execute_sync(remote_pm, pools.request())[0] == S.NONE
        np.testing.assert_array_equal(pools.output(0, np.float32, (2, 2)), X + Y)


def test_an_ended_client_thread_leaves_no_descriptors(remote_pm: Any, service_process: Any) -> None:
    execute_sync(remote_pm, hal.Request())  # this thread's channel exists already
    time.sleep(0.2)
    before = proc_counts(service_process.pid)["fds"]

    def work() -> None:
        with Pools([X, Y], [16]) as pools:
            for _ in range(3):
                assert execute_sync(remote_pm, pools.request())[0] == S.NONE

    t = threading.Thread(target=work)
    t.start()
    t.join(30)
    gc.collect()  # the thread's channel closes with its thread-local state
    end = time.monotonic() + 10
    while proc_counts(service_process.pid)["fds"] > before and time.monotonic() < end:
        time.sleep(0.05)
    assert proc_counts(service_process.pid)["fds"] <= before


class _CallChannel:
    """A hostile client's call channel (raw frames)."""

    def __init__(self, path: str):
        self.main = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.main.connect(path)
        self.main_chan = Channel(self.main)
        self.main_chan.send(wire.ENCODER.encode(wire.Hello()), [])
        hello = wire.ENVELOPE.decode(self.main_chan.recv()[0])
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.sock.settimeout(10)
        self.chan = Channel(self.sock)
        self.chan.send(wire.ENCODER.encode(wire.Attach(hello.session)), [])
        assert type(wire.ENVELOPE.decode(self.chan.recv()[0])) is wire.Reply

    def call(self, cid: int, target: bytes, method: str, args: Any, slots: Any, forget: Any = (),
             fds: Any = ()) -> Any:
        self.chan.send(wire.ENCODER.encode(wire.CallOut(cid, target, method, args, slots, list(forget))), list(fds))
        body, got = self.chan.recv()
        transport.close_fds(got)
        return wire.ENVELOPE.decode(body)

    def close(self) -> None:
        self.chan.close()
        self.main_chan.close()


def test_forged_slots_are_invalid_and_the_service_keeps_serving(service: Any, service_process: Any,
                                                                 remote_pm: Any) -> None:
    raw = _CallChannel(str(service_process.socket_path))
    try:
        # a prepared model of this raw client
        pm_ref = None
        cb_ref = b"\x01" * 8
        env = raw.call(1, b"", "prepareModel_1_3", [add_model(), 1, 1, None, [], [], bytes(32), cb_ref], None)
        assert type(env) is wire.Reply
        deadline = time.monotonic() + 10
        raw.main.settimeout(10)
        while pm_ref is None and time.monotonic() < deadline:  # the notify arrives on the main connection
            body, fds = raw.main_chan.recv()
            transport.close_fds(fds)
            note = wire.ENVELOPE.decode(body)
            if type(note) is wire.Call and note.method == "notify_1_3":
                pm_ref = wire.METHODS["IPreparedModelCallback"]["notify_1_3"].arg_decoder.decode(note.args)[1]
        assert pm_ref is not None
        request = hal.Request(inputs=[], outputs=[], pools=[hal.MemoryPool()])
        for slots, forget in (([99], []), ([0, 1], []), ([-5], [])):
            env = raw.call(2, pm_ref, "executeSynchronously_1_3", [request, 0, None, None], slots, forget)
            assert type(env) is wire.Fail and env.status == S.INVALID_ARGUMENT, env
        # slots on a call that takes none
        env = raw.call(3, b"", "getStatus", [], [1])
        assert type(env) is wire.Fail and env.status == S.INVALID_ARGUMENT
        # forgetting unknown slots is harmless
        env = raw.call(4, b"", "getStatus", [], None, [5, 6, 7])
        assert type(env) is wire.Fail  # forget travels only with the slotted call
    finally:
        raw.close()
    with Pools([X, Y], [16]) as pools:
        assert execute_sync(remote_pm, pools.request())[0] == S.NONE
        np.testing.assert_array_equal(pools.output(0, np.float32, (2, 2)), X + Y)


@pytest.mark.parametrize("let_go", ["free", "collect"])
def test_the_service_lets_go_of_a_memory_the_client_let_go_of(remote_pm: Any, service_process: Any,
                                                               let_go: str) -> None:
    execute_sync(remote_pm, hal.Request())  # this thread's channel exists already
    time.sleep(0.2)
    before = proc_counts(service_process.pid)["fds"]
    mems = [hal_memory.allocate(16) for _ in range(2)]
    v = hal_memory.map(mems[0])
    v[:] = np.concatenate([X, Y]).astype(np.float32).tobytes()[:16]
    v.release()
    req = hal.Request(inputs=[hal.RequestArgument(location=hal.DataLocation(0, 0, 16)),
                              hal.RequestArgument(location=hal.DataLocation(0, 0, 16))],
                      outputs=[hal.RequestArgument(location=hal.DataLocation(1, 0, 16))],
                      pools=[hal.MemoryPool(hidlMemory=m) for m in mems])
    assert execute_sync(remote_pm, req)[0] == S.NONE
    assert proc_counts(service_process.pid)["fds"] > before  # cached there
    if let_go == "free":
        for m in mems:
            hal_memory.free(m)
    else:
        fds = [m.handle.fds[0] for m in mems]
        del req, mems
        gc.collect()
        for fd in fds:
            os.close(fd)
    # no further call: the forgets go at once
    end = time.monotonic() + 10
    while proc_counts(service_process.pid)["fds"] > before and time.monotonic() < end:
        time.sleep(0.02)
    assert proc_counts(service_process.pid)["fds"] <= before


def test_a_known_memory_object_is_checked_by_its_fields() -> None:
    """The same hal.Memory object skips the fstat only while its fds, name, size and ints are unchanged."""
    cs = ClientSlots()
    a, b = hal_memory.allocate(64), hal_memory.allocate(64)
    try:
        _, (s1,), _ = cs.prepare(_request(a))
        assert cs.prepare(_request(a))[1] == [s1]
        fds_a = a.handle.fds
        a.handle.fds = list(b.handle.fds)  # the same object now names b's file
        _, (s2,), _ = cs.prepare(_request(a))
        assert s2 != s1
        a.handle.fds = fds_a
        assert cs.prepare(_request(a))[1] == [s1]
        a.size = 32  # another size: another memory
        assert cs.prepare(_request(a))[1][0] not in (s1, s2)
        a.size = 64
        hal_memory.free(b)
        b2 = hal_memory.allocate(64)
        assert cs.prepare(_request(b2))[1][0] not in (s1, s2)
        hal_memory.free(b2)
    finally:
        hal_memory.free(a)
    assert cs.prepare(_request(a))[1] == [0]  # freed: no fds, sent as it is


def test_service_keeps_the_last_resolved_call_until_a_slot_changes() -> None:
    ss = ServiceSlots()
    a = hal_memory.allocate(32)
    try:
        req = _request(a)
        assert ss.resolve(req, [1], []) == ("", True)
        args = [req, 0, None, None]
        ss.keep(b"t", b"raw", [1], args)
        assert ss.recall(b"t", b"raw", [1]) is args
        assert ss.recall(b"t", b"raw2", [1]) is None  # other bytes
        assert ss.recall(b"u", b"raw", [1]) is None  # another prepared model
        assert ss.recall(b"t", b"raw", [2]) is None  # other slots
        b = hal_memory.allocate(32)
        ss.resolve(_request(b), [2], [])  # a slot added: what was kept may name a stale one
        assert ss.recall(b"t", b"raw", [1]) is None
        ss.keep(b"t", b"raw", [1], args)
        ss.forget([2])
        assert ss.recall(b"t", b"raw", [1]) is None
        hal_memory.free(b)
        # a call naming a driver buffer token is never kept (its token is checked every time)
        ss.keep(b"t", b"raw", [1, 0], [hal.Request(pools=[req.pools[0], hal.MemoryPool(token=3)]), 0, None, None])
        assert ss.recall(b"t", b"raw", [1, 0]) is None
    finally:
        hal_memory.free(a)
        ss.close()


def test_repeated_calls_change_inputs_outputs_and_layouts(remote_pm: Any) -> None:
    """The service reuses a repeated call: different layouts and contents still give their own results."""
    with Pools([X, Y], [16]) as pools:
        for k in range(3):
            v = hal_memory.map(pools.in_mem)
            v[:16] = (X * k).tobytes()
            v.release()
            for _ in range(2):
                assert execute_sync(remote_pm, pools.request())[0] == S.NONE
                np.testing.assert_array_equal(pools.output(0, np.float32, (2, 2)), X * k + Y)
        req = copy.deepcopy(pools.request())
        req.outputs[0].location = hal.DataLocation(1, 0, 8)  # too small now: another call
        assert execute_sync(remote_pm, req)[0] == S.OUTPUT_INSUFFICIENT_SIZE
        assert execute_sync(remote_pm, pools.request())[0] == S.NONE
