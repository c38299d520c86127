"""Shared memory for the HAL's ``hidl_memory`` (``hal.Memory``).

Implements the memory kinds a Neural Networks HAL 1.3 driver receives in
``Model.pools`` and ``Request.pools`` (``Request.MemoryPool.hidlMemory``), as
Android's runtime creates them and the reference CPU executor maps them
(``RunTimePoolInfo::createFromHidlMemory``):

- ``"ashmem"``: a shared anonymous memory region.  Emulated by a ``memfd``
  (``os.memfd_create`` + ``ftruncate``); handle ``fds=[fd]``, ``ints=[]``.
- ``"mmap_fd"``: any mappable file descriptor plus an offset, as Android's
  ``createSharedMemoryFromFd``: handle ``fds=[fd]``,
  ``ints=[prot, offset_low32, offset_high32]``.
- ``"hardware_buffer_blob"``: an ``AHardwareBuffer`` of format BLOB (a plain
  byte buffer of ``width`` bytes).  Emulated by a memfd plus ints describing
  the buffer: ``ints=[width, height, layers, format, usage_low32,
  usage_high32, stride]`` with width = size, height = layers = 1, format
  ``AHARDWAREBUFFER_FORMAT_BLOB`` (0x21).
- ``"hardware_buffer"``: a non-BLOB ``AHardwareBuffer`` (an image).  It passes
  validation (same handle layout, hidl_memory size 0 as in Android) but is no
  flat byte range: :func:`map` raises :class:`InvalidMemory`.  The sample
  driver maps such images row by row for execution inputs and outputs and
  IBuffer copies (``nnhal.driver.hardware_buffer``).

Shrinking and SIGBUS: a mapping of a file touched beyond the file's end
(another holder of the fd ftruncate()d it) kills the process with SIGBUS.
The memfds created here are sealed against shrinking (``F_SEAL_SHRINK``), so
mapping them is safe; :func:`open_pool` maps a received memory only when its
fd carries that seal (or is not a regular file, which cannot shrink) and
otherwise returns an :class:`FdPool` that reads and writes with
``pread``/``pwrite`` (a shrunk region is an error, never a fault);
:class:`PrivateCopy` reads a memory once into private bytes (a driver's
copy of a model's constants), :class:`FrozenPool` maps one whose bytes no one
can change any more (sealed against writing and shrinking: :func:`freeze`)
instead of copying it.

Mappings are real ``MAP_SHARED`` mmaps of the file descriptor, so every
mapping of the same memory, in this process or another one holding the fd,
sees the same bytes (zero copy).  Mapping costs a few microseconds, cheap
enough to do per execution; :class:`MappedPool` keeps one mapping alive for
longer use.  All functions are thread-safe (they share no mutable state).

A mapping keeps no descriptor (:func:`map_fd`; Python's ``mmap`` module keeps
a ``dup`` of the fd, numbered as the lowest free one: a number the client has
just closed, which a stale ``hal.Memory`` of the client's would then name, and
the driver would take the mapping's file for the client's).  A mapping is
unmapped when the last view of it goes.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import mmap
import os
import stat
from typing import Callable, Iterable, Iterator

import numpy as np

from nnhal.hal import Handle, Memory
from nnhal.platform.threads import CountedSection

__all__ = [
    "allocate_filled",
    "allocate_parts",
    "file_ids",
    "on_free",
    "pread_into",
    "AHARDWAREBUFFER_FORMAT_BLOB",
    "AHARDWAREBUFFER_FORMAT_R8G8B8A8_UNORM",
    "AHARDWAREBUFFER_USAGE_CPU_READ_MASK",
    "AHARDWAREBUFFER_USAGE_CPU_READ_OFTEN",
    "AHARDWAREBUFFER_USAGE_CPU_WRITE_MASK",
    "AHARDWAREBUFFER_USAGE_CPU_WRITE_OFTEN",
    "KNOWN_NAMES",
    "PROT_READ",
    "PROT_WRITE",
    "HardwareBufferDesc",
    "InvalidMemory",
    "FdPool",
    "MappedPool",
    "PrivateCopy",
    "FrozenPool",
    "freeze",
    "frozen_key",
    "private_bytes",
    "small_pages",
    "allocate",
    "allocate_hardware_buffer",
    "dup",
    "free",
    "from_fd",
    "hardware_buffer_desc",
    "map",
    "mmap_fd_offset",
    "open_pool",
    "shrink_sealed",
    "validate",
]

PROT_READ = mmap.PROT_READ
PROT_WRITE = mmap.PROT_WRITE

# AHardwareBuffer constants (android/hardware_buffer.h)
AHARDWAREBUFFER_FORMAT_R8G8B8A8_UNORM = 1
AHARDWAREBUFFER_FORMAT_BLOB = 0x21
AHARDWAREBUFFER_USAGE_CPU_READ_RARELY = 2
AHARDWAREBUFFER_USAGE_CPU_READ_OFTEN = 3
AHARDWAREBUFFER_USAGE_CPU_READ_MASK = 0xF
AHARDWAREBUFFER_USAGE_CPU_WRITE_RARELY = 2 << 4
AHARDWAREBUFFER_USAGE_CPU_WRITE_OFTEN = 3 << 4
AHARDWAREBUFFER_USAGE_CPU_WRITE_MASK = 0xF << 4
AHARDWAREBUFFER_USAGE_GPU_DATA_BUFFER = 1 << 24

_CPU_RW_OFTEN = AHARDWAREBUFFER_USAGE_CPU_READ_OFTEN | AHARDWAREBUFFER_USAGE_CPU_WRITE_OFTEN

KNOWN_NAMES = ("ashmem", "mmap_fd", "hardware_buffer_blob", "hardware_buffer")

# NOTE: Python's fcntl lacks F_SEAL_FUTURE_WRITE (Linux 5.1); a memfd sealed
# with it or with F_SEAL_WRITE cannot be mapped writable.
_F_SEAL_FUTURE_WRITE = 0x0010
_WRITE_SEALS = fcntl.F_SEAL_WRITE | _F_SEAL_FUTURE_WRITE

_U32 = 0xFFFFFFFF

# NOTE: below this size a request pool is read and written with pread/pwrite
# even when it could be mapped: mapping and unmapping it per execution costs
# more than copying the bytes (python -m nnhal.tools.hardening_cost measures it:
# 1 MB in + 1 MB out, 6.1 ms by pread/pwrite, 17.5 ms mapped, on the 2-core
# development VM, where every page touched in a fresh mapping is a fault; the
# 110 KB input of vww_mobilenetv1_int8 through litert-cpu: ~25 us less by pread).
# The driver copies the bytes it reads either way (its own inputs), so the
# mapping only pays off for pools kept open across executions (bursts).
MAP_MIN_BYTES = 64 * 1024 * 1024
_HWB_INTS = 7  # width, height, layers, format, usage_lo, usage_hi, stride


class InvalidMemory(ValueError):
    """A ``hal.Memory`` that cannot be used (a driver answers INVALID_ARGUMENT)."""


# --------------------------------------------------------------------------
# creating


def _memfd(size: int, label: str) -> int:
    fd = os.memfd_create(f"nnhal-{label}", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, size)
        # NOTE: sealed against shrinking, so a driver may map it directly: no
        # holder of the fd can ftruncate it under a mapping (which would SIGBUS
        # the process touching the lost pages).  Growing stays allowed.
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _check_size(size: int) -> None:
    if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
        raise InvalidMemory(f"memory size must be a positive int, got {size!r}")


def allocate(size: int, name: str = "ashmem", *, offset: int = 0) -> Memory:
    """Allocate ``size`` bytes of zeroed shared memory of kind ``name``.

    ``offset`` (``"mmap_fd"`` only) places the region at that byte offset of a
    larger file, as a memory created from an fd with an offset.  For
    ``"hardware_buffer"`` (non-BLOB) an RGBA8888 image of ``size`` pixels
    (width ``size``, height 1) is created; its hidl_memory size is 0, as in
    Android, and it cannot be mapped by the CPU.
    """
    _check_size(size)
    if name == "ashmem":
        return Memory(name="ashmem", handle=Handle(fds=[_memfd(size, "ashmem")], ints=[]), size=size)
    if name == "mmap_fd":
        if offset < 0:
            raise InvalidMemory(f"negative offset {offset}")
        fd = _memfd(offset + size, "mmap_fd")
        try:
            return from_fd(fd, size, offset, PROT_READ | PROT_WRITE)
        finally:
            os.close(fd)  # from_fd keeps its own duplicate
    if name == "hardware_buffer_blob":
        return allocate_hardware_buffer(size)
    if name == "hardware_buffer":
        return allocate_hardware_buffer(size, format=AHARDWAREBUFFER_FORMAT_R8G8B8A8_UNORM)
    raise InvalidMemory(f"unknown memory name {name!r} (known: {', '.join(KNOWN_NAMES)})")


def file_ids(memory: Memory) -> tuple[tuple[int, int], ...] | None:
    """The (st_dev, st_ino) of each of the memory's descriptors: which files it
    refers to, whatever the descriptors' numbers; None when it has none, or
    one that is not an open descriptor."""
    ids = []
    for fd in memory.handle.fds:
        if type(fd) is not int:
            return None
        try:
            st = os.fstat(fd)
        except OSError:
            return None
        ids.append((st.st_dev, st.st_ino))
    return tuple(ids) or None


def allocate_filled(data: bytes) -> Memory:
    """Shared memory ("ashmem") of ``len(data)`` bytes holding ``data`` (a
    model's constant pool)."""
    return allocate_parts(len(data), [(0, data)])


def allocate_parts(size: int, parts: Iterable[tuple[int, object]]) -> Memory:
    """Shared memory ("ashmem") of ``size`` bytes, zero but for ``parts``:
    (offset, bytes-like) each written there (a model's constants, each
    copied once).  Written with ``pwrite`` on the new memory's own fd: the
    kernel fills the pages as it writes, where a mapping's copy takes a page
    fault per 4 KiB (16 MB of MobileNet v1 weights: ~6 ms written, ~11 ms
    mapped); and no duplicate fd (the first fd numbered past the table's
    size grows it, which in a threaded process waits for an RCU grace
    period: ~7 ms)."""
    m = allocate(size)
    fd = m.handle.fds[0]
    try:
        for off, data in parts:
            src = memoryview(data).cast("B")  # type: ignore[arg-type]
            if off < 0 or off + len(src) > size:
                raise InvalidMemory(f"{len(src)} bytes at {off} are outside the {size} bytes allocated")
            done = 0
            while done < len(src):
                done += os.pwrite(fd, src[done:], off + done)
    except BaseException:
        free(m)
        raise
    return m


def allocate_hardware_buffer(width: int, height: int = 1, layers: int = 1,
                             format: int = AHARDWAREBUFFER_FORMAT_BLOB,
                             usage: int = _CPU_RW_OFTEN) -> Memory:
    """An emulated ``AHardwareBuffer``: BLOB format gives a
    ``"hardware_buffer_blob"`` memory of ``width`` bytes (height and layers
    must be 1); any other format a ``"hardware_buffer"`` of size 0."""
    _check_size(width)
    if height <= 0 or layers <= 0:
        raise InvalidMemory(f"bad hardware buffer dimensions {width}x{height}x{layers}")
    if format == AHARDWAREBUFFER_FORMAT_BLOB:
        if height != 1 or layers != 1:
            raise InvalidMemory("a BLOB hardware buffer must have height 1 and layers 1")
        nbytes, name, size = width, "hardware_buffer_blob", width
    else:
        # NOTE: 4 bytes per pixel is enough backing store for any format we
        # emulate; the content is never interpreted by the CPU driver.
        nbytes, name, size = width * height * layers * 4, "hardware_buffer", 0
    fd = _memfd(nbytes, name)
    ints = [width, height, layers, format, usage & _U32, (usage >> 32) & _U32, width]
    return Memory(name=name, handle=Handle(fds=[fd], ints=ints), size=size)


def from_fd(fd: int, size: int, offset: int = 0, prot: int = PROT_READ | PROT_WRITE) -> Memory:
    """An ``"mmap_fd"`` memory of ``size`` bytes at ``offset`` of the file open
    as ``fd`` (like ``ANeuralNetworksMemory_createFromFd``).  The fd is
    duplicated: the caller keeps ownership of ``fd``, :func:`free` closes the
    copy."""
    _check_size(size)
    if offset < 0:
        raise InvalidMemory(f"negative offset {offset}")
    if prot & ~(PROT_READ | PROT_WRITE) or not prot:
        raise InvalidMemory(f"prot must be PROT_READ and/or PROT_WRITE, got {prot:#x}")
    new_fd = os.dup(fd)
    ints = [prot, offset & _U32, (offset >> 32) & _U32]
    return Memory(name="mmap_fd", handle=Handle(fds=[new_fd], ints=ints), size=size)


_FREE_LISTENERS: list[Callable[[Memory], None]] = []


def on_free(listener: Callable[[Memory], None]) -> None:
    """Call ``listener(memory)`` in :func:`free`, before the descriptors are
    closed (a cache of memories by what they refer to drops its entry: the
    service's slots, :mod:`nnhal.service.slots`).  It must not raise or block."""
    _FREE_LISTENERS.append(listener)


def free(memory: Memory) -> None:
    """Close the memory's file descriptors (and forget them, so a second
    ``free`` cannot close an unrelated fd that reused the number)."""
    for listener in _FREE_LISTENERS:
        try:
            listener(memory)
        except Exception:  # noqa: BLE001 - freeing must close the fds whatever a listener does
            pass
    fds, memory.handle.fds = list(memory.handle.fds), []
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def dup(memory: Memory) -> Memory:
    """A copy of ``memory`` with duplicated file descriptors: the same shared
    bytes, but owned (and freed) independently, as a driver keeps its own
    reference to a client's pool."""
    new_fds: list[int] = []
    try:
        for fd in memory.handle.fds:
            new_fds.append(_own_dup(fd))
    except OSError as e:
        for fd in new_fds:
            os.close(fd)
        raise InvalidMemory(f"cannot duplicate the fds of {memory.name!r} memory: {e}") from e
    return Memory(name=memory.name, handle=Handle(fds=new_fds, ints=list(memory.handle.ints)), size=memory.size)


# --------------------------------------------------------------------------
# describing and validating


class HardwareBufferDesc:
    """The ``AHardwareBuffer_Desc`` carried in an emulated hardware buffer's ints."""

    __slots__ = ("width", "height", "layers", "format", "usage", "stride")

    def __init__(self, width: int, height: int, layers: int, format: int, usage: int, stride: int):
        self.width, self.height, self.layers = width, height, layers
        self.format, self.usage, self.stride = format, usage, stride

    def __repr__(self) -> str:
        return (f"HardwareBufferDesc(width={self.width}, height={self.height}, layers={self.layers}, "
                f"format={self.format:#x}, usage={self.usage:#x}, stride={self.stride})")


def hardware_buffer_desc(memory: Memory) -> HardwareBufferDesc:
    """Decode the description of a ``hardware_buffer(_blob)`` memory."""
    ints = memory.handle.ints
    if len(ints) != _HWB_INTS:
        raise InvalidMemory(f"{memory.name!r} memory must have {_HWB_INTS} ints "
                            f"(width, height, layers, format, usage_lo, usage_hi, stride), got {len(ints)}")
    w, h, la, fmt, ulo, uhi, stride = ints
    return HardwareBufferDesc(w, h, la, fmt, (ulo & _U32) | ((uhi & _U32) << 32), stride)


def mmap_fd_offset(memory: Memory) -> int:
    """The byte offset of an ``"mmap_fd"`` memory in its file."""
    ints = memory.handle.ints
    if len(ints) != 3:
        raise InvalidMemory(f"'mmap_fd' memory must have 3 ints (prot, offset_low32, offset_high32), got {len(ints)}")
    return (ints[1] & _U32) | ((ints[2] & _U32) << 32)


def _fd_info(memory: Memory) -> tuple[int, os.stat_result, int, int]:
    """(fd, fstat, F_GETFL flags, seals) of a memory's single fd, one syscall each.
    NOTE: the seals are read before the size: once sealed against shrinking,
    the size fstat then reports can only grow."""
    fds = memory.handle.fds
    if len(fds) != 1:
        raise InvalidMemory(f"{memory.name!r} memory must have exactly 1 fd, got {len(fds)}")
    fd = fds[0]
    if not isinstance(fd, int) or isinstance(fd, bool) or fd < 0:
        raise InvalidMemory(f"{memory.name!r} memory has an invalid fd {fd!r}")
    try:
        seals = _seals(fd)
        st = os.fstat(fd)
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    except OSError as e:
        raise InvalidMemory(f"{memory.name!r} memory fd {fd} is not open: {e.strerror}") from e
    return fd, st, flags, seals


def _seals(fd: int) -> int:
    try:
        return fcntl.fcntl(fd, fcntl.F_GET_SEALS)
    except OSError:
        return 0  # not a memfd


def _check_extent(memory: Memory, st: os.stat_result, offset: int, size: int) -> None:
    # NOTE: only regular files (memfds included) have a meaningful size;
    # mapping past their end would SIGBUS on access instead of failing cleanly.
    if stat.S_ISREG(st.st_mode) and offset + size > st.st_size:
        raise InvalidMemory(f"{memory.name!r} memory of {size} bytes at offset {offset} "
                            f"is beyond the end of its file ({st.st_size} bytes)")
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)):
        raise InvalidMemory(f"{memory.name!r} memory fd is not a mappable file")


