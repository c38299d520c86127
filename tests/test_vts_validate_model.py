"""Model validation as Android's VTS checks it (VTS.md section 1,
``ValidateModel.cpp`` and the cycle test of ``BasicTests.cpp``), on the
in-process sample-all.

The mutations and the judgement are the VTS suite's (``nnhal vts --section
model``, :mod:`nnhal.conformance.vts.model`): this file runs them over the
pytest sample of base models (tests/vts_models.py) and checks that every
case passes; ``pytest -m sweep`` runs them over every model.  The same
mutations (less the priority ones, plus the operand and operation types 1.3
added) go through the inherited ``getSupportedOperations_1_2`` /
``prepareModel_1_2`` as 1.2 models, as the 1.2 VTS binary does.
"""

from __future__ import annotations

import collections

import pytest

from nnhal import hal
from nnhal import memory as hal_memory
from nnhal.conformance.vectors import VectorModel
from nnhal.conformance.vts import basic
from nnhal.conformance.vts.model import (
    MUTATORS,
    VTS_TESTS,
    Mutation,
    as_v1_2,
    mutations,
    mutations_v1_2,
    plan,
    rejection_problem,
    rejection_problem_v1_2,
    run_model,
)
from tests.vts_models import all_models, model_id, sample_models

# NOTE: the driver logs every rejection; tens of thousands of them only slow the run
pytestmark = pytest.mark.usefixtures("quiet_driver")

S = hal.ErrorStatus


def validate_model_mutations(device: hal.IDevice, vm: VectorModel) -> collections.Counter:
    """Runs the suite's model section on ``vm``; fails listing the cases that
    did not pass; returns the number of mutations per VTS test."""
    cases = run_model(device, vm)
    bad = [f"{c.test}: {c.mutation}: expected {c.expected}, got {c.actual}: {c.message}" for c in cases
           if c.status != "pass"]
    assert not bad, f"{len(bad)} mutations of {vm.name} not rejected:\n" + "\n".join(bad[:40])
    return collections.Counter(c.test for c in cases)


SAMPLE = sample_models()


@pytest.mark.parametrize("vm", SAMPLE, ids=[model_id(vm) for vm in SAMPLE])
def test_mutated_models_rejected(device: hal.IDevice, vm: VectorModel) -> None:
    validate_model_mutations(device, vm)


@pytest.mark.sweep
@pytest.mark.parametrize("vm", all_models(), ids=[model_id(vm) for vm in all_models()])
def test_mutated_models_rejected_sweep(device: hal.IDevice, vm: VectorModel) -> None:
    validate_model_mutations(device, vm)


def test_sample_is_varied() -> None:
    ops = set().union(*(vm.operation_types for vm in SAMPLE))
    every = set().union(*(vm.operation_types for vm in all_models()))
    assert ops == every, f"operations without a base model: {sorted(every - ops)}"
    assert any(vm.referenced for vm in SAMPLE)


def test_every_mutation_kind_exercised(device: hal.IDevice) -> None:
    kinds = collections.Counter()
    for vm in SAMPLE:
        model = vm.build_model()
        try:
            kinds.update(p.kind for p in plan(model))
        finally:
            for p in model.pools:
                hal_memory.free(p)
    assert set(kinds) == {k for k, _ in MUTATORS} == set(VTS_TESTS), kinds


def test_plan_names_what_it_makes(device: hal.IDevice) -> None:
    """A planned mutation made later is the one ``mutations`` makes (sampling picks from the plan)."""
    vm = SAMPLE[0]
    model = vm.build_model()
    try:
        made = [(m.kind, m.what, m.model, m.preference, m.priority) for m in mutations(model)]
        planned = [(p.kind, p.what) for p in plan(model)]
        assert [m[:2] for m in made] == planned
        later = [p.make(model) for p in plan(model)]
        assert [(m.kind, m.what, m.model, m.preference, m.priority) for m in later] == made
    finally:
        for p in model.pools:
            hal_memory.free(p)


def test_sampled_mutations_are_spread_and_stable(device: hal.IDevice) -> None:
    vm = max(SAMPLE[:20], key=lambda v: len(v.main.operands))
    full = run_model(device, vm)
    sampled = run_model(device, vm, sample=7)
    assert len(sampled) == 7 and sampled[0].mutation == full[0].mutation and sampled[-1].mutation == full[-1].mutation
    assert [c.mutation for c in sampled] == [c.mutation for c in run_model(device, vm, sample=7)]
    assert {c.mutation for c in sampled} <= {c.mutation for c in full}
    assert run_model(device, vm, sample=0) == []


