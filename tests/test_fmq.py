"""The fast message queue (nnhal.platform.fmq): whole-packet writes and reads, blocking
with wake-ups and timeouts, peer death, another process, and descriptors or
headers that a hostile peer corrupted."""

from __future__ import annotations

import fcntl
import os
import socket
import struct
import subprocess
import sys
import threading
import time

import pytest

from nnhal import hal
from nnhal.platform.fmq import FmqError, FmqPeerGone, FmqTimeout, MessageQueue

ES = 24


def _elems(*values: int) -> bytes:
    return b"".join(struct.pack("<I20x", v) for v in values)


def _read_after_write(w: MessageQueue, r: MessageQueue, packet: bytes, delay: float) -> tuple[list, float]:
    """A reader thread blocks; ``delay`` s later the packet is written.  Returns
    ([packet read, when it was read], when it was written)."""
    got: list = []

    def reader() -> None:
        got.append(r.read_packet_blocking(5.0))
        got.append(time.perf_counter())

    t = threading.Thread(target=reader)
    t.start()
    time.sleep(delay)
    t0 = time.perf_counter()
    w.write(packet)
    t.join(5)
    return got, t0


@pytest.fixture
def pair():  # noqa: ANN201
    w = MessageQueue.create(ES, 8, "writer")
    r = MessageQueue.open(w.descriptor(), ES, "reader")
    w.release_descriptor()
    try:
        yield w, r
    finally:
        w.close()
        r.close()


def test_write_read_and_wrap_around(pair) -> None:  # noqa: ANN001
    w, r = pair
    assert r.available_to_read() == 0 and w.available_to_write() == 8
    for k in range(20):  # many times round the ring of 8
        pkt = _elems(*range(k, k + 3))
        assert w.write(pkt)
        assert r.available_to_read() == 3
        assert r.read(3) == pkt
    assert r.read(1) is None


def test_packet_is_all_or_nothing(pair) -> None:  # noqa: ANN001
    w, r = pair
    assert w.write(_elems(1, 2, 3, 4, 5, 6))
    assert not w.write(_elems(7, 8, 9))  # 2 free: nothing of the 3 is written
    assert r.read_all() == _elems(1, 2, 3, 4, 5, 6)
    with pytest.raises(FmqError, match="never fit"):
        w.write(_elems(*range(9)))
    with pytest.raises(FmqError, match="elements"):
        w.write(b"\x00" * 25)
    with pytest.raises(FmqError, match="reading end"):
        r.write(_elems(1))


def test_blocking_read_wakes_fast_and_times_out(pair) -> None:  # noqa: ANN001
    w, r = pair
    with pytest.raises(FmqTimeout):
        r.read_packet_blocking(0.05)
    got, t0 = _read_after_write(w, r, _elems(42, 43), 0.1)
    assert got[0] == _elems(42, 43)
    assert got[1] - t0 < 0.05  # woken by the signal, not by a timeout


def test_blocking_write_waits_for_space(pair) -> None:  # noqa: ANN001
    w, r = pair
    w.write(_elems(*range(8)))
    with pytest.raises(FmqTimeout):
        w.write_blocking(_elems(9), 0.05)
    threading.Timer(0.05, lambda: r.read(4)).start()
    w.write_blocking(_elems(9, 10), 5.0)
    assert r.read_all() == _elems(4, 5, 6, 7, 9, 10)


def test_idle_wait_does_not_spin(pair) -> None:  # noqa: ANN001
    _, r = pair
    cpu: list = []

    def reader() -> None:
        c0 = time.thread_time()
        with pytest.raises(FmqTimeout):
            r.read_packet_blocking(0.5)
        cpu.append(time.thread_time() - c0)

    t = threading.Thread(target=reader)
    t.start()
    t.join(5)
    assert cpu[0] < 0.05


def test_peer_close_is_seen(pair) -> None:  # noqa: ANN001
    w, r = pair
    assert r.peer_alive() and w.peer_alive()
    threading.Timer(0.05, w.close).start()
    with pytest.raises(FmqPeerGone):
        r.read_packet_blocking(5.0)
    assert not r.peer_alive()


