"""The TFLite <-> HAL 1.3 operator mapping, as one declarative table.

Each :class:`Mapping` says which TFLite builtin (or custom op) becomes which
HAL ``OperationType`` (``types.hal``), how every HAL input is obtained (a
TFLite input tensor, an option of the operator's ``*Options`` table, a fixed
scalar, or a value derived from the tensors' shapes), which HAL outputs exist
beyond TFLite's, and for which element types the mapping is exact.  The
conventions are those of TFLite's NNAPI delegate
(``tensorflow/lite/delegates/nnapi/nnapi_delegate.cc``): implicit padding
codes (TFLite's SAME/VALID + 1), fused activations passed through (NONE,
RELU, RELU_N1_TO_1, RELU6; TANH and SIGN_BIT refused), NHWC layout (``false``),
signed int8 activations as ``TENSOR_QUANT8_ASYMM_SIGNED``, multi-scale int8
weights as ``TENSOR_QUANT8_SYMM_PER_CHANNEL`` with their bias at scale 0,
missing biases as zeros at input scale x filter scale.

The importer (:mod:`nnhal.tflite.loader`) reads the table TFLite -> HAL; a
LiteRT-backed driver reads the same entries HAL -> TFLite: an ``Arg`` of kind
``tensor`` says which TFLite input a HAL input is, an ``option`` which field
of the options table a HAL scalar fills (through the inverse of its
``conv``).  Entries with a ``rewrite`` lower one TFLite operator into several
HAL operations (or a constant); they are exact where the note says so and
are named in the load report.  Custom operators with an NNAPI form are
entries under their custom code (MediaPipe's ``Convolution2DTransposeBias``,
SSD's ``TFLite_Detection_PostProcess``); IF / WHILE map their subgraphs to
``Model.referenced``.  An entry's ``native`` form is an operation the AIDL
HAL added (BATCH_MATMUL, PACK of feature level 6, MIRROR_PAD, REVERSE of
level 7): a model loaded for that interface version or a later one has the
operator as that one operation (as the NNAPI delegate maps it there), an
earlier one the entry's rewrite (or the refusal, for BATCH_MATMUL).
Everything else is refused per operator (``REFUSED`` gives the fixed
reasons).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from nnhal.hal import OperandType, OperationType
from nnhal.hal.aidl.types import NEW_OPERATIONS
from nnhal.hal.types import HalVersion

Op = OperationType
T = OperandType

# TFLite element-type classes (schema TensorType) a mapping may accept at its first tensor input
F32, F16, I32, U8, I8, I16, BOOL, I64 = "f32", "f16", "i32", "u8", "i8", "i16", "bool", "i64"
FLOAT = frozenset({F32})
FQ = frozenset({F32, U8, I8})  # float32 and both 8-bit quantizations
FQI = frozenset({F32, U8, I8, I32})
ANY = frozenset({F32, F16, U8, I8, I32, BOOL, I16})


@dataclass(frozen=True)
class Arg:
    """One HAL input of a mapped operation.

    kind ``tensor``: TFLite input ``index`` (``optional``: may be -1 in TFLite, then a HAL no-value operand);
    kind ``option``: field ``name`` of the builtin options, a HAL scalar of ``type`` after ``conv``;
    kind ``const``: the fixed scalar ``value`` of ``type``;
    kind ``derived``: computed by the loader's helper ``name`` (output sizes, zero bias, ...)."""

    kind: str
    index: int = 0
    name: str = ""
    type: OperandType = OperandType.INT32
    conv: str = ""  # padding | act | bool | int | float | neg (option value conversions)
    value: Any = None
    optional: bool = False


def tensor(i: int, optional: bool = False) -> Arg:
    return Arg("tensor", index=i, optional=optional)


def opt(name: str, conv: str = "int", type: OperandType = OperandType.INT32) -> Arg:
    return Arg("option", name=name, conv=conv, type=type)


def padding() -> Arg:
    return opt("padding", "padding")


def act(name: str = "fusedActivationFunction") -> Arg:
    return opt(name, "act")


def cell_act() -> Arg:
    # NOTE: the recurrent operations take TFLite's ActivationFunctionType itself (TANH = 4 included)
    return opt("fusedActivationFunction", "int")


def const(value: Any, type: OperandType = OperandType.INT32) -> Arg:
    return Arg("const", value=value, type=type)


def derived(name: str, type: OperandType = OperandType.INT32) -> Arg:
    return Arg("derived", name=name, type=type)


NHWC = const(False, OperandType.BOOL)


