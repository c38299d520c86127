"""The ``nnhal`` command line."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Any, Optional

# NOTE: `nnhal conformance` and `nnhal vts` both (nnhal.cli.conformance.in_process)
ALL_CPUS_HELP = ("with --jobs 1: leave the run's threads on every CPU (by default they share the one the run starts "
                 "on: in one process they take turns at the interpreter lock, and a hand-over then wakes no idle "
                 "CPU; a backend running native threads of its own may want them all)")


def _default_vectors() -> str:
    from nnhal.conformance.vectors import default_vectors  # NOTE: lazily: `nnhal --help` loads no numpy

    return default_vectors()


class UserError(Exception):
    """A mistake in what the user asked for: one line on stderr, exit status 2, no traceback."""


def _device(name: str):  # noqa: ANN202
    from nnhal.conformance.vts.device import DeviceNotFound, open_device

    try:
        return open_device(name)  # NOTE: one place turns a --device name into a device (nnhal vts too)
    except DeviceNotFound as e:
        raise UserError(str(e)) from None


def _face(name: str, hal: str):  # noqa: ANN202
    """The face ``hal`` of the device ``name`` (nnhal.conformance.face), or one line for the user."""
    from nnhal.conformance.vts.device import DeviceNotFound, open_face

    try:
        return open_face(name, hal)
    except DeviceNotFound as e:
        raise UserError(str(e)) from None


def _device_info(name: str, kind: str, verbose: bool) -> dict:
    from nnhal import hal

    d = _device(name)
    _, version = d.getVersionString()
    _, dtype = d.getType()
    _, caps = d.getCapabilities_1_3()
    perf = {hal.OperandType(p.type).name: {"execTime": round(p.info.execTime, 4), "powerUsage":
                                           round(p.info.powerUsage, 4)} for p in caps.operandPerformance}
    info: dict = {"name": name, "kind": kind, "version": version, "type": hal.DeviceType(dtype).name,
                  "status": d.getStatus().name}
    _, n_model, n_data = d.getNumberOfCacheFilesNeeded()
    info["cache_files"] = {"model": n_model, "data": n_data}
    info["extensions"] = [x.name for x in d.getSupportedExtensions()[1]]
    info["performance"] = {
        "relaxedFloat32toFloat16Scalar": round(caps.relaxedFloat32toFloat16PerformanceScalar.execTime, 4),
        "relaxedFloat32toFloat16Tensor": round(caps.relaxedFloat32toFloat16PerformanceTensor.execTime, 4),
        "IF": round(caps.ifPerformance.execTime, 4), "WHILE": round(caps.whilePerformance.execTime, 4),
        **({"operands": perf} if verbose else {
            k: perf[k]["execTime"] for k in ("TENSOR_FLOAT32", "TENSOR_QUANT8_ASYMM", "TENSOR_QUANT8_ASYMM_SIGNED")
            if k in perf})}
    return info


def cmd_devices(args: argparse.Namespace) -> int:
    """``nnhal devices``: one line per device (``-v``: every capability figure; ``--json``)."""
    import json

    import nnhal
    from nnhal.drivers import registry

    if args.remeasure:
        from nnhal.driver import capcache

        print(f"forgot {capcache.forget()} kept capability measurement(s) in {capcache.cache_dir()}",
              file=sys.stderr)
    verbose = getattr(args, "verbose", 0) > 0
    local = registry.entries(load=True)
    unavailable = [{"name": e.name, "source": e.source, "target": e.target, "error": str(e.error)}
                   for e in local if e.error is not None]
    loaded = {e.name: e for e in local if e.error is None}
    infos = []
    for name in [*loaded, *(n for n in nnhal.list_services() if n not in loaded)]:
        e = loaded.get(name)
        kind = "service" if e is None else "in process" if e.source == "built-in" else f"plugin {e.target}"
        infos.append(_device_info(name, kind, verbose))
    if args.json:
        text = json.dumps({"devices": infos, "unavailable": unavailable}, indent=1)
        if args.json == "-":
            print(text)
        else:
            try:
                Path(args.json).write_text(text + "\n")
            except OSError as err:
                raise UserError(f"--json {args.json}: {err.strerror or err}") from None
        if args.json == "-":
            return 0
    for u in unavailable:
        print(f"{u['name']} ({u['source']}{'' if u['source'] == 'built-in' else ' ' + u['target']}): "
              f"not available: {u['error']}")
    for i in infos:
        p = i["performance"]
        if not verbose:
            figures = ", ".join(f"{k.replace('TENSOR_', '').lower()} {v:.2f}" for k, v in p.items()
                                if k.startswith("TENSOR_"))
            exts = f"; extensions: {', '.join(i['extensions'])}" if i["extensions"] else ""
            print(f"{i['name']} ({i['kind']}): {i['version']}, {i['type']}, {i['status']}; execTime {figures}{exts}")
            continue
        print(f"{i['name']} ({i['kind']}): {i['version']}, type {i['type']}, status {i['status']}")
        print(f"  relaxed float32: scalar {p['relaxedFloat32toFloat16Scalar']:.3f}, "
              f"tensor {p['relaxedFloat32toFloat16Tensor']:.3f}")
        for t, f in p["operands"].items():
            print(f"  {t:32s} execTime {f['execTime']:.3f}  powerUsage {f['powerUsage']:.3f}")
        print(f"  IF {p['IF']:.3f}, WHILE {p['WHILE']:.3f}")
        print(f"  cache files: model {i['cache_files']['model']}, data {i['cache_files']['data']}; "
              f"extensions: {', '.join(i['extensions']) or 'none'}")
    if not verbose and infos:
        print("(execTime relative to the CPU reference's float32; -v: every figure; --json F: all of it)")
    return 0


def cmd_conformance(args: argparse.Namespace) -> int:
    import nnhal
    from nnhal.cli import conformance as command

    env = os.environ.get("NNHAL_VECTORS")
    if env and not args.paths and not Path(env).is_dir():  # NOTE: a wrong $NNHAL_VECTORS is said, not passed over
        raise UserError(command.missing_vectors_message(env))
    args.default_vectors = _default_vectors()
    try:
        return command.run(args, lambda name: _face(name, args.hal), nnhal.__version__)
    except command.UserError as e:
        raise UserError(str(e)) from None


def cmd_vts(args: argparse.Namespace) -> int:
    import nnhal
    from nnhal.cli import conformance as conformance_command
    from nnhal.cli import vts as command

    env = os.environ.get("NNHAL_VECTORS")
    if env and not args.paths and not Path(env).is_dir():
        raise UserError(conformance_command.missing_vectors_message(env))
    args.default_vectors = _default_vectors()
    try:
        return command.run(args, nnhal.__version__)
    except conformance_command.UserError as e:
        raise UserError(str(e)) from None


def cmd_ops(args: argparse.Namespace) -> int:
    from nnhal.cli import conformance as command
    from nnhal.tools import opsupport

    if not args.device:
        for option in ("json", "ops"):
            if getattr(args, option):
                raise UserError(f"--{option} needs --device (without it the signatures are listed)")
        return opsupport.print_registry(sys.stdout)
    ops = None
    try:
        if args.ops:
            ops = {o.strip().upper() for o in ",".join(args.ops).split(",") if o.strip()}
            command.check_operations(ops)
        command.check_writable(args.json, "--json")
    except command.UserError as e:
        raise UserError(str(e)) from None
    # NOTE: a $NNHAL_VECTORS that is no folder is not passed over for another: the report says no vectors there
    env = os.environ.get("NNHAL_VECTORS")
    where = env if env and not Path(env).is_dir() else _default_vectors()
    device = _device(args.device)
    try:
        report = opsupport.run(device, args.device, sys.stdout, ops=ops, vectors_dir=where,
                               verbose=getattr(args, "verbose", 0) > 0)
    except opsupport.DeviceUnavailable as e:
        print(f"nnhal ops: {args.device}: {e}", file=sys.stderr)
        return 1
    if args.json:
        try:
            opsupport.write_json(report, args.device, args.json)
        except OSError as e:
            raise UserError(f"--json {args.json}: {e.strerror or e}") from None
    from nnhal.tools.extensions import print_extensions

    print_extensions(device, args.device, sys.stdout)  # NOTE: what the device declares beyond the operations
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    import nnhal
    from nnhal.service import registry
    from nnhal.service.server import serve

    try:
        registry.validate_name(args.name)
    except ValueError as e:
        raise UserError(f"--name {args.name!r}: {e}") from None
    try:
        nnhal.get_device(args.driver)  # NOTE: loaded before binding, so a bad driver is one line and exit 2
    except (LookupError, ValueError, ImportError) as e:
        raise UserError(f"--driver {args.driver!r}: {e}") from None
    try:
        return serve(args.name, args.driver)
    except registry.RegistryError as e:
        raise UserError(f"the runtime folder: {e}") from None
    except OSError as e:  # NOTE: the socket cannot be bound (a name in use, no space, ...)
        raise UserError(f"cannot serve {args.name}: {e.strerror or e}") from None


def cmd_demo(args: argparse.Namespace) -> int:
    from nnhal.cli.demo import run_demo

    device = _device(args.device)  # NOTE: an unknown name is one line (with the closest names) and exit 2
    return run_demo(_default_vectors(), args.device, device)


def cmd_bench(args: argparse.Namespace) -> int:
    if any(a in ("-h", "--help") for a in args.rest) and "--ipc" not in args.rest:
        from nnhal.cli.delegate import run_engine
        from nnhal.cli.tflite import bench_main  # NOTE: one help showing every form of the command

        return bench_main(["--help"], _device, engine=run_engine)
    if any(a.endswith(".tflite") for a in args.rest):
        from nnhal.cli.delegate import run_engine
        from nnhal.cli.tflite import bench_main  # NOTE: .tflite models (as the NNAPI delegate runs them) vs LiteRT

        return bench_main(args.rest, _device, engine=run_engine)
    if "--cache" in args.rest or "--priority" in args.rest:
        from nnhal.cli import bench_qos  # NOTE: compilation cache and priority figures (their own options)

        return bench_qos.main(args.rest)
    from nnhal.cli import bench

    return bench.main(args.rest)


def cmd_run(args: argparse.Namespace) -> int:
    from nnhal.cli.delegate import run_main  # NOTE: planned as the NNAPI delegate (or --plan max) would

    return run_main(args, _device)


def cmd_graph(args: argparse.Namespace) -> int:
    from nnhal.cli.tflite import graph_main

    if args.model.endswith(".tflite") and not args.hal:
        from nnhal.cli.delegate import graph_main as plan_graph  # NOTE: TFLite operators by partition
        from nnhal.cli.delegate import plan_groups

        # NOTE: the HAL model laid out by Graphviz, its operations boxed by the delegate plan's partitions
        return graph_main(args, _device, operator_groups=lambda: plan_groups(args, _device),
                          fallback=lambda: plan_graph(args, _device))
    return graph_main(args, _device)


def build_parser() -> argparse.ArgumentParser:
    """The whole command line (every subcommand and option)."""
    import nnhal

    p = argparse.ArgumentParser(prog="nnhal", description="The Android Neural Networks HAL 1.3 in Python.",
                                epilog="examples:\n  nnhal devices\n  nnhal conformance --mode sync\n"
                                       "  nnhal ops --device sample-all\n  nnhal <command> --help",
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"nnhal {nnhal.__version__}",
                   help="print the version and exit")
    p.add_argument("-v", "--verbose", action="count", default=0,
                   help="log lines on stderr (-v: INFO, -vv: DEBUG), each naming the model it belongs to")
    p.add_argument("-q", "--quiet", action="store_true", default=False, help="no progress display, no log lines")
    # NOTE: -v / -q are accepted after the subcommand too (SUPPRESS: an absent flag keeps the top-level value)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS,
                        help="log lines on stderr (-v: INFO, -vv: DEBUG)")
    common.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                        help="no progress display, no log lines")
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND")

    def command(name: str, help: str, example: str, **kw: Any) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help, description=help, parents=[common],
                              epilog=f"example:\n  {example}", formatter_class=argparse.RawDescriptionHelpFormatter,
                              **kw)

    s = command("devices", "list the devices and their capabilities (one line each; -v: every figure)",
                "nnhal devices -v; nnhal devices --json devices.json")
    s.add_argument("--json", default="", help="write every device's figures as JSON to this file ('-': stdout)")
    s.add_argument("--remeasure", action="store_true",
                   help="forget the capability figures kept for this machine (measured once, kept in the state "
                        "folder) and measure them again")
    s.set_defaults(fn=cmd_devices)

    s = command("ops", "every operation with the data types and HAL versions a device supports, and why not",
                "nnhal ops --device litert-cpu --ops CONV_2D,TRANSPOSE -v --json ops.json\n"
                "  (with --device, -v also lists every vector form with the device's answer)")
    s.add_argument("--device", default="", help="ask this device, in process or a service (every conformance "
                                                "vector model using an operation, and one unknown-shape model per "
                                                "signature, through getSupportedOperations_1_3, with the device's "
                                                "reason for each refusal); default: list the operation signatures. "
                                                "Example: --device litert-cpu")
    s.add_argument("--ops", action="append", help="only these operations (comma-separated, repeatable); "
                                                  "example: --ops CONV_2D,TRANSPOSE")
    s.add_argument("--json", help="also write the answer as JSON here (per operation, per data type: vector forms "
                                  "supported / refused, the reasons counted, the unknown-shape probe, every "
                                  "form); example: --json ops.json")
    s.set_defaults(fn=cmd_ops)

    s = command("conformance", "run the conformance vectors through a driver",
                "nnhal conformance --ops CONV_2D,ADD --mode sync --html report.html")
    s.add_argument("paths", nargs="*", help="vector files or folders (default: $NNHAL_VECTORS, else "
                                            "../shared/conformance)")
    s.add_argument("--ops", action="append", help="only models whose operations are all in this "
                                                  "comma-separated list (repeatable)")
    s.add_argument("--model", default="", help="only models whose name contains this")
    s.add_argument("--mode", choices=["sync", "async", "burst", "fenced", "reusable", "reusable-fenced",
                                      "sync-config", "burst-config", "fenced-config", "all"], default="all",
                   help="executor: HAL 1.3: executeSynchronously_1_3, execute_1_3, a burst, executeFenced; AIDL: "
                        "executeSynchronously, an IBurst, executeFenced, a reusable IExecution run synchronously "
                        "or fenced, the version-4 *WithConfig calls; all: every one of the face (AIDL: but the "
                        "*-config ones)")
    s.add_argument("--hal", choices=["hidl", "aidl"], default="hidl",
                   help="the interface to judge the device through (hidl: HAL 1.3; aidl: the stable AIDL "
                        "android.hardware.neuralnetworks, which also runs the AIDL vectors)")
    s.add_argument("--skip-variant", action="append", choices=["dynamic", "signed"],
                   help="leave out the dynamic-shape or the quant8-signed variant of the models (repeatable)")
    s.add_argument("--device", default="sample-all", help="the device to test: an in-process driver or a running "
                                                         "service (nnhal devices lists them)")
    s.add_argument("--devices", default="", help="A,B,...: run through the client runtime (nnhal.runtime) over "
                                                "these devices, each model partitioned where a device refuses part "
                                                "of it (operations none takes on the CPU reference)")
    s.add_argument("--memory", choices=["ashmem", "mmap_fd", "hardware_buffer_blob", "device"], default="ashmem",
                   help="kind of memory for the request pools (VTS runs ashmem and blobs); device: inputs and "
                        "outputs in driver-allocated buffers (IDevice.allocate, IBuffer.copyFrom / copyTo)")
    s.add_argument("--json", help="write a JSON report here")
    s.add_argument("--html", help="write an HTML report here (sortable, filterable; open it in a browser)")
    s.add_argument("--junit-xml", help="write a JUnit XML report here (for CI systems)")
    s.add_argument("--jobs", type=int, default=None,
                   help="run the models in N worker processes, each with its own device or connection "
                        "(default: the number of cores; 1: in this process)")
    s.add_argument("--all-cpus", action="store_true", help=ALL_CPUS_HELP)
    s.add_argument("--progress", action="store_true", help="progress display even when not on a terminal "
                                                           "(plain lines with an ETA)")
    s.add_argument("--no-progress", action="store_true", help="no progress display")
    s.add_argument("--plain", action="store_true", help="plain-text tables even on a terminal")
    s.add_argument("--allow-unsupported", action="store_true", help="exit 0 even if operations are unsupported")
    s.set_defaults(fn=cmd_conformance)

    s = command("vts", "every VTS 1.3 functional section against a device: generated tests, model and request "
                       "mutations, bursts, memory domains, compilation caching, deadlines and priorities",
                "nnhal vts --device sample-all --sample 20 --jobs 2 --html vts.html")
    from nnhal.conformance.vts.arguments import add_arguments

    add_arguments(s)
    s.add_argument("--all-cpus", action="store_true", help=ALL_CPUS_HELP)
    s.set_defaults(fn=cmd_vts)

    s = command("serve", "run a driver as a service process (foreground, until SIGTERM / SIGINT)",
                "nnhal serve --name nnhal-cpu --driver sample-all\n\n"
                "the service serves both faces of the driver; a client picks one when it connects:\n"
                "  nnhal.connect('nnhal-cpu')                      HIDL 1.0-1.3\n"
                "  nnhal.aidl.connect('nnhal-cpu', version=4)      AIDL versions 1-4 (or nnhal.aidl.open_device)")
    s.add_argument("--name", required=True, help="instance name: exactly one '-', e.g. nnhal-cpu")
    s.add_argument("--driver", default="sample-all", help="the in-process driver to serve (default sample-all)")
    s.set_defaults(fn=cmd_serve)

    s = command("demo", "prepare and run real models from the vectors on sample-all", "nnhal demo")
    s.add_argument("--device", default="sample-all", help="the device to run them on")
    s.set_defaults(fn=cmd_demo)

    s = command("run", "run a .tflite model through a HAL device (optionally against LiteRT)",
                "nnhal run model.tflite --compare")
    from nnhal.cli.delegate import add_cache_argument
    from nnhal.cli.tflite import add_graph_arguments, add_run_arguments

    add_run_arguments(s)
    add_cache_argument(s)
    s.set_defaults(fn=cmd_run)

    s = command("graph", "an SVG / HTML picture of the HAL model of a .tflite or vector model",
                "nnhal graph model.tflite -o model.html")
    add_graph_arguments(s)
    s.set_defaults(fn=cmd_graph)

    s = command("bench", example="nnhal bench --threads 1; nnhal bench model.tflite --runs 20", add_help=False,
                help="MobileNet v1/v2 latency and per-layer GFLOP/s (see nnhal bench --help); "
                     "nnhal bench MODEL.tflite: nnhal vs LiteRT (nnhal bench MODEL.tflite --help)")
    s.set_defaults(fn=cmd_bench)

    return p


def main(argv: Optional[list[str]] = None) -> int:
    p = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if "bench" in argv and all(a.startswith("-") for a in argv[: argv.index("bench")]):
        # NOTE: bench has its own option parser; everything after the word is its
        k = argv.index("bench")
        args = p.parse_args(argv[: k + 1])
        rest = argv[k + 1:]
        # NOTE: -v / -q after "bench" are ours, not bench's own parser's
        args.verbose = getattr(args, "verbose", 0) + sum(2 if a == "-vv" else 1 for a in rest
                                                         if a in ("-v", "--verbose", "-vv"))
        args.quiet = getattr(args, "quiet", False) or any(a in ("-q", "--quiet") for a in rest)
        args.rest = [a for a in rest if a not in ("-v", "--verbose", "-vv", "-q", "--quiet")]
    else:
        args = p.parse_args(argv)
    if args.cmd is None:  # NOTE: bare ``nnhal``: the help
        p.print_help()
        return 0
    from nnhal.conformance import logs

    args.log_level = logging.CRITICAL + 10 if args.quiet else \
        (logging.DEBUG if args.verbose > 1 else logging.INFO if args.verbose else logging.CRITICAL)
    logs.install(args.log_level)
    name = f"nnhal {args.cmd}"
    threads = getattr(args, "threads", None)
    if args.cmd == "bench" and "--threads" in args.rest:
        k = args.rest.index("--threads")
        try:
            threads = int(args.rest[k + 1])
        except (IndexError, ValueError):
            threads = None  # NOTE: bench's own parser says what is wrong
    if threads is not None and threads < 1:
        print(f"{name}: --threads {threads}: give 1 or more threads", file=sys.stderr)
        return 2
    try:
        return args.fn(args)
    except BrokenPipeError:  # output piped into a reader that stopped (| head): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except UserError as e:
        print(f"{name}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{name}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - one line for the user; -v shows where
        if args.verbose:
            import traceback

            traceback.print_exc()
        # NOTE: the message, not the exception's class name (-v shows the traceback for a bug report)
        print(f"{name}: {str(e) or 'internal error'}" + ("" if args.verbose else " (-v shows the traceback)"),
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
