"""What the litert-cpu driver supports of the conformance vectors, and why
not the rest: ``python -m nnhal.tools.litert_coverage [VECTORS_DIR]``.

Prints the coverage (models whose every operation the driver supports / all
models, the quant8-signed copies the conformance runner adds not counted),
then the largest groups of unsupported models by the first reason
the driver gives (``nnhal.supported_operations``: the reasons ``getSupportedOperations_1_3``
logs; numbers stripped, so one reason groups every operand index); ``--operations``: per operation and
data type, what :func:`nnhal.drivers.litert.lower.check_operation` gives.  A model of the AIDL HAL
(``minSupportedVersion`` AIDL_V2.., ../shared/conformance-aidl) is asked through the AIDL face at its
version (``getSupportedOperations``, which gives no reasons: a refusal's is the lowering's own check's)."""

from __future__ import annotations

import argparse
import collections
import gzip
import re
import sys
from pathlib import Path

import nnhal
from nnhal import hal
from nnhal.conformance import vectors
from nnhal.drivers.litert import lower
from nnhal.platform import memory as hal_memory


def _reason(text: str) -> str:
    text = re.sub(r"exact for \[.*\]", "exact for (listed types)", text)
    return re.sub(r"(?<![A-Za-z_\d])-?\d+(\.\d+)?(?![A-Za-z_\d])", "N", text)


def operation_support(root: str, ops: set[str] | None = None) -> dict[str, dict[str, list[int]]]:
    """Per operation (of ``ops``, all: None), per data type: [instances the lowering takes, instances] over
    every operation instance in every vector model's main subgraph under ``root``, the quant8-signed copies
    the conformance runner makes included -- the lowering's own check, no HAL front end in between."""
    from nnhal.conformance.runner import has_quant8_coupled_operands, to_signed

    out: dict[str, dict[str, list[int]]] = collections.defaultdict(dict)
    for f in sorted(Path(root).rglob("*.json*")):
        try:
            if ops is not None:
                with gzip.open(f, "rt") as fh:
                    text = fh.read()
                if not any(f'"{name}"' in text for name in ops):
                    continue
            models = vectors.load_file(str(f))
        except (OSError, EOFError, ValueError) as e:
            print(f"{f}: {e}", file=sys.stderr)
            continue
        for vm in models:
            for v in [vm, to_signed(vm)] if has_quant8_coupled_operands(vm) else [vm]:
                if ops is not None and not ops & {hal.operation_name(o.type) for o in v.main.operations}:
                    continue
                model = v.build_model()
                try:
                    views = [hal_memory.PrivateCopy(m).view for m in model.pools]
                    f16, shapes = lower.uses_float16(model), lower.static_shapes(model, views)
                    for op in model.main.operations:
                        name = hal.operation_name(op.type)
                        if ops is None or name in ops:
                            counts = out[name].setdefault(v.operation_data_type(op), [0, 0])
                            counts[0] += not lower.check_operation(model, views, op, f16, shapes)
                            counts[1] += 1
                finally:
                    for m in model.pools:
                        hal_memory.free(m)
    return dict(out)


def _aidl_reasons(version: hal.HalVersion, model: hal.Model) -> list[str]:
    """Per main operation, why litert-cpu's AIDL face at ``version`` refuses it ("" where it takes it)."""
    from nnhal import aidl

    device = aidl.get_device("litert-cpu", int(version) - int(hal.HalVersion.AIDL_V1) + 1)
    try:
        flags = device.getSupportedOperations(aidl.convert.from_canonical(model))
    except aidl.ServiceSpecificError as e:
        return [f"invalid model ({aidl.ErrorStatus(e.status).name})"] * len(model.main.operations)
    views = [hal_memory.PrivateCopy(m).view for m in model.pools]
    f16, shapes = lower.uses_float16(model), lower.static_shapes(model, views)
    return ["" if ok else lower.check_operation(model, views, op, f16, shapes) or
            "refused (the AIDL face gives no reason)" for ok, op in zip(flags, model.main.operations)]


def print_operations(support: dict[str, dict[str, list[int]]]) -> None:
    taken = sorted(op for op, types in support.items() if any(k for k, _ in types.values()))
    print(f"operations litert-cpu supports in at least one vector model ({len(taken)} of {len(support)} used "
          f"by the vectors): {', '.join(taken)}")
    for op in sorted(support):
        print(f"  {op:30s} " + ", ".join(f"{t} {k}/{n}" for t, (k, n) in sorted(support[op].items())))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m nnhal.tools.litert_coverage")
    ap.add_argument("vectors", nargs="?", default=str(Path(__file__).resolve().parents[3] / ".." / "shared" /
                                                      "conformance"))
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--operations", action="store_true",
                    help="instead: per operation and data type, the operation instances of the vector models "
                         "the lowering takes (the list nnhal ops --device litert-cpu must agree with)")
    ap.add_argument("--ops", help="with --operations: only these operations (comma-separated)")
    args = ap.parse_args(argv)
    if args.operations:
        ops = {o.strip().upper() for o in args.ops.split(",")} if args.ops else None
        print_operations(operation_support(args.vectors, ops))
        return 0
    device = nnhal.get_device("litert-cpu")
    files = sorted(p for p in Path(args.vectors).rglob("*.json*"))
    total = supported = 0
    groups: collections.Counter = collections.Counter()
    examples: dict[str, str] = {}
    for f in files:
        try:
            models = vectors.load_file(str(f))
        except (OSError, ValueError) as e:
            print(f"{f}: {e}", file=sys.stderr)
            continue
        for vm in models:
            try:
                model = vm.build_model()
            except Exception as e:  # noqa: BLE001  # NOTE: a vector the builder refuses is counted as such
                groups["model not buildable: " + type(e).__name__] += 1
                total += 1
                continue
            try:
                # NOTE: the driver's own answer (validation, the operation checks, LiteRT preparing the
                # lowered model, the operations no backend can be held to the reference on)
                if vm.version is not None and vm.version > hal.HalVersion.V1_3:
                    reasons = _aidl_reasons(vm.version, model)
                else:
                    status, _, reasons = nnhal.supported_operations(device, model)
                    if status != hal.ErrorStatus.NONE:
                        reasons = [f"invalid model ({hal.ErrorStatus(status).name})"] * len(model.main.operations)
            finally:
                for m in model.pools:
                    hal_memory.free(m)
            total += 1
            first = next((r for r in reasons if r), "")
            if not first:
                supported += 1
            else:
                key = _reason(first)
                groups[key] += 1
                examples.setdefault(key, vm.name)
    print(f"litert-cpu coverage: {supported} / {total} conformance models supported ({100 * supported / max(total, 1):.1f}%)")
    print(f"largest unsupported groups (first reason per model, {len(groups)} groups):")
    for key, n in groups.most_common(args.top):
        print(f"  {n:5d}  {key}   e.g. {examples.get(key, '')}")
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except BrokenPipeError:  # NOTE: the output piped into head and the like
        sys.stderr.close()
        raise SystemExit(0) from None
