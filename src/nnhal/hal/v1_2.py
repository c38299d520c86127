"""Types of the Neural Networks HAL 1.2 (``android.hardware.neuralnetworks@1.2::types``).

Every type visible at version 1.2 is importable from here under its HAL name:
the 1.0 and 1.1 types still current at 1.2 (re-exported from
:mod:`nnhal.hal.v1_1`: OperandLifeTime with MODEL_INPUT/MODEL_OUTPUT,
ErrorStatus, Request with ``vec<memory>`` pools, ...) plus the ones 1.2
defined: OperandType (adds 6-13), OperandTypeRange, OperationType (adds
38-94), OperationTypeRange, Capabilities with per-type OperandPerformance,
Operation, Operand (adds extraParams), Model (adds extensionNameToPrefix).
The 1.2 types that 1.3 kept unchanged (Constant, DeviceType,
SymmPerChannelQuantParams, Operand.ExtraParams, Model.ExtensionNameAndPrefix,
OutputShape, MeasureTiming, Timing, the FMQ burst packets, Extension) are the
very classes of :mod:`nnhal.hal.types`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from nnhal.hal import types as _t
from nnhal.hal.types import (
    Constant,
    DeviceType,
    Extension,
    ExtensionNameAndPrefix,
    ExtensionTypeEncoding,
    FmqRequestDatum,
    FmqRequestOperandInformation,
    FmqRequestPacketInformation,
    FmqResultDatum,
    FmqResultOperandInformation,
    FmqResultPacketInformation,
    MeasureTiming,
    OperandExtraParams,
    OperandTypeInformation,
    OutputShape,
    SymmPerChannelQuantParams,
    Timing,
)
from nnhal.hal.v1_1 import (
    DataLocation,
    DeviceStatus,
    ErrorStatus,
    ExecutionPreference,
    FusedActivationFunc,
    Handle,
    Memory,
    OperandLifeTime,
    PerformanceInfo,
    Request,
    RequestArgument,
)

__all__ = [
    "Capabilities",
    "Constant",
    "DataLocation",
    "DeviceStatus",
    "DeviceType",
    "ErrorStatus",
    "ExecutionPreference",
    "Extension",
    "ExtensionNameAndPrefix",
    "ExtensionTypeEncoding",
    "FmqRequestDatum",
    "FmqRequestOperandInformation",
    "FmqRequestPacketInformation",
    "FmqResultDatum",
    "FmqResultOperandInformation",
    "FmqResultPacketInformation",
    "FusedActivationFunc",
    "Handle",
    "MeasureTiming",
    "Memory",
    "Model",
    "Operand",
    "OperandExtraParams",
    "OperandLifeTime",
    "OperandPerformance",
    "OperandType",
    "OperandTypeInformation",
    "OperandTypeRange",
    "Operation",
    "OperationType",
    "OperationTypeRange",
    "OutputShape",
    "PerformanceInfo",
    "Request",
    "RequestArgument",
    "SymmPerChannelQuantParams",
    "Timing",
]


class OperandType(enum.IntEnum):
    FLOAT32 = 0
    INT32 = 1
    UINT32 = 2
    TENSOR_FLOAT32 = 3
    TENSOR_INT32 = 4
    TENSOR_QUANT8_ASYMM = 5
    BOOL = 6
    TENSOR_QUANT16_SYMM = 7
    TENSOR_FLOAT16 = 8
    TENSOR_BOOL8 = 9
    FLOAT16 = 10
    TENSOR_QUANT8_SYMM_PER_CHANNEL = 11
    TENSOR_QUANT16_ASYMM = 12
    TENSOR_QUANT8_SYMM = 13
    OEM = 10000
    TENSOR_OEM_BYTE = 10001


class OperandTypeRange(enum.IntEnum):
    BASE_MIN = 0
    FUNDAMENTAL_MIN = 0
    FUNDAMENTAL_MAX = 13
    OEM_MIN = 10000
    OEM_MAX = 10001
    BASE_MAX = 0xFFFF


# NOTE: the 1.2 enum is the 1.3 one cut at 1.2's last value
# (RESIZE_NEAREST_NEIGHBOR = 94), plus OEM_OPERATION; HAL values never changed.
OperationType = enum.IntEnum(  # type: ignore[misc]
    "OperationType",
    [(m.name, m.value) for m in _t.OperationType if m.value <= 94 or m.value == 10000],
    module=__name__,
    qualname="OperationType",
)


class OperationTypeRange(enum.IntEnum):
    BASE_MIN = 0
    FUNDAMENTAL_MIN = 0
    FUNDAMENTAL_MAX = 94
    OEM_MIN = 10000
    OEM_MAX = 10000
    BASE_MAX = 0xFFFF


@dataclass
class OperandPerformance:
    type: OperandType = OperandType.FLOAT32
    info: PerformanceInfo = field(default_factory=PerformanceInfo)


@dataclass
class Capabilities:
    relaxedFloat32toFloat16PerformanceScalar: PerformanceInfo = field(default_factory=PerformanceInfo)
    relaxedFloat32toFloat16PerformanceTensor: PerformanceInfo = field(default_factory=PerformanceInfo)
    operandPerformance: list[OperandPerformance] = field(default_factory=list)


# ``Capabilities.OperandPerformance`` as spelled in the HAL file.
Capabilities.OperandPerformance = OperandPerformance  # type: ignore[attr-defined]


@dataclass
class Operation:
    type: int = OperationType.ADD  # NOTE: an int: extension operation types are outside the enum
    inputs: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)


@dataclass
class Operand:
    type: int = OperandType.FLOAT32  # NOTE: an int: extension types are outside the enum
    dimensions: list[int] = field(default_factory=list)
    numberOfConsumers: int = 0
    scale: float = 0.0
    zeroPoint: int = 0
    lifetime: OperandLifeTime = OperandLifeTime.TEMPORARY_VARIABLE
    location: DataLocation = field(default_factory=DataLocation)
    extraParams: OperandExtraParams = field(default_factory=OperandExtraParams)


Operand.ExtraParams = OperandExtraParams  # type: ignore[attr-defined]


@dataclass
class Model:
    operands: list[Operand] = field(default_factory=list)
    operations: list[Operation] = field(default_factory=list)
    inputIndexes: list[int] = field(default_factory=list)
    outputIndexes: list[int] = field(default_factory=list)
    operandValues: bytes = b""
    pools: list[Memory] = field(default_factory=list)
    relaxComputationFloat32toFloat16: bool = False
    extensionNameToPrefix: list[ExtensionNameAndPrefix] = field(default_factory=list)


Model.ExtensionNameAndPrefix = ExtensionNameAndPrefix  # type: ignore[attr-defined]
Model.ExtensionTypeEncoding = ExtensionTypeEncoding  # type: ignore[attr-defined]
