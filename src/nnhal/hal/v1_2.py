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

from nnhal.hal import types as _t
from nnhal.hal import v1_1
from nnhal.hal.derive import below, enum, struct
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


OperandType = enum("OperandType", _t.OperandType, module=__name__, keep=below(_t.OperandType.TENSOR_QUANT8_SYMM))
OperandTypeRange = enum("OperandTypeRange", _t.OperandTypeRange, module=__name__,
                        values={"FUNDAMENTAL_MAX": OperandType.TENSOR_QUANT8_SYMM})
OperationType = enum("OperationType", _t.OperationType, module=__name__,
                     keep=below(_t.OperationType.RESIZE_NEAREST_NEIGHBOR))
OperationTypeRange = enum("OperationTypeRange", _t.OperationTypeRange, module=__name__,
                          values={"FUNDAMENTAL_MAX": OperationType.RESIZE_NEAREST_NEIGHBOR})
OperandPerformance = struct("OperandPerformance", _t.OperandPerformance, module=__name__,
                            retype={"type": (OperandType, OperandType.FLOAT32)})
# ``Capabilities.OperandPerformance`` as spelled in the HAL file
Capabilities = struct("Capabilities", _t.Capabilities, module=__name__, drop=["ifPerformance", "whilePerformance"],
                      retype={"operandPerformance": (list[OperandPerformance], list)},
                      attrs={"OperandPerformance": OperandPerformance})
# NOTE: the fields of 1.3's, and yet other HAL types (the 1.2 enums): classes of their own; ``type`` an int:
# extension types ((prefix << 16) | type) are outside the enum
Operation = struct("Operation", _t.Operation, module=__name__, retype={"type": (int, OperationType.ADD)})
Operand = struct("Operand", _t.Operand, module=__name__,
                 retype={"type": (int, OperandType.FLOAT32),
                         "lifetime": (OperandLifeTime, OperandLifeTime.TEMPORARY_VARIABLE)},
                 attrs={"ExtraParams": OperandExtraParams})
Model = struct("Model", v1_1.Model, module=__name__,
               retype={"operands": (list[Operand], list), "operations": (list[Operation], list)},
               add=[("extensionNameToPrefix", list[ExtensionNameAndPrefix], list)],
               attrs={"ExtensionNameAndPrefix": ExtensionNameAndPrefix, "ExtensionTypeEncoding": ExtensionTypeEncoding})
