"""Section "request": request validation as VTS 1.3's ``ValidateRequest.cpp``
does it (and the fenced-execution checks of ``VtsHalNeuralnetworks.cpp``),
through the public HAL only.

For every base model that prepares, each request input and each request
output in turn is removed from a valid request, and the driver must answer
INVALID_ARGUMENT through ``execute_1_3`` (at launch, and the callback with
no output shapes and no timing), ``executeSynchronously_1_3`` (no shapes, no
timing), ``executeFenced`` (no sync fence, no callback) and the burst
(``nnhal.burst.BurstController``, one per prepared model: no shapes, no
timing).  A valid request fenced on an invalid sync fence must give
INVALID_ARGUMENT too, and the models that must fail (``expectFailure``)
must fail to execute, with no shapes and no timing.  A model the driver
does not support (``getSupportedOperations_1_3``) is one unsupported case.
"""

from __future__ import annotations

import os
from typing import Any, Optional

import numpy as np

from nnhal import hal
from nnhal.conformance.vectors import VectorModel
from nnhal.conformance.vts.case import Case, Recorder, name, sample_indexes
from nnhal.platform import memory as hal_memory

SECTION = "request"
S = hal.ErrorStatus
T = hal.OperandType
NO_TIME = hal.UINT64_MAX
WAIT_S = 60.0

_ITEM_SIZE = {T.TENSOR_FLOAT32: 4, T.FLOAT32: 4, T.TENSOR_INT32: 4, T.INT32: 4, T.UINT32: 4, T.TENSOR_FLOAT16: 2,
              T.FLOAT16: 2, T.TENSOR_QUANT16_SYMM: 2, T.TENSOR_QUANT16_ASYMM: 2}


class RequestPools:
    """A valid request for a conformance model, laid out as VTS does: pool 0
    holds the inputs and pool 1 the outputs, each at a 4-byte-aligned offset
    with its exact length (a zero-sized output gets 1 byte); inputs without
    data are ``hasNoValue``."""

    def __init__(self, vm: VectorModel):
        self.inputs: list[hal.RequestArgument] = []
        blobs: list[tuple[int, bytes]] = []
        off = 0
        for value in vm.input_values():
            if value is None:
                self.inputs.append(hal.RequestArgument(hasNoValue=True))
                continue
            raw = np.ascontiguousarray(value).tobytes()
            self.inputs.append(hal.RequestArgument(location=hal.DataLocation(0, off, len(raw))))
            blobs.append((off, raw))
            off = _align4(off + len(raw))
        data = bytearray(max(off, 4))
        for start, raw in blobs:
            data[start: start + len(raw)] = raw
        self.in_mem = hal_memory.allocate_filled(bytes(data))
        self.outputs: list[hal.RequestArgument] = []
        off = 0
        for o in vm.output_operands():
            n = max(_byte_size(o.type, o.dimensions), 1)
            self.outputs.append(hal.RequestArgument(location=hal.DataLocation(1, off, n)))
            off = _align4(off + n)
        self.out_mem = hal_memory.allocate(max(off, 4))

    def request(self) -> hal.Request:
        return hal.Request(inputs=list(self.inputs), outputs=list(self.outputs),
                           pools=[hal.MemoryPool(hidlMemory=self.in_mem), hal.MemoryPool(hidlMemory=self.out_mem)])

    def close(self) -> None:
        hal_memory.free(self.in_mem)
        hal_memory.free(self.out_mem)


def _align4(n: int) -> int:
    return (n + 3) // 4 * 4


def _byte_size(t: int, dims: list[int]) -> int:
    n = _ITEM_SIZE.get(t, 1)
    for d in dims:
        n *= d
    return n


def model_id(vm: VectorModel) -> str:
    return f"{vm.spec}/{vm.name}"


def gate(rec: Recorder, test: str, expected: str, device: hal.IDevice, model: hal.Model, vm: VectorModel) -> bool:
    """Whether a section goes on with ``vm`` on ``device`` (as VTS: only the
    models it prepares).  A model that must fail and is refused is a passed
    case; one whose operations the device does not support, an unsupported
    case; a valid model that getSupportedOperations_1_3 calls invalid, a
    failure."""
    status, supported = device.getSupportedOperations_1_3(model)
    refused = [hal.OperationType(op.type).name for op, ok in zip(model.main.operations, supported) if not ok] \
        if status == S.NONE else []
    if status == S.NONE and not refused:
        return True
    if vm.expectFailure:
        rec.add("ValidationTest.createPreparedModel", "", "an error (expectFailure)", name(status), True)
    elif status != S.NONE:
        rec.add(test, "getSupportedOperations_1_3", "NONE", name(status), False,
                f"getSupportedOperations_1_3 gave {name(status)} for a valid model")
    else:
        rec.unsupported(test, "", expected, f"unsupported: {','.join(refused)}")
    return False


