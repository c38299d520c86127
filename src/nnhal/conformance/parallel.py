"""Running the conformance models in worker processes (``nnhal conformance --jobs N``).

Each worker is ``python -m nnhal.conformance.parallel``: it opens its own
device (an in-process driver, or its own connection to a driver service),
builds its own :class:`~nnhal.conformance.runner.Runner`, and runs the
models the parent sends it one at a time, so the work balances itself.
Parent and workers speak length-prefixed msgpack frames (msgspec) over the
workers' stdin / stdout -- never pickle: only plain data crosses the process
boundary (a job is a vector file path and a model index in it; a reply is
that model's :class:`CaseResult` list).

A worker that dies takes only the model it was running with it: that model
is recorded as failed, naming the exit status, and a new worker takes its
place.  Workers ignore SIGINT: on Ctrl-C the parent stops them and keeps the
results that came back.
"""

from __future__ import annotations

import os
import selectors
import signal
import struct
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Callable, Optional, Sequence

import msgspec

from nnhal.conformance.runner import CaseResult

_LEN = struct.Struct("<I")
MAX_FRAME = 1 << 30


@dataclass
class WorkerConfig:
    """What every worker needs to run models as the parent would."""
    device: str
    modes: list[str]
    variants: list[str]
    memory: str
    log_level: int = 50
    hal: str = "hidl"  # the face the device is judged through (nnhal.conformance.face)
    extra: dict[str, Any] = field(default_factory=dict)  # options other runners may add (e.g. a device list)


class Job(msgspec.Struct):
    id: int
    file: str
    index: int


class Reply(msgspec.Struct):
    id: int
    results: list[CaseResult]


def _write(f: BinaryIO, payload: bytes) -> None:
    f.write(_LEN.pack(len(payload)) + payload)
    f.flush()


def _read(f: BinaryIO) -> Optional[bytes]:
    head = f.read(_LEN.size)
    if len(head) < _LEN.size:
        return None
    (n,) = _LEN.unpack(head)
    if n > MAX_FRAME:
        raise ValueError(f"frame of {n} bytes")
    data = f.read(n)
    return data if len(data) == n else None


def make_runner(device: Any, modes: Sequence[str], variants: Sequence[str], memory: str,
                devices: Sequence[str] = ()) -> Any:
    """The runner of a run: the HAL runner on ``device`` (a device or one of
    its faces), or with ``devices`` (``--devices A,B``) the client runtime's
    runner over those devices."""
    if devices:
        from nnhal.conformance.runtime_runner import RuntimeRunner

        return RuntimeRunner(list(devices), tuple(modes), tuple(variants))
    from nnhal.conformance.runner import Runner

    return Runner(device, tuple(modes), tuple(variants), memory)


def open_device(name: str, hal: str = "hidl") -> Any:
    """The face ``hal`` of the device ``name``: an in-process driver (a plugin or ``module:Class`` too), else a
    connection to the service of that name."""
    from nnhal.conformance.vts.device import open_face

    return open_face(name, hal)


# --------------------------------------------------------------------------
# the parent side


class _Worker:
    def __init__(self, config: bytes):
        env = dict(os.environ)
        self.proc = subprocess.Popen([sys.executable, "-m", "nnhal.conformance.parallel"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin, self.stdout = self.proc.stdin, self.proc.stdout
        _write(self.stdin, config)
        self.job: Optional[Job] = None

    def send(self, job: Job) -> None:
        self.job = job
        _write(self.stdin, msgspec.msgpack.encode(job))

    def stop(self, timeout: float = 5.0) -> None:
        try:
            self.stdin.close()  # NOTE: end of input: the worker exits after its current model
        except OSError:
            pass
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.stdout.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for f in (self.stdin, self.stdout):
            try:
                f.close()
            except OSError:
                pass


def run_parallel(jobs: Sequence[tuple[str, int]], config: WorkerConfig, n_workers: int,
                 on_result: Callable[[int, list[CaseResult]], None], on_death: Callable[[int, str], None]) -> None:
    """Run model ``jobs[k] = (vector file, index in it)`` in ``n_workers``
    processes, calling ``on_result(k, results)`` as each comes back
    (``on_death(k, message)`` if its worker died running it).  On
    KeyboardInterrupt the workers are stopped and the interrupt re-raised."""
    cfg = msgspec.msgpack.encode(config)
    pending = list(reversed([Job(k, f, i) for k, (f, i) in enumerate(jobs)]))
    sel = selectors.DefaultSelector()
    workers: list[_Worker] = []
    decoder = msgspec.msgpack.Decoder(Reply)

    def start() -> None:
        w = _Worker(cfg)
        workers.append(w)
        sel.register(w.stdout, selectors.EVENT_READ, w)
        if pending:
            w.send(pending.pop())

    try:
        for _ in range(max(1, min(n_workers, len(jobs)))):
            start()
        while any(w.job is not None for w in workers):
            for key, _ in sel.select():
                w: _Worker = key.data
                frame = _read(w.stdout)
                if frame is None:  # NOTE: the worker died: its model failed, a new worker goes on
                    job = w.job
                    sel.unregister(w.stdout)
                    workers.remove(w)
                    w.kill()
                    if job is not None:
                        on_death(job.id, f"worker process died (exit status {w.proc.returncode})")
                    if pending:
                        start()
                    continue
                reply = decoder.decode(frame)
                w.job = None
                if pending:
                    w.send(pending.pop())
                on_result(reply.id, reply.results)
        for w in workers:
            w.stop()
    except BaseException:
        for w in workers:
            w.kill()
        raise
    finally:
        sel.close()


# --------------------------------------------------------------------------
# the worker side


def _worker_main() -> int:
    from nnhal.conformance import logs, vectors

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # NOTE: the parent decides what Ctrl-C stops
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # NOTE: stray prints must not corrupt the frames
    raw = _read(stdin)
    if raw is None:
        return 0
    config = msgspec.msgpack.decode(raw, type=WorkerConfig)
    logs.install(config.log_level)
    devices = list(config.extra.get("devices", []))
    runner = make_runner(None if devices else open_device(config.device, config.hal), config.modes, config.variants,
                         config.memory, devices)
    loaded: tuple[str, list] = ("", [])
    encoder = msgspec.msgpack.Encoder()
    while True:
        frame = _read(stdin)
        if frame is None:
            return 0
        job = msgspec.msgpack.decode(frame, type=Job)
        if loaded[0] != job.file:
            loaded = (job.file, vectors.load_file_checked(job.file))
        _write(stdout, encoder.encode(Reply(job.id, runner.run_model(loaded[1][job.index]))))


if __name__ == "__main__":
    sys.exit(_worker_main())
