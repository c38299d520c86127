"""A hostile client of the AIDL face, on raw sockets: a bad face or version in
the handshake, malformed arguments, unknown objects and methods, methods
after the connection's version, descriptors that match no
ParcelFileDescriptor, memory slots where none belong or naming memories the
service does not hold, nesting bombs, forged references.  Each gets
INVALID_ARGUMENT (UNKNOWN_TRANSACTION for a method the version has not)
when a call id can be read, or its connection closed; nothing leaks in the
service, which keeps serving everyone correctly (the framing's own limits
are the HIDL face's, tests/test_service_hostile.py)."""

from __future__ import annotations

import os
import time
from typing import Any

import msgspec
import numpy as np
import pytest

from nnhal import aidl
from nnhal.service import wire
from tests.aidl_util import add_aidl, add_pools, prepare
from tests.service_util import proc_counts
from tests.test_service_hostile import RawClient, settled_fds

S = aidl.ErrorStatus
UNKNOWN = aidl.TransactionError.UNKNOWN_TRANSACTION


class AidlRaw(RawClient):
    def __init__(self, path: str, version: int = 4):
        super().__init__(path, hello=False)
        self.send(wire.ENCODER.encode(wire.Hello("aidl", version)))
        assert type(self.recv()) is wire.Attach

    def call(self, cid: int, method: str, args: Any, target: bytes = b"", fds: Any = None,  # type: ignore[override]
             slots: Any = None, forget: Any = ()) -> Any:
        self.send(wire.ENCODER.encode(wire.CallOut(cid, target, method, args, slots, list(forget))), fds)
        return self.recv()

    def prepare(self, cid: int) -> tuple[Any, Any]:
        """prepareModel of the ADD with the callback reference b"cb": (the reply, the one-way notify), which
        travel in either order (the preparation may finish before the launch's answer leaves)."""
        first = self.call(cid, "prepareModel", [_builtins(add_aidl()), 1, 1, -1, [], [], bytes(32), b"cb"])
        second = self.recv()
        return (first, second) if type(first) is wire.Reply else (second, first)


def _fail(env: Any, status: int, cid: int) -> bool:
    return type(env) is wire.Fail and env.cid == cid and env.status == status


def _builtins(value: Any) -> Any:
    return msgspec.to_builtins(value, builtin_types=(bytes,))


@pytest.fixture(scope="module")
def dev(service_process: Any) -> Any:
    d = service_process.connect_aidl()
    yield d
    d.close()


@pytest.fixture
def path(service_process: Any) -> str:
    return str(service_process.socket_path)


@pytest.fixture
def baseline(dev: Any, service_process: Any) -> Any:
    dev.getVersionString()
    time.sleep(0.1)
    base = proc_counts(service_process.pid)["fds"]
    yield base
    pm = prepare(dev, add_aidl())  # still serving, correctly
    with add_pools() as pools:
        assert pm.executeSynchronously(pools.aidl_request(), False, -1, -1).outputSufficientSize
        np.testing.assert_array_equal(pools.output(0, np.float32, (2, 2)), [[10, 11], [12, 13]])
    assert settled_fds(service_process.pid, base) <= base, "descriptors leaked in the service"


def test_a_bad_face_or_version_is_refused(path: str, baseline: int) -> None:
    for hello in (wire.Hello("aidl", 0), wire.Hello("aidl", 5), wire.Hello("corba", 1)):
        c = RawClient(path, hello=False)
        c.send(wire.ENCODER.encode(hello))
        assert c.closed_by_peer()
        c.close()


def test_malformed_calls(path: str, baseline: int) -> None:
    c = AidlRaw(path)
    try:
        for k, (method, args) in enumerate([
            ("getSupportedOperations", ["junk"]),
            ("getSupportedOperations", []),  # too few arguments
            ("prepareModel", [None, 1, 1, -1, [], [], b"", None, "extra"]),
            ("getCapabilities", [1, 2, 3]),
            ("allocate", [{"dimensions": [2]}, [{"preparedModel": 5}], [], []]),  # a reference that is an int
        ], start=1):
            assert _fail(c.call(k, method, args), S.INVALID_ARGUMENT, k), method
        assert _fail(c.call(10, "noSuchMethod", []), UNKNOWN, 10)
        assert _fail(c.call(11, "executeSynchronously", [None, False, -1, -1], target=os.urandom(16)),
                     S.INVALID_ARGUMENT, 11)  # an object nobody was given
        # a forged prepared model in a parcel: a null one for the face, which refuses it
        role = {"modelIndex": 0, "ioIndex": 0, "probability": 1.0}
        assert _fail(c.call(12, "allocate", [{"dimensions": []}, [{"preparedModel": b"forged" * 3}], [role], []]),
                     S.INVALID_ARGUMENT, 12)
        # a prepareModel whose callback is a forged reference: the face's callback proxy calls it, one way
        env, note = c.prepare(13)
        assert type(env) is wire.Reply and msgspec.msgpack.decode(env.result) == [None]
        assert type(note) is wire.Call and note.cid == 0 and note.method == "notify" and note.target == b"cb"
        status, ref = msgspec.msgpack.decode(note.args)
        assert status == S.NONE and isinstance(ref, bytes)
        env = c.call(14, "getInterfaceVersion", [], target=ref)
        assert type(env) is wire.Reply and msgspec.msgpack.decode(env.result) == [4]
        # the nesting bomb in the arguments of a call
        env = c.call(15, "getSupportedOperations", msgspec.Raw(b"\x91" * 100_000 + b"\xc0"))
        assert _fail(env, S.INVALID_ARGUMENT, 15)
    finally:
        c.close()


