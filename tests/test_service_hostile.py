"""A hostile client on raw sockets: junk, truncated and oversized frames, too
many descriptors, descriptors that match no handle, malformed arguments,
unknown objects and methods, forged sessions, nesting bombs.  Each gets
INVALID_ARGUMENT (when a call id can be read) or its connection closed, no
descriptor leaks in the service, and the service keeps serving everyone
else correctly."""

from __future__ import annotations

import os
import socket
import struct
import time
from typing import Any

import msgspec
import numpy as np
import pytest

from nnhal import hal
from nnhal.service import transport, wire
from nnhal.service.transport import Channel
from tests.driver_util import Pools, add_model, execute_sync, prepared_model
from tests.service_util import proc_counts

S = hal.ErrorStatus
X = np.array([[1, 2], [3, 4]], np.float32)


class RawClient:
    def __init__(self, path: str, hello: bool = True):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.sock.settimeout(10)
        self.chan = Channel(self.sock)
        if hello:
            self.send(wire.ENCODER.encode(wire.Hello()))
            assert type(self.recv()) is wire.Attach

    def send(self, body: bytes, fds: Any = None) -> None:
        self.chan.send(body, list(fds or []))

    def raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv(self) -> Any:
        body, fds = self.chan.recv()
        transport.close_fds(fds)
        return wire.ENVELOPE.decode(body)

    def call(self, cid: int, method: str, args: Any, target: bytes = b"", fds: Any = None) -> Any:
        self.send(wire.ENCODER.encode(wire.CallOut(cid, target, method, args)), fds)
        return self.recv()

    def closed_by_peer(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, BrokenPipeError):
            return True

    def close(self) -> None:
        self.chan.close()


@pytest.fixture(scope="module")
def path(service_process: Any) -> str:
    return str(service_process.socket_path)


def still_serving(service: Any) -> None:
    pm = prepared_model(add_model(), service)
    with Pools([X, X * 3], [16]) as pools:
        assert execute_sync(pm, pools.request())[0] == S.NONE
        np.testing.assert_array_equal(pools.output(0, np.float32, (2, 2)), X * 4)


def settled_fds(pid: int, expect: int, timeout: float = 5.0) -> int:
    end = time.monotonic() + timeout
    n = proc_counts(pid)["fds"]
    while n > expect and time.monotonic() < end:
        time.sleep(0.05)
        n = proc_counts(pid)["fds"]
    return n


@pytest.fixture
def baseline(service: Any, service_process: Any) -> Any:
    service.getStatus()
    time.sleep(0.1)
    base = proc_counts(service_process.pid)["fds"]
    yield base
    still_serving(service)
    assert settled_fds(service_process.pid, base) <= base, "descriptors leaked in the service"


def test_junk_before_the_handshake(path: str, baseline: int) -> None:
    c = RawClient(path, hello=False)
    c.raw(os.urandom(64))
    assert c.closed_by_peer()
    c.close()


def test_junk_body_closes(path: str, baseline: int) -> None:
    c = RawClient(path)
    c.send(b"\xc1\xc1\xc1 not msgpack")
    assert c.closed_by_peer()
    c.close()


