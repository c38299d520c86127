"""IPreparedModel.executeFenced and IFencedExecutionCallback (HAL 1.3)."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

from nnhal import fence, hal
from nnhal.fence import FenceState
from tests.driver_util import (
    INT64_MAX,
    NO_TIMING,
    Pools,
    S,
    add_model,
    ms_from_now,
    prepared_model,
    vector_model,
    vector_pools,
)

M = hal.MeasureTiming
MISSED = (S.MISSED_DEADLINE_TRANSIENT, S.MISSED_DEADLINE_PERSISTENT)
A = np.arange(4, dtype=np.float32).reshape(2, 2)
B = np.full((2, 2), 10.0, np.float32)
NO_LOOP = hal.OptionalTimeoutDuration()


@pytest.fixture(scope="module")
def prepared():  # noqa: ANN201
    return prepared_model(add_model())


@pytest.fixture
def fences():  # noqa: ANN201
    made: list[hal.Handle] = []

    def make(signaled: bool = False) -> hal.Handle:
        h = fence.signaled() if signaled else fence.create()
        made.append(h)
        return h

    yield made, make
    for h in made:
        fence.close(h)


def _fenced(prepared, request, wait_for=(), measure=M.NO, deadline=None, loop=None,  # noqa: ANN001, ANN202
            duration=None):
    return prepared.executeFenced(request, list(wait_for), measure, deadline or hal.OptionalTimePoint(),
                                  loop or NO_LOOP, duration or hal.OptionalTimeoutDuration())


def _settle(status, sync_fence, callback):  # noqa: ANN001, ANN202
    """The final status of a fenced execution: the launch status, or once the
    returned fence is signaled (an empty handle: done already), the
    callback's (an error-signaled fence goes with an error status)."""
    if status != S.NONE:
        assert callback is None and fence.is_null(sync_fence)
        return status
    assert callback is not None
    if sync_fence is not None and not fence.is_null(sync_fence):
        state = fence.sync_wait(sync_fence, 30)
        fence.close(sync_fence)
        assert state in (FenceState.SIGNALED, FenceState.ERROR)
        final = callback.getExecutionInfo()[0]
        assert (state == FenceState.SIGNALED) == (final == S.NONE), (state, final)
        return final
    return callback.getExecutionInfo()[0]


def _check_success(status, sync_fence, callback, measure) -> None:  # noqa: ANN001
    assert status == S.NONE
    assert callback is not None
    # an empty handle is allowed when done; otherwise the fence must be signaled once the execution ends
    if sync_fence is not None and not fence.is_null(sync_fence):
        assert fence.sync_wait(sync_fence, 30) == FenceState.SIGNALED
        fence.close(sync_fence)
    info_status, launched, fenced = callback.getExecutionInfo()
    assert info_status == S.NONE
    if measure == M.NO:
        assert launched == NO_TIMING and fenced == NO_TIMING
    else:
        for t in (launched, fenced):
            assert t.timeOnDevice != hal.UINT64_MAX and t.timeInDriver != hal.UINT64_MAX
            assert t.timeOnDevice <= t.timeInDriver
        assert fenced.timeInDriver <= launched.timeInDriver


@pytest.mark.parametrize("measure", [M.NO, M.YES])
def test_no_fences(prepared, measure) -> None:  # noqa: ANN001
    with Pools([A, B], [16]) as p:
        status, sync_fence, cb = _fenced(prepared, p.request(), measure=measure)
        _check_success(status, sync_fence, cb, measure)
        np.testing.assert_array_equal(p.output(0, np.float32, (2, 2)), A + B)


def test_signaled_fences(prepared, fences) -> None:  # noqa: ANN001
    _, make = fences
    with Pools([A, B], [16]) as p:
        status, sync_fence, cb = _fenced(prepared, p.request(), [make(True), make(True)], M.YES)
        _check_success(status, sync_fence, cb, M.YES)
        np.testing.assert_array_equal(p.output(0, np.float32, (2, 2)), A + B)


