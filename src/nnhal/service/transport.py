"""Frames over a Unix-domain stream socket, with file descriptors.

The binding's stand-in for binder's transaction buffer: a frame is an 8-byte
header (body length, descriptor count; little-endian u32) and a msgpack body
(:mod:`nnhal.service.wire`), sent with one ``sendmsg`` that carries the
frame's descriptors as SCM_RIGHTS.  SOCK_STREAM, not SOCK_SEQPACKET: a
SEQPACKET record must fit in the socket buffer (about 200 KB unprivileged),
and a model's ``operandValues`` may be megabytes.

The kernel hands the descriptors of a ``sendmsg`` to the ``recvmsg`` that
reads the first byte of it, and never merges the descriptors of two
``sendmsg`` calls, so the receiver keeps received descriptors in a FIFO and
gives each complete frame the number its header announces.  Every received
descriptor is close-on-exec and either given to exactly one frame or closed.

Limits (a peer that breaks them is disconnected; nothing is allocated before
the bytes arrive): :data:`MAX_MESSAGE` bytes per frame, :data:`MAX_FDS`
descriptors per frame.
"""

from __future__ import annotations

import array
import errno
import os
import socket
import struct
import threading
import time
from collections import deque
from typing import Any, Optional

MAX_MESSAGE = 256 * 1024 * 1024
MAX_FDS = 128
_HEADER = struct.Struct("<II")
_RECV_SIZE = 256 * 1024
_CMSG_SPACE = socket.CMSG_SPACE(MAX_FDS * 4)
_CLOEXEC = getattr(socket, "MSG_CMSG_CLOEXEC", 0)
_SPIN_FLAGS = _CLOEXEC | int(socket.MSG_DONTWAIT)
_clock = time.perf_counter_ns
_yield = os.sched_yield
_CTRUNC = int(socket.MSG_CTRUNC)  # NOTE: a plain int: ``flags & MSG_CTRUNC`` would go through enum.Flag per frame


class ProtocolError(Exception):
    """The peer broke the framing rules: the connection must be closed."""


class PeerClosed(Exception):
    """The peer closed the connection (or it failed)."""


