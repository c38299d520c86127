"""The service's wire format: every HAL interface method that crosses the
process boundary, as typed msgpack (msgspec).

A message is one of four envelopes (msgpack arrays, first element the tag):

* ``Call(cid, target, method, args, slots, forget)``: a method call on the
  object named ``target`` (``b""`` is the service's ``IDevice``; other ids
  name objects the receiver handed out).  ``cid`` 0 is a one-way call (no
  reply), as the HIDL callbacks' ``notify*``; otherwise the receiver answers
  with ``Reply`` or ``Fail`` under the same ``cid``.  ``slots`` / ``forget``
  (optional): request memories cached by slot on a call channel
  (:mod:`nnhal.service.slots`).
* ``Reply(cid, result)``: the method's ``generates (...)`` values.
* ``Fail(cid, status, message)``: the call never reached the implementation
  (undecodable arguments, unknown object, service shutting down); the caller
  turns ``status`` into the method's error values (:meth:`MethodSpec.error`).
* ``Release(refs, slots)``: the sender dropped its references to these
  objects (and, on a call channel, these memory slots).
* ``Hello(face, version)`` / ``Attach(session)``: the handshake.  A client
  opens one main connection (``Hello``, which picks the face the connection
  speaks: HIDL, this module's table, or AIDL of a version,
  :mod:`nnhal.service.aidl_wire`; answered by ``Attach`` with a 32-byte random
  session secret), on which the service calls the client's callbacks, and one more
  socket per calling thread (``Attach(secret)`` from the client, answered by
  ``Reply(0, nil)``), on which that thread's calls and their answers travel
  with no thread hand-over at either end.

``args`` and ``result`` stay raw in the envelope and are decoded per method
straight into the dataclasses of :mod:`nnhal.hal` by a decoder built once from
the method's HAL signature (:data:`METHODS`): a wrong type anywhere is a
``msgspec.ValidationError`` raised in C, reported as INVALID_ARGUMENT.
Nothing here can run code (no pickle).

File descriptors (``hal.Handle.fds`` inside handles and memories) travel in
the frame's SCM_RIGHTS list in the order :func:`iter_handles` visits the
values; the integers encoded in ``fds`` are placeholders that the receiver
replaces with the descriptors it received (a count mismatch is a malformed
message).  Interface objects travel as references: ``bytes`` ids
(:class:`Ref`), or nil for a null object.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from dataclasses import dataclass
from typing import Any, Optional, Union

import msgspec
from msgspec import Raw, Struct

from nnhal import hal
from nnhal.hal import v1_0, v1_1, v1_2

S = hal.ErrorStatus

# --------------------------------------------------------------------------
# envelopes


class Call(Struct, array_like=True, tag=0):
    cid: int
    target: bytes
    method: str
    args: Raw
    # NOTE: request memories cached by slot on a call channel (nnhal.service.slots): the slot of
    # each request pool (0: sent as it is), and the slots the client has forgotten
    slots: Optional[list[int]] = None
    forget: list[int] = []


class CallOut(Struct, array_like=True, tag=0):
    """A ``Call`` as sent: the arguments encoded in place (one encoding pass)."""

    cid: int
    target: bytes
    method: str
    args: Any
    slots: Optional[list[int]] = None
    forget: list[int] = []


class ReplyOut(Struct, array_like=True, tag=1):
    cid: int
    result: Any


class Reply(Struct, array_like=True, tag=1):
    cid: int
    result: Raw


class Fail(Struct, array_like=True, tag=2):
    cid: int
    status: int
    message: str = ""


class Release(Struct, array_like=True, tag=3):
    refs: list[bytes]
    slots: list[int] = []  # NOTE: on a call channel: memory slots the client let go of


class Hello(Struct, array_like=True, tag=4):
    """The first message of a client's main connection; answered by ``Attach``
    carrying the session's secret.  ``face``: the interface the client speaks
    on this connection, ``"hidl"`` (HIDL 1.0-1.3, this module's
    :data:`METHODS`) or ``"aidl"`` (AIDL, :mod:`nnhal.service.aidl_wire`) of
    interface ``version`` (1-4)."""

    face: str = "hidl"
    version: int = 0


class Attach(Struct, array_like=True, tag=5):
    """The first message of a client thread's own call channel: joins the
    session (its objects) named by the secret the service gave."""

    session: bytes


Envelope = Union[Call, Reply, Fail, Release, Hello, Attach]

# NOTE: one encoder and one envelope decoder per process, reused (building them
# costs far more than a message).


def _enc_hook(obj: Any) -> Any:
    # NOTE: numpy scalars and arrays where the HAL has ints, floats and vectors
    # (a client may pass np.int32 dimensions or a uint8 array as in process)
    item = getattr(obj, "tolist", None)
    if item is not None and hasattr(obj, "dtype"):
        return item()
    raise TypeError(f"{type(obj).__name__} cannot cross the process boundary")


ENCODER = msgspec.msgpack.Encoder(enc_hook=_enc_hook)
ENVELOPE = msgspec.msgpack.Decoder(Envelope)  # type: ignore[arg-type]
# NOTE: what a decoder may raise on a hostile message is not only msgspec's own errors: RecursionError
# for nesting bombs, UnicodeDecodeError for a string of invalid UTF-8, MemoryError, whatever a
# dataclass's __post_init__ raises...  Every receiver treats any exception from decoding a message as
# "malformed": the message's descriptors are closed and it is answered or dropped as the protocol says.
DECODE_ERRORS: tuple[type[BaseException], ...] = (Exception,)


# --------------------------------------------------------------------------
# references to interface objects


@dataclass(frozen=True)
class Ref:
    """An interface object in a signature.  ``owner`` is the side that
    implements it: "service" (prepared models, buffers, burst contexts, fenced
    execution callbacks) or "client" (the callbacks a client passes)."""

    iface: str
    owner: str


PREPARED_MODEL = Ref("IPreparedModel", "service")
BUFFER = Ref("IBuffer", "service")
BURST_CONTEXT = Ref("IBurstContext", "service")
FENCED_CALLBACK = Ref("IFencedExecutionCallback", "service")
PREPARE_CALLBACK = Ref("IPreparedModelCallback", "client")
EXECUTION_CALLBACK = Ref("IExecutionCallback", "client")
BURST_CALLBACK = Ref("IBurstCallback", "client")

REF_WIRE = Optional[bytes]


def _wire_type(t: Any) -> Any:
    if isinstance(t, Ref):
        return REF_WIRE
    if typing.get_origin(t) is list and isinstance(typing.get_args(t)[0], Ref):
        return list[REF_WIRE]
    return t


def _is_ref(t: Any) -> bool:
    return isinstance(t, Ref) or (typing.get_origin(t) is list and isinstance(typing.get_args(t)[0], Ref))


# --------------------------------------------------------------------------
# method signatures


def _default(t: Any) -> Any:
    if isinstance(t, Ref) or t is hal.Handle or typing.get_origin(t) is Union:
        return None
    origin = typing.get_origin(t)
    if origin is list:
        return []
    if t is str:
        return ""
    if t is int or t is float:
        return t()
    if t is bool:
        return False
    if isinstance(t, type) and issubclass(t, int):  # IntEnum
        return t(min(m.value for m in t))
    if dataclasses.is_dataclass(t):
        return t()
    return None


@dataclass(frozen=True)
class MethodSpec:
    """One HAL method: its argument types, result types (the ``generates``
    list, status first) and what it does to a callback argument."""

    iface: str
    name: str
    args: tuple
    result: tuple  # empty: void; one element: returned bare
    oneway: bool = False
    callback: Optional[int] = None  # index of the callback argument
    notify: str = ""  # the callback method the spec uses for this call

    @functools.cached_property
    def arg_decoder(self) -> msgspec.msgpack.Decoder:
        return msgspec.msgpack.Decoder(tuple[tuple(_wire_type(t) for t in self.args)] if self.args else tuple[()])

    @functools.cached_property
    def result_decoder(self) -> msgspec.msgpack.Decoder:
        if not self.result:
            return msgspec.msgpack.Decoder(None)  # type: ignore[arg-type]
        if len(self.result) == 1:
            return msgspec.msgpack.Decoder(_wire_type(self.result[0]))
        return msgspec.msgpack.Decoder(tuple[tuple(_wire_type(t) for t in self.result)])

    @functools.cached_property
    def arg_refs(self) -> tuple[tuple[int, Any], ...]:
        return tuple((k, t) for k, t in enumerate(self.args) if _is_ref(t))

    @functools.cached_property
    def result_refs(self) -> tuple[tuple[int, Any], ...]:
        if len(self.result) == 1:
            return ((-1, self.result[0]),) if _is_ref(self.result[0]) else ()
        return tuple((k, t) for k, t in enumerate(self.result) if _is_ref(t))

    @functools.cached_property
    def has_handles(self) -> bool:
        return any(may_hold_handles(t) for t in self.args)

    @functools.cached_property
    def result_has_handles(self) -> bool:
        return any(may_hold_handles(t) for t in self.result)

    def error(self, status: S) -> Any:
        """The values the method generates when it fails with ``status``."""
        if not self.result:
            return None
        first = self.result[0]
        if first is hal.DeviceStatus:
            return hal.DeviceStatus.UNKNOWN
        if len(self.result) == 1:
            return S(status)
        return (S(status), *(_default(t) for t in self.result[1:]))


def _m(iface: str, name: str, args: tuple, result: tuple, callback: Optional[int] = None, notify: str = "",
       oneway: bool = False) -> MethodSpec:
    return MethodSpec(iface, name, args, result, oneway, callback, notify)


OTP = Optional[hal.OptionalTimePoint]
OTD = Optional[hal.OptionalTimeoutDuration]
HANDLES = Optional[list[hal.Handle]]
EXEC_RESULT = (S, list[hal.OutputShape], hal.Timing)

_SPECS = [
    # IDevice @1.0
    _m("IDevice", "getCapabilities", (), (S, v1_0.Capabilities)),
    _m("IDevice", "getSupportedOperations", (v1_0.Model,), (S, list[bool])),
    _m("IDevice", "prepareModel", (v1_0.Model, PREPARE_CALLBACK), (S,), 1, "notify"),
    _m("IDevice", "getStatus", (), (hal.DeviceStatus,)),
    # @1.1
    _m("IDevice", "getCapabilities_1_1", (), (S, v1_1.Capabilities)),
    _m("IDevice", "getSupportedOperations_1_1", (v1_1.Model,), (S, list[bool])),
    _m("IDevice", "prepareModel_1_1", (v1_1.Model, int, PREPARE_CALLBACK), (S,), 2, "notify"),
    # @1.2
    _m("IDevice", "getVersionString", (), (S, str)),
    _m("IDevice", "getType", (), (S, hal.DeviceType)),
    _m("IDevice", "getCapabilities_1_2", (), (S, v1_2.Capabilities)),
    _m("IDevice", "getSupportedExtensions", (), (S, list[hal.Extension])),
    _m("IDevice", "getSupportedOperations_1_2", (v1_2.Model,), (S, list[bool])),
    _m("IDevice", "getNumberOfCacheFilesNeeded", (), (S, int, int)),
    _m("IDevice", "prepareModel_1_2", (v1_2.Model, int, HANDLES, HANDLES, bytes, PREPARE_CALLBACK), (S,), 5,
       "notify_1_2"),
    _m("IDevice", "prepareModelFromCache", (HANDLES, HANDLES, bytes, PREPARE_CALLBACK), (S,), 3, "notify_1_2"),
    # the draft 1.2 caching interface
    _m("IDevice", "isCachingSupported", (), (S, bool)),
    # @1.3
    _m("IDevice", "getCapabilities_1_3", (), (S, hal.Capabilities)),
    _m("IDevice", "getSupportedOperations_1_3", (hal.Model,), (S, list[bool])),
    _m("IDevice", "prepareModel_1_3", (hal.Model, int, int, OTP, HANDLES, HANDLES, bytes, PREPARE_CALLBACK), (S,), 7,
       "notify_1_3"),
    _m("IDevice", "prepareModelFromCache_1_3", (OTP, HANDLES, HANDLES, bytes, PREPARE_CALLBACK), (S,), 4,
       "notify_1_3"),
    # nnhal's addition (hal.INnhalDevice), not the HAL's: the reasons behind getSupportedOperations_1_3
    _m("IDevice", "nnhal_getSupportedOperationsReasons", (hal.Model,), (S, list[str])),
    _m("IDevice", "allocate", (hal.BufferDesc, list[PREPARED_MODEL], list[hal.BufferRole], list[hal.BufferRole]),
       (S, BUFFER, int)),
    # IPreparedModel
    _m("IPreparedModel", "execute", (v1_0.Request, EXECUTION_CALLBACK), (S,), 1, "notify"),
    _m("IPreparedModel", "execute_1_2", (v1_0.Request, int, EXECUTION_CALLBACK), (S,), 2, "notify_1_2"),
    _m("IPreparedModel", "executeSynchronously", (v1_0.Request, int), EXEC_RESULT),
    # the queue descriptors are hal.Handles (nnhal.platform.fmq): shared memory and a socket end
    _m("IPreparedModel", "configureExecutionBurst", (BURST_CALLBACK, Optional[hal.Handle], Optional[hal.Handle]),
       (S, BURST_CONTEXT)),
    _m("IPreparedModel", "saveToCache", (Optional[hal.Handle], Optional[hal.Handle], bytes), (S,)),
    _m("IPreparedModel", "execute_1_3", (hal.Request, int, OTP, OTD, EXECUTION_CALLBACK), (S,), 4, "notify_1_3"),
    _m("IPreparedModel", "executeSynchronously_1_3", (hal.Request, int, OTP, OTD), EXEC_RESULT),
    _m("IPreparedModel", "executeFenced", (hal.Request, HANDLES, int, OTP, OTD, OTD),
       (S, Optional[hal.Handle], FENCED_CALLBACK)),
    # IBuffer
    _m("IBuffer", "copyTo", (hal.Memory,), (S,)),
    _m("IBuffer", "copyFrom", (hal.Memory, list[int]), (S,)),
    # IBurstContext (void: answered with nil, as a HIDL void method returns)
    _m("IBurstContext", "freeMemory", (int,), ()),
    # IFencedExecutionCallback
    _m("IFencedExecutionCallback", "getExecutionInfo", (), (S, hal.Timing, hal.Timing)),
    # client callbacks, called by the service
    _m("IPreparedModelCallback", "notify", (S, PREPARED_MODEL), (), oneway=True),
    _m("IPreparedModelCallback", "notify_1_2", (S, PREPARED_MODEL), (), oneway=True),
    _m("IPreparedModelCallback", "notify_1_3", (S, PREPARED_MODEL), (), oneway=True),
    _m("IExecutionCallback", "notify", (S,), (), oneway=True),
    _m("IExecutionCallback", "notify_1_2", (S, list[hal.OutputShape], hal.Timing), (), oneway=True),
    _m("IExecutionCallback", "notify_1_3", (S, list[hal.OutputShape], hal.Timing), (), oneway=True),
    _m("IBurstCallback", "getMemories", (list[int],), (S, list[hal.Memory])),
]

METHODS: dict[str, dict[str, MethodSpec]] = {}
for _s in _SPECS:
    METHODS.setdefault(_s.iface, {})[_s.name] = _s

# NOTE: earlier forms of a method a raw client may send (the seed's draft IDevice 1.2, before caching:
# prepareModel_1_2(model, preference, callback)): (the draft's spec, its arguments -> the final form's)
DRAFT_FORMS: dict[tuple[str, str], tuple[MethodSpec, Any]] = {
    ("IDevice", "prepareModel_1_2"): (
        _m("IDevice", "prepareModel_1_2", (v1_2.Model, int, PREPARE_CALLBACK), (S,), 2, "notify_1_2"),
        lambda a: [a[0], a[1], [], [], bytes(32), a[2]]),
}


# --------------------------------------------------------------------------
# handles inside values


@functools.cache
def may_hold_handles(t: Any) -> bool:
    """Whether a value of type ``t`` can contain a ``hal.Handle``."""
    if t is hal.Handle:
        return True
    if isinstance(t, Ref) or t is Any:
        return t is Any
    args = typing.get_args(t)
    if args:
        return any(may_hold_handles(a) for a in args if a is not type(None))
    if dataclasses.is_dataclass(t):
        return bool(_handle_fields(t))
    return False


@functools.cache
def _handle_fields(cls: type) -> tuple[str, ...]:
    hints = typing.get_type_hints(cls)
    return tuple(f.name for f in dataclasses.fields(cls) if may_hold_handles(hints.get(f.name, Any)))


_LEAVES = (int, float, str, bytes, bool, type(None))


def iter_handles(value: Any) -> list[hal.Handle]:
    """Every ``hal.Handle`` inside ``value`` (dataclasses, lists, tuples), in a
    fixed order: the same on both sides of the wire for the same structure."""
    out: list[hal.Handle] = []
    _handles(value, out)
    return out


# NOTE: classes found to hold no handle (OptionalTimePoint, Timing...): skipped at once
_HANDLELESS: set[type] = {int, float, str, bytes, bool, type(None)}


def _handles(value: Any, out: list) -> None:
    t = type(value)
    if t in _HANDLELESS:
        return
    if t is hal.Handle:
        out.append(value)
    elif t is hal.Memory:
        _handles(value.handle, out)
    elif t is hal.Request:  # NOTE: the hot path, without the generic walk
        pools = value.pools
        for p in pools if type(pools) is list else ():
            m = getattr(p, "hidlMemory", None)
            if m is not None:
                h = getattr(m, "handle", None) if type(m) is hal.Memory else None
                if type(h) is hal.Handle:
                    out.append(h)
                else:
                    _handles(m, out)
    elif t is tuple or t is list:
        for v in value:
            if not isinstance(v, _LEAVES):
                _handles(v, out)
    elif isinstance(value, hal.Handle):
        out.append(value)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        names = _handle_fields(t)
        if not names:
            _HANDLELESS.add(t)  # NOTE: a class's fields are fixed: bounded by the number of classes
        for name in names:
            v = getattr(value, name, None)
            if v is not None:
                _handles(v, out)


def collect_fds(value: Any) -> list[int]:
    """The descriptors to send for ``value``; raises TypeError for a handle
    whose fds are not ints (the caller answers INVALID_ARGUMENT)."""
    fds: list[int] = []
    for h in iter_handles(value):
        for fd in h.fds:
            if type(fd) is not int and (not isinstance(fd, int) or isinstance(fd, bool)) or fd < 0:
                raise TypeError(f"invalid file descriptor {fd!r} in a handle")
            fds.append(fd)
    return fds


def install_fds(value: Any, fds: list[int]) -> bool:
    """Replace the placeholder fds in ``value``'s handles by the received
    ``fds`` in order; False if the counts differ (a malformed message)."""
    handles = iter_handles(value)
    need = sum(len(h.fds) for h in handles)
    if need != len(fds):
        return False
    k = 0
    for h in handles:
        n = len(h.fds)
        h.fds = fds[k:k + n]
        k += n
    return True
