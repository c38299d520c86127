"""Broadcasting binary arithmetic of the HAL 1.3 spec: ADD, MUL, SUB, DIV
(with a fused activation), POW, MAXIMUM and MINIMUM.

Shapes broadcast as the spec says (trailing dimensions equal or 1; a zero
dimension only with 0 or 1).  Quantized ADD / SUB / MUL use the TFLite integer
arithmetic Android's reference calls (inputs left-shifted by 20 and rescaled
by Q31 multipliers), so results match it bit for bit.  TENSOR_INT32 (HAL 1.3)
wraps like C++ int32 and DIV floors.  Quantized MAXIMUM / MINIMUM requantize
each input to the output through a table of its 256 codes built at prepare.

The small helpers at the top (broadcast shapes, float16 edges, std::round,
requantize) are shared by the other elementwise family modules.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

from nnhal.hal import HalVersion, OperandType, OperationType
from nnhal.ops import memo
from nnhal.ops.base import (
    NUMPY_DTYPE,
    V1_0,
    V1_1,
    V1_2,
    V1_3,
    ExecContext,
    OpDef,
    OpInfo,
    OutputSpec,
    Signature,
    Tensor,
    fused_activation,
)
from nnhal.ops.fixedpoint import round_half_away
from nnhal.ops.prepared import prepared
from nnhal.ops.quant import (
    QUANT_RANGE,
    activation_range,
    multiply_by_quantized_multiplier_smaller_than_one,
    quantize_multiplier,
)

T = OperandType

# --------------------------------------------------------------------------
# helpers shared by the elementwise families


# (shape, shape) -> their broadcast, or False where they do not broadcast: a model's
# executions see the same few pairs, and numpy's general broadcast costs microseconds
_BROADCASTS = memo.Memo(256)


def _broadcast_or_false(ta: tuple, tb: tuple) -> object:
    try:
        return tuple(np.broadcast_shapes(ta, tb))
    except ValueError:
        return False


def broadcast_shape(ctx: ExecContext, a: Sequence[int], b: Sequence[int]) -> tuple[int, ...]:
    """The spec's broadcast of two shapes (numpy rules); run-time failure if incompatible."""
    ta, tb = tuple(a), tuple(b)
    if ta == tb:
        return ta  # NOTE: the common case, without numpy's general broadcast per execution
    key = (ta, tb)
    shape = _BROADCASTS.get(key)
    if shape is None:
        shape = _BROADCASTS.put(key, _broadcast_or_false(ta, tb))
    if shape is False:
        raise ctx.fail(f"shapes {list(a)} and {list(b)} do not broadcast")
    return shape


def check_max_rank(ctx: ExecContext, max_rank: int, *indexes: int) -> None:
    for i in indexes:
        if ctx.inputs[i].data.ndim > max_rank:
            raise ctx.fail(f"input {i} has rank {ctx.inputs[i].data.ndim}, more than {max_rank}")


def validate_max_rank(info: OpInfo, max_rank: int, *indexes: int) -> None:
    """Model-time rank limit, checked only when the rank is known (non-empty dims)."""
    for i in indexes:
        if info.inputs[i].rank > max_rank:
            raise info.fail(f"input {i} has rank {info.inputs[i].rank}, more than {max_rank}")


def as_float(t: Tensor) -> np.ndarray:
    """A float16 / float32 tensor's values in float32 (float16 kernels compute in float32)."""
    return t.data.astype(np.float32, copy=False)


def requantize(q: np.ndarray, scale: float, zero_point: int, out_scale: float, out_zp: int,
               out_type: OperandType) -> np.ndarray:
    """Android's ``requantize``: the real value (computed in float, as int * float)
    mapped to the output scale in double, clamped, then std::round."""
    lo, hi = QUANT_RANGE[out_type]
    real = ((q.astype(np.int32) - zero_point).astype(np.float32) * np.float32(scale)).astype(np.float64)
    v = real / float(np.float32(out_scale)) + out_zp
    v = np.clip(v, lo, hi)
    return round_half_away(v).astype(np.int32)


try:
    from numpy._core.umath import clip as _clip_ufunc  # numpy >= 2
except ImportError:  # pragma: no cover  (numpy 1.x)
    from numpy.core.umath import clip as _clip_ufunc


