"""No argument can make an AIDL face method raise anything but
ServiceSpecificError (a method of a later version: TransactionError), as the
HIDL methods never raise (test_hal_never_raises.py, test_driver_robustness.py):
junk of every kind in every position of every method of every interface, and
a front end that fails unexpectedly (a driver bug) answered GENERAL_FAILURE,
its callback told once."""

from __future__ import annotations

import inspect
import itertools
import os
from typing import Any

import pytest

from nnhal import aidl, fence, hal
from nnhal.driver import device as driver_device
from tests.aidl_util import CountingCallback, add_aidl, add_pools, prepare
from tests.driver_util import WAIT_S

S = aidl.ErrorStatus

JUNK = [None, True, -1, -2, 2**70, 1.5, float("nan"), "x", b"\xff" * 40, [], [None], [-1], {}, object(), aidl.Model(),
        aidl.Request(), aidl.Memory(), hal.Model(), hal.Request(), aidl.ExecutionConfig(executionHints=None),
        aidl.PrepareModelConfig(modelCache=None), aidl.IPreparedModelParcel(), aidl.RequestMemoryPool(token=-5)]


def _objects(quiet_driver: None) -> dict[str, Any]:
    dev = aidl.get_device()
    pm = prepare(dev, add_aidl())
    pools = add_pools()
    req = pools.aidl_request()
    db = dev.allocate(aidl.BufferDesc(), [aidl.IPreparedModelParcel(pm)], [aidl.BufferRole(0, 0, 1.0)], [])
    gate = fence.create()
    fenced = pm.executeFenced(req, [gate.fds[0]], False, -1, -1, -1)
    return {"IDevice": dev, "IPreparedModel": pm, "IBurst": pm.configureExecutionBurst(),
            "IExecution": pm.createReusableExecution(req, aidl.ExecutionConfig()), "IBuffer": db.buffer,
            "IFencedExecutionCallback": fenced.callback, "_keep": (pools, gate, fenced)}


def _good_args(name: str, method: str, objects: dict) -> list:
    pools = objects["_keep"][0]
    req, model, cb = pools.aidl_request(), add_aidl(), CountingCallback()
    return {
        "allocate": [aidl.BufferDesc(), [aidl.IPreparedModelParcel(objects["IPreparedModel"])],
                     [aidl.BufferRole(0, 0, 1.0)], []],
        "getSupportedOperations": [model],
        "prepareModel": [model, aidl.ExecutionPreference.FAST_SINGLE_ANSWER, aidl.Priority.LOW, -1, [], [], bytes(32),
                         cb],
        "prepareModelFromCache": [-1, [], [], bytes(32), cb],
        "prepareModelWithConfig": [model, aidl.PrepareModelConfig(), cb],
        "executeSynchronously": {"IPreparedModel": [req, False, -1, -1], "IBurst": [req, [-1, -1], False, -1, -1],
                                 "IExecution": [-1]}.get(name),
        "executeFenced": {"IPreparedModel": [req, [], False, -1, -1, -1], "IExecution": [[], -1, -1]}.get(name),
        "executeSynchronouslyWithConfig": {"IPreparedModel": [req, aidl.ExecutionConfig(), -1],
                                           "IBurst": [req, [-1, -1], aidl.ExecutionConfig(), -1]}.get(name),
        "executeFencedWithConfig": [req, [], aidl.ExecutionConfig(), -1, -1],
        "createReusableExecution": [req, aidl.ExecutionConfig()],
        "releaseMemoryResource": [3],
        "copyFrom": [aidl.convert.from_canonical(pools.in_mem), []],
        "copyTo": [aidl.convert.from_canonical(pools.out_mem)],
        "getExecutionInfo": [aidl.Timing(), aidl.Timing()],
        "notify": None,
    }.get(method, [])


def _close_fences(result: Any) -> None:
    if type(result) is aidl.FencedExecutionResult and result.syncFence is not None:
        os.close(result.syncFence)


def test_junk_in_every_position_of_every_method(quiet_driver: None) -> None:
    objects = _objects(quiet_driver)
    calls = 0
    for name, methods in aidl.METHODS.items():
        obj = objects.get(name)
        if obj is None:
            continue  # the callbacks are the client's
        for method in methods:
            good = _good_args(name, method, objects)
            fn = getattr(obj, method)
            for k, junk in itertools.product(range(len(good)), JUNK):
                args = list(good)
                args[k] = junk
                try:
                    _close_fences(fn(*args))
                except aidl.ServiceSpecificError as e:
                    assert e.status in S.__members__.values(), (name, method, k, junk)
                calls += 1
            params = list(inspect.signature(fn).parameters.values())
            required = sum(p.default is inspect.Parameter.empty for p in params)
            for args in ([None] * (len(params) + 1), [None] * (required - 1)):  # the wrong number of arguments
                if not args and required == 0:
                    continue
                with pytest.raises(aidl.ServiceSpecificError) as e:
                    fn(*args)
                assert e.value.status == S.INVALID_ARGUMENT, (name, method, args)
    assert calls > 500
    pools, gate, fenced = objects["_keep"]
    fence.signal(gate)
    fence.close(gate)
    os.close(fenced.syncFence)
    pools.close()


def test_face_methods_keep_the_aidl_signatures() -> None:
    """Each face method has the .aidl parameter names and order (the frozen
    interfaces of version 4, as nnhal.hal.aidl.interfaces declares them)."""
    from nnhal.driver import aidl as face

    for cls in (face.AidlDevice, face.AidlPreparedModel, face.AidlBurst, face.AidlExecution, face.AidlBuffer,
                face.AidlFencedCallback):
        iface = next(b for b in cls.__mro__ if b in aidl.INTERFACES)
        for method in aidl.METHODS[iface.__name__]:
            ours = list(inspect.signature(getattr(cls, method)).parameters)
            theirs = list(inspect.signature(getattr(iface, method)).parameters)
            assert ours == theirs, (cls.__name__, method)


def test_a_driver_bug_is_general_failure_and_the_callback_hears_it(monkeypatch: pytest.MonkeyPatch,
                                                                  quiet_driver: None) -> None:
    dev = aidl.get_device()

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setattr(driver_device.Device, "prepare", broken)
    monkeypatch.setattr(driver_device.Device, "getCapabilities_1_3", broken)
    cb = CountingCallback()
    with pytest.raises(aidl.ServiceSpecificError) as e:
        dev.prepareModel(add_aidl(), aidl.ExecutionPreference.LOW_POWER, aidl.Priority.LOW, -1, [], [], bytes(32), cb)
    assert e.value.status == S.GENERAL_FAILURE
    assert cb.wait(WAIT_S) == (S.GENERAL_FAILURE, None) and cb.calls == [S.GENERAL_FAILURE]
    with pytest.raises(aidl.ServiceSpecificError) as e:
        dev.getCapabilities()
    assert e.value.status == S.GENERAL_FAILURE


def test_a_callback_that_raises_does_not_hurt_the_driver() -> None:
    class Raising(aidl.IPreparedModelCallback):
        def notify(self, status: Any, preparedModel: Any) -> None:
            raise RuntimeError("the client's bug")

    dev = aidl.get_device()
    dev.prepareModel(add_aidl(), aidl.ExecutionPreference.LOW_POWER, aidl.Priority.LOW, -1, [], [], bytes(32),
                     Raising())
    assert prepare(dev, add_aidl()) is not None  # the driver goes on
