"""Client-side proxies of a driver service: ``nnhal.connect(name)``.

:class:`RemoteDevice`, :class:`RemotePreparedModel`, :class:`RemoteBuffer`,
:class:`RemoteBurstContext` and :class:`RemoteFencedExecutionCallback`
implement the HAL interfaces of :mod:`nnhal.hal` by calling the service
(the part of binder's proxies): the same methods, arguments and returned
tuples as in process, so code written against ``nnhal.get_device`` runs
unchanged.  The client's own callback objects (``hal.PreparedModelCallback``,
``hal.ExecutionCallback``, subclasses of the callback interfaces, a burst's
``IBurstCallback``) stay in this process and are called when the service
calls them.

Guarantees: a launch status is returned when the service answers; every
callback passed to a call is notified exactly once (the first notification
wins; a failed launch notifies with its status if the driver did not); if
the service dies, every pending call returns and every pending callback is
notified with DEVICE_UNAVAILABLE at once (the reader thread sees the end of
the stream), and later calls return DEVICE_UNAVAILABLE without blocking.

Threads: each calling thread gets its own call channel to the service (a
second socket joined to the connection's session on the thread's first
call): it sends its call and reads its own answer, with no thread hand-over
at either end.  The main connection's reader thread takes the service's
calls to this process's objects: notifications of the ready callbacks
(``hal.PreparedModelCallback``, ``hal.ExecutionCallback``) run on it (they
only store and wake); any other client object is called on one dispatcher
thread per connection, in order, so a callback that calls the service again
cannot block the reader.  Memories in requests are sent as descriptors with
every call, as HIDL does, except on the synchronous path, where a thread's
call channel caches them by slot in the service (:mod:`nnhal.service.slots`)
and lets go of one as soon as the client frees or drops it.  A calling thread
polls for its answer before it blocks (:mod:`nnhal.platform.spin`).
"""

from __future__ import annotations

import inspect
import itertools
import logging
import os
import queue
import socket
import struct
import threading
import time
import typing
import weakref
from pathlib import Path
from typing import Any, Optional

import msgspec

from nnhal import hal
from nnhal.hal import aidl
from nnhal.platform.spin import Spin, spin_limit_ns
from nnhal.service import registry, wire
from nnhal.service.slots import UNKNOWN_SLOT, ClientSlots
from nnhal.service.transport import Channel, PeerClosed, Pending, ProtocolError, close_fds

log = logging.getLogger("nnhal.service")

S = hal.ErrorStatus
MAX_INFLIGHT = 64  # the service's limit per connection
# NOTE: a calling thread polls for its answer up to this long before it blocks (transport.Spin):
# most executions of small models answer within it
CLIENT_SPIN_US = 1000
_clock = time.perf_counter_ns
_READY_CALLBACKS = (hal.PreparedModelCallback, hal.ExecutionCallback, aidl.PreparedModelCallback)


class ServiceUnavailable(LookupError):
    """No service of that name runs (the message names the registry directory)."""


class Unreachable(Exception):
    """A call found the service gone (or its channel broken)."""


class Unsendable(Exception):
    """The socket refused a call (a descriptor that is not open, a frame over the limits)."""


class _Entry:
    """A client object the service may call."""

    __slots__ = ("obj", "iface", "notify", "oneshot")

    def __init__(self, obj: Any, iface: str, notify: str, oneshot: bool):
        self.obj, self.iface, self.notify, self.oneshot = obj, iface, notify, oneshot


def _error_args(iface: str, notify: str, status: S) -> tuple:
    if iface == "IPreparedModelCallback":
        return status, None
    if notify == "notify":
        return (status,)
    return status, [], hal.Timing()


