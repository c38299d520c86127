"""How a device's outputs are judged against the reference's: Android's
accuracy criteria for random graphs, adopted as they are.

Source: Android's ``nn/runtime/test/fuzzing/TestRandomGraph.cpp`` (Android 11
and 13): ``kStrictCriteria`` for operations that only move values (reshapes,
selections, comparisons, ARGMAX...), ``kMediumCriteria`` for one simple
computation per value (ADD, FLOOR, requantization...), ``kRelaxedCriteria``
for complex or accumulated ones (LOGISTIC, reductions, normalizations,
pooling...), ``kConvCriteria`` for the convolutions; each operation's class
as its ``TEST_SINGLE_OPERATION`` line gives it (the operations it has no
line for are classed here by the same rule, see :data:`CLASS`).  A model of
more than one operation is judged, output by output, by the operations that
output depends on: one operation, that operation's criteria; up to
:data:`SMALL_GRAPH` operations, ``kSmallGraphCriteria``; more,
``kLargeGraphCriteria``.

Per data type a criterion is ``atol``, ``rtol`` (every element:
``|a - e| <= atol + rtol * |e|``), ``bias`` and ``mse`` (the mean and mean
square of the error, relative for floats: divided by ``max(1, |e|)``;
checked from 10 elements on), as ``test_helper::expectNear``
(``tools/test_generator/test_harness/TestHarness.cpp``).  TENSOR_BOOL8
outputs may differ in at most 10% of their elements
(``bool8AllowedErrorRatio``, ceiling).  Where Android skips "invalid"
floating-point expectations (``allowInvalidFpValues``) we skip only the
non-finite ones (the generator keeps values finite and bounded, so large
finite values are judged, relatively).  float32 outputs of a relaxed model
use the float16 criterion (Android's rule for the generated tests).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from nnhal import hal

T = hal.OperandType
OT = hal.OperationType

SMALL_GRAPH = 5  # NOTE: TestRandomGraph's SmallGraph has 5 operations, LargeGraph 40
MIN_ELEMENTS_BIAS_MSE = 10
BOOL_ERROR_RATIO = 0.1


@dataclass(frozen=True)
class Criterion:
    atol: float
    rtol: float = 0.0
    bias: float = math.inf
    mse: float = math.inf


def _set(f32: tuple, f16: tuple, q: tuple) -> dict[str, Criterion]:
    return {"float32": Criterion(*f32), "float16": Criterion(*f16), "int32": Criterion(1.0),
            "quant": Criterion(q[0], 0.0, q[1], q[2])}


# (atol, rtol, bias, mse) for floats, (atol, bias, mse) for the quantized types
STRICT = _set((1e-6, 1e-6, 1e-7, 1e-10), (1e-3, 1e-3, 1e-4, 1e-8), (1, 0.1, 0.1))
MEDIUM = _set((1e-5, 1e-5, 1e-6, 1e-8), (1e-2, 1e-2, 1e-3, 1e-5), (2, 1.2, 1.2))
RELAXED = _set((1e-3, 1e-3, 3e-5, 1e-6), (1.0, 1.0, 5e-3, 1e-3), (10, 1.5, 1.5))
CONV = _set((2e-2, 2e-2, 4e-4, 1e-5), (1.0, 1.0, 5e-2, 1e-2), (10, 1.5, 1.5))
SMALL = _set((1e-2, 1e-2, 4e-4, 1e-5), (1.0, 1.0, 5e-2, 1e-2), (12, 2, 2))
LARGE = _set((1e-1, 1e-1, 1e-2, 1e-4), (1.0, 1.0, 1e-1, 5e-2), (12, 2, 2))

_S, _M, _R, _C = "strict", "medium", "relaxed", "conv"
SETS = {_S: STRICT, _M: MEDIUM, _R: RELAXED, _C: CONV, "small": SMALL, "large": LARGE}

# Each operation's criteria class: TestRandomGraph.cpp's TEST_SINGLE_OPERATION line (its 1.3 entry where it
# has several); the operations it has none for, by its rule (moving values: strict; one simple computation:
# medium; complex or accumulated: relaxed; convolution-like: conv), marked "# by rule".
CLASS: dict[OT, str] = {
    OT.ADD: _M, OT.MUL: _M, OT.SUB: _M, OT.DIV: _M, OT.FLOOR: _M, OT.LOGISTIC: _R, OT.RELU: _M, OT.RELU1: _M,
    OT.RELU6: _M, OT.TANH: _R, OT.SOFTMAX: _R, OT.L2_NORMALIZATION: _R, OT.LOCAL_RESPONSE_NORMALIZATION: _R,
    OT.AVERAGE_POOL_2D: _R, OT.L2_POOL_2D: _R, OT.MAX_POOL_2D: _R, OT.CONV_2D: _C, OT.DEPTHWISE_CONV_2D: _C,
    OT.CONCATENATION: _M, OT.RESIZE_BILINEAR: _R, OT.DEPTH_TO_SPACE: _S, OT.SPACE_TO_DEPTH: _S,
    OT.EMBEDDING_LOOKUP: _S, OT.HASHTABLE_LOOKUP: _S, OT.FULLY_CONNECTED: _R, OT.RESHAPE: _S, OT.DEQUANTIZE: _M,
    OT.BATCH_TO_SPACE_ND: _S, OT.SPACE_TO_BATCH_ND: _S, OT.MEAN: _R, OT.PAD: _S, OT.TRANSPOSE: _S,
    OT.SQUEEZE: _S, OT.STRIDED_SLICE: _S, OT.ABS: _M, OT.EXP: _R, OT.LOG: _R, OT.NEG: _M, OT.RSQRT: _R,
    OT.SIN: _R, OT.SQRT: _R, OT.ARGMAX: _S, OT.ARGMIN: _S, OT.EQUAL: _S, OT.GREATER: _S, OT.GREATER_EQUAL: _S,
    OT.LESS: _S, OT.LESS_EQUAL: _S, OT.LOGICAL_AND: _S, OT.LOGICAL_NOT: _S, OT.LOGICAL_OR: _S, OT.NOT_EQUAL: _S,
    OT.MAXIMUM: _M, OT.MINIMUM: _M, OT.POW: _R, OT.PRELU: _M, OT.REDUCE_ALL: _R, OT.REDUCE_ANY: _R,
    OT.REDUCE_MAX: _R, OT.REDUCE_MIN: _R, OT.REDUCE_PROD: _R, OT.REDUCE_SUM: _R, OT.CHANNEL_SHUFFLE: _S,
    OT.INSTANCE_NORMALIZATION: _R, OT.LOG_SOFTMAX: _R, OT.GROUPED_CONV_2D: _C, OT.TRANSPOSE_CONV_2D: _C,
    OT.RESIZE_NEAREST_NEIGHBOR: _R, OT.PAD_V2: _S, OT.QUANTIZE: _M, OT.CAST: _M, OT.EXPAND_DIMS: _S,
    OT.TILE: _S, OT.GATHER: _S, OT.SELECT: _S, OT.TOPK_V2: _S, OT.SLICE: _S, OT.SPLIT: _M, OT.ROI_ALIGN: _R,
    OT.ROI_POOLING: _R, OT.HEATMAP_MAX_KEYPOINT: _R, OT.ELU: _M, OT.HARD_SWISH: _M, OT.FILL: _S, OT.RANK: _S,
    OT.LSH_PROJECTION: _S,  # by rule: hashes of exact inputs
    OT.AXIS_ALIGNED_BBOX_TRANSFORM: _R, OT.BOX_WITH_NMS_LIMIT: _R, OT.GENERATE_PROPOSALS: _R,  # by rule
    OT.DETECTION_POSTPROCESSING: _R,  # by rule
    OT.RNN: _R, OT.SVDF: _R, OT.UNIDIRECTIONAL_SEQUENCE_RNN: _R, OT.BIDIRECTIONAL_SEQUENCE_RNN: _R,  # by rule
    OT.LSTM: _R, OT.UNIDIRECTIONAL_SEQUENCE_LSTM: _R, OT.BIDIRECTIONAL_SEQUENCE_LSTM: _R,  # by rule
    OT.QUANTIZED_16BIT_LSTM: _R, OT.QUANTIZED_LSTM: _R,  # by rule
    OT.IF: _M, OT.WHILE: _M,  # by rule: their bodies' operations count as the graph's
    OT.RANDOM_MULTINOMIAL: _R,  # not drawn (recipes.EXCLUDED)
}
# NOTE: the AIDL versions' operations, where OperationType has them: by the same rule
CLASS.update({OT[name]: c for name, c in (("BATCH_MATMUL", _C), ("PACK", _S), ("MIRROR_PAD", _S), ("REVERSE", _S))
              if name in OT.__members__})

_KIND = {T.TENSOR_FLOAT32: "float32", T.FLOAT32: "float32", T.TENSOR_FLOAT16: "float16", T.FLOAT16: "float16",
         T.TENSOR_INT32: "int32", T.INT32: "int32", T.UINT32: "int32"}


def criteria_for(ops: list[OT], n_ops: int) -> tuple[str, dict[str, Criterion]]:
    """The criteria of an output that depends on ``n_ops`` operations (``ops``: their types)."""
    if n_ops <= 1 and ops:
        name = CLASS.get(ops[0], _R)
        return name, SETS[name]
    name = "small" if n_ops <= SMALL_GRAPH else "large"
    return name, SETS[name]


@dataclass
class Judgement:
    ok: bool
    message: str = ""
    worst: float = 0.0


def judge(actual: np.ndarray, expected: np.ndarray, t: T, crit: dict[str, Criterion],
          relaxed: bool = False) -> Judgement:
    """One output: shapes equal, then the criterion of its data type."""
    a, e = np.asarray(actual), np.asarray(expected)
    if a.shape != e.shape:
        return Judgement(False, f"shape {list(a.shape)}, the reference's {list(e.shape)}")
    if e.size == 0:
        return Judgement(True)
    if t in (T.TENSOR_BOOL8, T.BOOL):
        wrong = int(np.count_nonzero(a.astype(bool) != e.astype(bool)))
        allowed = math.ceil(BOOL_ERROR_RATIO * e.size)
        if wrong > allowed:
            i = int(np.flatnonzero(a.astype(bool) != e.astype(bool))[0])
            return Judgement(False, f"{wrong}/{e.size} values differ (at most {allowed}); first at {i}: "
                                    f"{bool(a.flat[i])}, the reference's {bool(e.flat[i])}", wrong)
        return Judgement(True, "", wrong)
    kind = _KIND.get(t, "quant")
    if kind == "float32" and relaxed:
        kind = "float16"
    c = crit[kind]
    af, ef = a.astype(np.float64), e.astype(np.float64)
    keep = np.isfinite(ef)
    # NOTE: a non-finite expectation (Android skips it as an invalid value) must be matched exactly
    odd = ~keep & ~((af == ef) | (np.isnan(af) & np.isnan(ef)))
    if odd.any():
        i = int(np.flatnonzero(odd)[0])
        return Judgement(False, f"element {i}: {af.flat[i]!r}, the reference's {ef.flat[i]!r}", math.inf)
    af, ef = af[keep], ef[keep]
    err = np.abs(af - ef)
    bad = ~(err <= c.atol + c.rtol * np.abs(ef))
    worst = float(err.max()) if err.size else 0.0
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        return Judgement(False, f"{int(bad.sum())}/{bad.size} values off; first at {i}: {_num(af[i])}, the "
                                f"reference's {_num(ef[i])} (atol {c.atol:g}, rtol {c.rtol:g})", worst)
    if ef.size >= MIN_ELEMENTS_BIAS_MSE:
        diff = af - ef
        if kind in ("float32", "float16"):
            diff = diff / np.maximum(1.0, np.abs(ef))
        bias, mse = float(diff.mean()), float((diff * diff).mean())
        if abs(bias) > c.bias:
            return Judgement(False, f"bias {bias:.3g} beyond {c.bias:g}", worst)
        if mse > c.mse:
            return Judgement(False, f"mean square error {mse:.3g} beyond {c.mse:g}", worst)
    return Judgement(True, "", worst)


def _num(x: float) -> str:
    return f"{int(x)}" if float(x).is_integer() else f"{x:.7g}"


def dependencies(model: Any, output: int) -> tuple[list[OT], int]:
    """The operation types main output ``output`` depends on (its producer
    first) and how many operations that is, bodies of IF / WHILE included."""
    main = model.main
    producer = {k: op for op in main.ops for k in op.outputs}
    ops: list = []
    seen: set[int] = set()
    todo = [main.outputs[output]]
    while todo:
        op = producer.get(todo.pop())
        if op is None or id(op) in seen:
            continue
        seen.add(id(op))
        ops.append(op)
        todo.extend(op.inputs)
    return [op.type for op in ops], sum(_size(model, main, op) for op in ops)


def _size(model: Any, g: Any, op: Any) -> int:
    """1 for ``op``, plus every operation of the bodies it runs (nested)."""
    bodies = [model.referenced[g.operands[k].subgraph] for k in op.inputs if g.operands[k].kind == "subgraph"]
    return 1 + sum(_size(model, body, inner) for body in bodies for inner in body.ops)
