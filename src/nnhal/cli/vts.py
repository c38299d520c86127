"""``nnhal vts``: every functional section of the VTS of one interface
(``--hal hidl``: VTS 1.3; ``--hal aidl``: the AIDL VTS, versions 1-4)
against one device, here, in ``--jobs N`` local worker processes or on a
Ray cluster (``--cluster``).

Mistakes (an unknown device, section, operation or model, a report path
that cannot be written) raise :class:`UserError` before anything runs.  Ctrl-C stops the run (worker processes ended, cluster tasks
cancelled) and reports the units that ended (exit status 130).  Otherwise
the exit status is 0 exactly when every case passed.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import os
import sys
import time
from pathlib import Path
from typing import Any, Optional

from nnhal.cli.conformance import (
    Progress,
    UserError,
    check_operations,
    check_writable,
    in_process,
    vector_paths,
)
from nnhal.conformance import vectors
from nnhal.conformance.vts import report as rep
from nnhal.conformance.vts.arguments import DEFAULT_CASES, DEFAULT_MAX_OPERATIONS
from nnhal.conformance.vts.case import Case
from nnhal.conformance.vts.sections import OPT_IN, PER_MODEL, SECTIONS
from nnhal.conformance.vts.suite import DIED, Config, Unit, batch_size, in_process_order, plan, run_local, run_unit

RANDOM_BATCH = 8  # NOTE: random cases per unit (a few seconds of work; Ctrl-C loses little)
PLANNED_RATE = 60  # NOTE: --seconds plans for at most this many cases per second and worker


def _sections(args: argparse.Namespace) -> list[str]:
    if not args.section:
        return list(SECTIONS)
    known = SECTIONS + OPT_IN
    chosen = [x.strip() for group in args.section for item in group for x in item.split(",") if x.strip()]
    for name in chosen:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=2, cutoff=0.5)
            hint = f"did you mean {', '.join(close)}? " if close else ""
            raise UserError(f"--section {name}: no such section ({hint}sections: {', '.join(known)})")
    return [s for s in known if s in chosen]


def _random_options_given(args: argparse.Namespace) -> list[str]:
    given = [f"--{n}" for n in ("cases", "seconds", "case") if getattr(args, n, None) is not None]
    if getattr(args, "seed", 0):
        given.append("--seed")
    if getattr(args, "max_operations", DEFAULT_MAX_OPERATIONS) != DEFAULT_MAX_OPERATIONS:
        given.append("--max-operations")
    if getattr(args, "hal_version", None) is not None:
        given.append("--hal-version")
    return given


def _random_config(args: argparse.Namespace, ops: Optional[set[str]], device: object) -> tuple[object, list[int]]:
    """The random section's options (the device's claims probed) and its case numbers."""
    from nnhal import hal
    from nnhal.conformance.randgraph import probe
    from nnhal.conformance.randgraph.recipes import EXCLUDED, RECIPES
    from nnhal.conformance.vts.random import RandomConfig

    if args.max_operations < 1:
        raise UserError(f"--max-operations {args.max_operations}: give 1 or more")
    for flag, v in (("--cases", args.cases), ("--case", args.case), ("--seed", args.seed)):
        if v is not None and v < 0:
            raise UserError(f"{flag} {v}: give 0 or more")
    if args.seconds is not None and args.seconds <= 0:
        raise UserError(f"--seconds {args.seconds:g}: give a positive number of seconds")
    version = args.hal_version
    if version is None:  # NOTE: the newest models the face takes
        version = f"AIDL_V{device.version}" if args.hal == "aidl" else "V1_3"
    if version not in hal.HalVersion.__members__:
        raise UserError(f"--hal-version {version}: one of {', '.join(hal.HalVersion.__members__)}")
    drawn = {op.name for op in RECIPES}
    if ops is not None:
        not_drawn = sorted(ops - drawn)
        if not_drawn and not ops & drawn:
            why = "; ".join(f"{n}: {EXCLUDED[hal.OperationType[n]]}" for n in not_drawn
                            if hal.OperationType[n] in EXCLUDED)
            raise UserError(f"--ops: the random section draws none of {', '.join(not_drawn)}"
                            + (f" ({why})" if why else ""))
    too_new = device.too_new(hal.HalVersion[version])
    if too_new:
        raise UserError(f"--hal-version {version}: {too_new}" + (" (--hal aidl judges models of AIDL versions)"
                                                                 if args.hal == "hidl" else ""))
    config = RandomConfig(args.device, args.seed, tuple(sorted(ops & drawn)) if ops else None, args.max_operations,
                          version, hal=args.hal)
    config = dataclasses.replace(config, claims=tuple(sorted(probe.claims(device, config.options()))))
    if args.case is not None:
        return config, [args.case]
    if args.seconds is not None:
        jobs = 1 if args.cluster else (args.jobs or os.cpu_count() or 1)
        return config, list(range(int(args.seconds * PLANNED_RATE * max(jobs, 1)) + RANDOM_BATCH))
    return config, list(range(args.cases if args.cases is not None else DEFAULT_CASES))


def _models(args: argparse.Namespace, ops: Optional[set[str]]) -> tuple[list[Any], list[str]]:
    paths = vector_paths(args)

    def bad_file(path: Path, message: str) -> None:
        raise UserError(f"cannot read vector file {path}: {message}")

    found = [vm for _, _, vm in vectors.load_indexed(paths, ops, bad_file)]
    if args.model:
        chosen = [vm for vm in found if args.model in vm.name]
        if not chosen:
            close = difflib.get_close_matches(args.model, sorted({vm.name for vm in found}), n=3, cutoff=0.4)
            raise UserError(f"--model {args.model}: no model name contains it"
                            + (f"; closest: {', '.join(close)}" if close else ""))
        found = chosen
    return found, [str(Path(p).resolve()) for p in paths]


def run(args: argparse.Namespace, version: str) -> int:
    for flag, what in (("json", "--json"), ("html", "--html"), ("junit_xml", "--junit-xml")):
        check_writable(getattr(args, flag, None), what)
    if args.sample is not None and args.sample < 0:
        raise UserError(f"--sample {args.sample}: give 0 or more mutations per model")
    jobs = args.jobs if args.jobs is not None else (os.cpu_count() or 1)
    if jobs < 1:
        raise UserError(f"--jobs {jobs}: give 1 or more worker processes")
    sections = _sections(args)
    if "random" not in sections and _random_options_given(args):
        raise UserError(f"{', '.join(_random_options_given(args))}: options of the random section (add --section "
                        "random)")
    ops = None
    if args.ops:
        ops = {o.strip().upper() for o in ",".join(args.ops).split(",") if o.strip()}
        check_operations(ops)
    from nnhal.conformance.vts.device import DeviceNotFound, open_face

    try:  # NOTE: an unknown device (or one without the face asked for) is refused before anything loads
        face = open_face(args.device, args.hal)
    except DeviceNotFound as e:
        raise UserError(str(e)) from None
    try:
        random_config, random_cases = _random_config(args, ops, face) if "random" in sections else (None, [])
    finally:
        face.close()
    if random_config is not None and args.seconds is not None:
        random_config = dataclasses.replace(random_config, deadline=time.time() + args.seconds)
    reproducers = Path(getattr(args, "reproducers", "nnhal-random"))
    models, paths = _models(args, ops) if any(s in PER_MODEL for s in sections) else ([], [])
    config = Config(args.device, args.sample, getattr(args, "log_level", 60), args.hal, random_config)
    workers = 1 if args.cluster else jobs
    units = plan(sections, models, batch_size(len(models), 8 if args.cluster else workers), random_cases,
                 RANDOM_BATCH)
    settings = rep.Settings(device=args.device, hal=args.hal, sections=sections, sample=args.sample,
                            models=len(models), ops=sorted(ops or []), model_filter=args.model,
                            runner=f"Ray cluster {args.cluster}" if args.cluster else f"jobs {jobs}", version=version,
                            vectors=paths, extra=_random_lines(args, random_config, reproducers))
    quiet = getattr(args, "quiet", False)
    progress = Progress(len(units), enabled=(not args.no_progress and not quiet and sys.stderr.isatty())
                        or args.progress, fancy=sys.stderr.isatty(), title="vts", noun="units")
    results: dict[int, list[Case]] = {}
    t0 = time.perf_counter()
    deadline = random_config.deadline if random_config is not None else None
    stop = (lambda: time.time() >= deadline) if deadline is not None else None

    def done(unit: Unit, cases: list[Case]) -> None:
        first = unit.index not in results
        for c in cases:
            _write_reproducer(c, reproducers)
        results.setdefault(unit.index, []).extend(cases)
        if first:
            progress.step(any(c.status == "fail" for c in cases), unit.label)

    try:
        if args.cluster:
            from nnhal.conformance.vts.cluster import ClusterError, run_cluster

            try:
                cpus = run_cluster(units, config, args.cluster, done)
                settings.runner += f" ({cpus} CPUs)"
            except ClusterError as e:
                raise UserError(str(e)) from None
        elif jobs == 1 or (len(units) <= 1 and random_config is None):  # NOTE: a random case may crash a driver
            with in_process(args):
                for unit in in_process_order(units):
                    if stop is not None and stop():
                        break
                    done(unit, run_unit(config, unit))
        else:
            run_local(units, config, jobs, done, stop)
    except KeyboardInterrupt:
        settings.interrupted = True
    finally:
        progress.close()
    cases = [c for k in sorted(results) for c in results[k]]
    if random_config is not None and not settings.interrupted:
        cases = _crashes(cases, random_config, reproducers)
    report = rep.Report(cases, time.perf_counter() - t0)
    rep.print_report(report, settings)
    if args.json:
        rep.write_json(report, args.json, settings)
    if args.html:
        rep.write_html(report, args.html, settings)
    if args.junit_xml:
        rep.write_junit(report, args.junit_xml, settings)
    if settings.interrupted:
        return 130
    c = report.counts()
    return 0 if report.cases and c["fail"] == 0 and c["unsupported"] == 0 else 1


def _random_lines(args: argparse.Namespace, config: object, reproducers: Path) -> list[tuple[str, str]]:
    if config is None:
        return []
    if args.case is not None:
        budget = f"case {args.case}"
    elif args.seconds is not None:
        budget = f"{args.seconds:g} seconds"
    else:
        budget = f"{args.cases if args.cases is not None else DEFAULT_CASES} cases"
    ops = sorted({op for op, _ in config.claims})
    return [("random", f"seed {config.seed}, {budget}, at most {config.max_operations} operations, HAL "
                       f"{config.version}"),
            ("claimed", f"{len(ops)} operations, {len(config.claims)} (operation, data type) pairs the device takes"),
            ("reproducers", str(reproducers))]


def _write_reproducer(c: Case, directory: Path) -> None:
    """Writes a random case's shrunk model (carried from the worker) and names its path in the case."""
    if not c.attachment:
        return
    try:
        directory.mkdir(parents=True, exist_ok=True)
        path = (directory / c.reproducer).resolve()
        path.write_bytes(c.attachment)
        c.reproducer = str(path)
    except OSError as e:
        c.message += f"\n(the reproducer could not be written: {e.strerror or e})"
        c.reproducer = ""
    from nnhal.conformance.vts.random import PLACEHOLDER

    c.message = c.message.replace(PLACEHOLDER, c.reproducer or "(not written)")
    if c.reproducer:
        picture = _picture(Path(c.reproducer), c.attachment)
        c.message += f"\npicture: {picture}" if picture else \
            f"\npicture: nnhal graph {c.reproducer} -o picture.html (needs Graphviz)"
    c.attachment = b""