def _check_access(memory: Memory, fd: int, flags: int, need_write: bool, seals: int) -> None:
    acc = flags & os.O_ACCMODE
    if acc == os.O_WRONLY:
        raise InvalidMemory(f"{memory.name!r} memory fd {fd} is write-only and cannot be mapped")
    if need_write:
        if acc != os.O_RDWR:
            raise InvalidMemory(f"{memory.name!r} memory fd {fd} is read-only but the memory must be writable")
        if seals & _WRITE_SEALS:
            raise InvalidMemory(f"{memory.name!r} memory fd {fd} is sealed against writing")


def validate(memory: Memory, writable: bool = False) -> None:
    """Check that ``memory`` is usable; ``writable`` when it must take outputs.

    Raises :class:`InvalidMemory` with the reason.  ``"hardware_buffer"``
    (non-BLOB) memories pass, as in Android's validation, although they
    cannot be mapped by the CPU (see :func:`map`).
    """
    _validate(memory, writable)


def _validate(memory: Memory, writable: bool) -> tuple[int, os.stat_result, int, int, bool]:
    """:func:`validate`, returning what it learned: (fd, fstat, seals, offset of
    the memory in its file, whether the memory may be written).  NOTE: each
    fact is read by one syscall, once (the per-execution path opens every
    request pool through here)."""
    if not isinstance(memory, Memory):
        raise InvalidMemory(f"expected a hal.Memory, got {type(memory).__name__}")
    name = memory.name
    if name not in KNOWN_NAMES:
        raise InvalidMemory(f"unknown memory name {name!r} (known: {', '.join(KNOWN_NAMES)})")
    if memory.handle is None:
        raise InvalidMemory(f"{name!r} memory has a null handle")
    size = memory.size
    if not isinstance(size, int) or size < 0:
        raise InvalidMemory(f"{name!r} memory has an invalid size {size!r}")
    if name == "hardware_buffer":
        desc = hardware_buffer_desc(memory)
        if desc.format == AHARDWAREBUFFER_FORMAT_BLOB:
            raise InvalidMemory("a BLOB hardware buffer must be named 'hardware_buffer_blob'")
        fd, st, _, seals = _fd_info(memory)
        return fd, st, seals, 0, False
    if size == 0:
        raise InvalidMemory(f"{name!r} memory has size 0")
    fd, st, flags, seals = _fd_info(memory)
    if name == "ashmem":
        if memory.handle.ints:
            raise InvalidMemory(f"'ashmem' memory must have no ints, got {len(memory.handle.ints)}")
        _check_access(memory, fd, flags, True, seals)  # ashmem is always mapped read-write
        _check_extent(memory, st, 0, size)
        return fd, st, seals, 0, True
    if name == "mmap_fd":
        offset = mmap_fd_offset(memory)
        prot = memory.handle.ints[0]
        if prot & ~(PROT_READ | PROT_WRITE) or not prot:
            raise InvalidMemory(f"'mmap_fd' memory has an invalid prot {prot:#x}")
        if writable and not prot & PROT_WRITE:
            raise InvalidMemory("'mmap_fd' memory is mapped read-only (no PROT_WRITE) but must be writable")
        _check_access(memory, fd, flags, bool(prot & PROT_WRITE), seals)
        _check_extent(memory, st, offset, size)
        return fd, st, seals, offset, bool(prot & PROT_WRITE)
    # hardware_buffer_blob
    desc = hardware_buffer_desc(memory)
    if desc.format != AHARDWAREBUFFER_FORMAT_BLOB:
        raise InvalidMemory(f"'hardware_buffer_blob' memory has format {desc.format:#x}, not BLOB (0x21)")
    if desc.height != 1 or desc.layers != 1:
        raise InvalidMemory(f"BLOB hardware buffer must have height 1 and layers 1, "
                            f"got {desc.height} and {desc.layers}")
    if desc.width != size:
        raise InvalidMemory(f"BLOB hardware buffer width {desc.width} differs from the memory size {size}")
    if not desc.usage & AHARDWAREBUFFER_USAGE_CPU_READ_MASK:
        raise InvalidMemory("BLOB hardware buffer has no CPU read usage")
    if writable and not desc.usage & AHARDWAREBUFFER_USAGE_CPU_WRITE_MASK:
        raise InvalidMemory("BLOB hardware buffer has no CPU write usage but must be writable")
    can_write = bool(desc.usage & AHARDWAREBUFFER_USAGE_CPU_WRITE_MASK)
    _check_access(memory, fd, flags, can_write, seals)
    _check_extent(memory, st, 0, size)
    return fd, st, seals, 0, can_write


