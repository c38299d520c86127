"""Fuzz the commands users run on a ``.tflite`` (``python -m nnhal.tools.fuzz tflite --commands ...``):
each mutated input (:mod:`nnhal.tools.fuzz`'s seeds and mutations) goes end to end through a family of
commands, each in a process of its own, judged the way the command line promises.

Families (``--commands``, each for ``--minutes`` / ``--seconds`` / ``--count``):

- ``run``: ``nnhal run F --compare`` under ``--plan delegate`` and ``--plan max`` at ``--android-api`` 27
  and 30 (four commands);
- ``bench``: ``nnhal bench F --runs 3 --block 3`` (a few runs of every engine);
- ``graph``: ``nnhal graph F -o F.html`` and ``-o F.svg``;
- ``ops``: what ``nnhal ops --device D`` asks a device, on this model: ``nnhal.supported_operations`` of
  its HAL model (``load``) on sample-all, litert-cpu, sample-float-fast, sample-quant and sample-minimal,
  and the delegate plan's own device queries (``--accelerator D`` at API 29 and 30); a model that cannot
  be read or converted is one line and status 2, as the commands say it.

A command's outcome is fine when it exits 0, or 2 or 3 (the documented statuses: the model cannot run;
a partition or execution failed) with exactly one line on stderr.  Anything else is a finding: exit 1 (an
internal error), another status, death by a signal, more than one line on stderr, a hang (more than
``--timeout`` seconds of CPU, RLIMIT_CPU, or ten times as long in wall time, at least a minute), a peak
resident memory (the command's process or a child it waited for) above ``--memory-mb``, a process left
behind.  LiteRT crashing or hanging in its own process, said in one line (:mod:`nnhal.delegate.contain`),
is counted apart as ``contained``, not a finding.

Each command runs in a process forked from the fuzzer (nnhal imported once) in a process group of its
own, stdout and stderr to files, with its address space capped (``--rlimit-mb``), no core files,
``NNHAL_TFLITE_MAX_BYTES`` at ``--max-bytes`` and ``NNHAL_LITERT_TIMEOUT`` at ``--timeout``.  A finding's
input, command, stderr and (for exit 1) the ``-v`` traceback are written to ``--save``.
"""

from __future__ import annotations

import collections
import os
import random
import resource
import select
import signal
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

FAMILIES = ("run", "bench", "graph", "ops")
OPS_DEVICES = ("sample-all", "litert-cpu", "sample-float-fast", "sample-quant", "sample-minimal")
CONTAINED = ("LiteRT crashed", "LiteRT hung", "LiteRT exited", "LiteRT answered nonsense", "LiteRT's process")


def commands(family: str, path: str, out: str) -> list[list[str]]:
    """The command lines of ``family`` on model ``path`` (``out``: a folder for what they write); ``ops``
    is one pseudo-command (:func:`ops_queries`)."""
    if family == "run":
        return [["run", path, "--plan", plan, "--android-api", api, "--compare"]
                for plan in ("delegate", "max") for api in ("27", "30")]
    if family == "bench":
        return [["bench", path, "--runs", "3", "--block", "3"]]
    if family == "graph":
        return [["graph", path, "-o", os.path.join(out, "g.html")], ["graph", path, "-o", os.path.join(out, "g.svg")]]
    if family == "ops":
        return [["ops-queries", path]]
    raise ValueError(f"unknown command family {family!r}: {', '.join(FAMILIES)}")


def ops_queries(path: str) -> int:
    """The ``ops`` family's pseudo-command: support queries on the model converted (see the module
    docstring); 0, or 2 with one line when the model cannot be read or converted."""
    import nnhal
    from nnhal import delegate, hal
    from nnhal.tflite import ModelError, free_model, load

    try:
        model, _ = load(path)
    except ModelError as e:
        print(f"{path}: {e}".splitlines()[0], file=sys.stderr)
        model = None
    if model is not None:
        try:
            for name in OPS_DEVICES:
                try:
                    dev = nnhal.get_device(name)
                except LookupError:
                    continue  # NOTE: litert-cpu without LiteRT
                status, supported, reasons = nnhal.supported_operations(dev, model)
                n = len(model.main.operations)
                if status == hal.ErrorStatus.NONE and (len(supported) != n or len(reasons) != n):
                    raise AssertionError(f"{name}: {len(supported)} answers, {len(reasons)} reasons for {n} operations")
        finally:
            free_model(model)
    for name in OPS_DEVICES:
        for api in (29, 30):
            try:
                delegate.make_plan(path, accelerator=name, android_api=api)
            except ValueError as e:  # NOTE: a ModelError, or sparse metadata that does not fit (as nnhal run says)
                print(f"{path}: {e}".splitlines()[0], file=sys.stderr)
                return 2
            except LookupError:
                break
    return 2 if model is None else 0