def _picture(path: Path, data: bytes) -> str:
    """The shrunk model drawn beside its reproducer (``nnhal graph``'s SVG), or '' without Graphviz."""
    import gzip
    import json

    from nnhal.conformance.randgraph.graph import copies_only
    from nnhal.conformance.vectors import parse_model
    from nnhal.tools import graphview

    doc = json.loads(gzip.decompress(data))
    vm = parse_model(doc["spec"], doc["models"][0])
    source, _ = graphview.dot_source(copies_only(vm).build_model(), graphview.GraphInfo(title=path.name))
    try:
        svg = path.with_name(path.name.replace(".json.gz", ".svg"))
        svg.write_bytes(graphview.render(source, "svg"))
    except (graphview.GraphError, OSError):
        return ""
    return str(svg)


def _crashes(cases: list[Case], config: object, reproducers: Path) -> list[Case]:
    """Random cases whose worker died, shrunk here (each candidate in a process of its own)."""
    from nnhal.conformance.vts.random import crash

    out = []
    for c in cases:
        if c.section == "random" and c.status == "fail" and c.message.startswith(DIED) and " case " in c.model:
            n = int(c.model.rsplit(" ", 1)[1])
            found = crash(config, n)
            if found is not None:
                _write_reproducer(found, reproducers)
                c = found
        out.append(c)
    return out
