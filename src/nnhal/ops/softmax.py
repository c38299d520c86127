"""SOFTMAX and LOG_SOFTMAX of the HAL 1.3 spec (``types.hal`` ``OperationType``).

SOFTMAX takes beta and, since HAL 1.2, an optional axis (default -1) on
tensors of rank 1 to 4 (only 2 and 4 before HAL 1.2).  Quantized SOFTMAX
reproduces the reference's gemmlowp fixed-point kernel bit for bit: the input
differences to the row maximum are rescaled to Q5.26 by beta * scale, exp is
evaluated by ``exp_on_negative_values``, the sum in Q12.19 is inverted by
``one_over_one_plus_x_for_x_in_0_1`` and the result has scale 1/256.  All of
it runs vectorized on int64 arrays holding int32 values.  LOG_SOFTMAX is
float only.
"""

from __future__ import annotations

import numpy as np

from nnhal.hal import OperandType, OperationType
from nnhal.ops import memo
from nnhal.ops.base import V1_0, V1_2, V1_3, ExecContext, OpDef, OpInfo, Signature
from nnhal.ops.fixedpoint import (
    exp_on_negative_values,
    one_over_one_plus_x_for_x_in_0_1,
    one_over_one_plus_x_for_x_in_0_1_int,
    rounding_divide_by_pot_int,
    srdhm_int,
)
from nnhal.ops.prepared import prepared
from nnhal.ops.quant import (
    QUANT_RANGE,
    multiply_by_quantized_multiplier_greater_than_one,
    quantize_multiplier_greater_than_one,
    rounding_divide_by_pot,
    saturating_rounding_doubling_high_mul,
)

T = OperandType
F32, F16 = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16
Q8, Q8S = T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED

_srdhm = saturating_rounding_doubling_high_mul
_rdbp = rounding_divide_by_pot

# Q5.26 input of exp(): 5 integer bits, as the reference
_SCALED_DIFF_INTEGER_BITS = 5
_ACCUMULATION_INTEGER_BITS = 12
_FEW_ROWS = 16  # rows up to which the per-row reciprocal runs on Python ints


def _count_leading_zeros_u32(v: np.ndarray) -> np.ndarray:
    # NOTE: frexp's exponent of an exactly representable integer is its bit length
    return 32 - np.frexp(v.astype(np.float64))[1].astype(np.int64)


# (multiplier, left shift, diff_min) -> tables; shared by concurrent executions
_EXP_TABLES = memo.Memo(64)


