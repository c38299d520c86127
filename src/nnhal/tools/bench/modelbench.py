"""What TFLite's ``benchmark_model`` prints, for ``nnhal bench MODEL.tflite``: per engine the
initialization time, the first inference, the warm-up and the steady state (mean, median, p90,
standard deviation, min, max) and the process's peak memory; ``--profile``: time per HAL operation
and per operation type (top N), measured by a private profiling executor of the sample backend on
the same HAL model and input; ``--json FILE``: all of it, machine-readable.
"""

from __future__ import annotations

import gc
import json
import math
import resource
import statistics
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Optional, Sequence

import numpy as np

from nnhal import hal

__all__ = ["EngineFigures", "steady", "peak_rss_mb", "hal_profile", "print_profile", "print_figures", "write_json",
           "warm_imports", "print_init_ratios"]


def peak_rss_mb() -> float:
    """The process's peak resident memory so far (MB; Linux's ru_maxrss is in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def steady(times: Sequence[float]) -> dict[str, float]:
    """mean / median / p90 / std / min / max of a list of seconds, in ms."""
    t = sorted(times)
    if not t:
        return {}
    p90 = t[min(len(t) - 1, int(round(0.9 * (len(t) - 1))))]
    return {"count": len(t), "mean_ms": statistics.fmean(t) * 1e3, "median_ms": statistics.median(t) * 1e3,
            "p90_ms": p90 * 1e3, "std_ms": (statistics.pstdev(t) if len(t) > 1 else 0.0) * 1e3,
            "min_ms": t[0] * 1e3, "max_ms": t[-1] * 1e3}


@dataclass
class EngineFigures:
    """One engine's phases, as benchmark_model reports them."""

    name: str
    init_ms: float = math.nan  # model prepared / interpreter created and allocated
    first_ms: float = math.nan  # the first inference
    init_cpu_ms: float = math.nan  # the process's CPU time of the init (every thread: a driver prepares on its own)
    warmup: dict = field(default_factory=dict)  # the warm-up runs (steady() of them)
    steady: dict = field(default_factory=dict)  # every timed run
    peak_rss_mb: float = math.nan  # the process's peak after this engine's init and first run


def measure_start(name: str, init: Callable[[], Any], first: Callable[[Any], Any]) -> tuple[EngineFigures, Any]:
    """Times ``obj = init()`` and ``first(obj)``; returns the figures and ``obj``."""
    fig = EngineFigures(name)
    t0, c0 = time.perf_counter(), time.process_time()
    obj = init()
    t1, c1 = time.perf_counter(), time.process_time()
    first(obj)
    t2 = time.perf_counter()
    fig.init_ms, fig.first_ms, fig.peak_rss_mb = (t1 - t0) * 1e3, (t2 - t1) * 1e3, peak_rss_mb()
    fig.init_cpu_ms = (c1 - c0) * 1e3
    return fig, obj


def warm_imports(open_devices: Callable[[], Any]) -> dict[str, float]:
    """The process's one-time costs, paid before any engine's init is timed, so that init is what each
    model costs (as LiteRT's interpreter creation after its import): milliseconds of nnhal's modules (the
    .tflite reader and its schema description, the planner, the operations) with ``open_devices()``
    (the devices timed, opened as a client connects), and of LiteRT's interpreter module (absent: nan).
    What exists then is frozen out of the garbage collector's reach (``gc.freeze``), as an application
    does after its start-up."""
    t0 = time.perf_counter()
    from nnhal.delegate import plan, runner  # noqa: F401 - imported for their cost
    from nnhal.ops import registry  # noqa: F401
    from nnhal.tflite import schema, verify

    schema.schema()
    verify.schema_shape()
    verify.unpack_plans()
    open_devices()
    # NOTE: the objects made so far (modules, tables) live as long as the process: the garbage collector
    # need not walk them again at every full collection (a first init paid one, ~20 ms)
    gc.freeze()
    t1 = time.perf_counter()
    try:
        schema.interpreter_module()
        litert = (time.perf_counter() - t1) * 1e3
    except schema.MissingDependency:
        litert = math.nan
    return {"nnhal_ms": (t1 - t0) * 1e3, "litert_ms": litert}


def print_init_ratios(figs: Sequence[EngineFigures]) -> None:
    """nnhal's init against LiteRT's, as the execution ratios: wall time (CPU time of the process)."""
    ours = [f for f in figs if f.name.startswith("nnhal")]
    theirs = [f for f in figs if f.name.startswith("LiteRT") and f.init_ms > 0]
    for f in ours:
        if theirs:
            print(f"  init {f.name} {f.init_ms:.1f} ms (CPU {f.init_cpu_ms:.1f}): " + ", ".join(
                f"{f.init_ms / t.init_ms:.0f}x {t.name} ({t.init_ms:.1f} ms)" for t in theirs))


