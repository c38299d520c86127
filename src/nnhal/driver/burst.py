"""The driver side of a burst: HAL 1.2's ``IPreparedModel.configureExecutionBurst``
and ``IBurstContext`` (:class:`ExecutionBurstServer`, as Android 11's
ExecutionBurstServer), and AIDL's ``IBurst`` (:class:`TokenBurst`, as the
memory cache of Android's AIDL adapter ``utils/adapter/aidl/src/Burst.cpp``).
Both keep the client's memories as the driver's own duplicates by key
(:class:`KeptMemories`: a slot, a memory identifier token), bounded.

A server thread per burst (one whose last burst ended lately, else a new
one: :mod:`nnhal.platform.threads`) reads request packets from the request queue,
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
  burst ends, and every fd is closed, when the client closes its queues or
  dies (end of file), when a queue turns out corrupt, or on :meth:`close`
  (its thread then waits half a second for another burst to serve, and ends).

Every descriptor and memory it keeps is its own duplicate: the caller keeps
ownership of what it passed in or returned from ``getMemories``.

:class:`TokenBurst` runs synchronous executions whose request pools each come
with a memory identifier token (-1: none): the memory of a token seen before
is the one kept for it (as Android's adapter: the token names the memory), so
its mapping is found again in the device's pool cache
(``driver/pool_cache.py``) without a new validation, until
``release(token)``, eviction (at most :data:`MAX_CACHED_SLOTS` tokens) or the
burst's end frees it.  "A burst object may be used for at most one execution
at a time" (IBurst.aidl): a second execution while one runs is
GENERAL_FAILURE, as Android's sample driver answers.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
import weakref
from typing import Any, Callable, Optional

from nnhal import hal
from nnhal.driver.execution import Refusal, Result
from nnhal.driver.guard import hal_methods
from nnhal.platform import burst_packets as bp
from nnhal.platform import memory as hal_memory
from nnhal.platform.fmq import FmqError, FmqPeerGone, FmqTimeout, MessageQueue
from nnhal.platform.spin import Spin, spin_limit_ns
from nnhal.platform.threads import Lingering

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

# NOTE: the server threads: a burst ended and another configured within half a second (VTS, a client
# preparing model after model) runs on the same thread (nnhal.platform.threads)
_THREADS = Lingering("nnhal-burst", linger=0.5)

Execute = Callable[[hal.Request, Any, Callable[[hal.Memory, bool], Any]], tuple]


def _v1_0(status: Any) -> int:
    """1.3 statuses (MISSED_DEADLINE_*, RESOURCE_EXHAUSTED_*) travel as GENERAL_FAILURE in the 1.0 packet."""
    try:
        s = int(status)
    except (TypeError, ValueError):
        return int(S.GENERAL_FAILURE)
    return s if 0 <= s <= S.INVALID_ARGUMENT else int(S.GENERAL_FAILURE)


class KeptMemories:
    """Client memories the driver keeps by key: its own duplicates (the
    client may close its descriptors once the call returns), at most
    ``capacity``, least recently used first out.  Each is freed when dropped,
    evicted or cleared, after ``on_drop(memory)`` (what the user keeps open of
    it).  Not thread-safe: its user holds a lock across a lookup and the
    execution that uses the memory."""

    def __init__(self, capacity: int, on_drop: Optional[Callable[[hal.Memory], None]] = None):
        self.capacity = capacity
        self._on_drop = on_drop
        self._memories: collections.OrderedDict[Any, hal.Memory] = collections.OrderedDict()

    def __contains__(self, key: Any) -> bool:
        return key in self._memories

    def __len__(self) -> int:
        return len(self._memories)

    def get(self, key: Any) -> Optional[hal.Memory]:
        """The memory kept for ``key`` (now the most recently used), or None."""
        m = self._memories.get(key)
        if m is not None:
            self._memories.move_to_end(key)
        return m

    def put(self, key: Any, memory: hal.Memory) -> hal.Memory:
        """Keeps a duplicate of a usable ``memory`` for ``key`` and returns it;
        raises ``InvalidMemory`` (or TypeError / OSError) for one that cannot
        be used, which is not kept."""
        hal_memory.validate(memory)
        owned = hal_memory.dup(memory)
        self.drop(key)
        self._memories[key] = owned
        return owned

    def drop(self, key: Any) -> bool:
        m = self._memories.pop(key, None)
        if m is not None:
            self._free(m)
        return m is not None

    def trim(self, keep: Any = ()) -> bool:
        """Drops the least recently used beyond the capacity, never one of
        ``keep``; whether any was dropped."""
        dropped = False
        while len(self._memories) > self.capacity:
            oldest = next(iter(self._memories))
            if oldest in keep:
                break  # NOTE: the keys in use are the newest: only they remain
            dropped = self.drop(oldest) or dropped
        return dropped

    def clear(self) -> None:
        kept, self._memories = list(self._memories.values()), collections.OrderedDict()
        for m in kept:
            self._free(m)

    def _free(self, memory: hal.Memory) -> None:
        if self._on_drop is not None:
            self._on_drop(memory)
        hal_memory.free(memory)


class _MemoryUnavailable(Exception):
    def __init__(self, status: S, reason: str):
        super().__init__(reason)
        self.status = status


@hal_methods
class ExecutionBurstServer(hal.IBurstContext):
    """An ``IBurstContext`` serving one burst; :meth:`close` (not in the HAL)
    stops it and frees everything it holds."""

    def __init__(self, callback: Any, request_queue: MessageQueue, result_queue: MessageQueue, execute: Execute):
        self._callback = callback
        self._requests, self._results = request_queue, result_queue
        self._execute = execute
        self._cache = KeptMemories(MAX_CACHED_SLOTS, self._close_pools)
        # NOTE: the cached memories stay open (mapped when sealed against shrinking, else read and
        # written with pread/pwrite, as every execution path does): no validation or mmap per execution
        self._open: dict[tuple[int, bool], Any] = {}
        self._lock = threading.Lock()  # the cache, and the memories in use by the running execution
        self._last_raw: bytes = b""
        self._last_packet: Any = None
        self._last_request: Any = None
        self._closing = threading.Event()
        self._done = threading.Event()  # NOTE: set once the server has cleaned up (its thread may serve on)
        self._serving: Optional[int] = None  # the ident of the thread serving
        _THREADS.run(self._serve)

    # ------------------------------------------------------------------ HAL
    def freeMemory(self, slot: int) -> None:
        if not isinstance(slot, int) or isinstance(slot, bool):
            log.error("burst freeMemory: slot %r is not an int32", slot)
            return
        # NOTE: waits for a running execution, which may be using the memory
        with self._lock:
            self._cache.drop(slot)

    # ------------------------------------------------------------------ not HAL
    def close(self) -> None:
        """Stop the server thread and close the queues and cached memories
        (idempotent; the service calls it when the client disconnects)."""
        self._closing.set()
        self._requests.interrupt()
        self._results.interrupt()
        if self._serving != threading.get_ident():
            if not self._done.wait(_JOIN_TIMEOUT_S):
                # NOTE: stuck in a client's getMemories or a long execution: it cleans up itself when it returns
                log.error("burst: the server thread did not stop within %.0f s", _JOIN_TIMEOUT_S)

    @property
    def alive(self) -> bool:
        return not self._done.is_set()

    # ------------------------------------------------------------------ the thread
    def _serve(self) -> None:
        self._serving = threading.get_ident()
        try:
            self._serve_queue()
        finally:
            self._serving = None
            self._done.set()

    def _serve_queue(self) -> None:
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
            self._cache.clear()
        self._callback = None

    def _close_pools(self, mem: hal.Memory) -> None:
        """What is open of a cached memory being dropped (lock held)."""
        self._last_request = None
        for writable in (False, True):
            pool = self._open.pop((id(mem), writable), None)
            if pool is not None:
                pool.close()

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
                # NOTE: the same packet, and no cached memory dropped since (_close_pools forgets this):
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
        out = [self._cache.get(s) for s in slots]
        self._cache.trim(set(slots))
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
        if not all(isinstance(m, hal.Memory) and isinstance(m.handle, hal.Handle) for m in memories):
            raise _MemoryUnavailable(S.GENERAL_FAILURE, "getMemories returned something else than hal.Memory objects")
        for slot, m in zip(unknown, memories):
            try:
                # NOTE: an unusable memory is not cached: the client may answer better next time
                self._cache.put(slot, m)
            except (hal_memory.InvalidMemory, TypeError, OSError) as e:
                # NOTE: the request validation reports the bad memory (INVALID_ARGUMENT)
                raise _MemoryUnavailable(S.INVALID_ARGUMENT, f"a memory from getMemories is unusable: {e}") from None

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


class TokenBurst:
    """AIDL's ``IBurst`` behaviour over the canonical types (see the module
    doc): ``execute`` runs a (canonical, the driver's own) request through
    ``prepared.execute_sync``, each pool's memory identifier token naming a
    memory kept between executions; ``release(token)`` frees one; dropped
    (or :meth:`close`-d), the burst frees them all."""

    def __init__(self, prepared: Any):
        self._prepared = prepared
        self._memories = KeptMemories(MAX_CACHED_SLOTS)
        self._lock = threading.Lock()  # the kept memories, held by the running execution
        self._running = threading.Lock()  # NOTE: one execution at a time (taken without waiting)
        self._free = weakref.finalize(self, self._memories.clear)

    def execute(self, request: hal.Request, tokens: Any, measure: Any, dl: Optional[int], lt: int) -> Result:
        """One execution (``dl`` / ``lt`` as ``PreparedModel.execute_sync``);
        INVALID_ARGUMENT for tokens that are not one int >= -1 per pool."""
        if not isinstance(tokens, (list, tuple)) or len(tokens) != len(request.pools) or not all(
                isinstance(t, int) and not isinstance(t, bool) and -1 <= t < 2**63 for t in tokens):
            log.error("burst: %r are not one memory identifier token (-1 or >= 0) per request pool (%d)",
                      tokens, len(request.pools))
            return Refusal(S.INVALID_ARGUMENT)
        if not self._running.acquire(blocking=False):
            log.error("burst: an execution is running on this burst; a burst runs one at a time")
            return Result(S.GENERAL_FAILURE)
        try:
            with self._lock:
                pools = [self._kept(p, t) for p, t in zip(request.pools, tokens)]
                self._memories.trim(set(tokens))
                request = hal.Request(inputs=request.inputs, outputs=request.outputs, pools=pools)
                # NOTE: the kept memories are found mapped in the device's pool cache by their descriptors
                return self._prepared.execute_sync(request, measure, dl, lt, owned=True,
                                                   pool_cache=self._prepared.device.pool_cache)
        finally:
            self._running.release()

    def _kept(self, pool: hal.MemoryPool, token: int) -> hal.MemoryPool:
        """The pool with the memory kept for ``token`` (lock held)."""
        if token == -1 or pool.hidlMemory is None:
            return pool  # NOTE: no identity, or a driver-managed buffer (its own token)
        kept = self._memories.get(token)
        if kept is None:
            try:
                kept = self._memories.put(token, pool.hidlMemory)
            except (hal_memory.InvalidMemory, TypeError, OSError, AttributeError):
                return pool  # NOTE: not kept: the execution reports the memory as sent
        return hal.MemoryPool(hidlMemory=kept)

    def release(self, token: int) -> None:
        """Frees the memory of ``token`` (after a running execution); an unknown token is no error."""
        with self._lock:
            self._memories.drop(token)

    def close(self) -> None:
        with self._lock:
            self._free()

    def __len__(self) -> int:
        return len(self._memories)


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
