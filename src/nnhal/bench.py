"""``nnhal bench``: how fast the sample-all driver runs real networks.

Builds MobileNet v1 and MobileNet v2 (224x224, alpha 1.0, the published layer
structure: SAME-padded 3x3 stem, depthwise-separable / inverted-residual
blocks with ReLU6, average pool, fully connected, softmax) as HAL 1.3 models
with random weights, in float32 and in TENSOR_QUANT8_ASYMM (per-layer scales
calibrated on a float forward pass so activations do not saturate; ReLU6
outputs use scale 6/255 and zero point 0 as TFLite's quantized MobileNets).

It prints:

* the median latency of one whole execution through the driver
  (``prepareModel_1_3`` + ``executeSynchronously_1_3`` on shared-memory
  request pools);
* for each distinct convolution / fully-connected layer shape, the layer's
  achieved GFLOP/s (its kernel timed through the operation registry on the
  real activations) next to numpy's own matmul GFLOP/s at the same GEMM shape
  measured in the same run (a depthwise layer is C independent
  (M x K) @ (K x 1) products: numpy's batched matmul of that shape);
* the ratio of the whole-network latency to the sum of the bare matrix
  products the network needs, and flags every layer below a quarter of the
  matmul speed.  Targets: ratio <= 2, no flagged layer.

Times are medians (the ratio is also given on best times); a layer is flagged
on its best time against numpy's best, which is robust to other load on the
machine.  On a machine whose cores are shared with other work, OpenBLAS's
threads wait for each other and small GEMMs get 10-50x slower: ``--threads 1``
then gives stable, comparable numbers (the kernels' own elementwise threads,
``NNHAL_KERNEL_THREADS``, default 1, step aside by themselves while the load
average is above the core count).  ``--tune-malloc`` shows what keeping freed pages in
the process (glibc ``mallopt``) saves: a fresh multi-MB activation otherwise
page-faults in on every execution.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np

from nnhal import hal
from nnhal.hal import OperandLifeTime, OperandType, OperationType
from nnhal.ops.base import NUMPY_DTYPE, OperandInfo, Tensor
from nnhal.ops.quant import quantize
from nnhal.ops.run import prepare_operation

T = OperandType
Op = OperationType
RELU6 = 3
SAME = 1
CONV_OPS = (Op.CONV_2D, Op.DEPTHWISE_CONV_2D, Op.FULLY_CONNECTED)


# --------------------------------------------------------------------------
# network description (float weights, NHWC)


@dataclass
class Layer:
    kind: str  # conv | dw | add | pool | fc | softmax
    inputs: list[str]
    output: str
    act: int = 0
    stride: int = 1
    w: Optional[np.ndarray] = None
    b: Optional[np.ndarray] = None


@dataclass
class Net:
    name: str
    input_shape: tuple[int, ...]
    layers: list[Layer] = field(default_factory=list)


class _NetBuilder:
    def __init__(self, name: str, size: int, rng: np.random.Generator) -> None:
        self.net = Net(name, (1, size, size, 3))
        self.rng = rng
        self.n = 0
        self.ch = 3

    def _name(self) -> str:
        self.n += 1
        return f"t{self.n}"

    def conv(self, x: str, cout: int, k: int, stride: int, act: int) -> str:
        fan_in = k * k * self.ch
        w = self.rng.standard_normal((cout, k, k, self.ch)).astype(np.float32) * np.float32(np.sqrt(2.0 / fan_in))
        b = (self.rng.standard_normal(cout) * 0.05).astype(np.float32)
        y = self._name()
        self.net.layers.append(Layer("conv", [x], y, act, stride, w, b))
        self.ch = cout
        return y

    def dw(self, x: str, stride: int, act: int) -> str:
        w = self.rng.standard_normal((1, 3, 3, self.ch)).astype(np.float32) * np.float32(np.sqrt(2.0 / 9))
        b = (self.rng.standard_normal(self.ch) * 0.05).astype(np.float32)
        y = self._name()
        self.net.layers.append(Layer("dw", [x], y, act, stride, w, b))
        return y

    def add(self, a: str, b: str) -> str:
        y = self._name()
        self.net.layers.append(Layer("add", [a, b], y))
        return y

    def head(self, x: str, classes: int) -> None:
        p = self._name()
        self.net.layers.append(Layer("pool", [x], p))
        w = self.rng.standard_normal((classes, self.ch)).astype(np.float32) * np.float32(np.sqrt(1.0 / self.ch))
        b = (self.rng.standard_normal(classes) * 0.05).astype(np.float32)
        logits = self._name()
        self.net.layers.append(Layer("fc", [p], logits, 0, 1, w, b))
        self.net.layers.append(Layer("softmax", [logits], "probs"))


def _c(ch: float, alpha: float) -> int:
    return max(8, int(ch * alpha))


def mobilenet_v1(size: int = 224, alpha: float = 1.0, classes: int = 1000, seed: int = 0) -> Net:
    """MobileNet v1: 3x3/2 stem, 13 depthwise-separable blocks, pool, FC."""
    nb = _NetBuilder(f"mobilenet_v1_{alpha:g}_{size}", size, np.random.default_rng(seed))
    x = nb.conv("input", _c(32, alpha), 3, 2, RELU6)
    for cout, stride in [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)] + [(512, 1)] * 5 + \
                        [(1024, 2), (1024, 1)]:
        x = nb.dw(x, stride, RELU6)
        x = nb.conv(x, _c(cout, alpha), 1, 1, RELU6)
    nb.head(x, classes)
    return nb.net


def mobilenet_v2(size: int = 224, alpha: float = 1.0, classes: int = 1000, seed: int = 1) -> Net:
    """MobileNet v2: 3x3/2 stem, 17 inverted residual bottlenecks (expand
    1x1 + ReLU6, depthwise 3x3 + ReLU6, linear 1x1 projection, residual add
    when the shape is kept), 1x1 to 1280, pool, FC."""
    nb = _NetBuilder(f"mobilenet_v2_{alpha:g}_{size}", size, np.random.default_rng(seed))
    x = nb.conv("input", _c(32, alpha), 3, 2, RELU6)
    for t, c, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                       (6, 160, 3, 2), (6, 320, 1, 1)]:
        for i in range(n):
            stride = s if i == 0 else 1
            cin = nb.ch
            y = x
            if t != 1:
                y = nb.conv(y, cin * t, 1, 1, RELU6)
            y = nb.dw(y, stride, RELU6)
            y = nb.conv(y, _c(c, alpha), 1, 1, 0)
            x = nb.add(x, y) if (stride == 1 and cin == nb.ch) else y
    x = nb.conv(x, max(1280, _c(1280, alpha)) if alpha > 1.0 else 1280, 1, 1, RELU6)
    nb.head(x, classes)
    return nb.net


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
    from nnhal import memory

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
        if pool_factory is None:
            def pool_factory(data: bytes) -> hal.Memory:
                m = memory.allocate(len(data))
                memory.map(m)[: len(data)] = data
                return m
        pools.append(pool_factory(bytes(pool)))
    sg = hal.Subgraph(operands=operands, operations=[hal.Operation(t, list(i), list(o)) for t, i, o in g.ops],
                      inputIndexes=list(g.inputs), outputIndexes=list(g.outputs))
    return hal.Model(main=sg, operandValues=bytes(values), pools=pools)


# --------------------------------------------------------------------------
# running through the registry (calibration, per-layer timing)


def _info(o: Opnd) -> OperandInfo:
    life = OperandLifeTime.CONSTANT_COPY if o.value is not None else OperandLifeTime.TEMPORARY_VARIABLE
    return OperandInfo(o.type, o.dims, o.scale, o.zp, None, life, o.value)


class RegistryRunner:
    """Runs a Graph op by op (every intermediate value kept, for calibration and
    per-layer timing), each operation validated and prepared once through
    :func:`nnhal.ops.run.prepare_operation`."""

    def __init__(self, g: Graph) -> None:
        self.g = g
        self.steps = []
        for t, ins, outs in g.ops:
            prepared = prepare_operation(t, [_info(g.operands[i]) for i in ins], [_info(g.operands[i]) for i in outs])
            self.steps.append((prepared, ins, outs))

    def tensors(self, k: int, values: dict[int, np.ndarray]) -> list[Tensor]:
        _, ins, _ = self.steps[k]
        tensors = []
        for i in ins:
            o = self.g.operands[i]
            data = o.value if o.value is not None else values[i]
            tensors.append(Tensor(o.type, data, o.scale, o.zp))
        return tensors

    def run(self, x: np.ndarray) -> dict[int, np.ndarray]:
        values = {self.g.inputs[0]: x}
        for k, (prepared, _, outs) in enumerate(self.steps):
            for i, r in zip(outs, prepared.run(self.tensors(k, values))):
                values[i] = r
        return values


def calibrate(net: Net, x: np.ndarray) -> dict[str, tuple[float, float]]:
    g = lower(net, quant=False)
    values = RegistryRunner(g).run(x)
    return {name: (float(values[i].min()), float(values[i].max())) for name, i in g.names.items()}


# --------------------------------------------------------------------------
# timing


@dataclass
class Timing:
    median: float
    best: float


def _time(fn: Callable[[], Any], repeats: int, min_time: float = 0.0) -> Timing:
    """Median and best wall time of ``fn`` over at least ``repeats`` calls
    (and at least ``min_time`` seconds), after one warm-up call."""
    fn()
    ts = []
    t_end = time.perf_counter() + min_time
    while len(ts) < repeats or time.perf_counter() < t_end:
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
        if len(ts) > 50 * max(1, repeats):
            break
    return Timing(statistics.median(ts), min(ts))


def driver_latency(g: Graph, x: np.ndarray, runs: int, device_name: str = "sample-all") -> tuple[Timing, np.ndarray]:
    """Median latency of executeSynchronously_1_3 on the sample-all driver."""
    import nnhal
    from nnhal import memory

    model = to_model(g)
    dev = nnhal.get_device(device_name)
    cb = hal.PreparedModelCallback()
    dev.prepareModel_1_3(model, hal.ExecutionPreference.SUSTAINED_SPEED, hal.Priority.MEDIUM,
                         hal.OptionalTimePoint(), [], [], bytes(32), cb)
    status, prepared = cb.wait()
    if status != hal.ErrorStatus.NONE or prepared is None:
        raise RuntimeError(f"prepareModel_1_3 failed: {hal.ErrorStatus(status).name}")
    out = g.operands[g.outputs[0]]
    out_bytes = int(np.prod(out.dims)) * NUMPY_DTYPE[out.type].itemsize
    in_mem, out_mem = memory.allocate(x.nbytes), memory.allocate(out_bytes)
    try:
        memory.map(in_mem)[:] = np.ascontiguousarray(x).tobytes()
        req = hal.Request(inputs=[hal.RequestArgument(location=hal.DataLocation(0, 0, x.nbytes))],
                          outputs=[hal.RequestArgument(location=hal.DataLocation(1, 0, out_bytes))],
                          pools=[hal.MemoryPool(hidlMemory=in_mem), hal.MemoryPool(hidlMemory=out_mem)])

        def once() -> None:
            st, _, _ = prepared.executeSynchronously_1_3(req, hal.MeasureTiming.NO, hal.OptionalTimePoint(),
                                                         hal.OptionalTimeoutDuration())
            if st != hal.ErrorStatus.NONE:
                raise RuntimeError(f"execution failed: {hal.ErrorStatus(st).name}")

        lat = _time(once, runs)
        result = np.frombuffer(bytes(memory.map(out_mem)), NUMPY_DTYPE[out.type]).reshape(out.dims).copy()
    finally:
        memory.free(in_mem)
        memory.free(out_mem)
        for m in model.pools:
            memory.free(m)
    return lat, result


@dataclass
class LayerStat:
    key: str
    op: OperationType
    gemm: tuple  # (batch, M, K, N)
    count: int
    flops: float
    t_layer: Timing
    t_matmul: Timing

    @property
    def gflops(self) -> float:
        return self.flops / self.t_layer.median / 1e9

    @property
    def matmul_gflops(self) -> float:
        return self.flops / self.t_matmul.median / 1e9

    @property
    def best_ratio(self) -> float:
        """Layer speed / matmul speed on the best times (robust to other load)."""
        return self.t_matmul.best / self.t_layer.best


def _gemm_shape(op: OperationType, x: Opnd, w: Opnd, y: Opnd) -> tuple[int, int, int, int]:
    """(batch, M, K, N) of the matrix product a layer amounts to."""
    if op == Op.FULLY_CONNECTED:
        return 1, y.dims[0], w.dims[1], w.dims[0]
    n, oh, ow, cout = y.dims
    _, kh, kw, cin = w.dims
    if op == Op.DEPTHWISE_CONV_2D:
        return cout, n * oh * ow, kh * kw, 1
    return 1, n * oh * ow, kh * kw * cin, cout


_MATMUL_CACHE: dict[tuple, Timing] = {}


def matmul_time(shape: tuple[int, int, int, int], repeats: int) -> Timing:
    """numpy's float32 matmul time at a (batch, M, K, N) shape."""
    if shape not in _MATMUL_CACHE:
        b, m, k, n = shape
        rng = np.random.default_rng(0)
        a = rng.standard_normal((b, m, k) if b > 1 else (m, k)).astype(np.float32)
        c = rng.standard_normal((b, k, n) if b > 1 else (k, n)).astype(np.float32)
        _MATMUL_CACHE[shape] = _time(lambda: a @ c, repeats, 0.02)
    return _MATMUL_CACHE[shape]