def print_figures(figs: Sequence[EngineFigures], start_rss_mb: float) -> None:
    print(f"  {'engine':24s} {'init':>9s} {'first':>9s} {'warm-up':>12s} {'mean':>9s} {'median':>9s} {'p90':>9s} "
          f"{'std':>8s} {'min':>9s}   (ms)")
    for f in figs:
        s, w = f.steady, f.warmup
        warm = f"{w['mean_ms']:.3f} x{w['count']}" if w else "-"
        print(f"  {f.name:24s} {f.init_ms:9.1f} {f.first_ms:9.2f} {warm:>12s} {s.get('mean_ms', math.nan):9.3f} "
              f"{s.get('median_ms', math.nan):9.3f} {s.get('p90_ms', math.nan):9.3f} {s.get('std_ms', math.nan):8.3f} "
              f"{s.get('min_ms', math.nan):9.3f}")
    end = peak_rss_mb()
    print(f"  peak memory (process RSS): {end:.1f} MB (at start {start_rss_mb:.1f} MB; after each engine's init and "
          f"first run: " + ", ".join(f"{f.name} {f.peak_rss_mb:.1f}" for f in figs) + ")")


# --------------------------------------------------------------------------
# the per-operation profile


def hal_profile(model: hal.Model, inputs: Sequence[np.ndarray], runs: int,
                names: Optional[Sequence[str]] = None) -> dict:
    """Seconds per HAL operation of ``model.main`` (referenced subgraphs counted under the IF / WHILE
    that runs them is not attempted: each subgraph's operations are listed by their own index), over
    ``runs`` executions of a private profiling executor (the sample backend's, as sample-all runs it)
    after one warm-up.  ``names``: a label per main operation (e.g. its TFLite operator)."""
    from nnhal.engine.executor import Executor
    from nnhal.platform import memory as hal_memory

    pools = [hal_memory.PrivateCopy(m) for m in model.pools]
    try:
        ex = Executor(model, [p.view for p in pools])
        ex.run(list(inputs))
        ex.profile = {}
        t0 = time.perf_counter()
        for _ in range(runs):
            ex.run(list(inputs))
        total = time.perf_counter() - t0
        prof = ex.profile
    finally:
        for p in pools:
            p.close()
    sgs = [model.main, *model.referenced]
    ops = []
    for (g, k), secs in prof.items():
        op = sgs[g].operations[k]
        label = names[k] if names is not None and g == 0 and k < len(names) else ""
        ops.append({"subgraph": g, "index": k, "type": hal.operation_name(op.type), "label": label,
                    "ms": secs / runs * 1e3})
    by_type: dict[str, list[float]] = defaultdict(list)
    for o in ops:
        by_type[o["type"]].append(o["ms"])
    op_ms = sum(o["ms"] for o in ops)
    types = [{"type": t, "count": len(v), "ms": sum(v), "percent": 100 * sum(v) / op_ms if op_ms else 0.0}
             for t, v in by_type.items()]
    for o in ops:
        o["percent"] = 100 * o["ms"] / op_ms if op_ms else 0.0
    return {"runs": runs, "execution_ms": total / runs * 1e3, "operations_ms": op_ms,
            "operations": sorted(ops, key=lambda o: -o["ms"]), "types": sorted(types, key=lambda t: -t["ms"])}


def print_profile(prof: dict, top: int) -> None:
    print(f"  per-operation profile (sample backend's executor, {prof['runs']} runs): execution "
          f"{prof['execution_ms']:.3f} ms, of it in operations {prof['operations_ms']:.3f} ms "
          f"({100 * prof['operations_ms'] / max(prof['execution_ms'], 1e-12):.0f}%)")
    print(f"    top {min(top, len(prof['operations']))} operations:")
    print(f"    {'#':>4s}  {'operation':28s} {'ms':>9s} {'%':>6s}  label")
    for o in prof["operations"][:top]:
        where = o["index"] if o["subgraph"] == 0 else f"{o['subgraph']}:{o['index']}"
        print(f"    {where!s:>4s}  {o['type']:28s} {o['ms']:9.3f} {o['percent']:6.1f}  {o['label']}")
    print(f"    by operation type (top {min(top, len(prof['types']))}):")
    print(f"    {'operation type':34s} {'count':>5s} {'ms':>9s} {'%':>6s}")
    for t in prof["types"][:top]:
        print(f"    {t['type']:34s} {t['count']:5d} {t['ms']:9.3f} {t['percent']:6.1f}")


LITERT_PROFILER_NOTE = ("LiteRT's Python interpreter exposes no per-operator profiler (TFLite's benchmark_model "
                        "--enable_op_profiling=true has one); its engines are timed whole")


def write_json(path: str, doc: dict) -> None:
    def conv(x: Any) -> Any:
        if isinstance(x, EngineFigures):
            return {k: conv(v) for k, v in asdict(x).items()}
        if isinstance(x, dict):
            return {str(k): conv(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [conv(v) for v in x]
        if isinstance(x, float) and not math.isfinite(x):
            return None
        return x

    with open(path, "w") as f:
        json.dump(conv(doc), f, indent=1)
