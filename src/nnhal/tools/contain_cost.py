"""What containing LiteRT costs (:mod:`nnhal.delegate.contain`), measured.

    python -m nnhal.tools.contain_cost [--runs 50] [--rounds 5] [--against DIR] [--models DIR]

- start-up: a LiteRT process started and ready (it imports numpy and LiteRT), then an interpreter
  created in it on a one-operator model; wall time and the child's CPU time, median of ``--rounds``;
- per execution: for the shared models' plans that have CPU partitions, the plan run ``--runs`` times
  with its CPU partitions in LiteRT's process and in nnhal's (``$NNHAL_LITERT_IN_PROCESS``), interleaved:
  the median execution each way, their difference, the round trips beyond LiteRT's own time
  (``Runner.contained``) per execution and per CPU partition call, and the CPU time per execution of both
  processes against nnhal's alone (the measure a loaded machine leaves intact: there, wall time waits for
  the other process to be scheduled);
- with ``--against DIR`` (another checkout's ``src``, e.g. main's): ``nnhal run MODEL`` and ``nnhal bench
  MODEL`` on every shared model at their defaults, this tree and DIR's in turn for ``--rounds`` rounds:
  the median wall time of ``nnhal run`` and its printed prepare / execute latencies, and ``nnhal bench``'s
  median of each engine, each tree's and the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

import numpy as np

MODELS = ["kws_mobilenetv2_int8", "vww_mobilenetv1_int8", "palm_detection_lite", "mobilenet_v1_f32", "mobilenet_v2_f32"]
# (model, plan, API level): the shared models' plans with CPU partitions (few large ones, many small ones)
PLANS = [("kws_mobilenetv2_int8", "delegate", 27), ("vww_mobilenetv1_int8", "delegate", 29),
         ("palm_detection_lite", "max", 27), ("mobilenet_v1_f32", "delegate", 27)]
ROUND_TRIP_SIZES = (1, 1 << 16, 1 << 18)  # float32 elements in and out: 4 B, 256 KiB, 1 MiB
_DEFAULT_MODELS = Path(__file__).resolve().parents[3] / ".." / "shared" / "models"


def _child_cpu(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def startup(rounds: int) -> dict:
    from nnhal.delegate.contain import ContainedLiteRT, LiteRTProcess
    from nnhal.tflite.writer import Tensor, one_op

    model = one_op("ABS", [Tensor([1])], [Tensor([1])])
    wall, cpu = [], []
    call: dict[int, list[float]] = {n: [] for n in ROUND_TRIP_SIZES}
    for _ in range(rounds):
        t0 = time.perf_counter()
        p = LiteRTProcess()
        try:
            lr = ContainedLiteRT(p, model, label="m")
            t1 = time.perf_counter()
            cpu.append(_child_cpu(p.proc.pid))
            for n in ROUND_TRIP_SIZES:
                x = [np.ones(n, np.float32)]
                lr.run(x)
                ts = []
                for _ in range(100):
                    t = time.perf_counter()
                    lr.run(x)
                    ts.append(time.perf_counter() - t - lr.seconds)
                call[n].append(statistics.median(ts))
        finally:
            p.close()
        wall.append(t1 - t0)
    return {"start_ms": statistics.median(wall) * 1e3, "start_cpu_ms": statistics.median(cpu) * 1e3,
            "round_trip_us": {n * 4: statistics.median(v) * 1e6 for n, v in call.items()}}


def per_execution(models: Path, runs: int) -> list[dict]:
    import nnhal
    from nnhal.delegate import contain, make_plan
    from nnhal.delegate.run import make_inputs
    from nnhal.delegate.runner import Runner, input_descs
    from nnhal.tflite.loader import IODescription

    out = []
    for name, plan_kind, api in PLANS:
        path = models / f"{name}.tflite"
        if not path.exists():
            continue
        plan = make_plan(str(path), plan=plan_kind, android_api=api)
        parts = [p for p in plan.partitions if p.where == "cpu" and p.load_ops and p.outputs]
        x = make_inputs(IODescription(inputs=input_descs(plan.graph)))
        runners = {}
        for mode in ("contained", "in process"):
            os.environ[contain.IN_PROCESS_ENV] = "1" if mode == "in process" else "0"
            runners[mode] = Runner(plan, nnhal.get_device)
        os.environ.pop(contain.IN_PROCESS_ENV, None)
        times: dict[str, list[float]] = {m: [] for m in runners}
        cpu = dict.fromkeys(runners, 0.0)
        trips: list[float] = []
        try:
            for r in runners.values():
                r.run(x)
            child = runners["contained"].litert_process()
            child_cpu = _child_cpu(child.proc.pid)
            for _ in range(runs):  # NOTE: interleaved, so machine load touches both alike
                for mode, r in runners.items():
                    c0, t0 = time.process_time(), time.perf_counter()
                    r.run(x)
                    times[mode].append(time.perf_counter() - t0)
                    cpu[mode] += time.process_time() - c0
                    if mode == "contained":
                        trips.append(r.contained)
            cpu["contained"] += _child_cpu(child.proc.pid) - child_cpu
        finally:
            for r in runners.values():
                r.close()
        med = {m: statistics.median(t) * 1e3 for m, t in times.items()}
        out.append({"model": name, "plan": plan_kind, "api": api, "cpu_partitions": len(parts),
                    "contained_ms": med["contained"], "in_process_ms": med["in process"],
                    "difference_ms": med["contained"] - med["in process"],
                    "round_trips_ms": statistics.median(trips) * 1e3,
                    "per_call_us": statistics.median(trips) * 1e6 / max(1, len(parts)),
                    "cpu_contained_ms": cpu["contained"] / runs * 1e3, "cpu_in_process_ms": cpu["in process"] / runs * 1e3})
    return out


def _run_latency(stdout: str) -> tuple[float, float]:
    """(prepare, first execution) in ms from ``nnhal run``'s latency line: today's ("latency: imports I ms,
    plan P ms (...), prepare Q ms (...), execute E ms") or an older tree's ("latency: prepare Q ms, execute
    E ms"); both time the prepare (opening the runner) apart from the plan.  NaN where neither is found."""
    m = re.search(r"latency: (?:imports [\d.]+ ms, plan [\d.]+ ms .*?)?prepare ([\d.]+) ms.*?, execute ([\d.]+) ms",
                  stdout)
    return (float(m[1]), float(m[2])) if m else (np.nan, np.nan)


def _tree_env(src: Optional[str]) -> dict:
    env = dict(os.environ)
    env.pop("NNHAL_LITERT_IN_PROCESS", None)
    if src:
        env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    return env


def against(models: Path, src: str, rounds: int, runs: int) -> list[dict]:
    """``nnhal run`` / ``nnhal bench`` of every shared model, this tree and ``src``'s, interleaved."""
    rows: dict[tuple, dict[str, list]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(rounds):
            for name in MODELS:
                path = models / f"{name}.tflite"
                if not path.exists():
                    continue
                for tree, src_dir in (("this", None), ("against", src)):
                    env = _tree_env(src_dir)
                    t0 = time.perf_counter()
                    p = subprocess.run([sys.executable, "-m", "nnhal", "run", str(path)], capture_output=True,
                                       text=True, env=env)
                    wall = time.perf_counter() - t0
                    prep, first = _run_latency(p.stdout)
                    rows.setdefault((name, "run"), {}).setdefault(tree, []).append((wall * 1e3, prep, first))
                    j = os.path.join(tmp, f"{tree}.json")
                    subprocess.run([sys.executable, "-m", "nnhal", "bench", str(path), "--runs", str(runs),
                                    "--json", j], capture_output=True, text=True, env=env)
                    try:
                        doc = json.loads(Path(j).read_text())
                        engines = {e["name"]: e["steady"].get("median_ms", np.nan) for e in doc["models"][0]["engines"]}
                    except (OSError, ValueError, KeyError, IndexError):
                        engines = {}
                    rows.setdefault((name, "bench"), {}).setdefault(tree, []).append(engines)
    out = []
    for (name, cmd), trees in rows.items():
        if cmd == "run":
            med = {t: [statistics.median(v[i] for v in vals) for i in range(3)] for t, vals in trees.items()}
            out.append({"model": name, "command": "run", **{f"{t}_{k}": med[t][i] for t in med
                                                           for i, k in enumerate(("wall_ms", "prepare_ms",
                                                                                  "execute_ms"))}})
        else:
            names = sorted({e for vals in trees.values() for d in vals for e in d})
            for e in names:
                med = {t: statistics.median(d.get(e, np.nan) for d in vals) for t, vals in trees.items()}
                out.append({"model": name, "command": f"bench {e}", "this_median_ms": med.get("this", np.nan),
                            "against_median_ms": med.get("against", np.nan)})
    return out


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m nnhal.tools.contain_cost", description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=50, help="executions per way and plan (default 50)")
    ap.add_argument("--rounds", type=int, default=5, help="start-ups, and rounds with --against (default 5)")
    ap.add_argument("--against", default="", help="another checkout's src folder: nnhal run / bench of the shared "
                                                  "models, this tree and that one in turn")
    ap.add_argument("--models", type=Path, default=Path(os.environ.get("NNHAL_MODELS") or _DEFAULT_MODELS))
    ap.add_argument("--json", default="", help="also write every figure to this file")
    args = ap.parse_args(argv)
    doc: dict[str, Any] = {"load_average": os.getloadavg()[0]}
    print(f"load average {doc['load_average']:.2f}")
    s = doc["startup"] = startup(args.rounds)
    print(f"LiteRT's process: started and ready with an interpreter in {s['start_ms']:.0f} ms (its CPU "
          f"{s['start_cpu_ms']:.0f} ms); a call's round trip beyond LiteRT's own time: "
          + ", ".join(f"{v:.0f} us for {n} bytes in and out" for n, v in s["round_trip_us"].items()))
    doc["per_execution"] = per_execution(args.models, args.runs)
    print(f"per execution ({args.runs} runs each way, interleaved; medians):")
    print(f"  {'model':22s} {'plan':8s} {'API':>3s} {'CPU parts':>9s} {'contained':>10s} {'in process':>10s} "
          f"{'difference':>10s} {'round trips':>11s} {'per call':>9s}   CPU per execution (both processes)")
    for r in doc["per_execution"]:
        print(f"  {r['model']:22s} {r['plan']:8s} {r['api']:3d} {r['cpu_partitions']:9d} {r['contained_ms']:8.3f}ms "
              f"{r['in_process_ms']:8.3f}ms {r['difference_ms']:+8.3f}ms {r['round_trips_ms']:9.3f}ms "
              f"{r['per_call_us']:7.0f}us   {r['cpu_contained_ms']:.3f} vs {r['cpu_in_process_ms']:.3f} ms")
    if args.against:
        doc["against"] = against(args.models, args.against, args.rounds, max(10, args.runs // 2))
        print(f"this tree vs {args.against} ({args.rounds} rounds, interleaved; medians, ms):")
        for r in doc["against"]:
            if r["command"] == "run":
                print(f"  {r['model']:22s} nnhal run: wall {r['this_wall_ms']:.0f} vs {r['against_wall_ms']:.0f}; "
                      f"prepare {r['this_prepare_ms']:.1f} vs {r['against_prepare_ms']:.1f}; first execution "
                      f"{r['this_execute_ms']:.2f} vs {r['against_execute_ms']:.2f}")
            else:
                ratio = r["this_median_ms"] / r["against_median_ms"] if r["against_median_ms"] else np.nan
                print(f"  {r['model']:22s} nnhal {r['command']}: {r['this_median_ms']:.3f} vs "
                      f"{r['against_median_ms']:.3f} ({ratio:.2f}x)")
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
