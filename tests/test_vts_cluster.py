"""``nnhal vts --cluster``: a real local Ray cluster (a head node and one more
worker node, :class:`nnhal.conformance.vts.localcluster.LocalCluster`:
``ray start`` with private ports and a private temp dir, one CPU and a small
object store each, no dashboard) runs a sampled sweep whose cases are those
of ``--jobs 1``; the cluster is stopped after (by the ids of its processes:
a bare ``ray stop`` would stop other people's clusters too), leaving no
process behind."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from nnhal.conformance.vts.localcluster import LocalCluster, alive, free_port, ray_command
from tests.test_vts_suite import keyed, summary, vts

pytestmark = pytest.mark.cluster
ray = pytest.importorskip("ray")


@pytest.fixture
def ray_cluster() -> Iterator[str]:
    if not ray_command().exists():
        pytest.skip("no ray command beside this Python")
    cluster = LocalCluster(nodes=2)
    try:
        cluster.start()
        yield cluster.address
    finally:
        left = cluster.stop()
        assert not left and not [p for p in cluster.pids() if alive(p)], f"cluster processes left: {left}"


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
    # Ctrl-C: the tasks not finished are cancelled, what ran is reported
    p = subprocess.Popen([sys.executable, "-m", "nnhal", "vts", "--device", "sample-all", "--section", "model",
                          "--ops", "CONV_2D", "--cluster", ray_cluster, "--progress"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        line, end = "", time.monotonic() + 300
        while "units" not in line and time.monotonic() < end:
            line = p.stderr.readline()
        p.send_signal(signal.SIGINT)
        out, _ = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 130 and "interrupted" in out, out[-2000:]
    passed, failed, _ = summary(out)
    assert passed > 0 and failed == 0


def test_no_cluster_at_the_address_is_one_line(vectors_dir: Path) -> None:
    r = vts("--section", "basic", "--cluster", f"127.0.0.1:{free_port()}", timeout=300)
    assert r.returncode == 2 and r.stderr.startswith("nnhal vts: --cluster") and r.stderr.count("\n") == 1, r.stderr
