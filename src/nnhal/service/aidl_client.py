"""Client-side proxies of a service's AIDL face: ``nnhal.aidl.connect(name,
version)``.

:class:`RemoteAidlDevice` and the proxies of the objects it hands out
(``IPreparedModel``, ``IBurst``, ``IExecution``, ``IBuffer``,
``IFencedExecutionCallback``) implement the AIDL interfaces of
:mod:`nnhal.hal.aidl` by calling the service, with the binding's rules
(../shared/API.md, "AIDL"), so code written against ``nnhal.aidl.get_device``
runs unchanged: a method returns its AIDL value; the service's
``ServiceSpecificError`` is raised as such (status and message); a method the
served version does not have raises ``TransactionError``
(UNKNOWN_TRANSACTION); ``out`` parameters (``getExecutionInfo``'s Timings)
are filled in place; a returned ``ParcelFileDescriptor`` (a sync fence) is
the caller's.  The proxies' methods are generated from the AIDL method table
(:mod:`nnhal.service.aidl_wire`), as the HIDL ones from theirs.

A dead service (or a broken connection) is what binder gives a client of a
dead process: every call raises ``TransactionError`` with ``DEAD_OBJECT``,
the blocked ones at once, later ones without blocking.  A preparation's
``IPreparedModelCallback`` (the client's own object, called from the service)
is notified exactly once: by the service, or with the status of a call that
failed (a refused launch, raised and notified as in process; DEVICE_UNAVAILABLE
for a dead service, which can no longer answer; a callback is an
``ErrorStatus``, where binder has DEAD_OBJECT only for the call), never after
UNKNOWN_TRANSACTION (the method did not run, as in process).

Threads, call channels and the main connection are the HIDL client's
(:class:`nnhal.service.client.Connection`).  An ``IBurst`` proxy keeps which
memory identifier tokens the service holds a memory for
(:class:`nnhal.service.slots.ClientTokens`) and sends those pools without
their descriptors.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any, Callable, NoReturn, Optional

import msgspec

from nnhal.driver.aidl import hal_version
from nnhal.hal import aidl
from nnhal.hal.aidl.interfaces import ServiceSpecificError, TransactionError
from nnhal.service import aidl_wire, wire
from nnhal.service.client import Connection, RemoteObject, Unreachable, Unsendable, open_connection
from nnhal.service.slots import UNKNOWN_SLOT, ClientSlots, ClientTokens
from nnhal.service.transport import close_fds

log = logging.getLogger("nnhal.service")

S = aidl.ErrorStatus
_ENCODE_ERRORS = (TypeError, ValueError, AttributeError, OverflowError, msgspec.EncodeError)


class AidlConnection(Connection):
    """One connection to a service's AIDL face of interface ``version``."""

    def __init__(self, name: str, path: str, version: int):
        self.version = int(hal_version(version) - hal_version(1)) + 1
        super().__init__(name, path, wire.Hello("aidl", self.version))

    def _slot_table(self, chan: Any) -> Optional[ClientSlots]:
        return None  # NOTE: the AIDL face's memories go by burst token (ClientTokens), not by channel slot

    # ------------------------------------------------------------ calls to the service
    def call_aidl(self, target: bytes, spec: aidl_wire.AidlMethod, args: tuple,
                  tokens: Optional[ClientTokens] = None) -> list:
        """Call ``spec`` on the object ``target`` with its in-parameters
        ``args``: the reply's values (the return value, then the out
        parameters); raises as the module doc says.  ``tokens``: a burst's
        table (the request's memories go by token)."""
        entry_ref: Optional[bytes] = None

        def ref_of(iface: str, obj: Any) -> Optional[bytes]:
            nonlocal entry_ref
            if iface in aidl_wire.CLIENT_SIDE:
                if not callable(getattr(obj, "notify", None)):
                    return None  # NOTE: as in process: the face refuses a null callback
                entry_ref = self.register_entry(obj, iface, "notify")
                return entry_ref
            return self.ref_of(obj)

        try:
            sent = aidl_wire.export_refs(spec.in_types, args, ref_of) if spec.arg_refs else list(args)
        except _ENCODE_ERRORS as e:
            self._raise(entry_ref, ServiceSpecificError(S.INVALID_ARGUMENT, f"{spec.name}: {e}"))
        if self.dead:
            self._raise(entry_ref, aidl_wire.dead())
        chan = self._call_channel()
        if self._releases:
            self._flush_releases(chan)  # NOTE: an object dropped before this call is gone for it
        for attempt in (0, 1):
            slots, forget, new = None, [], []
            out = sent
            if tokens is not None:
                request, slots, forget, new = tokens.prepare(sent[0], sent[1])
                out = [request, *sent[1:]]
            cid = next(self._cids)
            try:
                fds = aidl_wire.collect_fds(spec.in_types, out) if spec.arg_fds else None
                body = wire.ENCODER.encode(wire.CallOut(cid, target, spec.name, out, slots, forget))
            except _ENCODE_ERRORS as e:
                self._raise(entry_ref, ServiceSpecificError(S.INVALID_ARGUMENT, f"{spec.name}: {e}"))
            try:
                env, rfds = self.exchange_on(chan, cid, body, fds) if chan is not None \
                    else self.exchange_main(cid, body, fds)
            except Unreachable as e:
                self._raise(entry_ref, aidl_wire.dead(f"{spec.name}: the service is gone ({e})"))
            except Unsendable as e:
                self._raise(entry_ref, ServiceSpecificError(S.INVALID_ARGUMENT, f"{spec.name}: {e}"))
            if tokens is not None:
                if type(env) is wire.Fail and env.message.startswith(UNKNOWN_SLOT) and attempt == 0:
                    # NOTE: the service lost track of a token: forget them all and send every memory again
                    log.warning("%s: %s; the memories are sent again", spec.name, env.message)
                    close_fds(rfds)
                    tokens.reset()
                    continue
                tokens.confirm(new)
            break
        if type(env) is wire.Fail:
            close_fds(rfds)
            self._raise(entry_ref, aidl_wire.error_of(env.status, env.message))
        try:
            values = list(spec.result_decoder.decode(env.result))
            if (rfds or spec.result_fds) and not aidl_wire.install_fds(spec.result_types, values, rfds):
                raise ValueError("descriptor count mismatch")
        except (*wire.DECODE_ERRORS, ValueError) as e:
            close_fds(rfds)
            log.error("%s: malformed answer from the service: %s", spec.name, e)
            self._raise(entry_ref, ServiceSpecificError(S.GENERAL_FAILURE, f"{spec.name}: malformed answer"))
        if spec.result_refs:
            aidl_wire.import_refs(spec.result_types, values, self._proxy)
        return values

    def _raise(self, entry_ref: Optional[bytes], error: Exception) -> NoReturn:
        """Raise ``error`` for a call that passed the callback ``entry_ref``,
        which hears the failure first (unless the method never ran)."""
        if entry_ref is not None:
            with self._lock:
                entry = self._entries.pop(entry_ref, None)
            unknown = isinstance(error, TransactionError) and error.status == TransactionError.UNKNOWN_TRANSACTION
            if entry is not None and not unknown:
                status = error.status if isinstance(error, ServiceSpecificError) and isinstance(error.status, S) \
                    else S.DEVICE_UNAVAILABLE
                self._deliver(entry, "notify", (status, None))
        raise error

    def _proxy(self, iface: str, ref: bytes) -> Any:
        return _PROXIES[iface](self, ref)

    # ------------------------------------------------------------ calls from the service
    def _incoming_spec(self, iface: str, method: str) -> Any:
        return aidl_wire.SPECS.get(iface, {}).get(method)

    def _incoming_args(self, spec: Any, raw: Any, fds: list[int]) -> list:
        args = list(spec.arg_decoder.decode(raw))
        if (fds or spec.arg_fds) and not aidl_wire.install_fds(spec.in_types, args, fds):
            raise ValueError("descriptor count mismatch")
        if spec.arg_refs:
            aidl_wire.import_refs(spec.in_types, args, self._proxy)
        return args


