"""Priorities, deadlines and loop timeouts (VTS QualityOfServiceTests and the
infinite WHILE loop of GeneratedTestHarness)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from nnhal import hal
from nnhal.validation import ValidationError, validate_timeout
from tests.driver_util import (
    INT64_MAX,
    NO_TIMING,
    S,
    add_model,
    execute_async,
    execute_sync,
    ms_from_now,
    prepare,
    prepared_model,
    vector_model,
    vector_pools,
)

M = hal.MeasureTiming
MISSED = (S.MISSED_DEADLINE_TRANSIENT, S.MISSED_DEADLINE_PERSISTENT)


def _deadline(kind: str) -> hal.OptionalTimePoint:
    if kind == "now":
        return hal.OptionalTimePoint(nanosecondsSinceEpoch=time.monotonic_ns())
    if kind == "short":
        return ms_from_now(5)
    return hal.OptionalTimePoint(nanosecondsSinceEpoch=INT64_MAX)


DEADLINES = ["now", "short", "unlimited"]


@pytest.fixture(scope="module")
def vm():  # noqa: ANN201
    """A real conformance model (a small float CONV_2D)."""
    return vector_model("V1_2/conv2d_dilation", None)


@pytest.fixture(scope="module")
def conv_prepared(vm):  # noqa: ANN001, ANN201
    return prepared_model(vm.build_model())


@pytest.mark.parametrize("priority", list(hal.Priority))
def test_priorities(vm, priority) -> None:  # noqa: ANN001
    launch, status, prepared = prepare(vm.build_model(), priority=priority)
    assert (launch, status) == (S.NONE, S.NONE) and prepared is not None
    with vector_pools(vm) as p:
        assert execute_sync(prepared, p.request())[0] == S.NONE


@pytest.mark.parametrize("priority", [-1, 3, 5])
def test_bad_priority(priority: int) -> None:
    launch, status, prepared = prepare(add_model(), priority=priority)
    assert launch == status == S.INVALID_ARGUMENT and prepared is None


@pytest.mark.parametrize("kind", DEADLINES)
def test_prepare_deadline(vm, kind: str) -> None:  # noqa: ANN001
    launch, status, prepared = prepare(vm.build_model(), deadline=_deadline(kind))
    assert launch == S.NONE
    if kind == "unlimited":
        assert status == S.NONE
    assert status == S.NONE or status in MISSED
    assert (prepared is not None) == (status == S.NONE)


def test_prepare_deadline_already_passed_is_missed(vm) -> None:  # noqa: ANN001
    past = hal.OptionalTimePoint(nanosecondsSinceEpoch=max(0, time.monotonic_ns() - 10**9))
    launch, status, prepared = prepare(vm.build_model(), deadline=past)
    assert launch == S.NONE and status in MISSED and prepared is None


def _check_execution(vm, pools, status, shapes, timing, kind: str, measure) -> None:  # noqa: ANN001
    if kind == "unlimited":
        assert status == S.NONE
    assert status == S.NONE or status in MISSED
    if status == S.NONE:
        o = vm.output_operands()[0]
        assert len(shapes) == 1 and shapes[0].dimensions == list(o.dimensions)
        np.testing.assert_allclose(pools.output(0, o.data.dtype, o.dimensions), o.data, rtol=1e-5, atol=1e-5)
        if measure == M.YES:
            assert timing.timeOnDevice <= timing.timeInDriver
    else:
        assert shapes == [] and timing == NO_TIMING
        # no output was written
        o = vm.output_operands()[0]
        assert not pools.output(0, o.data.dtype, o.dimensions).any()


@pytest.mark.parametrize("measure", [M.NO, M.YES])
@pytest.mark.parametrize("kind", DEADLINES)
def test_execute_async_deadline(vm, conv_prepared, kind: str, measure) -> None:  # noqa: ANN001
    with vector_pools(vm) as p:
        launch, status, shapes, timing = execute_async(conv_prepared, p.request(), measure, _deadline(kind))
        assert launch == S.NONE
        _check_execution(vm, p, status, shapes, timing, kind, measure)


@pytest.mark.parametrize("measure", [M.NO, M.YES])
@pytest.mark.parametrize("kind", DEADLINES)
def test_execute_sync_deadline(vm, conv_prepared, kind: str, measure) -> None:  # noqa: ANN001
    with vector_pools(vm) as p:
        status, shapes, timing = execute_sync(conv_prepared, p.request(), measure, _deadline(kind))
        _check_execution(vm, p, status, shapes, timing, kind, measure)


def test_execute_deadline_passed_is_missed(vm, conv_prepared) -> None:  # noqa: ANN001
    past = hal.OptionalTimePoint(nanosecondsSinceEpoch=max(0, time.monotonic_ns() - 10**9))
    with vector_pools(vm) as p:
        status, shapes, timing = execute_sync(conv_prepared, p.request(), M.YES, past)
        assert status in MISSED and shapes == [] and timing == NO_TIMING
        launch, status, shapes, timing = execute_async(conv_prepared, p.request(), M.YES, past)
        assert launch == S.NONE and status in MISSED and shapes == [] and timing == NO_TIMING


@pytest.mark.parametrize("value", [-1, "soon", 1.5, True, 2**64])
def test_malformed_deadline_is_invalid(conv_prepared, vm, value) -> None:  # noqa: ANN001
    with vector_pools(vm) as p:
        status, shapes, _ = execute_sync(conv_prepared, p.request(), M.NO,
                                         hal.OptionalTimePoint(nanosecondsSinceEpoch=value))
        assert status == S.INVALID_ARGUMENT and shapes == []


def test_deadline_beyond_int64_does_not_overflow(vm, conv_prepared) -> None:  # noqa: ANN001
    """The HAL type is uint64: the largest value is simply 'far away'."""
    far = hal.OptionalTimePoint(nanosecondsSinceEpoch=2**64 - 1)
    with vector_pools(vm) as p:
        assert execute_sync(conv_prepared, p.request(), M.NO, far)[0] == S.NONE
    launch, status, prepared = prepare(vm.build_model(), deadline=far)
    assert (launch, status) == (S.NONE, S.NONE) and prepared is not None


# --------------------------------------------------------------------------
# loop timeouts


@pytest.fixture(scope="module")
def infinite():  # noqa: ANN201
    vm = vector_model("V1_3/while_infinite_loop", "while_infinite_loop")
    return vm, prepared_model(vm.build_model())


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_infinite_loop_short_timeout(infinite, mode: str) -> None:  # noqa: ANN001
    vm, prepared = infinite
    loop = hal.OptionalTimeoutDuration(nanoseconds=1_000_000)
    with vector_pools(vm) as p:
        t0 = time.monotonic()
        if mode == "sync":
            status, shapes, timing = execute_sync(prepared, p.request(), M.YES, loop_timeout=loop)
        else:
            launch, status, shapes, timing = execute_async(prepared, p.request(), M.YES, loop_timeout=loop)
            assert launch == S.NONE
        assert time.monotonic() - t0 < 1.0
        assert status in MISSED and shapes == [] and timing == NO_TIMING


def test_infinite_loop_deadline(infinite) -> None:  # noqa: ANN001
    """The execution deadline also ends a loop (default loop timeout, 2 s)."""
    vm, prepared = infinite
    with vector_pools(vm) as p:
        t0 = time.monotonic()
        status, shapes, _ = execute_sync(prepared, p.request(), M.NO, ms_from_now(20))
        assert time.monotonic() - t0 < 1.0
        assert status in MISSED and shapes == []


def test_infinite_loop_default_timeout(infinite) -> None:  # noqa: ANN001
    """No loop timeout given: the 2 s default ends the loop."""
    vm, prepared = infinite
    with vector_pools(vm) as p:
        t0 = time.monotonic()
        status, shapes, _ = execute_sync(prepared, p.request(), M.NO)
        elapsed = time.monotonic() - t0
        assert status in MISSED and shapes == []
        assert 1.9 <= elapsed < 5.0


def test_loop_timeout_clamped_and_validated() -> None:
    D = hal.OptionalTimeoutDuration
    assert validate_timeout(None) == hal.LoopTimeoutDurationNs.DEFAULT == 2_000_000_000
    assert validate_timeout(D()) == hal.LoopTimeoutDurationNs.DEFAULT
    assert validate_timeout(D(nanoseconds=1_000_000)) == 1_000_000
    assert validate_timeout(D(nanoseconds=hal.LoopTimeoutDurationNs.MAXIMUM)) == 15_000_000_000
    assert validate_timeout(D(nanoseconds=hal.LoopTimeoutDurationNs.MAXIMUM + 1)) == 15_000_000_000
    assert validate_timeout(D(nanoseconds=2**64 - 1)) == 15_000_000_000
    with pytest.raises(ValidationError):
        validate_timeout(D(nanoseconds=-1))


def test_loop_timeout_on_model_without_loop(vm, conv_prepared) -> None:  # noqa: ANN001
    """A loop timeout (any, even above the maximum) is harmless without a WHILE."""
    with vector_pools(vm) as p:
        for ns in (0, 1, 2**64 - 1):
            status, _, _ = execute_sync(conv_prepared, p.request(), M.NO,
                                        loop_timeout=hal.OptionalTimeoutDuration(nanoseconds=ns))
            assert status == S.NONE


def test_finite_loop_with_timeouts() -> None:
    """A conformance WHILE model that terminates gives the right result with a long timeout."""
    vm = vector_model("V1_3/while_sum_of_powers_quant8", None)
    prepared = prepared_model(vm.build_model())
    with vector_pools(vm) as p:
        status, shapes, _ = execute_sync(prepared, p.request(), M.NO,
                                         loop_timeout=hal.OptionalTimeoutDuration(nanoseconds=20 * 10**9))
        assert status == S.NONE
        o = vm.output_operands()[0]
        np.testing.assert_array_equal(p.output(0, o.data.dtype, shapes[0].dimensions), o.data)


def test_infinite_loop_through_1_2_methods(infinite) -> None:  # noqa: ANN001
    """A 1.2 caller cannot receive MISSED_DEADLINE_*: the default loop timeout
    ends the loop with GENERAL_FAILURE there, no shapes, no timing."""
    vm, prepared = infinite
    with vector_pools(vm) as p:
        req = p.request_v1_0()
        t0 = time.monotonic()
        status, shapes, timing = prepared.executeSynchronously(req, M.YES)
        assert time.monotonic() - t0 < 5.0
        assert status == S.GENERAL_FAILURE and shapes == [] and timing == NO_TIMING


@pytest.mark.parametrize("given,expected", [(None, 2_000_000_000), (1_000_000, 1_000_000),
                                            (15_000_000_000, 15_000_000_000), (16_000_000_000, 15_000_000_000),
                                            (2**64 - 1, 15_000_000_000)])
def test_driver_passes_clamped_loop_timeout(vm, given, expected: int) -> None:  # noqa: ANN001
    """The executor receives the default, the given, or the clamped maximum
    loop timeout, on every execution path."""
    prepared = prepared_model(vm.build_model())
    seen = []
    run = prepared.executor.run

    def spy(inputs, deadline_ns=None, loop_timeout_ns=None, *args):  # noqa: ANN001, ANN002, ANN202
        seen.append(loop_timeout_ns)
        return run(inputs, deadline_ns, loop_timeout_ns, *args)

    prepared.executor.run = spy
    loop = hal.OptionalTimeoutDuration(nanoseconds=given)
    with vector_pools(vm) as p:
        assert execute_sync(prepared, p.request(), loop_timeout=loop)[0] == S.NONE
        assert execute_async(prepared, p.request(), loop_timeout=loop)[1] == S.NONE
        status, _, _ = prepared.executeFenced(p.request(), [], M.NO, hal.OptionalTimePoint(), loop,
                                              hal.OptionalTimeoutDuration())
        assert status == S.NONE
    assert seen == [expected] * 3
