"""The driver's work queue (nnhal.driver.scheduler): priority order for
queued tasks and synchronous callers, the bound, deadlines while queued,
preemption at yield points, shutdown."""

from __future__ import annotations

import threading
import time

import pytest

from nnhal.driver.scheduler import Expired, QueueFull, Scheduler
from nnhal.ops import deadline as op_deadline

LOW, MEDIUM, HIGH = 0, 1, 2


@pytest.fixture
def sched():  # noqa: ANN201
    s = Scheduler(workers=1, max_queued=8, name="test-sched")
    yield s
    s.shutdown()


def _gate(s: Scheduler, prio: int = HIGH) -> threading.Event:
    release, started = threading.Event(), threading.Event()
    assert s.submit(prio, lambda: (started.set(), release.wait(30)))
    assert started.wait(10)
    return release


def test_queued_tasks_and_sync_callers_in_priority_order(sched: Scheduler) -> None:
    order: list[str] = []
    release = _gate(sched)
    sched.submit(LOW, lambda: order.append("low-async"))
    sched.submit(MEDIUM, lambda: order.append("medium-async"))
    callers = []
    for name, prio in (("low-sync", LOW), ("high-sync", HIGH)):
        th = threading.Thread(target=sched.call, args=(prio, lambda name=name: order.append(name)))
        th.start()
        callers.append(th)
    time.sleep(0.1)  # NOTE: both synchronous callers hold tickets in the queue now
    assert sched.stats()["queued"] == 4
    release.set()
    for th in callers:
        th.join(10)
    deadline = time.monotonic() + 10
    while len(order) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert order == ["high-sync", "medium-async", "low-async", "low-sync"]


def test_sync_call_runs_on_the_caller_thread_when_free(sched: Scheduler) -> None:
    me = threading.get_ident()
    assert sched.call(LOW, threading.get_ident) == me
    assert sched.call(HIGH, lambda: 7) == 7
    with pytest.raises(ZeroDivisionError):
        sched.call(MEDIUM, lambda: 1 / 0)
    assert sched.stats()["running"] == 0


def test_bound_and_expiry_of_sync_callers(sched: Scheduler) -> None:
    release = _gate(sched)
    try:
        for _ in range(sched.max_queued):
            assert sched.submit(LOW, lambda: None)
        assert not sched.submit(HIGH, lambda: None)
        with pytest.raises(QueueFull):
            sched.call(HIGH, lambda: None)
    finally:
        release.set()
    time.sleep(0.2)
    release = _gate(sched)
    try:
        t0 = time.monotonic()
        with pytest.raises(Expired):
            sched.call(HIGH, lambda: None, deadline_ns=time.monotonic_ns() + 50_000_000)
        assert 0.04 < time.monotonic() - t0 < 2.0
        # a far deadline (uint64 max) is fine while queued
        expired = []
        assert sched.submit(LOW, lambda: None, lambda r: expired.append(r), 2**64 - 1)
    finally:
        release.set()
    time.sleep(0.2)
    assert expired == []


def test_preemption_at_yield_points(sched: Scheduler) -> None:
    """A LOW task yielding in its loop lets a HIGH task run before it ends."""
    order: list[str] = []
    low_started = threading.Event()

    def low() -> None:
        low_started.set()
        for _ in range(200):
            op_deadline.poll()  # NOTE: what kernels do in their outer loops
            time.sleep(0.002)
        order.append("low-done")

    assert sched.submit(LOW, low)
    assert low_started.wait(10)
    t0 = time.monotonic()
    sched.call(HIGH, lambda: order.append("high"))
    waited = time.monotonic() - t0
    deadline = time.monotonic() + 10
    while "low-done" not in order and time.monotonic() < deadline:
        time.sleep(0.01)
    assert order == ["high", "low-done"]
    assert waited < 1.0 and sched.stats()["preempted"] >= 1


def test_shutdown_drops_queued_work_and_wakes_waiters() -> None:
    s = Scheduler(workers=1, max_queued=4, name="test-shutdown")
    release = _gate(s)
    dropped: list[str] = []
    s.submit(LOW, lambda: None, dropped.append)
    errors: list[BaseException] = []

    def caller() -> None:
        try:
            s.call(MEDIUM, lambda: None)
        except Expired as e:
            errors.append(e)

    th = threading.Thread(target=caller)
    th.start()
    time.sleep(0.1)
    s.shutdown(wait=False)  # NOTE: while the gate still runs: both queued entries are dropped
    th.join(10)
    release.set()
    assert not th.is_alive()
    assert dropped == ["shutdown"] and len(errors) == 1
    assert not s.submit(HIGH, lambda: None)


def test_parked_task_ends_at_its_deadline(sched: Scheduler) -> None:
    """A LOW task parked behind a long HIGH task is not held past its own
    deadline: it ends (DeadlineMissed at its yield point) when it passes."""
    result: list[str] = []
    low_started = threading.Event()

    def low() -> None:
        low_started.set()
        try:
            with op_deadline.scope(time.monotonic_ns() + 100_000_000):
                for _ in range(1000):
                    op_deadline.poll()
                    time.sleep(0.002)
            result.append("finished")
        except op_deadline.DeadlineMissed:
            result.append(f"missed after {time.monotonic() - t0:.3f}")

    t0 = time.monotonic()
    assert sched.submit(LOW, low)
    assert low_started.wait(10)
    release = threading.Event()
    assert sched.submit(HIGH, lambda: release.wait(5))
    deadline = time.monotonic() + 3
    while not result and time.monotonic() < deadline:
        time.sleep(0.01)
    release.set()
    assert result and result[0].startswith("missed")
    assert float(result[0].split()[-1]) < 1.0
