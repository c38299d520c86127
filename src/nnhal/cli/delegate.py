"""``nnhal run``, ``nnhal bench MODEL.tflite`` and ``nnhal graph MODEL.tflite``
through a :class:`~nnhal.delegate.plan.Plan`: the model partitioned as
Android's NNAPI delegate would (``--plan delegate``, default) or with all nnhal
can express on NNAPI (``--plan max``), the NNAPI partitions on a HAL device,
the rest on LiteRT's CPU kernels.

Exit status (README): 0 success; 2 the model cannot run (unreadable file, an
operator on the CPU that LiteRT lacks, LiteRT missing for a CPU partition:
the root causes named once); 3 a device refused a partition or an execution
failed; 1 with ``--strict`` when a comparison is beyond tolerance.
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

from nnhal.cli.app import UserError
from nnhal.cli.tflite import model_errors
from nnhal.delegate import cut
from nnhal.delegate.contain import LiteRTCrash, LiteRTError, TimedRuns, open_litert
from nnhal.delegate.model import Graph
from nnhal.delegate.plan import Options, Plan, build_plan
from nnhal.delegate.run import ExecutionError, check_inputs, diff, make_inputs, topk
from nnhal.delegate.runner import PlanError, Runner, input_descs, output_descs
from nnhal.tflite.errors import ModelError
from nnhal.tflite.loader import IODescription, TensorDesc, verify
from nnhal.tflite.schema import MissingDependency

DeviceOf = Callable[[str], Any]


def options(args: argparse.Namespace) -> Options:
    """The plan options of the parsed command line (ValueError for a bad one)."""
    devices = [d.strip() for d in (getattr(args, "devices", "") or "").split(",") if d.strip()]
    return Options(plan=getattr(args, "plan", "delegate"), android_api=getattr(args, "android_api", 30),
                   max_partitions=getattr(args, "max_partitions", 3), accelerator=getattr(args, "accelerator", ""),
                   device=getattr(args, "device", "") or "sample-all", devices=devices,
                   allow_fp16=getattr(args, "allow_fp16", False), allow_nnapi_cpu=getattr(args, "allow_nnapi_cpu", False),
                   preference=getattr(args, "preference", "fast_single_answer"),
                   batch=None if getattr(args, "keep_unknown", False) else (getattr(args, "batch", 0) or 1),
                   custom_ops=_custom_ops(args, devices))


def _custom_ops(args: argparse.Namespace, devices: list[str]) -> dict:
    """The custom operators the plan's in-process target devices implement (``--plan max`` maps them)."""
    if getattr(args, "plan", "delegate") != "max":
        return {}
    import nnhal
    from nnhal.cli.tflite import custom_operators

    names = devices or [getattr(args, "accelerator", "") or getattr(args, "device", "") or "sample-all"]
    found = []
    for n in names:
        try:
            found.append(nnhal.open_device(n))
        except (LookupError, OSError):  # NOTE: reported when the plan opens it
            continue
    return custom_operators(found)


def add_cache_argument(s: argparse.ArgumentParser) -> None:
    """``--cache-dir`` (``nnhal run``, ``nnhal bench MODEL.tflite``)."""
    s.add_argument("--cache-dir", default="",
                   help="the NNAPI delegate's cache_dir (with a model_token from the model file's bytes): each NNAPI "
                        "partition loads from the compilation cache files there, or is prepared and saved into them "
                        "(HAL 1.2 and 1.3), so the next run of the same model loads instead of preparing")


def _cache(path: str, raw: bytes, args: argparse.Namespace) -> Any:
    """The plan's compilation cache for ``--cache-dir`` (None without); a directory that cannot be used is
    the user's mistake (one line, exit status 2)."""
    directory = getattr(args, "cache_dir", "") or ""
    if not directory:
        return None
    from nnhal.delegate.compile_cache import CacheDir

    try:
        return CacheDir.for_model(directory, raw)
    except OSError as e:
        raise UserError(f"--cache-dir {directory}: {e.strerror or e}") from None


