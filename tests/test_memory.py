"""Tests of nnhal.memory: real shared memory behind hal.Memory."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading

import pytest

from nnhal import hal, memory
from nnhal.memory import InvalidMemory

MAPPABLE = ["ashmem", "mmap_fd", "hardware_buffer_blob"]


@pytest.fixture
def mems():
    made: list[hal.Memory] = []

    def make(*args, **kwargs) -> hal.Memory:
        m = memory.allocate(*args, **kwargs)
        made.append(m)
        return m

    yield make
    for m in made:
        memory.free(m)


# ---------------------------------------------------------------- allocation


@pytest.mark.parametrize("name", MAPPABLE)
def test_allocate_and_map(mems, name):
    m = mems(100, name)
    assert isinstance(m, hal.Memory)
    assert m.name == name and m.size == 100
    assert len(m.handle.fds) == 1
    memory.validate(m, writable=True)
    v = memory.map(m)
    assert len(v) == 100 and not v.readonly
    assert bytes(v) == bytes(100)  # zero-filled
    v[:4] = b"abcd"
    assert bytes(memory.map(m)[:4]) == b"abcd"


def test_handle_layouts(mems):
    assert mems(8, "ashmem").handle.ints == []
    m = mems(8, "mmap_fd", offset=5)
    prot, lo, hi = m.handle.ints
    assert prot == memory.PROT_READ | memory.PROT_WRITE and lo == 5 and hi == 0
    b = mems(8, "hardware_buffer_blob")
    d = memory.hardware_buffer_desc(b)
    assert (d.width, d.height, d.layers, d.format) == (8, 1, 1, memory.AHARDWAREBUFFER_FORMAT_BLOB)
    assert d.usage & memory.AHARDWAREBUFFER_USAGE_CPU_READ_MASK == memory.AHARDWAREBUFFER_USAGE_CPU_READ_OFTEN
    assert d.usage & memory.AHARDWAREBUFFER_USAGE_CPU_WRITE_MASK == memory.AHARDWAREBUFFER_USAGE_CPU_WRITE_OFTEN


def test_allocate_bad_args():
    with pytest.raises(InvalidMemory):
        memory.allocate(0)
    with pytest.raises(InvalidMemory):
        memory.allocate(-3)
    with pytest.raises(InvalidMemory, match="unknown memory name"):
        memory.allocate(4, "gralloc")
    assert issubclass(InvalidMemory, ValueError)


@pytest.mark.parametrize("name", MAPPABLE)
def test_two_maps_share_bytes(mems, name):
    m = mems(4096 * 3 + 5, name)
    a, b = memory.map(m), memory.map(m)
    a[-1] = 0x7F
    a[4096:4100] = b"wxyz"
    assert b[-1] == 0x7F and bytes(b[4096:4100]) == b"wxyz"
    b[0] = 9
    assert a[0] == 9


@pytest.mark.parametrize("name", MAPPABLE)
def test_dup_shares_bytes_and_is_independent(mems, name):
    m = mems(64, name)
    d = memory.dup(m)
    try:
        assert d.handle.fds[0] != m.handle.fds[0]
        assert d.handle.ints == m.handle.ints and d.size == m.size and d.name == m.name
        memory.map(d)[:3] = b"dup"
        memory.free(m)
        # the original is gone, the duplicate still works and still holds the data
        assert bytes(memory.map(d)[:3]) == b"dup"
    finally:
        memory.free(d)


def test_free_closes_and_is_idempotent():
    m = memory.allocate(16)
    fd = m.handle.fds[0]
    memory.free(m)
    assert m.handle.fds == []
    with pytest.raises(OSError):
        os.fstat(fd)
    memory.free(m)  # nothing left to close


def test_mapping_outlives_free():
    m = memory.allocate(16)
    v = memory.map(m)
    memory.free(m)
    v[0] = 1  # the mapping holds its own reference to the memory
    assert v[0] == 1


# ---------------------------------------------------------------- offsets


@pytest.mark.parametrize("offset", [0, 1, 7, 4095, 4096, 4097, 3 * 4096 + 100])
def test_mmap_fd_offsets(offset):
    size = 5000
    with tempfile.TemporaryFile() as f:
        f.write(bytes(range(256)) * ((offset + size) // 256 + 1))
        f.flush()
        m = memory.from_fd(f.fileno(), size, offset)
        try:
            assert memory.mmap_fd_offset(m) == offset
            v = memory.map(m)
            expect = (bytes(range(256)) * ((offset + size) // 256 + 1))[offset:offset + size]
            assert bytes(v) == expect
            v[0] = 0xEE
            with memory.MappedPool(m) as p:
                p.flush()
            f.seek(offset)
            assert f.read(1) == b"\xee"
        finally:
            memory.free(m)


def test_offset_high_bits_round_trip():
    fd = os.memfd_create("t")
    try:
        os.ftruncate(fd, 16)
        big = (3 << 32) + 4096
        m = memory.from_fd(fd, 16, big)
        assert m.handle.ints[1:] == [4096, 3]
        assert memory.mmap_fd_offset(m) == big
        with pytest.raises(InvalidMemory, match="beyond the end"):
            memory.validate(m)
        memory.free(m)
    finally:
        os.close(fd)


def test_allocate_mmap_fd_with_offset_is_separate_from_file_start(mems):
    m = mems(10, "mmap_fd", offset=4100)
    memory.map(m)[:] = b"0123456789"
    whole = memory.from_fd(m.handle.fds[0], 4110, 0)
    try:
        data = bytes(memory.map(whole))
        assert data[:4100] == bytes(4100) and data[4100:] == b"0123456789"
    finally:
        memory.free(whole)


def test_from_fd_dups_the_fd():
    fd = os.memfd_create("t")
    os.ftruncate(fd, 8)
    m = memory.from_fd(fd, 8)
    assert m.handle.fds[0] != fd
    os.close(fd)
    memory.map(m)[0] = 1
    memory.free(m)


# ---------------------------------------------------------------- across processes


_CHILD = r"""
import sys
from nnhal import hal, memory
name, fd, ints, size = sys.argv[1], int(sys.argv[2]), [int(x) for x in sys.argv[3].split(",") if x], int(sys.argv[4])
m = hal.Memory(name=name, handle=hal.Handle(fds=[fd], ints=ints), size=size)
v = memory.map(m)
assert bytes(v[:5]) == b"hello", bytes(v[:5])
v[5:10] = b"world"
"""


@pytest.mark.parametrize("name", MAPPABLE)
def test_subprocess_shares_the_fd(mems, name):
    m = mems(4096 + 10, name, **({"offset": 3} if name == "mmap_fd" else {}))
    v = memory.map(m)
    v[:5] = b"hello"
    fd = m.handle.fds[0]
    subprocess.run(
        [sys.executable, "-c", _CHILD, name, str(fd), ",".join(map(str, m.handle.ints)), str(m.size)],
        pass_fds=[fd], check=True, timeout=60,
    )
    assert bytes(v[5:10]) == b"world"


@pytest.mark.parametrize("name", MAPPABLE)
def test_fork_sees_writes_both_ways(mems, name):
    m = mems(32, name)
    v = memory.map(m)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: wait for the parent's write, answer through the same memory
        try:
            os.close(w)
            os.read(r, 1)
            cv = memory.map(m)
            ok = cv[0] == 42
            cv[1] = 43
            os._exit(0 if ok else 1)
        except BaseException:
            os._exit(2)
    os.close(r)
    v[0] = 42
    os.write(w, b"x")
    os.close(w)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert v[1] == 43


# ---------------------------------------------------------------- validation


def _expect_invalid(m: hal.Memory, match: str, writable: bool = False) -> None:
    with pytest.raises(InvalidMemory, match=match):
        memory.validate(m, writable=writable)
    with pytest.raises(InvalidMemory):
        memory.map(m, writable=writable or None)


def test_validate_unknown_name(mems):
    m = mems(8)
    _expect_invalid(hal.Memory(name="gralloc", handle=m.handle, size=8), "unknown memory name")
    _expect_invalid(hal.Memory(name="", handle=m.handle, size=8), "unknown memory name")


@pytest.mark.parametrize("name", MAPPABLE)
def test_validate_fd_count(mems, name):
    m = mems(8, name)
    _expect_invalid(hal.Memory(name=name, handle=hal.Handle(fds=[], ints=m.handle.ints), size=8), "exactly 1 fd")
    two = hal.Handle(fds=[m.handle.fds[0], m.handle.fds[0]], ints=m.handle.ints)
    _expect_invalid(hal.Memory(name=name, handle=two, size=8), "exactly 1 fd")


def test_validate_int_count(mems):
    a = mems(8)
    _expect_invalid(hal.Memory(name="ashmem", handle=hal.Handle(fds=a.handle.fds, ints=[1]), size=8), "no ints")
    f = mems(8, "mmap_fd")
    _expect_invalid(hal.Memory(name="mmap_fd", handle=hal.Handle(fds=f.handle.fds, ints=[3, 0]), size=8), "3 ints")
    b = mems(8, "hardware_buffer_blob")
    _expect_invalid(hal.Memory(name="hardware_buffer_blob", handle=hal.Handle(fds=b.handle.fds, ints=[8, 1]),
                               size=8), "7 ints")


@pytest.mark.parametrize("name", MAPPABLE)
def test_validate_closed_or_bad_fd(name):
    m = memory.allocate(8, name)
    fd = m.handle.fds[0]
    memory.free(m)
    m.handle.fds = [fd]
    # the number may have been reused by now; make sure it is not
    try:
        os.fstat(fd)
        pytest.skip("fd number reused")
    except OSError:
        pass
    _expect_invalid(m, "not open")
    m.handle.fds = [-1]
    _expect_invalid(m, "invalid fd")


@pytest.mark.parametrize("name", MAPPABLE)
def test_validate_size(mems, name):
    m = mems(8, name)
    _expect_invalid(hal.Memory(name=name, handle=m.handle, size=0), "size 0")
    bad = hal.Memory(name=name, handle=m.handle, size=9)
    _expect_invalid(bad, "beyond the end" if name != "hardware_buffer_blob" else "width")


def test_validate_beyond_file_with_offset(mems):
    m = mems(8, "mmap_fd", offset=100)
    memory.validate(m)
    m.handle.ints[1] = 101
    _expect_invalid(m, "beyond the end")


def test_validate_read_only(tmp_path):
    path = tmp_path / "data"
    path.write_bytes(b"x" * 64)
    fd = os.open(path, os.O_RDONLY)
    try:
        ro = memory.from_fd(fd, 64, 0, memory.PROT_READ)
        memory.validate(ro)  # fine for inputs
        v = memory.map(ro)
        assert v.readonly and bytes(v[:2]) == b"xx"
        _expect_invalid(ro, "read-only", writable=True)
        # PROT_WRITE on a read-only fd cannot be mapped at all
        rw = memory.from_fd(fd, 64, 0, memory.PROT_READ | memory.PROT_WRITE)
        _expect_invalid(rw, "read-only")
        memory.free(ro)
        memory.free(rw)
    finally:
        os.close(fd)
    wfd = os.open(path, os.O_WRONLY)
    try:
        wo = memory.from_fd(wfd, 64, 0, memory.PROT_READ | memory.PROT_WRITE)
        _expect_invalid(wo, "write-only")
        memory.free(wo)
    finally:
        os.close(wfd)


def test_validate_sealed_memfd_not_writable():
    import fcntl

    fd = os.memfd_create("sealed", os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, 16)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE)
    m = hal.Memory(name="ashmem", handle=hal.Handle(fds=[fd]), size=16)
    _expect_invalid(m, "sealed")
    memory.free(m)


def test_validate_bad_prot(mems):
    m = mems(8, "mmap_fd")
    m.handle.ints[0] = 0
    _expect_invalid(m, "prot")
    m.handle.ints[0] = 0x100
    _expect_invalid(m, "prot")


def test_validate_hardware_buffer_blob_desc(mems):
    m = mems(8, "hardware_buffer_blob")
    for idx, val, match in [(3, memory.AHARDWAREBUFFER_FORMAT_R8G8B8A8_UNORM, "not BLOB"), (1, 2, "height"),
                            (2, 2, "layers"), (0, 7, "width")]:
        ints = list(m.handle.ints)
        ints[idx] = val
        _expect_invalid(hal.Memory(name=m.name, handle=hal.Handle(fds=m.handle.fds, ints=ints), size=8), match)
    ro = list(m.handle.ints)
    ro[4] = memory.AHARDWAREBUFFER_USAGE_CPU_READ_OFTEN
    ro_mem = hal.Memory(name=m.name, handle=hal.Handle(fds=m.handle.fds, ints=ro), size=8)
    memory.validate(ro_mem)
    assert memory.map(ro_mem).readonly
    _expect_invalid(ro_mem, "write", writable=True)


def test_hardware_buffer_non_blob_validates_but_does_not_map(mems):
    m = mems(16, "hardware_buffer")
    assert m.name == "hardware_buffer" and m.size == 0
    memory.validate(m)
    with pytest.raises(InvalidMemory, match="cannot be mapped"):
        memory.map(m)
    with pytest.raises(InvalidMemory, match="cannot be mapped"):
        memory.MappedPool(m)
    # a BLOB format under the non-BLOB name is inconsistent
    ints = list(m.handle.ints)
    ints[3] = memory.AHARDWAREBUFFER_FORMAT_BLOB
    with pytest.raises(InvalidMemory, match="hardware_buffer_blob"):
        memory.validate(hal.Memory(name="hardware_buffer", handle=hal.Handle(fds=m.handle.fds, ints=ints)))


def test_validate_not_a_memory():
    with pytest.raises(InvalidMemory):
        memory.validate(hal.Handle())  # type: ignore[arg-type]


def test_validate_pipe_fd_not_mappable():
    r, w = os.pipe()
    try:
        m = hal.Memory(name="ashmem", handle=hal.Handle(fds=[r]), size=8)
        with pytest.raises(InvalidMemory):
            memory.validate(m)
    finally:
        os.close(r)
        os.close(w)


# ---------------------------------------------------------------- MappedPool


def test_mapped_pool(mems):
    m = mems(10000, "mmap_fd", offset=4097)
    p = memory.MappedPool(m)
    assert len(p) == 10000 and p.writable and not p.closed
    p.view[9999] = 5
    assert memory.map(m)[9999] == 5
    p.close()
    assert p.closed
    p.close()
    r = memory.MappedPool(m, writable=False)
    assert r.view.readonly and r.view[9999] == 5
    r.close()


def test_mapped_pool_close_with_exported_view(mems):
    import numpy as np

    m = mems(16)
    p = memory.MappedPool(m)
    arr = np.frombuffer(p.view, dtype=np.uint8)
    p.close()  # must not raise although numpy still holds the buffer
    assert arr.shape == (16,)


def test_numpy_zero_copy(mems):
    import numpy as np

    m = mems(16)
    a = np.frombuffer(memory.map(m), dtype=np.float32)
    a[:] = [1, 2, 3, 4]
    b = np.frombuffer(memory.map(m), dtype=np.float32)
    assert b.tolist() == [1, 2, 3, 4]


def test_thread_safety(mems):
    m = mems(4096)
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            for _ in range(200):
                v = memory.map(m)
                v[i] = i
                d = memory.dup(m)
                memory.validate(d, writable=True)
                memory.free(d)
        except BaseException as e:  # pragma: no cover
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert list(memory.map(m)[:8]) == list(range(8))


# ---------------------------------------------------------------- shrinking (SIGBUS) and faultless access


def _unsealed(size: int, kind: str = "ashmem") -> tuple[hal.Memory, int]:
    """A client's own memory that can shrink: a memfd without seals, or a temporary file."""
    if kind == "ashmem":
        fd = os.memfd_create("client", 0)
    else:
        f = tempfile.TemporaryFile()
        fd = os.dup(f.fileno())
        f.close()
    os.ftruncate(fd, size)
    if kind == "ashmem":
        return hal.Memory(name="ashmem", handle=hal.Handle(fds=[fd]), size=size), fd
    return hal.Memory(name="mmap_fd", handle=hal.Handle(fds=[fd], ints=[memory.PROT_READ | memory.PROT_WRITE, 0, 0]),
                      size=size), fd