def prepare(device: hal.IDevice, vm: VectorModel) -> tuple[Optional[hal.IPreparedModel], hal.Model]:
    model = vm.build_model()
    cb = hal.PreparedModelCallback()
    device.prepareModel_1_3(model, hal.ExecutionPreference.FAST_SINGLE_ANSWER, hal.Priority.MEDIUM,
                            hal.OptionalTimePoint(), [], [], bytes(32), cb)
    status, prepared = cb.wait(WAIT_S)
    return (prepared if status == S.NONE else None), model


def measure_for(message: str) -> hal.MeasureTiming:
    # NOTE: as VTS, half of the checks ask for timing, chosen by a stable hash of the message
    h = 0
    for c in message:
        h ^= ord(c)
    return hal.MeasureTiming.YES if h & 1 else hal.MeasureTiming.NO


def no_timing(timing: hal.Timing) -> bool:
    return timing.timeOnDevice == NO_TIME and timing.timeInDriver == NO_TIME


def _refused(what: str, status: Any, shapes: list, timing: hal.Timing) -> tuple[str, str]:
    if status != S.INVALID_ARGUMENT or shapes or not no_timing(timing):
        return name(status), f"{what} gave {name(status)}, {len(shapes)} shapes, {timing}"
    return name(status), ""


def judge_async(prepared: hal.IPreparedModel, request: hal.Request, measure: hal.MeasureTiming) -> tuple[str, str]:
    cb = hal.ExecutionCallback()
    launch = prepared.execute_1_3(request, measure, hal.OptionalTimePoint(), hal.OptionalTimeoutDuration(), cb)
    status, shapes, timing = cb.wait(WAIT_S)
    if launch != S.INVALID_ARGUMENT:
        return name(launch), f"execute_1_3 launch gave {name(launch)}"
    return _refused("execute_1_3 callback", status, shapes, timing)


def judge_sync(prepared: hal.IPreparedModel, request: hal.Request, measure: hal.MeasureTiming) -> tuple[str, str]:
    status, shapes, timing = prepared.executeSynchronously_1_3(request, measure, hal.OptionalTimePoint(),
                                                               hal.OptionalTimeoutDuration())
    return _refused("executeSynchronously_1_3", status, shapes, timing)


def judge_fenced(prepared: hal.IPreparedModel, request: hal.Request, wait_for: list) -> tuple[str, str]:
    status, fence, callback = prepared.executeFenced(request, wait_for, hal.MeasureTiming.NO, hal.OptionalTimePoint(),
                                                     hal.OptionalTimeoutDuration(), hal.OptionalTimeoutDuration())
    if status != S.INVALID_ARGUMENT or fence is not None or callback is not None:
        return name(status), f"executeFenced gave {name(status)}, fence {fence}, callback {callback}"
    return name(status), ""


def judge_burst(burst: Any, request: hal.Request, measure: hal.MeasureTiming) -> tuple[str, str]:
    status, shapes, timing = burst.execute(request, measure)
    return _refused("burst", status, shapes, timing)


def rejection_problems(prepared: hal.IPreparedModel, request: hal.Request, message: str,
                       burst: Any = None) -> list[str]:
    """What each execution path got wrong about an invalid request (empty:
    all gave INVALID_ARGUMENT the way VTS wants)."""
    measure = measure_for(message)
    judged = [judge_async(prepared, request, measure), judge_sync(prepared, request, measure),
              judge_fenced(prepared, request, [])]
    if burst is not None:
        judged.append(judge_burst(burst, request, measure))
    return [f"{message}: {p}" for _, p in judged if p]


def _closed_fd_handle() -> hal.Handle:
    r, w = os.pipe()
    os.close(r)
    os.close(w)
    return hal.Handle(fds=[r])


INVALID_FENCES = {
    "null handle": lambda: None,
    "handle without fds": lambda: hal.Handle(),
    "closed fd": _closed_fd_handle,
    "negative fd": lambda: hal.Handle(fds=[-1]),
    "not a handle": lambda: 3,
}


