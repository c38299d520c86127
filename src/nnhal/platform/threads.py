"""Threads kept a moment for the next job: what a burst server runs on.

Every HAL 1.2 burst is served by a thread of its own (the server blocks
reading its request queue), and a client makes bursts one after another: VTS
configures one per prepared model, executes a few requests and ends it.
Starting a thread costs its creation and, in ``Thread.start``, a wait until
the new thread holds the interpreter lock (hundreds of microseconds when
other threads run: more than a small burst execution).  A :class:`Lingering`
pool runs each job on a thread of its own too, but a thread whose job ended
waits up to ``linger`` seconds for the next one before it ends, so bursts
made one after another run on one thread started once.

Nothing is kept beyond that: an idle thread ends ``linger`` seconds after its
last job (no thread outlives a quiet process's last burst by more), at most
``max_idle`` wait at once (the others end at once), and a forked child
forgets its parent's idle threads (they do not exist in it).  While idle a
thread carries the name ``<name>-idle``, so a thread named ``<name>`` is one
running a job.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import threading
import weakref
from typing import Any, Callable, Iterator, Optional

from nnhal.platform import blas

__all__ = ["CountedSection", "Lingering", "one_cpu"]

log = logging.getLogger("nnhal.threads")


class _Idle:
    """An idle thread's mailbox: ``wake`` is held until a job is posted."""

    __slots__ = ("job", "wake")

    def __init__(self) -> None:
        self.job: Optional[Callable[[], None]] = None
        self.wake = threading.Lock()
        self.wake.acquire()


class Lingering:
    """Runs each job on a thread of its own, named ``name``, reusing a thread
    whose last job ended less than ``linger`` seconds ago (see the module
    doc).  A job's exception is logged, never raised to anyone."""

    def __init__(self, name: str, linger: float = 0.5, max_idle: int = 4):
        self.name = name
        self.linger = linger
        self.max_idle = max_idle
        self._lock = threading.Lock()
        self._idle: list[_Idle] = []
        _POOLS.add(self)

    def run(self, job: Callable[[], None]) -> None:
        """Starts ``job()`` on an idle thread, else a new one; returns at once.
        Raises RuntimeError when no thread can be started (nothing runs)."""
        with self._lock:
            if self._idle:
                box = self._idle.pop()  # NOTE: the latest to go idle: the others may end sooner
                box.job = job
                box.wake.release()
                return
        threading.Thread(target=self._main, args=(job,), name=self.name, daemon=True).start()

    def idle(self) -> int:
        """How many threads wait for a job now."""
        with self._lock:
            return len(self._idle)

    def _main(self, first: Callable[[], None]) -> None:
        me = threading.current_thread()
        box = _Idle()
        job: Optional[Callable[[], None]] = first
        while job is not None:
            try:
                job()
            except BaseException:  # noqa: BLE001 - a job's bug must not end the thread silently
                log.exception("%s: a job raised", self.name)
            job = None  # NOTE: nothing of the last job kept while idle
            with self._lock:
                if self.linger <= 0 or len(self._idle) >= self.max_idle:
                    return
                self._idle.append(box)
            me.name = f"{self.name}-idle"
            if not box.wake.acquire(timeout=self.linger):
                with self._lock:
                    if box in self._idle:
                        self._idle.remove(box)
                        return
                # NOTE: a job was posted as the wait timed out: it is this thread's
                box.wake.acquire()
            me.name = self.name
            job, box.job = box.job, None

    def _forget(self) -> None:
        """In a forked child: the idle threads are the parent's."""
        self._lock = threading.Lock()
        self._idle = []


_POOLS: "weakref.WeakSet[Lingering]" = weakref.WeakSet()


def _after_fork() -> None:
    for pool in list(_POOLS):
        pool._forget()




# --------------------------------------------------------------------------
# process-wide sections


