"""Differential execution: one random model on the device under test and on
the reference (``sample-all``), both through the public HAL only.

The device is judged through one face (:mod:`nnhal.conformance.face`:
HIDL 1.3 or the stable AIDL), the reference through the HIDL face or, for a
model of an AIDL version, its AIDL face.  The reference prepares the model
and runs it synchronously: its statuses and outputs are what the device must
give.  The device is asked which operations it supports first
(``getSupportedOperations_1_3`` / ``getSupportedOperations``): if it refuses
an operation, or refuses to prepare the model (GENERAL_FAILURE, as Android's
fuzzing test skips an ``OP_FAILED`` compilation), the case is *unsupported*,
with its reason.  Otherwise its preparation status must be the reference's,
and the model runs through every executor of the face (HIDL:
``executeSynchronously_1_3``, ``execute_1_3``, a burst, ``executeFenced``;
AIDL: ``executeSynchronously``, an ``IBurst``, ``executeFenced`` and, from
version 4, a reusable ``IExecution`` run synchronously and fenced; a fenced
execution with outputs of unknown size must answer INVALID_ARGUMENT, as VTS
says) and, where the device caches compilations, after a cache round trip
(preparing with cache files, then preparing from the cache): each
execution's status, output shapes and values (:mod:`.criteria`) must agree
with the reference's.

A value mismatch is located: the model with every temporary of the main
graph made an output runs on both, and the first operation whose results
differ is the *culprit* (what shrinking keeps failing, and what the report
names).
"""

from __future__ import annotations

import copy
import os
import tempfile
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import numpy as np

from nnhal import hal
from nnhal.conformance import logs
from nnhal.conformance.face import FENCED_MODES, Face, as_face
from nnhal.conformance.randgraph.criteria import criteria_for, dependencies, judge
from nnhal.conformance.randgraph.graph import NUMPY, RandomModel
from nnhal.conformance.runner import RequestPools, Runner
from nnhal.conformance.vectors import VectorModel

S = hal.ErrorStatus
CACHE = "cache"


@dataclass(frozen=True)
class Failure:
    """One way the device disagreed: ``kind`` names it for shrinking (the
    stage, the executor, the status or the culprit operation), ``message``
    says it."""

    kind: tuple
    message: str

    def same(self, other: "Failure") -> bool:
        """The same failure for shrinking: same stage, executor and status; for
        a value mismatch the same culprit (an unknown culprit matches any)."""
        if self.kind[:2] != other.kind[:2]:
            return False
        if self.kind[0] == "value":
            return self.kind[2] is None or other.kind[2] is None or self.kind[2] == other.kind[2]
        return self.kind == other.kind


@dataclass
class Outcome:
    status: str  # "pass", "fail", "unsupported"
    failures: list[Failure] = field(default_factory=list)
    reason: str = ""  # unsupported: the device's reason
    reference: str = ""  # the reference's answer ("NONE", or its refusal)
    expected: Optional[list[np.ndarray]] = None

    @property
    def first(self) -> Optional[Failure]:
        return self.failures[0] if self.failures else None


class Devices:
    """The device under test (an ``IDevice`` of either interface, or a
    :class:`Face`) and the reference, opened by the caller; the executors to
    use (None: every executor of the device's face, then the cache round
    trip; executors the face lacks are left out)."""

    def __init__(self, dut: Any, reference: Any, executors: Optional[Sequence[str]] = None):
        self.dut: Face = as_face(dut)
        self.reference = reference
        modes = self.dut.modes
        wanted = tuple(executors) if executors is not None else (*modes, CACHE)
        self.executors = tuple(m for m in wanted if m in modes or m == CACHE)
        self._cache: Optional[tuple[int, int]] = None

    def cache_files(self) -> tuple[int, int]:
        """(model cache files, data cache files) the device asks for (0, 0: it does not cache)."""
        if self._cache is None:
            try:
                status, nm, nd = self.dut.cache_files()
                self._cache = (int(nm), int(nd)) if status == S.NONE else (0, 0)
            except Exception:  # noqa: BLE001 - a device that raises does not cache
                self._cache = (0, 0)
        return self._cache