def layer_stats(g: Graph, x: np.ndarray, repeats: int) -> list[LayerStat]:
    runner = RegistryRunner(g)
    values = runner.run(x)
    stats: dict[str, LayerStat] = {}
    for k, (prepared, ins, outs) in enumerate(runner.steps):
        opdef = prepared.opdef
        if opdef.type not in CONV_OPS:
            continue
        xo, wo, yo = g.operands[ins[0]], g.operands[ins[1]], g.operands[outs[0]]
        shape = _gemm_shape(opdef.type, xo, wo, yo)
        stride = "" if opdef.type == Op.FULLY_CONNECTED else f"/{int(g.operands[ins[5]].value)}"
        kind = {Op.CONV_2D: "conv", Op.DEPTHWISE_CONV_2D: "dw", Op.FULLY_CONNECTED: "fc"}[opdef.type]
        key = f"{kind} {'x'.join(map(str, xo.dims[1:]))} k{'x'.join(map(str, wo.dims[1:3])) if kind != 'fc' else ''}" \
              f"{stride} -> {yo.dims[-1]}"
        if key in stats:
            stats[key].count += 1
            continue
        tensors = runner.tensors(k, values)
        t = _time(lambda p=prepared, i=tensors: p.run(i), repeats, 0.02)
        b, m, kk, n = shape
        stats[key] = LayerStat(key, opdef.type, shape, 1, 2.0 * b * m * kk * n, t, matmul_time(shape, repeats))
    return list(stats.values())


