"""The parcelables, unions and enums of ``android.hardware.neuralnetworks``
(stable AIDL, versions 1-4: NNAPI feature levels 5-8), with the ``.aidl``
names, field names and order and enum values, and the
``android.hardware.common`` / ``android.hardware.graphics.common`` types they
use.  The interfaces and the parcelables that hold an interface are in
:mod:`nnhal.hal.aidl.interfaces`.

Each type is declared as its difference from the canonical one
(:mod:`nnhal.hal.types`, :mod:`nnhal.hal.derive`); a type the AIDL kept as
HIDL 1.3 had it is the canonical class itself (``aidl.OutputShape is
hal.OutputShape``, ``aidl.ErrorStatus is hal.ErrorStatus``).  Where AIDL
differs: no OEM operand or operation types; ``OperandLifeTime.CONSTANT_POOL``
(1.3's CONSTANT_REFERENCE); ``DataLocation.padding``; no
``Operand.numberOfConsumers`` and a nullable ``extraParams``;
``BufferRole.probability``; ``Memory`` a union of ``Ashmem`` /
``MappableFile`` / ``HardwareBuffer``; ``RequestMemoryPool`` a union ``pool``
| ``token``; ``Timing`` in nanoseconds, -1 for none; the results and configs
of versions 1-4 (``ExecutionResult``, ``NumberOfCacheFiles``,
``ExecutionConfig``, ``PrepareModelConfig``, ``TokenValuePair``).

Binding conventions (../shared/API.md, "AIDL"): a union is a dataclass with
one optional field per member, exactly one set (checked where it enters the
driver); a ``ParcelFileDescriptor`` is an int (-1 in a default-made
parcelable); every field has a default: an empty list, 0 or the AIDL enum's
zero value, except the ``long`` times that take -1 for "none"
(``Timing.*Ns``, ``ExecutionConfig.loopTimeoutDurationNs``,
``PrepareModelConfig.deadlineNs``), which default to -1, so that a config
made with no arguments asks for nothing.

:data:`SINCE` names the types and enum members a version after 1 introduced
(``nnhal.hal.aidl.since`` answers for every name).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NewType, Optional

from nnhal.hal import types as _t
from nnhal.hal.derive import OEM_MIN, below, enum, struct
from nnhal.hal.types import (
    BufferDesc,
    DeviceType,
    ErrorStatus,
    ExecutionPreference,
    Extension,
    ExtensionNameAndPrefix,
    ExtensionOperandTypeInformation,
    FusedActivationFunc,
    HalVersion,
    OperandExtraParams,
    Operation,
    OutputShape,
    PerformanceInfo,
    Priority,
    SymmPerChannelQuantParams,
)
from nnhal.hal.types import Handle as NativeHandle

__all__ = [
    "Ashmem", "BufferDesc", "BufferRole", "Capabilities", "DataLocation", "DeviceType", "ErrorStatus",
    "ExecutionConfig", "ExecutionPreference", "ExecutionResult", "Extension", "ExtensionNameAndPrefix",
    "ExtensionOperandTypeInformation", "FusedActivationFunc", "HardwareBuffer", "HardwareBufferDescription",
    "MappableFile", "Memory", "Model", "NativeHandle", "NumberOfCacheFiles", "Operand", "OperandExtraParams",
    "OperandLifeTime", "OperandPerformance", "OperandType", "Operation", "OperationType", "OutputShape",
    "ParcelFileDescriptor", "PerformanceInfo", "PrepareModelConfig", "Priority", "Request", "RequestArgument",
    "RequestMemoryPool", "Subgraph", "SymmPerChannelQuantParams", "Timing", "TokenValuePair",
]

V1, V2, V3, V4 = HalVersion.AIDL_V1, HalVersion.AIDL_V2, HalVersion.AIDL_V3, HalVersion.AIDL_V4
_M = __name__
NO_TIME = -1  # NOTE: "When a time is not available, it must be reported as -1" (Timing.aidl); also "no deadline"

# NOTE: android.os.ParcelFileDescriptor: an int at run time; the annotation is what tells a transport that
# the int is a descriptor to pass (SCM_RIGHTS), not a number
ParcelFileDescriptor = NewType("ParcelFileDescriptor", int)

# --------------------------------------------------------------------------
# android.hardware.common and android.hardware.graphics.common


@dataclass
class Ashmem:
    """``android.hardware.common.Ashmem``: the memory of HIDL's "ashmem"."""

    fd: ParcelFileDescriptor = ParcelFileDescriptor(-1)
    size: int = 0


@dataclass
class MappableFile:
    """``android.hardware.common.MappableFile``: ``length`` bytes at ``offset``
    of the file ``fd``, mapped with ``prot`` (PROT_READ | PROT_WRITE)."""

    length: int = 0
    prot: int = 0
    fd: ParcelFileDescriptor = ParcelFileDescriptor(-1)
    offset: int = 0


@dataclass
class HardwareBufferDescription:
    """``android.hardware.graphics.common.HardwareBufferDescription`` (an
    ``AHardwareBuffer_Desc``); ``format`` a PixelFormat (BLOB = 0x21),
    ``usage`` a BufferUsage bit set, kept as ints."""

    width: int = 0
    height: int = 0
    layers: int = 0
    format: int = 0
    usage: int = 0
    stride: int = 0


@dataclass
class HardwareBuffer:
    """``android.hardware.graphics.common.HardwareBuffer``."""

    description: HardwareBufferDescription = field(default_factory=HardwareBufferDescription)
    handle: NativeHandle = field(default_factory=NativeHandle)


