"""RANDOM_MULTINOMIAL: the Philox4x32-10 stream, determinism per seed and the
sample distribution (the conformance rule: per-class frequency within a
tolerance of softmax(logits))."""

from __future__ import annotations

import numpy as np
import pytest

from nnhal.hal import OperandType, OperationType
from nnhal.ops.base import (
    V1_1,
    V1_2,
    OpExecutionError,
    OpValidationError,
    OutputSpec,
    Tensor,
    match_signature,
)
from nnhal.ops.random import philox4x32, uniform_doubles
from nnhal.ops.registry import REGISTRY
from nnhal.ops.run import run_operation

# every kernel test through validate, prepare (scalars as the model's constants) and execute
PHASES = {"scalar_constants": True, "validate": True}

T = OperandType


def sample(logits: np.ndarray, n: int, seeds=(37, 42), t: OperandType = T.TENSOR_FLOAT32) -> np.ndarray:
    ins = [Tensor(t, logits), Tensor(T.INT32, np.array(n, np.int32)), Tensor(T.TENSOR_INT32, np.array(seeds, np.int32))]
    return run_operation(OperationType.RANDOM_MULTINOMIAL, ins, [OutputSpec(T.TENSOR_INT32, ())], **PHASES)[0]


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("ctr,key,expected", [
    # Random123 known-answer values for philox4x32-10
    ([0, 0, 0, 0], (0, 0), [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]),
    ([0xFFFFFFFF] * 4, (0xFFFFFFFF, 0xFFFFFFFF), [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]),
    ([0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344], (0xA4093822, 0x299F31D0),
     [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]),
])
def test_philox_known_answers(ctr, key, expected):
    out = philox4x32(np.array([ctr], np.uint32), key)[0]
    assert [int(v) for v in out] == expected


def test_uniform_doubles_range():
    u = uniform_doubles(1, 2, 10000)
    assert u.min() >= 0.0 and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 0.02


@pytest.mark.parametrize("t,dtype", [(T.TENSOR_FLOAT32, np.float32), (T.TENSOR_FLOAT16, np.float16)])
def test_distribution_follows_softmax(t, dtype):
    logits = np.array([[0.0, 1.0, 2.0, -1.0], [3.0, 0.0, 0.0, 0.0]], dtype)
    n = 20000
    out = sample(logits, n, t=t)
    assert out.shape == (2, n) and out.dtype == np.int32
    freq = np.stack([np.bincount(row, minlength=4) / n for row in out])
    np.testing.assert_allclose(freq, softmax(logits.astype(np.float64)), atol=0.015)


def test_deterministic_per_seed_and_random_for_zero_seeds():
    logits = np.zeros((1, 50), np.float32)
    a, b = sample(logits, 64, (5, 6)), sample(logits, 64, (5, 6))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, sample(logits, 64, (5, 7)))
    r1, r2 = sample(logits, 64, (0, 0)), sample(logits, 64, (0, 0))
    assert not np.array_equal(r1, r2)


def test_non_finite_logits_are_never_drawn():
    logits = np.array([[-np.inf, 0.0, np.nan, 0.0]], np.float32)
    out = sample(logits, 500)
    assert set(np.unique(out)) <= {1, 3}


def test_zero_samples_and_errors():
    assert sample(np.zeros((3, 2), np.float32), 0).shape == (3, 0)
    with pytest.raises(OpExecutionError):
        sample(np.zeros((3, 2), np.float32), -1)
    with pytest.raises(OpExecutionError):
        sample(np.zeros(3, np.float32), 2)
    op = REGISTRY[OperationType.RANDOM_MULTINOMIAL]
    match_signature(op, [T.TENSOR_FLOAT16, T.INT32, T.TENSOR_INT32], [T.TENSOR_INT32], V1_2)
    with pytest.raises(OpValidationError):
        match_signature(op, [T.TENSOR_FLOAT32, T.INT32, T.TENSOR_INT32], [T.TENSOR_INT32], V1_1)
    with pytest.raises(OpValidationError):
        match_signature(op, [T.TENSOR_FLOAT32, T.INT32, T.INT32], [T.TENSOR_INT32])
    with pytest.raises(OpValidationError):
        match_signature(op, [T.TENSOR_QUANT8_ASYMM, T.INT32, T.TENSOR_INT32], [T.TENSOR_INT32])


