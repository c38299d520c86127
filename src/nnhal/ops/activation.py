"""Activation functions of the HAL 1.3 spec: RELU, RELU1, RELU6, LOGISTIC,
TANH, ELU, HARD_SWISH and PRELU.

Float16 is computed in float32 and rounded back.  The quantized kernels follow
the integer algorithms of the TFLite kernels Android's reference calls:
LOGISTIC and TANH evaluate gemmlowp's fixed-point ``logistic`` / ``tanh`` on
the input rescaled to Q4.27, HARD_SWISH uses TFLite's int16 fixed-point
"reluish" scheme and PRELU two Q31 multipliers (positive / negative side).
The gemmlowp fixed-point helpers work on int64 arrays holding int32 values.
"""

from __future__ import annotations

import math

import numpy as np

from nnhal.hal import HalVersion, OperandType, OperationType
from nnhal.ops import lut
from nnhal.ops.base import (
    NUMPY_DTYPE,
    V1_0,
    V1_2,
    V1_3,
    ExecContext,
    OpDef,
    OpInfo,
    Signature,
)
from nnhal.ops.broadcast import broadcast_shape, check_max_rank, clamp, validate_max_rank
from nnhal.ops.fixedpoint import (
    exp_on_negative_values,
    newton_reciprocal,
    saturating_rounding_multiply_by_pot,
)
from nnhal.ops.fixedpoint import saturating_rounding_doubling_high_mul16 as srdhm16
from nnhal.ops.prepared import prepared
from nnhal.ops.quant import (
    INT32_MAX,
    QUANT_RANGE,
    activation_range,
    multiply_by_quantized_multiplier,
    quantize_multiplier,
    rounding_divide_by_pot,
    saturating_rounding_doubling_high_mul,
)

T = OperandType
Q8 = (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)

# --------------------------------------------------------------------------
# gemmlowp fixed point (FixedPoint<int32, IntegerBits>), vectorized

_srdhm = saturating_rounding_doubling_high_mul
_rdbp = rounding_divide_by_pot
_sat_mul_pot = saturating_rounding_multiply_by_pot


def fixed_logistic(a: np.ndarray, integer_bits: int) -> np.ndarray:
    """gemmlowp ``logistic`` of Q(integer_bits) values, result in Q0.31."""
    a = np.asarray(a, np.int64)
    positive = a > 0
    neg_abs = np.where(positive, -a, a)
    # 1 / (1 + exp(-|a|)) = Rescale<0>(ExactMulByPot<-1>(reciprocal estimate))
    if_positive = _sat_mul_pot(newton_reciprocal(exp_on_negative_values(neg_abs, integer_bits)), 1)
    if_negative = INT32_MAX - if_positive
    return np.where(a == 0, 1 << 30, np.where(positive, if_positive, if_negative))


def fixed_tanh(a: np.ndarray, integer_bits: int) -> np.ndarray:
    """gemmlowp ``tanh`` of Q(integer_bits) values, result in Q0.31."""
    a = np.asarray(a, np.int64)
    negative = a < 0
    n = np.where(negative, a, -a)
    # (1 - e) / (1 + e) with e = exp(2n): 2n is n read with one more integer bit
    t = _sat_mul_pot(newton_reciprocal(exp_on_negative_values(n, integer_bits + 1)) - (1 << 29), 2)
    return np.where(a == 0, 0, np.where(negative, -t, t))


# --------------------------------------------------------------------------
# RELU / RELU1 / RELU6 / LOGISTIC / TANH

_RELU_RANGE = {OperationType.RELU: (0.0, None), OperationType.RELU1: (-1.0, 1.0), OperationType.RELU6: (0.0, 6.0)}
_RELU_ACT = {OperationType.RELU: 1, OperationType.RELU1: 2, OperationType.RELU6: 3}