def test_malformed_arguments_are_invalid(path: str, baseline: int) -> None:
    c = RawClient(path)
    for k, (method, args) in enumerate([
        ("getSupportedOperations_1_3", ["junk"]),
        ("getSupportedOperations_1_3", []),  # too few arguments
        ("prepareModel_1_3", [None, 1, 1, None, None, None, b"", b"x", "extra"]),
        ("getStatus", [1, 2, 3]),
    ], start=1):
        env = c.call(k, method, args)
        assert type(env) is wire.Fail and env.cid == k and env.status == S.INVALID_ARGUMENT, (method, env)
    # NOTE: an operand type is any 32-bit number on the wire (extension types are (prefix << 16) | type): an
    # unknown one decodes and the driver's validation answers INVALID_ARGUMENT
    env = c.call(9, "getSupportedOperations_1_3", [{"main": {"operands": [{"type": 999}]}}])
    assert type(env) is wire.Reply and msgspec.msgpack.decode(env.result)[0] == S.INVALID_ARGUMENT, env
    # well-typed, but a forged prepared model: the driver sees a null one and refuses
    env = c.call(19, "allocate", [{"dimensions": [2, 2]}, [b"forged" * 3], [{"modelIndex": 0, "ioIndex": 0,
                                                                           "frequency": 1.0}], []])
    assert type(env) is wire.Reply and msgspec.msgpack.decode(env.result)[0] == S.INVALID_ARGUMENT
    env = c.call(20, "noSuchMethod", [])
    assert type(env) is wire.Fail and env.status == S.INVALID_ARGUMENT
    env = c.call(21, "executeSynchronously_1_3", [None, 0, None, None], target=os.urandom(16))
    assert type(env) is wire.Fail and env.status == S.INVALID_ARGUMENT  # an object nobody was given
    env = c.call(22, "getStatus", [])
    assert type(env) is wire.Reply and msgspec.msgpack.decode(env.result) == hal.DeviceStatus.AVAILABLE
    # a call envelope whose fields have the wrong types, but a readable call id
    c.send(msgspec.msgpack.encode([0, 23, "not bytes", 5, []]))
    env = c.recv()
    assert type(env) is wire.Fail and env.cid == 23 and env.status == S.INVALID_ARGUMENT
    c.close()


def test_descriptors_that_match_no_handle(path: str, baseline: int) -> None:
    c = RawClient(path)
    r, w = os.pipe()
    try:
        env = c.call(1, "getStatus", [], fds=[r, w, r])
        assert type(env) is wire.Fail and env.status == S.INVALID_ARGUMENT
        # a memory with two placeholder fds but one descriptor sent
        model = msgspec.to_builtins(add_model(), builtin_types=(bytes,))
        model["pools"] = [{"name": "ashmem", "handle": {"fds": [0, 1], "ints": []}, "size": 4}]
        env = c.call(2, "getSupportedOperations_1_3", [model], fds=[r])
        assert type(env) is wire.Fail and env.status == S.INVALID_ARGUMENT
        # a pipe where shared memory belongs: the driver says INVALID_ARGUMENT
        model["pools"] = [{"name": "ashmem", "handle": {"fds": [0], "ints": []}, "size": 4}]
        env = c.call(3, "getSupportedOperations_1_3", [model], fds=[r])
        assert type(env) is wire.Reply
        assert msgspec.msgpack.decode(env.result)[0] == S.INVALID_ARGUMENT
    finally:
        os.close(r)
        os.close(w)
        c.close()


def test_too_many_descriptors(path: str, baseline: int) -> None:
    c = RawClient(path)
    fds = [os.open(os.devnull, os.O_RDONLY) for _ in range(transport.MAX_FDS + 40)]
    try:
        body = wire.ENCODER.encode(wire.CallOut(1, b"", "getStatus", []))
        header = struct.pack("<II", len(body), len(fds))
        try:
            socket.send_fds(c.sock, [header + body], fds)
        except OSError:
            pass  # the kernel's own limit (253) may refuse first
        assert c.closed_by_peer()
    finally:
        for fd in fds:
            os.close(fd)
        c.close()


def test_missing_descriptors(path: str, baseline: int) -> None:
    c = RawClient(path)
    body = wire.ENCODER.encode(wire.CallOut(1, b"", "getStatus", []))
    c.raw(struct.pack("<II", len(body), 3) + body)  # announces 3, sends none
    assert c.closed_by_peer()
    c.close()


def test_oversized_frame(path: str, baseline: int) -> None:
    c = RawClient(path)
    c.raw(struct.pack("<II", 0xFFFFFFF0, 0) + b"x" * 100)
    assert c.closed_by_peer()
    c.close()