# --------------------------------------------------------------------------
# BLAS threads


def _openblas() -> Any:
    """numpy's bundled OpenBLAS through ctypes (None if not found)."""
    import ctypes
    import glob

    here = os.path.dirname(np.__file__)
    for path in sorted(glob.glob(os.path.join(here, "..", "numpy.libs", "*openblas*"))) + \
            sorted(glob.glob(os.path.join(here, ".dylibs", "*openblas*"))):
        try:
            return ctypes.CDLL(path)
        except OSError:
            continue
    return None


def _blas_fn(suffix: str) -> Any:
    lib = _openblas()
    if lib is None:
        return None
    for name in (f"scipy_openblas_{suffix}64_", f"openblas_{suffix}64_", f"openblas_{suffix}"):
        fn = getattr(lib, name, None)
        if fn is not None:
            return fn
    return None


def blas_threads() -> int | None:
    """The number of threads numpy's OpenBLAS uses (None if unknown)."""
    fn = _blas_fn("get_num_threads")
    return int(fn()) if fn is not None else None


def set_blas_threads(n: int) -> bool:
    """Set numpy's OpenBLAS thread count; False if it cannot be set."""
    fn = _blas_fn("set_num_threads")
    if fn is None:
        return False
    fn(int(n))
    return True


def tune_malloc() -> bool:
    """glibc: serve large allocations from the heap and never trim it
    (``mallopt`` M_MMAP_THRESHOLD / M_TRIM_THRESHOLD), so the multi-MB
    activations of each execution reuse pages instead of faulting fresh ones
    in.  A process-wide choice (for a driver service); False if unavailable."""
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3
        return bool(libc.mallopt(m_mmap_threshold, 1 << 30)) and bool(libc.mallopt(m_trim_threshold, (1 << 31) - 1))
    except (OSError, AttributeError):
        return False


