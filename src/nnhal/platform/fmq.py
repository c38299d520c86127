"""A fast message queue: Android's ``MessageQueue<T, kSynchronizedReadWrite>``
(libfmq), the transport of the HAL 1.2 burst channels
(``MQDescriptorSync<FmqRequestDatum>`` / ``MQDescriptorSync<FmqResultDatum>``
of ``IPreparedModel.configureExecutionBurst``).

One writer, one reader, a ring of fixed-size elements in shared memory:

- the ring lives in a memfd sealed against shrinking (``F_SEAL_SHRINK``), so a
  peer can never make an access fault (SIGBUS); a 64-byte header holds a
  magic, the element size, the capacity and the two counters (elements ever
  written, elements ever read; native-endian uint64 accessed with single
  aligned loads and stores);
- a write of n elements is atomic as libfmq's ``writeBlocking(data, n)``: the
  elements are copied first and the write counter is published last, so a
  reader sees all of a packet or none of it (NOTE: Python has no memory
  barriers; this order relies on x86-64's total store order, as the counters'
  single aligned 8-byte accesses rely on its atomicity);
- signalling and peer death use one Unix socketpair per queue: the writer
  sends a byte after publishing ("data written"), the reader after consuming
  ("space freed"), each only when the other side has raised its "waiting"
  flag in the header (a side that polls needs no signal: no system call per
  packet then); a side that waits polls the queue for a short window first
  when asked to (:mod:`nnhal.platform.spin`), then raises its flag and blocks in
  ``poll``.  End of file on the socket means the other side
  closed the queue or its process died.

  NOTE: a socketpair rather than eventfds (or a futex word): each side owns a
  private end, so a hostile peer cannot switch our end to blocking mode (an
  eventfd's O_NONBLOCK lives in the file description both sides share), and
  the kernel reports the peer's death as end of file, which an eventfd
  cannot.  ``MSG_DONTWAIT`` keeps every send and drain non-blocking.

The descriptor is a ``hal.Handle`` of file descriptors and ints only:
``Handle(fds=[shm_fd, socket_fd], ints=[MAGIC, VERSION, element_size,
capacity])``; it works unchanged in another process once the fds are passed
with SCM_RIGHTS.  :meth:`MessageQueue.open` validates all of it (fd types,
seals, sizes, header) and duplicates what it keeps; every operation
re-validates the counters it reads from shared memory, so a corrupt or hostile
header (counters beyond the capacity) raises :class:`FmqError`, never reads
out of bounds, crashes or hangs.
"""

from __future__ import annotations

import fcntl
import os
import select
import socket
import stat
import struct
import threading
import time
from typing import Optional

from nnhal.hal import Handle
from nnhal.platform import memory as hal_memory

__all__ = ["FmqError", "FmqPeerGone", "FmqTimeout", "MessageQueue", "MAGIC", "VERSION", "MAX_CAPACITY",
           "MAX_ELEMENT_SIZE"]

MAGIC = 0x514D464E  # "NFMQ"
VERSION = 1
HEADER_SIZE = 64
MAX_CAPACITY = 1 << 20
MAX_ELEMENT_SIZE = 4096

_HEADER = struct.Struct("<IIII")  # magic, version, element_size, capacity
_COUNTERS_AT = 16  # write counter at 16, read counter at 24 (native uint64)
_U64 = (1 << 64) - 1
_DATA = b"\x01"  # "data written" (writer -> reader)
_SPACE = b"\x02"  # "space freed" (reader -> writer)
# NOTE: plain ints: socket.MSG_* are enum.IntFlag members, whose ``|`` runs Python code per call
_SEND_FLAGS = int(socket.MSG_DONTWAIT | socket.MSG_NOSIGNAL)
_DONTWAIT = int(socket.MSG_DONTWAIT)
_FLAGS_AT = 32  # "reader waits" at 32, "writer waits" at 40 (native uint64)
# NOTE: a blocked side re-checks the queue after 1, 2, 4... ms (up to ~1 s) even without a signal:
# the flags are shared memory without explicit barriers (see _wait), so a lost wake-up costs a
# few milliseconds at worst, never a hang, and an idle queue wakes about once a second
_FIRST_SLICE_MS = 1
_MAX_SLICE_MS = 1024
_clock = time.perf_counter_ns
_yield = os.sched_yield