@dataclass(frozen=True)
class Native:
    """The AIDL HAL's operation ``op`` (a name of :data:`nnhal.hal.aidl.types.NEW_OPERATIONS`) an operator is
    from that operation's version on: its HAL ``inputs``, the TFLite element types it is exact for, and the
    name of an extra loader check (``check_<name>``; it refuses the native form, the rewrite then applies)."""

    op: str
    inputs: tuple[Arg, ...]
    types: frozenset
    check: str = ""

    @property
    def type(self) -> int:
        return NEW_OPERATIONS[self.op][0]

    @property
    def version(self) -> HalVersion:
        return NEW_OPERATIONS[self.op][1]


@dataclass(frozen=True)
class Mapping:
    """TFLite ``builtin`` -> HAL ``hal``.

    ``inputs``: the HAL inputs in HAL order; ``outputs``: TFLite output index per HAL output, or
    ``-1`` for a HAL-only output (a temporary nobody reads, e.g. a state output); ``None`` means
    TFLite's outputs in order.  ``types``: the element types of the first tensor input it is
    exact for; ``per_channel``: whether weights may be per-channel quantized; ``check``: the
    name of an extra refusal check; ``rewrite``: the loader routine lowering it when it is not
    one HAL operation; ``note``: what the mapping assumes."""

    builtin: str
    hal: Optional[OperationType]
    inputs: tuple[Arg, ...] = ()
    outputs: Optional[tuple[int, ...]] = None
    types: frozenset = FQ
    per_channel: bool = False
    check: str = ""
    rewrite: str = ""
    note: str = ""
    type_input: int = 0  # which TFLite input's element type ``types`` constrains
    native: Optional[Native] = None  # the AIDL operation it is from that operation's version on


def _unary(b: str, h: OperationType, types: frozenset = FQ, note: str = "") -> Mapping:
    return Mapping(b, h, (tensor(0),), types=types, note=note)


def _binary_act(b: str, h: OperationType, types: frozenset) -> Mapping:
    return Mapping(b, h, (tensor(0), tensor(1), act()), types=types, check="int_no_act",
                   note="broadcasting as NNAPI; int32 without fused activation")


def _binary(b: str, h: OperationType, types: frozenset) -> Mapping:
    return Mapping(b, h, (tensor(0), tensor(1)), types=types)


def _pool(b: str, h: OperationType, types: frozenset) -> Mapping:
    return Mapping(b, h, (tensor(0), padding(), opt("strideW"), opt("strideH"), opt("filterWidth"),
                          opt("filterHeight"), act(), NHWC), types=types, check="pool")


_CONV_TAIL = (NHWC, opt("dilationWFactor"), opt("dilationHFactor"))
_LSTM_ARGS = tuple(tensor(i, optional=True) for i in range(18))

