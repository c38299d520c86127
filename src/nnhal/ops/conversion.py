"""Type conversions of the HAL 1.3 spec: CAST, QUANTIZE and DEQUANTIZE.

CAST ignores quantization parameters (a TENSOR_QUANT8_ASYMM tensor is its
uint8 values): between float16, float32, int32 and quant8 asymm it converts
like C++ ``static_cast`` (floats truncate toward zero; casts to uint8 saturate
to [0, 255] first), the other types (HAL 1.3) only cast to themselves.
QUANTIZE rounds half away from zero (std::round) and saturates; DEQUANTIZE
computes ``scale * (q - zeroPoint)`` in float, per channel for
TENSOR_QUANT8_SYMM_PER_CHANNEL.
"""

from __future__ import annotations

import numpy as np

from nnhal.hal import OperandType, OperationType
from nnhal.ops.base import NUMPY_DTYPE, V1_0, V1_2, V1_3, ExecContext, OpDef, OpInfo, Signature
from nnhal.ops.broadcast import check_max_rank, validate_max_rank
from nnhal.ops.quant import QUANT_RANGE

T = OperandType

# --------------------------------------------------------------------------
# CAST

_CAST_NUMERIC = (T.TENSOR_FLOAT16, T.TENSOR_FLOAT32, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM)
_CAST_IDENTITY = (T.TENSOR_BOOL8, T.TENSOR_QUANT16_ASYMM, T.TENSOR_QUANT16_SYMM, T.TENSOR_QUANT8_ASYMM_SIGNED,
                  T.TENSOR_QUANT8_SYMM)


def _validate_cast(info: OpInfo) -> None:
    # NOTE: as the reference: declared shapes, when both known and the output's
    # element count is not zero, must be equal
    ins, outs = info.inputs[0].dimensions, info.outputs[0].dimensions
    if ins and outs and int(np.prod(outs)) != 0 and tuple(ins) != tuple(outs):
        raise info.fail(f"output dimensions {list(outs)} differ from input dimensions {list(ins)}")


def _cast_same(data: np.ndarray, dtype: np.dtype) -> np.ndarray:
    return data.copy()


def _cast_to_quant8(data: np.ndarray, dtype: np.dtype) -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore"):
        if data.dtype.kind == "f":
            return np.trunc(np.clip(data.astype(np.float32), 0, 255)).astype(np.uint8)
        return np.clip(data, 0, 255).astype(np.uint8)


def _cast_float_to_int32(data: np.ndarray, dtype: np.dtype) -> np.ndarray:
    # NOTE: static_cast<int32_t> truncates; out-of-range is undefined in C++ (x86 gives INT32_MIN)
    with np.errstate(invalid="ignore", over="ignore"):
        return np.trunc(data.astype(np.float64)).astype(np.int32)


def _cast_plain(data: np.ndarray, dtype: np.dtype) -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore"):
        return data.astype(dtype)


def _cast_fn(src: OperandType, dst: OperandType) -> object:
    """The conversion from ``src`` to ``dst`` (chosen once per model: the types are the model's)."""
    if src == dst:
        return _cast_same
    if dst == T.TENSOR_QUANT8_ASYMM:
        return _cast_to_quant8
    if dst == T.TENSOR_INT32 and src in (T.TENSOR_FLOAT16, T.TENSOR_FLOAT32):
        return _cast_float_to_int32
    return _cast_plain


def _prepare_cast(info: OpInfo) -> object:
    return _cast_fn(info.inputs[0].type, info.outputs[0].type)


def _execute_cast(ctx: ExecContext) -> list[np.ndarray]:
    x = ctx.inputs[0]
    out = ctx.outputs[0]
    fn = ctx.state if ctx.state is not None else _cast_fn(x.type, out.type)
    return [fn(x.data, out.dtype)]


# --------------------------------------------------------------------------
# QUANTIZE / DEQUANTIZE


# NOTE: the largest float32 below one half: trunc(v + copysign(HALF_DOWN, v)) in float32 is std::round(v) for
# every float32 |v| < 1024 (checked on all 2^31.1 such bit patterns against the float64 form, which is exact);
# adding 0.5 itself is wrong in float32 at 0.49999997 (the sum rounds to 1.0)
HALF_DOWN = np.nextafter(np.float32(0.5), np.float32(0.0))


def _quantize_params(out_scale: float, out_zp: int, out_type: OperandType) -> tuple:
    """(scale, zeroPoint, lowest, highest) of QUANTIZE's output, each a float32 as the kernel uses it; lowest and
    highest are the stored range minus the zero point (the quotient's clamp)."""
    lo, hi = QUANT_RANGE[out_type]
    return np.float32(out_scale), np.float32(out_zp), np.float32(lo - out_zp), np.float32(hi - out_zp)


def _prepare_quantize(info: OpInfo) -> tuple:
    out = info.outputs[0]
    return _quantize_params(out.scale, out.zero_point, out.type)


