"""Where the CPU time of a small quantized model goes on the reference
executor, against the floor numpy sets:

    python -m nnhal.tools.planbench /work/shared/models/kws_mobilenetv2_int8.tflite [-v]

Per operation type: the best CPU time of each operation's ``execute`` run
alone (warm caches), and for the quantized CONV_2D / DEPTHWISE_CONV_2D /
FULLY_CONNECTED layers with a static plan (``nnhal.ops.conv._Plan``) the
requantization path each takes; the executor's own cost per step (every
kernel replaced by one returning its recorded outputs); a whole execution;
and the floor: the CPU time of one in-place numpy ufunc call on each plan's
accumulator (a plan run makes about 8-13 numpy calls: the conversion of its
input, [the im2col copy], the GEMM or einsum, the output array, multiply, add,
[3 for the negative-tie stage, 3 more on the float64 path], clip, the cast,
[the int8 bit flip]).  ``-v``: every planned layer.
"""

from __future__ import annotations

import argparse
import sys
import time
import timeit
from collections import defaultdict
from dataclasses import replace
from typing import Any, Callable, Optional

import numpy as np


def _best(fn: Callable[[], Any], number: int, repeat: int = 5) -> float:
    """Best CPU seconds per call of ``fn`` over ``repeat`` rounds of ``number`` calls."""
    t = timeit.Timer(fn, timer=time.process_time)
    return min(t.repeat(repeat=repeat, number=number)) / number


def measure(path: str, runs: int = 200) -> dict:
    """The figures of the module doc for one .tflite model (sample-all's executor, 1 BLAS thread)."""
    from nnhal.delegate.run import make_inputs
    from nnhal.engine import executor as exmod
    from nnhal.platform import memory as hal_memory
    from nnhal.tflite import loader

    model, io = loader.load(path)
    pools = [hal_memory.PrivateCopy(m) for m in model.pools]
    ex = exmod.Executor(model, [p.view for p in pools])
    x = make_inputs(io)
    ex.run(x)
    run_s = _best(lambda: ex.run(x), max(1, runs // 10))
    # each step's context, recorded from one execution
    ctxs: list = []
    real = exmod.ExecContext

    class _Recording(real):  # type: ignore[misc, valid-type]
        def __init__(self, *a: Any, **k: Any) -> None:
            super().__init__(*a, **k)
            ctxs.append(self)

    exmod.ExecContext = _Recording
    try:
        ex.run(x)
    finally:
        exmod.ExecContext = real
    steps = ex.graphs[0].steps
    by_type: dict = defaultdict(lambda: [0, 0.0])
    layers = []
    for step, ctx in zip(steps, ctxs):
        fn = step.opdef.execute
        t = _best(lambda fn=fn, ctx=ctx: fn(ctx), runs)
        by_type[step.opdef.name][0] += 1
        by_type[step.opdef.name][1] += t
        plan = getattr(step.state, "plan", None)
        if plan is not None:
            acc = np.ones(plan.rq.shape, np.float32)
            floor = _best(lambda acc=acc: np.multiply(acc, np.float32(1), out=acc), runs)
            layers.append({"op": step.opdef.name, "in": plan.in_shape, "out": plan.out_shape, "mode": plan.rq.mode,
                           "neg_tie": plan.rq.ncorr is not None, "fix": plan.rq.fix is not None, "us": t * 1e6,
                           "ufunc_floor_us": floor * 1e6})
    # the executor alone: kernels replaced by their recorded outputs
    recorded = []
    for step in steps:
        orig = step.opdef.execute
        box: list = []

        def rec(ctx: Any, orig: Any = orig, box: list = box) -> Any:
            out = orig(ctx)
            box.append(out)
            return out

        recorded.append(box)
        step.opdef = replace(step.opdef, execute=rec)
    ex.run(x)
    for step, box in zip(steps, recorded):
        step.opdef = replace(step.opdef, execute=lambda ctx, outs=box[-1]: outs)
    exec_s = _best(lambda: ex.run(x), max(1, runs // 4))
    return {"run_us": run_s * 1e6, "executor_us_per_step": exec_s * 1e6 / len(steps), "steps": len(steps),
            "by_type": {k: {"count": n, "us": t * 1e6} for k, (n, t) in by_type.items()}, "layers": layers}


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m nnhal.tools.planbench", description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="a .tflite file")
    ap.add_argument("--runs", type=int, default=200, help="calls per timing round (default 200)")
    ap.add_argument("-v", "--verbose", action="store_true", help="every planned layer")
    args = ap.parse_args(argv)
    from nnhal.tools.bench.tuning import set_blas_threads

    set_blas_threads(1)
    try:
        r = measure(args.model, max(1, args.runs))
    except (OSError, ValueError) as e:
        print(f"{args.model}: {e}", file=sys.stderr)
        return 2
    ops_us = sum(v["us"] for v in r["by_type"].values())
    print(f"{args.model}: execution {r['run_us']:.0f} us CPU; operations alone {ops_us:.0f} us; "
          f"executor {r['executor_us_per_step']:.2f} us per step x {r['steps']}")
    for name, v in sorted(r["by_type"].items(), key=lambda kv: -kv[1]["us"]):
        print(f"  {name:22s} {v['count']:3d}  {v['us']:8.1f} us  {v['us'] / v['count']:6.1f} us each")
    lay = r["layers"]
    if lay:
        modes: dict = defaultdict(list)
        for L in lay:
            modes[(L["op"], L["mode"], L["neg_tie"])].append(L)
        print(f"  planned layers: {len(lay)}; one in-place ufunc on their accumulators: "
              f"{np.mean([L['ufunc_floor_us'] for L in lay]):.2f} us on average")
        for (op, mode, neg), ls in sorted(modes.items()):
            print(f"    {op:18s} {mode} {'negative-tie stage' if neg else '':18s} {len(ls):3d} layers, "
                  f"{np.mean([L['us'] for L in ls]):6.1f} us each")
        if args.verbose:
            for L in lay:
                print(f"    {L['op']:18s} {str(L['in']):18s} -> {str(L['out']):18s} {L['mode']}"
                      f"{' +tie' if L['neg_tie'] else ''}{' +fix' if L['fix'] else ''} {L['us']:6.1f} us "
                      f"(ufunc floor {L['ufunc_floor_us']:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
