"""The service's wire for the AIDL face (``android.hardware.neuralnetworks``
versions 1-4): the same envelopes, framing and descriptor passing as the
HIDL face (:mod:`nnhal.service.wire`), with a method table derived from the
AIDL interfaces themselves (:mod:`nnhal.hal.aidl.interfaces`: every method's
parameter and return annotations, ``aidl.METHODS`` for the version of each,
the ``@out`` marks for ``out`` parameters), never written out a second time.

* A call's ``args`` are its ``in`` parameters, decoded straight into the AIDL
  dataclasses by a decoder built once from their annotations; ``out``
  parameters do not travel there: the callee fills fresh ones and the reply
  carries ``[return value, *out values]``, which the client copies into the
  caller's objects (as binder's reply parcel does).
* A method's error travels as ``Fail(cid, status, message)``: ``status`` >= 0
  is the ``ServiceSpecificError``'s ``ErrorStatus`` (or whatever int the
  driver raised), a negative ``status`` a binder ``status_t`` raised as
  ``TransactionError`` (UNKNOWN_TRANSACTION for a method the served version
  does not have).  The client raises each as the in-process face would.
* Interface objects travel as references (``bytes`` ids, nil for null), also
  inside parcelables (``DeviceBuffer``, ``FencedExecutionResult``,
  ``IPreparedModelParcel``): such a parcelable is decoded into a mirror
  dataclass whose interface fields are ids (:func:`wire_type`), then made the
  real one.  Only ``IPreparedModelCallback`` is implemented on the client
  side (:data:`CLIENT_SIDE`); its ``notify`` is sent one-way (the driver does
  not use its answer, and a slow or dead client must hold no driver thread).
* File descriptors: every ``ParcelFileDescriptor`` (``Ashmem.fd``,
  ``MappableFile.fd``, ``modelCache`` / ``dataCache``, ``waitFor``,
  ``syncFence``) and the fds of a ``NativeHandle`` (``HardwareBuffer.handle``)
  travel in the frame's SCM_RIGHTS list in the order :func:`collect_fds`
  visits them by type; the ints encoded in their place are placeholders the
  receiver replaces (:func:`install_fds`; a count mismatch is malformed).
  Received descriptors are the call's: the callee dups what it keeps.
* ``getInterfaceVersion`` / ``getInterfaceHash`` (binder's meta-transactions)
  are methods of every interface on the wire.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import inspect
import typing
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional, Union

import msgspec

from nnhal import hal
from nnhal.hal import aidl
from nnhal.hal.aidl.interfaces import INTERFACES, METHODS, Interface, ServiceSpecificError, TransactionError

S = hal.ErrorStatus
PFD = aidl.ParcelFileDescriptor
V = hal.HalVersion

# NOTE: the AIDL NN HAL's one callback interface: passed by the client, implemented by it
CLIENT_SIDE = frozenset({"IPreparedModelCallback"})
META = ("getInterfaceVersion", "getInterfaceHash")  # binder's own transactions, on every interface
REF_WIRE = Optional[bytes]
_IFACES = {i.__name__: i for i in INTERFACES}

# --------------------------------------------------------------------------
# the shape of a type, as the walkers need it

_REFS, _FDS = 1, 2  # what a type may hold: interface objects, descriptors
_LEAF, _OPT, _LIST, _STRUCT, _PLAIN = range(5)


@dataclass(frozen=True)
class _Shape:
    tag: int
    holds: int = 0
    inner: Any = None  # _OPT / _LIST: the element type; _LEAF: the leaf's kind ("pfd", "handle", an iface name)
    cls: Any = None  # _STRUCT: the real class
    mirror: Any = None  # _STRUCT holding interfaces: the class it travels as
    fields: tuple = ()  # _STRUCT: (name, type) of the fields that hold something


def _iface_name(t: Any) -> Optional[str]:
    return t.__name__ if isinstance(t, type) and issubclass(t, Interface) else None


@functools.cache
def _shape(t: Any) -> _Shape:
    if t is PFD:
        return _Shape(_LEAF, _FDS, "pfd")
    if t is hal.Handle:
        return _Shape(_LEAF, _FDS, "handle")
    name = _iface_name(t)
    if name is not None:
        return _Shape(_LEAF, _REFS, name)
    origin, args = typing.get_origin(t), typing.get_args(t)
    if origin is Union:
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:
            return _Shape(_OPT, _shape(inner[0]).holds, inner[0])
        return _Shape(_PLAIN)
    if origin is list:
        return _Shape(_LIST, _shape(args[0]).holds, args[0])
    if dataclasses.is_dataclass(t) and isinstance(t, type):
        hints = typing.get_type_hints(t)
        fields = tuple((f.name, hints[f.name]) for f in dataclasses.fields(t) if _shape(hints[f.name]).holds)
        holds = 0
        for _, ft in fields:
            holds |= _shape(ft).holds
        return _Shape(_STRUCT, holds, cls=t, mirror=_mirror(t) if holds & _REFS else None, fields=fields)
    return _Shape(_PLAIN)


@functools.cache
def wire_type(t: Any) -> Any:
    """The type a value of AIDL type ``t`` is encoded and decoded as: an
    interface is its id (``Optional[bytes]``), a ParcelFileDescriptor an int,
    a parcelable holding an interface its mirror (:func:`_mirror`)."""
    shape = _shape(t)
    if shape.tag == _LEAF:
        return int if shape.inner == "pfd" else (t if shape.inner == "handle" else REF_WIRE)
    if not shape.holds & _REFS:
        return t
    if shape.tag == _OPT:
        return Optional[wire_type(shape.inner)]
    if shape.tag == _LIST:
        return list[wire_type(shape.inner)]
    return shape.mirror


def _mirror(cls: type) -> type:
    """``cls`` with its interface fields as ids: what a parcelable holding an
    interface is decoded as (msgspec decodes dataclasses by their annotations)."""
    hints = typing.get_type_hints(cls)
    fields = []
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not dataclasses.MISSING else None
        fields.append((f.name, wire_type(hints[f.name]), dataclasses.field(default=default)))
    mirror = dataclasses.make_dataclass(f"{cls.__name__}Wire", fields)
    mirror.__module__ = __name__
    return mirror


# --------------------------------------------------------------------------
# the walkers: type-directed, each visits only what may hold what it looks for


Walker = Callable[[Any, Callable[[str, Any], Any]], Any]


@functools.cache
def _walker(t: Any, what: int, inplace: bool) -> Optional[Walker]:
    """A function ``(v, leaf) -> v'`` for values of type ``t``: ``v`` with
    ``leaf(kind, value)`` applied at every position of the kinds ``what``
    selects; None where a ``t`` holds none.  Built once per type (a call
    walks only the fields that may hold something, with no type dispatch).
    ``inplace``: ``v`` is the receiver's own (lists and parcelables changed
    in place, mirrors made real); else a copy where anything changed (the
    sender's objects are left alone).  A value that is not of its type is
    left as it is (the encoder or the receiver's typed decoder refuses it)."""
    shape = _shape(t)
    if not shape.holds & what:
        return None
    if shape.tag == _LEAF:
        kind = shape.inner
        return lambda v, leaf: leaf(kind, v)
    if shape.tag == _OPT:
        return _walker(shape.inner, what, inplace)
    if shape.tag == _LIST:
        return _list_walker(_walker(shape.inner, what, inplace), inplace)
    fields = tuple((name, w) for name, ft in shape.fields if (w := _walker(ft, what, inplace)) is not None)
    return _struct_walker(shape, fields, inplace, bool(what & _REFS))


def _list_walker(each: Any, inplace: bool) -> Walker:
    def walk(v: Any, leaf: Callable) -> Any:
        if type(v) is not list and type(v) is not tuple:
            return v
        out = v
        for k, x in enumerate(v):
            y = x if x is None else each(x, leaf)
            if y is not x:
                if out is v and not (inplace and type(v) is list):
                    out = list(v)
                out[k] = y
        return out

    return walk


def _struct_walker(shape: _Shape, fields: tuple, inplace: bool, refs: bool) -> Walker:
    classes = (shape.cls, shape.mirror) if shape.mirror else shape.cls
    cls, mirror = shape.cls, shape.mirror
    names = [f.name for f in dataclasses.fields(cls)]

    def walk_copy(v: Any, leaf: Callable) -> Any:
        # NOTE: the sender's parcelable: changed in a copy
        if not isinstance(v, classes):
            return v
        target = v
        for name, each in fields:
            x = getattr(v, name)
            if x is not None:
                y = each(x, leaf)
                if y is not x:
                    if target is v:
                        target = copy.copy(v)
                    setattr(target, name, y)
        return target

    def walk_inplace(v: Any, leaf: Callable) -> Any:
        # NOTE: the receiver's own values: changed in place; a mirror is made its real parcelable once its
        # references are objects
        if not isinstance(v, classes):
            return v
        for name, each in fields:
            x = getattr(v, name)
            if x is not None:
                y = each(x, leaf)
                if y is not x:
                    setattr(v, name, y)
        return cls(*[getattr(v, n) for n in names]) if refs and type(v) is mirror else v

    return walk_inplace if inplace else walk_copy


def _walk_all(types: tuple, values: Any, what: int, leaf: Callable, inplace: bool) -> list:
    out = values if inplace else list(values)
    for k, t in enumerate(types):
        w = _walker(t, what, inplace)
        if w is not None:
            v = out[k]
            if v is not None:
                out[k] = w(v, leaf)
    return out


def _check_fd(fd: Any) -> int:
    if type(fd) is not int and (not isinstance(fd, int) or isinstance(fd, bool)) or fd < 0:
        raise TypeError(f"invalid file descriptor {fd!r}")
    return int(fd)


def collect_fds(types: tuple, values: Any) -> list[int]:
    """The descriptors to send for ``values`` (one per type of ``types``), in
    order; TypeError for a ParcelFileDescriptor or handle fd that is no
    descriptor number (the caller answers INVALID_ARGUMENT)."""
    out: list[int] = []

    def leaf(kind: str, v: Any) -> Any:
        if kind == "pfd":
            out.append(_check_fd(v))
        elif isinstance(v, hal.Handle):
            fds = v.fds
            if type(fds) is not list and type(fds) is not tuple:
                raise TypeError(f"a handle's fds are a {type(fds).__name__}")
            out.extend(_check_fd(fd) for fd in fds)
        return v

    for t, v in zip(types, values):
        w = _walker(t, _FDS, True)
        if w is not None and v is not None:
            w(v, leaf)
    return out


def install_fds(types: tuple, values: list, fds: list[int]) -> bool:
    """Put the received ``fds`` in place of the placeholders of the decoded
    ``values`` (in place); False if their number is not the number of
    descriptor positions (a malformed message)."""
    it: Iterator[int] = iter(fds)
    missing = False

    def leaf(kind: str, v: Any) -> Any:
        nonlocal missing
        if kind == "pfd":
            fd = next(it, None)
            missing = missing or fd is None
            return -1 if fd is None else fd
        got = [next(it, None) for _ in v.fds]
        missing = missing or None in got
        v.fds = [-1 if fd is None else fd for fd in got]
        return v

    _walk_all(types, values, _FDS, leaf, True)
    return not missing and next(it, None) is None


def export_refs(types: tuple, values: Any, ref_of: Callable[[str, Any], Optional[bytes]]) -> list:
    """``values`` to send, with each interface object replaced by
    ``ref_of(interface name, object)`` (the sender's objects left alone)."""
    return _walk_all(types, values, _REFS, ref_of, False)


def import_refs(types: tuple, values: list, obj_of: Callable[[str, bytes], Any]) -> list:
    """The decoded ``values`` (in place) with each id replaced by
    ``obj_of(interface name, id)`` and each mirror made its real parcelable."""
    return _walk_all(types, values, _REFS, obj_of, True)


def holds(t: Any, refs: bool = False, fds: bool = False) -> bool:
    """Whether a value of type ``t`` may hold interface objects / descriptors."""
    return bool(_shape(t).holds & ((_REFS if refs else 0) | (_FDS if fds else 0)))


# --------------------------------------------------------------------------
# the method table


@dataclass(frozen=True)
class AidlMethod:
    """One AIDL method as it crosses the wire."""

    iface: str
    name: str
    params: tuple  # (name, type) of every parameter, in order
    ret: Any  # the return type (type(None): void)
    outs: tuple = ()  # indexes into ``params`` of the out parameters
    since: V = V.AIDL_V1

    @functools.cached_property
    def ins(self) -> tuple[int, ...]:
        """Indexes of the parameters that travel in the call."""
        return tuple(k for k in range(len(self.params)) if k not in self.outs)

    @functools.cached_property
    def in_types(self) -> tuple:
        return tuple(self.params[k][1] for k in self.ins)

    @functools.cached_property
    def result_types(self) -> tuple:
        """What the reply carries: the return value, then each out parameter."""
        return (self.ret, *(self.params[k][1] for k in self.outs))

    @functools.cached_property
    def out_classes(self) -> tuple[type, ...]:
        """The parcelable of each out parameter (what the callee is given to fill)."""
        return tuple(next(a for a in (*typing.get_args(t), t) if a is not type(None) and isinstance(a, type))
                     for _, t in (self.params[k] for k in self.outs))

    @functools.cached_property
    def oneway(self) -> bool:
        return self.iface in CLIENT_SIDE

    @functools.cached_property
    def callback(self) -> Optional[int]:
        """Index (among ``in_types``) of a client-side interface argument."""
        for k, t in enumerate(self.in_types):
            if _iface_name(t) in CLIENT_SIDE:
                return k
        return None

    @functools.cached_property
    def requests(self) -> tuple[int, ...]:
        """Indexes (among ``in_types``) of the ``Request`` arguments (memory tokens are checked there)."""
        return tuple(k for k, t in enumerate(self.in_types) if t is aidl.Request)

    @functools.cached_property
    def arg_decoder(self) -> msgspec.msgpack.Decoder:
        return msgspec.msgpack.Decoder(tuple[tuple(wire_type(t) for t in self.in_types)] if self.in_types
                                       else tuple[()])

    @functools.cached_property
    def result_decoder(self) -> msgspec.msgpack.Decoder:
        return msgspec.msgpack.Decoder(tuple[tuple(wire_type(t) for t in self.result_types)])

    @functools.cached_property
    def arg_refs(self) -> bool:
        return any(holds(t, refs=True) for t in self.in_types)

    @functools.cached_property
    def arg_fds(self) -> bool:
        return any(holds(t, fds=True) for t in self.in_types)

    @functools.cached_property
    def result_refs(self) -> bool:
        return any(holds(t, refs=True) for t in self.result_types)

    @functools.cached_property
    def result_fds(self) -> bool:
        return any(holds(t, fds=True) for t in self.result_types)


def _method(iface: type, name: str, since: V) -> AidlMethod:
    fn = getattr(iface, name)
    hints = typing.get_type_hints(fn)
    names = [p for p in inspect.signature(fn).parameters if p != "self"]
    outs = getattr(fn, "aidl_out", ())
    return AidlMethod(iface.__name__, name, tuple((n, hints[n]) for n in names), hints["return"],
                      tuple(names.index(o) for o in outs), since)


# interface name -> method name -> AidlMethod, for every method of aidl.METHODS and the meta-transactions
SPECS: dict[str, dict[str, AidlMethod]] = {
    i.__name__: {**{m: _method(i, m, v) for m, v in METHODS[i.__name__].items()},
                 **{m: _method(i, m, V.AIDL_V1) for m in META}}
    for i in INTERFACES
}


# --------------------------------------------------------------------------
# errors


def fail_status(e: BaseException) -> tuple[int, str]:
    """(status, message) of a ``Fail`` for an exception of a face method."""
    if isinstance(e, ServiceSpecificError):
        status = e.status
        return (int(status) if isinstance(status, int) else int(S.GENERAL_FAILURE)), e.message
    if isinstance(e, TransactionError):
        return (e.status if isinstance(e.status, int) and e.status < 0 else TransactionError.UNKNOWN_TRANSACTION,
                e.message)
    return int(S.GENERAL_FAILURE), f"internal error ({type(e).__name__})"


def error_of(status: int, message: str) -> Exception:
    """The exception a client raises for a ``Fail``."""
    if status < 0:
        return TransactionError(status, message)
    return ServiceSpecificError(status, message)


def dead(message: str = "the service is gone") -> TransactionError:
    """What a call to a dead service raises (binder's DEAD_OBJECT)."""
    return TransactionError(TransactionError.DEAD_OBJECT, message)


def iface_class(name: str) -> type:
    return _IFACES[name]