def test_interrupt_wakes_a_blocked_reader(pair) -> None:  # noqa: ANN001
    _, r = pair
    threading.Timer(0.05, r.interrupt).start()
    with pytest.raises(FmqPeerGone):
        r.read_packet_blocking(5.0)


def test_close_is_idempotent_and_frees_fds() -> None:
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(20):
        w = MessageQueue.create(ES, 16)
        r = MessageQueue.open(w.descriptor(), ES, "reader")
        w.close()
        w.close()
        r.close()
    assert len(os.listdir("/proc/self/fd")) == before
    with pytest.raises(FmqError, match="closed"):
        r.read(1)


_CHILD = r"""
import sys
from nnhal import hal
from nnhal.platform.fmq import MessageQueue
req = MessageQueue.open(hal.Handle(fds=[int(sys.argv[1]), int(sys.argv[2])], ints=[int(v) for v in sys.argv[3:7]]),
                        24, "reader")
res = MessageQueue.open(hal.Handle(fds=[int(sys.argv[7]), int(sys.argv[8])], ints=[int(v) for v in sys.argv[9:13]]),
                        24, "writer")
while True:
    try:
        pkt = req.read_packet_blocking(10)
    except Exception:
        break
    res.write_blocking(pkt[::-1], 10)
"""


def test_another_process() -> None:
    """The descriptor alone (fds passed to a child, ints as text) makes the
    other end; the child's death is seen as end of file."""
    req = MessageQueue.create(ES, 64, "writer")
    res = MessageQueue.create(ES, 64, "reader")
    hr, hs = req.descriptor(), res.descriptor()
    args = [str(v) for v in [*hr.fds, *hr.ints, *hs.fds, *hs.ints]]
    child = subprocess.Popen([sys.executable, "-c", _CHILD, *args], pass_fds=[*hr.fds, *hs.fds])
    try:
        req.release_descriptor()
        res.release_descriptor()
        for k in range(50):
            pkt = _elems(k, k + 1, k + 2)
            req.write_blocking(pkt, 10)
            assert res.read_packet_blocking(10) == pkt[::-1]
        child.kill()
        child.wait(10)
        with pytest.raises(FmqPeerGone):
            res.read_packet_blocking(10)
    finally:
        child.kill()
        child.wait(10)
        req.close()
        res.close()


# ---------------------------------------------------------------------------
# descriptors and headers from a hostile peer


