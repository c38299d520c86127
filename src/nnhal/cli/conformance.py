"""``nnhal conformance``: choosing the models, running them (in this process
or in ``--jobs`` worker processes), the progress display, and the reports.

User errors (a missing path, an unknown operation or model name, a report
path that cannot be written, an unknown device) raise :class:`UserError`
before anything runs; the command line prints its one line.  A vector file
that cannot be read is named and counted, and the others still run.  Ctrl-C
stops the run and prints the summary of what ran (exit status 130).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from nnhal.conformance import report as rep
from nnhal.conformance import vectors
from nnhal.conformance.parallel import WorkerConfig, make_runner, run_parallel
from nnhal.conformance.runner import MODES, VARIANTS, CaseResult, Report
from nnhal.platform import heap, threads


@contextlib.contextmanager
def in_process(args: argparse.Namespace) -> Iterator[None]:
    """What a run in this process (``--jobs 1``) of ``nnhal conformance`` or ``nnhal vts`` runs within: the
    vector models loaded left out of the collector's full passes (``heap.frozen``) and, unless
    ``--all-cpus``, every thread on one CPU (``threads.one_cpu``: they take turns at the interpreter lock
    anyway, and a hand-over then wakes no idle CPU)."""
    with heap.frozen(), (contextlib.nullcontext() if getattr(args, "all_cpus", False) else threads.one_cpu()):
        yield


class UserError(Exception):
    """A mistake in what the user asked for: one line, no traceback."""


def suggest(name: str, choices: Any, n: int = 3) -> str:
    """", did you mean A, B?" with the closest of ``choices`` (or "")."""
    close = difflib.get_close_matches(name, list(choices), n=n, cutoff=0.5)
    return f"; did you mean {', '.join(close)}?" if close else ""


def check_writable(path: Optional[str], what: str) -> None:
    """Refuse a report path that cannot be written, before the run: the file is opened for writing
    (appending, so an existing report is not lost if the run is stopped; one created here is removed
    again), which finds what permission bits do not (/proc, a read-only file system, root's access)."""
    if not path:
        return
    p = Path(path)
    if p.is_dir():
        raise UserError(f"{what} {path}: is a directory")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise UserError(f"{what} {path}: no such directory {parent}")
    existed = p.exists()
    try:
        with open(p, "a"):
            pass
    except OSError as e:
        raise UserError(f"{what} {path}: cannot be written ({e.strerror or 'not writable'})") from None
    if not existed:
        try:
            p.unlink()
        except OSError:
            pass


def check_operations(names: set[str]) -> None:
    from nnhal import hal

    known = {t.name for t in hal.OperationType}
    for name in sorted(names):
        if name not in known:
            raise UserError(f"--ops: no operation named {name}{suggest(name, known)}")


def vector_paths(args: argparse.Namespace) -> list[str]:
    """The vector files or folders a command was given (each must exist), else the default folder (which
    must be one; through the AIDL face, with the AIDL vectors' folder when there is one): a mistake is one line
    (UserError).  ``nnhal conformance`` and ``nnhal vts`` share it."""
    if args.paths:
        for p in args.paths:
            if not Path(p).exists():
                raise UserError(f"no such vector file or directory: {p}")
        return list(args.paths)
    if not Path(args.default_vectors).is_dir():
        raise UserError(missing_vectors_message(args.default_vectors))
    aidl_vectors = vectors.default_aidl_vectors() if getattr(args, "hal", "hidl") == "aidl" else None
    return [args.default_vectors, *([aidl_vectors] if aidl_vectors and Path(aidl_vectors).is_dir() else [])]


def missing_vectors_message(path: str) -> str:
    return (f"no conformance vectors at {path}: outside the source checkout, point $NNHAL_VECTORS at the folder "
            f"holding V1_0 ... V1_3 (export NNHAL_VECTORS=/path/to/shared/conformance) or give the folder or "
            f"files as arguments (nnhal conformance PATH)")


class Progress:
    """Models done, failures and an ETA: a rich progress bar on a terminal,
    else (with --progress) a plain line every few seconds."""

    def __init__(self, total: int, enabled: bool, fancy: bool, stream: Any = None, title: str = "conformance",
                 noun: str = "models"):
        self.total, self.enabled, self.n, self.fail = total, enabled, 0, 0
        self.noun = noun
        self.t0 = self.last = time.perf_counter()
        self.stream = stream or sys.stderr
        self._rich: Any = None
        if enabled and fancy:
            try:
                from rich.progress import (
                    BarColumn,
                    MofNCompleteColumn,
                    TextColumn,
                    TimeElapsedColumn,
                    TimeRemainingColumn,
                )
                from rich.progress import Progress as RichProgress
            except ImportError:  # NOTE: rich is a dependency; a broken install still gets the plain lines
                pass
            else:
                self._rich = RichProgress(TextColumn(title), BarColumn(), MofNCompleteColumn(),
                                          TextColumn("fail {task.fields[fail]}"), TimeElapsedColumn(),
                                          TextColumn("ETA"), TimeRemainingColumn(),
                                          TextColumn("{task.fields[model]}"), transient=True)
                self._task = self._rich.add_task("run", total=total, fail=0, model="")
                self._rich.start()

    def eta(self) -> float:
        el = time.perf_counter() - self.t0
        return el / self.n * (self.total - self.n) if self.n else float("nan")

    def step(self, failed: bool, name: str) -> None:
        self.n += 1
        self.fail += failed
        if not self.enabled:
            return
        if self._rich is not None:
            self._rich.update(self._task, advance=1, fail=self.fail, model=name[:40])
            return
        now = time.perf_counter()
        if now - self.last >= 5.0 or self.n in (1, self.total):
            self.last = now
            self.stream.write(f"{self.n}/{self.total} {self.noun}, {self.fail} failed, {now - self.t0:.0f} s, "
                              f"ETA {self.eta():.0f} s\n")
            self.stream.flush()

    def close(self) -> None:
        if self._rich is not None:
            self._rich.stop()
            self._rich = None


def run(args: argparse.Namespace, open_face: Callable[[str], Any], version: str) -> int:
    """The command; ``open_face(name)`` gives the device's face of ``args.hal`` (or raises UserError)."""
    for flag, what in (("json", "--json"), ("html", "--html"), ("junit_xml", "--junit-xml")):
        check_writable(getattr(args, flag, None), what)
    ops = None
    if args.ops:
        ops = {o.strip().upper() for o in ",".join(args.ops).split(",") if o.strip()}
        check_operations(ops)
    jobs = args.jobs if args.jobs is not None else (os.cpu_count() or 1)
    if jobs < 1:
        raise UserError(f"--jobs {jobs}: give 1 or more worker processes")
    devices = getattr(args, "devices", None) or []
    if isinstance(devices, str):
        devices = [d.strip() for d in devices.split(",") if d.strip()]
    if devices and args.hal != "hidl":
        raise UserError(f"--devices runs through the client runtime, which speaks HAL 1.3: not with --hal {args.hal}")
    if devices and args.mode not in ("all", *MODES):
        raise UserError(f"--mode {args.mode}: the client runtime runs {', '.join(MODES)}")
    paths = vector_paths(args)
    # NOTE: an unknown device (or executor it has not) is refused before the vectors load
    face = open_face(args.device) if not devices else None
    for name in devices:
        open_face(name).close()
    modes = list(MODES) if face is None else list(face.modes)
    if args.mode != "all":
        if face is not None and args.mode not in face.all_modes:
            face.close()
            raise UserError(f"--mode {args.mode}: the {face.name} face has no such executor (it has "
                            f"{', '.join(face.all_modes)})")
        modes = [args.mode]
    settings = rep.Settings(device=f"{', '.join(devices)} (client runtime)" if devices else args.device, hal=args.hal,
                            modes=modes, variants=[v for v in VARIANTS if v not in (args.skip_variant or [])],
                            memory=args.memory, paths=[str(Path(p).resolve()) for p in paths], version=version,
                            jobs=jobs, **rep.run_metadata())

    def bad_file(path: Path, message: str) -> None:
        settings.file_errors.append(message)
        print(f"nnhal conformance: {message}", file=sys.stderr)

    found = list(vectors.load_indexed(paths, ops, bad_file))
    if args.model:
        chosen = [f for f in found if args.model in f[2].name]
        if not chosen:
            names = sorted({m.name for _, _, m in found})
            close = difflib.get_close_matches(args.model, names, n=3, cutoff=0.4)
            hint = f"; closest: {', '.join(close)}" if close else ""
            raise UserError(f"--model {args.model}: no model name contains it{hint}")
        found = chosen
    quiet = getattr(args, "quiet", False)
    if not quiet:  # NOTE: what runs, before the progress display (and again with the results)
        rep.print_settings(settings)
    progress = Progress(len(found), enabled=(not args.no_progress and not quiet and sys.stderr.isatty())
                        or args.progress, fancy=sys.stderr.isatty())
    results: dict[int, list[CaseResult]] = {}
    t0 = time.perf_counter()

    def done(k: int, res: list[CaseResult]) -> None:
        dtype = found[k][2].data_type
        for r in res:  # NOTE: a runner that does not name the data type (the runtime's) gets the model's
            if not r.dtype:
                r.dtype = "quant8 signed" if "signed" in r.variant and dtype == "quant8 asymm" else dtype
        results[k] = res
        progress.step(any(r.status == "fail" for r in res), found[k][2].name)

    def died(k: int, message: str) -> None:
        vm = found[k][2]
        done(k, [CaseResult(vm.spec, vm.name, sorted(vm.operation_types), "-", "plain", "fail", message,
                            dtype=vm.data_type)])

    try:
        if jobs == 1 or len(found) <= 1:
            runner = make_runner(face, settings.modes, settings.variants, args.memory, devices)
            with in_process(args):
                for k, (_, _, vm) in enumerate(found):
                    done(k, runner.run_model(vm))
        else:
            if face is not None:  # NOTE: each worker opens its own device / connection
                face.close()
            level = getattr(args, "log_level", 50)
            config = WorkerConfig(args.device, settings.modes, settings.variants, args.memory, level, args.hal,
                                  {"devices": devices} if devices else {})
            run_parallel([(str(f), i) for f, i, _ in found], config, jobs, done, died)
    except KeyboardInterrupt:
        settings.interrupted = True
    finally:
        progress.close()
    report = Report([r for k in sorted(results) for r in results[k]], time.perf_counter() - t0)
    console = None
    if sys.stdout.isatty() and not getattr(args, "plain", False):
        from rich.console import Console

        console = Console()
    rep.print_table(report, settings=settings, rich_console=console, echo_settings=quiet)
    if args.json:
        rep.write_json(report, args.json, settings)
    if args.html:
        rep.write_html(report, args.html, settings)
    if getattr(args, "junit_xml", None):
        rep.write_junit(report, args.junit_xml, settings)
    if settings.interrupted:
        return 130
    c = report.counts()
    bad = c["fail"] or settings.file_errors or (c["unsupported"] and not args.allow_unsupported) or not found
    return 1 if bad else 0