# --------------------------------------------------------------------------
# mapping


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.restype = ctypes.c_int
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.msync.restype = ctypes.c_int
_libc.msync.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_MAP_FAILED = ctypes.c_void_p(-1).value
_MS_SYNC = 4


class _Mapping:
    """Owns one ``MAP_SHARED`` mapping: the base of the numpy array every
    view of it is made from, so it is unmapped when the last view goes."""

    __slots__ = ("addr", "length", "__array_interface__", "__weakref__")

    def __init__(self, addr: int, length: int, writable: bool):
        self.addr, self.length = addr, length
        self.__array_interface__ = {"data": (addr, not writable), "shape": (length,), "typestr": "|u1",
                                    "version": 3}

    def sync(self) -> None:
        if _libc.msync(self.addr, self.length, _MS_SYNC) != 0:
            e = ctypes.get_errno()
            raise OSError(e, f"msync: {os.strerror(e)}")

    def __del__(self) -> None:
        try:
            _libc.munmap(self.addr, self.length)
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def map_fd(fd: int, length: int, offset: int = 0, writable: bool = True, private: bool = False) -> memoryview:
    """``length`` bytes of ``fd`` from ``offset`` (a multiple of the page
    size) mapped ``MAP_SHARED`` (``MAP_PRIVATE`` with ``private``): a
    memoryview, read-only unless ``writable``.  No descriptor is kept (see
    the module notes); the mapping lives as long as the view or any view or
    array made from it.  Raises OSError."""
    if length <= 0:
        raise ValueError(f"cannot map {length} bytes")
    prot = PROT_READ | (PROT_WRITE if writable else 0)
    addr = _libc.mmap(None, length, prot, mmap.MAP_PRIVATE if private else mmap.MAP_SHARED, fd, offset)
    if addr is None or addr == _MAP_FAILED:
        e = ctypes.get_errno()
        raise OSError(e, f"mmap: {os.strerror(e)}")
    owner = _Mapping(addr, length, writable)
    return memoryview(np.asarray(owner))


