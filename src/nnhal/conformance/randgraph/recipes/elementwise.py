"""Recipes of the elementwise families: activations, unary math, broadcast
arithmetic, comparisons and logic, conversions, softmax and normalizations,
reductions."""

from __future__ import annotations

import numpy as np

from nnhal.conformance.randgraph.generator import dequantize
from nnhal.conformance.randgraph.recipes.common import (
    FLOATS,
    OT,
    Q8,
    Build,
    StepFailed,
    T,
    act,
    away_from_integers,
    axis,
    gap_guard,
    layout,
    margin,
    partner_dims,
    recipe,
    scalar_type,
)

# (scale, zeroPoint) of the quantized results the HAL fixes, per output type
FIXED = {
    OT.LOGISTIC: {T.TENSOR_QUANT8_ASYMM: (1.0 / 256, 0), T.TENSOR_QUANT8_ASYMM_SIGNED: (1.0 / 256, -128)},
    OT.TANH: {T.TENSOR_QUANT8_ASYMM: (1.0 / 128, 128), T.TENSOR_QUANT8_ASYMM_SIGNED: (1.0 / 128, 0)},
    OT.SOFTMAX: {T.TENSOR_QUANT8_ASYMM: (1.0 / 256, 0), T.TENSOR_QUANT8_ASYMM_SIGNED: (1.0 / 256, -128)},
    OT.L2_NORMALIZATION: {T.TENSOR_QUANT8_ASYMM: (1.0 / 128, 128), T.TENSOR_QUANT8_ASYMM_SIGNED: (1.0 / 128, 0)},
}


def _unary(b: Build, domain: str = "any", quant: object = "same", ranks: tuple = (1, 2, 3, 4)) -> int:
    x = b.main(ranks=ranks, domain=domain)
    t = b.operand(x).type
    fixed = FIXED.get(b.op, {}).get(t)
    b.out(t, fixed if fixed is not None else "same" if b.preserve else quant)
    return x


def _positive_guard(b: Build, floor: float) -> None:
    def check(ins: list, outs: list) -> str:
        if not b.computed(b.ins[0]):
            return ""
        return "" if (dequantize(ins[0]) >= floor).all() else "input too close to 0"
    b.guard(check)


# --------------------------------------------------------------------------
# activations


@recipe(OT.RELU, "activation", preserving=True)
def relu(b: Build) -> None:
    _unary(b)


@recipe(OT.RELU1, "activation", preserving=True)
def relu1(b: Build) -> None:
    _unary(b)


@recipe(OT.RELU6, "activation", preserving=True)
def relu6(b: Build) -> None:
    _unary(b)


@recipe(OT.LOGISTIC, "activation", preserving=True)
def logistic(b: Build) -> None:
    _unary(b)


@recipe(OT.TANH, "activation", preserving=True)
def tanh(b: Build) -> None:
    _unary(b)


@recipe(OT.HARD_SWISH, "activation", preserving=True)
def hard_swish(b: Build) -> None:
    _unary(b, quant="same" if b.preserve else b.d.pick(("same", "auto")))


@recipe(OT.ELU, "activation", preserving=True)
def elu(b: Build) -> None:
    x = b.main(ranks=(1, 2, 3, 4))
    t = b.operand(x).type
    b.param("alpha", scalar_type(t), b.d.pick((1.0, 0.5, 2.0, 0.1, 1.7)))
    b.out(t)


@recipe(OT.PRELU, "activation", preserving=True)
def prelu(b: Build) -> None:
    x = b.main(ranks=(1, 2, 3, 4))
    o = b.operand(x)
    dims, first = partner_dims(b, o.dims, within=b.preserve)
    b.tensor(o.type, dims, domain="unit", role="weight")
    if first:
        b.swap(0, 1)
    b.out(o.type, "same" if b.preserve else b.d.pick(("same", "auto")))


# --------------------------------------------------------------------------
# unary math


@recipe(OT.FLOOR, "elementwise", preserving=True)
def floor(b: Build) -> None:
    _unary(b)
    away_from_integers(b)


@recipe(OT.ABS, "elementwise", preserving=True)
def abs_(b: Build) -> None:
    _unary(b)


@recipe(OT.NEG, "elementwise", preserving=True)
def neg(b: Build) -> None:
    _unary(b)


@recipe(OT.EXP, "elementwise", preserving=True)
def exp(b: Build) -> None:
    _unary(b, "small")


@recipe(OT.LOG, "elementwise", preserving=True)
def log(b: Build) -> None:
    _unary(b, "positive")
    _positive_guard(b, 0.05)


