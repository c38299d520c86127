"""The driver as a service process: ``nnhal serve --name NAME``.

Implements the service side of the binding's IPC (the part binder and the
HIDL / AIDL stubs play on Android): it listens on the registry socket of its name
(:mod:`nnhal.service.registry`), accepts clients of the same user only
(SO_PEERCRED), and runs every HAL call a client sends on the in-process
driver, with the client's callbacks (``IPreparedModelCallback``,
``IExecutionCallback``, ``IBurstCallback``) replaced by proxies that call back
across the socket.

Faces: a client's Hello picks the face its connection speaks: HIDL (this
module's :class:`Connection`, the ``nnhal.hal`` interfaces) or AIDL of a
version (:class:`nnhal.service.aidl_server.AidlConnection`, over the
driver's AIDL face); both share everything below.

Isolation: each connection has its own object table.  A prepared model,
buffer, burst context or fenced-execution callback handed to a client is
named by 16 random bytes (``secrets.token_bytes``) valid on that connection
only, so a client cannot name another client's objects; an unknown id where
an object is expected reaches the driver as a null object (INVALID_ARGUMENT
from the driver), an unknown call target is INVALID_ARGUMENT.  Driver buffer
tokens (``IDevice.allocate``) are recorded per connection: a request naming a
token this connection was not given is INVALID_ARGUMENT before the driver
sees it.

Threads: a client opens one main connection (the service's calls to the
client's callbacks and their answers travel there; its reader thread reads
them) and one call channel per calling thread; each call channel has its
own service thread that reads a call, runs it on the driver and writes the
answer, so a synchronous call crosses no thread hand-over in the service
(calls that arrive on the main connection, from clients that open no call
channels, go to one shared, bounded pool of workers).  At most
:data:`MAX_INFLIGHT` unanswered calls on a main connection and
:data:`MAX_CALL_CHANNELS` call channels per client.  Received descriptors are
owned by the call that carried them and closed when the driver returns (HIDL
semantics: a driver keeps what it needs by mapping or duplicating), except
the memories a synchronous execution sends by slot: the call channel keeps
its own duplicates until the client lets go of them or the channel closes
(:mod:`nnhal.service.slots`).  After an answer, a call channel's thread
polls for the next call for :data:`SERVER_SPIN_US` before it blocks
(:mod:`nnhal.platform.spin`).

When a client disconnects (or dies) everything it held is dropped: objects,
buffer tokens, burst contexts (their ``close()``), pending callbacks (become
no-ops), descriptors.  On SIGTERM / SIGINT the service stops accepting,
removes its socket, lets running work finish for up to
:data:`SHUTDOWN_GRACE_S`, answers every callback still pending with
DEVICE_UNAVAILABLE and exits.
"""

from __future__ import annotations

import fcntl
import logging
import os
import queue
import secrets
import select
import signal
import socket
import struct
import threading
import time
import typing
from pathlib import Path
from typing import Any, Callable, Optional

import msgspec

from nnhal import hal
from nnhal.platform.spin import Spin, spin_limit_ns
from nnhal.service import registry, wire
from nnhal.service.slots import ServiceSlots
from nnhal.service.transport import Channel, PeerClosed, Pending, ProtocolError, close_fds

log = logging.getLogger("nnhal.service")

S = hal.ErrorStatus
MAX_INFLIGHT = 64
MAX_WORKERS = 128
MAX_CONNECTIONS = 512
SHUTDOWN_GRACE_S = 3.0
HANDSHAKE_TIMEOUT_S = 10.0
MAX_CALL_CHANNELS = 64  # per client: one per calling thread
CLIENT_CALL_TIMEOUT_S = 10.0
# NOTE: after an answer, a call channel's thread polls for the client thread's next call this long
# before it blocks (transport.Spin): a client calling in a loop is not woken from sleep each time
SERVER_SPIN_US = 200
DEVICE = b""
_OWNED_CALLS = frozenset({"executeSynchronously_1_3", "execute_1_3"})  # see _run_call
_SLOTTED_CALL = "executeSynchronously_1_3"  # the call whose memories go by slot (nnhal.service.slots)


# --------------------------------------------------------------------------
# peer credentials


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end of a Unix socket."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    return pid, uid, gid


