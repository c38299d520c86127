"""Helpers for the AIDL face tests: AIDL models and requests made from the
canonical ones of ``tests.driver_util``, preparing through ``IDevice``,
counting descriptors."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np

from nnhal import aidl
from nnhal import memory as hal_memory
from tests.driver_util import WAIT_S, Pools, add_model

A = aidl
S = aidl.ErrorStatus
ROOT = Path(__file__).resolve().parents[1]
# a backend written to the README's "Writing a driver", unchanged (ADD, MUL, RELU on float32)
NUMPY_DRIVER = f"{ROOT / 'examples' / 'numpy_driver.py'}:NumpyDriver"
FAST = A.ExecutionPreference.FAST_SINGLE_ANSWER
MEDIUM = A.Priority.MEDIUM


def add_aidl(dims: Sequence[int] = (2, 2)) -> aidl.Model:
    """out = a + b, float32 (tests.driver_util.add_model) as an AIDL model."""
    return aidl.convert.from_canonical(add_model(dims))


class CountingCallback(aidl.PreparedModelCallback):
    """Counts notify calls (the ready callback ignores repeats)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[Any] = []

    def notify(self, status: Any, preparedModel: Any) -> None:
        self.calls.append(status)
        super().notify(status, preparedModel)


def prepare(dev: aidl.IDevice, model: aidl.Model, priority: aidl.Priority = MEDIUM,
            deadline: int = -1) -> aidl.IPreparedModel:
    """The prepared model (asserting the launch and the callback's one NONE)."""
    cb = CountingCallback()
    dev.prepareModel(model, FAST, priority, deadline, [], [], bytes(32), cb)
    status, prepared = cb.wait(WAIT_S)
    assert (status, cb.calls) == (S.NONE, [S.NONE]) and prepared is not None
    return prepared


def refused_prepare(call: Callable[[CountingCallback], Any]) -> tuple[Any, Any]:
    """(the status raised at launch, the one status notified) of a refused preparation."""
    cb = CountingCallback()
    try:
        call(cb)
    except aidl.ServiceSpecificError as e:
        raised = e.status
    else:
        raised = None
    status, prepared = cb.wait(WAIT_S)
    assert prepared is None and cb.calls == [status], cb.calls
    return raised, status


def raised(fn: Callable[..., Any], *args: Any) -> Optional[aidl.ErrorStatus]:
    """The status ``fn(*args)`` raises as a ServiceSpecificError (None when it returns)."""
    try:
        fn(*args)
    except aidl.ServiceSpecificError as e:
        return e.status
    return None


def memory(m: Any) -> aidl.Memory:
    return aidl.convert.from_canonical(m)


class AidlPools(Pools):
    """The conformance layout (pool 0 the inputs, pool 1 the outputs) as an AIDL request."""

    def aidl_request(self) -> aidl.Request:
        return aidl.convert.from_canonical(self.request())


def add_pools(a: Optional[np.ndarray] = None, b: Optional[np.ndarray] = None, out: int = 16,
              **kw: Any) -> AidlPools:
    a = np.arange(4, dtype=np.float32).reshape(2, 2) if a is None else a
    b = np.full((2, 2), 10, np.float32) if b is None else b
    return AidlPools([a, b], [out], **kw)


def fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def settles_at(n: int, timeout: float = 10.0) -> bool:
    """Whether the number of open descriptors comes back to ``n`` (fences and
    threads close theirs asynchronously)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if fd_count() <= n:
            return True
        time.sleep(0.02)
    return fd_count() <= n


def free(*memories: Any) -> None:
    for m in memories:
        hal_memory.free(m)
