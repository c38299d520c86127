"""HAL 1.3 model -> TFLite flatbuffer (the ``litert-cpu`` driver's compiler).

The inverse of :mod:`nnhal.tflite.loader`, read from the same table
(:mod:`nnhal.tflite.table`): for a HAL operation, the direct entry of
``BY_HAL`` says which TFLite builtin it is and where each HAL input goes (an
``Arg`` of kind ``tensor``: that TFLite input; ``option``: that field of the
options table, through the inverse of its conversion; ``const``: the HAL
input must hold exactly that value, e.g. NHWC layout; ``derived``: the few
helpers named below).  The flatbuffer is built with the schema module's object
API.  :func:`check_operation` says, before any lowering, why an operation
cannot be lowered with exactly the HAL semantics (the reason is what
``getSupportedOperations`` logs); :func:`lower` raises :class:`Unsupported`
with the same reasons.

Deliberately exact: only operations whose TFLite kernels compute the HAL's
results for the operand types listed in ``EXACT`` (each measured against the
conformance vectors: ``nnhal conformance --device litert-cpu``, see
tests/test_litert_driver.py).  HAL operations with no one-operator TFLite form
are first rewritten (:func:`expand`) into HAL operations that have one, on
virtual operands: NCHW as TRANSPOSE around the NHWC operator, SOFTMAX /
LOG_SOFTMAX / L2_NORMALIZATION / LRN on another axis between TRANSPOSEs,
CHANNEL_SHUFFLE as RESHAPE + TRANSPOSE + RESHAPE, GROUPED_CONV_2D as SPLIT +
CONV_2D per group + CONCATENATION, TRANSPOSE_CONV_2D in TFLite's padding form
(or its VALID result and a SLICE), uint8 layers with per-channel weights in
int8 and int8 layers with asymmetric weights in uint8 (QUANTIZE +-128 around
them), quantized comparisons on their real values (a table GATHERed per 8-bit code).  IF becomes
TFLite's IF over lowered subgraphs; WHILE is refused (LiteRT cannot stop a
loop at the HAL's loop timeout).  A model with float16 operands computes in
float32 between a CAST at each float16 input and output (within the VTS
float16 tolerance, measured).  No quant16, no recurrent operations.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Optional, Sequence

import numpy as np

from nnhal import hal
from nnhal.engine.executor import constant_value
from nnhal.engine.reference_check import fixed_shapes
from nnhal.ops.base import Tensor
from nnhal.ops.broadcast import add_sub_multipliers
from nnhal.tflite.schema import builtin_code, schema
from nnhal.tflite.table import (
    ACTIVATIONS_TO_TFLITE,
    MAPPINGS,
    OPTIONS,
    PADDING_TO_TFLITE,
    Arg,
    Mapping,
    opt,
    tensor,
)
from nnhal.tflite.verify import pack

T = hal.OperandType
Op = hal.OperationType
L = hal.OperandLifeTime

# HAL operand type -> TFLite TensorType
TFLITE_TYPE = {T.TENSOR_FLOAT32: 0, T.TENSOR_INT32: 2, T.TENSOR_QUANT8_ASYMM: 3, T.TENSOR_BOOL8: 6,
               T.TENSOR_QUANT8_SYMM: 9,
               T.TENSOR_QUANT8_ASYMM_SIGNED: 9, T.TENSOR_QUANT8_SYMM_PER_CHANNEL: 9,
               T.FLOAT32: 0, T.INT32: 2, T.BOOL: 6}
F, U8, I8 = T.TENSOR_FLOAT32, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED
I32, B8 = T.TENSOR_INT32, T.TENSOR_BOOL8
FQ = frozenset({F, U8, I8})
FQI = FQ | {I32}

# operation -> the element types of input 0 for which the TFLite kernel is exactly the HAL operation
EXACT: dict[Op, frozenset] = {
    Op.ADD: FQ, Op.SUB: FQ, Op.MUL: FQ, Op.DIV: frozenset({F}),
    Op.MAXIMUM: FQ, Op.MINIMUM: FQ,
    Op.ABS: frozenset({F}), Op.EXP: frozenset({F}), Op.LOG: frozenset({F}), Op.RSQRT: frozenset({F}),
    Op.SQRT: frozenset({F}), Op.NEG: frozenset({F}), Op.FLOOR: frozenset({F}),
    Op.RELU: FQ, Op.RELU1: FQ, Op.RELU6: FQ, Op.LOGISTIC: FQ, Op.TANH: FQ, Op.HARD_SWISH: FQ,
    Op.CONV_2D: FQ, Op.DEPTHWISE_CONV_2D: FQ, Op.FULLY_CONNECTED: FQ,
    Op.AVERAGE_POOL_2D: FQ, Op.MAX_POOL_2D: FQ, Op.L2_POOL_2D: frozenset({F}),
    Op.CONCATENATION: FQ, Op.RESHAPE: FQ, Op.SOFTMAX: FQ, Op.DEQUANTIZE: frozenset({U8, I8}),
    Op.QUANTIZE: frozenset({F}), Op.PAD: FQ, Op.TRANSPOSE: FQ,
    Op.SPACE_TO_DEPTH: FQ, Op.DEPTH_TO_SPACE: FQ, Op.MEAN: FQ, Op.PRELU: FQ,
    Op.L2_NORMALIZATION: FQ, Op.LOCAL_RESPONSE_NORMALIZATION: frozenset({F}), Op.SPACE_TO_BATCH_ND: FQ,
    Op.BATCH_TO_SPACE_ND: FQ, Op.STRIDED_SLICE: FQ, Op.SLICE: FQ, Op.RESIZE_BILINEAR: FQ,
    Op.RESIZE_NEAREST_NEIGHBOR: FQ, Op.TRANSPOSE_CONV_2D: FQ, Op.SPLIT: FQI,
}
# measured with the conformance vectors (nnhal conformance --device litert-cpu): exact with the checks
# plan_operation adds (quantized comparisons / SELECT of one scale, no saturating CAST to quant8);
# LSH_PROJECTION (TFLite hashes otherwise) and int32 DIV (division by zero) are not
_MEASURED: dict[Op, frozenset] = {
    Op.EXPAND_DIMS: FQI, Op.SQUEEZE: FQI, Op.REDUCE_MAX: FQ, Op.REDUCE_MIN: FQ, Op.REDUCE_PROD: frozenset({F}),
    Op.REDUCE_SUM: frozenset({F}), Op.EQUAL: FQI | {B8}, Op.NOT_EQUAL: FQI | {B8}, Op.LESS: FQI,
    Op.LESS_EQUAL: FQI, Op.GREATER: FQI, Op.GREATER_EQUAL: FQI, Op.ARGMAX: FQI, Op.ARGMIN: FQI,
    Op.SELECT: frozenset({B8}), Op.TILE: FQI, Op.PAD_V2: FQ, Op.POW: frozenset({F}), Op.ELU: frozenset({F}),
    Op.LOG_SOFTMAX: frozenset({F}), Op.GATHER: FQI, Op.TOPK_V2: FQI, Op.CAST: FQI,
    Op.EMBEDDING_LOOKUP: frozenset({I32}), Op.HASHTABLE_LOOKUP: frozenset({I32}), Op.LOGICAL_AND: frozenset({B8}),
    Op.LOGICAL_OR: frozenset({B8}), Op.LOGICAL_NOT: frozenset({B8}), Op.REDUCE_ANY: frozenset({B8}),
    Op.REDUCE_ALL: frozenset({B8}), Op.SIN: frozenset({F}),
    Op.DEQUANTIZE: frozenset({T.TENSOR_QUANT8_SYMM, T.TENSOR_QUANT8_SYMM_PER_CHANNEL}),
    Op.ADD: frozenset({I32}), Op.SUB: frozenset({I32}), Op.MUL: frozenset({I32}),
    Op.MAXIMUM: frozenset({I32}), Op.MINIMUM: frozenset({I32}), Op.NEG: frozenset({I32}), Op.ABS: frozenset({I32}),
}
# the AIDL HAL's operations (versions 2, 3), measured against the reference (tests/test_litert_aidl_ops.py);
# float16 models compute in float32 as any.  Not: int8 / int32 BATCH_MATMUL, quantized RSQRT (REASONS_BY_TYPE)
_MEASURED.update({Op.BATCH_MATMUL: frozenset({F}), Op.PACK: FQI, Op.MIRROR_PAD: FQI, Op.REVERSE: FQI,
                  Op.RESHAPE: frozenset({I32})})
for _t, _types in _MEASURED.items():
    EXACT[_t] = EXACT.get(_t, frozenset()) | _types
# operations refused with a reason more precise than "no TFLite operator"
REASONS: dict[Op, str] = {
    Op.WHILE: "LiteRT's WHILE cannot be stopped at the HAL's loop timeout (an endless loop would hang the driver)",
    Op.LSH_PROJECTION: "TFLite's LSH_PROJECTION is not NNAPI's (measured: the conformance vectors fail)",
    Op.BOX_WITH_NMS_LIMIT: "no TFLite builtin (TFLite's NON_MAX_SUPPRESSION has no classes, score threshold per "
                           "class or soft NMS)",
    Op.RANK: "its output is a scalar, and the run path reports TFLite's scalar results as one-element "
             "tensors (measured: TFLite's RANK fails the vectors on the output shape)",
}
for _t in (Op.LSTM, Op.RNN, Op.SVDF, Op.UNIDIRECTIONAL_SEQUENCE_LSTM, Op.UNIDIRECTIONAL_SEQUENCE_RNN,
           Op.BIDIRECTIONAL_SEQUENCE_LSTM, Op.BIDIRECTIONAL_SEQUENCE_RNN):
    REASONS[_t] = ("not lowered: the HAL passes the recurrent state as model inputs and outputs, TFLite keeps "
                   "it in variable tensors")
# (operation, type of its data input) refused with a measured reason
REASONS_BY_TYPE: dict[tuple[Op, Any], str] = {
    (Op.BATCH_MATMUL, I32): "TFLite's BATCH_MATMUL has no int32 kernel (float32, int8 and int16 only)",
    (Op.BATCH_MATMUL, I8): "TFLite's int8 BATCH_MATMUL requantizes with one rounding, the reference with "
                           "MultiplyByQuantizedMultiplier's two (measured: about 1 result in 1200 is 1 off)",
    **{(Op.RESIZE_BILINEAR, t): "TFLite's quantized RESIZE_BILINEAR rounds its interpolation, the reference "
                                "truncates it (measured over 530 random models: 30% of the values 1 off; the "
                                "random section found it after a DEQUANTIZE)" for t in (U8, I8)},
    **{(Op.RSQRT, t): "TFLite's quantized RSQRT is not the reference's: int8 in fixed point (measured: results "
                      "1 off the reference's float computation) failing the execution on a negative input (the "
                      "reference gives the type's maximum), no uint8 kernel" for t in (U8, I8)},
}
_COMPARISONS = (Op.EQUAL, Op.NOT_EQUAL, Op.LESS, Op.LESS_EQUAL, Op.GREATER, Op.GREATER_EQUAL)
# QUANTIZE's table entry is a rewrite (TFLite -> HAL); HAL -> TFLite it is the plain builtin.  The AIDL HAL's
# operations (the importer's table is HAL 1.3's: TFLite's PACK, MIRROR_PAD, REVERSE_V2 are rewrites there)
_EXTRA = {Op.QUANTIZE: Mapping("QUANTIZE", Op.QUANTIZE, (Arg("tensor", index=0),)),
          Op.BATCH_MATMUL: Mapping("BATCH_MATMUL", Op.BATCH_MATMUL,
                                   (tensor(0), tensor(1), opt("adjX", "bool", T.BOOL), opt("adjY", "bool", T.BOOL))),
          Op.PACK: Mapping("PACK", Op.PACK),  # NOTE: the axis, then any number of tensors: plan_operation
          Op.MIRROR_PAD: Mapping("MIRROR_PAD", Op.MIRROR_PAD, (tensor(0), tensor(1), opt("mode"))),
          Op.REVERSE: Mapping("REVERSE_V2", Op.REVERSE, (tensor(0), tensor(1)))}
# the options tables of the builtins the lowering writes
_OPTIONS = {**OPTIONS, "BATCH_MATMUL": "BatchMatMulOptions", "PACK": "PackOptions",
            "MIRROR_PAD": "MirrorPadOptions"}
_DIRECT = {Op.MUL: ("MUL",), Op.PRELU: ("PRELU",), Op.CONCATENATION: ("CONCATENATION",)}
_POOLS = (Op.AVERAGE_POOL_2D, Op.MAX_POOL_2D, Op.L2_POOL_2D)


class Unsupported(Exception):
    """The HAL operation (or model) has no exact TFLite form here; the message says why."""


def mapping(op_type: Any) -> Optional[Mapping]:
    try:
        t = Op(op_type)
    except ValueError:
        return None
    if t in _EXTRA:
        return _EXTRA[t]
    # NOTE: an entry with a rewrite still gives the direct form (its ``inputs``) the rewrite falls back
    # from; in this direction only that form is used
    entries = [m for m in MAPPINGS if m.hal == t and m.inputs and m.builtin in _DIRECT.get(t, (m.builtin,))]
    return entries[0] if entries else None


_F16_AS_F32 = {T.TENSOR_FLOAT16: T.TENSOR_FLOAT32, T.FLOAT16: T.FLOAT32}
_CONST = (L.CONSTANT_COPY, L.CONSTANT_REFERENCE)
_TENSOR_TYPES = frozenset(t for t in T if t.name.startswith("TENSOR"))
_DTYPE = {T.TENSOR_INT32: np.int32, T.INT32: np.int32, T.BOOL: np.bool_, T.FLOAT32: np.float32,
          T.TENSOR_FLOAT32: np.float32, T.TENSOR_QUANT8_ASYMM: np.uint8, T.TENSOR_QUANT8_ASYMM_SIGNED: np.int8,
          T.TENSOR_QUANT8_SYMM_PER_CHANNEL: np.int8, T.TENSOR_BOOL8: np.bool_}


class _Marked:
    """A set of operations by identity (hal.Operation compares by value: two equal rewrites are two
    operations).  NOTE: it holds the operations, not only their id(): an id outlives its object, and a
    rewrite's intermediate operation, once dropped, gave its id to a later one, which then passed for
    final (found by nnhal vts --section random: a GROUPED_CONV_2D left unexpanded in one lowering in
    five, failing prepareModel with cache files after a plain prepare had succeeded)."""

    def __init__(self) -> None:
        self._ops: dict[int, hal.Operation] = {}

    def add(self, op: hal.Operation) -> None:
        self._ops[id(op)] = op

    def __contains__(self, op: hal.Operation) -> bool:
        return self._ops.get(id(op)) is op


class _Ctx:
    """The model as the lowering sees it: float16 operands read as float32 (a model with float16
    operands computes in float32 between a CAST at each float16 input and output), plus the
    virtual operands (indexes past the model's) that the rewrites below add: temporaries and
    constants of the TFLite graph with no HAL operand of their own."""

    def __init__(self, model: hal.Model, pools: Sequence[Any], sub: Optional[int] = None,
                 f16: Optional[bool] = None, shapes: Optional[dict[int, tuple[int, ...]]] = None):
        self.model = model
        self.pools = pools
        self.graph = model.main if sub is None else model.referenced[sub]  # NOTE: the subgraph lowered
        self.base = len(self.graph.operands)
        self.f16 = uses_float16(model) if f16 is None else f16
        # NOTE: the main graph's operands declared of unknown rank or size whose shape the model fixes
        # (static_shapes): TFLite tensors have the shape they are written with until a kernel resizes them, and
        # some kernels keep it (SELECT of one value each: a temporary of unknown rank stayed a scalar, a later
        # SLICE / PAD failed every execution; found by nnhal vts --section random)
        if sub is not None:
            shapes = {}
        self.shapes = static_shapes(model, pools) if shapes is None else shapes
        self.virtual: dict[int, hal.Operand] = {}
        self.values: dict[int, np.ndarray] = {}
        self.final = _Marked()  # operations a rewrite produced in their final form
        self.byte_moves = _Marked()  # data-movement operations a rewrite made, exact on any type
        self.integer = _Marked()  # int32 arithmetic a rewrite made, whose TFLite kernel is exact on its values
        self._seen: dict[int, hal.Operand] = {}  # NOTE: operands as read here (float16 as float32, fixed shapes)
        self._values: dict[int, Optional[np.ndarray]] = {}  # the model's constants read so far (read-only)

    def operand(self, i: int) -> hal.Operand:
        if i >= self.base:
            return self.virtual[i]
        o = self.graph.operands[i]
        if (self.f16 and o.type in _F16_AS_F32) or i in self.shapes:
            c = self._seen.get(i)
            if c is None:
                c = self._seen[i] = replace(o, type=_F16_AS_F32.get(T(o.type), o.type),
                                            dimensions=list(self.shapes.get(i, o.dimensions)))
            return c
        return o

    def rank_later(self, o: hal.Operand) -> bool:
        """Whether a tensor of unknown rank gets its shape from LiteRT at prepare: an operation's result
        (each TFLite kernel resizes its outputs) or a referenced subgraph's input (IF resizes them)."""
        later = (L.TEMPORARY_VARIABLE, L.SUBGRAPH_OUTPUT) + ((L.SUBGRAPH_INPUT,) if self.graph is not
                                                              self.model.main else ())
        return o.lifetime in later

    def value(self, i: int) -> Optional[np.ndarray]:
        """A constant operand's value (float16 as float32), None for the other lifetimes."""
        if i >= self.base:
            return self.values.get(i)
        if i in self._values:
            return self._values[i]  # NOTE: a parameter is read by the rewrites, the padding form and the plan
        v = constant_value(self.model, self.graph.operands[i], self.pools)
        if v is not None and v.dtype == np.float16:
            v = v.astype(np.float32)
            v.flags.writeable = False  # NOTE: shared by every reader, as the model's own constants are
        self._values[i] = v
        return v

    def const(self, i: int) -> Any:
        o = self.operand(i)
        if o.lifetime not in _CONST:
            raise Unsupported(f"input operand {i} is not a constant (TFLite takes it as an option)")
        v = self.value(i)
        return v.item() if v is not None and v.ndim == 0 else v

    def temp(self, like: int, dims: Sequence[int]) -> int:
        """A new temporary of ``like``'s type and quantization, of shape ``dims`` (0: unknown)."""
        o = self.operand(like)
        return self._add(replace(o, dimensions=[int(d) for d in dims], lifetime=L.TEMPORARY_VARIABLE,
                                 location=hal.DataLocation()), None)

    def constant(self, value: Any, type: Any = T.TENSOR_INT32, like: Optional[hal.Operand] = None) -> int:
        """A new constant (an int32 tensor unless ``type`` / ``like`` say otherwise)."""
        o = like if like is not None else hal.Operand(type=type)
        arr = np.asarray(value, dtype=_DTYPE.get(T(o.type)))
        return self._add(replace(o, dimensions=list(arr.shape), lifetime=L.CONSTANT_COPY,
                                 location=hal.DataLocation()), arr)

    def _add(self, o: hal.Operand, value: Optional[np.ndarray]) -> int:
        i = self.base + len(self.virtual)
        self.virtual[i] = o
        if value is not None:
            self.values[i] = value
        return i


def _implicit_inputs(ctx: _Ctx, op: hal.Operation) -> list:
    """The operation's inputs in the implicit-padding form the table describes:
    an explicit padding equal to VALID (all zero) or to TFLite's SAME for these
    shapes becomes that scheme; any other explicit padding has no TFLite form."""
    ins: list = list(op.inputs)
    t = Op(op.type)
    first_scalar = {Op.CONV_2D: 3, Op.DEPTHWISE_CONV_2D: 3}.get(t, 1)
    n = len(ins)
    explicit_counts = {Op.CONV_2D: (10, 11, 13), Op.DEPTHWISE_CONV_2D: (11, 12, 14)}.get(t, (10, 11))
    implicit_layout_at = {Op.CONV_2D: 7, Op.DEPTHWISE_CONV_2D: 8}.get(t, 7)
    if n not in explicit_counts:
        return ins
    if n == explicit_counts[0] and len(ins) > implicit_layout_at and \
            ctx.operand(ins[implicit_layout_at]).type == T.BOOL and t != Op.DEPTHWISE_CONV_2D:
        return ins  # NOTE: CONV_2D with 10 inputs: the implicit form with layout and dilations
    if t == Op.DEPTHWISE_CONV_2D and n == 11 and ctx.operand(ins[8]).type == T.BOOL:
        return ins
    pl, pr, pt, pb = (int(ctx.const(i)) for i in ins[first_scalar:first_scalar + 4])
    sw, sh = (int(ctx.const(i)) for i in ins[first_scalar + 4:first_scalar + 6])
    rest = ins[first_scalar + 6:]
    x = ctx.operand(ins[0])
    if t in _POOLS:
        fw, fh = (int(ctx.const(i)) for i in rest[:2])
        rest = rest[2:]
    else:
        w = ctx.operand(ins[1])
        fh, fw = w.dimensions[1], w.dimensions[2]
    dil = (1, 1)
    tail = rest[1:] if t != Op.DEPTHWISE_CONV_2D else rest[2:]
    if len(tail) >= 1 and bool(ctx.const(tail[0])):
        raise Unsupported("NCHW layout (TFLite's kernels are NHWC only)")
    if len(tail) >= 3:
        dil = (int(ctx.const(tail[1])), int(ctx.const(tail[2])))
    if len(x.dimensions) != 4 or 0 in x.dimensions[1:3]:
        raise Unsupported("explicit padding on an input of unknown height / width")
    h, wd = x.dimensions[1], x.dimensions[2]
    if (pl, pr, pt, pb) == (0, 0, 0, 0):
        scheme = 2
    else:
        def same(size: int, stride: int, k: int, d: int) -> tuple[int, int]:
            ek = (k - 1) * d + 1
            out = (size + stride - 1) // stride
            total = max((out - 1) * stride + ek - size, 0)
            return total // 2, total - total // 2

        if (pl, pr) == same(wd, sw, fw, dil[0]) and (pt, pb) == same(h, sh, fh, dil[1]):
            scheme = 1
        else:
            raise Unsupported(f"explicit padding {[pl, pr, pt, pb]} is neither VALID nor TFLite's SAME")
    out = ins[:first_scalar] + [("const", scheme), ins[first_scalar + 4], ins[first_scalar + 5]]
    if t in _POOLS:
        out += [ins[first_scalar + 6], ins[first_scalar + 7]]
    out += rest
    return out


def _value(ctx: _Ctx, x: Any) -> Any:
    return x[1] if isinstance(x, tuple) else ctx.const(x)


def check_operand_type(o: hal.Operand, what: str) -> None:
    if o.type not in TFLITE_TYPE:
        raise Unsupported(f"{what} is {T(o.type).name} (no exact TFLite tensor type here)")


class _Builder:
    """Collects the TFLite tensors and operators of one subgraph (the main one, or a subgraph an IF
    references); the buffers, operator codes and subgraph list are the root builder's."""

    def __init__(self, model: hal.Model, pools: Sequence[Any], root: Optional["_Builder"] = None,
                 sub: Optional[int] = None):
        self.ctx = _Ctx(model, pools, sub)
        self.root = root or self
        if root is None:
            self.s = schema()
            self.m = self.s.ModelT()
            self.m.version = 3
            self.m.description = b"nnhal: lowered from a HAL 1.3 model"
            self.m.buffers = [self.s.BufferT()]
            self.m.operatorCodes = []
            self.m.subgraphs = [None]
            self.codes: dict[str, int] = {}
            self.ref_index: dict[int, int] = {}  # HAL referenced subgraph -> TFLite subgraph index
        else:
            self.s, self.m, self.codes = root.s, root.m, root.codes
        self.tensors: list = []
        self.by_operand: dict[int, int] = {}
        self.bias_scales: dict[int, np.ndarray] = {}  # int32 bias operand -> its per-channel scales

    def tensor_of(self, i: int) -> int:
        if i in self.by_operand:
            return self.by_operand[i]
        self.by_operand[i] = self.new_tensor(i)
        return self.by_operand[i]

    def new_tensor(self, i: int, tflite_type: Optional[int] = None, name: str = "") -> int:
        """A TFLite tensor for operand ``i`` (a constant carries its buffer); ``tflite_type``
        overrides the element type (the float16 graph inputs / outputs of a model computed in float32)."""
        o = self.ctx.operand(i)
        check_operand_type(o, f"operand {i}")
        if o.lifetime == L.NO_VALUE:
            return -1
        dims = list(o.dimensions)
        if not dims and o.type not in (T.FLOAT32, T.INT32, T.BOOL) and o.lifetime not in _CONST and \
                not self.ctx.rank_later(o):
            raise Unsupported(f"operand {i} has an unknown rank")
        data = None
        if o.lifetime in (L.CONSTANT_COPY, L.CONSTANT_REFERENCE):
            data = self.ctx.value(i)
            dims = list(np.shape(data))
        tt = self.s.TensorT()
        tt.shape = np.asarray([d if d else 1 for d in dims], dtype=np.int32)
        if 0 in dims:
            tt.shapeSignature = np.asarray([d if d else -1 for d in dims], dtype=np.int32)
        tt.type = TFLITE_TYPE[T(o.type)] if tflite_type is None else tflite_type
        tt.name = (name or (f"hal_{i}" if i < self.ctx.base else f"nnhal_tmp_{i}")).encode()
        tt.buffer = 0
        if data is not None:
            b = self.s.BufferT()
            # NOTE: the constant's bytes as they are (a view of the driver's read-only pool): pack copies them
            # once into the file, no bytes object of them first
            b.data = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
            self.m.buffers.append(b)
            tt.buffer = len(self.m.buffers) - 1
        q = None
        if i in self.bias_scales:
            # NOTE: NNAPI gives a per-channel filter's bias scale 0 (implied: input x filter scale per
            # channel); TFLite states it, and XNNPACK takes the convolution only when it is there
            q = self.s.QuantizationParametersT()
            q.scale = self.bias_scales[i].astype(np.float32)
            q.zeroPoint = np.zeros(len(q.scale), np.int64)
        elif o.type == T.TENSOR_QUANT8_SYMM_PER_CHANNEL:
            cq = o.extraParams.channelQuant if o.extraParams is not None else None
            if cq is None:
                raise Unsupported(f"operand {i}: per-channel operand without its scales")
            q = self.s.QuantizationParametersT()
            q.scale = np.asarray(cq.scales, np.float32)
            q.zeroPoint = np.zeros(len(cq.scales), np.int64)
            q.quantizedDimension = int(cq.channelDim)
        elif o.type in (U8, I8, T.TENSOR_QUANT8_SYMM) or (o.type == T.TENSOR_INT32 and o.scale):
            q = self.s.QuantizationParametersT()
            q.scale = np.asarray([o.scale], np.float32)
            q.zeroPoint = np.asarray([o.zeroPoint], np.int64)
        tt.quantization = q
        self.tensors.append(tt)
        return len(self.tensors) - 1

    def const_tensor(self, arr: np.ndarray) -> int:
        tt = self.s.TensorT()
        tt.shape = np.asarray(arr.shape, dtype=np.int32)
        tt.type = 2
        tt.name = f"nnhal_const_{len(self.tensors)}".encode()
        b = self.s.BufferT()
        b.data = np.ascontiguousarray(arr, dtype=np.int32).reshape(-1).view(np.uint8)
        self.m.buffers.append(b)
        tt.buffer = len(self.m.buffers) - 1
        self.tensors.append(tt)
        return len(self.tensors) - 1

    def code(self, builtin: str) -> int:
        if builtin not in self.codes:
            c = self.s.OperatorCodeT()
            c.builtinCode = builtin_code(builtin)
            c.deprecatedBuiltinCode = min(c.builtinCode, 127)
            c.version = 1
            self.codes[builtin] = len(self.m.operatorCodes)
            self.m.operatorCodes.append(c)
        return self.codes[builtin]

    def emit(self, builtin: str, inputs: Sequence[int], outputs: Sequence[int]) -> None:
        top = self.s.OperatorT()
        top.opcodeIndex = self.code(builtin)
        top.inputs = np.asarray(inputs, dtype=np.int32)
        top.outputs = np.asarray(outputs, dtype=np.int32)
        self.ops.append(top)

    def operation(self, op: hal.Operation) -> None:
        if op.type == Op.IF:
            self.if_operation(op)
            return
        for o in expand(self.ctx, op):
            self.lowered(o)

    def subgraph_index(self, ref: int) -> int:
        root = self.root
        if ref not in root.ref_index:
            root.ref_index[ref] = len(self.m.subgraphs)
            self.m.subgraphs.append(None)
            sub = _Builder(self.ctx.model, self.ctx.pools, root, ref)
            self.m.subgraphs[root.ref_index[ref]] = sub.subgraph(f"referenced_{ref}")
        return root.ref_index[ref]

    def if_operation(self, op: hal.Operation) -> None:
        """HAL IF (condition, then, else, inputs...) as TFLite's IF over the referenced subgraphs."""
        opts = self.s.IfOptionsT()
        opts.thenSubgraphIndex, opts.elseSubgraphIndex = (self.subgraph_index(int(self.ctx.value(i)))
                                                          for i in op.inputs[1:3])
        top = self.s.OperatorT()
        top.opcodeIndex = self.code("IF")
        top.inputs = np.asarray([self.tensor_of(i) for i in [op.inputs[0], *op.inputs[3:]]], dtype=np.int32)
        top.outputs = np.asarray([self.tensor_of(i) for i in op.outputs], dtype=np.int32)
        top.builtinOptionsType = self.s.BuiltinOptions.IfOptions
        top.builtinOptions = opts
        self.ops.append(top)

    def subgraph(self, name: str) -> Any:
        """A referenced subgraph: its inputs and outputs as they are (float16 already float32)."""
        g = self.ctx.graph
        self.ops = []
        ins = [self.tensor_of(i) for i in g.inputIndexes]
        for op in g.operations:
            self.operation(op)
        outs = []
        for i in g.outputIndexes:
            if i not in self.by_operand:
                raise Unsupported(f"subgraph output {i} is not computed by any operation")
            outs.append(self.by_operand[i])
        sg = self.s.SubGraphT()
        sg.tensors, sg.operators = self.tensors, self.ops
        sg.inputs, sg.outputs = np.asarray(ins, dtype=np.int32), np.asarray(outs, dtype=np.int32)
        sg.name = name.encode()
        return sg

    def lowered(self, op: hal.Operation) -> None:
        plan = plan_operation(self.ctx, op)
        tfl_inputs: dict[int, int] = {}
        options = None
        if plan.mapping.builtin in _OPTIONS:
            options = getattr(self.s, _OPTIONS[plan.mapping.builtin] + "T")()
            if plan.mapping.builtin in ("ARG_MAX", "ARG_MIN"):
                options.outputType = TFLITE_TYPE[T.TENSOR_INT32]  # NOTE: the HAL's index type
        if Op(op.type) in (Op.CONV_2D, Op.DEPTHWISE_CONV_2D, Op.TRANSPOSE_CONV_2D) and len(op.inputs) > 2:
            f = self.ctx.operand(op.inputs[1])
            cq = f.extraParams.channelQuant if f.extraParams is not None else None
            if f.type == T.TENSOR_QUANT8_SYMM_PER_CHANNEL and cq is not None:
                self.bias_scales[op.inputs[2]] = np.float32(self.ctx.operand(op.inputs[0]).scale) * \
                    np.asarray(cq.scales, np.float32)
        for kind, k, x in plan.args:
            if kind == "tensor":
                tfl_inputs[k] = self.tensor_of(x)
            elif kind == "const_tensor":
                tfl_inputs[k] = self.const_tensor(np.asarray(x, np.int32))
            elif kind == "option":
                setattr(options, k, x)
        n_in = max(tfl_inputs) + 1 if tfl_inputs else 0
        top = self.s.OperatorT()
        top.opcodeIndex = self.code(plan.mapping.builtin)
        top.inputs = np.asarray([tfl_inputs.get(k, -1) for k in range(n_in)], dtype=np.int32)
        top.outputs = np.asarray([self.tensor_of(i) for i in op.outputs], dtype=np.int32)
        if options is not None:
            top.builtinOptionsType = getattr(self.s.BuiltinOptions, _OPTIONS[plan.mapping.builtin])
            top.builtinOptions = options
        self.ops.append(top)

    def build(self) -> bytes:
        main = self.ctx.model.main
        self.ops: list = []
        graph_in, graph_out = [], []
        for i in main.inputIndexes:
            if main.operands[i].type == T.TENSOR_FLOAT16:
                # NOTE: the HAL's float16 input, CAST to the float32 the graph computes in (exact)
                graph_in.append(self.new_tensor(i, tflite_type=1, name=f"hal_{i}_f16"))
                self.emit("CAST", [graph_in[-1]], [self.tensor_of(i)])
            else:
                graph_in.append(self.tensor_of(i))
        self.owners: list[Optional[int]] = [None] * len(self.ops)  # NOTE: the CASTs of float16 inputs
        for k, op in enumerate(main.operations):
            self.operation(op)
            self.owners += [k] * (len(self.ops) - len(self.owners))
        for i in main.outputIndexes:
            if self.ctx.operand(i).lifetime != L.SUBGRAPH_OUTPUT:
                raise Unsupported("a model output that is not an operation's result")
            if i not in self.by_operand:
                raise Unsupported(f"model output {i} is not computed by any operation")
            if main.operands[i].type == T.TENSOR_FLOAT16:
                # NOTE: float32 rounded to the nearest float16 once, at the output
                graph_out.append(self.new_tensor(i, tflite_type=1, name=f"hal_{i}_f16"))
                self.emit("CAST", [self.by_operand[i]], [graph_out[-1]])
            else:
                graph_out.append(self.by_operand[i])
        sg = self.s.SubGraphT()
        sg.tensors = self.tensors
        sg.operators = self.ops
        sg.inputs = np.asarray(graph_in, dtype=np.int32)
        sg.outputs = np.asarray(graph_out, dtype=np.int32)
        sg.name = b"main"
        self.m.subgraphs[0] = sg
        return pack(self.m)  # NOTE: the Builder's per-field calls took ~6 of a 70-operation model's 10 ms


@dataclass
class Plan:
    mapping: Mapping
    args: list  # (kind, TFLite input index or option name, operand index / value)


# ---------------------------------------------------------------------------- rewrites
# HAL operations with no one-operator TFLite form, rewritten into HAL operations that have one
# (on virtual operands of the context): each rewrite moves data exactly (TRANSPOSE / RESHAPE /
# SPLIT / CONCATENATION copy bytes), so the result is the inner operator's; every rewrite is
# checked against the conformance vectors like the direct forms.

_LAYOUT_OPS = frozenset({Op.CONV_2D, Op.DEPTHWISE_CONV_2D, Op.AVERAGE_POOL_2D, Op.MAX_POOL_2D, Op.L2_POOL_2D,
                         Op.SPACE_TO_DEPTH, Op.DEPTH_TO_SPACE, Op.SPACE_TO_BATCH_ND, Op.BATCH_TO_SPACE_ND,
                         Op.RESIZE_BILINEAR, Op.RESIZE_NEAREST_NEIGHBOR, Op.GROUPED_CONV_2D, Op.TRANSPOSE_CONV_2D,
                         Op.INSTANCE_NORMALIZATION})
_AXIS_AT = {Op.SOFTMAX: 2, Op.L2_NORMALIZATION: 1, Op.LOCAL_RESPONSE_NORMALIZATION: 5, Op.LOG_SOFTMAX: 2}
TO_NHWC, TO_NCHW = (0, 2, 3, 1), (0, 3, 1, 2)
_MAX_DEPTH = 4


def _op(t: Op, inputs: Sequence[int], outputs: Sequence[int]) -> hal.Operation:
    return hal.Operation(type=t, inputs=list(inputs), outputs=list(outputs))


def expand(ctx: _Ctx, op: hal.Operation, depth: int = 0) -> list[hal.Operation]:
    """``op`` as HAL operations each with a direct TFLite form (``[op]`` itself when it has one)."""
    if depth > _MAX_DEPTH:
        raise Unsupported("internal: rewrites nested too deep")
    if op in ctx.final:
        return [op]
    try:
        t = Op(op.type)
    except ValueError:
        return [op]
    r = _nchw(ctx, op) if t in _LAYOUT_OPS else None
    if r is None and t in _PER_CHANNEL_OPS:
        r = _uint8_per_channel(ctx, op)
    if r is None and t in _PER_CHANNEL_OPS | {Op.FULLY_CONNECTED}:
        r = _int8_asymmetric_weights(ctx, op)
    if r is None and t in _COMPARISONS:
        r = _compare_real_values(ctx, op)
    if r is None and t in _REQUANTIZED:
        r = _requantized_inputs(ctx, op)
    if r is None:
        if t == Op.GROUPED_CONV_2D:
            r = _grouped_conv(ctx, op)
        elif t == Op.TRANSPOSE_CONV_2D:
            r = _transpose_conv(ctx, op)
        elif t in _AXIS_AT:
            r = _on_last_axis(ctx, op)
        elif t == Op.CHANNEL_SHUFFLE:
            r = _channel_shuffle(ctx, op)
        elif t == Op.INSTANCE_NORMALIZATION:
            r = _instance_normalization(ctx, op)
        elif t == Op.ELU:
            r = _elu_alpha(ctx, op)
        elif t == Op.TRANSPOSE:
            r = _default_perm(ctx, op)
        elif t == Op.MEAN and ctx.operand(op.inputs[0]).type in (U8, I8):
            r = _quantized_mean(ctx, op)
        elif t in _REDUCTIONS:
            r = _reduced_to_one(ctx, op)
        elif t in (Op.ARGMAX, Op.ARGMIN):
            r = _arg_of_vector(ctx, op)
        elif t == Op.SQUEEZE:
            r = _squeezed_to_one(ctx, op)
    if r is None:
        return [op]
    return [x for o in r for x in expand(ctx, o, depth + 1)]


_REDUCTIONS = frozenset({Op.MEAN, Op.REDUCE_SUM, Op.REDUCE_PROD, Op.REDUCE_MAX, Op.REDUCE_MIN, Op.REDUCE_ANY,
                         Op.REDUCE_ALL})


def _reduced_to_one(ctx: _Ctx, op: hal.Operation) -> Optional[list[hal.Operation]]:
    """A reduction over every axis without keep_dims: the HAL's result is [1], TFLite's a scalar, which a
    later operator reads with the wrong rank (SLICE failed: found by nnhal vts --section random): reduced
    with keep_dims, then RESHAPEd to [1]."""
    x, axes, keep = op.inputs[:3]
    o = ctx.operand(keep)
    if o.lifetime not in _CONST or ctx.operand(axes).lifetime not in _CONST or bool(ctx.const(keep) > 0):
        return None
    rank = len(ctx.operand(x).dimensions)
    reduced = {int(a) % rank for a in np.asarray(ctx.const(axes)).reshape(-1)} if rank else set()
    if not rank or len(reduced) != rank:
        return None
    kept = ctx.temp(op.outputs[0], [1] * rank)
    red = _op(Op(op.type), [x, axes, ctx.constant(1, T.INT32) if o.type == T.INT32 else ctx.constant(True, T.BOOL)],
              [kept])
    ctx.final.add(red)
    shape = _op(Op.RESHAPE, [kept, ctx.constant([1])], op.outputs)
    ctx.byte_moves.add(shape)  # NOTE: RESHAPE moves bytes, whatever the element type (REDUCE_ANY's bool)
    return [red, shape]


def _quantized_mean(ctx: _Ctx, op: hal.Operation) -> list[hal.Operation]:
    """Quantized MEAN as the reference computes it (``nnhal.ops.reduce``, Android's ``Mean<T, int32>``): the
    stored values CAST to int32, their SUM, an int32 DIV by the element count (TFLite's truncates toward zero,
    as C++ does: the reference's), CAST back to the stored values (a mean of stored values is in their range;
    the output's quantization, which the spec requires to be the input's, is not applied: nor is it by the
    reference).  TFLite's quantized MEAN rounds the mean: 20-30% of values 1 off, which a later operation
    amplified beyond a graph's criteria (found by nnhal vts --section random).  The count is a constant where
    the axes and the reduced dimensions are known (the sum keeps the dimensions, a SQUEEZE or RESHAPE drops them),
    else the SUM of a tensor of ones over the same axes."""
    x, axes, keep = op.inputs[:3]
    dims = list(ctx.operand(x).dimensions)
    out = op.outputs[0]

    def i32(d: Sequence[int]) -> int:
        return ctx._add(replace(ctx.operand(x), type=I32, dimensions=list(d), scale=0.0, zeroPoint=0,
                                lifetime=L.TEMPORARY_VARIABLE, location=hal.DataLocation()), None)

    def integer(o: hal.Operation) -> hal.Operation:
        ctx.integer.add(o)
        ctx.final.add(o)
        return o

    if ctx.operand(keep).lifetime not in _CONST:
        raise Unsupported("MEAN with keep_dims given at execution (TFLite takes it as an option)")
    kept = bool(ctx.const(keep) > 0)
    xs = i32(dims)
    none = ctx.constant(0, T.INT32)
    ops = [_op(Op.CAST, [x], [xs])]

    def count(keep_b: int, d: Sequence[int]) -> int:
        """The element count of each reduced slice, at execution (a dimension or the axes unknown before)."""
        zeros, ones, n = i32(dims), i32(dims), i32(d)
        ops.extend([_op(Op.MUL, [xs, ctx.constant([0]), none], [zeros]),
                    _op(Op.ADD, [zeros, ctx.constant([1]), none], [ones]),
                    integer(_op(Op.REDUCE_SUM, [ones, axes, keep_b], [n]))])
        return n

    rank = len(dims)
    if ctx.operand(axes).lifetime in _CONST and rank:
        raw = [int(a) for a in np.asarray(ctx.value(axes)).reshape(-1)]
        if any(not -rank <= a < rank for a in raw):
            raise Unsupported(f"MEAN over axes {raw} of a rank-{rank} input (the reference fails the execution)")
        reduced = sorted({a % rank for a in raw})
        summed = [1 if d in reduced else n for d, n in enumerate(dims)]
        s, q = i32(summed), i32(summed)
        true = ctx.constant(True, T.BOOL)
        ops.append(integer(_op(Op.REDUCE_SUM, [xs, axes, true], [s])))
        known = all(dims[d] for d in reduced)
        n = ctx.constant([int(np.prod([dims[d] for d in reduced]))]) if known else count(true, summed)
        ops.append(integer(_op(Op.DIV, [s, n, none], [q])))
        if not kept:
            # NOTE: without the reduced dimensions; every one reduced: the HAL's [1], not TFLite's scalar
            shape = [n for d, n in enumerate(dims) if d not in reduced]
            drop = (_op(Op.RESHAPE, [q, ctx.constant([1])], [q := i32([1])]) if not shape else
                    _op(Op.SQUEEZE, [q, ctx.constant(reduced)], [q := i32(shape)]))
            ops.append(drop)
    else:
        if _scalar_read_later(ctx, op):
            raise Unsupported("MEAN with its axes given at execution and a result of rank 1 read by a later "
                              "operation (TFLite's result is then a scalar where the HAL's is [1])")
        summed = list(ctx.operand(out).dimensions)
        keep_b = ctx.constant(kept, T.BOOL)
        s, q = i32(summed), i32(summed)
        ops.append(integer(_op(Op.REDUCE_SUM, [xs, axes, keep_b], [s])))
        ops.append(integer(_op(Op.DIV, [s, count(keep_b, summed), none], [q])))
    return ops + [integer(_op(Op.CAST, [q], [out]))]


def _arg_of_vector(ctx: _Ctx, op: hal.Operation) -> Optional[list[hal.Operation]]:
    """ARGMAX / ARGMIN of a 1-D tensor: the HAL's result is [1], TFLite's a scalar (a later EXPAND_DIMS
    made the wrong rank: found by nnhal vts --section random): of the input RESHAPEd to [1, n], on axis 1."""
    x = ctx.operand(op.inputs[0])
    if len(x.dimensions) != 1 or not x.dimensions[0]:
        return None
    row = ctx.temp(op.inputs[0], [1, x.dimensions[0]])
    shape = _op(Op.RESHAPE, [op.inputs[0], ctx.constant([1, x.dimensions[0]])], [row])
    ctx.byte_moves.add(shape)
    arg = _op(Op(op.type), [row, ctx.constant(1, T.INT32)], op.outputs)
    ctx.final.add(arg)
    return [shape, arg]


def _squeezed_to_one(ctx: _Ctx, op: hal.Operation) -> Optional[list[hal.Operation]]:
    """A SQUEEZE of every dimension: the HAL's result is [1], TFLite's a scalar (a later LOG_SOFTMAX crashed
    LiteRT: found by nnhal vts --section random): a RESHAPE to [1]."""
    y = ctx.operand(op.outputs[0])
    x = ctx.operand(op.inputs[0])
    # NOTE: a result declared [0] or of unknown rank is that [1] when the model fixes it (static_shapes: found by
    # the random section, a SQUEEZE of a constant [1] into such a temporary, then EXPAND_DIMS, failed every execution)
    if list(y.dimensions) != [1] or not x.dimensions or any(d != 1 for d in x.dimensions):
        return None
    shape = _op(Op.RESHAPE, [op.inputs[0], ctx.constant([1])], op.outputs)
    ctx.byte_moves.add(shape)
    return [shape]


def _default_perm(ctx: _Ctx, op: hal.Operation) -> Optional[list[hal.Operation]]:
    """TRANSPOSE with its optional perm omitted (NO_VALUE): the axes reversed, as a constant (TFLite's
    TRANSPOSE reads a perm tensor: given none, LiteRT crashed in AllocateTensors; found by nnhal vts
    --section random)."""
    if len(op.inputs) < 2 or ctx.operand(op.inputs[1]).lifetime != L.NO_VALUE:
        return None
    rank = len(ctx.operand(op.inputs[0]).dimensions)
    if not rank:
        raise Unsupported("TRANSPOSE with an omitted perm of an input of unknown rank")
    return [_op(Op.TRANSPOSE, [op.inputs[0], ctx.constant(np.arange(rank - 1, -1, -1, dtype=np.int32))],
                op.outputs)]


def _nchw(ctx: _Ctx, op: hal.Operation) -> Optional[list[hal.Operation]]:
    """An NCHW operation as TRANSPOSE to NHWC, the NHWC operation, TRANSPOSE back (the layout
    flag is the operation's first BOOL input; filters are OHWI in both layouts)."""
    ins = list(op.inputs)
    k = next((k for k, i in enumerate(ins) if ctx.operand(i).type == T.BOOL), None)
    if k is None or not bool(ctx.const(ins[k])):
        return None
    x = ctx.operand(ins[0])
    if len(x.dimensions) != 4:
        raise Unsupported("NCHW input of unknown rank")
    n, c, h, w = x.dimensions
    ops = [_op(Op.TRANSPOSE, [ins[0], ctx.constant(TO_NHWC)], [v := ctx.temp(ins[0], [n, h, w, c])])]
    ins[0], ins[k] = v, ctx.constant(False, T.BOOL)
    if Op(op.type) == Op.TRANSPOSE_CONV_2D and len(ins) == 9:
        shape = np.asarray(ctx.const(ins[3])).reshape(-1)
        if shape.size != 4:
            raise Unsupported("TRANSPOSE_CONV_2D output shape of other than 4 values")
        ins[3] = ctx.constant(shape[list(TO_NHWC)])
    outs, post = [], []
    for o in op.outputs:
        od = list(ctx.operand(o).dimensions)
        vo = ctx.temp(o, [od[i] for i in TO_NHWC] if len(od) == 4 else [0, 0, 0, 0])
        outs.append(vo)
        post.append(_op(Op.TRANSPOSE, [vo, ctx.constant(TO_NCHW)], [o]))
    return ops + [_op(Op(op.type), ins, outs)] + post


_PER_CHANNEL_OPS = frozenset({Op.CONV_2D, Op.DEPTHWISE_CONV_2D, Op.TRANSPOSE_CONV_2D, Op.GROUPED_CONV_2D})


def _uint8_per_channel(ctx: _Ctx, op: hal.Operation) -> Optional[list[hal.Operation]]:
    """A uint8 convolution with per-channel (int8) weights, which TFLite's kernels only take with int8
    activations: QUANTIZE the input to int8 (same scale, zero point - 128: each value - 128, exact),
    the int8 convolution (the same integer sums: x - zero point is unchanged), QUANTIZE back."""
    x, f, y = ctx.operand(op.inputs[0]), ctx.operand(op.inputs[1]), ctx.operand(op.outputs[0])
    if x.type != U8 or f.type != T.TENSOR_QUANT8_SYMM_PER_CHANNEL or y.type != U8:
        return None

    xs, ys = _shifted(ctx, op.inputs[0], I8), _shifted(ctx, op.outputs[0], I8)
    return [_requantize(ctx, op.inputs[0], xs), _op(Op(op.type), [xs] + list(op.inputs[1:]), [ys]),
            _requantize(ctx, ys, op.outputs[0])]


def _shifted(ctx: _Ctx, i: int, to: Any) -> int:
    """A temporary like operand ``i`` in the other 8-bit type: same scale, zero point moved by 128."""
    o = ctx.operand(i)
    return ctx._add(replace(o, type=to, zeroPoint=o.zeroPoint + (128 if to == U8 else -128),
                            lifetime=L.TEMPORARY_VARIABLE, location=hal.DataLocation()), None)


def _requantize(ctx: _Ctx, src: int, dst: int) -> hal.Operation:
    q = _op(Op.QUANTIZE, [src], [dst])
    ctx.byte_moves.add(q)  # NOTE: a uint8 <-> int8 copy of one scale: each value +- 128, exact
    ctx.final.add(q)
    return q


def _int8_asymmetric_weights(ctx: _Ctx, op: hal.Operation) -> Optional[list[hal.Operation]]:
    """An int8 convolution / fully connected layer with asymmetric int8 weights (TFLite's int8 kernels
    take symmetric ones only) in uint8 (whose kernels take any weight zero point): input, weights and
    output moved by 128 (the same integer sums: x - zero point is unchanged), the result moved back."""
    x, f, y = ctx.operand(op.inputs[0]), ctx.operand(op.inputs[1]), ctx.operand(op.outputs[0])
    if x.type != I8 or f.type != I8 or f.zeroPoint == 0 or y.type != I8:
        return None
    xu, yu = _shifted(ctx, op.inputs[0], U8), _shifted(ctx, op.outputs[0], U8)
    ops = [_requantize(ctx, op.inputs[0], xu)]
    if f.lifetime in _CONST:
        like = replace(f, type=U8, zeroPoint=f.zeroPoint + 128)
        fu = ctx.constant((ctx.value(op.inputs[1]).astype(np.int16) + 128).astype(np.uint8), like=like)
    else:
        fu = _shifted(ctx, op.inputs[1], U8)
        ops.append(_requantize(ctx, op.inputs[1], fu))
    return ops + [_op(Op(op.type), [xu, fu] + list(op.inputs[2:]), [yu]), _requantize(ctx, yu, op.outputs[0])]


_REQUANTIZED = {Op.MAXIMUM: slice(0, 2), Op.MINIMUM: slice(0, 2), Op.SELECT: slice(1, 3),
                Op.CONCATENATION: slice(0, -1)}


def _requantized_inputs(ctx: _Ctx, op: hal.Operation) -> Optional[list[hal.Operation]]:
    """MAXIMUM / MINIMUM / SELECT / int8 CONCATENATION of quantized values of other scales than the
    output's: NNAPI requantizes each input to the output's scale; these TFLite kernels copy or
    compare raw values: QUANTIZE each such input to the output's quantization first (TFLite's
    requantization, within the 1-step quant8 tolerance: measured)."""
    t = Op(op.type)
    y = ctx.operand(op.outputs[0])
    if y.type not in (U8, I8) or (t == Op.CONCATENATION and y.type != I8):
        return None
    ins, ops = list(op.inputs), []
    for k in range(len(ins))[_REQUANTIZED[t]]:
        o = ctx.operand(ins[k])
        if (o.scale, o.zeroPoint) == (y.scale, y.zeroPoint):
            continue
        v = ctx._add(replace(o, scale=y.scale, zeroPoint=y.zeroPoint, lifetime=L.TEMPORARY_VARIABLE,
                             location=hal.DataLocation()), None)
        q = _op(Op.QUANTIZE, [ins[k]], [v])
        ctx.byte_moves.add(q)
        ctx.final.add(q)
        ops.append(q)
        ins[k] = v
    return ops + [_op(t, ins, op.outputs)] if ops else None


def _compare_real_values(ctx: _Ctx, op: hal.Operation) -> Optional[list[hal.Operation]]:
    """A comparison of quantized inputs: NNAPI compares the real values (x - zero point) * scale in float32
    (each input its own scale), TFLite rescales both to integers with multipliers (found by nnhal vts --section
    random: wrong at a scale of 1 or more, the process aborted at 1) and its DEQUANTIZE is not that product
    either (the builtin kernel rounds twice: measured 1 ulp off on almost every scale; XNNPACK's is exact but
    a model may run on the builtin kernels): each input's real values in float32, compared in float32.  A
    constant's are computed here; a tensor's are looked up per 8-bit code (CAST to an int32 index, + 128 for
    int8, GATHER from the table of the 256 real values): every kernel involved copies or adds integers, so the
    values are the reference's bit for bit."""
    a = ctx.operand(op.inputs[0])
    if a.type not in (U8, I8):
        return None
    ops, reals = [], []
    for i in op.inputs[:2]:
        o = ctx.operand(i)
        if o.lifetime in _CONST:
            reals.append(ctx.constant(_real_values(o, ctx.value(i)), F))
            continue
        index = ctx._add(replace(o, type=I32, scale=0.0, zeroPoint=0, lifetime=L.TEMPORARY_VARIABLE,
                                 location=hal.DataLocation()), None)
        ops.append(_op(Op.CAST, [i], [index]))
        if o.type == I8:  # NOTE: the codes -128..127 as the indexes 0..255
            shifted = ctx.temp(index, o.dimensions)
            ops.append(_op(Op.ADD, [index, ctx.constant([128]), ctx.constant(0, T.INT32)], [shifted]))
            index = shifted
        codes = np.arange(256, dtype=np.int32) - (128 if o.type == I8 else 0)
        reals.append(ctx._add(replace(o, type=F, scale=0.0, zeroPoint=0, lifetime=L.TEMPORARY_VARIABLE,
                                      location=hal.DataLocation()), None))
        ops.append(_op(Op.GATHER, [ctx.constant(_real_values(o, codes), F), ctx.constant(0, T.INT32), index],
                       [reals[-1]]))
    return ops + [_op(Op(op.type), reals, op.outputs)]


def _real_values(o: hal.Operand, q: np.ndarray) -> np.ndarray:
    """The real values of the codes ``q`` of quantized operand ``o``, as the reference computes them."""
    return Tensor(T(o.type), np.asarray(q), o.scale, o.zeroPoint).dequantize()


def _static_dims(ctx: _Ctx, i: int, what: str) -> list[int]:
    d = list(ctx.operand(i).dimensions)
    if not d or 0 in d:
        raise Unsupported(f"{what} on an input of unknown shape")
    return d


def _on_last_axis(ctx: _Ctx, op: hal.Operation) -> Optional[list[hal.Operation]]:
    """SOFTMAX / LOG_SOFTMAX / L2_NORMALIZATION / LOCAL_RESPONSE_NORMALIZATION over another axis than the last
    (TFLite's only one): TRANSPOSE swapping it with the last, the operation, the same TRANSPOSE
    back; LRN (4-D only in TFLite) on fewer dimensions: RESHAPE to 4-D around it."""
    t = Op(op.type)
    at = _AXIS_AT[t]
    ins = list(op.inputs)
    rank = len(ctx.operand(ins[0]).dimensions)
    if rank == 0:
        return None  # NOTE: unknown rank: plan_operation refuses it
    axis = int(ctx.const(ins[at])) if len(ins) > at else -1
    axis += rank if axis < 0 else 0
    reshape = t == Op.LOCAL_RESPONSE_NORMALIZATION and rank != 4
    if len(ins) <= at and not reshape:
        return None
    if axis == rank - 1 and not reshape:
        return _on_last(ctx, t, ins[0], ins[1:at], op.outputs[0])
    if rank > 6:
        raise Unsupported(f"{t.name} on more than 6 dimensions (TFLite's TRANSPOSE)")
    dims = _static_dims(ctx, ins[0], t.name)
    perm = list(range(rank))
    perm[axis], perm[-1] = perm[-1], perm[axis]
    moved = [dims[p] for p in perm]
    out = op.outputs[0]
    ops: list = []
    cur = ins[0]
    if axis != rank - 1:
        ops.append(_op(Op.TRANSPOSE, [cur, ctx.constant(perm)], [v := ctx.temp(cur, moved)]))
        cur = v
    inner = [1] * (4 - rank) + moved if reshape else moved
    if reshape:
        ops.append(_op(Op.RESHAPE, [cur, ctx.constant(inner)], [v := ctx.temp(cur, inner)]))
        cur = v
    ops += _on_last(ctx, t, cur, ins[1:at], y := ctx.temp(out, inner))
    if reshape:
        last = axis == rank - 1
        ops.append(_op(Op.RESHAPE, [y, ctx.constant(moved)], [out if last else (v := ctx.temp(out, moved))]))
        if last:
            return ops
        y = v
    ops.append(_op(Op.TRANSPOSE, [y, ctx.constant(perm)], [out]))
    return ops


def _on_last(ctx: _Ctx, t: Op, x: int, params: list, y: int) -> list[hal.Operation]:
    """``t`` over the last axis of ``x``; LOG_SOFTMAX's beta (TFLite has none) as a MUL before it."""
    if t == Op.LOG_SOFTMAX:
        beta = float(ctx.const(params[0]))
        if beta != 1.0:
            v = ctx.temp(x, ctx.operand(x).dimensions)
            return [_op(Op.MUL, [x, ctx.constant([beta], T.TENSOR_FLOAT32), ctx.constant(0, T.INT32)], [v]),
                    _op(t, [v, ctx.constant(1.0, T.FLOAT32)], [y])]
    return [_op(t, [x] + list(params), [y])]


def _instance_normalization(ctx: _Ctx, op: hal.Operation) -> list[hal.Operation]:
    """INSTANCE_NORMALIZATION (NHWC, float) as NNAPI's formula in TFLite operators:
    (x - mean) * rsqrt(mean((x - mean)^2) + epsilon) * gamma + beta, means over H and W."""
    x, g, b, eps = op.inputs[:4]
    xo = ctx.operand(x)
    if xo.type != F or len(xo.dimensions) != 4:
        raise Unsupported("INSTANCE_NORMALIZATION other than on a 4-D float tensor")
    n, h, w, c = xo.dimensions
    stat = [n, 1, 1, c]
    axes, keep = ctx.constant([1, 2]), ctx.constant(1, T.INT32)
    none = ctx.constant(0, T.INT32)

    def scalar(i: int) -> int:
        return ctx.constant([float(ctx.const(i))], T.TENSOR_FLOAT32)

    m, d, d2, v, ve, r, nrm, sc = (ctx.temp(x, dims) for dims in (stat, xo.dimensions, xo.dimensions, stat, stat,
                                                                 stat, xo.dimensions, xo.dimensions))
    return [_op(Op.MEAN, [x, axes, keep], [m]), _op(Op.SUB, [x, m, none], [d]), _op(Op.MUL, [d, d, none], [d2]),
            _op(Op.MEAN, [d2, axes, keep], [v]), _op(Op.ADD, [v, scalar(eps), none], [ve]),
            _op(Op.RSQRT, [ve], [r]), _op(Op.MUL, [d, r, none], [nrm]), _op(Op.MUL, [nrm, scalar(g), none], [sc]),
            _op(Op.ADD, [sc, scalar(b), none], op.outputs)]


def _elu_alpha(ctx: _Ctx, op: hal.Operation) -> Optional[list[hal.Operation]]:
    """ELU with alpha other than TFLite's 1: max(0, x) + alpha * min(0, elu(x)) (NNAPI's formula,
    elu(x) = exp(x) - 1 below 0)."""
    x, a = op.inputs[:2]
    alpha = float(ctx.const(a))
    if alpha == 1.0 or ctx.operand(x).type != F:
        return None
    dims = ctx.operand(x).dimensions
    e, neg, scaled, pos = (ctx.temp(x, dims) for _ in range(4))
    none = ctx.constant(0, T.INT32)
    elu = _op(Op.ELU, [x, ctx.constant(1.0, T.FLOAT32)], [e])
    ctx.final.add(elu)
    return [elu, _op(Op.MINIMUM, [e, ctx.constant([0.0], T.TENSOR_FLOAT32)], [neg]),
            _op(Op.MUL, [neg, ctx.constant([alpha], T.TENSOR_FLOAT32), none], [scaled]),
            _op(Op.RELU, [x], [pos]), _op(Op.ADD, [pos, scaled, none], op.outputs)]


def _channel_shuffle(ctx: _Ctx, op: hal.Operation) -> list[hal.Operation]:
    """CHANNEL_SHUFFLE as RESHAPE [.., groups, C / groups, ..], TRANSPOSE of those two, RESHAPE back."""
    x, g_in, a_in = op.inputs
    dims = _static_dims(ctx, x, "CHANNEL_SHUFFLE")
    xo, yo = ctx.operand(x), ctx.operand(op.outputs[0])
    if (xo.scale, xo.zeroPoint) != (yo.scale, yo.zeroPoint):
        raise Unsupported("CHANNEL_SHUFFLE output quantized otherwise than its input")
    g, axis = int(ctx.const(g_in)), int(ctx.const(a_in))
    axis += len(dims) if axis < 0 else 0
    if g <= 0 or not 0 <= axis < len(dims) or dims[axis] % g:
        raise Unsupported("CHANNEL_SHUFFLE groups do not divide the channels")
    split = dims[:axis] + [g, dims[axis] // g] + dims[axis + 1:]
    perm = list(range(len(split)))
    perm[axis], perm[axis + 1] = axis + 1, axis
    return [_op(Op.RESHAPE, [x, ctx.constant(split)], [a := ctx.temp(x, split)]),
            _op(Op.TRANSPOSE, [a, ctx.constant(perm)], [b := ctx.temp(x, [split[p] for p in perm])]),
            _op(Op.RESHAPE, [b, ctx.constant(dims)], [op.outputs[0]])]


def _grouped_conv(ctx: _Ctx, op: hal.Operation) -> list[hal.Operation]:
    """GROUPED_CONV_2D (NHWC) as SPLIT of the input's channels, one CONV_2D per group on its
    slice of the filter and bias (constants sliced here, else SPLIT too), CONCATENATION of the
    results (each group's output quantized as the whole output: a byte copy)."""
    ins = list(op.inputs)
    explicit = len(ins) == 12
    g_at = 9 if explicit else 6
    groups = int(ctx.const(ins[g_at]))
    x, f, b = (ctx.operand(i) for i in ins[:3])
    if len(x.dimensions) != 4 or len(f.dimensions) != 4 or not x.dimensions[3] or not f.dimensions[0]:
        raise Unsupported("GROUPED_CONV_2D on unknown channel counts")
    cin, cout = x.dimensions[3], f.dimensions[0]
    if groups <= 0 or cin % groups or cout % groups:
        raise Unsupported("GROUPED_CONV_2D groups do not divide the channels")
    params = ins[3:g_at] + ins[g_at + 1:]  # padding, strides, activation, layout (the CONV_2D form's)
    if groups == 1:
        return [_op(Op.CONV_2D, ins[:3] + params, op.outputs)]
    og = cout // groups
    n, h, w, _ = x.dimensions
    parts_x = [ctx.temp(ins[0], [n, h, w, cin // groups]) for _ in range(groups)]
    ops = [_op(Op.SPLIT, [ins[0], ctx.constant(3, T.INT32), ctx.constant(groups, T.INT32)], parts_x)]

    def sliced(i: int, o: hal.Operand) -> list[int]:
        likes = []
        for k in range(groups):
            like = replace(o, dimensions=[og] + list(o.dimensions[1:]), location=hal.DataLocation())
            cq = o.extraParams.channelQuant if o.extraParams is not None else None
            if cq is not None:
                like.extraParams = hal.OperandExtraParams(channelQuant=hal.SymmPerChannelQuantParams(
                    scales=list(cq.scales[k * og:(k + 1) * og]), channelDim=cq.channelDim))
            likes.append(like)
        if o.lifetime in _CONST:
            v = ctx.value(i)
            return [ctx.constant(v[k * og:(k + 1) * og], like=like) for k, like in enumerate(likes)]
        outs = [ctx._add(replace(like, lifetime=L.TEMPORARY_VARIABLE), None) for like in likes]
        split = _op(Op.SPLIT, [i, ctx.constant(0, T.INT32), ctx.constant(groups, T.INT32)], outs)
        ctx.byte_moves.add(split)  # NOTE: SPLIT copies bytes, whatever the element type (a bias, weights)
        ops.append(split)
        return outs

    if f.extraParams is not None and f.extraParams.channelQuant is not None and f.extraParams.channelQuant.channelDim:
        raise Unsupported("GROUPED_CONV_2D per-channel filter on another axis than 0")
    parts_f, parts_b = sliced(ins[1], f), sliced(ins[2], b)
    yd = list(ctx.operand(op.outputs[0]).dimensions) or [0, 0, 0, 0]
    parts_y = [ctx.temp(op.outputs[0], yd[:3] + [og]) for _ in range(groups)]
    for k in range(groups):
        ops.append(_op(Op.CONV_2D, [parts_x[k], parts_f[k], parts_b[k]] + params, [parts_y[k]]))
    ops.append(_op(Op.CONCATENATION, parts_y + [ctx.constant(3, T.INT32)], op.outputs))
    return ops


def _tconv_same_head(out: int, stride: int, k: int) -> int:
    """TFLite TRANSPOSE_CONV's SAME head padding (ComputePaddingHeightWidth on the output size)."""
    total = ((out + stride - 1) // stride - 1) * stride + k - out
    return max(total, 0) // 2


def _tconv_input_size(out: int, stride: int, k: int, tfl_padding: int) -> int:
    """The input size TFLite's TRANSPOSE_CONV derives from its output size (it must be the input's)."""
    return (out + stride - 1) // stride if tfl_padding == 1 else (out + stride - k) // stride


def _transpose_conv(ctx: _Ctx, op: hal.Operation) -> list[hal.Operation]:
    """TRANSPOSE_CONV_2D (NHWC) in TFLite's form: a constant output shape and SAME / VALID whose
    head padding (the only one the kernels use; the output shape crops the tail) is the HAL's."""
    ins = list(op.inputs)
    x, f = ctx.operand(ins[0]), ctx.operand(ins[1])
    if len(x.dimensions) != 4 or 0 in x.dimensions[1:3] or len(f.dimensions) != 4:
        raise Unsupported("TRANSPOSE_CONV_2D on an input of unknown height / width")
    n, h, w, _ = x.dimensions
    cout, kh, kw, _ = f.dimensions
    if len(ins) == 11:
        pl, pr, pt, pb, sw, sh = (int(ctx.const(i)) for i in ins[3:9])
        act = ins[9]
    else:
        shape = [int(v) for v in np.asarray(ctx.const(ins[3])).reshape(-1)]
        scheme, sw, sh = (int(ctx.const(i)) for i in ins[4:7])
        act = ins[7]
        if len(shape) != 4:
            raise Unsupported("TRANSPOSE_CONV_2D output shape of other than 4 values")
        heads = []
        for size, s, k in ((shape[2], sw, kw), (shape[1], sh, kh)):
            head = tail = 0
            if scheme == 1:  # NOTE: the reference's implicit padding (nnhal.ops.conv_kernels.explicit_padding)
                tmp = ((size + s - 1) // s - 1) * s + k
                head = (tmp - size) // 2 if tmp > size else 0
                tail = (tmp - size) - head
            heads.append((head, tail))
        (pl, pr), (pt, pb) = heads
        if (w - 1) * sw + kw - pl - pr != shape[2] or (h - 1) * sh + kh - pt - pb != shape[1]:
            raise Unsupported("TRANSPOSE_CONV_2D output shape other than the padding gives")
    if sw <= 0 or sh <= 0:
        raise Unsupported("TRANSPOSE_CONV_2D stride not positive")
    ow, oh = (w - 1) * sw + kw - pl - pr, (h - 1) * sh + kh - pt - pb
    crop = None
    if pl == pt == 0:
        tfl = 2
    elif (pl, pt) == (_tconv_same_head(ow, sw, kw), _tconv_same_head(oh, sh, kh)):
        tfl = 1
    elif min(pl, pr, pt, pb) >= 0:
        # NOTE: any other padding: the whole (VALID) result, then SLICE the HAL's window of it
        tfl, crop, (oh, ow) = 2, (pt, pl, oh, ow), ((h - 1) * sh + kh, (w - 1) * sw + kw)
    else:
        raise Unsupported(f"TRANSPOSE_CONV_2D padding {[pl, pr, pt, pb]} (negative) has no TFLite form")
    if crop is None and (_tconv_input_size(ow, sw, kw, tfl) != w or _tconv_input_size(oh, sh, kh, tfl) != h):
        # NOTE: an output size TFLite's kernel would not derive the input size back from (found by
        # nnhal.tools.status_diff: a tail padding of 1 with stride 2; XNNPACK then made another shape)
        if min(pl, pr, pt, pb) < 0:
            raise Unsupported(f"TRANSPOSE_CONV_2D padding {[pl, pr, pt, pb]} (negative) has no TFLite form")
        tfl, crop, (oh, ow) = 2, (pt, pl, oh, ow), ((h - 1) * sh + kh, (w - 1) * sw + kw)
    full = ctx.temp(op.outputs[0], [n, oh, ow, cout]) if crop else op.outputs[0]
    y = _op(Op.TRANSPOSE_CONV_2D, ins[:3] + [ctx.constant([n, oh, ow, cout]), ctx.constant(tfl, T.INT32),
                                             ctx.constant(sw, T.INT32), ctx.constant(sh, T.INT32), act,
                                             ctx.constant(False, T.BOOL)], [full])
    ctx.final.add(y)
    if crop is None:
        return [y]
    top, left, height, width = crop
    return [y, _op(Op.SLICE, [full, ctx.constant([0, top, left, 0]), ctx.constant([-1, height, width, -1])],
                   op.outputs)]


def plan_operation(ctx: _Ctx, op: hal.Operation) -> Plan:
    """Where each HAL input of ``op`` goes in TFLite, or Unsupported(reason)."""
    try:
        t = Op(op.type)
    except ValueError:
        raise Unsupported("OEM / extension operation") from None
    if t in REASONS:
        raise Unsupported(f"{t.name}: {REASONS[t]}")
    if t == Op.DIV and op.inputs and ctx.operand(op.inputs[0]).type == I32 and op not in ctx.integer:
        raise Unsupported("DIV of int32: TFLite's integer division differs from NNAPI's (measured: "
                          "div_int32_by_zero fails)")
    m = mapping(t)
    if m is None:
        raise Unsupported(f"{t.name} has no direct TFLite operator in the table")
    if t not in EXACT:
        raise Unsupported(f"{t.name}: the lowering is not verified against the conformance vectors")
    # NOTE: the data input: PACK's input 0 is its axis
    x0 = ctx.operand(op.inputs[1 if t == Op.PACK else 0]) if len(op.inputs) > (t == Op.PACK) else None
    if x0 is not None and (t, x0.type) in REASONS_BY_TYPE:
        raise Unsupported(f"{t.name} on {T(x0.type).name}: {REASONS_BY_TYPE[(t, x0.type)]}")
    if x0 is None or (x0.type not in EXACT[t] and op not in ctx.byte_moves and op not in ctx.integer):
        raise Unsupported(f"{t.name} on {T(x0.type).name if x0 is not None else 'nothing'}: not an exact "
                          f"TFLite kernel here (exact for {sorted(T(v).name for v in EXACT[t])})")
    for i in list(op.inputs) + list(op.outputs):
        o = ctx.operand(i)
        if o.type in (T.TENSOR_FLOAT16, T.FLOAT16):
            raise Unsupported("float16 operands")
        if o.lifetime == L.SUBGRAPH:
            raise Unsupported("control flow")
        if o.type not in TFLITE_TYPE:
            raise Unsupported(f"operand of type {T(o.type).name}")
        if o.type in _TENSOR_TYPES and o.lifetime != L.NO_VALUE and not o.dimensions \
                and not ctx.rank_later(o):
            raise Unsupported("a tensor of unknown rank")
    ins = _implicit_inputs(ctx, op) if t in (Op.CONV_2D, Op.DEPTHWISE_CONV_2D, *_POOLS) else list(op.inputs)
    if t in (Op.MAXIMUM, Op.MINIMUM) or (t == Op.CONCATENATION and x0.type == I8):
        tensors = list(op.inputs[:-1] if t == Op.CONCATENATION else op.inputs[:2]) + list(op.outputs)
        quants = {(ctx.operand(i).scale, ctx.operand(i).zeroPoint) for i in tensors}
        if x0.type != F and len(quants) > 1:
            # NOTE: NNAPI requantizes each input to the output's scale; these TFLite kernels assume one scale
            raise Unsupported(f"{t.name}: quantized inputs and output of different scales / zero points")
    if t in _COMPARISONS and x0.type in (U8, I8):
        raise Unsupported(f"internal: a quantized {t.name} not compared on its real values")
    if t == Op.SELECT and ctx.operand(op.inputs[1]).type in (U8, I8) and len(
            {(ctx.operand(i).scale, ctx.operand(i).zeroPoint) for i in (*op.inputs[1:3], op.outputs[0])}) > 1:
        raise Unsupported("SELECT of quantized values of different scales / zero points (TFLite copies bytes)")
    if t in _REDUCTIONS and ctx.operand(op.inputs[1]).lifetime not in _CONST and _scalar_read_later(ctx, op):
        # NOTE: found by nnhal vts --section random (a REDUCE_MAX read by HASHTABLE_LOOKUP failed every execution):
        # with its axes known only at execution, TFLite's result of a reduction to one value is a scalar, which
        # a later operator reads with the wrong rank (a model output is reported as [1] by the run path)
        raise Unsupported(f"{t.name} with its axes given at execution and a result of rank 1 read by a later "
                          "operation (TFLite's result is then a scalar where the HAL's is [1])")
    if t == Op.ADD and x0.type in (U8, I8) and not _add_multipliers_valid(ctx, op):
        # NOTE: LiteRT's ADD checks its output multiplier is below one with an assertion that aborts the
        # process at prepare (found writing tests/test_litert_held_to_reference.py); the reference fails
        # such a model's executions (the same multipliers' check, nnhal.ops.broadcast.add_sub_multipliers)
        raise Unsupported("quantized ADD whose output requantization multiplier is not below one (LiteRT aborts "
                          "the process preparing it)")
    if t == Op.PRELU and list(x0.dimensions) != list(ctx.operand(op.outputs[0]).dimensions):
        # NOTE: TFLite's PRELU broadcasts the alpha into the input only (it failed to prepare otherwise:
        # found by nnhal vts --section random)
        raise Unsupported("PRELU whose input is smaller than its result (TFLite broadcasts the alpha only)")
    if t == Op.CAST and x0.type == I32 and ctx.operand(op.outputs[0]).type in (U8, I8) and op not in ctx.integer:
        raise Unsupported("CAST of int32 to quant8 (NNAPI saturates, TFLite wraps)")
    args: list = []
    if t == Op.PACK:
        args = [("tensor", k, i) for k, i in enumerate(ins[1:])]
        return Plan(m, args + [("option", "valuesCount", len(ins) - 1), ("option", "axis", int(ctx.const(ins[0])))])
    if t == Op.CONCATENATION:
        axis = int(ctx.const(ins[-1]))
        rank = len(x0.dimensions)
        args = [("tensor", k, i) for k, i in enumerate(ins[:-1])]
        args.append(("option", "axis", axis + rank if axis < 0 else axis))
        return Plan(m, args)
    if t == Op.LOCAL_RESPONSE_NORMALIZATION and (len(x0.dimensions) != 4 or len(ins) > 5):
        raise Unsupported("internal: LOCAL_RESPONSE_NORMALIZATION other than over the last axis of a 4-D tensor")
    if t in (Op.SOFTMAX, Op.L2_NORMALIZATION) and len(ins) > len(m.inputs):
        raise Unsupported(f"internal: {t.name} with an axis input")
    if t == Op.SOFTMAX and x0.type != F:
        out = ctx.operand(op.outputs[0])
        zp = 0 if x0.type == U8 else -128
        if out.scale != 1 / 256 or out.zeroPoint != zp:
            raise Unsupported("quantized SOFTMAX output not q(1/256)")
    weighted = (Op.CONV_2D, Op.DEPTHWISE_CONV_2D, Op.FULLY_CONNECTED, Op.TRANSPOSE_CONV_2D)
    # NOTE: weights given at run time (float or quantized) run on LiteRT's builtin kernels (XNNPACK
    # takes static weights only); measured exact on the conformance vectors' all_tensors_as_inputs models
    if t in weighted:
        f = ctx.operand(op.inputs[1])
        if f.type == I8 and f.zeroPoint != 0:
            raise Unsupported("int8 weights with a non-zero zero point (TFLite's int8 kernels take symmetric weights)")
        if f.type == T.TENSOR_QUANT8_SYMM_PER_CHANNEL and x0.type == U8:
            raise Unsupported("uint8 input with per-channel weights (TFLite's per-channel kernels are int8)")
    if len(ins) > len(m.inputs):
        raise Unsupported(f"{t.name} with {len(ins)} inputs")
    for k, x in enumerate(ins):
        if k >= len(m.inputs):
            break
        a = m.inputs[k]
        if a.kind == "tensor":
            if isinstance(x, tuple):
                raise Unsupported("internal: a constant where a tensor is expected")
            args.append(("tensor", a.index, x))
        elif a.kind == "const":
            v = _value(ctx, x)
            if bool(v) != bool(a.value) if a.type == T.BOOL else v != a.value:
                raise Unsupported("NCHW layout (TFLite's kernels are NHWC only)" if a.type == T.BOOL
                                  else f"input {k} is {v}, TFLite's form needs {a.value}")
        elif a.kind == "option":
            v = _value(ctx, x)
            if a.conv == "padding":
                if int(v) not in PADDING_TO_TFLITE:
                    raise Unsupported(f"padding scheme {v}")
                v = PADDING_TO_TFLITE[int(v)]
            elif a.conv == "act":
                if int(v) not in ACTIVATIONS_TO_TFLITE:
                    raise Unsupported(f"fused activation {v}")
                v = ACTIVATIONS_TO_TFLITE[int(v)]
            elif a.conv == "float":
                v = float(v)
            elif a.conv == "bool":
                v = bool(v)
            else:
                v = int(v)
                if t == Op.MEAN and a.name == "keepDims":
                    v = v > 0  # NOTE: MEAN's keep_dims is an INT32, "if positive" (found by status_diff: 2 failed)
            args.append(("option", a.name, v))
        elif a.kind == "derived":
            if a.name in ("bias", "reshape_shape") or a.name.startswith(("int32_const", "int32_tensor")):
                if isinstance(x, tuple):
                    raise Unsupported("internal: a constant where a tensor is expected")
                # NOTE: int32_constK / int32_tensorK name TFLite input K; the bias is input 2, the shape 1
                k_in = {"bias": 2, "reshape_shape": 1}.get(a.name) or int(a.name[len(a.name.rstrip("0123456789")):])
                args.append(("tensor", k_in, x))
            elif a.name in ("out_w", "out_h"):
                size = _resize_size(ctx, op, x, a.name == "out_w")
                sizes = dict(next((v for kind, name, v in args if name == "size"), {}))
                sizes[a.name] = size
                args = [e for e in args if e[1] != "size"] + [("const_tensor_parts", "size", sizes)]
            elif a.name in ("split_axis", "tconv_bias"):
                # NOTE: SPLIT's axis is TFLite's input 0 (a constant tensor); TRANSPOSE_CONV's bias its input 3
                if a.name == "split_axis" and ctx.operand(x).lifetime not in _CONST:
                    raise Unsupported("SPLIT along an axis given at run time")
                args.append(("tensor", 0 if a.name == "split_axis" else 3, x))
            elif a.name in ("axis_scalar", "k_scalar", "scalar1"):
                args.append(("tensor", 1, x))  # NOTE: a HAL scalar that TFLite takes as a 0-D tensor input
            elif a.name == "squeeze_dims":
                o = ctx.operand(x)
                dims = [] if o.lifetime == L.NO_VALUE else [int(d) for d in np.asarray(ctx.const(x)).reshape(-1)]
                args.append(("option", "squeezeDims", dims))
            elif a.name == "pad_value":
                # NOTE: TFLite's PADV2 pads with a 0-D tensor of the input's type (quantized: the raw value)
                like = replace(x0, dimensions=[], lifetime=L.CONSTANT_COPY, location=hal.DataLocation())
                args.append(("tensor", 2, ctx.constant(_value(ctx, x), like=like)))
            elif a.name == "depth_multiplier":
                args.append(("option", "depthMultiplier", int(_value(ctx, x))))
            else:
                raise Unsupported(f"{t.name}: input {k} ({a.name}) is not lowered")
    parts = next((v for kind, name, v in args if kind == "const_tensor_parts"), None)
    if parts is not None:
        args = [e for e in args if e[0] != "const_tensor_parts"] + [("const_tensor", 1, [parts["out_h"],
                                                                                        parts["out_w"]])]
    if t == Op.SPLIT:
        # NOTE: found by nnhal.tools.status_diff: LiteRT's SPLIT writes num_splits outputs whatever the
        # operator has (a crash); the reference fails such an execution
        n, axis = next(v for kind, name, v in args if name == "numSplits"), int(ctx.const(op.inputs[1]))
        dims = x0.dimensions
        if n != len(op.outputs) or not -len(dims) <= axis < len(dims) or (dims[axis] and dims[axis] % n):
            raise Unsupported(f"SPLIT into {n} along axis {axis} of {list(dims)} with {len(op.outputs)} outputs")
    if t == Op.LOCAL_RESPONSE_NORMALIZATION and next(v for kind, name, v in args if name == "radius") < 0:
        # NOTE: found by nnhal.tools.status_diff: LiteRT's kernel corrupts memory (the reference sums nothing)
        raise Unsupported("LOCAL_RESPONSE_NORMALIZATION with a negative radius (LiteRT's kernel is unsafe there)")
    if t == Op.BATCH_TO_SPACE_ND:
        args.append(("const_tensor", 2, np.zeros((2, 2), np.int32)))  # NOTE: NNAPI's crops are always zero
    if t == Op.DEPTHWISE_CONV_2D:
        dm = next(v for kind, name, v in args if name == "depthMultiplier")
        if x0.dimensions and x0.dimensions[-1] and ctx.operand(op.inputs[1]).dimensions[-1] != \
                x0.dimensions[-1] * dm:
            raise Unsupported("depth multiplier inconsistent with the filter")
    return Plan(m, args)


def _add_multipliers_valid(ctx: _Ctx, op: hal.Operation) -> bool:
    try:
        add_sub_multipliers(*(ctx.operand(i) for i in (op.inputs[0], op.inputs[1], op.outputs[0])))
    except ValueError:
        return False
    return True


def _scalar_read_later(ctx: _Ctx, op: hal.Operation) -> bool:
    """Whether a reduction's result may be TFLite's scalar (rank <= 1, keep_dims not known true) and a later
    operation reads it."""
    return len(ctx.operand(op.outputs[0]).dimensions) <= 1 and not (
        ctx.operand(op.inputs[2]).lifetime in _CONST and bool(ctx.const(op.inputs[2]) > 0)) and \
        any(op.outputs[0] in o.inputs for o in ctx.graph.operations)


def _resize_size(ctx: _Ctx, op: hal.Operation, x: Any, width: bool) -> int:
    """The output width / height of a RESIZE_*: an INT32 size, or a FLOAT32 scale times the input's
    (static) size, floored as the HAL spec says."""
    o = ctx.operand(x) if not isinstance(x, tuple) else None
    v = _value(ctx, x)
    if o is not None and o.type == T.FLOAT32:
        dims = ctx.operand(op.inputs[0]).dimensions
        if len(dims) != 4 or not dims[2 if width else 1]:
            raise Unsupported("a resize scale on an input of unknown size")
        return int(np.floor(dims[2 if width else 1] * np.float32(v)))
    return int(v)


def static_shapes(model: hal.Model, pools: Sequence[Any]) -> dict[int, tuple[int, ...]]:
    """Per main operand an operation computes whose declared dimensions are incomplete (unknown rank, or a 0):
    its shape, where the model fixes it (:func:`nnhal.engine.reference_check.fixed_shapes`, the reference's
    dry run); {} without a dry run when every such operand is declared in full.  Done once per model by a
    caller checking many operations (:func:`check_operation`'s ``shapes``)."""
    main = model.main
    if all(o.dimensions and 0 not in o.dimensions or not hal.is_tensor_type(o.type)
           for o in (main.operands[i] for op in main.operations for i in op.outputs)):
        return {}
    shapes = fixed_shapes(model, pools)
    return {i: s for i, s in shapes.items() if not main.operands[i].dimensions or 0 in main.operands[i].dimensions}


def uses_float16(model: hal.Model) -> bool:
    """Whether some operand of the model is float16 (the lowering then computes in float32 between
    CASTs): a scan of every operand, done once per model by a caller checking many operations
    (:func:`check_operation`'s ``f16``)."""
    return any(o.type in _F16_AS_F32 for g in [model.main, *model.referenced] for o in g.operands)


def check_operation(model: hal.Model, pools: Sequence[Any], op: hal.Operation, f16: Optional[bool] = None,
                    shapes: Optional[dict[int, tuple[int, ...]]] = None) -> str:
    """Why ``op`` of the (validated) model cannot be lowered exactly; "" when it can.  ``f16``:
    :func:`uses_float16` of the model, ``shapes``: its :func:`static_shapes`, when the caller has them (each
    call otherwise computes them)."""
    try:
        _check(_Ctx(model, pools, f16=f16, shapes=shapes), op)
    except Unsupported as e:
        return str(e)
    except _LOWERING_ERRORS as e:
        return f"not lowered ({type(e).__name__}: {e})"
    return ""


def rewritten(model: hal.Model, pools: Sequence[Any], op: hal.Operation) -> list[str]:
    """The names of the HAL operations ``op`` is rewritten into before lowering (``[its own]``
    when it has a direct TFLite form): what the driver computes, for logs and tests."""
    return [Op(o.type).name for o in expand(_Ctx(model, pools), op)]


def _check(ctx: _Ctx, op: hal.Operation, depth: int = 0) -> None:
    if op.type != Op.IF:
        for o in expand(ctx, op):
            plan_operation(ctx, o)
        return
    # NOTE: IF is TFLite's IF when every operation of both branches (recursively) lowers exactly
    if depth > _MAX_DEPTH:
        raise Unsupported("IF: subgraphs nested too deep")
    cond = ctx.operand(op.inputs[0])
    if cond.type != T.TENSOR_BOOL8:
        raise Unsupported("IF: a condition other than a TENSOR_BOOL8")
    for i in [*op.inputs[3:], *op.outputs]:
        check_operand_type(ctx.operand(i), f"IF operand {i}")
        if not ctx.operand(i).dimensions and not ctx.rank_later(ctx.operand(i)):
            raise Unsupported("IF: an operand of unknown rank")
    for i in op.inputs[1:3]:
        if ctx.operand(i).lifetime != L.SUBGRAPH:
            raise Unsupported("IF: a branch that is not a referenced subgraph")
        sub = _Ctx(ctx.model, ctx.pools, int(ctx.value(i)))
        for inner in sub.graph.operations:
            try:
                _check(sub, inner, depth + 1)
            except Unsupported as e:
                raise Unsupported(f"IF: a branch's {Op(inner.type).name}: {e}") from None
        if any(sub.operand(o).lifetime != L.SUBGRAPH_OUTPUT for o in sub.graph.outputIndexes):
            raise Unsupported("IF: a branch output that is not an operation's result")
        if len(sub.graph.inputIndexes) != len(op.inputs) - 3:
            raise Unsupported("IF: a branch taking other inputs than the IF passes")


def omitted_input_values(model: hal.Model) -> list[Optional[np.ndarray]]:
    """Per main input of a lowered model: the value the HAL gives it when a request omits it
    (``hasNoValue``) and the lowered graph needs one, or None (the execution then fails, as the
    reference's does).  TRANSPOSE's permutation, when every use of the input is one: omitted, the
    axes reversed (the HAL's optional ``perm``; TFLite's TRANSPOSE needs it as a tensor)."""
    main = model.main
    uses: dict[int, list[tuple[hal.Operation, int]]] = {}
    for op in main.operations:
        for k, i in enumerate(op.inputs):
            uses.setdefault(i, []).append((op, k))
    out: list[Optional[np.ndarray]] = []
    for i in main.inputIndexes:
        u = uses.get(i, [])
        ranks = {len(main.operands[op.inputs[0]].dimensions) for op, _ in u}
        perm_only = bool(u) and all(op.type == Op.TRANSPOSE and k == 1 for op, k in u) and len(ranks) == 1
        rank = next(iter(ranks)) if perm_only else 0
        out.append(np.arange(rank - 1, -1, -1, dtype=np.int32) if rank else None)
    return out


def lower(model: hal.Model, pools: Sequence[Any]) -> bytes:
    """The TFLite flatbuffer of a validated HAL model whose main subgraph's
    operations all pass :func:`check_operation`; Unsupported otherwise."""
    return lower_traced(model, pools)[0]


def lower_traced(model: hal.Model, pools: Sequence[Any]) -> tuple[bytes, list[Optional[int]]]:
    """:func:`lower`, with the HAL main operation each operator of the TFLite
    main subgraph comes from (None: the lowering's own, such as an input CAST)."""
    b = _Builder(model, pools)
    try:
        return b.build(), b.owners
    except _LOWERING_ERRORS as e:  # NOTE: a model check_operation missed: refused at prepare, never a crash
        raise Unsupported(f"not lowered ({type(e).__name__}: {e})") from None


_LOWERING_ERRORS = (ValueError, LookupError, TypeError, AttributeError, StopIteration, ArithmeticError)
