"""The child process of :mod:`nnhal.delegate.contain`: LiteRT interpreters on models nnhal did not
build, served over the socket the parent passes (its descriptor, the memory allowance in bytes, the
CPU seconds one call may use per LiteRT thread: ``python -m nnhal.delegate.litert_child FD BYTES
SECONDS``).

Requests (``op``): ``create`` (``kind`` "litert": :class:`~nnhal.delegate.run.LiteRT` on the payload's
bytes or ``path``; "floor": :class:`~nnhal.delegate.run.DataPathFloor` on ``path`` and the arrays),
``run`` (the arrays as inputs: the outputs and the run's own seconds), ``times`` (``n`` timed runs),
``tensor``, ``close``.  LiteRT's own errors are answered (``ok`` false); anything LiteRT does to the
process (a signal, the CPU timer's SIGPROF, an allocation beyond the limit) ends it, which the parent
reports.  The address space is capped at what it holds at start plus the allowance plus four times
each model's size (RLIMIT_AS, soft limit).
"""

from __future__ import annotations

import os
import resource
import signal
import socket
import sys
import time
from typing import Any

import numpy as np


def _vm_size() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def _cap(nbytes: int) -> None:
    """Soft RLIMIT_AS at ``nbytes`` (never above the hard limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    want = nbytes if hard == resource.RLIM_INFINITY else min(nbytes, hard)
    resource.setrlimit(resource.RLIMIT_AS, (want, hard))


class _Server:
    def __init__(self, sock: socket.socket, allowance: int, cpu: float):
        from nnhal.delegate.litert import LiteRT, timed

        self.LiteRT, self.timed = LiteRT, timed
        self.sock, self.cpu = sock, cpu
        self.engines: dict[int, Any] = {}
        self.threads: dict[int, int] = {}
        self.limit = _vm_size() + allowance
        _cap(self.limit)

    def _timer(self, threads: int) -> None:
        # NOTE: SIGPROF's default action ends the process: a LiteRT call looping in C++ cannot be
        # interrupted any other way; the parent reports the signal as a hang
        signal.setitimer(signal.ITIMER_PROF, self.cpu * max(1, threads))

    def handle(self, h: dict, arrays: list[np.ndarray], payload: bytes) -> tuple[dict, list[np.ndarray]]:
        op, k = h.get("op"), int(h.get("id", 0))
        if op == "create":
            threads = int(h.get("threads", 1))
            src = payload if h.get("path") is None else str(h["path"])
            self.limit += 4 * (len(payload) if h.get("path") is None else _file_size(src))
            _cap(self.limit)
            self._timer(threads)
            t0 = time.perf_counter()
            if h.get("kind") == "floor":
                from nnhal.delegate.run import DataPathFloor  # NOTE: the rest of nnhal, for nnhal bench --floor only

                e = DataPathFloor(src, arrays, threads=threads)
                lr = e.lr
            else:
                e = lr = self.LiteRT(src, threads=threads, kernels=str(h.get("kernels", "builtin")),
                                     preserve=bool(h.get("preserve")))
            t1 = time.perf_counter()
            signal.setitimer(signal.ITIMER_PROF, 0)
            self.engines[k], self.threads[k] = e, threads
            return {"ok": True, "seconds": t1 - t0, "inputs": _details(lr.inputs),
                    "outputs": _details(lr.outputs)}, []
        e = self.engines[k]
        if op == "run":
            self._timer(self.threads[k])
            t0 = time.perf_counter()
            outs = e.run(arrays)
            t1 = time.perf_counter()
            signal.setitimer(signal.ITIMER_PROF, 0)
            return {"ok": True, "seconds": t1 - t0}, outs
        if op == "times":
            out = []
            for _ in range(int(h.get("n", 1))):
                self._timer(self.threads[k])
                out += self.timed(lambda: e.run(arrays), 1, warmup=0)
                signal.setitimer(signal.ITIMER_PROF, 0)
            return {"ok": True, "times": out}, []
        if op == "tensor":
            return {"ok": True}, [e.tensor(int(h["index"]))]
        if op == "close":
            if not isinstance(e, self.LiteRT):
                e.close()  # NOTE: a DataPathFloor's pool
            del self.engines[k], self.threads[k]
            return {"ok": True}, []
        return {"ok": False, "error": f"unknown request {op!r}"}, []

    def serve(self) -> None:
        from nnhal.delegate.contain import DTYPES, Channel

        ch = Channel(self.sock, 1 << 62)
        ch.send({"ok": True, "ready": True})
        pending: list[np.ndarray] = []
        while True:
            try:
                h, arrays, payload = ch.recv(copy=False)
            except EOFError:
                return
            try:
                if h.get("op") == "fetch":  # NOTE: the last answer's arrays, now that the region holds them
                    reply, outs = {"ok": True}, pending
                else:
                    reply, outs = self.handle(h, arrays, payload)
                odd = [a.dtype for a in outs if a.dtype.name not in DTYPES]
                if odd:
                    raise ValueError(f"LiteRT gives a tensor of type {odd[0]}, which nnhal does not read")
                if Channel.need(outs) > ch.size:
                    reply, pending, outs = {"ok": True, "need": Channel.need(outs)}, outs, []
                else:
                    pending = []
            except MemoryError:
                signal.setitimer(signal.ITIMER_PROF, 0)
                reply, outs = {"ok": False, "error": f"LiteRT ran out of the memory it may use ({self.limit} "
                                                     "bytes of address space: NNHAL_TFLITE_MAX_BYTES)"}, []
            except (RuntimeError, ValueError, KeyError, IndexError, TypeError) as e:
                signal.setitimer(signal.ITIMER_PROF, 0)
                # NOTE: LiteRT's failed allocations come as a RuntimeError without a message
                why = str(e).strip() or (f"LiteRT failed without saying why (as it does when an allocation fails: "
                                         f"this process may use {self.limit} bytes of address space, "
                                         "NNHAL_TFLITE_MAX_BYTES)")
                reply, outs = {"ok": False, "error": why}, []
            arrays = []  # NOTE: no view of the region is left when the next request may replace it
            ch.send(reply, outs)


def _file_size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _details(ds: list) -> list[dict]:
    return [{"index": int(d["index"]), "name": str(d.get("name", "")), "shape": [int(x) for x in d["shape"]],
             "dtype": np.dtype(d["dtype"]).name} for d in ds]


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGPROF, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # NOTE: Ctrl-C is the parent's to handle; it closes the socket
    sock = socket.socket(fileno=int(argv[0]))
    _Server(sock, int(argv[1]), float(argv[2])).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