MAPPINGS: tuple[Mapping, ...] = (
    # ---- elementwise arithmetic
    _binary_act("ADD", Op.ADD, FQI),
    _binary_act("SUB", Op.SUB, FQI),
    _binary_act("MUL", Op.MUL, FQI),
    _binary_act("DIV", Op.DIV, frozenset({F32, I32})),
    _binary("MAXIMUM", Op.MAXIMUM, FQI),
    _binary("MINIMUM", Op.MINIMUM, FQI),
    _binary("POW", Op.POW, FLOAT),
    Mapping("SQUARE", Op.MUL, (tensor(0), tensor(0), const(0)), types=FLOAT, rewrite="square",
            note="x*x: the same float32 product TFLite's SQUARE computes (exact)"),
    Mapping("SQUARED_DIFFERENCE", Op.MUL, types=FLOAT, rewrite="squared_difference",
            note="SUB then MUL of the float32 difference by itself, as TFLite's float kernel (exact)"),
    # ---- unary
    _unary("ABS", Op.ABS, frozenset({F32, I32})),
    _unary("EXP", Op.EXP, FLOAT),
    _unary("LOG", Op.LOG, FLOAT),
    _unary("RSQRT", Op.RSQRT, FLOAT),
    _unary("SQRT", Op.SQRT, FLOAT),
    _unary("SIN", Op.SIN, FLOAT),
    _unary("NEG", Op.NEG, frozenset({F32, I32})),
    _unary("FLOOR", Op.FLOOR, FLOAT),
    _unary("CAST", Op.CAST, frozenset({F32, I32, U8, I8})),
    _unary("LOGICAL_NOT", Op.LOGICAL_NOT, frozenset({BOOL})),
    _binary("LOGICAL_AND", Op.LOGICAL_AND, frozenset({BOOL})),
    _binary("LOGICAL_OR", Op.LOGICAL_OR, frozenset({BOOL})),
    # ---- activations
    _unary("RELU", Op.RELU),
    _unary("RELU6", Op.RELU6),
    _unary("RELU_N1_TO_1", Op.RELU1),
    _unary("LOGISTIC", Op.LOGISTIC, note="quantized output must be q(1/256, 0) (uint8) / q(1/256, -128) (int8)"),
    _unary("TANH", Op.TANH, note="quantized output must be q(1/128, 128) / q(1/128, 0)"),
    _unary("HARD_SWISH", Op.HARD_SWISH),
    Mapping("ELU", Op.ELU, (tensor(0), const(1.0, T.FLOAT32)), types=FLOAT, note="alpha 1 (TFLite's ELU)"),
    Mapping("PRELU", Op.PRELU, (tensor(0), tensor(1)), types=FQ),
    Mapping("LEAKY_RELU", Op.PRELU, (tensor(0), derived("leaky_alpha")), types=FQ,
            note="PRELU with a one-element alpha tensor (as the NNAPI delegate does); quantized alpha "
                 "at scale alpha/127"),
    # ---- comparisons / selection
    _binary("EQUAL", Op.EQUAL, frozenset({F32, U8, I8, I32, BOOL})),
    _binary("NOT_EQUAL", Op.NOT_EQUAL, frozenset({F32, U8, I8, I32, BOOL})),
    _binary("LESS", Op.LESS, FQI),
    _binary("LESS_EQUAL", Op.LESS_EQUAL, FQI),
    _binary("GREATER", Op.GREATER, FQI),
    _binary("GREATER_EQUAL", Op.GREATER_EQUAL, FQI),
    Mapping("SELECT", Op.SELECT, (tensor(0), tensor(1), tensor(2)), types=FQI, type_input=1, check="select_same",
            note="condition and values of one shape"),
    Mapping("SELECT_V2", Op.SELECT, types=FQI, type_input=1, rewrite="select_v2",
            note="inputs of other shapes broadcast first (TILE of each to the output shape, exact), then SELECT"),
    Mapping("ARG_MAX", Op.ARGMAX, (tensor(0), derived("axis_scalar")), types=FQI, check="arg_int32"),
    Mapping("ARG_MIN", Op.ARGMIN, (tensor(0), derived("axis_scalar")), types=FQI, check="arg_int32"),
    Mapping("TOPK_V2", Op.TOPK_V2, (tensor(0), derived("k_scalar")), types=FQI),
    # ---- convolutions / dense
    Mapping("CONV_2D", Op.CONV_2D, (tensor(0), tensor(1), derived("bias"), padding(), opt("strideW"),
                                    opt("strideH"), act()) + _CONV_TAIL, types=FQ, per_channel=True,
            check="conv", note="filter OHWI; per-channel int8 filters on axis 0; missing bias -> zeros"),
    Mapping("DEPTHWISE_CONV_2D", Op.DEPTHWISE_CONV_2D,
            (tensor(0), tensor(1), derived("bias"), padding(), opt("strideW"), opt("strideH"),
             derived("depth_multiplier"), act()) + _CONV_TAIL, types=FQ, per_channel=True, check="conv",
            note="filter 1HW(C*M); depth multiplier from the shapes (output / input channels), per-channel "
                 "on axis 3"),
    Mapping("FULLY_CONNECTED", Op.FULLY_CONNECTED, (tensor(0), tensor(1), derived("bias"), act()), types=FQ,
            per_channel=True, check="fc", rewrite="fully_connected",
            note="input flattened to [batch, input_size] as NNAPI does; keep_num_dims by a RESHAPE after; "
                 "per-channel weights (no NNAPI FC form) as a 1x1 CONV_2D between RESHAPEs (same integer "
                 "arithmetic)"),
    Mapping("TRANSPOSE_CONV", Op.TRANSPOSE_CONV_2D,
            (tensor(2), tensor(1), derived("tconv_bias"), tensor(0), padding(), opt("strideW"), opt("strideH"),
             act(), NHWC), types=FQ, per_channel=True, type_input=2, check="tconv",
            note="TFLite inputs (output_shape, filter, input[, bias]); the HAL's output_shape input is "
                 "TFLite's input 0"),
    Mapping("Convolution2DTransposeBias", Op.TRANSPOSE_CONV_2D, types=FLOAT, rewrite="mp_transpose_conv",
            note="MediaPipe custom op (custom options: padding, stride_w, stride_h as int32): "
                 "TRANSPOSE_CONV_2D with bias and the output tensor's shape"),
    Mapping("TFLite_Detection_PostProcess", Op.DETECTION_POSTPROCESSING, types=FLOAT, type_input=1,
            rewrite="detection_postprocess",
            note="the SSD custom op (flexbuffer options) is NNAPI's DETECTION_POSTPROCESSING: inputs reordered "
                 "(scores, deltas, anchors), background class 0 dropped from the labels; int32 classes and "
                 "count CAST to TFLite's float32 outputs"),
    _pool("AVERAGE_POOL_2D", Op.AVERAGE_POOL_2D, FQ),
    _pool("MAX_POOL_2D", Op.MAX_POOL_2D, FQ),
    _pool("L2_POOL_2D", Op.L2_POOL_2D, FLOAT),
    # ---- shape / layout
    Mapping("CONCATENATION", Op.CONCATENATION, (derived("all_inputs"), opt("axis")), types=ANY, check="concat",
            note="no fused activation"),
    Mapping("RESHAPE", Op.RESHAPE, (tensor(0), derived("reshape_shape")), types=ANY,
            note="shape from the constant second input, the options' new_shape, or the output's shape"),
    Mapping("SQUEEZE", Op.SQUEEZE, (tensor(0), derived("squeeze_dims")), types=ANY),
    Mapping("EXPAND_DIMS", Op.EXPAND_DIMS, (tensor(0), derived("axis_scalar")), types=ANY),
    Mapping("TRANSPOSE", Op.TRANSPOSE, (tensor(0), derived("int32_const1")), types=ANY),
    Mapping("PAD", Op.PAD, (tensor(0), derived("int32_const1")), types=FQ),
    Mapping("PADV2", Op.PAD_V2, (tensor(0), derived("int32_const1"), derived("pad_value")), types=FQ),
    Mapping("MIRROR_PAD", Op.GATHER, types=FQI, rewrite="mirror_pad",
            note="one GATHER per padded axis with constant indices (REFLECT / SYMMETRIC), exact; MIRROR_PAD itself "
                 "from AIDL v3",
            native=Native("MIRROR_PAD", (tensor(0), derived("int32_const1"), opt("mode")), FQI, "mirror_pad")),
    Mapping("STRIDED_SLICE", Op.STRIDED_SLICE,
            (tensor(0), derived("int32_const1"), derived("int32_const2"), derived("int32_const3"),
             opt("beginMask"), opt("endMask"), opt("shrinkAxisMask")), types=FQI, check="strided_slice"),
    Mapping("SLICE", Op.SLICE, (tensor(0), derived("int32_const1"), derived("int32_const2")), types=FQI),
    Mapping("GATHER", Op.GATHER, (tensor(0), opt("axis"), derived("int32_tensor1")), types=FQI | {F16},
            check="gather"),
    Mapping("SPLIT", Op.SPLIT, (tensor(1), derived("split_axis"), opt("numSplits")), types=FQI, type_input=1),
    Mapping("TILE", Op.TILE, (tensor(0), derived("int32_const1")), types=FQI),
    Mapping("SPACE_TO_DEPTH", Op.SPACE_TO_DEPTH, (tensor(0), opt("blockSize"), NHWC), types=FQ),
    Mapping("DEPTH_TO_SPACE", Op.DEPTH_TO_SPACE, (tensor(0), opt("blockSize"), NHWC), types=FQ),
    Mapping("SPACE_TO_BATCH_ND", Op.SPACE_TO_BATCH_ND, (tensor(0), derived("int32_const1"),
                                                        derived("int32_const2"), NHWC), types=FQ),
    Mapping("BATCH_TO_SPACE_ND", Op.BATCH_TO_SPACE_ND, (tensor(0), derived("int32_const1"), NHWC), types=FQ,
            check="zero_crops"),
    Mapping("PACK", Op.CONCATENATION, types=ANY, rewrite="pack",
            note="CONCATENATION along the axis, then RESHAPE to the packed shape (exact); PACK itself from AIDL v2",
            native=Native("PACK", (derived("pack_axis"), derived("all_inputs")), FQI | {F16}, "all_same_quant")),
    Mapping("UNPACK", Op.SPLIT, types=ANY, rewrite="unpack",
            note="SPLIT along the axis, then one RESHAPE per output (exact)"),
    Mapping("SHAPE", None, types=ANY, rewrite="shape",
            note="the input's static shape as a constant (refused when a dimension is unknown)"),
    Mapping("RANK", None, types=ANY, rewrite="rank", note="the static rank as a constant"),
    Mapping("FILL", Op.FILL, (derived("int32_const0"), derived("scalar1")), types=frozenset({F32, I32}), type_input=1),
    Mapping("ZEROS_LIKE", None, types=FQI, rewrite="zeros_like", note="a constant of zeros (static shape)"),
    # ---- reductions
    Mapping("MEAN", Op.MEAN, (tensor(0), derived("int32_const1"), opt("keepDims", "int")), types=FQ,
            rewrite="mean",
            note="quantized input and output of different scale / zero point (NNAPI needs them equal): "
                 "DEQUANTIZE, float MEAN, QUANTIZE -- TFLite's own float formula, equal up to float32 "
                 "rounding at .5 ties (within 1 step)"),
    Mapping("SUM", Op.REDUCE_SUM, (tensor(0), derived("int32_const1"), opt("keepDims", "bool", T.BOOL)),
            types=FLOAT, note="float32 (the NNAPI form); exact up to float32 summation order"),
    Mapping("REDUCE_PROD", Op.REDUCE_PROD, (tensor(0), derived("int32_const1"), opt("keepDims", "bool", T.BOOL)),
            types=FLOAT),
    Mapping("REDUCE_MAX", Op.REDUCE_MAX, (tensor(0), derived("int32_const1"), opt("keepDims", "bool", T.BOOL)),
            types=FQ, check="same_quant"),
    Mapping("REDUCE_MIN", Op.REDUCE_MIN, (tensor(0), derived("int32_const1"), opt("keepDims", "bool", T.BOOL)),
            types=FQ, check="same_quant"),
    Mapping("REDUCE_ANY", Op.REDUCE_ANY, (tensor(0), derived("int32_const1"), opt("keepDims", "bool", T.BOOL)),
            types=frozenset({BOOL})),
    Mapping("REDUCE_ALL", Op.REDUCE_ALL, (tensor(0), derived("int32_const1"), opt("keepDims", "bool", T.BOOL)),
            types=frozenset({BOOL})),
    # ---- resize / normalization / softmax
    Mapping("RESIZE_BILINEAR", Op.RESIZE_BILINEAR,
            (tensor(0), derived("out_w"), derived("out_h"), NHWC, opt("alignCorners", "bool", T.BOOL),
             opt("halfPixelCenters", "bool", T.BOOL)), types=FQ,
            note="output size from the (static) output tensor, as the delegate does"),
    Mapping("RESIZE_NEAREST_NEIGHBOR", Op.RESIZE_NEAREST_NEIGHBOR,
            (tensor(0), derived("out_w"), derived("out_h"), NHWC, opt("alignCorners", "bool", T.BOOL),
             opt("halfPixelCenters", "bool", T.BOOL)), types=FQ),
    Mapping("SOFTMAX", Op.SOFTMAX, (tensor(0), opt("beta", "float", T.FLOAT32)), types=FQ,
            note="over the last axis; quantized output q(1/256, 0) / q(1/256, -128)"),
    Mapping("LOG_SOFTMAX", Op.LOG_SOFTMAX, (tensor(0), const(1.0, T.FLOAT32), const(-1)), types=FLOAT),
    Mapping("L2_NORMALIZATION", Op.L2_NORMALIZATION, (tensor(0),), types=FQ, check="no_act"),
    Mapping("LOCAL_RESPONSE_NORMALIZATION", Op.LOCAL_RESPONSE_NORMALIZATION,
            (tensor(0), opt("radius"), opt("bias", "float", T.FLOAT32), opt("alpha", "float", T.FLOAT32),
             opt("beta", "float", T.FLOAT32)), types=FLOAT),
    # ---- quantization
    Mapping("QUANTIZE", Op.QUANTIZE, (tensor(0),), types=FQ, check="quantize", rewrite="requantize",
            note="float32 -> uint8/int8; quantized -> quantized (no NNAPI 1.3 form) as DEQUANTIZE + QUANTIZE, "
                 "TFLite's real-valued result up to float32 rounding at .5 ties (within 1 step)"),
    Mapping("DEQUANTIZE", Op.DEQUANTIZE, (tensor(0),), types=frozenset({U8, I8, F16}),
            note="a constant input (float16 or quantized weights) is folded into a float32 constant; a "
                 "float16 activation is CAST to float32 (exact)"),
    # ---- lookups
    Mapping("EMBEDDING_LOOKUP", Op.EMBEDDING_LOOKUP, (tensor(0), tensor(1)), types=frozenset({I32})),
    Mapping("HASHTABLE_LOOKUP", Op.HASHTABLE_LOOKUP, (tensor(0), tensor(1), tensor(2)), types=frozenset({I32})),
    # ---- control flow (referenced subgraphs)
    Mapping("IF", Op.IF, types=frozenset({BOOL}), rewrite="if",
            note="then / else subgraphs become Model.referenced subgraphs (SUBGRAPH operands)"),
    Mapping("WHILE", Op.WHILE, types=ANY, rewrite="while",
            note="cond / body subgraphs referenced; every loop variable loop-carried"),
    # ---- recurrent (state tensors are TFLite variables: zero-initialised HAL constants for one invocation)
    Mapping("RNN", Op.RNN, (tensor(0), tensor(1), tensor(2), tensor(3), tensor(4), cell_act()), outputs=(-1, 0),
            types=FLOAT, check="float_weights1",
            note="HAL outputs (hidden_state_out, output); the state input is the zero variable"),
    Mapping("UNIDIRECTIONAL_SEQUENCE_RNN", Op.UNIDIRECTIONAL_SEQUENCE_RNN,
            (tensor(0), tensor(1), tensor(2), tensor(3), tensor(4), cell_act(), opt("timeMajor", "int")),
            types=FLOAT, check="float_weights1"),
    Mapping("SVDF", Op.SVDF, (tensor(0), tensor(1), tensor(2), tensor(3, optional=True), tensor(4), opt("rank"),
                              cell_act()), outputs=(-1, 0), types=FLOAT, check="float_weights1",
            note="HAL outputs (state_out, output)"),
    Mapping("LSTM", Op.LSTM, _LSTM_ARGS + (tensor(18), tensor(19), cell_act(), opt("cellClip", "float", T.FLOAT32),
                                           opt("projClip", "float", T.FLOAT32)) +
            tuple(tensor(i, optional=True) for i in range(20, 24)),
            outputs=(-1, -1, -1, 0), types=FLOAT, check="lstm",
            note="full kernel (20 or 24 inputs), float32: HAL outputs (scratch, output_state, cell_state, "
                 "output); TFLite inputs 18/19 (state variables) are the HAL's 18/19"),
    Mapping("BIDIRECTIONAL_SEQUENCE_RNN", Op.BIDIRECTIONAL_SEQUENCE_RNN,
            tuple(tensor(i, optional=i >= 9) for i in range(12)) +
            (cell_act(), opt("timeMajor", "bool", T.BOOL), opt("mergeOutputs", "bool", T.BOOL)),
            types=FLOAT, check="float_weights1",
            note="TFLite's 12 inputs in NNAPI's order (forward, backward, auxiliary); outputs fw[, bw]"),
    Mapping("BIDIRECTIONAL_SEQUENCE_LSTM", Op.BIDIRECTIONAL_SEQUENCE_LSTM,
            tuple(tensor(i, optional=True) for i in range(48)) +
            (cell_act(), opt("cellClip", "float", T.FLOAT32), opt("projClip", "float", T.FLOAT32),
             opt("mergeOutputs", "bool", T.BOOL), opt("timeMajor", "bool", T.BOOL)) +
            tuple(tensor(i, optional=True) for i in range(48, 56)),
            types=FLOAT, check="float_weights2",
            note="TFLite's 48 inputs in NNAPI's order (no layer normalization in TFLite's form: 8 omitted "
                 "HAL inputs); outputs fw[, bw]"),
    Mapping("LSH_PROJECTION", Op.LSH_PROJECTION, (tensor(0), tensor(1), tensor(2, optional=True), opt("type", "lsh")),
            types=FQI | {F16}, type_input=1,
            note="TFLite SPARSE (1) is NNAPI's fixed SPARSE (3), DENSE (2) is DENSE"),
    Mapping("SPLIT_V", Op.SLICE, types=ANY, rewrite="split_v", note="one SLICE per output (exact)"),
    Mapping("BROADCAST_TO", Op.TILE, types=FQI, rewrite="broadcast_to",
            note="RESHAPE to the output rank, then TILE (exact)"),
    Mapping("REVERSE_V2", Op.GATHER, types=FQI, rewrite="reverse",
            note="one GATHER per reversed axis with constant reversed indices (exact); REVERSE itself (one axis) "
                 "from AIDL v3",
            native=Native("REVERSE", (tensor(0), derived("reverse_axis")), FQI, "one_axis")),
    Mapping("BATCH_MATMUL", None, types=frozenset({F32, I8}),
            note="BATCH_MATMUL itself from AIDL v2 (NNAPI feature level 6); none before",
            native=Native("BATCH_MATMUL", (tensor(0), tensor(1), opt("adjX", "bool", T.BOOL),
                                           opt("adjY", "bool", T.BOOL)), frozenset({F32, I8}), "batch_matmul")),
    Mapping("RANGE", None, types=frozenset({I32, F32}), rewrite="range",
            note="constant start / limit / delta: the sequence as a constant (refused otherwise)"),
    Mapping("ADD_N", Op.ADD, types=frozenset({F32, I32}), rewrite="add_n",
            note="a chain of ADDs in TFLite's summation order (exact)"),
    Mapping("UNIDIRECTIONAL_SEQUENCE_LSTM", Op.UNIDIRECTIONAL_SEQUENCE_LSTM,
            _LSTM_ARGS + (tensor(18), tensor(19), cell_act(), opt("cellClip", "float", T.FLOAT32),
                          opt("projClip", "float", T.FLOAT32), opt("timeMajor", "bool", T.BOOL)) +
            tuple(tensor(i, optional=True) for i in range(20, 24)),
            types=FLOAT, check="lstm", note="float32, 20 or 24 inputs"),
)

