"""``nnhal run``, ``nnhal bench MODEL.tflite`` and ``nnhal graph``: TFLite
models through a HAL device, against LiteRT.  The command line (``cli.py``)
passes a ``device_of(name) -> IDevice`` so these commands reach a device in
process or a running service the same way every other command does.

Exit status: 0 on success; 2 when the model cannot be converted (every
unmapped operator is printed; an invalid file, one that cannot be read, or an
``--input`` that is missing or not a ``.npy`` array is one line); 3 when the device refuses to prepare it or the
execution fails; 1 with ``--strict`` when a comparison is beyond tolerance.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator, NoReturn, Optional

import numpy as np

from nnhal.cli.app import UserError
from nnhal.delegate.contain import LiteRTCrash, LiteRTError, block_times
from nnhal.delegate.run import (
    DataPathFloor,
    ExecutionError,
    HalSession,
    LiteRT,
    make_inputs,
)
from nnhal.hal.types import HalVersion
from nnhal.tflite.errors import InvalidModelError, UnsupportedModelError
from nnhal.tflite.loader import IODescription, free_model, load
from nnhal.tflite.schema import MissingDependency

DeviceOf = Callable[[str], Any]


@contextlib.contextmanager
def model_errors(path: str) -> Iterator[None]:
    """A model that cannot be read or converted (or LiteRT missing for it): one line on stderr (one per
    refused operator for an unsupported model) and exit status 2; ``run`` and the delegate plan share it."""
    try:
        yield
    except UnsupportedModelError as e:
        why = str(e)
    except InvalidModelError as e:
        why = f"not a valid TFLite model: {e}"
    except OSError as e:
        why = f"cannot read the model: {e.strerror or e}"
    except MissingDependency as e:
        why = str(e)
    else:
        return
    print(f"{path}: {why}", file=sys.stderr)
    raise SystemExit(2) from None


def _load(path: str, batch: Optional[int], expose: bool = False, custom_ops: Optional[dict] = None,
          version: HalVersion = HalVersion.V1_3) -> tuple[Any, IODescription]:
    """``load``; a model that cannot be converted exits with status 2 (:func:`model_errors`)."""
    with model_errors(path):
        return load(path, batch=batch, expose_intermediates=expose, custom_ops=custom_ops, version=version)
    raise AssertionError("unreachable")  # NOTE: model_errors either returns the model or exits


def api_version(args: argparse.Namespace) -> HalVersion:
    """The HAL interface of ``--android-api`` (HAL 1.0-1.3, AIDL v1-v4; HAL 1.3 without it)."""
    api = getattr(args, "android_api", None)
    if api is None:
        return HalVersion.V1_3
    from nnhal.delegate.levels import runtime_feature_level, version_of

    return version_of(runtime_feature_level(api))


def custom_operators(devices: list) -> dict[str, tuple[str, int]]:
    """``{custom code: (extension, operation type)}`` that in-process drivers among ``devices``
    declare (``nnhal.ops.extension.Extension.custom_ops``; the HAL has no call for it, so a
    service's are not known here); the first device declaring a code wins."""
    from nnhal.driver import Device

    out: dict[str, tuple[str, int]] = {}
    for d in devices:
        for ext in d.extensions if isinstance(d, Device) else ():
            for code, op_type in ext.custom_ops.items():
                out.setdefault(code, (ext.name, int(op_type)))
    return out


def summary(io: IODescription) -> str:
    ops = ", ".join(f"{k} {v}" for k, v in io.operators.most_common())
    rw = ", ".join(f"{k} {v}" for k, v in io.rewrites.most_common()) or "none"
    hal_ops = sum(io.hal_operations.values())
    return (f"{sum(io.operators.values())} TFLite operators ({ops}); rewrites: {rw}; "
            f"{hal_ops} HAL operations")


def load_npy(path: str, option: str = "--input") -> np.ndarray:
    """A .npy file's array; a missing file, one that is no .npy array (a .npz archive, a pickle), or whose
    header asks for more data than it holds (checked before anything is allocated) is a one-line user error."""
    from numpy.lib import format as npy

    try:
        with open(path, "rb") as f:
            magic = f.read(6)
            if magic[:4] == b"PK\x03\x04":
                raise UserError(f"{option} {path}: a .npz archive, not a .npy array file")
            if magic != b"\x93NUMPY":  # NOTE: np.load would take any other file for a pickle
                raise UserError(f"{option} {path}: not a .npy file (save arrays with numpy.save)")
            f.seek(0)
            version = npy.read_magic(f)
            header = npy.read_array_header_2_0 if version >= (2, 0) else npy.read_array_header_1_0
            shape, _, dtype = header(f)
            need = math.prod(shape) * dtype.itemsize
            have = os.fstat(f.fileno()).st_size - f.tell()
            if need > have:
                raise UserError(f"{option} {path}: .npy file truncated: its header says {need} bytes of data, "
                                f"it holds {have}")
        return np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise UserError(f"{option} {path}: no such file") from None
    except IsADirectoryError:
        raise UserError(f"{option} {path}: is a folder, not a .npy file") from None
    except OSError as e:
        raise UserError(f"{option} {path}: {e.strerror or 'cannot be read'}") from None
    except (ValueError, EOFError) as e:  # NOTE: not a .npy (or a pickled object array, which is refused)
        why = "an object array (pickled), which is refused" if "pickle" in str(e) else "not a .npy array file"
        raise UserError(f"{option} {path}: {why}") from None


# NOTE: public for the delegate plan's run command (cli/delegate.py), which reads --input the same way
read_npy = load_npy


def _user_error(message: str) -> NoReturn:
    """A mistake in what the user gave: one line on stderr and exit status 2 (cli.app.main)."""
    raise UserError(message)


def tensor_line(d: Any, a: Optional[np.ndarray] = None) -> str:
    """``NAME: int8[1, 96, 96, 3] (scale 0.0078, zero point -1)`` for a model input or output."""
    shape = list(a.shape) if a is not None else list(d.shape)
    q = f" (scale {d.scale:.6g}, zero point {d.zero_point})" if getattr(d, "quantized", False) else ""
    return f"{d.name}: {np.dtype(d.dtype)}{shape}{q}"


def check_run_flags(args: argparse.Namespace) -> None:
    """Flags that contradict one another: refused in one line before anything is loaded."""
    devices = (getattr(args, "devices", "") or "").strip()
    if devices and args.device:
        raise UserError(f"--device {args.device} and --devices {devices}: give one (--devices runs through the "
                        "client runtime, partitioned over several devices)")
    plan = getattr(args, "plan", None)
    if getattr(args, "explain", False) and not devices and not plan:
        raise UserError("--explain explains a placement: give --devices A,B,... (or a delegate plan)")
    if args.per_tensor and getattr(args, "keep_unknown", False):
        raise UserError("--per-tensor needs known shapes: leave out --keep-unknown")


def print_inputs(io: IODescription, x: list[np.ndarray], args: argparse.Namespace) -> None:
    """The model's inputs, each with name, type, shape and quantization, and where its values came from."""
    for k, (a, d) in enumerate(zip(x, io.inputs)):
        where = (f"from {args.input[k]}" if args.input else
                 f"RANDOM (seed {args.seed}: {_distribution(a.dtype)}; --input x.npy for real data)")
        print(f"input {k} {tensor_line(d, a)} {where}")


def _distribution(dt: np.dtype) -> str:
    if dt.kind == "f":
        return "uniform [-1, 1)"
    if dt == np.bool_:
        return "coin flips"
    if dt in (np.uint8, np.int8, np.int16):
        return "uniform over the whole range"
    return "uniform [0, 10)"


def save_arrays(out_dir: Path, prefix: str, arrays: list[np.ndarray]) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for k, a in enumerate(arrays):
        np.save(out_dir / f"{prefix}_{k}.npy", a, allow_pickle=False)


def verdict(args: argparse.Namespace, io: IODescription, failures: list[str], drift: str = "") -> int:
    """One line saying whether nnhal matches LiteRT within the tolerance (named), the hint for int8
    against LiteRT's optimized kernels, and the exit status (1 only with ``--strict``)."""
    tol = f"tolerance: float {args.rtol:g} of the tensor's range, quantized {args.steps} step(s)"
    int8 = any(d.quantized for d in io.outputs + io.intermediates)
    if not failures:
        if drift:
            print(f"verdict: MATCH per operation ({tol}; LiteRT {args.kernels} kernels): every operator alone "
                  f"is within tolerance; {drift} differs beyond it through drift along the chain")
        else:
            print(f"verdict: MATCH, every compared tensor within tolerance ({tol}; LiteRT {args.kernels} kernels)")
        if not (drift and int8 and args.kernels != "ref"):
            return 0
    else:
        print(f"verdict: BEYOND TOLERANCE ({tol}): " + "; ".join(failures))
    if int8 and args.kernels != "ref":
        print(f"  hint: LiteRT's optimized {args.kernels} int8 kernels round each requantization once, nnhal "
              "(as NNAPI's reference) twice, and the differences grow through deep networks; --kernels ref "
              "compares with TFLite's reference kernels, which nnhal matches bit for bit")
    if failures and args.strict:
        print("  --strict: exit status 1")
        return 1
    return 0


Engine = Callable[[str, argparse.Namespace, DeviceOf, str, Optional[list]], tuple[str, list, Callable[[], Any],
                                                                                  Callable[[], None]]]


def bench_main(argv: list[str], device_of: DeviceOf, engine: Optional[Engine] = None) -> int:
    """``nnhal bench MODEL.tflite [MODEL.tflite...] [--device D] [--baseline B]``; ``engine``: how nnhal runs
    a model on a device (default: the whole model through ``load`` and one HAL session)."""
    ap = argparse.ArgumentParser(prog="nnhal bench MODEL.tflite",
                                 description="median / p90 latency of .tflite models through nnhal and LiteRT "
                                             "(XNNPACK and builtin kernels), same input and thread count, one run; "
                                             "with --baseline, the same model on that device too")
    ap.add_argument("model", nargs="+", help="one or more .tflite files, each converted to a HAL model and timed")
    ap.add_argument("--device", default="sample-all",
                    help="the HAL device timed (in process or a service; nnhal devices lists them; default sample-all)")
    ap.add_argument("--baseline", default="",
                    help="another device timed on the same models, its ratio to --device printed beside "
                         "(default: sample-all when --device is another one; 'none' for none)")
    ap.add_argument("--threads", type=int, default=1, help="threads for every engine (BLAS for nnhal; default 1)")
    ap.add_argument("--runs", type=int, default=0,
                    help="timed executions per engine (default: at least 10, more for fast models, about "
                         "--seconds of each engine)")
    ap.add_argument("--seconds", type=float, default=1.0,
                    help="with the default --runs: about how long each engine runs in all (default 1)")
    ap.add_argument("--block", type=int, default=0,
                    help="executions of one engine in a row before the next engine's (every one timed; default: "
                         "about 50 ms of each engine, at least 1): the model run repeatedly, as TFLite's "
                         "benchmark_model does; 1 alternates engines every execution, so each starts with caches "
                         "the others filled")
    ap.add_argument("--seed", type=int, default=0, help="seed of the generated input (as nnhal run's; default 0)")
    ap.add_argument("--profile", action="store_true",
                    help="also time each HAL operation and each operation type (a profiling executor of the "
                         "sample backend on the same model and input), the top --top of each")
    ap.add_argument("--top", type=int, default=10, help="with --profile: how many operations / types (default 10)")
    ap.add_argument("--json", default="", help="also write every figure (phases, steady state, memory, profile) as "
                                               "JSON to this file")
    ap.add_argument("--floor", action="store_true",
                    help="also time LiteRT with only what any in-process HAL execution must do around it (the "
                         "request read by value, the pools checked, inputs and outputs through shared memory): "
                         "a lower bound for a HAL driver over LiteRT")
    ap.add_argument("--instructions", action="store_true",
                    help="instead of timing: machine instructions per execution of --device and of the HAL data "
                         "path floor (see --floor), and their difference, counted by valgrind's callgrind (the "
                         "steadiest measure on a busy machine; --runs executions each, default 200)")
    if engine is not None:
        from nnhal.cli.delegate import add_cache_argument

        add_plan_arguments(ap)
        add_cache_argument(ap)
    if any(a in ("-h", "--help") for a in argv):
        print_bench_help(ap)
        return 0
    args = ap.parse_args(argv)
    from nnhal.tools.bench import blas_threads, set_blas_threads

    if not set_blas_threads(args.threads):
        print("cannot set the BLAS thread count", file=sys.stderr)
    if args.instructions:
        from nnhal.cli import floorcount

        return floorcount.main(args.model, args.device, args.runs or 200, args.threads)
    if args.device.startswith("litert-"):
        os.environ.setdefault("NNHAL_LITERT_THREADS", str(args.threads))  # NOTE: read when the driver is created
    baseline = args.baseline or ("sample-all" if args.device != "sample-all" else "none")
    if args.json:
        from nnhal.cli.conformance import UserError as ReportPathError
        from nnhal.cli.conformance import check_writable

        try:
            check_writable(args.json, "--json")
        except ReportPathError as e:
            raise UserError(str(e)) from None
    status = 0
    args.results = []
    warm = _warm(args, device_of, baseline)
    for path in args.model:
        try:
            status = max(status, _bench_one(path, args, device_of, None if baseline == "none" else baseline,
                                            blas_threads, engine))
        except SystemExit as e:  # NOTE: this model could not run (said on stderr): the batch goes on
            status = max(status, e.code if isinstance(e.code, int) else 2)
        except LiteRTCrash as e:  # NOTE: LiteRT's process ended (nnhal.delegate.contain): one line, the batch goes on
            print(f"{path}: {e}", file=sys.stderr)
            status = max(status, e.status)
        except (ExecutionError, LiteRTError) as e:  # NOTE: an execution failed (a device's status, LiteRT's error)
            print(f"{path}: {str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}", file=sys.stderr)
            status = max(status, 3)
    if warm and args.results:  # NOTE: a footnote to figures: a file refused is one line and nothing else
        print(warm)
    if args.json:
        from nnhal.tools.bench.modelbench import write_json

        write_json(args.json, {"device": args.device, "threads": args.threads, "models": args.results})
        print(f"wrote {args.json}")
    return status


def _warm(args: argparse.Namespace, device_of: DeviceOf, baseline: str) -> str:
    """The process's one-time imports (and the devices opened) before any init is timed; the line that says
    it ("" when a device cannot be opened)."""
    from nnhal.tools.bench import modelbench as mb

    try:
        w = mb.warm_imports(lambda: [device_of(d) for d in (args.device, baseline) if d and d != "none"])
    except (UserError, SystemExit):
        return ""  # NOTE: a device that cannot be opened is reported with the first model
    return f"one-time imports, not in init: nnhal {w['nnhal_ms']:.0f} ms (devices opened), LiteRT " \
           f"{w['litert_ms']:.0f} ms"


def print_bench_help(model_parser: argparse.ArgumentParser) -> None:
    """``nnhal bench --help``: every form of the command with its options."""
    import contextlib
    import io

    from nnhal.cli import bench, bench_qos

    def captured(fn: Callable[[], Any]) -> str:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), contextlib.suppress(SystemExit):
            fn()
        return buf.getvalue()

    print("nnhal bench has three forms (-v / -q anywhere):\n"
          "  nnhal bench [--nets v1,v2 ...]          MobileNet v1/v2 latency, per-layer GFLOP/s vs numpy matmul\n"
          "  nnhal bench --cache [--priority ...]     compilation cache and priority figures\n"
          "  nnhal bench MODEL.tflite [...]           a .tflite model: nnhal vs LiteRT, as benchmark_model\n"
          "  (and nnhal bench --ipc: service round trips, nnhal bench --ipc --help)\n")
    print("== nnhal bench MODEL.tflite ==")
    print(model_parser.format_help())
    print("== nnhal bench (MobileNet) ==")
    print(captured(lambda: bench.main(["--help"])))
    print("== nnhal bench --cache / --priority ==")
    print(captured(lambda: bench_qos.main(["--help"])))