def peer_allowed(creds: tuple[int, int, int], uid: Optional[int] = None) -> bool:
    """Only the service's own user may connect."""
    return creds[1] == (os.getuid() if uid is None else uid)


# --------------------------------------------------------------------------
# workers


class WorkerPool:
    """A bounded pool of long-lived threads (no thread per call)."""

    def __init__(self, max_workers: int = MAX_WORKERS):
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._max = max_workers
        self._n = 0
        self._idle = 0
        self._lock = threading.Lock()

    def submit(self, fn: Any, *args: Any) -> None:
        self._q.put((fn, args))
        if self._idle < self._q.qsize() and self._n < self._max:
            with self._lock:
                if self._n < self._max:
                    self._n += 1
                    threading.Thread(target=self._work, name=f"nnhal-svc-worker-{self._n}", daemon=True).start()

    def _work(self) -> None:
        q = self._q
        while True:
            self._idle += 1
            fn, args = q.get()
            self._idle -= 1
            if fn is None:
                return
            try:
                fn(*args)
            except Exception:  # noqa: BLE001 - a worker never dies of one call
                log.exception("service call failed")

    @property
    def size(self) -> int:
        return self._n


# --------------------------------------------------------------------------
# client objects as the driver sees them


class ClientRef:
    """Base of the proxies for the objects a client passes (its callbacks)."""

    def __init__(self, conn: "Connection", ref: bytes, notify: str):
        self._conn = conn
        self._ref = ref
        self._notify = notify  # the notify the call's spec uses (answered at shutdown)
        self._done = False
        self._received: list[int] = []

    def _oneway(self, iface: str, method: str, args: tuple) -> None:
        conn = self._conn
        with conn.lock:
            if self._done:
                log.error("%s.%s called more than once; ignored", iface, method)
                return
            self._done = True
            conn.outstanding.discard(self)
        if conn.closed:
            return
        args = self._export(iface, method, args)
        try:
            conn.send(wire.ENCODER.encode(wire.CallOut(0, self._ref, method, args)), [])
        except (PeerClosed, OSError, ValueError, TypeError) as e:
            log.debug("callback %s not delivered: %s", method, e)

    def _export(self, iface: str, method: str, args: tuple) -> Any:
        """The arguments of a call to the client as they travel (the service's objects as new refs)."""
        return self._conn.export_refs(wire.METHODS[iface][method].args, args)

    def fail(self, status: S) -> None:
        """Answer a pending callback with ``status`` (service shutting down)."""
        if self._notify:
            getattr(self, self._notify)(*_error_notify_args(self._notify, status))

    def close(self) -> None:
        fds, self._received = self._received, []
        close_fds(fds)


def _error_notify_args(notify: str, status: S) -> tuple:
    if isinstance(notify, str) and notify == "notify":
        return (status,)
    return (status, [], hal.Timing())


class _PreparedModelCallbackProxy(ClientRef, hal.IPreparedModelCallback):
    def notify(self, status: Any, preparedModel: Any) -> None:
        self._oneway("IPreparedModelCallback", "notify", (int(status), preparedModel))

    def notify_1_2(self, status: Any, preparedModel: Any) -> None:
        self._oneway("IPreparedModelCallback", "notify_1_2", (int(status), preparedModel))

    def notify_1_3(self, status: Any, preparedModel: Any) -> None:
        self._oneway("IPreparedModelCallback", "notify_1_3", (int(status), preparedModel))

    def fail(self, status: S) -> None:
        getattr(self, self._notify)(status, None)


class _ExecutionCallbackProxy(ClientRef, hal.IExecutionCallback):
    def notify(self, status: Any) -> None:
        self._oneway("IExecutionCallback", "notify", (int(status),))

    def notify_1_2(self, status: Any, outputShapes: list, timing: Any) -> None:
        self._oneway("IExecutionCallback", "notify_1_2", (int(status), list(outputShapes), timing))

    def notify_1_3(self, status: Any, outputShapes: list, timing: Any) -> None:
        self._oneway("IExecutionCallback", "notify_1_3", (int(status), list(outputShapes), timing))