BY_BUILTIN: dict[str, Mapping] = {m.builtin: m for m in MAPPINGS}
assert len(BY_BUILTIN) == len(MAPPINGS), "one entry per TFLite operator"

# HAL -> TFLite direction: the direct (one-operation, non-rewrite) entries per HAL operation type
BY_HAL: dict[OperationType, list[Mapping]] = {}
for _m in MAPPINGS:
    if _m.hal is not None and not _m.rewrite:
        BY_HAL.setdefault(_m.hal, []).append(_m)

# TFLite operators refused with a fixed reason (besides every operator without an entry)
REFUSED: dict[str, str] = {
    "DENSIFY": "sparse weights need densifying at load; not implemented (NNAPI has no sparse tensors)",
    "VAR_HANDLE": "resource variables have no NNAPI 1.3 form",
    "READ_VARIABLE": "resource variables have no NNAPI 1.3 form",
    "ASSIGN_VARIABLE": "resource variables have no NNAPI 1.3 form",
    "CALL_ONCE": "initialisation subgraphs (resource variables) have no NNAPI 1.3 form",
    "GELU": "no NNAPI 1.3 operation computes GELU's erf exactly",
    "CUSTOM": "custom operator",
    "FLOOR_DIV": "no NNAPI 1.3 operation divides with flooring",
    "FLOOR_MOD": "no NNAPI 1.3 operation computes a floored modulo",
    "NON_MAX_SUPPRESSION_V4": "NNAPI's BOX_WITH_NMS_LIMIT has other semantics (scores, classes, soft NMS)",
    "NON_MAX_SUPPRESSION_V5": "NNAPI's BOX_WITH_NMS_LIMIT has other semantics (scores, classes, soft NMS)",
}