# --------------------------------------------------------------------------
# proxies


class _AidlRemote(RemoteObject):
    """A service object of the AIDL face."""

    _iface = ""
    _version: Optional[int] = None
    _by_token: frozenset[str] = frozenset()  # methods whose request's memories go by token (self.tokens)

    def __init__(self, conn: AidlConnection, ref: bytes):
        super().__init__(conn, ref)

    def getInterfaceVersion(self) -> int:
        if self._version is None:
            self._version = self._call(aidl_wire.SPECS[self._iface]["getInterfaceVersion"], ())
        return self._version

    def _call(self, spec: aidl_wire.AidlMethod, args: tuple) -> Any:
        return self._conn.call_aidl(self._ref, spec, args)[0]


def _method(cls: type, spec: aidl_wire.AidlMethod) -> Callable:
    sig = inspect.signature(getattr(cls, spec.name))  # NOTE: the interface's declaration, with its defaults
    n = len(spec.params)
    ins, outs = spec.ins, tuple(zip(spec.outs, spec.out_classes))
    by_token = spec.name in cls._by_token  # type: ignore[attr-defined]

    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs or len(args) != n:
            try:
                bound = sig.bind(self, *args, **kwargs)
            except TypeError as e:
                raise ServiceSpecificError(S.INVALID_ARGUMENT, f"{spec.name}: {e}") from None
            bound.apply_defaults()
            args = bound.args[1:]
        if not outs:
            return self._conn.call_aidl(self._ref, spec, args, self.tokens if by_token else None)[0]
        for k, cls_ in outs:
            if args[k] is not None and type(args[k]) is not cls_:
                raise ServiceSpecificError(S.INVALID_ARGUMENT, f"{spec.name}: the out parameter "
                                                               f"{spec.params[k][0]} is a {type(args[k]).__name__}")
        values = self._conn.call_aidl(self._ref, spec, tuple(args[k] for k in ins))
        for (k, _), got in zip(outs, values[1:]):
            if args[k] is not None and got is not None:
                for name in got.__dataclass_fields__:
                    setattr(args[k], name, getattr(got, name))
        return values[0]

    method.__name__ = spec.name
    method.__qualname__ = f"{cls.__name__}.{spec.name}"
    return method


