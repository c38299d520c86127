"""Sync fences for ``IPreparedModel.executeFenced`` (HAL 1.3).

A sync fence is a ``hal.Handle`` holding one file descriptor that becomes
readable when the fence is signaled, as Android's ``sync_file`` fds.  Here a
fence is a Linux ``eventfd`` (``os.eventfd``): signaling adds to its counter,
which makes it readable for good.  Waiting and reading the state only
``poll`` the fd and never ``read`` it, so they never consume the signal and
any number of waiters, in any process holding the fd, see it.

A fence can also be signaled with an error (as a sync_file whose timeline
reported an error): it becomes readable too, and :func:`state` reports
:attr:`FenceState.ERROR`.  The error is encoded in the eventfd counter (a
normal signal adds 1, an error adds ``2**40``), read without consuming it
from ``/proc/self/fdinfo``.

``wait`` and ``state`` follow Android's ``syncWait``: ACTIVE while not
signaled (or on timeout), SIGNALED, ERROR, and UNKNOWN for a bad handle.
All functions are thread-safe.

:func:`watch` waits for fences without blocking its caller (what
``executeFenced`` needs: launch, return at once, start once every ``waitFor``
fence is signaled): one watcher thread per process polls every watched fence
(started on demand, gone half a second after the last watch ended), so pending fenced
executions cost file descriptors, not threads, and their number is bounded
(:data:`MAX_WATCHES`).
"""

from __future__ import annotations

import enum
import logging
import math
import os
import select
import threading
import time
from typing import Callable, Optional

from nnhal.hal import Handle

__all__ = [
    "FenceState",
    "close",
    "create",
    "dup",
    "is_null",
    "is_valid",
    "signal",
    "signaled",
    "state",
    "sync_wait",
    "wait",
    "watch",
    "watching",
    "MAX_WATCHES",
]

_ERROR_INCREMENT = 1 << 40
_POLL_BAD = select.POLLNVAL
_POLL_ERR = select.POLLERR


class FenceState(enum.IntEnum):
    """The state of a sync fence (the values of Android's ``nn::FenceState``)."""

    ACTIVE = 0  # not signaled yet
    SIGNALED = 1
    ERROR = 2  # signaled with an error
    UNKNOWN = 3  # a bad handle, or an internal error


def create() -> Handle:
    """A new, active (unsignaled) fence."""
    fd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
    return Handle(fds=[fd], ints=[])


def signaled() -> Handle:
    """A new fence that is already signaled."""
    h = create()
    signal(h)
    return h


def is_null(handle: Handle | None) -> bool:
    """True for a null handle (None or no fds): a driver returns one from
    ``executeFenced`` when there is nothing to wait for."""
    return handle is None or not handle.fds


def is_valid(handle: Handle | None) -> bool:
    """True if ``handle`` is usable as a fence: exactly one open fd."""
    if handle is None or not isinstance(handle, Handle) or len(handle.fds) != 1:
        return False
    fd = handle.fds[0]
    if not isinstance(fd, int) or isinstance(fd, bool) or fd < 0:
        return False
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _fd(handle: Handle) -> int:
    if not is_valid(handle):
        raise ValueError(f"not a valid sync fence handle (exactly one open fd needed): {handle!r}")
    return handle.fds[0]


def signal(handle: Handle, error: bool = False) -> None:
    """Signal the fence (with an error if ``error``).  Signaling an already
    signaled fence is harmless.  Raises ValueError for an invalid handle."""
    fd = _fd(handle)
    try:
        os.eventfd_write(fd, _ERROR_INCREMENT if error else 1)
    except BlockingIOError:
        pass  # the counter is (absurdly) full: the fence is signaled anyway
    except OSError as e:
        raise ValueError(f"cannot signal fence fd {fd}: {e.strerror}") from e


