"""The service's frames and wire schema without a service: descriptors stay
with their frame across many frames and large ones, limits hold, the
schema rejects wrong types, handles are found in the same order on both
sides."""

from __future__ import annotations

import os
import socket
import threading

import msgspec
import pytest

from nnhal import hal
from nnhal.service import transport, wire
from nnhal.service.transport import Channel


def _pair() -> tuple[Channel, Channel]:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    return Channel(a), Channel(b)


def _ident(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def test_descriptors_stay_with_their_frames() -> None:
    a, b = _pair()
    pipes = [os.pipe() for _ in range(6)]
    plan = [(b"small", [pipes[0][0]]), (b"x" * 3_000_000, [pipes[1][0], pipes[2][1]]), (b"none", []),
            (b"y" * 700_000, []), (b"z", [pipes[3][0], pipes[4][0], pipes[5][1]])]

    def send() -> None:
        for body, fds in plan:
            a.send(body, fds)

    t = threading.Thread(target=send)
    t.start()
    try:
        for body, fds in plan:
            got, got_fds = b.recv()
            assert got == body
            assert [_ident(f) for f in got_fds] == [_ident(f) for f in fds]
            transport.close_fds(got_fds)
    finally:
        t.join()
        for r, w in pipes:
            os.close(r)
            os.close(w)
        a.close()
        b.close()


def test_limits() -> None:
    a, b = _pair()
    with pytest.raises(ValueError):
        a.send(b"x", list(range(transport.MAX_FDS + 1)))
    a.sock.sendall(b"\xff\xff\xff\xff\x00\x00\x00\x00")
    with pytest.raises(transport.ProtocolError):
        b.recv()
    a.close()
    b.close()
    a, b = _pair()
    a.close()
    with pytest.raises(transport.PeerClosed):
        b.recv()
    b.close()


def test_schema_rejects_wrong_types() -> None:
    spec = wire.METHODS["IPreparedModel"]["executeSynchronously_1_3"]
    good = wire.ENCODER.encode((hal.Request(), 1, None, hal.OptionalTimeoutDuration(5)))
    request, measure, deadline, timeout = spec.arg_decoder.decode(good)
    assert isinstance(request, hal.Request) and measure == 1 and deadline is None and timeout.nanoseconds == 5
    for bad in [(hal.Request(), "yes", None, None), ("request", 1, None, None), (hal.Request(), 1, None),
                ({"inputs": [{"location": {"poolIndex": -1.5}}]}, 0, None, None)]:
        with pytest.raises(msgspec.ValidationError):
            spec.arg_decoder.decode(wire.ENCODER.encode(bad))
    assert spec.error(hal.ErrorStatus.DEVICE_UNAVAILABLE) == (hal.ErrorStatus.DEVICE_UNAVAILABLE, [], hal.Timing())


def test_handles_found_in_the_same_order_both_sides() -> None:
    m1 = hal.Memory("ashmem", hal.Handle([11], []), 4)
    m2 = hal.Memory("mmap_fd", hal.Handle([12], [3, 0, 0]), 4)
    req = hal.Request(pools=[hal.MemoryPool(hidlMemory=m1), hal.MemoryPool(token=3), hal.MemoryPool(hidlMemory=m2)])
    args = (req, [hal.Handle([13]), hal.Handle([14, 15])], 0, None, None, None)
    assert wire.collect_fds(args) == [11, 12, 13, 14, 15]
    spec = wire.METHODS["IPreparedModel"]["executeFenced"]
    decoded = list(spec.arg_decoder.decode(wire.ENCODER.encode(args)))
    assert wire.install_fds(decoded, [21, 22, 23, 24, 25])
    assert decoded[0].pools[0].hidlMemory.handle.fds == [21] and decoded[0].pools[2].hidlMemory.handle.fds == [22]
    assert [h.fds for h in decoded[1]] == [[23], [24, 25]]
    assert not wire.install_fds(list(spec.arg_decoder.decode(wire.ENCODER.encode(args))), [1, 2])
    with pytest.raises(TypeError):
        wire.collect_fds((hal.Handle(["3"]),))


def test_every_method_has_a_decoder() -> None:
    for iface, methods in wire.METHODS.items():
        for name, spec in methods.items():
            assert spec.arg_decoder is not None and spec.result_decoder is not None, (iface, name)
            if spec.callback is not None:
                assert spec.notify, (iface, name)
    for iface in ("IDevice", "IPreparedModel", "IBuffer", "IBurstContext", "IFencedExecutionCallback"):
        hal_methods = {n for n in vars(getattr(hal, iface)) if not n.startswith("_")}
        assert hal_methods <= set(wire.METHODS[iface]), (iface, hal_methods - set(wire.METHODS[iface]))


# ---------------------------------------------------------------------------
# polling before blocking (nnhal.platform.spin)


def test_spin_window_adapts_to_the_waits() -> None:
    from nnhal.platform.spin import Spin

    s = Spin(100_000)
    assert s.window() == 100_000
    for _ in range(20):
        s.waited(5_000_000)  # answers take 5 ms: polling would only burn CPU
    assert s.window() == 0
    for _ in range(40):
        s.waited(20_000)  # quick again: polling comes back
    assert s.window() == 100_000
    assert Spin(0).window() == 0


def test_spin_limit_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from nnhal.platform.spin import MAX_SPIN_US, spin_limit_ns

    monkeypatch.delenv("NNHAL_IPC_SPIN_US", raising=False)
    assert spin_limit_ns(250) == 250_000
    monkeypatch.setenv("NNHAL_IPC_SPIN_US", "0")
    assert spin_limit_ns(250) == 0
    monkeypatch.setenv("NNHAL_IPC_SPIN_US", "junk")
    assert spin_limit_ns(250) == 250_000
    monkeypatch.setenv("NNHAL_IPC_SPIN_US", str(10 * MAX_SPIN_US))
    assert spin_limit_ns(250) == MAX_SPIN_US * 1000


def test_polling_recv_gets_frames_and_descriptors_in_and_after_the_window() -> None:
    a, b = _pair()
    r, w = os.pipe()
    try:
        t = threading.Timer(0.002, lambda: a.send(b"hello", [r]))
        t.start()
        body, fds = b.recv(spin_ns=500_000_000)  # arrives while polling
        t.join(5)
        assert body == b"hello" and len(fds) == 1 and _ident(fds[0]) == _ident(r)
        os.close(fds[0])
        t = threading.Timer(0.05, lambda: a.send(b"late", []))
        t.start()
        assert b.recv(spin_ns=1_000_000) == (b"late", [])  # after the window: the blocking read
        t.join(5)
        a.close()
        with pytest.raises(transport.PeerClosed):
            b.recv(spin_ns=1_000_000)
    finally:
        os.close(r)
        os.close(w)
        b.close()