def test_fences_signaled_later_by_another_thread(prepared, fences) -> None:  # noqa: ANN001
    _, make = fences
    f1, f2 = make(), make()
    delay = 0.1

    def signal_later() -> None:
        time.sleep(delay / 2)
        fence.signal(f1)
        time.sleep(delay / 2)
        fence.signal(f2)

    with Pools([A, B], [16]) as p:
        t = threading.Thread(target=signal_later)
        t0 = time.monotonic()
        t.start()
        status, sync_fence, cb = _fenced(prepared, p.request(), [f1, f2], M.YES)
        ready = time.monotonic() - t0
        t.join()
        # the execution did not start before both fences were signaled
        if sync_fence is not None and not fence.is_null(sync_fence):
            fence.wait(sync_fence, 10)
        assert time.monotonic() - t0 >= delay * 0.9 or ready >= delay * 0.9
        _check_success(status, sync_fence, cb, M.YES)
        np.testing.assert_array_equal(p.output(0, np.float32, (2, 2)), A + B)
        _, launched, fenced = cb.getExecutionInfo()
        # launched counts from the call (includes the wait), fenced from the last signal
        assert launched.timeInDriver >= delay * 0.9 * 1e6
        assert fenced.timeInDriver < launched.timeInDriver


def test_error_signaled_fence(prepared, fences) -> None:  # noqa: ANN001
    """IPreparedModel.hal 1.3: INVALID_ARGUMENT "including fences in error states"."""
    _, make = fences
    bad = make()
    fence.signal(bad, error=True)
    with Pools([A, B], [16]) as p:
        status, sync_fence, cb = _fenced(prepared, p.request(), [make(True), bad])
        assert status == S.INVALID_ARGUMENT and cb is None and fence.is_null(sync_fence)
        assert not p.output(0, np.float32, (2, 2)).any()


def test_fence_error_signaled_later(prepared, fences) -> None:  # noqa: ANN001
    """A waitFor fence that turns to error after the launch: the returned fence
    is set to error at once and the execution never runs."""
    _, make = fences
    f = make()
    with Pools([A, B], [16]) as p:
        status, sync_fence, cb = _fenced(prepared, p.request(), [f])
        assert status == S.NONE and fence.state(sync_fence) == FenceState.ACTIVE
        fence.signal(f, error=True)
        assert fence.sync_wait(sync_fence, 30) == FenceState.ERROR
        assert cb.getExecutionInfo() == (S.GENERAL_FAILURE, NO_TIMING, NO_TIMING)
        assert not p.output(0, np.float32, (2, 2)).any()
        fence.close(sync_fence)


@pytest.mark.parametrize("bad", ["none", "no_fds", "two_fds", "closed", "negative"])
def test_invalid_wait_for_handle(prepared, fences, bad: str) -> None:  # noqa: ANN001
    made, make = fences
    good = make(True)
    pools = Pools([A, B], [16])
    # NOTE: everything that opens descriptors is made first, so a closed fd is not reused
    if bad == "none":
        h = None
    elif bad == "no_fds":
        h = hal.Handle()
    elif bad == "two_fds":
        h = hal.Handle(fds=[make().fds[0], make().fds[0]])
    elif bad == "closed":
        h = fence.create()
        fd = h.fds[0]
        os.close(fd)
        h = hal.Handle(fds=[_closed_fd()])  # NOTE: a high number nothing reuses meanwhile
    else:
        h = hal.Handle(fds=[-1])
    with pools as p:
        status, sync_fence, cb = _fenced(prepared, p.request(), [good, h])
        assert status == S.INVALID_ARGUMENT and cb is None and fence.is_null(sync_fence)


def _closed_fd() -> int:
    fd = 3000
    while True:
        try:
            os.fstat(fd)
        except OSError:
            return fd
        fd += 1


def test_invalid_request(prepared) -> None:  # noqa: ANN001
    with Pools([A, B], [16]) as p:
        req = p.request()
        req.inputs = req.inputs[:1]
        status, sync_fence, cb = _fenced(prepared, req)
        assert status == S.INVALID_ARGUMENT and cb is None and fence.is_null(sync_fence)
        status, _, cb = _fenced(prepared, p.request(), measure=9)
        assert status == S.INVALID_ARGUMENT and cb is None