class CountedSection:
    """A change of process-wide state for the length of a ``with`` block,
    counted: ``enter()`` runs when the first of any number of nested or
    concurrent blocks begins (what it returns is the saved state, which each
    block gets as its ``as`` value), ``leave(saved)`` when the last one ends,
    so the state is changed once and restored once.  ``forked(saved)`` runs in
    a child forked while a block is open (the block is the parent's: the child
    starts outside it).  Used for numpy's huge-page advice
    (``memory.small_pages``), the collector's frozen objects
    (``heap.frozen``) and the CPUs of the process (:func:`one_cpu`)."""

    def __init__(self, enter: Callable[[], Any], leave: Callable[[Any], None],
                 forked: Optional[Callable[[Any], None]] = None):
        self._enter, self._leave, self._forked = enter, leave, forked
        self._lock = threading.Lock()
        self._depth = 0
        self._saved: Any = None
        _SECTIONS.add(self)

    @contextlib.contextmanager
    def __call__(self) -> Iterator[Any]:
        with self._lock:
            if self._depth == 0:
                self._saved = self._enter()
            self._depth += 1
            saved = self._saved
        try:
            yield saved
        finally:
            with self._lock:
                self._depth -= 1
                if self._depth == 0:
                    saved, self._saved = self._saved, None
                    self._leave(saved)

    def _after_fork(self) -> None:
        saved, open_ = self._saved, self._depth > 0
        self._lock, self._depth, self._saved = threading.Lock(), 0, None
        if open_ and self._forked is not None:
            self._forked(saved)


_SECTIONS: "weakref.WeakSet[CountedSection]" = weakref.WeakSet()


# --------------------------------------------------------------------------
# one CPU for a process whose threads take turns


def _current_cpu(allowed: set[int]) -> int:
    """The CPU the calling thread runs on (glibc's sched_getcpu), else the lowest it may run on."""
    try:
        cpu = int(ctypes.CDLL(None, use_errno=True).sched_getcpu())
    except (OSError, AttributeError, TypeError, ValueError):
        cpu = -1
    return cpu if cpu in allowed else min(allowed)


def _set_every_thread(cpus: set[int]) -> None:
    """Every thread of this process on ``cpus`` (a thread that ends meanwhile is skipped)."""
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        tids = [str(threading.get_native_id())]
    for tid in tids:
        try:
            os.sched_setaffinity(int(tid), cpus)
        except (OSError, ValueError):
            pass


def _pin() -> Optional[tuple[int, set[int], Optional[int]]]:
    """(the one CPU, the CPUs the process had, numpy's OpenBLAS threads before), or None: nothing changed."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    try:
        allowed = set(os.sched_getaffinity(0))
    except OSError:
        return None
    if len(allowed) <= 1:
        return None
    cpu = _current_cpu(allowed)
    _set_every_thread({cpu})
    # NOTE: numpy's OpenBLAS threads would share the one CPU too, each product's work handed to threads that
    # wait for their turn (VTS's memory section 0.1 -> 0.5 s): one thread meanwhile
    threads = blas.threads()
    if threads is not None and threads > 1:
        blas.set_threads(1)
    return cpu, allowed, threads


def _unpin(saved: Optional[tuple[int, set[int], Optional[int]]]) -> None:
    if saved is None:
        return
    _, allowed, threads = saved
    _set_every_thread(allowed)
    if threads is not None and threads > 1:
        blas.set_threads(threads)


def _unpin_child(saved: Optional[tuple[int, set[int], Optional[int]]]) -> None:
    if saved is not None:
        try:
            os.sched_setaffinity(0, saved[1])
        except OSError:
            pass


_one_cpu = CountedSection(_pin, _unpin, _unpin_child)


@contextlib.contextmanager
def one_cpu() -> Iterator[Optional[int]]:
    """Within the block every thread of the process (those that exist and
    those started meanwhile, which inherit it) runs on one CPU, the one the
    caller runs on now; after it, on the CPUs the process had before.  Yields
    that CPU, or None where nothing was changed (not Linux, or one CPU
    allowed already).

    For a process whose Python threads take turns at the interpreter lock --
    a client and an in-process driver handing each execution to a worker, a
    burst server, a fence watcher and back -- a second CPU runs nothing in
    parallel, but each hand-over to a thread waiting on another, idle CPU has
    to wake that CPU first: on a virtual machine an inter-processor interrupt
    and a halted virtual CPU scheduled again (this 2-core VM: a burst's
    set-up 245 -> 107 us, a burst execution 93 -> 61 us on one CPU; the whole
    ``nnhal vts --jobs 1`` 109 -> 93 s).  Not for work that runs native
    threads in parallel (a backend's own thread pool would share the CPU
    too: numpy's OpenBLAS runs one thread within the block).  Nested blocks
    keep the outermost one's CPU; a child forked within the block starts on
    the CPUs the process had."""
    with _one_cpu() as saved:
        yield None if saved is None else saved[0]


def _after_fork_sections() -> None:
    for section in list(_SECTIONS):
        section._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
    os.register_at_fork(after_in_child=_after_fork_sections)
