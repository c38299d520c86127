"""Normalization: L2_NORMALIZATION, LOCAL_RESPONSE_NORMALIZATION and
INSTANCE_NORMALIZATION of the HAL 1.3 spec.

L2_NORMALIZATION and LOCAL_RESPONSE_NORMALIZATION take the HAL 1.2 optional
axis input (default -1, the last axis) and inputs of rank 1..4 since HAL 1.2
(rank 4 only before).  Quantized L2 normalization reproduces TFLite's
fixed-point inverse square root (Newton-Raphson in gemmlowp Q3 arithmetic), so
its output, fixed at scale 1/128, matches the reference bit for bit.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from nnhal.hal import OperandType, OperationType
from nnhal.ops import memo
from nnhal.ops.base import (
    V1_0,
    V1_2,
    V1_3,
    ExecContext,
    OpDef,
    OpInfo,
    Signature,
)
from nnhal.ops.fixedpoint import inv_sqrt_multiplier, inv_sqrt_multiplier_int
from nnhal.ops.prepared import prepared
from nnhal.ops.quant import (
    multiply_by_quantized_multiplier,
    multiply_by_quantized_multiplier_smaller_than_one,
)

T = OperandType
_FEW_ROWS = 64  # rows up to which the inverse square roots run on Python ints (~3 us each; numpy ~280 us)


def _axis(ctx: ExecContext, axis: int) -> int:
    """The axis (as given: default -1) made non-negative; the input must have rank 1..4."""
    rank = ctx.inputs[0].data.ndim
    if rank > 4:
        raise ctx.fail(f"input rank {rank} > 4")
    if not -rank <= axis < rank:
        raise ctx.fail(f"axis {axis} out of range for rank {rank}")
    return axis % rank


def _axis_operand(info: OpInfo, i: int) -> object:
    """The optional axis input i's constant value: -1 when the input is absent,
    None when it is not a constant (execute reads it)."""
    return info.constant(i) if len(info.inputs) > i else np.int32(-1)


def _runtime_axis(ctx: ExecContext, i: int) -> np.ndarray:
    return ctx.inputs[i].data if ctx.has(i) else np.int32(-1)


def _validate_rank_axis(info: OpInfo, axis_input: int) -> None:
    """Reference model-time rules: rank <= 4, and before HAL 1.2 (no axis
    input) only rank 4."""
    dims = info.inputs[0].dimensions
    if len(info.inputs) <= axis_input and len(dims) != 4 and info.version < V1_2:
        raise info.fail("inputs of rank other than 4 need HAL 1.2")
    if len(dims) > 4:
        raise info.fail(f"input rank {len(dims)} > 4")


# --------------------------------------------------------------------------
# L2_NORMALIZATION


def _l2norm_out_check(t: OperandType, out_scale: float, out_zp: int) -> Optional[str]:
    """Why the reference refuses a quantized output's declared quantization (it
    fixes scale 1/128, zero point 128 for uint8, 0 for int8), or None."""
    if t not in (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED):
        return None
    want_zp = 128 if t == T.TENSOR_QUANT8_ASYMM else 0
    if out_scale != np.float32(1.0 / 128.0) or out_zp != want_zp:
        return f"output scale must be 1/128 and zero point {want_zp}"
    return None


def _l2norm_params(axis: np.ndarray, t: OperandType, out_scale: float, out_zp: int) -> tuple:
    """(the axis as given, the output quantization's refusal or None)."""
    return int(axis.item()), _l2norm_out_check(t, out_scale, out_zp)


def _l2norm_prepare(info: OpInfo) -> object:
    """The axis (when a constant) and the output quantization check."""
    x, out = info.inputs[0], info.outputs[0]
    return prepared(lambda a: _l2norm_params(a, x.type, out.scale, out.zero_point), _axis_operand(info, 1))


def _inv_sqrt_rows(acc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """inv_sqrt_multiplier(acc, -1), on Python ints for a few rows (the Newton
    steps are some 100 numpy calls whatever the number of values)."""
    if acc.size > _FEW_ROWS:
        return inv_sqrt_multiplier(acc, -1)
    pairs = [inv_sqrt_multiplier_int(v, -1) for v in acc.ravel().tolist()]
    mult = np.array([p[0] for p in pairs], np.int64).reshape(acc.shape)
    shift = np.array([p[1] for p in pairs], np.int64).reshape(acc.shape)
    return mult, shift


def _l2norm_execute(ctx: ExecContext) -> list[np.ndarray]:
    inp, out = ctx.inputs[0], ctx.outputs[0]
    st = ctx.state
    if st is None:
        st = prepared(lambda a: _l2norm_params(a, inp.type, out.scale, out.zero_point), _runtime_axis(ctx, 1))
    raw_axis, refusal = st.value(ctx)
    axis = _axis(ctx, raw_axis)
    x = inp.data
    if inp.type in (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16):
        xf = x.astype(np.float32, copy=False)
        norm = np.sqrt(np.sum(xf * xf, axis=axis, keepdims=True, dtype=np.float32))
        res = xf / np.maximum(norm, np.float32(1e-6))
        return [res.astype(out.dtype, copy=False)]  # NOTE: a new array
    if refusal is not None:
        raise ctx.fail(refusal)
    unsigned = inp.type == T.TENSOR_QUANT8_ASYMM
    diff = x.astype(np.int64) - inp.zero_point
    acc = np.sum(diff * diff, axis=axis, keepdims=True)
    mult, shift = _inv_sqrt_rows(acc)
    if unsigned:
        res = multiply_by_quantized_multiplier_smaller_than_one(diff * 128, mult, shift) + 128
        res = np.clip(res, 0, 255)
    elif axis == x.ndim - 1:
        # NOTE: the last-axis int8 path is TFLite's integer kernel, which folds
        # the 2^7 output scale into the shift instead of pre-multiplying by 128
        res = np.clip(multiply_by_quantized_multiplier(diff, mult, shift + 7), -128, 127)
    else:
        res = np.clip(multiply_by_quantized_multiplier_smaller_than_one(diff * 128, mult, shift), -128, 127)
    return [res.astype(out.dtype)]


def _l2norm_validate(info: OpInfo) -> None:
    _validate_rank_axis(info, 1)


def _l2norm_signatures() -> list[Signature]:
    sigs = [Signature((T.TENSOR_FLOAT32,), (T.TENSOR_FLOAT32,), V1_0)]
    for t, v in ((T.TENSOR_FLOAT32, V1_2), (T.TENSOR_FLOAT16, V1_2), (T.TENSOR_QUANT8_ASYMM, V1_2),
                 (T.TENSOR_QUANT8_ASYMM_SIGNED, V1_3)):
        sigs.append(Signature((t,), (t,), v, optional=(T.INT32,)))
    return sigs


# --------------------------------------------------------------------------
# LOCAL_RESPONSE_NORMALIZATION


def _lrn_params(radius: np.ndarray, bias: np.ndarray, alpha: np.ndarray, beta: np.ndarray,
                axis: np.ndarray) -> tuple:
    """(radius, bias, alpha, beta as float32, the axis as given)."""
    return (int(radius.item()), np.float32(bias.item()), np.float32(alpha.item()), np.float32(beta.item()),
            int(axis.item()))


def _lrn_prepare(info: OpInfo) -> object:
    """The window radius, bias, alpha, beta and axis, when constants."""
    return prepared(_lrn_params, *(info.constant(i) for i in range(1, 5)), _axis_operand(info, 5))


# (axis length, radius) -> the window bounds [lo, hi) of every position along the axis
_LRN_WINDOWS = memo.Memo(64)


def _lrn_windows(n: int, radius: int) -> tuple[np.ndarray, np.ndarray]:
    i = np.arange(n)
    lo = np.clip(i - radius, 0, n)
    hi = np.maximum(np.clip(i + radius + 1, 0, n), lo)
    lo.flags.writeable = hi.flags.writeable = False  # NOTE: shared by executions
    return lo, hi


def _lrn_execute(ctx: ExecContext) -> list[np.ndarray]:
    inp, out = ctx.inputs[0], ctx.outputs[0]
    st = ctx.state
    if st is not None:
        radius, bias, alpha, beta, raw_axis = st.value(ctx)
    else:
        radius, bias, alpha, beta, raw_axis = _lrn_params(*(ctx.inputs[i].data for i in range(1, 5)),
                                                          _runtime_axis(ctx, 5))
    axis = _axis(ctx, raw_axis)
    last = axis == inp.data.ndim - 1
    x = inp.data.astype(np.float32, copy=False)
    if not last:
        x = x.swapaxes(axis, -1)  # NOTE: swapped back below; each element depends on its own row only
    n = x.shape[-1]
    # windowed sums of squares [i - radius, i + radius] through a cumulative sum
    cs = np.empty(x.shape[:-1] + (n + 1,))
    cs[..., 0] = 0
    np.cumsum(np.square(x, dtype=np.float64), axis=-1, out=cs[..., 1:])
    lo, hi = _LRN_WINDOWS.get_or_compute((n, radius), lambda: _lrn_windows(n, radius))
    sqr_sum = (cs[..., hi] - cs[..., lo]).astype(np.float32)
    res = x * np.power(bias + alpha * sqr_sum, -beta)
    if last:
        return [res.astype(out.dtype, copy=False)]  # NOTE: a new array
    return [res.swapaxes(axis, -1).astype(out.dtype)]


def _lrn_validate(info: OpInfo) -> None:
    _validate_rank_axis(info, 5)


_LRN_F32 = (T.TENSOR_FLOAT32, T.INT32, T.FLOAT32, T.FLOAT32, T.FLOAT32)
_LRN_F16 = (T.TENSOR_FLOAT16, T.INT32, T.FLOAT16, T.FLOAT16, T.FLOAT16)


# --------------------------------------------------------------------------
# INSTANCE_NORMALIZATION


def _instance_norm_params(gamma: np.ndarray, beta: np.ndarray, eps: np.ndarray, layout: np.ndarray) -> tuple:
    """(gamma, beta, epsilon as float32, the spatial axes of the layout)."""
    spatial = (2, 3) if bool(layout.item()) else (1, 2)
    return np.float32(gamma.item()), np.float32(beta.item()), np.float32(eps.item()), spatial


def _instance_norm_prepare(info: OpInfo) -> object:
    """gamma, beta, epsilon and the layout, when constants."""
    return prepared(_instance_norm_params, *(info.constant(i) for i in range(1, 5)))


def _instance_norm_execute(ctx: ExecContext) -> list[np.ndarray]:
    inp, out = ctx.inputs[0], ctx.outputs[0]
    x = inp.data
    if x.ndim != 4:
        raise ctx.fail(f"input must be 4-D, got rank {x.ndim}")
    st = ctx.state
    if st is not None:
        gamma, beta, eps, spatial = st.value(ctx)
    else:
        gamma, beta, eps, spatial = _instance_norm_params(
            *(ctx.inputs[i].data for i in (1, 2, 3)), ctx.inputs[4].data if ctx.has(4) else np.bool_(False))
    if x.size == 0:
        return [np.zeros(x.shape, out.dtype)]
    xf = x.astype(np.float32, copy=False)
    count = np.intp(x.shape[spatial[0]] * x.shape[spatial[1]])
    d = xf - _mean32(xf, spatial, count)
    sigma = np.sqrt(_mean32(np.square(d), spatial, count) + eps)
    res = d * gamma / sigma + beta
    return [res.astype(out.dtype, copy=False)]


def _mean32(v: np.ndarray, axes: tuple, count: np.intp) -> np.ndarray:
    """``v.mean(axis=axes, keepdims=True, dtype=np.float32)`` as numpy computes it (the
    float32 sum divided by the intp count, in double, stored in float32), without its
    Python-level argument handling."""
    s = np.add.reduce(v, axis=axes, dtype=np.float32, keepdims=True)
    return np.true_divide(s, count, out=s, casting="unsafe")


# --------------------------------------------------------------------------

OPS: list[OpDef] = [
    OpDef(type=OperationType.L2_NORMALIZATION, signatures=_l2norm_signatures(), execute=_l2norm_execute,
          validate=_l2norm_validate, prepare=_l2norm_prepare),
    OpDef(
        type=OperationType.LOCAL_RESPONSE_NORMALIZATION,
        signatures=[
            Signature(_LRN_F32, (T.TENSOR_FLOAT32,), V1_0),
            Signature(_LRN_F32 + (T.INT32,), (T.TENSOR_FLOAT32,), V1_2),
            Signature(_LRN_F16, (T.TENSOR_FLOAT16,), V1_2, optional=(T.INT32,)),
        ],
        execute=_lrn_execute,
        validate=_lrn_validate,
        prepare=_lrn_prepare,
    ),
    OpDef(
        type=OperationType.INSTANCE_NORMALIZATION,
        signatures=[
            Signature((T.TENSOR_FLOAT32, T.FLOAT32, T.FLOAT32, T.FLOAT32, T.BOOL), (T.TENSOR_FLOAT32,), V1_2),
            Signature((T.TENSOR_FLOAT16, T.FLOAT16, T.FLOAT16, T.FLOAT16, T.BOOL), (T.TENSOR_FLOAT16,), V1_2),
        ],
        execute=_instance_norm_execute,
        prepare=_instance_norm_prepare,
    ),
]
