"""``nnhal bench --cache`` and ``nnhal bench --priority``: what compilation
caching and priorities buy on the sample-all driver, measured in one run.

``--cache``: a quantized MobileNet v1 (224x224, per-layer scales calibrated
as in ``nnhal bench``) with a wide fully connected head, so that its
constants exceed 10 MB; it prints the median time of ``prepareModel_1_3``
(validation, filter re-layouts, requantization multipliers and the verified
float32 requantization constants of every layer), of ``prepareModel_1_3``
saving to cache files, and of ``prepareModelFromCache_1_3`` (read, HMAC and
SHA-256 checks, restore), the ratio (target >= 10), and whether the
cache-loaded model's output equals the freshly prepared one's.

``--priority``: the driver's work queue saturated with LOW-priority
executions (a backlog of asynchronous executions kept full); it prints the
median latency of a synchronous execution of a HIGH-priority prepared model
on the idle driver, of the same execution under that load, and of a
LOW-priority one under the same load (which waits behind the backlog).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import tempfile
import threading
import time
from typing import Any, Callable

import numpy as np

import nnhal
from nnhal import hal
from nnhal.ops.base import NUMPY_DTYPE
from nnhal.platform import memory
from nnhal.tools import bench

S = hal.ErrorStatus


def _prepare(dev: Any, model: hal.Model, priority: hal.Priority = hal.Priority.MEDIUM, model_cache: list = (),
             data_cache: list = (), token: bytes = bytes(32)) -> Any:
    cb = hal.PreparedModelCallback()
    launch = dev.prepareModel_1_3(model, hal.ExecutionPreference.SUSTAINED_SPEED, priority, hal.OptionalTimePoint(),
                                  list(model_cache), list(data_cache), token, cb)
    status, prepared = cb.wait()
    if launch != S.NONE or status != S.NONE:
        raise RuntimeError(f"prepareModel_1_3 failed: {S(status).name}")
    return prepared


def _load(dev: Any, model_cache: list, data_cache: list, token: bytes) -> Any:
    cb = hal.PreparedModelCallback()
    dev.prepareModelFromCache_1_3(hal.OptionalTimePoint(), model_cache, data_cache, token, cb)
    status, prepared = cb.wait()
    if status != S.NONE:
        raise RuntimeError(f"prepareModelFromCache_1_3 failed: {S(status).name}")
    return prepared


class _Request:
    """Shared-memory pools for one input and one output of a graph."""

    def __init__(self, g: bench.Graph, x: np.ndarray):
        out = g.operands[g.outputs[0]]
        self.out_shape, self.out_dtype = out.dims, NUMPY_DTYPE[out.type]
        nbytes = int(np.prod(out.dims)) * self.out_dtype.itemsize
        self.in_mem, self.out_mem = memory.allocate(x.nbytes), memory.allocate(nbytes)
        memory.map(self.in_mem)[:] = np.ascontiguousarray(x).tobytes()
        self.request = hal.Request(inputs=[hal.RequestArgument(location=hal.DataLocation(0, 0, x.nbytes))],
                                   outputs=[hal.RequestArgument(location=hal.DataLocation(1, 0, nbytes))],
                                   pools=[hal.MemoryPool(hidlMemory=self.in_mem),
                                          hal.MemoryPool(hidlMemory=self.out_mem)])

    def output(self) -> np.ndarray:
        return np.frombuffer(bytes(memory.map(self.out_mem)), self.out_dtype).reshape(self.out_shape).copy()

    def close(self) -> None:
        memory.free(self.in_mem)
        memory.free(self.out_mem)


def _run_sync(prepared: Any, req: _Request) -> float:
    t0 = time.perf_counter()
    st, _, _ = prepared.executeSynchronously_1_3(req.request, hal.MeasureTiming.NO, hal.OptionalTimePoint(),
                                                 hal.OptionalTimeoutDuration())
    if st != S.NONE:
        raise RuntimeError(f"execution failed: {S(st).name}")
    return time.perf_counter() - t0


def _median_time(fn: Callable[[], Any], n: int, clock: Callable[[], float] = time.perf_counter) -> tuple[float, Any]:
    ts, last = [], None
    for _ in range(n):
        t0 = clock()
        last = fn()
        ts.append(clock() - t0)
    return statistics.median(ts), last


def _cold() -> Any:
    """A new front end over a new sample backend, named and versioned as sample-all (its caches share
    the key and version): nothing prepared before, as a prepare in a new process."""
    from nnhal.drivers.sample import sample_device

    return sample_device("sample-all")


def _read_and_hash(fds: list[int]) -> None:
    """What any authenticated load must do at least: every cache file read once (pread into a fresh
    buffer) and hashed once (SHA-256): the disk's speed for ``nnhal bench --cache``."""
    for fd in fds:
        buf = bytearray(os.fstat(fd).st_size)
        memory.pread_into(fd, memoryview(buf))
        hashlib.sha256(buf).digest()