@recipe(OT.RSQRT, "elementwise", preserving=True)
def rsqrt(b: Build) -> None:
    _unary(b, "positive")
    _positive_guard(b, 0.05)


@recipe(OT.SQRT, "elementwise", preserving=True)
def sqrt(b: Build) -> None:
    _unary(b, "nonneg")
    _positive_guard(b, 0.0)


@recipe(OT.SIN, "elementwise", preserving=True)
def sin(b: Build) -> None:
    _unary(b)


# --------------------------------------------------------------------------
# broadcast arithmetic


def _binary(b: Build, domain2: str = "any", with_act: bool = True, quant: object = None) -> None:
    x = b.main(ranks=(1, 2, 3, 4), domain="positive" if b.op == OT.POW else "any")
    o = b.operand(x)
    dims, first = partner_dims(b, o.dims, within=b.preserve)
    b.tensor(o.type, dims, domain=domain2)
    if first:
        b.swap(0, 1)
    if with_act:
        act(b)
    b.out(o.type, quant if quant is not None else "same" if b.preserve else b.d.pick(("auto", "same")))


@recipe(OT.ADD, "broadcast", preserving=True)
def add(b: Build) -> None:
    _binary(b)


@recipe(OT.SUB, "broadcast", preserving=True)
def sub(b: Build) -> None:
    _binary(b)


@recipe(OT.MUL, "broadcast", preserving=True)
def mul(b: Build) -> None:
    _binary(b)


@recipe(OT.DIV, "broadcast", preserving=True)
def div(b: Build) -> None:
    _binary(b, "nonzero")

    def check(ins: list, outs: list) -> str:
        if not b.computed(b.ins[1]):
            return ""
        return "" if (np.abs(dequantize(ins[1])) >= 0.1).all() else "a divisor too close to 0"
    b.guard(check)


@recipe(OT.POW, "broadcast", preserving=True)
def pow_(b: Build) -> None:
    _binary(b, "small", with_act=False)
    _positive_guard(b, 0.05)


@recipe(OT.MAXIMUM, "broadcast", preserving=True)
def maximum(b: Build) -> None:
    _binary(b, with_act=False)


@recipe(OT.MINIMUM, "broadcast", preserving=True)
def minimum(b: Build) -> None:
    _binary(b, with_act=False)


# --------------------------------------------------------------------------
# comparisons, logic, selection


def _compare(b: Build) -> None:
    x = b.main(ranks=(1, 2, 3, 4))
    o = b.operand(x)
    dims, first = partner_dims(b, o.dims)
    value = None
    if o.type not in (T.TENSOR_BOOL8,) and not b.computed(x) and tuple(dims) == tuple(o.dims) and b.d.flag(0.4):
        # NOTE: exact inputs: a partner equal to the anchor in some places, so EQUAL and the
        # others' "or equal" matter
        rng = np.random.default_rng(b.d.seed())
        value = np.where(rng.random(o.value.shape) < 0.5, o.value, np.flip(o.value))
    k = b.tensor(o.type, dims, value=value, scale=o.scale if value is not None else None,
                 zp=o.zero_point if value is not None else None)
    del k
    if first:
        b.swap(0, 1)
    b.out(T.TENSOR_BOOL8, None)
    if o.type != T.TENSOR_BOOL8:
        gap_guard(b, (0, 1))


for _op in (OT.EQUAL, OT.NOT_EQUAL, OT.GREATER, OT.GREATER_EQUAL, OT.LESS, OT.LESS_EQUAL):
    globals()[_op.name.lower()] = recipe(_op, "comparison")(_compare)


def _logical(b: Build) -> None:
    x = b.main(ranks=(1, 2, 3, 4), domain="bool")
    if b.op != OT.LOGICAL_NOT:
        dims, first = partner_dims(b, b.operand(x).dims, within=b.preserve)
        b.tensor(T.TENSOR_BOOL8, dims, domain="bool")
        if first:
            b.swap(0, 1)
    b.out(T.TENSOR_BOOL8, None)


logical_and = recipe(OT.LOGICAL_AND, "comparison", preserving=True)(_logical)
logical_or = recipe(OT.LOGICAL_OR, "comparison", preserving=True)(_logical)
logical_not = recipe(OT.LOGICAL_NOT, "comparison", preserving=True)(_logical)


