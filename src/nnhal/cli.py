"""The ``nnhal`` command line."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path
from typing import Optional

# the repository's sibling folder shared/conformance (src/nnhal/cli.py -> repo root -> ..)
DEFAULT_VECTORS = Path(__file__).resolve().parents[2] / ".." / "shared" / "conformance"


def _default_vectors() -> str:
    """$NNHAL_VECTORS, else ../shared/conformance beside the checkout or the current folder."""
    for cand in (os.environ.get("NNHAL_VECTORS"), DEFAULT_VECTORS, Path.cwd() / ".." / "shared" / "conformance",
                 Path.cwd() / "shared" / "conformance"):
        if cand and Path(cand).is_dir():
            return str(Path(cand).resolve())
    return str(DEFAULT_VECTORS.resolve())


def _device(name: str):  # noqa: ANN202
    import nnhal

    if name in nnhal.IN_PROCESS_DEVICES:
        return nnhal.get_device(name)
    connect = getattr(nnhal, "connect", None)
    if connect is None:
        raise SystemExit(f"no device named {name!r}")
    return connect(name)


def cmd_devices(args: argparse.Namespace) -> int:
    import nnhal
    from nnhal import hal

    for name in nnhal.list_devices():
        d = _device(name)
        _, version = d.getVersionString()
        _, dtype = d.getType()
        status, caps = d.getCapabilities_1_3()
        kind = "in process" if name in nnhal.IN_PROCESS_DEVICES else "service"
        print(f"{name} ({kind}): {version}, type {hal.DeviceType(dtype).name}, status {d.getStatus().name}")
        print(f"  relaxed float32: scalar {caps.relaxedFloat32toFloat16PerformanceScalar.execTime:.3f}, "
              f"tensor {caps.relaxedFloat32toFloat16PerformanceTensor.execTime:.3f}")
        for p in caps.operandPerformance:
            print(f"  {hal.OperandType(p.type).name:32s} execTime {p.info.execTime:.3f}  "
                  f"powerUsage {p.info.powerUsage:.3f}")
        print(f"  IF {caps.ifPerformance.execTime:.3f}, WHILE {caps.whilePerformance.execTime:.3f}")
        _, n_model, n_data = d.getNumberOfCacheFilesNeeded()
        print(f"  cache files: model {n_model}, data {n_data}; extensions: {len(d.getSupportedExtensions()[1])}")
    return 0


class _Progress:
    def __init__(self, total: int, enabled: bool):
        self.total, self.enabled, self.n, self.fail, self.t0 = total, enabled, 0, 0, time.perf_counter()

    def step(self, failed: bool, name: str) -> None:
        self.n += 1
        self.fail += failed
        if not self.enabled:
            return
        width = 30
        done = int(width * self.n / max(self.total, 1))
        el = time.perf_counter() - self.t0
        sys.stderr.write(f"\r[{'#' * done}{'.' * (width - done)}] {self.n}/{self.total} fail {self.fail} "
                         f"{el:5.0f}s {name[:40]:40s}")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")


def cmd_conformance(args: argparse.Namespace) -> int:
    from nnhal.conformance import report as rep
    from nnhal.conformance import vectors
    from nnhal.conformance.runner import MODES, VARIANTS, Report, Runner

    ops = None
    if args.ops:
        ops = {o.strip().upper() for o in ",".join(args.ops).split(",") if o.strip()}
    paths = args.paths or [_default_vectors()]
    models = [m for m in vectors.load(paths, ops) if not args.model or args.model in m.name]
    modes = MODES if args.mode == "all" else (args.mode,)
    variants = tuple(v for v in VARIANTS if v not in (args.skip_variant or []))
    runner = Runner(_device(args.device), modes, variants, args.memory)
    report = Report()
    progress = _Progress(len(models), enabled=not args.no_progress and sys.stderr.isatty() or args.progress)
    t0 = time.perf_counter()
    for m in models:
        res = runner.run_model(m)
        report.cases.extend(res)
        progress.step(any(r.status == "fail" for r in res), m.name)
    progress.close()
    report.seconds = time.perf_counter() - t0
    rep.print_table(report)
    if args.json:
        rep.write_json(report, args.json)
    if args.html:
        rep.write_html(report, args.html)
    c = report.counts()
    return 1 if c["fail"] or (c["unsupported"] and not args.allow_unsupported) or not models else 0


def cmd_serve(args: argparse.Namespace) -> int:
    import nnhal
    from nnhal.service import registry
    from nnhal.service.server import serve

    try:
        registry.validate_name(args.name)
    except ValueError as e:
        raise SystemExit(f"nnhal serve: {e}") from None
    if args.driver not in nnhal.IN_PROCESS_DEVICES:
        raise SystemExit(f"nnhal serve: no driver named {args.driver!r}; available: "
                         f"{', '.join(nnhal.IN_PROCESS_DEVICES)}")
    try:
        return serve(args.name, args.driver)
    except registry.RegistryError as e:
        raise SystemExit(f"nnhal serve: {e}") from None


def cmd_demo(args: argparse.Namespace) -> int:
    from nnhal.demo import run_demo

    return run_demo(_default_vectors(), args.device)


def cmd_bench(args: argparse.Namespace) -> int:
    if any(a.endswith(".tflite") for a in args.rest):
        from nnhal.tflite.commands import bench_main  # NOTE: one .tflite model against LiteRT

        return bench_main(args.rest, _device)
    if "--cache" in args.rest or "--priority" in args.rest:
        from nnhal import bench_qos  # NOTE: compilation cache and priority figures (their own options)

        return bench_qos.main(args.rest)
    from nnhal import bench

    return bench.main(args.rest)


def cmd_run(args: argparse.Namespace) -> int:
    from nnhal.tflite.commands import run_main

    return run_main(args, _device)


def cmd_graph(args: argparse.Namespace) -> int:
    from nnhal.tflite.commands import graph_main

    return graph_main(args, _device)


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="nnhal", description="The Android Neural Networks HAL 1.3 in Python.")
    p.add_argument("-v", "--verbose", action="store_true", help="driver log lines on stderr")
    sub = p.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("devices", help="list the devices and their capabilities")
    s.set_defaults(fn=cmd_devices)

    s = sub.add_parser("conformance", help="run the conformance vectors through a driver")
    s.add_argument("paths", nargs="*", help="vector files or folders (default: ../shared/conformance)")
    s.add_argument("--ops", action="append", help="only models whose operations are all in this list")
    s.add_argument("--model", default="", help="only models whose name contains this")
    s.add_argument("--mode", choices=["sync", "async", "burst", "fenced", "all"], default="all",
                   help="executor: executeSynchronously_1_3, execute_1_3, a burst, executeFenced, or all four")
    s.add_argument("--skip-variant", action="append", choices=["dynamic", "signed"])
    s.add_argument("--device", default="sample-all")
    s.add_argument("--memory", choices=["ashmem", "mmap_fd", "hardware_buffer_blob", "device"], default="ashmem",
                   help="kind of memory for the request pools (VTS runs ashmem and blobs); device: inputs and "
                        "outputs in driver-allocated buffers (IDevice.allocate, IBuffer.copyFrom / copyTo)")
    s.add_argument("--json", help="write a JSON report here")
    s.add_argument("--html", help="write an HTML report here")
    s.add_argument("--progress", action="store_true", help="progress bar even when not on a terminal")
    s.add_argument("--no-progress", action="store_true")
    s.add_argument("--allow-unsupported", action="store_true", help="exit 0 even if operations are unsupported")
    s.set_defaults(fn=cmd_conformance)

    s = sub.add_parser("serve", help="run a driver as a service process (foreground, until SIGTERM / SIGINT)")
    s.add_argument("--name", required=True, help="instance name: exactly one '-', e.g. nnhal-cpu")
    s.add_argument("--driver", default="sample-all", help="the in-process driver to serve (default sample-all)")
    s.set_defaults(fn=cmd_serve)

    s = sub.add_parser("demo", help="prepare and run real models from the vectors on sample-all")
    s.add_argument("--device", default="sample-all")
    s.set_defaults(fn=cmd_demo)

    s = sub.add_parser("run", help="run a .tflite model through a HAL device (optionally against LiteRT)")
    from nnhal.tflite.commands import add_graph_arguments, add_run_arguments

    add_run_arguments(s)
    s.set_defaults(fn=cmd_run)

    s = sub.add_parser("graph", help="an SVG / HTML picture of the HAL model of a .tflite or vector model")
    add_graph_arguments(s)
    s.set_defaults(fn=cmd_graph)

    s = sub.add_parser("bench", add_help=False, help="MobileNet v1/v2 latency and per-layer GFLOP/s "
                                                    "(see nnhal bench --help); nnhal bench MODEL.tflite: "
                                                    "nnhal vs LiteRT (nnhal bench MODEL.tflite --help)")
    s.set_defaults(fn=cmd_bench)

    argv = list(sys.argv[1:] if argv is None else argv)
    if "bench" in argv and all(a.startswith("-") for a in argv[: argv.index("bench")]):
        # NOTE: bench has its own option parser; everything after the word is its
        k = argv.index("bench")
        args = p.parse_args(argv[: k + 1])
        args.rest = argv[k + 1:]
    else:
        args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.CRITICAL,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return args.fn(args)
    except BrokenPipeError:  # output piped into a reader that stopped (| head): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
