"""Request validation as Android's VTS checks it (VTS.md section 2,
``ValidateRequest.cpp`` and the fenced-execution check of
``VtsHalNeuralnetworks.cpp``), on the in-process sample-all.

The invalid requests and the judgement are the VTS suite's (``nnhal vts
--section request``, :mod:`nnhal.conformance.vts.request`): for every base
model that prepares, each request input and each request output in turn is
removed, and execute_1_3 (launch and callback), executeSynchronously_1_3,
executeFenced and the burst must answer INVALID_ARGUMENT with no shapes and
no timing; fenced executions on invalid sync fences too; expectFailure
models must fail to execute.  This file runs them over the pytest sample of
base models and checks every case passes; ``pytest -m sweep`` runs them
over every model.
"""

from __future__ import annotations

import collections

import pytest

from nnhal import hal
from nnhal import memory as hal_memory
from nnhal.conformance.vectors import VectorModel
from nnhal.conformance.vts.request import RequestPools, prepare, run_model
from tests.vts_models import all_models, model_id, sample_models

# NOTE: the driver logs every rejection; tens of thousands of them only slow the run
pytestmark = pytest.mark.usefixtures("quiet_driver")

S = hal.ErrorStatus


def validate_request_mutations(device: hal.IDevice, vm: VectorModel) -> collections.Counter:
    """Runs the suite's request section on ``vm``; fails listing the cases
    that did not pass; returns the number of cases per VTS test (nothing for
    a model that does not prepare)."""
    cases = run_model(device, vm)
    bad = [f"{c.test}: {c.mutation}: expected {c.expected}, got {c.actual}: {c.message}" for c in cases
           if c.status != "pass"]
    assert not bad, f"{vm.name}:\n" + "\n".join(bad[:40])
    return collections.Counter(c.test for c in cases)


SAMPLE = sample_models()


@pytest.mark.parametrize("vm", SAMPLE, ids=[model_id(vm) for vm in SAMPLE])
def test_invalid_requests_rejected(device: hal.IDevice, vm: VectorModel) -> None:
    counts = validate_request_mutations(device, vm)
    if vm.expectFailure:
        assert set(counts) <= {"ValidationTest.validateRequestFailure", "ValidationTest.createPreparedModel"}
    else:
        n_in, n_out = len(vm.input_values()), len(vm.output_operands())
        assert counts["ValidationTest.removeInputTest"] == 4 * n_in  # four executors each
        assert counts["ValidationTest.removeOutputTest"] == 4 * n_out
        assert counts["ValidationTest.executeFenced.invalidWaitFor"] == 5


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


def test_a_driver_taking_invalid_requests_fails_the_section(device: hal.IDevice) -> None:
    """A prepared model that runs a request missing an output is caught, path by path."""
    vm = next(v for v in SAMPLE if not v.expectFailure and len(v.output_operands()) == 1)

    class Lenient:
        def __init__(self, inner: object):
            self.inner = inner

        def __getattr__(self, name: str) -> object:
            return getattr(self.inner, name)

        def executeSynchronously_1_3(self, request: hal.Request, *args: object) -> tuple:
            status, shapes, timing = self.inner.executeSynchronously_1_3(request, *args)
            return (S.NONE, [], timing) if not request.outputs else (status, shapes, timing)

    class Device:
        def __getattr__(self, name: str) -> object:
            return getattr(device, name)

        def prepareModel_1_3(self, model: hal.Model, *args: object) -> object:
            cb = args[-1]

            class Wrap(hal.PreparedModelCallback):
                def notify_1_3(self, status: object, prepared: object) -> None:
                    cb.notify_1_3(status, Lenient(prepared) if prepared is not None else None)

            return device.prepareModel_1_3(model, *args[:-1], Wrap())

    cases = run_model(Device(), vm)
    failed = [c for c in cases if c.status == "fail"]
    assert [c.mutation for c in failed] == ["removed Output 0 [executeSynchronously_1_3]"]
    assert failed[0].actual == "NONE" and failed[0].expected == "INVALID_ARGUMENT"


def test_expect_failure_models_covered() -> None:
    assert any(vm.expectFailure for vm in SAMPLE)