def _execute_quantize(ctx: ExecContext) -> list[np.ndarray]:
    x = ctx.inputs[0]
    out = ctx.outputs[0]
    st = ctx.state
    scale, zp, lowest, highest = st if st is not None else _quantize_params(out.scale, out.zero_point, out.type)
    with np.errstate(all="ignore"):
        # NOTE: the reference: v = input / scale in float, then zeroPoint + std::round(v), clamped to the
        # stored range.  Rounding is monotone and the range's ends are integers, so v is clamped first
        # (to [min - zeroPoint, max - zeroPoint], exact in float32; fmax / fmin take the number where one
        # side is NaN: NaN -> min, as the reference's clamp of its NaN cast), then rounded in float32
        # (HALF_DOWN: exact for |v| < 1024), then the zero point added: every value an exact small integer
        v = np.divide(x.data, scale, dtype=np.float32)
        if v.__class__ is not np.ndarray:
            v = np.asarray(v)  # NOTE: a 0-d input gives a scalar, which out= below cannot take
        np.fmax(v, lowest, out=v)
        np.fmin(v, highest, out=v)
        t = np.copysign(HALF_DOWN, v, out=np.empty_like(v))
        t += v
        np.trunc(t, out=t)
        t += zp
        return [t.astype(out.dtype)]


def _validate_dequantize(info: OpInfo) -> None:
    validate_max_rank(info, 4, 0)
    x = info.inputs[0]
    if x.type == T.TENSOR_QUANT8_SYMM_PER_CHANNEL:
        cq = x.channel_quant
        if cq is None:
            raise info.fail("a TENSOR_QUANT8_SYMM_PER_CHANNEL input needs channel quantization parameters")
        if x.rank and not 0 <= cq.channelDim < x.rank:
            raise info.fail(f"channelDim {cq.channelDim} out of range for rank {x.rank}")
        if x.rank and x.dimensions[cq.channelDim] and len(cq.scales) != x.dimensions[cq.channelDim]:
            raise info.fail(f"{len(cq.scales)} channel scales for a dimension of {x.dimensions[cq.channelDim]}")


def _execute_dequantize(ctx: ExecContext) -> list[np.ndarray]:
    x = ctx.inputs[0]
    out = ctx.outputs[0]
    check_max_rank(ctx, 4, 0)
    if x.data.size == 0:
        return [np.zeros(x.shape, out.dtype)]
    if x.type == T.TENSOR_QUANT8_SYMM_PER_CHANNEL:
        cq = x.channel_quant
        if cq is None or not 0 <= cq.channelDim < x.data.ndim or len(cq.scales) != x.data.shape[cq.channelDim]:
            raise ctx.fail("bad per-channel quantization parameters")
        shape = [1] * x.data.ndim
        shape[cq.channelDim] = -1
        scale = np.asarray(cq.scales, np.float32).reshape(shape)
        zero_point = 0
    else:
        lut = ctx.state
        if isinstance(lut, np.ndarray) and x.data.dtype.itemsize == 1:
            return [lut[x.data.view(np.uint8)]]  # NOTE: the prepared table of the 256 codes (a new array)
        return [_dequantize_codes(x.data, x.scale, x.zero_point, out.dtype)]
    res = scale * (x.data.astype(np.int32) - zero_point).astype(np.float32)
    return [res.astype(out.dtype)]


def _dequantize_codes(codes: np.ndarray, scale: float, zero_point: int, out_dtype: np.dtype) -> np.ndarray:
    with np.errstate(over="ignore"):  # NOTE: a huge scale gives inf, as the reference's float product
        return (np.float32(scale) * (codes.astype(np.int32) - zero_point).astype(np.float32)).astype(out_dtype)


def _prepare_dequantize(info: OpInfo) -> np.ndarray | None:
    """An 8-bit per-tensor input: the output of each of its 256 codes, computed
    once as the kernel computes it (the execution is one table lookup)."""
    x, out = info.inputs[0], info.outputs[0]
    if x.type not in (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_QUANT8_SYMM):
        return None
    codes = np.arange(256, dtype=np.uint8).view(NUMPY_DTYPE[x.type])  # indexed by the code's byte
    lut = _dequantize_codes(codes, x.scale, x.zero_point, NUMPY_DTYPE[out.type])
    lut.flags.writeable = False
    return lut


_DEQUANT_SIGS = [
    Signature((T.TENSOR_QUANT8_ASYMM,), (T.TENSOR_FLOAT32,), V1_0),
    Signature((T.TENSOR_QUANT8_ASYMM,), (T.TENSOR_FLOAT16,), V1_2),
    *[
        Signature((i,), (o,), V1_2)
        for i in (T.TENSOR_QUANT8_SYMM, T.TENSOR_QUANT8_SYMM_PER_CHANNEL)
        for o in (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16)
    ],
    Signature((T.TENSOR_QUANT8_ASYMM_SIGNED,), (T.TENSOR_FLOAT32,), V1_3),
    Signature((T.TENSOR_QUANT8_ASYMM_SIGNED,), (T.TENSOR_FLOAT16,), V1_3),
]

OPS: list[OpDef] = [
    OpDef(type=OperationType.CAST,
          signatures=[Signature((i,), (o,), V1_2) for i in _CAST_NUMERIC for o in _CAST_NUMERIC]
          + [Signature((t,), (t,), V1_3) for t in _CAST_IDENTITY],
          execute=_execute_cast, validate=_validate_cast, prepare=_prepare_cast, bad_data_on_missing_operand=True),
    OpDef(type=OperationType.QUANTIZE,
          signatures=[Signature((i,), (o,), v) for i in (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16)
                      for o, v in ((T.TENSOR_QUANT8_ASYMM, V1_2), (T.TENSOR_QUANT8_ASYMM_SIGNED, V1_3))],
          execute=_execute_quantize, prepare=_prepare_quantize, allow_zero_sized=True),
    OpDef(type=OperationType.DEQUANTIZE, signatures=_DEQUANT_SIGS, execute=_execute_dequantize,
          validate=_validate_dequantize, prepare=_prepare_dequantize, allow_zero_sized=True),
]
