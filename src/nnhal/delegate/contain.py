"""LiteRT contained: the interpreters nnhal runs on models it did not build and check itself live in a
child process (``python -m nnhal.delegate.litert_child``), so that LiteRT crashing or looping on a
malformed model ends that process, never nnhal.

Where: the delegate plan's CPU partitions (:mod:`nnhal.delegate.runner`), ``nnhal run --compare`` /
``--per-tensor``'s LiteRT on the original file, ``nnhal bench``'s LiteRT columns and ``--floor``.  Not
the ``litert-cpu`` driver: it runs only models nnhal lowered itself from a HAL model its front end
validated, each operation through ``check_operation`` (which refuses the LiteRT kernels known to crash
on what the HAL allows); a crash there would be nnhal's bug, not a file's.

What ends the child: a signal (SIGSEGV, SIGABRT, ...); more than ``$NNHAL_LITERT_TIMEOUT`` seconds of
CPU in one call (default 60, per LiteRT thread: the child's own CPU timer, whose SIGPROF ends it), or a
call ten times as long (at least 2 minutes) in wall time, when the parent kills it; memory beyond
what it may use (its address space after start-up grows by at most ``$NNHAL_TFLITE_MAX_BYTES`` plus
four times the models it holds plus 512 MiB: LiteRT's allocation fails there).  :class:`LiteRTCrash`
then says which engine (the label: the CPU partition and its operators, "LiteRT on the original
model", ...), what it was doing, the signal and LiteRT's last line on stderr, with the command's exit
status: 2 while preparing (the model cannot run), 3 while running (an execution failed).

Frames on a socket pair (a 4-byte length, a JSON header, inline bytes for a model), the arrays in a
shared memory region the parent sizes (:class:`Channel`).  Nothing is unpickled either way: the parent
reads the child's answers as it reads a file (dtypes from a fixed set, shapes and offsets inside the
region, sizes within ``$NNHAL_TFLITE_MAX_BYTES``) and copies the arrays out, since a child running a
hostile model is not trusted either.

Cost: one round trip per call, each array copied into the region and out (``python -m
nnhal.tools.contain_cost`` prints it); the child times LiteRT itself, and benchmarks use that time
(:class:`TimedRuns`).  ``NNHAL_LITERT_IN_PROCESS=1`` runs LiteRT in nnhal's own process instead
(models one trusts; the cost's baseline).
"""

from __future__ import annotations

import json
import math
import mmap
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np

from nnhal.tflite.schema import quiet_litert

IN_PROCESS_ENV = "NNHAL_LITERT_IN_PROCESS"
TIMEOUT_ENV = "NNHAL_LITERT_TIMEOUT"
# dtypes an answer may carry (LiteRT's tensor types nnhal reads)
DTYPES = frozenset({"float32", "float16", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64",
                    "uint64", "bool", "complex64", "complex128"})
MAX_HEADER = 1 << 20
SLACK_BYTES = 512 << 20  # the child's allowance beyond the tensor limit and its models (thread stacks, arenas)


class LiteRTError(RuntimeError):
    """LiteRT refused the model or the execution (its own error message, as in process)."""


class LiteRTCrash(RuntimeError):
    """The LiteRT process ended (a signal, a hang, memory) or answered nonsense: ``status`` is the command's
    exit status (2 while preparing, 3 while running)."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


def in_process() -> bool:
    """Whether LiteRT runs in nnhal's own process (``$NNHAL_LITERT_IN_PROCESS`` set to 1)."""
    return os.environ.get(IN_PROCESS_ENV, "").strip() not in ("", "0")


def timeout_seconds() -> float:
    """CPU seconds one LiteRT call may use per thread (``$NNHAL_LITERT_TIMEOUT``, default 60)."""
    try:
        return max(0.1, float(os.environ.get(TIMEOUT_ENV, "") or 60.0))
    except ValueError:
        return 60.0


# --------------------------------------------------------------------------- the channel (both sides)


def _aligned(n: int) -> int:
    return (n + 63) // 64 * 64