def _bench_one(path: str, args: argparse.Namespace, device_of: DeviceOf, baseline: Optional[str],
               blas_threads: Callable[[], Any], engine: Optional[Engine] = None) -> int:
    from nnhal.tools.bench import modelbench as mb

    if engine is not None:
        return _bench_engines(path, args, device_of, baseline, blas_threads, engine)
    start_rss = mb.peak_rss_mb()
    t_load = time.perf_counter()
    model, io = _load(path, 1)
    load_ms = (time.perf_counter() - t_load) * 1e3
    x = make_inputs(io, seed=args.seed)
    sessions = []
    figs: list[Any] = []
    try:
        for dev in [args.device] + ([baseline] if baseline else []):
            device = device_of(dev)
            fig, session = mb.measure_start("nnhal " + dev, lambda d=device: HalSession(d, model, io),
                                            lambda s: s.run(x))
            sessions.append((dev, session))
            figs.append(fig)
    except ExecutionError as e:
        print(f"{path}: {e}", file=sys.stderr)
        if not sessions:
            free_model(model)
            return 3
    profile = _hal_profile(model, io, x, args) if args.profile else None
    free_model(model)
    engines: list[tuple[str, Callable[[], Any]]] = [("nnhal " + d, lambda s=s: s.run(x)) for d, s in sessions]
    closers: list[Callable[[], None]] = [s.close for _, s in sessions]
    try:
        _litert_engines(path, args, x, engines, figs, closers)
        _time_engines(f"{Path(path).name}: {summary(io)}; loaded and converted in {load_ms:.0f} ms", engines,
                      figs, start_rss, args, blas_threads)
    finally:
        for c in closers:
            c()
    _finish(path, args, load_ms, figs, profile)
    return 0


