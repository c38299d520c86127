"""nnhal.platform.threads: jobs each on a thread of its own, a thread reused
while it lingers, none kept beyond that."""

from __future__ import annotations

import logging
import os
import threading

import pytest

from nnhal.platform.threads import Lingering
from tests.driver_util import wait_until


def _named(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name in (name, f"{name}-idle")]


def test_jobs_one_after_another_run_on_one_thread_which_then_ends() -> None:
    pool = Lingering("test-linger-a", linger=0.3)
    idents, names = [], []
    for _ in range(5):
        done = threading.Event()

        def job(done: threading.Event = done) -> None:
            idents.append(threading.get_ident())
            names.append(threading.current_thread().name)
            done.set()

        pool.run(job)
        assert done.wait(5)
        assert wait_until(lambda: pool.idle() == 1)
    assert len(set(idents)) == 1 and set(names) == {"test-linger-a"}
    assert [t.name for t in _named("test-linger-a")] == ["test-linger-a-idle"]
    assert wait_until(lambda: not _named("test-linger-a"))
    assert pool.idle() == 0


def test_concurrent_jobs_get_threads_of_their_own_and_at_most_max_idle_wait() -> None:
    pool = Lingering("test-linger-b", linger=5.0, max_idle=2)
    gate = threading.Event()
    started = threading.Semaphore(0)

    def job() -> None:
        started.release()
        gate.wait(10)

    for _ in range(4):
        pool.run(job)
    for _ in range(4):
        assert started.acquire(timeout=5)  # NOTE: all four run at once: none waits for another
    assert len(_named("test-linger-b")) == 4
    gate.set()
    assert wait_until(lambda: len(_named("test-linger-b")) == 2 and pool.idle() == 2)
    pool.linger = 0.0  # NOTE: the two waiting take their next job, if any, then end
    for _ in range(2):
        pool.run(lambda: None)
    assert wait_until(lambda: not _named("test-linger-b"))


def test_a_job_that_raises_is_logged_and_the_thread_serves_on() -> None:
    # NOTE: a handler of its own on the module's logger (other tests may quiet "nnhal" or stop its propagation)
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.ERROR)
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("nnhal.threads")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.ERROR)
    try:
        pool = Lingering("test-linger-c", linger=0.2)
        done = threading.Event()

        def bad() -> None:
            raise ValueError("a job's bug")

        pool.run(bad)
        assert wait_until(lambda: pool.idle() == 1)
        pool.run(done.set)
        assert done.wait(5)
        assert any("a job raised" in r.getMessage() and r.exc_info and "a job's bug" in str(r.exc_info[1])
                   for r in records)
        assert wait_until(lambda: not _named("test-linger-c"))
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_starts_its_own_threads() -> None:
    pool = Lingering("test-linger-d", linger=5.0)
    pool.run(lambda: None)
    assert wait_until(lambda: pool.idle() == 1)
    pid = os.fork()
    if pid == 0:  # NOTE: the child: its parent's idle thread does not exist here
        ok = threading.Event()
        code = 1
        try:
            pool.run(ok.set)
            code = 0 if ok.wait(5) else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    pool.linger = 0.0
    pool.run(lambda: None)
    assert wait_until(lambda: not _named("test-linger-d"))
