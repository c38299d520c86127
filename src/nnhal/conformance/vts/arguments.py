"""The options of ``nnhal vts`` (light: ``nnhal --help`` loads no numpy)."""

from __future__ import annotations

import argparse

from nnhal.conformance.vts.sections import SECTIONS


def add_arguments(s: argparse.ArgumentParser) -> None:
    s.add_argument("paths", nargs="*", help="vector files or folders (default: $NNHAL_VECTORS, else "
                                            "../shared/conformance)")
    s.add_argument("--device", default="sample-all", help="the device to test: an in-process driver or a running "
                                                         "service (nnhal devices lists them)")
    s.add_argument("--hal", choices=["hidl", "aidl"], default="hidl",
                   help="the interface to test: hidl (HAL 1.3, VTS 1.3's sections) or aidl (the stable AIDL at the "
                        "device's interface version, the AIDL VTS's sections; the AIDL vectors run too)")
    s.add_argument("--section", action="append", nargs="+", metavar="S",
                   help=f"only these sections (repeatable; comma-separated too): {', '.join(SECTIONS)}")
    s.add_argument("--ops", action="append", help="only models whose operations are all in this comma-separated "
                                                  "list (repeatable)")
    s.add_argument("--model", default="", help="only models whose name contains this")
    s.add_argument("--sample", type=int, default=None, metavar="N",
                   help="N mutations per model and section (spread evenly; default: all of them, the full sweep "
                        "for a release run)")
    where = s.add_mutually_exclusive_group()
    where.add_argument("--jobs", type=int, default=None, help="run in N local worker processes, each with its own "
                                                              "device or connection (default: the number of cores)")
    where.add_argument("--cluster", metavar="ADDRESS", help="run as Ray tasks on the cluster at ADDRESS (auto: the "
                                                            "one this machine belongs to); pip install "
                                                            "'nnhal[cluster]'")
    s.add_argument("--json", help="write a JSON report here (every case)")
    s.add_argument("--html", help="write an HTML report here (a table per section; failures; unsupported cases)")
    s.add_argument("--junit-xml", help="write a JUnit XML report here (a testsuite per section, a testcase per case)")
    s.add_argument("--progress", action="store_true", help="progress lines even when not on a terminal")
    s.add_argument("--no-progress", action="store_true", help="no progress display")
