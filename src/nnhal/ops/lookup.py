"""Lookup operations of the HAL spec: EMBEDDING_LOOKUP, HASHTABLE_LOOKUP and
LSH_PROJECTION (``OperationType`` docs in ``types.hal``).

LSH_PROJECTION hashes ``(seed, input row)`` byte strings with FarmHash's
``Fingerprint64`` (``farmhashna::Hash64``) exactly as Android's reference
does, so the projected bits match it; :func:`fingerprint64` is a pure numpy
implementation vectorized over many keys of one length.

``prepare`` does the shape checks once per shape and keeps what constant
operands give: HASHTABLE_LOOKUP's key table (cut once), EMBEDDING_LOOKUP's
checked constant lookups, LSH_PROJECTION's hash keys with the float32 seeds in
place and its float64 weights.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np

from nnhal.hal import OperandType, OperationType
from nnhal.ops.base import NUMPY_DTYPE, V1_0, V1_2, V1_3, ExecContext, OpDef, OpInfo, Signature
from nnhal.ops.prepared import RUNTIME, PerShape, frozen, param, run_now, static_shape

T = OperandType

# --------------------------------------------------------------------------
# EMBEDDING_LOOKUP

_EMBEDDING_TYPES = [
    (T.TENSOR_FLOAT32, V1_0),
    (T.TENSOR_INT32, V1_2),
    (T.TENSOR_QUANT8_ASYMM, V1_2),
    (T.TENSOR_FLOAT16, V1_3),
    (T.TENSOR_QUANT8_ASYMM_SIGNED, V1_3),
]


def _out_of_range(index: np.ndarray, n: int) -> np.ndarray:
    """Where ``index`` is outside [0, n)."""
    if index.dtype == np.int32:
        # NOTE: seen as uint32, a negative index is >= 2**31, beyond any size: one comparison
        return index.view(np.uint32) >= n
    return (index < 0) | (index >= n)


def _embedding_plan(key: tuple, lookups: np.ndarray | None) -> tuple:
    """(rows, whether the constant ``lookups`` are checked) for (lookups shape, values shape)."""
    lshape, vshape = key
    if len(vshape) < 2:
        raise ValueError(f"values must have rank >= 2, got shape {list(vshape)}")
    if len(lshape) != 1:
        raise ValueError(f"lookups must be 1-D, got shape {list(lshape)}")
    rows = vshape[0]
    if lookups is not None:
        _check_lookups(lookups, rows)
    return rows, lookups is not None


def _check_lookups(lookups: np.ndarray, rows: int) -> None:
    bad = _out_of_range(lookups, rows)
    if bad.any():
        raise ValueError(f"lookup index {int(lookups[bad][0])} out of range [0, {rows})")


def _prepare_embedding_lookup(info: OpInfo) -> object:
    """The shape checks (and the range check of constant lookups), per shape."""
    lookups = param(info, 0)
    dims = (static_shape(info, 0), static_shape(info, 1))
    return PerShape(_embedding_plan, None if lookups is RUNTIME else lookups).prime(
        None if None in dims else dims)


def execute_embedding_lookup(ctx: ExecContext) -> list[np.ndarray]:
    lookups = ctx.inputs[0].data
    values = ctx.inputs[1].data
    st = ctx.state
    key = (lookups.shape, values.shape)
    rows, checked = st.plan(ctx, key) if st is not None else run_now(ctx, _embedding_plan, key, None)
    if not checked and lookups.dtype == np.int32:
        # NOTE: one call: seen as uint32 a negative index is out of bounds too, and take raises on it
        try:
            return [values.take(lookups.view(np.uint32), axis=0)]
        except IndexError:
            pass
    if not checked:
        run_now(ctx, _check_lookups, lookups, rows)
    return [values[lookups]]


# --------------------------------------------------------------------------
# HASHTABLE_LOOKUP


def _hashtable_plan(key: tuple, keys: np.ndarray | None) -> tuple:
    """(rows, the key table: constant keys cut once, else None) for the
    (lookups, keys, values) shapes."""
    lshape, kshape, vshape = key
    if len(lshape) != 1 or len(kshape) != 1:
        raise ValueError(f"lookups and keys must be 1-D, got shapes {list(lshape)} and {list(kshape)}")
    if len(vshape) < 1:
        raise ValueError("values must have rank >= 1")
    rows = vshape[0]
    # NOTE: the reference binary-searches the first rows-many keys (one per
    # value row); fewer keys than rows would read past the keys buffer.
    if kshape[0] < rows:
        raise ValueError(f"{kshape[0]} keys for {rows} value rows")
    return rows, None if keys is None else frozen(np.ascontiguousarray(keys[:rows]))


def _prepare_hashtable_lookup(info: OpInfo) -> object:
    keys = param(info, 1)
    dims = tuple(static_shape(info, i) for i in range(3))
    return PerShape(_hashtable_plan, None if keys is RUNTIME else keys).prime(None if None in dims else dims)


def execute_hashtable_lookup(ctx: ExecContext) -> list[np.ndarray]:
    lookups = ctx.inputs[0].data
    keys = ctx.inputs[1].data
    values = ctx.inputs[2].data
    st = ctx.state
    key = (lookups.shape, keys.shape, values.shape)
    rows, table = st.plan(ctx, key) if st is not None else run_now(ctx, _hashtable_plan, key, None)
    if not rows:
        return [np.zeros((lookups.shape[0],) + values.shape[1:], values.dtype), np.zeros(lookups.shape, np.uint8)]
    if table is None:
        table = keys[:rows]
    pos = np.searchsorted(table, lookups, side="left")
    hit = table.take(pos, mode="clip") == lookups
    hit &= pos < rows
    out = values.take(pos, axis=0, mode="clip")
    out[~hit] = 0
    return [out, hit.view(np.uint8)]


# --------------------------------------------------------------------------
# FarmHash Fingerprint64 (farmhashna::Hash64), vectorized over keys

_U64 = np.uint64
_MASK = (1 << 64) - 1
_K0 = _U64(0xC3A5C85C97CB3127)
_K1 = _U64(0xB492B66FBE98F273)
_K2 = _U64(0x9AE16A3B2F90404F)
_KMUL = _U64(0x9DDFEA08EB382D69)


def _c(x: int) -> np.uint64:
    return _U64(x & _MASK)


def _rot(v: np.ndarray, s: int) -> np.ndarray:
    return (v >> _U64(s)) | (v << _U64(64 - s))


def _shift_mix(v: np.ndarray) -> np.ndarray:
    return v ^ (v >> _U64(47))


def _fetch64(b: np.ndarray, off: int) -> np.ndarray:
    return np.ascontiguousarray(b[:, off:off + 8]).view("<u8")[:, 0].astype(_U64)


def _fetch32(b: np.ndarray, off: int) -> np.ndarray:
    return np.ascontiguousarray(b[:, off:off + 4]).view("<u4")[:, 0].astype(_U64)


def _hash_len16(u: np.ndarray, v: np.ndarray, mul: np.uint64 = _KMUL) -> np.ndarray:
    a = (u ^ v) * mul
    a = a ^ (a >> _U64(47))
    b = (v ^ a) * mul
    b = b ^ (b >> _U64(47))
    return b * mul


def _len0to16(b: np.ndarray, n: int) -> np.ndarray:
    rows = b.shape[0]
    if n >= 8:
        mul = _c(0x9AE16A3B2F90404F + n * 2)
        a = _fetch64(b, 0) + _K2
        bb = _fetch64(b, n - 8)
        c = _rot(bb, 37) * mul + a
        d = (_rot(a, 25) + bb) * mul
        return _hash_len16(c, d, mul)
    if n >= 4:
        mul = _c(0x9AE16A3B2F90404F + n * 2)
        a = _fetch32(b, 0)
        return _hash_len16(_U64(n) + (a << _U64(3)), _fetch32(b, n - 4), mul)
    if n > 0:
        a = b[:, 0].astype(_U64)
        bb = b[:, n >> 1].astype(_U64)
        c = b[:, n - 1].astype(_U64)
        y = a + (bb << _U64(8))  # fits in uint32
        z = _U64(n) + (c << _U64(2))
        return _shift_mix(y * _K2 ^ z * _K0) * _K2
    return np.full(rows, _K2, dtype=_U64)


def _len17to32(b: np.ndarray, n: int) -> np.ndarray:
    mul = _c(0x9AE16A3B2F90404F + n * 2)
    a = _fetch64(b, 0) * _K1
    bb = _fetch64(b, 8)
    c = _fetch64(b, n - 8) * mul
    d = _fetch64(b, n - 16) * _K2
    return _hash_len16(_rot(a + bb, 43) + _rot(c, 30) + d, a + _rot(bb + _K2, 18) + c, mul)


def _len33to64(b: np.ndarray, n: int) -> np.ndarray:
    mul = _c(0x9AE16A3B2F90404F + n * 2)
    a = _fetch64(b, 0) * _K2
    bb = _fetch64(b, 8)
    c = _fetch64(b, n - 8) * mul
    d = _fetch64(b, n - 16) * _K2
    y = _rot(a + bb, 43) + _rot(c, 30) + d
    z = _hash_len16(y, a + _rot(bb + _K2, 18) + c, mul)
    e = _fetch64(b, 16) * mul
    f = _fetch64(b, 24)
    g = (y + _fetch64(b, n - 32)) * mul
    h = (z + _fetch64(b, n - 24)) * mul
    return _hash_len16(_rot(e + f, 43) + _rot(g, 30) + h, e + _rot(f + a, 18) + g, mul)


def _weak_hash32(b: np.ndarray, off: int, a: np.ndarray, bb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    w, x, y, z = (_fetch64(b, off + k) for k in (0, 8, 16, 24))
    a = a + w
    bb = _rot(bb + a + z, 21)
    c = a
    a = a + x + y
    bb = bb + _rot(a, 44)
    return a + z, bb + c


def fingerprint64(keys: np.ndarray) -> np.ndarray:
    """FarmHash ``Fingerprint64`` of every row of ``keys`` (uint8, shape
    [n, length]) as uint64, shape [n]."""
    b = np.ascontiguousarray(keys, dtype=np.uint8)
    if b.ndim != 2:
        raise ValueError("keys must be a 2-D uint8 array")
    n = b.shape[1]
    with np.errstate(over="ignore"):
        if n <= 16:
            return _len0to16(b, n)
        if n <= 32:
            return _len17to32(b, n)
        if n <= 64:
            return _len33to64(b, n)
        return _long(b, n)


def _long(b: np.ndarray, n: int) -> np.ndarray:
    rows = b.shape[0]
    zero = np.zeros(rows, dtype=_U64)
    seed = 81
    x = zero + _c(seed)
    y = zero + _c(seed * 0xB492B66FBE98F273 + 113)
    z = _shift_mix(y * _K2 + _U64(113)) * _K2
    v0, v1, w0, w1 = zero, zero, zero, zero
    x = x * _K2 + _fetch64(b, 0)
    end = ((n - 1) // 64) * 64
    last64 = end + ((n - 1) & 63) - 63
    for s in range(0, end, 64):
        x = _rot(x + y + v0 + _fetch64(b, s + 8), 37) * _K1
        y = _rot(y + v1 + _fetch64(b, s + 48), 42) * _K1
        x = x ^ w1
        y = y + v0 + _fetch64(b, s + 40)
        z = _rot(z + w0, 33) * _K1
        v0, v1 = _weak_hash32(b, s, v1 * _K1, x + w0)
        w0, w1 = _weak_hash32(b, s + 32, z + w1, y + _fetch64(b, s + 16))
        z, x = x, z
    mul = _K1 + ((z & _U64(0xFF)) << _U64(1))
    s = last64
    w0 = w0 + _U64((n - 1) & 63)
    v0 = v0 + w0
    w0 = w0 + v0
    x = _rot(x + y + v0 + _fetch64(b, s + 8), 37) * mul
    y = _rot(y + v1 + _fetch64(b, s + 48), 42) * mul
    x = x ^ (w1 * _U64(9))
    y = y + v0 * _U64(9) + _fetch64(b, s + 40)
    z = _rot(z + w0, 33) * mul
    v0, v1 = _weak_hash32(b, s, v1 * mul, x + w0)
    w0, w1 = _weak_hash32(b, s + 32, z + w1, y + _fetch64(b, s + 16))
    z, x = x, z
    return _hash_len16(_hash_len16(v0, w0, mul) + _shift_mix(y) * _K0 + z, _hash_len16(v1, w1, mul) + x, mul)


# --------------------------------------------------------------------------
# LSH_PROJECTION

_SPARSE_DEPRECATED, _DENSE, _SPARSE = 1, 2, 3


class _LshPlan(NamedTuple):
    """What an LSH_PROJECTION execution needs beside the input rows: the
    sizes, the hash keys with the seeds already in place (constant hashes),
    the weights as float64 (constant weights), the bit weights of a signature."""

    kind: int
    num_hash: int
    num_bits: int
    n_rows: int
    row_len: int
    template: Optional[np.ndarray]
    weights: Optional[np.ndarray]
    powers: np.ndarray
    offsets: Optional[np.ndarray]


def _key_template(hashes: np.ndarray, n_rows: int, row_len: int) -> np.ndarray:
    """[n_seeds, n_rows, 4 + row_len] keys whose first 4 bytes are each seed
    as float32 (the rows' bytes go after them)."""
    seed_bytes = hashes.astype(np.float32).reshape(-1).astype("<f4").reshape(-1, 1).view(np.uint8)  # [n_seeds, 4]
    t = np.empty((seed_bytes.shape[0], n_rows, 4 + row_len), np.uint8)
    t[:, :, :4] = seed_bytes[:, None, :]
    return t


def _lsh_plan(key: tuple, kind: int, hashes: np.ndarray | None, weights: np.ndarray | None) -> _LshPlan:
    """The checks and constants for (hash shape, input shape, input item size,
    weight shape or None when omitted)."""
    hshape, ishape, itemsize, wshape = key
    if len(hshape) != 2:
        raise ValueError(f"hash tensor must be 2-D, got shape {list(hshape)}")
    num_hash, num_bits = hshape
    if num_bits > 32:
        raise ValueError(f"at most 32 bits per hash function, got {num_bits}")
    if len(ishape) < 1:
        raise ValueError("input must have rank >= 1")
    if kind in (_SPARSE, _SPARSE_DEPRECATED):
        # NOTE: the reference requires exactly 3 inputs with values for sparse projections
        if wshape is not None:
            raise ValueError("sparse projection takes no weight tensor")
    elif kind == _DENSE:
        if wshape is None:
            raise ValueError("dense projection needs the weight tensor")
        if len(wshape) != 1 or wshape[0] != ishape[0]:
            raise ValueError(f"weight shape {list(wshape)} does not match input rows {ishape[0]}")
    else:
        raise ValueError(f"unknown projection type {kind}")
    n_rows = ishape[0]
    row_len = int(np.prod(ishape[1:], dtype=np.int64)) * itemsize
    template = None if hashes is None else frozen(_key_template(hashes, n_rows, row_len))
    w = None
    if kind == _DENSE and weights is not None:
        w = frozen(weights.astype(np.float64)[None, :])
    powers = (np.int64(1) << np.arange(num_bits - 1, -1, -1, dtype=np.int64))
    offsets = None
    if kind == _SPARSE:
        # NOTE: the reference computes i * (1 << num_bits) in int; x86 masks the shift count
        offsets = np.arange(num_hash, dtype=np.int64) * (np.int64(1) << (num_bits & 31))
    return _LshPlan(kind=kind, num_hash=num_hash, num_bits=num_bits, n_rows=n_rows, row_len=row_len,
                    template=template, weights=w, powers=frozen(powers), offsets=frozen(offsets))


def _sign_bits(keys: np.ndarray, n_rows: int, weights: np.ndarray | None) -> np.ndarray:
    """One bit per seed: sign of sum_i weight[i] * int64(Fingerprint64(seed
    as float32 bytes + row i bytes)); ``keys`` is [n_seeds, n_rows, length]."""
    n_seeds = keys.shape[0]
    running = fingerprint64(keys.reshape(n_seeds * n_rows, -1)).view(np.int64).astype(np.float64)
    running = running.reshape(n_seeds, n_rows)
    if weights is not None:
        running = running * weights
    # NOTE: summed in row order (cumsum is sequential), like the reference's double accumulator
    score = np.cumsum(running, axis=1)[:, -1] if n_rows else np.zeros(n_seeds)
    return (score > 0).astype(np.int32)


def _prepare_lsh_projection(info: OpInfo) -> object:
    kind = param(info, 3)
    if kind is RUNTIME or kind is None:
        return None
    hashes, weights = param(info, 0), param(info, 2)
    st = PerShape(_lsh_plan, kind.item(), None if hashes is RUNTIME else hashes,
                  None if weights is RUNTIME else weights)
    hdims, idims = static_shape(info, 0), static_shape(info, 1)
    wdims = None if weights is None else static_shape(info, 2)
    item = NUMPY_DTYPE.get(info.inputs[1].type)
    if hdims is None or idims is None or (weights is not None and wdims is None) or item is None:
        return st
    return st.prime((hdims, idims, item.itemsize, wdims))


def execute_lsh_projection(ctx: ExecContext) -> list[np.ndarray]:
    if not ctx.has(0) or not ctx.has(1) or not ctx.has(3):
        raise ctx.fail("hash, input and type are required")
    hashes = ctx.inputs[0].data
    inp = ctx.inputs[1].data
    weights = ctx.inputs[2].data if ctx.has(2) else None
    key = (hashes.shape, inp.shape, inp.dtype.itemsize, None if weights is None else weights.shape)
    st = ctx.state
    p = st.plan(ctx, key) if st is not None else run_now(ctx, _lsh_plan, key, ctx.scalar(3), None, None)
    # seeds are converted to float32; each input row is hashed as raw bytes of its storage type
    keys = p.template.copy() if p.template is not None else _key_template(hashes, p.n_rows, p.row_len)
    keys[:, :, 4:] = np.ascontiguousarray(inp).reshape(p.n_rows, p.row_len // inp.dtype.itemsize).view(np.uint8)
    w = p.weights
    if w is None and p.kind == _DENSE:
        w = weights.astype(np.float64)[None, :]
    bits = _sign_bits(keys, p.n_rows, w).reshape(p.num_hash, p.num_bits)
    if p.kind == _DENSE:
        return [bits.reshape(-1)]
    sig = (bits.astype(np.int64) * p.powers).sum(axis=1)
    if p.offsets is not None:
        sig = sig + p.offsets
    # NOTE: wraps around like the reference's int32 arithmetic
    return [(sig & 0xFFFFFFFF).astype(np.uint32).view(np.int32)]


_LSH_INPUTS = (T.TENSOR_FLOAT32, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM)

OPS = [
    OpDef(
        type=OperationType.EMBEDDING_LOOKUP,
        signatures=[Signature((T.TENSOR_INT32, t), (t,), v) for t, v in _EMBEDDING_TYPES],
        execute=execute_embedding_lookup, prepare=_prepare_embedding_lookup, bad_data_on_missing_operand=True
    ),
    OpDef(
        type=OperationType.HASHTABLE_LOOKUP,
        signatures=[
            Signature((T.TENSOR_INT32, T.TENSOR_INT32, t), (t, T.TENSOR_QUANT8_ASYMM), V1_0)
            for t in (T.TENSOR_FLOAT32, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM)
        ],
        execute=execute_hashtable_lookup, prepare=_prepare_hashtable_lookup,
        bad_data_on_missing_operand=True
    ),
    OpDef(
        type=OperationType.LSH_PROJECTION,
        signatures=[
            Signature((T.TENSOR_FLOAT32, frozenset(_LSH_INPUTS), T.TENSOR_FLOAT32, T.INT32), (T.TENSOR_INT32,), V1_0),
            Signature((T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_FLOAT32, T.INT32), (T.TENSOR_INT32,), V1_2),
            Signature((T.TENSOR_FLOAT16, frozenset(_LSH_INPUTS + (T.TENSOR_FLOAT16,)), T.TENSOR_FLOAT16, T.INT32),
                      (T.TENSOR_INT32,), V1_2),
        ],
        execute=execute_lsh_projection,
        prepare=_prepare_lsh_projection,
        omittable_inputs=frozenset({2}), allow_omitted_outputs=True
    ),
]
