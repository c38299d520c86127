"""Types of the Neural Networks HAL 1.0 (``android.hardware.neuralnetworks@1.0::types``).

Every 1.0 type is importable from here under its HAL name.  Types whose
definition differs from 1.3 are defined here (OperandType, OperationType,
OperandLifeTime with MODEL_INPUT/MODEL_OUTPUT, ErrorStatus, Capabilities,
Operand, Operation, Model with flat operands/operations and ``vec<memory>``
pools, Request with ``vec<memory>`` pools); the unchanged ones (DataLocation,
PerformanceInfo, RequestArgument, FusedActivationFunc, DeviceStatus) are the
very classes of :mod:`nnhal.hal.types`.  Conversions to and from 1.3 are in
:mod:`nnhal.hal.convert`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

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


class OperandType(enum.IntEnum):
    FLOAT32 = 0
    INT32 = 1
    UINT32 = 2
    TENSOR_FLOAT32 = 3
    TENSOR_INT32 = 4
    TENSOR_QUANT8_ASYMM = 5
    OEM = 10000
    TENSOR_OEM_BYTE = 10001


class OperationType(enum.IntEnum):
    ADD = 0
    AVERAGE_POOL_2D = 1
    CONCATENATION = 2
    CONV_2D = 3
    DEPTHWISE_CONV_2D = 4
    DEPTH_TO_SPACE = 5
    DEQUANTIZE = 6
    EMBEDDING_LOOKUP = 7
    FLOOR = 8
    FULLY_CONNECTED = 9
    HASHTABLE_LOOKUP = 10
    L2_NORMALIZATION = 11
    L2_POOL_2D = 12
    LOCAL_RESPONSE_NORMALIZATION = 13
    LOGISTIC = 14
    LSH_PROJECTION = 15
    LSTM = 16
    MAX_POOL_2D = 17
    MUL = 18
    RELU = 19
    RELU1 = 20
    RELU6 = 21
    RESHAPE = 22
    RESIZE_BILINEAR = 23
    RNN = 24
    SOFTMAX = 25
    SPACE_TO_DEPTH = 26
    SVDF = 27
    TANH = 28
    OEM_OPERATION = 10000


class OperandLifeTime(enum.IntEnum):
    TEMPORARY_VARIABLE = 0
    MODEL_INPUT = 1
    MODEL_OUTPUT = 2
    CONSTANT_COPY = 3
    CONSTANT_REFERENCE = 4
    NO_VALUE = 5


class ErrorStatus(enum.IntEnum):
    NONE = 0
    DEVICE_UNAVAILABLE = 1
    GENERAL_FAILURE = 2
    OUTPUT_INSUFFICIENT_SIZE = 3
    INVALID_ARGUMENT = 4


@dataclass
class Capabilities:
    float32Performance: PerformanceInfo = field(default_factory=PerformanceInfo)
    quantized8Performance: PerformanceInfo = field(default_factory=PerformanceInfo)


@dataclass
class Operand:
    type: OperandType = OperandType.FLOAT32
    dimensions: list[int] = field(default_factory=list)
    numberOfConsumers: int = 0
    scale: float = 0.0
    zeroPoint: int = 0
    lifetime: OperandLifeTime = OperandLifeTime.TEMPORARY_VARIABLE
    location: DataLocation = field(default_factory=DataLocation)


@dataclass
class Operation:
    type: OperationType = OperationType.ADD
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


@dataclass
class Request:
    inputs: list[RequestArgument] = field(default_factory=list)
    outputs: list[RequestArgument] = field(default_factory=list)
    pools: list[Memory] = field(default_factory=list)