def _hal_profile(model: Any, io: IODescription, x: list, args: argparse.Namespace) -> Any:
    from nnhal.tools.bench import modelbench as mb

    names = [f"TFLite op {i} {io.operator_names[i]}" if i >= 0 else "" for i in io.hal_to_tflite]
    return mb.hal_profile(model, x, max(3, min(args.runs or 10, 50)), names)


def _plan_profile(path: str, args: argparse.Namespace, x: list) -> Any:
    """--profile with a delegate plan: the whole model's HAL conversion (as --plan max) on a profiling
    executor of the sample backend, same input; None (said in one line) when the importer cannot map it."""
    try:
        model, io = _load(path, 1)
    except SystemExit:
        print(f"{Path(path).name}: --profile: nnhal cannot convert the whole model to one HAL model (a "
              f"CPU-only operator): no per-operation profile", file=sys.stderr)
        return None
    try:
        return _hal_profile(model, io, x, args)
    except Exception as e:  # NOTE: the profile is extra: a failure of it does not end the benchmark
        print(f"{Path(path).name}: --profile: {str(e).strip().splitlines()[0] if str(e).strip() else e!r}",
              file=sys.stderr)
        return None
    finally:
        free_model(model)


def _finish(path: str, args: argparse.Namespace, load_ms: float, figs: list, profile: Any) -> None:
    from nnhal.tools.bench import modelbench as mb

    if profile is not None:
        mb.print_profile(profile, args.top)
        print(f"  {mb.LITERT_PROFILER_NOTE}")
    args.results.append({"model": path, "load_ms": load_ms, "engines": figs, "profile": profile,
                         "load_average": os.getloadavg()[0]})


