"""Memory domains (IDevice.allocate, IBuffer, request token pools) and non-BLOB
hardware buffers, as VTS's MemoryDomainTests and the memory-domain guide
describe them, plus the unknown-shape buffers and the concurrency semantics
of driver/buffers.py."""

from __future__ import annotations

import gc
import logging
import math
import mmap
import os
import threading
from typing import Any, Optional, Sequence

import numpy as np
import pytest

import nnhal
from nnhal import hal
from nnhal import memory as M
from nnhal.drivers.sample import sample_device
from tests.driver_util import Builder, execute_async, execute_sync, make_model, prepared_model

S = hal.ErrorStatus
T = hal.OperandType
OT = hal.OperationType

DIMS = [1, 32, 32, 8]  # VTS's kTestOperand
TYPES = {  # type: (numpy dtype, scale, zeroPoint)
    T.TENSOR_FLOAT32: (np.float32, 0.0, 0),
    T.TENSOR_FLOAT16: (np.float16, 0.0, 0),
    T.TENSOR_QUANT8_ASYMM: (np.uint8, 0.5, 128),
    T.TENSOR_QUANT8_ASYMM_SIGNED: (np.int8, 0.5, 0),
}
BAD = (S.INVALID_ARGUMENT, S.GENERAL_FAILURE)


def dev() -> Any:
    return nnhal.get_device("sample-all")


def twice_model(t: T = T.TENSOR_FLOAT32, dims: Sequence[int] = DIMS, n: int = 1, out_dims: Optional[Sequence] = None,
                scale: Optional[float] = None, zp: Optional[int] = None) -> hal.Model:
    """n inputs, n outputs: out_i = in_i + in_i (ADD, no activation)."""
    _, s0, z0 = TYPES[t]
    s0 = s0 if scale is None else scale
    z0 = z0 if zp is None else zp
    b = Builder()
    ins = [b.input(t, dims, scale=s0, zp=z0) for _ in range(n)]
    act = b.i32(0)
    for i in ins:
        out = b.output(t, dims if out_dims is None else out_dims, scale=s0, zp=z0)
        b.op(OT.ADD, [i, i, act], [out])
    return make_model(b)


_PREPARED: dict = {}


def twice(t: T = T.TENSOR_FLOAT32, dims: Sequence[int] = DIMS, n: int = 1, fresh: bool = False, **kw: Any) -> Any:
    key = (t, tuple(dims), n, tuple(sorted(kw.items())))
    if fresh or key not in _PREPARED:
        pm = prepared_model(twice_model(t, dims, n, **kw))
        if fresh:
            return pm
        _PREPARED[key] = pm
    return _PREPARED[key]


def role(i: int = 0, model: int = 0, f: float = 1.0) -> hal.BufferRole:
    return hal.BufferRole(modelIndex=model, ioIndex=i, frequency=f)


def allocate(pm: Any, ins: Sequence[int] = (0,), outs: Sequence[int] = (0,), dims: Sequence[int] = (),
             device: Any = None) -> tuple[Any, int]:
    status, buf, token = (device or dev()).allocate(hal.BufferDesc(dimensions=list(dims)), [pm],
                                                   [role(i) for i in ins], [role(i) for i in outs])
    assert status == S.NONE and buf is not None and token > 0, (status, buf, token)
    return buf, token


def shared(data: Any = None, size: int = 0, kind: str = "ashmem") -> hal.Memory:
    raw = b"" if data is None else np.ascontiguousarray(data).tobytes()
    mem = M.allocate(max(size or len(raw), 1), kind)
    if raw:
        view = M.map(mem)
        view[: len(raw)] = raw
        view.release()
    return mem


def read(mem: hal.Memory, dtype: Any, shape: Sequence[int]) -> np.ndarray:
    view = M.map(mem)
    raw = bytes(view)
    view.release()
    n = int(np.prod(shape))
    return np.frombuffer(raw, dtype=dtype, count=n).reshape(shape)


def value(t: T = T.TENSOR_FLOAT32, dims: Sequence[int] = DIMS, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dt = TYPES[t][0]
    if np.dtype(dt).kind == "f":
        return rng.uniform(-4, 4, dims).astype(dt)
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max, dims, endpoint=True).astype(dt)


def nbytes(t: T, dims: Sequence[int] = DIMS) -> int:
    return int(np.prod(dims)) * np.dtype(TYPES[t][0]).itemsize


def arg(pool: int, offset: int = 0, length: int = 0, dims: Sequence[int] = ()) -> hal.RequestArgument:
    return hal.RequestArgument(location=hal.DataLocation(pool, offset, length), dimensions=list(dims))


def request(ins: list, outs: list, pools: list) -> hal.Request:
    return hal.Request(inputs=ins, outputs=outs,
                       pools=[hal.MemoryPool(token=p) if isinstance(p, (int, np.integer)) else hal.MemoryPool(hidlMemory=p)
                              for p in pools])


def execute_fenced(pm: Any, req: hal.Request) -> S:
    status, sync_fence, callback = pm.executeFenced(req, [], hal.MeasureTiming.NO, hal.OptionalTimePoint(),
                                                    hal.OptionalTimeoutDuration(), hal.OptionalTimeoutDuration())
    if status != S.NONE:
        assert sync_fence is None and callback is None
        return status
    if sync_fence is not None and sync_fence.fds:
        from nnhal import fence

        fence.sync_wait(sync_fence, 30.0)  # NOTE: as VTS: the execution info once the fence signals
    st, launched, fenced = callback.getExecutionInfo()
    return st


def run(pm: Any, req: hal.Request, how: str = "sync") -> tuple:
    """(status, shapes) through one execution path."""
    if how == "sync":
        status, shapes, _ = execute_sync(pm, req)
    elif how == "async":
        _, status, shapes, _ = execute_async(pm, req)
    else:
        return execute_fenced(pm, req), None
    if status not in (S.NONE, S.OUTPUT_INSUFFICIENT_SIZE):
        assert shapes == []
    return status, shapes


PATHS = ("sync", "async", "fenced")


def initialize(buf: Any, t: T = T.TENSOR_FLOAT32, dims: Sequence[int] = DIMS, data: Any = None) -> np.ndarray:
    data = value(t, dims) if data is None else data
    mem = shared(data)
    try:
        assert buf.copyFrom(mem, list(dims)) == S.NONE
    finally:
        M.free(mem)
    return data


def copy_out(buf: Any, t: T = T.TENSOR_FLOAT32, dims: Sequence[int] = DIMS) -> np.ndarray:
    mem = M.allocate(nbytes(t, dims))
    try:
        assert buf.copyTo(mem) == S.NONE
        return read(mem, TYPES[t][0], dims)
    finally:
        M.free(mem)


