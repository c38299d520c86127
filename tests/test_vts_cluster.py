"""``nnhal vts --cluster``: a real local Ray cluster (a head node and one more
worker node, ``ray start`` with private ports and a private temp dir, one
CPU and a small object store each, no dashboard) runs a sampled sweep whose
cases are those of ``--jobs 1``; the cluster is stopped after, leaving no
process behind.

The cluster is stopped by the ids of its processes (those whose command line
names its temp dir or its GCS address, and their descendants), not with a
bare ``ray stop``: that stops every Ray process of the user on the machine,
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
from typing import Iterator

import pytest

from tests.test_vts_suite import keyed, summary, vts

pytestmark = pytest.mark.cluster
ray = pytest.importorskip("ray")
RAY = Path(sys.executable).with_name("ray")


def _free_port() -> int:
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
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            ppid = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        out[int(p.name)] = (ppid, cmd)
    return out


def cluster_pids(keys: list[str]) -> set[int]:
    """The processes of one cluster: those naming one of ``keys`` and their descendants."""
    procs = _processes()
    mine = {p for p, (_, cmd) in procs.items() if any(k in cmd for k in keys) and p != os.getpid()}
    grew = True
    while grew:
        new = {p for p, (pp, _) in procs.items() if pp in mine} - mine
        mine |= new
        grew = bool(new)
    return mine


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def stop_cluster(keys: list[str], grace: float = 10.0) -> None:
    pids = cluster_pids(keys)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in pids:
            try:
                os.kill(p, sig)
            except OSError:
                pass
        end = time.monotonic() + grace
        while any(_alive(p) for p in pids) and time.monotonic() < end:
            time.sleep(0.1)
        pids = {p for p in pids if _alive(p)} | cluster_pids(keys)
        if not pids:
            return


def _node_args(temp: str) -> list[str]:
    return ["--num-cpus", "1", "--object-store-memory", str(80 * 1024 * 1024), "--disable-usage-stats",
            "--node-ip-address", "127.0.0.1", "--temp-dir", temp,
            "--node-manager-port", str(_free_port()), "--object-manager-port", str(_free_port()),
            "--dashboard-agent-listen-port", str(_free_port()), "--dashboard-agent-grpc-port", str(_free_port()),
            "--runtime-env-agent-port", str(_free_port()), "--metrics-export-port", str(_free_port())]


@pytest.fixture
def ray_cluster() -> Iterator[str]:
    if not RAY.exists():
        pytest.skip("no ray command beside this Python")
    # NOTE: a short path: Ray's unix sockets live under it (108 bytes at most)
    temp = tempfile.mkdtemp(prefix="nnhal-ray-", dir="/tmp")
    port = _free_port()
    address = f"127.0.0.1:{port}"
    keys = [temp, address]
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
    try:
        subprocess.run([str(RAY), "start", "--head", "--port", str(port), "--include-dashboard", "false",
                        "--ray-client-server-port", str(_free_port()), *_node_args(temp)],
                       check=True, capture_output=True, timeout=300, env=env)
        subprocess.run([str(RAY), "start", "--address", address, *_node_args(temp)],
                       check=True, capture_output=True, timeout=300, env=env)
        yield address
    finally:
        stop_cluster(keys)
        left = [p for p in cluster_pids(keys) if _alive(p)]
        shutil.rmtree(temp, ignore_errors=True)
        assert not left, f"cluster processes left: {left}"


def test_a_sampled_sweep_on_a_two_node_cluster_is_the_one_process_sweep(ray_cluster: str, tmp_path: Path,
                                                                         vectors_dir: Path) -> None:
    args = ["--device", "sample-all", "--ops", "ADD,MUL", "--sample", "3", "--section", "basic", "model", "request",
            "burst", "memory"]
    here, there = tmp_path / "jobs1.json", tmp_path / "cluster.json"
    r1 = vts(*args, "--jobs", "1", "--json", str(here))
    r2 = vts(*args, "--cluster", ray_cluster, "--json", str(there))
    assert r1.returncode == 0, r1.stdout[-2000:]
    assert r2.returncode == 0, r2.stdout[-3000:] + r2.stderr[-3000:]
    assert "runner:      Ray cluster" in r2.stdout and "(2 CPUs)" in r2.stdout
    assert keyed(here) == keyed(there) and len(keyed(here)) > 300
    assert summary(r1.stdout) == summary(r2.stdout)


def test_no_cluster_at_the_address_is_one_line(vectors_dir: Path) -> None:
    r = vts("--section", "basic", "--cluster", f"127.0.0.1:{_free_port()}", timeout=300)
    assert r.returncode == 2 and r.stderr.startswith("nnhal vts: --cluster") and r.stderr.count("\n") == 1, r.stderr
