"""What one operation costs beyond its arithmetic: a chain of quantized ADDs
of 1x16 int8 tensors (the arithmetic is a 16-entry table lookup), executed
through the sample-all driver (``executeSynchronously_1_3``).  The figure is
(time of the N-operation chain - time of a 1-operation chain) / (N - 1): the
per-operation cost of the executor step and the kernel's fixed part, the
execution's own fixed cost taken out.  The two chains run in alternation,
each round a block of executions of each, timed in CPU time of the process
(``time.process_time``: a core taken away by the machine's other work is not
the operation's); the figure is the median of the rounds' differences, and
"best" the difference of the two best blocks.  Target: under 10 us per
operation."""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np

from nnhal.hal import OperandType, OperationType
from nnhal.tools.bench.lowering import Graph, Opnd
from nnhal.tools.bench.timing import driver_runner

Q8S = OperandType.TENSOR_QUANT8_ASYMM_SIGNED
TARGET_US = 10.0


def add_chain(n: int, width: int = 16) -> Graph:
    """x -> ADD(x, c) -> ADD(., c) ... n times, int8 (scale 0.05, zero point -3; c: scale 0.02, zero point 1)."""
    g = Graph()
    x = g.add(Opnd(Q8S, (1, width), 0.05, -3))
    g.inputs.append(x)
    c = g.add(Opnd(Q8S, (1, width), 0.02, 1, np.arange(-width // 2, width - width // 2, dtype=np.int8)))
    act = g.i32(0)
    cur = x
    for _ in range(n):
        y = g.add(Opnd(Q8S, (1, width), 0.05, -3))
        g.ops.append((OperationType.ADD, [cur, c, act], [y]))
        cur = y
    g.outputs.append(cur)
    return g


def per_op_overhead(n: int = 100, runs: int = 200) -> dict[str, Any]:
    """Median and best microseconds per operation of the ADD chain (see the module doc)."""
    x = np.random.default_rng(0).integers(-128, 128, (1, 16)).astype(np.int8)
    rounds = max(3, min(25, runs // 8))
    block = max(1, runs // rounds)
    with driver_runner(add_chain(n), x) as (long, _), driver_runner(add_chain(1), x) as (short, _):
        long(), short()  # NOTE: first executions (lazy work) not timed
        lt: list[float] = []
        st: list[float] = []
        for _ in range(rounds):
            for fn, times in ((long, lt), (short, st)):
                t0 = time.process_time()
                for _ in range(block):
                    fn()
                times.append((time.process_time() - t0) / block)
    per_round = sorted((a - b) / (n - 1) for a, b in zip(lt, st))
    return {"ops": n, "best_us": (min(lt) - min(st)) / (n - 1) * 1e6,
            "median_us": statistics.median(per_round) * 1e6,
            "execution_us": statistics.median(st) * 1e6, "chain_ms": statistics.median(lt) * 1e3}


def report(out: Any, n: int = 100, runs: int = 200) -> dict[str, Any]:
    r = per_op_overhead(n, runs)
    ok = r["median_us"] < TARGET_US
    print(f"per-operation overhead: {r['median_us']:.1f} us per operation in CPU time (best {r['best_us']:.1f}), a chain of "
          f"{n} quantized ADDs of 1x16 int8 ({r['chain_ms']:.2f} ms; one ADD alone {r['execution_us']:.0f} us); "
          f"target < {TARGET_US:.0f} us: {'met' if ok else 'MISSED'}", file=out)
    return r