def sync_view(view: memoryview) -> None:
    """``msync`` the mapping ``view`` was made from by :func:`map_fd` (a
    file-backed memory's bytes written back)."""
    owner = getattr(view.obj, "base", None)  # NOTE: every view of a mapping exports map_fd's array
    if isinstance(owner, _Mapping):
        owner.sync()


def _mmap(memory: Memory, writable: bool | None,
          info: tuple[int, os.stat_result, int, int, bool] | None = None) -> tuple[memoryview, int, int, bool]:
    """Validate ``memory`` (unless ``info``, what :func:`_validate` returned for
    it, is given) and map it: (mmap, start of the memory in it, size, writable)."""
    if memory.name == "hardware_buffer":
        validate(memory)
        raise InvalidMemory("a non-BLOB 'hardware_buffer' cannot be mapped by the CPU driver")
    _, _, _, offset, can_write = _validate(memory, bool(writable)) if info is None else info
    if writable is not None:
        can_write = bool(writable)
    # NOTE: mmap offsets must be page aligned: map from the aligned-down
    # offset and slice the view.
    delta = offset % mmap.ALLOCATIONGRANULARITY
    prot = PROT_READ | (PROT_WRITE if can_write else 0)
    try:
        mm = map_fd(memory.handle.fds[0], memory.size + delta, offset - delta, bool(prot & PROT_WRITE))
    except (OSError, ValueError, OverflowError, ctypes.ArgumentError) as e:
        raise InvalidMemory(f"cannot map {memory.name!r} memory: {e}") from e
    return mm, delta, memory.size, can_write