def _status_name(s: Any) -> str:
    try:
        return S(s).name
    except (ValueError, TypeError):
        return repr(s)


def _sizes(vm: VectorModel) -> list[int]:
    out = []
    for o in vm.output_operands():
        n = int(np.prod(o.dimensions)) if o.dimensions else 1
        out.append(max(n * np.dtype(NUMPY[o.type]).itemsize, 1))
    return out


def _read(pools: RequestPools, vm: VectorModel, shapes: list, expected_dims: bool) -> list[np.ndarray]:
    outs = []
    for k, o in enumerate(vm.output_operands()):
        dims = list(o.dimensions) if expected_dims or k >= len(shapes) else list(shapes[k].dimensions)
        outs.append(pools.output(k, NUMPY[o.type], dims))
    return outs


def run_reference(ref: Any, vm: VectorModel, dynamic: bool = False) -> tuple[str, Optional[list[np.ndarray]]]:
    """The reference's answer ("NONE", "prepare X", "execute X") and its outputs
    (``dynamic``: the model's outputs declared of unknown dimensions)."""
    runner = Runner(ref, ("sync",), ("plain",))
    status, prepared, msg = runner.prepare(vm, dynamic)
    if status != S.NONE:
        return f"prepare {_status_name(status)} ({msg})", None
    with RequestPools(vm.input_values(), _sizes(vm)) as pools:
        status, shapes, _ = _run(runner.face, prepared, pools, "sync")
        if status != S.NONE:
            return f"execute {_status_name(status)}", None
        return "NONE", _read(pools, vm, shapes, False)


def differential(devices: Devices, model: RandomModel, name: str = "random", spec: str = "random",
                 locate: bool = True) -> Outcome:
    """The verdict on ``model``: the device against the reference."""
    vm = model.to_vector(name, spec)
    ref_answer, expected = run_reference(devices.reference, vm, model.dynamic_outputs)
    if expected is None:
        return _both_refuse(devices, vm, model, ref_answer)
    vm = model.to_vector(name, spec, expected)
    runner = Runner(devices.dut, devices.dut.modes, ("plain",))
    try:
        status, prepared, msg = runner.prepare(vm, model.dynamic_outputs)
    except Exception as e:  # noqa: BLE001 - a driver that raises is a failing driver
        return Outcome("fail", [Failure(("raised", "prepare"), f"preparing raised {type(e).__name__}: {e}")],
                       reference="NONE", expected=expected)
    if status != S.NONE:
        if msg.startswith("unsupported"):
            # NOTE: "unsupported: OPS -- reason": the device's reason for the first refused operation
            return Outcome("unsupported", reason=msg.split(" -- ", 1)[-1], reference="NONE")
        if status == S.GENERAL_FAILURE:
            return Outcome("unsupported", reason=f"the device refused to prepare the model ({msg})", reference="NONE")
        return Outcome("fail", [Failure(("prepare", _status_name(status)),
                                        f"prepareModel{devices.dut.method_suffix} gave {_status_name(status)}; "
                                        "the reference prepared it")],
                       reference="NONE", expected=expected)
    failures: list[Failure] = []
    try:
        for mode in devices.executors:
            if mode == CACHE:
                failures += _cache_round_trip(devices, model, vm, expected)
            else:
                failures += _execute(devices.dut, prepared, model, vm, mode, expected)
    finally:
        runner.close_burst()
    if failures and locate:
        failures = [_located(devices, model, f) if f.kind[0] == "value" else f for f in failures]
    return Outcome("fail" if failures else "pass", failures, reference="NONE", expected=expected)


def _both_refuse(devices: Devices, vm: VectorModel, model: RandomModel, ref_answer: str) -> Outcome:
    """The reference refused the model (the generator keeps this rare): the
    device must refuse it at the same stage with the same status."""
    dev_answer, _ = run_reference(devices.dut, vm, model.dynamic_outputs)
    same = dev_answer.split(" (")[0] == ref_answer.split(" (")[0]
    if same or dev_answer.startswith("prepare GENERAL_FAILURE (unsupported"):
        return Outcome("pass" if same else "unsupported", reason=dev_answer, reference=ref_answer)
    return Outcome("fail", [Failure(("refusal", dev_answer.split(" (")[0]),
                                    f"the reference answered {ref_answer}, the device {dev_answer}")],
                   reference=ref_answer)


