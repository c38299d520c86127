"""Section "random": random models on the device under test against the
reference (:mod:`nnhal.conformance.randgraph`), as Android's
``RandomGraphTest`` does, with failures shrunk to the smallest model.

A case is one random model, drawn from (seed, case number) and the options
(operations, HAL version, at most K operations, the pairs the device claims):
*pass* when the device agrees with the reference in every executor and after
a cache round trip, *unsupported* when it refuses the model honestly
(``getSupportedOperations_1_3`` or a GENERAL_FAILURE preparation), *fail*
otherwise.  A failure is shrunk (:mod:`nnhal.conformance.randgraph.shrink`)
and its smallest model becomes a reproducer: a vector file (the conformance
vectors' format: the inputs and the reference's outputs) that ``nnhal
conformance --device D FILE`` replays, carried back to the command as the
case's ``attachment``; the case says what differed, lists the shrunk model's
operations one per line and gives the command line that draws the case
again.  A case that kills the process (a driver crash) is shrunk by the
command afterwards, each candidate in a process of its own (:func:`crash`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from typing import Any, Optional

from nnhal import hal
from nnhal.conformance.randgraph.differential import Devices, differential
from nnhal.conformance.randgraph.generator import Options, StepFailed, generate
from nnhal.conformance.randgraph.graph import RandomModel, describe
from nnhal.conformance.randgraph.shrink import Shrunk, shrink
from nnhal.conformance.vectors import encode_file
from nnhal.conformance.vts.case import Case

SECTION = "random"
EXPECTED = "the reference's statuses and outputs"
PLACEHOLDER = "{reproducer}"


@dataclass(frozen=True)
class RandomConfig:
    """The options of a random run (plain data: it crosses processes)."""

    device: str
    seed: int = 0
    ops: Optional[tuple[str, ...]] = None
    max_operations: int = 8
    version: str = "V1_3"
    claims: Optional[tuple[tuple[str, str], ...]] = None
    deadline: Optional[float] = None  # NOTE: wall clock (time.time()): no case starts after it
    shrink_tries: int = 300
    shrink_seconds: float = 120.0
    executors: Optional[tuple[str, ...]] = None  # NOTE: None: every executor of the face, and the cache
    hal: str = "hidl"  # NOTE: the face the device is judged through ("hidl" or "aidl")

    def options(self) -> Options:
        return Options(hal.HalVersion[self.version], frozenset(self.ops) if self.ops else None, self.max_operations,
                       frozenset(self.claims) if self.claims is not None else None)

    def command(self, case: int) -> str:
        """The command line that runs case ``case`` again (and shrinks it)."""
        parts = [f"nnhal vts --device {self.device}{self.hal_flag} --section random --seed {self.seed} --case {case}"]
        if self.ops:
            parts.append(f"--ops {','.join(self.ops)}")
        if self.max_operations != Options.max_operations:
            parts.append(f"--max-operations {self.max_operations}")
        if self.version != "V1_3":
            parts.append(f"--hal-version {self.version}")
        return " ".join(parts)


    @property
    def hal_flag(self) -> str:
        """The command-line flag naming the face (nothing for the default)."""
        return f" --hal {self.hal}" if self.hal != "hidl" else ""


def reproducer_name(config: RandomConfig, case: int) -> str:
    return f"random-s{config.seed}-c{case}.json.gz"


def case_name(config: RandomConfig, case: int) -> str:
    return f"seed{config.seed}/case{case}"


_REFERENCE: dict[str, Any] = {}


def reference(version: str = "V1_3") -> Any:
    """The reference device of this process (sample-all, in process), through
    the face that takes models of ``version`` (a ``HalVersion`` name: AIDL
    versions through the AIDL face)."""
    face = "aidl" if hal.HalVersion[version] >= hal.HalVersion.AIDL_V1 else "hidl"
    if face not in _REFERENCE:
        from nnhal.conformance.vts.device import open_face

        _REFERENCE[face] = open_face("sample-all", face)
    return _REFERENCE[face]


def run_cases(device: Any, config: RandomConfig, start: int, count: int) -> list[Case]:
    """Cases ``start`` .. ``start + count - 1`` (those that start before the deadline)."""
    devices = Devices(device, reference(config.version), config.executors)
    out = []
    # NOTE: numpy's warnings from a kernel on an extreme value (inf * 0 in a float16 resize) are no finding
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for n in range(start, start + count):
            if config.deadline is not None and time.time() >= config.deadline:
                break
            out.append(run_case(devices, config, n))
    return out


def _test(model: RandomModel) -> str:
    return f"RandomGraphTest.{'relaxed' if model.relaxed else model.dtype}"


def run_case(devices: Devices, config: RandomConfig, n: int) -> Case:
    t0 = time.perf_counter()
    options = config.options()
    try:
        model, d = generate(config.seed, n, options)
    except StepFailed as e:
        return Case(SECTION, "RandomGraphTest", case_name(config, n), "", EXPECTED, "unsupported", "unsupported",
                    f"no model could be drawn from the operations the device claims ({e})",
                    time.perf_counter() - t0)
    outcome = differential(devices, model, f"random_s{config.seed}_c{n}", f"random/s{config.seed}_c{n}")
    if outcome.status == "pass":
        return Case(SECTION, _test(model), case_name(config, n), "", EXPECTED, "as the reference", "pass",
                    "", time.perf_counter() - t0)
    if outcome.status == "unsupported":
        return Case(SECTION, _test(model), case_name(config, n), "", EXPECTED, "unsupported", "unsupported",
                    outcome.reason, time.perf_counter() - t0)
    target = outcome.first

    def still_fails(m: RandomModel) -> bool:
        o = differential(devices, m, locate=target.kind[0] == "value" and target.kind[2] is not None)
        return o.status == "fail" and any(f.same(target) for f in o.failures)

    shrunk = shrink(model, list(d.choices), options, still_fails, config.shrink_tries, config.shrink_seconds)
    final = differential(devices, shrunk.model)
    if final.status != "fail" or final.expected is None:
        shrunk = Shrunk(model, list(d.choices))  # NOTE: the shrunk model did not fail again (a flaky device)
        final = outcome
    return _failed(config, n, model, shrunk, final, time.perf_counter() - t0)


def _failed(config: RandomConfig, n: int, original: RandomModel, shrunk: Shrunk, final: Any,
            seconds: float) -> Case:
    m = shrunk.model
    vm = m.to_vector(f"random_s{config.seed}_c{n}", f"random/s{config.seed}_c{n}", final.expected)
    first = final.first
    lines = describe(m)
    message = "\n".join([first.message,
                         f"shrunk from {original.op_count()} to {m.op_count()} operations ({shrunk.tried} models "
                         f"tried, {shrunk.seconds:.1f} s):",
                         *[f"  {line}" for line in lines],
                         f"replay: nnhal conformance --device {config.device}{config.hal_flag} {PLACEHOLDER}",
                         f"draw again: {config.command(n)}"])
    return Case(SECTION, _test(original), case_name(config, n), "", EXPECTED,
                _actual(first.kind), "fail", message, seconds, operations=m.op_count(),
                reproducer=reproducer_name(config, n), attachment=encode_file(vm.spec, [vm]))


def _actual(kind: tuple) -> str:
    stage = kind[0]
    if stage == "value":
        return f"wrong values ({kind[1]})" + (f", first from {kind[2]}" if kind[2] else "")
    if stage == "shape":
        return f"wrong output shape ({kind[1]})"
    if stage == "raised":
        return f"raised ({kind[1]})"
    return " ".join(str(k) for k in kind)


# --------------------------------------------------------------------------
# a case that kills its process


CRASHED = "the worker process died running it"


def _dies(device: str, model: RandomModel, timeout: float, face: str = "hidl") -> bool:
    """Whether running ``model`` on ``device`` (supported operations, prepare, one execution) kills a fresh
    process (by a signal or a non-zero exit)."""
    vm = model.to_vector("crash", "random/crash")
    with tempfile.TemporaryDirectory(prefix="nnhal-random-") as d:
        path = os.path.join(d, "model.json.gz")
        with open(path, "wb") as f:
            f.write(encode_file(vm.spec, [vm]))
        try:
            r = subprocess.run([sys.executable, "-m", "nnhal.conformance.randgraph.replay", "--device", device, "--hal", face,
                                path],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=timeout)
        except subprocess.TimeoutExpired:
            return False
    return r.returncode != 0


def crash(config: RandomConfig, n: int, tries: int = 60, timeout: float = 120.0) -> Optional[Case]:
    """Case ``n`` that killed its worker: shrunk in this process, each candidate
    run in a process of its own (None when it does not kill one again)."""
    t0 = time.perf_counter()
    options = config.options()
    try:
        model, d = generate(config.seed, n, options)
    except StepFailed:
        return None
    if not _dies(config.device, model, timeout, config.hal):
        return None
    shrunk = shrink(model, list(d.choices), options, lambda m: _dies(config.device, m, timeout, config.hal), tries,
                    config.shrink_seconds * 4)
    m = shrunk.model
    vm = m.to_vector(f"random_s{config.seed}_c{n}", f"random/s{config.seed}_c{n}")
    lines = describe(m)
    message = "\n".join([f"{CRASHED} (again alone, in a fresh process: a driver crash)",
                         f"shrunk from {model.op_count()} to {m.op_count()} operations ({shrunk.tried} models tried, "
                         f"{shrunk.seconds:.1f} s):",
                         *[f"  {line}" for line in lines],
                         f"replay: nnhal conformance --device {config.device}{config.hal_flag} {PLACEHOLDER}",
                         f"draw again: {config.command(n)}"])
    return Case(SECTION, _test(model), case_name(config, n), "", EXPECTED,
                "the process died", "fail", message, time.perf_counter() - t0, operations=m.op_count(),
                reproducer=reproducer_name(config, n), attachment=encode_file(vm.spec, [vm]))
