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

Deliberately narrow: only operations whose TFLite kernels compute the HAL's
results for the operand types listed in ``EXACT`` (measured against the
conformance vectors, see tests/test_litert_driver.py), NHWC only, the main
subgraph only (IF / WHILE are not lowered), no float16, no quant16.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np

from nnhal import hal
from nnhal.executor import constant_value
from nnhal.tflite.schema import builtin_code, schema, write_model
from nnhal.tflite.table import (
    ACTIVATIONS_TO_TFLITE,
    MAPPINGS,
    OPTIONS,
    PADDING_TO_TFLITE,
    Arg,
    Mapping,
)

T = hal.OperandType
Op = hal.OperationType
L = hal.OperandLifeTime

# HAL operand type -> TFLite TensorType
TFLITE_TYPE = {T.TENSOR_FLOAT32: 0, T.TENSOR_INT32: 2, T.TENSOR_QUANT8_ASYMM: 3, T.TENSOR_BOOL8: 6,
               T.TENSOR_QUANT8_ASYMM_SIGNED: 9, T.TENSOR_QUANT8_SYMM_PER_CHANNEL: 9,
               T.FLOAT32: 0, T.INT32: 2, T.BOOL: 6}
F, U8, I8 = T.TENSOR_FLOAT32, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED
FQ = frozenset({F, U8, I8})

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
    Op.SPACE_TO_DEPTH: FQ, Op.DEPTH_TO_SPACE: FQ, Op.MEAN: frozenset({F}), Op.PRELU: frozenset({F}),
    Op.L2_NORMALIZATION: FQ, Op.LOCAL_RESPONSE_NORMALIZATION: frozenset({F}), Op.SPACE_TO_BATCH_ND: FQ,
    Op.BATCH_TO_SPACE_ND: FQ, Op.STRIDED_SLICE: FQ, Op.SLICE: FQ, Op.RESIZE_BILINEAR: FQ,
    Op.RESIZE_NEAREST_NEIGHBOR: FQ,
}
# QUANTIZE's table entry is a rewrite (TFLite -> HAL); HAL -> TFLite it is the plain builtin
_EXTRA = {Op.QUANTIZE: Mapping("QUANTIZE", Op.QUANTIZE, (Arg("tensor", index=0),))}
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


