"""What the random section's generator reaches, and how fast it runs:
``python -m nnhal.tools.random_coverage [--cases N] [--seed S] [--ops A,B] [--rates --device D]``.

Draws N models (default 2000, no device involved) and prints, per operation:
how often it was drawn, the data types it was drawn in, the share of its
declared signatures (operand types per position at the HAL version: the
declaration's own parameter space) the draws used, and per named parameter
the values drawn (how many of each; "varied" when more than one); then how
often the graph shapes the issue lists appear (fan-out, outputs also
consumed, unknown dimensions, IF / WHILE, relaxed models...).  ``--json F``
writes it all.

``--rates`` runs, per operation family, random models of that family's
operations only on ``--device`` (default sample-all) against the reference,
every executor and the cache round trip included, for ``--seconds`` each
(default 10), and prints the models per second (passed, failed and
unsupported counted alike) and the generation's share of the time."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter, defaultdict
from typing import Any, Optional

from nnhal import hal
from nnhal.conformance.randgraph.generator import Options, StepFailed, generate
from nnhal.conformance.randgraph.graph import CONST, INPUT, SUBGRAPH, RandomModel
from nnhal.conformance.randgraph.probe import pairs
from nnhal.conformance.randgraph.recipes import EXCLUDED, RECIPES

OT = hal.OperationType


def _value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, tuple):
        return "(" + ",".join(_value(x) for x in v) + ")"
    return str(v)


def coverage(cases: int, seed: int, options: Options) -> dict[str, Any]:
    """Per operation: drawn, data types, signatures used / declared, parameter values; graph shapes."""
    from nnhal.ops import registry

    ops: dict[str, dict[str, Any]] = defaultdict(lambda: {"drawn": 0, "dtypes": Counter(), "signatures": set(),
                                                            "params": defaultdict(Counter)})
    shapes: Counter = Counter()
    t0 = time.perf_counter()
    made = 0
    for n in range(cases):
        try:
            m, _ = generate(seed, n, options)
        except StepFailed:
            continue
        made += 1
        _shapes(m, shapes)
        for _, op in m.all_ops():
            e = ops[op.type.name]
            e["drawn"] += 1
            e["dtypes"][op.dtype] += 1
            if op.signature is not None:
                e["signatures"].add(id(op.signature))
            for k, v in op.params.items():
                e["params"][k][_value(v)] += 1
    seconds = time.perf_counter() - t0
    out: dict[str, Any] = {"cases": cases, "models": made, "seed": seed, "generation_seconds": seconds,
                           "operations": {}, "graph": dict(shapes),
                           "excluded": {op.name: why for op, why in EXCLUDED.items()}}
    usable = {op: [s for s in registry.REGISTRY[op].signatures if s.version <= options.version and RECIPES[op].anchor(s)]
              for op in RECIPES if op in registry.REGISTRY}
    for op in sorted(RECIPES, key=lambda o: o.name):
        if options.ops is not None and op.name not in options.ops:
            continue
        e = ops.get(op.name)
        declared = len(usable.get(op, []))
        out["operations"][op.name] = {
            "family": RECIPES[op].family, "drawn": e["drawn"] if e else 0,
            "dtypes": dict(e["dtypes"]) if e else {},
            "signatures": [len({i for i in e["signatures"] if i in {id(s) for s in usable.get(op, [])}})
                           if e else 0, declared],
            "params": {k: dict(v) for k, v in e["params"].items()} if e else {}}
    return out


def _shapes(m: RandomModel, seen: Counter) -> None:
    g = m.main
    reads = Counter(k for op in g.ops for k in op.inputs)
    produced = {k for op in g.ops for k in op.outputs}
    seen["models"] += 1
    seen["more than one operation"] += m.op_count() > 1
    seen["chain (a result read by a later operation)"] += any(k in produced for k in reads)
    seen["fan-out (an operand read twice or more)"] += any(n > 1 and g.operands[k].kind != CONST
                                                          for k, n in reads.items())
    seen["an output also read by an operation"] += any(reads[k] for k in g.outputs)
    seen["several outputs"] += len(g.outputs) > 1
    seen["temporaries of unknown dimensions"] += any(o.declared is not None for o in g.operands)
    seen["outputs of unknown dimensions"] += m.dynamic_outputs
    seen["relaxed float32"] += m.relaxed
    seen["IF"] += any(op.type == OT.IF for _, op in m.all_ops())
    seen["WHILE"] += any(op.type == OT.WHILE for _, op in m.all_ops())
    seen["IF / WHILE in a body"] += any(op.type in (OT.IF, OT.WHILE) for sg in m.referenced for op in sg.ops)
    seen["a parameter given as a model input"] += any(o.kind == INPUT and not o.is_tensor for o in g.operands)
    seen["a constant in a memory pool"] += any(o.kind == CONST and o.reference for o in g.operands)
    seen["bodies (subgraphs)"] += sum(o.kind == SUBGRAPH for o in g.operands)


def rates(device_name: str, seconds: float, seed: int, version: hal.HalVersion) -> list[tuple[str, int, float, float]]:
    """(family, models, models per second, share of the time spent drawing) per family on the device."""
    import nnhal
    from nnhal.conformance.randgraph import differential as diff
    from nnhal.conformance.vts import random as section

    device = nnhal.open_device(device_name)
    devices = diff.Devices(device, section.reference())
    families: dict[str, set[str]] = defaultdict(set)
    for op, r in RECIPES.items():
        families[r.family].add(op.name)
    out = []
    for family in sorted(families):
        options = Options(version, frozenset(families[family]), max_operations=4)
        n, drawing, t0 = 0, 0.0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            d0 = time.perf_counter()
            try:
                m, _ = generate(seed, n, options)
            except StepFailed:
                n += 1
                continue
            drawing += time.perf_counter() - d0
            diff.differential(devices, m, locate=False)
            n += 1
        total = time.perf_counter() - t0
        out.append((family, n, n / total, drawing / total))
    return out


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m nnhal.tools.random_coverage", description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ops", help="only these operations (comma-separated)")
    p.add_argument("--hal-version", default="V1_3")
    p.add_argument("--json", help="write everything here")
    p.add_argument("--rates", action="store_true", help="also models per second per family on --device")
    p.add_argument("--device", default="sample-all")
    p.add_argument("--seconds", type=float, default=10.0, help="per family, with --rates")
    p.add_argument("--values", type=int, default=8, help="parameter values shown per parameter (default 8)")
    args = p.parse_args(argv)
    import logging
    import warnings

    warnings.simplefilter("ignore")
    logging.disable(logging.ERROR)
    version = hal.HalVersion[args.hal_version]
    ops = frozenset(o.strip().upper() for o in args.ops.split(",")) if args.ops else None
    options = Options(version, ops)
    cov = coverage(args.cases, args.seed, options)
    out = sys.stdout
    out.write(f"{cov['models']} models drawn from seed {args.seed} in {cov['generation_seconds']:.1f} s "
              f"({cov['models'] / max(cov['generation_seconds'], 1e-9):.0f} per second, no device); "
              f"{len(pairs(options))} (operation, data type) pairs drawable at HAL {version.name}\n\n")
    width = max(len(k) for k in cov["operations"]) if cov["operations"] else 10
    sig_used = sig_all = 0
    for name, e in cov["operations"].items():
        used, declared = e["signatures"]
        sig_used += used
        sig_all += declared
        dtypes = ",".join(sorted(e["dtypes"]))
        out.write(f"{name:{width}s} {e['family']:13s} drawn {e['drawn']:5d}  signatures {used:2d}/{declared:<2d}  "
                  f"types {dtypes}\n")
        for k, values in sorted(e["params"].items()):
            ranked = sorted(values.items(), key=lambda kv: -kv[1])
            shown = " ".join(f"{v}:{c}" for v, c in ranked[:args.values])
            more = f" (+{len(ranked) - args.values} more)" if len(ranked) > args.values else ""
            tag = "varied" if len(ranked) > 1 else "fixed "
            out.write(f"{'':{width}s}   {tag} {k} [{len(ranked)}]: {shown}{more}\n")
    out.write(f"\nsignatures drawn: {sig_used} of {sig_all} declared ({100 * sig_used / max(sig_all, 1):.0f}%)\n")
    for name, why in cov["excluded"].items():
        out.write(f"not drawn: {name}: {why}\n")
    out.write("\ngraph shapes (models with at least one):\n")
    models = max(cov["graph"].get("models", 1), 1)
    for k, v in cov["graph"].items():
        if k != "models":
            out.write(f"  {k:45s} {v:6d}  ({100 * v / models:.0f}%)\n")
    if args.rates:
        out.write(f"\nmodels per second on {args.device} against the reference (every executor and the cache "
                  f"round trip; at most 4 operations; {args.seconds:g} s per family):\n")
        cov["rates"] = []
        for family, n, rate, share in rates(args.device, args.seconds, args.seed, version):
            out.write(f"  {family:14s} {rate:7.1f} per second ({n} models; drawing {100 * share:.0f}% of the time)\n")
            cov["rates"].append({"family": family, "models": n, "per_second": rate, "drawing_share": share})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(cov, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