def _relu_params(op: OperationType, t: OperandType, scale: float, zero_point: int) -> tuple:
    """What a RELU / RELU1 / RELU6 needs of the model: quantized, the activation
    range of the input's scale and zeroPoint (which the output must share) as
    scalars of the stored type; float, the float32 bounds."""
    if t in Q8:
        lo, hi = activation_range(_RELU_ACT[op], scale, zero_point, t)
        qmin, qmax = QUANT_RANGE[t]
        # NOTE: within the type's range already for a valid zeroPoint (validation refuses others)
        lo, hi = min(max(lo, qmin), qmax), min(max(hi, qmin), qmax)
        dtype = NUMPY_DTYPE[t]
        return ("quant", dtype.type(lo), dtype.type(hi))
    lo, hi = _RELU_RANGE[op]
    return ("float", np.float32(lo), np.finfo(np.float32).max if hi is None else np.float32(hi))


def _prepare_relu(info: OpInfo) -> tuple:
    x = info.inputs[0]
    return _relu_params(info.type, x.type, x.scale, x.zero_point)


def _execute_relu(ctx: ExecContext) -> list[np.ndarray]:
    x = ctx.inputs[0]
    data = x.data
    if data.ndim > 4:
        check_max_rank(ctx, 4, 0)
    st = ctx.state
    if st is None:
        st = _relu_params(ctx.type, x.type, x.scale, x.zero_point)
    kind, lo, hi = st
    if kind == "quant":
        # NOTE: the stored values clamped in their own type (a table lookup is as fast on a few
        # values and several times slower on a large tensor: numpy's take widens the indexes)
        return [clamp(data, lo, hi)]
    # NOTE: std::min(std::max(lo, x), hi) as the reference: NaN -> lo (fmax takes the number),
    # and RELU's hi is FLT_MAX; -0.0 -> +0.0 where lo is 0 (the reference's max(0, -0.0) is its
    # first argument), by adding +0.0 (which leaves every other value as it is)
    r = np.fmax(data if data.dtype == np.float32 else data.astype(np.float32), lo)  # NOTE: a new array
    if r.__class__ is not np.ndarray:
        r = np.asarray(r)  # NOTE: a 0-d input gives a scalar, which out= below cannot take
    np.fmin(r, hi, out=r)
    if lo == 0:
        np.add(r, np.float32(0), out=r)
    if data.dtype == np.float32:
        return [r]
    with np.errstate(over="ignore"):  # NOTE: float16: RELU's FLT_MAX (an input inf) is inf again
        return [r.astype(ctx.outputs[0].dtype)]


def _input_rescale(ctx: ExecContext, scale: float) -> tuple[int, int, int]:
    """Android's Q4.27 input multiplier (QuantizeMultiplierGreaterThanOne) and the
    radius beyond which LOGISTIC / TANH saturate (CalculateInputRadius)."""
    real = float(np.float32(scale)) * float(1 << 27)
    if not real > 1.0:
        raise ctx.fail(f"input scale {scale} too small")
    q, shift = quantize_multiplier(real)
    radius = math.floor(15.0 * float(1 << 27) / float(1 << shift))
    return q, shift, radius


def _check_out_quant(ctx: ExecContext, scale: float, zero_points: dict[OperandType, int]) -> None:
    out = ctx.outputs[0]
    if np.float32(out.scale) != np.float32(scale) or out.zero_point != zero_points[out.type]:
        raise ctx.fail(f"output scale / zeroPoint must be {scale} / {zero_points[out.type]}, "
                       f"got {out.scale} / {out.zero_point}")


def _execute_logistic(ctx: ExecContext) -> list[np.ndarray]:
    x = ctx.inputs[0]
    out = ctx.outputs[0]
    check_max_rank(ctx, 4, 0)
    if x.type not in Q8:
        with np.errstate(over="ignore"):
            xf = x.data.astype(np.float32)
            res = np.float32(1.0) / (np.float32(1.0) + np.exp(-xf))
        return [res.astype(out.dtype)]
    return [lut.lookup(ctx, _logistic_quant)]