def _eventfd_count(fd: int) -> int | None:
    """The eventfd counter, read without consuming it (None if unknown).  NOTE: one read of the small
    fdinfo file through the descriptor calls (a buffered file object and its lines cost half again)."""
    try:
        info = os.open(f"/proc/self/fdinfo/{fd}", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        data = os.read(info, 4096)
    except OSError:
        return None
    finally:
        os.close(info)
    at = data.find(b"\neventfd-count:")
    if at < 0:
        return None
    end = data.find(b"\n", at + 1)
    try:
        return int(data[at + 15:end if end > 0 else len(data)].strip(), 16)
    except ValueError:
        return None


def sync_wait(handle: Handle | None, timeout_s: float | None = None) -> FenceState:
    """Wait up to ``timeout_s`` seconds (None: forever, 0: just look) for the
    fence; return its state: SIGNALED or ERROR once signaled, ACTIVE on
    timeout, UNKNOWN for a bad handle."""
    if not is_valid(handle):
        return FenceState.UNKNOWN
    fd = handle.fds[0]  # type: ignore[union-attr]
    if timeout_s is None:
        timeout_ms = -1
    else:
        # NOTE: poll() takes a C int of milliseconds: longer waits are "forever"
        timeout_ms = max(0, math.ceil(timeout_s * 1000)) if timeout_s < 2**31 / 1000 else -1
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    try:
        # NOTE: Python retries poll on EINTR with the remaining timeout (PEP 475).
        events = poller.poll(timeout_ms)
    except OSError:
        return FenceState.UNKNOWN
    if not events:
        return FenceState.ACTIVE
    revents = events[0][1]
    if revents & _POLL_BAD:
        return FenceState.UNKNOWN
    if revents & _POLL_ERR:
        return FenceState.ERROR
    count = _eventfd_count(fd)
    if count is not None and count >= _ERROR_INCREMENT:
        return FenceState.ERROR
    return FenceState.SIGNALED


def wait(handle: Handle | None, timeout_s: float | None = None) -> bool:
    """Wait up to ``timeout_s`` seconds (None: forever) for the fence to be
    signaled.  True if it was signaled without error; False on timeout, on an
    error-signaled fence and on an invalid handle."""
    return sync_wait(handle, timeout_s) is FenceState.SIGNALED


def state(handle: Handle | None) -> FenceState:
    """The fence's state now, without waiting."""
    return sync_wait(handle, 0)


def dup(handle: Handle) -> Handle:
    """The same fence under a new fd (to keep after the caller closes its own)."""
    return Handle(fds=[os.dup(_fd(handle))], ints=list(handle.ints))


def close(handle: Handle) -> None:
    """Close the handle's fds (and forget them)."""
    fds, handle.fds = list(handle.fds), []
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


# --------------------------------------------------------------------------
# waiting without blocking the caller

MAX_WATCHES = 1024  # NOTE: each pending watch holds fds; beyond this watch() refuses
_MAX_POLL_MS = 3_600_000  # NOTE: poll in bounded steps: a far deadline must not overflow the C int

_LINGER_NS = 500_000_000  # NOTE: how long the watcher thread outlives its last watch

log = logging.getLogger("nnhal.fence")


class _Watch:
    __slots__ = ("pending", "deadline_ns", "on_done")

    def __init__(self, handles: list[Handle], deadline_ns: Optional[int], on_done: Callable[[FenceState], None]):
        self.pending = handles
        self.deadline_ns = deadline_ns
        self.on_done = on_done


class _Watcher:
    """One thread polling every watched fence (see :func:`watch`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watches: list[_Watch] = []
        self._thread: Optional[threading.Thread] = None
        self._wake = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)

    def count(self) -> int:
        with self._lock:
            return len(self._watches)

    def add(self, w: _Watch) -> bool:
        with self._lock:
            if len(self._watches) >= MAX_WATCHES:
                return False
            if self._thread is None:
                t = threading.Thread(target=self._run, name="nnhal-fence-watcher", daemon=True)
                t.start()  # NOTE: RuntimeError (no thread) reaches the caller: nothing was added
                self._thread = t
            self._watches.append(w)
        os.eventfd_write(self._wake, 1)
        return True

    def _run(self) -> None:
        idle_since: Optional[int] = None
        while True:
            now = time.monotonic_ns()
            with self._lock:
                if self._watches:
                    idle_since = None
                elif idle_since is None:
                    idle_since = now
                elif now - idle_since >= _LINGER_NS:
                    self._thread = None  # NOTE: nothing watched for a while: the thread ends (add() starts another)
                    return
                watches = list(self._watches)
            # NOTE: idle, the thread waits a moment for the next watch (chained fenced executions come one
            # after another: one thread serves them all rather than one started for each)
            timeout = _MAX_POLL_MS if idle_since is None else \
                max(1, math.ceil((_LINGER_NS - (now - idle_since)) / 1e6))
            for w in watches:
                if w.deadline_ns is not None:
                    timeout = min(timeout, max(0, math.ceil((w.deadline_ns - now) / 1e6)))
            poller = select.poll()
            poller.register(self._wake, select.POLLIN)
            for w in watches:
                for h in w.pending:
                    poller.register(h.fds[0], select.POLLIN)
            try:
                poller.poll(timeout)
            except OSError:
                pass
            try:
                os.eventfd_read(self._wake)
            except BlockingIOError:
                pass
            if not watches:
                continue
            now = time.monotonic_ns()
            finished: list[tuple[_Watch, FenceState]] = []
            for w in watches:
                result: Optional[FenceState] = None
                still = []
                for h in w.pending:
                    st = sync_wait(h, 0)
                    if st == FenceState.SIGNALED:
                        close(h)
                    elif st == FenceState.ACTIVE:
                        still.append(h)
                    else:
                        result = FenceState.ERROR
                        still.append(h)
                w.pending = still
                if result is None and not still:
                    result = FenceState.SIGNALED
                if result is None and w.deadline_ns is not None and now >= w.deadline_ns:
                    result = FenceState.ACTIVE
                if result is not None:
                    finished.append((w, result))
            if finished:
                with self._lock:
                    done = {id(w) for w, _ in finished}
                    self._watches = [w for w in self._watches if id(w) not in done]
                for w, result in finished:  # NOTE: outside the lock: on_done may watch again
                    for h in w.pending:
                        close(h)
                    try:
                        w.on_done(result)
                    except Exception:  # noqa: BLE001 - the watcher must survive its clients
                        log.exception("fence watch callback raised")


_WATCHER = _Watcher()


def watch(handles: list[Handle], deadline_ns: Optional[int], on_done: Callable[[FenceState], None]) -> bool:
    """Call ``on_done(state)`` once, from the watcher thread, when every fence
    of ``handles`` is signaled (SIGNALED), as soon as one signals an error
    (ERROR), or when ``deadline_ns`` (``time.monotonic_ns()``) passes first
    (ACTIVE); None waits for ever.  Never blocks.  Takes ownership of the
    handles (closed once done: pass duplicates, :func:`dup`, to keep yours).
    False (nothing taken, ``on_done`` never called) when :data:`MAX_WATCHES`
    watches are pending already."""
    for h in handles:
        _fd(h)  # ValueError for an invalid handle, before anything is taken
    return _WATCHER.add(_Watch(list(handles), deadline_ns, on_done))


def watching() -> int:
    """The number of pending watches."""
    return _WATCHER.count()
