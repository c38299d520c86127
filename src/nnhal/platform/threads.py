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

import logging
import os
import threading
import weakref
from typing import Callable, Optional

__all__ = ["Lingering"]

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


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
