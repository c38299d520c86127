"""``nnhal vts --hal aidl`` and ``nnhal conformance --hal aidl``: every AIDL
VTS section on sample-all (a small ``--sample``), what the AIDL sections ask
that VTS 1.3's do not (the version-4 calls, the IBurst's memory identifier
tokens, prepareModelWithConfig), the interface version's limits, a plugin
written to the README's "Writing a driver" judged through its AIDL face,
sections that catch an AIDL driver breaking a rule, and the command line's
mistakes; the full sections over every model behind ``-m sweep``."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nnhal import aidl
from nnhal.conformance.face import AidlFace
from nnhal.conformance.vts import burst, model, qos, request
from nnhal.conformance.vts.sections import SECTIONS
from tests.aidl_util import NUMPY_DRIVER
from tests.vts_models import all_models, model_id, sample_models

SUMMARY = re.compile(r"^(\d+) passed, (\d+) failed, (\d+) unsupported$")
S = aidl.ErrorStatus


def nnhal(*args: str, timeout: float = 600, **kw: Any) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nnhal", *args], capture_output=True, text=True, timeout=timeout,
                          **kw)


def summary(out: str) -> tuple[int, int, int]:
    m = SUMMARY.match(out.rstrip("\n").splitlines()[-1])
    assert m, out[-2000:]
    return int(m[1]), int(m[2]), int(m[3])


@pytest.fixture(autouse=True)
def quiet(quiet_driver: None) -> None:
    """The driver logs every rejection of the thousands of mutations."""


def test_every_aidl_section_passes_on_sample_all(tmp_path: Path, vectors_dir: Path) -> None:
    j = tmp_path / "r.json"
    r = nnhal("vts", "--hal", "aidl", "--device", "sample-all", "--ops", "ADD", "--sample", "2", "--jobs", "2",
              "--json", str(j), str(vectors_dir))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    passed, failed, unsupported = summary(r.stdout)
    assert passed > 1000 and failed == unsupported == 0
    doc = json.loads(j.read_text())
    assert doc["settings"]["hal"] == "aidl" and list(doc["sections"]) == list(SECTIONS)
    cases = doc["cases"]
    tests = {c["test"] for c in cases}
    for expected in ("NeuralNetworksAidlTest.CycleTest", "NeuralNetworksAidlTest.InterfaceVersion",
                     "ValidationTest.validateBurst", "ValidationTest.removeInputTest",
                     "TestGenerated.DynamicOutputShapeTest", "TestGenerated.MemoryDomainTest",
                     "MemoryDomainExecutionTest.InvalidToken", "CompilationCachingSecurityTest.WrongToken",
                     "DeadlineTest.execute"):
        assert expected in tests, expected
    assert not any("NumFd" in t or "Hidl" in t or "Serialization" in t for t in tests)  # NOTE: 1.3's only
    mutations = {(c["section"], c["mutation"]) for c in cases}
    for path in ("createReusableExecution, executeSynchronously", "createReusableExecution, executeFenced",
                 "executeSynchronouslyWithConfig", "executeFencedWithConfig", "burst executeSynchronouslyWithConfig"):
        assert any(s == "request" and m.endswith(f"[{path}]") for s, m in mutations), path
    generated = {m for s, m in mutations if s == "generated"}
    assert {"sync", "reusable-fenced", "burst-config", "prepareModelWithConfig, fenced-config",
            "device, burst", "hardware_buffer_blob, reusable"} <= generated
    assert {m for s, m in mutations if s == "qos" and m.startswith("BURST")}
    assert any(c["section"] == "memory" and c["model"].endswith("_BURST") for c in cases)


def test_the_sections_at_interface_version_3() -> None:
    """No reusable execution and no config call where the interface has none (the AIDL VTS asks them from 4)."""
    face = AidlFace(aidl.get_device("sample-all", version=3))
    vm = next(vm for vm in sample_models() if vm.name == "add")
    three = request.run_model(face, vm)
    cases = three + model.run_model(face, vm, sample=20) + burst.run_model(face, vm)
    assert cases and all(c.status == "pass" for c in cases), [c for c in cases if c.status != "pass"][:5]
    assert not any("Reusable" in c.mutation or "Config" in c.mutation for c in cases)
    four = request.run_model(AidlFace(aidl.get_device("sample-all")), vm)
    assert len(four) * 3 == len(three) * 8  # NOTE: 3 executors at version 3, 8 at version 4


# ---------------------------------------------------------------------------
# sections that catch an AIDL driver breaking a rule


class _Delegate:
    """Answers what it does not define as ``inner`` does."""

    def __init__(self, inner: Any):
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class _Device:
    def __init__(self, **overrides: Any):
        self.inner = aidl.get_device("sample-all")
        self.__dict__.update(overrides)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _wrapping(wrap_burst: Any = None, wrap_prepared: Any = None) -> _Device:
    """sample-all's AIDL face, its prepared models (and their bursts) wrapped."""
    dev = _Device()

    def prepare(m: Any, *args: Any) -> None:
        *rest, callback = args

        class Callback(aidl.PreparedModelCallback):
            def notify(self, status: Any, prepared: Any) -> None:
                if prepared is not None:
                    prepared = _Prepared(prepared, wrap_burst) if wrap_prepared is None else wrap_prepared(prepared)
                callback.notify(status, prepared)

        dev.inner.prepareModel(m, *rest, Callback())

    dev.prepareModel = prepare  # type: ignore[attr-defined]
    return dev


