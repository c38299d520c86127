"""Section "request": request validation as the ``ValidateRequest.cpp`` of
VTS 1.3 (and the fenced-execution checks of its ``VtsHalNeuralnetworks.cpp``)
and of the AIDL VTS do it, through the face judged and its public HAL only.

For every base model that prepares, each request input and each request
output in turn is removed from a valid request, and the driver must answer
INVALID_ARGUMENT, with no output shapes and no timing, through every
executor of the face: HAL 1.3 ``execute_1_3`` (at launch, and the
callback), ``executeSynchronously_1_3``, ``executeFenced`` (no sync fence,
no callback) and the burst (``nnhal.burst.BurstController``, one per
prepared model); AIDL ``executeSynchronously``, ``executeFenced``, the
``IBurst`` and, from version 4, ``createReusableExecution`` (refusing the
request, or its ``IExecution`` refusing to run it, synchronously and
fenced) and the ``*WithConfig`` calls (an error raised as a
``ServiceSpecificError``).  On HAL 1.3 a valid request fenced on an invalid
sync fence must give INVALID_ARGUMENT too (AIDL cannot send one: a
``ParcelFileDescriptor`` is a descriptor).  The models that must fail
(``expectFailure``) must fail to execute, with no shapes and no timing.  A
model the driver does not support (``getSupportedOperations``) is one
unsupported case.
"""

from __future__ import annotations

import os
from typing import Any, Optional

import numpy as np

from nnhal import hal
from nnhal.conformance.face import FENCED_MODES, Face, Outcome, as_face
from nnhal.conformance.vectors import VectorModel
from nnhal.conformance.vts.case import Case, Recorder, name, sample_indexes
from nnhal.platform import memory as hal_memory

SECTION = "request"
S = hal.ErrorStatus
T = hal.OperandType
NO_TIME = hal.UINT64_MAX

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


def gate(rec: Recorder, test: str, expected: str, device: Any, model: hal.Model, vm: VectorModel) -> bool:
    """Whether a section goes on with ``vm`` on ``device`` (a face, or a HAL
    1.3 ``IDevice``; as VTS: only the models it prepares).  A model that must
    fail and is refused is a passed case; one whose operations the device
    does not support, an unsupported case; a valid model that
    getSupportedOperations calls invalid, a failure."""
    face = as_face(device)
    status, supported, _ = face.supported(model)
    refused = [hal.operation_name(op.type) for op, ok in zip(model.main.operations, supported) if not ok] \
        if status == S.NONE else []
    if status == S.NONE and not refused:
        return True
    if vm.expectFailure:
        rec.add("ValidationTest.createPreparedModel", "", "an error (expectFailure)", name(status), True)
    elif status != S.NONE:
        what = f"getSupportedOperations{face.method_suffix}"
        rec.add(test, what, "NONE", name(status), False, f"{what} gave {name(status)} for a valid model")
    else:
        rec.unsupported(test, "", expected, f"unsupported: {','.join(refused)}")
    return False


def prepare(device: Any, vm: VectorModel) -> tuple[Any, hal.Model]:
    """(the prepared model or None, the model: its pools are the caller's to free)."""
    model = vm.build_model()
    _, status, prepared = as_face(device).prepare(model)
    return (prepared if status == S.NONE else None), model


def measure_for(message: str) -> hal.MeasureTiming:
    # NOTE: as VTS, half of the checks ask for timing, chosen by a stable hash of the message
    h = 0
    for c in message:
        h ^= ord(c)
    return hal.MeasureTiming.YES if h & 1 else hal.MeasureTiming.NO


def no_timing(timing: hal.Timing) -> bool:
    return timing.timeOnDevice == NO_TIME and timing.timeInDriver == NO_TIME


def _refused(what: str, outcome: Outcome) -> tuple[str, str]:
    """VTS's judgement of an invalid request's execution: INVALID_ARGUMENT
    (at launch too, where the executor has a launch status), no output
    shapes, no timing."""
    status, shapes, timing, launch = outcome
    if launch is not None and launch != S.INVALID_ARGUMENT:
        return name(launch), f"{what} launch gave {name(launch)}"
    if status != S.INVALID_ARGUMENT or shapes or not no_timing(timing):
        return name(status), f"{what} gave {name(status)}, {len(shapes)} shapes, {timing}"
    return name(status), ""