class Connection:
    """One connection to a service."""

    def __init__(self, name: str, path: str, hello: Optional[wire.Hello] = None):
        self.name = name
        self.path = path
        self.chan, self.service_pid = _open(path)
        try:
            self.chan.send(wire.ENCODER.encode(hello or wire.Hello()), None)
            env = _handshake_answer(self.chan)
            if type(env) is not wire.Attach:
                raise ServiceUnavailable(f"the service at {path} answered the handshake with {type(env).__name__}")
        except BaseException:
            self.chan.close()
            raise
        self._session = env.session
        self._local = threading.local()
        self._call_chans: weakref.WeakSet[Channel] = weakref.WeakSet()
        self._send = self.chan.send
        self._lock = threading.Lock()
        self._pending: dict[int, Pending] = {}
        self._entries: dict[bytes, _Entry] = {}
        self._cids = itertools.count(1)
        self._ids = itertools.count(1)
        self._sem = threading.BoundedSemaphore(MAX_INFLIGHT)
        self._releases: list[bytes] = []
        self._dispatch_q: Optional[queue.SimpleQueue] = None
        self._forget_q: Optional[queue.SimpleQueue] = None
        self.dead = False
        self._reader = threading.Thread(target=self._read, name=f"nnhal-client-{name}", daemon=True)
        self._reader.start()

    # ------------------------------------------------------------ calls to the service
    def _call_channel(self) -> Optional[Channel]:
        """This thread's own channel to the service (opened on its first call),
        or None where the service refused one (calls then use the main channel)."""
        try:
            return self._local.chan
        except AttributeError:
            pass
        chan: Optional[Channel] = None
        try:
            chan, _ = _open(self.path)
            chan.send(wire.ENCODER.encode(wire.Attach(self._session)), None)
            env = _handshake_answer(chan)
            if type(env) is not wire.Reply:
                raise ServiceUnavailable("call channel refused")
            self._call_chans.add(chan)
        except (OSError, PeerClosed, ProtocolError, ServiceUnavailable, *wire.DECODE_ERRORS) as e:
            log.debug("no call channel for this thread (%s); calls go through the main connection", e)
            if chan is not None:
                chan.close()
            chan = None
        self._local.chan = chan
        self._local.spin = Spin(spin_limit_ns(CLIENT_SPIN_US))
        self._local.slots = self._slot_table(chan) if chan is not None else None
        return chan

    def _slot_table(self, chan: Channel) -> Optional[ClientSlots]:
        """The memory slots of a new call channel, with the connection's
        forgetter thread (started with the first) to send forgets at once."""
        q = self._forget_q
        if q is None:
            q = self._forget_q = queue.SimpleQueue()
            threading.Thread(target=_forgetter, args=(q,), name=f"nnhal-client-{self.name}-forget",
                             daemon=True).start()
        # NOTE: SimpleQueue.put may run inside a finalizer; sending there could deadlock the channel
        return ClientSlots(wake=lambda table: q.put((chan, table)))

    def call(self, target: bytes, spec: wire.MethodSpec, args: tuple) -> Any:
        entry_ref: Optional[bytes] = None
        if self._releases:
            self._flush_releases()
        if spec.arg_refs:
            args, entry_ref = self._export(spec, args)
        if self.dead:
            return self._failed(spec, entry_ref, S.DEVICE_UNAVAILABLE)
        chan = self._call_channel()
        if chan is not None:
            return self._call_on(chan, target, spec, args, entry_ref)
        cid = next(self._cids)
        try:
            fds, body = _encode(cid, target, spec, args)
        except _ENCODE_ERRORS as e:
            log.error("%s: argument cannot be sent: %s", spec.name, e)
            return self._failed(spec, entry_ref, S.INVALID_ARGUMENT)
        try:
            env, rfds = self.exchange_main(cid, body, fds)
        except Unreachable:
            return self._failed(spec, entry_ref, S.DEVICE_UNAVAILABLE)
        except Unsendable as e:
            log.error("%s: cannot send the call: %s", spec.name, e)
            return self._failed(spec, entry_ref, S.INVALID_ARGUMENT)
        return self._result(spec, entry_ref, env, rfds)

    def exchange_main(self, cid: int, body: bytes, fds: Optional[list[int]]) -> tuple[Any, list[int]]:
        """Send a call on the main connection and wait for its answer (the
        envelope, its descriptors).  Raises :class:`Unreachable` if the service
        is gone, :class:`Unsendable` for a call the socket refuses."""
        p = Pending()
        self._sem.acquire()
        with self._lock:
            self._pending[cid] = p
        try:
            self._send(body, fds)
        except (PeerClosed, OSError, ValueError) as e:
            with self._lock:
                self._pending.pop(cid, None)
            self._sem.release()
            if isinstance(e, PeerClosed) or self.dead:
                raise Unreachable(str(e)) from None
            raise Unsendable(str(e)) from None
        p.lock.acquire()
        self._sem.release()
        if p.value is None:  # NOTE: the reader saw the service go (_die)
            raise Unreachable("the service is gone")
        return p.value, p.fds

    def exchange_on(self, chan: Channel, cid: int, body: bytes, fds: Optional[list[int]]) -> tuple[Any, list[int]]:
        """Send a call on this thread's call channel and read its answer (no
        hand-over).  Raises :class:`Unreachable` if the service is gone or the
        channel broke (dropped: the thread's next call opens a new one, refused
        if the service is gone), :class:`Unsendable` for a call the socket
        refuses (a descriptor that is not open, a frame over the limits)."""
        spin = self._local.spin
        try:
            t0 = _clock()
            chan.send(body, fds)
            while True:
                rbody, rfds = chan.recv(spin.window())
                try:
                    env = wire.ENVELOPE.decode(rbody)
                except wire.DECODE_ERRORS as e:
                    close_fds(rfds)
                    raise ProtocolError(f"undecodable answer: {type(e).__name__}: {e}") from None
                if getattr(env, "cid", None) == cid:
                    break
                close_fds(rfds)
            spin.waited(_clock() - t0)
        except (PeerClosed, ProtocolError) as e:
            chan.close()
            del self._local.chan
            raise Unreachable(str(e)) from None
        except (OSError, ValueError) as e:
            if self.dead or chan.closed:
                raise Unreachable(str(e)) from None
            raise Unsendable(str(e)) from None
        return env, rfds

    def _call_on(self, chan: Channel, target: bytes, spec: wire.MethodSpec, args: tuple,
                 entry_ref: Optional[bytes]) -> Any:
        """The hot path: this thread sends on its own channel and reads its own
        answer (no hand-over); a synchronous execution's memories go by slot."""
        local = self._local
        cache: Optional[ClientSlots] = local.slots if spec is _SYNC_1_3 else None
        for attempt in (0, 1):
            cid = next(self._cids)
            try:
                if cache is not None:
                    sent, slots, forget = cache.prepare(args[0])
                    fds, body = _encode(cid, target, spec, (sent, *args[1:]), slots, forget)
                else:
                    fds, body = _encode(cid, target, spec, args)
            except _ENCODE_ERRORS as e:
                log.error("%s: argument cannot be sent: %s", spec.name, e)
                return self._failed(spec, entry_ref, S.INVALID_ARGUMENT)
            try:
                env, rfds = self.exchange_on(chan, cid, body, fds)
            except Unreachable:
                return self._failed(spec, entry_ref, S.DEVICE_UNAVAILABLE)
            except Unsendable as e:
                log.error("%s: cannot send the call: %s", spec.name, e)
                return self._failed(spec, entry_ref, S.INVALID_ARGUMENT)
            if attempt == 0 and cache is not None and type(env) is wire.Fail \
                    and env.message.startswith(UNKNOWN_SLOT):
                # NOTE: the service lost track of a slot: forget them all and send every memory again
                log.warning("%s: %s; the memories are sent again", spec.name, env.message)
                close_fds(rfds)
                cache.reset()
                continue
            break
        return self._result(spec, entry_ref, env, rfds)

    def _result(self, spec: wire.MethodSpec, entry_ref: Optional[bytes], env: Any, fds: list[int]) -> Any:
        if type(env) is wire.Fail:
            close_fds(fds)
            status = S(env.status) if env.status in S._value2member_map_ else S.GENERAL_FAILURE
            log.debug("%s failed in the service: %s", spec.name, env.message)
            return self._failed(spec, entry_ref, status)
        try:
            result = spec.result_decoder.decode(env.result)
            if (fds or spec.result_has_handles) and not wire.install_fds(result, fds):
                raise ValueError("descriptor count mismatch")
        except (*wire.DECODE_ERRORS, ValueError) as e:
            close_fds(fds)
            log.error("%s: malformed answer from the service: %s", spec.name, e)
            return self._failed(spec, entry_ref, S.GENERAL_FAILURE)
        if spec.result_refs:
            result = self._import_result(spec, result, entry_ref)
        if entry_ref is not None and spec.callback is not None and result != S.NONE:
            self._failed(spec, entry_ref, result)  # the callback hears the failed launch once
        return result

    def _export(self, spec: wire.MethodSpec, args: tuple) -> tuple[tuple, Optional[bytes]]:
        out = list(args)
        entry_ref = None
        for k, t in spec.arg_refs:
            v = out[k]
            if isinstance(t, wire.Ref) and t.owner == "client":
                method = spec.notify or ("getMemories" if t.iface == "IBurstCallback" else "")
                if v is None or not callable(getattr(v, method, None)):
                    out[k] = None  # NOTE: as in process: the driver answers INVALID_ARGUMENT
                    continue
                out[k] = entry_ref = self.register_entry(v, t.iface, spec.notify, t.iface != "IBurstCallback")
            elif isinstance(t, wire.Ref):
                out[k] = self.ref_of(v)
            else:
                out[k] = [self.ref_of(x) for x in (v or [])]
        return tuple(out), entry_ref

    def register_entry(self, obj: Any, iface: str, notify: str, oneshot: bool = True) -> bytes:
        """A new reference to a client object the service may call (``oneshot``:
        a callback notified once, then forgotten)."""
        ref = next(self._ids).to_bytes(8, "little")
        with self._lock:
            self._entries[ref] = _Entry(obj, iface, notify, oneshot)
        return ref

    def ref_of(self, obj: Any) -> Optional[bytes]:
        """The reference of a service object's proxy of this connection; None for
        anything else (an object of another connection or process is a null
        reference here)."""
        if isinstance(obj, RemoteObject) and obj._conn is self:
            return obj._ref
        return None

    def _failed(self, spec: wire.MethodSpec, entry_ref: Optional[bytes], status: S) -> Any:
        if entry_ref is not None:
            with self._lock:
                entry = self._entries.pop(entry_ref, None)
            if entry is not None and entry.oneshot:
                self._deliver(entry, entry.notify, _error_args(entry.iface, entry.notify, status))
        return spec.error(status)

    def _import_result(self, spec: wire.MethodSpec, result: Any, entry_ref: Optional[bytes]) -> Any:
        out = list(result)
        for k, t in spec.result_refs:
            if out[k] is not None:
                out[k] = _PROXIES[t.iface](self, out[k], entry_ref)
            elif t.iface == "IBurstContext" and entry_ref is not None:
                with self._lock:
                    self._entries.pop(entry_ref, None)
        return tuple(out)

    def release(self, ref: bytes, entry_ref: Optional[bytes] = None) -> None:
        """The proxy of ``ref`` was dropped (sent with the next call: a finalizer
        may run inside a send)."""
        if entry_ref is not None:
            self._entries.pop(entry_ref, None)
        if not self.dead:
            self._releases.append(ref)

    def release_now(self, ref: bytes) -> None:
        """Release ``ref`` in order with this thread's later calls (on its call
        channel): an object closed here is gone for the next call."""
        chan = None if self.dead else self._call_channel()
        if chan is None:
            self.release(ref)
            self._flush_releases()
            return
        try:
            chan.send(wire.ENCODER.encode(wire.Release([ref])), None)
        except (PeerClosed, OSError, ValueError):
            pass  # NOTE: a channel that is gone: the service dropped the connection's objects with it

    def _flush_releases(self, chan: Optional[Channel] = None) -> None:
        """Send the dropped references (on ``chan``, this thread's call channel:
        in order with the thread's next call; else on the main connection)."""
        refs, self._releases = self._releases, []
        if refs and not self.dead:
            try:
                (chan.send if chan is not None else self._send)(wire.ENCODER.encode(wire.Release(refs)), None)
            except (PeerClosed, OSError):
                pass

    # ------------------------------------------------------------ calls from the service
    def _read(self) -> None:
        chan = self.chan
        try:
            while True:
                body, fds = chan.recv()
                try:
                    env = wire.ENVELOPE.decode(body)
                except wire.DECODE_ERRORS as e:
                    close_fds(fds)
                    raise ProtocolError(f"undecodable message from the service: {e}") from None
                t = type(env)
                if t is wire.Reply or t is wire.Fail:
                    with self._lock:
                        p = self._pending.pop(env.cid, None)
                    if p is None:
                        close_fds(fds)
                        continue
                    p.value, p.fds = env, fds
                    p.lock.release()
                elif t is wire.Call:
                    self._incoming(env, fds)
                else:
                    close_fds(fds)
        except PeerClosed:
            log.debug("service %s closed the connection", self.name)
        except ProtocolError as e:
            log.error("service %s: %s", self.name, e)
        except Exception:  # noqa: BLE001
            log.exception("service %s: reader failed", self.name)
        finally:
            self._die()

    def _incoming(self, call: wire.Call, fds: list[int]) -> None:
        with self._lock:
            entry = self._entries.get(call.target)
            if entry is not None and entry.oneshot:
                del self._entries[call.target]
        spec = self._incoming_spec(entry.iface, call.method) if entry is not None else None
        if entry is None or spec is None or bool(call.cid) == spec.oneway:
            close_fds(fds)
            log.debug("call %s on an unknown client object ignored", call.method)
            if call.cid:
                self._reply_fail(call.cid, S.INVALID_ARGUMENT)
            return
        try:
            args = self._incoming_args(spec, call.args, fds)
        except (*wire.DECODE_ERRORS, ValueError) as e:
            close_fds(fds)
            log.error("malformed %s from the service: %s", call.method, e)
            if entry.oneshot:
                self._deliver(entry, entry.notify, _error_args(entry.iface, entry.notify, S.GENERAL_FAILURE))
            elif call.cid:
                self._reply_fail(call.cid, S.INVALID_ARGUMENT)
            return
        if call.cid:
            self._dispatch(self._answer, call.cid, entry, spec, args)
        else:
            self._deliver(entry, call.method, tuple(args))

    def _incoming_spec(self, iface: str, method: str) -> Any:
        """The spec of a call the service makes to a client object (None: no such method)."""
        return wire.METHODS.get(iface, {}).get(method)

    def _incoming_args(self, spec: Any, raw: Any, fds: list[int]) -> list:
        """The arguments of a call from the service, decoded (descriptors and
        object proxies in place); raises for a malformed call."""
        args = list(spec.arg_decoder.decode(raw))
        if (fds or spec.has_handles) and not wire.install_fds(args, fds):
            raise ValueError("descriptor count mismatch")
        for k, t in spec.arg_refs:
            if args[k] is not None:
                args[k] = _PROXIES[t.iface](self, args[k], None)
        return args

    def _deliver(self, entry: _Entry, method: str, args: tuple) -> None:
        # NOTE: after the connection died no reader needs protecting: on the caller's thread
        if type(entry.obj) in _READY_CALLBACKS or (self.dead and threading.current_thread() is not self._reader):
            _invoke(entry.obj, method, args)
        else:
            self._dispatch(_invoke, entry.obj, method, args)

    def _dispatch(self, fn: Any, *args: Any) -> None:
        q = self._dispatch_q
        if q is None:
            with self._lock:
                if self._dispatch_q is None:
                    self._dispatch_q = queue.SimpleQueue()
                    threading.Thread(target=self._dispatcher, args=(self._dispatch_q,),
                                     name=f"nnhal-client-callbacks-{self.name}", daemon=True).start()
                q = self._dispatch_q
        q.put((fn, args))

    @staticmethod
    def _dispatcher(q: queue.SimpleQueue) -> None:
        while True:
            fn, args = q.get()
            if fn is None:
                return
            try:
                fn(*args)
            except Exception:  # noqa: BLE001
                log.exception("client callback failed")

    def _answer(self, cid: int, entry: _Entry, spec: wire.MethodSpec, args: list) -> None:
        try:
            result = getattr(entry.obj, spec.name)(*args)
            fds = wire.collect_fds(result) if spec.result_has_handles else None
            body = wire.ENCODER.encode(wire.ReplyOut(cid, result))
        except Exception as e:  # noqa: BLE001 - our object failing is an error answer, not a dead reader
            log.error("%s raised %s: %s", spec.name, type(e).__name__, e)
            self._reply_fail(cid, S.GENERAL_FAILURE)
            return
        try:
            self._send(body, fds)
        except (PeerClosed, OSError, ValueError) as e:
            log.debug("answer to %s not sent: %s", spec.name, e)

    def _reply_fail(self, cid: int, status: S) -> None:
        try:
            self._send(wire.ENCODER.encode(wire.Fail(cid, int(status), "")), None)
        except (PeerClosed, OSError):
            pass

    # ------------------------------------------------------------ death
    def _die(self) -> None:
        with self._lock:
            self.dead = True
            pending, self._pending = list(self._pending.values()), {}
            entries, self._entries = list(self._entries.values()), {}
        self.chan.close()
        for ch in list(self._call_chans):
            ch.close()
        for p in pending:
            p.value = None  # NOTE: exchange_main's "service gone"
            p.lock.release()
        for e in entries:
            if e.oneshot:
                self._deliver(e, e.notify, _error_args(e.iface, e.notify, S.DEVICE_UNAVAILABLE))
        if self._dispatch_q is not None:
            self._dispatch_q.put((None, ()))
        if self._forget_q is not None:
            self._forget_q.put(None)

    def close(self) -> None:
        """Disconnect (pending callbacks get DEVICE_UNAVAILABLE)."""
        self.chan.close()
        for ch in list(self._call_chans):
            ch.close()
        if threading.current_thread() is not self._reader:
            self._reader.join(5)