PADDING = {0: 1, 1: 2}  # TFLite Padding SAME/VALID -> NNAPI PADDING_SAME / PADDING_VALID
ACTIVATIONS = {0: 0, 1: 1, 2: 2, 3: 3}  # NONE, RELU, RELU_N1_TO_1 (RELU1), RELU6; TANH / SIGN_BIT have no form


def mapped_builtins() -> list[str]:
    """Every TFLite operator the table maps (directly or by a rewrite)."""
    return sorted(BY_BUILTIN)

# HAL -> TFLite direction: the builtin options table each lowered operator's ``option`` Args fill
# (the schema's ``BuiltinOptions`` member; operators without options need none)
OPTIONS: dict[str, str] = {
    "ADD": "AddOptions", "SUB": "SubOptions", "MUL": "MulOptions", "DIV": "DivOptions",
    "CONV_2D": "Conv2DOptions", "DEPTHWISE_CONV_2D": "DepthwiseConv2DOptions",
    "FULLY_CONNECTED": "FullyConnectedOptions", "AVERAGE_POOL_2D": "Pool2DOptions", "MAX_POOL_2D": "Pool2DOptions",
    "L2_POOL_2D": "Pool2DOptions", "CONCATENATION": "ConcatenationOptions", "RESHAPE": "ReshapeOptions",
    "SOFTMAX": "SoftmaxOptions", "SPACE_TO_DEPTH": "SpaceToDepthOptions", "DEPTH_TO_SPACE": "DepthToSpaceOptions",
    "PAD": "PadOptions", "TRANSPOSE": "TransposeOptions", "MAXIMUM": "MaximumMinimumOptions",
    "MINIMUM": "MaximumMinimumOptions", "HARD_SWISH": "HardSwishOptions", "DEQUANTIZE": "DequantizeOptions",
    "QUANTIZE": "QuantizeOptions", "MEAN": "ReducerOptions", "L2_NORMALIZATION": "L2NormOptions",
    "LOCAL_RESPONSE_NORMALIZATION": "LocalResponseNormalizationOptions", "SPACE_TO_BATCH_ND": "SpaceToBatchNDOptions",
    "BATCH_TO_SPACE_ND": "BatchToSpaceNDOptions", "STRIDED_SLICE": "StridedSliceOptions", "SLICE": "SliceOptions",
    "RESIZE_BILINEAR": "ResizeBilinearOptions", "RESIZE_NEAREST_NEIGHBOR": "ResizeNearestNeighborOptions",
    "SPLIT": "SplitOptions", "TRANSPOSE_CONV": "TransposeConvOptions", "SQUEEZE": "SqueezeOptions",
    "ARG_MAX": "ArgMaxOptions", "ARG_MIN": "ArgMinOptions", "SUM": "ReducerOptions", "REDUCE_PROD": "ReducerOptions",
    "REDUCE_MAX": "ReducerOptions", "REDUCE_MIN": "ReducerOptions", "REDUCE_ANY": "ReducerOptions",
    "REDUCE_ALL": "ReducerOptions", "GATHER": "GatherOptions", "LSH_PROJECTION": "LSHProjectionOptions",
}
# The options table the importer reads for each operator (an operator carrying another type of options
# is refused rather than read through a field of the same name)
READ_OPTIONS: dict[str, str] = {
    **OPTIONS, "IF": "IfOptions", "WHILE": "WhileOptions", "PACK": "PackOptions", "UNPACK": "UnpackOptions",
    "MIRROR_PAD": "MirrorPadOptions", "LEAKY_RELU": "LeakyReluOptions", "RNN": "RNNOptions",
    "BATCH_MATMUL": "BatchMatMulOptions",
    "UNIDIRECTIONAL_SEQUENCE_RNN": "SequenceRNNOptions", "SVDF": "SVDFOptions", "LSTM": "LSTMOptions",
    "BIDIRECTIONAL_SEQUENCE_RNN": "BidirectionalSequenceRNNOptions",
    "BIDIRECTIONAL_SEQUENCE_LSTM": "BidirectionalSequenceLSTMOptions",
    "UNIDIRECTIONAL_SEQUENCE_LSTM": "UnidirectionalSequenceLSTMOptions",
}

