"""Request memories kept mapped between in-process executions.

Opening a request pool costs a validation (``fstat``, the seals, the access
mode), a duplicate of its descriptor and a mapping or ``pread`` / ``pwrite``
per execution: on a VM, five to seven system calls, more than a small
model's whole execution on a fast engine.  A client runs the same model on
the same memories again and again, so a device keeps the memories that can
be mapped without risk (sealed against shrinking, :func:`nnhal.memory.open_pool`)
mapped once (the mapping keeps no descriptor: :func:`nnhal.memory.map_fd`), and checks per
execution, with two system calls (``fstat``, ``F_GETFL``), that the client's descriptor
still names the same file with the access it had (a closed descriptor, its
number reused for another file or for the same file opened read-only, is a
miss: the memory is opened and validated again, and answers as it would
have without the cache).  What stays true of a file once checked: its seals (they
can only be added) and so its extent (sealed against shrinking, it can only
grow).

Bounds and release: at most :data:`MAX_ENTRIES` memories and
:data:`MAX_BYTES` bytes per device, least recently used first out;
:func:`nnhal.memory.free` drops a memory at once.  Input-only pools are
mapped read-only.  While a memory is kept, the client cannot add
``F_SEAL_WRITE`` to it (EBUSY: the kernel counts any shared mapping of a
read-write descriptor as writable); ``F_SEAL_FUTURE_WRITE`` works, and
freeing the memory first releases it.
An execution gets a view of its own of the mapping: a memory dropped from
the cache while an execution reads it stays mapped until that execution
lets go of it.  Memories that are not sealed are not kept (read and written
with ``pread`` / ``pwrite`` per execution, as before): :meth:`PoolCache.open`
opens them for the execution (one validation, which reads the seals, the size
and the access mode again every time: a pool the client shrinks is caught
there), and remembers the key so later executions go straight to that open.
The keys of a request's pools are computed once per request structure
(``RequestPlan.pool_keys``, :func:`cache_key`).  Used for the HAL
methods called in process; the service and bursts keep memories by slot
(``nnhal.service.slots``, ``driver/burst.py``)."""

from __future__ import annotations

import fcntl
import itertools
import os
import threading
import weakref
from typing import Any, Optional

from nnhal import hal
from nnhal.platform import memory as hal_memory

MAX_ENTRIES = 64
MAX_BYTES = 256 * 1024 * 1024


class _Entry:
    __slots__ = ("ident", "dev", "ino", "pool", "size", "used")

    def __init__(self, ident: tuple, pool: hal_memory.MappedPool, size: int, used: int):
        self.ident, self.pool, self.size = ident, pool, size
        self.dev, self.ino = ident
        self.used = used  # NOTE: when an execution last leased it (the eviction order: least recent first)


_fstat, _fcntl, _F_GETFL = os.fstat, fcntl.fcntl, fcntl.F_GETFL
_O_ACCMODE, _O_RDWR, _O_RDONLY = os.O_ACCMODE, os.O_RDWR, os.O_RDONLY


