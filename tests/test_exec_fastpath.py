"""The lean per-execution path (issue 7, ``nnhal bench --ipc``): the
specialized by-value copy of a request, the service's no-copy entry points,
and request pools read with pread/pwrite below ``memory.MAP_MIN_BYTES``
behave exactly as the general paths they replace."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

import nnhal
from nnhal import hal, memory
from nnhal.engine.validation import ValidationError, own_copy, own_request, request_from_key, request_key
from nnhal.tools import ipcbench

S = hal.ErrorStatus
NO = hal.MeasureTiming.NO


def _request() -> hal.Request:
    mem = hal.Memory(name="ashmem", handle=hal.Handle(fds=[5], ints=[]), size=48)
    return hal.Request(
        inputs=[hal.RequestArgument(False, hal.DataLocation(0, 0, 16), [4]),
                hal.RequestArgument(False, hal.DataLocation(0, 16, 16), [])],
        outputs=[hal.RequestArgument(False, hal.DataLocation(0, 32, 16), [])],
        pools=[hal.MemoryPool(hidlMemory=mem), hal.MemoryPool(token=7)])


def test_own_request_is_a_deep_copy_equal_to_own_copy() -> None:
    req = _request()
    mine = own_request(req)
    assert mine == own_copy(req) == req
    # nothing shared that the client could change afterwards
    req.inputs[0].location.offset = 99
    req.inputs[0].dimensions.append(3)
    req.inputs.append(req.inputs[0])
    req.pools[0].hidlMemory.handle.fds[0] = 9
    req.pools[0].hidlMemory.size = 4096
    req.pools[1].token = 8
    assert mine == _request()


@pytest.mark.parametrize("odd", [
    hal.Request(inputs=[hal.RequestArgument(dimensions=[np.int64(2)])]),  # numpy ints in the dimensions
    hal.Request(inputs=(hal.RequestArgument(),)),  # a tuple
    hal.Request(pools=[None, 3, hal.MemoryPool(hidlMemory=hal.Memory(size=np.uint32(4)))]),
    hal.Request(outputs=[hal.RequestArgument(location=hal.DataLocation(offset=-1))]),
])
def test_own_request_takes_odd_requests_the_generic_way(odd: hal.Request) -> None:
    assert own_request(odd) == own_copy(odd)


def test_own_request_of_a_hostile_object_is_a_validation_error() -> None:
    class Bad:
        def __deepcopy__(self, memo: object) -> None:
            raise RuntimeError("no")

    with pytest.raises(ValidationError):
        own_request(hal.Request(inputs=[Bad()]))


def test_service_entry_points_do_not_copy_but_public_ones_do(monkeypatch: pytest.MonkeyPatch) -> None:
    from nnhal.driver import prepared_model

    pm = ipcbench.prepare(nnhal.get_device("sample-all"), ipcbench.add_model())
    pools = ipcbench.Pools()
    copies: list[Any] = []

    def counting_copy(r: hal.Request) -> hal.Request:
        copies.append(r)
        return own_request(r)

    def counting_rebuild(key: tuple) -> hal.Request:
        copies.append(key)
        return request_from_key(key)

    # NOTE: a public call copies the request, by own_request or (plain HAL classes) by
    # rebuilding it from its key (the validated-request memo); the owned entry points copy nothing
    monkeypatch.setattr(prepared_model, "own_request", counting_copy)
    monkeypatch.setattr(prepared_model, "request_from_key", counting_rebuild)
    try:
        req = pools.request
        assert pm.executeSynchronously_1_3(req, NO, None, None)[0] == S.NONE
        assert copies == [request_key(req)]
        status, shapes, _ = pm.executeSynchronously_1_3_owned(req, NO, None, None)
        assert status == S.NONE and shapes[0].dimensions == [4]
        cb = hal.ExecutionCallback()
        assert pm.execute_1_3_owned(req, NO, None, None, cb) == S.NONE
        assert cb.wait(30)[0] == S.NONE
        pools.check()
        assert copies == [request_key(req)]  # the owned entry points copied nothing
        # a 1.0 request given to the owned entry point is still upgraded (and copied)
        assert pm.executeSynchronously_1_3_owned(object(), NO, None, None)[0] == S.INVALID_ARGUMENT
    finally:
        pools.close()


@pytest.mark.parametrize("size", [64, memory.MAP_MIN_BYTES])
def test_request_pools_below_the_threshold_are_not_mapped(size: int) -> None:
    m = memory.allocate(size)
    try:
        assert memory.shrink_sealed(m)
        with memory.open_pool(m, writable=True) as p:
            assert isinstance(p, memory.MappedPool)  # the default: zero copy
        with memory.open_pool(m, writable=True, map_min_bytes=memory.MAP_MIN_BYTES) as p:
            small = size < memory.MAP_MIN_BYTES
            assert isinstance(p, memory.FdPool if small else memory.MappedPool)
            p.view[0:4] = b"abcd"
            assert bytes(p.view[0:4]) == b"abcd"
            with memory.MappedPool(m) as q:
                assert bytes(q.view[0:4]) == b"abcd"  # the same shared bytes
    finally:
        memory.free(m)


def test_an_unsealed_small_pool_that_shrinks_is_an_error_not_a_write_elsewhere() -> None:
    fd = os.memfd_create("unsealed")
    os.ftruncate(fd, 64)
    m = hal.Memory(name="ashmem", handle=hal.Handle(fds=[fd]), size=64)
    try:
        with memory.open_pool(m, writable=True, map_min_bytes=memory.MAP_MIN_BYTES) as p:
            assert isinstance(p, memory.FdPool)
            os.ftruncate(fd, 8)
            with pytest.raises(memory.InvalidMemory):
                p.view[32:48] = bytes(16)
            with pytest.raises(memory.InvalidMemory):
                p.view[32:48]
            assert os.fstat(fd).st_size == 8
    finally:
        os.close(fd)


def test_a_synchronous_execution_leaves_no_garbage_cycle() -> None:
    """Everything an execution makes is freed by reference counting when it
    returns (no job closure holding itself, its pools and their views until
    the cyclic collector runs): the number of tracked objects stays flat with
    the collector off, and no descriptor is left open."""
    import gc

    pm = ipcbench.prepare(nnhal.get_device("sample-all"), ipcbench.add_model())
    pools = ipcbench.Pools()
    try:
        for _ in range(5):
            assert pm.executeSynchronously_1_3(pools.request, NO, None, None)[0] == S.NONE
        gc.collect()
        fds = len(os.listdir("/proc/self/fd"))
        gc.disable()
        try:
            before = len(gc.get_objects())
            for _ in range(200):
                assert pm.executeSynchronously_1_3(pools.request, NO, None, None)[0] == S.NONE
            grown = len(gc.get_objects()) - before
        finally:
            gc.enable()
        assert grown < 20, f"{grown} objects left behind by 200 executions"
        assert len(os.listdir("/proc/self/fd")) == fds
        pools.check()
    finally:
        pools.close()
