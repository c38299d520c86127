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
* preemption at operation boundaries: a running task reaches a yield point
  between operations and in long kernels' outer loops
  (:func:`nnhal.ops.deadline.yield_point`); when work of a higher priority
  is queued or running, it parks there (its thread waits, its worker slot
  is handed to a spare thread, at most ``workers`` spare threads), the
  higher-priority work runs with the cores to itself, and the parked task
  resumes where it stopped before any new task of its own priority starts;
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
from nnhal.ops import deadline as op_deadline

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
        self._running = 0  # tasks holding a worker slot (parked ones do not)
        self._running_by_priority: dict[int, int] = {}
        self._parked_by_priority: dict[int, int] = {}
        self._idle = 0  # threads waiting for a task
        # NOTE: read without the lock by yield points (hints only; the lock decides)
        self.top_queued = -(1 << 30)
        self.top_active = -(1 << 30)
        self.max_spare = self.workers  # threads beyond ``workers``, taking the slots of parked tasks
        self.preempted = 0
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
            self.top_queued = -self._heap[0].key[0]
            self._work.notify_all()
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
                    "running": self._running, "parked": sum(self._parked_by_priority.values()),
                    "threads": len(self._threads), "completed": self.completed, "rejected": self.rejected,
                    "expired": self.expired, "preempted": self.preempted}

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

    def _can_start(self) -> bool:
        """A queued task may take a worker slot now (lock held): a slot is free,
        no running task has a higher priority, and no parked task of its
        priority or higher waits to resume."""
        if not self._heap or self._running >= self.workers:
            return False
        p = -self._heap[0].key[0]
        return p >= self._top_running() and p > _top(self._parked_by_priority)

    def _worker(self) -> None:
        _tls.worker = True
        _tls.scheduler = self
        while True:
            with self._lock:
                self._idle += 1
                while not self._stopped and not self._can_start():
                    self._work.wait()
                self._idle -= 1
                if self._stopped:
                    return
                task = heapq.heappop(self._heap)
                self.top_queued = -self._heap[0].key[0] if self._heap else -(1 << 30)
                prio = -task.key[0]
                self._running += 1
                self._running_by_priority[prio] = self._running_by_priority.get(prio, 0) + 1
                self.top_active = self._top_running()
            _tls.priority = prio
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
                    self.top_active = self._top_running()
                    self.completed += 1
                    # NOTE: workers held back by this task's priority may start now
                    self._work.notify_all()

    def _top_running(self) -> int:
        """The highest priority among running tasks (lock held)."""
        return _top(self._running_by_priority)

    def yield_to_higher(self) -> None:
        """Called by the running task at a yield point: if work of a higher
        priority is queued, park until it has run (see the module notes)."""
        prio = getattr(_tls, "priority", None)
        if prio is None or (self.top_queued <= prio and self.top_active <= prio):
            return  # NOTE: the common case, without taking the lock
        with self._lock:
            queued_higher = bool(self._heap) and -self._heap[0].key[0] > prio
            if self._stopped or not (queued_higher or self._top_running() > prio):
                return
            if queued_higher and self._idle == 0:
                if len(self._threads) >= self.workers + self.max_spare:
                    return  # NOTE: no spare thread may be added: keep running
                try:
                    th = threading.Thread(target=self._worker, name=f"{self.name}-worker-{len(self._threads)}",
                                          daemon=True)
                    th.start()
                except RuntimeError:
                    return
                self._threads.append(th)
            self.preempted += 1
            self._running -= 1
            self._running_by_priority[prio] -= 1
            self.top_active = self._top_running()
            self._parked_by_priority[prio] = self._parked_by_priority.get(prio, 0) + 1
            self._work.notify_all()
            while not self._stopped and not (
                    self._running < self.workers and (not self._heap or -self._heap[0].key[0] <= prio)
                    and self._top_running() <= prio and _top(self._parked_by_priority) <= prio):
                self._work.wait()
            self._parked_by_priority[prio] -= 1
            self._running += 1
            self._running_by_priority[prio] += 1
            self.top_active = self._top_running()

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


def _top(counts: dict[int, int]) -> int:
    return max((p for p, n in counts.items() if n > 0), default=-(1 << 30))


def yield_point() -> None:
    """Lets queued higher-priority work run first if the current thread is a
    scheduler's worker (installed as :data:`nnhal.ops.deadline.YIELD`)."""
    sched = getattr(_tls, "scheduler", None)
    if sched is not None:
        sched.yield_to_higher()


op_deadline.YIELD = yield_point


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