def test_unspecified_outputs_invalid() -> None:
    dynamic = prepared_model(add_model(out_dims=(0, 0)))
    with Pools([A, B], [16]) as p:
        status, sync_fence, cb = _fenced(dynamic, p.request())
        assert status == S.INVALID_ARGUMENT and cb is None and fence.is_null(sync_fence)
    # the request may specify the dimensions the model leaves open
    with Pools([A, B], [16], out_dims=[(2, 2)]) as p:
        status, sync_fence, cb = _fenced(dynamic, p.request())
        _check_success(status, sync_fence, cb, M.NO)
        np.testing.assert_array_equal(p.output(0, np.float32, (2, 2)), A + B)
    # but not with a zero
    with Pools([A, B], [16], out_dims=[(2, 0)]) as p:
        assert _fenced(dynamic, p.request())[0] == S.INVALID_ARGUMENT
    # an unknown rank
    from tests.driver_util import Builder, T, make_model

    b = Builder()
    x, y = b.input(T.TENSOR_FLOAT32, (2, 2)), b.input(T.TENSOR_FLOAT32, (2, 2))
    out = b.output(T.TENSOR_FLOAT32, ())
    b.op(hal.OperationType.ADD, [x, y, b.i32(0)], [out])
    no_rank = prepared_model(make_model(b))
    with Pools([A, B], [16]) as p:
        assert _fenced(no_rank, p.request())[0] == S.INVALID_ARGUMENT


def test_zero_sized_output_invalid() -> None:
    """A model whose output is zero-sized (conformance: zero-sized outputs) cannot run fenced."""
    from tests.driver_util import Builder, T, make_model

    b = Builder()
    x, y = b.input(T.TENSOR_FLOAT32, (0, 2)), b.input(T.TENSOR_FLOAT32, (0, 2))
    out = b.output(T.TENSOR_FLOAT32, (0, 2))
    b.op(hal.OperationType.ADD, [x, y, b.i32(0)], [out])
    prepared = prepared_model(make_model(b))
    empty = np.zeros((0, 2), np.float32)
    with Pools([empty, empty], [1]) as p:
        req = p.request()
        req.inputs[0].dimensions = [0, 2]
        status, sync_fence, cb = _fenced(prepared, req)
        assert status == S.INVALID_ARGUMENT and cb is None


def test_insufficient_output_buffer(prepared) -> None:  # noqa: ANN001
    # NOTE: the outputs are fully specified: a location too short is refused at launch
    with Pools([A, B], [12]) as p:
        status, sync_fence, cb = _fenced(prepared, p.request())
        assert status == S.INVALID_ARGUMENT and cb is None and fence.is_null(sync_fence)