_ENCODE_ERRORS = (TypeError, ValueError, AttributeError, OverflowError, msgspec.EncodeError)


def _forgetter(q: queue.SimpleQueue) -> None:
    """Sends the slots a call channel's table forgot (a memory freed or
    collected) on that channel, so the service lets go of it at once."""
    while True:
        item = q.get()
        if item is None:
            return
        chan, table = item
        forget = table.take_forgets()
        if forget and not chan.closed:
            try:
                chan.send(wire.ENCODER.encode(wire.Release([], forget)), None)
            except (PeerClosed, OSError, ValueError):
                pass  # NOTE: a channel that is gone took the service's copies with it
        # NOTE: not kept while waiting: a channel whose thread ended must close (the service then frees it)
        del item, chan, table


def _encode(cid: int, target: bytes, spec: wire.MethodSpec, args: tuple, slots: Optional[list[int]] = None,
            forget: Optional[list[int]] = None) -> tuple[Optional[list[int]], bytes]:
    """(descriptors, body) of a call; raises one of _ENCODE_ERRORS for an
    argument that cannot be sent."""
    fds = wire.collect_fds(args) if spec.has_handles else None
    return fds, wire.ENCODER.encode(wire.CallOut(cid, target, spec.name, args, slots, forget or []))


def _open(path: str) -> tuple[Channel, int]:
    """A connected channel to the service at ``path`` and the service's pid
    (refused unless the service runs as this user)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        sock.connect(path)
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid, uid, _ = struct.unpack("3i", raw)
        if uid != os.getuid():
            raise ServiceUnavailable(f"the service at {path} runs as uid {uid}, not as this user; refused")
    except BaseException:
        sock.close()
        raise
    return Channel(sock), pid


def _handshake_answer(chan: Channel) -> Any:
    chan.sock.settimeout(10.0)
    try:
        body, fds = chan.recv()
    finally:
        chan.sock.settimeout(None)
    close_fds(fds)
    return wire.ENVELOPE.decode(body)


def _invoke(obj: Any, method: str, args: tuple) -> None:
    try:
        getattr(obj, method)(*args)
    except Exception:  # noqa: BLE001 - the user's callback failing must not stop the connection
        log.exception("%s.%s raised", type(obj).__name__, method)


# --------------------------------------------------------------------------
# proxies


class RemoteObject:
    """Base of the proxies of the service's objects: a reference, released when dropped."""

    _iface = ""

    def __init__(self, conn: Connection, ref: bytes, entry_ref: Optional[bytes] = None):
        self._conn = conn
        self._ref = ref
        self._finalizer = weakref.finalize(self, conn.release, ref, entry_ref)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} of service {self._conn.name!r} {self._ref.hex()[:8]}>"

    def _release_now(self) -> None:
        """Release the object in the service now, in order with this thread's
        next call (idempotent; dropping the last reference does it later)."""
        if self._finalizer.alive:
            self._finalizer.detach()
            self._conn.release_now(self._ref)