class MappedPool:
    """A live ``MAP_SHARED`` mapping of a memory: ``view`` is a memoryview of
    exactly ``memory.size`` bytes (writable unless the memory is read-only or
    ``writable=False``).  Keep it for as long as the bytes are used; ``close``
    (or the end of a ``with`` block) unmaps it once no exported view remains.
    """

    __slots__ = ("memory", "size", "writable", "_mm", "view")

    def __init__(self, memory: Memory, writable: bool | None = None, _info: tuple | None = None):
        mm, delta, size, writable = _mmap(memory, writable, _info)
        self.memory, self.size, self.writable, self._mm = memory, size, writable, mm
        self.view: memoryview = memoryview(mm)[delta:delta + size]

    def flush(self) -> None:
        """Write the mapped bytes back to a file-backed memory (``msync``)."""
        if self._mm is not None and self.writable:
            sync_view(self._mm)

    def close(self) -> None:
        mm, view = self._mm, self.view
        if mm is None:
            return
        self._mm = None
        # NOTE: the mapping goes with the last view of it (views an execution still holds included)
        for v in (view, mm):
            try:
                v.release()
            except BufferError:
                pass

    @property
    def closed(self) -> bool:
        return self._mm is None

    def __enter__(self) -> MappedPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __len__(self) -> int:
        return self.size



# --------------------------------------------------------------------------
# access that cannot fault (a client may shrink an unsealed file at any time)


def _region(memory: Memory, writable: bool | None) -> tuple[int, bool]:
    """(offset of the memory in its file, whether it may be written), after validation."""
    if memory.name == "hardware_buffer":
        validate(memory)
        raise InvalidMemory("a non-BLOB 'hardware_buffer' cannot be accessed by the CPU driver")
    _, _, _, offset, can_write = _validate(memory, bool(writable))
    return offset, can_write if writable is None else bool(writable)


def shrink_sealed(memory: Memory) -> bool:
    """Whether ``memory`` can be mapped without risk of SIGBUS: its fd is not a
    regular file (a device cannot be truncated) or is sealed against
    shrinking (``F_SEAL_SHRINK``), so the extent :func:`validate` found in it
    stays there."""
    fds = memory.handle.fds if isinstance(memory, Memory) and memory.handle is not None else []
    if len(fds) != 1 or not isinstance(fds[0], int) or isinstance(fds[0], bool) or fds[0] < 0:
        return False
    try:
        st = os.fstat(fds[0])
    except OSError:
        return False
    return not stat.S_ISREG(st.st_mode) or bool(_seals(fds[0]) & fcntl.F_SEAL_SHRINK)


def pread_into(fd: int, buf: memoryview, offset: int = 0) -> int:
    """Fills ``buf`` from ``offset`` of ``fd`` without mapping it (a file the
    client shrinks cannot fault); returns the bytes read, fewer at end of file."""
    want = len(buf)
    got = os.preadv(fd, [buf], offset) if want else 0  # NOTE: one call in the common case (no slice)
    while 0 < got < want:
        n = os.preadv(fd, [buf[got:]], offset + got)
        if n <= 0:
            break
        got += n
    return max(got, 0)


def _dup_floor() -> int:
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):
        return 0
    return 512 if soft == resource.RLIM_INFINITY or soft >= 1024 else soft // 2


# NOTE: the driver's own duplicates are numbered from here up: a client that passes a descriptor it
# has closed must get INVALID_ARGUMENT, not find that its number now names the duplicate the driver
# just made of another of its pools (dup() takes the lowest free number, which is the one it closed)
_DUP_FLOOR = _dup_floor()


