"""The ready callbacks of the HAL binding (nnhal.hal.interfaces: PreparedModelCallback, ExecutionCallback):
notified once (a later notification ignored), every waiter sees the value, a wait bounded by its
timeout."""

from __future__ import annotations

import threading
import time

import pytest

from nnhal import hal

S = hal.ErrorStatus


def test_every_waiter_sees_the_first_notification() -> None:
    cb = hal.ExecutionCallback()
    assert not cb.notified
    got: list = []
    waiters = [threading.Thread(target=lambda: got.append(cb.wait(10))) for _ in range(4)]
    for t in waiters:
        t.start()
    time.sleep(0.05)
    shapes = [hal.OutputShape([2], True)]
    cb.notify_1_3(S.NONE, shapes, hal.Timing())
    cb.notify_1_3(S.GENERAL_FAILURE, [], hal.Timing())  # NOTE: ignored
    for t in waiters:
        t.join(10)
    assert cb.notified and len(got) == 4 and all(g[0] == S.NONE and g[1] == shapes for g in got)
    assert cb.wait(0)[0] == S.NONE and cb.wait(None)[0] == S.NONE  # NOTE: and after, without blocking


@pytest.mark.parametrize("timeout", [0, -1, 0.05])
def test_a_wait_ends_at_its_timeout(timeout: float) -> None:
    cb = hal.PreparedModelCallback()
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        cb.wait(timeout)
    assert time.monotonic() - t0 < 5
    cb.notify_1_3(S.GENERAL_FAILURE, None)
    assert cb.wait(timeout) == (S.GENERAL_FAILURE, None)
