"""Request validation as Android's VTS checks it (VTS.md section 2,
``ValidateRequest.cpp`` and the fenced-execution check of
``VtsHalNeuralnetworks.cpp``).

For every base model that prepares, each request input and each request
output in turn is removed from a valid request, and the driver must answer
INVALID_ARGUMENT through:
  * ``execute_1_3``: at launch, and the callback with no output shapes and no
    timing;
  * ``executeSynchronously_1_3``: no output shapes, no timing;
  * ``executeFenced``: no sync fence and no callback;
  * the burst (``nnhal.burst.BurstController``, one per prepared model): no
    output shapes, no timing.
A valid request fenced on
an invalid sync fence handle must give INVALID_ARGUMENT too, and the models
that must fail (``expectFailure``) must fail to execute, with no shapes and
no timing.  ``pytest -m sweep`` runs the checks over every model.
"""

from __future__ import annotations

import collections
import os
from typing import Optional

import numpy as np
import pytest

from nnhal import hal
from nnhal import memory as hal_memory
from nnhal.burst import BurstController
from nnhal.conformance.vectors import VectorModel
from tests.vts_models import all_models, model_id, sample_models

# NOTE: the driver logs every rejection; tens of thousands of them only slow the run
pytestmark = pytest.mark.usefixtures("quiet_driver")

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
        self.in_mem = hal_memory.allocate(max(off, 4))
        view = hal_memory.map(self.in_mem)
        for start, raw in blobs:
            view[start: start + len(raw)] = raw
        view.release()
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


def prepare(device: hal.IDevice, vm: VectorModel) -> tuple[Optional[hal.IPreparedModel], hal.Model]:
    model = vm.build_model()
    cb = hal.PreparedModelCallback()
    device.prepareModel_1_3(model, hal.ExecutionPreference.FAST_SINGLE_ANSWER, hal.Priority.MEDIUM,
                            hal.OptionalTimePoint(), [], [], bytes(32), cb)
    status, prepared = cb.wait(WAIT_S)
    return (prepared if status == S.NONE else None), model


def _measure_for(message: str) -> hal.MeasureTiming:
    # NOTE: as VTS, half of the checks ask for timing, chosen by a stable hash of the message
    h = 0
    for c in message:
        h ^= ord(c)
    return hal.MeasureTiming.YES if h & 1 else hal.MeasureTiming.NO


def _no_timing(timing: hal.Timing) -> bool:
    return timing.timeOnDevice == NO_TIME and timing.timeInDriver == NO_TIME


def rejection_problems(prepared: hal.IPreparedModel, request: hal.Request, message: str,
                       burst: Optional[BurstController] = None) -> list[str]:
    """What each execution path got wrong about an invalid request (empty:
    all gave INVALID_ARGUMENT the way VTS wants)."""
    problems = []
    measure = _measure_for(message)
    cb = hal.ExecutionCallback()
    launch = prepared.execute_1_3(request, measure, hal.OptionalTimePoint(), hal.OptionalTimeoutDuration(), cb)
    status, shapes, timing = cb.wait(WAIT_S)
    if launch != S.INVALID_ARGUMENT:
        problems.append(f"execute_1_3 launch gave {S(launch).name}")
    if status != S.INVALID_ARGUMENT or shapes or not _no_timing(timing):
        problems.append(f"execute_1_3 callback gave {S(status).name}, {len(shapes)} shapes, {timing}")
    status, shapes, timing = prepared.executeSynchronously_1_3(request, measure, hal.OptionalTimePoint(),
                                                               hal.OptionalTimeoutDuration())
    if status != S.INVALID_ARGUMENT or shapes or not _no_timing(timing):
        problems.append(f"executeSynchronously_1_3 gave {S(status).name}, {len(shapes)} shapes, {timing}")
    problems += fenced_problems(prepared, request, [], "executeFenced")
    if burst is not None:
        status, shapes, timing = burst.execute(request, measure)
        if status != S.INVALID_ARGUMENT or shapes or not _no_timing(timing):
            problems.append(f"burst gave {S(status).name}, {len(shapes)} shapes, {timing}")
    return [f"{message}: {p}" for p in problems]