@dataclass
class Result:
    """What one command did."""

    argv: list[str]
    rc: Optional[int]  # exit status (None: killed by a signal)
    sig: str  # the signal's name ("" for an exit)
    stderr: str
    seconds: float
    peak_mb: float
    hang: str = ""  # why it was stopped
    leftover: bool = False  # a process of its group outlived it

    def verdict(self, memory_mb: float) -> str:
        """"ok", "refused" (2), "failed" (3), "contained" (LiteRT's process ended, said in one line), or
        "finding: ..." (see the module docstring)."""
        lines = [ln for ln in self.stderr.splitlines() if ln.strip()]
        if self.hang:
            return f"finding: hang ({self.hang})"
        if self.sig:
            return f"finding: killed by {self.sig}"
        if self.leftover:
            return "finding: a process left behind"
        if self.peak_mb > memory_mb:
            return f"finding: peak memory {self.peak_mb:.0f} MB"
        if self.rc == 0:
            return "ok"
        if self.rc in (2, 3) and len(lines) == 1:
            if any(c in lines[0] for c in CONTAINED):
                return "contained"
            return "refused" if self.rc == 2 else "failed"
        if self.rc in (2, 3):
            return f"finding: exit {self.rc} with {len(lines)} lines on stderr"
        return f"finding: exit {self.rc}"


def _preload() -> None:
    """Everything the commands import, imported once here so each forked command starts at once."""
    import nnhal.cli.app
    import nnhal.cli.delegate
    import nnhal.cli.tflite
    import nnhal.delegate.contain
    import nnhal.drivers.registry
    import nnhal.tools.bench.modelbench
    import nnhal.tools.graphview  # noqa: F401
    from nnhal.tflite import schema

    schema.interpreter_module()


def run_forked(fn: Callable[[], int], argv: list[str], env: dict[str, str], rlimit_mb: int, cpu_seconds: float,
               cwd: str) -> Result:
    """``fn()`` (its return value the exit status) in a forked process of its own group: see the module
    docstring."""
    err_path, out_path = os.path.join(cwd, "stderr"), os.path.join(cwd, "stdout")
    r, w = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the forked command (its exit status is what the parent sees)
        rc = 70
        try:
            os.close(r)
            os.setpgid(0, 0)
            for s in (signal.SIGPROF, signal.SIGALRM, signal.SIGINT, signal.SIGTERM):
                signal.signal(s, signal.SIG_DFL)
            signal.setitimer(signal.ITIMER_PROF, 0)
            signal.setitimer(signal.ITIMER_REAL, 0)
            os.chdir(cwd)
            for fd, p in ((1, out_path), (2, err_path)):
                f = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
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
        ready, _, _ = select.select([pidfd], [], [], wall)
        if not ready:
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
        sig = signal.Signals(-rc).name if -rc in signal.Signals._value2member_map_ else f"signal {-rc}"
        if -rc == signal.SIGXCPU and not hang:
            hang, sig = f"more than {cpu_seconds:g} s of CPU", ""
        elif -rc == signal.SIGKILL and hang:
            sig = ""
    with open(err_path, errors="replace") as f:
        stderr = f.read(1 << 16)
    return Result(argv, None if rc < 0 else rc, sig, stderr, seconds, peak, hang, leftover)


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


def _cli(argv: list[str]) -> Callable[[], int]:
    def go() -> int:
        if argv[0] == "ops-queries":
            return ops_queries(argv[1])
        from nnhal.cli.app import main

        return main(argv)

    return go