# --------------------------------------------------------------------------
# the Prepare/Eval split: constant seeds give one stream, drawn once


def _ins(logits: np.ndarray, n: int, seeds) -> list[Tensor]:
    return [Tensor(T.TENSOR_FLOAT32, logits), Tensor(T.INT32, np.array(n, np.int32)),
            Tensor(T.TENSOR_INT32, np.array(seeds, np.int32))]


def _prepared(ins: list[Tensor], constant: bool = True):
    from nnhal.ops.run import prepare_operation, tensor_info

    return prepare_operation(OperationType.RANDOM_MULTINOMIAL, [tensor_info(t, constant=constant and k > 0)
                                                                for k, t in enumerate(ins)],
                             [OutputSpec(T.TENSOR_INT32, ())])


def test_prepared_stream_equals_run_time_stream():
    """Constant seeds (not both 0) and sample count: the reference seeds its
    generator on every execution, so the uniform values are the same each
    time; they are drawn at prepare for the declared batch size, per other
    batch size when first met, and the samples are those of the run-time path
    bit for bit, also through the compilation cache (prepared again on load)."""
    from tests.prepared_util import assert_cache_round_trip, assert_same_outputs

    rng = np.random.default_rng(4)
    ins = _ins(rng.normal(size=(3, 10)).astype(np.float32), 40, (-7, 1234))
    const, dynamic = _prepared(ins), _prepared(ins, constant=False)
    assert const.state.seeds == (-7, 1234) and list(const.state.streams._d) == [3]
    assert dynamic.state is None
    want = dynamic.run(ins)
    for _ in range(2):
        assert_same_outputs(const.run(ins), want)
    other = list(ins)
    other[0] = Tensor(T.TENSOR_FLOAT32, rng.normal(size=(5, 10)).astype(np.float32))
    assert_same_outputs(const.run(other), dynamic.run(other))
    assert sorted(const.state.streams._d) == [3, 5]
    assert_cache_round_trip(OperationType.RANDOM_MULTINOMIAL, ins, [OutputSpec(T.TENSOR_INT32, ())],
                            [False, True, True], want)


def test_long_streams_are_not_kept(monkeypatch):
    """Beyond the bound, the stream is drawn per execution (same samples)."""
    from nnhal.ops import random as random_op

    monkeypatch.setattr(random_op, "_STREAM_LIMIT", 50)
    ins = _ins(np.zeros((3, 6), np.float32), 40, (9, 9))
    const, dynamic = _prepared(ins), _prepared(ins, constant=False)
    assert len(const.state.streams) == 0
    np.testing.assert_array_equal(const.run(ins)[0], dynamic.run(ins)[0])
    assert len(const.state.streams) == 0


def test_constant_zero_seeds_stay_random():
    ins = _ins(np.zeros((1, 50), np.float32), 64, (0, 0))
    const = _prepared(ins)
    assert const.state.seeds is None and const.state.streams is None
    assert not np.array_equal(const.run(ins)[0], const.run(ins)[0])


@pytest.mark.parametrize("n,seeds", [(-1, (1, 2)), (4, (1,))])
def test_bad_constant_fails_every_execution(n, seeds):
    """A negative sample count or a single seed, as constants: prepared without
    error, every execution fails (GENERAL_FAILURE) as with model inputs."""
    ins = _ins(np.zeros((2, 3), np.float32), n, seeds)
    for prepared in (_prepared(ins), _prepared(ins, constant=False)):
        for _ in range(2):
            with pytest.raises(OpExecutionError):
                prepared.run(ins)
