"""Measured performance figures for ``getCapabilities_1_3``.

``PerformanceInfo.execTime`` is relative to the CPU reference for float32
(1.0); the figures come from timing this driver's own kernels once, on the
first request: an elementwise ADD per data type, relative to float32, run
through :func:`nnhal.ops.run.prepare_operation` as the executor would run it.  No power meter exists here, so ``powerUsage`` reports
the same ratio (energy on a CPU tracks time).
"""

from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from nnhal import hal
from nnhal.ops.base import OpExecutionError, OpValidationError, OutputSpec, Tensor
from nnhal.ops.run import prepare_operation

T = hal.OperandType


def best_time(fn: Callable[[], Any], repeat: int = 5, warmup: int = 0) -> float:
    """The best wall time of ``repeat`` calls of ``fn`` after ``warmup`` calls (seconds)."""
    for _ in range(warmup):
        fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _kernel_time(op: hal.OperationType, t: T, shape: tuple, n_in: int = 2) -> float:
    rng = np.random.default_rng(0)
    from nnhal.ops.base import NUMPY_DTYPE

    dt = NUMPY_DTYPE[t]
    if dt.kind == "f":
        data = rng.standard_normal(shape).astype(dt)
    elif dt.kind == "b":
        data = rng.integers(0, 2, shape).astype(dt)
    else:
        info = np.iinfo(dt)
        data = rng.integers(max(info.min, -100), min(info.max, 100), shape).astype(dt)
    scale = 0.05 if t in (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED) else 0.0
    zp = 128 if t == T.TENSOR_QUANT8_ASYMM else 0
    ins = [Tensor(t, data, scale, zp) for _ in range(n_in)] + [Tensor(T.INT32, np.array(0, np.int32))]
    try:
        prepared = prepare_operation(op, ins, [OutputSpec(t, shape, scale, zp)])
        prepared.run(ins)
    except (OpValidationError, OpExecutionError):  # a type this op lacks: no figure
        return float("nan")
    return best_time(lambda: prepared.run(ins))


def measure_capabilities() -> hal.Capabilities:
    shape = (1, 64, 64, 32)
    base = _kernel_time(hal.OperationType.ADD, T.TENSOR_FLOAT32, shape)
    ratios: dict[T, float] = {}
    for t in (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM,
              T.TENSOR_QUANT8_ASYMM_SIGNED):
        r = _kernel_time(hal.OperationType.ADD, t, shape) / base if base == base and base > 0 else 1.0
        ratios[t] = r if r == r and r > 0 else 1.0
    ratios[T.TENSOR_FLOAT32] = 1.0  # the reference point by definition
    quant = max(ratios[T.TENSOR_QUANT8_ASYMM], 1e-3)
    defaults = {
        T.TENSOR_QUANT8_SYMM: quant, T.TENSOR_QUANT8_SYMM_PER_CHANNEL: quant, T.TENSOR_QUANT16_ASYMM: quant,
        T.TENSOR_QUANT16_SYMM: quant, T.TENSOR_BOOL8: ratios[T.TENSOR_INT32],
        # scalars cost what reading them costs; report them like float32
    }
    perf = []
    for t in sorted(T, key=int):
        if t == T.SUBGRAPH:
            continue
        r = ratios.get(t, defaults.get(t, 1.0))
        r = float(max(r, 1e-3))
        perf.append(hal.OperandPerformance(type=t, info=hal.PerformanceInfo(execTime=r, powerUsage=r)))
    relaxed = float(max(ratios[T.TENSOR_FLOAT32], 1e-3))
    # IF / WHILE cost one subgraph dispatch: a small constant relative to a kernel
    cf = hal.PerformanceInfo(execTime=1.0, powerUsage=1.0)
    return hal.Capabilities(
        relaxedFloat32toFloat16PerformanceScalar=hal.PerformanceInfo(relaxed, relaxed),
        relaxedFloat32toFloat16PerformanceTensor=hal.PerformanceInfo(relaxed, relaxed),
        operandPerformance=perf, ifPerformance=cf, whilePerformance=cf)
