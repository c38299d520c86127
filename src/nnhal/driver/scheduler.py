"""The driver's work queue: priorities and bounded queues of HAL 1.3.

``prepareModel_1_3`` takes a ``Priority`` that belongs to the prepared model
("Higher priority executions may use more compute resources than lower
priority executions, and may preempt or starve lower priority executions",
IDevice.hal 1.3), and every launch may answer ``RESOURCE_EXHAUSTED_*`` ("the
task was aborted by the driver").  Here every preparation and execution
(asynchronous, synchronous, fenced, burst) runs through one
:class:`Scheduler`:

* a fixed pool of worker threads, one per core: work never spawns a thread
  per call, and the machine is never oversubscribed by the driver itself;
* a priority queue in front of it: a queued task of a HIGH-priority prepared
  model is taken before every queued MEDIUM and LOW task (FIFO within one
  priority).  Running tasks are not preempted (a numpy kernel cannot be
  interrupted safely), so a HIGH task waits at most for one running task per
  worker; and while a task runs, no task of a lower priority starts on the
  other workers (the higher-priority work gets the cores and the BLAS
  threads to itself: "Higher priority executions may use more compute
  resources than lower priority executions, and may preempt or starve lower
  priority executions", IDevice.hal 1.3);
* a bound on queued tasks: beyond it :meth:`Scheduler.submit` refuses at once
  and the driver answers RESOURCE_EXHAUSTED_TRANSIENT (launch status and
  callback) instead of letting the queue grow without limit;
* deadlines while queued: a task whose deadline passes before a worker takes
  it is dropped at that moment (a timer thread watches the earliest queued
  deadline) and reported through its ``expire`` callback
  (MISSED_DEADLINE_TRANSIENT: the load, not the task, made it late).

Synchronous callers (``executeSynchronously*``, bursts) use
:meth:`Scheduler.call`: they queue like everybody else and wait for the
result, so a HIGH synchronous execution is not stuck behind LOW ones either.
Work already running on a worker that calls :meth:`call` runs inline (no
worker ever waits for another: no deadlock).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from nnhal import hal

log = logging.getLogger("nnhal.driver")

DEFAULT_MAX_QUEUED = 128
_MAX_WAIT_S = 3600.0  # NOTE: timer waits in bounded steps: a far deadline (2**64 - 1 ns) must not overflow

_tls = threading.local()


class QueueFull(Exception):
    """The queue is at its bound (-> RESOURCE_EXHAUSTED_TRANSIENT)."""


class Expired(Exception):
    """The deadline passed while the task was queued (-> MISSED_DEADLINE_TRANSIENT)."""


@dataclass(order=True)
class _Task:
    key: tuple  # (-priority, sequence): heapq pops the highest priority, then the oldest
    run: Callable[[], None] = field(compare=False)
    expire: Optional[Callable[[str], None]] = field(compare=False, default=None)
    deadline_ns: Optional[int] = field(compare=False, default=None)
    dropped: bool = field(compare=False, default=False)


def in_worker() -> bool:
    """True on one of a scheduler's worker threads."""
    return getattr(_tls, "worker", False)