def _exp_table(multiplier: int, left_shift: int, diff_min: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(valid, exp, contribution to the sum) for every difference to the
    row maximum, -255 .. 0 (entry d + 255): they depend on nothing else."""
    return _EXP_TABLES.get_or_compute((multiplier, left_shift, diff_min),
                                      lambda: _build_exp_table(multiplier, left_shift, diff_min))


def _build_exp_table(multiplier: int, left_shift: int, diff_min: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    diff = np.arange(-255, 1, dtype=np.int64)
    valid = diff >= diff_min
    rescaled = multiply_by_quantized_multiplier_greater_than_one(np.where(valid, diff, 0), multiplier, left_shift)
    exps = exp_on_negative_values(rescaled, _SCALED_DIFF_INTEGER_BITS)
    contrib = np.where(valid, _rdbp(exps, _ACCUMULATION_INTEGER_BITS), 0)  # Rescale to Q12.19
    return valid, exps, contrib


def _quant_params(beta: float, scale: float) -> tuple[int, int, int]:
    """(multiplier, left shift, diff_min) of a quantized softmax; ValueError where the reference fails."""
    real = min(float(np.float32(beta)) * float(np.float32(scale)) * (1 << (31 - _SCALED_DIFF_INTEGER_BITS)),
               (1 << 31) - 1.0)
    if not real > 1.0:
        raise ValueError(f"beta * scale multiplier {real} must be > 1")
    multiplier, left_shift = quantize_multiplier_greater_than_one(real)
    max_input_rescaled = ((1 << _SCALED_DIFF_INTEGER_BITS) - 1) * (1 << (31 - _SCALED_DIFF_INTEGER_BITS)) \
        / (1 << left_shift)
    diff_min = -int(np.floor(max_input_rescaled))
    return multiplier, left_shift, diff_min


def _softmax_quant_rows(q: np.ndarray, tables: tuple, type_: OperandType) -> np.ndarray:
    """Quantized softmax along the last axis of stored values ``q``."""
    # NOTE: everything up to the sum depends only on the difference to the row
    # maximum (256 values): table lookups instead of the fixed-point passes
    valid_t, exps_t, contrib_t = tables
    x = q.astype(np.int64)
    idx = x - x.max(axis=-1, keepdims=True)
    idx += 255
    sum_of_exps = np.sum(contrib_t[idx], axis=-1, keepdims=True)
    rows = q.size // q.shape[-1] if q.shape[-1] else 0
    if rows <= _FEW_ROWS:
        # NOTE: the reciprocal of each row's sum on Python ints: ~40 numpy calls
        # on a handful of values cost more than the whole row
        hs, ss = [], []
        for v in sum_of_exps.ravel().tolist():
            h = 32 - v.bit_length()
            hs.append(_ACCUMULATION_INTEGER_BITS - h)
            ss.append(one_over_one_plus_x_for_x_in_0_1_int(((v << h) & 0xFFFFFFFF) - (1 << 31)))
        num_bits_over_unit = np.array(hs, np.int64).reshape(sum_of_exps.shape)
        shifted_scale = np.array(ss, np.int64).reshape(sum_of_exps.shape)
    else:
        headroom_plus_one = _count_leading_zeros_u32(sum_of_exps)
        num_bits_over_unit = _ACCUMULATION_INTEGER_BITS - headroom_plus_one
        shifted_sum_minus_one = ((sum_of_exps << headroom_plus_one) & 0xFFFFFFFF) - (1 << 31)
        shifted_scale = one_over_one_plus_x_for_x_in_0_1(shifted_sum_minus_one)
    qmin, qmax = QUANT_RANGE[type_]
    if rows * 256 < q.size:
        # per row, the output of each of the 256 differences, then a lookup
        out_t = _rdbp(_srdhm(shifted_scale, exps_t), num_bits_over_unit + 31 - 8)
        if type_ == Q8S:
            out_t = out_t - 128
        out_t = np.where(valid_t, np.clip(out_t, qmin, qmax), qmin).astype(q.dtype)
        return np.take_along_axis(out_t, idx, axis=-1)
    out = _rdbp(_srdhm(shifted_scale, exps_t[idx]), num_bits_over_unit + 31 - 8)
    if type_ == Q8S:
        out = out - 128
    out = np.clip(out, qmin, qmax)
    return np.where(valid_t[idx], out, qmin).astype(q.dtype)


_ONE_ROW = 64  # values of a single row computed on Python ints (_softmax_quant_row)


def _softmax_quant_row(q: np.ndarray, tables: tuple, type_: OperandType) -> np.ndarray:
    """:func:`_softmax_quant_rows` of a single short row (a classifier's
    output, e.g. 1x8), on Python ints: the same table entries and fixed-point
    steps (:mod:`nnhal.ops.fixedpoint`'s int forms), without the ~20 numpy
    calls that cost more than the row."""
    valid_t, exps_t, contrib_t = tables
    vals = q.reshape(-1).tolist()
    top = max(vals) - 255
    idx = [v - top for v in vals]
    total = 0
    for i in idx:
        total += contrib_t.item(i)
    h = 32 - total.bit_length()
    shift = _ACCUMULATION_INTEGER_BITS - h + 31 - 8
    scale = one_over_one_plus_x_for_x_in_0_1_int(((total << h) & 0xFFFFFFFF) - (1 << 31))
    qmin, qmax = QUANT_RANGE[type_]
    off = 128 if type_ == Q8S else 0
    res = []
    for i in idx:
        if not valid_t.item(i):
            res.append(qmin)
            continue
        v = rounding_divide_by_pot_int(srdhm_int(scale, exps_t.item(i)), shift) - off
        res.append(qmin if v < qmin else qmax if v > qmax else v)
    return np.array(res, q.dtype).reshape(q.shape)


# --------------------------------------------------------------------------
# SOFTMAX


def _validate_softmax(info: OpInfo) -> None:
    rank = info.inputs[0].rank
    if rank > 4:
        raise info.fail(f"input rank {rank} > 4")
    # NOTE: without the axis input, ranks other than 2 and 4 need HAL 1.2 (unknown rank is 0)
    if len(info.inputs) == 2 and rank not in (0, 2, 4) and info.version < V1_2:
        raise info.fail(f"rank {rank} input needs HAL 1.2")


def _axis(ctx: ExecContext, axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise ctx.fail(f"axis {axis} out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def _softmax_params(beta: float, axis: int, t: OperandType, scale: float, out_scale: float,
                    out_zp: int) -> tuple:
    """(beta, axis, quantized: the exp tables or why the reference fails on a
    non-empty input); ValueError where the reference fails on any input."""
    if not beta > 0:
        raise ValueError(f"beta {beta} must be positive")
    tables = None
    if t in (Q8, Q8S):
        zp = 0 if t == Q8 else -128
        try:
            if out_zp != zp or np.float32(out_scale) != np.float32(1.0 / 256):
                raise ValueError(f"output scale must be 1/256 and zeroPoint {zp}")
            tables = _exp_table(*_quant_params(beta, scale))
        except ValueError as e:
            tables = str(e)  # NOTE: the reference checks these after the empty-input case
    return beta, axis, tables


def _prepare_softmax(info: OpInfo) -> object:
    """beta, axis and (quantized) the exp tables, when beta and the axis are constants."""
    beta = info.constant(1)
    axis = info.constant(2) if len(info.inputs) > 2 else np.int32(-1)
    x, out = info.inputs[0], info.outputs[0]
    return prepared(lambda b, a: _softmax_params(float(b), int(a), x.type, x.scale, out.scale, out.zero_point),
                    beta, axis)


def _exec_softmax(ctx: ExecContext) -> list[np.ndarray]:
    t = ctx.inputs[0]
    x = t.data
    out = ctx.outputs[0]
    if x.ndim > 4:
        raise ctx.fail(f"input rank {x.ndim} > 4")
    st = ctx.state
    if st is None:
        st = prepared(lambda: _softmax_params(float(ctx.scalar(1)), int(ctx.scalar(2, -1)), t.type, t.scale,
                                              out.scale, out.zero_point))
    beta, axis, tables = st.value(ctx)
    if x.size == 0:
        return [np.zeros(x.shape, out.dtype)]
    axis = _axis(ctx, axis, x.ndim)
    last = axis == x.ndim - 1
    moved = x if last else np.moveaxis(x, axis, -1)
    if tables is not None:
        if tables.__class__ is str:
            raise ctx.fail(tables)
        if moved.size <= _ONE_ROW and moved.size == moved.shape[-1]:
            r = _softmax_quant_row(moved, tables, t.type)
        else:
            r = _softmax_quant_rows(moved, tables, t.type)
    else:
        v = moved.astype(np.float32)
        e = np.exp((v - v.max(axis=-1, keepdims=True)) * np.float32(beta))
        r = e / e.sum(axis=-1, keepdims=True)
    if not last:
        r = np.ascontiguousarray(np.moveaxis(r, -1, axis))
    return [r.astype(out.dtype, copy=False)]


# --------------------------------------------------------------------------
# LOG_SOFTMAX


def _log_softmax_params(beta: np.ndarray, axis: np.ndarray) -> tuple[np.float32, int]:
    """(beta as a float32, the axis as given): normalized against the rank at execute."""
    return np.float32(beta.item()), int(axis.item())


def _prepare_log_softmax(info: OpInfo) -> object:
    """beta and the axis, when constants."""
    return prepared(_log_softmax_params, info.constant(1), info.constant(2))


def _exec_log_softmax(ctx: ExecContext) -> list[np.ndarray]:
    x = ctx.inputs[0].data
    st = ctx.state
    beta, axis = st.value(ctx) if st is not None else _log_softmax_params(ctx.inputs[1].data, ctx.inputs[2].data)
    axis = _axis(ctx, axis, x.ndim)
    v = x.astype(np.float32, copy=False)
    d = v - v.max(axis=axis, keepdims=True)
    d *= beta
    # NOTE: exp and the difference in double (of d widened), each result stored once (the
    # ufunc casts it to the output type as astype would)
    log_sum = np.log(np.sum(np.exp(d, dtype=np.float64), axis=axis, keepdims=True))
    r = np.empty(d.shape, ctx.outputs[0].dtype)
    np.subtract(d, log_sum, out=r, dtype=np.float64, casting="unsafe")
    return [r]


# --------------------------------------------------------------------------

_SOFTMAX_TYPES = ((F32, T.FLOAT32, V1_0), (Q8, T.FLOAT32, V1_0), (F16, T.FLOAT16, V1_2), (Q8S, T.FLOAT32, V1_3))

OPS: list[OpDef] = [
    OpDef(OperationType.SOFTMAX,
          [Signature((t, b), (t,), v) for t, b, v in _SOFTMAX_TYPES]
          + [Signature((t, b, T.INT32), (t,), max(v, V1_2)) for t, b, v in _SOFTMAX_TYPES],
          _exec_softmax, validate=_validate_softmax, prepare=_prepare_softmax, allow_zero_sized=True),
    OpDef(OperationType.LOG_SOFTMAX,
          [Signature((F32, T.FLOAT32, T.INT32), (F32,), V1_2), Signature((F16, T.FLOAT16, T.INT32), (F16,), V1_2)],
          _exec_log_softmax, prepare=_prepare_log_softmax),
]