class _BurstCallbackProxy(ClientRef, hal.IBurstCallback):
    def getMemories(self, slots: list) -> tuple:
        spec = wire.METHODS["IBurstCallback"]["getMemories"]
        # NOTE: the driver duplicates what it keeps from a getMemories answer
        # (the caller's ownership, as in process); the previous answer's
        # descriptors are closed here, the last one's with the burst context.
        old, self._received = self._received, []
        close_fds(old)
        result, fds = self._conn.call_client(self._ref, spec, (list(slots),))
        self._received = fds
        return result

    def fail(self, status: S) -> None:
        pass


_CLIENT_PROXIES = {"IPreparedModelCallback": _PreparedModelCallbackProxy,
                   "IExecutionCallback": _ExecutionCallbackProxy, "IBurstCallback": _BurstCallbackProxy}


# --------------------------------------------------------------------------
# one client


class Connection:
    """One client: its socket, reader thread, objects and tokens."""

    def __init__(self, service: "Service", chan: Channel, pid: int):
        self.service = service
        self.pid = pid
        self.session = secrets.token_bytes(32)
        self.sync_chans: set[Channel] = set()
        self.chan = chan
        self.send = self.chan.send
        self.lock = threading.Lock()
        self.objects: dict[bytes, tuple[str, Any, list]] = {}  # ref -> (iface, object, attachments)
        self.tokens: dict[int, bytes] = {}  # driver buffer token -> the IBuffer's ref
        self.outstanding: set[ClientRef] = set()
        self.client_calls: dict[int, Pending] = {}
        self._next_cid = 1
        self.inflight = 0
        self.closed = False

    # ------------------------------------------------------------ objects
    def register(self, iface: str, obj: Any, attachments: Optional[list] = None) -> Optional[bytes]:
        ref = secrets.token_bytes(16)
        with self.lock:
            if self.closed:
                return None
            self.objects[ref] = (iface, obj, attachments or [])
        return ref

    def export_refs(self, types: tuple, values: tuple) -> tuple:
        """``values`` with the service objects at reference positions replaced by new refs."""
        out = None
        for k, t in enumerate(types):
            if isinstance(t, wire.Ref) and t.owner == "service":
                v = values[k]
                if out is None:
                    out = list(values)
                out[k] = None if v is None else self.register(t.iface, v)
        return values if out is None else tuple(out)

    def _release(self, refs: list[bytes]) -> None:
        dropped = []
        with self.lock:
            for r in refs:
                entry = self.objects.pop(r, None)
                if entry is not None:
                    dropped.append(entry)
                    if entry[0] == "IBuffer":
                        for tok in [t for t, rr in self.tokens.items() if rr == r]:
                            del self.tokens[tok]
        for entry in dropped:
            _close_object(entry)

    # ------------------------------------------------------------ calls to the client
    def call_client(self, target: bytes, spec: wire.MethodSpec, args: tuple) -> tuple[Any, list[int]]:
        """Call a client object and wait for the answer: (result, received fds)."""
        p = Pending()
        with self.lock:
            if self.closed:
                return spec.error(S.DEVICE_UNAVAILABLE), []
            cid = self._next_cid
            self._next_cid += 1
            self.client_calls[cid] = p
        try:
            self.send(wire.ENCODER.encode(wire.CallOut(cid, target, spec.name, args)),
                      wire.collect_fds(args))
        except (PeerClosed, OSError, ValueError, TypeError) as e:
            with self.lock:
                self.client_calls.pop(cid, None)
            log.error("%s: cannot reach the client: %s", spec.name, e)
            return spec.error(S.DEVICE_UNAVAILABLE), []
        if not p.lock.acquire(timeout=CLIENT_CALL_TIMEOUT_S):
            with self.lock:
                self.client_calls.pop(cid, None)
            log.error("%s: the client did not answer within %.0f s", spec.name, CLIENT_CALL_TIMEOUT_S)
            return spec.error(S.GENERAL_FAILURE), []
        if isinstance(p.value, wire.Fail):
            close_fds(p.fds)
            return spec.error(S(p.value.status) if p.value.status in S._value2member_map_ else S.GENERAL_FAILURE), []
        try:
            result = spec.result_decoder.decode(p.value.result)
            if not wire.install_fds(result, p.fds):
                raise ValueError("descriptor count mismatch")
        except (*wire.DECODE_ERRORS, ValueError) as e:
            close_fds(p.fds)
            log.error("%s: malformed answer from the client: %s", spec.name, e)
            return spec.error(S.GENERAL_FAILURE), []
        return result, p.fds

    # ------------------------------------------------------------ reading
    def serve_sync(self, chan: Channel) -> None:
        """Run the calls of one client thread's own channel, one at a time, on
        this thread (the client thread waits for each answer)."""
        spin = Spin(spin_limit_ns(SERVER_SPIN_US))
        clock = time.perf_counter_ns
        slots = ServiceSlots()
        try:
            while not self.closed:
                t0 = clock()
                body, fds = chan.recv(spin.window())
                spin.waited(clock() - t0)
                try:
                    env = wire.ENVELOPE.decode(body)
                except wire.DECODE_ERRORS as e:
                    close_fds(fds)
                    self._undecodable(body, e, chan.send)
                    continue
                if type(env) is wire.Release:  # memories (and objects) the client let go of
                    close_fds(fds)
                    slots.forget(env.slots)
                    if env.refs:
                        self._release(env.refs)
                    continue
                if type(env) is not wire.Call or env.cid <= 0:
                    close_fds(fds)
                    raise ProtocolError(f"a {type(env).__name__} on a call channel")
                try:
                    self.dispatch(env, fds, chan.send, slots)
                except (PeerClosed, ProtocolError):
                    raise
                except Exception:  # noqa: BLE001 - a bug here is this call's GENERAL_FAILURE, not the channel's end
                    log.exception("client %d: %s failed in the service", self.pid, env.method)
                    self._fail(env.cid, S.GENERAL_FAILURE, "internal error", chan.send)
                finally:
                    close_fds(fds)
        except PeerClosed:
            pass
        except ProtocolError as e:
            log.error("client %d broke the protocol (%s): call channel closed", self.pid, e)
        except Exception:  # noqa: BLE001
            log.exception("client %d: call channel failed", self.pid)
        finally:
            with self.lock:
                self.sync_chans.discard(chan)
            chan.close()
            slots.close()

    def read(self) -> None:
        """The main channel's reader: answers to the service's calls, releases,
        and (from clients that do not open call channels) calls."""
        chan = self.chan
        try:
            while True:
                body, fds = chan.recv()
                try:
                    env = wire.ENVELOPE.decode(body)
                except wire.DECODE_ERRORS as e:
                    close_fds(fds)
                    self._undecodable(body, e, self.send)
                    continue
                if type(env) is wire.Call:
                    if env.cid <= 0:
                        close_fds(fds)
                        raise ProtocolError("a call to the service must expect an answer")
                    with self.lock:
                        self.inflight += 1
                        over = self.inflight > MAX_INFLIGHT
                    if over:
                        close_fds(fds)
                        raise ProtocolError(f"more than {MAX_INFLIGHT} calls in flight")
                    self.service.pool.submit(self._handle, env, fds)
                elif type(env) is wire.Release:
                    close_fds(fds)
                    self._release(env.refs)
                elif type(env) is wire.Hello or type(env) is wire.Attach:
                    close_fds(fds)
                    raise ProtocolError("a second handshake")
                else:  # Reply or Fail to a call of ours
                    with self.lock:
                        p = self.client_calls.pop(env.cid, None)
                    if p is None:
                        close_fds(fds)
                        continue
                    p.value, p.fds = env, fds
                    p.lock.release()
        except PeerClosed:
            log.debug("client %d disconnected", self.pid)
        except ProtocolError as e:
            log.error("client %d broke the protocol (%s): disconnected", self.pid, e)
        except Exception:  # noqa: BLE001
            log.exception("client %d: reader failed", self.pid)
        finally:
            self.close()

    def _undecodable(self, body: bytes, err: Exception, send: Any) -> None:
        """A frame that is not an envelope: INVALID_ARGUMENT if it names a call id, else disconnect."""
        cid = peek_call_id(body)
        if cid:
            log.error("client %d: malformed call %d: %s", self.pid, cid, err)
            self._fail(cid, S.INVALID_ARGUMENT, f"malformed call: {err}", send)
            return
        raise ProtocolError(f"undecodable message: {err}")

    def _fail(self, cid: int, status: S, message: str, send: Any = None) -> None:
        try:
            (send or self.send)(wire.ENCODER.encode(wire.Fail(cid, int(status), message)), [])
        except (PeerClosed, OSError):
            pass

    # ------------------------------------------------------------ calls from the client
    def _handle(self, call: wire.Call, fds: list[int]) -> None:
        try:
            self.dispatch(call, fds, self.send)
        finally:
            close_fds(fds)  # NOTE: HIDL semantics: the driver mapped or duplicated what it keeps
            with self.lock:
                self.inflight -= 1

    def dispatch(self, call: wire.Call, fds: list[int], send: Any, slots: Optional[ServiceSlots] = None) -> None:
        """Run one call of the client's and send its answer with ``send`` (the
        HIDL face; a face's own connection class overrides it).  ``fds``: the
        call's descriptors, closed by the caller afterwards."""
        target = call.target
        if target == DEVICE:
            iface, obj = "IDevice", self.service.device
        else:
            entry = self.objects.get(target)
            if entry is None:
                self._fail(call.cid, S.INVALID_ARGUMENT, "unknown object", send)
                return
            iface, obj = entry[0], entry[1]
        spec = wire.METHODS[iface].get(call.method)
        if spec is None:
            self._fail(call.cid, S.INVALID_ARGUMENT, f"{iface} has no method {call.method!r}", send)
            return
        if slots is not None and call.slots is not None and not fds and not call.forget:
            # NOTE: the same call as the last one on this channel (a client executing in a loop):
            # decoded, checked and resolved then, over the same cached memories (ServiceSlots.recall)
            args = slots.recall(target, call.args, call.slots)
            if args is not None:
                self._run_call(call, spec, iface, obj, args, [], slots.pool, send)
                return
        try:
            draft = wire.DRAFT_FORMS.get((iface, spec.name))
            if draft is not None and len(draft[0].args) == _array_len(call.args):
                args = draft[1](list(draft[0].arg_decoder.decode(call.args)))
            else:
                args = list(spec.arg_decoder.decode(call.args))
        except wire.DECODE_ERRORS as e:
            log.error("%s.%s: malformed arguments: %s", iface, spec.name, e)
            self._fail(call.cid, S.INVALID_ARGUMENT, f"malformed arguments: {e}", send)
            return
        if (fds or spec.has_handles) and not wire.install_fds(args, list(fds)):
            log.error("%s.%s: %d descriptors do not match the handles of the arguments", iface, spec.name, len(fds))
            self._fail(call.cid, S.INVALID_ARGUMENT, "descriptor count mismatch", send)
            return
        attachments: list = []
        for k, t in spec.arg_refs:
            args[k] = self._import_ref(t, args[k], spec, attachments)
        if iface == "IPreparedModel" and not self._tokens_ok(args[0]):
            self._fail(call.cid, S.INVALID_ARGUMENT, "a request names a memory token this client was not given", send)
            return
        pool_cache = None
        if call.slots is not None or call.forget:
            if slots is None or spec.name != _SLOTTED_CALL:
                self._fail(call.cid, S.INVALID_ARGUMENT, f"memory slots on {spec.name} or off a call channel", send)
                return
            err, all_cached = slots.resolve(args[0], call.slots, call.forget)
            if err:
                log.error("%s.%s: %s", iface, spec.name, err)
                self._fail(call.cid, S.INVALID_ARGUMENT, err, send)
                return
            if all_cached:
                pool_cache = slots.pool
                if not fds and not call.forget:
                    slots.keep(target, call.args, call.slots, args)
        self._run_call(call, spec, iface, obj, args, attachments, pool_cache, send)

    def _run_call(self, call: wire.Call, spec: wire.MethodSpec, iface: str, obj: Any, args: list,
                  attachments: list, pool_cache: Any, send: Any) -> None:
        # NOTE: a request decoded from this call's message is no one else's: a driver that
        # offers an ``<method>_owned`` entry point runs it without the by-value copy (and over
        # the channel's cached pools, when every pool is one)
        method = getattr(obj, spec.name + "_owned", None) if spec.name in _OWNED_CALLS else None
        try:
            if pool_cache is not None and method is not None:
                result = method(*args, pool_cache=pool_cache)
            else:
                result = (method or getattr(obj, spec.name))(*args)
        except Exception as e:  # noqa: BLE001 - a driver bug is the client's GENERAL_FAILURE, not our death
            log.exception("%s.%s raised", iface, spec.name)
            result = spec.error(S.GENERAL_FAILURE)
            if spec.callback is None:
                self._fail(call.cid, S.GENERAL_FAILURE, f"the driver raised {type(e).__name__}", send)
                return
        if spec.callback is not None and result != S.NONE:
            # NOTE: a failed launch has notified already (or never will): nothing pending
            proxy = args[spec.callback]
            if isinstance(proxy, ClientRef):
                with self.lock:
                    proxy._done = True
                    self.outstanding.discard(proxy)
        self._reply(call.cid, spec, result, attachments, send)

    def _import_ref(self, t: Any, value: Any, spec: wire.MethodSpec, attachments: list) -> Any:
        if isinstance(t, wire.Ref) and t.owner == "client":
            if value is None:
                return None
            proxy = _CLIENT_PROXIES[t.iface](self, value, spec.notify)
            if t.iface == "IBurstCallback":
                attachments.append(proxy)
            else:
                with self.lock:
                    self.outstanding.add(proxy)
            return proxy
        if isinstance(t, wire.Ref):
            return self._lookup(t.iface, value)
        return [self._lookup(typing.get_args(t)[0].iface, v) for v in value]

    def _lookup(self, iface: str, ref: Optional[bytes]) -> Any:
        entry = self.objects.get(ref) if ref is not None else None
        return entry[1] if entry is not None and entry[0] == iface else None

    def _tokens_ok(self, request: Any) -> bool:
        pools = getattr(request, "pools", None)
        if not pools or not isinstance(request, hal.Request):
            return True
        for p in pools:
            if p.token is not None and p.token not in self.tokens:
                log.error("request pool names memory token %r, not given to this client", p.token)
                return False
        return True

    def _reply(self, cid: int, spec: wire.MethodSpec, result: Any, attachments: Optional[list], send: Any) -> None:
        def answer(out_fds: list[int]) -> Any:
            out = self._export_result(spec, result, attachments or []) if spec.result_refs else result
            if spec.result_has_handles and out is not None:
                # NOTE: a handle the driver returns (executeFenced's sync fence) is the caller's: the client now
                # holds its own copy
                out_fds += wire.collect_fds(out)
            return out

        self.send_reply(cid, spec.name, answer, send)

    def send_reply(self, cid: int, what: str, answer: Callable[[list[int]], Any], send: Any) -> None:
        """Send ``answer(out_fds)`` as the reply to ``cid``: the result to encode,
        the descriptors to send with it put in ``out_fds`` (the service's own:
        closed once sent, whatever happens); GENERAL_FAILURE if it cannot be
        encoded."""
        out_fds: list[int] = []
        try:
            body = wire.ENCODER.encode(wire.ReplyOut(cid, answer(out_fds)))
        except (TypeError, ValueError, msgspec.EncodeError) as e:
            close_fds(out_fds)
            log.error("%s: the answer cannot be sent: %s", what, e)
            self._fail(cid, S.GENERAL_FAILURE, "unencodable result", send)
            return
        try:
            send(body, out_fds)
        except (PeerClosed, OSError, ValueError) as e:
            log.debug("%s: reply not delivered: %s", what, e)
        finally:
            if out_fds:
                close_fds(out_fds)

    def _export_result(self, spec: wire.MethodSpec, result: Any, attachments: list) -> Any:
        if len(spec.result) == 1:
            return None if result is None else self.register(spec.result[0].iface, result, attachments)
        out = list(result)
        for k, t in spec.result_refs:
            if out[k] is not None:
                out[k] = self.register(t.iface, out[k], attachments)
        if spec.name == "allocate" and out[1] is not None and out[0] == S.NONE:
            with self.lock:
                self.tokens[out[2]] = out[1]
        return tuple(out)

    # ------------------------------------------------------------ ending
    def answer_pending(self, status: S) -> None:
        with self.lock:
            pending = list(self.outstanding)
        for proxy in pending:
            proxy.fail(status)

    def close(self) -> None:
        with self.lock:
            if self.closed:
                return
            self.closed = True
            objects, self.objects = list(self.objects.values()), {}
            self.tokens.clear()
            self.outstanding.clear()
            calls, self.client_calls = list(self.client_calls.values()), {}
            chans, self.sync_chans = list(self.sync_chans), set()
        self.chan.close()
        for ch in chans:
            ch.close()
        for p in calls:
            p.value = wire.Fail(0, int(S.DEVICE_UNAVAILABLE), "client gone")
            p.lock.release()
        for entry in objects:
            _close_object(entry)
        self.service.forget(self)