# (inputs at least, outputs at least, outputs at most or None) where the Args alone do not say it
_ARITY: dict[str, tuple[int, int, Optional[int]]] = {
    "SQUARED_DIFFERENCE": (2, 1, 1), "SELECT_V2": (3, 1, 1), "Convolution2DTransposeBias": (3, 1, 1),
    "TFLite_Detection_PostProcess": (3, 4, 4), "MIRROR_PAD": (2, 1, 1), "PACK": (1, 1, 1), "UNPACK": (1, 1, None),
    "SHAPE": (1, 1, 1), "RANK": (1, 1, 1), "ZEROS_LIKE": (1, 1, 1), "IF": (1, 1, None), "WHILE": (1, 1, None),
    "SPLIT": (2, 1, None), "TOPK_V2": (2, 2, 2), "HASHTABLE_LOOKUP": (3, 2, 2), "BIDIRECTIONAL_SEQUENCE_RNN": (9, 1, 2),
    "BIDIRECTIONAL_SEQUENCE_LSTM": (48, 1, 2), "SPLIT_V": (3, 1, None), "BROADCAST_TO": (2, 1, 1),
    "REVERSE_V2": (2, 1, 1), "RANGE": (3, 1, 1), "ADD_N": (1, 1, 1), "QUANTIZE": (1, 1, 1), "DEQUANTIZE": (1, 1, 1),
    "BATCH_TO_SPACE_ND": (3, 1, 1), "BATCH_MATMUL": (2, 1, 1),
}
# derived HAL inputs: how many TFLite inputs each reads (a trailing digit n: input n)
_DERIVED_INPUTS = {"bias": 2, "tconv_bias": 3, "depth_multiplier": 2, "all_inputs": 1, "reshape_shape": 1,
                   "squeeze_dims": 1, "axis_scalar": 2, "k_scalar": 2, "split_axis": 2, "pad_value": 3,
                   "leaky_alpha": 1, "pack_axis": 1, "reverse_axis": 2}


def arity(mp: Mapping) -> tuple[int, int, Optional[int]]:
    """(TFLite inputs at least, outputs at least, outputs at most or None) an operator needs for ``mp``."""
    if mp.builtin in _ARITY:
        return _ARITY[mp.builtin]
    n_in = 0
    for a in mp.inputs:
        if a.kind == "tensor" and not a.optional:
            n_in = max(n_in, a.index + 1)
        elif a.kind == "derived":
            base = a.name.rstrip("0123456789")
            n_in = max(n_in, _DERIVED_INPUTS.get(base, 0), int(a.name[len(base):]) + 1 if base != a.name else 0)
    if mp.outputs is not None:
        return n_in, max(mp.outputs) + 1, None
    return n_in, 1, 1


PADDING_TO_TFLITE = {v: k for k, v in PADDING.items()}
ACTIVATIONS_TO_TFLITE = {v: k for k, v in ACTIVATIONS.items()}