@recipe(OT.SELECT, "comparison", anchor_input=1)
def select(b: Build) -> None:
    t = b.type(1)
    x_dims = b.operand(b.anchor).dims if b.anchor is not None else b.shape(b.d.integer(1, 4))
    b.tensor(T.TENSOR_BOOL8, x_dims, domain="bool")
    x = b.main(t, dims=x_dims)
    o = b.operand(x)
    b.tensor(o.type, o.dims)
    b.out(o.type, b.d.pick(("same", "auto")))


# --------------------------------------------------------------------------
# conversions


@recipe(OT.CAST, "conversion", preserving=True)
def cast(b: Build) -> None:
    x = b.main(ranks=(1, 2, 3, 4))
    o = b.operand(x)
    t_out = b.sig.outputs[0]
    b.out(t_out, (o.scale, o.zero_point) if o.type in Q8 and t_out in Q8 else (1.0, 0) if t_out in Q8 else None)
    if o.type in FLOATS and t_out not in FLOATS:
        away_from_integers(b)


@recipe(OT.QUANTIZE, "conversion")
def quantize(b: Build) -> None:
    b.main(ranks=(1, 2, 3, 4))
    t_out = b.sig.outputs[0]
    # NOTE: a computed value half-way between two steps may round either way: the quantized criteria's
    # tolerance (a step or more) covers it
    b.out(t_out, "auto")


@recipe(OT.DEQUANTIZE, "conversion")
def dequantize_(b: Build) -> None:
    t = b.type(0)
    if t == T.TENSOR_QUANT8_SYMM_PER_CHANNEL:
        if b.anchor is not None and b.operand(b.anchor).type == t:
            b.main(t)
        else:
            rank = b.d.integer(1, 4)
            dims = b.shape(rank)
            ch = b.d.integer(0, rank - 1)
            scales = tuple(b.d.real(0.01, 1.0, steps=16, log=True) for _ in range(dims[ch]))
            b.ins.append(b.new(t, dims, scale=0.0, zp=0, channel=(scales, ch)))
    else:
        b.main(t, ranks=(1, 2, 3, 4))
    b.out(b.sig.outputs[0], None)


# --------------------------------------------------------------------------
# softmax and normalizations


@recipe(OT.SOFTMAX, "normalization", preserving=True)
def softmax(b: Build) -> None:
    x = b.main(ranks=(1, 2, 3, 4))
    o = b.operand(x)
    b.param("beta", scalar_type(o.type), b.d.pick((1.0, 0.5, 2.0, 0.1, 1e-3 * 7)))
    if len(b.sig.inputs) + len(b.sig.optional) > 2 and b.optional():
        axis(b, len(o.dims))
    b.out(o.type, FIXED[OT.SOFTMAX].get(o.type))


@recipe(OT.LOG_SOFTMAX, "normalization", preserving=True)
def log_softmax(b: Build) -> None:
    x = b.main(ranks=(1, 2, 3, 4))
    o = b.operand(x)
    b.param("beta", scalar_type(o.type), b.d.pick((1.0, 0.5, 2.0, 0.1)))
    axis(b, len(o.dims))
    b.out(o.type)


@recipe(OT.L2_NORMALIZATION, "normalization", preserving=True)
def l2_normalization(b: Build) -> None:
    x = b.main(ranks=(1, 2, 3, 4))
    o = b.operand(x)
    a = axis(b, len(o.dims)) if b.sig.optional and b.optional() else len(o.dims) - 1
    b.out(o.type, FIXED[OT.L2_NORMALIZATION].get(o.type))

    def check(ins: list, outs: list) -> str:
        # NOTE: a computed vector of a few quantization steps (or near 0) normalizes its last-bit error to
        # a different direction: found on litert-cpu after a RESIZE_BILINEAR whose rounding differs by one
        if not b.computed(b.ins[0]):
            return ""
        norm = np.sqrt((dequantize(ins[0]) ** 2).sum(axis=a))
        return "" if (norm >= 20 * margin(ins[0], b.gen.model.relaxed)).all() else "a vector too short to normalize"
    b.guard(check)


@recipe(OT.LOCAL_RESPONSE_NORMALIZATION, "normalization", preserving=True)
def local_response_normalization(b: Build) -> None:
    x = b.main(ranks=(1, 2, 3, 4) if len(b.sig.inputs) > 5 else (4,))
    o = b.operand(x)
    st = scalar_type(o.type)
    b.param("radius", T.INT32, b.d.integer(0, 4, simplest=1))
    b.param("bias", st, b.d.pick((1.0, 0.5, 2.0, 1e-3)))
    b.param("alpha", st, b.d.pick((1.0, 0.5, 0.1, 2.0)))
    b.param("beta", st, b.d.pick((0.5, 1.0, 0.75, 0.25)))
    if len(b.sig.inputs) > 5:
        axis(b, len(o.dims))
    b.out(o.type)


