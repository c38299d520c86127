"""Types of the Neural Networks HAL 1.3 (``android.hardware.neuralnetworks@1.3::types``).

Every name here is the newest (1.3) version of a HAL type, with the HAL's
numeric enum values and field names (camelCase, in HAL order).  Types that
did not change since an earlier version are defined once here and re-exported
by ``hal.v1_0`` .. ``hal.v1_2``.  A HAL ``safe_union`` is a dataclass with one
optional field per member; at most one is set, none set means Monostate.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, fields
from typing import Optional

UINT64_MAX = 2**64 - 1


class HalVersion(enum.IntEnum):
    """The interface versions as ordered small ints: which version introduced
    an operation, a data type or a rule; what an entry point accepts.  HIDL
    1.0-1.3 are NNAPI feature levels 1-4 (Android API 27-30); the stable AIDL
    ``android.hardware.neuralnetworks`` versions 1-4 are feature levels 5-8
    (Android 12-15, API 31-35): AIDL v1 keeps 1.3's operations, v2 adds
    BATCH_MATMUL, PACK and RESHAPE of TENSOR_INT32, v3 MIRROR_PAD, REVERSE and
    quantized RSQRT, v4 reusable executions and hints (Android's canonical
    ``nn::Version::Level``)."""

    V1_0 = 0
    V1_1 = 1
    V1_2 = 2
    V1_3 = 3
    AIDL_V1 = 4
    AIDL_V2 = 5
    AIDL_V3 = 6
    AIDL_V4 = 7

    @property
    def feature_level(self) -> int:
        """The NNAPI feature level (1-8)."""
        return int(self) + 1

    @property
    def android_api(self) -> int:
        """The first Android API level of this feature level (27-30, 31, 33, 34, 35)."""
        return _ANDROID_API[self.feature_level]

    @property
    def label(self) -> str:
        """How reports name the interface: "HAL 1.3" (HIDL), "AIDL v2"."""
        return f"AIDL v{self - HalVersion.AIDL_V1 + 1}" if self >= HalVersion.AIDL_V1 else f"HAL 1.{int(self)}"


# NOTE: Android 12L (API 32) added no feature level: API 31 and 32 are both feature level 5
_ANDROID_API = {1: 27, 2: 28, 3: 29, 4: 30, 5: 31, 6: 33, 7: 34, 8: 35}


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
    TENSOR_QUANT8_ASYMM_SIGNED = 14
    SUBGRAPH = 15
    OEM = 10000
    TENSOR_OEM_BYTE = 10001


class OperandTypeRange(enum.IntEnum):
    BASE_MIN = 0
    FUNDAMENTAL_MIN = 0
    FUNDAMENTAL_MAX = 15
    OEM_MIN = 10000
    OEM_MAX = 10001
    BASE_MAX = 0xFFFF


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
    BATCH_TO_SPACE_ND = 29
    DIV = 30
    MEAN = 31
    PAD = 32
    SPACE_TO_BATCH_ND = 33
    SQUEEZE = 34
    STRIDED_SLICE = 35
    SUB = 36
    TRANSPOSE = 37
    ABS = 38
    ARGMAX = 39
    ARGMIN = 40
    AXIS_ALIGNED_BBOX_TRANSFORM = 41
    BIDIRECTIONAL_SEQUENCE_LSTM = 42
    BIDIRECTIONAL_SEQUENCE_RNN = 43
    BOX_WITH_NMS_LIMIT = 44
    CAST = 45
    CHANNEL_SHUFFLE = 46
    DETECTION_POSTPROCESSING = 47
    EQUAL = 48
    EXP = 49
    EXPAND_DIMS = 50
    GATHER = 51
    GENERATE_PROPOSALS = 52
    GREATER = 53
    GREATER_EQUAL = 54
    GROUPED_CONV_2D = 55
    HEATMAP_MAX_KEYPOINT = 56
    INSTANCE_NORMALIZATION = 57
    LESS = 58
    LESS_EQUAL = 59
    LOG = 60
    LOGICAL_AND = 61
    LOGICAL_NOT = 62
    LOGICAL_OR = 63
    LOG_SOFTMAX = 64
    MAXIMUM = 65
    MINIMUM = 66
    NEG = 67
    NOT_EQUAL = 68
    PAD_V2 = 69
    POW = 70
    PRELU = 71
    QUANTIZE = 72
    QUANTIZED_16BIT_LSTM = 73
    RANDOM_MULTINOMIAL = 74
    REDUCE_ALL = 75
    REDUCE_ANY = 76
    REDUCE_MAX = 77
    REDUCE_MIN = 78
    REDUCE_PROD = 79
    REDUCE_SUM = 80
    ROI_ALIGN = 81
    ROI_POOLING = 82
    RSQRT = 83
    SELECT = 84
    SIN = 85
    SLICE = 86
    SPLIT = 87
    SQRT = 88
    TILE = 89
    TOPK_V2 = 90
    TRANSPOSE_CONV_2D = 91
    UNIDIRECTIONAL_SEQUENCE_LSTM = 92
    UNIDIRECTIONAL_SEQUENCE_RNN = 93
    RESIZE_NEAREST_NEIGHBOR = 94
    QUANTIZED_LSTM = 95
    IF = 96
    WHILE = 97
    ELU = 98
    HARD_SWISH = 99
    FILL = 100
    RANK = 101
    # NOTE: the operations of the AIDL HAL (android.hardware.neuralnetworks), canonical here as in Android's
    # nn::OperationType: feature level 6 (AIDL version 2) BATCH_MATMUL and PACK, feature level 7 (version 3)
    # MIRROR_PAD and REVERSE.  Their signatures carry those versions, so a model using one through a HIDL
    # entry point (validated as of 1.0-1.3) is INVALID_ARGUMENT; OperationTypeRange stays HIDL 1.3's.
    BATCH_MATMUL = 102
    PACK = 103
    MIRROR_PAD = 104
    REVERSE = 105
    OEM_OPERATION = 10000


class OperationTypeRange(enum.IntEnum):
    BASE_MIN = 0
    FUNDAMENTAL_MIN = 0
    FUNDAMENTAL_MAX = 101
    OEM_MIN = 10000
    OEM_MAX = 10000
    BASE_MAX = 0xFFFF


class FusedActivationFunc(enum.IntEnum):
    NONE = 0
    RELU = 1
    RELU1 = 2
    RELU6 = 3


class OperandLifeTime(enum.IntEnum):
    TEMPORARY_VARIABLE = 0
    SUBGRAPH_INPUT = 1
    SUBGRAPH_OUTPUT = 2
    CONSTANT_COPY = 3
    CONSTANT_REFERENCE = 4
    NO_VALUE = 5
    SUBGRAPH = 6


class DeviceStatus(enum.IntEnum):
    AVAILABLE = 0
    BUSY = 1
    OFFLINE = 2
    UNKNOWN = 3


class ExecutionPreference(enum.IntEnum):
    LOW_POWER = 0
    FAST_SINGLE_ANSWER = 1
    SUSTAINED_SPEED = 2


class Priority(enum.IntEnum):
    LOW = 0
    MEDIUM = 1
    HIGH = 2


class DeviceType(enum.IntEnum):
    OTHER = 1
    CPU = 2
    GPU = 3
    ACCELERATOR = 4


class MeasureTiming(enum.IntEnum):
    NO = 0
    YES = 1


class ErrorStatus(enum.IntEnum):
    NONE = 0
    DEVICE_UNAVAILABLE = 1
    GENERAL_FAILURE = 2
    OUTPUT_INSUFFICIENT_SIZE = 3
    INVALID_ARGUMENT = 4
    MISSED_DEADLINE_TRANSIENT = 5
    MISSED_DEADLINE_PERSISTENT = 6
    RESOURCE_EXHAUSTED_TRANSIENT = 7
    RESOURCE_EXHAUSTED_PERSISTENT = 8


class Constant(enum.IntEnum):
    BYTE_SIZE_OF_CACHE_TOKEN = 32
    MAX_NUMBER_OF_CACHE_FILES = 32


class LoopTimeoutDurationNs(enum.IntEnum):
    DEFAULT = 2_000_000_000
    MAXIMUM = 15_000_000_000


class ExtensionTypeEncoding(enum.IntEnum):
    HIGH_BITS_PREFIX = 16
    LOW_BITS_TYPE = 16


# --------------------------------------------------------------------------
# handles and memory (hidl `handle` and `memory`)


@dataclass
class Handle:
    """A ``native_handle``: real file descriptors plus ints."""

    fds: list[int] = field(default_factory=list)
    ints: list[int] = field(default_factory=list)


@dataclass
class Memory:
    """A ``hidl_memory``: name ("ashmem", "mmap_fd", "hardware_buffer_blob",
    "hardware_buffer"), a handle of real fds and the size in bytes."""

    name: str = ""
    handle: Handle = field(default_factory=Handle)
    size: int = 0


# --------------------------------------------------------------------------
# structs


@dataclass
class PerformanceInfo:
    execTime: float = 0.0
    powerUsage: float = 0.0


@dataclass
class OperandPerformance:
    type: OperandType = OperandType.FLOAT32
    info: PerformanceInfo = field(default_factory=PerformanceInfo)


@dataclass
class Capabilities:
    relaxedFloat32toFloat16PerformanceScalar: PerformanceInfo = field(default_factory=PerformanceInfo)
    relaxedFloat32toFloat16PerformanceTensor: PerformanceInfo = field(default_factory=PerformanceInfo)
    operandPerformance: list[OperandPerformance] = field(default_factory=list)
    ifPerformance: PerformanceInfo = field(default_factory=PerformanceInfo)
    whilePerformance: PerformanceInfo = field(default_factory=PerformanceInfo)


# ``Capabilities.OperandPerformance`` as spelled in the HAL file.
Capabilities.OperandPerformance = OperandPerformance  # type: ignore[attr-defined]


@dataclass
class DataLocation:
    poolIndex: int = 0
    offset: int = 0
    length: int = 0


@dataclass
class SymmPerChannelQuantParams:
    scales: list[float] = field(default_factory=list)
    channelDim: int = 0


@dataclass
class OperandExtraParams:
    """safe_union ``Operand.ExtraParams``: none | channelQuant | extension."""

    channelQuant: Optional[SymmPerChannelQuantParams] = None
    extension: Optional[bytes] = None


@dataclass
class Operand:
    type: int = OperandType.FLOAT32  # NOTE: an int: extension types ((prefix << 16) | type) are outside the enum (the wire decodes by these annotations)
    dimensions: list[int] = field(default_factory=list)
    numberOfConsumers: int = 0
    scale: float = 0.0
    zeroPoint: int = 0
    lifetime: OperandLifeTime = OperandLifeTime.TEMPORARY_VARIABLE
    location: DataLocation = field(default_factory=DataLocation)
    extraParams: OperandExtraParams = field(default_factory=OperandExtraParams)


Operand.ExtraParams = OperandExtraParams  # type: ignore[attr-defined]


@dataclass
class Operation:
    type: int = OperationType.ADD  # NOTE: an int: extension operation types are outside the enum
    inputs: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)


@dataclass
class Subgraph:
    operands: list[Operand] = field(default_factory=list)
    operations: list[Operation] = field(default_factory=list)
    inputIndexes: list[int] = field(default_factory=list)
    outputIndexes: list[int] = field(default_factory=list)


@dataclass
class ExtensionNameAndPrefix:
    name: str = ""
    prefix: int = 0


@dataclass
class Model:
    main: Subgraph = field(default_factory=Subgraph)
    referenced: list[Subgraph] = field(default_factory=list)
    operandValues: bytes = b""
    pools: list[Memory] = field(default_factory=list)
    relaxComputationFloat32toFloat16: bool = False
    extensionNameToPrefix: list[ExtensionNameAndPrefix] = field(default_factory=list)


Model.ExtensionNameAndPrefix = ExtensionNameAndPrefix  # type: ignore[attr-defined]
Model.ExtensionTypeEncoding = ExtensionTypeEncoding  # type: ignore[attr-defined]


@dataclass
class BufferDesc:
    dimensions: list[int] = field(default_factory=list)


@dataclass
class BufferRole:
    modelIndex: int = 0
    ioIndex: int = 0
    frequency: float = 0.0


@dataclass
class RequestArgument:
    hasNoValue: bool = False
    location: DataLocation = field(default_factory=DataLocation)
    dimensions: list[int] = field(default_factory=list)


@dataclass
class MemoryPool:
    """safe_union ``Request.MemoryPool``: hidlMemory | token."""

    hidlMemory: Optional[Memory] = None
    token: Optional[int] = None


@dataclass
class Request:
    inputs: list[RequestArgument] = field(default_factory=list)
    outputs: list[RequestArgument] = field(default_factory=list)
    pools: list[MemoryPool] = field(default_factory=list)


Request.MemoryPool = MemoryPool  # type: ignore[attr-defined]


@dataclass
class OptionalTimePoint:
    """safe_union: none | nanosecondsSinceEpoch (steady clock, ``time.monotonic_ns()``)."""

    nanosecondsSinceEpoch: Optional[int] = None


@dataclass
class OptionalTimeoutDuration:
    """safe_union: none | nanoseconds."""

    nanoseconds: Optional[int] = None


@dataclass
class OutputShape:
    dimensions: list[int] = field(default_factory=list)
    isSufficient: bool = False


@dataclass
class Timing:
    timeOnDevice: int = UINT64_MAX
    timeInDriver: int = UINT64_MAX


NO_TIMING = Timing()


@dataclass
class OperandTypeInformation:
    type: int = 0
    isTensor: bool = False
    byteSize: int = 0


@dataclass
class Extension:
    name: str = ""
    operandTypes: list[OperandTypeInformation] = field(default_factory=list)


Extension.OperandTypeInformation = OperandTypeInformation  # type: ignore[attr-defined]
# NOTE: the name API.md gives it (``Extension::OperandTypeInformation`` in types.hal): the same class
ExtensionOperandTypeInformation = OperandTypeInformation


# --------------------------------------------------------------------------
# FMQ burst packets (1.2 FmqRequestDatum / FmqResultDatum)


@dataclass
class FmqRequestPacketInformation:
    packetSize: int = 0
    numberOfInputOperands: int = 0
    numberOfOutputOperands: int = 0
    numberOfPools: int = 0


@dataclass
class FmqRequestOperandInformation:
    hasNoValue: bool = False
    location: DataLocation = field(default_factory=DataLocation)
    numberOfDimensions: int = 0


@dataclass
class FmqRequestDatum:
    packetInformation: Optional[FmqRequestPacketInformation] = None
    inputOperandInformation: Optional[FmqRequestOperandInformation] = None
    inputOperandDimensionValue: Optional[int] = None
    outputOperandInformation: Optional[FmqRequestOperandInformation] = None
    outputOperandDimensionValue: Optional[int] = None
    poolIdentifier: Optional[int] = None
    measureTiming: Optional[MeasureTiming] = None


FmqRequestDatum.PacketInformation = FmqRequestPacketInformation  # type: ignore[attr-defined]
FmqRequestDatum.OperandInformation = FmqRequestOperandInformation  # type: ignore[attr-defined]


@dataclass
class FmqResultPacketInformation:
    packetSize: int = 0
    errorStatus: ErrorStatus = ErrorStatus.NONE
    numberOfOperands: int = 0


@dataclass
class FmqResultOperandInformation:
    isSufficient: bool = False
    numberOfDimensions: int = 0


@dataclass
class FmqResultDatum:
    packetInformation: Optional[FmqResultPacketInformation] = None
    operandInformation: Optional[FmqResultOperandInformation] = None
    operandDimensionValue: Optional[int] = None
    executionTiming: Optional[Timing] = None


FmqResultDatum.PacketInformation = FmqResultPacketInformation  # type: ignore[attr-defined]
FmqResultDatum.OperandInformation = FmqResultOperandInformation  # type: ignore[attr-defined]


def safe_union_discriminator(value: object) -> Optional[str]:
    """Name of the member set in a safe_union dataclass, or None (Monostate)."""
    set_fields = [f.name for f in fields(value) if getattr(value, f.name) is not None]  # type: ignore[arg-type]
    if len(set_fields) > 1:
        raise ValueError(f"safe_union {type(value).__name__} has several members set: {set_fields}")
    return set_fields[0] if set_fields else None


# --------------------------------------------------------------------------
# facts about operand types used across the package

SCALAR_TYPES = frozenset(
    {OperandType.FLOAT32, OperandType.INT32, OperandType.UINT32, OperandType.BOOL, OperandType.FLOAT16,
     OperandType.SUBGRAPH, OperandType.OEM}
)

# bytes per element of each non-extension type
OPERAND_TYPE_BYTE_SIZE: dict[OperandType, int] = {
    OperandType.FLOAT32: 4,
    OperandType.INT32: 4,
    OperandType.UINT32: 4,
    OperandType.TENSOR_FLOAT32: 4,
    OperandType.TENSOR_INT32: 4,
    OperandType.TENSOR_QUANT8_ASYMM: 1,
    OperandType.BOOL: 1,
    OperandType.TENSOR_QUANT16_SYMM: 2,
    OperandType.TENSOR_FLOAT16: 2,
    OperandType.TENSOR_BOOL8: 1,
    OperandType.FLOAT16: 2,
    OperandType.TENSOR_QUANT8_SYMM_PER_CHANNEL: 1,
    OperandType.TENSOR_QUANT16_ASYMM: 2,
    OperandType.TENSOR_QUANT8_SYMM: 1,
    OperandType.TENSOR_QUANT8_ASYMM_SIGNED: 1,
    OperandType.SUBGRAPH: 0,
    OperandType.OEM: 0,
    OperandType.TENSOR_OEM_BYTE: 1,
}


def is_tensor_type(t: int) -> bool:
    """True for tensor operand types (extension types: not decided here)."""
    return t not in SCALAR_TYPES


def operation_name(t: object) -> str:
    """The ``OperationType`` name of ``t`` (its number for an OEM, extension or unknown type)."""
    return OperationType(t).name if t in OperationType._value2member_map_ else str(t)