def _method(cls: type, iface: str, name: str) -> Any:
    spec = wire.METHODS[iface][name]
    sig = inspect.signature(getattr(cls, name))  # NOTE: the interface's declaration (hal.IDevice, hal.INnhalDevice...)
    nparams = len(spec.args)

    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs or len(args) != nparams:
            bound = sig.bind(self, *args, **kwargs)
            args = bound.args[1:]
        return self._conn.call(self._ref, spec, tuple(args))

    method.__name__ = name
    method.__qualname__ = f"Remote{iface[1:]}.{name}"
    return method


def _add_methods(cls: type, iface: str) -> type:
    for name in wire.METHODS[iface]:
        if name not in cls.__dict__:
            setattr(cls, name, _method(cls, iface, name))
    return cls


class RemoteDevice(RemoteObject, hal.IDevice, hal.INnhalDevice):
    """``IDevice`` of a service (``nnhal.connect(name)``)."""

    _iface = "IDevice"

    def __init__(self, conn: Connection):
        self._conn = conn
        self._ref = b""
        self.name = conn.name

    def prepareModel_1_3(self, model: Any, preference: Any, priority: Any, deadline: Any, modelCache: list,
                         dataCache: list, token: bytes, callback: Any) -> S:
        return self._conn.call(b"", _PREPARE_1_3, (_model_for_wire(model), preference, priority, deadline,
                                                  modelCache, dataCache, token, callback))

    def getSupportedOperations_1_3(self, model: Any) -> tuple:
        return self._conn.call(b"", _SUPPORTED_1_3, (_model_for_wire(model),))

    def prepareModel_1_2(self, model: Any, preference: Any, modelCache: Any = None, dataCache: Any = None,
                         token: Any = None, callback: Any = None) -> S:
        # NOTE: the draft form (model, preference, callback) travels as the final one
        modelCache, dataCache, token, callback = hal.prepare_model_1_2_args(modelCache, dataCache, token, callback)
        return self._conn.call(b"", _PREPARE_1_2, (model, preference, modelCache, dataCache, token, callback))

    def close(self) -> None:
        """Disconnect from the service."""
        self._conn.close()

    def __repr__(self) -> str:
        return f"<RemoteDevice {self.name!r} (service pid {self._conn.service_pid})>"