class PoolCache:
    """A device's mapped request memories (thread-safe)."""

    def __init__(self, max_entries: int = MAX_ENTRIES, max_bytes: int = MAX_BYTES):
        self._max, self._max_bytes = max_entries, max_bytes
        # NOTE: a plain dict read without the lock by :meth:`kept_views` (only the lock's holders add or
        # remove entries; a lookup marks its entry's ``used`` stamp instead of reordering the dict)
        self._lru: dict[tuple, _Entry] = {}
        self._clock = itertools.count()
        self._bytes = 0
        # NOTE: memories found not sealed against shrinking (key -> file): opened per execution
        # without looking here first (bounded like the kept ones)
        self._unsealed: dict[tuple, tuple] = {}
        self._lock = _OwnLock(self._forget)
        _ALL.add(self)

    def lease(self, memory: Any, writable: bool) -> Optional[memoryview]:
        """A view of ``memory`` mapped (``writable``: it receives outputs), the
        execution's own, or None when it is not kept here (the caller opens it
        for this execution, which also reports what is wrong with it)."""
        key = cache_key(memory, writable)
        if key is None:
            return None
        try:
            view, pool = self.open(memory, writable, key)
        except hal_memory.InvalidMemory:
            return None
        if pool is not None:
            pool.close()
            return None
        return view

    def kept_views(self, keys: tuple) -> list:
        """Per pool of a request, by its :func:`cache_key` (None: not a memory
        kept here), the view of its mapping kept here when its descriptor still
        names the same file with the access it had, else None (the caller
        :meth:`open`-s it).  NOTE: the execution's fast path: two system calls
        per kept pool and no lock: the dict's lookup is atomic; an entry another
        thread drops meanwhile has its pool closed, its view released (the
        slice raises ValueError: a miss, the caller opens the memory); a lease
        taken just before stays mapped until the execution lets go of it."""
        found: list = [None] * len(keys)
        lru = self._lru
        k = -1
        for key in keys:
            k += 1
            entry = lru.get(key) if key is not None else None
            if entry is None:
                continue
            fd = key[1]
            try:
                st = _fstat(fd)
                acc = _fcntl(fd, _F_GETFL) & _O_ACCMODE  # NOTE: see open()
            except OSError:
                continue
            if (acc != _O_RDWR and (key[4] or acc != _O_RDONLY)) or st.st_ino != entry.ino or st.st_dev != entry.dev:
                continue
            pool = entry.pool
            try:
                # NOTE: a pool closed meanwhile has its view released (a miss); one whose view an export
                # kept unreleased is still a live mapping of the very file just checked
                view = pool.view[:]
            except ValueError:  # NOTE: released by a concurrent drop
                continue
            if pool.closed:
                # NOTE: closed while the slice was made: a finalizer the GC ran at its allocation (a dropped
                # reusable execution freeing its duplicate of this memory) released the mapping under it
                continue
            found[k] = view
            entry.used = next(self._clock)
        return found

    def open(self, memory: Any, writable: bool, key: Optional[tuple] = None) -> tuple[Any, Any]:
        """``(view, pool)``: the view of ``memory`` one execution uses and the
        pool it closes after it (None when the view is of a mapping kept here).
        A memory not kept (not sealed against shrinking, not a plain memory,
        too big) is opened for the execution (``memory.open_pool``, read and
        written with ``pread`` / ``pwrite`` below ``MAP_MIN_BYTES``), once.
        ``key``: :func:`cache_key` of (``memory``, ``writable``) when the caller
        computed it already.  Raises ``InvalidMemory`` (why it cannot be used).
        NOTE: per execution, a kept memory costs two system calls (``fstat``,
        ``F_GETFL``); a memory found unsealed before goes straight to
        ``open_pool`` (whose validation reads the seals again every time)."""
        if key is None:
            key = cache_key(memory, writable)
            if key is None:
                return _per_execution(memory, writable)
        if key in self._unsealed:
            view, pool = _per_execution(memory, writable)
            if pool.__class__ is hal_memory.MappedPool or pool.sealed:
                with self._lock:
                    self._unsealed.pop(key, None)  # NOTE: sealed now (another file at that number): kept next time
            return view, pool
        fd = key[1]
        try:
            st = os.fstat(fd)
            # NOTE: the access mode is the descriptor's, not the file's: the same file reopened
            # read-only under the same number must not receive outputs through our mapping
            acc = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE
        except OSError:
            return _per_execution(memory, writable)  # NOTE: a closed descriptor: open_pool says why
        if acc != os.O_RDWR and (writable or acc != os.O_RDONLY):
            return _per_execution(memory, writable)  # NOTE: open_pool says why
        ident = (st.st_dev, st.st_ino)
        with self._lock:
            entry = self._lru.get(key)
            if entry is not None:
                if entry.ident == ident and not entry.pool.closed:
                    entry.used = next(self._clock)
                    return entry.pool.view[:], None
                self._drop(key)  # NOTE: the number names another file now
        pool = hal_memory.open_pool(memory, writable=writable)
        if pool.__class__ is not hal_memory.MappedPool:
            # NOTE: not sealed against shrinking: read and written per execution (this one with this pool)
            with self._lock:
                if len(self._unsealed) >= self._max:
                    self._unsealed.clear()
                self._unsealed[key] = ident
            return pool.view, pool
        lease = pool.view[:]
        with self._lock:
            old = self._lru.pop(key, None)
            if old is not None:
                self._release(old)
            self._lru[key] = _Entry(ident, pool, memory.size, next(self._clock))
            self._bytes += memory.size
            while len(self._lru) > self._max or self._bytes > self._max_bytes:
                # NOTE: least recently leased first (a scan of at most MAX_ENTRIES, only when a memory is added)
                lru = self._lru
                self._drop(min(lru, key=lambda k: lru[k].used))
        return lease, None

    def forget(self, ident: tuple) -> None:
        """Drops every memory on the file ``ident`` (st_dev, st_ino)."""
        if self._lock.held_here():
            # NOTE: a finalizer the garbage collector ran at an allocation inside one of our locked sections
            # (a dropped burst or reusable execution freeing the memories it kept): done when that section ends
            self._lock.deferred.append(ident)
            return
        with self._lock:
            self._forget(ident)

    def _forget(self, ident: tuple) -> None:  # lock held
        for key in [k for k, e in self._lru.items() if e.ident == ident]:
            self._drop(key)
        for key in [k for k, i in self._unsealed.items() if i == ident]:
            del self._unsealed[key]

    def clear(self) -> None:
        with self._lock:
            for key in list(self._lru):
                self._drop(key)
            self._unsealed.clear()

    def __len__(self) -> int:
        return len(self._lru)

    @property
    def nbytes(self) -> int:
        return self._bytes

    def _drop(self, key: tuple) -> None:  # lock held
        self._release(self._lru.pop(key))

    def _release(self, entry: _Entry) -> None:  # lock held
        self._bytes -= entry.size
        entry.pool.close()  # NOTE: a mapping still viewed by an execution lives until it lets go


