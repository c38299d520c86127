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
  priority); while a task runs, no task of a lower priority starts on the
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
  resumes where it stopped before any new task of its own priority starts
  (a numpy call itself is never interrupted: a HIGH task waits at most for
  the running tasks' next yield points);
* a bound on queued tasks: beyond it :meth:`Scheduler.submit` refuses at once
  and the driver answers RESOURCE_EXHAUSTED_TRANSIENT (launch status and
  callback) instead of letting the queue grow without limit;
* deadlines while queued: a task whose deadline passes before a worker takes
  it is dropped at that moment (a timer thread watches the earliest queued
  deadline) and reported through its ``expire`` callback
  (MISSED_DEADLINE_TRANSIENT: the load, not the task, made it late).

Synchronous callers (``executeSynchronously*``, fenced and burst executions
waiting for their result) use :meth:`Scheduler.call`: the caller takes a
worker slot in the same priority order (at once when one is free and nobody
waits, else through a ticket in the queue) and runs the work on its own
thread, so a HIGH synchronous execution is not stuck behind LOW ones either,
and a free driver adds no thread hand-off to a synchronous call.  Work
already running on a worker that calls :meth:`call` runs inline (no worker
ever waits for another: no deadlock).  Tasks must not block on work that is
itself queued here (fenced executions wait for their fences before they are
submitted, on the fence watcher's thread).
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

# NOTE: ``_tls.slot``: (the scheduler, the priority) whose worker slot the thread holds (priority None: a
# worker between tasks), or None; one attribute, read and set once per synchronous call
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
    ticket: bool = field(compare=False, default=False)  # a synchronous caller's place in the queue


def in_worker() -> bool:
    """True on one of a scheduler's worker threads (or a synchronous caller holding a slot)."""
    return getattr(_tls, "slot", None) is not None


class Scheduler:
    """A bounded priority queue in front of a fixed pool of worker threads."""

    def __init__(self, workers: Optional[int] = None, max_queued: int = DEFAULT_MAX_QUEUED, name: str = "nnhal"):
        self.workers = max(1, int(workers or os.cpu_count() or 1))
        self.max_queued = max(0, int(max_queued))
        self.name = name
        self._lock = threading.Lock()
        # NOTE: one condition per kind of waiter, so that a change wakes only those it may let go on:
        # idle workers (one woken per task that may start), synchronous callers waiting with a ticket,
        # parked tasks, and the deadline timer (see _wake_next)
        self._workers_cv = threading.Condition(self._lock)
        self._tickets_cv = threading.Condition(self._lock)
        self._parked_cv = threading.Condition(self._lock)
        self._timer = threading.Condition(self._lock)
        self._timer_due = 0  # NOTE: when the timer wakes next by itself (ns); an earlier deadline wakes it now
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
        self.top_active = -(1 << 30)  # highest priority holding a slot (kept up to date under the lock)
        self.top_parked = -(1 << 30)  # highest priority of a parked task
        self.max_spare = self.workers  # threads beyond ``workers``, taking the slots of parked tasks
        self.preempted = 0
        self._yielders: dict[int, Callable[[], None]] = {}
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
            self._wake_next()
            if deadline_ns is not None and deadline_ns < self._timer_due:
                self._timer.notify()
        return True

    def call(self, priority: int, fn: Callable[[], Any], deadline_ns: Optional[int] = None) -> Any:
        """Runs ``fn`` on the calling thread once it holds a worker slot, taken
        in priority order, and returns its result (or raises its exception).
        Raises :class:`QueueFull` when it would have to queue and the queue is
        full, :class:`Expired` if the deadline passes while it waits."""
        tls = _tls
        if getattr(tls, "slot", None) is not None:
            return fn()  # NOTE: a worker, or a caller holding a slot already: inline (no one waits for itself)
        prio = priority if priority.__class__ is int else int(priority)
        # NOTE: acquire / release in try-finally rather than ``with``: the per-execution path (a ``with``
        # looks up and binds __enter__ and __exit__ each time, about twice the cost)
        lock = self._lock
        lock.acquire()
        try:
            if not self._heap and self._running < self.workers and prio >= self.top_active \
                    and prio > self.top_parked and not self._stopped:
                # NOTE: the common case, _slot_free and _take_slot inline: a free slot, nobody waiting
                self._running += 1
                running = self._running_by_priority
                running[prio] = running.get(prio, 0) + 1
                if prio > self.top_active:
                    self.top_active = prio
            else:
                if self._stopped:
                    self.rejected += 1
                    raise QueueFull(f"{self.name}: stopped")
                self._wait_for_slot(prio, deadline_ns)
        finally:
            lock.release()
        # NOTE: not a worker (returned above), so this thread had no scheduler context to restore
        tls.slot = (self, prio)
        try:
            if deadline_ns is not None and time.monotonic_ns() >= deadline_ns:
                with lock:
                    self.expired += 1
                raise Expired("the deadline passed while waiting for a worker slot")
            return fn()
        finally:
            tls.slot = None
            lock.acquire()
            try:
                self._release_slot(prio)
            finally:
                lock.release()

    def _wait_for_slot(self, prio: int, deadline_ns: Optional[int]) -> None:
        """:meth:`call`'s way to a slot through a ticket in the queue (lock held);
        returns holding the slot, or raises QueueFull / Expired."""
        if len(self._heap) >= self.max_queued:
            self.rejected += 1
            raise QueueFull(f"{self.name}: {self.max_queued} tasks already queued")
        try:
            self._start_threads(deadline_ns is not None)
        except RuntimeError as e:  # NOTE: the deadline timer cannot start: refused like a full queue
            log.error("scheduler: cannot start threads: %s", e)
            self.rejected += 1
            raise QueueFull(f"{self.name}: no thread") from None
        box: dict[str, str] = {}
        ticket = _Task((-prio, next(self._seq)), _no_run, lambda reason: box.setdefault("expired", reason),
                       deadline_ns, ticket=True)
        heapq.heappush(self._heap, ticket)
        self.top_queued = -self._heap[0].key[0]
        if deadline_ns is not None and deadline_ns < self._timer_due:
            self._timer.notify()
        while "expired" not in box and not self._stopped and not (
                self._heap and self._heap[0] is ticket and self._can_start()):
            self._tickets_cv.wait()
        if self._stopped:
            box.setdefault("expired", "shutdown")
        if "expired" in box:
            raise Expired(f"dropped while queued ({box['expired']})")
        heapq.heappop(self._heap)
        self.top_queued = -self._heap[0].key[0] if self._heap else -(1 << 30)
        self._take_slot(prio)
        self._wake_next()  # NOTE: the task behind this ticket may start too (a slot left)

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
            self.top_queued = -(1 << 30)
            self._notify_everyone()
            self._timer.notify_all()
            threads = list(self._threads) + ([self._timer_thread] if self._timer_thread else [])
        for t in dropped:
            _drop(t, "shutdown")
        with self._lock:
            self._notify_everyone()  # NOTE: synchronous callers whose tickets were dropped
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

    def _slot_free(self, prio: int) -> bool:
        """A task of priority ``prio`` may take a worker slot now (lock held)."""
        return self._running < self.workers and prio >= self.top_active and prio > self.top_parked

    def _take_slot(self, prio: int) -> None:
        self._running += 1
        running = self._running_by_priority
        running[prio] = running.get(prio, 0) + 1
        if prio > self.top_active:  # NOTE: top_active is the highest priority holding a slot: no scan needed
            self.top_active = prio

    def _release_slot(self, prio: int, wake_worker: bool = True) -> None:
        self._running -= 1
        running = self._running_by_priority
        left = running[prio] - 1
        running[prio] = left
        if left == 0 and prio == self.top_active:  # NOTE: only then can the highest priority holding a slot change
            self.top_active = _top(running) if self._running else -(1 << 30)
        self.completed += 1
        if self._heap or self.top_parked > -(1 << 30):
            # NOTE: a queued task, a ticket or a parked task held back by this one may go on now
            # (a worker releasing its slot looks at the queue itself next: no other worker woken for it)
            self._wake_next(wake_worker)

    def _wake_next(self, wake_worker: bool = True) -> None:
        """Wakes whoever may go on after a change (lock held): every parked task (few; each checks its own
        turn), and for the task at the head of the queue, if it may take a slot now, the synchronous
        callers when it is a ticket, else one idle worker.  NOTE: one worker per task: the one taking it
        wakes the next (this again), so no lost wake-up, and no worker woken for a task another takes."""
        if self.top_parked > -(1 << 30):
            self._parked_cv.notify_all()
        heap = self._heap
        if heap and self._slot_free(-heap[0].key[0]):
            if heap[0].ticket:
                self._tickets_cv.notify_all()
            elif wake_worker:
                self._workers_cv.notify()

    def _notify_everyone(self) -> None:
        self._workers_cv.notify_all()
        self._tickets_cv.notify_all()
        self._parked_cv.notify_all()

    def _can_start(self) -> bool:
        """A queued task may take a worker slot now (lock held): a slot is free,
        no running task has a higher priority, and no parked task of its
        priority or higher waits to resume."""
        return bool(self._heap) and self._slot_free(-self._heap[0].key[0])

    def _worker(self) -> None:
        _tls.slot = (self, None)
        while True:
            with self._lock:
                self._idle += 1
                while not self._stopped and not (self._can_start() and not self._heap[0].ticket):
                    self._workers_cv.wait()
                self._idle -= 1
                if self._stopped:
                    return
                task = heapq.heappop(self._heap)
                self.top_queued = -self._heap[0].key[0] if self._heap else -(1 << 30)
                prio = -task.key[0]
                self._take_slot(prio)
                if self._heap:
                    self._wake_next()  # NOTE: the next task may start on another worker
            _tls.slot = (self, prio)
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
                    self._release_slot(prio, wake_worker=False)

    def yielder(self, prio: int) -> Callable[[], None]:
        """:meth:`yield_to_higher` for a task of priority ``prio`` (what a yield
        point of that task runs, resolved once per execution): the two hints
        tested without reading the thread's priority each time."""
        y = self._yielders.get(prio)
        if y is None:
            def y() -> None:
                if self.top_queued > prio or self.top_active > prio:
                    self.yield_to_higher()

            self._yielders[prio] = y  # NOTE: one per priority level (a handful), made once
        return y

    def yield_to_higher(self) -> None:
        """Called by the running task at a yield point: if work of a higher
        priority is queued, park until it has run (see the module notes)."""
        slot = getattr(_tls, "slot", None)
        prio = None if slot is None else slot[1]
        if prio is None or (self.top_queued <= prio and self.top_active <= prio):
            return  # NOTE: the common case, without taking the lock
        with self._lock:
            queued_higher = bool(self._heap) and -self._heap[0].key[0] > prio
            if self._stopped or not (queued_higher or self.top_active > prio):
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
            self.top_active = _top(self._running_by_priority)
            self._parked_by_priority[prio] = self._parked_by_priority.get(prio, 0) + 1
            self.top_parked = _top(self._parked_by_priority)
            self._wake_next()
            dl = op_deadline.current()
            late = False
            while not self._stopped and not (
                    self._running < self.workers and (not self._heap or -self._heap[0].key[0] <= prio)
                    and self.top_active <= prio and self.top_parked <= prio):
                if dl is None:
                    self._parked_cv.wait()
                    continue
                remaining = (dl - time.monotonic_ns()) / 1e9
                if remaining <= 0:
                    # NOTE: the task's deadline passes while it is parked: it ends now
                    # (holding a slot again for the moment it takes to unwind)
                    late = True
                    break
                self._parked_cv.wait(min(remaining, _MAX_WAIT_S))
            self._parked_by_priority[prio] -= 1
            self.top_parked = _top(self._parked_by_priority)
            self._running += 1
            self._running_by_priority[prio] += 1
            self.top_active = _top(self._running_by_priority)
            self._wake_next()  # NOTE: the resumed task no longer holds its priority back (top_parked)
        if late:
            raise op_deadline.DeadlineMissed("the deadline passed while waiting for higher-priority work")

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
                    self.top_queued = -self._heap[0].key[0] if self._heap else -(1 << 30)
                    self.expired += len(due)
                else:
                    pending = [t.deadline_ns for t in self._heap if t.deadline_ns is not None]
                    wait = _MAX_WAIT_S if not pending else min(_MAX_WAIT_S, (min(pending) - now) / 1e9)
                    wait = max(wait, 0.0)
                    # NOTE: a deadline submitted from now on wakes the timer only if it is due before this
                    self._timer_due = now + int(wait * 1e9)
                    self._timer.wait(wait)
                    self._timer_due = 0  # NOTE: awake: a deadline submitted meanwhile is seen at the next scan
                    continue
            for t in due:  # NOTE: outside the lock: expire notifies a client's callback
                _drop(t, "deadline")
            with self._lock:
                self._tickets_cv.notify_all()  # NOTE: a synchronous caller whose ticket expired is waiting
                self._wake_next()  # NOTE: the head of the queue changed


def _no_run() -> None:
    """A ticket is never run by a worker (its caller takes the slot)."""


def _top(counts: dict[int, int]) -> int:
    top = -(1 << 30)
    for p, n in counts.items():
        if n > 0 and p > top:
            top = p
    return top


def yield_point() -> None:
    """Lets queued higher-priority work run first if the current thread is a
    scheduler's worker (installed as :data:`nnhal.ops.deadline.YIELD`)."""
    slot = getattr(_tls, "slot", None)
    if slot is not None:
        slot[0].yield_to_higher()


def thread_yield() -> Optional[Callable[[], None]]:
    """The current thread's scheduler's yield (its priority checks), or None
    off the scheduler's workers (installed as
    :data:`nnhal.ops.deadline.YIELD_FOR_THREAD`)."""
    slot = getattr(_tls, "slot", None)
    if slot is None:
        return None
    sched, prio = slot
    return sched.yield_to_higher if prio is None else sched.yielder(prio)


op_deadline.YIELD = yield_point
op_deadline.YIELD_FOR_THREAD = thread_yield


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