def _run(face: Face, prepared: Any, pools: RequestPools, mode: str) -> tuple[int, list, hal.Timing]:
    """One execution on ``face``'s executor ``mode``: (status, output shapes, timing); a launch status that
    disagrees with the result is GENERAL_FAILURE."""
    o = face.execute(prepared, face.request(pools.request()), mode, False)
    if not o.consistent:
        return S.GENERAL_FAILURE, [], hal.Timing()
    return o.status, list(o.shapes), o.timing


def _execute(face: Face, prepared: Any, model: RandomModel, vm: VectorModel, mode: str,
             expected: list[np.ndarray]) -> list[Failure]:
    sizes = _sizes(vm)
    fenced = mode in FENCED_MODES
    with RequestPools(vm.input_values(), sizes) as pools:
        refused = fenced and model.dynamic_outputs  # NOTE: the device must refuse it: its log is DEBUG
        try:
            with logs.running(logs.current_model(), refused):
                status, shapes, _ = _run(face, prepared, pools, mode)
        except Exception as e:  # noqa: BLE001
            return [Failure(("raised", mode), f"{mode}: the execution raised {type(e).__name__}: {e}")]
        if fenced and model.dynamic_outputs:
            if status != S.INVALID_ARGUMENT:
                return [Failure(("execute", mode, _status_name(status)),
                                f"fenced with outputs of unknown size gave {_status_name(status)}, not "
                                "INVALID_ARGUMENT")]
            return []
        if status != S.NONE:
            return [Failure(("execute", mode, _status_name(status)),
                            f"{mode}: the execution gave {_status_name(status)}; the reference's gave NONE")]
        if not fenced:
            problem = _shapes(shapes, expected)
            if problem:
                return [Failure(("shape", mode), f"{mode}: {problem}")]
        got = _read(pools, vm, shapes, fenced)
    return _compare(model, got, expected, mode)


def _shapes(shapes: list, expected: list[np.ndarray]) -> str:
    if len(shapes) != len(expected):
        return f"{len(shapes)} output shapes for {len(expected)} outputs"
    for k, (s, e) in enumerate(zip(shapes, expected)):
        if list(s.dimensions) != list(e.shape) or not s.isSufficient:
            return f"output {k} has shape {list(s.dimensions)} (sufficient {s.isSufficient}), the reference's " \
                   f"{list(e.shape)}"
    return ""


def _compare(model: RandomModel, got: list[np.ndarray], expected: list[np.ndarray], mode: str) -> list[Failure]:
    for k, (a, e) in enumerate(zip(got, expected)):
        types, n = dependencies(model, k)
        cname, crit = criteria_for(types, n)
        t = model.main.operands[model.main.outputs[k]].type
        j = judge(a, e, t, crit, model.relaxed)
        if not j.ok:
            producer = types[0].name if types else "?"
            return [Failure(("value", mode, None),
                            f"{mode}: output {k} ({producer}'s, {cname} criteria): {j.message}")]
    return []


# --------------------------------------------------------------------------
# the compilation cache round trip


