"""What a user waits for before the first result, per model and device: the
init of ``nnhal bench MODEL.tflite`` (from the model's path to prepared
NNAPI partitions, as the NNAPI delegate's plan runs it) split into its two
phases, *plan* (read, verify, map to the HAL, partition, ask the device what
it supports) and *prepare* (the device validates and compiles each
partition), each in wall and CPU time (the process's, every thread: a
driver prepares on its own worker), beside LiteRT's interpreter creation on
the same file; then the first init's user and system time and minor page
faults (``getrusage``: the kernel's time to give the process new pages is
most of its system time).

Each model is measured in a fresh process (``--runs`` inits there, the first
one apart: a process's first init also pays what the process keeps, such as
lazily built tables), after the one-time imports and the device opening
(``nnhal.tools.bench.modelbench.warm_imports``), as ``nnhal bench`` does.
The machine is shared: CPU time is the figure to compare, wall time says
what the load made of it; ranges over the runs are printed.

    python -m nnhal.tools.initbench [MODEL.tflite ...] [--device D] [--runs N] [--json F]

(``PYTHONPATH=OTHER/src python src/nnhal/tools/initbench.py`` measures another checkout the same way.)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

MODELS = ["kws_mobilenetv2_int8", "vww_mobilenetv1_int8", "palm_detection_lite", "mobilenet_v1_f32"]


def _default_models() -> list[str]:
    root = Path(os.environ.get("NNHAL_MODELS") or Path(__file__).resolve().parents[3] / ".." / "shared" / "models")
    return [str(root / f"{m}.tflite") for m in MODELS]


def _plan(path: str, device: str, cache_dir: str, device_of: Any) -> Any:
    """What ``nnhal bench``'s init does first (``cli.delegate.plan_model``): the file read and verified,
    the plan built (the delegate's rules, nnhal's mapping, the device's answers)."""
    from nnhal.delegate.model import Graph
    from nnhal.delegate.plan import Options, build_plan
    from nnhal.tflite.loader import verify

    raw = Path(path).read_bytes()
    opts = Options(device=device, batch=1)
    if cache_dir:
        from nnhal.delegate.compile_cache import CacheDir

        opts.cache = CacheDir.for_model(cache_dir, raw)
    checked = verify(raw, batch=1)
    try:
        g = Graph(raw, checked, 1)
    except TypeError:  # NOTE: an older checkout's Graph parses the file itself
        g = Graph(raw)
    return build_plan(g, opts, device_of)


def measure(path: str, device: str, runs: int, cache_dir: str = "") -> dict[str, Any]:
    """In this process: ``runs`` inits of ``path`` on ``device`` (each closed before the next), after the
    one-time imports; per init {"plan": (wall ms, CPU ms), "prepare": (...), "total": (...)}, and LiteRT's
    interpreter creation (XNNPACK) in ms."""
    import nnhal
    from nnhal.delegate.runner import Runner
    from nnhal.tools.bench import modelbench as mb
    from nnhal.tools.bench import set_blas_threads

    set_blas_threads(1)
    if device.startswith("litert-"):
        os.environ.setdefault("NNHAL_LITERT_THREADS", "1")
    device_of = nnhal.open_device
    warm = mb.warm_imports(lambda: device_of(device)) if hasattr(mb, "warm_imports") else _warm(device)
    out: dict[str, Any] = {"model": path, "device": device, "imports_ms": warm["nnhal_ms"], "inits": []}
    for _ in range(runs):
        t0, c0, r0 = time.perf_counter(), time.process_time(), _usage()
        plan = _plan(path, device, cache_dir, device_of)
        t1, c1, r1 = time.perf_counter(), time.process_time(), _usage()
        runner = Runner(plan, device_of, threads=1)
        t2, c2, r2 = time.perf_counter(), time.process_time(), _usage()
        runner.close()
        out["inits"].append({"plan": ((t1 - t0) * 1e3, (c1 - c0) * 1e3), "prepare": ((t2 - t1) * 1e3, (c2 - c1) * 1e3),
                             "total": ((t2 - t0) * 1e3, (c2 - c0) * 1e3),
                             "usage": {"plan": _minus(r1, r0), "prepare": _minus(r2, r1)}})
    try:
        from nnhal.delegate.run import LiteRT

        t0 = time.perf_counter()
        LiteRT(path, threads=1, kernels="xnnpack")
        out["litert_ms"] = (time.perf_counter() - t0) * 1e3
    except Exception:  # noqa: BLE001 - LiteRT missing or refusing the file: no ratio
        out["litert_ms"] = None
    return out


def _usage() -> tuple[float, float, int]:
    """The process's (user ms, system ms, minor page faults) so far, every thread's."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime * 1e3, r.ru_stime * 1e3, r.ru_minflt


def _minus(a: tuple, b: tuple) -> list:
    return [a[0] - b[0], a[1] - b[1], a[2] - b[2]]


def _warm(device: str) -> dict[str, float]:
    """warm_imports for an nnhal without it (an older checkout measured with this file: PYTHONPATH)."""
    import nnhal
    from nnhal.delegate import plan, runner  # noqa: F401
    from nnhal.tflite import schema

    t0 = time.perf_counter()
    schema.schema()
    nnhal.open_device(device)
    return {"nnhal_ms": (time.perf_counter() - t0) * 1e3}


def _child(path: str, device: str, runs: int, cache_dir: str) -> dict[str, Any]:
    # NOTE: this file itself (not -m): with PYTHONPATH naming another checkout, it measures that one
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", path, "--device", device, "--runs", str(runs)]
    if cache_dir:
        cmd += ["--cache-dir", cache_dir]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"{Path(path).name}: {p.stderr.strip().splitlines()[-1] if p.stderr.strip() else p.returncode}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def _fmt(pairs: list[tuple[float, float]]) -> str:
    wall = [w for w, _ in pairs]
    cpu = [c for _, c in pairs]
    if len(pairs) == 1:
        return f"{wall[0]:7.1f} / {cpu[0]:6.1f}"
    return (f"{statistics.median(wall):7.1f} / {statistics.median(cpu):6.1f} "
            f"(CPU {min(cpu):.0f}-{max(cpu):.0f})")


def report(results: list[dict[str, Any]]) -> None:
    print(f"{'model':28s} {'device':11s} {'first init':>16s}  {'then (median; CPU range)':>32s}  "
          f"{'plan':>16s} {'prepare':>16s}  LiteRT")
    print(f"{'':28s} {'':11s} {'wall / CPU ms':>16s}  {'wall / CPU ms':>32s}  {'wall / CPU ms':>16s} "
          f"{'wall / CPU ms':>16s}  init ms")
    for r in results:
        inits = r["inits"]
        first, rest = inits[0], inits[1:] or inits[:1]
        lr = r.get("litert_ms")
        ratio = f"{lr:6.1f} ({first['total'][0] / lr:.0f}x)" if lr else "-"
        print(f"{Path(r['model']).name:28s} {r['device']:11s} {_fmt([first['total']]):>16s}  "
              f"{_fmt([i['total'] for i in rest]):>32s}  {_fmt([i['plan'] for i in rest]):>16s} "
              f"{_fmt([i['prepare'] for i in rest]):>16s}  {ratio}")
    print(f"load average {os.getloadavg()[0]:.1f}; one process per model, its imports and the device opened "
          f"before the first init")
    if all("usage" in r["inits"][0] for r in results):
        print(f"\n{'first init':40s} {'user ms':>8s} {'sys ms':>8s} {'minor faults':>13s}  (plan + prepare)")
        for r in results:
            u = r["inits"][0]["usage"]
            p, q = u["plan"], u["prepare"]
            print(f"{Path(r['model']).name:28s} {r['device']:11s} {p[0] + q[0]:8.1f} {p[1] + q[1]:8.1f} "
                  f"{p[2] + q[2]:13d}  ({p[2]} + {q[2]}; sys {p[1]:.1f} + {q[1]:.1f})")
        print("the system time is the kernel's: mostly first touches of new pages (the minor faults); the process's "
              "own, its clock ticks (a few ms each) shared out between user and system")


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m nnhal.tools.initbench", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", help="the .tflite files (default: the shared models kws, vww, palm, "
                                              "MobileNet v1)")
    ap.add_argument("--device", action="append", help="device(s) to prepare on (repeatable; default sample-all)")
    ap.add_argument("--runs", type=int, default=5, help="inits per model and device (the first reported apart)")
    ap.add_argument("--cache-dir", default="", help="as nnhal bench's: partitions load from this compilation cache")
    ap.add_argument("--json", default="", help="also write every figure to this file")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    devices = args.device or ["sample-all"]
    if args.child:
        print(json.dumps(measure(args.models[0], devices[0], max(1, args.runs), args.cache_dir)))
        return 0
    results = []
    for path in args.models or _default_models():
        for d in devices:
            try:
                results.append(_child(path, d, max(1, args.runs), args.cache_dir))
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                print(f"{Path(path).name} on {d}: {e}", file=sys.stderr)
    report(results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