# --------------------------------------------------------------------------
# CLI


def _report(net: Net, dtype: str, runs: int, repeats: int, layers: bool, out: Any) -> dict:
    rng = np.random.default_rng(42)
    xf = rng.uniform(-1, 1, net.input_shape).astype(np.float32)
    ranges = calibrate(net, xf) if dtype == "quant8" else None
    g = lower(net, dtype == "quant8", ranges)
    x = quantize(xf, 2.0 / 255.0, 128, T.TENSOR_QUANT8_ASYMM) if dtype == "quant8" else xf
    try:
        lat, _ = driver_latency(g, x, runs)
        via = "driver sample-all"
    except Exception as e:  # noqa: BLE001 - report and fall back to the kernels alone
        print(f"  driver path failed ({type(e).__name__}: {e}); timing through the registry", file=out)
        runner = RegistryRunner(g)
        lat = _time(lambda: runner.run(x), runs)
        via = "registry"
    stats = layer_stats(g, x, repeats) if layers else []
    bare = sum(s.t_matmul.median * s.count for s in stats)
    bare_best = sum(s.t_matmul.best * s.count for s in stats)
    bare_dense = sum(s.t_matmul.median * s.count for s in stats if s.op != Op.DEPTHWISE_CONV_2D)
    print(f"\n{net.name} {dtype}: median latency {lat.median * 1e3:.2f} ms, best {lat.best * 1e3:.2f} ms "
          f"({via}, {runs} runs)", file=out)
    flagged = []
    if stats:
        print(f"  {'layer (input HxWxC, kernel/stride -> Cout)':44s} {'n':>3s} {'GEMM (b) MxKxN':>22s} "
              f"{'ms':>7s} {'GFLOP/s':>8s} {'matmul':>8s} {'ratio':>6s} {'best':>5s}", file=out)
        for s in stats:
            b, m, k, n = s.gemm
            ratio = s.gflops / s.matmul_gflops
            flag = "  <-- below 1/4 of matmul" if s.best_ratio < 0.25 else ""
            if flag:
                flagged.append(s.key)
            gemm = (f"({b}) " if b > 1 else "") + f"{m}x{k}x{n}"
            print(f"  {s.key:44s} {s.count:3d} {gemm:>22s} {s.t_layer.median * 1e3:7.3f} {s.gflops:8.1f} "
                  f"{s.matmul_gflops:8.1f} {ratio:6.2f} {s.best_ratio:5.2f}{flag}", file=out)
        total_layers = sum(s.t_layer.median * s.count for s in stats)
        print(f"  sum of conv/fc layer kernels {total_layers * 1e3:.2f} ms; bare matmuls {bare * 1e3:.2f} ms "
              f"(dense GEMMs only {bare_dense * 1e3:.2f} ms)", file=out)
        print(f"  whole network / bare matmul sum = {lat.median / bare:.2f} (target <= 2; on best times "
              f"{lat.best / bare_best:.2f}); / dense GEMMs only = {lat.median / bare_dense:.2f}; "
              f"layers below 1/4 matmul speed: {len(flagged)}", file=out)
    return {"net": net.name, "dtype": dtype, "latency": lat.median, "bare": bare, "bare_dense": bare_dense,
            "ratio": lat.median / bare if bare else None, "flagged": flagged}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--ipc" in argv:
        # NOTE: the IPC benchmark (service round trips) has its own options
        from nnhal.tools import ipcbench

        return ipcbench.main([a for a in argv if a != "--ipc"])
    ap = argparse.ArgumentParser(prog="nnhal bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--ipc", action="store_true", help="the IPC round trips through a driver service instead "
                                                       "(nnhal bench --ipc --help)")
    ap.add_argument("--nets", default="v1,v2", help="comma-separated: v1, v2 (default both)")
    ap.add_argument("--types", default="float32,quant8", help="comma-separated: float32, quant8")
    ap.add_argument("--size", type=int, default=224, help="input height and width (default 224)")
    ap.add_argument("--alpha", type=float, default=1.0, help="width multiplier (default 1.0)")
    ap.add_argument("--classes", type=int, default=1000, help="output classes (default 1000)")
    ap.add_argument("--runs", type=int, default=10, help="whole-network executions timed (default 10)")
    ap.add_argument("--repeats", type=int, default=5, help="timings per layer / matmul (default 5)")
    ap.add_argument("--no-layers", action="store_true", help="skip the per-layer table")
    ap.add_argument("--threads", type=int, default=0,
                    help="BLAS threads (default: leave numpy's; 1 gives stable numbers on a shared machine)")
    ap.add_argument("--tune-malloc", action="store_true",
                    help="glibc mallopt: keep freed pages for reuse (fewer page faults per execution)")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = ap.parse_args(argv)
    builders = {"v1": mobilenet_v1, "v2": mobilenet_v2}
    if args.tune_malloc and not tune_malloc():
        print("cannot tune malloc", file=sys.stderr)
    if args.threads > 0 and not set_blas_threads(args.threads):
        print("cannot set the BLAS thread count; using numpy's default", file=sys.stderr)
    from nnhal.ops import conv_kernels

    print(f"BLAS threads: {blas_threads() or 'unknown'}; kernel threads: {conv_kernels.THREADS}; "
          f"cpus: {os.cpu_count()}; load average: {os.getloadavg()[0]:.2f}")
    results = []
    for name in [n.strip() for n in args.nets.split(",") if n.strip()]:
        if name not in builders:
            ap.error(f"unknown net {name!r}")
        net = builders[name](args.size, args.alpha, args.classes)
        for dtype in [t.strip() for t in args.types.split(",") if t.strip()]:
            if dtype not in ("float32", "quant8"):
                ap.error(f"unknown type {dtype!r}")
            results.append(_report(net, dtype, args.runs, args.repeats, not args.no_layers, sys.stdout))
    missed = [r for r in results if r["flagged"] or (r["ratio"] is not None and r["ratio"] > 2.0)]
    if results and not args.no_layers:
        print(f"\n{len(results) - len(missed)}/{len(results)} networks meet the targets")
    return 1 if (args.strict and missed) else 0


if __name__ == "__main__":
    sys.exit(main())
