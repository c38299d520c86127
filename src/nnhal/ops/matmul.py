"""BATCH_MATMUL of the AIDL NN HAL (``OperationType.aidl``, NNAPI feature level 6 = AIDL version 2),
as Android 13's reference computes it (``common/cpu_operations/BatchMatmul.cpp``, validated by
``common/types/operations/src/BatchMatmul.cpp``).

out[..., r, c] = sum_k x'[..., r, k] * y'[..., k, c], where x' is input 0 with its last two axes
swapped if adj_x (input 2) is true and y' likewise input 1 by adj_y (input 3): no conjugation, the
operand types have no complex numbers.  TENSOR_FLOAT32, TENSOR_FLOAT16 (computed in float32, rounded
once), TENSOR_INT32 (int32 sums that wrap, as C++'s) and TENSOR_QUANT8_ASYMM_SIGNED (int32 sums of
(x - zeroPoint) * (y - zeroPoint), then TFLite's ``MultiplyByQuantizedMultiplier`` with the multiplier
of x.scale * y.scale / out.scale and the output zero point, clamped to int8).

What the model fixes is checked by the signatures (the reference's validation checks types only);
the reference's ``prepare`` runs at execution and fails it (GENERAL_FAILURE) where the inputs' ranks
differ or are outside 2..4, a matrix dimension is 0 or the inner dimensions differ.  Batch dimensions:
TFLite's reference kernel broadcasts input 1's batch dimensions of size 1 against input 0's, and the
output has input 0's batch dimensions; any other difference makes that kernel write past its output
(input 0's batch 1 against input 1's n) or read past an input, so it fails the execution here.

Prepare/Eval: the adjoint flags and the requantization (multiplier, shift, zero points) are computed
once when constant, a constant input is converted once to what the kernel multiplies, and the shape
check is a plan per input shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from nnhal.hal import OperandType, OperationType
from nnhal.ops.base import AIDL_V2, ExecContext, OpDef, OpInfo, Signature
from nnhal.ops.fixedpoint import wrap32
from nnhal.ops.prepared import PerShape, constants, frozen, prepared
from nnhal.ops.quant import QUANT_RANGE, multiply_by_quantized_multiplier, quantize_multiplier

T = OperandType
Q8S = T.TENSOR_QUANT8_ASYMM_SIGNED


def _plan(key: tuple) -> tuple:
    """The output shape for inputs of these shapes and adjoint flags; ValueError where the reference's
    prepare fails (or where its kernel would write or read out of bounds)."""
    xs, ys, adj_x, adj_y = key
    if len(xs) != len(ys):
        raise ValueError(f"input ranks differ ({len(xs)} and {len(ys)})")
    if not 2 <= len(xs) <= 4:
        raise ValueError(f"input rank {len(xs)}, supported 2 to 4")
    if 0 in xs[-2:] or 0 in ys[-2:]:
        raise ValueError(f"a matrix dimension is 0 ({list(xs)} and {list(ys)})")
    rows, inner_x = (xs[-1], xs[-2]) if adj_x else (xs[-2], xs[-1])
    inner_y, cols = (ys[-1], ys[-2]) if adj_y else (ys[-2], ys[-1])
    if inner_x != inner_y:
        raise ValueError(f"cannot multiply {list(xs)} (adj_x {adj_x}) by {list(ys)} (adj_y {adj_y})")
    # NOTE: input 1's batch dimensions of 1 broadcast (TFLite's reference kernel steps 0 over them);
    # the output buffer has input 0's batch dimensions, so no other difference stays within it
    if any(b != a and b != 1 for a, b in zip(xs[:-2], ys[:-2])):
        raise ValueError(f"batch dimensions {list(xs[:-2])} and {list(ys[:-2])} differ")
    return tuple(xs[:-2]) + (rows, cols)


def _requantization(x: Any, y: Any, out: Any) -> tuple[int, int, int]:
    """(multiplier, shift, output zero point) of operands ``x``, ``y``, ``out`` (anything with scale and
    zero_point): Android's
    ``GetQuantizedConvolutionMultiplier`` (the scales' product in float32, divided in double) and
    ``QuantizeMultiplier``."""
    product = float(np.float32(x.scale) * np.float32(y.scale))
    real = product / float(np.float32(out.scale))
    if not np.isfinite(real) or real < 0:
        raise ValueError(f"output multiplier {real} (scales {x.scale}, {y.scale}, {out.scale}) is not finite")
    q, shift = quantize_multiplier(real)
    return q, shift, out.zero_point


def _operand(data: np.ndarray, t: OperandType, zero_point: int) -> np.ndarray:
    """What the kernel multiplies: quantized values minus their zero point as float64 (BLAS; every sum of
    products of such integers is exact there), float16 widened to float32, the rest as it is."""
    if t == Q8S:
        return data.astype(np.float64) - zero_point
    if t == T.TENSOR_FLOAT16:
        return data.astype(np.float32)
    return data


@dataclass(frozen=True)
class _State:
    adj: Optional[tuple[bool, bool]]  # None: a flag given at run time
    plans: PerShape  # (x shape, y shape, adj_x, adj_y) -> output shape
    quant: Any  # Ready / Failed of _requantization, None for the other types
    operands: tuple  # per matrix input: its _operand when a constant, else None


def _prepare(info: OpInfo) -> _State:
    x, y = info.inputs[0], info.inputs[1]
    flags = constants(info, 2, 3)
    adj = (bool(flags[0]), bool(flags[1])) if flags is not None else None
    plans = PerShape(_plan)
    if adj is not None and x.dimensions and y.dimensions and 0 not in x.dimensions + y.dimensions:
        plans.prime((tuple(x.dimensions), tuple(y.dimensions)) + adj)
    quant = prepared(_requantization, x, y, info.outputs[0]) if x.type == Q8S else None
    operands = tuple(frozen(_operand(o.value, o.type, o.zero_point)) if o.is_constant and o.value is not None
                     else None for o in (x, y))
    return _State(adj, plans, quant, operands)


def _requantize(total: np.ndarray, q: int, shift: int, zp: int) -> np.ndarray:
    """TFLite's quantized BatchMatMul epilogue: the int32 sum scaled by MultiplyByQuantizedMultiplier
    (whose left shift wraps in int32 as the reference's does), plus the output zero point, clamped."""
    acc = wrap32(total)
    if shift > 0:
        acc = wrap32(acc << shift)
    lo, hi = QUANT_RANGE[Q8S]
    return np.clip(multiply_by_quantized_multiplier(acc, q, min(shift, 0)) + zp, lo, hi).astype(np.int8)


def _execute(ctx: ExecContext) -> list[np.ndarray]:
    xt, yt = ctx.inputs[0], ctx.inputs[1]
    # NOTE: without a state (the reference check's dry run skips prepare) everything is computed here
    st: _State = ctx.state or _State(None, PerShape(_plan), prepared(_requantization, xt, yt, ctx.outputs[0])
                                     if xt.type == Q8S else None, (None, None))
    adj = st.adj if st.adj is not None else (bool(ctx.scalar(2)), bool(ctx.scalar(3)))
    st.plans.plan(ctx, (xt.shape, yt.shape) + adj)
    quant = st.quant.value(ctx) if st.quant is not None else None
    a, b = (c if c is not None else _operand(t.data, t.type, t.zero_point) for c, t in zip(st.operands, (xt, yt)))
    if adj[0]:
        a = np.swapaxes(a, -1, -2)
    if adj[1]:
        b = np.swapaxes(b, -1, -2)
    r = np.matmul(a, b)
    if quant is not None:
        return [_requantize(r.astype(np.int64), *quant)]
    return [r.astype(ctx.outputs[0].dtype, copy=False)]


OPS: list[OpDef] = [
    OpDef(OperationType.BATCH_MATMUL,
          [Signature((t, t, T.BOOL, T.BOOL), (t,), AIDL_V2)
           for t in (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32, Q8S)],
          _execute, prepare=_prepare),
]