def clamp(data: np.ndarray, lo: np.generic, hi: np.generic) -> np.ndarray:
    """``min(max(data, lo), hi)`` (as std::min / std::max and np.clip) by numpy's clip
    ufunc itself: np.clip's Python-level handling costs microseconds, and on integers
    it is vectorized where np.maximum / np.minimum with a scalar are not.  ``lo`` and
    ``hi`` are scalars of data's dtype.  An array, a 0-d one for 0-d data."""
    r = _clip_ufunc(data, lo, hi)
    return r if r.__class__ is np.ndarray else np.asarray(r)


def lookup(table: np.ndarray, data: np.ndarray) -> np.ndarray:
    """``table`` (256 entries, by the code's byte) of 8-bit ``data``: one take
    on the raw bytes; an array, a 0-d one for 0-d data (take gives a scalar)."""
    r = table.take(data.view(np.uint8))
    return r if r.__class__ is np.ndarray else np.asarray(r)


def requantize_table(t: OperandType, scale: float, zero_point: int, out_scale: float, out_zp: int,
                     out_type: OperandType) -> np.ndarray:
    """:func:`requantize` of the 256 codes of an 8-bit type ``t`` (entry i: the
    code whose byte is i), in the output's storage type: an 8-bit input's
    requantization as one lookup (``table.take(data.view(np.uint8))``), bit for
    bit the function's own results.  Read-only (shared by executions)."""
    codes = np.arange(256, dtype=np.uint8).view(NUMPY_DTYPE[t])
    table = requantize(codes, scale, zero_point, out_scale, out_zp, out_type).astype(NUMPY_DTYPE[out_type])
    table.flags.writeable = False
    return table


# --------------------------------------------------------------------------
# ADD / MUL / SUB / DIV

_ARITH_OPS = (OperationType.ADD, OperationType.MUL, OperationType.SUB, OperationType.DIV)


def _arith_signatures(op: OperationType) -> list[Signature]:
    introduced = V1_1 if op in (OperationType.SUB, OperationType.DIV) else V1_0
    table: list[tuple[OperandType, HalVersion]] = [
        (T.TENSOR_FLOAT32, introduced),
        (T.TENSOR_FLOAT16, V1_2),
    ]
    if op in (OperationType.ADD, OperationType.MUL):
        table.append((T.TENSOR_QUANT8_ASYMM, V1_0))
    elif op == OperationType.SUB:
        table.append((T.TENSOR_QUANT8_ASYMM, V1_2))
    if op != OperationType.DIV:
        table.append((T.TENSOR_QUANT8_ASYMM_SIGNED, V1_3))
    table.append((T.TENSOR_INT32, V1_3))
    return [Signature((t, t, T.INT32), (t,), v) for t, v in table]


def _validate_arith(info: OpInfo) -> None:
    validate_max_rank(info, 4, 0, 1)
    if info.type == OperationType.MUL and info.inputs[0].type == T.TENSOR_QUANT8_ASYMM:
        # NOTE: the reference checks this for TENSOR_QUANT8_ASYMM only (signed fails at run time)
        a, b, out = info.inputs[0], info.inputs[1], info.outputs[0]
        if not np.float32(out.scale) > np.float32(a.scale) * np.float32(b.scale):
            raise info.fail(f"output scale {out.scale} must be > input1 scale * input2 scale "
                            f"({a.scale} * {b.scale})")


@functools.lru_cache(maxsize=256)
def _multiplier_below_one(real: float) -> tuple[int, int]:
    """Android QuantizeMultiplierSmallerThanOneExp (fails outside (0, 1))."""
    if not 0.0 < real < 1.0:
        raise ValueError(f"multiplier {real} not in (0, 1)")
    q, shift = quantize_multiplier(real)
    if shift > 0:
        raise ValueError(f"multiplier {real} has a left shift")
    return q, shift


def _add_sub_table(a: object, b: object, out: object, act: int, negate_b: bool) -> np.ndarray:
    """The exact ADD / SUB result for every pair of 8-bit codes (entry a*256 + b),
    shared through a memo by operations of equal quantization.  ``a``, ``b``,
    ``out``: anything with type, scale and zero_point (operand infos or tensors);
    ValueError where the reference fails."""
    lo, hi = activation_range(act, out.scale, out.zero_point, out.type)
    key = (int(a.type), float(a.scale), int(a.zero_point), float(b.scale), int(b.zero_point),
           float(out.scale), int(out.zero_point), int(out.type), lo, hi, negate_b)
    return _PAIR_TABLES.get_or_compute(key, lambda: _pair_table(a, b, out, lo, hi, negate_b))


