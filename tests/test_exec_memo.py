"""The prepared model's memo of validated request structures
(``PreparedModel._validated_request``): a request equal, value and
type, to one validated before skips validation and runs on the driver's own
copy; anything changed after a good call is validated (and its pools
checked) as if it were the first."""

from __future__ import annotations

import os
from typing import Any, Iterator

import numpy as np
import pytest

import nnhal
from nnhal import hal, memory
from nnhal.driver import prepared_model
from nnhal.engine.validation import request_from_key, request_key, validate_request
from nnhal.tools import ipcbench
from tests.driver_util import float_output, ipc_pools, sync_status

S = hal.ErrorStatus
NO = hal.MeasureTiming.NO


@pytest.fixture(scope="module")
def add_pm() -> Any:
    return ipcbench.prepare(nnhal.get_device("sample-all"), ipcbench.add_model())


@pytest.fixture
def pools() -> Iterator[ipcbench.Pools]:
    with ipc_pools() as p:
        yield p


_run = sync_status


def _output(p: ipcbench.Pools) -> np.ndarray:
    return float_output(p.out)


def test_the_key_is_exact_and_rebuilds_an_equal_unshared_request(pools: ipcbench.Pools) -> None:
    req = pools.request
    key = request_key(req)
    assert key is not None and hash(key) is not None
    copy = request_from_key(key)
    assert copy == req and request_key(copy) == key
    assert copy.inputs[0] is not req.inputs[0] and copy.pools[0].hidlMemory.handle.fds is not \
        req.pools[0].hidlMemory.handle.fds
    # values equal to a plain int but of another type have no key (validated in full every time)
    for odd in (1.0, True, np.int64(1)):
        bad = request_from_key(key)
        bad.inputs[1].location.offset = odd
        assert request_key(bad) is None
    bad = request_from_key(key)
    bad.inputs[0].hasNoValue = 0
    assert request_key(bad) is None
    bad = request_from_key(key)
    bad.inputs = tuple(bad.inputs)
    assert request_key(bad) is None


def _validations(add_pm: Any, monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, bool]]:
    """(request, allow_unspecified_output) of each validation of a request from now on (the memo emptied)."""
    calls: list[tuple[Any, bool]] = []

    def counting(request: Any, model: Any, allow: bool = True) -> None:
        calls.append((request, allow))
        validate_request(request, model, allow)

    monkeypatch.setattr(prepared_model, "validate_request", counting)
    add_pm._validated.clear()
    add_pm._last_validated = None
    return calls