@pytest.mark.parametrize("name", MAPPABLE)
def test_allocated_memfds_cannot_shrink(mems, name):
    import fcntl

    m = mems(4096, name)
    fd = m.handle.fds[0]
    assert fcntl.fcntl(fd, fcntl.F_GET_SEALS) & fcntl.F_SEAL_SHRINK
    assert memory.shrink_sealed(m)
    with pytest.raises(PermissionError):
        os.ftruncate(fd, 0)
    os.ftruncate(fd, os.fstat(fd).st_size + 4096)  # growing stays allowed
    with memory.open_pool(m) as pool:
        assert isinstance(pool, memory.MappedPool)  # zero copy


@pytest.mark.parametrize("kind", ["ashmem", "mmap_fd"])
def test_unsealed_memory_is_read_and_written_without_mapping(kind):
    m, fd = _unsealed(64, kind)
    try:
        assert not memory.shrink_sealed(m)
        pool = memory.open_pool(m, writable=True)
        assert isinstance(pool, memory.FdPool) and len(pool.view) == 64
        os.pwrite(fd, bytes(range(64)), 0)
        assert pool.view[8:16] == bytes(range(8, 16))
        pool.view[0:4] = b"abcd"
        assert os.pread(fd, 4, 0) == b"abcd"
        os.close(fd)
        m.handle.fds = []  # the client closes its fd: the pool has its own
        assert pool.view[0:2] == b"ab"
        os.ftruncate(pool._fd, 10)  # noqa: SLF001 - as another holder of the file would
        with pytest.raises(InvalidMemory, match="shrank"):
            pool.view[8:16]
        with pytest.raises(InvalidMemory, match="shrank"):
            pool.view[8:16] = bytes(8)
        assert os.fstat(pool._fd).st_size == 10  # noqa: SLF001 - not grown back by the write
        pool.close()
        assert pool.closed
    finally:
        memory.free(m)


