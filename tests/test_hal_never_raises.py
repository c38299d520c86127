"""A HAL method never raises, and what a model and a request alone show
wrong is refused at launch, alike on every execution path (issue 17 items 3
and 4).

- Ranks: HAL dimensions are a ``vec<uint32_t>`` of any length, numpy arrays
  hold at most 64 axes.  The driver runs operands of rank up to
  ``nnhal.ops.base.MAX_RANK``: a model operand beyond makes its operations
  unsupported (getSupportedOperations false, prepare GENERAL_FAILURE), request
  dimensions beyond are GENERAL_FAILURE at launch, on every path.
- Every HAL entry point answers GENERAL_FAILURE (in its own shape, its
  callback notified once) for an exception that escapes it.
- executeFenced refuses at once what sync / async refuse: dimensions given to
  a scalar, a required operand the request omits (with the status the
  execution would end in), as one request check shared by the four paths.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from nnhal import burst as burst_mod
from nnhal import fence, hal
from nnhal import memory as hal_memory
from nnhal.driver.device import Device
from nnhal.driver.prepared_model import PreparedModel
from nnhal.drivers.sample import sample_device
from nnhal.ops.base import MAX_RANK
from tests.driver_util import (
    OT,
    WAIT_S,
    Builder,
    CountingExecutionCallback,
    CountingPreparedCallback,
    Pools,
    S,
    T,
    add_model,
    device,
    make_model,
    prepare,
    prepared_model,
)

F32 = T.TENSOR_FLOAT32
RANK = 104


def _s2b(dims: list) -> hal.Model:
    b = Builder()
    x = b.input(F32, dims)
    bs = b.const(T.TENSOR_INT32, np.array([1, 1], np.int32), (2,))
    pad = b.const(T.TENSOR_INT32, np.zeros((2, 2), np.int32), (2, 2))
    o = b.output(F32, dims)
    b.op(OT.SPACE_TO_BATCH_ND, [x, bs, pad], [o])
    return make_model(b)


def _transpose_conv(dims: list) -> hal.Model:
    b = Builder()
    x = b.input(F32, dims)
    f = b.const(F32, np.ones((1, 1, 1, 1), np.float32), (1, 1, 1, 1))
    bias = b.const(F32, np.zeros(1, np.float32), (1,))
    shape = b.const(T.TENSOR_INT32, np.array([1, 1, 1, 1], np.int32), (4,))
    o = b.output(F32, dims)
    b.op(OT.TRANSPOSE_CONV_2D, [x, f, bias, shape, b.i32(1), b.i32(1), b.i32(1), b.i32(0),
                                b.const(T.BOOL, b"\0")], [o])
    return make_model(b)


@pytest.mark.parametrize("make", [_s2b, _transpose_conv])
@pytest.mark.parametrize("rank", [RANK, MAX_RANK + 1])
def test_a_rank_beyond_the_limit_is_unsupported(make: Any, rank: int) -> None:
    model = make([1] * rank)
    status, supported = device().getSupportedOperations_1_3(model)
    assert status == S.NONE and supported == [False]
    launch, status, prepared = prepare(model)
    assert status == S.GENERAL_FAILURE and prepared is None


def test_a_rank_beyond_the_limit_inside_an_if_is_unsupported() -> None:
    main = Builder()
    inner = Builder(main.values)
    x = inner.input(F32, [1] * RANK)
    o = inner.output(F32, [1] * RANK)
    inner.op(OT.SPACE_TO_BATCH_ND, [x, inner.const(T.TENSOR_INT32, np.array([1, 1], np.int32), (2,)),
                                    inner.const(T.TENSOR_INT32, np.zeros((2, 2), np.int32), (2, 2))], [o])
    cond, xm = main.input(T.TENSOR_BOOL8, (1,)), main.input(F32, [1] * RANK)
    om = main.output(F32, [1] * RANK)
    main.op(OT.IF, [cond, main.subgraph_ref(0), main.subgraph_ref(0), xm], [om])
    model = make_model(main, inner)
    assert device().getSupportedOperations_1_3(model) == (S.NONE, [False])
    assert prepare(model)[1] == S.GENERAL_FAILURE


def _request(mem: hal.Memory, in_dims: list, out_dims: list = (), in_len: int = 4,
             scalar: bool = False) -> hal.Request:
    return hal.Request(inputs=[hal.RequestArgument(False, hal.DataLocation(0, 0, in_len), list(in_dims))],
                       outputs=[hal.RequestArgument(False, hal.DataLocation(0, 32, 4), list(out_dims))],
                       pools=[hal.MemoryPool(hidlMemory=mem)])


def _every_path(pm: Any, req: hal.Request) -> dict:
    """The status of each execution path, each checked to be refused at launch."""
    out = {}
    out["sync"] = pm.executeSynchronously_1_3(req, hal.MeasureTiming.NO, None, None)[0]
    cb = CountingExecutionCallback()
    launch = pm.execute_1_3(req, hal.MeasureTiming.NO, None, None, cb)
    status = cb.wait(WAIT_S)[0]
    assert launch == status and len(cb.calls) == 1, (launch, status)  # refused at launch: both say it
    out["async"] = status
    st, sync_fence, callback = pm.executeFenced(req, [], hal.MeasureTiming.NO, None, None, None)
    assert sync_fence is None and callback is None, "executeFenced launched what it must refuse"
    out["fenced"] = st
    with burst_mod.BurstController(pm) as ctl:
        out["burst"] = ctl.execute(req, hal.MeasureTiming.NO)[0]
    return out


@pytest.fixture
def mem() -> Any:
    m = hal_memory.allocate(64)
    yield m
    hal_memory.free(m)


def test_request_dimensions_beyond_the_rank_limit(mem: hal.Memory) -> None:
    """A model input of unknown rank: the request's rank-104 dimensions were
    a ValueError out of executeSynchronously_1_3."""
    pm = prepared_model(_s2b([]))
    for dims in ([1] * RANK, [1] * (MAX_RANK + 1)):
        statuses = _every_path(pm, _request(mem, dims, [1] * 4))
        assert set(statuses.values()) == {S.GENERAL_FAILURE}, statuses
    # the same model runs a rank-4 request
    assert pm.executeSynchronously_1_3(_request(mem, [1, 1, 1, 1], [1, 1, 1, 1]), hal.MeasureTiming.NO, None,
                                       None)[0] == S.NONE


def _scalar_model() -> hal.Model:
    b = Builder()
    a, c = b.input(F32, [2]), b.input(F32, [2])
    act = b.input(T.INT32, [])
    out = b.output(F32, [2])
    b.op(OT.ADD, [a, c, act], [out])
    return make_model(b)


def _args(mem_off: list, dims: list, novalue: Any = None) -> list:
    args = [hal.RequestArgument(False, hal.DataLocation(0, off, n), list(d)) for (off, n), d in zip(mem_off, dims)]
    if novalue is not None:
        args[novalue] = hal.RequestArgument(hasNoValue=True)
    return args


@pytest.mark.parametrize("case, expected", [("scalar given dimensions", S.INVALID_ARGUMENT),
                                            ("scalar given rank-2 dimensions", S.INVALID_ARGUMENT),
                                            ("required tensor input omitted", S.GENERAL_FAILURE),
                                            ("required scalar input omitted", S.GENERAL_FAILURE),
                                            ("required output omitted", S.GENERAL_FAILURE)])
def test_known_wrong_requests_are_refused_alike_on_every_path(mem: hal.Memory, case: str, expected: S) -> None:
    """Issue 17 item 4: executeFenced returned NONE for these and failed only in the fence."""
    pm = prepared_model(_scalar_model())
    dims: list = [[], [], []]
    novalue = None
    out_novalue = False
    if case == "scalar given dimensions":
        dims[2] = [1]
    elif case == "scalar given rank-2 dimensions":
        dims[2] = [1, 1]
    elif case == "required tensor input omitted":
        novalue = 0
    elif case == "required scalar input omitted":
        novalue = 2
    else:
        out_novalue = True
    req = hal.Request(inputs=_args([(0, 8), (8, 8), (16, 4)], dims, novalue),
                      outputs=[hal.RequestArgument(hasNoValue=True) if out_novalue else
                               hal.RequestArgument(False, hal.DataLocation(0, 32, 8), [])],
                      pools=[hal.MemoryPool(hidlMemory=mem)])
    statuses = _every_path(pm, req)
    assert set(statuses.values()) == {expected}, statuses
    good = hal.Request(inputs=_args([(0, 8), (8, 8), (16, 4)], [[], [], []]),
                       outputs=[hal.RequestArgument(False, hal.DataLocation(0, 32, 8), [])],
                       pools=[hal.MemoryPool(hidlMemory=mem)])
    assert pm.executeSynchronously_1_3(good, hal.MeasureTiming.NO, None, None)[0] == S.NONE


def test_bad_data_operations_refuse_an_omitted_input_with_invalid_argument(mem: hal.Memory) -> None:
    """RESHAPE (CpuExecutor's own switch: BAD_DATA) -> INVALID_ARGUMENT on every path."""
    b = Builder()
    x = b.input(F32, (2, 2))
    o = b.output(F32, (4,))
    b.op(OT.RESHAPE, [x, b.const(T.TENSOR_INT32, np.array([-1], np.int32), (1,))], [o])
    pm = prepared_model(make_model(b))
    req = hal.Request(inputs=[hal.RequestArgument(hasNoValue=True)],
                      outputs=[hal.RequestArgument(False, hal.DataLocation(0, 32, 16), [])],
                      pools=[hal.MemoryPool(hidlMemory=mem)])
    assert set(_every_path(pm, req).values()) == {S.INVALID_ARGUMENT}


# --------------------------------------------------------------------------
# the guard


class Boom(RuntimeError):
    pass


def _boom(*args: Any, **kwargs: Any) -> Any:
    raise Boom("a driver bug")


def test_device_methods_never_raise(monkeypatch: pytest.MonkeyPatch) -> None:
    dev = sample_device("guard-test")
    monkeypatch.setattr(Device, "_validated", _boom)
    monkeypatch.setattr(Device, "cache_key", _boom)
    monkeypatch.setattr(dev.backend, "capabilities", _boom)
    model = add_model()
    assert dev.getSupportedOperations_1_3(model) == (S.GENERAL_FAILURE, [])
    assert dev.getSupportedOperations(hal.convert.convert_to_v1_0(model)) == (S.GENERAL_FAILURE, [])
    status, caps = dev.getCapabilities_1_3()
    assert status == S.GENERAL_FAILURE and isinstance(caps, hal.Capabilities)
    for call in (lambda cb: dev.prepareModel_1_3(model, 0, hal.Priority.MEDIUM, None, [], [], bytes(32), cb),
                 lambda cb: dev.prepareModel_1_2(hal.convert.convert_to_v1_2(model), 0, cb),
                 lambda cb: dev.prepareModel(hal.convert.convert_to_v1_0(model), cb)):
        cb = CountingPreparedCallback()
        assert call(cb) == S.GENERAL_FAILURE
        assert cb.wait(WAIT_S) == (S.GENERAL_FAILURE, None) and len(cb.calls) == 1
    cb = CountingPreparedCallback()
    assert dev.prepareModelFromCache_1_3(None, [], [], bytes(32), cb) in (S.GENERAL_FAILURE, S.INVALID_ARGUMENT)
    assert len(cb.calls) == 1


def test_prepared_model_methods_never_raise(monkeypatch: pytest.MonkeyPatch, mem: hal.Memory) -> None:
    pm = prepared_model(add_model())
    monkeypatch.setattr(PreparedModel, "run_job", _boom)
    monkeypatch.setattr(pm.scheduler, "submit", _boom)
    pools = Pools([np.ones((2, 2), np.float32)] * 2, [16])
    req = pools.request()
    status, shapes, timing = pm.executeSynchronously_1_3(req, hal.MeasureTiming.NO, None, None)
    assert status == S.GENERAL_FAILURE and shapes == [] and timing == hal.Timing()
    cb = CountingExecutionCallback()
    assert pm.execute_1_3(req, hal.MeasureTiming.NO, None, None, cb) == S.GENERAL_FAILURE
    assert cb.wait(WAIT_S)[0] == S.GENERAL_FAILURE and cb.calls == [("notify_1_3", S.GENERAL_FAILURE)]
    cb = CountingExecutionCallback()
    assert pm.execute(hal.convert.convert_to_v1_0(req), cb) == S.GENERAL_FAILURE
    assert cb.calls == [("notify", S.GENERAL_FAILURE)]
    monkeypatch.setattr(fence, "create", _boom)
    assert pm.executeFenced(req, [], hal.MeasureTiming.NO, None, None, None)[0] == S.GENERAL_FAILURE
    pools.close()


def test_a_method_guarding_itself_is_not_wrapped_and_still_logs_the_bug(monkeypatch: pytest.MonkeyPatch,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    """executeSynchronously_1_3 catches its own bugs (guard.guards_itself: no wrapper frame per execution):
    hal_methods leaves it as written, its answer and log line are the wrapper's; a method with a callback
    cannot opt out of the wrapper (the wrapper notifies the callback)."""
    from nnhal.driver import guard

    assert getattr(PreparedModel.executeSynchronously_1_3, "__wrapped__", None) is None
    pm = prepared_model(add_model())
    monkeypatch.setattr(PreparedModel, "run_job", _boom)
    pools = Pools([np.ones((2, 2), np.float32)] * 2, [16])
    try:
        with caplog.at_level("ERROR", logger="nnhal.driver"):
            assert pm.executeSynchronously_1_3(pools.request(), hal.MeasureTiming.NO, None, None) == \
                (S.GENERAL_FAILURE, [], hal.Timing())
        assert "executeSynchronously_1_3 raised (a driver bug)" in caplog.text
    finally:
        pools.close()

    def execute_1_3(self: Any, request: Any, measure: Any, deadline: Any, loop: Any, callback: Any) -> Any:
        return S.NONE

    with pytest.raises(TypeError):
        guard.guards_itself(execute_1_3)


def test_a_no_value_operand_where_an_operation_requires_one_is_refused_at_launch(mem: hal.Memory) -> None:
    """Known from the model alone: ADD's activation given NO_VALUE.  The
    model prepares (as Android's reference); every execution is refused at
    launch with the status the execution would end in (GENERAL_FAILURE: ADD is
    an operation of the reference's resolver)."""
    b = Builder()
    a, c = b.input(F32, [2]), b.input(F32, [2])
    act = b.operand(T.INT32, [], hal.OperandLifeTime.NO_VALUE)
    out = b.output(F32, [2])
    b.op(OT.ADD, [a, c, act], [out])
    pm = prepared_model(make_model(b))
    req = hal.Request(inputs=_args([(0, 8), (8, 8)], [[], []]),
                      outputs=[hal.RequestArgument(False, hal.DataLocation(0, 32, 8), [])],
                      pools=[hal.MemoryPool(hidlMemory=mem)])
    assert set(_every_path(pm, req).values()) == {S.GENERAL_FAILURE}
