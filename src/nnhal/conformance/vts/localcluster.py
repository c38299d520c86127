"""A private Ray cluster on this machine (a head node and more worker nodes,
``ray start`` with free ports and a private temp dir, one CPU and a small
object store per node, no dashboard), for the tests and the bench.

It is stopped by the ids of its processes (those whose command line names
its temp dir or its head's address, and their descendants), not with a bare
``ray stop``, which stops every Ray process of the user on the machine,
other people's clusters included."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OBJECT_STORE_BYTES = 80 * 1024 * 1024
START_TIMEOUT_S = 300


def ray_command() -> Path:
    return Path(sys.executable).with_name("ray")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _processes() -> dict[int, tuple[int, str]]:
    out = {}
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            if p.stat().st_uid != os.getuid():
                continue
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace") + " "
            ppid = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        out[int(p.name)] = (ppid, cmd)
    return out


def alive(pid: int) -> bool:
    """Running (not gone, not a zombie)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class LocalCluster:
    """``with LocalCluster(nodes=2) as c: ... c.address``."""

    def __init__(self, nodes: int = 2):
        self.nodes = nodes
        self.temp = ""
        self.address = ""
        self.keys: list[str] = []  # what names this cluster's processes on their command lines

    def _node_args(self) -> list[str]:
        return ["--num-cpus", "1", "--object-store-memory", str(OBJECT_STORE_BYTES), "--disable-usage-stats",
                "--node-ip-address", "127.0.0.1", "--temp-dir", self.temp,
                "--node-manager-port", str(free_port()), "--object-manager-port", str(free_port()),
                "--dashboard-agent-listen-port", str(free_port()), "--dashboard-agent-grpc-port", str(free_port()),
                "--runtime-env-agent-port", str(free_port()), "--metrics-export-port", str(free_port())]

    def start(self) -> "LocalCluster":
        ray = ray_command()
        if not ray.exists():
            raise FileNotFoundError(f"no ray command at {ray} (pip install 'nnhal[cluster]')")
        # NOTE: a short path: Ray's unix sockets live under it (108 bytes at most)
        self.temp = tempfile.mkdtemp(prefix="nnhal-ray-", dir="/tmp")
        port, client_port = free_port(), free_port()
        self.address = f"127.0.0.1:{port}"
        # NOTE: Ray may name the head by the machine's address instead of 127.0.0.1: the port tells it
        self.keys = [self.temp, f":{port} ", f"--port={client_port} "]
        env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
        try:
            subprocess.run([str(ray), "start", "--head", "--port", str(port), "--include-dashboard", "false",
                            "--ray-client-server-port", str(client_port), *self._node_args()],
                           check=True, capture_output=True, timeout=START_TIMEOUT_S, env=env)
            for _ in range(self.nodes - 1):
                subprocess.run([str(ray), "start", "--address", self.address, *self._node_args()],
                               check=True, capture_output=True, timeout=START_TIMEOUT_S, env=env)
        except BaseException:
            self.stop()
            raise
        return self

    def pids(self) -> set[int]:
        """The processes of this cluster."""
        if not self.keys:
            return set()
        procs = _processes()
        me = {os.getpid(), os.getppid()}
        mine = {p for p, (_, cmd) in procs.items() if any(k in cmd for k in self.keys) and p not in me}
        while True:
            new = {p for p, (pp, _) in procs.items() if pp in mine} - mine
            if not new:
                return mine
            mine |= new

    def stop(self, grace: float = 10.0) -> list[int]:
        """Ends every process of the cluster (SIGTERM, then SIGKILL after
        ``grace`` seconds); returns those still running (none, normally)."""
        pids = self.pids()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for p in pids:
                try:
                    os.kill(p, sig)
                except OSError:
                    pass
            end = time.monotonic() + grace
            while any(alive(p) for p in pids) and time.monotonic() < end:
                time.sleep(0.1)
            pids = {p for p in pids | self.pids() if alive(p)}
            if not pids:
                break
        if self.temp:
            shutil.rmtree(self.temp, ignore_errors=True)
        return sorted(pids)

    def __enter__(self) -> "LocalCluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
