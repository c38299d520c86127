"""Measured ``Capabilities`` of the litert-cpu backend, relative to the CPU
reference (``PerformanceInfo`` is a ratio to the reference's float32 time,
Capabilities in types.hal): one FULLY_CONNECTED layer [1, N] x [N, N] per
data type (float32, float16, both quant8), timed through the reference
executor (float32) and through the lowered LiteRT interpreter, best of a few runs.  No power meter exists here:
``powerUsage`` reports the same ratio."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from nnhal import hal
from nnhal.engine.capabilities import best_time
from nnhal.engine.executor import Executor

T = hal.OperandType
L = hal.OperandLifeTime
_N = 256


def fc_model(t: T) -> hal.Model:
    """A model of one FULLY_CONNECTED layer of element type ``t`` (constants in operandValues)."""
    quant = t not in (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16)
    fdt = np.float16 if t == T.TENSOR_FLOAT16 else np.float32
    rng = np.random.default_rng(0)
    if quant:
        w = rng.integers(0 if t == T.TENSOR_QUANT8_ASYMM else -127, 127, (_N, _N)).astype(
            np.uint8 if t == T.TENSOR_QUANT8_ASYMM else np.int8)
        b = rng.integers(-1000, 1000, _N).astype(np.int32)
    else:
        w = rng.standard_normal((_N, _N)).astype(fdt)
        b = rng.standard_normal(_N).astype(fdt)
    values = w.tobytes() + b.tobytes() + struct.pack("<i", 0)
    zp = 128 if t == T.TENSOR_QUANT8_ASYMM else 0
    q = {"scale": 0.05, "zeroPoint": zp} if quant else {}

    def op(tt: T, dims: list, lt: L, off: int = 0, n: int = 0, **kw: Any) -> hal.Operand:
        return hal.Operand(type=tt, dimensions=dims, numberOfConsumers=1 if lt != L.SUBGRAPH_OUTPUT else 0,
                           lifetime=lt, location=hal.DataLocation(poolIndex=0, offset=off, length=n), **kw)

    nw = w.nbytes
    operands = [
        op(t, [1, _N], L.SUBGRAPH_INPUT, **q),
        op(t, [_N, _N], L.CONSTANT_COPY, 0, nw, **({"scale": 0.01, "zeroPoint": zp} if quant else {})),
        op(T.TENSOR_INT32 if quant else t, [_N], L.CONSTANT_COPY, nw, b.nbytes,
           **({"scale": 0.05 * 0.01} if quant else {})),
        op(T.INT32, [], L.CONSTANT_COPY, nw + b.nbytes, 4),
        op(t, [1, _N], L.SUBGRAPH_OUTPUT, **({"scale": 1.0, "zeroPoint": zp} if quant else {})),
    ]
    main = hal.Subgraph(operands=operands, operations=[hal.Operation(type=hal.OperationType.FULLY_CONNECTED,
                                                                     inputs=[0, 1, 2, 3], outputs=[4])],
                        inputIndexes=[0], outputIndexes=[4])
    return hal.Model(main=main, operandValues=values)


def measure(backend: Any) -> hal.Capabilities:
    """The backend's ratios to the reference's float32 FULLY_CONNECTED time."""
    ref_model = fc_model(T.TENSOR_FLOAT32)
    x = np.random.default_rng(1).standard_normal((1, _N)).astype(np.float32)
    ref = Executor(ref_model, [])
    base = best_time(lambda: ref.run([x]), 7, warmup=1)
    ratios: dict[T, float] = {}
    for t, dt in ((T.TENSOR_FLOAT32, np.float32), (T.TENSOR_QUANT8_ASYMM, np.uint8),
                  (T.TENSOR_QUANT8_ASYMM_SIGNED, np.int8), (T.TENSOR_FLOAT16, np.float16)):
        try:
            compiled = backend.compile(fc_model(t), [], None)
        except Exception:  # noqa: BLE001  # NOTE: a type the engine cannot run: reported as slow as possible
            continue
        xi = x.astype(dt) if dt in (np.float32, np.float16) else np.full((1, _N), 3, dt)
        ratios[t] = max(best_time(lambda c=compiled, v=xi: c.run([v]), 7, warmup=1) / base, 1e-3)
    slow = 1e3  # NOTE: operand types this driver does not run: never chosen for them
    perf = [hal.OperandPerformance(type=t, info=hal.PerformanceInfo(execTime=ratios.get(t, slow),
                                                                    powerUsage=ratios.get(t, slow)))
            for t in sorted(T, key=int) if t != T.SUBGRAPH]
    per_channel = ratios.get(T.TENSOR_QUANT8_ASYMM_SIGNED, slow)
    perf = [p if p.type != T.TENSOR_QUANT8_SYMM_PER_CHANNEL else
            hal.OperandPerformance(type=p.type, info=hal.PerformanceInfo(per_channel, per_channel)) for p in perf]
    for t in (T.INT32, T.FLOAT32, T.BOOL, T.TENSOR_INT32, T.TENSOR_BOOL8):
        perf = [p if p.type != t else hal.OperandPerformance(type=t, info=hal.PerformanceInfo(
            ratios.get(T.TENSOR_FLOAT32, slow), ratios.get(T.TENSOR_FLOAT32, slow))) for p in perf]
    h = ratios.get(T.TENSOR_FLOAT16, slow)  # NOTE: float16 models compute in float32 between CASTs
    perf = [p if p.type != T.FLOAT16 else hal.OperandPerformance(type=p.type, info=hal.PerformanceInfo(h, h))
            for p in perf]
    f = ratios.get(T.TENSOR_FLOAT32, slow)
    # NOTE: IF is TFLite's IF over the lowered branches: its own cost is a subgraph call, counted as a
    # float32 operation; WHILE is not supported (LiteRT cannot stop a loop at the loop timeout)
    return hal.Capabilities(
        relaxedFloat32toFloat16PerformanceScalar=hal.PerformanceInfo(f, f),
        relaxedFloat32toFloat16PerformanceTensor=hal.PerformanceInfo(f, f),
        operandPerformance=perf, ifPerformance=hal.PerformanceInfo(f, f),
        whilePerformance=hal.PerformanceInfo(slow, slow))
