"""nnhal.platform.threads: jobs each on a thread of its own, a thread reused
while it lingers, none kept beyond that."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
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


# --------------------------------------------------------------------------
# one_cpu

_TWO_CPUS = hasattr(os, "sched_getaffinity") and len(os.sched_getaffinity(0)) > 1


def _thread_cpus() -> dict[int, set[int]]:
    return {int(t): os.sched_getaffinity(int(t)) for t in os.listdir("/proc/self/task")}


@pytest.mark.skipif(not _TWO_CPUS, reason="needs two CPUs allowed")
def test_one_cpu_pins_every_thread_for_the_block_and_restores_them_after():
    from nnhal.platform import blas
    from nnhal.platform.threads import one_cpu

    allowed = os.sched_getaffinity(0)
    blas_before = blas.threads()
    release = threading.Event()
    started_before = threading.Thread(target=release.wait, daemon=True)
    started_before.start()
    try:
        with one_cpu() as cpu:
            assert cpu in allowed
            seen: dict[str, set[int]] = {}
            within = threading.Thread(target=lambda: seen.setdefault("cpus", os.sched_getaffinity(0)))
            within.start()
            within.join()
            assert seen["cpus"] == {cpu}  # NOTE: a thread started in the block inherits the one CPU
            assert set(map(frozenset, _thread_cpus().values())) == {frozenset({cpu})}
            with one_cpu() as inner:  # NOTE: nested: the same CPU, nothing restored at its end
                assert inner == cpu
            assert os.sched_getaffinity(started_before.native_id) == {cpu}
            if blas_before is not None:
                assert blas.threads() == 1  # NOTE: numpy's OpenBLAS threads would only wait for the one CPU
        assert all(cpus == allowed for cpus in _thread_cpus().values())
        assert blas.threads() == blas_before
        with pytest.raises(RuntimeError):
            with one_cpu():
                raise RuntimeError("the block failed")
        assert all(cpus == allowed for cpus in _thread_cpus().values())  # NOTE: restored after a failure too
    finally:
        release.set()
        started_before.join()


@pytest.mark.skipif(not _TWO_CPUS, reason="needs two CPUs allowed")
def test_one_cpu_changes_nothing_with_one_cpu_allowed_and_a_forked_child_starts_unpinned():
    code = textwrap.dedent("""
        import os
        from nnhal.platform.threads import one_cpu
        allowed = os.sched_getaffinity(0)
        with one_cpu() as cpu:
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.write(w, repr(sorted(os.sched_getaffinity(0))).encode())
                os._exit(0)
            os.waitpid(pid, 0)
            child = os.read(r, 100).decode()
        os.sched_setaffinity(0, {min(allowed)})
        with one_cpu() as none:
            pass
        print(cpu is not None, child == repr(sorted(allowed)), none, os.sched_getaffinity(0) == {min(allowed)})
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True", "None", "True"]


_IN_PROCESS_RUNS = {  # the command line, and what runs each unit / model (module or class, attribute)
    "vts": (("nnhal.cli.vts", None, "run_unit"), ["vts", "--device", "sample-all", "--ops", "ADD", "--section",
                                                   "request", "--sample", "1", "--jobs", "1", "--no-progress"]),
    "conformance": (("nnhal.conformance.runner", "Runner", "run_model"),
                    ["conformance", "--ops", "ADD", "--model", "add_quant8", "--mode", "sync", "--jobs", "1",
                     "--no-progress", "--plain"]),
}


@pytest.mark.skipif(not _TWO_CPUS, reason="needs two CPUs allowed")
@pytest.mark.parametrize("command", sorted(_IN_PROCESS_RUNS))
def test_in_process_runs_take_one_cpu_unless_all_cpus_and_give_the_cpus_back(monkeypatch, command):
    """``nnhal vts`` / ``nnhal conformance`` with --jobs 1: each unit (model) runs on one CPU, or on every CPU
    with --all-cpus; every thread has the process's CPUs back after the run."""
    import importlib

    from nnhal.cli import app

    (module, cls, attr), argv = _IN_PROCESS_RUNS[command]
    owner: object = importlib.import_module(module)
    if cls is not None:
        owner = getattr(owner, cls)
    real = getattr(owner, attr)
    allowed = os.sched_getaffinity(0)
    seen: list[set[int]] = []

    def spy(*args):
        seen.append(os.sched_getaffinity(0))
        return real(*args)

    monkeypatch.setattr(owner, attr, spy)
    for extra, pinned in (([], True), (["--all-cpus"], False)):
        seen.clear()
        assert app.main([*argv, *extra]) == 0
        assert seen
        assert all(len(s) == 1 for s in seen) if pinned else all(s == allowed for s in seen)
        assert all(cpus == allowed for cpus in _thread_cpus().values())  # NOTE: given back after the run


def test_counted_section_changes_the_state_once_and_restores_it_once():
    from nnhal.platform.threads import CountedSection

    calls: list = []
    section = CountedSection(lambda: calls.append("enter") or len(calls), lambda saved: calls.append(("leave", saved)))
    with section() as a:
        with section() as b:  # NOTE: nested: the outer block's saved state, nothing entered again
            assert a == b == 1
        assert calls == ["enter"]
    assert calls == ["enter", ("leave", 1)]
    with pytest.raises(RuntimeError):
        with section():
            raise RuntimeError("the block failed")
    assert calls[-1] == ("leave", 3)  # NOTE: left on a failure too
    gate, inside = threading.Barrier(2), []

    def worker() -> None:
        with section():
            gate.wait()
            inside.append(1)
            gate.wait()

    t = threading.Thread(target=worker)
    t.start()
    with section():
        gate.wait()  # NOTE: both blocks open at once: one enter, one leave
        gate.wait()
    t.join()
    assert calls[-2:] == ["enter", ("leave", 5)] and inside == [1]


def test_counted_section_in_a_child_forked_within_a_block():
    code = textwrap.dedent("""
        import os
        from nnhal.platform.threads import CountedSection
        seen = []
        section = CountedSection(lambda: "saved", lambda s: seen.append("leave"), lambda s: seen.append(("forked", s)))
        with section():
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                with section():  # the child starts outside the parent's block: this one enters afresh
                    pass
                os.write(w, repr(seen).encode())
                os._exit(0)
            os.waitpid(pid, 0)
            child = os.read(r, 200).decode()
        print(child, seen)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[('forked', 'saved'), 'leave'] ['leave']"