class _Prepared(_Delegate):
    def __init__(self, inner: Any, wrap_burst: Any):
        super().__init__(inner)
        self.wrap_burst = wrap_burst

    def configureExecutionBurst(self) -> Any:
        b = self.inner.configureExecutionBurst()
        return self.wrap_burst(b) if self.wrap_burst else b


def test_a_burst_accepting_a_bad_token_fails_those_cases() -> None:
    class Lenient(_Delegate):
        def releaseMemoryResource(self, token: int) -> None:
            if token != -2:
                self.inner.releaseMemoryResource(token)

    vm = next(vm for vm in sample_models() if vm.name == "add")
    cases = burst.run_model(AidlFace(_wrapping(wrap_burst=Lenient)), vm)
    assert [c.mutation for c in cases if c.status == "fail"] == ["releaseMemoryResource(-2)"], cases
    assert sum(c.status == "pass" for c in cases) >= 4


def test_prepare_with_config_is_judged_as_prepare() -> None:
    """A driver whose prepareModelWithConfig refuses an invalid priority with the wrong status fails those model
    cases (prepareModel is right)."""
    inner = aidl.get_device("sample-all")

    def with_config(m: Any, config: Any, callback: Any) -> None:
        if config.priority not in (aidl.Priority.LOW, aidl.Priority.MEDIUM, aidl.Priority.HIGH):
            callback.notify(S.GENERAL_FAILURE, None)
            raise aidl.ServiceSpecificError(S.GENERAL_FAILURE, "no")
        inner.prepareModelWithConfig(m, config, callback)

    vm = next(vm for vm in sample_models() if vm.name == "add")
    cases = model.run_model(AidlFace(_Device(prepareModelWithConfig=with_config)), vm)
    failed = [c for c in cases if c.status == "fail"]
    assert failed and all(c.test == "ValidationTest.mutateExecutionPriorityTest" for c in failed)
    assert all("prepareModelWithConfig launch returned GENERAL_FAILURE" in c.message for c in failed)
    assert sum(c.status == "pass" for c in cases) > 100


def test_an_execution_with_config_accepting_a_bad_request_fails_those_cases() -> None:
    class Lenient(_Delegate):
        def executeSynchronouslyWithConfig(self, req: Any, config: Any, deadline: int) -> Any:
            try:
                return self.inner.executeSynchronouslyWithConfig(req, config, deadline)
            except aidl.ServiceSpecificError:
                return aidl.ExecutionResult(outputSufficientSize=True)

    vm = next(vm for vm in sample_models() if vm.name == "add")
    cases = request.run_model(AidlFace(_wrapping(wrap_prepared=Lenient)), vm)
    failed = {c.mutation for c in cases if c.status == "fail"}
    assert failed and all(m.endswith("[executeSynchronouslyWithConfig]") for m in failed), failed
    assert len(failed) == len(vm.main.inputIndexes) + len(vm.main.outputIndexes)


# ---------------------------------------------------------------------------
# a plugin, the command line


def _env(tmp_path: Path) -> dict:
    return dict(os.environ, NNHAL_RUNTIME_DIR=str(tmp_path / "rt"), NNHAL_CACHE_KEY_DIR=str(tmp_path / "key"))