class Scheduler:
    """A bounded priority queue in front of a fixed pool of worker threads."""

    def __init__(self, workers: Optional[int] = None, max_queued: int = DEFAULT_MAX_QUEUED, name: str = "nnhal"):
        self.workers = max(1, int(workers or os.cpu_count() or 1))
        self.max_queued = max(0, int(max_queued))
        self.name = name
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)
        self._timer = threading.Condition(self._lock)
        self._heap: list[_Task] = []
        self._seq = itertools.count()
        self._threads: list[threading.Thread] = []
        self._timer_thread: Optional[threading.Thread] = None
        self._running = 0
        self._running_by_priority: dict[int, int] = {}
        self._stopped = False
        self.completed = 0
        self.rejected = 0
        self.expired = 0

    # ------------------------------------------------------------------ public
    def submit(self, priority: int, run: Callable[[], None], expire: Optional[Callable[[str], None]] = None,
               deadline_ns: Optional[int] = None) -> bool:
        """Queues ``run`` (never raises, never blocks).  False when the queue is
        full or the scheduler is stopped: the caller answers
        RESOURCE_EXHAUSTED_TRANSIENT.  ``expire(reason)`` is called instead of
        ``run`` if the task is dropped ("deadline" while queued, "shutdown")."""
        with self._lock:
            if self._stopped or len(self._heap) >= self.max_queued:
                self.rejected += 1
                return False
            try:
                self._start_threads(deadline_ns is not None)
            except RuntimeError as e:  # NOTE: no thread could be started: refused like a full queue
                log.error("scheduler: cannot start worker threads: %s", e)
                self.rejected += 1
                return False
            heapq.heappush(self._heap, _Task((-int(priority), next(self._seq)), run, expire, deadline_ns))
            self._work.notify()
            if deadline_ns is not None:
                self._timer.notify()
        return True

    def call(self, priority: int, fn: Callable[[], Any], deadline_ns: Optional[int] = None) -> Any:
        """Runs ``fn`` on a worker in priority order and returns its result
        (its exception is re-raised).  Raises :class:`QueueFull` when the queue
        is full and :class:`Expired` if the deadline passes while queued."""
        if in_worker():
            return fn()
        done = threading.Event()
        box: dict[str, Any] = {}

        def run() -> None:
            try:
                box["result"] = fn()
            except BaseException as e:  # noqa: BLE001  # NOTE: handed to the waiting caller
                box["error"] = e
            finally:
                done.set()

        def expire(reason: str) -> None:
            box["expired"] = reason
            done.set()

        if not self.submit(priority, run, expire, deadline_ns):
            raise QueueFull(f"{self.name}: {self.max_queued} tasks already queued")
        done.wait()
        if "expired" in box:
            raise Expired(f"dropped while queued ({box['expired']})")
        if "error" in box:
            raise box["error"]
        return box.get("result")

    def stats(self) -> dict:
        with self._lock:
            return {"workers": self.workers, "max_queued": self.max_queued, "queued": len(self._heap),
                    "running": self._running, "completed": self.completed, "rejected": self.rejected,
                    "expired": self.expired}

    def shutdown(self, wait: bool = True) -> None:
        """Stops the workers after their running tasks; queued tasks are
        dropped through their ``expire`` ("shutdown")."""
        with self._lock:
            self._stopped = True
            dropped = list(self._heap)
            self._heap.clear()
            self._work.notify_all()
            self._timer.notify_all()
            threads = list(self._threads) + ([self._timer_thread] if self._timer_thread else [])
        for t in dropped:
            _drop(t, "shutdown")
        if wait:
            for th in threads:
                if th is not threading.current_thread():
                    th.join(timeout=30)

    # ------------------------------------------------------------------ internals
    def _start_threads(self, timer: bool) -> None:
        """Starts the pool (and the deadline timer) on first use; lock held."""
        while len(self._threads) < self.workers:
            th = threading.Thread(target=self._worker, name=f"{self.name}-worker-{len(self._threads)}", daemon=True)
            th.start()
            self._threads.append(th)
        if timer and self._timer_thread is None:
            th = threading.Thread(target=self._watch_deadlines, name=f"{self.name}-deadlines", daemon=True)
            th.start()
            self._timer_thread = th

    def _worker(self) -> None:
        _tls.worker = True
        while True:
            with self._lock:
                while not self._stopped and (not self._heap or -self._heap[0].key[0] < self._top_running()):
                    self._work.wait()
                if self._stopped:
                    return
                task = heapq.heappop(self._heap)
                prio = -task.key[0]
                self._running += 1
                self._running_by_priority[prio] = self._running_by_priority.get(prio, 0) + 1
            try:
                if task.deadline_ns is not None and time.monotonic_ns() >= task.deadline_ns:
                    with self._lock:
                        self.expired += 1
                    _drop(task, "deadline")
                else:
                    task.run()
            except BaseException:  # noqa: BLE001  # NOTE: a task's bug must not kill a worker
                log.exception("scheduler: a task raised")
            finally:
                with self._lock:
                    self._running -= 1
                    self._running_by_priority[prio] -= 1
                    self.completed += 1
                    # NOTE: workers held back by this task's priority may start now
                    self._work.notify_all()

    def _top_running(self) -> int:
        """The highest priority among running tasks (lock held)."""
        return max((p for p, n in self._running_by_priority.items() if n > 0), default=-(1 << 30))

    def _watch_deadlines(self) -> None:
        """Drops queued tasks the moment their deadline passes."""
        while True:
            with self._lock:
                if self._stopped:
                    return
                now = time.monotonic_ns()
                due = [t for t in self._heap if t.deadline_ns is not None and t.deadline_ns <= now]
                if due:
                    self._heap = [t for t in self._heap if not (t.deadline_ns is not None and t.deadline_ns <= now)]
                    heapq.heapify(self._heap)
                    self.expired += len(due)
                else:
                    pending = [t.deadline_ns for t in self._heap if t.deadline_ns is not None]
                    wait = _MAX_WAIT_S if not pending else min(_MAX_WAIT_S, (min(pending) - now) / 1e9)
                    self._timer.wait(max(wait, 0.0))
                    continue
            for t in due:  # NOTE: outside the lock: expire notifies a client's callback
                _drop(t, "deadline")


def _drop(task: _Task, reason: str) -> None:
    if task.dropped:
        return
    task.dropped = True
    if task.expire is None:
        return
    try:
        task.expire(reason)
    except Exception:  # noqa: BLE001
        log.exception("scheduler: expire callback raised")


def missed_deadline_status(launch_ns: int, start_ns: int, deadline_ns: Optional[int],
                           best_ns: Optional[int] = None) -> hal.ErrorStatus:
    """Which MISSED_DEADLINE_* a task that missed ``deadline_ns`` gets
    (types.hal 1.3: _TRANSIENT "future deadlines may still be met for the
    same task after a short delay", _PERSISTENT "future deadlines will likely
    also not be met for the same task even after a short delay"):

    * the deadline had passed when the call arrived: PERSISTENT;
    * the task waited in the queue for more than half its window, or it is
      known to have completed within such a window before (``best_ns``, its
      fastest successful run): TRANSIENT, the load made it late;
    * otherwise it started in time and still did not fit: PERSISTENT."""
    S = hal.ErrorStatus
    if deadline_ns is None:
        return S.MISSED_DEADLINE_TRANSIENT
    window = deadline_ns - launch_ns
    if window <= 0:
        return S.MISSED_DEADLINE_PERSISTENT
    if start_ns - launch_ns > window // 2 or (best_ns is not None and best_ns <= window):
        return S.MISSED_DEADLINE_TRANSIENT
    return S.MISSED_DEADLINE_PERSISTENT


_DEFAULT: Optional[Scheduler] = None
_DEFAULT_LOCK = threading.Lock()


def get_scheduler() -> Scheduler:
    """The process-wide scheduler of the sample driver: one worker per core,
    ``NNHAL_MAX_QUEUED`` (default 128) queued tasks at most."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            try:
                bound = int(os.environ.get("NNHAL_MAX_QUEUED", DEFAULT_MAX_QUEUED))
            except ValueError:
                bound = DEFAULT_MAX_QUEUED
            _DEFAULT = Scheduler(os.cpu_count(), bound, "nnhal")
        return _DEFAULT