def test_unsealed_read_only_pool_refuses_writes():
    m, fd = _unsealed(16)
    with memory.open_pool(m, writable=False) as pool:
        with pytest.raises(InvalidMemory, match="read-only"):
            pool.view[0:4] = b"abcd"
    memory.free(m)


def test_private_copy_is_a_snapshot():
    m, fd = _unsealed(32, "mmap_fd")
    os.pwrite(fd, b"x" * 32, 0)
    copy = memory.PrivateCopy(m)
    os.pwrite(fd, b"y" * 32, 0)
    os.ftruncate(fd, 0)
    assert bytes(copy.view) == b"x" * 32 and copy.view.readonly
    with pytest.raises(InvalidMemory, match="beyond the end"):
        memory.PrivateCopy(m)
    memory.free(m)


def test_private_copy_of_a_large_pool_is_its_own():
    """A pool from HUGE_PAGE_MIN_BYTES up is copied into an anonymous mapping (transparent huge pages where
    the kernel gives them): the same bytes, read-only, unaffected by later writes to the memory."""
    from nnhal.platform.memory import HUGE_PAGE_MIN_BYTES

    size = HUGE_PAGE_MIN_BYTES + 3
    data = os.urandom(size)
    m = memory.allocate_filled(data)
    copy = memory.PrivateCopy(m)
    view = memory.map(m)
    view[:4] = b"\xff\xff\xff\xff"
    view.release()
    assert copy.view.readonly and len(copy) == size and bytes(copy.view) == data
    with pytest.raises(TypeError):
        copy.view[0] = 1
    memory.free(m)


