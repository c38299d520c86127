"""Section "qos": deadlines and priorities as the
``QualityOfServiceTests.cpp`` of VTS 1.3 and of the AIDL VTS check them,
for every generated model that is not expected to fail (``DeadlineTest``).

Preparation (VTS 1.3: each priority LOW, MEDIUM, HIGH with each deadline
bound; AIDL: LOW and HIGH without a deadline, then MEDIUM with each bound)
with the deadline bounds NOW, SHORT = now + 5 ms and UNLIMITED = INT64_MAX
ns (which must not overflow) must launch with NONE and give NONE or
MISSED_DEADLINE_* (NONE for UNLIMITED or none), a prepared model exactly
when NONE.  Executions (VTS 1.3: async and sync, timing NO and YES; AIDL:
sync and a burst, timing NO) with each deadline bound: the same statuses,
output shapes and correct results exactly when NONE, no shapes and no
timing otherwise.
"""

from __future__ import annotations

import time
from typing import Any, Optional

import numpy as np

from nnhal import hal
from nnhal.conformance.compare import compare
from nnhal.conformance.face import Face, as_face
from nnhal.conformance.runner import RequestPools, nbytes
from nnhal.conformance.vectors import VectorModel
from nnhal.conformance.vts.case import Case, Recorder, name
from nnhal.conformance.vts.request import gate, model_id
from nnhal.platform import memory as hal_memory

SECTION = "qos"
S = hal.ErrorStatus
T = hal.OperandType
M = hal.MeasureTiming
MISSED = (S.MISSED_DEADLINE_TRANSIENT, S.MISSED_DEADLINE_PERSISTENT)
BOUNDS = ("NOW", "UNLIMITED", "SHORT")
PRIORITIES = (hal.Priority.LOW, hal.Priority.MEDIUM, hal.Priority.HIGH)
# per face: the preparations (priority, deadline bound or None for none) and the executions
# (executor, timing) each VTS makes
PREPARATIONS = {
    "hidl": tuple((p, b) for p in PRIORITIES for b in BOUNDS),
    "aidl": ((hal.Priority.LOW, None), (hal.Priority.HIGH, None), *((hal.Priority.MEDIUM, b) for b in BOUNDS)),
}
EXECUTIONS = {
    "hidl": tuple((e, m) for e in ("ASYNC", "SYNC") for m in (M.NO, M.YES)),
    "aidl": (("SYNC", M.NO), ("BURST", M.NO)),
}
INT64_MAX = 2**63 - 1


def deadline(bound: Optional[str]) -> Optional[int]:
    """The deadline of a bound, nanoseconds on the steady clock (None: no deadline)."""
    if bound is None:
        return None
    if bound == "NOW":
        return time.monotonic_ns()
    if bound == "SHORT":
        return time.monotonic_ns() + 5_000_000
    return INT64_MAX


def _expected(bound: Optional[str]) -> str:
    return "NONE" if bound in ("UNLIMITED", None) else "NONE or MISSED_DEADLINE_*"


def _status_ok(status: Any, bound: Optional[str]) -> bool:
    return status == S.NONE or (bound not in ("UNLIMITED", None) and status in MISSED)


def _prepare(face: Face, model: hal.Model, priority: hal.Priority, bound: Optional[str]) -> tuple[Any, Any, str]:
    launch, status, prepared = face.prepare(model, priority=priority, deadline_ns=deadline(bound))
    if launch != S.NONE:
        return launch, None, f"prepareModel{face.method_suffix} launch gave {name(launch)}"
    return status, prepared, ""


def _judge_prepare(face: Face, model: hal.Model, priority: hal.Priority, bound: Optional[str]) -> tuple[str, str]:
    status, prepared, broken = _prepare(face, model, priority, bound)
    if broken:
        return name(status), broken
    if not _status_ok(status, bound):
        return name(status), f"gave {name(status)}"
    if (prepared is not None) != (status == S.NONE):
        return name(status), f"{name(status)} with prepared model {prepared!r}"
    return name(status), ""