@recipe(OT.INSTANCE_NORMALIZATION, "normalization", preserving=True)
def instance_normalization(b: Build) -> None:
    x = b.main(ranks=(4,))
    o = b.operand(x)
    st = scalar_type(o.type)
    b.param("gamma", st, b.d.pick((1.0, 0.5, 2.0, -1.0)))
    b.param("beta", st, b.d.pick((0.0, 0.5, -1.0)))
    b.param("epsilon", st, b.d.pick((1e-4, 1e-2, 1e-5)))
    layout(b)
    b.out(o.type)

    def check(ins: list, outs: list) -> str:
        # NOTE: a plane of (nearly) equal values normalizes 0 / epsilon: any last-bit difference is amplified
        x = dequantize(ins[0])
        axes = (2, 3) if b.params.get("layout") == "NCHW" else (1, 2)
        return "" if (x.std(axis=axes) > 0.05).all() else "a nearly constant plane"
    b.guard(check)


# --------------------------------------------------------------------------
# reductions


def _axes(b: Build, rank: int) -> list[int]:
    n = b.d.integer(1, rank)
    axes = sorted(set(b.d.integer(0, rank - 1) for _ in range(n)))
    return [a - rank if b.d.flag(0.3) else a for a in axes]


def _reduce(b: Build, domain: str = "any", quant: object = "same") -> None:
    x = b.main(ranks=(1, 2, 3, 4), domain=domain)
    o = b.operand(x)
    b.ints("axes", _axes(b, len(o.dims)))
    keep = b.d.flag(0.4)
    if b.op == OT.MEAN:
        b.param("keep_dims", T.INT32, int(keep))
    else:
        b.param("keep_dims", T.BOOL, keep)
    b.out(o.type, quant)


@recipe(OT.MEAN, "reduce")
def mean(b: Build) -> None:
    # NOTE: the spec: a quantized result has the input's scale and zeroPoint (the reference, as Android's,
    # does not check it and computes as if it were so; LiteRT requantizes)
    _reduce(b)


@recipe(OT.REDUCE_SUM, "reduce")
def reduce_sum(b: Build) -> None:
    _reduce(b, "small")


@recipe(OT.REDUCE_PROD, "reduce")
def reduce_prod(b: Build) -> None:
    _reduce(b, "near1")


@recipe(OT.REDUCE_MAX, "reduce")
def reduce_max(b: Build) -> None:
    _reduce(b)


@recipe(OT.REDUCE_MIN, "reduce")
def reduce_min(b: Build) -> None:
    _reduce(b)


@recipe(OT.REDUCE_ALL, "reduce")
def reduce_all(b: Build) -> None:
    _reduce(b, "bool", None)


@recipe(OT.REDUCE_ANY, "reduce")
def reduce_any(b: Build) -> None:
    _reduce(b, "bool", None)


def _arg(b: Build) -> None:
    x = b.main(ranks=(1, 2, 3, 4), domain="distinct")
    o = b.operand(x)
    a = axis(b, len(o.dims))
    b.out(T.TENSOR_INT32, None)
    gap_guard(b, (0,), axis_of=a)
    if not b.computed(x):
        def ties(ins: list, outs: list) -> str:
            v = np.sort(np.moveaxis(dequantize(ins[0]), a, -1), axis=-1)
            return "" if (np.diff(v, axis=-1) > 0).all() else "tied values"
        b.guard(ties)


argmax = recipe(OT.ARGMAX, "reduce")(_arg)
argmin = recipe(OT.ARGMIN, "reduce")(_arg)


@recipe(OT.TOPK_V2, "reduce")
def topk_v2(b: Build) -> None:
    x = b.main(ranks=(1, 2, 3, 4), domain="distinct")
    o = b.operand(x)
    n = o.dims[-1]
    if n < 1:
        raise StepFailed("empty last axis")
    b.param("k", T.INT32, b.d.integer(1, n))
    b.out(o.type, "same")
    b.out(T.TENSOR_INT32, None)
    gap_guard(b, (0,), axis_of=-1)
    if not b.computed(x):
        def ties(ins: list, outs: list) -> str:
            v = np.sort(dequantize(ins[0]), axis=-1)
            return "" if (np.diff(v, axis=-1) > 0).all() else "tied values"
        b.guard(ties)
