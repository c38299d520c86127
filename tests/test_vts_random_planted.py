"""Planted bugs (issue 27): drivers with a bug each (tests/planted_drivers.py:
copies of the README's example driver and of the reference) pass the
conformance vectors, and the random section finds every one within a
bounded number of cases of a fixed seed and shrinks it to at most 3
operations; the reproducer fails on the buggy driver and passes on the
reference through ``nnhal conformance``.

The default run stops at each driver's first failing case (seconds); ``-m
random_campaign`` runs the planted drivers over every operation without
``--ops`` and the reference for a few minutes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import nnhal
from nnhal.conformance import vectors
from nnhal.conformance.randgraph import probe
from nnhal.conformance.randgraph.generator import Options
from nnhal.conformance.runner import Runner
from nnhal.conformance.vts import random as section
from nnhal.conformance.vts.random import RandomConfig

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import planted_drivers  # noqa: E402

BUDGET = 60  # NOTE: cases of seed 0 within which each bug must be found

# (name, device spec maker, the operations its conformance vectors use)
EXAMPLE_OPS = {"ADD", "MUL", "RELU"}
PLANTED = [
    ("consumed_twice", EXAMPLE_OPS),
    ("output_consumed", EXAMPLE_OPS),
    ("middle_broadcast", EXAMPLE_OPS),
    ("DilationIgnoredWithStride", {"CONV_2D"}),
    ("AddZeroPoint", {"ADD"}),
]


def _spec(name: str, tmp: Path) -> str:
    if name in planted_drivers.PATCHES:
        return planted_drivers.example_copy(name, tmp)
    return f"{HERE / 'planted_drivers.py'}:{name}"


@pytest.fixture(params=[p[0] for p in PLANTED])
def planted(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, set[str]]:
    ops = dict(PLANTED)[request.param]
    return _spec(request.param, tmp_path), ops


def test_the_vectors_do_not_see_the_bug(planted: tuple[str, set[str]], vectors_dir: Path) -> None:
    spec, ops = planted
    device = nnhal.open_device(spec)
    # NOTE: synchronously, plain and quant8-signed: each bug is in the computation, the same in every executor
    runner = Runner(device, ("sync",), ("plain", "signed"))
    ran = failed = 0
    for vm in vectors.load([vectors_dir], ops):
        for r in runner.run_model(vm):
            ran += r.status == "pass"
            failed += r.status == "fail"
    assert ran > 5 and failed == 0


def first_failure(device: object, spec: str, **config: object):
    """The first failing case of seed 0 on ``device`` (an IDevice or a face), within the budget; shrunk."""
    claims = probe.claims(device, Options())
    cfg = RandomConfig(spec, seed=0, claims=tuple(sorted(claims)), shrink_seconds=40, **config)
    for n in range(BUDGET):
        (case,) = section.run_cases(device, cfg, n, 1)
        if case.status == "fail":
            assert 1 <= case.operations <= 3, case.message
            return case
    pytest.fail(f"{spec}: no failure in {BUDGET} cases ({config or 'HIDL'})")


def test_the_random_section_finds_it_and_shrinks_it(planted: tuple[str, set[str]]) -> None:
    spec, _ = planted
    case = first_failure(nnhal.open_device(spec), spec)
    assert case.attachment and "shrunk from" in case.message


def test_a_finding_end_to_end(tmp_path: Path) -> None:
    """The command line: the failed case's JSON fields, its reproducer replayed by nnhal conformance
    (failing on the buggy driver, passing on the reference), its picture or the command that draws it."""
    spec = planted_drivers.example_copy("middle_broadcast", tmp_path)
    j = tmp_path / "r.json"
    r = subprocess.run([sys.executable, "-m", "nnhal", "vts", "--device", spec, "--section", "random", "--cases",
                        "20", "--jobs", "1", "--json", str(j), "--reproducers", str(tmp_path / "found")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-2000:]
    failed = [c for c in json.loads(j.read_text())["cases"] if c["status"] == "fail"]
    assert failed
    for c in failed:
        assert 1 <= c["operations"] <= 3 and Path(c["reproducer"]).is_file()
        assert f"replay: nnhal conformance --device {spec} {c['reproducer']}" in c["message"]
        assert "draw again: nnhal vts" in c["message"] and "picture: " in c["message"]
    path = failed[0]["reproducer"]
    bad = subprocess.run([sys.executable, "-m", "nnhal", "conformance", "--device", spec, "--mode", "sync", path],
                         capture_output=True, text=True, timeout=120)
    good = subprocess.run([sys.executable, "-m", "nnhal", "conformance", "--device", "sample-all", path],
                          capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1 and good.returncode == 0, bad.stdout[-2000:] + good.stdout[-2000:]
    again = subprocess.run([sys.executable, "-m", "nnhal", "vts", "--device", spec, "--section", "random",
                            "--case", failed[0]["model"].split("case")[1], "--reproducers", str(tmp_path / "again")],
                           capture_output=True, text=True, timeout=120)
    assert again.stdout.rstrip().splitlines()[-1] == "0 passed, 1 failed, 0 unsupported", again.stdout[-2000:]


@pytest.mark.random_campaign
@pytest.mark.parametrize("name", [p[0] for p in PLANTED])
def test_campaign_finds_every_planted_bug_over_every_operation(name: str, tmp_path: Path) -> None:
    spec = _spec(name, tmp_path)
    j = tmp_path / "r.json"
    subprocess.run([sys.executable, "-m", "nnhal", "vts", "--device", spec, "--section", "random", "--cases", "300",
                    "--seed", "7", "--jobs", "2", "--json", str(j), "--reproducers", str(tmp_path / "found")],
                   capture_output=True, text=True, timeout=3600)
    failed = [c for c in json.loads(j.read_text())["cases"] if c["status"] == "fail"]
    assert failed and all(1 <= c["operations"] <= 3 for c in failed), [c["message"] for c in failed][:3]


@pytest.mark.random_campaign
def test_campaign_sample_all_finds_nothing(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "nnhal", "vts", "--device", "sample-all", "--section", "random",
                        "--seconds", "120", "--seed", "11", "--jobs", "2", "--reproducers", str(tmp_path)],
                       capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stdout[-4000:]


def test_a_driver_crash_is_found_isolated_and_shrunk(tmp_path: Path) -> None:
    """A case that kills the worker process: the other cases of its unit run again one at a time, the case
    fails as a crash, and the command shrinks it, each candidate in a process of its own."""
    spec = f"{HERE / 'planted_drivers.py'}:CrashOnBroadcastMul"
    j = tmp_path / "r.json"
    r = subprocess.run([sys.executable, "-m", "nnhal", "vts", "--device", spec, "--section", "random", "--cases",
                        "8", "--ops", "MUL,ADD,RELU", "--max-operations", "3", "--seed", "3", "--jobs", "2",
                        "--json", str(j), "--reproducers", str(tmp_path / "found")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-2000:]
    cases = json.loads(j.read_text())["cases"]
    crashed = [c for c in cases if c["status"] == "fail"]
    assert crashed and len(cases) == 8
    for c in crashed:
        assert "a driver crash" in c["message"] and 1 <= c["operations"] <= 3, c["message"]
        assert "MUL" in c["message"] and Path(c["reproducer"]).is_file()
    assert any(c["status"] == "pass" for c in cases)


def test_the_aidl_face_finds_it_too(tmp_path: Path) -> None:
    """The random section judges a device through its AIDL face as well: every AIDL executor (a reusable
    execution too at version 4) and a bug found and shrunk there, its replay and draw-again lines naming the face."""
    from nnhal.conformance.randgraph.differential import Devices
    from nnhal.conformance.vts.device import open_face

    spec = _spec("AddZeroPoint", tmp_path)
    face = open_face(spec, "aidl")
    assert Devices(face, section.reference("AIDL_V4")).executors == (*face.modes, "cache")
    assert "reusable" in face.modes
    case = first_failure(face, spec, version="AIDL_V4", hal="aidl")
    assert f"replay: nnhal conformance --device {spec} --hal aidl" in case.message
    assert f"draw again: nnhal vts --device {spec} --hal aidl --section random" in case.message


@pytest.mark.parametrize("argv, message", [
    (["--hal-version", "AIDL_V2"], "--hal aidl judges models of AIDL versions"),
    (["--hal", "aidl", "--hal-version", "V9"], "--hal-version V9: one of"),
])
def test_random_version_mistakes(argv: list[str], message: str) -> None:
    r = subprocess.run([sys.executable, "-m", "nnhal", "vts", "--device", "sample-all", "--section", "random",
                        "--cases", "1", *argv], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and message in r.stderr, r.stderr