def _own_dup(fd: int) -> int:
    """A close-on-exec duplicate of ``fd`` numbered from :data:`_DUP_FLOOR` up."""
    try:
        return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, _DUP_FLOOR)
    except OSError as e:
        if e.errno != errno.EINVAL:  # NOTE: EINVAL: the floor is above the limit: the lowest number then
            raise
        return os.dup(fd)


class FdPool:
    """A memory read with ``pread`` and written with ``pwrite`` on its own
    duplicate of the fd: no mapping, so a file shrunk by its other holders
    gives :class:`InvalidMemory` instead of a fault.  ``view`` is the pool
    itself: ``pool.view[a:b]`` reads those bytes (a copy), ``pool.view[a:b] =
    data`` writes them, as with a memoryview."""

    __slots__ = ("memory", "size", "writable", "_fd", "_base", "_sealed")

    def __init__(self, memory: Memory, writable: bool | None = None, _region_of: tuple | None = None,
                 _sealed: bool = False):
        base, can_write = _region(memory, writable) if _region_of is None else _region_of
        self.memory, self.size, self.writable, self._base = memory, memory.size, can_write, base
        self._sealed = _sealed  # NOTE: validated and sealed against shrinking: no size check per write
        try:
            self._fd: int | None = _own_dup(memory.handle.fds[0])  # NOTE: ours, whatever the client closes
        except OSError as e:
            raise InvalidMemory(f"cannot duplicate the fd of {memory.name!r} memory: {e.strerror}") from e

    @property
    def view(self) -> FdPool:
        return self

    @property
    def sealed(self) -> bool:
        """The memory was validated sealed against shrinking (it could be mapped)."""
        return self._sealed

    def _span(self, key: slice) -> tuple[int, int]:
        if not isinstance(key, slice) or key.step not in (None, 1):
            raise TypeError("a pool is accessed by contiguous slices")
        start, stop, _ = key.indices(self.size)
        return start, max(start, stop)

    def _fd_open(self) -> int:
        if self._fd is None:
            raise InvalidMemory(f"{self.memory.name!r} pool is closed")
        return self._fd

    def read_into(self, offset: int, buf: memoryview) -> None:
        """Fill ``buf`` with the pool's bytes from ``offset``."""
        if buf.__class__ is not memoryview or buf.format != "B" or buf.ndim != 1 or not buf.c_contiguous:
            buf = memoryview(buf).cast("B")
        if offset < 0 or offset + len(buf) > self.size:
            raise InvalidMemory(f"read of {len(buf)} bytes at {offset} is outside the pool ({self.size} bytes)")
        fd = self._fd_open()
        try:
            got = pread_into(fd, buf, self._base + offset)
        except OSError as e:
            raise InvalidMemory(f"cannot read {self.memory.name!r} memory: {e.strerror}") from e
        if got < len(buf):
            raise InvalidMemory(f"{self.memory.name!r} memory shrank: {len(buf) - got} of the {len(buf)} bytes at "
                                f"{offset} are beyond the end of its file")

    def __getitem__(self, key: slice) -> bytearray:
        """The bytes of the slice, read into a new buffer of the caller's own."""
        start, stop = self._span(key)
        out = bytearray(stop - start)
        self.read_into(start, memoryview(out))
        return out

    def __setitem__(self, key: slice, data: object) -> None:
        start, stop = self._span(key)
        self._write(start, stop, memoryview(data).cast("B"))  # type: ignore[arg-type]

    def write_at(self, offset: int, data: object) -> None:
        """``pool.view[offset:offset + len(data)] = data`` without the slice
        object (the per-execution output path)."""
        src = data  # NOTE: a flat byte view (the execution's outputs) is taken as it is
        if src.__class__ is not memoryview or src.format != "B" or src.ndim != 1 or not src.c_contiguous:
            src = memoryview(data).cast("B")  # type: ignore[arg-type]
        start = min(max(offset, 0), self.size)
        self._write(start, max(start, min(offset + len(src), self.size)), src)

    def _write(self, start: int, stop: int, src: memoryview) -> None:
        if len(src) != stop - start:
            raise ValueError(f"{len(src)} bytes assigned to a slice of {stop - start}")
        if not self.writable:
            raise InvalidMemory(f"{self.memory.name!r} pool is read-only")
        fd = self._fd_open()
        end = self._base + stop
        try:
            # NOTE: pwrite past the end would grow a shrunk file: refuse instead (the
            # client broke its memory; writing elsewhere than it asked helps no one).
            if not self._sealed and os.fstat(fd).st_size < end:
                raise InvalidMemory(f"{self.memory.name!r} memory shrank below the {stop - start} bytes at {start}")
            pos, n = self._base + start, len(src)
            done = os.pwrite(fd, src, pos) if n else 0  # NOTE: one call in the common case (no slice)
            while done < n:
                done += os.pwrite(fd, src[done:], pos + done)
        except OSError as e:
            raise InvalidMemory(f"cannot write {self.memory.name!r} memory: {e.strerror}") from e

    def __len__(self) -> int:
        return self.size

    def flush(self) -> None:
        """Nothing to do: ``pwrite`` goes straight to the file."""

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    @property
    def closed(self) -> bool:
        return self._fd is None

    def __enter__(self) -> FdPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_pool(memory: Memory, writable: bool | None = None, map_min_bytes: int = 0) -> MappedPool | FdPool:
    """The fastest access to ``memory`` that cannot fault: a zero-copy
    :class:`MappedPool` when :func:`shrink_sealed` (the memfds of
    :func:`allocate`) and of at least ``map_min_bytes`` (a request pool used
    once passes ``MAP_MIN_BYTES``), else an :class:`FdPool` (``pread`` /
    ``pwrite``).  Both have ``view`` (sliced to read, slice-assigned to
    write) and ``close``."""
    if memory.name == "hardware_buffer":
        validate(memory)
        raise InvalidMemory("a non-BLOB 'hardware_buffer' cannot be accessed by the CPU driver")
    # NOTE: one validation, each fact read by one syscall (the seals before the size:
    # once sealed, the size validate sees can only grow).
    info = _validate(memory, bool(writable))
    _, st, seals, offset, can_write = info
    sealed = not stat.S_ISREG(st.st_mode) or bool(seals & fcntl.F_SEAL_SHRINK)
    if sealed and (memory.size >= map_min_bytes or not stat.S_ISREG(st.st_mode)):  # NOTE: devices: mapped as ever
        return MappedPool(memory, writable, info)
    return FdPool(memory, writable, (offset, can_write if writable is None else bool(writable)), sealed)


