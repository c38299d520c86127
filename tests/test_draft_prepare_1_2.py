"""The seed's draft ``IDevice`` 1.2 (before caching):
``prepareModel_1_2(Model model, ExecutionPreference preference,
IPreparedModelCallback callback)``, accepted beside the final six-argument
form (no cache handles, a zero token), in process and through a service
(issue 17 item 7)."""

from __future__ import annotations

import socket
from typing import Any

import msgspec
import numpy as np
import pytest

from nnhal import hal
from nnhal.hal import convert
from nnhal.service import transport, wire
from tests.driver_util import WAIT_S, CountingPreparedCallback, Pools, add_model

S = hal.ErrorStatus
A = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
PREF = hal.ExecutionPreference.SUSTAINED_SPEED


@pytest.fixture(params=["in process", "service"])
def dev(request: Any) -> Any:
    return request.getfixturevalue("device" if request.param == "in process" else "service")


def _runs(prepared: Any) -> None:
    with Pools([A, A * 10], [16]) as p:
        status, shapes, _ = prepared.executeSynchronously(p.request_v1_0(), hal.MeasureTiming.NO)
        assert status == S.NONE and shapes[0].dimensions == [2, 2]
        np.testing.assert_array_equal(p.output(0, np.float32, (2, 2)), A * 11)


@pytest.mark.parametrize("form", ["positional", "keyword"])
def test_draft_form_prepares(dev: Any, form: str) -> None:
    model = convert.convert_to_v1_2(add_model())
    cb = CountingPreparedCallback()
    if form == "positional":
        launch = dev.prepareModel_1_2(model, PREF, cb)
    else:
        launch = dev.prepareModel_1_2(model=model, preference=PREF, callback=cb)
    status, prepared = cb.wait(WAIT_S)
    assert launch == S.NONE and status == S.NONE and prepared is not None
    assert cb.calls == [("notify_1_2", S.NONE)]
    _runs(prepared)


def test_draft_form_refuses_as_the_final_form(dev: Any) -> None:
    """An invalid model through the draft form: INVALID_ARGUMENT, notified once."""
    model = convert.convert_to_v1_2(add_model())
    model.operands[0].numberOfConsumers = 7
    cb = CountingPreparedCallback()
    assert dev.prepareModel_1_2(model, PREF, cb) == S.INVALID_ARGUMENT
    assert cb.wait(WAIT_S)[0] == S.INVALID_ARGUMENT and len(cb.calls) == 1
    # no callback at all, in either form
    assert dev.prepareModel_1_2(model, PREF, None) == S.INVALID_ARGUMENT


def test_final_form_unchanged(dev: Any) -> None:
    cb = CountingPreparedCallback()
    assert dev.prepareModel_1_2(convert.convert_to_v1_2(add_model()), PREF, [], [], bytes(32), cb) == S.NONE
    status, prepared = cb.wait(WAIT_S)
    assert status == S.NONE
    _runs(prepared)


def test_draft_form_on_the_wire(service_process: Any) -> None:
    """A raw client sending the three-argument call: the service answers
    NONE and notifies the callback it named through notify_1_2."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(service_process.socket_path))
    sock.settimeout(WAIT_S)
    chan = transport.Channel(sock)
    try:
        chan.send(wire.ENCODER.encode(wire.Hello()), [])
        body, _ = chan.recv()
        assert type(wire.ENVELOPE.decode(body)) is wire.Attach
        model = msgspec.to_builtins(convert.convert_to_v1_2(add_model()), builtin_types=(bytes,))
        chan.send(wire.ENCODER.encode(wire.CallOut(1, b"", "prepareModel_1_2", [model, int(PREF), b"cb"])), [])
        seen: dict = {}
        while "reply" not in seen or "notify" not in seen:
            body, fds = chan.recv()
            transport.close_fds(fds)
            env = wire.ENVELOPE.decode(body)
            if type(env) is wire.Reply:
                seen["reply"] = msgspec.msgpack.decode(env.result)
            elif type(env) is wire.Call:
                assert env.target == b"cb"
                seen["notify"] = (env.method, msgspec.msgpack.decode(env.args)[0])
        assert seen["reply"] == S.NONE
        assert seen["notify"] == ("notify_1_2", S.NONE)
    finally:
        chan.close()
