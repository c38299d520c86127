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

Frames on a socket pair: a 4-byte length, a JSON header, then the arrays' raw bytes (their dtypes and
shapes in the header).  Nothing is unpickled either way: the parent reads the child's answers as it
reads a file (dtypes from a fixed set, shapes, sizes within ``$NNHAL_TFLITE_MAX_BYTES``), since a child
running a hostile model is not trusted either.

Cost: one round trip per call, the arrays copied through the socket (``python -m
nnhal.tools.contain_cost`` prints it); the child times LiteRT itself, and benchmarks use that time
(:class:`TimedRuns`).  ``NNHAL_LITERT_IN_PROCESS=1`` runs LiteRT in nnhal's own process instead
(models one trusts; the cost's baseline).
"""

from __future__ import annotations

import json
import math
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


# --------------------------------------------------------------------------- frames (both sides)


def send_frame(sock: socket.socket, header: dict, arrays: Sequence[np.ndarray] = (), payload: bytes = b"") -> None:
    """``header`` (JSON) with ``arrays`` (described in it as ``"arrays"``) and then ``payload`` bytes."""
    arrays = [np.asarray(a, order="C") for a in arrays]  # NOTE: not ascontiguousarray, which makes a scalar [1]
    header = dict(header, arrays=[[a.dtype.name, list(a.shape)] for a in arrays],
                  nbytes=sum(a.nbytes for a in arrays) + len(payload))
    head = json.dumps(header).encode()
    bufs = [struct.pack("<I", len(head)) + head] + [memoryview(a).cast("B") for a in arrays if a.nbytes]
    if payload:
        bufs.append(memoryview(payload))
    for b in bufs:
        sock.sendall(b)


def _recv_into(sock: socket.socket, view: memoryview) -> None:
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if n == 0:
            raise EOFError("the other side closed")
        got += n


def recv_frame(sock: socket.socket, max_bytes: int) -> tuple[dict, list[np.ndarray], bytes]:
    """(header, arrays, the remaining payload bytes) of one frame; ValueError for a malformed one (a size
    beyond ``max_bytes``, an unknown dtype, a shape that does not add up), EOFError when closed."""
    n = bytearray(4)
    _recv_into(sock, memoryview(n))
    size = struct.unpack("<I", n)[0]
    if size > MAX_HEADER:
        raise ValueError(f"a header of {size} bytes")
    raw = bytearray(size)
    _recv_into(sock, memoryview(raw))
    header = json.loads(raw)
    if not isinstance(header, dict):
        raise ValueError("a header that is not an object")
    total = header.get("nbytes", 0)
    specs = header.get("arrays", [])
    if not isinstance(total, int) or not 0 <= total <= max_bytes or not isinstance(specs, list):
        raise ValueError(f"{total!r} bytes of data")
    arrays, used = [], 0
    for spec in specs:
        if not (isinstance(spec, list) and len(spec) == 2 and spec[0] in DTYPES and isinstance(spec[1], list)
                and all(isinstance(d, int) and 0 <= d <= max_bytes for d in spec[1])):
            raise ValueError(f"an array described as {spec!r}")
        dt = np.dtype(spec[0])
        size = math.prod(spec[1]) * dt.itemsize
        if size > total - used:  # NOTE: checked before anything is allocated for it
            raise ValueError("arrays larger than the data")
        used += size
        a = np.empty(spec[1], dt)
        if a.nbytes:
            _recv_into(sock, memoryview(a).cast("B"))
        arrays.append(a)
    rest = bytearray(total - used)
    if rest:
        _recv_into(sock, memoryview(rest))
    return header, arrays, bytes(rest)


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
                send_frame(self.sock, header, arrays, payload)
                reply, outs = self._answer(self._wall(runs))
            except (OSError, EOFError, ValueError, TimeoutError) as e:
                raise self._ended(e, label, doing, status) from None
        if not reply.get("ok"):
            why = str(reply.get("error", "") or "LiteRT failed")[:2000]
            # NOTE: a refusal while preparing is said by the caller, which names the engine its own way
            raise LiteRTError(why if status == 2 else f"LiteRT failed {doing} {label}: {why}")
        return reply, outs

    def _answer(self, wall: float) -> tuple[dict, list[np.ndarray]]:
        r, _, _ = select.select([self.sock], [], [], wall)
        if not r:
            raise TimeoutError(f"no answer in {wall:.0f} s")
        self.sock.settimeout(wall)
        try:
            header, arrays, _ = recv_frame(self.sock, self.max_bytes)
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
        """End the child (its interpreters with it) and release the socket and the log file."""
        if self.sock.fileno() >= 0:
            self.sock.close()
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
                 inputs: Sequence[np.ndarray] = ()):
        self.process, self.label = process, label
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
        if not self.process.dead and self.process.sock.fileno() >= 0:
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
    own = process is None
    proc = process if process is not None else LiteRTProcess()
    try:
        lr = ContainedLiteRT(proc, source, threads, kernels, preserve, label)
    except BaseException:
        if own:
            proc.close()
        raise
    if own:
        close = lr.close

        def close_all() -> None:
            close()
            proc.close()

        lr.close = close_all  # type: ignore[method-assign]
    return lr


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
