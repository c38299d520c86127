"""Commands run as a user runs them, many times over, at the cost of a fork each: ``python -m
nnhal.cli.forkrun`` imports the command line once, then for each request (a JSON line on stdin) forks a
process that runs it and answers what it did (a JSON line on stdout).  The harness of
``python -m nnhal.tools.fuzz tflite --commands`` (:mod:`nnhal.tools.fuzz_commands`).

Request: ``{"argv": [...], "cwd": DIR, "env": {...}, "rlimit_mb": N, "cpu_seconds": S}``; ``argv`` is an
``nnhal`` command line, or ``["ops-queries", MODEL]`` (:func:`nnhal.tools.fuzz_commands.ops_queries`).  The
forked process: a process group of its own, stdout and stderr to ``cwd/stdout`` and ``cwd/stderr``, the
environment updated with ``env``, its address space capped at ``rlimit_mb`` MiB (0: not capped), no core
files, RLIMIT_CPU at ``cpu_seconds``.  Answer: ``{"rc": status or null, "signal": name or "", "seconds",
"peak_mb" (its peak resident memory, or a waited-for child's if larger), "hang": why it was stopped or "",
"leftover": whether a process of its group outlived it (then killed)}``; it is stopped (its whole group
killed) after ten times ``cpu_seconds`` (at least a minute) of wall time.
"""

from __future__ import annotations

import json
import os
import resource
import select
import signal
import sys
import time
import traceback
from typing import Any, Callable


def _preload() -> None:
    """What the commands import, imported once here so that each forked command starts at once."""
    import nnhal.cli.app
    import nnhal.cli.delegate
    import nnhal.cli.tflite
    import nnhal.delegate.contain
    import nnhal.drivers.registry
    import nnhal.tools.bench.modelbench
    import nnhal.tools.fuzz_commands
    import nnhal.tools.graphview  # noqa: F401
    from nnhal.tflite import schema

    schema.interpreter_module()


def _target(argv: list[str]) -> Callable[[], int]:
    def go() -> int:
        if argv and argv[0] == "ops-queries":
            from nnhal.tools.fuzz_commands import ops_queries

            return ops_queries(argv[1])
        from nnhal.cli.app import main

        return main(argv)

    return go


def run_forked(fn: Callable[[], int], cwd: str, env: dict[str, str], rlimit_mb: int, cpu_seconds: float) -> dict:
    """``fn()`` (its return value the exit status) in a forked process: see the module docstring."""
    r, w = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the forked command (what it did is what the parent reports)
        rc = 70
        try:
            os.close(r)
            os.setpgid(0, 0)
            for s in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE):
                signal.signal(s, signal.SIG_DFL)
            os.chdir(cwd)
            for fd, name in ((1, "stdout"), (2, "stderr")):
                f = os.open(os.path.join(cwd, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                os.dup2(f, fd)
                os.close(f)
            os.environ.update(env)
            if rlimit_mb:
                resource.setrlimit(resource.RLIMIT_AS, (rlimit_mb << 20, rlimit_mb << 20))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            cpu = max(1, int(cpu_seconds))
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
            try:
                rc = fn()
            except SystemExit as e:
                rc = e.code if isinstance(e.code, int) else 1
            except BaseException:  # noqa: BLE001 - escaped the command: its traceback, status 70
                traceback.print_exc()
                rc = 70
            sys.stdout.flush()
            sys.stderr.flush()
            peak = max(_vm_hwm_mb(), resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)
            os.write(w, f"{peak:.1f}".encode())
        finally:
            os._exit(rc & 0xFF if isinstance(rc, int) else 1)
    os.close(w)
    try:
        os.setpgid(pid, pid)  # NOTE: both sides set it, whichever runs first
    except OSError:
        pass
    hang = ""
    wall = max(60.0, 10 * cpu_seconds)
    pidfd = os.pidfd_open(pid)
    try:
        if not select.select([pidfd], [], [], wall)[0]:
            hang = f"more than {wall:.0f} s"
            _killpg(pid)
    finally:
        os.close(pidfd)
    _, status = os.waitpid(pid, 0)
    seconds = time.monotonic() - t0
    try:
        peak = float(os.read(r, 64).decode() or "nan")
    except ValueError:
        peak = float("nan")
    os.close(r)
    leftover = _group_left(pid)
    rc = os.waitstatus_to_exitcode(status)
    sig = ""
    if rc < 0:
        sig = signal.Signals(-rc).name if -rc in {s.value for s in signal.Signals} else f"signal {-rc}"
        if -rc == signal.SIGXCPU and not hang:
            hang, sig = f"more than {cpu_seconds:g} s of CPU", ""
        elif -rc == signal.SIGKILL and hang:
            sig = ""
    return {"rc": None if rc < 0 else rc, "signal": sig, "seconds": seconds, "peak_mb": peak, "hang": hang,
            "leftover": leftover}


def _vm_hwm_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _killpg(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _group_left(pgid: int, grace: float = 3.0) -> bool:
    """Whether a process of group ``pgid`` is still there ``grace`` seconds after its leader ended (a
    LiteRT process ends when the command's socket closes: it gets a moment); then killed."""
    end = time.monotonic() + grace
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        if time.monotonic() > end:
            _killpg(pgid)
            return True
        time.sleep(0.02)


def serve(inp: Any, out: Any) -> None:
    """Requests from ``inp``, answers to ``out`` (JSON lines) until ``inp`` ends."""
    for line in inp:
        req = json.loads(line)
        ans = run_forked(_target([str(a) for a in req["argv"]]), str(req["cwd"]),
                         {str(k): str(v) for k, v in req.get("env", {}).items()}, int(req.get("rlimit_mb", 0)),
                         float(req.get("cpu_seconds", 60.0)))
        out.write(json.dumps(ans) + "\n")
        out.flush()


def main() -> int:
    _preload()
    # NOTE: the answers go on a duplicate of stdout, so nothing a command prints can reach them
    out = os.fdopen(os.dup(1), "w")
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    serve(sys.stdin, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