def _bench_engines(path: str, args: argparse.Namespace, device_of: DeviceOf, baseline: Optional[str],
                   blas_threads: Callable[[], Any], engine: Engine) -> int:
    """The benchmark of a .tflite model as the NNAPI delegate's plan runs it: init is planning, preparing
    the NNAPI partitions and creating the CPU partitions' interpreters."""
    from nnhal.tools.bench import modelbench as mb

    start_rss = mb.peak_rss_mb()
    t0 = time.perf_counter()
    fig, (title, x, run, close) = mb.measure_start(f"nnhal {args.device}",
                                                    lambda: engine(path, args, device_of, args.device, None),
                                                    lambda r: r[2]())
    load_ms = (time.perf_counter() - t0) * 1e3 - fig.first_ms
    fig.first_ms -= uncounted_ms(run)
    engines: list[tuple[str, Callable[[], Any]]] = [(f"nnhal {args.device}", run)]
    figs: list[Any] = [fig]
    closers = [close]
    try:
        if baseline:
            fig_b, (_, _, run_b, close_b) = mb.measure_start(f"nnhal {baseline}",
                                                              lambda: engine(path, args, device_of, baseline, x),
                                                              lambda r: r[2]())
            fig_b.first_ms -= uncounted_ms(run_b)
            engines.append((f"nnhal {baseline}", run_b))
            figs.append(fig_b)
            closers.append(close_b)
        _litert_engines(path, args, x, engines, figs, closers)
        _time_engines(f"{Path(path).name}: {title}; planned and prepared in {load_ms:.0f} ms", engines, figs,
                      start_rss, args, blas_threads)
        for name, fn in engines:
            if uncounted_ms(fn) > 0:  # NOTE: nnhal.delegate.contain: out of the figures, said here
                print(f"  {name}: {uncounted_ms(fn):.3f} ms per execution of round trips to LiteRT's process (its "
                      "CPU partitions), not in the figures")
    finally:
        for c in closers:
            c()
    _finish(path, args, load_ms, figs, _plan_profile(path, args, x) if args.profile else None)
    return 0


