"""The AIDL ``IPreparedModel``, ``IBurst``, ``IExecution`` and
``IFencedExecutionCallback`` faces: executions synchronous, fenced, in a
burst (its memory identifier token cache) and reusable (many runs, sync and
fenced), with their configs (version 4), on sample-all and on the README's
example backend in process, and on sample-all through a service
(``nnhal.aidl.connect``: the same answers across the process boundary); the
statuses the AIDL VTS names (ValidateRequest, ValidateBurst,
QualityOfServiceTests)."""

from __future__ import annotations

import os
import threading
from typing import Any

import numpy as np
import pytest

from nnhal import aidl, fence, hal
from nnhal import memory as hal_memory
from nnhal.driver import burst as driver_burst
from nnhal.driver.aidl import AidlBurst, AidlPreparedModel
from tests.aidl_util import NUMPY_DRIVER, add_aidl, add_pools, fd_count, prepare, raised, settles_at

S = aidl.ErrorStatus
EXPECTED = [[10, 11], [12, 13]]  # add_pools: arange(4) + 10


@pytest.fixture(scope="module", params=["sample-all", NUMPY_DRIVER, "service"],
                ids=["sample-all", "numpy-driver", "service"])
def pm(request: Any) -> aidl.IPreparedModel:
    if request.param == "service":
        return prepare(request.getfixturevalue("service_process").connect_aidl(), add_aidl())
    return prepare(aidl.get_device(request.param), add_aidl())


def in_process(pm: Any) -> Any:
    """Skips a test that looks inside the in-process objects (not there through a service)."""
    if not isinstance(pm, AidlPreparedModel):
        pytest.skip("looks inside the in-process face")


def _kept(burst: Any) -> Any:
    """The number of memories an in-process burst keeps (None through a service: not observable there)."""
    return len(burst.burst) if isinstance(burst, AidlBurst) else None


@pytest.fixture
def pools() -> Any:
    with add_pools() as p:
        yield p


def _out(pools: Any) -> np.ndarray:
    return pools.output(0, np.float32, (2, 2))


def _wait(fd: int) -> fence.FenceState:
    return fence.sync_wait(hal.Handle(fds=[fd]), 10.0)


# --------------------------------------------------------------------------
# IPreparedModel.executeSynchronously / executeSynchronouslyWithConfig


def test_execute_synchronously(pm: Any, pools: Any) -> None:
    result = pm.executeSynchronously(pools.aidl_request(), True, -1, -1)
    assert result.outputSufficientSize and result.outputShapes == [aidl.OutputShape([2, 2], True)]
    assert 0 <= result.timing.timeOnDeviceNs <= result.timing.timeInDriverNs  # measured, in ns
    np.testing.assert_array_equal(_out(pools), EXPECTED)
    result = pm.executeSynchronouslyWithConfig(pools.aidl_request(), aidl.ExecutionConfig(measureTiming=False), -1)
    assert result.timing == aidl.Timing(-1, -1)


def test_output_insufficient_size_is_a_result_not_an_error(pm: Any) -> None:
    with add_pools(out=8) as short:
        result = pm.executeSynchronously(short.aidl_request(), True, -1, -1)
    assert result == aidl.ExecutionResult(False, [aidl.OutputShape([2, 2], False)], aidl.Timing(-1, -1))


def test_invalid_requests(pm: Any, pools: Any) -> None:
    """ValidateRequest (a removed input / output) and the boundary's own refusals:
    INVALID_ARGUMENT from every execution path."""
    def variants() -> Any:
        for edit in ("input", "output", "no pool", "two members", "padding", "negative offset", "junk"):
            req = pools.aidl_request()
            if edit == "input":
                del req.inputs[0]
            elif edit == "output":
                del req.outputs[0]
            elif edit == "no pool":
                req.pools[0] = aidl.RequestMemoryPool()
            elif edit == "two members":
                req.pools[0].token = 3
            elif edit == "padding":
                req.outputs[0].location.padding = 1  # past the end of the 16-byte output pool
            elif edit == "negative offset":
                req.inputs[0].location.offset = -4
            else:
                req = hal.Request()
            yield edit, req

    burst, config = pm.configureExecutionBurst(), aidl.ExecutionConfig()
    for edit, req in variants():
        tokens = [-1] * len(getattr(req, "pools", []))
        for call, *args in ((pm.executeSynchronously, req, False, -1, -1), (pm.executeFenced, req, [], False, -1, -1, -1),
                            (burst.executeSynchronously, req, tokens, False, -1, -1),
                            (pm.executeSynchronouslyWithConfig, req, config, -1),
                            (pm.executeFencedWithConfig, req, [], config, -1, -1),
                            (burst.executeSynchronouslyWithConfig, req, tokens, config, -1),
                            (pm.createReusableExecution, req, config)):
            assert raised(call, *args) == S.INVALID_ARGUMENT, edit


