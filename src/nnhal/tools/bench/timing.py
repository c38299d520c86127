"""Timing: whole executions through the driver, per-layer kernels and
numpy's matmul at the same GEMM shapes."""

from __future__ import annotations

import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np

from nnhal import hal
from nnhal.hal import OperationType
from nnhal.ops.base import NUMPY_DTYPE
from nnhal.tools.bench.calibration import RegistryRunner
from nnhal.tools.bench.lowering import Graph, Opnd, to_model
from nnhal.tools.bench.zoo import CONV_OPS, Op

# --------------------------------------------------------------------------
# timing


@dataclass
class Timing:
    median: float
    best: float


def time_it(fn: Callable[[], Any], repeats: int, min_time: float = 0.0) -> Timing:
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


@contextmanager
def driver_runner(g: Graph, x: np.ndarray, device_name: str = "sample-all") -> Iterator[tuple[Callable[[], None], Callable[[], np.ndarray]]]:
    """A prepared model of ``g`` on the device and a request with ``x`` in
    shared memory: yields ``(once, output)``: one executeSynchronously_1_3,
    and the output it left in the pool; frees the pools on exit."""
    import nnhal
    from nnhal.platform import memory

    model = to_model(g)
    dev = nnhal.get_device(device_name)
    cb = hal.PreparedModelCallback()
    dev.prepareModel_1_3(model, hal.ExecutionPreference.SUSTAINED_SPEED, hal.Priority.MEDIUM,
                         hal.OptionalTimePoint(), [], [], bytes(32), cb)
    status, prepared = cb.wait()
    if status != hal.ErrorStatus.NONE or prepared is None:
        for m in model.pools:
            memory.free(m)
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

        def output() -> np.ndarray:
            return np.frombuffer(bytes(memory.map(out_mem)), NUMPY_DTYPE[out.type]).reshape(out.dims).copy()

        yield once, output
    finally:
        memory.free(in_mem)
        memory.free(out_mem)
        for m in model.pools:
            memory.free(m)


def driver_latency(g: Graph, x: np.ndarray, runs: int, device_name: str = "sample-all") -> tuple[Timing, np.ndarray]:
    """Median latency of executeSynchronously_1_3 on the sample-all driver."""
    with driver_runner(g, x, device_name) as (once, output):
        lat = time_it(once, runs)
        return lat, output()


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
        _MATMUL_CACHE[shape] = time_it(lambda: a @ c, repeats, 0.02)
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
        t = time_it(lambda p=prepared, i=tensors: p.run(i), repeats, 0.02)
        b, m, kk, n = shape
        stats[key] = LayerStat(key, opdef.type, shape, 1, 2.0 * b * m * kk * n, t, matmul_time(shape, repeats))
    return list(stats.values())
