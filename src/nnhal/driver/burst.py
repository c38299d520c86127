"""The driver side of a burst (HAL 1.2 ``IPreparedModel.configureExecutionBurst``
and ``IBurstContext``), as Android 11's ExecutionBurstServer.

A server thread per burst reads request packets from the request queue,
resolves their pool slots through a per-burst memory cache (asking the
client's ``IBurstCallback.getMemories`` for slots it does not know), runs the
request through the prepared model's synchronous execution path, and writes
the result packet.  ``IBurstContext.freeMemory(slot)`` drops a cached memory.

What the server guarantees, whatever the client does:
- a malformed request packet gets a GENERAL_FAILURE result (as the
  reference's failed ``deserialize``), a well-formed but invalid request the
  execution path's INVALID_ARGUMENT, and the burst keeps serving;
- a result larger than the result queue is replaced by a GENERAL_FAILURE
  result (no fallback), as the reference's ``ResultChannelSender``;
- the callback may be slow, raise, or answer garbage or too few memories:
  the execution then fails with the callback's error status (INVALID_ARGUMENT
  when it says a slot is unknown) or GENERAL_FAILURE, never an exception;
- an idle burst blocks in ``poll`` on the queue's socket (after polling the
  queue for up to :data:`SPIN_US` following each result: :mod:`nnhal.platform.spin`); the
  thread ends, and every fd is closed, when the client closes its queues or
  dies (end of file), when a queue turns out corrupt, or on :meth:`close`.

Every descriptor and memory it keeps is its own duplicate: the caller keeps
ownership of what it passed in or returned from ``getMemories``.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Any, Callable

from nnhal import hal
from nnhal.driver.guard import hal_methods
from nnhal.platform import burst_packets as bp
from nnhal.platform import memory as hal_memory
from nnhal.platform.fmq import FmqError, FmqPeerGone, FmqTimeout, MessageQueue
from nnhal.platform.spin import Spin, spin_limit_ns

log = logging.getLogger("nnhal.driver")

S = hal.ErrorStatus

# NOTE: the cache is bounded: a slot evicted here is simply asked for again
# through getMemories, so the client never notices, and a client cycling
# through slots cannot grow the driver without bound.
MAX_CACHED_SLOTS = 256
MAX_QUEUE_CAPACITY = 1 << 16
RESULT_WRITE_TIMEOUT_S = 5.0
_IDLE_WAIT_S = 60.0
_JOIN_TIMEOUT_S = 5.0
# NOTE: after a result, the server polls the request queue this long before it blocks (nnhal.platform.spin),
# as the reference's ExecutionBurstServer does: a client executing in a loop is not woken each time
SPIN_US = 200

Execute = Callable[[hal.Request, Any, Callable[[hal.Memory, bool], Any]], tuple]


def _v1_0(status: Any) -> int:
    """1.3 statuses (MISSED_DEADLINE_*, RESOURCE_EXHAUSTED_*) travel as GENERAL_FAILURE in the 1.0 packet."""
    try:
        s = int(status)
    except (TypeError, ValueError):
        return int(S.GENERAL_FAILURE)
    return s if 0 <= s <= S.INVALID_ARGUMENT else int(S.GENERAL_FAILURE)


class _MemoryUnavailable(Exception):
    def __init__(self, status: S, reason: str):
        super().__init__(reason)
        self.status = status


@hal_methods
class ExecutionBurstServer(hal.IBurstContext):
    """An ``IBurstContext`` serving one burst; :meth:`close` (not in the HAL)
    stops it and frees everything it holds."""

    def __init__(self, callback: Any, request_queue: MessageQueue, result_queue: MessageQueue, execute: Execute,
                 name: str = "nnhal-burst"):
        self._callback = callback
        self._requests, self._results = request_queue, result_queue
        self._execute = execute
        self._cache: collections.OrderedDict[int, hal.Memory] = collections.OrderedDict()
        # NOTE: the cached memories stay open (mapped when sealed against shrinking, else read and
        # written with pread/pwrite, as every execution path does): no validation or mmap per execution
        self._open: dict[tuple[int, bool], Any] = {}
        self._lock = threading.Lock()  # the cache, and the memories in use by the running execution
        self._last_raw: bytes = b""
        self._last_packet: Any = None
        self._last_request: Any = None
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ HAL
    def freeMemory(self, slot: int) -> None:
        if not isinstance(slot, int) or isinstance(slot, bool):
            log.error("burst freeMemory: slot %r is not an int32", slot)
            return
        # NOTE: waits for a running execution, which may be using the memory
        with self._lock:
            mem = self._cache.pop(slot, None)
            if mem is not None:
                self._drop(mem)

    # ------------------------------------------------------------------ not HAL
    def close(self) -> None:
        """Stop the server thread and close the queues and cached memories
        (idempotent; the service calls it when the client disconnects)."""
        self._closing.set()
        self._requests.interrupt()
        self._results.interrupt()
        if self._thread is not threading.current_thread():
            self._thread.join(_JOIN_TIMEOUT_S)
            if self._thread.is_alive():
                # NOTE: stuck in a client's getMemories or a long execution: it cleans up itself when it returns
                log.error("burst: the server thread did not stop within %.0f s", _JOIN_TIMEOUT_S)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    # ------------------------------------------------------------------ the thread
    def _serve(self) -> None:
        # NOTE: only a client in another process is polled for: a controller thread of this process
        # would have to take the interpreter lock from the polling thread to send its next request
        spin = Spin(spin_limit_ns(SPIN_US) if self._requests.created_elsewhere() else 0)
        clock = time.perf_counter_ns
        try:
            while not self._closing.is_set():
                t0 = clock()
                try:
                    raw = self._requests.read_packet_blocking(_IDLE_WAIT_S, spin.window())
                except FmqTimeout:
                    continue
                spin.waited(clock() - t0)
                if self._closing.is_set():
                    break
                self._send(*self._handle(raw))
        except FmqPeerGone:
            log.debug("burst: the client closed its queues; the burst ends")  # NOTE: the normal end: not for -v
        except FmqError as e:
            if not self._closing.is_set():
                log.error("burst: %s; the burst ends", e)
        except Exception:  # never let a bug take the process down
            log.exception("burst: the server thread failed")
        finally:
            self._cleanup()

    def _cleanup(self) -> None:
        self._requests.close()
        self._results.close()
        with self._lock:
            cached, self._cache = list(self._cache.values()), collections.OrderedDict()
            for mem in cached:
                self._drop(mem)
        self._callback = None

    def _drop(self, mem: hal.Memory) -> None:
        """Close a cached memory and what is open of it (lock held)."""
        self._last_request = None
        for writable in (False, True):
            pool = self._open.pop((id(mem), writable), None)
            if pool is not None:
                pool.close()
        hal_memory.free(mem)

    def _pool(self, memory: hal.Memory, writable: bool) -> Any:
        """The view of a cached memory's open pool (lock held; raises InvalidMemory)."""
        key = (id(memory), writable)
        pool = self._open.get(key)
        if pool is None:
            pool = self._open[key] = hal_memory.open_pool(memory, writable=writable)
        return pool.view

    def _handle(self, raw: bytes) -> tuple:
        if raw == self._last_raw:
            # NOTE: a client executing in a loop sends the same bytes each time: decoded once (the
            # execution path never changes a request, so the decoded arguments can be reused)
            packet = self._last_packet
        else:
            try:
                packet = bp.decode_request(raw)
            except Exception as e:  # noqa: BLE001 - any failure to decode is a malformed packet, never the burst's end
                log.error("burst: malformed request packet (%s: %s)", type(e).__name__, e)
                return S.GENERAL_FAILURE, [], hal.Timing()
            self._last_raw, self._last_packet = raw, packet
        with self._lock:
            last = self._last_request
            if last is not None and last[0] is packet:
                # NOTE: the same packet, and no cached memory dropped since (_drop forgets this):
                # the same memories, the same request
                request = last[1]
            else:
                try:
                    pools = self._memories(packet.slots)
                except _MemoryUnavailable as e:
                    log.error("burst: %s", e)
                    return e.status, [], hal.Timing()
                request = hal.Request(inputs=packet.inputs, outputs=packet.outputs,
                                      pools=[hal.MemoryPool(hidlMemory=m) for m in pools])
                self._last_request = (packet, request)
            try:
                status, shapes, timing = self._execute(request, packet.measure, self._pool)
            except Exception:  # the execution path returns statuses; this is a bug, not the client's fault
                log.exception("burst: the execution raised")
                return S.GENERAL_FAILURE, [], hal.Timing()
        status = _v1_0(status)
        if status not in (S.NONE, S.OUTPUT_INSUFFICIENT_SIZE):
            shapes, timing = [], hal.Timing()
        return status, list(shapes or []), timing if isinstance(timing, hal.Timing) else hal.Timing()

    def _memories(self, slots: list[int]) -> list[hal.Memory]:
        """The memories of ``slots``, asking the client for the unknown ones (lock held)."""
        if len(set(slots)) > MAX_CACHED_SLOTS:
            # NOTE: a resource limit (each memory holds descriptors), not a malformed request
            raise _MemoryUnavailable(S.GENERAL_FAILURE, f"{len(set(slots))} pools in one burst request; at most "
                                                        f"{MAX_CACHED_SLOTS} are served")
        unknown = sorted({s for s in slots if s not in self._cache})
        if unknown:
            self._fetch(unknown)
        for s in slots:
            self._cache.move_to_end(s)
        out = [self._cache[s] for s in slots]
        in_use = set(slots)
        while len(self._cache) > MAX_CACHED_SLOTS:
            oldest = next(iter(self._cache))
            if oldest in in_use:
                break  # NOTE: the slots of this packet are the newest: only they remain
            self._drop(self._cache.pop(oldest))
        return out

    def _fetch(self, unknown: list[int]) -> None:
        callback = self._callback
        if callback is None:
            raise _MemoryUnavailable(S.GENERAL_FAILURE, "the burst is closed")
        try:
            answer = callback.getMemories(list(unknown))
        except Exception as e:  # a remote callback that died, or a buggy one
            raise _MemoryUnavailable(S.GENERAL_FAILURE, f"getMemories raised {type(e).__name__}: {e}") from None
        try:
            status, memories = answer
            status = S(status)
            memories = list(memories)
        except (TypeError, ValueError):
            raise _MemoryUnavailable(S.GENERAL_FAILURE, f"getMemories answered garbage: {answer!r:.200}") from None
        if status != S.NONE:
            raise _MemoryUnavailable(S.INVALID_ARGUMENT if status == S.INVALID_ARGUMENT else S.GENERAL_FAILURE,
                                     f"getMemories({unknown}) returned {status.name}")
        if len(memories) != len(unknown):
            raise _MemoryUnavailable(S.GENERAL_FAILURE, f"getMemories returned {len(memories)} memories for "
                                                        f"{len(unknown)} slots")
        owned: list[hal.Memory] = []
        try:
            for m in memories:
                if not isinstance(m, hal.Memory) or not isinstance(m.handle, hal.Handle):
                    raise _MemoryUnavailable(S.GENERAL_FAILURE, f"getMemories returned a {type(m).__name__}, "
                                                                "not a hal.Memory")
                try:
                    # NOTE: an unusable memory is not cached: the client may answer better next time
                    hal_memory.validate(m)
                    owned.append(hal_memory.dup(m))
                except (hal_memory.InvalidMemory, TypeError, OSError) as e:
                    # NOTE: the request validation reports the bad memory (INVALID_ARGUMENT)
                    raise _MemoryUnavailable(S.INVALID_ARGUMENT, f"a memory from getMemories is unusable: {e}") \
                        from None
        except _MemoryUnavailable:
            for m in owned:
                hal_memory.free(m)
            raise
        for slot, m in zip(unknown, owned):
            self._cache[slot] = m

    def _send(self, status: int, shapes: list, timing: hal.Timing) -> None:
        try:
            packet = bp.encode_result(status, shapes, timing)
        except bp.PacketError as e:
            log.error("burst: %s", e)
            packet = bp.encode_result(S.GENERAL_FAILURE, [], hal.Timing())
        if len(packet) // bp.DATUM_SIZE > self._results.capacity:
            # NOTE: as the reference: an error result instead, and no fallback
            log.error("burst: the result (%d datums) does not fit the result queue (%d)",
                      len(packet) // bp.DATUM_SIZE, self._results.capacity)
            packet = bp.encode_result(S.GENERAL_FAILURE, [], hal.Timing())
        while True:
            try:
                self._results.write_blocking(packet, RESULT_WRITE_TIMEOUT_S)
                return
            except FmqTimeout:
                # NOTE: a client that does not read its results only stalls its own burst
                if self._closing.is_set():
                    return
                log.error("burst: the client has not read its results for %.0f s", RESULT_WRITE_TIMEOUT_S)


def configure(callback: Any, requestChannel: Any, resultChannel: Any, execute: Execute) -> tuple:
    """``configureExecutionBurst`` for a prepared model whose synchronous
    execution is ``execute(request, measure) -> (status, shapes, timing)``:
    validates the arguments and returns (status, IBurstContext or None)."""
    if callback is None or not callable(getattr(callback, "getMemories", None)):
        log.error("configureExecutionBurst: the callback is not an IBurstCallback")
        return S.INVALID_ARGUMENT, None
    requests = results = None
    try:
        requests = MessageQueue.open(requestChannel, bp.DATUM_SIZE, "reader", MAX_QUEUE_CAPACITY)
        results = MessageQueue.open(resultChannel, bp.DATUM_SIZE, "writer", MAX_QUEUE_CAPACITY)
    except FmqError as e:
        log.error("configureExecutionBurst: bad %s channel: %s", "request" if requests is None else "result", e)
        if requests is not None:
            requests.close()
        return S.INVALID_ARGUMENT, None
    if results.capacity < 2:
        # NOTE: the smallest result packet (packetInformation + executionTiming) must fit
        log.error("configureExecutionBurst: a result channel of %d datums cannot hold any result", results.capacity)
        requests.close()
        results.close()
        return S.INVALID_ARGUMENT, None
    try:
        server = ExecutionBurstServer(callback, requests, results, execute)
    except RuntimeError as e:  # cannot start a thread
        log.error("configureExecutionBurst: cannot start the burst thread: %s", e)
        requests.close()
        results.close()
        return S.GENERAL_FAILURE, None
    return S.NONE, server