class Channel:
    """One side of the socket pair.  A frame: a 4-byte length, a JSON header, then ``nbytes`` inline bytes
    (a model); arrays travel through a shared memory region (a memfd both sides map, the parent's to size:
    it sends its descriptor with the frame that first needs it), described in the header as ``[dtype,
    shape, offset]``.  What is received is checked as a file would be (:meth:`recv`)."""

    def __init__(self, sock: socket.socket, max_bytes: int):
        self.sock, self.max_bytes = sock, max_bytes
        self.shm: Optional[mmap.mmap] = None

    @property
    def size(self) -> int:
        return len(self.shm) if self.shm is not None else 0

    def grow(self, need: int) -> int:
        """A new region of at least ``need`` bytes (mapped here): its descriptor, to send and then close."""
        size = max(1 << 20, 1 << max(0, need - 1).bit_length())
        fd = os.memfd_create("nnhal-litert", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, size)
            self._map(fd, size)
        except OSError:
            os.close(fd)
            raise
        return fd

    def _map(self, fd: int, size: int) -> None:
        self.close()
        self.shm = mmap.mmap(fd, size)

    @staticmethod
    def need(arrays: Sequence[np.ndarray]) -> int:
        return sum(_aligned(np.asarray(a).nbytes) for a in arrays)

    def send(self, header: dict, arrays: Sequence[np.ndarray] = (), payload: bytes = b"", fd: int = -1) -> None:
        """``header`` with ``arrays`` placed in the region (which must hold :meth:`need` of them), ``payload``
        inline, ``fd`` (a region's descriptor) passed along."""
        specs, off = [], 0
        for a in arrays:
            a = np.asarray(a)
            if a.nbytes:
                assert self.shm is not None and off + a.nbytes <= self.size
                np.frombuffer(self.shm, a.dtype, a.size, off).reshape(a.shape)[...] = a
            specs.append([a.dtype.name, list(a.shape), off])
            off += _aligned(a.nbytes)
        head = json.dumps(dict(header, arrays=specs, nbytes=len(payload))).encode()
        first = struct.pack("<I", len(head))
        if fd >= 0:
            socket.send_fds(self.sock, [first], [fd])
        else:
            self.sock.sendall(first)
        self.sock.sendall(head)
        if payload:
            self.sock.sendall(payload)

    def _exactly(self, view: memoryview) -> None:
        got = 0
        while got < len(view):
            n = self.sock.recv_into(view[got:])
            if n == 0:
                raise EOFError("the other side closed")
            got += n

    def recv(self, copy: bool) -> tuple[dict, list[np.ndarray], bytes]:
        """(header, arrays, inline bytes) of one frame, adopting a region passed with it; arrays are copies
        (``copy``) or views of the region.  ValueError for a malformed frame (a header beyond 1 MiB or not an
        object, inline bytes or a region beyond ``max_bytes``, an unknown dtype, an array outside the
        region), EOFError when the other side is gone."""
        first, fds, _, _ = socket.recv_fds(self.sock, 4, 1)
        if not first:
            raise EOFError("the other side closed")
        try:
            if fds:
                size = os.fstat(fds[0]).st_size
                if size > self.max_bytes + (1 << 20) or size < 0:
                    raise ValueError(f"a shared region of {size} bytes")
                self._map(fds[0], size)
        finally:
            for fd in fds:
                os.close(fd)
        n = bytearray(first.ljust(4, b"\0"))
        if len(first) < 4:
            self._exactly(memoryview(n)[len(first):])
        size = struct.unpack("<I", n)[0]
        if size > MAX_HEADER:
            raise ValueError(f"a header of {size} bytes")
        raw = bytearray(size)
        self._exactly(memoryview(raw))
        try:
            header = json.loads(raw)
        except RecursionError:  # NOTE: nesting deeper than the parser's stack
            raise ValueError("a header nested too deep") from None
        if not isinstance(header, dict):
            raise ValueError("a header that is not an object")
        nbytes, specs = header.get("nbytes", 0), header.get("arrays", [])
        if not isinstance(nbytes, int) or not 0 <= nbytes <= self.max_bytes or not isinstance(specs, list):
            raise ValueError(f"{nbytes!r} bytes of data")
        arrays = [self._array(spec, copy) for spec in specs]
        rest = bytearray(nbytes)
        if rest:
            self._exactly(memoryview(rest))
        return header, arrays, bytes(rest)

    def _array(self, spec: Any, copy: bool) -> np.ndarray:
        if not (isinstance(spec, list) and len(spec) == 3 and spec[0] in DTYPES and isinstance(spec[1], list)
                and all(isinstance(d, int) and 0 <= d <= self.max_bytes for d in spec[1])
                and isinstance(spec[2], int) and spec[2] >= 0):
            raise ValueError(f"an array described as {spec!r}")
        dt = np.dtype(spec[0])
        n = math.prod(spec[1])
        if n * dt.itemsize + spec[2] > self.size:  # NOTE: checked before anything is made of it
            raise ValueError(f"an array of {n * dt.itemsize} bytes at {spec[2]} in a region of {self.size}")
        if n == 0:
            return np.zeros(spec[1], dt)
        view = np.frombuffer(self.shm, dt, n, spec[2]).reshape(spec[1])
        return view.copy() if copy else view

    def close(self) -> None:
        if self.shm is not None:
            try:
                self.shm.close()
            except BufferError:
                pass  # NOTE: a view of it is still held: the mapping goes with the last one
            self.shm = None


