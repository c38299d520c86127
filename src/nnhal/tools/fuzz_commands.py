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

Each command runs in a process forked from a process that imported the command line once
(:mod:`nnhal.cli.forkrun`), in a process group of its own, stdout and stderr to files, with its address
space capped (``--rlimit-mb``), no core files, ``NNHAL_TFLITE_MAX_BYTES`` at ``--max-bytes`` and
``NNHAL_LITERT_TIMEOUT`` at ``--timeout``.  A finding's
input, command, stderr and (for exit 1) the ``-v`` traceback are written to ``--save``.
"""

from __future__ import annotations

import collections
import json
import os
import random
import subprocess
import sys
import tempfile
import time
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
    from nnhal.tflite import InvalidModelError, UnsupportedModelError, free_model, load

    try:
        model, _ = load(path)
    except InvalidModelError as e:
        print(f"{path}: {e}", file=sys.stderr)
        return 2
    except UnsupportedModelError:
        model = None  # NOTE: no HAL model of the whole: the plan's own queries still ask the devices
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
            except ValueError as e:  # NOTE: sparse metadata that does not fit its shape (as nnhal run says)
                print(f"{path}: {e}", file=sys.stderr)
                return 2
            except LookupError:
                break
    return 0


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


class CommandRunner:
    """The fork server (:mod:`nnhal.cli.forkrun`, ``python -m nnhal.cli.forkrun``): commands run in forked
    processes of a process that imported the command line once; started again if it ends."""

    def __init__(self) -> None:
        self.proc: Optional[subprocess.Popen] = None

    def _start(self) -> subprocess.Popen:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen([sys.executable, "-m", "nnhal.cli.forkrun"], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, text=True,
                                         env={**os.environ, "OPENBLAS_NUM_THREADS": "1"})
        return self.proc

    def run(self, argv: list[str], cwd: str, env: dict[str, str], rlimit_mb: int, cpu_seconds: float) -> Result:
        p = self._start()
        assert p.stdin is not None and p.stdout is not None
        p.stdin.write(json.dumps({"argv": argv, "cwd": cwd, "env": env, "rlimit_mb": rlimit_mb,
                                  "cpu_seconds": cpu_seconds}) + "\n")
        p.stdin.flush()
        line = p.stdout.readline()
        if not line:
            raise RuntimeError(f"the fork server ended (status {p.wait()})")
        a = json.loads(line)
        with open(os.path.join(cwd, "stderr"), errors="replace") as f:
            stderr = f.read(1 << 16)
        return Result(argv, a["rc"], a["signal"], stderr, a["seconds"], a["peak_mb"], a["hang"], a["leftover"])

    def close(self) -> None:
        if self.proc is not None:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            if self.proc.stdout is not None:
                self.proc.stdout.close()
            self.proc = None


def fuzz_commands(families: list[str], seconds: float = 15.0, count: int = 0, seed: int = 0,
                  max_bytes: int = 64 << 20, timeout: float = 60.0, rlimit_mb: int = 4096, memory_mb: float = 2048,
                  models: Optional[Path] = None, large: bool = False, real: bool = True,
                  save: Optional[Path] = None, progress: Optional[Callable[[str], None]] = None) -> dict:
    """Each family for ``seconds`` (or ``count`` inputs): ``{"families": {family: {"inputs", "commands",
    "seconds", "outcomes", "contained", "failed", "findings"}}, "seeds"}`` (see the module docstring;
    ``contained`` / ``failed``: the most frequent lines of those outcomes)."""
    from nnhal.tools.fuzz import Mutator, seeds

    for family in families:
        commands(family, "x", "")  # NOTE: an unknown family refused before anything runs
    mutators = [Mutator(n, d) for n, d in seeds(models, large, real).items()]
    env = {"NNHAL_TFLITE_MAX_BYTES": str(max_bytes), "NNHAL_LITERT_TIMEOUT": str(timeout),
           "OPENBLAS_NUM_THREADS": "1"}
    res: dict[str, Any] = {"families": {}, "seeds": {m.name: len(m.data) for m in mutators}}
    runner = CommandRunner()
    try:
        with tempfile.TemporaryDirectory(prefix="nnhal-fuzz-") as tmp:
            for family in families:
                camp = _Campaign(family, runner, tmp, env, rlimit_mb, timeout, memory_mb, save, progress)
                camp.go(mutators, random.Random(f"{seed}:{family}"), seconds, count)
                res["families"][family] = camp.result()
    finally:
        runner.close()
    return res


class _Campaign:
    """One family's inputs, each through its commands, and the tallies."""

    def __init__(self, family: str, runner: CommandRunner, tmp: str, env: dict, rlimit_mb: int, timeout: float,
                 memory_mb: float, save: Optional[Path], progress: Optional[Callable[[str], None]]):
        self.family, self.runner, self.tmp, self.env = family, runner, tmp, env
        self.rlimit_mb, self.timeout, self.memory_mb, self.save, self.progress = rlimit_mb, timeout, memory_mb, \
            save, progress
        self.outcomes: collections.Counter = collections.Counter()
        self.contained: collections.Counter = collections.Counter()
        self.failed: collections.Counter = collections.Counter()
        self.findings: list[dict] = []
        self.n = self.ran = 0
        self.seconds = 0.0

    def go(self, mutators: list, rng: random.Random, seconds: float, count: int) -> None:
        t0 = time.monotonic()
        while (count and self.n < count) or (not count and time.monotonic() - t0 < seconds):
            mut = rng.choice(mutators)
            data, kind = mut.mutate(rng)
            self.n += 1
            if data is None:
                self.outcomes["skipped"] += 1
                continue
            path = os.path.join(self.tmp, "input.tflite")
            with open(path, "wb") as f:
                f.write(data)
            for argv in commands(self.family, path, self.tmp):
                self.judge(self.runner.run(argv, self.tmp, self.env, self.rlimit_mb, self.timeout), mut.name, kind,
                           data)
        self.seconds = time.monotonic() - t0
        if self.progress:
            self.progress(f"{self.family}: {self.n} inputs, {self.ran} commands in {self.seconds:.0f} s: "
                          + ", ".join(f"{k} {v}" for k, v in sorted(self.outcomes.items()))
                          + f"; findings {len(self.findings)}")

    def judge(self, r: Result, seed_name: str, kind: str, data: bytes) -> None:
        self.ran += 1
        v = r.verdict(self.memory_mb)
        self.outcomes[v if not v.startswith("finding") else "finding"] += 1
        line = r.stderr.strip()
        if v == "contained":
            self.contained[line[line.find("LiteRT"):][:140]] += 1
        elif v == "failed":
            self.failed[line.split(": ", 1)[-1][:140]] += 1
        elif v.startswith("finding"):
            f = self.finding(r, v, seed_name, kind, data)
            self.findings.append(f)
            if self.progress:
                self.progress(f"{self.family} finding {len(self.findings)}: {seed_name} {kind}: {f['command']}: {v}: "
                              f"{f['error']}")

    def finding(self, r: Result, verdict: str, seed_name: str, kind: str, data: bytes) -> dict:
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        out = {"family": self.family, "seed": seed_name, "mutation": kind,
               "command": " ".join(r.argv[:1] + r.argv[2:]), "verdict": verdict, "rc": r.rc, "signal": r.sig,
               "seconds": round(r.seconds, 2), "peak_mb": r.peak_mb, "error": lines[-1][:300] if lines else ""}
        if self.save is not None:
            self.save.mkdir(parents=True, exist_ok=True)
            stem = self.save / f"{self.family}_{len(self.findings) + 1:04d}_{seed_name}_{kind}"
            stem.with_suffix(".tflite").write_bytes(data)
            text = f"nnhal {' '.join(r.argv)}\n{verdict}\n\n{r.stderr}"
            if r.rc == 1 and r.argv[0] != "ops-queries":
                again = self.runner.run(["-v"] + r.argv, self.tmp, self.env, self.rlimit_mb, self.timeout)
                text += "\n-- again with -v:\n" + again.stderr
            stem.with_suffix(".txt").write_text(text)
            out["saved"] = str(stem.with_suffix(".tflite"))
        return out

    def result(self) -> dict:
        return {"inputs": self.n, "commands": self.ran, "seconds": round(self.seconds, 1),
                "outcomes": dict(self.outcomes), "contained": dict(self.contained.most_common(20)),
                "failed": dict(self.failed.most_common(20)), "findings": self.findings}
