"""Normalization: L2_NORMALIZATION, LOCAL_RESPONSE_NORMALIZATION and
INSTANCE_NORMALIZATION of the HAL 1.3 spec.

L2_NORMALIZATION and LOCAL_RESPONSE_NORMALIZATION take the HAL 1.2 optional
axis input (default -1, the last axis) and inputs of rank 1..4 since HAL 1.2
(rank 4 only before).  Quantized L2 normalization reproduces TFLite's
fixed-point inverse square root (Newton-Raphson in gemmlowp Q3 arithmetic), so
its output, fixed at scale 1/128, matches the reference bit for bit.
"""

from __future__ import annotations

import numpy as np

from nnhal.hal import OperandType, OperationType
from nnhal.ops.base import (
    V1_0,
    V1_2,
    V1_3,
    ExecContext,
    OpDef,
    OpInfo,
    Signature,
)
from nnhal.ops.fixedpoint import inv_sqrt_multiplier
from nnhal.ops.quant import (
    multiply_by_quantized_multiplier,
    multiply_by_quantized_multiplier_smaller_than_one,
)

T = OperandType


def _axis(ctx: ExecContext, i: int) -> int:
    """The optional axis input i (default -1), made non-negative; the input
    must have rank 1..4."""
    rank = ctx.inputs[0].data.ndim
    axis = int(ctx.scalar(i, -1))
    if rank > 4:
        raise ctx.fail(f"input rank {rank} > 4")
    if not -rank <= axis < rank:
        raise ctx.fail(f"axis {axis} out of range for rank {rank}")
    return axis % rank


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


def _l2norm_execute(ctx: ExecContext) -> list[np.ndarray]:
    inp, out = ctx.inputs[0], ctx.outputs[0]
    axis = _axis(ctx, 1)
    x = inp.data
    if inp.type in (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16):
        xf = x.astype(np.float32)
        norm = np.sqrt(np.sum(xf * xf, axis=axis, keepdims=True, dtype=np.float32))
        res = xf / np.maximum(norm, np.float32(1e-6))
        return [res.astype(out.dtype)]
    # NOTE: the reference fixes the output quantization (scale 1/128, zero point
    # 128 for uint8, 0 for int8) and refuses a model output declared otherwise
    unsigned = inp.type == T.TENSOR_QUANT8_ASYMM
    want_zp = 128 if unsigned else 0
    if out.scale != np.float32(1.0 / 128.0) or out.zero_point != want_zp:
        raise ctx.fail(f"output scale must be 1/128 and zero point {want_zp}")
    diff = x.astype(np.int64) - inp.zero_point
    acc = np.sum(diff * diff, axis=axis, keepdims=True)
    mult, shift = inv_sqrt_multiplier(acc, -1)
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


def _lrn_execute(ctx: ExecContext) -> list[np.ndarray]:
    inp, out = ctx.inputs[0], ctx.outputs[0]
    axis = _axis(ctx, 5)
    radius = int(ctx.scalar(1))
    bias, alpha, beta = (np.float32(ctx.scalar(i)) for i in (2, 3, 4))
    x = np.moveaxis(inp.data.astype(np.float32), axis, -1)
    n = x.shape[-1]
    # windowed sums of squares [i - radius, i + radius] through a cumulative sum
    cs = np.concatenate([np.zeros(x.shape[:-1] + (1,)), np.cumsum(x.astype(np.float64) ** 2, axis=-1)], axis=-1)
    i = np.arange(n)
    lo = np.clip(i - radius, 0, n)
    hi = np.maximum(np.clip(i + radius + 1, 0, n), lo)
    sqr_sum = (cs[..., hi] - cs[..., lo]).astype(np.float32)
    res = x * np.power(bias + alpha * sqr_sum, -beta)
    return [np.moveaxis(res, -1, axis).astype(out.dtype)]


def _lrn_validate(info: OpInfo) -> None:
    _validate_rank_axis(info, 5)


_LRN_F32 = (T.TENSOR_FLOAT32, T.INT32, T.FLOAT32, T.FLOAT32, T.FLOAT32)
_LRN_F16 = (T.TENSOR_FLOAT16, T.INT32, T.FLOAT16, T.FLOAT16, T.FLOAT16)


# --------------------------------------------------------------------------
# INSTANCE_NORMALIZATION


def _instance_norm_execute(ctx: ExecContext) -> list[np.ndarray]:
    inp, out = ctx.inputs[0], ctx.outputs[0]
    x = inp.data
    if x.ndim != 4:
        raise ctx.fail(f"input must be 4-D, got rank {x.ndim}")
    gamma, beta, eps = (np.float32(ctx.scalar(i)) for i in (1, 2, 3))
    nchw = bool(ctx.scalar(4, False))
    spatial = (2, 3) if nchw else (1, 2)
    xf = x.astype(np.float32)
    if xf.size == 0:
        return [np.zeros(x.shape, out.dtype)]
    mean = xf.mean(axis=spatial, keepdims=True, dtype=np.float32)
    var = np.square(xf - mean).mean(axis=spatial, keepdims=True, dtype=np.float32)
    sigma = np.sqrt(var + eps)
    res = (xf - mean) * gamma / sigma + beta
    return [res.astype(out.dtype)]


# --------------------------------------------------------------------------

OPS: list[OpDef] = [
    OpDef(type=OperationType.L2_NORMALIZATION, signatures=_l2norm_signatures(), execute=_l2norm_execute,
          validate=_l2norm_validate),
    OpDef(
        type=OperationType.LOCAL_RESPONSE_NORMALIZATION,
        signatures=[
            Signature(_LRN_F32, (T.TENSOR_FLOAT32,), V1_0),
            Signature(_LRN_F32 + (T.INT32,), (T.TENSOR_FLOAT32,), V1_2),
            Signature(_LRN_F16, (T.TENSOR_FLOAT16,), V1_2, optional=(T.INT32,)),
        ],
        execute=_lrn_execute,
        validate=_lrn_validate,
    ),
    OpDef(
        type=OperationType.INSTANCE_NORMALIZATION,
        signatures=[
            Signature((T.TENSOR_FLOAT32, T.FLOAT32, T.FLOAT32, T.FLOAT32, T.BOOL), (T.TENSOR_FLOAT32,), V1_2),
            Signature((T.TENSOR_FLOAT16, T.FLOAT16, T.FLOAT16, T.FLOAT16, T.BOOL), (T.TENSOR_FLOAT16,), V1_2),
        ],
        execute=_instance_norm_execute,
    ),
]