# NOTE: keyed by quantization parameters; filled at prepare (or by executions of
# operations without a prepared state) and shared: a locked memo
_PAIR_TABLES = memo.Memo(64)


_ADD_LEFT_SHIFT = 20


def add_sub_multipliers(a: object, b: object, out: object) -> tuple[tuple[int, int], ...]:
    """The reference's three ADD / SUB multipliers (input 1, input 2, output); ValueError where it fails."""
    # NOTE: the reference computes these in double from float scales
    s1, s2, so = float(np.float32(a.scale)), float(np.float32(b.scale)), float(np.float32(out.scale))
    twice_max = 2.0 * max(s1, s2)
    return (_multiplier_below_one(s1 / twice_max), _multiplier_below_one(s2 / twice_max),
            _multiplier_below_one(twice_max / ((1 << _ADD_LEFT_SHIFT) * so)))


def _pair_table(a: object, b: object, out: object, lo: int, hi: int, negate_b: bool) -> np.ndarray:
    left_shift = _ADD_LEFT_SHIFT
    (m1, sh1), (m2, sh2), (mo, sho) = add_sub_multipliers(a, b, out)
    if negate_b:
        m2 = -m2  # SUB: the reference negates input 2's multiplier and adds
    x1 = _rescale_table(a, m1, sh1, left_shift)
    x2 = _rescale_table(b, m2, sh2, left_shift)
    raw = multiply_by_quantized_multiplier_smaller_than_one(x1[:, None] + x2[None, :], mo, sho) + out.zero_point
    table = np.clip(raw, lo, hi).astype(NUMPY_DTYPE[out.type])
    if a.type != T.TENSOR_QUANT8_ASYMM:
        # NOTE: rows / columns by the int8 values' bit patterns (value & 0xFF), so that
        # an execution indexes with the raw bytes: code = value + 128 = bits ^ 0x80
        table = np.roll(table, 128, axis=(0, 1))
    return np.ascontiguousarray(table).reshape(-1)


def _rescale_table(t: object, m: int, sh: int, left_shift: int) -> np.ndarray:
    """(code - zeroPoint) << left_shift, rescaled by (m, sh), for all 256 codes."""
    codes = np.arange(256, dtype=np.int64) if t.type == T.TENSOR_QUANT8_ASYMM else np.arange(-128, 128, dtype=np.int64)
    return multiply_by_quantized_multiplier_smaller_than_one((codes - t.zero_point) << left_shift, m, sh)