def conv_chain(layers: int = 16, channels: int = 256, size: int = 8, seed: int = 0) -> bench.Graph:
    """``layers`` quantized 3x3 CONV_2D (SAME, uint8, ``channels`` in and out) on a
    ``size`` x ``size`` input: 16 x 256 x 256 x 9 = 9.4 MB of uint8 weights."""
    from nnhal.hal import OperandType as OT
    from nnhal.hal import OperationType
    from nnhal.tools.bench.lowering import Graph, Opnd

    rng = np.random.default_rng(seed)
    g = Graph()
    q8 = OT.TENSOR_QUANT8_ASYMM
    cur = g.add(Opnd(q8, (1, size, size, channels), 0.05, 128))
    g.inputs.append(cur)
    for _ in range(layers):
        w = g.add(Opnd(q8, (channels, 3, 3, channels), 0.002, 127,
                       rng.integers(0, 256, (channels, 3, 3, channels)).astype(np.uint8)))
        b = g.add(Opnd(OT.TENSOR_INT32, (channels,), g.operands[cur].scale * 0.002, 0,
                       rng.integers(-2000, 2000, channels).astype(np.int32)))
        y = g.add(Opnd(q8, (1, size, size, channels), 0.5, 128))
        g.ops.append((OperationType.CONV_2D, [cur, w, b, g.i32(1), g.i32(1), g.i32(1), g.i32(0)], [y]))
        cur = y
    g.outputs.append(cur)
    return g


