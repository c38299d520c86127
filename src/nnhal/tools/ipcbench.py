"""``nnhal bench --ipc``: what crossing the process boundary costs.

Runs a one-operation model (ADD of two 4-element float32 tensors) in
process and through a driver service (``nnhal serve``), synchronously
(``executeSynchronously_1_3``), asynchronously (``execute_1_3`` + callback),
by burst (``nnhal.burst.BurstController``) and fenced (``executeFenced`` +
waiting on the sync fence), next to the bare round trip of the same machine:
a minimal echo over a Unix-domain SOCK_STREAM socket between two Python
processes, with the request and answer sizes of the synchronous call.

The same execution through the AIDL face (``nnhal.aidl``): in process, and
through the same service (``nnhal.aidl.connect``) synchronously
(``IPreparedModel.executeSynchronously``: the memories' descriptors travel
with each call, as binder passes a ParcelFileDescriptor per transaction) and
by ``IBurst`` (memory identifier tokens: the service keeps the memories, no
descriptor passes once it holds them).

The modes are measured in interleaved rounds (each round runs every mode),
so load from other work on the machine spreads over all of them; medians and
99th percentiles in microseconds.  The issue's targets: a synchronous call
through the service costs at most 3x the bare round trip plus the in-process
time, and a burst less than that.
"""

from __future__ import annotations

import argparse
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Optional

import numpy as np

from nnhal import hal
from nnhal.platform import memory as hal_memory

T = hal.OperandType
L = hal.OperandLifeTime

_ECHO = r"""
import os, socket, struct, sys, time
path, reply = sys.argv[1], int(sys.argv[2])
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind(path)
srv.listen(1)
print("ready", flush=True)
c, _ = srv.accept()
buf = bytearray(1 << 16)
answer = struct.pack("<II", reply - 8, 0) + bytes(reply - 8)
clock = time.perf_counter_ns
while True:
    n = c.recv_into(buf)
    if not n:
        break
    need, delay_us = struct.unpack_from("<II", buf)
    while n < need + 8:
        n += c.recv_into(memoryview(buf)[n:])
    if delay_us:  # the service's work, as a busy wait (the second word of the header)
        end = clock() + delay_us * 1000
        while clock() < end:
            pass
    c.sendall(answer)
"""


def add_model() -> hal.Model:
    """ADD of two [4] float32 inputs, no activation."""
    ops = [hal.Operand(type=T.TENSOR_FLOAT32, dimensions=[4], numberOfConsumers=1, lifetime=L.SUBGRAPH_INPUT),
           hal.Operand(type=T.TENSOR_FLOAT32, dimensions=[4], numberOfConsumers=1, lifetime=L.SUBGRAPH_INPUT),
           hal.Operand(type=T.INT32, numberOfConsumers=1, lifetime=L.CONSTANT_COPY,
                       location=hal.DataLocation(0, 0, 4)),
           hal.Operand(type=T.TENSOR_FLOAT32, dimensions=[4], lifetime=L.SUBGRAPH_OUTPUT)]
    return hal.Model(main=hal.Subgraph(operands=ops, operations=[hal.Operation(hal.OperationType.ADD, [0, 1, 2], [3])],
                                       inputIndexes=[0, 1], outputIndexes=[3]), operandValues=bytes(4))


def prepare(device: Any, model: hal.Model) -> Any:
    cb = hal.PreparedModelCallback()
    device.prepareModel_1_3(model, hal.ExecutionPreference.FAST_SINGLE_ANSWER, hal.Priority.MEDIUM,
                            hal.OptionalTimePoint(), [], [], bytes(32), cb)
    status, prepared = cb.wait(60)
    if status != hal.ErrorStatus.NONE:
        raise RuntimeError(f"prepareModel_1_3 gave {hal.ErrorStatus(status).name}")
    return prepared


class Pools:
    def __init__(self) -> None:
        self.inp = hal_memory.allocate(32)
        self.out = hal_memory.allocate(16)
        v = hal_memory.map(self.inp)
        v[:] = np.arange(8, dtype=np.float32).tobytes()
        v.release()
        self.request = hal.Request(
            inputs=[hal.RequestArgument(location=hal.DataLocation(0, 0, 16)),
                    hal.RequestArgument(location=hal.DataLocation(0, 16, 16))],
            outputs=[hal.RequestArgument(location=hal.DataLocation(1, 0, 16))],
            pools=[hal.MemoryPool(hidlMemory=self.inp), hal.MemoryPool(hidlMemory=self.out)])

    def check(self) -> None:
        got = np.frombuffer(bytes(hal_memory.map(self.out)), np.float32)
        if not np.array_equal(got, np.array([4, 6, 8, 10], np.float32)):
            raise RuntimeError(f"wrong result {got}")

    def close(self) -> None:
        hal_memory.free(self.inp)
        hal_memory.free(self.out)


def _ok(status: Any, what: str) -> None:
    if status != hal.ErrorStatus.NONE:
        raise RuntimeError(f"{what} returned {hal.ErrorStatus(status).name}")