def test_truncated_frame_then_gone(path: str, baseline: int) -> None:
    c = RawClient(path)
    c.raw(struct.pack("<II", 1000, 0) + b"x" * 10)
    c.close()


def test_nesting_bomb(path: str, baseline: int) -> None:
    c = RawClient(path)
    c.send(b"\x95\x00\x01\xc4\x00\xa9getStatus" + b"\x91" * 200_000 + b"\xc0")
    env = c.recv()
    assert type(env) is wire.Fail and env.cid == 1 and env.status == S.INVALID_ARGUMENT
    c.send(b"\x91" * 200_000 + b"\xc0")  # no call id to answer: disconnected
    assert c.closed_by_peer()
    c.close()
    c = RawClient(path)
    env = c.call(5, "getSupportedOperations_1_3", msgspec.Raw(b"\x91" * 100_000 + b"\xc0"))
    assert type(env) is wire.Fail and env.status == S.INVALID_ARGUMENT
    c.close()


def test_forged_session_and_second_handshake(path: str, baseline: int) -> None:
    c = RawClient(path, hello=False)
    c.send(wire.ENCODER.encode(wire.Attach(os.urandom(32))))
    assert c.closed_by_peer()
    c.close()
    c = RawClient(path)
    c.send(wire.ENCODER.encode(wire.Hello()))
    assert c.closed_by_peer()
    c.close()


def test_calls_flood_on_the_main_channel(path: str, baseline: int) -> None:
    c = RawClient(path)
    body = b"".join(struct.pack("<II", len(b), 0) + b for b in
                    (wire.ENCODER.encode(wire.CallOut(k, b"", "getStatus", [])) for k in range(1, 2001)))
    try:
        c.raw(body)
    except (BrokenPipeError, ConnectionResetError):
        pass
    answered = 0
    try:
        while answered < 2000:
            env = c.recv()
            assert type(env) in (wire.Reply, wire.Fail)
            answered += 1
    except (transport.PeerClosed, OSError):
        pass  # over the in-flight limit: disconnected
    c.close()


def test_malformed_burst_packets_through_the_service(service: Any, service_process: Any) -> None:
    """VTS ValidateBurst's idea across the process boundary: every malformed
    request packet on a burst to the service gets an error result; the
    service then still serves correctly."""
    import random

    from nnhal.platform import burst_packets as bp
    from nnhal.platform.fmq import MessageQueue

    pm = prepared_model(add_model(), service)
    pools = Pools([X, X], [16])
    memories = {0: pools.in_mem, 1: pools.out_mem}

    class Slots(hal.IBurstCallback):
        def getMemories(self, slots: list) -> tuple:
            try:
                return S.NONE, [memories[s] for s in slots]
            except KeyError:
                return S.INVALID_ARGUMENT, []

    requests = MessageQueue.create(bp.DATUM_SIZE, 1024, "writer")
    results = MessageQueue.create(bp.DATUM_SIZE, 1024, "reader")
    try:
        status, context = pm.configureExecutionBurst(Slots(), requests.descriptor(), results.descriptor())
        assert status == S.NONE and context is not None
        requests.release_descriptor()
        results.release_descriptor()
        req = pools.request()
        good = bp.encode_request(req.inputs, req.outputs, [0, 1], 0)
        requests.write_blocking(good, 10)
        assert bp.decode_result(results.read_packet_blocking(10))[0] == S.NONE
        datums = [good[k:k + bp.DATUM_SIZE] for k in range(0, len(good), bp.DATUM_SIZE)]
        rng = random.Random(7)
        variants = [b"".join(datums[:k] + datums[k + 1:]) for k in range(len(datums))]  # one datum removed
        variants += [b"".join(datums[:k] + [bytes(rng.randrange(256) for _ in range(bp.DATUM_SIZE))] + datums[k + 1:])
                     for k in range(len(datums)) for _ in range(4)]  # one datum random
        errors = 0
        for v in variants:
            requests.write_blocking(v, 10)
            errors += bp.decode_result(results.read_packet_blocking(10))[0] != S.NONE
        assert errors >= len(datums)  # at least every removal fails
        requests.write_blocking(good, 10)
        assert bp.decode_result(results.read_packet_blocking(10))[0] == S.NONE
        np.testing.assert_array_equal(pools.output(0, np.float32, (2, 2)), X * 2)
        context.freeMemory(0)
    finally:
        requests.close()
        results.close()
        pools.close()
    still_serving(service)


