"""``nnhal vts``: the command line contract (exit status, the summary line,
user errors), the reports, ``--jobs`` giving the same cases as one process,
a service device, a driver's unsupported cases, Ctrl-C, and sections that
catch a driver breaking a rule."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from nnhal import hal
from nnhal.conformance.vts import memory
from nnhal.conformance.vts.case import sample_indexes
from nnhal.conformance.vts.sections import SECTIONS
from nnhal.conformance.vts.suite import plan

SUMMARY = re.compile(r"^(\d+) passed, (\d+) failed, (\d+) unsupported$")
S = hal.ErrorStatus


def vts(*args: str, timeout: float = 600, **kw: Any) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nnhal", "vts", *args], capture_output=True, text=True,
                          timeout=timeout, **kw)


def summary(out: str) -> tuple[int, int, int]:
    m = SUMMARY.match(out.rstrip("\n").splitlines()[-1])
    assert m, out[-2000:]
    return int(m[1]), int(m[2]), int(m[3])


def keyed(path: Path) -> list[tuple]:
    """The cases of a JSON report: name, verdict, expected and actual answer (but a deadline's: NONE or
    MISSED_DEADLINE_* by how loaded the machine is, both right)."""
    return [(c["name"], c["status"], c["expected"], "" if c["section"] == "qos" else c["actual"])
            for c in json.loads(path.read_text())["cases"]]


def test_every_section_passes_on_sample_all_with_every_report(tmp_path: Path, vectors_dir: Path) -> None:
    j, x, h = tmp_path / "r.json", tmp_path / "r.xml", tmp_path / "r.html"
    r = vts("--device", "sample-all", "--ops", "ADD", "--sample", "3", "--jobs", "1", "--json", str(j),
            "--junit-xml", str(x), "--html", str(h))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    passed, failed, unsupported = summary(r.stdout)
    assert passed > 500 and failed == unsupported == 0
    doc = json.loads(j.read_text())
    assert doc["counts"] == {"pass": passed, "fail": 0, "unsupported": 0} and len(doc["cases"]) == passed
    assert list(doc["sections"]) == list(SECTIONS)
    c = doc["cases"][0]
    assert set(c) >= {"section", "test", "model", "mutation", "expected", "actual", "status", "name"}
    tests = {c["test"] for c in doc["cases"]}
    for expected in ("ValidationTest.mutateOperandTypeTest", "ValidationTest.removeInputTest",
                     "ValidationTest.validateBurstSerialization.addDatumTest", "MemoryDomainCopyTest.CopyTo_UninitializedMemory",
                     "CompilationCachingSecurityTest.WrongToken", "DeadlineTest.execute",
                     "TestGenerated.DynamicOutputShapeTest", "NeuralnetworksHidlTest.GetCapabilitiesTest"):
        assert expected in tests
    root = ET.parse(x).getroot()
    assert [s.get("name") for s in root.iter("testsuite")] == list(SECTIONS)
    assert sum(1 for _ in root.iter("testcase")) == passed
    page = h.read_text()
    for s in SECTIONS:
        assert f"id='tests-{s}'" in page
    for s in SECTIONS:  # a table per section in the terminal report
        assert re.search(rf"^{s}: ", r.stdout, re.M)


def test_jobs_give_the_cases_of_one_process(tmp_path: Path, vectors_dir: Path) -> None:
    args = ["--device", "sample-all", "--ops", "ADD,MUL", "--sample", "3", "--section", "model", "request", "burst",
            "--section", "qos"]
    one, two = tmp_path / "1.json", tmp_path / "2.json"
    r1 = vts(*args, "--jobs", "1", "--json", str(one))
    r2 = vts(*args, "--jobs", "2", "--json", str(two))
    assert r1.returncode == r2.returncode == 0, r2.stdout[-2000:] + r2.stderr[-2000:]
    assert keyed(one) == keyed(two) and len(keyed(one)) > 100
    assert summary(r1.stdout) == summary(r2.stdout)


@pytest.mark.parametrize("args,message", [
    (["--hal", "aidl", "--device", "no-such"], "no device named 'no-such'"),
    (["--section", "modle"], "did you mean model"),
    (["--device", "no-such"], "no device named 'no-such'"),
    (["--ops", "ADDD"], "no operation named ADDD"),
    (["--sample", "-1"], "--sample -1"),
    (["--jobs", "0"], "--jobs 0"),
    (["--model", "zzz_nothing"], "no model name contains it"),
    (["--json", "/nonexistent/dir/r.json"], "no such directory"),
])
def test_user_errors_are_one_line_and_exit_2(args: list[str], message: str, vectors_dir: Path) -> None:
    r = vts(*args, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.count("\n") == 1 and message in r.stderr and r.stderr.startswith("nnhal vts: ")


def test_through_a_service(service_factory: Any, tmp_path: Path, vectors_dir: Path) -> None:
    sp = service_factory()
    env = dict(os.environ, NNHAL_RUNTIME_DIR=str(sp.runtime_dir))
    r = vts("--device", sp.name, "--ops", "ADD", "--sample", "2", "--jobs", "2", env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    passed, failed, unsupported = summary(r.stdout)
    assert passed > 500 and failed == unsupported == 0


def test_unsupported_models_are_reported_unsupported(tmp_path: Path, vectors_dir: Path) -> None:
    pytest.importorskip("ai_edge_litert")
    j = tmp_path / "r.json"
    r = vts("--device", "litert-cpu", "--ops", "LSTM,ADD", "--model", "lstm", "--sample", "1", "--section",
            "generated,request,qos", "--jobs", "1", "--json", str(j))
    assert r.returncode == 1, r.stdout[-3000:]
    _, failed, unsupported = summary(r.stdout)
    assert failed == 0 and unsupported > 0
    cases = json.loads(j.read_text())["cases"]
    assert all(c["message"].startswith("unsupported: LSTM") for c in cases if c["status"] == "unsupported")
    assert "unsupported (cases, the driver's reason)" in r.stdout


def test_ctrl_c_reports_what_ran_and_leaves_no_worker(vectors_dir: Path) -> None:
    # NOTE: enough work to be still running a second after the first unit ends (the model section alone
    # can be done by then)
    p = subprocess.Popen([sys.executable, "-m", "nnhal", "vts", "--device", "sample-all", "--section",
                          "model,generated,qos", "--ops", "CONV_2D", "--jobs", "2", "--progress"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        line = ""
        while "units" not in line and time.monotonic() < deadline:  # NOTE: the first progress line: units ended
            line = p.stderr.readline()
        time.sleep(1.0)
        children = _children(p.pid)
        assert children, "no worker processes"
        p.send_signal(signal.SIGINT)
        out, _ = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 130
    assert "interrupted" in out
    passed, failed, _ = summary(out)
    assert passed > 0 and failed == 0
    end = time.monotonic() + 10
    while [c for c in children if _alive(c)] and time.monotonic() < end:
        time.sleep(0.1)
    assert not [c for c in children if _alive(c)]


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _children(pid: int) -> list[int]:
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                stat = (p / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(p.name))
    return out


def test_a_driver_breaking_memory_domain_rules_fails_those_cases(device: Any) -> None:
    """allocate answering NONE to roles VTS wants refused fails exactly the allocate cases that do."""

    class Lenient:
        def __getattr__(self, name: str) -> Any:
            return getattr(device, name)

        def allocate(self, desc: Any, prepared: list, ins: list, outs: list) -> tuple:
            status, buf, token = device.allocate(desc, prepared, ins, outs)
            if status != S.NONE and any(r.frequency == 10.0 for r in [*ins, *outs]):
                return S.NONE, object(), 99
            return status, buf, token

    cases = memory.run(Lenient(), [hal.OperandType.TENSOR_FLOAT32])
    failed = {(c.test, c.mutation) for c in cases if c.status == "fail"}
    assert failed == {("MemoryDomainAllocateTest.InvalidFrequency", "input role frequency 10.0"),
                      ("MemoryDomainAllocateTest.InvalidFrequency", "output role frequency 10.0")}


def test_sample_indexes() -> None:
    assert list(sample_indexes(10, None)) == list(range(10))
    assert sample_indexes(10, 3) == [0, 4, 9] or sample_indexes(10, 3) == [0, 5, 9]
    assert sample_indexes(10, 1) == [0] and sample_indexes(10, 0) == []
    assert list(sample_indexes(3, 10)) == [0, 1, 2]


def test_units_keep_the_order_whatever_the_batch(device: Any) -> None:
    from tests.vts_models import sample_models

    models = list(sample_models()[:10])
    a = [(u.section, [m.name for m in u.models]) for u in plan(["model", "basic"], models, 3)]
    flat = [(s, n) for s, ns in a for n in (ns or [None])]
    b = [(u.section, [m.name for m in u.models]) for u in plan(["model", "basic"], models, 7)]
    assert flat == [(s, n) for s, ns in b for n in (ns or [None])]
    assert a[0] == ("basic", [])


class _Bomb:
    """A model whose arrival kills the worker process (as a driver that crashes it would)."""
    spec, name = "crash", "bomb"

    def __reduce__(self) -> tuple:
        return os._exit, (3,)


def test_a_worker_that_dies_fails_only_its_model() -> None:
    from nnhal.conformance.vts.suite import Config, Unit, run_local

    units = [Unit(0, "basic"), Unit(1, "model", (_Bomb(),)), Unit(2, "basic")]  # type: ignore[arg-type]
    got: dict[int, list] = {}
    run_local(units, Config("sample-all"), 2, lambda u, cases: got.setdefault(u.index, []).extend(cases))
    assert sorted(got) == [0, 1, 2]
    assert all(c.status == "pass" for k in (0, 2) for c in got[k]) and got[0]
    [dead] = got[1]
    assert dead.status == "fail" and dead.model == "crash/bomb" and "worker process died" in dead.message
    assert "exit status 3" in dead.message or "unknown" in dead.message


def test_one_process_runs_a_batch_through_every_section_in_turn():
    """In one process the per-model sections go batch by batch (a batch's models through generated, model,
    request, burst and qos while the driver keeps them), the fixed sections before and after as in the
    plan; every unit once (the report is in unit order, whatever the order they ran in)."""
    from nnhal.conformance.vts.suite import Unit, in_process_order

    models = [object() for _ in range(6)]
    units = plan(SECTIONS, models, 4)  # type: ignore[arg-type]
    order = in_process_order(units)
    assert sorted(u.index for u in order) == [u.index for u in units]
    labels = [(u.section, tuple(map(id, u.models))) for u in order]
    first, second = tuple(map(id, models[:4])), tuple(map(id, models[4:]))
    assert labels == [("basic", ())] + [(s, first) for s in ("generated", "model", "request", "burst", "qos")] \
        + [(s, second) for s in ("generated", "model", "request", "burst", "qos")] + [("memory", ()), ("caching", ())]
    random_unit = Unit(len(units), "random", cases=(0, 8))
    assert in_process_order([*units, random_unit])[-1] is random_unit