@dataclass
class _Ctx:
    model: hal.Model
    pools: Sequence[Any]

    def operand(self, i: int) -> hal.Operand:
        return self.model.main.operands[i]

    def const(self, i: int) -> Any:
        o = self.operand(i)
        if o.lifetime not in (L.CONSTANT_COPY, L.CONSTANT_REFERENCE):
            raise Unsupported(f"input operand {i} is not a constant (TFLite takes it as an option)")
        v = constant_value(self.model, o, self.pools)
        return v.item() if v is not None and v.ndim == 0 else v


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
    """Collects the TFLite tensors, buffers and operators of the main subgraph."""

    def __init__(self, model: hal.Model, pools: Sequence[Any]):
        self.ctx = _Ctx(model, pools)
        self.s = schema()
        self.m = self.s.ModelT()
        self.m.version = 3
        self.m.description = b"nnhal: lowered from a HAL 1.3 model"
        self.m.buffers = [self.s.BufferT()]
        self.m.operatorCodes = []
        self.codes: dict[str, int] = {}
        self.tensors: list = []
        self.by_operand: dict[int, int] = {}
        self.bias_scales: dict[int, np.ndarray] = {}  # int32 bias operand -> its per-channel scales

    def tensor_of(self, i: int) -> int:
        if i in self.by_operand:
            return self.by_operand[i]
        o = self.ctx.operand(i)
        check_operand_type(o, f"operand {i}")
        if o.lifetime == L.NO_VALUE:
            return -1
        dims = list(o.dimensions)
        if not dims and o.type not in (T.FLOAT32, T.INT32, T.BOOL) and o.lifetime != L.CONSTANT_COPY \
                and o.lifetime != L.CONSTANT_REFERENCE:
            raise Unsupported(f"operand {i} has an unknown rank")
        data = None
        if o.lifetime in (L.CONSTANT_COPY, L.CONSTANT_REFERENCE):
            data = constant_value(self.ctx.model, o, self.ctx.pools)
            dims = list(np.shape(data))
        tt = self.s.TensorT()
        tt.shape = np.asarray([d if d else 1 for d in dims], dtype=np.int32)
        if 0 in dims:
            tt.shapeSignature = np.asarray([d if d else -1 for d in dims], dtype=np.int32)
        tt.type = TFLITE_TYPE[T(o.type)]
        tt.name = f"hal_{i}".encode()
        tt.buffer = 0
        if data is not None:
            b = self.s.BufferT()
            b.data = np.frombuffer(np.ascontiguousarray(data).tobytes(), np.uint8)
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
        elif o.type in (U8, I8) or (o.type == T.TENSOR_INT32 and o.scale):
            q = self.s.QuantizationParametersT()
            q.scale = np.asarray([o.scale], np.float32)
            q.zeroPoint = np.asarray([o.zeroPoint], np.int64)
        tt.quantization = q
        self.tensors.append(tt)
        self.by_operand[i] = len(self.tensors) - 1
        return self.by_operand[i]

    def const_tensor(self, arr: np.ndarray) -> int:
        tt = self.s.TensorT()
        tt.shape = np.asarray(arr.shape, dtype=np.int32)
        tt.type = 2
        tt.name = f"nnhal_const_{len(self.tensors)}".encode()
        b = self.s.BufferT()
        b.data = np.frombuffer(np.ascontiguousarray(arr, dtype=np.int32).tobytes(), np.uint8)
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

    def operation(self, op: hal.Operation) -> None:
        plan = plan_operation(self.ctx, op)
        tfl_inputs: dict[int, int] = {}
        options = None
        if plan.mapping.builtin in OPTIONS:
            options = getattr(self.s, OPTIONS[plan.mapping.builtin] + "T")()
        if Op(op.type) in (Op.CONV_2D, Op.DEPTHWISE_CONV_2D) and len(op.inputs) > 2:
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
            top.builtinOptionsType = getattr(self.s.BuiltinOptions, OPTIONS[plan.mapping.builtin])
            top.builtinOptions = options
        self.ops.append(top)

    def build(self) -> bytes:
        main = self.ctx.model.main
        self.ops: list = []
        for i in main.inputIndexes:
            self.tensor_of(i)
        for op in main.operations:
            self.operation(op)
        for i in main.outputIndexes:
            if self.ctx.operand(i).lifetime != L.SUBGRAPH_OUTPUT:
                raise Unsupported("a model output that is not an operation's result")
            if i not in self.by_operand:
                raise Unsupported(f"model output {i} is not computed by any operation")
        sg = self.s.SubGraphT()
        sg.tensors = self.tensors
        sg.operators = self.ops
        sg.inputs = np.asarray([self.by_operand[i] for i in main.inputIndexes], dtype=np.int32)
        sg.outputs = np.asarray([self.by_operand[i] for i in main.outputIndexes], dtype=np.int32)
        sg.name = b"main"
        self.m.subgraphs = [sg]
        return write_model(self.m)


@dataclass
class Plan:
    mapping: Mapping
    args: list  # (kind, TFLite input index or option name, operand index / value)