HUGE_PAGE_MIN_BYTES = 2 << 20  # private buffers from this size up are asked for in transparent huge pages


def private_array(shape: tuple, dtype: object) -> np.ndarray:
    """An uninitialised C-contiguous array of this process's own (zeros until written), its storage from
    :func:`private_buffer` from HUGE_PAGE_MIN_BYTES up (a large array filled once, such as a layer's
    re-laid-out weights, then takes a fault per 2 MiB instead of per 4 KiB), else numpy's."""
    dt = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    if n < HUGE_PAGE_MIN_BYTES:
        return np.empty(shape, dt)
    return np.frombuffer(private_buffer(n), dt).reshape(shape)


def _numpy_hugepage_switch() -> Callable[[bool], bool] | None:
    # NOTE: numpy's documented switch of its MADV_HUGEPAGE advice (1.20 release notes; also
    # $NUMPY_MADVISE_HUGEPAGE at import), in numpy._core from 2.0 and numpy.core before
    try:
        from numpy._core.multiarray import _set_madvise_hugepage
    except ImportError:
        try:
            from numpy.core.multiarray import _set_madvise_hugepage
        except ImportError:
            return None
    return _set_madvise_hugepage


_np_hugepage = _numpy_hugepage_switch()
# NOTE: numpy's advice off from the first section to the last (the advice before, restored then)
_small_pages = CountedSection(lambda: _np_hugepage(False), lambda before: _np_hugepage(before)) \
    if _np_hugepage is not None else None


@contextlib.contextmanager
def small_pages() -> Iterator[None]:
    """A section whose large numpy temporaries (numpy advises MADV_HUGEPAGE from 4 MiB up) take small
    pages: a temporary read once gains nothing from a huge page, and where the kernel compacts memory on a
    huge-page fault (THP ``defrag`` = ``madvise``, as here) a first prepare stalled 20-35 ms in one run of
    three (keyword spotting's requantization search: init 78-82 ms or 100-115 ms).  Counted: nested and
    concurrent sections restore numpy's advice when the last one ends; outside them numpy is unchanged."""
    if _small_pages is None:
        yield
        return
    with _small_pages():
        yield


def private_buffer(size: int) -> bytearray | mmap.mmap:
    """``size`` zero bytes of this process's own, writable: a bytearray, or from HUGE_PAGE_MIN_BYTES up an
    anonymous private mapping advised for transparent huge pages (``MADV_HUGEPAGE``): filling it then
    takes one fault per 2 MiB instead of one per 4 KiB (a 16 MB model pool read ~9.5 -> ~4.5 ms here;
    where the kernel has no huge page to give, it falls back to small ones)."""
    if size < HUGE_PAGE_MIN_BYTES or not hasattr(mmap, "MADV_HUGEPAGE"):
        return bytearray(size)
    mm = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        mm.madvise(mmap.MADV_HUGEPAGE)
    except OSError:  # NOTE: a kernel without THP: the mapping serves as it is
        pass
    return mm


class PrivateCopy:
    """The bytes of ``memory`` read once (``pread``, never a mapping that could
    fault) into private, immutable storage: what a driver keeps of a model's
    ``CONSTANT_REFERENCE`` pools, unaffected by whatever the client does to the
    memory later.  ``view`` is a read-only memoryview."""

    __slots__ = ("memory", "size", "view")
    key = None  # NOTE: no identity beyond its bytes (FrozenPool.key)

    def __init__(self, memory: Memory):
        base, _ = _region(memory, False)
        buf = private_buffer(memory.size)
        fd = memory.handle.fds[0]
        try:
            got = pread_into(fd, memoryview(buf), base)
        except OSError as e:
            raise InvalidMemory(f"cannot read {memory.name!r} memory: {e.strerror}") from e
        if got < memory.size:
            raise InvalidMemory(f"{memory.name!r} memory shrank: {memory.size - got} of its {memory.size} bytes are "
                                f"beyond the end of its file")
        self.memory, self.size = memory, memory.size
        self.view = memoryview(buf).toreadonly()  # NOTE: the buffer is private: no one else can change it

    @classmethod
    def matching(cls, memory: Memory, kept: memoryview) -> PrivateCopy | None:
        """A copy of ``memory`` that shares ``kept`` (the read-only view of an earlier PrivateCopy) when
        the memory holds those same bytes now, else None: the bytes read once as by the constructor
        (``pread``, in chunks into one small buffer) and compared, no new storage made.  The same model's
        pools read by getSupportedOperations and then by prepareModel (what every NNAPI client does) are
        then one private copy, not two (a fresh 16 MB copy costs ~6 ms, mostly its first-touch page
        faults).  Raises InvalidMemory as the constructor does."""
        if len(kept) != memory.size:
            return None
        base, _ = _region(memory, False)
        fd = memory.handle.fds[0]
        have = np.frombuffer(kept, np.uint8)
        chunk = np.empty(min(memory.size, _MATCH_CHUNK), np.uint8)
        for s in range(0, memory.size, chunk.size):
            n = min(chunk.size, memory.size - s)
            try:
                got = pread_into(fd, memoryview(chunk)[:n], base + s)
            except OSError as e:
                raise InvalidMemory(f"cannot read {memory.name!r} memory: {e.strerror}") from e
            if got < n:
                raise InvalidMemory(f"{memory.name!r} memory shrank: {memory.size - s - got} of its {memory.size} "
                                    f"bytes are beyond the end of its file")
            # NOTE: compared as 8-byte words where the length allows (a byte-wise compare is ~8x slower)
            a, b = chunk[:n], have[s:s + n]
            w = n // 8 * 8
            if not (np.array_equal(a[:w].view(np.uint64), b[:w].view(np.uint64)) and np.array_equal(a[w:], b[w:])):
                return None
        out = cls.__new__(cls)
        out.memory, out.size, out.view = memory, memory.size, kept
        return out

    def close(self) -> None:
        """Nothing to release (the bytes go with the last view)."""

    def __len__(self) -> int:
        return self.size