def test_a_plugin_through_its_aidl_face(tmp_path: Path, vectors_dir: Path) -> None:
    """The README's example backend, unchanged, is judged through the AIDL face: what it takes passes, what it
    refuses is unsupported, nothing fails."""
    r = nnhal("conformance", "--hal", "aidl", "--device", NUMPY_DRIVER, "--ops", "ADD,RELU", "--jobs", "1",
              "--no-progress", "--json", str(tmp_path / "c.json"), str(vectors_dir), env=_env(tmp_path))
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]  # NOTE: unsupported models: not 0
    doc = json.loads((tmp_path / "c.json").read_text())
    assert doc["counts"]["fail"] == 0 and doc["models"]["pass"] >= 5 and doc["settings"]["hal"] == "aidl"
    r = nnhal("vts", str(vectors_dir), "--hal", "aidl", "--device", NUMPY_DRIVER, "--ops", "ADD", "--sample", "1",
              "--jobs", "1", "--section", "basic,generated,model,request,burst,qos", env=_env(tmp_path))
    passed, failed, unsupported = summary(r.stdout)
    assert failed == 0 and passed > 100 and unsupported > 0, r.stdout[-3000:]


@pytest.mark.parametrize("args,message", [
    (["--hal", "aidl", "--mode", "async"], "--mode async: the aidl face has no such executor"),
    (["--mode", "reusable"], "--mode reusable: the hidl face has no such executor"),
    (["--hal", "aidl", "--devices", "sample-all,sample-quant"], "--devices runs through the client runtime"),
    (["--hal", "aidl", "--device", "no-such"], "no device named 'no-such'"),
])
def test_conformance_mistakes_are_one_line_and_exit_2(args: list[str], message: str, vectors_dir: Path) -> None:
    r = nnhal("conformance", *args, str(vectors_dir / "V1_0" / "add.json.gz"), timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.count("\n") == 1 and message in r.stderr and r.stderr.startswith("nnhal conformance: "), r.stderr


def test_conformance_through_the_aidl_face(tmp_path: Path, vectors_dir: Path) -> None:
    j = tmp_path / "r.json"
    r = nnhal("conformance", "--hal", "aidl", "--ops", "MUL", "--jobs", "2", "--no-progress", "--json", str(j),
              str(vectors_dir))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    doc = json.loads(j.read_text())
    assert doc["settings"]["modes"] == ["sync", "burst", "fenced", "reusable", "reusable-fenced"]
    assert doc["counts"]["fail"] == 0 and doc["counts"]["pass"] > 50
    assert "hal:" in r.stdout and "aidl" in r.stdout


# ---------------------------------------------------------------------------
# the sweeps


@pytest.mark.sweep
@pytest.mark.timeout(7200)
@pytest.mark.parametrize("vm", all_models(), ids=[model_id(vm) for vm in all_models()])
def test_aidl_validation_sections_sweep(vm: Any) -> None:
    """Every mutation of every model, every invalid request and token, every deadline, through the AIDL face."""
    face = AidlFace(aidl.get_device("sample-all"))
    cases = model.run_model(face, vm) + request.run_model(face, vm) + burst.run_model(face, vm) + \
        qos.run_model(face, vm)
    bad = [f"{c.test}: {c.mutation}: {c.message}" for c in cases if c.status != "pass"]
    assert not bad, "\n".join(bad[:40])


def test_an_in_process_device_says_why_through_its_aidl_face() -> None:
    """The AIDL interface has no reasons call: the face asks the same in-process device's nnhal reasons query,
    so unsupported cases name the driver's reason (a service's AIDL face gives the generic line)."""
    from nnhal.conformance import vectors
    from nnhal.conformance.face import NO_REASON
    from nnhal.conformance.vts.device import open_face
    from tests.conftest import vectors_root

    try:
        face = open_face("litert-cpu", "aidl")
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"no litert-cpu: {e}")
    vm = next(iter(vectors.load([vectors_root()], {"LSH_PROJECTION"})))
    status, flags, why = face.supported(vm.build_model(), reasons=True)
    assert status == 0 and not all(flags)
    assert any("LSH_PROJECTION" in w and w != NO_REASON for ok, w in zip(flags, why) if not ok), why
    bare = AidlFace(face.device)
    assert [w for ok, w in zip(*bare.supported(vm.build_model(), reasons=True)[1:]) if not ok] == [NO_REASON]
