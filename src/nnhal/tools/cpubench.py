"""CPU time per execution of .tflite models on a HAL device and on LiteRT's
builtin kernels, in one process, and their ratio:

    python -m nnhal.tools.cpubench /work/shared/models/kws_mobilenetv2_int8.tflite [--runs 15]

CPU time (``time.process_time``, every thread of the process) is steady on a
loaded machine where wall-clock time is not; the best of ``--runs``
executions is kept for each side, measured alternately so that the load hits
both alike.  LiteRT runs with one thread (``--threads``) and numpy's BLAS
with as many (``--blas-threads``, default 1): one core each, as compared.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Callable, Optional, Sequence


def best_cpu_time(fns: Sequence[Callable[[], Any]], runs: int) -> list[float]:
    """The best CPU time of each function over ``runs`` alternating rounds."""
    best = [float("inf")] * len(fns)
    for _ in range(runs):
        for k, fn in enumerate(fns):
            t0 = time.process_time()
            fn()
            best[k] = min(best[k], time.process_time() - t0)
    return best


def bench_model(path: str, device: str, runs: int, threads: int) -> dict:
    """{"hal_s", "litert_s", "ratio"} of one model (litert_s None when LiteRT is unavailable)."""
    import nnhal
    from nnhal.delegate.run import HalSession, LiteRT, make_inputs
    from nnhal.tflite import loader

    model, io = loader.load(path)
    session = HalSession(nnhal.get_device(device), model, io)
    inputs = make_inputs(io)
    try:
        session.run(inputs)  # NOTE: first execution (lazy work, caches) not timed
        lite: Optional[Any] = None
        try:
            lite = LiteRT(path, threads=threads)
            lite.run(inputs)
        except Exception as e:  # noqa: BLE001 - no LiteRT: the HAL figure alone
            print(f"{path}: LiteRT unavailable ({type(e).__name__}: {e})", file=sys.stderr)
            lite = None
        fns = [lambda: session.run(inputs)] + ([lambda: lite.run(inputs)] if lite is not None else [])
        times = best_cpu_time(fns, runs)
    finally:
        session.close()
    hal_s = times[0]
    lite_s = times[1] if len(times) > 1 else None
    return {"hal_s": hal_s, "litert_s": lite_s, "ratio": None if not lite_s else hal_s / lite_s}


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m nnhal.tools.cpubench", description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+", help=".tflite files")
    ap.add_argument("--device", default="sample-all", help="HAL device (default sample-all)")
    ap.add_argument("--runs", type=int, default=15, help="executions timed per side (default 15)")
    ap.add_argument("--threads", type=int, default=1, help="LiteRT threads (default 1)")
    ap.add_argument("--blas-threads", type=int, default=1, help="numpy BLAS threads (default 1; 0: leave numpy's)")
    args = ap.parse_args(argv)
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    if args.blas_threads > 0:
        from nnhal.tools.bench.tuning import set_blas_threads

        if not set_blas_threads(args.blas_threads):
            print("cannot set the BLAS thread count; using numpy's default", file=sys.stderr)
    rc = 0
    for path in args.models:
        try:
            r = bench_model(path, args.device, args.runs, args.threads)
        except (OSError, ValueError) as e:
            print(f"{path}: {e}", file=sys.stderr)
            rc = 2
            continue
        lite = "-" if r["litert_s"] is None else f"{r['litert_s'] * 1e3:.2f} ms"
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.1f}x"
        print(f"{path}: {args.device} {r['hal_s'] * 1e3:.2f} ms CPU, LiteRT builtin {lite}, ratio {ratio}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