def test_an_accepting_driver_fails_the_section(device: hal.IDevice) -> None:
    """A driver that takes a mutated model is caught: the cases fail naming what it answered."""

    class Lenient:
        def __getattr__(self, name: str) -> object:
            return getattr(device, name)

        def getSupportedOperations_1_3(self, model: hal.Model) -> tuple:
            status, supported = device.getSupportedOperations_1_3(model)
            return (S.NONE, [True] * len(model.main.operations)) if status == S.INVALID_ARGUMENT else \
                (status, supported)

    cases = run_model(Lenient(), SAMPLE[0], sample=5)
    judged_by_support = [c for c in cases if not c.test.endswith(("PriorityTest", "PreferenceTest"))]
    assert judged_by_support and all(c.status == "fail" for c in judged_by_support)
    assert any(c.actual == "NONE" and "getSupportedOperations_1_3 returned NONE" in c.message for c in cases)


# --------------------------------------------------------------------------
# the inherited 1.2 entry points (the 1.2 VTS binary against this driver)


def _v1_2_compliant(vm: VectorModel) -> bool:
    from nnhal.hal.convert import compliant_with_v1_2

    model = vm.build_model(memory_factory=lambda data: hal.Memory("ashmem", hal.Handle(fds=[0]), len(data)))
    return not model.referenced and compliant_with_v1_2(model)


SAMPLE_V1_2 = tuple(vm for vm in SAMPLE[::3] if _v1_2_compliant(vm))


def validate_model_mutations_v1_2(device: hal.IDevice, vm: VectorModel) -> collections.Counter:
    model = vm.build_model()
    counts: collections.Counter = collections.Counter()
    accepted: list[str] = []
    try:
        for m in mutations_v1_2(model):
            counts[m.kind] += 1
            problem = rejection_problem_v1_2(device, m)
            if problem:
                accepted.append(f"{m.kind}: {m.what}: {problem}")
    finally:
        for p in model.pools:
            hal_memory.free(p)
    assert not accepted, f"{len(accepted)} 1.2 mutations of {vm.name} not rejected:\n" + "\n".join(accepted[:40])
    return counts


@pytest.mark.parametrize("vm", SAMPLE_V1_2, ids=[model_id(vm) for vm in SAMPLE_V1_2])
def test_mutated_models_rejected_through_v1_2(device: hal.IDevice, vm: VectorModel) -> None:
    # sanity: unmutated, the 1.2 entry point takes the model
    model = vm.build_model()
    try:
        status, supported = device.getSupportedOperations_1_2(as_v1_2(model))
        assert status == S.NONE and all(supported), vm.name
    finally:
        for p in model.pools:
            hal_memory.free(p)
    validate_model_mutations_v1_2(device, vm)


@pytest.mark.sweep
@pytest.mark.parametrize("vm", all_models(), ids=[model_id(vm) for vm in all_models()])
def test_mutated_models_rejected_through_v1_2_sweep(device: hal.IDevice, vm: VectorModel) -> None:
    if not _v1_2_compliant(vm):
        pytest.skip("not expressible in HAL 1.2")
    validate_model_mutations_v1_2(device, vm)


# --------------------------------------------------------------------------
# cycles (BasicTests.cpp)


def _expect_rejected(device: hal.IDevice, model: hal.Model) -> None:
    problem = rejection_problem(device, Mutation("cycle", "", model))
    assert problem is None, problem


def test_model_with_a_cycle_rejected(device: hal.IDevice) -> None:
    for order in ((0, 1, 2), (1, 0, 2), (2, 1, 0), (0, 2, 1)):  # the same graph in any operation order
        _expect_rejected(device, basic.cycle_model(order))


def test_model_with_a_subgraph_reference_cycle_rejected(device: hal.IDevice) -> None:
    # sanity: without a cycle (referenced 0 calls IF on 1 / 1) the model prepares
    status, supported = device.getSupportedOperations_1_3(basic.if_model(1, 1))
    assert status == S.NONE and all(supported)
    # referenced 0 calls itself (from either branch)
    _expect_rejected(device, basic.if_model(0, 1))
    _expect_rejected(device, basic.if_model(1, 0))