def test_methods_after_the_version(path: str, baseline: int) -> None:
    """UNKNOWN_TRANSACTION before the arguments are read, as binder's stub of that version answers."""
    c = AidlRaw(path, version=3)
    try:
        assert _fail(c.call(1, "prepareModelWithConfig", ["junk"]), UNKNOWN, 1)
        assert type(c.call(2, "getInterfaceVersion", [])) is wire.Reply
    finally:
        c.close()


def test_descriptors_that_match_no_descriptor_position(path: str, baseline: int) -> None:
    c = AidlRaw(path)
    r, w = os.pipe()
    try:
        assert _fail(c.call(1, "getCapabilities", [], fds=[r, w, r]), S.INVALID_ARGUMENT, 1)
        model = _builtins(add_aidl())
        model["pools"] = [{"ashmem": {"fd": 0, "size": 4}}]
        assert _fail(c.call(2, "getSupportedOperations", [model]), S.INVALID_ARGUMENT, 2)  # one announced, none sent
        assert _fail(c.call(3, "getSupportedOperations", [model], fds=[r, w]), S.INVALID_ARGUMENT, 3)
        # a pipe where shared memory belongs: the face refuses the memory
        assert _fail(c.call(4, "getSupportedOperations", [model], fds=[r]), S.INVALID_ARGUMENT, 4)
        # a cache list of descriptors with junk in it
        assert _fail(c.call(5, "prepareModelFromCache", [-1, ["fd"], [], bytes(32), None]), S.INVALID_ARGUMENT, 5)
    finally:
        os.close(r)
        os.close(w)
        c.close()


def test_memory_slots_where_none_belong(path: str, baseline: int, dev: Any) -> None:
    c = AidlRaw(path)
    try:
        assert _fail(c.call(1, "getCapabilities", [], slots=[1]), S.INVALID_ARGUMENT, 1)
        assert _fail(c.call(2, "getCapabilities", [], forget=[3]), S.INVALID_ARGUMENT, 2)
        env, note = c.prepare(3)
        assert type(env) is wire.Reply
        _, pm = msgspec.msgpack.decode(note.args)
        env = c.call(4, "configureExecutionBurst", [], target=pm)
        burst = msgspec.msgpack.decode(env.result)[0]
        with add_pools() as pools:
            req = _builtins(pools.aidl_request())
            empty = dict(req, pools=[{}, {}])
            fds = [pools.in_mem.handle.fds[0], pools.out_mem.handle.fds[0]]
            for k, (request, tokens, slots, sent) in enumerate([
                (empty, [1, 2], [1, 1], []),  # memories the service does not hold
                (empty, [-1, 2], [1, 0], []),  # "by token" with no token
                (req, [1, 2], [1, 1], fds),  # "by token" with the memory sent too
                (req, [1, 2], [0], fds),  # a slot short
                (req, [1, 2], [0, 2], fds),  # no such slot kind
            ], start=10):
                env = c.call(k, "executeSynchronously", [request, tokens, False, -1, -1], target=burst, fds=sent,
                             slots=slots)
                assert _fail(env, S.INVALID_ARGUMENT, k), (k, env)
            # and properly: the memories once, then by token
            env = c.call(20, "executeSynchronously", [req, [1, 2], False, -1, -1], target=burst, fds=fds, slots=[0, 0])
            assert type(env) is wire.Reply, env
            env = c.call(21, "executeSynchronously", [empty, [1, 2], False, -1, -1], target=burst, slots=[1, 1])
            assert type(env) is wire.Reply, env
            assert msgspec.msgpack.decode(env.result)[0]["outputSufficientSize"]
            # forgotten: no longer held
            env = c.call(22, "executeSynchronously", [empty, [1, 2], False, -1, -1], target=burst, slots=[1, 1],
                         forget=[1])
            assert _fail(env, S.INVALID_ARGUMENT, 22) and "unknown memory slot" in env.message
    finally:
        c.close()


def test_another_clients_references(path: str, baseline: int, dev: Any) -> None:
    """References and memory tokens are per connection: another client's are nothing here."""
    pm = prepare(dev, add_aidl())
    db = dev.allocate(aidl.BufferDesc([2, 2]), [aidl.IPreparedModelParcel(pm)], [aidl.BufferRole(0, 0, 1.0)], [])
    c = AidlRaw(path)
    try:
        assert _fail(c.call(1, "getInterfaceVersion", [], target=pm._ref), S.INVALID_ARGUMENT, 1)
        assert _fail(c.call(2, "copyTo", [{"ashmem": None}], target=db.buffer._ref), S.INVALID_ARGUMENT, 2)
        _, mine = msgspec.msgpack.decode(c.prepare(3)[1].args)
        with add_pools() as pools:
            req = _builtins(pools.aidl_request())
            req["pools"].append({"token": db.token})
            fds = [pools.in_mem.handle.fds[0], pools.out_mem.handle.fds[0]]
            env = c.call(4, "executeSynchronously", [req, False, -1, -1], target=mine, fds=fds)
            assert _fail(env, S.INVALID_ARGUMENT, 4) and "token" in env.message
    finally:
        c.close()