def _judge_execute(face: Face, vm: VectorModel, prepared: Any, executor: str, measure: M,
                   bound: str, pools: RequestPools | Exception) -> tuple[str, str]:
    """One execution's case, in ``pools`` (the model's, reset here to what new ones would hold; the
    exception raised making them, raised again)."""
    if isinstance(pools, Exception):
        raise pools
    inputs = vm.input_values()
    outs = vm.output_operands()
    pools.reset()
    status, shapes, timing, launch = face.execute(prepared, face.request(pools.request()), executor.lower(),
                                                  measure == M.YES, deadline(bound))
    if launch is not None and launch != S.NONE:
        return name(launch), f"execute_1_3 launch gave {name(launch)}"
    if not _status_ok(status, bound):
        return name(status), f"gave {name(status)}"
    if status != S.NONE:
        if shapes or timing != hal.Timing():
            return name(status), f"{name(status)} with {len(shapes)} shapes and timing {timing}"
        return name(status), ""
    if measure == M.NO and timing != hal.Timing():
        return "NONE", f"timing {timing} with MeasureTiming.NO"
    if measure == M.YES and timing.timeOnDevice != hal.UINT64_MAX and timing.timeInDriver != hal.UINT64_MAX \
            and timing.timeOnDevice > timing.timeInDriver:
        return "NONE", f"timeOnDevice {timing.timeOnDevice} > timeInDriver {timing.timeInDriver}"
    if len(shapes) != len(outs):
        return "NONE", f"{len(shapes)} output shapes for {len(outs)} outputs"
    has_fp16 = vm.has_fp16
    for k, o in enumerate(outs):
        got = pools.read_output(k, o, list(shapes[k].dimensions))
        expected = o.data if o.data is not None else np.zeros(o.dimensions)
        v = compare(got, expected, o.type, model_has_fp16=has_fp16, relaxed=vm.isRelaxed, name=vm.name,
                    ignored=o.isIgnored, multinomial_tolerance=vm.multinomialTolerance,
                    multinomial_logits=inputs[0] if vm.multinomialTolerance > 0 else None)
        if not v.ok:
            return "NONE", f"output {k}: {v.message}"
    return "NONE", ""


def run_model(device: Any, vm: VectorModel, sample: Optional[int] = None) -> list[Case]:
    face = as_face(device)
    rec = Recorder(SECTION, model_id(vm))
    if vm.expectFailure:
        return rec.cases  # NOTE: as VTS: DeadlineTest is instantiated for the models expected to succeed
    model = vm.build_model()
    pools: Optional[RequestPools] = None
    try:
        if not gate(rec, "DeadlineTest", "NONE or MISSED_DEADLINE_*", face, model, vm):
            return rec.cases
        for priority, bound in PREPARATIONS[face.name]:
            rec.check("DeadlineTest.prepareModel", f"priority {priority.name}, deadline {bound or 'none'}",
                      _expected(bound), lambda p=priority, b=bound: _judge_prepare(face, model, p, b))
        status, prepared, broken = _prepare(face, model, hal.Priority.MEDIUM, "UNLIMITED")
        if status != S.NONE or prepared is None:
            rec.add("DeadlineTest.execute", "prepare", "NONE", name(status), False,
                    broken or f"prepareModel{face.method_suffix} without a deadline gave {name(status)}")
            return rec.cases
        # NOTE: one request's pools for every execution of the model (reset before each); pools that cannot
        # be made fail each execution's case, as each one's own pools would
        made: RequestPools | Exception
        try:
            made = pools = RequestPools(vm.input_values(), [max(nbytes(o), 1) for o in vm.output_operands()])
        except Exception as e:  # noqa: BLE001
            made = e
        for executor, measure in EXECUTIONS[face.name]:
            for bound in BOUNDS:
                rec.check("DeadlineTest.execute", f"{executor}, timing {measure.name}, deadline {bound}",
                          _expected(bound), lambda e=executor, m=measure, b=bound:
                          _judge_execute(face, vm, prepared, e, m, b, made))
    finally:
        face.close_bursts()
        if pools is not None:
            pools.close()
        for p in model.pools:
            hal_memory.free(p)
    return rec.cases
