"""In-process latency of a burst execution (``nnhal.burst.BurstController``,
HAL 1.2 ``configureExecutionBurst``) next to ``executeSynchronously_1_3``, for
a one-operation model (ADD of two small float32 tensors): median and p99 in
microseconds.  ``nnhal bench --ipc`` prints it beside the service figures;
``python -m nnhal.tools.burstbench`` prints it alone.

Public API only (``nnhal.get_device``, ``nnhal.burst``, ``nnhal.memory``), so
it measures any device, in process or a service proxy.
"""

from __future__ import annotations

import argparse
import struct
import time
from typing import Any, Callable, Optional

import numpy as np

import nnhal
from nnhal import hal
from nnhal.platform import memory as hal_memory
from nnhal.runtime.burst import BurstController

S = hal.ErrorStatus
T = hal.OperandType
L = hal.OperandLifeTime


def add_model(n: int = 4) -> hal.Model:
    """out = a + b, float32 [n], no activation."""
    t = [hal.Operand(type=T.TENSOR_FLOAT32, dimensions=[n], numberOfConsumers=1, lifetime=L.SUBGRAPH_INPUT),
         hal.Operand(type=T.TENSOR_FLOAT32, dimensions=[n], numberOfConsumers=1, lifetime=L.SUBGRAPH_INPUT),
         hal.Operand(type=T.INT32, numberOfConsumers=1, lifetime=L.CONSTANT_COPY, location=hal.DataLocation(0, 0, 4)),
         hal.Operand(type=T.TENSOR_FLOAT32, dimensions=[n], lifetime=L.SUBGRAPH_OUTPUT)]
    main = hal.Subgraph(operands=t, operations=[hal.Operation(hal.OperationType.ADD, [0, 1, 2], [3])],
                        inputIndexes=[0, 1], outputIndexes=[3])
    return hal.Model(main=main, operandValues=struct.pack("<i", 0))


def _prepare(device: Any, model: hal.Model) -> Any:
    cb = hal.PreparedModelCallback()
    device.prepareModel_1_3(model, hal.ExecutionPreference.FAST_SINGLE_ANSWER, hal.Priority.MEDIUM,
                            hal.OptionalTimePoint(), [], [], bytes(32), cb)
    status, prepared = cb.wait(60)
    if status != S.NONE:
        raise RuntimeError(f"prepareModel_1_3 gave {S(status).name}")
    return prepared


def _timed(fn: Callable[[], Any], runs: int) -> np.ndarray:
    out = np.empty(runs)
    clock = time.perf_counter_ns
    for k in range(runs):
        t0 = clock()
        fn()
        out[k] = clock() - t0
    return out / 1000.0


def measure(device: Any = None, runs: int = 2000, rounds: int = 5, warmup: int = 200, n: int = 4) -> dict:
    """{"sync": microseconds, "burst": microseconds} (arrays of ``runs``
    samples), measured in ``rounds`` alternating rounds so that both see the
    same machine load."""
    device = device or nnhal.get_device("sample-all")
    prepared = _prepare(device, add_model(n))
    nbytes = 4 * n
    a, b = hal_memory.allocate(2 * nbytes), hal_memory.allocate(nbytes)
    view = hal_memory.map(a)
    view[:] = np.arange(2 * n, dtype=np.float32).tobytes()
    view.release()
    request = hal.Request(inputs=[hal.RequestArgument(location=hal.DataLocation(0, 0, nbytes)),
                                  hal.RequestArgument(location=hal.DataLocation(0, nbytes, nbytes))],
                          outputs=[hal.RequestArgument(location=hal.DataLocation(1, 0, nbytes))],
                          pools=[hal.MemoryPool(hidlMemory=a), hal.MemoryPool(hidlMemory=b)])
    burst = BurstController(prepared)
    no = hal.MeasureTiming.NO

    def sync() -> None:
        if prepared.executeSynchronously_1_3(request, no, hal.OptionalTimePoint(), hal.OptionalTimeoutDuration())[0]:
            raise RuntimeError("synchronous execution failed")

    def by_burst() -> None:
        if burst.execute(request, no)[0]:
            raise RuntimeError("burst execution failed")

    fns = {"sync": sync, "burst": by_burst}
    try:
        for fn in fns.values():
            _timed(fn, warmup)
        samples: dict[str, list] = {k: [] for k in fns}
        per_round = max(1, runs // rounds)
        for _ in range(rounds):
            for k, fn in fns.items():
                samples[k].append(_timed(fn, per_round))
        out = hal_memory.map(b)
        got = np.frombuffer(bytes(out), np.float32)
        out.release()
        expected = np.arange(n, dtype=np.float32) + np.arange(n, 2 * n, dtype=np.float32)
        if not np.array_equal(got, expected):
            raise RuntimeError(f"wrong sum: {got} != {expected}")
        return {k: np.concatenate(v) for k, v in samples.items()}
    finally:
        burst.close()
        hal_memory.free(a)
        hal_memory.free(b)


def summary(results: dict) -> list[str]:
    """One line per mode: median and p99 (us), and the burst/sync ratio."""
    lines = []
    for k, v in results.items():
        lines.append(f"in-process {k:6s} median {np.median(v):8.1f} us   p99 {np.percentile(v, 99):8.1f} us")
    if "sync" in results and "burst" in results:
        ratio = np.median(results["burst"]) / np.median(results["sync"])
        lines.append(f"in-process burst / sync (median): {ratio:.2f}")
    return lines


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m nnhal.tools.burstbench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--device", default="sample-all")
    args = ap.parse_args(argv)
    for line in summary(measure(nnhal.get_device(args.device), runs=args.runs)):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