def plan_operation(ctx: _Ctx, op: hal.Operation) -> Plan:
    """Where each HAL input of ``op`` goes in TFLite, or Unsupported(reason)."""
    try:
        t = Op(op.type)
    except ValueError:
        raise Unsupported("OEM / extension operation") from None
    m = mapping(t)
    if m is None:
        raise Unsupported(f"{t.name} has no direct TFLite operator in the table")
    if t not in EXACT:
        raise Unsupported(f"{t.name}: the lowering is not verified against the conformance vectors")
    x0 = ctx.operand(op.inputs[0]) if op.inputs else None
    if x0 is None or x0.type not in EXACT[t]:
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
        if hal.OperandType(o.type).name.startswith("TENSOR") and o.lifetime != L.NO_VALUE and not o.dimensions:
            raise Unsupported("a tensor of unknown rank")
    ins = _implicit_inputs(ctx, op) if t in (Op.CONV_2D, Op.DEPTHWISE_CONV_2D, *_POOLS) else list(op.inputs)
    if t in (Op.MAXIMUM, Op.MINIMUM) or (t == Op.CONCATENATION and x0.type == I8):
        tensors = list(op.inputs[:-1] if t == Op.CONCATENATION else op.inputs[:2]) + list(op.outputs)
        quants = {(ctx.operand(i).scale, ctx.operand(i).zeroPoint) for i in tensors}
        if x0.type != F and len(quants) > 1:
            # NOTE: NNAPI requantizes each input to the output's scale; these TFLite kernels assume one scale
            raise Unsupported(f"{t.name}: quantized inputs and output of different scales / zero points")
    args: list = []
    if t == Op.CONCATENATION:
        axis = int(ctx.const(ins[-1]))
        rank = len(x0.dimensions)
        args = [("tensor", k, i) for k, i in enumerate(ins[:-1])]
        args.append(("option", "axis", axis + rank if axis < 0 else axis))
        return Plan(m, args)
    if t == Op.LOCAL_RESPONSE_NORMALIZATION and (len(x0.dimensions) != 4 or (
            len(ins) > 5 and int(ctx.const(ins[5])) not in (-1, 3))):
        raise Unsupported("LOCAL_RESPONSE_NORMALIZATION other than over the last axis of a 4-D tensor")
    if t == Op.SOFTMAX and len(ins) > 2 and int(ctx.const(ins[2])) not in (-1, len(x0.dimensions) - 1):
        raise Unsupported("SOFTMAX over another axis than the last")
    if t == Op.SOFTMAX and x0.type != F:
        out = ctx.operand(op.outputs[0])
        zp = 0 if x0.type == U8 else -128
        if out.scale != 1 / 256 or out.zeroPoint != zp:
            raise Unsupported("quantized SOFTMAX output not q(1/256)")
    if t in (Op.CONV_2D, Op.DEPTHWISE_CONV_2D, Op.FULLY_CONNECTED) and x0.type != F and \
            ctx.operand(op.inputs[1]).lifetime not in (L.CONSTANT_COPY, L.CONSTANT_REFERENCE):
        # NOTE: float weights given at run time run on LiteRT's builtin kernels (XNNPACK leaves the node);
        # quantized ones need the quantization LiteRT computes at prepare from constant weights
        raise Unsupported("quantized weights that are not constants")
    if t in (Op.CONV_2D, Op.DEPTHWISE_CONV_2D, Op.FULLY_CONNECTED):
        f = ctx.operand(op.inputs[1])
        if f.type == I8 and f.zeroPoint != 0:
            raise Unsupported("int8 weights with a non-zero zero point (TFLite's int8 kernels take symmetric weights)")
        if f.type == T.TENSOR_QUANT8_SYMM_PER_CHANNEL and x0.type == U8:
            raise Unsupported("uint8 input with per-channel weights (TFLite's per-channel kernels are int8)")
    if len(ins) > len(m.inputs) and t != Op.SOFTMAX:
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
            elif a.name == "depth_multiplier":
                args.append(("option", "depthMultiplier", int(_value(ctx, x))))
            else:
                raise Unsupported(f"{t.name}: input {k} ({a.name}) is not lowered")
    parts = next((v for kind, name, v in args if kind == "const_tensor_parts"), None)
    if parts is not None:
        args = [e for e in args if e[0] != "const_tensor_parts"] + [("const_tensor", 1, [parts["out_h"],
                                                                                        parts["out_w"]])]
    if t == Op.BATCH_TO_SPACE_ND:
        args.append(("const_tensor", 2, np.zeros((2, 2), np.int32)))  # NOTE: NNAPI's crops are always zero
    if t == Op.DEPTHWISE_CONV_2D:
        dm = next(v for kind, name, v in args if name == "depthMultiplier")
        if x0.dimensions and x0.dimensions[-1] and ctx.operand(op.inputs[1]).dimensions[-1] != \
                x0.dimensions[-1] * dm:
            raise Unsupported("depth multiplier inconsistent with the filter")
    if t == Op.RESHAPE and ctx.operand(op.inputs[1]).lifetime not in (L.CONSTANT_COPY, L.CONSTANT_REFERENCE):
        raise Unsupported("RESHAPE to a shape computed at run time")
    return Plan(m, args)


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


def check_operation(model: hal.Model, pools: Sequence[Any], op: hal.Operation) -> str:
    """Why ``op`` of the (validated) model cannot be lowered exactly; "" when it can."""
    try:
        plan_operation(_Ctx(model, pools), op)
    except Unsupported as e:
        return str(e)
    except (ValueError, IndexError, TypeError, AttributeError, StopIteration) as e:
        return f"not lowered ({type(e).__name__}: {e})"
    return ""


def lower(model: hal.Model, pools: Sequence[Any]) -> bytes:
    """The TFLite flatbuffer of a validated HAL model whose main subgraph's
    operations all pass :func:`check_operation`; Unsupported otherwise."""
    if any(o.type in (T.TENSOR_FLOAT16,) for o in model.main.operands):
        raise Unsupported("float16 operands")
    return _Builder(model, pools).build()
