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
    vector_paths,
)
from nnhal.conformance import vectors
from nnhal.conformance.vts import report as rep
from nnhal.conformance.vts.case import Case
from nnhal.conformance.vts.sections import PER_MODEL, SECTIONS
from nnhal.conformance.vts.suite import Config, Unit, batch_size, plan, run_local, run_unit


def _sections(args: argparse.Namespace) -> list[str]:
    if not args.section:
        return list(SECTIONS)
    chosen = [x.strip() for group in args.section for item in group for x in item.split(",") if x.strip()]
    for name in chosen:
        if name not in SECTIONS:
            close = difflib.get_close_matches(name, SECTIONS, n=2, cutoff=0.5)
            hint = f"did you mean {', '.join(close)}? " if close else ""
            raise UserError(f"--section {name}: no such section ({hint}sections: {', '.join(SECTIONS)})")
    return [s for s in SECTIONS if s in chosen]


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
    ops = None
    if args.ops:
        ops = {o.strip().upper() for o in ",".join(args.ops).split(",") if o.strip()}
        check_operations(ops)
    from nnhal.conformance.vts.device import DeviceNotFound, open_face

    try:  # NOTE: an unknown device (or one without the face asked for) is refused before anything loads
        open_face(args.device, args.hal).close()
    except DeviceNotFound as e:
        raise UserError(str(e)) from None
    models, paths = _models(args, ops) if any(s in PER_MODEL for s in sections) else ([], [])
    config = Config(args.device, args.sample, getattr(args, "log_level", 60), args.hal)
    workers = 1 if args.cluster else jobs
    units = plan(sections, models, batch_size(len(models), 8 if args.cluster else workers))
    settings = rep.Settings(device=args.device, hal=args.hal, sections=sections, sample=args.sample,
                            models=len(models), ops=sorted(ops or []), model_filter=args.model,
                            runner=f"Ray cluster {args.cluster}" if args.cluster else f"jobs {jobs}", version=version,
                            vectors=paths)
    quiet = getattr(args, "quiet", False)
    progress = Progress(len(units), enabled=(not args.no_progress and not quiet and sys.stderr.isatty())
                        or args.progress, fancy=sys.stderr.isatty(), title="vts", noun="units")
    results: dict[int, list[Case]] = {}
    t0 = time.perf_counter()

    def done(unit: Unit, cases: list[Case]) -> None:
        first = unit.index not in results
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
        elif jobs == 1 or len(units) <= 1:
            for unit in units:
                done(unit, run_unit(config, unit))
        else:
            run_local(units, config, jobs, done)
    except KeyboardInterrupt:
        settings.interrupted = True
    finally:
        progress.close()
    report = rep.Report([c for k in sorted(results) for c in results[k]], time.perf_counter() - t0)
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