def _memfds(n: int = 3) -> list[int]:
    return [os.memfd_create(f"junk{k}", os.MFD_CLOEXEC) for k in range(n)]


def _undecodable_frames() -> list[tuple[str, bytes, bool]]:
    """(kind, body, answered): each way a frame can fail to decode.  ``answered``:
    the frame names a call id (INVALID_ARGUMENT for it), else the connection ends."""
    enc = msgspec.msgpack.encode
    bad_str = b"\xa2\xff\xfe"  # a msgpack str of invalid UTF-8
    call = enc([0, 7, b"", "getStatus", []])
    return [
        ("invalid UTF-8 in the method name", b"\x95\x00\x07\xc4\x00" + bad_str + b"\x90", True),
        ("invalid UTF-8 in a Fail message", b"\x93\x02\x07\x00" + bad_str, False),
        ("invalid UTF-8 in the arguments", b"\x95\x00\x07\xc4\x00\xb9getSupportedOperations_1_3\x91\x81"
         + bad_str + b"\x01", True),
        ("not msgpack", b"\xc1\xc1\xc1", False),
        ("truncated", call[:-2], True),
        ("trailing bytes", call + b"\x00", True),
        ("unknown tag", enc([9, 7]), False),
        ("wrong field types", enc([0, 7, "not bytes", 5, []]), True),
        ("nesting bomb", b"\x95\x00\x07\xc4\x00\xa9getStatus" + b"\x91" * 100_000 + b"\xc0", True),
        ("a huge announced array", b"\x95\x00\x07\xc4\x00\xa9getStatus\xdd\xff\xff\xff\xff", True),
        ("a Release with an invalid UTF-8 ref list", b"\x92\x03" + bad_str, False),
    ]


@pytest.mark.parametrize("channel", ["main", "call channel"])
def test_undecodable_frames_close_their_descriptors(path: str, baseline: int, service_process: Any,
                                                     channel: str) -> None:
    """Issue 17 item 2: every kind of undecodable frame, sent with 3 memfds,
    20 times: INVALID_ARGUMENT when a call id can be read, else the
    connection closed; every descriptor closed in the service either way."""
    for kind, body, answered in _undecodable_frames():
        for _ in range(20):
            c = RawClient(path)
            if channel == "call channel":
                c.close()
                c = RawClient(path, hello=False)
                c.send(wire.ENCODER.encode(wire.Hello()))
                session = c.recv().session
                chan = RawClient(path, hello=False)
                chan.send(wire.ENCODER.encode(wire.Attach(session)))
                assert type(chan.recv()) is wire.Reply
                target, owner = chan, c
            else:
                target, owner = c, None
            fds = _memfds()
            try:
                target.send(body, fds)
            finally:
                transport.close_fds(fds)
            if answered:
                env = target.recv()
                assert type(env) is wire.Fail and env.cid == 7 and env.status == S.INVALID_ARGUMENT, (kind, env)
                # the channel keeps serving
                env = target.call(8, "getStatus", [])
                assert type(env) is wire.Reply, kind
            else:
                assert target.closed_by_peer(), kind
            target.close()
            if owner is not None:
                owner.close()
        assert settled_fds(service_process.pid, baseline) <= baseline, f"descriptors leaked: {kind}"