class FmqError(Exception):
    """A queue that cannot be used: a bad descriptor, a corrupt header, a
    closed queue, a packet that can never fit."""


class FmqPeerGone(FmqError):
    """The other side closed the queue or its process died."""


class FmqTimeout(FmqError):
    """A blocking read or write did not complete in time."""


def _fd_kind(fd: int) -> os.stat_result:
    if not isinstance(fd, int) or isinstance(fd, bool) or fd < 0:
        raise FmqError(f"invalid file descriptor {fd!r}")
    try:
        return os.fstat(fd)
    except OSError as e:
        raise FmqError(f"file descriptor {fd} is not open: {e.strerror}") from None


class MessageQueue:
    """One end of a synchronized read/write queue of ``capacity`` elements of
    ``element_size`` bytes.  :meth:`create` makes a new queue (this side is
    ``role`` "writer" or "reader"); :meth:`descriptor` is what the other side
    gets; :meth:`open` makes the other end from it.  One thread at a time may
    read and one may write; :meth:`close` may come from any thread."""

    def __init__(self, mm: memoryview, sock: socket.socket, element_size: int, capacity: int, role: str,
                 remote: Optional[socket.socket], shm_fd: int):
        self.element_size, self.capacity, self.role = element_size, capacity, role
        self._mm, self._sock, self._remote, self._shm_fd = mm, sock, remote, shm_fd
        mv = memoryview(mm)
        self._counters = mv[_COUNTERS_AT:_COUNTERS_AT + 16].cast("Q")
        self._waiting = mv[_FLAGS_AT:_FLAGS_AT + 16].cast("Q")
        self._data = mv[HEADER_SIZE:HEADER_SIZE + element_size * capacity]
        self._mv = mv
        self._lock = threading.Lock()
        self._closed = False
        # NOTE: our own counter is kept privately and only published: a peer
        # that scribbles over it in shared memory cannot move our position.
        self._own = self._counters[0 if role == "writer" else 1]
        self._poll = select.poll()
        self._poll.register(sock.fileno(), select.POLLIN | select.POLLRDHUP)

    # ------------------------------------------------------------------ setup
    @classmethod
    def create(cls, element_size: int, capacity: int, role: str = "writer") -> "MessageQueue":
        """A new queue; this end is the ``role`` ("writer" or "reader")."""
        if role not in ("writer", "reader"):
            raise ValueError(f"role must be 'writer' or 'reader', not {role!r}")
        _check_geometry(element_size, capacity)
        size = HEADER_SIZE + element_size * capacity
        fd = os.memfd_create("nnhal-fmq", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        local = remote = None
        try:
            os.ftruncate(fd, size)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL)
            mm = hal_memory.map_fd(fd, size)  # NOTE: keeps no descriptor of its own (nnhal.memory)
            _HEADER.pack_into(mm, 0, MAGIC, VERSION, element_size, capacity)
            local, remote = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        except BaseException:
            os.close(fd)
            for s in (local, remote):
                if s is not None:
                    s.close()
            raise
        return cls(mm, local, element_size, capacity, role, remote, fd)

    def descriptor(self) -> Handle:
        """The descriptor of this queue for the other side (fds owned by this
        queue: valid until :meth:`release_descriptor` or :meth:`close`)."""
        if self._remote is None or self._shm_fd < 0:
            raise FmqError("the descriptor of this queue was released (or the queue was opened, not created)")
        return Handle(fds=[self._shm_fd, self._remote.fileno()],
                      ints=[MAGIC, VERSION, self.element_size, self.capacity])

    def release_descriptor(self) -> None:
        """Close this side's copy of the descriptor once the other side holds
        its own (after ``configureExecutionBurst`` returned): from then on the
        other side's death or close is seen as end of file."""
        remote, self._remote = self._remote, None
        if remote is not None:
            remote.close()
        fd, self._shm_fd = self._shm_fd, -1
        if fd >= 0:
            os.close(fd)

    @classmethod
    def open(cls, handle: object, element_size: int, role: str, max_capacity: int = MAX_CAPACITY) -> "MessageQueue":
        """The other end of a queue from its descriptor.  Validates everything
        and duplicates the fds it keeps (the caller keeps ownership of the
        handle's fds).  Raises :class:`FmqError` with the reason."""
        if role not in ("writer", "reader"):
            raise ValueError(f"role must be 'writer' or 'reader', not {role!r}")
        if not isinstance(handle, Handle):
            raise FmqError(f"a queue descriptor is a hal.Handle, not {type(handle).__name__}")
        fds, ints = list(handle.fds or []), list(handle.ints or [])
        if len(fds) != 2 or len(ints) != 4:
            raise FmqError(f"a queue descriptor has 2 fds and 4 ints, got {len(fds)} and {len(ints)}")
        if any(not isinstance(v, int) or isinstance(v, bool) for v in ints):
            raise FmqError("queue descriptor ints must be ints")
        magic, version, esize, capacity = ints
        if magic != MAGIC or version != VERSION:
            raise FmqError(f"not a version {VERSION} queue descriptor (magic {magic:#x}, version {version})")
        if esize != element_size:
            raise FmqError(f"queue element size {esize}, expected {element_size}")
        _check_geometry(esize, capacity)
        if capacity > max_capacity:
            raise FmqError(f"queue capacity {capacity} is above the limit {max_capacity}")
        size = HEADER_SIZE + esize * capacity
        shm_fd, sock_fd = fds
        st = _fd_kind(shm_fd)
        if not stat.S_ISREG(st.st_mode):
            raise FmqError("the queue memory is not a memfd")
        try:
            seals = fcntl.fcntl(shm_fd, fcntl.F_GET_SEALS)
            acc = fcntl.fcntl(shm_fd, fcntl.F_GETFL) & os.O_ACCMODE
        except OSError:
            raise FmqError("the queue memory is not a memfd (no seals)") from None
        # NOTE: a memory that can shrink could SIGBUS us on any access.
        if not seals & fcntl.F_SEAL_SHRINK:
            raise FmqError("the queue memory is not sealed against shrinking (F_SEAL_SHRINK)")
        if seals & (fcntl.F_SEAL_WRITE | 0x0010):
            raise FmqError("the queue memory is sealed against writing")
        if acc != os.O_RDWR:
            raise FmqError("the queue memory is not open read-write")
        if st.st_size < size:
            raise FmqError(f"the queue memory has {st.st_size} bytes, {size} needed")
        if not stat.S_ISSOCK(_fd_kind(sock_fd).st_mode):
            raise FmqError("the queue signal fd is not a socket")
        sock = mm = None
        try:
            sock = socket.socket(fileno=os.dup(sock_fd))
            if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM:
                raise FmqError("the queue signal fd is not a Unix stream socket")
            mm = hal_memory.map_fd(shm_fd, size)
            if _HEADER.unpack_from(mm, 0) != (MAGIC, VERSION, esize, capacity):
                raise FmqError("the queue header does not match its descriptor")
            q = cls(mm, sock, esize, capacity, role, None, -1)
            w, r = q._counters[0], q._counters[1]
            if not r <= w <= r + capacity:
                q.close()
                raise FmqError(f"corrupt queue header: write counter {w}, read counter {r}, capacity {capacity}")
            return q
        except FmqError:
            _close_quietly(mm, sock)
            raise
        except (OSError, ValueError) as e:
            _close_quietly(mm, sock)
            raise FmqError(f"cannot open the queue: {e}") from None

    # ------------------------------------------------------------------ state
    def _positions(self) -> tuple[int, int]:
        """(write counter, read counter), validated."""
        if self._closed:
            raise FmqError("the queue is closed")
        c = self._counters
        if self.role == "writer":
            w, r = self._own, c[1]
        else:
            w, r = c[0], self._own
        if not r <= w <= r + self.capacity:
            raise FmqError(f"corrupt queue: write counter {w}, read counter {r}, capacity {self.capacity}")
        return w, r

    def available_to_read(self) -> int:
        with self._lock:
            w, r = self._positions()
            return w - r

    def available_to_write(self) -> int:
        with self._lock:
            w, r = self._positions()
            return self.capacity - (w - r)

    # ------------------------------------------------------------------ I/O
    def write(self, data: bytes) -> bool:
        """Write whole elements at once (non-blocking): False if there is not
        room for all of them now."""
        if self.role != "writer":
            raise FmqError("write on the reading end of a queue")
        n, rem = divmod(len(data), self.element_size)
        if rem or n == 0:
            raise FmqError(f"{len(data)} bytes is not a positive number of {self.element_size}-byte elements")
        if n > self.capacity:
            raise FmqError(f"{n} elements can never fit a queue of {self.capacity}")
        with self._lock:
            w, r = self._positions()
            if self.capacity - (w - r) < n:
                return False
            es, cap = self.element_size, self.capacity
            start = (w % cap) * es
            first = min(len(data), cap * es - start)
            self._data[start:start + first] = data[:first]
            if first < len(data):
                self._data[0:len(data) - first] = data[first:]
            self._own = (w + n) & _U64
            self._counters[0] = self._own  # NOTE: published after the data: the reader sees all or nothing
        if self._waiting[0]:  # NOTE: only a reader that sleeps is woken (a polling one sees the counter)
            self._signal(_DATA)
        return True

    def read(self, n: int) -> Optional[bytes]:
        """Read ``n`` elements (non-blocking): None if fewer are available."""
        if self.role != "reader":
            raise FmqError("read on the writing end of a queue")
        if n <= 0 or n > self.capacity:
            raise FmqError(f"cannot read {n} elements from a queue of {self.capacity}")
        with self._lock:
            w, r = self._positions()
            if w - r < n:
                return None
            out = self._copy_out(r, n)
            self._own = (r + n) & _U64
            self._counters[1] = self._own
        if self._waiting[1]:
            self._signal(_SPACE)
        return out

    def read_all(self) -> bytes:
        """Every element available now (possibly none), as Android's burst
        server takes a whole packet once its first element is there."""
        if self.role != "reader":
            raise FmqError("read on the writing end of a queue")
        with self._lock:
            w, r = self._positions()
            if w == r:
                return b""
            out = self._copy_out(r, w - r)
            self._own = w
            self._counters[1] = w
        if self._waiting[1]:
            self._signal(_SPACE)
        return out

    def _copy_out(self, r: int, n: int) -> bytes:
        es, cap = self.element_size, self.capacity
        start = (r % cap) * es
        size = n * es
        first = min(size, cap * es - start)
        # NOTE: copied once out of shared memory; the caller decodes the copy,
        # which a peer can no longer change under it.
        out = bytes(self._data[start:start + first])
        if first < size:
            out += bytes(self._data[0:size - first])
        return out

    def write_blocking(self, data: bytes, timeout: Optional[float] = None) -> None:
        """Write whole elements atomically, waiting for room.  Raises
        :class:`FmqTimeout`, :class:`FmqPeerGone` or :class:`FmqError`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        n = len(data) // self.element_size
        while not self.write(data):
            self._wait(deadline, n)

    def read_blocking(self, n: int, timeout: Optional[float] = None) -> bytes:
        """Read ``n`` elements, waiting for them."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            out = self.read(n)
            if out is not None:
                return out
            self._wait(deadline, n)

    def read_packet_blocking(self, timeout: Optional[float] = None, spin_ns: int = 0) -> bytes:
        """Wait for at least one element, then take every element available
        (the writer publishes a packet at once, so that is a whole packet).
        ``spin_ns``: first poll the queue that long (:mod:`nnhal.platform.spin`)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if spin_ns > 0:
            end = _clock() + spin_ns
            counters = self._counters
            try:
                while not self._closed:
                    # NOTE: a lock-free peek at the write counter; read_all validates what it reads
                    if counters[0] != self._own:
                        out = self.read_all()
                        if out:
                            return out
                    if _clock() >= end:
                        break
                    _yield()  # NOTE: a loaded machine runs its other work instead; an idle one returns at once
            except ValueError:  # the view was released: closed by another thread
                raise FmqError("the queue is closed") from None
        while True:
            out = self.read_all()
            if out:
                return out
            self._wait(deadline, 1)

    # ------------------------------------------------------------------ signalling
    def _signal(self, what: bytes) -> None:
        try:
            self._sock.send(what, _SEND_FLAGS)
        except (BlockingIOError, InterruptedError):
            pass  # NOTE: the peer has unread wake-ups already: it will look at the queue anyway
        except OSError:
            pass  # the peer is gone; the next wait reports it

    def _wait(self, deadline: Optional[float], n: int) -> None:
        """Block until ``n`` elements (reader) or room for them (writer) may be
        there: the peer signalled, died (end of file: the drain raises), or a
        re-check slice passed; raises FmqTimeout at the deadline.

        The sleeping side raises its flag in the header first; the other side
        signals only when it sees the flag after publishing its counter.
        NOTE: each side's lock operation (an atomic read-modify-write in
        CPython's lock) orders its store before its load, as Dekker's
        handshake needs; the re-check slices cover the case anyway."""
        me = 0 if self.role == "reader" else 1
        slice_ms = _FIRST_SLICE_MS
        try:
            self._waiting[me] = 1
            while True:
                if self._closed:
                    raise FmqError("the queue is closed")
                with self._lock:  # NOTE: the barrier between raising our flag and reading their counter
                    c = self._counters
                    if (c[0] != self._own) if me == 0 else (self.capacity - ((self._own - c[1]) & _U64) >= n):
                        return
                ms = slice_ms
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise FmqTimeout("the queue operation timed out")
                    ms = max(1, min(ms, int(left * 1000 + 0.999)))
                try:
                    events = self._poll.poll(ms)
                except InterruptedError:
                    continue
                if events:
                    self._drain()
                    return
                slice_ms = min(slice_ms * 2, _MAX_SLICE_MS)
        except ValueError:  # the views were released: closed by another thread
            raise FmqError("the queue is closed") from None
        finally:
            if not self._closed:
                try:
                    self._waiting[me] = 0
                except ValueError:
                    pass

    def _drain(self) -> None:
        for _ in range(64):  # NOTE: bounded: a peer flooding its end cannot keep us here
            try:
                got = self._sock.recv(4096, _DONTWAIT)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                raise FmqPeerGone(f"the other side of the queue is gone ({e.strerror})") from None
            if not got:
                raise FmqPeerGone("the other side of the queue is gone")

    def created_elsewhere(self) -> bool:
        """Whether another process created this queue (the signal socketpair
        reports its creator's credentials, SO_PEERCRED, at both ends)."""
        try:
            raw = self._sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        except OSError:
            return False
        return struct.unpack("3i", raw)[0] != os.getpid()

    def peer_alive(self) -> bool:
        """False once the other side closed the queue or died."""
        if self._closed:
            return False
        try:
            got = self._sock.recv(1, socket.MSG_DONTWAIT | socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            return True
        except OSError:
            return False
        return bool(got)

    def interrupt(self) -> None:
        """Wake a thread blocked on this end (from another thread): its wait
        raises :class:`FmqPeerGone`.  The queue must still be closed."""
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    # ------------------------------------------------------------------ teardown
    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Close this end (idempotent): the other side sees end of file."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self.interrupt()
            for v in (self._counters, self._waiting, self._data, self._mv):
                v.release()
            _close_quietly(self._mm, self._sock)
        self.release_descriptor()

    def __enter__(self) -> "MessageQueue":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def _check_geometry(element_size: int, capacity: int) -> None:
    for name, v, hi in (("element size", element_size, MAX_ELEMENT_SIZE), ("capacity", capacity, MAX_CAPACITY)):
        if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= hi:
            raise FmqError(f"queue {name} {v!r} outside 1..{hi}")


def _close_quietly(mm: Optional[memoryview], sock: Optional[socket.socket]) -> None:
    if mm is not None:
        try:
            mm.release()  # NOTE: unmapped with the last view
        except (BufferError, ValueError):
            pass
    if sock is not None:
        try:
            sock.close()
        except OSError:
            pass