def test_private_array_large_and_small():
    """private_array: an array of the shape and dtype asked, C-contiguous and writable, from huge-page
    storage from HUGE_PAGE_MIN_BYTES up and numpy's below."""
    from nnhal.platform.memory import HUGE_PAGE_MIN_BYTES, private_array

    for n in (16, HUGE_PAGE_MIN_BYTES // 4 + 8):
        a = private_array((2, n // 2), "float32")
        assert a.shape == (2, n // 2) and a.dtype == "float32" and a.flags.c_contiguous and a.flags.writeable
        a[...] = 1.5
        assert float(a.sum()) == 1.5 * n


def test_freeze_makes_the_bytes_final():
    """memory.freeze: the memfd sealed against writing, shrinking and growing, as a read-only mmap_fd
    memory owning the fd (the old one freed closes nothing); frozen_key names it, FrozenPool maps it
    read-only.  Not frozen: a memory with a writable mapping alive (the kernel refuses the seal), a file
    that is no memfd, a memfd sealed only against shrinking."""
    import errno
    import fcntl

    data = bytes(range(256)) * 64
    m = memory.allocate_filled(data)
    assert memory.frozen_key(m) is None  # NOTE: allocate's seal (shrinking) alone: still writable
    f = memory.freeze(m)
    assert f.name == "mmap_fd" and f.size == len(data) and m.handle.fds == []
    memory.free(m)  # NOTE: nothing to close
    fd = f.handle.fds[0]
    assert fcntl.fcntl(fd, fcntl.F_GET_SEALS) & (fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW) \
        == fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW
    for act in (lambda: os.pwrite(fd, b"x", 0), lambda: os.ftruncate(fd, 1), lambda: os.ftruncate(fd, 1 << 20)):
        with pytest.raises(OSError) as e:
            act()
        assert e.value.errno == errno.EPERM
    with pytest.raises(memory.InvalidMemory):
        memory.map(f, writable=True)
    key = memory.frozen_key(f)
    assert key is not None and key[2:] == (0, len(data))
    pool = memory.FrozenPool(f, key)
    assert pool.view.readonly and bytes(pool.view) == data and len(pool) == len(data)
    assert memory.FrozenPool(f, key, pool.view).view is pool.view
    memory.free(f)
    assert bytes(pool.view[:4]) == data[:4]  # NOTE: the mapping outlives the fd

    busy = memory.allocate_filled(data)
    view = memory.map(busy)
    assert memory.freeze(busy) is busy and memory.frozen_key(busy) is None  # NOTE: EBUSY: left as it is
    view.release()
    memory.free(busy)
    with tempfile.TemporaryFile() as t:
        t.write(data)
        t.flush()
        plain = memory.from_fd(t.fileno(), len(data), prot=memory.PROT_READ)
        assert memory.freeze(plain) is plain and memory.frozen_key(plain) is None
        memory.free(plain)


def test_small_pages_switches_numpy_hugepage_advice_for_the_section_only() -> None:
    """numpy's MADV_HUGEPAGE advice is off inside ``small_pages`` (nested and concurrent sections counted)
    and back to what it was when the last one ends, even through an exception."""
    switch = pytest.importorskip("numpy._core.multiarray")._set_madvise_hugepage

    def advice() -> bool:
        now = switch(True)
        switch(now)
        return bool(now)

    before = advice()
    try:
        for start in (True, False):
            switch(start)
            with memory.small_pages():
                assert advice() is False
                with memory.small_pages():
                    assert advice() is False
                assert advice() is False
            assert advice() is start
            with pytest.raises(RuntimeError), memory.small_pages():
                raise RuntimeError("inside")
            assert advice() is start
        switch(True)
        inside, go = threading.Barrier(3), threading.Barrier(3)

        def section() -> None:
            with memory.small_pages():
                inside.wait(5)
                go.wait(5)

        threads = [threading.Thread(target=section) for _ in range(2)]
        for t in threads:
            t.start()
        inside.wait(5)
        assert advice() is False
        go.wait(5)
        for t in threads:
            t.join(5)
        assert advice() is True
    finally:
        switch(before)
