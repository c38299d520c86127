"""What the litert-cpu driver supports of the conformance vectors, and why
not the rest: ``python -m nnhal.tools.litert_coverage [VECTORS_DIR]``.

Prints the coverage (models whose every operation the driver supports / all
models, the quant8-signed copies the conformance runner adds not counted),
then the largest groups of unsupported models by the first reason
:func:`nnhal.drivers.litert.lower.check_operation` gives (numbers stripped, so one
reason groups every operand index).  The reasons are the ones
``getSupportedOperations_1_3`` logs."""

from __future__ import annotations

import argparse
import collections
import re
import sys
from pathlib import Path

from nnhal.conformance import vectors
from nnhal.drivers.litert import lower
from nnhal.platform import memory as hal_memory


def _reason(text: str) -> str:
    text = re.sub(r"exact for \[.*\]", "exact for (listed types)", text)
    return re.sub(r"(?<![A-Za-z_\d])-?\d+(\.\d+)?(?![A-Za-z_\d])", "N", text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m nnhal.tools.litert_coverage")
    ap.add_argument("vectors", nargs="?", default=str(Path(__file__).resolve().parents[3] / ".." / "shared" /
                                                      "conformance"))
    ap.add_argument("--top", type=int, default=12)
    args = ap.parse_args(argv)
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
                views = [hal_memory.PrivateCopy(m).view for m in model.pools]
                reasons = [lower.check_operation(model, views, op) for op in model.main.operations]
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
