"""RANDOM_MULTINOMIAL of the HAL spec (``OperationType`` docs in ``types.hal``).

Samples follow softmax(logits) per batch.  Like Android's reference (which
uses TensorFlow's ``GuardedPhiloxRandom``), the random stream is Philox4x32-10
keyed by the two seeds, each sample drawn from two 32-bit outputs turned into
a double in [0, 1) and located in the cumulative distribution, so the same
seeds give the reference's samples.  Both seeds 0 means random seeds.
"""

from __future__ import annotations

import numpy as np

from nnhal.hal import OperandType, OperationType
from nnhal.ops import memo
from nnhal.ops.base import V1_2, ExecContext, OpDef, OpInfo, Signature
from nnhal.ops.prepared import frozen

T = OperandType

_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
_W0, _W1 = 0x9E3779B9, 0xBB67AE85
_MASK32 = np.uint64(0xFFFFFFFF)


def philox4x32(counters: np.ndarray, key: tuple[int, int], rounds: int = 10) -> np.ndarray:
    """Philox4x32 blocks: ``counters`` [n, 4] uint32 -> [n, 4] uint32 outputs."""
    c = counters.astype(np.uint64)
    k0, k1 = key[0] & 0xFFFFFFFF, key[1] & 0xFFFFFFFF
    for r in range(rounds):
        p0 = _M0 * c[:, 0]
        p1 = _M1 * c[:, 2]
        hi0, lo0 = p0 >> np.uint64(32), p0 & _MASK32
        hi1, lo1 = p1 >> np.uint64(32), p1 & _MASK32
        c = np.stack([hi1 ^ c[:, 1] ^ np.uint64(k0), lo1, hi0 ^ c[:, 3] ^ np.uint64(k1), lo0], axis=1)
        if r != rounds - 1:
            k0, k1 = (k0 + _W0) & 0xFFFFFFFF, (k1 + _W1) & 0xFFFFFFFF
    return c.astype(np.uint32)


def philox_uint32_stream(seed: int, seed2: int, count: int) -> np.ndarray:
    """The first ``count`` 32-bit outputs of TensorFlow's ``PhiloxRandom(seed, seed2)``."""
    seed &= (1 << 64) - 1
    seed2 &= (1 << 64) - 1
    n_blocks = (count + 3) // 4
    idx = np.arange(n_blocks, dtype=np.uint64)
    counters = np.zeros((n_blocks, 4), dtype=np.uint64)
    # NOTE: a 128-bit block counter; its low 64 bits start at 0, its high 64 bits hold seed2
    counters[:, 0] = idx & _MASK32
    counters[:, 1] = idx >> np.uint64(32)
    counters[:, 2] = seed2 & 0xFFFFFFFF
    counters[:, 3] = seed2 >> 32
    return philox4x32(counters, (seed & 0xFFFFFFFF, seed >> 32)).reshape(-1)[:count]


def uniform_doubles(seed: int, seed2: int, count: int) -> np.ndarray:
    """``SimplePhilox::RandDouble`` values: 52 random mantissa bits from two
    consecutive 32-bit outputs (20 bits of the first, all of the second)."""
    u = philox_uint32_stream(seed, seed2, 2 * count).astype(np.uint64).reshape(count, 2)
    bits = (np.uint64(1023) << np.uint64(52)) | ((u[:, 0] & np.uint64(0xFFFFF)) << np.uint64(32)) | u[:, 1]
    return bits.view(np.float64) - 1.0


# the most uniform values a prepared model keeps per batch size (8 bytes each)
_STREAM_LIMIT = 1 << 16


class _State:
    """The sample count and seeds when both are constants, and the uniform
    values of the seeds' stream per batch size (a thread-safe memo, the
    declared batch size's made at prepare).  The reference initializes its
    generator with the seeds on every execution: the same seeds give the same
    stream each time, so it is drawn once.  Seeds 0, 0 mean random seeds for
    every execution: nothing is kept."""

    __slots__ = ("n_samples", "seeds", "streams")

    def __init__(self, n_samples: int, seeds: tuple[int, int] | None, streams: memo.Memo | None) -> None:
        self.n_samples = n_samples
        self.seeds = seeds
        self.streams = streams


def _seeds(seeds: np.ndarray) -> tuple[int, int]:
    # NOTE: the int32 seeds reach PhiloxRandom as sign-extended int64
    return int(seeds.reshape(-1)[0]), int(seeds.reshape(-1)[1])


def _stream(seed: int, seed2: int, batch: int, n_samples: int) -> np.ndarray:
    return frozen(uniform_doubles(seed, seed2, batch * n_samples).reshape(batch, n_samples))


def _prepare(info: OpInfo) -> _State | None:
    n, seeds = info.constant(1), info.constant(2)
    if n is None or seeds is None or n.size != 1:
        return None
    n_samples = int(n.item())
    if n_samples < 0 or seeds.size < 2:
        return None  # NOTE: every execution fails
    seed, seed2 = _seeds(seeds)
    if seed == 0 and seed2 == 0:
        return _State(n_samples, None, None)
    st = _State(n_samples, (seed, seed2), memo.Memo(4))
    dims = info.inputs[0].dimensions
    if len(dims) == 2 and dims[0] > 0 and dims[0] * n_samples <= _STREAM_LIMIT:
        st.streams.put(dims[0], _stream(seed, seed2, dims[0], n_samples))
    return st


def execute_random_multinomial(ctx: ExecContext) -> list[np.ndarray]:
    logits = ctx.inputs[0].data.astype(np.float32)
    st = ctx.state
    n_samples = ctx.scalar(1) if st is None else st.n_samples
    seeds = ctx.inputs[2].data
    if logits.ndim != 2:
        raise ctx.fail(f"input must be 2-D, got shape {list(logits.shape)}")
    if n_samples < 0:
        raise ctx.fail(f"sample count must not be negative, got {n_samples}")
    if seeds.size < 2:
        raise ctx.fail(f"seeds must hold 2 values, got {seeds.size}")
    seed, seed2 = _seeds(seeds) if st is None else (st.seeds or (0, 0))
    if seed == 0 and seed2 == 0:
        rng = np.random.default_rng()
        seed, seed2 = (int(v) for v in rng.integers(0, 2**63, size=2))
    batch, classes = logits.shape
    finite = np.isfinite(logits)
    lowest = np.float32(np.finfo(np.float32).min)
    batch_max = np.where(finite, logits, lowest).max(axis=1, initial=lowest).astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        terms = np.where(finite, np.exp(logits.astype(np.float64) - batch_max[:, None]), 0.0)
    # NOTE: cumsum adds in class order, as the reference's running total
    cdf = np.cumsum(terms, axis=1)
    total = cdf[:, -1] if classes else np.zeros(batch)
    if st is not None and st.streams is not None and batch * n_samples <= _STREAM_LIMIT:
        u = st.streams.get_or_compute(batch, lambda: _stream(seed, seed2, batch, n_samples))
    else:
        u = uniform_doubles(seed, seed2, batch * n_samples).reshape(batch, n_samples)
    out = np.empty((batch, n_samples), dtype=np.int32)
    for b in range(batch):
        out[b] = np.searchsorted(cdf[b], u[b] * total[b], side="right")
    return [out]


OPS = [
    OpDef(
        type=OperationType.RANDOM_MULTINOMIAL,
        signatures=[Signature((t, T.INT32, T.TENSOR_INT32), (T.TENSOR_INT32,), V1_2)
                    for t in (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16)],
        execute=execute_random_multinomial, prepare=_prepare, bad_data_on_missing_operand=True
    ),
]