def judge_fenced(prepared: hal.IPreparedModel, request: hal.Request, wait_for: list) -> tuple[str, str]:
    """A HAL 1.3 executeFenced waiting for ``wait_for``: INVALID_ARGUMENT with no fence and no callback."""
    status, fence, callback = prepared.executeFenced(request, wait_for, hal.MeasureTiming.NO, hal.OptionalTimePoint(),
                                                     hal.OptionalTimeoutDuration(), hal.OptionalTimeoutDuration())
    if status != S.INVALID_ARGUMENT or fence is not None or callback is not None:
        return name(status), f"executeFenced gave {name(status)}, fence {fence}, callback {callback}"
    return name(status), ""


# the executors of an invalid request, per face, named as VTS's traces name them
PATHS = {
    "hidl": (("execute_1_3", "async"), ("executeSynchronously_1_3", "sync"), ("executeFenced", "fenced"),
             ("burst", "burst")),
    "aidl": (("executeSynchronously", "sync"), ("executeFenced", "fenced"), ("burst", "burst")),
}
AIDL_V4_PATHS = (("createReusableExecution, executeSynchronously", "reusable"),
                 ("createReusableExecution, executeFenced", "reusable-fenced"),
                 ("executeSynchronouslyWithConfig", "sync-config"), ("executeFencedWithConfig", "fenced-config"),
                 ("burst executeSynchronouslyWithConfig", "burst-config"))


def paths(face: Face) -> tuple[tuple[str, str], ...]:
    """(VTS's name, the face's executor) of every way an invalid request is sent."""
    return PATHS[face.name] + (AIDL_V4_PATHS if face.has_config else ())


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


def run_model(device: Any, vm: VectorModel, sample: Optional[int] = None) -> list[Case]:
    """The request cases of one model (nothing but an unsupported case when
    the device does not take it)."""
    face = as_face(device)
    rec = Recorder(SECTION, model_id(vm))
    model = vm.build_model()
    pools: Optional[RequestPools] = None
    try:
        if not gate(rec, "ValidationTest.validateRequest", "INVALID_ARGUMENT", face, model, vm):
            return rec.cases
        _, status, prepared = face.prepare(model)
        if status != S.NONE or prepared is None:
            ok = vm.expectFailure
            rec.add("ValidationTest.createPreparedModel", "", "NONE", name(status), ok,
                    f"a supported model did not prepare: {name(status)}")
            return rec.cases
        pools = RequestPools(vm)
        valid = pools.request()
        if vm.expectFailure:
            rec.check("ValidationTest.validateRequestFailure", "", "an error, no shapes, no timing",
                      lambda: _judge_failure(face, prepared, face.request(valid)))
            return rec.cases
        planned = planned_mutations(len(valid.inputs), len(valid.outputs))
        if face.name != "hidl":
            planned = [m for m in planned if m[2][0] != "fence"]  # NOTE: AIDL cannot send an invalid fence
        for k in sample_indexes(len(planned), sample):
            test, what, (field, index) = planned[k]
            if field == "fence":
                rec.check(f"ValidationTest.{test}", what, "INVALID_ARGUMENT",
                          lambda k=index: judge_fenced(prepared, pools.request(), [INVALID_FENCES[k]()]))
                continue
            request = pools.request()
            del getattr(request, field)[index]
            native = face.request(request)
            measure = measure_for(f"{test[:-4]}: {what}") == hal.MeasureTiming.YES
            for path, mode in paths(face):
                # NOTE: as VTS, a fenced execution never asks for timing
                rec.check(f"ValidationTest.{test}", f"{what} [{path}]", "INVALID_ARGUMENT",
                          lambda path=path, mode=mode, native=native, m=measure and mode not in FENCED_MODES:
                          _refused(path, face.execute(prepared, native, mode, m)))
    finally:
        face.close_bursts()
        if pools is not None:
            pools.close()
        for p in model.pools:
            hal_memory.free(p)
    return rec.cases


def _judge_failure(face: Face, prepared: Any, request: Any) -> tuple[str, str]:
    status, shapes, timing, _ = face.execute(prepared, request, "sync", False)
    if status == S.NONE or (shapes and status != S.OUTPUT_INSUFFICIENT_SIZE) or not no_timing(timing):
        return name(status), f"expectFailure execution gave {name(status)}, {len(shapes)} shapes, {timing}"
    return name(status), ""