def peek_call_id(body: bytes) -> int:
    """The call id of a message that starts as a call (an array of 5 to 7:
    tag 0, then a positive msgpack int), however malformed the rest; else 0."""
    if len(body) < 3 or body[0] not in (0x95, 0x96, 0x97) or body[1] != 0:
        return 0
    b = body[2]
    if b <= 0x7F:
        return b
    sizes = {0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8}
    n = sizes.get(b)
    if n is None or len(body) < 3 + n:
        return 0
    return int.from_bytes(body[3:3 + n], "big")


def _array_len(raw: Any) -> int:
    """The element count of a msgpack array (fixarray, array 16 / 32), else -1."""
    b = bytes(memoryview(raw)[:5])
    if b and 0x90 <= b[0] <= 0x9F:
        return b[0] & 0x0F
    if len(b) >= 3 and b[0] == 0xDC:
        return int.from_bytes(b[1:3], "big")
    if len(b) >= 5 and b[0] == 0xDD:
        return int.from_bytes(b[1:5], "big")
    return -1


def _close_object(entry: tuple[str, Any, list]) -> None:
    iface, obj, attachments = entry
    if iface in ("IBurstContext", "IBuffer"):
        close = getattr(obj, "close", None)
        if callable(close):
            try:
                close()
            except Exception:  # noqa: BLE001
                log.exception("closing a %s failed", iface)
    for a in attachments:
        a.close()