def test_invalid_times_and_flags(pm: Any, pools: Any) -> None:
    """deadlineNs / loopTimeoutDurationNs / durationNs: -1 or >= 0 ("Other negative
    values are invalid"); measureTiming a boolean."""
    req = pools.aidl_request()
    for dl, loop, measure in ((-2, -1, False), (-1, -5, False), (-1, -1, 1), (-1, -1, None), (2**63, -1, False),
                              ("1", -1, False)):
        assert raised(pm.executeSynchronously, req, measure, dl, loop) == S.INVALID_ARGUMENT
        assert raised(pm.executeFenced, req, [], measure, dl, loop, -1) == S.INVALID_ARGUMENT
    assert raised(lambda: pm.executeFenced(req, [], False, -1, -1, -2)) == S.INVALID_ARGUMENT
    for config in (None, aidl.ExecutionConfig(loopTimeoutDurationNs=-9), aidl.ExecutionConfig(measureTiming=0),
                   aidl.ExecutionConfig(executionHints=[aidl.TokenValuePair(1), aidl.TokenValuePair(1)])):
        assert raised(lambda c=config: pm.executeSynchronouslyWithConfig(req, c, -1)) == S.INVALID_ARGUMENT
        assert raised(lambda c=config: pm.createReusableExecution(req, c)) == S.INVALID_ARGUMENT
    # the loop timeout above the maximum is clamped to it, hints the driver does not know are ignored
    config = aidl.ExecutionConfig(True, 10**12, [aidl.TokenValuePair(5, b"x")],
                                  [aidl.ExtensionNameAndPrefix("com.example.hints", 3)])
    assert pm.executeSynchronouslyWithConfig(req, config, -1).outputSufficientSize


# --------------------------------------------------------------------------
# fenced executions and IFencedExecutionCallback


def test_execute_fenced(pm: Any, pools: Any) -> None:
    result = pm.executeFenced(pools.aidl_request(), [], True, -1, -1, -1)
    assert type(result) is aidl.FencedExecutionResult and isinstance(result.callback, aidl.IFencedExecutionCallback)
    try:
        assert _wait(result.syncFence) == fence.FenceState.SIGNALED
    finally:
        os.close(result.syncFence)
    launched, fenced = aidl.Timing(), aidl.Timing()
    assert result.callback.getExecutionInfo(launched, fenced) == S.NONE
    assert 0 <= launched.timeOnDeviceNs <= launched.timeInDriverNs and 0 <= fenced.timeOnDeviceNs
    assert result.callback.getExecutionInfo() == S.NONE  # the out parameters are optional
    np.testing.assert_array_equal(_out(pools), EXPECTED)
    assert raised(lambda: result.callback.getExecutionInfo("timing")) == S.INVALID_ARGUMENT


def test_execute_fenced_waits_for_its_fences(pm: Any, pools: Any) -> None:
    gate = fence.create()
    try:
        result = pm.executeFencedWithConfig(pools.aidl_request(), [gate.fds[0]], aidl.ExecutionConfig(), -1, -1)
        try:
            # NOTE: "must only be called after the actual evaluation has finished ... otherwise GENERAL_FAILURE"
            assert result.callback.getExecutionInfo() == S.GENERAL_FAILURE
            assert fence.state(hal.Handle(fds=[result.syncFence])) == fence.FenceState.ACTIVE
            fence.signal(gate)
            assert _wait(result.syncFence) == fence.FenceState.SIGNALED
            assert result.callback.getExecutionInfo() == S.NONE
        finally:
            os.close(result.syncFence)
        bad = fence.create()
        fence.signal(bad, error=True)
        try:
            # a fence in an error state, a descriptor that is no fence: INVALID_ARGUMENT
            for wait_for in ([bad.fds[0]], [-1], ["fd"], "fds"):
                assert raised(lambda w=wait_for: pm.executeFenced(pools.aidl_request(), w, False, -1, -1, -1)) \
                    == S.INVALID_ARGUMENT
        finally:
            fence.close(bad)
    finally:
        fence.close(gate)