def _cache_round_trip(devices: Devices, model: RandomModel, vm: VectorModel,
                      expected: list[np.ndarray]) -> list[Failure]:
    n_model, n_data = devices.cache_files()
    if n_model + n_data == 0:
        return []
    dut = devices.dut
    token = bytes(np.random.default_rng(abs(hash(vm.name)) % (1 << 32)).integers(0, 256, 32, dtype=np.uint8))
    with tempfile.TemporaryDirectory(prefix="nnhal-random-cache-") as d:
        paths = [os.path.join(d, f"m{k}") for k in range(n_model)] + [os.path.join(d, f"d{k}") for k in range(n_data)]
        for p in paths:
            open(p, "wb").close()
        fds: list[int] = []

        def handles() -> tuple[list, list]:
            hs = []
            for p in paths:
                fd = os.open(p, os.O_RDWR)
                fds.append(fd)
                hs.append(hal.Handle(fds=[fd]))
            return hs[:n_model], hs[n_model:]

        try:
            model_hal = vm.build_model()
            if model.dynamic_outputs:
                for i in model_hal.main.outputIndexes:
                    o = model_hal.main.operands[i]
                    o.dimensions = [0] * len(o.dimensions)
            try:
                mc, dc = handles()
                status = dut.prepare(model_hal, model_cache=mc, data_cache=dc, token=token).status
            finally:
                from nnhal.platform import memory as hal_memory

                for m in model_hal.pools:
                    hal_memory.free(m)
            if status != S.NONE:
                return [Failure((CACHE, "save", _status_name(status)),
                                f"cache: preparing with cache files gave {_status_name(status)}")]
            mc, dc = handles()
            _, status, prepared = dut.prepare_from_cache(None, mc, dc, token)
            if status == S.GENERAL_FAILURE and prepared is None:
                # NOTE: as VTS's CompilationCachingTest (checkEarlyTermination): a driver may decline to cache
                # a model it prepared; loading then fails with GENERAL_FAILURE and no model
                return []
            if status != S.NONE or prepared is None:
                return [Failure((CACHE, "load", _status_name(status)),
                                f"cache: prepareModelFromCache{dut.method_suffix} gave {_status_name(status)} "
                                "after a save")]
            # NOTE: a synchronous execution of the model loaded from the cache, its failures named "cache"
            return [Failure((f.kind[0], CACHE, *f.kind[2:]), f.message.replace("sync:", "cache:", 1))
                    for f in _execute(dut, prepared, model, vm, "sync", expected)]
        except Exception as e:  # noqa: BLE001
            return [Failure(("raised", CACHE), f"cache: raised {type(e).__name__}: {e}")]
        finally:
            for fd in fds:
                os.close(fd)


# --------------------------------------------------------------------------
# locating a value mismatch


def exposed(model: RandomModel) -> RandomModel:
    """``model`` with every temporary of the main graph an output too (declared dimensions known)."""
    m = copy.deepcopy(model)
    temps = [k for op in m.main.ops for k in op.outputs]
    m.main.outputs = sorted(set(m.main.outputs) | set(temps))
    for k in temps:
        m.main.operands[k].declared = None
    m.dynamic_outputs = False
    return m


def _located(devices: Devices, model: RandomModel, f: Failure) -> Failure:
    culprit = locate(devices, model)
    if culprit is None:
        return f
    return Failure((f.kind[0], f.kind[1], culprit), f"{f.message} [first differing operation: {culprit}]")


def locate(devices: Devices, model: RandomModel) -> Optional[str]:
    """The type of the first main operation whose results differ between the
    device and the reference when every temporary is an output (None when
    that model does not run on the device, or no operation differs there)."""
    m = exposed(model)
    vm = m.to_vector("locate", "locate")
    answer, expected = run_reference(devices.reference, vm)
    if expected is None:
        return None
    vm = m.to_vector("locate", "locate", expected)
    runner = Runner(devices.dut, ("sync",), ("plain",))
    try:
        status, prepared, _ = runner.prepare(vm, False)
        if status != S.NONE:
            return None
        with RequestPools(vm.input_values(), _sizes(vm)) as pools:
            status, shapes, _ = _run(runner.face, prepared, pools, "sync")
            if status != S.NONE or _shapes(shapes, expected):
                return None
            got = _read(pools, vm, shapes, False)
    except Exception:  # noqa: BLE001
        return None
    where = {k: j for j, k in enumerate(m.main.outputs)}
    for op in m.main.ops:
        for k in op.outputs:
            j = where[k]
            types, n = dependencies(m, j)
            _, crit = criteria_for(types, n)
            if not judge(got[j], expected[j], m.main.operands[k].type, crit, m.relaxed).ok:
                return op.type.name
    return None

