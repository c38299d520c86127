"""Types of the Neural Networks HAL 1.1 (``android.hardware.neuralnetworks@1.1::types``).

Every type visible at version 1.1 is importable from here under its HAL name:
the 1.0 types (re-exported from :mod:`nnhal.hal.v1_0`) plus the ones 1.1
redefined: OperationType (adds BATCH_TO_SPACE_ND..TRANSPOSE, 29-37),
Capabilities (adds relaxedFloat32toFloat16Performance), Operation, Model (adds
relaxComputationFloat32toFloat16) and ExecutionPreference (unchanged since,
the very class of :mod:`nnhal.hal.types`).
"""

from __future__ import annotations

from nnhal.hal import types as _t
from nnhal.hal import v1_0
from nnhal.hal.derive import below, enum, struct
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

OperationType = enum("OperationType", _t.OperationType, module=__name__, keep=below(_t.OperationType.TRANSPOSE))
Capabilities = struct("Capabilities", v1_0.Capabilities, module=__name__,
                      add=[("relaxedFloat32toFloat16Performance", PerformanceInfo, PerformanceInfo)])
Operation = struct("Operation", v1_0.Operation, module=__name__, retype={"type": (OperationType, OperationType.ADD)})
Model = struct("Model", v1_0.Model, module=__name__, retype={"operations": (list[Operation], list)},
               add=[("relaxComputationFloat32toFloat16", bool, False)])
