"""Is a driver held to the reference on models no vector has?
``python -m nnhal.tools.status_diff [--device litert-cpu] [--every N] [--ops A,B] [VECTORS...]``

Takes the conformance vector models (every N-th with ``--every``), makes
mutants of each -- one constant parameter changed (an INT32 / TENSOR_INT32
value moved by one, negated or zeroed, a BOOL flipped), one dimension of a
constant tensor or of a model input grown by one (its values resized) -- and
prepares and runs each (``executeSynchronously_1_3``) on the driver and on
``sample-all``, the reference.  A mutant agrees when the driver refuses it
(``getSupportedOperations_1_3`` false: an honest "not supported"), or gives
the reference's status at preparation and at execution and, where both
succeed, its output shapes and values (the conformance tolerances, the
reference's outputs as the expected ones).  Prints the counts and every
disagreement; exits 1 if there is one (2: bad arguments)."""

from __future__ import annotations

import argparse
import copy
import sys
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional, Sequence

import numpy as np

from nnhal import hal
from nnhal.conformance import vectors
from nnhal.conformance.compare import compare
from nnhal.conformance.runner import RequestPools, nbytes
from nnhal.platform import memory as hal_memory

S = hal.ErrorStatus
T = hal.OperandType
L = hal.OperandLifeTime
_CONST = (L.CONSTANT_COPY, L.CONSTANT_REFERENCE)
_PARAMS = (T.INT32, T.TENSOR_INT32, T.BOOL)
MAX_PARAM_ELEMENTS = 8  # NOTE: larger int32 constants are data (lookup tables, indices), not parameters


@dataclass
class Outcome:
    """What a device did with a model: ``refused`` (not all operations
    supported), else the preparation and execution statuses and outputs."""

    supported_status: S = S.NONE
    refused: bool = False
    prepare: S = S.NONE
    execute: Optional[S] = None
    shapes: list = field(default_factory=list)
    outputs: list = field(default_factory=list)


def mutants(vm: vectors.VectorModel) -> Iterator[tuple[str, vectors.VectorModel]]:
    """(label, mutant) for each one-place change of ``vm``'s main subgraph."""
    main = vm.main
    for i, o in enumerate(main.operands):
        if o.data is None or o.type == T.SUBGRAPH:
            continue
        if o.lifetime in _CONST and o.type in _PARAMS and 0 < o.data.size <= MAX_PARAM_ELEMENTS:
            for j in range(o.data.size):
                v = o.data.reshape(-1)[j]
                options = [not v] if o.type == T.BOOL else sorted({int(v) + 1, int(v) - 1, -int(v), 0} - {int(v)})
                for new in options:
                    m = copy.deepcopy(vm)
                    m.main.operands[i].data.reshape(-1)[j] = new
                    yield f"operand {i}[{j}] {v!r} -> {new!r}", m
        elif (o.lifetime in _CONST or o.lifetime == L.SUBGRAPH_INPUT) and o.data.ndim and o.data.size:
            for d in range(o.data.ndim):
                m = copy.deepcopy(vm)
                mo = m.main.operands[i]
                dims = list(mo.dimensions)
                dims[d] += 1
                mo.dimensions = dims
                mo.data = np.resize(mo.data, dims)
                yield f"operand {i} dimension {d} {dims[d] - 1} -> {dims[d]}", m


def outcome(device: Any, vm: vectors.VectorModel) -> Outcome:
    """Prepares and runs ``vm`` once on ``device`` (outputs get four times
    their declared size, so that a mutant's larger output still fits)."""
    out = Outcome()
    model = vm.build_model()
    try:
        status, ok = device.getSupportedOperations_1_3(model)
        out.supported_status = S(status)
        if status != S.NONE:
            return out
        if not all(ok):
            out.refused = True
            return out
        cb = hal.PreparedModelCallback()
        device.prepareModel_1_3(model, hal.ExecutionPreference.FAST_SINGLE_ANSWER, hal.Priority.MEDIUM,
                                hal.OptionalTimePoint(), [], [], bytes(32), cb)
        status, prepared = cb.wait(60)
        out.prepare = S(status)
        if status != S.NONE:
            return out
    finally:
        for p in model.pools:
            hal_memory.free(p)
    outs = vm.output_operands()
    with RequestPools(vm.input_values(), [4 * max(nbytes(o), 1) + 64 for o in outs]) as pools:
        status, shapes, _ = prepared.executeSynchronously_1_3(pools.request(), hal.MeasureTiming.NO,
                                                              hal.OptionalTimePoint(), hal.OptionalTimeoutDuration())
        out.execute = S(status)
        out.shapes = [list(s.dimensions) for s in shapes]
        if status == S.NONE:
            out.outputs = [pools.read_output(k, o, s) for k, (o, s) in enumerate(zip(outs, out.shapes))]
    return out