def _logistic_quant(ctx: ExecContext) -> np.ndarray:
    x = ctx.inputs[0]
    out = ctx.outputs[0]
    _check_out_quant(ctx, 1.0 / 256, {T.TENSOR_QUANT8_ASYMM: 0, T.TENSOR_QUANT8_ASYMM_SIGNED: -128})
    q, shift, radius = _input_rescale(ctx, x.scale)
    centered = x.data.astype(np.int64) - x.zero_point
    inside = np.clip(centered, -radius + 1, radius - 1)
    f0 = fixed_logistic(multiply_by_quantized_multiplier(inside, q, shift), 4)
    v = np.minimum(_rdbp(f0, 23), 255)
    v = np.where(centered <= -radius, 0, np.where(centered >= radius, 255, v))
    return (v + out.zero_point).astype(out.dtype)


def _execute_tanh(ctx: ExecContext) -> list[np.ndarray]:
    x = ctx.inputs[0]
    out = ctx.outputs[0]
    check_max_rank(ctx, 4, 0)
    if x.type not in Q8:
        return [np.tanh(x.data.astype(np.float32)).astype(out.dtype)]
    return [lut.lookup(ctx, _tanh_quant)]


def _tanh_quant(ctx: ExecContext) -> np.ndarray:
    x = ctx.inputs[0]
    out = ctx.outputs[0]
    _check_out_quant(ctx, 1.0 / 128, {T.TENSOR_QUANT8_ASYMM: 128, T.TENSOR_QUANT8_ASYMM_SIGNED: 0})
    q, shift, radius = _input_rescale(ctx, x.scale)
    centered = x.data.astype(np.int64) - x.zero_point
    inside = np.clip(centered, -radius + 1, radius - 1)
    f0 = fixed_tanh(multiply_by_quantized_multiplier(inside, q, shift), 4)
    v = np.clip(_rdbp(f0, 24), -128, 127)
    v = np.where(centered <= -radius, -128, np.where(centered >= radius, 127, v))
    return (v + out.zero_point).astype(out.dtype)


def _validate_rank4(info: OpInfo) -> None:
    validate_max_rank(info, 4, 0)


def _unary_signatures(types: list[tuple[OperandType, HalVersion]]) -> list[Signature]:
    return [Signature((t,), (t,), v) for t, v in types]


_ACT_TYPES = [(T.TENSOR_FLOAT32, V1_0), (T.TENSOR_FLOAT16, V1_2), (T.TENSOR_QUANT8_ASYMM, V1_0),
              (T.TENSOR_QUANT8_ASYMM_SIGNED, V1_3)]
_TANH_TYPES = [(T.TENSOR_FLOAT32, V1_0), (T.TENSOR_FLOAT16, V1_2), (T.TENSOR_QUANT8_ASYMM, V1_2),
               (T.TENSOR_QUANT8_ASYMM_SIGNED, V1_3)]

# --------------------------------------------------------------------------
# HARD_SWISH


def _sat_int16(x: np.ndarray) -> np.ndarray:
    return np.clip(x, -32768, 32767)


