"""Reusable executions (AIDL version 4's ``IPreparedModel.createReusableExecution``
and ``IExecution``) over the canonical types: one request of one prepared
model, validated once, then executed any number of times, synchronously or
fenced.

As IExecution.aidl describes the optimizations it allows: the request is
validated and converted once (:meth:`PreparedModel.validated_request`: the
driver's own copy and its plan; the fenced checks, once, at the first fenced
execution); its memories are the driver's own duplicates, made at creation
(the client may close its descriptors once the call returns), so their
mappings are found again in the device's pool cache; they are freed when the
execution is dropped.  What every execution checks again stays checked each
time: the driver-managed buffers a token names (a buffer may have been freed
or left uninitialized), the deadline, the memories' files.

"At most one execution may occur on a reusable execution object at any given
time, either by means of executeSynchronously or executeFenced": a call made
while another call on the same object runs is GENERAL_FAILURE, as Android's
sample driver answers (a fenced execution counts while its call runs; what
it launched may go on after, as in the sample driver).
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Any, Optional

from nnhal import hal
from nnhal.driver.burst import KeptMemories
from nnhal.driver.execution import Result
from nnhal.engine.validation import ValidationError
from nnhal.platform import memory as hal_memory

log = logging.getLogger("nnhal.driver")

S = hal.ErrorStatus

__all__ = ["ReusableExecution"]


class ReusableExecution:
    """One request of ``prepared`` run many times with ``measure`` and the
    loop timeout ``lt`` (ns, as ``PreparedModel.execute_sync``).  The
    constructor raises ValidationError for a request the model refuses or a
    memory that cannot be used (INVALID_ARGUMENT)."""

    def __init__(self, prepared: Any, request: Any, measure: hal.MeasureTiming, lt: int):
        if measure not in hal.MeasureTiming._value2member_map_:
            raise ValidationError(f"invalid MeasureTiming {measure!r}")
        req, _ = prepared.validated_request(request)
        memories = KeptMemories(len(req.pools))
        self._free = weakref.finalize(self, memories.clear)
        pools = []
        for k, pool in enumerate(req.pools):
            if pool.hidlMemory is None:
                pools.append(pool)
                continue
            try:
                pools.append(hal.MemoryPool(hidlMemory=memories.put(k, pool.hidlMemory)))
            except (hal_memory.InvalidMemory, TypeError, OSError) as e:
                self._free()
                raise ValidationError(f"request pool {k}: {e}") from None
        own = hal.Request(inputs=req.inputs, outputs=req.outputs, pools=pools)
        self._validated = prepared.validated_request(own, owned=True)  # NOTE: the plan of our memories' keys
        self._prepared, self._measure, self._lt = prepared, hal.MeasureTiming(measure), lt
        self._fenced: Optional[ValidationError] = None  # the fenced checks' verdict, once made
        self._fenced_checked = False
        self._busy = threading.Lock()

    def execute(self, dl: Optional[int]) -> Result:
        """One synchronous execution (``dl``: the deadline, ns; None: none)."""
        if not self._busy.acquire(blocking=False):
            return _busy()
        try:
            return self._prepared.execute_sync(self._validated[0], self._measure, dl, self._lt, owned=True,
                                               pool_cache=self._prepared.device.pool_cache,
                                               validated=self._validated)
        finally:
            self._busy.release()

    def execute_fenced(self, wait_for: Any, dl: Optional[int], duration_ns: Optional[int]) -> tuple:
        """One fenced execution: ``PreparedModel.execute_fenced``'s (status,
        sync fence, IFencedExecutionCallback)."""
        if not self._busy.acquire(blocking=False):
            return _busy().status, None, None
        try:
            if not self._fenced_checked:
                try:
                    self._prepared.check_fenced(self._validated[0])
                except ValidationError as e:
                    self._fenced = e
                self._fenced_checked = True
            if self._fenced is not None:
                log.error("executeFenced rejected: %s", self._fenced)
                return self._fenced.status, None, None
            return self._prepared.execute_fenced(self._validated[0], wait_for, self._measure, dl, self._lt,
                                                 duration_ns, validated=self._validated,
                                                 pool_cache=self._prepared.device.pool_cache)
        finally:
            self._busy.release()

    def close(self) -> None:
        """Frees the request's memories now (idempotent; executions launched keep what they opened)."""
        self._free()


def _busy() -> Result:
    log.error("reusable execution: another execution of this object is running; it runs one at a time")
    return Result(S.GENERAL_FAILURE)