def test_validation_runs_once_per_structure(add_pm: Any, pools: ipcbench.Pools,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _validations(add_pm, monkeypatch)
    req = pools.request
    for _ in range(3):
        assert _run(add_pm, req) == S.NONE
    assert len(calls) == 1 and calls[0][0] is not req  # validated once, on the driver's own copy
    pools.check()
    req.inputs[0].location.offset = 16  # a new structure: validated again
    assert _run(add_pm, req) == S.NONE
    assert len(calls) == 2


def _fenced(pm: Any, req: Any) -> Any:
    from nnhal.platform import fence

    status, sync, cb = pm.executeFenced(req, [], NO, hal.OptionalTimePoint(), hal.OptionalTimeoutDuration(),
                                        hal.OptionalTimeoutDuration())
    if status != S.NONE:
        assert sync is None and cb is None
        return status
    assert fence.sync_wait(sync, 30) == fence.FenceState.SIGNALED
    fence.close(sync)
    return cb.getExecutionInfo()[0]


def test_fenced_validation_runs_once_per_structure(add_pm: Any, pools: ipcbench.Pools,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Fenced executions of one request structure validate it once too (their own memo entry: unspecified
    outputs refused); a structure changed after a good call is validated again and refused."""
    calls = _validations(add_pm, monkeypatch)
    req = pools.request
    for _ in range(3):
        assert _fenced(add_pm, req) == S.NONE
        pools.check()
    assert [allow for _, allow in calls] == [False]
    req.inputs[1].location.offset = 24  # [24, 40) is beyond the 32-byte pool
    assert _fenced(add_pm, req) == S.INVALID_ARGUMENT
    assert _fenced(add_pm, req) == S.INVALID_ARGUMENT
    assert [allow for _, allow in calls] == [False, False, False]


@pytest.mark.parametrize("change", ["offset", "length", "pool_index", "dims", "float_offset", "no_value_int",
                                    "size", "fds", "extra_input"])
def test_a_request_changed_after_a_good_call_is_validated_again(add_pm: Any, pools: ipcbench.Pools,
                                                                change: str) -> None:
    req = pools.request
    assert _run(add_pm, req) == S.NONE
    a = req.inputs[1]
    if change == "offset":
        a.location.offset = 24  # [24, 40) is beyond the 32-byte pool
    elif change == "length":
        a.location.length = 64
    elif change == "pool_index":
        a.location.poolIndex = 2
    elif change == "dims":
        a.dimensions = [5]
    elif change == "float_offset":
        a.location.offset = 16.0  # type: ignore[assignment]
    elif change == "no_value_int":
        a.hasNoValue = 0  # type: ignore[assignment]
    elif change == "size":
        req.pools[0].hidlMemory.size = 4096  # beyond the end of the memfd
    elif change == "fds":
        req.pools[0].hidlMemory.handle.fds.append(req.pools[1].hidlMemory.handle.fds[0])
    elif change == "extra_input":
        req.inputs.append(a)
    assert _run(add_pm, req) == S.INVALID_ARGUMENT
    assert _run(add_pm, req) == S.INVALID_ARGUMENT  # and again (a rejected structure is not remembered)
    # the async path answers the same
    cb = hal.ExecutionCallback()
    assert add_pm.execute_1_3(req, NO, None, None, cb) == S.INVALID_ARGUMENT
    assert cb.wait(30)[0] == S.INVALID_ARGUMENT


def test_a_pool_closed_after_a_good_call(add_pm: Any, pools: ipcbench.Pools) -> None:
    req = pools.request
    # NOTE: a high fd number, so that no descriptor opened meanwhile (the driver's own dup of
    # another pool included) takes the number the client closed
    high = os.dup2(pools.out.handle.fds[0], 900)
    req.pools[1].hidlMemory.handle.fds = [high]
    assert _run(add_pm, req) == S.NONE
    os.close(high)  # the same request (same key), but its output fd is gone
    assert _run(add_pm, req) == S.INVALID_ARGUMENT


def test_a_pool_replaced_under_the_same_fd_number(add_pm: Any, pools: ipcbench.Pools) -> None:
    """Same request, same fd number, another file: read and written, not the old one."""
    req = pools.request
    assert _run(add_pm, req) == S.NONE
    pools.check()
    fd = pools.inp.handle.fds[0]
    other = memory.allocate(32)
    try:
        v = memory.map(other)
        v[:] = np.full(8, 2, np.float32).tobytes()
        v.release()
        os.dup2(other.handle.fds[0], fd)  # fd now names the new memory
        assert request_key(req) == request_key(pools.request)
        assert _run(add_pm, req) == S.NONE
        np.testing.assert_array_equal(_output(pools), np.full(4, 4, np.float32))
    finally:
        memory.free(other)


def test_an_unsealed_pool_shrunk_after_a_good_call(add_pm: Any) -> None:
    model_in = os.memfd_create("unsealed-in")
    out = memory.allocate(16)
    try:
        os.ftruncate(model_in, 32)
        os.pwrite(model_in, np.arange(8, dtype=np.float32).tobytes(), 0)
        inp = hal.Memory(name="ashmem", handle=hal.Handle(fds=[model_in], ints=[]), size=32)
        req = hal.Request(inputs=[hal.RequestArgument(location=hal.DataLocation(0, 0, 16)),
                                  hal.RequestArgument(location=hal.DataLocation(0, 16, 16))],
                          outputs=[hal.RequestArgument(location=hal.DataLocation(1, 0, 16))],
                          pools=[hal.MemoryPool(hidlMemory=inp), hal.MemoryPool(hidlMemory=out)])
        assert _run(add_pm, req) == S.NONE
        os.ftruncate(model_in, 8)
        assert _run(add_pm, req) == S.INVALID_ARGUMENT
    finally:
        os.close(model_in)
        memory.free(out)


def test_an_output_pool_made_read_only_after_a_good_call(add_pm: Any, pools: ipcbench.Pools) -> None:
    req = pools.request
    assert _run(add_pm, req) == S.NONE
    fd = pools.out.handle.fds[0]
    ro = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY)
    try:
        os.dup2(ro, fd)  # the same file, now through a read-only descriptor
        assert _run(add_pm, req) == S.INVALID_ARGUMENT
    finally:
        os.close(ro)


def test_the_memo_is_bounded(add_pm: Any) -> None:
    many = []
    try:
        for _ in range(2 * prepared_model._MEMO_SIZE + 1):
            p = ipcbench.Pools()  # new memories, new fd numbers: a new structure each
            many.append(p)
            assert _run(add_pm, p.request) == S.NONE
            p.check()
            assert len(add_pm._validated) <= prepared_model._MEMO_SIZE
    finally:
        for p in many:
            p.close()


def test_the_memo_copy_is_the_drivers_own(add_pm: Any, pools: ipcbench.Pools) -> None:
    """An execution launched asynchronously runs the request as it was at the
    call, whatever the client changes once the call returned."""
    req = pools.request
    assert _run(add_pm, req) == S.NONE
    cb = hal.ExecutionCallback()
    assert add_pm.execute_1_3(req, NO, None, None, cb) == S.NONE
    req.outputs[0].location.offset = 8  # after the call: reaches nothing
    req.inputs[0].location.offset = 16
    assert cb.wait(30)[0] == S.NONE
    pools.check()


# ---------------------------------------------------------------------------
# inputs read by the backend itself (PoolInput, litert-cpu)


def _unsealed(data: bytes) -> tuple[int, hal.Memory]:
    fd = os.memfd_create("unsealed")
    os.ftruncate(fd, len(data))
    os.pwrite(fd, data, 0)
    return fd, hal.Memory(name="ashmem", handle=hal.Handle(fds=[fd], ints=[]), size=len(data))


def test_a_pool_input_reads_straight_into_a_buffer_and_fails_cleanly_once_shrunk() -> None:
    from nnhal.driver.execution import PoolInput

    x = np.arange(8, dtype=np.float32)
    fd, mem = _unsealed(x.tobytes())
    try:
        with memory.open_pool(mem, writable=False, map_min_bytes=memory.MAP_MIN_BYTES) as pool:
            assert isinstance(pool, memory.FdPool)
            inp = PoolInput(pool.view, 16, (2, 2), np.dtype(np.float32), 16)
            np.testing.assert_array_equal(inp.array(), x[4:].reshape(2, 2))
            buf = np.zeros(4, np.float32)
            inp.read_into(memoryview(buf).cast("B"))
            np.testing.assert_array_equal(buf, x[4:])
            os.ftruncate(fd, 8)
            with pytest.raises(memory.InvalidMemory):
                inp.read_into(memoryview(buf).cast("B"))
    finally:
        os.close(fd)


def test_a_backend_that_cannot_read_its_pool_input_answers_invalid_argument(add_pm: Any,
                                                                            pools: ipcbench.Pools) -> None:
    """The front end maps a PoolInput read failure inside the backend to
    INVALID_ARGUMENT, as when it reads an input itself."""
    from nnhal.driver.execution import RequestPlan, RequestPools, run_request

    class Reader:
        reads_inputs = True

        def run(self, inputs: list, deadline_ns: Any = None, loop_timeout_ns: int = 0, omitted: Any = ()) -> list:
            raise memory.InvalidMemory("shrunk")

    req = pools.request
    rp = RequestPools(req)
    try:
        res = run_request(add_pm.model, Reader(), req, rp, NO, None, 0, 0, RequestPlan(add_pm.model, req))
    finally:
        rp.close()
    assert res.status == S.INVALID_ARGUMENT


def test_a_request_plan_proves_plain_inputs_once(add_pm: Any, pools: ipcbench.Pools) -> None:
    """RequestPlan.simple_inputs: what each execution of a remembered request reads of its inputs, only
    when every input is present, of a known non-boolean dtype and fits its location; else None (the
    general path checks each input, every execution)."""
    from nnhal.driver.execution import RequestPlan

    req = pools.request
    plan = RequestPlan(add_pm.model, req)
    f32 = np.dtype(np.float32)
    assert plan.simple_inputs == [(0, 0, (4,), f32, 16), (0, 16, (4,), f32, 16)]
    short = request_from_key(request_key(req))
    short.inputs[1].location.length = 12
    assert RequestPlan(add_pm.model, short).simple_inputs is None
    assert _run(add_pm, short) == S.INVALID_ARGUMENT  # validation, or the general path's check
    omitted = request_from_key(request_key(req))
    omitted.inputs[0].hasNoValue = True
    assert RequestPlan(add_pm.model, omitted).simple_inputs is None


class _Capture:
    """A backend's compiled model that reads its inputs itself: records what it is given."""

    reads_inputs = True

    def __init__(self) -> None:
        self.seen: list = []

    def run(self, inputs: list, deadline_ns: Any = None, loop_timeout_ns: int = 0, omitted: Any = ()) -> list:
        from nnhal.driver.execution import PoolInput

        self.seen = [(type(x), bytes(x.array() if isinstance(x, PoolInput) else x)) for x in inputs]
        return [np.zeros(4, np.float32)]


@pytest.mark.parametrize("kept", [True, False])
def test_a_backend_reading_its_inputs_gets_arrays_over_mapped_pools(add_pm: Any, pools: ipcbench.Pools,
                                                                    kept: bool) -> None:
    """A memory the device keeps mapped: arrays over the pool's bytes (no PoolInput, no copy of ours); a
    memory opened for the execution (read with pread): PoolInputs."""
    from nnhal.driver.execution import PoolInput, RequestPlan, RequestPools, run_request

    req = pools.request
    plan = RequestPlan(add_pm.model, req)
    cache = add_pm.device.pool_cache if kept else None
    rp = RequestPools(req, None, cache, plan.out_pools, plan.pool_keys if kept else None)
    backend = _Capture()
    try:
        assert run_request(add_pm.model, backend, req, rp, NO, None, 0, 0, plan).status == S.NONE
    finally:
        rp.close()
    want = np.arange(8, dtype=np.float32).tobytes()
    assert [b for _, b in backend.seen] == [want[:16], want[16:]]
    assert {t for t, _ in backend.seen} == ({np.ndarray} if kept else {PoolInput})


def test_litert_reads_pool_inputs_into_its_tensors() -> None:
    from nnhal.drivers import litert

    if not litert.available():
        pytest.skip("ai-edge-litert not installed")
    pm = ipcbench.prepare(nnhal.get_device("litert-cpu"), ipcbench.add_model())
    assert getattr(pm.executor, "reads_inputs", False)
    p = ipcbench.Pools()
    try:
        for _ in range(3):
            assert _run(pm, p.request) == S.NONE
            p.check()
        fd, mem = _unsealed(np.full(8, 3, np.float32).tobytes())
        try:
            p.request.pools[0] = hal.MemoryPool(hidlMemory=mem)  # unsealed: read with pread
            assert _run(pm, p.request) == S.NONE
            np.testing.assert_array_equal(_output(p), np.full(4, 6, np.float32))
            from nnhal.driver.execution import PoolInput

            with memory.open_pool(mem, writable=False, map_min_bytes=memory.MAP_MIN_BYTES) as pool:
                os.ftruncate(fd, 8)  # shrunk: refused at launch, never read
                assert _run(pm, p.request) == S.INVALID_ARGUMENT
                # shrunk between the launch and the read: the interpreter lets the error through
                inp = PoolInput(pool.view, 0, (4,), np.dtype(np.float32), 16)
                with pytest.raises(memory.InvalidMemory):
                    pm.executor.run([inp, inp])
            p.request.pools[0] = hal.MemoryPool(hidlMemory=p.inp)
            assert _run(pm, p.request) == S.NONE  # the interpreter is fine afterwards
            p.check()
        finally:
            os.close(fd)
    finally:
        p.close()


def test_a_closed_pool_descriptor_never_names_the_drivers_duplicate(add_pm: Any, pools: ipcbench.Pools) -> None:
    """The client closes its output descriptor (a low number) before the call: the driver's own
    duplicate of the input pool, made first, must not take that number and receive the output."""
    req = pools.request
    before = bytes(memory.map(pools.inp))
    out_fd = req.pools[1].hidlMemory.handle.fds[0]
    moved = os.dup(out_fd)
    os.close(out_fd)  # now the lowest free number, probably
    try:
        assert _run(add_pm, req) == S.INVALID_ARGUMENT
        assert bytes(memory.map(pools.inp)) == before  # nothing written into the input pool
    finally:
        os.dup2(moved, out_fd)
        os.close(moved)
    assert _run(add_pm, req) == S.NONE