class RemotePreparedModel(RemoteObject, hal.IPreparedModel):
    _iface = "IPreparedModel"

    # NOTE: the hot paths written out (no signature binding)
    def executeSynchronously_1_3(self, request: Any, measure: Any, deadline: Any, loopTimeoutDuration: Any) -> tuple:
        return self._conn.call(self._ref, _SYNC_1_3, (request, measure, deadline, loopTimeoutDuration))

    def execute_1_3(self, request: Any, measure: Any, deadline: Any, loopTimeoutDuration: Any, callback: Any) -> S:
        return self._conn.call(self._ref, _ASYNC_1_3, (request, measure, deadline, loopTimeoutDuration, callback))


class RemoteBuffer(RemoteObject, hal.IBuffer):
    _iface = "IBuffer"

    def close(self) -> None:
        """Free the buffer in the service now (idempotent), as the in-process
        buffer's ``close``: its token is invalid from then on, and this
        object's copies answer GENERAL_FAILURE."""
        self._release_now()

    def copyTo(self, dst: Any) -> S:
        if not self._finalizer.alive:
            log.error("IBuffer.copyTo: the buffer has been freed")
            return S.GENERAL_FAILURE
        return self._conn.call(self._ref, _COPY_TO, (dst,))

    def copyFrom(self, src: Any, dimensions: Any) -> S:
        if not self._finalizer.alive:
            log.error("IBuffer.copyFrom: the buffer has been freed")
            return S.GENERAL_FAILURE
        return self._conn.call(self._ref, _COPY_FROM, (src, dimensions))