def test_a_fenced_execution_needs_fully_specified_outputs() -> None:
    pm = prepare(aidl.get_device(), _unspecified())
    with add_pools() as pools:
        assert pm.executeSynchronously(pools.aidl_request(), False, -1, -1).outputSufficientSize
        assert raised(lambda: pm.executeFenced(pools.aidl_request(), [], False, -1, -1, -1)) == S.INVALID_ARGUMENT
        execution = pm.createReusableExecution(pools.aidl_request(), aidl.ExecutionConfig())
        assert execution.executeSynchronously(-1).outputSufficientSize
        for _ in range(2):
            assert raised(lambda: execution.executeFenced([], -1, -1)) == S.INVALID_ARGUMENT


def _unspecified() -> aidl.Model:
    from tests.driver_util import add_model

    return aidl.convert.from_canonical(add_model((2, 2), out_dims=(0, 2)))


# --------------------------------------------------------------------------
# IBurst


def test_burst_executes_with_memory_identifier_tokens(pm: Any, pools: Any) -> None:
    burst = pm.configureExecutionBurst()
    assert isinstance(burst, aidl.IBurst) and burst.getInterfaceVersion() == 4
    req = pools.aidl_request()
    for tokens in ([-1, -1], [1, 2], [1, 2], [1, -1]):
        result = burst.executeSynchronously(req, tokens, True, -1, -1)
        assert result.outputSufficientSize and result.timing.timeInDriverNs >= 0
        np.testing.assert_array_equal(_out(pools), EXPECTED)
    assert _kept(burst) in (2, None)  # the memories of tokens 1 and 2 are kept
    assert burst.executeSynchronouslyWithConfig(req, [1, 2], aidl.ExecutionConfig(), -1).outputSufficientSize
    # the memory of a token is the one kept for it: new input bytes in it are read
    view = hal_memory.map(pools.in_mem)
    view[:16] = np.full(4, 100, np.float32).tobytes()
    view.release()
    burst.executeSynchronously(req, [1, 2], False, -1, -1)
    np.testing.assert_array_equal(_out(pools), [[110, 110], [110, 110]])
    burst.releaseMemoryResource(1)
    burst.releaseMemoryResource(-1)  # no identity: nothing to release
    burst.releaseMemoryResource(12345)  # not known: nothing to release
    assert _kept(burst) in (1, None)
    burst.executeSynchronously(req, [1, 2], False, -1, -1)  # token 1's memory again, after its release
    np.testing.assert_array_equal(_out(pools), [[110, 110], [110, 110]])


def test_burst_refuses_bad_tokens(pm: Any, pools: Any) -> None:
    """ValidateBurst: a token below -1, one token too few or too many; releaseMemoryResource(-2)."""
    burst = pm.configureExecutionBurst()
    req = pools.aidl_request()
    for tokens in ([-2, 0], [0, -2], [0], [0, 1, 2], None, [0, "1"], [0, True], [0, 2**63]):
        assert raised(lambda t=tokens: burst.executeSynchronously(req, t, False, -1, -1)) == S.INVALID_ARGUMENT
    for token in (-2, None, 2**63, "1"):
        assert raised(lambda t=token: burst.releaseMemoryResource(t)) == S.INVALID_ARGUMENT
    assert _kept(burst) in (0, None)