def _add_methods(cls: type) -> type:
    for name, spec in aidl_wire.SPECS[cls._iface].items():
        if name not in cls.__dict__ and name != "getInterfaceVersion":
            setattr(cls, name, _method(cls, spec))
    return cls


@_add_methods
class RemoteAidlDevice(_AidlRemote, aidl.IDevice):
    """The AIDL ``IDevice`` of a service (``nnhal.aidl.connect(name, version)``)."""

    _iface = "IDevice"

    def __init__(self, conn: AidlConnection):
        self._conn = conn
        self._ref = b""
        self.name = conn.name

    def close(self) -> None:
        """Disconnect from the service."""
        self._conn.close()

    def __repr__(self) -> str:
        return f"<RemoteAidlDevice {self.name!r} version {self._conn.version} (service pid {self._conn.service_pid})>"


@_add_methods
class RemoteAidlPreparedModel(_AidlRemote, aidl.IPreparedModel):
    _iface = "IPreparedModel"


@_add_methods
class RemoteAidlBurst(_AidlRemote, aidl.IBurst):
    """An ``IBurst`` of the service; the memories of tokens the service holds go without their descriptors."""

    _iface = "IBurst"
    _by_token = frozenset({"executeSynchronously", "executeSynchronouslyWithConfig"})

    def __init__(self, conn: AidlConnection, ref: bytes):
        super().__init__(conn, ref)
        self.tokens = ClientTokens()

    def releaseMemoryResource(self, memoryIdentifierToken: Any) -> None:
        self.tokens.release(memoryIdentifierToken)
        self._call(_BURST_RELEASE, (memoryIdentifierToken,))


@_add_methods
class RemoteAidlExecution(_AidlRemote, aidl.IExecution):
    _iface = "IExecution"


@_add_methods
class RemoteAidlBuffer(_AidlRemote, aidl.IBuffer):
    _iface = "IBuffer"


@_add_methods
class RemoteAidlFencedCallback(_AidlRemote, aidl.IFencedExecutionCallback):
    _iface = "IFencedExecutionCallback"


_PROXIES = {c._iface: c for c in (RemoteAidlPreparedModel, RemoteAidlBurst, RemoteAidlExecution, RemoteAidlBuffer,
                                  RemoteAidlFencedCallback)}
_BURST_RELEASE = aidl_wire.SPECS["IBurst"]["releaseMemoryResource"]


def connect(name: str, version: int = aidl.VERSION, runtime_dir: Optional[Any] = None) -> RemoteAidlDevice:
    """The AIDL ``IDevice`` (interface ``version``) of the running service
    ``name``; ServiceUnavailable (naming the registry directory) if none runs,
    ValueError for a version this binding does not serve."""
    hal_version(version)
    return RemoteAidlDevice(open_connection(name, runtime_dir,
                                            lambda n, path: AidlConnection(n, path, version)))