# --------------------------------------------------------------------------
# the service


class Service:
    """A driver served under a name until :meth:`stop`."""

    def __init__(self, name: str, device: Any, runtime_dir: Optional[Path] = None):
        self.name = registry.validate_name(name)
        self.device = device
        self.dir = runtime_dir or registry.runtime_dir()
        self.path = registry.socket_path(name, self.dir)
        self.pool = WorkerPool()
        self.connections: set[Connection] = set()
        self.sessions: dict[bytes, Connection] = {}
        self._lock = threading.Lock()
        self._stop_r, self._stop_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._lock_fd = -1
        self.listener: Optional[socket.socket] = None

    def bind(self) -> None:
        """Take the name (fails if a live service has it) and listen."""
        lock = registry.lock_path(self.name, self.dir)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise registry.RegistryError(f"a service named {self.name!r} already runs ({self.path})") from None
        self._lock_fd = fd
        try:
            os.unlink(self.path)  # NOTE: we hold the name's lock: a socket left here is stale
        except FileNotFoundError:
            pass
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        s.bind(str(self.path))
        os.chmod(self.path, 0o600)
        s.listen(64)
        self.listener = s

    def forget(self, conn: Connection) -> None:
        with self._lock:
            self.connections.discard(conn)
            self.sessions.pop(conn.session, None)

    def request_stop(self) -> None:
        """Async-signal-safe: wake :meth:`serve_forever` to shut down."""
        try:
            os.write(self._stop_w, b"x")
        except OSError:
            pass

    def serve_forever(self) -> None:
        assert self.listener is not None
        listener = self.listener
        try:
            while True:
                r, _, _ = select.select([listener, self._stop_r], [], [])
                if self._stop_r in r:
                    break
                try:
                    sock, _ = listener.accept()
                except OSError as e:
                    log.error("accept failed: %s", e)
                    time.sleep(0.01)
                    continue
                self._admit(sock)
        finally:
            self.shutdown()

    def _admit(self, sock: socket.socket) -> None:
        try:
            creds = peer_credentials(sock)
        except OSError as e:
            log.error("cannot read the peer's credentials: %s; refused", e)
            sock.close()
            return
        if not peer_allowed(creds):
            log.error("connection from uid %d (pid %d) refused: only uid %d may connect", creds[1], creds[0],
                      os.getuid())
            sock.close()
            return
        with self._lock:
            if len(self.connections) >= MAX_CONNECTIONS:
                log.error("connection from pid %d refused: %d clients already", creds[0], MAX_CONNECTIONS)
                sock.close()
                return
        threading.Thread(target=self._greet, args=(sock, creds[0]), name=f"nnhal-svc-conn-{creds[0]}",
                         daemon=True).start()

    def _greet(self, sock: socket.socket, pid: int) -> None:
        """The socket's first message says what it is: a client's main
        connection (Hello) or a call channel joining its session (Attach)."""
        chan = Channel(sock)
        try:
            sock.settimeout(HANDSHAKE_TIMEOUT_S)  # NOTE: a silent peer must not hold a thread forever
            body, fds = chan.recv()
            sock.settimeout(None)
            close_fds(fds)
            env = wire.ENVELOPE.decode(body)
        except (PeerClosed, ProtocolError, OSError, *wire.DECODE_ERRORS) as e:
            log.error("pid %d: bad handshake (%s); disconnected", pid, e)
            chan.close()
            return
        if type(env) is wire.Hello:
            conn = self._connection(env, chan, pid)
            if conn is None:
                chan.close()
                return
            with self._lock:
                self.connections.add(conn)
                self.sessions[conn.session] = conn
            try:
                chan.send(wire.ENCODER.encode(wire.Attach(conn.session)), [])
            except (PeerClosed, OSError):
                conn.close()
                return
            log.debug("client pid %d connected", pid)
            conn.read()
            return
        if type(env) is wire.Attach:
            with self._lock:
                conn = self.sessions.get(env.session)
            ok = conn is not None and conn.pid == pid and not conn.closed
            if ok:
                with conn.lock:
                    ok = not conn.closed and len(conn.sync_chans) < MAX_CALL_CHANNELS
                    if ok:
                        conn.sync_chans.add(chan)
            if not ok:
                log.error("pid %d: call channel refused (unknown session, another process, or %d channels)", pid,
                          MAX_CALL_CHANNELS)
                chan.close()
                return
            try:
                chan.send(wire.ENCODER.encode(wire.ReplyOut(0, None)), [])
            except (PeerClosed, OSError):
                chan.close()
                return
            conn.serve_sync(chan)
            return
        log.error("pid %d: bad handshake (%s); disconnected", pid, type(env).__name__)
        chan.close()

    def _connection(self, hello: wire.Hello, chan: Channel, pid: int) -> Optional[Connection]:
        """The connection of the face the client's Hello asks for (None: refused)."""
        if hello.face == "hidl":
            return Connection(self, chan, pid)
        if hello.face == "aidl":
            from nnhal.service.aidl_server import AidlConnection

            try:
                return AidlConnection(self, chan, pid, hello.version)
            except ValueError as e:
                log.error("pid %d: %s; disconnected", pid, e)
                return None
        log.error("pid %d: no face %r (hidl, aidl); disconnected", pid, hello.face)
        return None

    def shutdown(self) -> None:
        if self.listener is not None:
            self.listener.close()
            self.listener = None
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
        end = time.monotonic() + SHUTDOWN_GRACE_S
        while time.monotonic() < end:
            with self._lock:
                conns = list(self.connections)
            if not any(c.inflight or c.outstanding for c in conns):
                break
            time.sleep(0.02)
        with self._lock:
            conns = list(self.connections)
        for c in conns:
            c.answer_pending(S.DEVICE_UNAVAILABLE)
            c.close()
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1
        for fd in (self._stop_r, self._stop_w):
            try:
                os.close(fd)
            except OSError:
                pass


def serve(name: str, driver: str = "sample-all") -> int:
    """Run ``driver`` as the service ``name`` in the foreground until SIGTERM / SIGINT."""
    from nnhal.drivers import registry

    device = registry.get_device(driver)  # NOTE: LookupError for an unknown or unloadable driver (cli serve: exit 2)
    service = Service(name, device)
    service.bind()

    def stop(signum: int, frame: Any) -> None:
        service.request_stop()

    old = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    print(f"nnhal: serving {driver!r} as {name!r} (HIDL 1.0-1.3 and AIDL 1-4: nnhal.connect / nnhal.aidl.connect) "
          f"on {service.path} (pid {os.getpid()})", flush=True)
    try:
        service.serve_forever()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    print(f"nnhal: service {name!r} stopped", flush=True)
    return 0
