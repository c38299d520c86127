"""Burst executions from the client side, as Android 11's
ExecutionBurstController (HAL 1.2 ``configureExecutionBurst``,
``IBurstCallback``, ``IBurstContext``).

``BurstController(preparedModel)`` creates the two fast message queues
(:mod:`nnhal.platform.fmq`), implements ``IBurstCallback`` over its slot cache, and
configures the burst; ``execute(request, measure)`` sends one request packet
and waits for its result packet: ``(status, outputShapes, timing)``.

Memories are identified by slot and cached across executions, on both sides:
a memory is known by what it refers to (the kind, size, ints and the
device/inode of each fd, which stay unique while the cache holds a duplicate
of the fds: :func:`nnhal.service.slots.memory_key`; the same ``hal.Memory``
object with unchanged fields is recognised without an fstat), so a new
``hal.Memory`` object for the same shared memory reuses the slot, and a
recycled fd number never aliases an old slot.  The
controller keeps at most ``max_slots`` memories; the least recently used is
forgotten with ``IBurstContext.freeMemory``, as is one dropped with
:meth:`BurstController.freeMemory`.

The 1.2 burst has no deadline and no loop timeout (the request packet has no
field for them), and its statuses are 1.0 ones.  Requests must use shared
memory pools (``MemoryPool.hidlMemory``): a driver-allocated buffer (a token
pool) cannot travel in a 1.2 packet, so ``execute`` answers INVALID_ARGUMENT
for it rather than silently taking another path.  A packet larger than the
request queue fails with GENERAL_FAILURE, also without a fallback.

Works with any ``IPreparedModel``: in process or a proxy of a service.  If the
driver side goes away (its process dies, or the burst context is closed),
``execute`` returns DEVICE_UNAVAILABLE at once (end of file on the queue);
with ``timeout`` set, an execution whose result does not arrive in time
returns GENERAL_FAILURE.  After either, the burst is out of step and every
later ``execute`` returns the same status: make a new controller.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Any, Optional

from nnhal import hal
from nnhal.platform import burst_packets as bp
from nnhal.platform import memory as hal_memory
from nnhal.platform.fmq import FmqError, FmqPeerGone, FmqTimeout, MessageQueue
from nnhal.platform.spin import Spin, spin_limit_ns
from nnhal.service.client import RemoteBurstContext
from nnhal.service.slots import MemoryKeys, memory_key

__all__ = ["BurstController", "BurstError", "CHANNEL_LENGTH"]

log = logging.getLogger("nnhal.burst")

S = hal.ErrorStatus
CHANNEL_LENGTH = 1024  # kExecutionBurstChannelLength of the reference
MAX_SLOTS = 64
# NOTE: the controller polls the result queue up to this long before it blocks (nnhal.platform.spin), as the
# reference's controller does (its window: 50 us of C++; here most small executions answer within it)
SPIN_US = 1000
_clock = time.perf_counter_ns


class BurstError(Exception):
    """A burst that could not be configured; ``status`` is the driver's answer."""

    def __init__(self, status: hal.ErrorStatus, message: str):
        super().__init__(message)
        self.status = status


