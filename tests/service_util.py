"""Driver service processes for tests: start ``python -m nnhal serve`` under a
unique name in a private runtime directory, connect, and always stop it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Optional

import nnhal
from nnhal.service import registry

START_TIMEOUT_S = 60.0


class ServiceProcess:
    """One ``nnhal serve`` process (a unique name in ``runtime_dir``)."""

    def __init__(self, runtime_dir: Path, name: Optional[str] = None, driver: str = "sample-all",
                 env: Optional[dict] = None):
        self.runtime_dir = Path(runtime_dir)
        self.name = name or f"test-{uuid.uuid4().hex[:10]}"
        self.driver = driver
        self.env = dict(os.environ, NNHAL_RUNTIME_DIR=str(self.runtime_dir), **(env or {}))
        self.proc: Optional[subprocess.Popen] = None

    @property
    def socket_path(self) -> Path:
        return self.runtime_dir / f"{self.name}.sock"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> "ServiceProcess":
        self.proc = subprocess.Popen([sys.executable, "-m", "nnhal", "serve", "--name", self.name,
                                      "--driver", self.driver], env=self.env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE)
        end = time.monotonic() + START_TIMEOUT_S
        while not (self.socket_path.exists() and registry.probe(self.socket_path)):
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                raise RuntimeError(f"nnhal serve exited with {self.proc.returncode}: {err}")
            if time.monotonic() > end:
                self.kill()
                raise RuntimeError("nnhal serve did not create its socket in time")
            time.sleep(0.02)
        return self

    def connect(self) -> Any:
        """A proxy device (the test process's NNHAL_RUNTIME_DIR must be this one)."""
        return nnhal.connect(self.name, runtime_dir=self.runtime_dir)

    def connect_aidl(self, version: int = 4) -> Any:
        """The service's AIDL face (``nnhal.aidl.connect``) of interface ``version``."""
        from nnhal import aidl

        return aidl.connect(self.name, version, runtime_dir=self.runtime_dir)

    def terminate(self, timeout: float = 15.0) -> int:
        """SIGTERM and wait (killed if it does not stop in time); the exit status."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def kill(self) -> None:
        """SIGKILL (no cleanup: the death of a driver process)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
        if self.proc is not None:
            self.proc.wait()
            if self.proc.stderr:
                self.proc.stderr.close()

    def stop(self) -> None:
        try:
            self.terminate()
        except Exception:  # noqa: BLE001
            pass
        self.kill()


def proc_counts(pid: int) -> dict[str, int]:
    """Open descriptors, threads and resident memory (kB) of a process."""
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    fields = {line.split(":")[0]: line.split(":")[1].strip() for line in status if ":" in line}
    return {"fds": fds, "threads": int(fields["Threads"]), "rss_kb": int(fields["VmRSS"].split()[0])}


def settled(pid: int, base: dict[str, int], timeout: float = 20.0) -> dict[str, int]:
    """``proc_counts(pid)`` once its descriptors and threads are back to ``base`` (or ``timeout`` passed)."""
    end = time.monotonic() + timeout
    counts = proc_counts(pid)
    while time.monotonic() < end and (counts["fds"] > base["fds"] or counts["threads"] > base["threads"]):
        time.sleep(0.05)
        counts = proc_counts(pid)
    return counts


def client_deaths(n: int, sp: ServiceProcess, die: Callable[[str, str, int], None]) -> None:
    """``n`` forked clients of ``sp``, each running ``die(runtime_dir, name, k)``, which must SIGKILL itself."""
    for k in range(n):
        pid = os.fork()
        if pid == 0:
            try:
                die(str(sp.runtime_dir), sp.name, k)
            finally:
                os._exit(1)
        _, status = os.waitpid(pid, 0)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status


def run_clients(sp: ServiceProcess, scripts: list[tuple[str, list[str]]], timeout: float = 600) -> list[dict]:
    """Client processes of ``sp`` at once, each ``python -c script name *args``
    (from the repository root), each printing a JSON line last: those lines."""
    env = dict(os.environ, NNHAL_RUNTIME_DIR=str(sp.runtime_dir))
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    procs = [subprocess.Popen([sys.executable, "-c", script, sp.name, *args], env=env, cwd=root,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for script, args in scripts]
    results = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=timeout)
            assert p.returncode == 0, err[-2000:]
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return results
