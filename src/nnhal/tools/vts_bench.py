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

``--sections`` instead times a whole in-process run (default: ``nnhal vts
--device sample-all --sample 1 --jobs 1``, every section; other ``nnhal
vts`` options after ``--``), section by section: the wall and CPU time of
each section's units (the in-process run interleaves them, model batch by
model batch), the run's wall and CPU time, its cases and failures.
``--against SRC`` (repeatable) runs the same command on other source trees
too (another checkout's ``src``), alternating with this one ``--rounds``
times, so that trees are compared in one window (the machine's load moves
every figure: the load is printed with each run):

    python -m nnhal.tools.vts_bench --sections --against /path/to/main/src --rounds 2
    python -m nnhal.tools.vts_bench --sections -- --section qos --ops CONV_2D
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from statistics import median
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


# --------------------------------------------------------------------------
# a whole in-process run, section by section

DEFAULT_RUN = ["--device", "sample-all", "--sample", "1", "--jobs", "1"]

# NOTE: run in a child process (the tree under test first on its path): the CLI's own run, each unit's wall and
# CPU time (the process's: every thread of the driver counts) added to its section
_CHILD = r"""
import json, os, sys, time
import nnhal.cli.vts as cli_vts
from nnhal.cli.app import main
real = cli_vts.run_unit
sections = {}
def timed(config, unit):
    t, c = time.perf_counter(), time.process_time()
    try:
        return real(config, unit)
    finally:
        w = sections.setdefault(unit.section, [0.0, 0.0])
        w[0] += time.perf_counter() - t
        w[1] += time.process_time() - c
cli_vts.run_unit = timed
out = sys.argv[1]
t0 = time.perf_counter()
code = main(["vts", "--no-progress", *sys.argv[2:]])
wall = time.perf_counter() - t0
tm = os.times()
with open(out, "w") as f:
    json.dump({"code": code, "wall": wall, "user": tm.user, "sys": tm.system, "sections": sections}, f)
"""


def run_sections(src: str, vts_args: list[str]) -> dict:
    """One in-process run of ``nnhal vts`` on the source tree ``src``: {code, wall, user, sys, sections: {name:
    [wall, cpu]}, cases, failed, load} (``cases`` / ``failed`` from the report's closing lines)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "times.json"
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([src, *filter(None, [os.environ.get("PYTHONPATH")])]))
        r = subprocess.run([sys.executable, "-c", _CHILD, str(out), *vts_args], capture_output=True, text=True,
                           env=env)
        if not out.exists():
            raise RuntimeError(f"the run on {src} ended without figures (exit {r.returncode}): "
                               f"{(r.stderr.strip() or r.stdout.strip())[-500:]}")
        res = json.loads(out.read_text())
    m = next((m for m in map(_LINE.match, r.stdout.splitlines()) if m), None)
    counts = re.search(r"^(\d+) passed, (\d+) failed", r.stdout, re.M)
    res.update(cases=int(m[1]) if m else 0, failed=int(counts[2]) if counts else -1, load=os.getloadavg()[0])
    return res


def _run_line(src: str, k: int, r: dict) -> str:
    return (f"{src} run {k + 1}: {r['cases']} cases, {r['failed']} failed (exit {r['code']}); {r['wall']:.1f} s wall, "
            f"{r['user'] + r['sys']:.1f} s CPU (user {r['user']:.1f}, sys {r['sys']:.1f}); load {r['load']:.1f}")


def sections_report(results: dict[str, list[dict]]) -> list[str]:
    """The runs of each tree, then per section the median wall time of each tree's runs."""
    return [_run_line(src, k, r) for src, runs in results.items() for k, r in enumerate(runs)] + \
        _sections_table(results)


def _sections_table(results: dict[str, list[dict]]) -> list[str]:
    lines = []
    names = [s for src in results for r in results[src] for s in r["sections"]]
    order = list(dict.fromkeys(names))
    trees = list(results)
    lines.append("median wall (CPU) seconds: " + " | ".join(f"[{k + 1}] {t}" for k, t in enumerate(trees)))
    lines.append(f"  {'':12s}" + "".join(f"{f'[{k + 1}]':>20s}" for k in range(len(trees))))

    for name in order + ["(run)"]:
        cells = []
        for t in trees:
            if name == "(run)":
                w, c = median([r["wall"] for r in results[t]]), median([r["user"] + r["sys"] for r in results[t]])
            else:
                w = median([r["sections"].get(name, [0, 0])[0] for r in results[t]])
                c = median([r["sections"].get(name, [0, 0])[1] for r in results[t]])
            cells.append(f"{w:9.1f} ({c:6.1f})")
        lines.append(f"  {name:12s}" + "".join(f"{c:>20s}" for c in cells))
    return lines


def sections(against: list[str], rounds: int, vts_args: list[str]) -> int:
    here = str(Path(__file__).resolve().parents[2])
    trees = [here, *[str(Path(a).resolve()) for a in against]]
    print(f"nnhal vts {' '.join(vts_args)}: {rounds} round(s), trees alternating: {', '.join(trees)}", flush=True)
    results: dict[str, list[dict]] = {t: [] for t in trees}
    for _ in range(rounds):
        for t in trees:
            results[t].append(run_sections(t, vts_args))
            print(_run_line(t, len(results[t]) - 1, results[t][-1]), flush=True)
    print("\n".join(_sections_table(results)))
    return 0 if all(r["code"] == 0 for runs in results.values() for r in runs) else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m nnhal.tools.vts_bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--ops", default="CONV_2D", help="the models (default CONV_2D: 141 models, 46155 mutations)")
    p.add_argument("--sample", type=int, default=None, help="mutations per model (default: all)")
    p.add_argument("--no-cluster", action="store_true", help="leave out the Ray cluster")
    p.add_argument("--pools", action="store_true", help="time the two worker pools instead")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--sections", action="store_true",
                   help="time a whole in-process run section by section (nnhal vts options after --)")
    p.add_argument("--against", action="append", default=[], metavar="SRC",
                   help="with --sections: also run another source tree (its src folder), alternating")
    argv = list(sys.argv[1:] if argv is None else argv)
    rest: list[str] = []
    if "--" in argv:
        k = argv.index("--")
        argv, rest = argv[:k], argv[k + 1:]
    a = p.parse_args(argv)
    if a.sections:
        return sections(a.against, a.rounds, DEFAULT_RUN + rest)
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