def test_combine_dims() -> None:
    from nnhal.driver.buffers import combine_dims

    assert combine_dims([], []) == []
    assert combine_dims([], [0, 3]) == [0, 3]
    assert combine_dims([2, 0], [0, 3]) == [2, 3]
    assert combine_dims([2, 3], [2, 3]) == [2, 3]
    assert combine_dims([2, 3], [3, 3]) is None
    assert combine_dims([2, 3], [2, 3, 1]) is None


# --------------------------------------------------------------------------
# allocate


@pytest.mark.parametrize("t", list(TYPES))
def test_allocate_gives_a_buffer_and_unique_positive_tokens(t: T) -> None:
    pm = twice(t)
    got = [allocate(pm) for _ in range(5)]
    tokens = [tok for _, tok in got]
    assert len(set(tokens)) == 5 and all(0 < tok < 2**32 for tok in tokens)
    assert all(isinstance(b, hal.IBuffer) for b, _ in got)


def _refused(result: tuple) -> None:
    status, buf, token = result
    assert status in BAD and buf is None and token == 0, result


@pytest.mark.parametrize("t", list(TYPES))
def test_allocate_refuses_what_vts_refuses(t: T, caplog: pytest.LogCaptureFixture) -> None:
    d = dev()
    pm = twice(t)
    pm2 = twice(t, n=2)
    desc = hal.BufferDesc()
    other_device_pm = prepared_model(twice_model(t), sample_device("another-device"))
    cases = {
        "no roles": (desc, [pm], [], []),
        "no prepared models": (desc, [], [role()], []),
        "null prepared model": (desc, [None], [role()], []),
        "not a prepared model": (desc, [object()], [role()], []),
        "foreign prepared model": (desc, [other_device_pm], [role()], []),
        "modelIndex out of range": (desc, [pm], [role(0, model=1)], []),
        "input ioIndex out of range": (desc, [pm], [role(1)], []),
        "output ioIndex out of range": (desc, [pm], [], [role(1)]),
        "frequency 0": (desc, [pm], [role(f=0.0)], []),
        "frequency negative": (desc, [pm], [role(f=-0.5)], []),
        "frequency above 1": (desc, [pm], [role(f=1.5)], []),
        "frequency NaN": (desc, [pm], [role(f=math.nan)], []),
        "same input role twice": (desc, [pm], [role(0), role(0)], []),
        "same output role twice": (desc, [pm2], [], [role(1), role(1)]),
        "same role twice through two model indexes": (desc, [pm, pm], [role(0), role(0, model=1)], []),
        "rank conflicts with desc": (hal.BufferDesc(dimensions=[1, 32, 32]), [pm], [role()], []),
        "dimension conflicts with desc": (hal.BufferDesc(dimensions=[2, 32, 32, 8]), [pm], [role()], []),
        "not a BufferDesc": (None, [pm], [role()], []),
        "roles not a list": (desc, [pm], None, []),
    }
    for name, args in cases.items():
        caplog.clear()
        with caplog.at_level(logging.ERROR, logger="nnhal"):
            _refused(d.allocate(*args))
        assert any("allocate" in r.getMessage() for r in caplog.records), name


@pytest.mark.parametrize("t", list(TYPES))
def test_allocate_refuses_roles_that_conflict(t: T) -> None:
    d = dev()
    dt, s0, z0 = TYPES[t]
    base = twice(t)
    other_type = twice(T.TENSOR_FLOAT32 if t != T.TENSOR_FLOAT32 else T.TENSOR_FLOAT16)
    conflicts = [other_type, twice(t, dims=[1, 32, 32]), twice(t, dims=[2, 32, 32, 8])]
    if s0:
        conflicts += [twice(t, scale=s0 * 2), twice(t, zp=z0 + 1)]
    for other in conflicts:
        _refused(d.allocate(hal.BufferDesc(), [base, other], [role(0), role(0, model=1)], []))
        _refused(d.allocate(hal.BufferDesc(), [base, other], [role(0)], [role(0, model=1)]))


def test_allocate_refuses_dimensions_on_a_scalar_role() -> None:
    b = Builder()
    x = b.input(T.TENSOR_FLOAT32, [2])
    s = b.input(T.INT32, [])
    out = b.output(T.TENSOR_FLOAT32, [2])
    b.op(OT.ADD, [x, x, s], [out])
    pm = prepared_model(make_model(b))
    _refused(dev().allocate(hal.BufferDesc(dimensions=[1]), [pm], [role(1)], []))
    buf, token = allocate(pm, ins=[1], outs=[], dims=[])  # a scalar buffer is fine
    assert buf.copyFrom(shared(np.int32(0)), [1]) == S.INVALID_ARGUMENT
    x = np.array([-1.5, 2.0], np.float32)
    src, out = shared(x), shared(size=8)
    req = request([arg(0, 0, 8), arg(2)], [arg(1, 0, 8)], [src, out, token])
    assert run(pm, req)[0] == S.GENERAL_FAILURE  # uninitialized
    assert buf.copyFrom(shared(np.int32(1)), []) == S.NONE  # the activation: RELU
    assert run(pm, req)[0] == S.NONE
    np.testing.assert_array_equal(read(out, np.float32, [2]), [0.0, 4.0])


def test_allocate_refuses_junk_without_raising() -> None:
    d, pm = dev(), twice()
    for junk in (None, 1, "x", [None], [1.5], {}, -1, 2**40):
        _refused(d.allocate(junk, junk, junk, junk))
        _refused(d.allocate(hal.BufferDesc(dimensions=[junk]), [pm], [role()], []))
        _refused(d.allocate(hal.BufferDesc(), [pm], [hal.BufferRole(modelIndex=junk, ioIndex=0, frequency=1.0)], []))
        _refused(d.allocate(hal.BufferDesc(), [pm], [hal.BufferRole(modelIndex=0, ioIndex=junk, frequency=1.0)], []))
        if junk != 1:  # NOTE: frequency 1 is valid
            _refused(d.allocate(hal.BufferDesc(), [pm], [hal.BufferRole(modelIndex=0, ioIndex=0, frequency=junk)],
                                []))


def test_allocate_with_compatible_roles_of_several_models() -> None:
    a, b = twice(dims=[0, 32, 32, 8]), twice(dims=[1, 0, 32, 8])
    status, buf, token = dev().allocate(hal.BufferDesc(dimensions=[0, 32, 0, 8]), [a, b], [role(0)],
                                        [role(0, model=1)])
    assert status == S.NONE and token > 0
    # the combined dimensions [1, 32, 32, 8] are fully specified: copyFrom may omit them
    assert buf.copyFrom(shared(value()), []) == S.NONE