class RemoteBurstContext(RemoteObject, hal.IBurstContext):
    _iface = "IBurstContext"

    def close(self) -> None:
        """Release the burst in the service now (as dropping the last reference does)."""
        self._release_now()


class RemoteFencedExecutionCallback(RemoteObject, hal.IFencedExecutionCallback):
    _iface = "IFencedExecutionCallback"


for _cls in (RemoteDevice, RemotePreparedModel, RemoteBuffer, RemoteBurstContext, RemoteFencedExecutionCallback):
    _add_methods(_cls, _cls._iface)

_PROXIES = {"IPreparedModel": RemotePreparedModel, "IBuffer": RemoteBuffer, "IBurstContext": RemoteBurstContext,
            "IFencedExecutionCallback": RemoteFencedExecutionCallback}
_PREPARE_1_3 = wire.METHODS["IDevice"]["prepareModel_1_3"]
_SUPPORTED_1_3 = wire.METHODS["IDevice"]["getSupportedOperations_1_3"]
_PREPARE_1_2 = wire.METHODS["IDevice"]["prepareModel_1_2"]
_SYNC_1_3 = wire.METHODS["IPreparedModel"]["executeSynchronously_1_3"]
_ASYNC_1_3 = wire.METHODS["IPreparedModel"]["execute_1_3"]
_COPY_TO = wire.METHODS["IBuffer"]["copyTo"]
_COPY_FROM = wire.METHODS["IBuffer"]["copyFrom"]