@dataclass
class Memory:
    """union ``Memory``: ashmem | mappableFile | hardwareBuffer (exactly one set)."""

    ashmem: Optional[Ashmem] = None
    mappableFile: Optional[MappableFile] = None
    hardwareBuffer: Optional[HardwareBuffer] = None


# --------------------------------------------------------------------------
# enums

# NOTE: the operations AIDL added to 1.3's, with the version of each (IDevice versions 2 and 3)
NEW_OPERATIONS = {"BATCH_MATMUL": (102, V2), "PACK": (103, V2), "MIRROR_PAD": (104, V3), "REVERSE": (105, V3)}

OperandType = enum("OperandType", _t.OperandType, module=_M, keep=below(_t.OperandType.SUBGRAPH, oem=False))
OperationType = enum("OperationType", _t.OperationType, module=_M, keep=lambda v: v < OEM_MIN,
                     extra={n: v for n, (v, _) in NEW_OPERATIONS.items()})
OperandLifeTime = enum("OperandLifeTime", _t.OperandLifeTime, module=_M,
                       rename={"CONSTANT_REFERENCE": "CONSTANT_POOL"})

# --------------------------------------------------------------------------
# parcelables and unions

DataLocation = struct("DataLocation", _t.DataLocation, module=_M, add=[("padding", int, 0)])
Operand = struct("Operand", _t.Operand, module=_M, drop=["numberOfConsumers"],
                 retype={"type": (int, OperandType.FLOAT32),
                         "lifetime": (OperandLifeTime, OperandLifeTime.TEMPORARY_VARIABLE),
                         "location": (DataLocation, DataLocation),
                         "extraParams": (Optional[OperandExtraParams], None)})
Subgraph = struct("Subgraph", _t.Subgraph, module=_M, retype={"operands": (list[Operand], list)})
Model = struct("Model", _t.Model, module=_M,
               retype={"main": (Subgraph, Subgraph), "referenced": (list[Subgraph], list),
                       "pools": (list[Memory], list)})
OperandPerformance = struct("OperandPerformance", _t.OperandPerformance, module=_M,
                            retype={"type": (OperandType, OperandType.FLOAT32)})
Capabilities = struct("Capabilities", _t.Capabilities, module=_M,
                      retype={"operandPerformance": (list[OperandPerformance], list)})
BufferRole = struct("BufferRole", _t.BufferRole, module=_M, rename={"frequency": "probability"})
RequestArgument = struct("RequestArgument", _t.RequestArgument, module=_M,
                         retype={"location": (DataLocation, DataLocation)})
RequestMemoryPool = struct("RequestMemoryPool", _t.MemoryPool, module=_M, rename={"hidlMemory": "pool"},
                           retype={"pool": (Optional[Memory], None)},
                           doc="union ``RequestMemoryPool``: pool (a client memory) | token (a driver-managed "
                               "buffer's, from IDevice.allocate); exactly one set.")
Request = struct("Request", _t.Request, module=_M,
                 retype={"inputs": (list[RequestArgument], list), "outputs": (list[RequestArgument], list),
                         "pools": (list[RequestMemoryPool], list)})
Timing = struct("Timing", _t.Timing, module=_M, rename={"timeOnDevice": "timeOnDeviceNs",
                                                         "timeInDriver": "timeInDriverNs"},
                retype={"timeOnDeviceNs": (int, NO_TIME), "timeInDriverNs": (int, NO_TIME)},
                doc="Timing(timeOnDeviceNs, timeInDriverNs): nanoseconds, -1 when not available.")


@dataclass
class ExecutionResult:
    """The result of a synchronous execution: ``outputSufficientSize`` false
    (and ``outputShapes`` saying which) when an output buffer was too small."""

    outputSufficientSize: bool = False
    outputShapes: list[OutputShape] = field(default_factory=list)
    timing: Timing = field(default_factory=Timing)


@dataclass
class NumberOfCacheFiles:
    numModelCache: int = 0
    numDataCache: int = 0


@dataclass
class TokenValuePair:
    """(version 4) A vendor hint: ``token`` is ``(prefix << 16) | hint`` with
    the prefix of an ``ExtensionNameAndPrefix``; ``value`` its raw bytes."""

    token: int = 0
    value: bytes = b""


@dataclass
class ExecutionConfig:
    """(version 4) The parameters of an execution beside its request."""

    measureTiming: bool = False
    loopTimeoutDurationNs: int = NO_TIME
    executionHints: list[TokenValuePair] = field(default_factory=list)
    extensionNameToPrefix: list[ExtensionNameAndPrefix] = field(default_factory=list)


@dataclass
class PrepareModelConfig:
    """(version 4) The parameters of a preparation beside its model."""

    preference: ExecutionPreference = ExecutionPreference.LOW_POWER
    priority: Priority = Priority.LOW
    deadlineNs: int = NO_TIME
    modelCache: list[ParcelFileDescriptor] = field(default_factory=list)
    dataCache: list[ParcelFileDescriptor] = field(default_factory=list)
    cacheToken: bytes = bytes(32)
    compilationHints: list[TokenValuePair] = field(default_factory=list)
    extensionNameToPrefix: list[ExtensionNameAndPrefix] = field(default_factory=list)


PrepareModelConfig.BYTE_SIZE_OF_CACHE_TOKEN = 32  # type: ignore[attr-defined]

# --------------------------------------------------------------------------
# versions

# the version that introduced each type or enum member not in version 1 (the interfaces and methods:
# nnhal.hal.aidl.interfaces.SINCE, which holds this table too)
SINCE: dict[str, HalVersion] = {
    "ExecutionConfig": V4, "PrepareModelConfig": V4, "TokenValuePair": V4,
    **{f"OperationType.{n}": v for n, (_, v) in NEW_OPERATIONS.items()},
}
