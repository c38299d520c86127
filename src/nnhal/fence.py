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
"""

from __future__ import annotations

import enum
import math
import os
import select

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
    """The eventfd counter, read without consuming it (None if unknown)."""
    try:
        with open(f"/proc/self/fdinfo/{fd}", "rb") as f:
            for line in f:
                if line.startswith(b"eventfd-count:"):
                    return int(line.split(b":", 1)[1].strip(), 16)
    except (OSError, ValueError):
        pass
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
