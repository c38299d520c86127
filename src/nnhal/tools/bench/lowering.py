"""Lowering a zoo network to HAL 1.3 operands and operations, float32 or
TENSOR_QUANT8_ASYMM (per-layer scales from calibration), and to a hal.Model."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np

from nnhal import hal
from nnhal.hal import OperandLifeTime, OperandType, OperationType
from nnhal.ops.base import NUMPY_DTYPE
from nnhal.ops.quant import quantize
from nnhal.tools.bench.zoo import RELU6, SAME, Net, Op, T

# --------------------------------------------------------------------------
# lowering to HAL operands / operations


@dataclass
class Opnd:
    type: OperandType
    dims: tuple[int, ...]
    scale: float = 0.0
    zp: int = 0
    value: Optional[np.ndarray] = None


@dataclass
class Graph:
    operands: list[Opnd] = field(default_factory=list)
    ops: list[tuple[OperationType, list[int], list[int]]] = field(default_factory=list)
    inputs: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)
    names: dict[str, int] = field(default_factory=dict)

    def add(self, o: Opnd) -> int:
        self.operands.append(o)
        return len(self.operands) - 1

    def const(self, t: OperandType, v: Any, scale: float = 0.0, zp: int = 0) -> int:
        a = np.asarray(v, NUMPY_DTYPE[t])
        return self.add(Opnd(t, tuple(a.shape), scale, zp, a))

    def i32(self, v: int) -> int:
        return self.const(T.INT32, v)


def _out_hw(h: int, stride: int) -> int:
    return -(-h // stride)  # SAME padding


def _qparams(lo: float, hi: float) -> tuple[float, int]:
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    if hi - lo < 1e-6:
        hi = lo + 1e-6
    scale = float(np.float32((hi - lo) / 255.0))
    zp = int(np.clip(round(-lo / scale), 0, 255))
    return scale, zp


def _quant_weights(w: np.ndarray) -> tuple[np.ndarray, float, int]:
    scale, zp = _qparams(float(w.min()), float(w.max()))
    return quantize(w, scale, zp, T.TENSOR_QUANT8_ASYMM), scale, zp


def lower(net: Net, quant: bool, ranges: Optional[dict[str, tuple[float, float]]] = None) -> Graph:
    """The HAL graph of a network: float32, or quant8 asymm with activation
    scales from ``ranges`` (tensor name -> calibrated (min, max))."""
    g = Graph()
    tt = T.TENSOR_QUANT8_ASYMM if quant else T.TENSOR_FLOAT32
    bt = T.TENSOR_INT32 if quant else T.TENSOR_FLOAT32
    shapes = {"input": net.input_shape}
    s, z = (2.0 / 255.0, 128) if quant else (0.0, 0)  # inputs in [-1, 1]
    g.names["input"] = g.add(Opnd(tt, net.input_shape, s, z))
    g.inputs.append(g.names["input"])

    def out_q(name: str, act: int) -> tuple[float, int]:
        if not quant:
            return 0.0, 0
        if act == RELU6:
            return float(np.float32(6.0 / 255.0)), 0
        lo, hi = ranges[name] if ranges else (-8.0, 8.0)
        return _qparams(lo * 1.1, hi * 1.1)

    for L in net.layers:
        x = g.names[L.inputs[0]]
        xo = g.operands[x]
        n, h, w, c = shapes[L.inputs[0]] if len(shapes[L.inputs[0]]) == 4 else (*shapes[L.inputs[0]], 1, 1)[:4]
        if L.kind in ("conv", "dw", "fc"):
            if quant:
                wq, ws, wz = _quant_weights(L.w)
                bs = float(np.float32(np.float32(xo.scale) * np.float32(ws)))
                bq = np.round(L.b.astype(np.float64) / bs).astype(np.int32)
                wi = g.const(tt, wq, ws, wz)
                bi = g.const(bt, bq, bs, 0)
            else:
                wi, bi = g.const(tt, L.w), g.const(bt, L.b)
            if L.kind == "fc":
                oshape = (shapes[L.inputs[0]][0], L.w.shape[0])
                ins = [x, wi, bi, g.i32(L.act)]
                op = Op.FULLY_CONNECTED
            else:
                cout = L.w.shape[0] if L.kind == "conv" else L.w.shape[3]
                oshape = (n, _out_hw(h, L.stride), _out_hw(w, L.stride), cout)
                ins = [x, wi, bi, g.i32(SAME), g.i32(L.stride), g.i32(L.stride)]
                if L.kind == "dw":
                    ins.append(g.i32(1))
                ins.append(g.i32(L.act))
                op = Op.CONV_2D if L.kind == "conv" else Op.DEPTHWISE_CONV_2D
            s, z = out_q(L.output, L.act)
        elif L.kind == "add":
            oshape = shapes[L.inputs[0]]
            ins = [x, g.names[L.inputs[1]], g.i32(0)]
            op = Op.ADD
            s, z = out_q(L.output, 0)
        elif L.kind == "pool":
            pooled = g.add(Opnd(tt, (n, 1, 1, c), xo.scale, xo.zp))
            g.ops.append((Op.AVERAGE_POOL_2D, [x, g.i32(2), g.i32(w), g.i32(h), g.i32(w), g.i32(h), g.i32(0)],
                          [pooled]))
            oshape = (n, c)
            ins = [pooled, g.const(T.TENSOR_INT32, [n, c])]
            op = Op.RESHAPE
            s, z = xo.scale, xo.zp
        elif L.kind == "softmax":
            oshape = shapes[L.inputs[0]]
            ins = [x, g.const(T.FLOAT32, 1.0)]
            op = Op.SOFTMAX
            s, z = (1.0 / 256.0, 0) if quant else (0.0, 0)
        else:
            raise ValueError(L.kind)
        y = g.add(Opnd(tt, tuple(oshape), s, z))
        g.ops.append((op, ins, [y]))
        g.names[L.output] = y
        shapes[L.output] = tuple(oshape)
    g.outputs.append(g.names[net.layers[-1].output])
    return g


def to_model(g: Graph, pool_factory: Optional[Callable[[bytes], hal.Memory]] = None) -> hal.Model:
    """A hal.Model: constants of more than 128 bytes in a shared-memory pool
    (CONSTANT_REFERENCE, as Android's runtime does), the others inline."""
    from nnhal.platform import memory

    values, pool = bytearray(), bytearray()
    operands = []
    consumers = [0] * len(g.operands)
    for _, ins, _ in g.ops:
        for i in ins:
            consumers[i] += 1
    for k, o in enumerate(g.operands):
        loc = hal.DataLocation()
        if k in g.inputs:
            life = OperandLifeTime.SUBGRAPH_INPUT
        elif k in g.outputs:
            life = OperandLifeTime.SUBGRAPH_OUTPUT
        elif o.value is not None:
            raw = np.ascontiguousarray(o.value).tobytes()
            buf = values if len(raw) <= 128 else pool
            off = (len(buf) + 15) // 16 * 16
            buf.extend(b"\0" * (off - len(buf)))
            buf.extend(raw)
            life = OperandLifeTime.CONSTANT_COPY if buf is values else OperandLifeTime.CONSTANT_REFERENCE
            loc = hal.DataLocation(poolIndex=0, offset=off, length=len(raw))
        else:
            life = OperandLifeTime.TEMPORARY_VARIABLE
        operands.append(hal.Operand(type=o.type, dimensions=list(o.dims), numberOfConsumers=consumers[k],
                                    scale=o.scale, zeroPoint=o.zp, lifetime=life, location=loc))
    pools = []
    if pool:
        pools.append((pool_factory or memory.allocate_filled)(bytes(pool)))
    sg = hal.Subgraph(operands=operands, operations=[hal.Operation(t, list(i), list(o)) for t, i, o in g.ops],
                      inputIndexes=list(g.inputs), outputIndexes=list(g.outputs))
    return hal.Model(main=sg, operandValues=bytes(values), pools=pools)