class _OwnLock:
    """The cache's lock, knowing the thread that holds it (so that :meth:`PoolCache.forget`
    called by that thread inside a locked section defers instead of waiting for itself), and
    running the deferred forgets before it is released."""

    __slots__ = ("_lock", "_holder", "deferred", "_forget")

    def __init__(self, forget: Any):
        # NOTE: a weak reference: the cache holding its lock must not live in a reference cycle (dropped with its
        # device, its mappings go at once, not at the next collection)
        self._lock, self._holder, self.deferred = threading.Lock(), 0, []
        self._forget = weakref.WeakMethod(forget)

    def held_here(self) -> bool:
        return self._holder == threading.get_ident()

    def __enter__(self) -> None:
        self._lock.acquire()
        self._holder = threading.get_ident()

    def __exit__(self, *exc: object) -> None:
        try:
            while self.deferred:
                idents, self.deferred = self.deferred, []
                forget = self._forget()
                for ident in idents if forget is not None else ():
                    forget(ident)
        finally:
            self._holder = 0
            self._lock.release()


_CACHEABLE = frozenset({"ashmem", "mmap_fd", "hardware_buffer_blob"})


def cache_key(memory: Any, writable: bool) -> Optional[tuple]:
    """The key a cache keeps ``memory`` under (mapped ``writable`` or not):
    ``(name, fd, ints, size, writable)``, or None when it is not a plain
    memory of one descriptor that can be kept (the caller opens it per
    execution).  Plain values: a request's plan may hold it."""
    if memory.__class__ is not hal.Memory:
        return None
    h = memory.handle
    if h.__class__ is not hal.Handle:
        return None
    fds, ints = h.fds, h.ints
    if fds.__class__ is not list or len(fds) != 1 or ints.__class__ is not list:
        return None
    fd, name, size = fds[0], memory.name, memory.size
    if fd.__class__ is not int or size.__class__ is not int or name.__class__ is not str \
            or name not in _CACHEABLE or fd < 0:
        return None
    for v in ints:
        if v.__class__ is not int:
            return None
    return (name, fd, tuple(ints), size, bool(writable))


def _per_execution(memory: Any, writable: bool) -> tuple[Any, Any]:
    """A memory opened for one execution: small pools used once cost less to
    ``pread`` / ``pwrite`` than to map and unmap."""
    pool = hal_memory.open_pool(memory, writable=writable, map_min_bytes=hal_memory.MAP_MIN_BYTES)
    return pool.view, pool
_ALL: "weakref.WeakSet[PoolCache]" = weakref.WeakSet()


def _freed(memory: hal.Memory) -> None:
    """nnhal.memory.free's listener: every cache drops the memory's file."""
    if not _ALL or type(memory) is not hal.Memory or type(memory.handle) is not hal.Handle:
        return
    for ident in hal_memory.file_ids(memory) or ():
        for cache in list(_ALL):
            cache.forget(ident)


hal_memory.on_free(_freed)