class _SlotCache(hal.IBurstCallback):
    """The client's memories by slot; answers the driver's ``getMemories``."""

    def __init__(self, max_slots: int):
        self._max = max_slots
        self._lock = threading.Lock()
        self._by_slot: dict[int, hal.Memory] = {}
        self._slot_of: collections.OrderedDict[tuple, int] = collections.OrderedDict()  # LRU order
        self._key_of: dict[int, tuple] = {}
        self._free: list[int] = []
        self._next = 0
        self._keys = MemoryKeys(4 * max_slots)

    def getMemories(self, slots: list) -> tuple:
        with self._lock:
            try:
                memories = [self._by_slot[s] for s in slots]
            except (KeyError, TypeError):
                log.error("burst: the driver asked for unknown slots %s", list(slots)[:16])
                return S.INVALID_ARGUMENT, []
            return S.NONE, list(memories)

    def slots(self, memories: list[hal.Memory]) -> tuple[list[int], list[int]]:
        """Slots for ``memories`` (binding new ones), and the slots forgotten to make room;
        raises ValueError for a memory that cannot be identified (a closed or missing fd)."""
        keys = [self._keys.key(m) for m in memories]
        if None in keys:
            raise ValueError("a pool's memory has no open file descriptor")
        out, evicted = [], []
        with self._lock:
            for m, key in zip(memories, keys):
                slot = self._slot_of.get(key)
                if slot is None:
                    slot = self._free.pop() if self._free else self._new_slot()
                    self._by_slot[slot] = hal_memory.dup(m)
                    self._key_of[slot] = key
                self._slot_of[key] = slot
                self._slot_of.move_to_end(key)
                out.append(slot)
            in_use = set(out)
            while len(self._slot_of) > self._max:
                key, slot = next(iter(self._slot_of.items()))
                if slot in in_use:
                    break
                self._forget(key)
                evicted.append(slot)
        return out, evicted

    def _new_slot(self) -> int:
        slot = self._next
        self._next += 1
        return slot

    def _forget(self, key: tuple) -> int:
        slot = self._slot_of.pop(key)
        del self._key_of[slot]
        hal_memory.free(self._by_slot.pop(slot))
        self._free.append(slot)
        return slot

    def forget(self, memory: hal.Memory) -> Optional[int]:
        try:
            key = memory_key(memory)
        except (AttributeError, TypeError):
            return None
        with self._lock:
            return self._forget(key) if key in self._slot_of else None

    def clear(self) -> None:
        with self._lock:
            for key in list(self._slot_of):
                self._forget(key)


