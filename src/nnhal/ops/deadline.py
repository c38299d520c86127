"""Deadlines inside a running model (HAL 1.3 ``OptionalTimePoint deadline`` of
``prepareModel_1_3``, ``execute_1_3``, ``executeSynchronously_1_3`` and
``executeFenced``, IPreparedModel.hal / IDevice.hal 1.3: "If the execution is
not able to be completed before the provided deadline, the execution may be
aborted").

The executor checks the deadline between operations; long kernels also call
:func:`poll` inside their outer loops (time steps of a sequence, row blocks of
a requantization...), so one big operation does not run far past the
deadline.  The deadline is thread-local: the thread running an execution (or
a preparation) sets it with :func:`scope`; helper threads of a kernel do not
see it (the calling thread's part of the work polls).  A deadline is
nanoseconds on ``time.monotonic_ns()`` (the steady clock); ``None`` is "no
deadline", and any value, up to 2**64 - 1, is compared as a Python int (no
overflow).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Callable, Optional

_tls = threading.local()


class DeadlineMissed(Exception):
    """The deadline (or a WHILE loop timeout) passed: the work is aborted and
    the driver reports MISSED_DEADLINE_*."""


def current() -> Optional[int]:
    """The deadline (ns, steady clock) of the work running on this thread, or None."""
    return getattr(_tls, "deadline", None)


@contextmanager
def scope(deadline_ns: Optional[int]) -> Iterator[None]:
    """Makes ``deadline_ns`` the current thread's deadline for the duration
    (nested scopes keep the earliest deadline and restore the outer one)."""
    outer = getattr(_tls, "deadline", None)
    if deadline_ns is None:
        inner = outer
    elif outer is None:
        inner = deadline_ns
    else:
        inner = min(outer, deadline_ns)
    _tls.deadline = inner
    try:
        yield
    finally:
        _tls.deadline = outer


def passed(deadline_ns: Optional[int]) -> bool:
    return deadline_ns is not None and time.monotonic_ns() >= deadline_ns


# A hook the driver's scheduler installs (nnhal.driver.scheduler.yield_point):
# at a yield point, queued work of a higher priority may run first.
YIELD: Optional[Callable[[], None]] = None


# The same, resolved for the calling thread (the scheduler installs it): the
# callable to run at each yield point of this thread, or None when the thread
# is no scheduler's worker.  The executor asks once per execution and calls
# it between operations (a thread does not change scheduler mid-execution).
YIELD_FOR_THREAD: Optional[Callable[[], Optional[Callable[[], None]]]] = None


def thread_yield() -> Optional[Callable[[], None]]:
    """What :func:`yield_point` runs on this thread (None: nothing)."""
    resolve = YIELD_FOR_THREAD
    if resolve is not None:
        return resolve()
    return YIELD


def yield_point() -> None:
    """Between operations and in long kernels' outer loops: gives way to
    queued higher-priority work (preemption at operation boundaries)."""
    hook = YIELD
    if hook is not None:
        hook()


def poll() -> None:
    """A yield point, then raises :class:`DeadlineMissed` if this thread's
    deadline has passed.  Cheap (thread-local reads and a clock read, about a
    microsecond): kernels call it once per outer-loop iteration."""
    hook = YIELD
    if hook is not None:
        hook()
    d = getattr(_tls, "deadline", None)
    if d is not None and time.monotonic_ns() > d:
        raise DeadlineMissed("the deadline passed inside an operation")
