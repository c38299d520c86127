"""8-bit lookup tables for the quantized elementwise operations of one input.

An elementwise function of one TENSOR_QUANT8_ASYMM(_SIGNED) input has 256
possible results: the operation's own quantized pipeline (the reference's
arithmetic, vectorized) computes all of them once at prepare, for the
model's quantization parameters, so the table is bit-identical to the
pipeline by construction; an execution is one ``take`` per element.  Used by
LOGISTIC, TANH and HARD_SWISH (:mod:`nnhal.ops.activation`) and the quantized
RSQRT of the AIDL HAL (:mod:`nnhal.ops.elementwise`).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

from nnhal.hal import OperandType, OperationType
from nnhal.ops.base import ExecContext, OpExecutionError, OpInfo, OutputSpec, Tensor
from nnhal.ops.prepared import prepared

QUANT8 = (OperandType.TENSOR_QUANT8_ASYMM, OperandType.TENSOR_QUANT8_ASYMM_SIGNED)

# the quantized pipeline of an operation: ExecContext (one 8-bit input) -> its output array
Pipeline = Callable[[ExecContext], np.ndarray]


def codes(t: OperandType) -> np.ndarray:
    """The 256 values of an 8-bit type, entry i the value whose byte is i."""
    return np.arange(256, dtype=np.uint8).view(np.uint8 if t == OperandType.TENSOR_QUANT8_ASYMM else np.int8)


def build(op: OperationType, fn: Pipeline, x: Any, out: Any) -> np.ndarray:
    """The 256-entry table of ``fn`` for these quantization parameters (``x`` / ``out``: anything with
    type, scale, zero_point); ValueError with the pipeline's message where it refuses them."""
    ctx = ExecContext(op, [Tensor(x.type, codes(x.type), x.scale, x.zero_point)],
                      [OutputSpec(out.type, (256,), out.scale, out.zero_point)])
    try:
        return np.ascontiguousarray(fn(ctx))
    except OpExecutionError as e:
        msg = str(e)
        raise ValueError(msg[len(op.name) + 2:] if msg.startswith(op.name + ": ") else msg) from None


def preparer(pipelines: Mapping[OperationType, Pipeline]) -> Callable[[OpInfo], object]:
    """An operation's ``prepare``: the table of its pipeline (``pipelines[type]``) when input 0 is 8-bit."""

    def prepare(info: OpInfo) -> object:
        x, out = info.inputs[0], info.outputs[0]
        if x.type not in QUANT8:
            return None
        return prepared(lambda: build(info.type, pipelines[info.type], x, out))

    return prepare


def lookup(ctx: ExecContext, fn: Pipeline) -> np.ndarray:
    """``fn`` of input 0 by the prepared table (made now when the state has none)."""
    x, out = ctx.inputs[0], ctx.outputs[0]
    st = ctx.state
    if st is None:
        st = prepared(lambda: build(ctx.type, fn, x, out))
    return st.value(ctx).take(x.data.view(np.uint8))