def cache_bench(classes: int, prepares: int, loads: int, out: Any = None, size: int = 224,
                which: str = "mobilenet") -> dict:
    out = out or sys.stdout
    if which == "convchain":
        g = conv_chain()
        x = np.random.default_rng(0).integers(0, 256, g.operands[g.inputs[0]].dims).astype(np.uint8)
        title = f"a chain of 16 quantized 3x3 CONV_2D layers (256 channels, {g.operands[g.inputs[0]].dims})"
    else:
        net = bench.mobilenet_v1(size, 1.0, classes)
        x = np.random.default_rng(0).random((1, size, size, 3), np.float32)
        g = bench.lower(net, quant=True, ranges=bench.calibrate(net, x))
        title = f"{net.name} quant8, {classes} classes"
    model = bench.to_model(g)
    const_mb = (len(model.operandValues) + sum(p.size for p in model.pools)) / 1e6
    dev = nnhal.get_device("sample-all")
    token = bytes(range(32))
    with tempfile.TemporaryDirectory(prefix="nnhal-cache-bench-") as d:
        fds = [os.open(os.path.join(d, n), os.O_RDWR | os.O_CREAT, 0o600) for n in ("model", "data")]
        req = _Request(g, x)
        try:
            mc, dc = [hal.Handle(fds=[fds[0]])], [hal.Handle(fds=[fds[1]])]
            # NOTE: each preparation on a new front end over the sample backend: a device keeps the models it
            # prepared lately (nnhal.driver.prepared_states) and would not validate nor compile this one again
            t_prep, fresh = _median_time(lambda: _prepare(_cold(), model), prepares)
            c_prep, _ = _median_time(lambda: _prepare(_cold(), model), prepares, clock=time.process_time)
            t_save, _ = _median_time(lambda: _prepare(_cold(), model, model_cache=mc, data_cache=dc, token=token), 1)
            sizes = [os.fstat(fd).st_size / 1e6 for fd in fds]
            t_load, loaded = _median_time(lambda: _load(dev, mc, dc, token), loads)
            t_read, _ = _median_time(lambda: _read_and_hash(fds), loads)
            c_load, _ = _median_time(lambda: _load(dev, mc, dc, token), loads, clock=time.process_time)
            c_read, _ = _median_time(lambda: _read_and_hash(fds), loads, clock=time.process_time)
            first_fresh = _run_sync(fresh, req)
            y_fresh = req.output()
            memory.map(req.out_mem)[:] = b"\0" * req.out_mem.size
            first_loaded = _run_sync(loaded, req)  # NOTE: builds the filter matrices the load left to it
            same = bool(np.array_equal(req.output(), y_fresh))
            # NOTE: interleaved, so that load on the machine hits both alike
            runs: dict[str, list[float]] = {"fresh": [], "loaded": []}
            for _ in range(3):
                runs["fresh"].append(_run_sync(fresh, req))
                runs["loaded"].append(_run_sync(loaded, req))
            exec_fresh, exec_loaded = statistics.median(runs["fresh"]), statistics.median(runs["loaded"])
        finally:
            req.close()
            for fd in fds:
                os.close(fd)
            for m in model.pools:
                memory.free(m)
    ratio = t_prep / t_load
    print(f"model: {title}, {len(g.ops)} operations, {const_mb:.1f} MB of constants", file=out)
    print(f"cache files: model {sizes[0] * 1000:.0f} KB, data {sizes[1]:.1f} MB", file=out)
    print(f"prepareModel_1_3            {t_prep * 1e3:8.1f} ms  (median of {prepares})", file=out)
    print(f"prepareModel_1_3 + save     {t_save * 1e3:8.1f} ms", file=out)
    print(f"prepareModelFromCache_1_3   {t_load * 1e3:8.1f} ms  (median of {loads})", file=out)
    print(f"speed-up of loading from cache: {ratio:.1f}x (target >= 10x): {'met' if ratio >= 10 else 'MISSED'}",
          file=out)
    disk = c_load / c_read
    print(f"CPU: prepare {c_prep * 1e3:.1f} ms, load {c_load * 1e3:.1f} ms: {c_prep / c_load:.1f}x", file=out)
    print(f"reading and hashing the cache files (pread, SHA-256): {t_read * 1e3:.1f} ms; CPU: load {c_load * 1e3:.1f} "
          f"ms, read and hash {c_read * 1e3:.1f} ms: load {disk:.1f}x of that (target <= 2x): "
          f"{'met' if disk <= 2 else 'MISSED'}", file=out)
    print(f"output of the cache-loaded model equals the freshly prepared one: {'yes' if same else 'NO'}", file=out)
    print(f"execution: freshly prepared {exec_fresh * 1e3:.1f} ms, cache-loaded {exec_loaded * 1e3:.1f} ms", file=out)
    print(f"first execution: freshly prepared {first_fresh * 1e3:.1f} ms, cache-loaded {first_loaded * 1e3:.1f} ms; "
          f"load + first execution {(t_load + first_loaded) * 1e3:.1f} ms "
          f"({(t_prep + first_fresh) / (t_load + first_loaded):.1f}x faster than prepare + first execution)", file=out)
    return {"prepare_s": t_prep, "prepare_cpu_s": c_prep, "save_s": t_save, "load_s": t_load, "ratio": ratio,
            "same": same,
            "read_hash_s": t_read, "load_cpu_s": c_load, "read_hash_cpu_s": c_read,
            "constants_mb": const_mb, "first_fresh_s": first_fresh, "first_loaded_s": first_loaded}