def _model_for_wire(model: Any) -> Any:
    """What the in-process driver accepts as ``vec<uint8_t>`` and ``bool`` (a
    list of ints or a uint8 array; 0 / 1), made what the wire types say; a
    shallow copy, the client's model is left alone."""
    values = getattr(model, "operandValues", b"")
    relax = getattr(model, "relaxComputationFloat32toFloat16", False)
    if isinstance(values, (bytes, bytearray, memoryview)) and isinstance(relax, bool):
        return model
    import copy

    out = copy.copy(model)
    try:
        if not isinstance(values, (bytes, bytearray, memoryview)):
            out.operandValues = bytes(values.tobytes() if hasattr(values, "tobytes") else values)
    except (TypeError, ValueError):
        pass  # the service rejects it (INVALID_ARGUMENT), as the driver would
    if type(relax) is int and relax in (0, 1):
        out.relaxComputationFloat32toFloat16 = bool(relax)
    return out


def _patch_model_methods() -> None:
    for name in ("prepareModel", "prepareModel_1_1", "prepareModel_1_2", "getSupportedOperations",
                 "getSupportedOperations_1_1", "getSupportedOperations_1_2"):
        inner = RemoteDevice.__dict__[name]

        def method(self: Any, *args: Any, _inner: Any = inner, **kwargs: Any) -> Any:
            if args:
                args = (_model_for_wire(args[0]), *args[1:])
            elif "model" in kwargs:
                kwargs["model"] = _model_for_wire(kwargs["model"])
            return _inner(self, *args, **kwargs)

        method.__name__ = name
        setattr(RemoteDevice, name, method)