def close_fds(fds: list[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


class Channel:
    """One connected socket: thread-safe :meth:`send`, single-reader :meth:`recv`."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self._send_lock = threading.Lock()
        self._buf = bytearray()
        self._rbuf = bytearray(_RECV_SIZE)
        self._rview = memoryview(self._rbuf)
        self._fds: deque[int] = deque()
        self.closed = False

    def send(self, body: bytes, fds: Optional[list[int]] = None) -> None:
        """Send one frame; raises PeerClosed if the peer is gone, OSError
        (EBADF...) for bad descriptors, ValueError for a frame over the limits."""
        n = len(body)
        nfds = len(fds) if fds else 0
        if n > MAX_MESSAGE:
            raise ValueError(f"message of {n} bytes exceeds the limit of {MAX_MESSAGE}")
        if nfds > MAX_FDS:
            raise ValueError(f"{nfds} file descriptors exceed the limit of {MAX_FDS} per message")
        header = _HEADER.pack(n, nfds)
        anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if nfds else []
        with self._send_lock:
            if self.closed:
                raise PeerClosed("connection closed")
            try:
                sent = self.sock.sendmsg([header, body], anc)
                total = n + _HEADER.size
                if sent < total:  # NOTE: a signal or a full buffer cut the send short; the rest has no fds
                    rest = (header + body)[sent:] if sent < _HEADER.size else memoryview(body)[sent - _HEADER.size:]
                    self.sock.sendall(rest)
            except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError) as e:
                raise PeerClosed(str(e)) from None
            except OSError as e:
                if e.errno in (errno.EPIPE, errno.ENOTCONN, errno.ESHUTDOWN):
                    raise PeerClosed(str(e)) from None
                raise

    def recv(self, spin_ns: int = 0) -> tuple[bytes, list[int]]:
        """The next frame: (body, descriptors).  Raises PeerClosed at EOF and
        ProtocolError for a frame over the limits or with missing descriptors.

        ``spin_ns``: poll for the frame for up to that long before blocking
        (see :class:`Spin`)."""
        buf = self._buf
        if not buf and not self._fds:
            # NOTE: the common case: one whole frame arrives in one read, nothing pending:
            # taken straight from the receive buffer (no staging copy)
            frame = self._fill(direct=True, spin_ns=spin_ns)
            if frame is not None:
                return frame
        while True:
            if len(buf) >= _HEADER.size:
                n, nfds = _HEADER.unpack_from(buf)
                if n > MAX_MESSAGE or nfds > MAX_FDS:
                    raise ProtocolError(f"frame of {n} bytes and {nfds} descriptors is over the limits")
                end = _HEADER.size + n
                if len(buf) >= end:
                    if len(self._fds) < nfds:
                        raise ProtocolError(f"frame announces {nfds} descriptors, {len(self._fds)} arrived")
                    body = bytes(memoryview(buf)[_HEADER.size:end])
                    del buf[:end]
                    fds = [self._fds.popleft() for _ in range(nfds)]
                    return body, fds
            self._fill()

    def _fill(self, direct: bool = False, spin_ns: int = 0) -> Optional[tuple[bytes, list[int]]]:
        """Read what arrived; with ``direct``, return the frame at once when the
        read holds exactly one whole frame (else it is staged as usual)."""
        try:
            # NOTE: into a buffer kept for the connection: recvmsg() would allocate (and, at
            # this size, mmap and unmap) a fresh 256 KB bytes object per call (~50 us)
            got = self._spin(spin_ns) if spin_ns > 0 else None
            n, anc, flags, _ = got or self.sock.recvmsg_into([self._rbuf], _CMSG_SPACE, _CLOEXEC)
        except (ConnectionResetError, ConnectionAbortedError, BrokenPipeError) as e:
            raise PeerClosed(str(e)) from None
        except OSError as e:
            if self.closed or e.errno in (errno.EBADF, errno.ENOTCONN):
                raise PeerClosed(str(e)) from None
            raise
        for level, kind, cdata in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds = array.array("i")
                fds.frombytes(cdata[: len(cdata) - len(cdata) % fds.itemsize])
                self._fds.extend(fds)
        if flags & _CTRUNC:
            raise ProtocolError(f"more than {MAX_FDS} descriptors in one message")
        if len(self._fds) > 2 * MAX_FDS:
            raise ProtocolError("descriptors sent without frames")
        if not n:
            raise PeerClosed("end of stream")
        if direct and n >= _HEADER.size:
            size, nfds = _HEADER.unpack_from(self._rbuf)
            if n == _HEADER.size + size and nfds == len(self._fds) and size <= MAX_MESSAGE and nfds <= MAX_FDS:
                fds = list(self._fds)
                self._fds.clear()
                return bytes(self._rview[_HEADER.size:n]), fds
        self._buf += self._rview[:n]
        return None

    def _spin(self, spin_ns: int) -> Optional[tuple]:
        """Non-blocking reads for up to ``spin_ns``: what arrived, or None."""
        end = _clock() + spin_ns
        sock, bufs = self.sock, [self._rbuf]
        while True:
            try:
                return sock.recvmsg_into(bufs, _CMSG_SPACE, _SPIN_FLAGS)
            except BlockingIOError:
                pass
            if _clock() >= end:
                return None
            _yield()  # NOTE: a loaded machine runs its other work instead; an idle one returns at once

    def close(self) -> None:
        """Close the socket and every descriptor received but not handed out."""
        with self._send_lock:
            self.closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        fds, self._fds = list(self._fds), deque()
        close_fds(fds)


class Pending:
    """A call waiting for its answer: ``lock`` is released once ``value``
    (and the answer's descriptors ``fds``) are set by the reader."""

    __slots__ = ("lock", "value", "fds")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.lock.acquire()
        self.value: Any = None
        self.fds: list[int] = []
