"""``python -m nnhal.tools.litert_rounding [--models N] [--ops A,B]``: how far
litert-cpu's quantized results are from the reference's, per (operation,
quantized type) it supports: one-operation random models (the random
section's generator, fixed seeds) run on both, and the share of output values
that differ, with the largest difference in quantization steps.  What the
README's statement on litert-cpu's quantized rounding rests on: TFLite's
kernels requantize with other roundings than Android's reference, within the
vectors' tolerance of one step, and a later operation can amplify a step
beyond a whole graph's criteria (the random section finds those)."""

from __future__ import annotations

import argparse
from typing import Optional

import numpy as np

from nnhal import hal

QUANT = (hal.OperandType.TENSOR_QUANT8_ASYMM, hal.OperandType.TENSOR_QUANT8_ASYMM_SIGNED)
SEED = 5000


def measure(op: hal.OperationType, t: hal.OperandType, models: int, device: object, reference: object) -> tuple:
    """(models run on both, output values, values that differ, the largest difference in steps)."""
    from nnhal.conformance.randgraph import differential as d
    from nnhal.conformance.randgraph.generator import Options, single

    ran = values = differ = 0
    worst = 0.0
    for s in range(models):
        m = single(op, t, SEED + s, Options())
        if m is None:
            continue
        vm = m.to_vector("r", "r")
        _, want = d.run_reference(reference, vm)
        _, got = d.run_reference(device, vm)
        if want is None or got is None:
            continue
        ran += 1
        for a, b in zip(want, got):
            if a.dtype.kind not in "iu":
                continue
            diff = np.abs(a.astype(np.int64) - b.astype(np.int64))
            values += diff.size
            differ += int((diff > 0).sum())
            worst = max(worst, float(diff.max()) if diff.size else 0.0)
    return ran, values, differ, worst


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m nnhal.tools.litert_rounding", description=__doc__.split("\n\n")[0])
    p.add_argument("--models", type=int, default=40, help="one-operation models per (operation, type) (default 40)")
    p.add_argument("--ops", default="", help="only these operations (comma-separated)")
    p.add_argument("--device", default="litert-cpu")
    args = p.parse_args(argv)
    import nnhal
    from nnhal.conformance.randgraph.generator import Options
    from nnhal.conformance.randgraph.probe import pairs
    from nnhal.conformance.vts import random as section

    device, reference = nnhal.open_device(args.device), section.reference()
    only = {o.strip().upper() for o in args.ops.split(",") if o.strip()}
    print(f"{args.device} against the reference, {args.models} one-operation models per pair (seeds {SEED}..)")
    print(f"{'operation':28s} {'type':28s} {'models':>6s} {'values':>7s} {'differ':>7s} {'share':>7s}  max steps")
    for op, t in pairs(Options()):
        if t not in QUANT or (only and op.name not in only):
            continue
        ran, values, differ, worst = measure(op, t, args.models, device, reference)
        if ran:
            print(f"{op.name:28s} {t.name:28s} {ran:6d} {values:7d} {differ:7d} {100 * differ / max(values, 1):6.2f}%"
                  f"  {worst:.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