# --------------------------------------------------------------------------- the parent's side


def _signal_name(rc: int) -> str:
    try:
        return signal.Signals(-rc).name
    except ValueError:
        return f"signal {-rc}"


class LiteRTProcess:
    """One child process holding LiteRT interpreters; started at once (it imports LiteRT while the caller
    goes on), used by :class:`ContainedLiteRT`.  ``max_bytes``: the tensor limit (default
    ``$NNHAL_TFLITE_MAX_BYTES``), which bounds answers and the child's memory."""

    def __init__(self, max_bytes: Optional[int] = None):
        from nnhal.tflite.verify import default_max_bytes

        self.max_bytes = default_max_bytes() if max_bytes is None else int(max_bytes)
        self.cpu = timeout_seconds()
        self._lock = threading.Lock()
        self._next = 0
        self.dead = ""  # why it ended, once it has
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock = parent
        self.channel = Channel(parent, self.max_bytes)
        self._err = None if not quiet_litert() else tempfile.TemporaryFile()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "nnhal.delegate.litert_child", str(child.fileno()),
                 str(self.max_bytes + SLACK_BYTES), repr(self.cpu)],
                pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=self._err, env={**os.environ, "PYTHONSAFEPATH": "1",
                                       **({} if self._err is not None else {"NNHAL_LITERT_LOG": "1"})})
        except BaseException:
            parent.close()
            self._close_err()
            raise
        finally:
            child.close()
        self._ready = False

    def _wall(self, runs: int = 1) -> float:
        return max(120.0, 10 * self.cpu) * max(1, runs)

    def call(self, header: dict, arrays: Sequence[np.ndarray] = (), payload: bytes = b"", *, label: str,
             doing: str, status: int, runs: int = 1) -> tuple[dict, list[np.ndarray]]:
        """One request and its answer; LiteRTError for LiteRT's own refusal, LiteRTCrash when the process
        ends, hangs or answers nonsense (``doing``: what it was doing, for the message; ``status``: the
        exit status the crash means)."""
        with self._lock:
            if self.dead:
                raise LiteRTCrash(f"LiteRT's process for {label} ended earlier ({self.dead})", status)
            try:
                if not self._ready:
                    self._answer(self._wall())
                    self._ready = True
                self._send(header, arrays, payload)
                reply, outs = self._answer(self._wall(runs))
                if reply.get("ok") and "need" in reply:  # NOTE: the answer's arrays need a larger region
                    need = reply["need"]
                    if not isinstance(need, int) or not 0 < need <= self.max_bytes:
                        raise LiteRTError(f"LiteRT's answer {doing} {label} needs {need!r} bytes, above the limit of "
                                          f"{self.max_bytes} (NNHAL_TFLITE_MAX_BYTES)")
                    self._send({"op": "fetch"}, grow=need)
                    reply, outs = self._answer(self._wall())
            except (OSError, EOFError, ValueError, TimeoutError) as e:
                raise self._ended(e, label, doing, status) from None
        if not reply.get("ok"):
            why = str(reply.get("error", "") or "LiteRT failed")[:2000]
            # NOTE: a refusal while preparing is said by the caller, which names the engine its own way
            raise LiteRTError(why if status == 2 else f"LiteRT failed {doing} {label}: {why}")
        return reply, outs

    def _send(self, header: dict, arrays: Sequence[np.ndarray] = (), payload: bytes = b"", grow: int = 0) -> None:
        need = max(grow, Channel.need(arrays))
        fd = self.channel.grow(need) if need > self.channel.size else -1
        try:
            self.channel.send(header, arrays, payload, fd)
        finally:
            if fd >= 0:
                os.close(fd)

    def _answer(self, wall: float) -> tuple[dict, list[np.ndarray]]:
        poll = select.poll()
        poll.register(self.sock, select.POLLIN)
        if not poll.poll(wall * 1e3):
            raise TimeoutError(f"no answer in {wall:.0f} s")
        self.sock.settimeout(wall)
        try:
            header, arrays, _ = self.channel.recv(copy=True)
        finally:
            self.sock.settimeout(None)
        return header, arrays

    def _ended(self, e: BaseException, label: str, doing: str, status: int) -> LiteRTCrash:
        """The process is gone (or made to go): why, in one line."""
        if isinstance(e, (TimeoutError, ValueError)):
            self.proc.kill()
        try:
            rc = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        if isinstance(e, TimeoutError):
            why = f"hung: {e}"
        elif isinstance(e, ValueError) and rc in (0, -signal.SIGKILL):
            why = f"answered nonsense ({e})"
        elif rc == -signal.SIGPROF:
            why = f"hung: used more than {self.cpu:g} s of CPU (NNHAL_LITERT_TIMEOUT)"
        elif rc < 0:
            why = f"crashed: {_signal_name(rc)}"
        else:
            why = f"exited with status {rc}"
        last = self._last_line()
        self.dead = why
        self.close()
        return LiteRTCrash(f"LiteRT {why} {doing} {label}" + (f" (its last message: {last})" if last else ""),
                           status)

    def _last_line(self) -> str:
        if self._err is None:
            return ""
        try:
            self._err.seek(0, os.SEEK_END)
            size = self._err.tell()
            self._err.seek(max(0, size - 4096))
            lines = [ln.strip() for ln in self._err.read().decode(errors="replace").splitlines()]
        except (OSError, ValueError):
            return ""
        lines = [ln for ln in lines if ln and not ln.startswith("INFO:")]
        return lines[-1][:300] if lines else ""

    def new_id(self) -> int:
        self._next += 1
        return self._next

    def peak_rss_mb(self) -> float:
        """The child's peak resident memory (MB), NaN once it has ended."""
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) / 1024.0
        except OSError:
            pass
        return math.nan

    def _close_err(self) -> None:
        if self._err is not None:
            self._err.close()
            self._err = None

    def close(self) -> None:
        """End the child (its interpreters with it) and release the socket, the shared region and the log file."""
        if self.sock.fileno() >= 0:
            self.sock.close()
        self.channel.close()
        if self.proc.poll() is None:
            try:
                self.proc.wait(timeout=5)  # NOTE: the child ends when the socket closes
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._close_err()

    def __enter__(self) -> "LiteRTProcess":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class ContainedLiteRT:
    """LiteRT's interpreter in a :class:`LiteRTProcess`, with :class:`nnhal.delegate.run.LiteRT`'s interface
    (``inputs`` / ``outputs`` details with ``index``, ``name``, ``shape``, ``dtype``; ``run``; ``tensor``)
    and the child's own timings: ``init_seconds`` (interpreter created and allocated), ``seconds`` (the
    last run), :meth:`times`.  ``kind`` "floor": :class:`nnhal.delegate.run.DataPathFloor` on ``source``
    (a path) and ``inputs``.  ``label`` names it in a crash."""

    def __init__(self, process: LiteRTProcess, source: str | Path | bytes, threads: int = 1, kernels: str = "builtin",
                 preserve: bool = False, label: str = "LiteRT", kind: str = "litert",
                 inputs: Sequence[np.ndarray] = (), owns_process: bool = False):
        self.process, self.label, self.owns_process = process, label, owns_process
        self.id = process.new_id()
        is_bytes = isinstance(source, (bytes, bytearray))
        header = {"op": "create", "id": self.id, "kind": kind, "threads": threads, "kernels": kernels,
                  "preserve": preserve, "path": None if is_bytes else str(source)}
        reply, _ = process.call(header, list(inputs), bytes(source) if is_bytes else b"", label=label,
                                doing="preparing", status=2)
        self.inputs = self._details(reply.get("inputs"))
        self.outputs = self._details(reply.get("outputs"))
        self.init_seconds = float(reply.get("seconds", math.nan))
        self.seconds = math.nan

    def _details(self, ds: Any) -> list[dict]:
        if not isinstance(ds, list) or not all(isinstance(d, dict) and isinstance(d.get("index"), int) for d in ds):
            raise LiteRTCrash(f"LiteRT's process answered nonsense preparing {self.label}", 2)
        return ds

    def _outs(self, outs: list, want: int, doing: str) -> list[np.ndarray]:
        if len(outs) != want:
            raise LiteRTCrash(f"LiteRT's process answered {len(outs)} arrays for {want} {doing} {self.label}", 3)
        return outs

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        reply, outs = self.process.call({"op": "run", "id": self.id}, list(inputs), label=self.label,
                                        doing="running", status=3)
        self.seconds = float(reply.get("seconds", math.nan))
        return self._outs(outs, len(self.outputs), "running")

    def times(self, inputs: Sequence[np.ndarray], n: int) -> list[float]:
        """Seconds of each of ``n`` runs on ``inputs``, by the child's own timer (as ``timed`` would in process)."""
        reply, _ = self.process.call({"op": "times", "id": self.id, "n": int(n)}, list(inputs), label=self.label,
                                     doing="running", status=3, runs=n)
        t = reply.get("times")
        if not isinstance(t, list) or len(t) != n or not all(isinstance(v, (int, float)) for v in t):
            raise LiteRTCrash(f"LiteRT's process answered nonsense timing {self.label}", 3)
        return [float(v) for v in t]

    def tensor(self, k: int) -> np.ndarray:
        try:
            _, outs = self.process.call({"op": "tensor", "id": self.id, "index": int(k)}, label=self.label,
                                        doing="reading a tensor of", status=3)
        except LiteRTError as e:
            raise ValueError(str(e)) from None  # NOTE: as LiteRT's get_tensor for a tensor it did not keep
        return self._outs(outs, 1, "reading a tensor of")[0]

    def close(self) -> None:
        """Free the interpreter in its process (and end the process when it is this interpreter's own)."""
        if self.owns_process:
            self.process.close()
        elif not self.process.dead and self.process.sock.fileno() >= 0:
            try:
                self.process.call({"op": "close", "id": self.id}, label=self.label, doing="closing", status=3)
            except RuntimeError:
                pass  # NOTE: a process that ended has nothing left to close