def priority_bench(samples: int, backlog: int, out: Any = None, size: int = 128) -> dict:
    out = out or sys.stdout
    net = bench.mobilenet_v1(size, 0.5, 100)
    x = np.random.default_rng(0).random((1, size, size, 3), np.float32)
    g = bench.lower(net, quant=False)
    model = bench.to_model(g)
    dev = nnhal.get_device("sample-all")
    high = _prepare(dev, model, hal.Priority.HIGH)
    low = _prepare(dev, model, hal.Priority.LOW)
    req_h, req_l, req_bg = _Request(g, x), _Request(g, x), _Request(g, x)
    stop = threading.Event()
    filler: threading.Thread | None = None
    inflight = threading.Semaphore(backlog)
    launched = [0]

    class _Again(hal.ExecutionCallback):
        def notify_1_3(self, status: Any, shapes: list, timing: Any) -> None:
            inflight.release()

    def keep_saturated() -> None:
        while not stop.is_set():
            if not inflight.acquire(timeout=0.05):
                continue
            st = low.execute_1_3(req_bg.request, hal.MeasureTiming.NO, hal.OptionalTimePoint(),
                                 hal.OptionalTimeoutDuration(), _Again())
            if st != S.NONE:
                inflight.release()
                time.sleep(0.001)
            else:
                launched[0] += 1

    try:
        for _ in range(3):
            _run_sync(high, req_h)  # warm-up
        idle = statistics.median(_run_sync(high, req_h) for _ in range(samples))
        filler = threading.Thread(target=keep_saturated, name="bench-low-load", daemon=True)
        filler.start()
        time.sleep(0.3)
        loaded_high, loaded_low = [], []
        for _ in range(samples):
            loaded_high.append(_run_sync(high, req_h))
            loaded_low.append(_run_sync(low, req_l))
        stats = dev.scheduler.stats()
    finally:
        stop.set()
        if filler is not None:
            filler.join(10)
        for r in (req_h, req_l):
            r.close()
    # NOTE: the background pools are freed once the backlog has drained
    for _ in range(backlog):
        inflight.acquire(timeout=30)
    req_bg.close()
    for m in model.pools:
        memory.free(m)
    h, lo = statistics.median(loaded_high), statistics.median(loaded_low)
    print(f"model: {net.name} float32 ({len(g.ops)} operations); driver: {stats['workers']} workers, "
          f"queue bound {stats['max_queued']}; LOW backlog kept at {backlog} queued executions "
          f"({launched[0]} launched)", file=out)
    print(f"HIGH execution, idle driver        {idle * 1e3:8.2f} ms  (median of {samples})", file=out)
    print(f"HIGH execution, LOW backlog        {h * 1e3:8.2f} ms  ({h / idle:.1f}x idle)", file=out)
    print(f"LOW execution, same LOW backlog    {lo * 1e3:8.2f} ms  ({lo / idle:.1f}x idle, {lo / h:.1f}x HIGH)",
          file=out)
    print(f"LOW work parked at an operation boundary for HIGH work: {stats.get('preempted', 0)} times", file=out)
    return {"idle_s": idle, "high_s": h, "low_s": lo}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="nnhal bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", action="store_true", help="prepareModel_1_3 versus prepareModelFromCache_1_3")
    ap.add_argument("--priority", action="store_true", help="HIGH versus LOW latency on a saturated driver")
    ap.add_argument("--classes", type=int, default=7000,
                    help="--cache: width of the fully connected head (default 7000: > 10 MB of constants)")
    ap.add_argument("--size", type=int, default=0,
                    help="input height and width (default 224 for --cache, 128 for --priority)")
    ap.add_argument("--cache-models", default="convchain,mobilenet",
                    help="--cache: convchain (16 quantized 3x3 CONV_2D, 9.4 MB of uint8 weights), mobilenet "
                         "(MobileNet v1 quant8 with a --classes head); default both")
    ap.add_argument("--prepares", type=int, default=3, help="--cache: preparations timed (default 3)")
    ap.add_argument("--loads", type=int, default=7, help="--cache: loads from cache timed (default 7)")
    ap.add_argument("--samples", type=int, default=15, help="--priority: executions timed per case (default 15)")
    ap.add_argument("--backlog", type=int, default=16, help="--priority: LOW executions kept queued (default 16)")
    ap.add_argument("--threads", type=int, default=1,
                    help="BLAS threads (default 1: the driver's workers are the parallelism, and a machine "
                         "shared with other work gives stable numbers)")
    ap.add_argument("--strict", action="store_true", help="exit 1 when the cache target (>= 10x) is missed")
    args = ap.parse_args(argv)
    if args.threads > 0 and not bench.set_blas_threads(args.threads):
        print("cannot set the BLAS thread count; using numpy's default", file=sys.stderr)
    print(f"BLAS threads: {bench.blas_threads() or 'unknown'}; cpus: {os.cpu_count()}; "
          f"load average: {os.getloadavg()[0]:.2f}")
    rc = 0
    if args.cache:
        for k, which in enumerate(w.strip() for w in args.cache_models.split(",") if w.strip()):
            if which not in ("convchain", "mobilenet"):
                ap.error(f"unknown cache model {which!r}")
            if k:
                print()
            r = cache_bench(args.classes, args.prepares, args.loads, size=args.size or 224, which=which)
            if args.strict and (r["ratio"] < 10 or not r["same"]):
                rc = 1
    if args.priority:
        if args.cache:
            print()
        priority_bench(args.samples, args.backlog, size=args.size or 128)
    return rc


if __name__ == "__main__":
    sys.exit(main())