# --------------------------------------------------------------------------
# copyFrom / copyTo


@pytest.mark.parametrize("t", list(TYPES))
@pytest.mark.parametrize("kind", ["ashmem", "mmap_fd", "hardware_buffer_blob"])
def test_copy_round_trip(t: T, kind: str) -> None:
    buf, _ = allocate(twice(t))
    data = value(t)
    src = shared(data, kind=kind)
    assert buf.copyFrom(src, []) == S.NONE
    dst = M.allocate(nbytes(t), kind)
    assert buf.copyTo(dst) == S.NONE
    np.testing.assert_array_equal(read(dst, TYPES[t][0], DIMS), data)
    M.free(src)
    M.free(dst)


def test_copies_read_and_write_the_client_memory_without_mapping_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy touches the client's memory once: pread / pwrite, no mapping made and torn down per copy."""
    from nnhal.platform import memory as platform_memory

    buf, _ = allocate(twice())
    data = value(next(iter(TYPES)))
    src = shared(data)
    dst = M.allocate(src.size)
    maps: list = []
    real = platform_memory.map_fd
    monkeypatch.setattr(platform_memory, "map_fd", lambda *a, **k: maps.append(a) or real(*a, **k))
    assert buf.copyFrom(src, []) == S.NONE and buf.copyTo(dst) == S.NONE
    assert maps == []
    monkeypatch.undo()
    np.testing.assert_array_equal(read(dst, TYPES[next(iter(TYPES))][0], DIMS), data)
    M.free(src)
    M.free(dst)


def test_copy_with_an_mmap_fd_offset() -> None:
    buf, _ = allocate(twice())
    data = value()
    src = M.allocate(data.nbytes, "mmap_fd", offset=12288)
    view = M.map(src)
    view[:] = data.tobytes()
    view.release()
    assert buf.copyFrom(src, DIMS) == S.NONE
    np.testing.assert_array_equal(copy_out(buf), data)