def planned_mutations(n_inputs: int, n_outputs: int) -> list[tuple[str, str, Any]]:
    """(VTS test, description, how to change the request) for every request
    mutation, in VTS's order: inputs removed, outputs removed, then the
    fenced executions waiting on invalid fences."""
    out: list[tuple[str, str, Any]] = []
    for k in range(n_inputs):
        out.append(("removeInputTest", f"removed input {k}", ("inputs", k)))
    for k in range(n_outputs):
        out.append(("removeOutputTest", f"removed Output {k}", ("outputs", k)))
    for what in INVALID_FENCES:
        out.append(("executeFenced.invalidWaitFor", f"waitFor [{what}]", ("fence", what)))
    return out


def run_model(device: hal.IDevice, vm: VectorModel, sample: Optional[int] = None) -> list[Case]:
    """The request cases of one model (nothing but an unsupported case when
    the device does not take it)."""
    from nnhal.runtime.burst import BurstController

    rec = Recorder(SECTION, model_id(vm))
    model = vm.build_model()
    pools: Optional[RequestPools] = None
    prepared: Any = None
    burst: Any = None
    try:
        if not gate(rec, "ValidationTest.validateRequest", "INVALID_ARGUMENT", device, model, vm):
            return rec.cases
        cb = hal.PreparedModelCallback()
        device.prepareModel_1_3(model, hal.ExecutionPreference.FAST_SINGLE_ANSWER, hal.Priority.MEDIUM,
                                hal.OptionalTimePoint(), [], [], bytes(32), cb)
        status, prepared = cb.wait(WAIT_S)
        if status != S.NONE or prepared is None:
            ok = vm.expectFailure
            rec.add("ValidationTest.createPreparedModel", "", "NONE", name(status), ok,
                    f"a supported model did not prepare: {name(status)}")
            return rec.cases
        pools = RequestPools(vm)
        valid = pools.request()
        if vm.expectFailure:
            rec.check("ValidationTest.validateRequestFailure", "", "an error, no shapes, no timing",
                      lambda: _judge_failure(prepared, valid))
            return rec.cases
        planned = planned_mutations(len(valid.inputs), len(valid.outputs))
        chosen = [planned[k] for k in sample_indexes(len(planned), sample)]
        if any(what[0] != "fence" for _, _, what in chosen):
            status, burst = BurstController.create(prepared, timeout=WAIT_S)
            if status != S.NONE:
                burst = None
        for test, what, (field, k) in chosen:
            if field == "fence":
                rec.check(f"ValidationTest.{test}", what, "INVALID_ARGUMENT",
                          lambda k=k: judge_fenced(prepared, pools.request(), [INVALID_FENCES[k]()]))
                continue
            request = pools.request()
            del getattr(request, field)[k]
            message = f"{test[:-4]}: {what}"
            measure = measure_for(message)
            for path, run in _paths(prepared, burst, request, measure):
                rec.check(f"ValidationTest.{test}", f"{what} [{path}]", "INVALID_ARGUMENT", run)
    finally:
        if burst is not None:
            burst.close()
        if pools is not None:
            pools.close()
        for p in model.pools:
            hal_memory.free(p)
    return rec.cases


def _paths(prepared: Any, burst: Any, request: hal.Request, measure: hal.MeasureTiming) -> list[tuple[str, Any]]:
    """The four executors of an invalid request, each a judge to call."""
    def burst_judge() -> tuple[str, str]:
        if burst is None:
            return "no burst", "configureExecutionBurst failed"
        return judge_burst(burst, request, measure)

    return [("execute_1_3", lambda: judge_async(prepared, request, measure)),
            ("executeSynchronously_1_3", lambda: judge_sync(prepared, request, measure)),
            ("executeFenced", lambda: judge_fenced(prepared, request, [])),
            ("burst", burst_judge)]


def _judge_failure(prepared: hal.IPreparedModel, request: hal.Request) -> tuple[str, str]:
    status, shapes, timing = prepared.executeSynchronously_1_3(request, hal.MeasureTiming.NO, hal.OptionalTimePoint(),
                                                               hal.OptionalTimeoutDuration())
    if status == S.NONE or (shapes and status != S.OUTPUT_INSUFFICIENT_SIZE) or not no_timing(timing):
        return name(status), f"expectFailure execution gave {name(status)}, {len(shapes)} shapes, {timing}"
    return name(status), ""
