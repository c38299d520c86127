"""Microseconds per execution of every operation, by family, on the
conformance vectors' small tensors: what one executor step costs.

    python -m nnhal.tools.opbench [--ops ADD,SOFTMAX] [--types quant8_asymm,float32]
                                  [--json F] [--before F] [--ms 10] [--clock cpu|wall] [--constants]

For each operation and data type, the first vector model made of that one
operation (the smallest tensors the vectors have for it) is prepared once on
the executor (``nnhal.executor.Executor``, no HAL around it) and executed in
blocks of about ``--ms`` milliseconds; the figure is the best block's time per
execution, in CPU time of the running thread (``--clock cpu``, the default:
on a machine shared with other work, time spent waiting for a core is not
the operation's) or wall time (``--clock wall``).  ``--json`` writes the figures, ``--before`` reads such a file and
prints it beside the new ones (before / after / ratio), then the per-family
medians.  The vectors give many weights and parameters as model inputs (the
run-time path of an operation's prepare/execute split); ``--constants`` makes
every model input but each operation's first a constant, as real models hold
them (the prepared path).
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from collections import defaultdict
from typing import Callable, Optional

from nnhal import hal
from nnhal.conformance import vectors
from nnhal.engine.executor import Executor
from nnhal.ops import registry

DEFAULT_TYPES = ("quant8 asymm", "quant8 signed", "float32")


def _family(op_name: str) -> str:
    try:
        t = hal.OperationType[op_name]
    except KeyError:
        return "?"
    for name, module in zip(registry.FAMILY_NAMES, registry.FAMILIES):
        if any(d.type == t for d in module.OPS):
            return name
    return "?"


def pick_models(root: str, ops: Optional[set[str]], types: tuple[str, ...]) -> dict[tuple[str, str], vectors.VectorModel]:
    """(operation, data type) -> the first single-operation vector model of it."""
    picked: dict[tuple[str, str], vectors.VectorModel] = {}
    for vm in vectors.load([root]):
        if len(vm.main.operations) != 1 or vm.referenced or vm.expectFailure:
            continue
        (op,) = vm.operation_types
        if ops is not None and op not in ops:
            continue
        dt = vm.data_type
        if dt not in types or (op, dt) in picked:
            continue
        if "all_inputs_as_internal" in vm.name or "all_tensors_as_inputs" in vm.name:
            continue
        picked[(op, dt)] = vm
    return picked


def constant_inputs(vm: vectors.VectorModel, model: hal.Model) -> tuple[hal.Model, list]:
    """(the model with every main input but each operation's first turned into
    a CONSTANT_COPY operand (an omitted one into NO_VALUE), the values of the
    inputs left)."""
    m = copy.deepcopy(model)
    values = bytearray(m.operandValues)
    keep = {op.inputs[0] for op in m.main.operations if op.inputs}
    inputs, indexes = [], []
    for i, v in zip(m.main.inputIndexes, vm.input_values()):
        o = m.main.operands[i]
        if i in keep:
            indexes.append(i)
            inputs.append(v)
        elif v is None:
            o.lifetime, o.location = hal.OperandLifeTime.NO_VALUE, hal.DataLocation()
        else:
            raw = vm.main.operands[i].raw
            off = -len(values) % 8
            values.extend(b"\0" * off)
            o.lifetime = hal.OperandLifeTime.CONSTANT_COPY
            o.location = hal.DataLocation(poolIndex=0, offset=len(values), length=len(raw))
            o.dimensions = [int(d) for d in v.shape]
            values.extend(raw)
    m.main.inputIndexes = indexes
    m.operandValues = bytes(values)
    return m, inputs


def time_model(vm: vectors.VectorModel, block_ms: float, blocks: int = 9,
               clock: Callable[[], float] = time.thread_time, constants: bool = False) -> Optional[float]:
    """Best block's microseconds per execution, or None if it does not run;
    ``constants``: with :func:`constant_inputs`."""
    pools: list[bytearray] = []

    def factory(data: bytes) -> hal.Memory:
        pools.append(bytearray(data))
        return hal.Memory(name="ashmem", size=len(data))

    model = vm.build_model(factory)
    inputs = vm.input_values()
    if constants:
        model, inputs = constant_inputs(vm, model)
    try:
        ex = Executor(model, pools)
        ex.run(inputs)
    except Exception:  # noqa: BLE001  (not timed: reported as a dash)
        return None
    t0 = clock()
    ex.run(inputs)
    one = max(clock() - t0, 1e-6)
    n = max(1, int(block_ms / 1000 / one))
    best = float("inf")
    for _ in range(blocks):
        t0 = clock()
        for _ in range(n):
            ex.run(inputs)
        best = min(best, (clock() - t0) / n)
    return best * 1e6


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m nnhal.tools.opbench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", help="comma-separated operation names (default: all)")
    ap.add_argument("--types", default=",".join(DEFAULT_TYPES), help="data types (as the conformance report names them)")
    ap.add_argument("--vectors", default=None, help="vector folder (default: $NNHAL_VECTORS or ../shared/conformance)")
    ap.add_argument("--ms", type=float, default=10.0, help="milliseconds per timed block (default 10)")
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                    help="cpu: this thread's CPU time (default; steady on a loaded machine); wall: elapsed time")
    ap.add_argument("--json", help="write the figures to this file")
    ap.add_argument("--before", nargs="+", metavar="F",
                    help="--json files of earlier runs (the best of them), printed beside")
    ap.add_argument("--constants", action="store_true",
                    help="every model input but each operation's first a constant (weights, parameters)")
    ap.add_argument("--figures", nargs="+", metavar="F",
                    help="print the best of these --json files instead of timing (with --before: the comparison)")
    args = ap.parse_args(argv)
    ops = None
    if args.ops:
        ops = {o.strip().upper() for o in args.ops.split(",") if o.strip()}
        unknown = sorted(o for o in ops if o not in hal.OperationType.__members__)
        if unknown:
            print(f"opbench: unknown operation(s): {', '.join(unknown)}", file=sys.stderr)
            return 2
    before: dict[str, float] = {}
    for path in args.before or ():
        try:
            with open(path) as f:
                for k, v in json.load(f).items():
                    if v is not None:
                        before[k] = min(v, before.get(k, v))
        except (OSError, ValueError) as e:
            print(f"opbench: cannot read {path}: {e}", file=sys.stderr)
            return 2
    figures: dict[str, Optional[float]] = {}
    rows = []
    if args.figures:
        # NOTE: no timing: the best of saved runs (each file a --json of this tool)
        for path in args.figures:
            try:
                with open(path) as f:
                    for k, v in json.load(f).items():
                        if v is not None and (figures.get(k) is None or v < figures[k]):
                            figures[k] = v
                        figures.setdefault(k, v)
            except (OSError, ValueError) as e:
                print(f"opbench: cannot read {path}: {e}", file=sys.stderr)
                return 2
        for key in sorted(figures, key=lambda k: (_family(k.split("/")[0]), k)):
            op, dt = key.split("/", 1)
            rows.append((_family(op), op, dt, "", figures[key], before.get(key)))
    else:
        root = args.vectors or vectors.default_vectors()
        picked = pick_models(root, ops, tuple(t.strip() for t in args.types.split(",")))
        for (op, dt), vm in sorted(picked.items(), key=lambda kv: (_family(kv[0][0]), kv[0])):
            us = time_model(vm, args.ms, clock=time.thread_time if args.clock == "cpu" else time.perf_counter,
                            constants=args.constants)
            key = f"{op}/{dt}"
            figures[key] = us
            rows.append((_family(op), op, dt, vm.name, us, before.get(key)))
    head = f"{'family':<14} {'operation':<28} {'type':<20} {'us/exec':>9}"
    if before:
        head += f" {'before':>9} {'ratio':>6}"
    print(head)
    fam: dict[str, list[tuple[float, Optional[float]]]] = defaultdict(list)
    for family, op, dt, _name, us, old in rows:
        line = f"{family:<14} {op:<28} {dt:<20} {'-' if us is None else f'{us:.1f}':>9}"
        if before:
            line += f" {'-' if old is None else f'{old:.1f}':>9}"
            line += f" {f'{old / us:.2f}x' if (old and us) else '-':>6}"
        print(line)
        if us is not None:
            fam[family].append((us, old))
    print()
    print(f"{'family':<14} {'ops':>4} {'median us':>10}" + (f" {'before':>9} {'speed-up':>9}" if before else ""))
    for family in sorted(fam):
        vals = fam[family]
        med = statistics.median(u for u, _ in vals)
        line = f"{family:<14} {len(vals):>4} {med:>10.1f}"
        olds = [o for _, o in vals if o]
        if before and olds:
            mo = statistics.median(olds)
            line += f" {mo:>9.1f} {mo / med:>8.2f}x"
        print(line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
