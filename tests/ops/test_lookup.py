"""EMBEDDING_LOOKUP, HASHTABLE_LOOKUP and LSH_PROJECTION kernels, and the
FarmHash Fingerprint64 they rely on (checked on published test values)."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from nnhal.hal import OperandType, OperationType
from nnhal.ops.base import (
    V1_0,
    V1_2,
    OpExecutionError,
    OpValidationError,
    OutputSpec,
    Tensor,
    match_signature,
)
from nnhal.ops.lookup import fingerprint64
from nnhal.ops.registry import REGISTRY
from nnhal.ops.run import run_operation

# every kernel test through validate, prepare (scalars as the model's constants) and execute
PHASES = {"scalar_constants": True, "validate": True}

T = OperandType


def run(op: OperationType, inputs: list[Tensor], out_types: list[OperandType]) -> list[np.ndarray]:
    return run_operation(op, inputs, [OutputSpec(t, ()) for t in out_types], **PHASES)


def i32(v) -> Tensor:
    return Tensor(T.TENSOR_INT32, np.asarray(v, np.int32))


# ---------------------------------------------------------------- EMBEDDING_LOOKUP

@pytest.mark.parametrize("t,dtype", [(T.TENSOR_FLOAT32, np.float32), (T.TENSOR_INT32, np.int32),
                                     (T.TENSOR_QUANT8_ASYMM, np.uint8), (T.TENSOR_FLOAT16, np.float16),
                                     (T.TENSOR_QUANT8_ASYMM_SIGNED, np.int8)])
def test_embedding_lookup(t, dtype):
    values = np.arange(4 * 2 * 3).reshape(4, 2, 3).astype(dtype)
    (out,) = run(OperationType.EMBEDDING_LOOKUP, [i32([3, 0, 3]), Tensor(t, values, 0.5, 3)], [t])
    assert out.dtype == dtype and out.shape == (3, 2, 3)
    for k, row in enumerate([3, 0, 3]):
        np.testing.assert_array_equal(out[k], values[row])


def test_embedding_lookup_errors():
    values = Tensor(T.TENSOR_FLOAT32, np.zeros((3, 2), np.float32))
    for bad in ([3], [-1]):
        with pytest.raises(OpExecutionError):
            run(OperationType.EMBEDDING_LOOKUP, [i32(bad), values], [T.TENSOR_FLOAT32])
    with pytest.raises(OpExecutionError):  # values must have rank >= 2
        run(OperationType.EMBEDDING_LOOKUP, [i32([0]), Tensor(T.TENSOR_FLOAT32, np.zeros(3, np.float32))],
            [T.TENSOR_FLOAT32])
    op = REGISTRY[OperationType.EMBEDDING_LOOKUP]
    match_signature(op, [T.TENSOR_INT32, T.TENSOR_FLOAT32], [T.TENSOR_FLOAT32], V1_0)
    with pytest.raises(OpValidationError):
        match_signature(op, [T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM], [T.TENSOR_QUANT8_ASYMM], V1_0)
    with pytest.raises(OpValidationError):
        match_signature(op, [T.TENSOR_INT32, T.TENSOR_FLOAT16], [T.TENSOR_FLOAT16], V1_2)
    with pytest.raises(OpValidationError):
        match_signature(op, [T.TENSOR_FLOAT32, T.TENSOR_FLOAT32], [T.TENSOR_FLOAT32])


# ---------------------------------------------------------------- HASHTABLE_LOOKUP

@pytest.mark.parametrize("t,dtype", [(T.TENSOR_FLOAT32, np.float32), (T.TENSOR_INT32, np.int32),
                                     (T.TENSOR_QUANT8_ASYMM, np.uint8)])
def test_hashtable_lookup(t, dtype):
    keys = [-3, 2, 7, 100]
    values = (np.arange(8).reshape(4, 2) + 1).astype(dtype)
    lookups = [7, 5, -3, 100, 101, -4]
    out, hits = run(OperationType.HASHTABLE_LOOKUP, [i32(lookups), i32(keys), Tensor(t, values)],
                    [t, T.TENSOR_QUANT8_ASYMM])
    assert out.dtype == dtype and hits.dtype == np.uint8
    for k, v in enumerate(lookups):
        if v in keys:
            assert hits[k] == 1
            np.testing.assert_array_equal(out[k], values[keys.index(v)])
        else:
            assert hits[k] == 0 and not out[k].any()


def test_hashtable_lookup_1d_values_and_errors():
    out, hits = run(OperationType.HASHTABLE_LOOKUP,
                    [i32([1, 4]), i32([1, 2]), Tensor(T.TENSOR_FLOAT32, np.array([5.0, 6.0], np.float32))],
                    [T.TENSOR_FLOAT32, T.TENSOR_QUANT8_ASYMM])
    np.testing.assert_array_equal(out, [5.0, 0.0])
    np.testing.assert_array_equal(hits, [1, 0])
    with pytest.raises(OpExecutionError):  # fewer keys than value rows
        run(OperationType.HASHTABLE_LOOKUP,
            [i32([1]), i32([1]), Tensor(T.TENSOR_FLOAT32, np.zeros((2, 2), np.float32))],
            [T.TENSOR_FLOAT32, T.TENSOR_QUANT8_ASYMM])
    op = REGISTRY[OperationType.HASHTABLE_LOOKUP]
    with pytest.raises(OpValidationError):  # hits must be QUANT8_ASYMM
        match_signature(op, [T.TENSOR_INT32, T.TENSOR_INT32, T.TENSOR_FLOAT32], [T.TENSOR_FLOAT32, T.TENSOR_INT32])
    with pytest.raises(OpValidationError):
        match_signature(op, [T.TENSOR_INT32, T.TENSOR_INT32, T.TENSOR_FLOAT16],
                        [T.TENSOR_FLOAT16, T.TENSOR_QUANT8_ASYMM])


# ---------------------------------------------------------------- Fingerprint64

# Published FarmHash Fingerprint64 values (Guava's FarmHashFingerprint64Test and ports of it)
KNOWN = {
    "": 11160318154034397263,
    "Q": 13816109650407654260,
    ",=": 1326014594494455617,
    "WW5": 6316074107149058620,
    "test": 8581389452482819506,
    "P9|0-Xg": 15614415556471156694,
    "#cDR^sLO": 328147020574120176,
    "bF&d$MYIhB.Ac=qC": 17582099205024456557,
    "test" * 8: (-4196240717365766262) % 2**64,
    "F7479877-4690-4A44-AFC9-8FE987EA512F:some_other_id": 6862335115798125349,
    "test" * 64: 3500507768004279527,
}


@pytest.mark.parametrize("text", list(KNOWN))
def test_fingerprint64_known_values(text):
    b = np.frombuffer(text.encode(), np.uint8).reshape(1, len(text))
    assert int(fingerprint64(b)[0]) == KNOWN[text]


def test_fingerprint64_vectorized_over_keys():
    texts = ["abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ!@#$%^&*()"[k:k + 70] for k in range(3)]
    batch = np.stack([np.frombuffer(s.encode(), np.uint8) for s in texts])
    each = [int(fingerprint64(row[None])[0]) for row in batch]
    assert [int(v) for v in fingerprint64(batch)] == each
    assert len(set(each)) == 3


# ---------------------------------------------------------------- LSH_PROJECTION

HASH = np.array([0.123, 0.456, -0.321, -0.654, 1.234, 5.678, -4.321, -8.765], np.float32).reshape(4, 2)
INPUT = np.array([12345, 54321, 67890, 9876, -12345678, -87654321], np.int32).reshape(3, 2)
WEIGHT = np.array([0.12, 0.34, 0.56], np.float32)


def ref_bit(seed: float, rows: np.ndarray, weights) -> int:
    """One bit, the slow way: struct-packed keys, Python accumulation."""
    score = 0.0
    for i, row in enumerate(rows):
        key = struct.pack("<f", seed) + row.tobytes()
        h = int(fingerprint64(np.frombuffer(key, np.uint8)[None])[0])
        h = h - 2**64 if h >= 2**63 else h
        score += float(h) * (1.0 if weights is None else float(weights[i]))
    return int(score > 0)


def lsh(hash_t: Tensor, inp: Tensor, weight: Tensor, kind: int) -> np.ndarray:
    return run(OperationType.LSH_PROJECTION, [hash_t, inp, weight, Tensor(T.INT32, np.array(kind, np.int32))],
               [T.TENSOR_INT32])[0]


def test_lsh_dense_matches_conformance_values():
    out = lsh(Tensor(T.TENSOR_FLOAT32, HASH), i32(INPUT), Tensor(T.TENSOR_FLOAT32, WEIGHT), 2)
    np.testing.assert_array_equal(out, [1, 1, 1, 0, 1, 1, 1, 0])
    ref = [ref_bit(float(s), INPUT, WEIGHT) for s in HASH.reshape(-1)]
    np.testing.assert_array_equal(out, ref)


def test_lsh_dense_float16_seeds():
    h16, w16 = HASH.astype(np.float16), WEIGHT.astype(np.float16)
    out = lsh(Tensor(T.TENSOR_FLOAT16, h16), i32(INPUT), Tensor(T.TENSOR_FLOAT16, w16), 2)
    # float16 seeds are hashed as their float32 value: different bits than the float32 model
    np.testing.assert_array_equal(out, [1, 1, 1, 1, 1, 0, 0, 0])


@pytest.mark.parametrize("kind,expected", [(1, [1, 2, 2, 0]), (3, [1, 6, 10, 12])])
def test_lsh_sparse(kind, expected):
    out = lsh(Tensor(T.TENSOR_FLOAT32, HASH), i32(INPUT), Tensor(T.TENSOR_FLOAT32, None), kind)
    np.testing.assert_array_equal(out, expected)
    assert out.dtype == np.int32


def test_lsh_other_input_types_hash_raw_bytes():
    q = np.array([[1, 2, 3], [250, 0, 7]], np.uint8)
    out = lsh(Tensor(T.TENSOR_FLOAT32, HASH), Tensor(T.TENSOR_QUANT8_ASYMM, q, 0.5, 1), Tensor(T.TENSOR_FLOAT32, None),
              3)
    bits = np.array([ref_bit(float(s), q, None) for s in HASH.reshape(-1)]).reshape(4, 2)
    np.testing.assert_array_equal(out, bits[:, 0] * 2 + bits[:, 1] + np.arange(4) * 4)
    one_d = lsh(Tensor(T.TENSOR_FLOAT32, HASH), Tensor(T.TENSOR_FLOAT32, np.array([1.5, -2.0], np.float32)),
                Tensor(T.TENSOR_FLOAT32, np.array([1.0, 2.0], np.float32)), 2)
    assert one_d.shape == (8,)


def test_lsh_errors():
    h, x = Tensor(T.TENSOR_FLOAT32, HASH), i32(INPUT)
    with pytest.raises(OpExecutionError):  # sparse with a weight
        lsh(h, x, Tensor(T.TENSOR_FLOAT32, WEIGHT), 3)
    with pytest.raises(OpExecutionError):  # dense without weight
        lsh(h, x, Tensor(T.TENSOR_FLOAT32, None), 2)
    with pytest.raises(OpExecutionError):
        lsh(h, x, Tensor(T.TENSOR_FLOAT32, WEIGHT[:2]), 2)
    with pytest.raises(OpExecutionError):
        lsh(h, x, Tensor(T.TENSOR_FLOAT32, None), 0)
    with pytest.raises(OpExecutionError):  # more than 32 bits per function
        lsh(Tensor(T.TENSOR_FLOAT32, np.zeros((1, 33), np.float32)), x, Tensor(T.TENSOR_FLOAT32, None), 3)
    op = REGISTRY[OperationType.LSH_PROJECTION]
    assert 2 in op.omittable_inputs
    f, hf = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16
    match_signature(op, [f, T.TENSOR_QUANT8_ASYMM, f, T.INT32], [T.TENSOR_INT32], V1_0)
    match_signature(op, [hf, T.TENSOR_INT32, hf, T.INT32], [T.TENSOR_INT32], V1_2)
    with pytest.raises(OpValidationError):
        match_signature(op, [hf, T.TENSOR_INT32, hf, T.INT32], [T.TENSOR_INT32], V1_0)
    with pytest.raises(OpValidationError):  # weight type must follow the hash type
        match_signature(op, [hf, T.TENSOR_INT32, f, T.INT32], [T.TENSOR_INT32])
    with pytest.raises(OpValidationError):
        match_signature(op, [f, T.TENSOR_QUANT8_ASYMM_SIGNED, f, T.INT32], [T.TENSOR_INT32])


# ---------------------------------------------------------------- the Prepare/Eval split

def outs(*types: OperandType) -> list[OutputSpec]:
    return [OutputSpec(t, ()) for t in types]


F = T.TENSOR_FLOAT32
VALUES = Tensor(F, np.arange(4 * 2 * 3, dtype=np.float32).reshape(4, 2, 3) - 7)
KEYS = i32([-3, 2, 7, 100])
KIND_DENSE, KIND_SPARSE = Tensor(T.INT32, np.array(2, np.int32)), Tensor(T.INT32, np.array(3, np.int32))
NO_WEIGHT = Tensor(F, None)

# (operation, inputs, outputs, positions of the constants, other inputs (same constants))
PREPARED_CASES = {
    "embedding_constant_values": (OperationType.EMBEDDING_LOOKUP, [i32([3, 0, 3]), VALUES], outs(F), {1},
                                  [i32([1]), VALUES], [i32([4]), VALUES], [i32([-1, 0]), VALUES], [i32([]), VALUES]),
    "embedding_all_constant": (OperationType.EMBEDDING_LOOKUP, [i32([2, 1]), VALUES], outs(F), {0, 1}),
    "hashtable_constant_keys_values": (OperationType.HASHTABLE_LOOKUP, [i32([7, 5, -3, 100, 101, -4]), KEYS, VALUES],
                                       outs(F, T.TENSOR_QUANT8_ASYMM), {1, 2},
                                       [i32([2]), KEYS, VALUES], [i32([]), KEYS, VALUES]),
    "hashtable_constant_keys": (OperationType.HASHTABLE_LOOKUP, [i32([2, 3]), KEYS, VALUES],
                                outs(F, T.TENSOR_QUANT8_ASYMM), {1},
                                [i32([100, -3]), KEYS, Tensor(F, np.ones((2, 5), np.float32))]),
    "lsh_dense": (OperationType.LSH_PROJECTION, [Tensor(F, HASH), i32(INPUT), Tensor(F, WEIGHT), KIND_DENSE],
                  outs(T.TENSOR_INT32), {0, 2, 3}, [Tensor(F, HASH), i32(INPUT[::-1]), Tensor(F, WEIGHT), KIND_DENSE],
                  [Tensor(F, HASH), i32(INPUT[:2]), Tensor(F, WEIGHT), KIND_DENSE]),
    "lsh_sparse": (OperationType.LSH_PROJECTION, [Tensor(F, HASH), i32(INPUT), NO_WEIGHT, KIND_SPARSE],
                   outs(T.TENSOR_INT32), {0, 2, 3}, [Tensor(F, HASH), i32(INPUT[:1]), NO_WEIGHT, KIND_SPARSE],
                   [Tensor(F, HASH), Tensor(T.TENSOR_QUANT8_ASYMM, np.arange(12, dtype=np.uint8).reshape(2, 6), 0.5, 1),
                    NO_WEIGHT, KIND_SPARSE]),
    "lsh_float16_runtime_hash": (OperationType.LSH_PROJECTION,
                                 [Tensor(T.TENSOR_FLOAT16, HASH.astype(np.float16)), i32(INPUT),
                                  Tensor(T.TENSOR_FLOAT16, WEIGHT.astype(np.float16)), KIND_DENSE],
                                 outs(T.TENSOR_INT32), {3},
                                 [Tensor(T.TENSOR_FLOAT16, -HASH.astype(np.float16)), i32(INPUT),
                                  Tensor(T.TENSOR_FLOAT16, WEIGHT.astype(np.float16)), KIND_DENSE]),
}


@pytest.mark.parametrize("name", sorted(PREPARED_CASES))
def test_prepared_and_runtime_paths_agree(name, paths_agree):
    op, inputs, outputs, constant, *others = PREPARED_CASES[name]
    prep, results = paths_agree(op, inputs, outputs, constant, *others)
    assert isinstance(results[0], list)
    assert len(prep.state.plans) >= 1  # NOTE: the declared shapes' plan, made at prepare


def test_prepared_lsh_matches_the_reference_bits(paths_agree):
    _, [res, *_] = paths_agree(OperationType.LSH_PROJECTION,
                               [Tensor(F, HASH), i32(INPUT), Tensor(F, WEIGHT), KIND_DENSE], outs(T.TENSOR_INT32),
                               {0, 2, 3})
    got = np.frombuffer(res[0][2], np.int32)
    np.testing.assert_array_equal(got, [ref_bit(float(s), INPUT, WEIGHT) for s in HASH.reshape(-1)])


def test_hashtable_unsorted_constant_keys_as_at_run_time(paths_agree):
    """The reference binary-searches whatever keys it is given; the prepared table searches the same way."""
    keys = i32([5, 1, 9, 3, 7])
    values = Tensor(T.TENSOR_INT32, np.arange(5, dtype=np.int32) + 10)
    paths_agree(OperationType.HASHTABLE_LOOKUP, [i32([1, 3, 5, 7, 9, 0]), keys, values],
                outs(T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM), {1, 2})


BAD_CONSTANTS = {
    "embedding_lookup_index": (OperationType.EMBEDDING_LOOKUP, [i32([0, 4]), VALUES], outs(F), {0, 1},
                               r"lookup index 4 out of range \[0, 4\)"),
    "embedding_lookup_negative": (OperationType.EMBEDDING_LOOKUP, [i32([-2]), VALUES], outs(F), {0, 1},
                                  "lookup index -2"),
    "embedding_values_rank": (OperationType.EMBEDDING_LOOKUP, [i32([0]), Tensor(F, np.zeros(3, np.float32))], outs(F),
                              {1}, "rank >= 2"),
    "hashtable_too_few_keys": (OperationType.HASHTABLE_LOOKUP, [i32([1]), i32([1]), Tensor(F, np.zeros((2, 2),
                                                                                                         np.float32))],
                               outs(F, T.TENSOR_QUANT8_ASYMM), {1, 2}, "1 keys for 2 value rows"),
    "lsh_unknown_type": (OperationType.LSH_PROJECTION, [Tensor(F, HASH), i32(INPUT), NO_WEIGHT,
                                                        Tensor(T.INT32, np.array(7, np.int32))],
                         outs(T.TENSOR_INT32), {0, 2, 3}, "unknown projection type 7"),
    "lsh_sparse_with_weight": (OperationType.LSH_PROJECTION, [Tensor(F, HASH), i32(INPUT), Tensor(F, WEIGHT),
                                                              KIND_SPARSE], outs(T.TENSOR_INT32), {0, 2, 3},
                               "takes no weight"),
    "lsh_dense_weight_length": (OperationType.LSH_PROJECTION, [Tensor(F, HASH), i32(INPUT), Tensor(F, WEIGHT[:2]),
                                                               KIND_DENSE], outs(T.TENSOR_INT32), {0, 2, 3},
                                "does not match input rows 3"),
    "lsh_too_many_bits": (OperationType.LSH_PROJECTION, [Tensor(F, np.zeros((1, 33), np.float32)), i32(INPUT),
                                                         NO_WEIGHT, KIND_SPARSE], outs(T.TENSOR_INT32), {0, 2, 3},
                          "at most 32 bits"),
}


@pytest.mark.parametrize("name", sorted(BAD_CONSTANTS))
def test_bad_constant_parameter_fails_every_execution(name, paths_agree):
    """Prepare accepts the model; every execution fails with OpExecutionError, the run-time path the same."""
    op, inputs, outputs, constant, match = BAD_CONSTANTS[name]
    prep, results = paths_agree(op, inputs, outputs, constant, validate=False)
    assert all(isinstance(r, str) for r in results)
    for _ in range(2):
        with pytest.raises(OpExecutionError, match=match):
            prep.run(inputs)
