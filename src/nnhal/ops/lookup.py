"""Lookup operations of the HAL spec: EMBEDDING_LOOKUP, HASHTABLE_LOOKUP and
LSH_PROJECTION (``OperationType`` docs in ``types.hal``).

LSH_PROJECTION hashes ``(seed, input row)`` byte strings with FarmHash's
``Fingerprint64`` (``farmhashna::Hash64``) exactly as Android's reference
does, so the projected bits match it; :func:`fingerprint64` is a pure numpy
implementation vectorized over many keys of one length.
"""

from __future__ import annotations

import numpy as np

from nnhal.hal import OperandType, OperationType
from nnhal.ops.base import V1_0, V1_2, V1_3, ExecContext, OpDef, Signature

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


def execute_embedding_lookup(ctx: ExecContext) -> list[np.ndarray]:
    lookups = ctx.inputs[0].data
    values = ctx.inputs[1].data
    if values.ndim < 2:
        raise ctx.fail(f"values must have rank >= 2, got shape {list(values.shape)}")
    if lookups.ndim != 1:
        raise ctx.fail(f"lookups must be 1-D, got shape {list(lookups.shape)}")
    rows = values.shape[0]
    bad = (lookups < 0) | (lookups >= rows)
    if bad.any():
        raise ctx.fail(f"lookup index {int(lookups[bad][0])} out of range [0, {rows})")
    return [values[lookups.astype(np.intp)]]


# --------------------------------------------------------------------------
# HASHTABLE_LOOKUP


def execute_hashtable_lookup(ctx: ExecContext) -> list[np.ndarray]:
    lookups = ctx.inputs[0].data
    keys = ctx.inputs[1].data
    values = ctx.inputs[2].data
    if lookups.ndim != 1 or keys.ndim != 1:
        raise ctx.fail(f"lookups and keys must be 1-D, got shapes {list(lookups.shape)} and {list(keys.shape)}")
    if values.ndim < 1:
        raise ctx.fail("values must have rank >= 1")
    rows = values.shape[0]
    # NOTE: the reference binary-searches the first rows-many keys (one per
    # value row); fewer keys than rows would read past the keys buffer.
    if keys.shape[0] < rows:
        raise ctx.fail(f"{keys.shape[0]} keys for {rows} value rows")
    table = keys[:rows]
    pos = np.searchsorted(table, lookups, side="left")
    safe = np.minimum(pos, max(rows - 1, 0))
    hit = (pos < rows) & (table[safe] == lookups) if rows else np.zeros(lookups.shape, bool)
    out = np.zeros((lookups.shape[0],) + values.shape[1:], dtype=values.dtype)
    if rows:
        out[hit] = values[safe[hit]]
    return [out, hit.astype(np.uint8)]


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


def _sign_bits(seeds: np.ndarray, rows: np.ndarray, weights: np.ndarray | None) -> np.ndarray:
    """One bit per seed: sign of sum_i weight[i] * int64(Fingerprint64(seed
    as float32 bytes + row i bytes))."""
    seed_bytes = seeds.astype("<f4").reshape(-1, 1).view(np.uint8)  # [n_seeds, 4]
    n_seeds, n_rows = seed_bytes.shape[0], rows.shape[0]
    keys = np.concatenate([np.repeat(seed_bytes, n_rows, axis=0), np.tile(rows, (n_seeds, 1))], axis=1)
    running = fingerprint64(keys).view(np.int64).astype(np.float64).reshape(n_seeds, n_rows)
    if weights is not None:
        running = running * weights.astype(np.float64)[None, :]
    # NOTE: summed in row order (cumsum is sequential), like the reference's double accumulator
    score = np.cumsum(running, axis=1)[:, -1] if n_rows else np.zeros(n_seeds)
    return (score > 0).astype(np.int32)


def execute_lsh_projection(ctx: ExecContext) -> list[np.ndarray]:
    hashes = ctx.inputs[0].data
    inp = ctx.inputs[1].data
    if not ctx.has(0) or not ctx.has(1) or not ctx.has(3):
        raise ctx.fail("hash, input and type are required")
    kind = ctx.scalar(3)
    if hashes.ndim != 2:
        raise ctx.fail(f"hash tensor must be 2-D, got shape {list(hashes.shape)}")
    num_hash, num_bits = hashes.shape
    if num_bits > 32:
        raise ctx.fail(f"at most 32 bits per hash function, got {num_bits}")
    if inp.ndim < 1:
        raise ctx.fail("input must have rank >= 1")
    has_weight = ctx.has(2)
    if kind in (_SPARSE, _SPARSE_DEPRECATED):
        # NOTE: the reference requires exactly 3 inputs with values for sparse projections
        if has_weight:
            raise ctx.fail("sparse projection takes no weight tensor")
        weights = None
    elif kind == _DENSE:
        if not has_weight:
            raise ctx.fail("dense projection needs the weight tensor")
        weights = ctx.inputs[2].data
        if weights.ndim != 1 or weights.shape[0] != inp.shape[0]:
            raise ctx.fail(f"weight shape {list(weights.shape)} does not match input rows {inp.shape[0]}")
    else:
        raise ctx.fail(f"unknown projection type {kind}")
    # seeds are converted to float32; each input row is hashed as raw bytes of its storage type
    seeds = hashes.astype(np.float32).reshape(-1)
    rows = np.ascontiguousarray(inp).reshape(inp.shape[0], -1).view(np.uint8).reshape(inp.shape[0], -1)
    bits = _sign_bits(seeds, rows, weights).reshape(num_hash, num_bits)
    if kind == _DENSE:
        return [bits.reshape(-1)]
    powers = (np.int64(1) << np.arange(num_bits - 1, -1, -1, dtype=np.int64))
    sig = (bits.astype(np.int64) * powers).sum(axis=1)
    if kind == _SPARSE:
        # NOTE: the reference computes i * (1 << num_bits) in int; x86 masks the shift count
        sig = sig + np.arange(num_hash, dtype=np.int64) * (np.int64(1) << (num_bits & 31))
    # NOTE: wraps around like the reference's int32 arithmetic
    return [(sig & 0xFFFFFFFF).astype(np.uint32).view(np.int32)]


_LSH_INPUTS = (T.TENSOR_FLOAT32, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM)

OPS = [
    OpDef(
        type=OperationType.EMBEDDING_LOOKUP,
        signatures=[Signature((T.TENSOR_INT32, t), (t,), v) for t, v in _EMBEDDING_TYPES],
        execute=execute_embedding_lookup, bad_data_on_missing_operand=True
    ),
    OpDef(
        type=OperationType.HASHTABLE_LOOKUP,
        signatures=[
            Signature((T.TENSOR_INT32, T.TENSOR_INT32, t), (t, T.TENSOR_QUANT8_ASYMM), V1_0)
            for t in (T.TENSOR_FLOAT32, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM)
        ],
        execute=execute_hashtable_lookup, bad_data_on_missing_operand=True
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
        omittable_inputs=frozenset({2}), allow_omitted_outputs=True
    ),
]
