"""Types of the Neural Networks HAL 1.1 (``android.hardware.neuralnetworks@1.1::types``).

Every type visible at version 1.1 is importable from here under its HAL name:
the 1.0 types (re-exported from :mod:`nnhal.hal.v1_0`) plus the ones 1.1
redefined: OperationType (adds BATCH_TO_SPACE_ND..TRANSPOSE, 29-37),
Capabilities (adds relaxedFloat32toFloat16Performance), Operation, Model (adds
relaxComputationFloat32toFloat16) and ExecutionPreference (unchanged since,
the very class of :mod:`nnhal.hal.types`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from nnhal.hal import types as _t
from nnhal.hal.types import ExecutionPreference
from nnhal.hal.v1_0 import (
    DataLocation,
    DeviceStatus,
    ErrorStatus,
    FusedActivationFunc,
    Handle,
    Memory,
    Operand,
    OperandLifeTime,
    OperandType,
    PerformanceInfo,
    Request,
    RequestArgument,
)

__all__ = [
    "Capabilities",
    "DataLocation",
    "DeviceStatus",
    "ErrorStatus",
    "ExecutionPreference",
    "FusedActivationFunc",
    "Handle",
    "Memory",
    "Model",
    "Operand",
    "OperandLifeTime",
    "OperandType",
    "Operation",
    "OperationType",
    "PerformanceInfo",
    "Request",
    "RequestArgument",
]

# NOTE: the 1.1 enum is the 1.3 one cut at 1.1's last value (TRANSPOSE = 37),
# plus OEM_OPERATION; HAL values never changed between versions.
OperationType = enum.IntEnum(  # type: ignore[misc]
    "OperationType",
    [(m.name, m.value) for m in _t.OperationType if m.value <= 37 or m.value == 10000],
    module=__name__,
    qualname="OperationType",
)


@dataclass
class Capabilities:
    float32Performance: PerformanceInfo = field(default_factory=PerformanceInfo)
    quantized8Performance: PerformanceInfo = field(default_factory=PerformanceInfo)
    relaxedFloat32toFloat16Performance: PerformanceInfo = field(default_factory=PerformanceInfo)


@dataclass
class Operation:
    type: OperationType = OperationType.ADD  # type: ignore[valid-type]
    inputs: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)


@dataclass
class Model:
    operands: list[Operand] = field(default_factory=list)
    operations: list[Operation] = field(default_factory=list)
    inputIndexes: list[int] = field(default_factory=list)
    outputIndexes: list[int] = field(default_factory=list)
    operandValues: bytes = b""
    pools: list[Memory] = field(default_factory=list)
    relaxComputationFloat32toFloat16: bool = False