def _add_sub_quant(table: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """ADD / SUB / MUL of 8-bit tensors: the prepared pair table indexed by the raw bytes."""
    ca, cb = a.view(np.uint8), b.view(np.uint8)  # NOTE: the raw bytes (see _pair_table)
    if ca.shape != cb.shape:
        ca, cb = np.broadcast_arrays(ca, cb)
    # NOTE: an output depends only on the pair of 8-bit inputs: one lookup in a
    # 64K-entry table of the exact results (computed once per quantization
    # parameters) replaces the fixed-point passes.
    idx = ca.astype(np.uint16)  # NOTE: 16-bit indexes: faster than intp here
    idx <<= 8
    idx |= cb
    return table.take(idx)


def _mul_params(a: object, b: object, out: object, act: int) -> tuple[int, int, int, int]:
    # NOTE: the reference multiplies the input scales in float, then divides in double
    real = float(np.float32(a.scale) * np.float32(b.scale)) / float(np.float32(out.scale))
    m, sh = _multiplier_below_one(real)
    lo, hi = activation_range(act, out.scale, out.zero_point, out.type)
    return m, sh, lo, hi


def _mul_quant(params: tuple, a: Tensor, b: Tensor, out: object) -> np.ndarray:
    m, sh, lo, hi = params
    prod = (a.data.astype(np.int64) - a.zero_point) * (b.data.astype(np.int64) - b.zero_point)
    raw = multiply_by_quantized_multiplier_smaller_than_one(prod, m, sh) + out.zero_point
    return np.clip(raw, lo, hi).astype(out.dtype)


def _mul_table(a: object, b: object, out: object, act: int) -> np.ndarray:
    """The exact quantized MUL result for every pair of 8-bit codes, laid out
    as :func:`_pair_table` (rows / columns by the raw bytes), computed by the
    execution's own arithmetic (:func:`_mul_quant`) over all 65536 pairs, and
    shared through the same memo; ValueError where the reference fails."""
    params = _mul_params(a, b, out, act)
    key = ("MUL", int(a.type), float(a.scale), int(a.zero_point), float(b.scale), int(b.zero_point),
           float(out.scale), int(out.zero_point), int(out.type), params)

    def build() -> np.ndarray:
        dt = NUMPY_DTYPE[a.type]
        codes = np.arange(256, dtype=np.int64) if a.type == T.TENSOR_QUANT8_ASYMM else np.arange(-128, 128)
        ta = Tensor(a.type, codes.astype(dt)[:, None], a.scale, a.zero_point)
        tb = Tensor(b.type, codes.astype(dt)[None, :], b.scale, b.zero_point)
        table = _mul_quant(params, ta, tb, OutputSpec(out.type, (), out.scale, out.zero_point))
        if a.type != T.TENSOR_QUANT8_ASYMM:
            table = np.roll(table, 128, axis=(0, 1))  # NOTE: indexed by the int8 values' bit patterns
        return np.ascontiguousarray(table).reshape(-1)

    return _PAIR_TABLES.get_or_compute(key, build)


def _quant_params(op: OperationType, a: object, b: object, out: object, act: int, tables: bool = True) -> object:
    """The prepared arithmetic of a quantized ADD / SUB / MUL: the table of its
    exact result for every pair of 8-bit codes, or the reference's refusal as
    a string (raised after the shape checks, as the reference does).
    ``tables`` False (a dry run's: only the verdict matters): True for the
    table, the multipliers checked and no table built."""
    try:
        if not tables:
            if op == OperationType.MUL:
                _mul_params(a, b, out, act)
            else:
                activation_range(act, out.scale, out.zero_point, out.type)  # NOTE: _add_sub_table's order
                add_sub_multipliers(a, b, out)
            return True
        if op == OperationType.MUL:
            return _mul_table(a, b, out, act)
        return _add_sub_table(a, b, out, act, op == OperationType.SUB)
    except ValueError as e:
        return str(e)


def _arith_params(op: OperationType, a: object, b: object, out: object, act: int, tables: bool = True) -> tuple:
    """(activation, quantized parameters or None); ValueError for a bad activation (``tables``: _quant_params)."""
    if act not in (0, 1, 2, 3):
        raise ValueError(f"unsupported fused activation {act}")
    if a.type == T.TENSOR_INT32 and act != 0:
        raise ValueError("the fused activation must be NONE for TENSOR_INT32")
    q = None
    if a.type in (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED) and op != OperationType.DIV:
        q = _quant_params(op, a, b, out, act, tables)
    return act, q


def _prepare_arith(info: OpInfo) -> object:
    """Activation and quantized tables / multipliers, when the activation is a constant."""
    a, b, out = info.inputs[0], info.inputs[1], info.outputs[0]
    return prepared(lambda v: _arith_params(info.type, a, b, out, int(v)), info.constant(2))


def _int32_op(op: OperationType, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        if op == OperationType.ADD:
            return a + b
        if op == OperationType.SUB:
            return a - b
        if op == OperationType.MUL:
            return a * b
        # NOTE: floor division; x / 0 is undefined in NNAPI, the reference returns 0
        safe = np.where(b == 0, 1, b)
        return np.where(b == 0, 0, np.floor_divide(a, safe)).astype(np.int32)


def _float_op(op: OperationType, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        if op == OperationType.ADD:
            return a + b
        if op == OperationType.SUB:
            return a - b
        if op == OperationType.MUL:
            return a * b
        return a / b


def _execute_arith(ctx: ExecContext) -> list[np.ndarray]:
    a, b = ctx.inputs[0], ctx.inputs[1]
    out = ctx.outputs[0]
    ad, bd = a.data, b.data
    if ad.ndim > 4 or bd.ndim > 4:
        check_max_rank(ctx, 4, 0, 1)
    shape = ad.shape if ad.shape == bd.shape else broadcast_shape(ctx, ad.shape, bd.shape)
    st = ctx.state
    if st is None:
        # NOTE: a dry run of the reference (nnhal.engine.reference_check) checks the quantization without
        # building the 64K-entry table it would not use
        tables = not ctx.dry_run
        st = prepared(lambda: _arith_params(ctx.type, a, b, out, int(ctx.scalar(2)), tables))
    act, q = st.value(ctx)
    if 0 in shape:
        return [np.zeros(shape, dtype=out.dtype)]
    t = a.type
    if q is not None:
        if q.__class__ is str:
            raise ctx.fail(q)
        if q is True:
            return [np.zeros(shape, dtype=out.dtype)]  # NOTE: the dry run's (above): only the verdict matters
        return [_add_sub_quant(q, ad, bd)]  # NOTE: already the output's shape and type
    elif t == T.TENSOR_INT32:
        res = _int32_op(ctx.type, ad, bd)
    elif t in (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16):
        res = fused_activation(_float_op(ctx.type, as_float(a), as_float(b)), act)
    else:
        raise ctx.fail(f"unsupported type {t.name}")
    if res.shape == shape:
        return [res.astype(out.dtype, copy=False)]  # NOTE: res is a fresh array, no copy needed
    return [np.broadcast_to(res, shape).astype(out.dtype)]


# --------------------------------------------------------------------------
# POW / MAXIMUM / MINIMUM


def _execute_pow(ctx: ExecContext) -> list[np.ndarray]:
    base, exponent = ctx.inputs[0], ctx.inputs[1]
    shape = broadcast_shape(ctx, base.shape, exponent.shape)
    with np.errstate(all="ignore"):
        res = np.power(as_float(base), as_float(exponent))
    out = ctx.outputs[0]
    if res.shape == shape and res.__class__ is np.ndarray:
        return [res.astype(out.dtype, copy=False)]  # NOTE: a fresh array
    return [np.broadcast_to(res, shape).astype(out.dtype)]


def _max_min_tables(a: object, b: object, out: object) -> object:
    """Quantized MAXIMUM / MINIMUM: each input's requantization to the output
    (the reference's first step) as a table of its 256 codes; None otherwise."""
    if a.type not in (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED):
        return None
    return (requantize_table(a.type, a.scale, a.zero_point, out.scale, out.zero_point, out.type),
            requantize_table(b.type, b.scale, b.zero_point, out.scale, out.zero_point, out.type))


def _prepare_max_min(info: OpInfo) -> object:
    return _max_min_tables(info.inputs[0], info.inputs[1], info.outputs[0])


def _execute_max_min(ctx: ExecContext) -> list[np.ndarray]:
    a, b = ctx.inputs[0], ctx.inputs[1]
    out = ctx.outputs[0]
    shape = broadcast_shape(ctx, a.shape, b.shape)
    if a.type in (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED):
        # NOTE: both inputs are requantized to the output's scale first, as the reference does
        tables = ctx.state if ctx.state is not None else _max_min_tables(a, b, out)
        x, y = lookup(tables[0], a.data), lookup(tables[1], b.data)
        # NOTE: integers: std::max / std::min are numpy's
        res = np.minimum(x, y) if ctx.type == OperationType.MINIMUM else np.maximum(x, y)
    else:
        x, y = a.data, b.data
        if ctx.type == OperationType.MINIMUM:
            res = np.where(y < x, y, x)  # std::min(x, y)
        else:
            res = np.where(x < y, y, x)  # std::max(x, y)
    if res.shape == shape and res.__class__ is np.ndarray:
        return [res.astype(out.dtype, copy=False)]  # NOTE: a fresh array
    return [np.broadcast_to(res, shape).astype(out.dtype)]


def _binary_signatures(types: Sequence[tuple[OperandType, HalVersion]]) -> list[Signature]:
    return [Signature((t, t), (t,), v) for t, v in types]


_MAX_MIN_TYPES = [(T.TENSOR_FLOAT32, V1_2), (T.TENSOR_FLOAT16, V1_2), (T.TENSOR_INT32, V1_2),
                  (T.TENSOR_QUANT8_ASYMM, V1_2), (T.TENSOR_QUANT8_ASYMM_SIGNED, V1_3)]

OPS: list[OpDef] = [
    *[
        OpDef(type=op, signatures=_arith_signatures(op), execute=_execute_arith, validate=_validate_arith,
              prepare=_prepare_arith, allow_zero_sized=True)
        for op in _ARITH_OPS
    ],
    OpDef(type=OperationType.POW, signatures=_binary_signatures([(T.TENSOR_FLOAT32, V1_2), (T.TENSOR_FLOAT16, V1_2)]),
          execute=_execute_pow, bad_data_on_missing_operand=True),
    *[
        OpDef(type=op, signatures=_binary_signatures(_MAX_MIN_TYPES), execute=_execute_max_min,
              prepare=_prepare_max_min, bad_data_on_missing_operand=True)
        for op in (OperationType.MAXIMUM, OperationType.MINIMUM)
    ],
]