def aidl_modes(local: Any, remote: Any, request: hal.Request) -> dict[str, Optional[Callable]]:
    """The AIDL face's executions of ``request`` (canonical) on AIDL prepared models."""
    from nnhal.hal import aidl

    req = aidl.convert.from_canonical(request)
    burst = remote.configureExecutionBurst()

    def sync_local() -> None:
        local.executeSynchronously(req, False, -1, -1)  # NOTE: raises ServiceSpecificError on failure

    def sync_remote() -> None:
        remote.executeSynchronously(req, False, -1, -1)

    def burst_remote() -> None:
        burst.executeSynchronously(req, [1, 2], False, -1, -1)

    return {"AIDL in process (sync)": sync_local, "AIDL service sync": sync_remote,
            "AIDL service burst": burst_remote}


def prepare_aidl(device: Any, model: hal.Model) -> Any:
    from nnhal.hal import aidl

    cb = aidl.PreparedModelCallback()
    device.prepareModel(aidl.convert.from_canonical(model), aidl.ExecutionPreference.FAST_SINGLE_ANSWER,
                        aidl.Priority.MEDIUM, -1, [], [], bytes(32), cb)
    status, prepared = cb.wait(60)
    if status != hal.ErrorStatus.NONE:
        raise RuntimeError(f"AIDL prepareModel gave {hal.ErrorStatus(status).name}")
    return prepared


def modes(local: Any, remote: Any, request: hal.Request, echo: Callable[[], None]) -> dict[str, Optional[Callable]]:
    from nnhal.platform import fence

    NO = hal.MeasureTiming.NO

    def sync_local() -> None:
        _ok(local.executeSynchronously_1_3(request, NO, None, None)[0], "in-process execution")

    def sync_remote() -> None:
        _ok(remote.executeSynchronously_1_3(request, NO, None, None)[0], "executeSynchronously_1_3")

    def async_remote() -> None:
        cb = hal.ExecutionCallback()
        _ok(remote.execute_1_3(request, NO, None, None, cb), "execute_1_3")
        _ok(cb.wait(30)[0], "execute_1_3 callback")

    def fenced_remote() -> None:
        status, sync_fence, _ = remote.executeFenced(request, [], NO, None, None, None)
        _ok(status, "executeFenced")
        if sync_fence is not None and sync_fence.fds:
            if not fence.wait(sync_fence, 30):
                raise RuntimeError("the sync fence was not signaled")
            fence.close(sync_fence)

    out: dict[str, Optional[Callable]] = {"bare socket round trip": echo, "in process (sync)": sync_local,
                                          "service sync": sync_remote, "service async": async_remote}
    try:
        from nnhal.runtime.burst import BurstController

        burst = BurstController(remote)

        def burst_remote() -> None:
            _ok(burst.execute(request, NO)[0], "burst execution")

        out["service burst"] = burst_remote
    except ImportError:
        out["service burst"] = None
    out["service fenced"] = fenced_remote
    return out


