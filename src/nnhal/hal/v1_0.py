"""Types of the Neural Networks HAL 1.0 (``android.hardware.neuralnetworks@1.0::types``).

Every 1.0 type is importable from here under its HAL name.  Types whose
definition differs from 1.3 are defined here (OperandType, OperationType,
OperandLifeTime with MODEL_INPUT/MODEL_OUTPUT, ErrorStatus, Capabilities,
Operand, Operation, Model with flat operands/operations and ``vec<memory>``
pools, Request with ``vec<memory>`` pools); the unchanged ones (DataLocation,
PerformanceInfo, RequestArgument, FusedActivationFunc, DeviceStatus) are the
very classes of :mod:`nnhal.hal.types`.  The changed ones are declared as their
differences from 1.3 (:mod:`nnhal.hal.derive`).  Conversions to and from 1.3
are in :mod:`nnhal.hal.convert`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nnhal.hal import types as _t
from nnhal.hal.derive import below, enum, struct
from nnhal.hal.types import (
    DataLocation,
    DeviceStatus,
    FusedActivationFunc,
    Handle,
    Memory,
    PerformanceInfo,
    RequestArgument,
)

__all__ = [
    "Capabilities",
    "DataLocation",
    "DeviceStatus",
    "ErrorStatus",
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


OperandType = enum("OperandType", _t.OperandType, module=__name__, keep=below(_t.OperandType.TENSOR_QUANT8_ASYMM))
OperationType = enum("OperationType", _t.OperationType, module=__name__, keep=below(_t.OperationType.TANH))
# NOTE: 1.3 renamed MODEL_INPUT / MODEL_OUTPUT (same values) and added SUBGRAPH
OperandLifeTime = enum("OperandLifeTime", _t.OperandLifeTime, module=__name__, keep=below(5, oem=False),
                       rename={"SUBGRAPH_INPUT": "MODEL_INPUT", "SUBGRAPH_OUTPUT": "MODEL_OUTPUT"})
ErrorStatus = enum("ErrorStatus", _t.ErrorStatus, module=__name__, keep=below(4, oem=False))


@dataclass
class Capabilities:
    float32Performance: PerformanceInfo = field(default_factory=PerformanceInfo)
    quantized8Performance: PerformanceInfo = field(default_factory=PerformanceInfo)


Operand = struct("Operand", _t.Operand, module=__name__, drop=["extraParams"],
                 retype={"type": (OperandType, OperandType.FLOAT32),
                         "lifetime": (OperandLifeTime, OperandLifeTime.TEMPORARY_VARIABLE)})
Operation = struct("Operation", _t.Operation, module=__name__, retype={"type": (OperationType, OperationType.ADD)})
# NOTE: 1.0 models are flat: the operands and operations of 1.3's main subgraph, then the values and pools
Model = struct("Model", (_t.Subgraph, _t.Model), module=__name__,
               drop=["main", "referenced", "relaxComputationFloat32toFloat16", "extensionNameToPrefix"],
               retype={"operands": (list[Operand], list), "operations": (list[Operation], list)})
Request = struct("Request", _t.Request, module=__name__, retype={"pools": (list[Memory], list)})