_patch_model_methods()


# --------------------------------------------------------------------------
# connecting


def connect(name: str, runtime_dir: Optional[Any] = None) -> RemoteDevice:
    """A proxy ``IDevice`` of the running service ``name``; ServiceUnavailable
    (naming the registry directory) if none runs.  ``runtime_dir``: the
    registry directory to look in (default: ``registry.runtime_dir``, from
    ``$NNHAL_RUNTIME_DIR``)."""
    return RemoteDevice(open_connection(name, runtime_dir, Connection))


def open_connection(name: str, runtime_dir: Optional[Any], make: Any) -> Any:
    """``make(name, socket path)``: a connection to the running service
    ``name`` (of the face ``make`` speaks); ServiceUnavailable if none runs."""
    registry.validate_name(name)
    d = registry.runtime_dir(create=False) if runtime_dir is None else Path(runtime_dir)
    path = d / (name + registry.SUFFIX)
    try:
        return make(name, str(path))
    except (FileNotFoundError, ConnectionRefusedError) as e:
        if isinstance(e, ConnectionRefusedError):
            registry.probe(path)  # removes the stale socket
        running = registry.list_services()
        raise ServiceUnavailable(
            f"no service named {name!r} runs (registry directory {d}; running: {', '.join(running) or 'none'}); "
            f"start one with: nnhal serve --name {name}") from None


_ = typing
