"""The device's cache of request memories mapped between in-process
executions (``nnhal.driver.pool_cache``): reused while the client's
descriptor names the same file with the same access, opened again (and
judged as without a cache) otherwise, bounded, dropped on ``memory.free``,
and never a descriptor of the driver's own at a number a client could name."""

from __future__ import annotations

import contextlib
import gc
import os
from typing import Any, Iterator, Optional

import numpy as np
import pytest

from nnhal import hal, memory
from nnhal.driver import Device
from nnhal.driver.pool_cache import PoolCache, cache_key
from nnhal.drivers.sample import sample_device
from nnhal.tools import ipcbench
from tests.driver_util import float_output, ipc_pools, sync_status

S = hal.ErrorStatus
NO = hal.MeasureTiming.NO


@pytest.fixture(scope="module")
def device() -> Device:
    return sample_device()


@pytest.fixture(scope="module")
def add_pm(device: Device) -> Any:
    return ipcbench.prepare(device, ipcbench.add_model())


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The memories memory.open_pool is asked to open, in order, while the test runs."""
    calls: list[Any] = []
    real = memory.open_pool

    def counting(m: Any, *a: Any, **k: Any) -> Any:
        calls.append(m)
        return real(m, *a, **k)

    monkeypatch.setattr(memory, "open_pool", counting)
    return calls


@pytest.fixture
def pools(device: Device) -> Iterator[ipcbench.Pools]:
    device.pool_cache.clear()
    with ipc_pools() as p:
        yield p


_run = sync_status


def _out(p: ipcbench.Pools) -> np.ndarray:
    return float_output(p.out)


def test_a_memory_is_mapped_once_and_reused(device: Device, add_pm: Any, pools: ipcbench.Pools,
                                            opened: list[Any]) -> None:
    for _ in range(5):
        assert _run(add_pm, pools.request) == S.NONE
        pools.check()
    assert len(opened) == 2  # the input pool and the output pool, once each
    assert len(device.pool_cache) == 2


def test_input_only_pools_are_mapped_read_only(device: Device, add_pm: Any, pools: ipcbench.Pools) -> None:
    assert _run(add_pm, pools.request) == S.NONE
    fd = pools.inp.handle.fds[0]
    st = os.fstat(fd)
    inode = f"{st.st_ino}"
    perms = {line.split()[1] for line in open("/proc/self/maps") if line.split()[4:5] == [inode]}
    assert "rw-s" not in perms and "r--s" in perms, perms


@contextlib.contextmanager
def _renumbered(fd: int, replacement: Optional[int]) -> Iterator[None]:
    """Descriptor number ``fd`` names ``replacement`` (a descriptor; None: nothing, closed) for
    the block, then its own file again."""
    saved = os.dup(fd)
    if replacement is None:
        os.close(fd)
    else:
        os.dup2(replacement, fd)
    try:
        yield
    finally:
        os.dup2(saved, fd)
        os.close(saved)


def test_a_reused_descriptor_number_names_the_new_file(add_pm: Any, pools: ipcbench.Pools) -> None:
    assert _run(add_pm, pools.request) == S.NONE
    with ipc_pools() as other, _renumbered(pools.out.handle.fds[0], other.out.handle.fds[0]):
        view = memory.map(other.out)
        view[:] = bytes(16)
        view.release()
        assert _run(add_pm, pools.request) == S.NONE
        assert np.array_equal(_out(other), [4, 6, 8, 10])  # written where the number points now


def test_a_closed_descriptor_is_invalid_argument(add_pm: Any, pools: ipcbench.Pools) -> None:
    assert _run(add_pm, pools.request) == S.NONE
    with _renumbered(pools.inp.handle.fds[0], None):
        assert _run(add_pm, pools.request) == S.INVALID_ARGUMENT
    assert _run(add_pm, pools.request) == S.NONE


def test_free_drops_the_mapping(device: Device, add_pm: Any) -> None:
    device.pool_cache.clear()
    p = ipcbench.Pools()
    assert _run(add_pm, p.request) == S.NONE
    assert len(device.pool_cache) == 2
    p.close()  # memory.free of both
    assert len(device.pool_cache) == 0


def test_unsealed_memories_are_not_kept(device: Device, add_pm: Any, tmp_path: Any) -> None:
    device.pool_cache.clear()
    path = tmp_path / "pool"
    path.write_bytes(np.arange(8, dtype=np.float32).tobytes() + bytes(16))
    fd = os.open(path, os.O_RDWR)
    try:
        m = hal.Memory(name="mmap_fd", handle=hal.Handle(fds=[fd], ints=[memory.PROT_READ | memory.PROT_WRITE, 0, 0]),
                       size=48)
        req = hal.Request(inputs=[hal.RequestArgument(location=hal.DataLocation(0, 0, 16)),
                                  hal.RequestArgument(location=hal.DataLocation(0, 16, 16))],
                          outputs=[hal.RequestArgument(location=hal.DataLocation(0, 32, 16))],
                          pools=[hal.MemoryPool(hidlMemory=m)])
        assert _run(add_pm, req) == S.NONE
        assert len(device.pool_cache) == 0  # a regular file may shrink: read and written per execution
        assert np.array_equal(np.frombuffer(path.read_bytes()[32:], np.float32), [4, 6, 8, 10])
    finally:
        os.close(fd)


def test_bounded_by_count_and_bytes() -> None:
    cache = PoolCache(max_entries=3, max_bytes=1 << 20)
    mems = [memory.allocate(4096) for _ in range(5)]
    try:
        for m in mems:
            assert cache.lease(m, False) is not None
        assert len(cache) == 3
        big = memory.allocate(1 << 20)
        try:
            assert cache.lease(big, False) is not None
            assert cache.nbytes <= 1 << 20 and len(cache) == 1
        finally:
            memory.free(big)
    finally:
        for m in mems:
            memory.free(m)
    assert len(cache) == 0


def test_the_least_recently_leased_memory_goes_first() -> None:
    """Leases mark recency (the executions' lock-free lookups included): the memory used last stays."""
    cache = PoolCache(max_entries=3)
    a, b, c, d = (memory.allocate(4096) for _ in range(4))
    try:
        for m in (a, b, c):
            assert cache.lease(m, False) is not None
        kept = cache.kept_views((cache_key(a, False),))  # NOTE: an execution's fast path uses a again
        assert kept[0] is not None
        del kept
        assert cache.lease(d, False) is not None
        assert len(cache) == 3
        found = cache.kept_views(tuple(cache_key(m, False) for m in (a, b, c, d)))
        assert [v is not None for v in found] == [True, False, True, True]
        del found
    finally:
        for m in (a, b, c, d):
            memory.free(m)


def test_a_mapping_closed_by_a_concurrent_drop_is_a_miss() -> None:
    """The fast path reads the cache without its lock: an entry found while another thread drops it (its
    mapping closed, the entry not yet gone) is a miss, not a view of a released mapping; the caller then
    opens the memory itself."""
    cache = PoolCache()
    m = memory.allocate(4096)
    try:
        key = cache_key(m, True)
        assert cache.lease(m, True) is not None
        cache._lru[key].pool.close()  # NOTE: white-box: the drop's close, before it removes the entry
        assert cache.kept_views((key,)) == [None]
        view, pool = cache.open(m, True, key)  # NOTE: what the execution does then: mapped anew
        assert pool is None and len(view) == 4096
        view.release()
        assert cache.kept_views((key,))[0] is not None
    finally:
        memory.free(m)


def test_a_view_outlives_its_eviction() -> None:
    cache = PoolCache(max_entries=1)
    a, b = memory.allocate(4096), memory.allocate(4096)
    try:
        view = cache.lease(a, True)
        assert view is not None
        cache.lease(b, True)  # evicts a while an "execution" still holds its view
        view[:4] = b"abcd"
        assert bytes(memory.map(a)[:4]) == b"abcd"
        del view
        gc.collect()
    finally:
        memory.free(a)
        memory.free(b)


def test_mappings_keep_no_descriptor() -> None:
    """A mapping made for the driver holds no descriptor of its own (Python's mmap would dup
    the fd to the lowest free number: one a client had just closed)."""
    cache = PoolCache()
    m = memory.allocate(4096)
    try:
        before = set(os.listdir("/proc/self/fd"))
        view = cache.lease(m, True)
        pool = memory.open_pool(m, writable=True)
        mapped = memory.map(m)
        after = set(os.listdir("/proc/self/fd"))
        assert before == after, f"new descriptors {sorted(after - before)}"
        del view, mapped
        pool.close()
    finally:
        memory.free(m)


def test_not_a_plain_memory_is_left_to_the_caller() -> None:
    cache = PoolCache()
    m = memory.allocate(64)
    try:
        odd = hal.Memory(name=m.name, handle=hal.Handle(fds=(m.handle.fds[0],), ints=[]), size=64)
        assert cache.lease(odd, False) is None
        two = hal.Memory(name=m.name, handle=hal.Handle(fds=[m.handle.fds[0]] * 2, ints=[]), size=64)
        assert cache.lease(two, False) is None
        assert cache.lease(hal.Memory(name="hardware_buffer", handle=m.handle, size=0), False) is None
        assert len(cache) == 0
    finally:
        memory.free(m)


def test_an_unsealed_memory_is_opened_once_per_execution(device: Device, add_pm: Any, opened: list[Any]) -> None:
    """Not kept, and not validated twice per execution either (the cache's check, then the
    caller's open): one open_pool per execution, whose pread / pwrite pool the execution uses."""
    device.pool_cache.clear()
    fd = os.memfd_create("unsealed-client")
    os.ftruncate(fd, 48)
    os.pwrite(fd, np.arange(8, dtype=np.float32).tobytes(), 0)
    try:
        m = hal.Memory(name="ashmem", handle=hal.Handle(fds=[fd], ints=[]), size=48)
        req = hal.Request(inputs=[hal.RequestArgument(location=hal.DataLocation(0, 0, 16)),
                                  hal.RequestArgument(location=hal.DataLocation(0, 16, 16))],
                          outputs=[hal.RequestArgument(location=hal.DataLocation(0, 32, 16))],
                          pools=[hal.MemoryPool(hidlMemory=m)])
        for n in range(1, 4):
            os.pwrite(fd, bytes(16), 32)
            assert _run(add_pm, req) == S.NONE
            assert np.array_equal(np.frombuffer(os.pread(fd, 16, 32), np.float32), [4, 6, 8, 10])
            assert len(opened) == n
        assert len(device.pool_cache) == 0
        os.ftruncate(fd, 8)  # shrunk by the client: still judged per execution
        assert _run(add_pm, req) == S.INVALID_ARGUMENT
    finally:
        os.close(fd)


def test_a_number_that_named_an_unsealed_file_is_kept_once_it_names_a_sealed_one(device: Device, add_pm: Any,
                                                                                 pools: ipcbench.Pools) -> None:
    fd = pools.out.handle.fds[0]
    plain = os.memfd_create("unsealed-client")
    os.ftruncate(plain, 16)
    try:
        with _renumbered(fd, plain):
            assert _run(add_pm, pools.request) == S.NONE
            assert np.array_equal(np.frombuffer(os.pread(plain, 16, 0), np.float32), [4, 6, 8, 10])
            assert len(device.pool_cache) == 1  # the input pool alone
    finally:
        os.close(plain)
    for _ in range(2):  # NOTE: the first opened for the execution (sealed: not skipped next time), then kept
        view = memory.map(pools.out)
        view[:] = bytes(16)
        view.release()
        assert _run(add_pm, pools.request) == S.NONE
        pools.check()
    assert len(device.pool_cache) == 2


def test_a_memory_freed_inside_the_cache_by_the_garbage_collector() -> None:
    """A finalizer the GC runs at an allocation while this thread is inside the cache's lock (a dropped AIDL
    burst or reusable execution freeing the memories it kept) frees a memory the cache keeps: the cache
    forgets it without waiting for its own lock (it used to deadlock: the AIDL conformance run hung)."""
    import collections
    import threading

    cache = PoolCache()
    kept, victim = memory.allocate(4096), memory.allocate(4096)
    assert cache.lease(kept, False) is not None and cache.lease(victim, False) is not None

    class FreeingOnce(collections.OrderedDict):
        # NOTE: white-box: the fast path's lookup stands for "the GC ran a finalizer here"
        def get(self, key: Any, default: Any = None) -> Any:
            if victim.handle.fds:
                memory.free(victim)
            return super().get(key, default)

    cache._lru = FreeingOnce(cache._lru)
    views: list = []
    t = threading.Thread(target=lambda: views.extend(cache.kept_views((cache_key(kept, False),))), daemon=True)
    t.start()
    t.join(30)
    assert not t.is_alive(), "the cache waited for its own lock"  # NOTE: (then freeing kept would wait too)
    try:
        assert views and views[0] is not None and len(cache) == 1  # NOTE: the freed memory forgotten
    finally:
        views.clear()
        memory.free(kept)


def test_a_mapping_freed_by_the_garbage_collector_while_the_fast_path_leases_it(monkeypatch: Any) -> None:
    """A finalizer the GC runs at any allocation inside the lock-free fast path (a dropped reusable
    execution freeing its duplicate of the very memory being leased) closes the mapping: the fast path
    then answers a miss or a view that stays usable, never a view of a released mapping (a slice whose
    allocation ran the collection that closed its source was one: the execution failed with
    GENERAL_FAILURE, "operation forbidden on released memoryview object", in one conformance run of a
    few hundred)."""
    from nnhal.driver import pool_cache

    m = memory.allocate(4096)
    cache = PoolCache()
    key = cache_key(m, False)
    st = os.fstat(m.handle.fds[0])
    # NOTE: white-box: fstat's result (a tracked object, freed at once) left out of the allocation count, so
    # that the collection can fall on the slice itself
    monkeypatch.setattr(pool_cache, "_fstat", lambda fd: st)
    threshold = gc.get_threshold()
    inside = []
    try:
        for k in range(61):  # NOTE: the collection at each allocation from here in turn (3.11: k = 23 hit the slice)
            gc.collect()
            assert cache.lease(m, False) is not None
            dup = memory.dup(m)

            class Cycle:
                def __del__(self, dup: hal.Memory = dup, k: int = k) -> None:
                    memory.free(dup)  # NOTE: the cache forgets the file: its mapping closed
                    inside.append(k)

            gc.disable()
            c = Cycle()
            c.self = c  # type: ignore[attr-defined]
            del c  # NOTE: garbage now, freed by the next collection
            ballast = [[] for _ in range(k)]
            gc.set_threshold(60)
            gc.enable()
            view = cache.kept_views((key,))[0]
            gc.set_threshold(*threshold)
            if view is not None:
                assert len(view) == 4096 and bytes(view[:1]) == b"\0", k  # NOTE: raises on a released view
            del ballast, view
            memory.free(dup)
    finally:
        gc.set_threshold(*threshold)
        gc.enable()
        cache.clear()
        memory.free(m)
    assert inside, "the collection never ran inside the fast path"