def plan_model(path: str, args: argparse.Namespace, device_of: DeviceOf) -> Plan:
    """The plan, or SystemExit(2) with one line for a bad option or an unreadable model."""
    try:
        opts = options(args)
    except ValueError as e:
        print(f"{path}: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    for name in opts.targets:
        device_of(name)  # NOTE: an unknown device is the user's mistake, said before any work
    try:
        with model_errors(path):
            raw = Path(path).read_bytes()
            opts.cache = _cache(path, raw, args)
            checked = verify(raw, batch=opts.batch)  # NOTE: the whole flatbuffer checked before anything reads it
            return build_plan(Graph(raw, checked, opts.batch), opts, device_of)
    except ValueError as e:
        # NOTE: a file the check passed whose content the plan cannot use (sparse metadata that does not
        # fit its shape); anything else would be nnhal's bug, shown as such
        print(f"{path}: cannot read the model: {e}", file=sys.stderr)
        raise SystemExit(2) from None


def summary(plan: Plan) -> str:
    names = collections.Counter(o.name for o in plan.operators)
    on = sum(1 for o in plan.operators if o.where == "nnapi")
    ops = ", ".join(f"{k} {v}" for k, v in names.most_common(8)) + (", ..." if len(names) > 8 else "")
    o = plan.options
    return (f"{len(plan.operators)} TFLite operators ({ops}); plan {o.plan}, Android API {o.android_api}: "
            f"{on} on NNAPI ({o.device_label}) in {len(plan.nnapi)} partition(s), {len(plan.operators) - on} on "
            f"the CPU (LiteRT)" + (f"; {plan.graph.densified} sparse tensor(s) densified at load"
                                   if plan.graph.densified else ""))


def _inputs(args: argparse.Namespace, g: Graph) -> list[np.ndarray]:
    from nnhal.cli.tflite import read_npy

    io = IODescription(inputs=input_descs(g))
    if not args.input:
        return generated_inputs(args.model, g, args.batch or 1, args.seed)
    arrays = [read_npy(f) for f in args.input]
    try:
        return check_inputs(io, arrays)
    except ValueError as e:
        raise UserError(f"--input: {e}") from None


def generated_inputs(path: str, g: Graph, batch: int = 1, seed: int = 0) -> list[np.ndarray]:
    """``make_inputs`` for the model's inputs; inputs beyond the size limit are one line and exit status 2."""
    try:
        return make_inputs(IODescription(inputs=input_descs(g)), batch=batch, seed=seed)
    except ModelError as e:
        print(f"{path}: {e}", file=sys.stderr)
        raise SystemExit(2) from None


def _short(a: np.ndarray) -> str:
    flat = a.reshape(-1)
    head = ", ".join(f"{v:.4g}" if a.dtype.kind == "f" else str(v) for v in flat[:6])
    return f"{a.dtype}{list(a.shape)} [{head}{', ...' if flat.size > 6 else ''}]"


def open_runner(plan: Plan, device_of: DeviceOf, **kw: Any) -> Runner:
    """The runner, or SystemExit with the plan's root causes in one line (status 2 or 3)."""
    try:
        return Runner(plan, device_of, **kw)
    except PlanError as e:
        print(f"{plan.graph_path}: cannot run: {e}", file=sys.stderr)
        raise SystemExit(e.status) from None


def print_inputs(io: IODescription, x: list, args: argparse.Namespace) -> None:
    from nnhal.cli.tflite import print_inputs as show

    show(io, x, args)


def save_arrays(out_dir: Path, prefix: str, arrays: list) -> None:
    from nnhal.cli.tflite import save_arrays as save

    save(out_dir, prefix, arrays)


def verdict(args: argparse.Namespace, io: IODescription, failures: list[str], drift: str = "") -> int:
    from nnhal.cli.tflite import verdict as say

    return say(args, io, failures, drift)


def run_main(args: argparse.Namespace, device_of: DeviceOf) -> int:
    """``nnhal run``: LiteRT crashing or hanging in its process (:mod:`nnhal.delegate.contain`) is one line
    and its exit status (2 preparing, 3 running)."""
    closing: list[Callable[[], None]] = []
    try:
        return _run_main(args, device_of, closing)
    except LiteRTCrash as e:
        print(f"{args.model}: {e}", file=sys.stderr)
        return e.status
    finally:
        for close in closing:
            close()


def _run_main(args: argparse.Namespace, device_of: DeviceOf, closing: list[Callable[[], None]]) -> int:
    from nnhal.cli.tflite import check_run_flags

    check_run_flags(args)
    args.device = args.device or "sample-all"
    imports_ms = _start_up(args, device_of)
    t_plan = time.perf_counter()
    plan = plan_model(args.model, args, device_of)
    plan_ms = (time.perf_counter() - t_plan) * 1e3
    plan.graph_path = args.model
    if args.plan_json:
        try:
            plan.write_json(args.plan_json)
        except OSError as e:
            print(f"--plan-json: {e}", file=sys.stderr)
            return 2
    print(f"{args.model}: {summary(plan)}")
    x = _inputs(args, plan.graph)
    print_inputs(IODescription(inputs=input_descs(plan.graph)), x, args)
    ref = None
    if args.compare or args.per_tensor:
        try:
            ref = Reference(plan.graph, args.kernels, args.threads, bool(args.per_tensor))
            closing.append(ref.close)
        except MissingDependency as e:
            print(f"--compare: {e}", file=sys.stderr)
            return 3
        except NoReference as e:
            print(f"{args.model}: --compare: {e}", file=sys.stderr)
            return 2
    # NOTE: when LiteRT cannot run the original, the tensors it can compute are compared: keep them all
    keep = bool(args.per_tensor) or (ref is not None and not ref.whole)
    devices = [d.strip() for d in (getattr(args, "devices", "") or "").split(",") if d.strip()]
    if devices:
        print(f"devices: {', '.join(devices)} (NNAPI partitions through the client runtime)")
    elif plan.nnapi:
        named = sorted({p.device or args.device for p in plan.nnapi})
        versions = []
        for n in named:
            try:
                versions.append(f"{n} ({device_of(n).getVersionString()[1]})")
            except Exception:  # NOTE: the name alone (the runner says why it cannot open it)
                versions.append(n)
        print(f"device: {', '.join(versions)} (NNAPI partitions; the CPU partitions on LiteRT)")
    else:
        print("device: none (every operator on the CPU, LiteRT)")
    t0 = time.perf_counter()
    runner = open_runner(plan, device_of, kernels=args.kernels, threads=args.threads, per_tensor=keep)
    t1 = time.perf_counter()
    try:
        outs = runner.run(x)
    except (ExecutionError, RuntimeError) as e:
        print(f"{args.model}: {e}", file=sys.stderr)
        runner.close()
        return 3
    t2 = time.perf_counter() - runner.contained  # NOTE: LiteRT's own time, not the round trips to its process
    print(prepare_line(args.model, plan_ms, (t1 - t0) * 1e3, (t2 - t1) * 1e3, runner, imports_ms))
    if args.explain:
        print(plan.explain(runner.times))
        for p, e in zip(plan.partitions, runner.engines):
            if getattr(e, "runtime", None) is not None:  # NOTE: --devices: the client runtime's own placement
                print(f"NNAPI partition {p.index} through the client runtime:")
                print(e.runtime.placement())
    try:
        return _report(args, plan, runner, x, outs, ref)
    finally:
        runner.close()


def _start_up(args: argparse.Namespace, device_of: DeviceOf) -> float:
    """The process's one-time imports with the devices opened (``modelbench.warm_imports``), in ms; an
    unknown device is left to the plan to report."""
    from nnhal.tools.bench import modelbench as mb

    def open_devices() -> None:
        for name in options(args).targets:
            try:
                device_of(name)
            except (UserError, LookupError, OSError):
                pass  # NOTE: said by plan_model, in its words

    try:
        return mb.warm_imports(open_devices)["nnhal_ms"]
    except (ValueError, MissingDependency):
        return 0.0  # NOTE: a bad option or LiteRT missing: plan_model says so


def prepare_line(model: str, plan_ms: float, prepare_ms: float, first_ms: float, runner: Runner,
                 imports_ms: float = 0.0) -> str:
    """``nnhal run``'s timing line: what a user waits for before the first result (the process's imports;
    reading, checking and planning the model; preparing its partitions, or loading them from the
    compilation cache), then the first execution."""
    how = sorted({e.how for e in runner.engines if getattr(e, "how", "")} - {"prepared"})
    return (f"latency: imports {imports_ms:.0f} ms, plan {plan_ms:.1f} ms (read, verified, partitioned), "
            f"prepare {prepare_ms:.1f} ms"
            + (f" ({'; '.join(how)})" if how else "") + f", execute {first_ms:.1f} ms (first execution; nnhal bench "
            f"{Path(model).name} for steady-state figures)")


def _report(args: argparse.Namespace, plan: Plan, runner: Runner, x: list, outs: list,
            ref: Optional["Reference"]) -> int:
    g = plan.graph
    descs = output_descs(g)
    for k, (a, d) in enumerate(zip(outs, descs)):
        print(f"output {k} {d.name}: {_short(a)}")
    if args.output:
        out_dir = Path(args.output)
        try:
            save_arrays(out_dir, "input", x)
            save_arrays(out_dir, "output", outs)
        except OSError as e:
            raise UserError(f"-o {out_dir}: {e.strerror or e}") from None
        print(f"wrote {len(x)} input(s) and {len(outs)} output(s) to {out_dir}/input_<k>.npy, output_<k>.npy "
              "(--input DIR/input_0.npy ... runs the same again)")
    if ref is None:
        return 0
    failures: list[str] = []
    drift = ""
    quantized = list(descs)
    try:
        got = ref.run(x)
    except LiteRTCrash:
        raise
    except (RuntimeError, ValueError) as e:  # NOTE: LiteRT's own refusal at invoke: no reference to compare with
        why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(f"{args.model}: " + (why if isinstance(e, LiteRTError) else
                                   f"--compare: LiteRT cannot run the original model: {why}"), file=sys.stderr)
        return 3
    print(f"against LiteRT ({args.kernels} kernels):" if ref.whole else
          f"LiteRT cannot run the original ({ref.why}): comparing what it can compute without "
          f"{', '.join(sorted(ref.lacking_names))} ({len(got)} tensors)")
    for k, (a, d) in enumerate(zip(outs, descs)):
        if d.tensor not in got:
            print(f"  output {k} {d.name}: not compared (depends on an operator LiteRT lacks)")
            continue
        df = diff(a, got[d.tensor], d)
        if not df.ok(args.rtol, args.steps):
            failures.append(f"output {k} {df}")
        line = f"  output {k} {df}"
        tk = topk(a.astype(np.float64), got[d.tensor].astype(np.float64))
        if tk is not None:
            line += f"; top-1 {'same' if tk[0] else 'DIFFERENT'}"
            if a.shape[1] > 5:  # NOTE: with 5 classes or fewer every class is in the top 5
                line += f", top-5 overlap {tk[1]:.0%}"
        print(line)
    if args.per_tensor or not ref.whole:
        first, n = None, 0
        for op in g.operators:
            for k in op.outputs:
                if k in got and k in runner.values:
                    d = tensor_desc(g, k)
                    df = diff(np.asarray(runner.values[k]), got[k], d)
                    n += 1
                    if first is None and not df.ok(args.rtol, args.steps):
                        first = (op, k, df)
        print(f"  {n} tensors compared")
        if n == 0:
            print("  nothing to compare")
        elif first is None:
            print(f"  every tensor within tolerance (float {args.rtol:g} of its range, quantized {args.steps} step)")
        else:
            op, k, df = first
            beyond = f"first operation beyond tolerance: operator {op.index} {op.name}"
            failures.append(beyond)
            quantized.append(tensor_desc(g, k))
            where = plan.operators[op.index]
            print(f"  first operation beyond tolerance: operator {op.index} {op.name} (tensor {k}, "
                  f"{where.where} partition {where.partition}) {df}")
            moved = [diff(np.asarray(runner.values[u]), got[u], tensor_desc(g, u)) for u in op.inputs
                     if u in got and u in runner.values]
            moved = [m for m in moved if m.steps or m.rel]
            # NOTE: a difference within tolerance at an input can grow through the operation
            print("  its inputs already differ: " + "; ".join(str(u) for u in moved) if moved else
                  "  its inputs are identical: the difference is this operation's own")
            if not getattr(args, "no_isolate", False) and ref.whole:
                iso = isolated(plan, runner.device_of, ref)
                over = [(i, n, d) for i, n, d in iso if not d.ok(args.rtol, args.steps)]
                if iso:
                    w = max(iso, key=lambda t: (t[2].steps, t[2].rel))
                    print(f"  each operator alone on LiteRT's own inputs ({len(iso)} runs): worst operator {w[0]} "
                          f"{w[1]}: {w[2]}; {len(over)} beyond tolerance" +
                          (f", first: operator {over[0][0]} {over[0][1]}: {over[0][2]}" if over else ""))
                    if not over:  # NOTE: drift inherited through the chain alone is not a failure
                        failures.remove(beyond)
                        drift = f"operator {op.index} {op.name} onwards"
    return verdict(args, IODescription(outputs=quantized), failures, drift)


def isolated(plan: Plan, device_of: DeviceOf, ref: "Reference") -> list[tuple[int, str, Any]]:
    """Each NNAPI operator's HAL form run alone on LiteRT's own input tensors (``ref`` made with
    ``per_tensor``), compared with LiteRT's outputs: the error an operator adds by itself (CPU operators
    are LiteRT's own kernels)."""
    from nnhal.delegate.plan import PartitionPlan, Planner
    from nnhal.delegate.runner import HalPartition

    g = plan.graph
    planner = Planner(g, plan.options, device_of)
    res = []
    try:
        for o in plan.operators:
            if o.where != "nnapi" or o.index in g.folded or o.index in planner.fp16:
                continue
            op = g.operators[o.index]
            weights = [planner.fp16_out[k] for k in op.inputs if k in planner.fp16_out]
            ins = [k for k in dict.fromkeys(op.inputs) if k >= 0 and not g.is_const(k) and k not in planner.fp16_out]
            outs = [k for k in op.outputs if k >= 0]
            part = PartitionPlan(-1, "nnapi", [o.index], o.device, ins, outs, sorted([o.index] + weights))
            e = HalPartition(planner, part)
            try:
                values = {k: ref.lite.tensor(k) for k in ins}
                e.run(values)
            finally:
                e.close()
            for k in outs:
                if k in values:
                    res.append((o.index, o.name, diff(np.asarray(values[k]), ref.lite.tensor(k), tensor_desc(g, k))))
    finally:
        planner.close()
    return res


def tensor_desc(g: Graph, k: int) -> TensorDesc:
    t = g.tensors[k]
    p = g.producer.get(k, -1)
    return TensorDesc(t.name, k, list(t.shape), t.type, t.scale if len(t.scales) == 1 else 0.0,
                      t.zero_point if len(t.zero_points) == 1 else 0, p, g.operators[p].name if p >= 0 else "")


class NoReference(RuntimeError):
    """LiteRT refuses the original model for another reason than a custom operator it lacks."""


class Reference:
    """LiteRT on the original model; when it lacks a custom operator's kernel, on the operators that
    do not depend on one (``whole`` False, ``lacking_names``, ``why``).  Contained
    (:mod:`nnhal.delegate.contain`): a crash or hang is a :class:`LiteRTCrash`."""

    def __init__(self, g: Graph, kernels: str, threads: int, per_tensor: bool):
        self.g, self.whole, self.why, self.lacking_names = g, True, "", set()
        self.per_tensor = per_tensor
        self.lite = None
        try:
            self.lite = open_litert(g.data, threads=threads, kernels=kernels, preserve=per_tensor,
                                    label="the original model (--compare)")
            self.tensors = list(g.outputs)
            return
        except LiteRTCrash:
            raise
        except (RuntimeError, ValueError) as e:
            self.why = str(e).strip().splitlines()[0]
        self.whole = False
        lacking = {op.index for op in g.operators if op.custom and not _litert_has(g, op.index, kernels)}
        if not lacking:  # NOTE: LiteRT refuses the model itself, not a kernel it lacks: nothing to compare with
            raise NoReference(f"LiteRT cannot run the original model: {self.why}")
        self.lacking_names = {g.operators[i].name for i in lacking}
        blocked = set(lacking)
        tainted: set[int] = set()
        for op in g.operators:
            if op.index in blocked or any(k in tainted for k in op.inputs):
                blocked.add(op.index)
                tainted.update(k for k in op.outputs if k >= 0)
        ops = [op.index for op in g.operators if op.index not in blocked and op.index not in g.folded]
        written = [k for i in ops for k in g.operators[i].outputs if k >= 0]
        self.tensors = written
        self.lite = None
        if ops:
            ins = sorted({k for i in ops for k in g.operators[i].inputs
                          if k >= 0 and not g.is_const(k) and k not in set(written)})
            self.ins = ins
            without = ", ".join(sorted(self.lacking_names))
            try:
                self.lite = open_litert(cut.submodel(g, ops, ins, written), threads=threads, kernels=kernels,
                                        label=f"the original model without {without} (--compare)")
            except LiteRTCrash:
                raise
            except (RuntimeError, ValueError) as e:
                raise NoReference(f"LiteRT cannot run the original model without {without} either: "
                                  f"{str(e).strip().splitlines()[0]}") from None

    def close(self) -> None:
        if self.lite is not None:
            self.lite.close()
            self.lite = None

    def run(self, x: list) -> dict[int, np.ndarray]:
        if self.whole:
            outs = self.lite.run(x)
            got = dict(zip(self.g.outputs, outs))
            if self.per_tensor:
                for op in self.g.operators:
                    for k in op.outputs:
                        if k >= 0 and k not in got:
                            try:
                                got[k] = self.lite.tensor(k)
                            except ValueError:
                                pass  # NOTE: a tensor LiteRT did not keep (an unused scratch)
            return got
        if self.lite is None:
            return {}
        values = dict(zip(self.g.inputs, x))
        return dict(zip(self.tensors, self.lite.run([values[k] for k in self.ins])))


def _litert_has(g: Graph, i: int, kernels: str) -> bool:
    """Whether LiteRT resolves operator ``i`` (alone, in a process of its own: a crash means it did)."""
    op = g.operators[i]
    ins = [k for k in dict.fromkeys(op.inputs) if k >= 0 and not g.is_const(k)]
    try:
        open_litert(cut.submodel(g, [i], ins, [k for k in op.outputs if k >= 0]), kernels=kernels,
                    label=f"operator {i} {op.name} alone (--compare)").close()
    except LiteRTCrash:
        return True
    except (RuntimeError, ValueError) as e:
        return "unresolved" not in str(e).lower() and "didn't find op" not in str(e).lower()
    return True


def run_engine(path: str, args: argparse.Namespace, device_of: DeviceOf, device: str,
               x: Optional[list] = None) -> tuple[str, list, Callable[[], Any], Callable[[], None]]:
    """For ``nnhal bench``: (summary line, inputs, one run, close) of the plan on ``device``."""
    ns = argparse.Namespace(**{**vars(args), "device": device})
    plan = plan_model(path, ns, device_of)
    plan.graph_path = path
    if x is None:
        x = generated_inputs(path, plan.graph, seed=getattr(args, "seed", 0))
    runner = open_runner(plan, device_of, threads=getattr(args, "threads", 1))
    how = sorted({e.how for e in runner.engines if getattr(e, "how", "")}) if plan.options.cache is not None else []
    return summary(plan) + (f"; NNAPI partitions {', '.join(how)}" if how else ""), x, plan_runs(runner, x), \
        runner.close


def plan_runs(runner: Runner, x: list) -> TimedRuns:
    """``runner.run(x)`` timed without its round trips to LiteRT's process (LiteRT's own time counted)."""
    def times(n: int) -> list[float]:
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            runner.run(x)
            out.append(time.perf_counter() - t0 - runner.contained)
        return out

    return TimedRuns(lambda: runner.run(x), times, lambda: runner.contained)


def plan_groups(args: argparse.Namespace, device_of: DeviceOf) -> tuple[dict[int, tuple[str, str]], str]:
    """For ``nnhal graph MODEL.tflite`` (tools/graphview): {TFLite operator: (partition label, colour)} of the
    plan, NNAPI partitions in the palette's colours, CPU partitions grey, and a title note."""
    from nnhal.tools.graphview import PALETTE

    ns = argparse.Namespace(**{**vars(args), "device": args.device or "sample-all"})
    plan = plan_model(args.model, ns, device_of)
    cpu = "#d9d9d9"
    colours = [c for c in PALETTE if c != cpu]
    groups: dict[int, tuple[str, str]] = {}
    for n, p in enumerate(plan.partitions):
        label = (f"partition {p.index}: {p.where} {p.device or 'LiteRT'}, {len(p.operators)} operators")
        colour = colours[n % len(colours)] if p.where == "nnapi" else cpu
        for i in p.operators:
            groups[i] = (label, colour)
    return groups, summary(plan)


def graph_main(args: argparse.Namespace, device_of: DeviceOf) -> int:
    """``nnhal graph MODEL.tflite`` when nnhal cannot convert the whole model to one HAL model: the TFLite
    operators grouped by the plan's partitions."""
    from nnhal.delegate import picture

    ns = argparse.Namespace(**{**vars(args), "device": args.device or "sample-all"})
    plan = plan_model(args.model, ns, device_of)
    title = f"{Path(args.model).name}: {summary(plan)}"
    out = args.output or (Path(args.model).name.split(".")[0] + ".html")
    if not out.endswith((".html", ".htm", ".svg")):
        raise UserError(f"-o {out}: the plan's picture of a model nnhal cannot convert whole is .svg or .html")
    text = picture.html_page(plan, title, plan.explain()) if out.endswith((".html", ".htm")) else \
        picture.svg(plan, title)
    try:
        Path(out).write_text(text)
    except OSError as e:
        print(f"{out}: {e}", file=sys.stderr)
        return 2
    print(f"wrote {out} ({len(plan.operators)} operators in {len(plan.partitions)} partitions)")
    return 0
