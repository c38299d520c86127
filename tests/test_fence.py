"""Tests of nnhal.fence: sync fences as hal.Handle of one eventfd."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from nnhal import fence, hal
from nnhal.fence import FenceState


@pytest.fixture
def fences():
    made: list[hal.Handle] = []

    def make(signaled: bool = False) -> hal.Handle:
        h = fence.signaled() if signaled else fence.create()
        made.append(h)
        return h

    yield make
    for h in made:
        fence.close(h)


def test_create_is_active(fences):
    h = fences()
    assert isinstance(h, hal.Handle) and len(h.fds) == 1 and h.ints == []
    assert fence.is_valid(h) and not fence.is_null(h)
    assert fence.state(h) is FenceState.ACTIVE
    assert fence.wait(h, 0) is False


def test_signal_and_wait(fences):
    h = fences()
    fence.signal(h)
    assert fence.state(h) is FenceState.SIGNALED
    assert fence.wait(h) is True
    assert fence.wait(h, 0.0) is True
    fence.signal(h)  # again: harmless
    assert fence.state(h) is FenceState.SIGNALED


def test_polling_does_not_consume(fences):
    h = fences(signaled=True)
    for _ in range(5):
        assert fence.wait(h, 0) and fence.state(h) is FenceState.SIGNALED


def test_signaled(fences):
    assert fence.state(fences(signaled=True)) is FenceState.SIGNALED


def test_wait_timeout(fences):
    h = fences()
    t = time.monotonic()
    assert fence.wait(h, 0.05) is False
    elapsed = time.monotonic() - t
    assert 0.04 <= elapsed < 2
    assert fence.sync_wait(h, 0.01) is FenceState.ACTIVE


def test_wait_wakes_up_when_signaled_by_another_thread(fences):
    h = fences()
    results = []
    waiters = [threading.Thread(target=lambda: results.append(fence.wait(h, 10))) for _ in range(3)]
    for w in waiters:
        w.start()
    time.sleep(0.05)
    assert results == []
    t = time.monotonic()
    fence.signal(h)
    for w in waiters:
        w.join()
    assert results == [True, True, True]
    assert time.monotonic() - t < 5


def test_error_signal(fences):
    h = fences()
    fence.signal(h, error=True)
    assert fence.state(h) is FenceState.ERROR
    assert fence.sync_wait(h) is FenceState.ERROR
    assert fence.wait(h, 1) is False  # not a success
    fence.signal(h)  # a later plain signal does not clear the error
    assert fence.state(h) is FenceState.ERROR


def test_invalid_handles():
    a, b = fence.create(), fence.create()
    closed = fence.create()
    fd = closed.fds[0]
    os.close(fd)
    try:
        os.fstat(fd)
        reused = True
    except OSError:
        reused = False
    two = hal.Handle(fds=[a.fds[0], b.fds[0]])
    bad = [None, hal.Handle(), hal.Handle(fds=[-1]), two]
    if not reused:
        bad.append(hal.Handle(fds=[fd]))
    for h in bad:
        assert not fence.is_valid(h), h
        assert fence.state(h) is FenceState.UNKNOWN
        assert fence.wait(h, 0) is False
        with pytest.raises(ValueError):
            fence.signal(h)
    assert fence.is_null(None) and fence.is_null(hal.Handle()) and not fence.is_null(two)
    fence.close(a)
    fence.close(b)


def test_dup_and_close(fences):
    h = fences()
    d = fence.dup(h)
    assert d.fds[0] != h.fds[0]
    fence.close(h)
    assert h.fds == [] and not fence.is_valid(h)
    fence.close(h)  # idempotent
    # the duplicate is the same fence
    assert fence.state(d) is FenceState.ACTIVE
    fence.signal(d)
    assert fence.wait(d, 0)
    fence.close(d)


def test_signal_through_a_dup_is_seen_by_the_original(fences):
    h = fences()
    d = fence.dup(h)
    fence.signal(d)
    fence.close(d)
    assert fence.state(h) is FenceState.SIGNALED


_CHILD = r"""
import sys, time
from nnhal import fence, hal
h = hal.Handle(fds=[int(sys.argv[1])])
mode = sys.argv[2]
if mode == "signal":
    time.sleep(0.05)
    fence.signal(h)
elif mode == "error":
    fence.signal(h, error=True)
else:
    sys.exit(0 if fence.wait(h, 10) else 3)
"""


def _child(h: hal.Handle, mode: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", _CHILD, str(h.fds[0]), mode], pass_fds=h.fds)


def test_signal_from_another_process(fences):
    h = fences()
    p = _child(h, "signal")
    assert fence.wait(h, 30) is True
    assert p.wait(30) == 0


def test_wait_in_another_process(fences):
    h = fences()
    p = _child(h, "wait")
    time.sleep(0.05)
    fence.signal(h)
    assert p.wait(30) == 0


def test_error_from_another_process(fences):
    h = fences()
    assert _child(h, "error").wait(30) == 0
    assert fence.state(h) is FenceState.ERROR


def test_fork(fences):
    h = fences()
    pid = os.fork()
    if pid == 0:
        try:
            fence.signal(h)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert fence.wait(h, 5)
