"""``python -m nnhal.conformance.randgraph.replay --device D FILE``: the vector
models of FILE prepared and run once (synchronously) on device D (``--hal
aidl``: through its AIDL face), in this process; exit status 0 whatever the verdict.  What the random section's
crash shrinking runs in a fresh process per candidate: a driver that crashes
ends this process with a signal (a negative exit status)."""

from __future__ import annotations

import argparse
import logging
import sys
import warnings
from typing import Optional


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m nnhal.conformance.randgraph.replay")
    p.add_argument("--device", required=True)
    p.add_argument("--hal", choices=("hidl", "aidl"), default="hidl")
    p.add_argument("path")
    args = p.parse_args(argv)
    warnings.simplefilter("ignore")
    logging.disable(logging.CRITICAL)
    from nnhal.conformance.runner import Runner
    from nnhal.conformance.vectors import load_file
    from nnhal.conformance.vts.device import open_face

    device = open_face(args.device, args.hal)
    for vm in load_file(args.path):
        Runner(device, ("sync",), ("plain",)).run_model(vm)
    return 0


if __name__ == "__main__":
    sys.exit(main())
