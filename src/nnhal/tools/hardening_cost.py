"""What the driver's defences against a hostile client cost, measured.

    python -m nnhal.tools.hardening_cost [--mb 1] [--runs 200]

- SIGBUS safety: one execution (executeSynchronously_1_3 of an ADD with a
  ``--mb`` MB input and output) over pools sealed against shrinking (the
  memfds of :func:`nnhal.memory.allocate`: mapped directly, zero copy) and
  over the same pools unsealed (a client's own memfd: read with ``pread``,
  written with ``pwrite``); the median time per execution of each and the
  difference.
- By-value copies: the driver's own copy of a MobileNet v1 model
  (:func:`nnhal.engine.validation.own_copy`) next to ``copy.deepcopy``, and the
  private copy of a model pool of the same size as MobileNet v1's weights
  (:class:`nnhal.memory.PrivateCopy`).
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
from typing import Any, Callable

import numpy as np

import nnhal
from nnhal import hal
from nnhal.delegate.litert import timed
from nnhal.engine.validation import own_copy
from nnhal.platform import memory

T = hal.OperandType
L = hal.OperandLifeTime


def _median_ms(fn: Callable[[], Any], runs: int) -> float:
    return statistics.median(timed(fn, runs, warmup=1)) * 1e3


def _add_model(n: int) -> hal.Model:
    operands = [
        hal.Operand(type=T.TENSOR_FLOAT32, dimensions=[n], numberOfConsumers=1, lifetime=L.SUBGRAPH_INPUT),
        hal.Operand(type=T.TENSOR_FLOAT32, dimensions=[1], numberOfConsumers=1, lifetime=L.CONSTANT_COPY,
                    location=hal.DataLocation(0, 0, 4)),
        hal.Operand(type=T.INT32, numberOfConsumers=1, lifetime=L.CONSTANT_COPY, location=hal.DataLocation(0, 4, 4)),
        hal.Operand(type=T.TENSOR_FLOAT32, dimensions=[n], lifetime=L.SUBGRAPH_OUTPUT),
    ]
    main = hal.Subgraph(operands=operands, operations=[hal.Operation(hal.OperationType.ADD, [0, 1, 2], [3])],
                        inputIndexes=[0], outputIndexes=[3])
    return hal.Model(main=main, operandValues=np.float32(1.0).tobytes() + np.int32(0).tobytes())


def _unsealed(size: int) -> hal.Memory:
    fd = os.memfd_create("client-unsealed", os.MFD_CLOEXEC)
    os.ftruncate(fd, size)
    return hal.Memory(name="ashmem", handle=hal.Handle(fds=[fd]), size=size)


def pool_cost(mb: float, runs: int) -> tuple[float, float]:
    """(sealed ms, unsealed ms): median executeSynchronously_1_3 time."""
    n = int(mb * (1 << 20)) // 4
    device = nnhal.get_device("sample-all")
    cb = hal.PreparedModelCallback()
    device.prepareModel_1_3(_add_model(n), hal.ExecutionPreference.FAST_SINGLE_ANSWER, hal.Priority.MEDIUM,
                            hal.OptionalTimePoint(), [], [], bytes(32), cb)
    status, prepared = cb.wait()
    if status != hal.ErrorStatus.NONE:
        raise SystemExit(f"prepare failed: {status!r}")
    arg = hal.RequestArgument(location=hal.DataLocation(0, 0, 4 * n))
    out = hal.RequestArgument(location=hal.DataLocation(1, 0, 4 * n))
    result = []
    for make in (memory.allocate, _unsealed):
        pools = [make(4 * n), make(4 * n)]
        os.pwrite(pools[0].handle.fds[0], np.arange(n, dtype=np.float32).tobytes(), 0)
        req = hal.Request(inputs=[arg], outputs=[out], pools=[hal.MemoryPool(hidlMemory=m) for m in pools])

        def once(req: hal.Request = req) -> None:
            st = prepared.executeSynchronously_1_3(req, hal.MeasureTiming.NO, hal.OptionalTimePoint(),
                                                   hal.OptionalTimeoutDuration())[0]
            if st != hal.ErrorStatus.NONE:
                raise SystemExit(f"execution failed: {st!r}")

        result.append(_median_ms(once, runs))
        got = np.frombuffer(os.pread(pools[1].handle.fds[0], 4 * n, 0), np.float32)
        if not np.array_equal(got, np.arange(n, dtype=np.float32) + 1):
            raise SystemExit("wrong result")
        for m in pools:
            memory.free(m)
    return result[0], result[1]


def copy_cost(runs: int) -> dict[str, float]:
    from nnhal.tools import bench

    model = bench.to_model(bench.lower(bench.mobilenet_v1(), quant=False))
    weights = sum(m.size for m in model.pools) + len(model.operandValues)
    pool = memory.allocate(weights)
    figures = {
        "operands": float(len(model.main.operands)),
        "weights_mb": weights / 2**20,
        "own_copy_ms": _median_ms(lambda: own_copy(model), runs),
        "deepcopy_ms": _median_ms(lambda: copy.deepcopy(model), max(5, runs // 4)),
        "private_copy_ms": _median_ms(lambda: memory.PrivateCopy(pool), max(5, runs // 4)),
    }
    memory.free(pool)
    return figures


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=float, default=1.0, help="input and output size in MB (default 1)")
    ap.add_argument("--runs", type=int, default=200, help="executions per pool kind (default 200)")
    args = ap.parse_args(argv)
    sealed, unsealed = pool_cost(args.mb, args.runs)
    print(f"execution, {args.mb:g} MB in + {args.mb:g} MB out, median of {args.runs}:")
    print(f"  sealed pools (mapped, zero copy)   {sealed:8.3f} ms")
    print(f"  unsealed pools (pread / pwrite)    {unsealed:8.3f} ms   "
          f"({unsealed - sealed:+.3f} ms, x{unsealed / sealed:.2f})")
    c = copy_cost(max(10, args.runs // 4))
    print(f"by-value copies, MobileNet v1 ({c['operands']:.0f} operands, {c['weights_mb']:.1f} MB of weights):")
    print(f"  own_copy (structure; bytes shared)  {c['own_copy_ms']:8.3f} ms   "
          f"(copy.deepcopy {c['deepcopy_ms']:.3f} ms)")
    print(f"  PrivateCopy of the weights' pool    {c['private_copy_ms']:8.3f} ms   (once per preparation)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