@pytest.mark.parametrize("t", list(TYPES))
def test_copy_from_wrong_size_or_dimensions(t: T) -> None:
    buf, _ = allocate(twice(t))
    n = nbytes(t)
    for size in (n // 2, n * 2, n - 1):
        assert buf.copyFrom(shared(size=size), []) == S.INVALID_ARGUMENT
    good = shared(size=n)
    for dims in ([1, 32, 32], [2, 32, 32, 8], [0, 32, 32, 8], [1, 32, 32, 8, 1]):
        assert buf.copyFrom(good, dims) == S.INVALID_ARGUMENT
    assert buf.copyFrom(good, []) == S.NONE
    assert buf.copyFrom(good, DIMS) == S.NONE


@pytest.mark.parametrize("t", list(TYPES))
def test_copy_dynamic_shape(t: T) -> None:
    buf, _ = allocate(twice(t, dims=[0, 32, 32, 8]))
    n = nbytes(t)
    assert buf.copyFrom(shared(size=n), []) == S.INVALID_ARGUMENT  # the buffer's dimensions are not known
    for size in (n // 2, n * 2):
        assert buf.copyFrom(shared(size=size), DIMS) == S.INVALID_ARGUMENT
    assert buf.copyFrom(shared(size=n), [2, 32, 32, 8]) == S.INVALID_ARGUMENT  # size of [1, ...], dims [2, ...]
    assert buf.copyFrom(shared(size=n), [1, 32, 32, 4]) == S.INVALID_ARGUMENT  # a fixed axis
    assert buf.copyFrom(shared(size=n), [1, 32, 32, 0]) == S.INVALID_ARGUMENT
    assert buf.copyFrom(shared(size=n), DIMS) == S.NONE
    # a new shape, and copyTo's size follows it
    data = value(t, [3, 32, 32, 8])
    assert buf.copyFrom(shared(data), [3, 32, 32, 8]) == S.NONE
    assert buf.copyTo(M.allocate(n)) == S.INVALID_ARGUMENT
    np.testing.assert_array_equal(copy_out(buf, t, [3, 32, 32, 8]), data)


@pytest.mark.parametrize("t", list(TYPES))
def test_copy_to_uninitialized_or_wrong_size(t: T) -> None:
    buf, _ = allocate(twice(t))
    n = nbytes(t)
    assert buf.copyTo(M.allocate(n)) == S.GENERAL_FAILURE
    initialize(buf, t)
    for size in (n // 2, n * 2):
        assert buf.copyTo(M.allocate(size)) == S.INVALID_ARGUMENT
    assert buf.copyTo(M.allocate(n)) == S.NONE


def test_failed_copy_from_leaves_the_buffer_uninitialized() -> None:
    buf, _ = allocate(twice())
    initialize(buf)
    assert buf.copyFrom(shared(size=10), []) == S.INVALID_ARGUMENT
    assert buf.copyTo(M.allocate(nbytes(T.TENSOR_FLOAT32))) == S.GENERAL_FAILURE


def test_copy_with_invalid_memories() -> None:
    buf, _ = allocate(twice())
    data = initialize(buf)
    n = data.nbytes
    read_only = M.from_fd(shared(size=n).handle.fds[0], n, 0, M.PROT_READ)
    assert buf.copyTo(read_only) == S.INVALID_ARGUMENT
    closed = shared(size=n)
    M.free(closed)
    closed.handle.fds = [999_999]
    for junk in (closed, None, 1, hal.Memory(name="nope", size=n), hal.Memory(name="ashmem", size=n)):
        assert buf.copyTo(junk) == S.INVALID_ARGUMENT
    np.testing.assert_array_equal(copy_out(buf), data)  # nothing above touched the content
    for junk in (closed, None, hal.Memory(name="ashmem", size=n)):
        assert buf.copyFrom(junk, []) == S.INVALID_ARGUMENT
    assert buf.copyFrom(shared(size=n), None) == S.INVALID_ARGUMENT
    assert buf.copyFrom(shared(size=n), [-1, 32, 32, 8]) == S.INVALID_ARGUMENT


# --------------------------------------------------------------------------
# executions


def _io_pools(t: T = T.TENSOR_FLOAT32, dims: Sequence[int] = DIMS) -> hal.Memory:
    return shared(size=nbytes(t, dims))


@pytest.mark.parametrize("how", PATHS)
def test_execution_invalid_tokens(how: str) -> None:
    pm = twice()
    n = nbytes(T.TENSOR_FLOAT32)
    mem = _io_pools()
    for token in (0, 100_000_000, 2**32 - 1):
        assert run(pm, request([arg(1)], [arg(0, 0, n)], [mem, token]), how)[0] == S.INVALID_ARGUMENT
        assert run(pm, request([arg(0, 0, n)], [arg(1)], [mem, token]), how)[0] == S.INVALID_ARGUMENT


@pytest.mark.parametrize("how", PATHS)
def test_execution_with_a_prepared_model_the_buffer_was_not_allocated_for(how: str) -> None:
    pm = twice()
    buf, token = allocate(pm)
    other = twice(fresh=True)
    n = nbytes(T.TENSOR_FLOAT32)
    initialize(buf)
    mem = _io_pools()
    assert run(other, request([arg(1)], [arg(0, 0, n)], [mem, token]), how)[0] == S.INVALID_ARGUMENT
    assert run(other, request([arg(0, 0, n)], [arg(1)], [mem, token]), how)[0] == S.INVALID_ARGUMENT
    assert run(pm, request([arg(1)], [arg(0, 0, n)], [mem, token]), how)[0] == S.NONE
    assert run(pm, request([arg(1)], [arg(0, 0, n)], [mem, np.uint32(token)]), how)[0] == S.NONE


@pytest.mark.parametrize("how", PATHS)
def test_execution_with_an_unallocated_role(how: str) -> None:
    pm = twice(n=2)
    buf, token = allocate(pm, ins=[0], outs=[])
    initialize(buf)
    n = nbytes(T.TENSOR_FLOAT32)
    m = [_io_pools() for _ in range(3)]
    a = [arg(k, 0, n) for k in range(3)]
    assert run(pm, request([a[0], arg(3)], [a[1], a[2]], [*m, token]), how)[0] == S.INVALID_ARGUMENT
    assert run(pm, request([a[0], a[1]], [a[2], arg(3)], [*m, token]), how)[0] == S.INVALID_ARGUMENT
    assert run(pm, request([arg(3), a[1]], [a[0], a[2]], [*m, token]), how)[0] == S.NONE


@pytest.mark.parametrize("how", PATHS)
def test_execution_with_the_wrong_io_type(how: str) -> None:
    pm = twice()
    in_buf, in_token = allocate(pm, ins=[0], outs=[])
    out_buf, out_token = allocate(pm, ins=[], outs=[0])
    n = nbytes(T.TENSOR_FLOAT32)
    mem = _io_pools()
    assert run(pm, request([arg(0, 0, n)], [arg(1)], [mem, in_token]), how)[0] == S.INVALID_ARGUMENT
    initialize(out_buf)
    assert run(pm, request([arg(1)], [arg(0, 0, n)], [mem, out_token]), how)[0] == S.INVALID_ARGUMENT


@pytest.mark.parametrize("t", list(TYPES))
@pytest.mark.parametrize("how", PATHS)
def test_uninitialized_buffer_then_written_by_an_execution(t: T, how: str) -> None:
    pm = twice(t)
    buf, token = allocate(pm)
    n = nbytes(t)
    data = value(t)
    mem = shared(data)
    reading = request([arg(1)], [arg(0, 0, n)], [mem, token])
    assert run(pm, reading, how)[0] == S.GENERAL_FAILURE
    assert run(pm, request([arg(0, 0, n)], [arg(1)], [mem, token]), how)[0] == S.NONE  # initializes it
    first = copy_out(buf, t)
    assert run(pm, reading, how)[0] == S.NONE
    if t == T.TENSOR_FLOAT32:
        np.testing.assert_array_equal(first, data + data)
        np.testing.assert_array_equal(read(mem, np.float32, DIMS), 4 * data)


@pytest.mark.parametrize("how", PATHS)
def test_same_buffer_in_several_roles_of_one_request(how: str) -> None:
    pm = twice(n=2)
    buf, token = allocate(pm, ins=[0, 1], outs=[0, 1])
    n = nbytes(T.TENSOR_FLOAT32)
    m1, m2 = _io_pools(), _io_pools()
    a1, a2 = arg(0, 0, n), arg(1, 0, n)
    data = initialize(buf)
    assert run(pm, request([arg(2), a1], [arg(2), a2], [m1, m2, token]), how)[0] == S.INVALID_ARGUMENT
    assert run(pm, request([a1, a2], [arg(2), arg(2)], [m1, m2, token]), how)[0] == S.INVALID_ARGUMENT
    # the same buffer through two pools is the same buffer
    assert run(pm, request([arg(2), a1], [arg(3), a2], [m1, m2, token, token]), how)[0] == S.INVALID_ARGUMENT
    assert run(pm, request([arg(2), arg(2)], [a1, a2], [m1, m2, token]), how)[0] == S.NONE
    np.testing.assert_array_equal(read(m1, np.float32, DIMS), data + data)
    np.testing.assert_array_equal(read(m2, np.float32, DIMS), data + data)


@pytest.mark.parametrize("how", ("sync", "async"))  # NOTE: fenced execution needs fully specified outputs
def test_execution_dimensions_conflicting_with_the_buffer(how: str) -> None:
    pm = twice(dims=[0, 32, 32, 8])
    buf, token = allocate(pm, dims=DIMS)
    bad = [2, 32, 32, 8]
    n2 = nbytes(T.TENSOR_FLOAT32, bad)
    mem = shared(value(dims=bad))
    initialize(buf)
    assert run(pm, request([arg(1, dims=bad)], [arg(0, 0, n2, dims=bad)], [mem, token]), how)[0] == \
        S.INVALID_ARGUMENT
    assert run(pm, request([arg(0, 0, n2, dims=bad)], [arg(1, dims=bad)], [mem, token]), how)[0] == \
        S.INVALID_ARGUMENT
    # the output's real shape [2, ...] does not fit the buffer's fixed [1, ...]: GENERAL_FAILURE, and the
    # buffer written as an output of a failed execution is uninitialized
    assert run(pm, request([arg(0, 0, n2, dims=bad)], [arg(1)], [mem, token]), how)[0] == S.GENERAL_FAILURE
    assert buf.copyTo(M.allocate(nbytes(T.TENSOR_FLOAT32))) == S.GENERAL_FAILURE


def test_fenced_output_sized_by_the_buffer() -> None:
    """Fenced execution needs fully specified outputs: a buffer whose descriptor fixes the dimensions
    the model leaves open is one (Android's reference refuses it); a buffer of unknown shape is not."""
    pm = twice(dims=[0, 32, 32, 8])
    x = value()
    n = x.nbytes
    fixed, token = allocate(pm, dims=DIMS)
    assert run(pm, request([arg(0, 0, n, dims=DIMS)], [arg(1)], [shared(x), token]), "fenced")[0] == S.NONE
    np.testing.assert_array_equal(copy_out(fixed), 2 * x)
    _, open_token = allocate(pm)
    assert run(pm, request([arg(0, 0, n, dims=DIMS)], [arg(1)], [shared(x), open_token]), "fenced")[0] == \
        S.INVALID_ARGUMENT


def test_failed_execution_leaves_output_buffers_uninitialized() -> None:
    # a missed deadline fails the execution after the buffer was resolved
    pm = twice()
    buf, token = allocate(pm)
    initialize(buf)
    n = nbytes(T.TENSOR_FLOAT32)
    mem = _io_pools()
    req = request([arg(0, 0, n)], [arg(1)], [mem, token])
    status, _, _ = pm.executeSynchronously_1_3(req, hal.MeasureTiming.NO,
                                              hal.OptionalTimePoint(nanosecondsSinceEpoch=1),
                                              hal.OptionalTimeoutDuration())
    assert status in (S.MISSED_DEADLINE_TRANSIENT, S.MISSED_DEADLINE_PERSISTENT)
    # rejected before it ran: the buffer was not used, it keeps its content
    assert buf.copyTo(M.allocate(n)) == S.NONE
    # an execution that runs and fails (a shape the buffer cannot take): uninitialized
    pm2 = twice(dims=[0, 32, 32, 8])
    buf2, token2 = allocate(pm2, dims=DIMS)
    initialize(buf2)
    big = [3, 32, 32, 8]
    mem2 = shared(value(dims=big))
    req2 = request([arg(0, 0, nbytes(T.TENSOR_FLOAT32, big), dims=big)], [arg(1)], [mem2, token2])
    assert run(pm2, req2)[0] == S.GENERAL_FAILURE
    assert buf2.copyTo(M.allocate(n)) == S.GENERAL_FAILURE


def test_chained_executions_across_prepared_models() -> None:
    """A state tensor: model A writes it, model B reads it, never leaving the driver."""
    a, b = twice(), twice(fresh=True)
    status, buf, token = dev().allocate(hal.BufferDesc(), [a, b], [role(0, model=1)], [role(0, model=0)])
    assert status == S.NONE
    n = nbytes(T.TENSOR_FLOAT32)
    x = value()
    mem_in, mem_out = shared(x), _io_pools()
    assert run(a, request([arg(0, 0, n)], [arg(1)], [mem_in, token]))[0] == S.NONE
    assert run(b, request([arg(1)], [arg(0, 0, n)], [mem_out, token]))[0] == S.NONE
    np.testing.assert_array_equal(read(mem_out, np.float32, DIMS), 4 * x)
    # the roles are per model: B may not write it, A may not read it
    assert run(b, request([arg(0, 0, n)], [arg(1)], [mem_in, token]))[0] == S.INVALID_ARGUMENT
    assert run(a, request([arg(1)], [arg(0, 0, n)], [mem_out, token]))[0] == S.INVALID_ARGUMENT


# --------------------------------------------------------------------------
# unknown dimensions and rank


@pytest.mark.parametrize("model_dims", [[0, 4], []], ids=["unknown-dims", "unknown-rank"])
@pytest.mark.parametrize("how", ("sync", "async"))
def test_buffer_of_unknown_shape_takes_each_execution_shape(model_dims: list, how: str) -> None:
    pm = twice(dims=model_dims)
    buf, token = allocate(pm)
    for rows in (2, 5, 1):
        shape = [rows, 4]
        x = value(dims=shape, seed=rows)
        n = x.nbytes
        src, dst = shared(x), shared(size=n)
        status, shapes = run(pm, request([arg(0, 0, n, dims=shape)], [arg(1)], [src, token]), how)
        assert status == S.NONE and shapes[0].dimensions == shape and shapes[0].isSufficient
        np.testing.assert_array_equal(copy_out(buf, dims=shape), 2 * x)
        # read as an input without dimensions: the buffer's current shape is the input's
        status, shapes = run(pm, request([arg(1)], [arg(0, 0, n)], [dst, token]), how)
        assert status == S.NONE and shapes[0].dimensions == shape
        np.testing.assert_array_equal(read(dst, np.float32, shape), 4 * x)
        # or with the same dimensions; other ones conflict
        assert run(pm, request([arg(1, dims=shape)], [arg(0, 0, n)], [dst, token]), how)[0] == S.NONE
        assert run(pm, request([arg(1, dims=[rows + 1, 4])], [arg(0, 0, n + 16)], [shared(size=n + 16), token]),
                   how)[0] == S.INVALID_ARGUMENT


def test_unknown_shape_buffer_with_copy_from() -> None:
    pm = twice(dims=[])
    buf, token = allocate(pm)
    assert buf.copyFrom(shared(size=16), []) == S.INVALID_ARGUMENT  # unknown rank: dimensions needed
    x = value(dims=[2, 2, 3])
    assert buf.copyFrom(shared(x), [2, 2, 3]) == S.NONE
    out = shared(size=x.nbytes)
    status, shapes = run(pm, request([arg(1)], [arg(0, 0, x.nbytes)], [out, token]))
    assert status == S.NONE and shapes[0].dimensions == [2, 2, 3]
    np.testing.assert_array_equal(read(out, np.float32, [2, 2, 3]), 2 * x)


def test_zero_sized_outputs_in_buffers() -> None:
    """BOX_WITH_NMS_LIMIT keeps no box: outputs of shape [0], [0], [0, 2, 2, 2] written to buffers of
    unknown dimensions (the model's output dimensions are 0); the conformance runner's device memory."""
    from nnhal.conformance.runner import Runner
    from tests.driver_util import vector_model

    vm = vector_model("V1_2/concat_zero_sized", "concat_zero_sized")
    results = Runner(dev(), modes=("sync", "async"), memory="device").run_model(vm)
    assert results and all(r.status == "pass" for r in results), [(r.variant, r.message) for r in results]
    # and directly: the written buffer has a zero-sized shape and nothing to copy out
    pm = prepared_model(vm.build_model())
    k = len(vm.output_operands()) - 1
    buf, token = allocate(pm, ins=[], outs=[k])
    x = vm.input_values()[0]
    outs = [arg(1, 0, 4) if i != k else arg(2) for i in range(k + 1)]
    status, shapes = run(pm, request([arg(0, 0, x.nbytes)], outs, [shared(x), shared(size=64), token]))
    assert status == S.NONE and shapes[k].dimensions == [0, 2, 2, 2]
    assert buf.copyTo(M.allocate(4)) == S.INVALID_ARGUMENT  # no memory holds 0 bytes exactly


# --------------------------------------------------------------------------
# freeing


def test_freed_buffer_token_is_invalid() -> None:
    pm = twice()
    n = nbytes(T.TENSOR_FLOAT32)
    mem = shared(value())
    buf, token = allocate(pm)
    initialize(buf)
    req = request([arg(1)], [arg(0, 0, n)], [mem, token])
    assert run(pm, req)[0] == S.NONE
    buf.close()
    buf.close()  # idempotent
    assert run(pm, req)[0] == S.INVALID_ARGUMENT
    assert buf.copyTo(M.allocate(n)) == S.GENERAL_FAILURE
    assert buf.copyFrom(mem, []) == S.GENERAL_FAILURE
    # dropping the last reference frees it too
    buf2, token2 = allocate(pm)
    initialize(buf2)
    req2 = request([arg(1)], [arg(0, 0, n)], [mem, token2])
    assert run(pm, req2)[0] == S.NONE
    del buf2
    gc.collect()
    assert run(pm, req2)[0] == S.INVALID_ARGUMENT
    # tokens are not reused
    assert allocate(pm)[1] not in (token, token2)


def test_live_buffers_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from nnhal.driver import buffers

    d = sample_device("bounded")
    pm = prepared_model(twice_model(), d)
    monkeypatch.setattr(buffers, "MAX_LIVE_BUFFERS", 2)
    first = [allocate(pm, device=d) for _ in range(2)]
    _refused(d.allocate(hal.BufferDesc(), [pm], [role()], []))
    first[0][0].close()
    assert allocate(pm, device=d)[1] > 0


def test_buffer_outlives_nothing_it_should_not() -> None:
    """A role names a prepared model weakly: a model that is gone never matches
    another one, and the buffer does not keep the model alive."""
    import weakref

    from nnhal.driver import buffers

    pm = twice(fresh=True)
    buf, token = allocate(pm)
    # NOTE: whether pm is collected at once depends on who else holds it (a scheduler's last task);
    # what matters is that nothing of the buffer does
    holders = gc.get_referrers(pm)
    assert not any(isinstance(h, (buffers.DeviceBuffer, buffers.Buffer, buffers.BufferRegistry)) or
                   (isinstance(h, tuple) and len(h) == 3 and h[1] in ("input", "output")) for h in holders)
    roles = list(dev().buffer_lookup(pm)(token).roles)
    assert all(isinstance(r[0], weakref.ref) and r[0]() is pm for r in roles)
    del pm, roles
    other = twice(fresh=True)
    initialize(buf)
    n = nbytes(T.TENSOR_FLOAT32)
    assert run(other, request([arg(1)], [arg(0, 0, n)], [_io_pools(), token]))[0] == S.INVALID_ARGUMENT


# --------------------------------------------------------------------------
# concurrency


def test_concurrent_reads_and_writes_never_tear_or_hang() -> None:
    pm = twice(dims=[64, 64])
    buf, token = allocate(pm)
    n = 64 * 64 * 4
    fills = [np.full([64, 64], float(k), np.float32) for k in range(1, 5)]
    initialize(buf, dims=[64, 64], data=fills[0])
    errors: list[str] = []

    def reader() -> None:
        out = shared(size=n)
        for _ in range(15):
            status, _ = run(pm, request([arg(1)], [arg(0, 0, n)], [out, token]))
            got = read(out, np.float32, [64, 64])
            if status != S.NONE or len(np.unique(got)) != 1 or got[0, 0] / 2 not in range(1, 5):
                errors.append(f"read {status} {np.unique(got)[:4]}")

    def writer(k: int) -> None:
        src = shared(fills[k] / 2)
        for _ in range(15):
            if k % 2:
                status = run(pm, request([arg(0, 0, n)], [arg(1)], [src, token]))[0]
            else:
                status = buf.copyFrom(shared(fills[k]), [64, 64])
            if status != S.NONE:
                errors.append(f"write {k} {status}")

    threads = [threading.Thread(target=reader) for _ in range(3)] + \
        [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert not any(th.is_alive() for th in threads), "a thread hung"
    assert not errors, errors[:5]
    final = copy_out(buf, dims=[64, 64])
    assert len(np.unique(final)) == 1 and final[0, 0] in range(1, 5)


# --------------------------------------------------------------------------
# non-BLOB hardware buffers


RGBA = M.AHARDWAREBUFFER_FORMAT_R8G8B8A8_UNORM
CPU_RW = M.AHARDWAREBUFFER_USAGE_CPU_READ_OFTEN | M.AHARDWAREBUFFER_USAGE_CPU_WRITE_OFTEN


def image(width: int, height: int, stride: int, fmt: int = RGBA, usage: int = CPU_RW, bpp: int = 4,
          layers: int = 1, fill: int = 0xEE) -> hal.Memory:
    size = ((layers * height - 1) * stride + width) * bpp
    fd = os.memfd_create("test-image", os.MFD_CLOEXEC)
    os.ftruncate(fd, size)
    with mmap.mmap(fd, size) as mm:
        mm[:] = bytes([fill]) * size
    return hal.Memory(name="hardware_buffer",
                      handle=hal.Handle(fds=[fd], ints=[width, height, layers, fmt, usage & 0xFFFFFFFF, usage >> 32,
                                                        stride]), size=0)


def image_bytes(mem: hal.Memory) -> bytes:
    fd = mem.handle.fds[0]
    with mmap.mmap(fd, os.fstat(fd).st_size, prot=mmap.PROT_READ) as mm:
        return bytes(mm)


def put_rows(mem: hal.Memory, data: bytes, width_bytes: int, pitch: int) -> None:
    fd = mem.handle.fds[0]
    with mmap.mmap(fd, os.fstat(fd).st_size) as mm:
        for r, start in enumerate(range(0, len(data), width_bytes)):
            mm[r * pitch: r * pitch + width_bytes] = data[start: start + width_bytes]


@pytest.mark.parametrize("how", PATHS)
def test_hardware_buffer_image_as_input_and_output(how: str) -> None:
    """An RGBA8888 image of 8 x 4 pixels, stride 10: a [4, 8] float32 tensor (one float per pixel)."""
    pm = twice(dims=[4, 8])
    x = value(dims=[4, 8])
    src, dst = image(8, 4, 10), image(8, 4, 10)
    put_rows(src, x.tobytes(), 32, 40)
    status = run(pm, request([arg(0)], [arg(1)], [src, dst]), how)[0]
    assert status == S.NONE
    raw = image_bytes(dst)
    got = b"".join(raw[r * 40: r * 40 + 32] for r in range(4))
    np.testing.assert_array_equal(np.frombuffer(got, np.float32).reshape(4, 8), 2 * x)
    assert all(raw[r * 40 + 32: r * 40 + 40] == b"\xee" * 8 for r in range(3))  # the row padding is untouched


def test_hardware_buffer_image_layouts_and_refusals() -> None:
    pm = twice(dims=[4, 8])
    x = value(dims=[4, 8])
    shared_in = shared(x)
    # R8 (1 byte per pixel) of 32 x 4 holds the same 128 bytes
    out = image(32, 4, 40, fmt=0x38, bpp=1)
    assert run(pm, request([arg(0, 0, x.nbytes)], [arg(1)], [shared_in, out]))[0] == S.NONE
    raw = image_bytes(out)
    got = b"".join(raw[r * 40: r * 40 + 32] for r in range(4))
    np.testing.assert_array_equal(np.frombuffer(got, np.float32).reshape(4, 8), 2 * x)
    # too small for the output: OUTPUT_INSUFFICIENT_SIZE with the needed shape
    status, shapes = run(pm, request([arg(0, 0, x.nbytes)], [arg(1)], [shared_in, image(8, 3, 8)]))
    assert status == S.OUTPUT_INSUFFICIENT_SIZE and shapes[0].dimensions == [4, 8] and not shapes[0].isSufficient
    # too small for the input: INVALID_ARGUMENT
    assert run(pm, request([arg(0)], [arg(1, 0, x.nbytes)], [image(8, 3, 8), shared(size=x.nbytes)]))[0] == \
        S.INVALID_ARGUMENT
    # a YUV format, or no CPU write usage for an output: the guide's GENERAL_FAILURE
    for status in (
        run(pm, request([arg(0)], [arg(1, 0, x.nbytes)], [image(8, 4, 8, fmt=0x23), shared(size=x.nbytes)]))[0],
        run(pm, request([arg(0, 0, x.nbytes)], [arg(1)],
                        [shared_in, image(8, 4, 8, usage=M.AHARDWAREBUFFER_USAGE_CPU_READ_OFTEN)]))[0],
    ):
        assert status == S.GENERAL_FAILURE
    # malformed: stride below width, a file smaller than the layout, an offset
    bad = image(8, 4, 8)
    bad.handle.ints[6] = 4
    assert run(pm, request([arg(0)], [arg(1, 0, x.nbytes)], [bad, shared(size=x.nbytes)]))[0] == S.INVALID_ARGUMENT
    short = image(8, 4, 8)
    os.ftruncate(short.handle.fds[0], 64)
    assert run(pm, request([arg(0)], [arg(1, 0, x.nbytes)], [short, shared(size=x.nbytes)]))[0] == \
        S.INVALID_ARGUMENT


def test_hardware_buffer_image_shrunk_by_the_client() -> None:
    """The image is read and written with pread / pwrite: a file shrunk after the driver checked it is
    an error, never a SIGBUS."""
    from nnhal.driver.hardware_buffer import ImageError, open_image

    mem = image(8, 4, 10)
    img = open_image(mem, writable=True)
    try:
        assert len(img.read(128)) == 128
        os.ftruncate(mem.handle.fds[0], 50)
        with pytest.raises(ImageError):
            img.read(128)
        with pytest.raises(ImageError):
            img.write(bytes(128))
    finally:
        img.close()


def test_hardware_buffer_image_in_ibuffer_copies() -> None:
    pm = twice(dims=[4, 8])
    buf, _ = allocate(pm)
    x = value(dims=[4, 8])
    src = image(8, 4, 12)
    put_rows(src, x.tobytes(), 32, 48)
    assert buf.copyFrom(src, []) == S.NONE
    dst = image(8, 4, 9)
    assert buf.copyTo(dst) == S.NONE
    raw = image_bytes(dst)
    np.testing.assert_array_equal(np.frombuffer(b"".join(raw[r * 36: r * 36 + 32] for r in range(4)), np.float32),
                                  x.reshape(-1))
    assert buf.copyTo(image(8, 3, 8)) == S.INVALID_ARGUMENT  # capacity must equal the size
    assert buf.copyFrom(image(8, 4, 8, fmt=0x23), []) == S.GENERAL_FAILURE


def test_burst_refuses_tokens_and_takes_images() -> None:
    """A 1.2 burst packet names pools by slot, and getMemories returns hidl_memory: a token cannot travel
    (INVALID_ARGUMENT, as nnhal.burst says); a non-BLOB image can."""
    from nnhal.burst import BurstController

    pm = twice(dims=[4, 8])
    buf, token = allocate(pm)
    x = value(dims=[4, 8])
    initialize(buf, dims=[4, 8], data=x)
    src, dst = image(8, 4, 10), image(8, 4, 10)
    put_rows(src, x.tobytes(), 32, 40)
    with BurstController(pm) as burst:
        status, shapes, _ = burst.execute(request([arg(1)], [arg(0, 0, x.nbytes)], [shared(size=x.nbytes), token]))
        assert status == S.INVALID_ARGUMENT and shapes == []
        status, shapes, _ = burst.execute(request([arg(0)], [arg(1)], [src, dst]))
        assert status == S.NONE and shapes[0].dimensions == [4, 8]
    raw = image_bytes(dst)
    got = b"".join(raw[r * 40: r * 40 + 32] for r in range(4))
    np.testing.assert_array_equal(np.frombuffer(got, np.float32).reshape(4, 8), 2 * x)


# --------------------------------------------------------------------------
# the conformance runner's device memory


def test_conformance_device_memory_sample(vectors_dir: Any) -> None:
    from nnhal.conformance import vectors
    from nnhal.conformance.runner import Runner

    runner = Runner(dev(), memory="device")
    ops = {"ADD", "CONV_2D", "SOFTMAX", "IF", "WHILE", "CAST", "RESHAPE", "LESS", "TOPK_V2"}
    models = list(vectors.load([vectors_dir / "V1_3"], ops))[:40]
    assert len(models) >= 10
    results = [r for m in models for r in runner.run_model(m)]
    failed = [f"{r.model}/{r.mode}/{r.variant}: {r.message}" for r in results if r.status == "fail"]
    assert not failed, failed[:5]
    assert sum(r.status == "pass" for r in results) >= 20


class _LyingBuffer(hal.IBuffer):
    def __init__(self, inner: Any):
        self.inner = inner

    def copyFrom(self, src: Any, dimensions: Any) -> S:
        return self.inner.copyFrom(src, dimensions)

    def copyTo(self, dst: Any) -> S:
        status = self.inner.copyTo(dst)
        view = M.map(dst)
        view[:1] = bytes([view[0] ^ 0xFF])  # one corrupted byte
        view.release()
        return status


class _LyingDevice:
    """sample-all, except that its buffers hand back one wrong byte, or allocate breaks the rules."""

    def __init__(self, how: str):
        self.inner, self.how = dev(), how

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def allocate(self, *args: Any) -> tuple:
        status, buf, token = self.inner.allocate(*args)
        if self.how == "invalid-argument":
            return S.INVALID_ARGUMENT, None, 0
        return status, _LyingBuffer(buf), token


@pytest.mark.parametrize("how", ["corrupt", "invalid-argument"])
def test_conformance_device_memory_catches_a_bad_driver(how: str) -> None:
    from nnhal.conformance.runner import Runner
    from tests.driver_util import vector_model

    vm = vector_model("V1_0/add", "add")
    results = Runner(_LyingDevice(how), modes=("sync",), variants=("plain",), memory="device").run_model(vm)
    assert results and all(r.status == "fail" for r in results), [(r.status, r.message) for r in results]


@pytest.mark.sweep
def test_conformance_device_memory_every_vector(vectors_dir: Any) -> None:
    """The whole suite with device memory (``nnhal conformance --memory device``, ~2 min)."""
    from nnhal.conformance import vectors
    from nnhal.conformance.runner import Runner

    runner = Runner(dev(), memory="device")
    failed, passed = [], 0
    for m in vectors.load([vectors_dir], None):
        for r in runner.run_model(m):
            passed += r.status == "pass"
            if r.status != "pass":
                failed.append(f"{r.model}/{r.mode}/{r.variant}: {r.status} {r.message}")
    assert not failed, failed[:10]
    assert passed > 20000


# --------------------------------------------------------------------------
# through the service (a proxy IDevice in another process)

# NOTE: ``service`` and ``service_process`` are the shared fixtures of tests/conftest.py (one
# sample-all service process per test module)


def _remote_prepared(service: Any, model: hal.Model) -> Any:
    return prepared_model(model, service)


def test_service_allocate_copy_and_execute(service: Any) -> None:
    pm = _remote_prepared(service, twice_model())
    status, buf, token = service.allocate(hal.BufferDesc(), [pm], [role()], [role()])
    assert status == S.NONE and isinstance(buf, hal.IBuffer) and token > 0
    n = nbytes(T.TENSOR_FLOAT32)
    assert buf.copyTo(M.allocate(n)) == S.GENERAL_FAILURE
    x = value()
    assert buf.copyFrom(shared(x, kind="mmap_fd"), []) == S.NONE
    out = shared(size=n)
    assert run(pm, request([arg(1)], [arg(0, 0, n)], [out, token]), "async")[0] == S.NONE
    np.testing.assert_array_equal(read(out, np.float32, DIMS), 2 * x)
    assert run(pm, request([arg(0, 0, n)], [arg(1)], [shared(x), token]), "sync")[0] == S.NONE
    np.testing.assert_array_equal(copy_out(buf), 2 * x)
    assert buf.copyFrom(shared(size=n // 2), []) == S.INVALID_ARGUMENT
    assert buf.copyTo(M.allocate(n)) == S.GENERAL_FAILURE  # the failed copyFrom left it uninitialized
    # the VTS refusals travel too
    _refused(service.allocate(hal.BufferDesc(), [pm], [role(1)], []))
    _refused(service.allocate(hal.BufferDesc(), [pm], [], []))
    _refused(service.allocate(hal.BufferDesc(dimensions=[2, 32, 32, 8]), [pm], [role()], []))
    _refused(service.allocate(hal.BufferDesc(), [None], [role()], []))
    _refused(service.allocate(hal.BufferDesc(), [twice()], [role()], []))  # prepared in this process, not there


def test_service_tokens_belong_to_their_connection(service: Any, service_process: Any) -> None:
    pm = _remote_prepared(service, twice_model())
    status, buf, token = service.allocate(hal.BufferDesc(), [pm], [role()], [])
    assert status == S.NONE
    initialize(buf)
    n = nbytes(T.TENSOR_FLOAT32)
    other = service_process.connect()
    try:
        pm2 = _remote_prepared(other, twice_model())
        for how in PATHS:
            assert run(pm2, request([arg(1)], [arg(0, 0, n)], [shared(size=n), token]), how)[0] == S.INVALID_ARGUMENT
        # a prepared model of one connection cannot be given to allocate on the other
        status, buf2, token2 = other.allocate(hal.BufferDesc(), [pm], [role()], [])
        assert status in BAD and buf2 is None and token2 == 0
    finally:
        other.close()
    assert run(pm, request([arg(1)], [arg(0, 0, n)], [shared(size=n), token]))[0] == S.NONE


def test_service_freed_buffer_token(service: Any) -> None:
    pm = _remote_prepared(service, twice_model())
    status, buf, token = service.allocate(hal.BufferDesc(), [pm], [role()], [])
    assert status == S.NONE
    initialize(buf)
    n = nbytes(T.TENSOR_FLOAT32)
    req = request([arg(1)], [arg(0, 0, n)], [shared(size=n), token])
    assert run(pm, req)[0] == S.NONE
    del buf
    gc.collect()
    # NOTE: as a binder decStrong, the release of a dropped proxy travels asynchronously (with the
    # client's next message, on its own socket): the token dies soon after, then stays dead
    import time

    deadline = time.monotonic() + 10
    while run(pm, req)[0] == S.NONE and time.monotonic() < deadline:
        time.sleep(0.01)
    for how in PATHS:
        assert run(pm, req, how)[0] == S.INVALID_ARGUMENT


def test_service_hardware_buffer_images(service: Any) -> None:
    pm = _remote_prepared(service, twice_model(dims=[4, 8]))
    x = value(dims=[4, 8])
    src, dst = image(8, 4, 10), image(8, 4, 10)
    put_rows(src, x.tobytes(), 32, 40)
    assert run(pm, request([arg(0)], [arg(1)], [src, dst]), "sync")[0] == S.NONE
    raw = image_bytes(dst)
    got = b"".join(raw[r * 40: r * 40 + 32] for r in range(4))
    np.testing.assert_array_equal(np.frombuffer(got, np.float32).reshape(4, 8), 2 * x)
    assert run(pm, request([arg(0)], [arg(1, 0, x.nbytes)], [image(8, 4, 8, fmt=0x23), shared(size=x.nbytes)]),
               "async")[0] == S.GENERAL_FAILURE