def uncounted_ms(run: Callable[[], Any]) -> float:
    """Milliseconds of ``run``'s last call its own timing leaves out (round trips to LiteRT's process)."""
    from nnhal.delegate.contain import TimedRuns

    return run.overhead() * 1e3 if isinstance(run, TimedRuns) else 0.0


def _litert_engines(path: str, args: argparse.Namespace, x: list, engines: list, figs: list,
                    closers: list[Callable[[], None]]) -> None:
    """LiteRT's engines on the original file appended to ``engines``, their figures to ``figs`` and their
    ends to ``closers`` (none, said in one line, when LiteRT is missing or cannot run the model); the data
    path floor with ``--floor``.  In a process of their own (:mod:`nnhal.delegate.contain`), timed by its
    clock; in nnhal's with ``$NNHAL_LITERT_IN_PROCESS``."""
    from nnhal.delegate.contain import LiteRTProcess, in_process

    try:
        # NOTE: one process for them all, each created in turn there as it was in nnhal's own process
        proc = None if in_process() else LiteRTProcess()
        if proc is not None:
            closers.append(proc.close)
        for kind in ("xnnpack", "builtin") + (("floor",) if args.floor else ()):
            name = "HAL data path floor" if kind == "floor" else f"LiteRT {kind}"
            if proc is None:
                fig, run = inprocess_engine(name, path, kind, args.threads, x, closers)
            else:
                fig, run = contained_engine(proc, name, path, kind, args.threads, x)
            figs.append(fig)
            engines.append((name, run))
    except ImportError as e:
        print(f"LiteRT not available: {e}", file=sys.stderr)
    except (RuntimeError, ValueError) as e:
        keep = [k for k, e2 in enumerate(engines) if not e2[0].startswith(("LiteRT", "HAL data path"))]
        engines[:] = [engines[k] for k in keep]
        figs[:] = [f for f in figs if not f.name.startswith(("LiteRT", "HAL data path"))]
        print(f"{Path(path).name}: LiteRT cannot run it ({str(e).strip().splitlines()[0]}): nnhal alone",
              file=sys.stderr)


def inprocess_engine(name: str, path: str, kind: str, threads: int, x: list,
                     closers: list[Callable[[], None]]) -> tuple[Any, Callable[[], Any]]:
    """(figures, a run) of LiteRT ``kind`` ("xnnpack", "builtin", or "floor": the data path floor) on ``path``
    in nnhal's own process (``$NNHAL_LITERT_IN_PROCESS``); its end appended to ``closers``."""
    from nnhal.tools.bench import modelbench as mb

    # NOTE: an unresolved custom operator shows when the tensors are allocated (the first run)
    fig, lr = mb.measure_start(name, lambda: DataPathFloor(path, x, threads=threads) if kind == "floor"
                               else LiteRT(path, threads=threads, kernels=kind), lambda lr: lr.run(x))
    if isinstance(lr, DataPathFloor):
        closers.append(lr.close)
    # NOTE: inputs set and outputs copied on every run, as nnhal's run writes and reads its pools
    return fig, lambda: lr.run(x)


def contained_engine(proc: Any, name: str, path: str, kind: str, threads: int, x: list) -> tuple[Any, Any]:
    """:func:`inprocess_engine` in LiteRT's process ``proc``: the initialization and the first run timed by
    its own clock, its memory the process's, each run timed by that clock (``TimedRuns``)."""
    from nnhal.delegate.contain import ContainedLiteRT, TimedRuns
    from nnhal.tools.bench import modelbench as mb

    what = "for the HAL data path floor" if kind == "floor" else f"on LiteRT's {kind} kernels"
    lr = ContainedLiteRT(proc, path, threads, "xnnpack" if kind == "floor" else kind,
                         label=f"the model {what} (nnhal bench)",
                         kind="floor" if kind == "floor" else "litert", inputs=x if kind == "floor" else ())
    lr.run(x)
    fig = mb.EngineFigures(name, init_ms=lr.init_seconds * 1e3, first_ms=lr.seconds * 1e3,
                           peak_rss_mb=proc.peak_rss_mb())
    return fig, TimedRuns(lambda: lr.run(x), lambda n: lr.times(x, n))