def test_the_token_cache_is_bounded_and_freed(pm: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    in_process(pm)
    monkeypatch.setattr(driver_burst, "MAX_CACHED_SLOTS", 3)
    sets = [add_pools() for _ in range(5)]
    try:
        burst = pm.configureExecutionBurst()
        before = fd_count()
        for k, pools in enumerate(sets):
            assert burst.executeSynchronously(pools.aidl_request(), [2 * k, 2 * k + 1], False, -1, -1) \
                .outputSufficientSize
            assert len(burst.burst) <= 3
        assert len(burst.burst) == 3 and fd_count() == before + 3  # one duplicate per memory kept
        del burst
        assert settles_at(before)
    finally:
        for pools in sets:
            pools.close()


def test_a_burst_runs_one_execution_at_a_time(pm: Any, pools: Any) -> None:
    """IBurst.aidl: "Only a single execution on a given burst object may be active at any time";
    a second one meanwhile is GENERAL_FAILURE, as Android's sample driver answers."""
    in_process(pm)
    burst = pm.configureExecutionBurst()
    with burst.burst._running:  # noqa: SLF001 - the test holds the burst as a running execution would
        assert raised(lambda: burst.executeSynchronously(pools.aidl_request(), [-1, -1], False, -1, -1)) \
            == S.GENERAL_FAILURE
    assert burst.executeSynchronously(pools.aidl_request(), [-1, -1], False, -1, -1).outputSufficientSize


# --------------------------------------------------------------------------
# IExecution


def test_reusable_execution_runs_many_times(pm: Any, pools: Any) -> None:
    execution = pm.createReusableExecution(pools.aidl_request(), aidl.ExecutionConfig(measureTiming=True))
    assert isinstance(execution, aidl.IExecution) and execution.getInterfaceVersion() == 4
    view = hal_memory.map(pools.in_mem)
    try:
        for k in range(6):
            view[:16] = np.full(4, k, np.float32).tobytes()
            if k % 2:
                result = execution.executeFenced([], -1, -1)
                try:
                    assert _wait(result.syncFence) == fence.FenceState.SIGNALED
                finally:
                    os.close(result.syncFence)
                assert result.callback.getExecutionInfo() == S.NONE
            else:
                result = execution.executeSynchronously(-1)
                assert result.outputSufficientSize and result.timing.timeOnDeviceNs >= 0
            np.testing.assert_array_equal(_out(pools), np.full((2, 2), k + 10.0))
    finally:
        view.release()
    assert raised(lambda: execution.executeSynchronously(-2)) == S.INVALID_ARGUMENT
    assert raised(lambda: execution.executeFenced([], -1, -2)) == S.INVALID_ARGUMENT
    assert raised(lambda: execution.executeSynchronously(0)) in (S.MISSED_DEADLINE_PERSISTENT,
                                                                S.MISSED_DEADLINE_TRANSIENT)


def test_reusable_execution_keeps_its_own_memories(pm: Any) -> None:
    """The client may close its descriptors once createReusableExecution returns;
    dropped, the execution closes its duplicates."""
    pools = add_pools()
    req = pools.aidl_request()
    out = hal_memory.dup(pools.out_mem)
    before = fd_count()
    execution = pm.createReusableExecution(req, aidl.ExecutionConfig())
    pools.close()
    try:
        assert execution.executeSynchronously(-1).outputSufficientSize
        assert np.frombuffer(bytes(hal_memory.map(out)), np.float32).tolist() == [10, 11, 12, 13]
        del execution
        assert settles_at(before - 2)
    finally:
        hal_memory.free(out)


def test_a_reusable_execution_runs_one_execution_at_a_time(pm: Any, pools: Any) -> None:
    """IExecution.aidl: "At most one execution may occur on a reusable execution
    object at any given time": another call meanwhile is GENERAL_FAILURE."""
    in_process(pm)
    execution = pm.createReusableExecution(pools.aidl_request(), aidl.ExecutionConfig())
    results: list = []
    with execution.execution._busy:  # noqa: SLF001 - held as a running execution holds it
        t = threading.Thread(target=lambda: results.append((raised(lambda: execution.executeSynchronously(-1)),
                                                            raised(lambda: execution.executeFenced([], -1, -1)))))
        t.start()
        t.join()
    assert results == [(S.GENERAL_FAILURE, S.GENERAL_FAILURE)]
    assert execution.executeSynchronously(-1).outputSufficientSize