def fuzz_commands(families: list[str], seconds: float = 15.0, count: int = 0, seed: int = 0,
                  max_bytes: int = 64 << 20, timeout: float = 60.0, rlimit_mb: int = 4096, memory_mb: float = 2048,
                  models: Optional[Path] = None, large: bool = False, real: bool = True,
                  save: Optional[Path] = None, progress: Optional[Callable[[str], None]] = None) -> dict:
    """Each family for ``seconds`` (or ``count`` inputs): ``{"families": {family: {"inputs", "commands",
    "seconds", "outcomes", "contained", "failed", "findings"}}, "seeds"}`` (see the module docstring;
    ``contained`` / ``failed``: the most frequent lines of those outcomes)."""
    from nnhal.tools.fuzz import Mutator, seeds

    _preload()
    corpus = seeds(models, large, real)
    mutators = [Mutator(n, d) for n, d in corpus.items()]
    env = {"NNHAL_TFLITE_MAX_BYTES": str(max_bytes), "NNHAL_LITERT_TIMEOUT": str(timeout),
           "OPENBLAS_NUM_THREADS": "1"}
    res: dict[str, Any] = {"families": {}, "seeds": {m.name: len(m.data) for m in mutators}}
    with tempfile.TemporaryDirectory(prefix="nnhal-fuzz-") as tmp:
        for family in families:
            commands(family, "x", tmp)  # NOTE: an unknown family refused before anything runs
            rng = random.Random(f"{seed}:{family}")
            outcomes: collections.Counter = collections.Counter()
            contained: collections.Counter = collections.Counter()
            failed: collections.Counter = collections.Counter()
            findings: list[dict] = []
            n = ran = 0
            t0 = time.monotonic()
            while (count and n < count) or (not count and time.monotonic() - t0 < seconds):
                mut = rng.choice(mutators)
                data, kind = mut.mutate(rng)
                n += 1
                if data is None:
                    outcomes["skipped"] += 1
                    continue
                path = os.path.join(tmp, "input.tflite")
                with open(path, "wb") as f:
                    f.write(data)
                for argv in commands(family, path, tmp):
                    r = run_forked(_cli(argv), argv, env, rlimit_mb, timeout, tmp)
                    ran += 1
                    v = r.verdict(memory_mb)
                    outcomes[v if not v.startswith("finding") else "finding"] += 1
                    if v == "contained":
                        line = r.stderr.strip()
                        contained[line[line.find("LiteRT"):][:140]] += 1
                    elif v == "failed":
                        failed[r.stderr.strip().split(": ", 1)[-1][:140]] += 1
                    if v.startswith("finding"):
                        f = _finding(r, v, mut.name, kind, data, family, len(findings) + 1, save, env, rlimit_mb,
                                     timeout, tmp)
                        findings.append(f)
                        if progress:
                            progress(f"{family} finding {len(findings)}: {mut.name} {kind}: {' '.join(argv[:1] + argv[2:])}:"
                                     f" {v}: {f['error']}")
            elapsed = time.monotonic() - t0
            res["families"][family] = {"inputs": n, "commands": ran, "seconds": round(elapsed, 1),
                                       "outcomes": dict(outcomes), "contained": dict(contained.most_common(20)),
                                       "failed": dict(failed.most_common(20)),
                                       "findings": findings}
            if progress:
                progress(f"{family}: {n} inputs, {ran} commands in {elapsed:.0f} s: "
                         + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())) + f"; findings {len(findings)}")
    return res


def _finding(r: Result, verdict: str, seed_name: str, kind: str, data: bytes, family: str, k: int,
             save: Optional[Path], env: dict, rlimit_mb: int, timeout: float, tmp: str) -> dict:
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    out = {"family": family, "seed": seed_name, "mutation": kind, "command": " ".join(r.argv[:1] + r.argv[2:]),
           "verdict": verdict, "rc": r.rc, "signal": r.sig, "seconds": round(r.seconds, 2), "peak_mb": r.peak_mb,
           "error": lines[-1][:300] if lines else ""}
    if save is not None:
        save.mkdir(parents=True, exist_ok=True)
        stem = save / f"{family}_{k:04d}_{seed_name}_{kind}"
        stem.with_suffix(".tflite").write_bytes(data)
        text = f"nnhal {' '.join(r.argv)}\n{verdict}\n\n{r.stderr}"
        if r.rc == 1 and r.argv[0] != "ops-queries":
            again = run_forked(_cli(["-v"] + r.argv), r.argv, env, rlimit_mb, timeout, tmp)
            text += "\n-- again with -v:\n" + again.stderr
        stem.with_suffix(".txt").write_text(text)
        out["saved"] = str(stem.with_suffix(".tflite"))
    return out