def measure(fns: dict[str, Optional[Callable]], runs: int, rounds: int, warmup: int) -> dict[str, np.ndarray]:
    times: dict[str, list[int]] = {k: [] for k in fns}
    for fn in fns.values():
        if fn is not None:
            for _ in range(warmup):
                fn()
    per_round = max(1, runs // rounds)
    clock = time.perf_counter_ns
    for _ in range(rounds):
        for name, fn in fns.items():
            if fn is None:
                continue
            ts = times[name]
            for _ in range(per_round):
                t0 = clock()
                fn()
                ts.append(clock() - t0)
    return {k: np.array(v, dtype=np.float64) / 1000.0 for k, v in times.items()}


def start_service(name: str, runtime_dir: str) -> subprocess.Popen:
    env = dict(os.environ, NNHAL_RUNTIME_DIR=runtime_dir)
    proc = subprocess.Popen([sys.executable, "-m", "nnhal", "serve", "--name", name], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    path = os.path.join(runtime_dir, name + ".sock")
    end = time.monotonic() + 30
    while not os.path.exists(path):
        if proc.poll() is not None or time.monotonic() > end:
            proc.kill()
            raise RuntimeError("the service did not start")
        time.sleep(0.02)
    return proc


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="nnhal bench --ipc", description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3000, help="timed executions per mode (default 3000)")
    ap.add_argument("--rounds", type=int, default=10, help="interleaved rounds (default 10)")
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--device", help="a running service to use (default: start one for the run)")
    args = ap.parse_args(argv)

    import nnhal
    from nnhal import aidl

    tmp = tempfile.mkdtemp(prefix="nnhal-ipcbench-")
    procs: list[subprocess.Popen] = []
    echo_sock: Optional[socket.socket] = None
    pools: Optional[Pools] = None
    remote = remote_aidl = None
    try:
        if args.device:
            remote, remote_aidl = nnhal.connect(args.device), aidl.connect(args.device)
        else:
            name = f"bench-{os.getpid()}"
            procs.append(start_service(name, tmp))
            old = os.environ.get("NNHAL_RUNTIME_DIR")
            os.environ["NNHAL_RUNTIME_DIR"] = tmp
            try:
                remote, remote_aidl = nnhal.connect(name), aidl.connect(name)  # NOTE: both faces of one service
            finally:
                if old is None:
                    del os.environ["NNHAL_RUNTIME_DIR"]
                else:
                    os.environ["NNHAL_RUNTIME_DIR"] = old
        model = add_model()
        local_pm = prepare(nnhal.get_device("sample-all"), model)
        remote_pm = prepare(remote, model)
        pools = Pools()
        request = pools.request

        # the echo: the sizes of a synchronous call and its answer on the wire
        from nnhal.service import wire

        call_size = 8 + len(wire.ENCODER.encode(wire.CallOut(1, bytes(16), "executeSynchronously_1_3",
                                                             (request, 0, None, None))))
        reply_size = 8 + len(wire.ENCODER.encode(wire.ReplyOut(1, (0, [hal.OutputShape([4], True)], hal.Timing()))))
        echo_path = os.path.join(tmp, "echo.sock")
        echo_proc = subprocess.Popen([sys.executable, "-c", _ECHO, echo_path, str(reply_size)],
                                     stdout=subprocess.PIPE, text=True)
        procs.append(echo_proc)
        assert echo_proc.stdout is not None
        echo_proc.stdout.readline()
        echo_sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        echo_sock.connect(echo_path)
        rbuf = bytearray(1 << 16)
        es = echo_sock

        def echo_after(delay_us: int) -> Callable[[], None]:
            message = struct.pack("<II", call_size - 8, delay_us) + bytes(call_size - 8)

            def echo() -> None:
                es.sendall(message)
                n = 0
                while n < reply_size:
                    k = es.recv_into(memoryview(rbuf)[n:])
                    if not k:
                        raise RuntimeError("echo process gone")
                    n += k

            return echo

        fns = modes(local_pm, remote_pm, request, echo_after(0))
        # NOTE: the same round trip around a wait as long as the in-process execution (the
        # echo busy-waits before answering): what a process boundary costs when the caller
        # sleeps that long (on a VM an idle vCPU's wake-up grows with the wait)
        local_us = int(np.median(measure({"l": fns["in process (sync)"]}, 300, 1, 50)["l"]))
        fns = {"bare socket round trip": fns.pop("bare socket round trip"),
               f"bare round trip + {local_us} us wait": echo_after(local_us), **fns,
               **aidl_modes(prepare_aidl(aidl.get_device("sample-all"), model), prepare_aidl(remote_aidl, model),
                            request)}
        results = measure(fns, args.runs, args.rounds, args.warmup)
        pools.check()
        print(f"one ADD of two float32[4] per execution; {args.runs} runs per mode in {args.rounds} interleaved "
              f"rounds; messages {call_size} B / {reply_size} B; cpus {os.cpu_count()}, load "
              f"{os.getloadavg()[0]:.2f}")
        bare = float(np.median(results["bare socket round trip"]))
        local = float(np.median(results["in process (sync)"]))
        print(f"{'mode':26s} {'median us':>10s} {'p99 us':>10s} {'x bare':>8s} {'x in-proc':>10s}")
        for name, fn in fns.items():
            if fn is None:
                print(f"{name:26s} {'n/a':>10s}   (nnhal.burst is not available)")
                continue
            t = results[name]
            med, p99 = float(np.median(t)), float(np.percentile(t, 99))
            print(f"{name:26s} {med:10.1f} {p99:10.1f} {med / bare:8.2f} {med / local:10.2f}")
        target = 3 * bare + local
        sync = float(np.median(results["service sync"]))
        print(f"target: service sync <= 3 x bare + in process = {target:.1f} us: {sync:.1f} us "
              f"({'met' if sync <= target else 'MISSED'}, {sync / target:.2f} of the budget)")
        waited = float(np.median(results[f"bare round trip + {local_us} us wait"]))
        print(f"service sync - in process = {sync - local:.1f} us of overhead; the bare round trip around the same "
              f"wait costs {waited - local_us:.1f} us over the wait: {(sync - local) / max(waited - local_us, 1e-9):.2f}x")
        if fns.get("service burst") is not None:
            burst = float(np.median(results["service burst"]))
            print(f"target: service burst < that: {burst:.1f} us ({'met' if burst < min(target, sync) else 'MISSED'}; "
                  f"{burst / sync:.2f} x service sync)")
        a_sync, a_local = (float(np.median(results[k])) for k in ("AIDL service sync", "AIDL in process (sync)"))
        a_burst = float(np.median(results["AIDL service burst"]))
        print(f"AIDL vs HIDL executeSynchronously through the service: {a_sync:.1f} us vs {sync:.1f} us "
              f"({a_sync / sync:.2f}x); over their in-process times: {a_sync - a_local:.1f} us vs {sync - local:.1f} us; "
              f"AIDL burst {a_burst:.1f} us")
        return 0
    finally:
        if echo_sock is not None:
            echo_sock.close()
        for dev in (remote, remote_aidl):
            if dev is not None:
                dev.close()
        if pools is not None:
            pools.close()
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
