"""Conversions between the AIDL types (:mod:`nnhal.hal.aidl.types`) and the
canonical ones the front end, validation and the executor speak
(:mod:`nnhal.hal.types`), as Android's ``neuralnetworks/aidl/utils``
``Conversions.cpp`` maps AIDL to ``nn/common``'s canonical types.

- :func:`to_canonical` converts a Model, Request, Memory, Capabilities,
  Timing, BufferRole, OutputShape list, ... (or a list of them) from AIDL.
  What AIDL cannot mean raises :class:`InvalidArgument` (the boundary's
  INVALID_ARGUMENT): a union with no member or several set, an OEM operand
  or operation type (AIDL has none) or one that is no non-negative int32
  (an extension prefix has 15 bits in AIDL, 16 in HIDL), a negative memory token, offset or
  padding, a model operand with padding, a request argument whose padding
  runs past its pool, ``Timing`` below -1, an object of the wrong type
  where a parcelable is expected.  Values that are merely invalid (an
  out-of-range index, a negative dimension, an unknown enum value) pass
  unchanged, as plain ints where they are no enum member, for the
  canonical validation to reject exactly as it rejects them from HIDL.
  ``Operand.numberOfConsumers`` (not in AIDL) is computed from the
  subgraph's operations.  The result's lists are its own (a request
  converted here may be kept without another copy).
- :func:`from_canonical` converts the other way; what AIDL cannot express
  (an OEM type, a memory of an unknown kind) raises :class:`InvalidArgument`
  too.  OEM entries of Capabilities are left out.
- Memories: ``Ashmem(fd, size)`` is hal "ashmem" ``Handle([fd])``;
  ``MappableFile(length, prot, fd, offset)`` is "mmap_fd" ``Handle([fd],
  [prot, offset_low32, offset_high32])``; ``HardwareBuffer(description,
  handle)`` is "hardware_buffer_blob" (format BLOB, size = width) or
  "hardware_buffer" (size 0), its description the handle's seven ints
  (``nnhal.platform.memory``'s layout) and its native handle's fds.  The
  descriptors are the caller's, not duplicated: whoever keeps one dups it.
- Times: canonical ``Timing`` counts microseconds, ``UINT64_MAX`` for none;
  AIDL's nanoseconds, -1 for none.  :func:`optional_ns` reads a
  ``deadlineNs`` / ``durationNs`` / ``loopTimeoutDurationNs``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Optional

from nnhal.hal import types as hal
from nnhal.hal.aidl import types as aidl

__all__ = ["InvalidArgument", "from_canonical", "number_of_consumers", "optional_ns", "to_canonical"]

_U32 = 0xFFFFFFFF
_U64 = 2**64 - 1
_I64_MAX = 2**63 - 1
_BLOB = 0x21  # AHARDWAREBUFFER_FORMAT_BLOB / PixelFormat.BLOB
_OEM_OPERAND_TYPES = frozenset({int(hal.OperandType.OEM), int(hal.OperandType.TENSOR_OEM_BYTE)})
_OEM_OPERATION = int(hal.OperationType.OEM_OPERATION)
_I32_LIMIT = 2**31  # NOTE: AIDL types are int32: an extension type's prefix has 15 bits, the sign bit is 0


class InvalidArgument(ValueError):
    """A value that has no meaning on the other side (INVALID_ARGUMENT)."""


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _member(enum_cls: Any, value: Any) -> Any:
    """``value`` as a member of ``enum_cls`` when it is one, else unchanged (validation judges it)."""
    if _is_int(value):
        return enum_cls._value2member_map_.get(int(value), int(value))
    return value


def optional_ns(value: Any, what: str) -> Optional[int]:
    """A ``long`` time in nanoseconds: None for -1 (none), the value when >= 0;
    anything else is an invalid argument ("Other negative values are invalid")."""
    if not _is_int(value) or value < -1 or value > _I64_MAX:
        raise InvalidArgument(f"{what} {value!r} is not -1 or a non-negative long of nanoseconds")
    return None if value == -1 else int(value)


# NOTE: each union's members, read once (dataclasses.fields per conversion would cost more than the rest)
_MEMBERS = {cls: tuple(f.name for f in dataclasses.fields(cls))
            for cls in (aidl.Memory, aidl.RequestMemoryPool, hal.OperandExtraParams)}


def _one_member(union: Any, cls: type, what: str) -> str:
    """The name of the one member set in an AIDL union (exactly one)."""
    if type(union) is not cls:
        raise InvalidArgument(f"{what} is a {type(union).__name__}, not a {cls.__name__}")
    # NOTE: .get: a union decoded from a message that left a null member out (msgspec keeps the class's
    # default for it) has no instance attribute for it
    d = union.__dict__
    set_ = [n for n in _MEMBERS[cls] if d.get(n) is not None]
    if len(set_) != 1:
        raise InvalidArgument(f"{what}: a union needs exactly one member set, got {set_ or 'none'}")
    return set_[0]


def _check(obj: Any, cls: type, what: str) -> Any:
    if type(obj) is not cls:
        raise InvalidArgument(f"{what} is a {type(obj).__name__}, not a {cls.__name__}")
    return obj


def _list(x: Any, what: str) -> list:
    if not isinstance(x, (list, tuple)):
        raise InvalidArgument(f"{what} is not a list")
    return list(x)


def _own(x: Any) -> Any:
    """A list of ints of our own (a non-list is left for validation to reject)."""
    return list(x) if isinstance(x, (list, tuple)) else x


# --------------------------------------------------------------------------
# memories


def _memory_to_canonical(m: Any, what: str = "memory") -> hal.Memory:
    member = _one_member(m, aidl.Memory, what)
    if member == "ashmem":
        a = _check(m.ashmem, aidl.Ashmem, f"{what}.ashmem")
        return hal.Memory(name="ashmem", handle=hal.Handle(fds=[a.fd], ints=[]), size=a.size)
    if member == "mappableFile":
        f = _check(m.mappableFile, aidl.MappableFile, f"{what}.mappableFile")
        if not _is_int(f.offset) or not 0 <= f.offset <= _U64:
            raise InvalidArgument(f"{what}.mappableFile.offset {f.offset!r} is not a non-negative offset")
        return hal.Memory(name="mmap_fd", handle=hal.Handle(fds=[f.fd], ints=[f.prot, f.offset & _U32,
                                                                               f.offset >> 32]), size=f.length)
    hb = _check(m.hardwareBuffer, aidl.HardwareBuffer, f"{what}.hardwareBuffer")
    d = _check(hb.description, aidl.HardwareBufferDescription, f"{what}.hardwareBuffer.description")
    h = _check(hb.handle, aidl.NativeHandle, f"{what}.hardwareBuffer.handle")
    if h.ints:
        # NOTE: this driver's buffers (nnhal.platform.memory) are one fd; their description is the ints
        raise InvalidArgument(f"{what}.hardwareBuffer: a native handle with ints is no buffer of this driver")
    if not all(_is_int(v) for v in (d.width, d.height, d.layers, d.format, d.usage, d.stride)) or d.usage < 0:
        raise InvalidArgument(f"{what}.hardwareBuffer.description is malformed: {d!r}")
    blob = d.format == _BLOB
    ints = [d.width, d.height, d.layers, d.format, d.usage & _U32, (d.usage >> 32) & _U32, d.stride]
    return hal.Memory(name="hardware_buffer_blob" if blob else "hardware_buffer",
                      handle=hal.Handle(fds=_list(h.fds, f"{what}.hardwareBuffer.handle.fds"), ints=ints),
                      size=d.width if blob else 0)


def _memory_from_canonical(m: hal.Memory) -> aidl.Memory:
    fds, ints = list(m.handle.fds), list(m.handle.ints)
    if m.name == "ashmem":
        return aidl.Memory(ashmem=aidl.Ashmem(fd=fds[0] if fds else -1, size=m.size))
    if m.name == "mmap_fd":
        prot, lo, hi = (ints + [0, 0, 0])[:3]
        return aidl.Memory(mappableFile=aidl.MappableFile(length=m.size, prot=prot, fd=fds[0] if fds else -1,
                                                          offset=(lo & _U32) | ((hi & _U32) << 32)))
    if m.name in ("hardware_buffer_blob", "hardware_buffer") and len(ints) == 7:
        w, h, layers, fmt, ulo, uhi, stride = ints
        desc = aidl.HardwareBufferDescription(width=w, height=h, layers=layers, format=fmt,
                                              usage=(ulo & _U32) | ((uhi & _U32) << 32), stride=stride)
        return aidl.Memory(hardwareBuffer=aidl.HardwareBuffer(description=desc, handle=aidl.NativeHandle(fds=fds)))
    raise InvalidArgument(f"a {m.name!r} memory has no AIDL form")


# --------------------------------------------------------------------------
# models


def number_of_consumers(operands: list, operations: list) -> list[int]:
    """How many operation inputs name each operand (AIDL carries no
    ``numberOfConsumers``; the canonical operand does).  Indexes out of range
    are left for validation."""
    counts = [0] * len(operands)
    for op in operations:
        for i in getattr(op, "inputs", ()):
            if _is_int(i) and 0 <= i < len(counts):
                counts[i] += 1
    return counts


def _aidl_type(t: Any, oem: Any, what: str) -> None:
    """An AIDL operand or operation type: no OEM value, an int32 with the sign bit 0 (IDevice.aidl)."""
    if _is_int(t) and (int(t) in oem or not 0 <= t < _I32_LIMIT):
        raise InvalidArgument(f"{what} {int(t)} does not exist in AIDL (no OEM types; a non-negative int32)")


def _operand_to_canonical(o: Any, consumers: int, where: str) -> hal.Operand:
    _check(o, aidl.Operand, where)
    _aidl_type(o.type, _OEM_OPERAND_TYPES, f"{where}: operand type")
    loc = _check(o.location, aidl.DataLocation, f"{where}.location")
    if loc.padding != 0:
        raise InvalidArgument(f"{where}: a model operand's location has padding {loc.padding!r} (must be 0)")
    extra = o.extraParams
    if extra is None:
        extra = hal.OperandExtraParams()
    else:
        _one_member(extra, hal.OperandExtraParams, f"{where}.extraParams")
    return hal.Operand(type=_member(hal.OperandType, o.type), dimensions=_own(o.dimensions), numberOfConsumers=consumers,
                       scale=o.scale, zeroPoint=o.zeroPoint, lifetime=_member(hal.OperandLifeTime, o.lifetime),
                       location=hal.DataLocation(poolIndex=loc.poolIndex, offset=loc.offset, length=loc.length),
                       extraParams=extra)


def _operation_to_canonical(op: Any, where: str) -> hal.Operation:
    _check(op, hal.Operation, where)
    _aidl_type(op.type, (_OEM_OPERATION,), f"{where}: operation type")
    return hal.Operation(type=_member(hal.OperationType, op.type), inputs=_own(op.inputs), outputs=_own(op.outputs))


def _subgraph_to_canonical(sg: Any, where: str) -> hal.Subgraph:
    _check(sg, aidl.Subgraph, where)
    operands, operations = _list(sg.operands, f"{where}.operands"), _list(sg.operations, f"{where}.operations")
    ops = [_operation_to_canonical(op, f"{where} operation {k}") for k, op in enumerate(operations)]
    counts = number_of_consumers(operands, ops)
    return hal.Subgraph(operands=[_operand_to_canonical(o, c, f"{where} operand {k}")
                                  for k, (o, c) in enumerate(zip(operands, counts))],
                        operations=ops, inputIndexes=_own(sg.inputIndexes), outputIndexes=_own(sg.outputIndexes))


def _model_to_canonical(m: Any) -> hal.Model:
    _check(m, aidl.Model, "model")
    return hal.Model(main=_subgraph_to_canonical(m.main, "main subgraph"),
                     referenced=[_subgraph_to_canonical(sg, f"referenced subgraph {k}")
                                 for k, sg in enumerate(_list(m.referenced, "model.referenced"))],
                     operandValues=m.operandValues,
                     pools=[_memory_to_canonical(p, f"model pool {k}") for k, p in enumerate(_list(m.pools,
                                                                                                    "model.pools"))],
                     relaxComputationFloat32toFloat16=m.relaxComputationFloat32toFloat16,
                     extensionNameToPrefix=m.extensionNameToPrefix)


def _operand_from_canonical(o: hal.Operand) -> aidl.Operand:
    _aidl_type(o.type, _OEM_OPERAND_TYPES, "operand type")
    extra = o.extraParams if hal.safe_union_discriminator(o.extraParams) is not None else None
    return aidl.Operand(type=_member(aidl.OperandType, o.type), dimensions=list(o.dimensions), scale=o.scale,
                        zeroPoint=o.zeroPoint, lifetime=_member(aidl.OperandLifeTime, o.lifetime),
                        location=aidl.DataLocation(poolIndex=o.location.poolIndex, offset=o.location.offset,
                                                   length=o.location.length),
                        extraParams=dataclasses.replace(extra) if extra is not None else None)


def _operation_from_canonical(op: hal.Operation) -> hal.Operation:
    _aidl_type(op.type, (_OEM_OPERATION,), "operation type")
    return hal.Operation(type=_member(aidl.OperationType, op.type), inputs=list(op.inputs), outputs=list(op.outputs))


def _subgraph_from_canonical(sg: hal.Subgraph) -> aidl.Subgraph:
    return aidl.Subgraph(operands=[_operand_from_canonical(o) for o in sg.operands],
                         operations=[_operation_from_canonical(op) for op in sg.operations],
                         inputIndexes=list(sg.inputIndexes), outputIndexes=list(sg.outputIndexes))


def _model_from_canonical(m: hal.Model) -> aidl.Model:
    return aidl.Model(main=_subgraph_from_canonical(m.main),
                      referenced=[_subgraph_from_canonical(sg) for sg in m.referenced],
                      operandValues=bytes(m.operandValues), pools=[_memory_from_canonical(p) for p in m.pools],
                      relaxComputationFloat32toFloat16=m.relaxComputationFloat32toFloat16,
                      extensionNameToPrefix=[dataclasses.replace(e) for e in m.extensionNameToPrefix])


# --------------------------------------------------------------------------
# requests


def _pool_to_canonical(p: Any, k: int) -> tuple[hal.MemoryPool, int]:
    """(the canonical pool, its size for the padding check; 0 for a token)."""
    member = _one_member(p, aidl.RequestMemoryPool, f"request pool {k}")
    if member == "token":
        if not _is_int(p.token) or p.token < 0:
            raise InvalidArgument(f"request pool {k}: memory token {p.token!r} is negative")
        return hal.MemoryPool(token=p.token), 0
    memory = _memory_to_canonical(p.pool, f"request pool {k}")
    return hal.MemoryPool(hidlMemory=memory), memory.size if _is_int(memory.size) else 0


def _argument_to_canonical(a: Any, sizes: list[int], where: str) -> hal.RequestArgument:
    _check(a, aidl.RequestArgument, where)
    loc = _check(a.location, aidl.DataLocation, f"{where}.location")
    pad = loc.padding
    if not _is_int(pad) or not 0 <= pad <= _U32:
        raise InvalidArgument(f"{where}: padding {pad!r} is not a uint32")
    if pad and (a.hasNoValue or (_is_int(loc.poolIndex) and 0 <= loc.poolIndex < len(sizes) and _is_int(loc.offset)
                                 and _is_int(loc.length) and loc.offset + loc.length + pad > sizes[loc.poolIndex])):
        # NOTE: "The sum of offset, length, and padding must not exceed the total size of the specified memory
        # pool" (DataLocation.aidl); an omitted operand's location is all zero
        raise InvalidArgument(f"{where}: offset {loc.offset} + length {loc.length} + padding {pad} exceed the pool")
    return hal.RequestArgument(hasNoValue=a.hasNoValue, dimensions=_own(a.dimensions),
                               location=hal.DataLocation(poolIndex=loc.poolIndex, offset=loc.offset,
                                                         length=loc.length))


def _request_to_canonical(r: Any) -> hal.Request:
    _check(r, aidl.Request, "request")
    pools = [_pool_to_canonical(p, k) for k, p in enumerate(_list(r.pools, "request.pools"))]
    sizes = [s for _, s in pools]
    return hal.Request(inputs=[_argument_to_canonical(a, sizes, f"request input {k}")
                               for k, a in enumerate(_list(r.inputs, "request.inputs"))],
                       outputs=[_argument_to_canonical(a, sizes, f"request output {k}")
                                for k, a in enumerate(_list(r.outputs, "request.outputs"))],
                       pools=[p for p, _ in pools])


def _argument_from_canonical(a: hal.RequestArgument) -> aidl.RequestArgument:
    loc = a.location
    return aidl.RequestArgument(hasNoValue=a.hasNoValue, dimensions=list(a.dimensions),
                                location=aidl.DataLocation(poolIndex=loc.poolIndex, offset=loc.offset,
                                                           length=loc.length))


def _request_from_canonical(r: hal.Request) -> aidl.Request:
    pools = [aidl.RequestMemoryPool(token=p.token) if p.hidlMemory is None
             else aidl.RequestMemoryPool(pool=_memory_from_canonical(p.hidlMemory)) for p in r.pools]
    return aidl.Request(inputs=[_argument_from_canonical(a) for a in r.inputs],
                        outputs=[_argument_from_canonical(a) for a in r.outputs], pools=pools)


# --------------------------------------------------------------------------
# the rest


def _timing_from_canonical(t: hal.Timing) -> aidl.Timing:
    def ns(us: int) -> int:
        return -1 if us == hal.UINT64_MAX else min(int(us) * 1000, _I64_MAX)

    return aidl.Timing(timeOnDeviceNs=ns(t.timeOnDevice), timeInDriverNs=ns(t.timeInDriver))


def _timing_to_canonical(t: aidl.Timing) -> hal.Timing:
    def us(ns: Any) -> int:
        if not _is_int(ns) or ns < -1:
            raise InvalidArgument(f"timing {ns!r} is not -1 or a non-negative duration")
        return hal.UINT64_MAX if ns == -1 else ns // 1000

    return hal.Timing(timeOnDevice=us(t.timeOnDeviceNs), timeInDriver=us(t.timeInDriverNs))


def _capabilities_from_canonical(c: hal.Capabilities) -> aidl.Capabilities:
    perf = [aidl.OperandPerformance(type=_member(aidl.OperandType, e.type), info=dataclasses.replace(e.info))
            for e in c.operandPerformance if int(e.type) not in _OEM_OPERAND_TYPES]
    return aidl.Capabilities(**{f.name: dataclasses.replace(getattr(c, f.name))
                                for f in dataclasses.fields(c) if f.name != "operandPerformance"},
                             operandPerformance=perf)


def _capabilities_to_canonical(c: aidl.Capabilities) -> hal.Capabilities:
    perf = [hal.OperandPerformance(type=_member(hal.OperandType, e.type), info=dataclasses.replace(e.info))
            for e in c.operandPerformance]
    return hal.Capabilities(**{f.name: dataclasses.replace(getattr(c, f.name))
                               for f in dataclasses.fields(c) if f.name != "operandPerformance"},
                            operandPerformance=perf)


def _role_to_canonical(r: Any) -> hal.BufferRole:
    _check(r, aidl.BufferRole, "buffer role")
    return hal.BufferRole(modelIndex=r.modelIndex, ioIndex=r.ioIndex, frequency=r.probability)


def _role_from_canonical(r: hal.BufferRole) -> aidl.BufferRole:
    return aidl.BufferRole(modelIndex=r.modelIndex, ioIndex=r.ioIndex, probability=r.frequency)


_TO_CANONICAL: dict[type, Callable[[Any], Any]] = {
    aidl.Model: _model_to_canonical, aidl.Request: _request_to_canonical, aidl.Memory: _memory_to_canonical,
    aidl.Timing: _timing_to_canonical, aidl.Capabilities: _capabilities_to_canonical,
    aidl.BufferRole: _role_to_canonical, aidl.Subgraph: lambda sg: _subgraph_to_canonical(sg, "subgraph"),
}
_FROM_CANONICAL: dict[type, Callable[[Any], Any]] = {
    hal.Model: _model_from_canonical, hal.Request: _request_from_canonical, hal.Memory: _memory_from_canonical,
    hal.Timing: _timing_from_canonical, hal.Capabilities: _capabilities_from_canonical,
    hal.BufferRole: _role_from_canonical, hal.Subgraph: _subgraph_from_canonical,
}


def _convert(table: dict, obj: Any) -> Any:
    if isinstance(obj, (list, tuple)):
        return [_convert(table, x) for x in obj]
    fn = table.get(type(obj))
    if fn is None:
        return obj  # NOTE: a type both sides share (OutputShape, BufferDesc, ErrorStatus, Extension, ...)
    try:
        return fn(obj)
    except InvalidArgument:
        raise
    except Exception as e:  # NOTE: junk inside a parcelable (a field of the wrong type) is an invalid argument too
        raise InvalidArgument(f"malformed {type(obj).__name__}: {type(e).__name__}: {e}") from None


def to_canonical(obj: Any) -> Any:
    """The canonical (nnhal.hal) form of an AIDL object or a list of them;
    InvalidArgument when AIDL gives it no meaning (see the module doc)."""
    return _convert(_TO_CANONICAL, obj)


def from_canonical(obj: Any) -> Any:
    """The AIDL form of a canonical object or a list of them; InvalidArgument
    when AIDL cannot express it (an OEM type, a memory of an unknown kind)."""
    return _convert(_FROM_CANONICAL, obj)