def _time_engines(title: str, engines: list, figs: list, start_rss: float, args: argparse.Namespace,
                  blas_threads: Callable[[], Any]) -> None:
    """Warm-up and steady state of every engine (interleaved), their figures printed as benchmark_model's."""
    from nnhal.tools.bench import modelbench as mb

    print(title)
    # NOTE: a warm-up each (two runs after the first inference), which also sizes each engine's default
    # runs (about --seconds of it) and blocks (about 50 ms of it): every engine gets the same number of rounds
    warm = {name: block_times(fn, 2) for name, fn in engines}
    first = {name: max(min(t), 1e-6) for name, t in warm.items()}
    runs = {name: args.runs if args.runs > 0 else max(10, min(20000, int(args.seconds / t)))
            for name, t in first.items()}
    if args.runs > 0 or args.block > 0:
        want = {name: args.block if args.block > 0 else max(1, int(0.05 / t)) for name, t in first.items()}
        rounds = max(-(-runs[name] // want[name]) for name in runs)
    else:
        rounds = max(1, int(args.seconds / 0.05))
    blocks = {name: -(-n // rounds) for name, n in runs.items()}  # NOTE: spread over the same rounds
    print(f"threads {args.threads} (BLAS {blas_threads() or '?'}); load average {os.getloadavg()[0]:.2f}; "
          f"{rounds} rounds of each engine in turn; runs (per round): "
          + ", ".join(f"{name} {runs[name]} ({blocks[name]})" for name, _ in engines))
    res = {}
    # NOTE: interleaved (a block of runs of each engine in turn), so a change of machine load touches
    # every engine alike and the ratios hold on a shared machine; every run of a block is timed
    times: dict[str, list[float]] = {name: [] for name, _ in engines}
    for _ in range(rounds):
        for name, fn in engines:
            n = min(blocks[name], runs[name] - len(times[name]))
            if n > 0:
                times[name] += block_times(fn, n)
    for (name, _), fig in zip(engines, figs):
        fig.warmup, fig.steady = mb.steady(warm[name]), mb.steady(times[name])
        res[name] = fig.steady["median_ms"] / 1e3
    mb.print_figures(figs, start_rss)
    mb.print_init_ratios(figs)
    ours = res[engines[0][0]]
    for name, _ in engines[1:]:
        label = f"nnhal {args.device}" if name.startswith("nnhal") else "nnhal"
        print(f"  {label} / {name}: {ours / res[name]:.2f}x")
    if "HAL data path floor" in res and "LiteRT xnnpack" in res:
        print(f"  HAL data path floor / LiteRT xnnpack: {res['HAL data path floor'] / res['LiteRT xnnpack']:.2f}x")
    if args.device.startswith("litert-") and "LiteRT xnnpack" in res:
        # NOTE: the same engine on the same graph: the difference is what a HAL execution costs
        # around it (request read and checked, pools checked, inputs and outputs through shared memory)
        print(f"  nnhal {args.device} - LiteRT xnnpack: {(ours - res['LiteRT xnnpack']) * 1e6:+.1f} us per execution")
        if "HAL data path floor" in res:
            print(f"  nnhal {args.device} - HAL data path floor: {(ours - res['HAL data path floor']) * 1e6:+.1f} us "
                  f"per execution")


def _graph_model(args: argparse.Namespace) -> tuple[Any, str, Optional[list[str]], dict[int, str], Optional[list]]:
    """(HAL model, title, a label per main operation, tensor name per main operand, the TFLite operator of
    each main operation (.tflite; -1: none))."""
    path = args.model
    if path.endswith(".tflite"):
        model, io = _load(path, 1, version=api_version(args))
        names = [f"TFLite op {i} {io.operator_names[i]}" if i >= 0 else "" for i in io.hal_to_tflite]
        operand_names = {io.tensor_operand[t]: d.name for t, d in io.tensors.items() if t in io.tensor_operand}
        for d in io.inputs + io.outputs:
            if d.tensor in io.tensor_operand:
                operand_names[io.tensor_operand[d.tensor]] = d.name
        return model, f"{Path(path).name}: {summary(io)}", names, operand_names, list(io.hal_to_tflite)
    from nnhal.conformance import vectors

    try:
        models = vectors.load_file(path)
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except (OSError, ValueError, EOFError, KeyError, TypeError) as e:
        raise UserError(f"{path}: neither a .tflite model nor a conformance vector file ({e})") from None
    pick = [m for m in models if not args.name or m.name == args.name] or \
        [m for m in models if args.name and args.name in m.name]
    if not pick:
        raise UserError(f"{path}: no model named {args.name!r}; models: {', '.join(m.name for m in models)}")
    return pick[0].build_model(), f"{Path(path).name}: {pick[0].name}", None, {}, None


def graph_output(args: argparse.Namespace) -> tuple[str, str]:
    """(output path, format) from ``-o``'s extension; an unknown extension is refused."""
    from nnhal.tools.graphview import FORMATS

    out = args.output or (Path(args.model).name.split(".")[0] + ".html")
    fmt = Path(out).suffix.lower().lstrip(".")
    if fmt not in FORMATS:
        raise UserError(f"-o {out}: unknown picture format {fmt or '(no extension)'!r}; give "
                        + ", ".join("." + f for f in FORMATS if f != "htm"))
    return out, {"htm": "html", "gv": "dot"}.get(fmt, fmt)


def device_colouring(model: Any, device_name: str, device_of: DeviceOf) -> tuple[list[bool], dict[int, str]]:
    """A device's answer per main operation and its reasons (nnhal.supported_operations)."""
    import nnhal
    from nnhal import hal

    status, supported, reasons = nnhal.supported_operations(device_of(device_name), model)
    n = len(model.main.operations)
    if status != hal.ErrorStatus.NONE:
        return [False] * n, dict.fromkeys(range(n), f"model rejected ({hal.ErrorStatus(status).name})")
    return supported, {k: r for k, r in enumerate(reasons) if r}


def partition_groups(model: Any, devices: list[str]) -> dict[int, tuple[str, str]]:
    """The client runtime's partitions over ``devices`` (without preparing) as graph groups:
    operation index -> ("partition N: DEVICE", the device's colour)."""
    from nnhal.runtime import Compilation, CompilationError
    from nnhal.tools.graphview import PALETTE

    try:
        with Compilation(model, devices) as comp:
            plan = comp.plan()
    except CompilationError as e:
        raise ExecutionError(f"through the runtime over {', '.join(devices)}: {e}") from None
    colour: dict[str, str] = {}
    groups = {}
    for n, (dev, ops) in enumerate(plan):
        c = colour.setdefault(dev, PALETTE[len(colour) % len(PALETTE)])
        for k in ops:
            groups[k] = (f"partition {n}: {dev}", c)
    return groups


def graph_main(args: argparse.Namespace, device_of: DeviceOf,
               groups: Optional[dict[int, tuple[str, str]]] = None,
               operator_groups: Optional[Callable[[], tuple[dict[int, tuple[str, str]], str]]] = None,
               fallback: Optional[Callable[[], int]] = None) -> int:
    """``nnhal graph``.  ``groups``: operation index -> (group label, colour), e.g. a delegate plan's
    placement; ``--devices A,B`` gives the client runtime's partitions.  ``operator_groups`` (a .tflite
    model): () -> ({TFLite operator index: (group label, colour)}, title note), the delegate plan's
    partitions drawn on the HAL model's operations; ``fallback``: the command when nnhal cannot convert the
    whole model to one HAL model (a CPU-only operator)."""
    from nnhal.tools import graphview

    out, fmt = graph_output(args)
    devices = [d.strip() for d in (getattr(args, "devices", "") or "").split(",") if d.strip()]
    if devices and args.device:
        raise UserError(f"--device {args.device} and --devices: give one (--device colours what one device takes, "
                        "--devices the runtime's partitions)")
    if fallback is not None and args.model.endswith(".tflite"):
        try:
            free_model(load(args.model, batch=1, version=api_version(args))[0])
        except InvalidModelError as e:
            raise UserError(f"{args.model}: not a valid TFLite model: {e}") from None
        except UnsupportedModelError as e:
            why = "; ".join(line.strip() for line in str(e).strip().splitlines()[1:3]) or str(e).strip()
            print(f"{args.model}: not one HAL model ({why}): the plan's TFLite operators drawn instead",
                  file=sys.stderr)
            return fallback()
    model, title, names, operand_names, hal_to_tflite = _graph_model(args)
    if operator_groups is not None and hal_to_tflite is not None and not devices:
        by_operator, note = operator_groups()
        groups = {k: by_operator[i] for k, i in enumerate(hal_to_tflite) if i in by_operator}
        title += f" -- {note}"
    info = graphview.GraphInfo(title=title, op_labels=names, operand_names=operand_names, groups=groups,
                               device=args.device)
    try:
        if args.device:
            info.supported, info.reasons = device_colouring(model, args.device, device_of)
            info.title += (f" -- on {args.device}: {sum(map(bool, info.supported))}/{len(info.supported)} "
                           "supported")
        elif devices:
            for d in devices:
                device_of(d)
            info.groups = partition_groups(model, devices)
            info.title += f" -- partitioned over {', '.join(devices)}"
    except ExecutionError as e:
        print(f"{args.model}: {e}", file=sys.stderr)
        return 3
    source, details = graphview.dot_source(model, info)
    try:
        if fmt == "dot":
            data = source.encode()
        elif fmt == "html":
            data = graphview.html_page(graphview.render(source, "svg").decode(), details, info).encode()
        else:
            data = graphview.render(source, fmt)
    except graphview.GraphError as e:
        raise UserError(str(e)) from None
    try:
        Path(out).write_bytes(data)
    except OSError as e:
        raise UserError(f"-o {out}: {e.strerror or e}") from None
    print(f"wrote {out} ({len(model.main.operations)} operations, {fmt})")
    return 0


def add_run_arguments(s: argparse.ArgumentParser) -> None:
    s.add_argument("model", help="a .tflite file")
    s.add_argument("--input", action="append",
                   help="a .npy per model input, in the model's input order (default: generated, seeded: float "
                        "uniform [-1, 1), uint8/int8 uniform over their range, int32 uniform [0, 10))")
    s.add_argument("-o", "--output", help="write DIR/input_<k>.npy per model input (the inputs used, generated or "
                                          "given) and DIR/output_<k>.npy per model output")
    s.add_argument("--device", default="", help="the HAL device to run it on (default sample-all; nnhal devices "
                                                "lists them)")
    s.add_argument("--devices", default="", help="A,B,...: run through the client runtime, partitioned over these "
                                                "devices (operations none takes on the CPU reference)")
    s.add_argument("--explain", action="store_true", help="print the plan: partitions in order (operators, where), "
                                                         "one line per reason operators stay on the CPU, the time "
                                                         "per partition")
    add_plan_arguments(s)
    s.add_argument("--plan-json", default="", help="write the plan as JSON (../shared/API.md) to this file")
    s.add_argument("--compare", action="store_true", help="run LiteRT on the same input; per output max / mean "
                                                          "error and top-k agreement")
    s.add_argument("--per-tensor", action="store_true", help="compare every intermediate tensor and print the first "
                                                             "operation beyond tolerance")
    s.add_argument("--kernels", choices=["builtin", "ref", "xnnpack"], default="builtin",
                   help="LiteRT kernels to compare with (builtin: BUILTIN_WITHOUT_DEFAULT_DELEGATES; ref: "
                        "TFLite's reference kernels)")
    s.add_argument("--threads", type=int, default=1, help="LiteRT threads")
    s.add_argument("--batch", type=int, default=0, help="value of unknown (-1) dimensions (default 1)")
    s.add_argument("--keep-unknown", action="store_true", help="keep unknown dimensions unknown in the HAL model")
    s.add_argument("--seed", type=int, default=0, help="seed of the generated inputs")
    s.add_argument("--rtol", type=float, default=1e-4, help="float tolerance relative to the tensor's range")
    s.add_argument("--steps", type=int, default=1, help="quantized tolerance in steps")
    s.add_argument("--strict", action="store_true",
                   help="exit 1 when an output, or with --per-tensor an operator run alone, is beyond tolerance")
    s.add_argument("--no-isolate", action="store_true",
                   help="with --per-tensor, skip re-running each operator alone on LiteRT's inputs when the "
                        "whole-model comparison goes beyond tolerance")


def add_plan_arguments(s: argparse.ArgumentParser) -> None:
    """The NNAPI delegate's options (``nnhal run``, ``bench``, ``graph``)."""
    s.add_argument("--plan", choices=["delegate", "max"], default="delegate",
                   help="delegate (default): the operators Android's NNAPI delegate hands to NNAPI, rule for rule, "
                        "the rest on LiteRT's CPU kernels; max: everything nnhal can express in the HAL on NNAPI")
    s.add_argument("--android-api", type=int, default=30, choices=range(27, 36), metavar="{27..35}",
                   help="the device's Android API level (27-30: NNAPI partitions as HAL 1.0-1.3; 31-35: feature "
                        "levels 5-8 (31 and 32 both 5), partitions as AIDL v1-v4 through the device's AIDL face; "
                        "default 30)")
    s.add_argument("--max-partitions", type=int, default=3,
                   help="the delegate's max_number_delegated_partitions: the largest N NNAPI partitions are "
                        "delegated, the rest run on the CPU (default 3; 0: no limit)")
    s.add_argument("--accelerator", default="",
                   help="the delegate's accelerator_name: the one nnhal device (in process or a service) for the "
                        "NNAPI partitions; its getSupportedOperations decides per operator")
    s.add_argument("--allow-fp16", action="store_true", help="the delegate's allow_fp16: float32 partitions may "
                                                             "compute in float16 (relaxComputationFloat32toFloat16)")
    s.add_argument("--allow-nnapi-cpu", action="store_true",
                   help="the inverse of the delegate's disallow_nnapi_cpu: from API 29 no device support query "
                        "unless --accelerator is given")
    s.add_argument("--preference", choices=["low_power", "fast_single_answer", "sustained_speed"],
                   default="fast_single_answer", help="the delegate's execution_preference (prepareModel)")


def add_graph_arguments(s: argparse.ArgumentParser) -> None:
    s.add_argument("model", help="a .tflite file or a conformance vector file")
    s.add_argument("name", nargs="?", default="", help="the model's name inside a vector file")
    s.add_argument("-o", "--output", help="the picture, its format from the extension: .html (interactive: zoom, "
                                          "pan, search, details), .svg, .png, .pdf, .dot (default: MODEL.html)")
    s.add_argument("--device", default="", help="colour each operation by whether this device supports it (and "
                                                "why not)")
    s.add_argument("--devices", default="", help="A,B,...: colour the client runtime's partitions over these "
                                                 "devices (one box per partition)")
    s.add_argument("--hal", action="store_true", help="a .tflite model: its HAL model without the delegate plan's "
                                                     "partitions (default: the HAL operations boxed by the plan's "
                                                     "partitions, NNAPI or CPU)")
    add_plan_arguments(s)
