"""Section "qos": deadlines and priorities as VTS 1.3's
``QualityOfServiceTests.cpp`` checks them, for every generated model that
is not expected to fail (``DeadlineTest``).

Preparation with each priority (LOW, MEDIUM, HIGH) and each deadline bound
(NOW, SHORT = now + 5 ms, UNLIMITED = INT64_MAX ns, which must not
overflow) must launch with NONE and give NONE or MISSED_DEADLINE_* (NONE
for UNLIMITED), a prepared model exactly when NONE.  Executions through
async and sync, timing NO and YES, with each deadline bound: the same
statuses, output shapes and correct results exactly when NONE, no shapes
and no timing otherwise.
"""

from __future__ import annotations

import time
from typing import Any, Optional

import numpy as np

from nnhal import hal
from nnhal.conformance.compare import compare
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
INT64_MAX = 2**63 - 1
WAIT_S = 60.0


def deadline(bound: str) -> hal.OptionalTimePoint:
    if bound == "NOW":
        return hal.OptionalTimePoint(nanosecondsSinceEpoch=time.monotonic_ns())
    if bound == "SHORT":
        return hal.OptionalTimePoint(nanosecondsSinceEpoch=time.monotonic_ns() + 5_000_000)
    return hal.OptionalTimePoint(nanosecondsSinceEpoch=INT64_MAX)


def _expected(bound: str) -> str:
    return "NONE" if bound == "UNLIMITED" else "NONE or MISSED_DEADLINE_*"


def _status_ok(status: Any, bound: str) -> bool:
    return status == S.NONE or (bound != "UNLIMITED" and status in MISSED)


def _prepare(device: hal.IDevice, model: hal.Model, priority: hal.Priority, bound: str) -> tuple[Any, Any, str]:
    cb = hal.PreparedModelCallback()
    launch = device.prepareModel_1_3(model, hal.ExecutionPreference.FAST_SINGLE_ANSWER, priority, deadline(bound),
                                     [], [], bytes(32), cb)
    status, prepared = cb.wait(WAIT_S)
    if launch != S.NONE:
        return launch, None, f"prepareModel_1_3 launch gave {name(launch)}"
    return status, prepared, ""


def _judge_prepare(device: hal.IDevice, model: hal.Model, priority: hal.Priority, bound: str) -> tuple[str, str]:
    status, prepared, broken = _prepare(device, model, priority, bound)
    if broken:
        return name(status), broken
    if not _status_ok(status, bound):
        return name(status), f"gave {name(status)}"
    if (prepared is not None) != (status == S.NONE):
        return name(status), f"{name(status)} with prepared model {prepared!r}"
    return name(status), ""


def _judge_execute(vm: VectorModel, prepared: Any, executor: str, measure: M, bound: str) -> tuple[str, str]:
    inputs = vm.input_values()
    outs = vm.output_operands()
    with RequestPools(inputs, [max(nbytes(o), 1) for o in outs]) as pools:
        if executor == "SYNC":
            status, shapes, timing = prepared.executeSynchronously_1_3(pools.request(), measure, deadline(bound),
                                                                       hal.OptionalTimeoutDuration())
        else:
            cb = hal.ExecutionCallback()
            launch = prepared.execute_1_3(pools.request(), measure, deadline(bound), hal.OptionalTimeoutDuration(), cb)
            status, shapes, timing = cb.wait(WAIT_S)
            if launch != S.NONE:
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
        has_fp16 = any(o.type in (T.TENSOR_FLOAT16, T.FLOAT16) for sg in [vm.main, *vm.referenced] for o in sg.operands)
        for k, o in enumerate(outs):
            got = pools.read_output(k, o, list(shapes[k].dimensions))
            expected = o.data if o.data is not None else np.zeros(o.dimensions)
            v = compare(got, expected, o.type, model_has_fp16=has_fp16, relaxed=vm.isRelaxed, name=vm.name,
                        ignored=o.isIgnored, multinomial_tolerance=vm.multinomialTolerance,
                        multinomial_logits=inputs[0] if vm.multinomialTolerance > 0 else None)
            if not v.ok:
                return "NONE", f"output {k}: {v.message}"
    return "NONE", ""


def run_model(device: hal.IDevice, vm: VectorModel, sample: Optional[int] = None) -> list[Case]:
    rec = Recorder(SECTION, model_id(vm))
    if vm.expectFailure:
        return rec.cases  # NOTE: as VTS: DeadlineTest is instantiated for the models expected to succeed
    model = vm.build_model()
    try:
        if not gate(rec, "DeadlineTest", "NONE or MISSED_DEADLINE_*", device, model, vm):
            return rec.cases
        for priority in PRIORITIES:
            for bound in BOUNDS:
                rec.check("DeadlineTest.prepareModel", f"priority {priority.name}, deadline {bound}", _expected(bound),
                          lambda p=priority, b=bound: _judge_prepare(device, model, p, b))
        status, prepared, broken = _prepare(device, model, hal.Priority.MEDIUM, "UNLIMITED")
        if status != S.NONE or prepared is None:
            rec.add("DeadlineTest.execute", "prepare", "NONE", name(status), False,
                    broken or f"prepareModel_1_3 without a deadline gave {name(status)}")
            return rec.cases
        for executor in ("ASYNC", "SYNC"):
            for measure in (M.NO, M.YES):
                for bound in BOUNDS:
                    rec.check("DeadlineTest.execute", f"{executor}, timing {measure.name}, deadline {bound}",
                              _expected(bound), lambda e=executor, m=measure, b=bound:
                              _judge_execute(vm, prepared, e, m, b))
    finally:
        for p in model.pools:
            hal_memory.free(p)
    return rec.cases
