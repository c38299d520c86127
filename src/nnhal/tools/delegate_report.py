"""Per model and Android API level, how the NNAPI delegate's plan runs it:
``python -m nnhal.tools.delegate_report [MODEL.tflite ...] [--plan delegate|max|both] [--api 27,...,35]``
(API 31-35: feature levels 5-8, the NNAPI partitions as AIDL v1-v4 through the device's AIDL face).

Each row: the NNAPI partitions' interface (HAL 1.0-1.3, AIDL v1-v4), NNAPI
partitions, operators on NNAPI / on the CPU, the top reasons
(root causes with counts), the largest output error against LiteRT on the
original file (float: relative to the output's range; int8: steps, against
TFLite's reference kernels), and the time split (median of ``--runs`` warm
runs: NNAPI partitions on the device vs LiteRT's CPU partitions).  Models
default to the shared models (``$NNHAL_MODELS`` or ../shared/models).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

import nnhal
from nnhal.delegate.levels import API_LEVELS, check_api
from nnhal.delegate.plan import Options, build_plan
from nnhal.delegate.run import LiteRT, diff, make_inputs
from nnhal.delegate.runner import PlanError, Runner, input_descs, output_descs
from nnhal.tflite.loader import IODescription


def _default_models() -> list[str]:
    root = Path(os.environ.get("NNHAL_MODELS") or Path.cwd() / ".." / "shared" / "models")
    return sorted(str(p) for p in root.glob("*.tflite"))


def row(path: str, plan_kind: str, api: int, device: str, runs: int) -> str:
    try:
        return _row(path, plan_kind, api, device, runs)
    except PlanError as e:  # NOTE: a plan that cannot run (a CPU operator LiteRT lacks) is a row too
        return f"{Path(path).stem:22s} {plan_kind:8s} {api:3d} {'':8s} cannot run: {str(e)[:160]}"


def _row(path: str, plan_kind: str, api: int, device: str, runs: int) -> str:
    plan = build_plan(path, Options(plan=plan_kind, android_api=api, device=device), nnhal.get_device)
    g = plan.graph
    quant = any(g.tensors[k].type in ("int8", "uint8") for op in g.operators for k in op.outputs if k >= 0)
    kernels = "ref" if quant else "builtin"
    x = make_inputs(IODescription(inputs=input_descs(g)), seed=0)
    r = Runner(plan, nnhal.get_device, kernels=kernels)
    try:
        outs = r.run(x)
        nn, cpu = [], []
        for _ in range(runs):
            r.run(x)
            nn.append(sum(t for p, t in zip(plan.partitions, r.times) if p.where == "nnapi"))
            cpu.append(sum(t for p, t in zip(plan.partitions, r.times) if p.where == "cpu"))
    finally:
        r.close()
    try:
        ref = LiteRT(g.original, kernels=kernels).run(x)
        ds = [diff(a, b, d) for a, b, d in zip(outs, ref, output_descs(g))]
        err = (f"{max(d.steps for d in ds)} step(s)" if all(d.quantized for d in ds)
               else f"{max(d.rel for d in ds):.1e} of range")
    except (RuntimeError, ValueError):
        err = "no LiteRT ref"  # NOTE: LiteRT cannot run the original (a custom operator it lacks)
    on = sum(1 for o in plan.operators if o.where == "nnapi")
    top = "; ".join(f"{n}x {', '.join(names)}: {reason[:70]}"
                    for reason, n, names in plan.causes()[:2]) or "-"
    t_nn, t_cpu = statistics.median(nn), statistics.median(cpu)
    return (f"{Path(path).stem:22s} {plan_kind:8s} {api:3d} {plan.version.label:8s} {len(plan.nnapi):4d} {on:5d} "
            f"{len(plan.operators) - on:5d} "
            f"{err:>15s} {t_nn * 1e3:9.2f} {t_cpu * 1e3:9.2f}  {top}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m nnhal.tools.delegate_report", description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", help="the .tflite files (default: the shared models)")
    ap.add_argument("--plan", choices=["delegate", "max", "both"], default="both")
    ap.add_argument("--api", default=",".join(map(str, API_LEVELS)), help="API levels, comma-separated (27-35)")
    ap.add_argument("--device", default="sample-all", help="the NNAPI device")
    ap.add_argument("--runs", type=int, default=3, help="timed runs per row (median)")
    args = ap.parse_args(argv)
    models = args.models or _default_models()
    if not models:
        print("no models (give paths or set NNHAL_MODELS)", file=sys.stderr)
        return 2
    plans = ["delegate", "max"] if args.plan == "both" else [args.plan]
    try:
        apis = [int(a) for a in args.api.split(",")]
        for api in apis:
            check_api(api)
    except ValueError as e:
        print(f"--api {args.api}: {e}", file=sys.stderr)
        return 2
    print(f"{'model':22s} {'plan':8s} {'api':>3s} {'iface':8s} {'nn-p':>4s} {'nnapi':>5s} {'cpu':>5s} {'max error':>15s} "
          f"{'nnapi ms':>9s} {'cpu ms':>9s}  top reasons on the CPU")
    for path in models:
        for kind in plans:
            for api in apis:
                print(row(path, kind, api, args.device, args.runs), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