def fenced_problems(prepared: hal.IPreparedModel, request: hal.Request, wait_for: list, what: str) -> list[str]:
    status, fence, callback = prepared.executeFenced(request, wait_for, hal.MeasureTiming.NO, hal.OptionalTimePoint(),
                                                     hal.OptionalTimeoutDuration(), hal.OptionalTimeoutDuration())
    if status != S.INVALID_ARGUMENT or fence is not None or callback is not None:
        return [f"{what} gave {S(status).name}, fence {fence}, callback {callback}"]
    return []


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


def validate_request_mutations(device: hal.IDevice, vm: VectorModel) -> collections.Counter:
    """Runs the request checks for ``vm``; returns the number of invalid
    requests per kind (nothing for a model that does not prepare)."""
    counts: collections.Counter = collections.Counter()
    prepared, model = prepare(device, vm)
    pools = RequestPools(vm)
    problems: list[str] = []
    burst: Optional[BurstController] = None
    try:
        if prepared is None:
            assert vm.expectFailure, f"{vm.name} did not prepare"
            return counts
        valid = pools.request()
        if vm.expectFailure:
            # VTS validateRequestFailure: the execution fails, with no shapes and no timing
            status, shapes, timing = prepared.executeSynchronously_1_3(valid, hal.MeasureTiming.NO,
                                                                       hal.OptionalTimePoint(),
                                                                       hal.OptionalTimeoutDuration())
            counts["expected failure"] += 1
            if status == S.NONE or (shapes and status != S.OUTPUT_INSUFFICIENT_SIZE) or not _no_timing(timing):
                problems.append(f"expectFailure execution gave {S(status).name}, {len(shapes)} shapes, {timing}")
        else:
            burst = BurstController(prepared)
            for k in range(len(valid.inputs)):
                request = pools.request()
                del request.inputs[k]
                counts["remove input"] += 1
                problems += rejection_problems(prepared, request, f"removeInput: removed input {k}", burst)
            for k in range(len(valid.outputs)):
                request = pools.request()
                del request.outputs[k]
                counts["remove output"] += 1
                problems += rejection_problems(prepared, request, f"removeOutput: removed Output {k}", burst)
            for what, make in INVALID_FENCES.items():
                counts["invalid waitFor"] += 1
                problems += fenced_problems(prepared, pools.request(), [make()], f"executeFenced waitFor [{what}]")
    finally:
        if burst is not None:
            burst.close()
        pools.close()
        for p in model.pools:
            hal_memory.free(p)
    assert not problems, f"{vm.name}:\n" + "\n".join(problems[:40])
    return counts


SAMPLE = sample_models()


@pytest.mark.parametrize("vm", SAMPLE, ids=[model_id(vm) for vm in SAMPLE])
def test_invalid_requests_rejected(device: hal.IDevice, vm: VectorModel) -> None:
    validate_request_mutations(device, vm)


@pytest.mark.sweep
@pytest.mark.parametrize("vm", all_models(), ids=[model_id(vm) for vm in all_models()])
def test_invalid_requests_rejected_sweep(device: hal.IDevice, vm: VectorModel) -> None:
    validate_request_mutations(device, vm)


def test_valid_request_runs(device: hal.IDevice) -> None:
    """The unmutated request the checks start from is itself accepted."""
    ran = 0
    for vm in SAMPLE[:20]:
        if vm.expectFailure:
            continue
        prepared, model = prepare(device, vm)
        pools = RequestPools(vm)
        try:
            assert prepared is not None, vm.name
            status, _, _ = prepared.executeSynchronously_1_3(pools.request(), hal.MeasureTiming.NO,
                                                             hal.OptionalTimePoint(), hal.OptionalTimeoutDuration())
            assert status == S.NONE, (vm.name, status)
            ran += 1
        finally:
            pools.close()
            for p in model.pools:
                hal_memory.free(p)
    assert ran


def test_expect_failure_models_covered() -> None:
    assert any(vm.expectFailure for vm in SAMPLE)
