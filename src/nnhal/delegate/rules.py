"""The NNAPI delegate's per-operator rules (``NNAPIDelegateKernel::Validate``
in TFLite's ``delegates/nnapi/nnapi_delegate.cc``), as one table.

Each TFLite builtin the delegate knows has a :class:`Rule`: the highest op
version it takes (``ExpectMaxOpVersion`` / ``ExpectOpVersion``; MUL takes a
higher one when an accelerator is named), the first Android API level
(``ExpectMinAndroidSdkVersion``), and its other conditions as
:class:`Check` entries (input types per API level, ranks, constant inputs,
scales, options).  Every rule and check carries the line of the delegate's
source it comes from (``SOURCE``, the same function in TensorFlow's
``tensorflow/lite/delegates/nnapi/nnapi_delegate.cc``), and its failure
message is the delegate's own.  Builtins without a rule, and every custom
operator, are "Unsupported operation type." as in the switch's ``default``.

Levels: a rule compares the level ``Validate`` is called with (its
``android_sdk_version`` argument; :mod:`nnhal.delegate.levels` says which:
the Android API level, or the runtime's feature level with target devices):
27 (NNAPI 1.0), 28 (1.1), 29 (1.2), 30 (1.3), then feature levels 5 (31),
6 (1000006), 7 (1000007) and 8 (1000008) (:data:`LEVELS`).  Feature level 6
adds BATCH_MATMUL, RESHAPE of int32 and PACK of int32 / uint8 along any axis;
level 7 MIRROR_PAD, REVERSE_V2 and quantized RSQRT; level 8 no rule.  An API
level of 31-35 used as the level itself (no target devices) is below feature
level 6, so none of those pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from nnhal.delegate.levels import LEVEL5, LEVEL6, LEVEL7, LEVEL8, NNAPI11, NNAPI12, NNAPI13, level_name
from nnhal.delegate.model import Graph, OperatorInfo, TensorInfo

SOURCE = ("google-ai-edge/LiteRT tflite/delegates/nnapi/nnapi_delegate.cc at "
          "f67457790c9c2ab67347d6fe53270e8d3df20868")
VALIDATE_LINE = 2358  # NNAPIDelegateKernel::Validate
LEVELS = (27, NNAPI11, NNAPI12, NNAPI13, LEVEL5, LEVEL6, LEVEL7, LEVEL8)  # every level Validate is called with

FLOAT = frozenset({"float32"})
QUANT = frozenset({"uint8", "int8"})
F_U8 = frozenset({"float32", "uint8"})
F_Q = FLOAT | QUANT
F_I32 = frozenset({"float32", "int32"})
F_Q_I32 = F_Q | {"int32"}


@dataclass
class Ctx:
    """What a check sees: the operator, the graph, the API level, whether an accelerator is named
    (``is_accelerator_specified``), and the float16 constants its inputs were remapped to."""

    op: OperatorInfo
    g: Graph
    api: int
    accel: bool
    remap: dict[int, int]

    def it(self, i: int) -> Optional[TensorInfo]:
        if i >= len(self.op.inputs) or self.op.inputs[i] < 0:
            return None
        k = self.op.inputs[i]
        return self.g.tensors[self.remap.get(k, k)]

    def ot(self, i: int) -> Optional[TensorInfo]:
        return self.g.tensors[self.op.outputs[i]] if i < len(self.op.outputs) and self.op.outputs[i] >= 0 else None

    def type(self, i: int) -> str:
        t = self.it(i)
        return t.type if t is not None else ""

    def rank(self, i: int) -> int:
        t = self.it(i)
        return t.rank if t is not None else 0

    def const(self, i: int) -> bool:
        """``allocation_type == kTfLiteMmapRo``: a constant of the file (not one densified at load)."""
        t = self.it(i)
        return t is not None and t.stored

    def opt(self, name: str, default: Any = 0) -> Any:
        o = self.op.options
        return getattr(o, name, default) if o is not None else default

    @property
    def n_in(self) -> int:
        return len(self.op.inputs)

    def hybrid(self) -> bool:
        """``IsHybridOperator``: float input, quantized weights."""
        b = self.op.builtin
        w = {"CONV_2D": 1, "FULLY_CONNECTED": 1, "LSTM": 2, "UNIDIRECTIONAL_SEQUENCE_LSTM": 2,
             "BIDIRECTIONAL_SEQUENCE_LSTM": 2, "UNIDIRECTIONAL_SEQUENCE_RNN": 1}.get(b)
        if w is None or (b == "LSTM" and self.n_in not in (20, 24)):
            return False
        return self.type(0) == "float32" and self.type(w) in QUANT

    def value(self, i: int) -> Any:
        return self.g.value(self.op.inputs[i])


@dataclass(frozen=True)
class Check:
    line: int
    message: str
    ok: Callable[[Ctx], bool]
    since: int = 0  # a branch taken from this level on (``if (android_sdk_version >= ...)``), 0: always
    until: int = 0  # a branch taken below this level, 0: always

    def applies(self, level: int) -> bool:
        return level >= self.since and (not self.until or level < self.until)


@dataclass(frozen=True)
class Rule:
    line: int  # the ``case`` line
    max_version: int = 0  # 0: no version check
    accel_max_version: int = 0  # a higher limit when an accelerator is named (MUL)
    version_line: int = 0
    min_api: int = 27
    api_line: int = 0
    checks: tuple[Check, ...] = ()
    accept: Optional[Callable[[Ctx], bool]] = None  # an early ``return true`` (DEQUANTIZE / DENSIFY)
    accept_line: int = 0


@dataclass(frozen=True)
class Failure:
    message: str
    line: int

    def __str__(self) -> str:
        return f"{self.message} (nnapi_delegate.cc:{self.line})"


def C(line: int, message: str, ok: Callable[[Ctx], bool], since: int = 0, until: int = 0) -> Check:
    return Check(line, message, ok, since, until)


def types_in(line: int, allowed: frozenset, i: int = 0, what: str = "") -> Check:
    names = ", ".join(sorted(allowed))
    return Check(line, what or f"Input type not in expected list {names}", lambda x: x.type(i) in allowed)


def is_float(line: int) -> Check:
    return Check(line, "Input should be Float", lambda x: x.type(0) in FLOAT)


def float_or_quant8(line: int) -> Check:
    return Check(line, "Input should be Float or Quant8", lambda x: x.type(0) in F_Q)


def float_or_uint8(line: int, before: int = NNAPI12) -> Check:
    return Check(line, "Input should be Float or UINT8", lambda x: x.api >= before or x.type(0) in F_U8)


def restricted_scales(line: int) -> Check:
    """``ExpectIsRestrictedScalesCompliant`` before NNAPI 1.2 for uint8 input."""
    def ok(x: Ctx) -> bool:
        if x.api >= NNAPI12 or x.type(0) != "uint8":
            return True
        i, f, o = x.it(0), x.it(1), x.ot(0)
        return i is not None and f is not None and o is not None and i.scale * f.scale < o.scale
    return Check(line, "When using NN API version 1.0 or 1.1, input_scale * filter_scale < output_scale.", ok)


def rank_le4(line: int, inputs: tuple[int, ...] = (0, 1), message: str = "Input rank must be <= 4") -> Check:
    return Check(line, message, lambda x: all(x.rank(i) <= 4 for i in inputs))


def no_act(line: int, message: str = "No activation function supported") -> Check:
    return Check(line, message, lambda x: int(x.opt("fusedActivationFunction", 0) or 0) == 0)


def int32_no_act(line: int) -> Check:
    return Check(line, "No activation function supported",
                 lambda x: x.type(0) != "int32" or int(x.opt("fusedActivationFunction", 0) or 0) == 0)


def add_mul_types(line13: int, line_old: int) -> tuple[Check, ...]:
    return (Check(line13, "Input should be Float, Quant8, or Int32", lambda x: x.api < NNAPI13 or x.type(0) in F_Q_I32),
            Check(line_old, "Input should be Float or Quant8", lambda x: x.api >= NNAPI13 or x.type(0) in F_Q))


def api_at_least(line: int, level: int, message: str) -> Check:
    return Check(line, message, lambda x: x.api >= level)


def _no_zero_dims(x: Ctx) -> bool:
    t = x.it(0)
    return t is not None and all(d != 0 for d in t.shape)


def _crops_zero(x: Ctx) -> bool:
    t = x.it(2)
    if t is None or not t.const or t.type != "int32":
        return False
    v = x.value(2).reshape(-1)
    return v.size == 4 and not v.any()


def _int64_axis_ok(x: Ctx) -> bool:
    t = x.it(1)
    if t is None:
        return False
    if t.type == "int64":
        if not t.const:
            return False
        v = int(x.value(1).reshape(-1)[0])
        return -2**31 <= v < 2**31
    return t.type == "int32"


def _split_v_sizes(x: Ctx) -> bool:
    s, a = x.it(1), x.it(2)
    if not (s is not None and s.type == "int32" and s.rank == 1 and s.const and a is not None and a.type == "int32"
            and a.const):
        return True  # NOTE: the delegate checks the sizes only when both are constant int32 (the checks above)
    sizes = [int(v) for v in x.value(1).reshape(-1)]
    if any(v == 0 for v in sizes):
        return False
    if -1 in sizes:
        t = x.it(0)
        axis = int(x.value(2).reshape(-1)[0])
        axis = axis + t.rank if axis < 0 else axis
        return t.shape[axis] - sum(v for v in sizes if v != -1) != 0
    return True


def _fill_dims(x: Ctx) -> bool:
    t = x.it(0)
    if t is None or not t.const:
        return True
    v = x.value(0).reshape(-1)
    return t.shape[0] != 0 if t.shape else v.size != 0


def _fill_int64(x: Ctx) -> bool:
    t = x.it(0)
    if t is None or not t.const or t.type != "int64":
        return True
    v = x.value(0).reshape(-1)
    return bool(((v >= -2**31) & (v < 2**31)).all())


def _reshape_rank(x: Ctx) -> bool:
    if x.n_in != 1:
        return True
    ns = x.opt("newShape", None)
    shape = [] if ns is None else [int(v) for v in ns]
    return not (len(shape) == 0 or (len(shape) == 1 and shape[0] == 0))


def _concat_same_quant(x: Ctx) -> bool:
    if x.type(0) != "uint8" or x.api >= NNAPI12:
        return True
    first = x.it(0)
    return all((t := x.it(i)) is not None and t.scale == first.scale and t.zero_point == first.zero_point
               for i in range(1, x.n_in))


def _conv_grouped(x: Ctx) -> bool:
    if x.api >= NNAPI12:
        return True
    i, f = x.it(0), x.it(1)
    return i is not None and f is not None and i.rank == 4 and f.rank == 4 and i.shape[3] == f.shape[3]


def _per_tensor_filter(x: Ctx) -> bool:
    f = x.it(1)
    return x.api >= NNAPI12 or f is None or len(f.scales) <= 1


def _output_types(allowed: frozenset) -> Callable[[Ctx], bool]:
    return lambda x: (x.ot(0) is not None and x.ot(0).type in allowed)


def _dilation_one(x: Ctx) -> bool:
    return int(x.opt("dilationWFactor", 1) or 1) == 1 and int(x.opt("dilationHFactor", 1) or 1) == 1


def _count(a: Any) -> int:
    """The length of an options vector (None, a list or a numpy array)."""
    return 0 if a is None else len(a)


def _broadcast_batch_matmul(x: Ctx) -> bool:
    """``IsBroadcastBatchMatMul`` (nnapi_delegate.cc:371): ranks differ, or a batch dimension does."""
    a, b = x.it(0), x.it(1)
    return a is None or b is None or a.rank != b.rank or a.shape[:-2] != b.shape[:-2]


def _lstm_basic(x: Ctx) -> bool:
    return x.n_in == 5


_OP_VERSION = "OP Version higher than {}"
_COMPARE = frozenset({"float32", "uint8", "int8", "bool", "int32"})

RULES: dict[str, Rule] = {
    "ADD": Rule(2372, 2, version_line=2373, checks=add_mul_types(2375, 2383) + (
        int32_no_act(2377), rank_le4(2389))),
    "ARG_MAX": Rule(2393, 2, version_line=2395, min_api=NNAPI12, api_line=2397, checks=(
        types_in(2401, frozenset({"float16", "float32", "int32", "uint8", "int8"})),
        C(2406, "NNAPI only supports axis as int32. If the axis type is int64 and constant we can convert it to "
                "int32 if the value isn't too large.", _int64_axis_ok),
        C(2423, "NNAPI only supports int32 output.", lambda x: int(x.opt("outputType", 2)) == 2))),
    "MUL": Rule(2434, 2, accel_max_version=3, version_line=2436, checks=add_mul_types(2441, 2449) + (
        int32_no_act(2443), rank_le4(2455))),
    "AVERAGE_POOL_2D": Rule(2459, 2, version_line=2460, checks=(
        float_or_quant8(2461),
        C(2466, "Large filter window would overflow on the reference CPU path",
          lambda x: x.type(0) not in QUANT or x.accel
          or int(x.opt("filterWidth", 1)) * int(x.opt("filterHeight", 1)) <= 256))),
    "MAX_POOL_2D": Rule(2473, 2, version_line=2474, checks=(float_or_quant8(2475),)),
    "L2_POOL_2D": Rule(2477, 1, version_line=2478, checks=(
        is_float(2479),
        C(2483, "Before NNAPI 1.2 fused activation for l2_pool may not be supported.",
          lambda x: x.api >= NNAPI12 or int(x.opt("fusedActivationFunction", 0)) == 0))),
    "CONV_2D": Rule(2490, 5, version_line=2491, checks=(
        C(2495, "Hybrid operators not supported before NNAPI 1.2", lambda x: x.api >= NNAPI12 or not x.hybrid()),
        float_or_uint8(2498),
        C(2504, "Per-channel quantized convolution not supported before NNAPI 1.2.", _per_tensor_filter),
        restricted_scales(2514),
        C(2518, "Conv2D with omitted bias not supported", lambda x: x.n_in == 3 and x.it(2) is not None),
        C(2523, "NNAPI supports dilated Conv2D since NNAPI 1.2.", lambda x: x.api >= NNAPI12 or _dilation_one(x)),
        C(2528, "Grouped convolution not supported before NNAPI < 1.2", _conv_grouped))),
    "DEPTHWISE_CONV_2D": Rule(2534, 3, version_line=2535, checks=(
        float_or_uint8(2538),
        restricted_scales(2542),
        C(2547, "dilation_width_factor and dilation_height_factor expected to be equal to 1",
          lambda x: x.api >= NNAPI12 or _dilation_one(x)))),
    "FULLY_CONNECTED": Rule(2555, 5, version_line=2556, checks=(
        C(2558, "Unsupported output of type kTfLiteInt16", lambda x: x.ot(0) is not None and x.ot(0).type != "int16"),
        C(2562, "Hybrid operators not supported before NNAPI 1.2", lambda x: x.api >= NNAPI12 or not x.hybrid()),
        float_or_uint8(2565),
        restricted_scales(2570),
        C(2575, f"Android sdk version less than {NNAPI13} (keep_num_dims)",
          lambda x: not x.opt("keepNumDims", False) or x.api >= NNAPI13))),
    "HARD_SWISH": Rule(2579, checks=(float_or_quant8(2583),)),
    "SOFTMAX": Rule(2585, 2, version_line=2586, checks=(
        float_or_quant8(2587),
        C(2589, "Output type should be one of kTfLiteFloat32, kTfLiteUInt8, kTfLiteInt8.", _output_types(F_Q)),
        rank_le4(2596, (0,), "Input rank should be <= 4"),
        C(2600, "Before API level 29 only 2D and 4D input tensors were supported.",
          lambda x: x.api >= NNAPI12 or x.rank(0) in (2, 4)))),
    "RESHAPE": Rule(2607, 1, version_line=2608, checks=(
        C(2610, "Input should be Float or Quant8", lambda x: x.type(0) in F_Q, until=LEVEL6),
        C(2612, "Input should be Float, Quant8, or Int32", lambda x: x.type(0) in F_Q_I32, since=LEVEL6),
        rank_le4(2615, (0,), "Input rank should be <= 4"),
        C(2619, "Output rank should be <= 4", lambda x: x.ot(0) is not None and x.ot(0).rank <= 4),
        C(2623, "The shape input tensor must be constant.", lambda x: x.n_in < 2 or x.const(1)),
        C(2638, "New shape rank should be > 0", _reshape_rank))),
    "RESIZE_BILINEAR": Rule(2643, 3, version_line=2644, checks=(
        C(2647, "Input should have rank 4", lambda x: x.rank(0) == 4),
        float_or_quant8(2650),
        C(2651, "Expected at least 2 inputs", lambda x: x.n_in >= 2),
        C(2655, "The size input tensor must be constant.", lambda x: x.n_in < 2 or x.const(1)),
        C(2661, "Require width == height due to driver differences in NNAPI < 1.2",
          lambda x: x.api >= NNAPI12 or (x.ot(0) is not None and x.ot(0).rank == 4
                                         and x.ot(0).shape[1] == x.ot(0).shape[2])),
        C(2670, "NNAPI does not support align_corners == true.", lambda x: x.api > NNAPI12 or not x.opt("alignCorners")),
        C(2673, "NNAPI does not support half_pixel_centers == true.",
          lambda x: x.api > NNAPI12 or not x.opt("halfPixelCenters")),
        C(2678, "NNAPI 1.0 & 1.1 only supports float input.", lambda x: x.api >= NNAPI12 or x.type(0) == "float32"))),
    "RESIZE_NEAREST_NEIGHBOR": Rule(2683, 3, version_line=2684, min_api=NNAPI12, api_line=2685, checks=(
        float_or_quant8(2687),
        C(2688, "Expected at least 2 inputs", lambda x: x.n_in >= 2),
        C(2692, "The size input tensor must be constant.", lambda x: x.n_in < 2 or x.const(1)),
        C(2700, "NNAPI does not support align_corners == true.", lambda x: x.api > NNAPI12 or not x.opt("alignCorners")),
        C(2703, "NNAPI does not support half_pixel_centers == true.",
          lambda x: x.api > NNAPI12 or not x.opt("halfPixelCenters")))),
    "SQUEEZE": Rule(2708, 1, version_line=2709, min_api=NNAPI11, api_line=2710, checks=(
        C(2714, "NNAPI 1.1 does not support null squeeze_dims properly.",
          lambda x: x.api != NNAPI11 or _count(x.opt("squeezeDims", None)) != 0),)),
    "UNIDIRECTIONAL_SEQUENCE_LSTM": Rule(2720, 2, version_line=2721, min_api=NNAPI12, api_line=2722, checks=(
        C(2725, "Hybrid version of this op is not supported by NN API.", lambda x: not x.hybrid()),
        C(2729, "Supporting only operation with 20 or 24 inputs", lambda x: x.n_in in (20, 24)))),
    "L2_NORMALIZATION": Rule(2733, 2, version_line=2734, checks=(
        C(2737, "Input should be Float", lambda x: x.api >= NNAPI12 or x.type(0) == "float32"),
        C(2740, "Expected 4 inputs", lambda x: x.api >= NNAPI12 or x.rank(0) == 4),
        no_act(2745, "Expected no activation"))),
    "LOCAL_RESPONSE_NORMALIZATION": Rule(2749, 1, version_line=2750),
    "LSH_PROJECTION": Rule(2752, 1, version_line=2753, checks=(
        C(2759, "NNAPI does not support sparse projection correctly pre-Q",
          lambda x: int(x.opt("type", 0)) != 1 or x.api >= NNAPI12),
        C(2763, " NNAPI does not support weights for sparse projects.",
          lambda x: int(x.opt("type", 0)) != 1 or x.n_in == 2))),
    "CONCATENATION": Rule(2769, 2, version_line=2770, checks=(
        no_act(2771),
        rank_le4(2775, (0,), "Input rank should be less than 4"),
        types_in(2780, frozenset({"float16", "float32", "uint8", "int8"})),
        C(2788, "NNAPI 1.0-1 only supported concatenating quantized tensor of the same scale and offset.",
          _concat_same_quant))),
    "DEQUANTIZE": Rule(2799, 2, version_line=2807, checks=(
        C(2813, "Input type not in expected list kTfLiteUInt8", lambda x: x.api >= NNAPI12 or x.type(0) == "uint8"),
        C(2815, "Input type not in expected list kTfLiteUInt8, kTfLiteInt8",
          lambda x: x.api < NNAPI12 or x.type(0) in QUANT),
        C(2820, "NN API supports int8 type since version 1.2 but only for symmetric quantization.",
          lambda x: not (x.api == NNAPI12 and x.type(0) == "int8") or x.it(0).zero_point == 0)),
        accept=lambda x: x.api >= NNAPI13 and x.type(0) == "float16" and not x.const(0), accept_line=2805),
    "DENSIFY": Rule(2828, checks=(C(2835, "DENSIFY is delegated only from API 30, of a constant", lambda x: False),),
                    accept=lambda x: x.api >= NNAPI13 and x.const(0), accept_line=2833),
    "FLOOR": Rule(2837, 1, version_line=2838),
    "RELU": Rule(2840, 2, version_line=2844, checks=(float_or_quant8(2845),)),
    "RELU_N1_TO_1": Rule(2841, 2, version_line=2844, checks=(float_or_quant8(2845),)),
    "RELU6": Rule(2842, 2, version_line=2844, checks=(float_or_quant8(2845),)),
    "LOGISTIC": Rule(2843, 2, version_line=2844, checks=(float_or_quant8(2845),)),
    "TANH": Rule(2847, 2, version_line=2848, checks=(
        C(2851, " NNAPI only support float tanh.",
          lambda x: x.type(0) == "float32" or (x.type(0) in QUANT and x.api >= NNAPI12)),)),
    "SUB": Rule(2857, 3, version_line=2858, checks=(
        C(2861, "NNAPI only support float sub.",
          lambda x: (x.api >= NNAPI11 and x.type(0) == "float32") or (x.api >= NNAPI12 and x.type(0) in QUANT)
          or (x.api >= NNAPI13 and x.type(0) == "int32")),
        int32_no_act(2870), rank_le4(2879))),
    "DIV": Rule(2883, 1, version_line=2884, min_api=NNAPI11, api_line=2885, checks=(
        C(2887, "NNAPI only support float div.", lambda x: x.type(0) == "float32"), rank_le4(2894))),
    "UNIDIRECTIONAL_SEQUENCE_RNN": Rule(2932, 1, version_line=2933, min_api=NNAPI12, api_line=2934, checks=(
        C(2936, "Hybrid version of this op is not supported by NN API.", lambda x: not x.hybrid()),)),
    "SPACE_TO_BATCH_ND": Rule(2940, 2, version_line=2941, min_api=NNAPI11, api_line=2942),
    "BATCH_TO_SPACE_ND": Rule(2945, 2, version_line=2946, min_api=NNAPI11, api_line=2947, checks=(
        C(2951, "All crops should be 0.", _crops_zero),)),
    "STRIDED_SLICE": Rule(2956, 2, version_line=2957, min_api=NNAPI11, api_line=2959, checks=(float_or_quant8(2958),)),
    "TRANSPOSE": Rule(2962, 2, version_line=2963, min_api=NNAPI11, api_line=2964, checks=(
        C(2969, "Dynamically-sized tensors not supported.", lambda x: x.n_in > 1 and x.const(1)),)),
    "RSQRT": Rule(2984, 2, version_line=2985, min_api=NNAPI12, api_line=2986, checks=(
        C(2989, "Input should be Float", lambda x: x.type(0) in FLOAT, until=LEVEL7),
        C(2991, "Input should be Float or Quant8", lambda x: x.type(0) in F_Q, since=LEVEL7))),
    "SLICE": Rule(2994, 2, version_line=2995, min_api=NNAPI12, api_line=2996, checks=(
        types_in(3001, frozenset({"float32", "int32", "uint8", "int8"})),
        C(3003, "Begin type should be Int32", lambda x: x.type(1) == "int32"),
        C(3006, "Size type should be Int32", lambda x: x.type(2) == "int32"))),
    "TRANSPOSE_CONV": Rule(3017, 4, version_line=3018, min_api=NNAPI12, api_line=3019, checks=(
        C(3021, "Dynamically-sized tensors not supported.", lambda x: x.n_in > 1 and x.const(0) and x.const(1)),)),
    "RNN": Rule(3035, 1, version_line=3036, checks=(
        C(3037, "Expected 5 input", lambda x: x.n_in == 5),
        C(3041, "NNAPI only support float32 weights.", lambda x: x.n_in < 2 or x.type(1) == "float32"))),
    "SPACE_TO_DEPTH": Rule(3048, 2, version_line=3049, checks=(types_in(3052, frozenset({"float32", "uint8", "int8"})),)),
    "SVDF": Rule(3055, 1, version_line=3056, checks=(
        C(3057, "Expected input of rank 5", lambda x: x.n_in == 5),
        C(3061, "NNAPI only support float32 weights.", lambda x: x.n_in < 2 or x.type(1) == "float32"),
        api_at_least(3067, NNAPI11, "SVDF does not support rank > 1 on NNAPI 1.0."))),
    "LSTM": Rule(3075, 3, version_line=3076, checks=(
        api_at_least(3077, NNAPI11, "NNAPI 1.0 has a bug for optional tensors which would affect LSTM."),
        C(3082, "Hybrid operators not supported before NNAPI 1.2.", lambda x: x.api >= NNAPI12 or not x.hybrid()),
        C(3095, "Basic LSTM Kernels support only UINT8 weights", lambda x: not _lstm_basic(x) or x.type(2) == "uint8"),
        C(3101, "Invalid input quantization", lambda x: not _lstm_basic(x)
          or (x.it(0).scale == 1 / 128 and x.it(0).zero_point == 128)),
        C(3135, "LSTM with 24 inputs needs NNAPI 1.2", lambda x: _lstm_basic(x) or x.n_in != 24 or x.api >= NNAPI12),
        C(3140, "Weight has to be Float32 or UINT8 or INT8",
          lambda x: _lstm_basic(x) or x.type(4) in ({"float32", "uint8", "int8"} if x.api >= NNAPI13
                                                     else {"float32", "uint8"})))),
    "MEAN": Rule(3151, 2, version_line=3152, min_api=NNAPI11, api_line=3153, checks=(
        C(3156, "Expected Float32 or Quantized input",
          lambda x: x.api < NNAPI12 or x.type(0) == "float32" or x.type(0) in QUANT),
        C(3161, "Expected Float32 input", lambda x: x.api >= NNAPI12 or x.type(0) == "float32"),
        C(3165, "NNAPI does not support generating a scalar as output for MEAN.",
          lambda x: x.ot(0) is not None and x.ot(0).rank > 0),
        C(3169, "NNAPI does not support mean of a tensor with rank > 4", lambda x: x.rank(0) <= 4))),
    "EMBEDDING_LOOKUP": Rule(3173, 1, version_line=3174, checks=(
        C(3175, "NNAPI only support float32 values.", lambda x: x.type(1) == "float32"),)),
    "HASHTABLE_LOOKUP": Rule(3179, 1, version_line=3180, checks=(
        C(3181, "NNAPI only support float32 output.", lambda x: x.ot(0) is not None and x.ot(0).type == "float32"),)),
    "CAST": Rule(3206, 1, version_line=3207, min_api=NNAPI12, api_line=3208, checks=(
        C(3215, "Input type not in expected list kTfLiteFloat32, kTfLiteInt32, kTfLiteUInt8, kTfLiteInt8",
          lambda x: x.api < NNAPI13 or x.type(0) in F_Q_I32),
        C(3218, "Output type should be one of kTfLiteFloat32, kTfLiteInt32, kTfLiteUInt8, kTfLiteInt8.",
          lambda x: x.api < NNAPI13 or (x.ot(0) is not None and x.ot(0).type in F_Q_I32)),
        C(3226, "Input type not in expected list kTfLiteFloat32, kTfLiteInt32, kTfLiteUInt8",
          lambda x: x.api >= NNAPI13 or x.type(0) in {"float32", "int32", "uint8"}),
        C(3229, "Output type should be one of kTfLiteFloat32, kTfLiteInt32, kTfLiteUInt8.",
          lambda x: x.api >= NNAPI13 or (x.ot(0) is not None and x.ot(0).type in {"float32", "int32", "uint8"})))),
    "TILE": Rule(3246, 1, version_line=3247, min_api=NNAPI12, api_line=3248, checks=(
        types_in(3251, frozenset({"float32", "int8", "uint8", "int32"})),
        C(3255, "Multipliers should be Int32", lambda x: x.type(1) == "int32"))),
    "NEG": Rule(3283, 2, version_line=3284, min_api=NNAPI12, api_line=3285, checks=(types_in(3288, F_I32),)),
    "TOPK_V2": Rule(3290, 2, version_line=3291, min_api=NNAPI12, api_line=3292, checks=(
        types_in(3295, frozenset({"float32", "int32", "uint8", "int8"})),
        C(3298, "K param should be a constant of type Int32", lambda x: x.type(1) == "int32" and x.const(1)))),
    "SELECT": Rule(3303, 2, version_line=3304, min_api=NNAPI12, api_line=3305, checks=(
        types_in(3308, frozenset({"float32", "int32", "uint8", "int8"}), i=1),
        C(3314, "Condition and inputs tensors should have the same shape",
          lambda x: x.it(0) is not None and x.it(1) is not None and x.it(0).shape == x.it(1).shape))),
    "GATHER": Rule(3319, 2, version_line=3320, min_api=NNAPI12, api_line=3321, checks=(
        types_in(3326, frozenset({"float32", "float16", "int32", "uint8", "int8"})),
        C(3329, "Positions type should be one of kTfLiteInt32", lambda x: x.type(1) == "int32"),
        C(3332, "0-dimension args are not supported by NNAPI.", lambda x: x.rank(1) != 0))),
    "BIDIRECTIONAL_SEQUENCE_LSTM": Rule(3336, 1, version_line=3337, min_api=NNAPI12, api_line=3338, checks=(
        C(3340, "Hybrid version of this op is not supported by NN API.", lambda x: not x.hybrid()),)),
    "EXPAND_DIMS": Rule(3344, 1, version_line=3345, min_api=NNAPI12, api_line=3346, checks=(
        types_in(3349, frozenset({"float32", "float16", "int32", "uint8", "int8"})),
        C(3352, "NNAPI only supports constant int32 axis tensor.", lambda x: x.type(1) == "int32" and x.const(1)))),
    "SPLIT": Rule(3356, 3, version_line=3357, min_api=NNAPI12, api_line=3358, checks=(
        C(3363, "Input type not in expected list kTfLiteFloat32, kTfLiteUInt8, [kTfLiteInt8, ]kTfLiteInt32",
          lambda x: x.type(1) in (F_Q_I32 if x.api >= NNAPI13 else frozenset({"float32", "uint8", "int32"}))),
        C(3370, "NNAPI only supports constant int32 axis tensor.", lambda x: x.type(0) == "int32" and x.const(0)))),
    "SPLIT_V": Rule(3374, 2, version_line=3375, min_api=NNAPI13, api_line=3376, checks=(
        types_in(3382, F_Q_I32),
        C(3389, "NNAPI only supports constant int32 size_splits vector.",
          lambda x: x.type(1) == "int32" and x.rank(1) == 1 and x.const(1)),
        C(3393, "NNAPI only supports constant int32 axis tensor.", lambda x: x.type(2) == "int32" and x.const(2)),
        C(3397, "NNAPI only supports non-zero split sizes.", _split_v_sizes))),
    "LOG_SOFTMAX": Rule(3407, 1, version_line=3408, min_api=NNAPI12, api_line=3409, checks=(
        C(3412, "Input should be Float32.", lambda x: x.type(0) == "float32"),)),
    "QUANTIZE": Rule(3416, 2, version_line=3417, min_api=NNAPI12, api_line=3418, checks=(
        C(3421, "Value should be quantized or Float32.", lambda x: x.type(0) == "float32" or x.type(0) in QUANT),
        C(3427, "Quantization scale should be > 0.", lambda x: x.type(0) not in QUANT or x.it(0).scale > 0),
        C(3433, "Output should be kTfLiteUInt8.", lambda x: x.ot(0) is not None and x.ot(0).type in (
            QUANT if x.api >= NNAPI13 else {"uint8"})),
        C(3443, "Quantization scale should be > 0.", lambda x: x.ot(0) is not None and x.ot(0).scale > 0))),
    "REDUCE_ANY": Rule(3447, 2, version_line=3448, min_api=NNAPI12, api_line=3449, checks=(
        C(3451, "NNAPI does not support generating a scalar as output.", lambda x: x.ot(0) is not None
          and x.ot(0).rank != 0),)),
    "DEPTH_TO_SPACE": Rule(3468, checks=(types_in(3471, frozenset({"float32", "uint8", "int8"})),)),
    "ELU": Rule(3487, 1, version_line=3488, min_api=NNAPI13, api_line=3489, checks=(
        C(3492, "NNAPI only supports floating point input.", lambda x: x.type(0) == "float32"),)),
    "FILL": Rule(3496, 1, version_line=3497, min_api=NNAPI13, api_line=3498, checks=(
        C(3501, "NNAPI doesn't support dynamic dimensions tensor.", lambda x: x.const(0)),
        types_in(3504, frozenset({"int32", "int64"})),
        C(3506, "NNAPI doesn't support generating scalars from FILL", _fill_dims),
        C(3517, "NNAPI only supports int32 dimensions tensor. If the dimensions type is int64 and they are constant "
                "we can convert them to int32 if the value isn't too large.", _fill_int64),
        types_in(3526, frozenset({"float32", "int32", "int64"}), i=1))),
    "PACK": Rule(3540, 2, version_line=3541, min_api=NNAPI13, api_line=3542, checks=(
        C(3546, "Input type not in expected list kTfLiteInt32, kTfLiteFloat32, kTfLiteInt8, kTfLiteUInt8",
          lambda x: x.type(0) in F_Q_I32, since=LEVEL6),
        C(3549, "Input type not in expected list kTfLiteFloat32, kTfLiteInt8",
          lambda x: x.type(0) in {"float32", "int8"}, until=LEVEL6),
        C(3551, "NNAPI does not support axis being the last dimension",
          lambda x: int(x.opt("axis", 0)) != -1 and int(x.opt("axis", 0)) != x.rank(0), until=LEVEL6))),
    "UNPACK": Rule(3559, 2, version_line=3560, min_api=NNAPI13, api_line=3561, checks=(
        types_in(3564, frozenset({"float32", "uint8", "int8"})),
        C(3566, "NNAPI does not support unpacking a rank-1 tensor", lambda x: x.rank(0) > 1),
        C(3569, "NNAPI does not support unpacking a tensor with rank > 4", lambda x: x.rank(0) <= 4),
        C(3575, "NNAPI does not support axis being the last dimension",
          lambda x: int(x.opt("axis", 0)) != -1 and int(x.opt("axis", 0)) != x.rank(0) - 1))),
    "SQUARED_DIFFERENCE": Rule(3581, 2, version_line=3582, min_api=NNAPI11, api_line=3583, checks=(
        C(3587, "Input type not in expected list (float32; uint8 from API 29; int8, int32 from API 30)",
          lambda x: x.type(0) in (F_Q_I32 if x.api >= NNAPI13 else F_U8 if x.api >= NNAPI12 else FLOAT)),
        rank_le4(3598, message="NNAPI does not support input rank greater than 4"))),
    "BATCH_MATMUL": Rule(3602, 2, version_line=3603, min_api=LEVEL6, api_line=3604, checks=(
        C(3608, "Input type not in expected list kTfLiteFloat32, kTfLiteInt32, kTfLiteInt8",
          lambda x: x.type(0) in {"float32", "int32", "int8"}),
        C(3610, "NNAPI does not support hybrid batch matmul", lambda x: x.type(0) == x.type(1)),
        C(3613, "NNAPI does not support input rank greater than 4 or less than 2", lambda x: 2 <= x.rank(0) <= 4),
        C(3617, "NNAPI does not support broadcast batch matmul", lambda x: not _broadcast_batch_matmul(x)))),
    "MIRROR_PAD": Rule(3621, 2, version_line=3622, min_api=LEVEL7, api_line=3623, checks=(
        C(3625, "Input should be Float, Quant8, or Int32", lambda x: x.type(0) in F_Q_I32),
        C(3626, "Unknown padding mode", lambda x: int(x.opt("mode", 0)) in (0, 1)),
        C(3633, "NN API pad ops do not support input tensors with no elements", _no_zero_dims),
        C(3637, "Expecting 2 inputs", lambda x: x.n_in == 2))),
    "REVERSE_V2": Rule(3641, 3, version_line=3642, min_api=LEVEL7, api_line=3643, checks=(
        C(3645, "Input should be Float, Quant8, or Int32", lambda x: x.type(0) in F_Q_I32),
        C(3646, "Expecting 2 inputs", lambda x: x.n_in == 2))),
}

_PAD = Rule(2898, 2, version_line=2900, min_api=NNAPI11, api_line=2902, checks=(
    float_or_quant8(2901),
    C(2907, "NN API pad ops do not support input tensors with no elements", _no_zero_dims),
    C(2912, "Expecting at least 2 inputs", lambda x: x.n_in >= 2),
    C(2918, "Specification of the padding value is supported from NNAPI 1.2.", lambda x: x.n_in != 3
      or x.api >= NNAPI12),
    C(2925, "Only Float32 inputs are supported before NNAPI 1.2",
      lambda x: x.n_in == 3 or x.api >= NNAPI12 or x.type(0) == "float32")))
RULES["PAD"] = RULES["PADV2"] = _PAD
RULES["ARG_MIN"] = RULES["ARG_MAX"]
_MAXMIN = Rule(3185, 3, version_line=3187, min_api=NNAPI12, api_line=3188, checks=(
    types_in(3191, frozenset({"float32", "uint8", "int8", "int32"})),
    C(3195, "Scalar operand should be constant", lambda x: x.rank(0) != 0 or x.const(0)),
    C(3201, "Scalar operand should be constant", lambda x: x.rank(1) != 0 or x.const(1))))
RULES["MAXIMUM"] = RULES["MINIMUM"] = _MAXMIN
_UNARY12 = {"ABS": 2975, "EXP": 2976, "LOG": 2977, "POW": 2978}
for _b, _line in _UNARY12.items():
    RULES[_b] = Rule(_line, 1, version_line=2979, min_api=NNAPI12, api_line=2980, checks=(is_float(2982),))
for _b, _line in (("COS", 3010), ("SIN", 3011)):
    RULES[_b] = Rule(_line, 1, version_line=3012, min_api=NNAPI12, api_line=3013, checks=(is_float(3015),))
RULES["SQRT"] = Rule(3029, 1, version_line=3030, min_api=NNAPI12, api_line=3031, checks=(is_float(3033),))
for _b, _line in (("LEAKY_RELU", 3237), ("PRELU", 3238)):
    RULES[_b] = Rule(_line, 1, version_line=3239, min_api=NNAPI12, api_line=3240,
                     checks=(types_in(3243, frozenset({"float32", "uint8", "int8"})),))
for _b, _line in (("LOGICAL_OR", 3259), ("LOGICAL_AND", 3260), ("LOGICAL_NOT", 3261)):
    RULES[_b] = Rule(_line, 1, version_line=3262, min_api=NNAPI12, api_line=3263,
                     checks=(C(3266, "Input should be bool", lambda x: x.type(0) == "bool"),))
for _b, _line in (("LESS", 3270), ("LESS_EQUAL", 3271), ("GREATER", 3272), ("GREATER_EQUAL", 3273), ("EQUAL", 3274),
                  ("NOT_EQUAL", 3275)):
    RULES[_b] = Rule(_line, 2, version_line=3276, min_api=NNAPI12, api_line=3277, checks=(types_in(3280, _COMPARE),))
for _b, _line in (("REDUCE_MIN", 3455), ("REDUCE_MAX", 3456)):
    RULES[_b] = Rule(_line, 2, version_line=3457, min_api=NNAPI12, api_line=3458, checks=(
        types_in(3462, frozenset({"float32", "uint8", "int8"})),
        C(3464, "NNAPI does not support generating a scalar as output.", lambda x: x.rank(0) != 0)))
for _b, _line in (("REDUCE_PROD", 3474), ("SUM", 3475)):
    RULES[_b] = Rule(_line, 1, version_line=3476, min_api=NNAPI12, api_line=3477, checks=(
        C(3479, "NNAPI does not support generating a scalar as output", lambda x: x.ot(0) is not None
          and x.ot(0).rank != 0),
        C(3483, "NNAPI only supports floating point input.", lambda x: x.type(0) == "float32")))
UNSUPPORTED_LINE = 3652  # the switch's default: "Unsupported operation type."


def validate(op: OperatorInfo, g: Graph, api: int, accel: bool = False,
             remap: Optional[dict[int, int]] = None) -> list[Failure]:
    """The delegate's ``Validate`` for ``op`` at API level ``api``: every failed condition (empty: the
    delegate takes it).  ``accel``: ``is_accelerator_specified``; ``remap``: tensor -> the float16
    constant a constant DEQUANTIZE reads (the delegate's FP16GraphPartitionHelper checks its consumers
    on the float16 weights themselves)."""
    rule = None if op.custom else RULES.get(op.builtin)
    if rule is None:
        return [Failure("Unsupported operation type." if not op.custom
                        else f"Unsupported operation type. (custom operator {op.name})", UNSUPPORTED_LINE)]
    x = Ctx(op, g, api, accel, remap or {})
    if rule.accept is not None and rule.accept(x):
        return []
    fails = []
    limit = rule.accel_max_version if (accel and rule.accel_max_version) else rule.max_version
    if limit and op.version > limit:
        fails.append(Failure(_OP_VERSION.format(limit), rule.version_line))
    if api < rule.min_api:
        fails.append(Failure(f"Android sdk version less than {rule.min_api}", rule.api_line))
    for c in rule.checks:
        if not c.applies(api):
            continue
        try:
            if not c.ok(x):
                fails.append(Failure(c.message, c.line))
        except (IndexError, AttributeError, TypeError, ValueError) as e:
            # NOTE: a malformed operator (missing input, option) fails the check it breaks, said as such
            fails.append(Failure(f"{c.message} (cannot be checked: {type(e).__name__}: {e})", c.line))
    return fails


def decided_by(op: OperatorInfo, level: int) -> str:
    """The delegate's rule that takes ``op`` (which :func:`validate` passed) at ``level``: the ``case``
    line, the level the operator needs (``ExpectMinAndroidSdkVersion``) and the level-dependent branches
    taken, e.g. "nnapi_delegate.cc:3602, needs feature level 6 (1000006) (:3604)"."""
    rule = None if op.custom else RULES.get(op.builtin)
    if rule is None:
        return ""
    out = f"nnapi_delegate.cc:{rule.line}"
    if rule.min_api > 27:
        out += f", needs {level_name(rule.min_api)} (:{rule.api_line})"
    branches = [c for c in rule.checks if (c.since or c.until) and c.applies(level)]
    if branches:
        out += ", " + ", ".join(f"the {level_name(c.since)} branch (:{c.line})" if c.since
                                else f"the branch below {level_name(c.until)} (:{c.line})" for c in branches)
    return out