class BurstController:
    """A burst on ``preparedModel`` (any ``IPreparedModel``).  Raises
    :class:`BurstError` if the driver does not configure it (use
    :meth:`create` for a status instead).  Thread-safe: executions of one
    burst run one after the other."""

    def __init__(self, preparedModel: Any, *, channel_length: int = CHANNEL_LENGTH,
                 result_channel_length: Optional[int] = None, timeout: Optional[float] = None,
                 max_slots: int = MAX_SLOTS):
        self.timeout = timeout
        self._lock = threading.Lock()
        self._broken: Optional[hal.ErrorStatus] = None
        self._cache = _SlotCache(max_slots)
        self._last: tuple[bytes, Any] = (b"", None)
        self._spin = Spin(spin_limit_ns(SPIN_US))
        self._requests = MessageQueue.create(bp.DATUM_SIZE, channel_length, "writer")
        try:
            self._results = MessageQueue.create(bp.DATUM_SIZE, result_channel_length or channel_length, "reader")
        except BaseException:
            self._requests.close()
            raise
        try:
            answer = preparedModel.configureExecutionBurst(self._cache, self._requests.descriptor(),
                                                           self._results.descriptor())
            status, context = answer
        except Exception as e:
            self._close_queues()
            raise BurstError(S.GENERAL_FAILURE, f"configureExecutionBurst failed: {type(e).__name__}: {e}") from None
        if status != S.NONE or context is None:
            self._close_queues()
            raise BurstError(S(status) if status in S._value2member_map_ else S.GENERAL_FAILURE,
                             f"configureExecutionBurst returned {status!r} and {'no ' if context is None else ''}"
                             "burst context")
        self.context = context
        # NOTE: polling pays only when the driver runs in another process: a burst thread of this
        # process would have to take the interpreter lock from the polling thread to answer
        if not isinstance(context, RemoteBurstContext):
            self._spin = Spin(0)
        # NOTE: the driver holds its own copies now: dropping ours makes its death visible as end of file
        self._requests.release_descriptor()
        self._results.release_descriptor()

    @classmethod
    def create(cls, preparedModel: Any, **kwargs: Any) -> tuple:
        """(status, controller or None), as the HAL returns statuses."""
        try:
            return S.NONE, cls(preparedModel, **kwargs)
        except BurstError as e:
            log.error("burst: %s", e)
            return e.status, None

    # ------------------------------------------------------------------
    def execute(self, request: Any, measure: Any = hal.MeasureTiming.NO,
                timeout: Optional[float] = None) -> tuple:
        """One execution through the burst: (status, outputShapes, timing).
        ``timeout`` (seconds, default the controller's) bounds the wait."""
        timeout = self.timeout if timeout is None else timeout
        with self._lock:
            if self._broken is not None:
                return self._broken, [], hal.Timing()
            try:
                inputs, outputs, pools = _split(request)
                slots, evicted = self._cache.slots(pools)
                packet = bp.encode_request(inputs, outputs, slots, int(measure))
            except (ValueError, TypeError, AttributeError, OSError, hal_memory.InvalidMemory) as e:
                log.error("burst: the request cannot be sent: %s", e)
                return S.INVALID_ARGUMENT, [], hal.Timing()
            for slot in evicted:
                self._free_remote(slot)
            if len(packet) // bp.DATUM_SIZE > self._requests.capacity:
                log.error("burst: the request packet (%d datums) does not fit the request queue (%d)",
                          len(packet) // bp.DATUM_SIZE, self._requests.capacity)
                return S.GENERAL_FAILURE, [], hal.Timing()
            try:
                t0 = _clock()
                self._requests.write_blocking(packet, timeout)
                raw = self._results.read_packet_blocking(timeout, self._spin.window())
                self._spin.waited(_clock() - t0)
            except FmqPeerGone as e:
                return self._break(S.DEVICE_UNAVAILABLE, f"the driver side of the burst is gone ({e})")
            except FmqTimeout:
                return self._break(S.GENERAL_FAILURE, f"no result within {timeout} s")
            except FmqError as e:
                return self._break(S.GENERAL_FAILURE, str(e))
        last_raw, result = self._last  # NOTE: one tuple: a consistent pair whatever other threads do
        if raw != last_raw:
            try:
                result = bp.decode_result(raw)
            except bp.PacketError as e:
                log.error("burst: malformed result packet (%s)", e)
                return S.GENERAL_FAILURE, [], hal.Timing()
            self._last = (raw, result)
        # NOTE: a repeated answer (no timing asked) is decoded once; the caller always gets new objects
        status, shapes, timing = result
        return status, [hal.OutputShape(list(s.dimensions), s.isSufficient) for s in shapes], \
            hal.Timing(timing.timeOnDevice, timing.timeInDriver)

    def freeMemory(self, memory: hal.Memory) -> None:
        """Forget ``memory`` here and in the driver (``IBurstContext.freeMemory``)."""
        with self._lock:
            slot = self._cache.forget(memory)
            if slot is not None:
                self._free_remote(slot)

    def close(self) -> None:
        """End the burst (idempotent): the driver sees end of file and stops
        its thread; the cached memories are freed.  An execution waiting in
        another thread returns DEVICE_UNAVAILABLE at once."""
        # NOTE: wakes a waiting execute (which holds the lock) before taking the lock
        self._requests.interrupt()
        if hasattr(self, "_results"):
            self._results.interrupt()
        with self._lock:
            if self._broken is None:
                self._broken = S.GENERAL_FAILURE
            self._close_queues()
            self._cache.clear()

    # ------------------------------------------------------------------
    def _free_remote(self, slot: int) -> None:
        try:
            self.context.freeMemory(slot)
        except Exception as e:  # noqa: BLE001 - a dead driver: the burst fails at the next execution
            log.error("burst: freeMemory(%d) failed: %s", slot, e)

    def _break(self, status: hal.ErrorStatus, why: str) -> tuple:
        log.error("burst: %s", why)
        self._broken = status
        self._close_queues()
        return status, [], hal.Timing()

    def _close_queues(self) -> None:
        self._requests.close()
        if hasattr(self, "_results"):
            self._results.close()

    def __enter__(self) -> "BurstController":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _split(request: Any) -> tuple[list, list, list[hal.Memory]]:
    """(inputs, outputs, pool memories) of a 1.3 or 1.0 request."""
    pools = []
    for k, p in enumerate(request.pools):
        if isinstance(p, hal.Memory):  # a 1.0 request
            pools.append(p)
        elif isinstance(p, hal.MemoryPool) and p.hidlMemory is not None and p.token is None:
            pools.append(p.hidlMemory)
        else:
            raise ValueError(f"pool {k} is not shared memory (a 1.2 burst cannot carry a driver buffer token)")
    return list(request.inputs), list(request.outputs), pools