def test_conformance_model_fenced() -> None:
    vm = vector_model("V1_2/conv2d_dilation", None)
    pm = prepared_model(vm.build_model())
    with vector_pools(vm) as p:
        status, sync_fence, cb = _fenced(pm, p.request(), measure=M.YES)
        _check_success(status, sync_fence, cb, M.YES)
        o = vm.output_operands()[0]
        np.testing.assert_allclose(p.output(0, o.data.dtype, o.dimensions), o.data, rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------
# deadlines, duration, loop timeout


def test_deadline_passed(prepared) -> None:  # noqa: ANN001
    past = hal.OptionalTimePoint(nanosecondsSinceEpoch=max(0, time.monotonic_ns() - 10**9))
    with Pools([A, B], [16]) as p:
        status, sync_fence, cb = _fenced(prepared, p.request(), deadline=past)
        assert status in MISSED and cb is None and fence.is_null(sync_fence)


@pytest.mark.parametrize("far", [INT64_MAX, 2**64 - 1])
def test_deadline_unlimited(prepared, fences, far: int) -> None:  # noqa: ANN001
    """A far deadline and duration (unlimited) must not overflow, also while waiting for fences."""
    _, make = fences
    f = make()
    threading.Timer(0.02, lambda: fence.signal(f)).start()
    with Pools([A, B], [16]) as p:
        status, sync_fence, cb = _fenced(prepared, p.request(), [make(True), f], measure=M.YES,
                                         deadline=hal.OptionalTimePoint(nanosecondsSinceEpoch=far),
                                         duration=hal.OptionalTimeoutDuration(nanoseconds=far))
        _check_success(status, sync_fence, cb, M.YES)
        np.testing.assert_array_equal(p.output(0, np.float32, (2, 2)), A + B)


def test_deadline_while_waiting_for_a_fence(prepared, fences) -> None:  # noqa: ANN001
    """A fence that is never signaled: the deadline ends the wait."""
    _, make = fences
    with Pools([A, B], [16]) as p:
        t0 = time.monotonic()
        status, sync_fence, cb = _fenced(prepared, p.request(), [make()], deadline=ms_from_now(50))
        assert time.monotonic() - t0 < 0.05 or status == S.NONE  # NOTE: the launch never waits
        assert _settle(status, sync_fence, cb) in MISSED
        assert time.monotonic() - t0 < 5.0
        assert not p.output(0, np.float32, (2, 2)).any()


def test_duration_counts_after_the_fences(prepared, fences) -> None:  # noqa: ANN001
    """The duration runs from the signal of the last fence, not from the call."""
    _, make = fences
    f = make()
    threading.Timer(0.1, lambda: fence.signal(f)).start()
    with Pools([A, B], [16]) as p:
        status, sync_fence, cb = _fenced(prepared, p.request(), [f],
                                         duration=hal.OptionalTimeoutDuration(nanoseconds=5 * 10**9))
        _check_success(status, sync_fence, cb, M.NO)


def test_duration_timeout_infinite_loop() -> None:
    vm = vector_model("V1_3/while_infinite_loop", "while_infinite_loop")
    pm = prepared_model(vm.build_model())
    with vector_pools(vm) as p:
        t0 = time.monotonic()
        status, sync_fence, cb = _fenced(pm, p.request(), measure=M.YES,
                                         duration=hal.OptionalTimeoutDuration(nanoseconds=10_000_000))
        assert _settle(status, sync_fence, cb) in MISSED
        assert time.monotonic() - t0 < 1.0
        if cb is not None:
            assert cb.getExecutionInfo()[1:] == (NO_TIMING, NO_TIMING)
        t0 = time.monotonic()
        status, sync_fence, cb = _fenced(pm, p.request(), loop=hal.OptionalTimeoutDuration(nanoseconds=1_000_000))
        assert _settle(status, sync_fence, cb) in MISSED
        assert time.monotonic() - t0 < 1.0


def test_duration_zero(prepared) -> None:  # noqa: ANN001
    with Pools([A, B], [16]) as p:
        status, sync_fence, cb = _fenced(prepared, p.request(), duration=hal.OptionalTimeoutDuration(nanoseconds=0))
        assert _settle(status, sync_fence, cb) in MISSED


def test_bad_duration_and_loop_timeout(prepared) -> None:  # noqa: ANN001
    with Pools([A, B], [16]) as p:
        assert _fenced(prepared, p.request(), duration=hal.OptionalTimeoutDuration(nanoseconds=-5))[0] == \
            S.INVALID_ARGUMENT
        assert _fenced(prepared, p.request(), loop=hal.OptionalTimeoutDuration(nanoseconds=-5))[0] == \
            S.INVALID_ARGUMENT


def test_concurrent_fenced(prepared) -> None:  # noqa: ANN001
    errors = []

    def work(k: int) -> None:
        a = np.full((2, 2), float(k), np.float32)
        for _ in range(5):
            with Pools([a, B], [16]) as p:
                status = _settle(*_fenced(prepared, p.request()))  # NOTE: outputs are there once the fence is
                if status != S.NONE or not np.array_equal(p.output(0, np.float32, (2, 2)), a + B):
                    errors.append((k, status))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors


# --------------------------------------------------------------------------
# launched at once: the caller never waits for the waitFor fences


def test_returns_at_once_while_a_fence_is_pending(prepared, fences) -> None:  # noqa: ANN001
    _, make = fences
    f = make()
    with Pools([A, B], [16]) as p:
        t0 = time.monotonic()
        status, sync_fence, cb = _fenced(prepared, p.request(), [f], M.YES)
        assert time.monotonic() - t0 < 0.5 and status == S.NONE
        assert fence.state(sync_fence) == FenceState.ACTIVE
        # IFencedExecutionCallback.hal: before the execution finished, GENERAL_FAILURE
        assert cb.getExecutionInfo() == (S.GENERAL_FAILURE, NO_TIMING, NO_TIMING)
        time.sleep(0.1)
        assert fence.state(sync_fence) == FenceState.ACTIVE  # without a deadline, it waits
        assert not p.output(0, np.float32, (2, 2)).any()  # and has not started
        fence.signal(f)
        _check_success(status, sync_fence, cb, M.YES)
        np.testing.assert_array_equal(p.output(0, np.float32, (2, 2)), A + B)
        _, launched, fenced = cb.getExecutionInfo()
        assert launched.timeInDriver >= 100_000 > fenced.timeInDriver - launched.timeOnDevice


def test_client_closes_its_handles_after_the_call(prepared, fences) -> None:  # noqa: ANN001
    """Handles are passed by value: the driver keeps its own fds of the waitFor
    fences and of the fence it returned."""
    _, make = fences
    f = make()
    with Pools([A, B], [16]) as p:
        status, sync_fence, cb = _fenced(prepared, p.request(), [fence.dup(f)])
        # (the duplicate passed in is never closed by the test: the driver must not rely on it either)
        waiter = fence.dup(sync_fence)
        fence.close(sync_fence)
        fence.signal(f)
        assert status == S.NONE and fence.sync_wait(waiter, 30) == FenceState.SIGNALED
        fence.close(waiter)
        assert cb.getExecutionInfo()[0] == S.NONE
        np.testing.assert_array_equal(p.output(0, np.float32, (2, 2)), A + B)


def test_pending_fenced_executions_cost_no_thread_each(prepared, fences) -> None:  # noqa: ANN001
    """50 executions waiting for fences that are not signaled yet: at most one
    extra thread (the fence watcher), which ends shortly after nothing is pending
    (it waits half a second for the next watch)."""
    _, make = fences
    gates = [make() for _ in range(50)]
    time.sleep(0.05)
    threads_before = threading.active_count()
    with Pools([A, B], [16]) as p:
        launched = [_fenced(prepared, p.request(), [g]) for g in gates]
        assert all(status == S.NONE for status, _, _ in launched)
        assert threading.active_count() <= threads_before + 1
        assert fence.watching() >= 50
        for g in gates:
            fence.signal(g)
        assert all(_settle(*r) == S.NONE for r in launched)
        np.testing.assert_array_equal(p.output(0, np.float32, (2, 2)), A + B)
    deadline = time.monotonic() + 5
    while fence.watching() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert fence.watching() == 0
    deadline = time.monotonic() + 5
    while [t for t in threading.enumerate() if t.name == "nnhal-fence-watcher"] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not [t for t in threading.enumerate() if t.name == "nnhal-fence-watcher"]


def test_too_many_pending_is_resource_exhausted(prepared, fences, monkeypatch) -> None:  # noqa: ANN001
    _, make = fences
    monkeypatch.setattr(fence, "MAX_WATCHES", fence.watching() + 2)
    gates = [make() for _ in range(3)]
    with Pools([A, B], [16]) as p:
        results = [_fenced(prepared, p.request(), [g]) for g in gates]
        assert [r[0] for r in results] == [S.NONE, S.NONE, S.RESOURCE_EXHAUSTED_TRANSIENT]
        assert results[2][2] is None and fence.is_null(results[2][1])
        for g in gates:
            fence.signal(g)
        assert [_settle(*r) for r in results[:2]] == [S.NONE, S.NONE]


def test_deadline_ends_a_wait_for_a_fence_never_signaled(prepared, fences) -> None:  # noqa: ANN001
    """The returned fence is set to error when the deadline passes, the
    execution never runs, and no waiting is left behind."""
    _, make = fences
    with Pools([A, B], [16]) as p:
        status, sync_fence, cb = _fenced(prepared, p.request(), [make()], deadline=ms_from_now(100))
        assert status == S.NONE
        t0 = time.monotonic()
        assert fence.sync_wait(sync_fence, 10) == FenceState.ERROR
        assert time.monotonic() - t0 < 5
        assert cb.getExecutionInfo()[0] in MISSED
        fence.close(sync_fence)
