"""How fast the model-mutation sweep (``nnhal vts --section model``) runs
here: with ``--jobs 1``, ``--jobs 2`` and on a private local two-node Ray
cluster (``--cluster``), on the same models and mutations; for each, the
command's wall time, the CPU time of its processes (the Ray cluster's own
processes are not children: not counted), the cases and cases per second,
and the machine's load.  ``--pools`` instead times the same conformance
work (sync, plain variant) through conformance/parallel.py's hand-made
worker pool and through ``concurrent.futures.ProcessPoolExecutor``.

    python -m nnhal.tools.vts_bench --ops CONV_2D --sample 100
    python -m nnhal.tools.vts_bench --pools --ops CONV_2D
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import os
import re
import resource
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

_LINE = re.compile(r"^(\d+) cases in ([\d.]+) s")


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_vts(args: list[str]) -> str:
    c0, t0 = _cpu(), time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "nnhal", "vts", "--section", "model", "--no-progress", *args],
                       capture_output=True, text=True)
    wall, cpu = time.perf_counter() - t0, _cpu() - c0
    lines = r.stdout.strip().splitlines() or [r.stderr.strip()]
    m = next((_LINE.match(x) for x in lines if _LINE.match(x)), None)
    cases, secs = (int(m[1]), float(m[2])) if m else (0, 0.0)
    rate = f"{cases / secs:.0f} cases/s" if secs else "-"
    return (f"exit {r.returncode}: {cases} cases, sweep {secs:.1f} s ({rate}), command {wall:.1f} s, "
            f"CPU {cpu:.1f} s, load {os.getloadavg()[0]:.1f} | {lines[-1]}")


# --------------------------------------------------------------------------
# the two pools on the same conformance work

_W: dict[str, Any] = {}


def _init() -> None:
    from nnhal.conformance.runner import Runner
    from nnhal.conformance.vts.device import open_device

    logging.getLogger("nnhal").setLevel(logging.CRITICAL + 10)
    _W["runner"] = Runner(open_device("sample-all"), ("sync",), ("plain",), "ashmem")
    _W["loaded"] = ("", [])


def _job(path: str, index: int) -> list:
    from nnhal.conformance import vectors

    if _W["loaded"][0] != path:
        _W["loaded"] = (path, vectors.load_file_checked(path))
    return _W["runner"].run_model(_W["loaded"][1][index])


def pools(ops: set[str], jobs: int, rounds: int) -> None:
    from nnhal.conformance import vectors
    from nnhal.conformance.parallel import WorkerConfig, run_parallel

    found = [(str(f), i) for f, i, _ in vectors.load_indexed([vectors.default_vectors()], ops, lambda p, m: None)]
    print(f"{len(found)} models (operations {', '.join(sorted(ops))}), sync, plain variant, {jobs} workers")

    def handmade() -> int:
        out: dict[int, Any] = {}
        run_parallel(found, WorkerConfig("sample-all", ["sync"], ["plain"], "ashmem"), jobs,
                     lambda k, r: out.__setitem__(k, r), lambda k, m: None)
        return len(out)

    def standard() -> int:
        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn"), initializer=_init) as pool:
            return len(list(pool.map(_job, *zip(*found))))

    for k in range(rounds):
        for name, fn in (("hand-made (conformance/parallel.py)", handmade), ("ProcessPoolExecutor", standard)):
            t = time.perf_counter()
            n = fn()
            print(f"round {k}: {name}: {n} models in {time.perf_counter() - t:.2f} s", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m nnhal.tools.vts_bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--ops", default="CONV_2D", help="the models (default CONV_2D: 141 models, 46155 mutations)")
    p.add_argument("--sample", type=int, default=None, help="mutations per model (default: all)")
    p.add_argument("--no-cluster", action="store_true", help="leave out the Ray cluster")
    p.add_argument("--pools", action="store_true", help="time the two worker pools instead")
    p.add_argument("--rounds", type=int, default=2)
    a = p.parse_args(argv)
    if a.pools:
        pools({o.strip() for o in a.ops.split(",")}, 2, a.rounds)
        return 0
    args = ["--device", "sample-all", "--ops", a.ops] + (["--sample", str(a.sample)] if a.sample is not None else [])
    print(f"nnhal vts --section model {' '.join(args)}")
    for jobs in ("1", "2"):
        print(f"--jobs {jobs}: {run_vts([*args, '--jobs', jobs])}", flush=True)
    if not a.no_cluster:
        from nnhal.conformance.vts.localcluster import LocalCluster

        with LocalCluster(nodes=2) as cluster:
            print(f"--cluster (2 local nodes, 1 CPU each): {run_vts([*args, '--cluster', cluster.address])}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
