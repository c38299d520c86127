"""The ``nnhal bench`` report and command line."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import numpy as np

from nnhal.ops.quant import quantize
from nnhal.tools.bench.calibration import RegistryRunner, calibrate
from nnhal.tools.bench.lowering import lower
from nnhal.tools.bench.timing import driver_latency, layer_stats, time_it
from nnhal.tools.bench.tuning import blas_threads, set_blas_threads, tune_malloc
from nnhal.tools.bench.zoo import Net, Op, T, mobilenet_v1, mobilenet_v2

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
        lat = time_it(lambda: runner.run(x), runs)
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
    ap = argparse.ArgumentParser(prog="nnhal bench", description="How fast the sample-all driver runs real "
                                 "networks (MobileNet v1 and v2, float32 and quant8).")
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
    ap.add_argument("--overhead", action="store_true",
                    help="only the per-operation overhead line (a chain of 100 quantized ADDs, target < 10 us)")
    args = ap.parse_args(argv)
    builders = {"v1": mobilenet_v1, "v2": mobilenet_v2}
    if args.tune_malloc and not tune_malloc():
        print("cannot tune malloc", file=sys.stderr)
    if args.threads > 0 and not set_blas_threads(args.threads):
        print("cannot set the BLAS thread count; using numpy's default", file=sys.stderr)
    from nnhal.ops import conv_kernels

    print(f"BLAS threads: {blas_threads() or 'unknown'}; kernel threads: {conv_kernels.THREADS}; "
          f"cpus: {os.cpu_count()}; load average: {os.getloadavg()[0]:.2f}")
    from nnhal.tools.bench import overhead

    per_op = overhead.report(sys.stdout)
    if args.overhead:
        return 1 if (args.strict and per_op["median_us"] >= overhead.TARGET_US) else 0
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
