"""How the client runtime would spread the conformance vector models over
devices (placement and partitions only, nothing prepared):

    python -m nnhal.tools.partitions [--devices A,B,...] [PATH...]

prints how many models need 1, 2, 3... partitions, how many operations each
device gets, and the models with the most partitions."""

from __future__ import annotations

import argparse
import collections
import logging
import sys
from pathlib import Path
from typing import Optional

from nnhal.conformance import vectors
from nnhal.platform import memory as hal_memory
from nnhal.runtime import Compilation, CompilationError

DEFAULT_DEVICES = "sample-float-fast,sample-quant,sample-minimal"


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m nnhal.tools.partitions", description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="*", help="vector files or folders (default: ../shared/conformance)")
    ap.add_argument("--devices", default=DEFAULT_DEVICES)
    ap.add_argument("--top", type=int, default=5, help="list this many models with the most partitions")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.CRITICAL)
    paths = args.paths or [str(Path(__file__).resolve().parents[3] / ".." / "shared" / "conformance")]
    devices = [d.strip() for d in args.devices.split(",") if d.strip()]
    counts: collections.Counter = collections.Counter()
    per_device: collections.Counter = collections.Counter()
    worst: list[tuple[int, str]] = []
    errors = 0
    for vm in vectors.load(paths):
        model = vm.build_model()
        try:
            plan = Compilation(model, devices).plan()
        except CompilationError:
            errors += 1
            continue
        finally:
            for m in model.pools:
                hal_memory.free(m)
        counts[len(plan)] += 1
        for name, ops in plan:
            per_device[name] += len(ops)
        worst.append((len(plan), vm.name))
    total = sum(counts.values())
    print(f"{total} models over {', '.join(devices)} ({errors} not placeable)")
    for n in sorted(counts):
        print(f"  {n} partition(s): {counts[n]} models")
    print("operations per device: " + ", ".join(f"{d} {n}" for d, n in per_device.most_common()))
    for n, name in sorted(worst, reverse=True)[: args.top]:
        print(f"  {name}: {n} partitions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