def _bad_descriptors(q: MessageQueue) -> list:
    good = q.descriptor()
    unsealed = os.memfd_create("x", os.MFD_CLOEXEC)
    os.ftruncate(unsealed, 64 + ES * 8)
    small = os.memfd_create("y", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(small, 100)
    fcntl.fcntl(small, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
    efd = os.eventfd(0, os.EFD_CLOEXEC)
    dgram = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    closed = os.dup(good.fds[0])
    os.close(closed)
    fds, ints = good.fds, good.ints
    cases = [
        ("not a handle", fds),
        ("one fd", hal.Handle(fds=fds[:1], ints=ints)),
        ("three ints", hal.Handle(fds=fds, ints=ints[:3])),
        ("bad magic", hal.Handle(fds=fds, ints=[1, *ints[1:]])),
        ("bad version", hal.Handle(fds=fds, ints=[ints[0], 9, *ints[2:]])),
        ("other element size", hal.Handle(fds=fds, ints=[*ints[:2], 16, ints[3]])),
        ("capacity 0", hal.Handle(fds=fds, ints=[*ints[:3], 0])),
        ("capacity too large for the memory", hal.Handle(fds=fds, ints=[*ints[:3], 9])),
        ("huge capacity", hal.Handle(fds=fds, ints=[*ints[:3], 1 << 40])),
        ("bool int", hal.Handle(fds=fds, ints=[*ints[:3], True])),
        ("closed fd", hal.Handle(fds=[closed, fds[1]], ints=ints)),
        ("negative fd", hal.Handle(fds=[-1, fds[1]], ints=ints)),
        ("unsealed memfd", hal.Handle(fds=[unsealed, fds[1]], ints=ints)),
        ("small memfd", hal.Handle(fds=[small, fds[1]], ints=ints)),
        ("socket as memory", hal.Handle(fds=[fds[1], fds[1]], ints=ints)),
        ("eventfd as socket", hal.Handle(fds=[fds[0], efd], ints=ints)),
        ("datagram socket", hal.Handle(fds=[fds[0], dgram[0].fileno()], ints=ints)),
        ("memfd as socket", hal.Handle(fds=[fds[0], fds[0]], ints=ints)),
    ]
    return cases, [unsealed, small, efd], dgram


def test_bad_descriptors_are_rejected() -> None:
    q = MessageQueue.create(ES, 8)
    cases, fds, socks = _bad_descriptors(q)
    try:
        before = len(os.listdir("/proc/self/fd"))
        for name, h in cases:
            with pytest.raises(FmqError):
                MessageQueue.open(h, ES, "reader")
                pytest.fail(name)
        assert len(os.listdir("/proc/self/fd")) == before  # nothing leaked on the error paths
    finally:
        q.close()
        for fd in fds:
            os.close(fd)
        for s in socks:
            s.close()


def _header(q: MessageQueue) -> memoryview:
    return memoryview(q._mm)  # noqa: SLF001 - the test plays the hostile peer


@pytest.mark.parametrize("w_ctr, r_ctr", [(100, 0), (0, 5), (2**64 - 1, 0), (9, 0), (1 << 40, (1 << 40) - 9)])
def test_corrupt_counters_give_errors(w_ctr: int, r_ctr: int) -> None:
    """Each end trusts its own counter (kept privately) and checks the
    peer's: a counter that puts more than the capacity, or less than nothing,
    in the queue is an error on that end, never an out-of-bounds access."""
    w = MessageQueue.create(ES, 8, "writer")
    r = MessageQueue.open(w.descriptor(), ES, "reader")
    try:
        w.write(_elems(1))  # the writer's own counter is 1, the reader's 0
        hdr = _header(w)
        struct.pack_into("=QQ", hdr, 16, w_ctr, r_ctr)
        hdr.release()
        if 0 <= w_ctr <= 8:
            assert r.available_to_read() == w_ctr
        else:
            with pytest.raises(FmqError, match="corrupt"):
                r.read_packet_blocking(0.1)
        if r_ctr <= 1 <= r_ctr + 8:
            assert w.available_to_write() == 8 - (1 - r_ctr)
        else:
            with pytest.raises(FmqError, match="corrupt"):
                w.write(_elems(2))
        if not r_ctr <= w_ctr <= r_ctr + 8:  # an end opened on a corrupt header is refused
            with pytest.raises(FmqError, match="corrupt"):
                MessageQueue.open(w.descriptor(), ES, "reader").close()
    finally:
        w.close()
        r.close()


def test_corrupt_header_fields_refused_at_open() -> None:
    w = MessageQueue.create(ES, 8)
    try:
        hdr = _header(w)
        struct.pack_into("<I", hdr, 12, 1 << 20)  # capacity in the header != descriptor
        hdr.release()
        with pytest.raises(FmqError, match="header"):
            MessageQueue.open(w.descriptor(), ES, "reader")
    finally:
        w.close()


def test_junk_on_the_signal_socket_is_harmless(pair) -> None:  # noqa: ANN001
    """A peer flooding its socket end only wakes the reader, which finds nothing."""
    w, r = pair
    w._sock.send(b"x" * 10000)  # noqa: SLF001
    with pytest.raises(FmqTimeout):
        r.read_packet_blocking(0.1)
    w.write(_elems(5))
    assert r.read_packet_blocking(1) == _elems(5)


def test_stress_two_threads_whole_packets_in_order() -> None:
    """A writer and a reader thread, packets of 1..7 elements through a ring of
    16: every packet arrives whole, in order, never torn."""
    w = MessageQueue.create(ES, 16, "writer")
    r = MessageQueue.open(w.descriptor(), ES, "reader")
    n = 3000
    sizes = [1 + (k * 7919) % 7 for k in range(n)]
    errors: list = []

    def writer() -> None:
        try:
            for k, m in enumerate(sizes):
                w.write_blocking(_elems(*[k * 8 + j for j in range(m)]), 10)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    t = threading.Thread(target=writer)
    t.start()
    try:
        for k, m in enumerate(sizes):
            got = r.read_blocking(m, 10)
            assert got == _elems(*[k * 8 + j for j in range(m)]), k
    finally:
        t.join(10)
        w.close()
        r.close()
    assert not errors


# ---------------------------------------------------------------------------
# polling before blocking (nnhal.platform.spin)


def test_polling_read_gets_a_packet_written_during_the_window(pair) -> None:  # noqa: ANN001
    w, r = pair
    pkt = _elems(7, 8)
    t = threading.Timer(0.002, lambda: w.write_blocking(pkt, 5))
    t.start()
    try:
        assert r.read_packet_blocking(5, spin_ns=500_000_000) == pkt
    finally:
        t.join(5)


def test_polling_falls_back_to_blocking_and_times_out(pair) -> None:  # noqa: ANN001
    w, r = pair
    t0 = time.monotonic()
    with pytest.raises(FmqTimeout):
        r.read_packet_blocking(0.05, spin_ns=10_000_000)  # 10 ms of polling, then a blocking wait
    assert 0.04 < time.monotonic() - t0 < 2
    # a packet written after the polling window still wakes the blocked reader
    t = threading.Timer(0.05, lambda: w.write_blocking(_elems(1), 5))
    t.start()
    try:
        assert r.read_packet_blocking(5, spin_ns=1_000_000) == _elems(1)
    finally:
        t.join(5)


def test_polling_sees_peer_death_and_close(pair) -> None:  # noqa: ANN001
    w, r = pair
    w.close()
    with pytest.raises(FmqPeerGone):
        r.read_packet_blocking(5, spin_ns=1_000_000)
    r.close()
    with pytest.raises(FmqError):
        r.read_packet_blocking(5, spin_ns=1_000_000)


def test_polling_validates_corrupt_counters(pair) -> None:  # noqa: ANN001
    w, r = pair
    w._counters[0] = 1 << 40  # a hostile writer: far beyond the capacity
    with pytest.raises(FmqError, match="corrupt"):
        r.read_packet_blocking(1, spin_ns=1_000_000)


def test_created_elsewhere_tells_processes_apart(pair) -> None:  # noqa: ANN001
    w, r = pair
    assert not w.created_elsewhere() and not r.created_elsewhere()  # both ends made in this process
    q = MessageQueue.create(ES, 4, "writer")
    h = q.descriptor()
    code = ("import sys; from nnhal import hal; from nnhal.platform.fmq import MessageQueue; "
            "fds = [int(v) for v in sys.argv[1:3]]; ints = [int(v) for v in sys.argv[3:]]; "
            f"q = MessageQueue.open(hal.Handle(fds=fds, ints=ints), {ES}, 'reader'); print(q.created_elsewhere())")
    try:
        out = subprocess.run([sys.executable, "-c", code, *map(str, h.fds), *map(str, h.ints)], pass_fds=h.fds,
                             capture_output=True, text=True, timeout=60)
        assert out.stdout.strip() == "True", out.stderr
    finally:
        q.close()


def test_no_signal_when_nobody_waits(pair) -> None:  # noqa: ANN001
    """A side that polls needs no wake-up: publishing sends nothing then."""
    w, r = pair
    w.write(_elems(1))
    assert r.read_all() == _elems(1)
    for end in (r, w):  # neither "data written" nor "space freed" was sent
        with pytest.raises(BlockingIOError):
            end._sock.recv(16, socket.MSG_DONTWAIT)


def test_a_lost_wake_up_costs_milliseconds_not_a_hang(pair, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    w, r = pair
    monkeypatch.setattr(w, "_signal", lambda what: None)  # the writer never signals
    got, t0 = _read_after_write(w, r, _elems(5), 0.05)
    assert got and got[0] == _elems(5)
    assert got[1] - t0 < 2.0  # found by a re-check slice (at most about a second)


def test_a_peer_that_clears_our_waiting_flag_only_slows_itself(pair) -> None:  # noqa: ANN001
    w, r = pair
    got: list = []
    t = threading.Thread(target=lambda: got.append(r.read_packet_blocking(5.0)))
    t.start()
    time.sleep(0.05)
    w._waiting[0] = 0  # hostile: the reader's flag cleared, so no signal comes
    w.write(_elems(9))
    t.join(5)
    assert got == [_elems(9)]