def open_litert(source: str | Path | bytes, threads: int = 1, kernels: str = "builtin", preserve: bool = False,
                label: str = "LiteRT", process: Optional[LiteRTProcess] = None) -> Any:
    """LiteRT's interpreter on a model nnhal did not build: in ``process`` (default: a new
    :class:`LiteRTProcess`, ended with the interpreter's ``close``) unless :func:`in_process`."""
    from nnhal.delegate.run import LiteRT

    if in_process():
        return LiteRT(source, threads=threads, kernels=kernels, preserve=preserve)
    proc = process if process is not None else LiteRTProcess()
    try:
        return ContainedLiteRT(proc, source, threads, kernels, preserve, label, owns_process=process is None)
    except BaseException:
        if process is None:
            proc.close()
        raise


class TimedRuns:
    """A run that benchmarks time through ``times(n)`` (seconds per run as the engine measures them: a
    contained LiteRT by its child's timer, a plan without its round trips to LiteRT's process);
    ``overhead()``: the seconds of the last call that its own timing leaves out."""

    def __init__(self, run: Callable[[], Any], times: Callable[[int], list[float]],
                 overhead: Callable[[], float] = lambda: 0.0):
        self._run, self._times, self.overhead = run, times, overhead

    def __call__(self) -> Any:
        return self._run()

    def times(self, n: int) -> list[float]:
        return self._times(n)


def block_times(fn: Callable[[], Any], n: int) -> list[float]:
    """Seconds of ``n`` runs of ``fn`` (its own :meth:`TimedRuns.times` when it has them)."""
    from nnhal.delegate.run import timed

    return fn.times(n) if isinstance(fn, TimedRuns) else timed(fn, n, warmup=0)


def describe_operators(names: Sequence[str], indexes: Sequence[int]) -> str:
    """``operator 3 CONV_2D`` or ``operators 3-17: CONV_2D, ADD, ...`` for a crash message."""
    if len(indexes) == 1:
        return f"operator {indexes[0]} {names[0]}"
    kinds = list(dict.fromkeys(names))
    return (f"operators {min(indexes)}-{max(indexes)}: " + ", ".join(kinds[:4]) + (", ..." if len(kinds) > 4 else ""))
