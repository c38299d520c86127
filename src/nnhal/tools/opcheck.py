"""Run conformance vectors straight through the operation registry and the
executor, without the HAL driver: a kernel developer's quick check.

    python -m nnhal.tools.opcheck --ops CONV_2D,DEPTHWISE_CONV_2D [-v] [--model SUBSTR]

Runs every model whose operations are all in the given set (plus ADD, which
the "all_inputs_as_internal" variants use).  For the full HAL path use
``nnhal conformance``.
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
import traceback

import numpy as np

from nnhal import hal
from nnhal.conformance import vectors
from nnhal.conformance.compare import compare
from nnhal.engine.executor import Executor
from nnhal.ops import registry
from nnhal.ops.base import OpValidationError
from nnhal.ops.operands import constant_value, operand_info
from nnhal.ops.run import prepare_operation


def check_operations(model: hal.Model, version: hal.HalVersion = hal.HalVersion.V1_3) -> None:
    """Signature and op-specific validation (and prepare) of every operation as of ``version`` (raises
    OpValidationError)."""
    for sg in [model.main, *model.referenced]:
        for op in sg.operations:
            if registry.find(op.type) is None:
                raise OpValidationError(f"operation {hal.OperationType(op.type).name if op.type in hal.OperationType._value2member_map_ else op.type} is not implemented")
            ins = [sg.operands[i] for i in op.inputs]
            outs = [sg.operands[i] for i in op.outputs]
            prepare_operation(op.type, [operand_info(o, constant_value(model, o, _POOLS)) for o in ins],
                              [operand_info(o, None) for o in outs], subgraphs=model.referenced, version=version)


_POOLS: list = []


def run_model(vm: vectors.VectorModel) -> tuple[bool, str, float]:
    global _POOLS
    pools: list[bytes] = []

    def factory(data: bytes) -> hal.Memory:
        pools.append(bytearray(data))
        return hal.Memory(name="ashmem", size=len(data))

    model = vm.build_model(factory)
    _POOLS = pools
    try:
        # NOTE: as of the model's version (the AIDL vectors' operations are invalid at HAL 1.3)
        check_operations(model, max(vm.version or hal.HalVersion.V1_3, hal.HalVersion.V1_3))
        ex = Executor(model, pools)
        outs = ex.run(vm.input_values())
    except Exception as e:  # noqa: BLE001 - report every failure
        if vm.expectFailure:
            return True, f"failed as expected: {e}", 0.0
        return False, f"{type(e).__name__}: {e}" + ("\n" + traceback.format_exc() if VERBOSE > 1 else ""), 0.0
    if vm.expectFailure:
        return False, "expected a failure, got success", 0.0
    has_fp16 = vm.has_fp16
    worst = 0.0
    for j, (a, o) in enumerate(zip(outs, vm.output_operands())):
        logits = None
        if vm.multinomialTolerance > 0:
            logits = vm.input_values()[0]
        v = compare(a, o.data if o.data is not None else np.zeros(o.dimensions), o.type, model_has_fp16=has_fp16,
                    relaxed=vm.isRelaxed, name=vm.name, ignored=o.isIgnored,
                    multinomial_tolerance=vm.multinomialTolerance, multinomial_logits=logits)
        worst = max(worst, v.max_error)
        if not v.ok:
            return False, f"output {j}: {v.message}", v.max_error
    return True, "", worst


VERBOSE = 0


def main(argv: list[str] | None = None) -> int:
    global VERBOSE
    p = argparse.ArgumentParser(prog="python -m nnhal.tools.opcheck", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("paths", nargs="*", help="vector files or folders (default: ../shared/conformance)")
    p.add_argument("--ops", required=True, help="comma-separated operation names")
    p.add_argument("--model", default="", help="only models whose name contains this")
    p.add_argument("-v", "--verbose", action="count", default=0)
    a = p.parse_args(argv)
    VERBOSE = a.verbose
    if not a.paths:
        from nnhal.conformance.vectors import default_vectors

        a.paths = [default_vectors()]
    ops = {s.strip().upper() for s in a.ops.split(",") if s.strip()} | {"ADD"}
    bad = ops - set(hal.OperationType.__members__)
    if bad:
        p.error(f"unknown operations: {sorted(bad)}")
    per_op: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    failures = []
    t0 = time.perf_counter()
    for vm in vectors.load(a.paths, ops):
        if a.model and a.model not in vm.name:
            continue
        key = ",".join(sorted(vm.operation_types - {"ADD"}) or ["ADD"])
        ok, msg, err = run_model(vm)
        per_op[key]["pass" if ok else "fail"] += 1
        if not ok:
            failures.append((vm.spec, vm.name, msg))
        if a.verbose:
            print(f"{'PASS' if ok else 'FAIL'} {vm.spec} {vm.name} max_err={err:.3g} {msg if not ok else ''}")
    for key in sorted(per_op):
        c = per_op[key]
        print(f"{key:40s} {c['pass']:5d}/{c['pass'] + c['fail']:<5d}")
    if failures and not a.verbose:
        print("\nfailures:")
        for spec, name, msg in failures[:60]:
            print(f"  {spec} {name}: {msg}")
        if len(failures) > 60:
            print(f"  ... and {len(failures) - 60} more")
    total = sum(sum(c.values()) for c in per_op.values())
    print(f"\n{total - len(failures)} passed, {len(failures)} failed ({time.perf_counter() - t0:.1f} s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