def _sdhm16(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """TFLite SaturatingDoublingHighMul on int16 (truncating, like ARM SQDMULH)."""
    ab = a * b
    r = np.where(ab >= 0, ab >> 15, -((-ab) >> 15))
    return np.where((a == -32768) & (b == -32768), 32767, r)


def _int16_multiplier(q: int) -> int:
    """TFLite DownScaleInt32ToInt16Multiplier."""
    if q >= INT32_MAX - (1 << 15):
        return 32767
    return (q + (1 << 15)) >> 16


def _hard_swish_quant(ctx: ExecContext) -> np.ndarray:
    x = ctx.inputs[0]
    out = ctx.outputs[0]
    hires_scale = np.float32(1.0 / 128.0) * np.float32(x.scale)
    q_out, out_exp = quantize_multiplier(float(hires_scale / np.float32(out.scale)))
    if out_exp > 0:
        raise ctx.fail("HARD_SWISH output multiplier exponent must be <= 0")
    q_relu, relu_exp = quantize_multiplier(float(hires_scale / np.float32(3.0 / 32768.0)))
    m_out, m_relu = _int16_multiplier(q_out), _int16_multiplier(q_relu)

    value = x.data.astype(np.int64) - x.zero_point
    hires = value * 128
    preshift_out = srdhm16(hires, m_out)
    reluish = hires
    if relu_exp > 0:
        reluish = _sat_int16(reluish << (relu_exp - 1))
    reluish = srdhm16(reluish, m_relu)
    if relu_exp > 0:
        reluish = _sat_int16(reluish << 1)
    if relu_exp < 0:
        reluish = _rdbp(reluish, -relu_exp)
    reluish = (reluish + (1 << 15)) >> 1  # [-1, 1] -> [0, 1]
    res = _rdbp(_sdhm16(reluish, preshift_out), -out_exp) + out.zero_point
    lo, hi = QUANT_RANGE[out.type]
    return np.clip(res, lo, hi).astype(out.dtype)


def _execute_hard_swish(ctx: ExecContext) -> list[np.ndarray]:
    x = ctx.inputs[0]
    out = ctx.outputs[0]
    if x.data.size == 0:
        return [np.zeros(x.shape, out.dtype)]
    if x.type in Q8:
        return [lut.lookup(ctx, _hard_swish_quant)]
    xf = x.data.astype(np.float32)
    res = xf * np.minimum(np.float32(6), np.maximum(np.float32(0), xf + np.float32(3))) / np.float32(6)
    return [res.astype(out.dtype)]


# --------------------------------------------------------------------------
# ELU / PRELU


def _elu_alpha(alpha: np.ndarray) -> np.float32:
    """ELU's alpha (a FLOAT32 / FLOAT16 scalar) as the kernel uses it."""
    return np.float32(alpha.item())


def _prepare_elu(info: OpInfo) -> object:
    """alpha, when a constant."""
    return prepared(_elu_alpha, info.constant(1))


def _execute_elu(ctx: ExecContext) -> list[np.ndarray]:
    x = ctx.inputs[0]
    out = ctx.outputs[0]
    st = ctx.state
    alpha = st.value(ctx) if st is not None else _elu_alpha(ctx.inputs[1].data)
    xf = x.data.astype(np.float32, copy=False)
    # NOTE: max(0, x) + min(0, alpha * (exp(x) - 1)), the operands in the reference's order, in place
    with np.errstate(all="ignore"):  # NOTE: inf and NaN as in C++, without warnings
        e = np.exp(xf)
        if e.__class__ is not np.ndarray:
            e = np.asarray(e)  # NOTE: a 0-d input gives a scalar, which out= below cannot take
        np.subtract(e, np.float32(1), out=e)
        np.multiply(alpha, e, out=e)
        np.minimum(np.float32(0), e, out=e)
        res = np.maximum(np.float32(0), xf)
        np.add(res, e, out=e)
        return [e.astype(out.dtype, copy=False)]


def _prelu_multipliers(x: object, alpha: object, out: object) -> tuple[int, int, int, int]:
    # NOTE: both multipliers as the reference computes them: a float quotient for the
    # positive side, the float product of the input scales over the output scale in double
    real_pos = float(np.float32(x.scale) / np.float32(out.scale))
    real_neg = float(np.float32(x.scale) * np.float32(alpha.scale)) / float(np.float32(out.scale))
    return (*quantize_multiplier(real_pos), *quantize_multiplier(real_neg))


def _prepare_prelu(info: OpInfo) -> object:
    """The quantized multipliers (they depend only on the scales)."""
    x = info.inputs[0]
    if x.type not in Q8:
        return None
    try:
        return _prelu_multipliers(x, info.inputs[1], info.outputs[0])
    except (ValueError, ArithmeticError):
        return None  # NOTE: scales the arithmetic refuses: every execution fails as it computes them


def _execute_prelu(ctx: ExecContext) -> list[np.ndarray]:
    x, alpha = ctx.inputs[0], ctx.inputs[1]
    out = ctx.outputs[0]
    shape = broadcast_shape(ctx, x.shape, alpha.shape)
    if x.type in Q8:
        st = ctx.state
        q_pos, s_pos, q_neg, s_neg = st if st is not None else _prelu_multipliers(x, alpha, out)
        xv = np.broadcast_to(x.data.astype(np.int64) - x.zero_point, shape)
        av = np.broadcast_to(alpha.data.astype(np.int64) - alpha.zero_point, shape)
        pos = multiply_by_quantized_multiplier(xv, q_pos, s_pos)
        neg = multiply_by_quantized_multiplier(xv * av, q_neg, s_neg)
        lo, hi = QUANT_RANGE[out.type]
        return [np.clip(np.where(xv >= 0, pos, neg) + out.zero_point, lo, hi).astype(out.dtype)]
    # NOTE: float32 data as it is (no copy); float16 computes in float32
    xf = x.data.astype(np.float32, copy=False)
    af = alpha.data.astype(np.float32, copy=False)
    res = xf * af
    if res.shape == xf.shape and xf.flags.c_contiguous:
        # NOTE: x >= 0 ? x : x * alpha by selecting bits: np.where on a random sign
        # pattern branches per element (about twice the time of these five passes)
        sel = np.greater_equal(xf, 0).view(np.int8).astype(np.int32)
        np.negative(sel, out=sel)  # all ones where x is taken
        rb = res.view(np.int32)
        keep = np.bitwise_and(xf.view(np.int32), sel)
        np.bitwise_and(rb, np.invert(sel, out=sel), out=rb)
        np.bitwise_or(rb, keep, out=rb)
    else:
        res = np.where(xf >= 0, xf, res)
    if res.shape == shape and res.dtype == out.dtype:
        return [res]  # NOTE: a fresh array already
    return [np.broadcast_to(res, shape).astype(out.dtype)]



# --------------------------------------------------------------------------
# the quantized LOGISTIC, TANH and HARD_SWISH by 256-entry tables of their pipelines (nnhal.ops.lut)

_LUT_FUNCS = {OperationType.LOGISTIC: _logistic_quant, OperationType.TANH: _tanh_quant,
              OperationType.HARD_SWISH: _hard_swish_quant}
_prepare_lut = lut.preparer(_LUT_FUNCS)

OPS: list[OpDef] = [
    *[
        OpDef(type=op, signatures=_unary_signatures(_ACT_TYPES), execute=_execute_relu, validate=_validate_rank4,
              prepare=_prepare_relu, allow_zero_sized=True)
        for op in (OperationType.RELU, OperationType.RELU1, OperationType.RELU6)
    ],
    OpDef(type=OperationType.LOGISTIC, signatures=_unary_signatures(_ACT_TYPES), execute=_execute_logistic,
          validate=_validate_rank4, prepare=_prepare_lut, allow_zero_sized=True),
    OpDef(type=OperationType.TANH, signatures=_unary_signatures(_TANH_TYPES), execute=_execute_tanh,
          validate=_validate_rank4, prepare=_prepare_lut, allow_zero_sized=True),
    OpDef(type=OperationType.HARD_SWISH,
          signatures=_unary_signatures([(t, V1_3) for t, _ in _ACT_TYPES]),
          execute=_execute_hard_swish, prepare=_prepare_lut, allow_zero_sized=True),
    OpDef(type=OperationType.ELU,
          signatures=[Signature((T.TENSOR_FLOAT32, T.FLOAT32), (T.TENSOR_FLOAT32,), V1_3),
                      Signature((T.TENSOR_FLOAT16, T.FLOAT16), (T.TENSOR_FLOAT16,), V1_3)],
          # NOTE: the spec says the input may be zero-sized, but the reference registration lacks
          # allowZeroSizedInput, so its executor fails such inputs; we keep its error status
          execute=_execute_elu, prepare=_prepare_elu),
    OpDef(type=OperationType.PRELU,
          signatures=[Signature((t, t), (t,), v) for t, v in
                      [(T.TENSOR_FLOAT32, V1_2), (T.TENSOR_FLOAT16, V1_2), (T.TENSOR_QUANT8_ASYMM, V1_2),
                       (T.TENSOR_QUANT8_ASYMM_SIGNED, V1_3)]],
          execute=_execute_prelu, prepare=_prepare_prelu),
]