_MATCH_CHUNK = 1 << 20  # PrivateCopy.matching's read buffer (bytes): stays in the cache while compared

# NOTE: the seals that make a memory's bytes final: no write (write(2), a writable shared mapping: the kernel
# refuses F_SEAL_WRITE while one exists, and every later one) and no shrinking (a mapping cannot fault)
_FROZEN_SEALS = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK


def freeze(memory: Memory) -> Memory:
    """An ``"ashmem"`` memory this process made (:func:`allocate`, :func:`allocate_parts`) and writes no
    more, sealed against writing, shrinking and growing: a read-only ``"mmap_fd"`` memory of the same fd
    (the caller's to :func:`free` instead of ``memory``), whose bytes no holder of the fd can change
    again, so that a driver maps it instead of copying it (:class:`FrozenPool`).  ``memory`` itself when
    it cannot be sealed (another kind of memory, a file without seals, a writable mapping of it alive)."""
    fds = memory.handle.fds if memory.name == "ashmem" and memory.handle is not None else []
    if len(fds) != 1:
        return memory
    try:
        fcntl.fcntl(fds[0], fcntl.F_ADD_SEALS, _FROZEN_SEALS | fcntl.F_SEAL_GROW)
    except OSError:  # NOTE: EBUSY (mapped writable), EPERM (sealed against new seals), EINVAL (no memfd)
        return memory
    fd, memory.handle.fds = fds[0], []  # NOTE: the fd moves to the new memory: freeing the old closes nothing
    return Memory(name="mmap_fd", handle=Handle(fds=[fd], ints=[PROT_READ, 0, 0]), size=memory.size)


def frozen_key(memory: Memory) -> tuple | None:
    """(device, inode, offset, size) of a memory whose bytes no one can change any more (a file sealed
    against writing and shrinking: :func:`freeze`), None for any other.  Two memories with one key hold
    the same bytes as long as a mapping of either is alive (the mapping holds the file: its inode number
    cannot name another file meanwhile).  Raises InvalidMemory for a memory :func:`validate` refuses."""
    if memory.name == "hardware_buffer":
        return None  # NOTE: no flat bytes (PrivateCopy says why)
    _, st, seals, offset, _ = _validate(memory, False)
    if not stat.S_ISREG(st.st_mode) or seals & _FROZEN_SEALS != _FROZEN_SEALS:
        return None
    return (st.st_dev, st.st_ino, offset, memory.size)


def private_bytes(memory: Memory, kept: memoryview | None = None) -> PrivateCopy | FrozenPool:
    """A driver's own immutable bytes of a model pool: a :class:`FrozenPool` where the memory's bytes are
    final (``kept``: the view of an earlier FrozenPool of the same key, shared), else a new
    :class:`PrivateCopy`.  Raises InvalidMemory."""
    key = frozen_key(memory)
    return PrivateCopy(memory) if key is None else FrozenPool(memory, key, kept)


class FrozenPool:
    """What :class:`PrivateCopy` is (the driver's own, immutable bytes of a model pool, ``view`` a read-only
    memoryview) for a memory whose bytes are final (:func:`frozen_key`): a read-only private mapping of it,
    no copy (its pages are read where they are: a MobileNet's 16 MB of weights neither copied nor touched
    until the kernels' prepare reads them), or ``view``, the mapping of an earlier FrozenPool with the same
    ``key`` (:attr:`key`: the same bytes, compared by identity)."""

    __slots__ = ("memory", "size", "view", "key")

    def __init__(self, memory: Memory, key: tuple, view: memoryview | None = None):
        if view is None or len(view) != memory.size:
            offset = key[2]
            delta = offset % mmap.ALLOCATIONGRANULARITY
            try:
                # NOTE: MAP_PRIVATE: a kernel before 6.7 refuses a shared mapping, even read-only, of a
                # write-sealed memfd; a private read-only one reads the same pages
                mm = map_fd(memory.handle.fds[0], memory.size + delta, offset - delta, False, private=True)
            except (OSError, ValueError, OverflowError, ctypes.ArgumentError) as e:
                raise InvalidMemory(f"cannot map {memory.name!r} memory: {e}") from e
            view = mm[delta:delta + memory.size]
        self.memory, self.size, self.view, self.key = memory, memory.size, view, key

    def close(self) -> None:
        """Nothing to release (the mapping goes with the last view)."""

    def __len__(self) -> int:
        return self.size


def map(memory: Memory, writable: bool | None = None) -> memoryview:
    """Map ``memory`` and return a memoryview of its ``size`` bytes.

    The view is a zero-copy ``MAP_SHARED`` mapping: writes are seen by every
    other mapping of the memory, also in other processes.  It is writable
    unless the memory is read-only (an ``"mmap_fd"`` without PROT_WRITE, a
    hardware buffer without CPU write usage) or ``writable=False``;
    ``writable=True`` raises :class:`InvalidMemory` for read-only memory.  The
    mapping lives as long as the returned view (or views sliced from it).
    """
    mm, delta, size, _ = _mmap(memory, writable)
    return memoryview(mm)[delta:delta + size]