def disagreement(vm: vectors.VectorModel, ref: Outcome, dev: Outcome) -> str:
    """Why the driver's outcome is not the reference's ("" when it is, or when the driver refused),
    starting with its kind: "accepts" (succeeds where the reference fails), "fails" (fails where the
    reference succeeds), "status" (both fail, differently), "output" (both succeed, other outputs)."""
    if dev.supported_status != ref.supported_status:
        return f"status: getSupportedOperations_1_3 {dev.supported_status.name}, reference " \
               f"{ref.supported_status.name}"
    if dev.refused or ref.supported_status != S.NONE:
        return ""
    dev_ok, ref_ok = dev.prepare == S.NONE and dev.execute == S.NONE, ref.prepare == S.NONE and ref.execute == S.NONE

    def what(o: Outcome) -> str:
        return f"prepare {o.prepare.name}" + (f", execute {o.execute.name}" if o.execute is not None else "")

    if dev_ok != ref_ok:
        return f"{'accepts' if dev_ok else 'fails'}: {what(dev)}, reference {what(ref)}"
    if (dev.prepare, dev.execute) != (ref.prepare, ref.execute):
        return f"status: {what(dev)}, reference {what(ref)}"
    if not ref_ok:
        return ""
    if dev.shapes != ref.shapes:
        return f"output: shapes {dev.shapes}, reference {ref.shapes}"
    has_fp16 = any(o.type in (T.TENSOR_FLOAT16, T.FLOAT16) for o in vm.main.operands)
    for k, (o, a, e) in enumerate(zip(vm.output_operands(), dev.outputs, ref.outputs)):
        v = compare(a, e, o.type, model_has_fp16=has_fp16, relaxed=vm.isRelaxed, name=vm.name,
                    ignored=o.isIgnored or vm.multinomialTolerance > 0)
        if not v.ok:
            return f"output: {k}: {v.message}"
    return ""


def run(device: Any, reference: Any, models: Sequence[vectors.VectorModel], start: int = 0,
        progress: Optional[Any] = None, report: Optional[Any] = None) -> tuple[dict[str, int], list[str]]:
    """(counts: agree / refused / disagree / mutants, one line per disagreement), from mutant
    number ``start`` on; ``progress(number, line)`` is told of each mutant before it runs,
    ``report(line)`` of each disagreement when found."""
    counts = {"mutants": 0, "agree": 0, "refused": 0, "disagree": 0}
    problems = []
    n = -1
    for vm in models:
        for label, m in mutants(vm):
            n += 1
            if n < start:
                continue
            if progress is not None:
                progress(n, f"{vm.name} ({label})")
            counts["mutants"] += 1
            ref, dev = outcome(reference, m), outcome(device, m)
            why = disagreement(m, ref, dev)
            if why:
                counts["disagree"] += 1
                problems.append(f"{vm.name} ({label}): {why}")
                if report is not None:
                    report(problems[-1])
            elif dev.refused:
                counts["refused"] += 1
            else:
                counts["agree"] += 1
    return counts, problems


def main(argv: Optional[list[str]] = None) -> int:
    import logging

    import nnhal

    ap = argparse.ArgumentParser(prog="python -m nnhal.tools.status_diff", description=__doc__.split("\n")[0])
    ap.add_argument("paths", nargs="*", help="vector files or directories (default: the conformance vectors)")
    ap.add_argument("--device", default="litert-cpu", help="the driver held to sample-all (default litert-cpu)")
    ap.add_argument("--every", type=int, default=1, help="take every N-th vector model (default: all)")
    ap.add_argument("--ops", default="", help="only models using these operations (comma-separated)")
    ap.add_argument("--start", type=int, default=0, help="skip the first N mutants (resume a run)")
    ap.add_argument("--progress", action="store_true", help="name each mutant on stderr before running it")
    args = ap.parse_args(argv)
    logger = logging.getLogger("nnhal")
    level = logger.level
    logger.setLevel(logging.CRITICAL)  # NOTE: the mutants' rejections are expected; restored after (in process)
    try:
        try:
            device = nnhal.get_device(args.device)
            files = vectors.find_files(args.paths or [vectors.default_vectors()])
        except (LookupError, ValueError, OSError) as e:
            print(f"status_diff: {e}", file=sys.stderr)
            return 2
        ops = {s.strip() for s in args.ops.split(",") if s.strip()}
        models = [vm for vm in vectors.load(files, ops or None) if not vm.expectFailure][::max(1, args.every)]
        def progress(n: int, line: str) -> None:
            print(f"[{n}] {line}", file=sys.stderr, flush=True)

        counts, problems = run(device, nnhal.get_device("sample-all"), models, args.start,
                               progress if args.progress else None, lambda line: print(line, flush=True))
        print(f"{args.device} vs sample-all: {counts['mutants']} mutants of {len(models)} vector models: "
              f"{counts['agree']} agree, {counts['refused']} refused, {counts['disagree']} disagree")
    finally:
        logger.setLevel(level)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
