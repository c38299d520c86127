"""The conformance runner through the AIDL face (``nnhal conformance --hal
aidl``): a sample of the vectors in every AIDL executor (sync, burst,
fenced, reusable sync and fenced, the version-4 ``*WithConfig`` calls, and
on a model prepareModelWithConfig prepared), in every kind of request
memory, at interface versions 4 and 3; the whole suite behind ``-m sweep``.
The runner must catch a wrong AIDL driver too, not only bless a right one."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Callable

import pytest

import nnhal
from nnhal import aidl
from nnhal import memory as hal_memory
from nnhal.conformance import vectors
from nnhal.conformance.face import AIDL_CONFIG_MODES, AIDL_MODES, AidlFace
from nnhal.conformance.runner import Runner
from tests.conftest import vectors_root

S = aidl.ErrorStatus
# NOTE: every executor's special cases: zero-sized outputs, omitted inputs, an infinite loop (the 1 ms loop
# timeout), IF / WHILE, float16, quant8 signed coupling, dynamic shapes with several outputs
SUBSET = ["V1_0/add", "V1_1/mean_float_1", "V1_2/lstm2_float16", "V1_2/resize_bilinear_v1_2", "V1_3/if_constant",
          "V1_3/while_sum_of_powers_quant8", "V1_3/while_infinite_loop", "V1_2/quantize", "V1_3/add_int32",
          "V1_3/mul_quant8_signed", "V1_2/box_with_nms_limit", "V1_2/split_float_1"]
AIDL_ROOT = vectors_root().parent / "conformance-aidl"
ALL = sorted([*vectors_root().rglob("*.json.gz"), *AIDL_ROOT.rglob("*.json.gz")]) if vectors_root().is_dir() else []


def subset_models() -> list[vectors.VectorModel]:
    root = vectors_root()
    return [vm for n in SUBSET if (root / f"{n}.json.gz").exists() for vm in vectors.load_file(root / f"{n}.json.gz")]


def _bad(results: list) -> list[str]:
    return [f"{r.model} [{r.mode}/{r.variant}] {r.status}: {r.message}" for r in results if r.status != "pass"]


@pytest.fixture(scope="module")
def face() -> AidlFace:
    return AidlFace(aidl.get_device("sample-all"))


def test_a_sample_passes_in_every_executor(face: AidlFace) -> None:
    assert face.modes == AIDL_MODES and face.all_modes == (*AIDL_MODES, *AIDL_CONFIG_MODES)
    runner = Runner(face, face.all_modes)
    results = [r for vm in subset_models() for r in runner.run_model(vm)]
    assert not _bad(results), "\n".join(_bad(results)[:20])
    assert {r.mode for r in results} == set(face.all_modes) and {r.variant for r in results} >= {
        "plain", "dynamic", "signed"}
    assert len(results) > 800


def test_the_aidl_vectors_pass_in_every_executor(face: AidlFace) -> None:
    """The operations and operand types of AIDL versions 2 and 3, through the face that can carry them."""
    files = sorted(AIDL_ROOT.rglob("*.json.gz"))
    assert len(files) >= 4, AIDL_ROOT
    runner = Runner(face, face.all_modes)
    results = [r for f in files for vm in vectors.load_file(f) for r in runner.run_model(vm)]
    assert not _bad(results), "\n".join(_bad(results)[:20])
    assert {r.model.split("_")[0] for r in results} >= {"batch", "pack", "reshape", "rsqrt"} and len(results) > 700


@pytest.mark.parametrize("memory", ["device", "hardware_buffer_blob", "mmap_fd"])
def test_every_request_memory(face: AidlFace, memory: str) -> None:
    """Driver-allocated buffers go through the IBurst too (memory identifier token -1), as the AIDL VTS runs them."""
    runner = Runner(face, face.all_modes, ("plain", "dynamic"), memory)
    results = [r for vm in subset_models()[:40] for r in runner.run_model(vm)]
    assert not _bad(results), "\n".join(_bad(results)[:20])
    assert {r.mode for r in results if r.status == "pass"} == set(face.all_modes)


def test_models_prepared_with_config(face: AidlFace) -> None:
    runner = Runner(face, face.all_modes, prepare_config=True)
    results = [r for vm in subset_models()[:30] for r in runner.run_model(vm)]
    assert results and not _bad(results), "\n".join(_bad(results)[:20])


def test_an_older_interface_version_has_its_executors_only() -> None:
    """Version 3 has no reusable execution and no config call: the runner offers and uses none of them."""
    face3 = AidlFace(aidl.get_device("sample-all", version=3))
    assert face3.modes == face3.all_modes == ("sync", "burst", "fenced") and not face3.has_config
    with pytest.raises(ValueError, match="no executor reusable"):
        Runner(face3, ("sync", "reusable"))
    with pytest.raises(ValueError, match="prepareModelWithConfig"):
        Runner(face3, ("sync",), prepare_config=True)
    results = [r for vm in subset_models()[:25] for r in Runner(face3, face3.modes).run_model(vm)]
    assert results and not _bad(results), "\n".join(_bad(results)[:20])


def test_a_model_newer_than_the_interface_is_skipped() -> None:
    """As the AIDL VTS's SkipIfDriverOlderThanTestModel; a HAL 1.3 face never runs an AIDL model."""
    vm = copy.deepcopy(subset_models()[0])
    vm.minSupportedVersion = "AIDL_V2"
    for device in (AidlFace(aidl.get_device("sample-all", version=1)), nnhal.get_device("sample-all")):
        results = Runner(device, ("sync",)).run_model(vm)
        assert results and {r.status for r in results} == {"skip"}, results
    assert {r.status for r in Runner(AidlFace(aidl.get_device("sample-all", version=2)), ("sync",)).run_model(vm)} \
        == {"pass"}


def test_mutated_types_reach_the_device_as_vts_sends_them(face: AidlFace) -> None:
    """A type AIDL has no enum value for (VTS's -1) is sent as that int32, not refused by the conversion."""
    model = subset_models()[0].build_model()
    model.main.operands[0].type = -1
    model.main.operations[0].type = 0xFFFFFFFF
    got = face.model(model)
    assert got.main.operands[0].type == -1 and got.main.operations[0].type == -1
    assert got.main.operands[1].type == model.main.operands[1].type
    assert face.supported(model)[0] == S.INVALID_ARGUMENT


# ---------------------------------------------------------------------------
# the runner catches a wrong AIDL driver


class _Device:
    """An AIDL device whose prepared models are ``wrap(inner prepared model)``."""

    def __init__(self, wrap: Callable[[Any], Any]):
        self.inner, self.wrap = aidl.get_device("sample-all"), wrap

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def prepareModel(self, model: Any, *args: Any) -> None:
        *rest, callback = args
        device = self

        class Callback(aidl.PreparedModelCallback):
            def notify(self, status: Any, prepared: Any) -> None:
                callback.notify(status, device.wrap(prepared) if prepared is not None else None)

        self.inner.prepareModel(model, *rest, Callback())


class _Prepared:
    def __init__(self, inner: Any):
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _run(wrap: Callable[[Any], Any], modes: tuple[str, ...], variants: tuple[str, ...] = ("plain",),
         times: int = 1) -> list:
    """The results of ``times`` runs of V1_0/add on one runner (timing YES and NO alternate)."""
    vm = vectors.load_file(vectors_root() / "V1_0" / "add.json.gz")[0]
    runner = Runner(AidlFace(_Device(wrap)), modes, variants)
    return [r for _ in range(times) for r in runner.run_model(vm)]


def test_wrong_outputs_fail() -> None:
    class Wrong(_Prepared):
        def executeSynchronously(self, request: Any, *args: Any) -> Any:
            result = self.inner.executeSynchronously(request, *args)
            mem = hal_memory.map(aidl.convert.to_canonical(request.pools[1].pool))
            mem[3] ^= 0x40  # NOTE: the exponent of the first float32 output
            mem.release()
            return result

    [r] = _run(Wrong, ("sync",))
    assert r.status == "fail" and "output 0" in r.message


def test_a_reusable_execution_that_runs_once_fails() -> None:
    """The second run of a reusable execution must write the outputs again (they are cleared in between)."""
    class Lazy(_Prepared):
        def createReusableExecution(self, request: Any, config: Any) -> Any:
            execution = self.inner.createReusableExecution(request, config)
            runs: list = []

            class Once:
                def executeSynchronously(self, deadline: int) -> Any:
                    if not runs:
                        runs.append(execution.executeSynchronously(deadline))
                    return runs[0]

            return Once()

    results = {r.mode: r for r in _run(Lazy, ("sync", "reusable"))}
    assert results["sync"].status == "pass"
    assert results["reusable"].status == "fail" and "output 0" in results["reusable"].message


def test_timing_without_measure_fails_in_the_burst() -> None:
    class Timed(_Prepared):
        def configureExecutionBurst(self) -> Any:
            burst = self.inner.configureExecutionBurst()

            class Burst:
                def __getattr__(self, name: str) -> Any:
                    return getattr(burst, name)

                def executeSynchronously(self, *args: Any) -> Any:
                    result = burst.executeSynchronously(*args)
                    result.timing = aidl.Timing(timeOnDeviceNs=5000, timeInDriverNs=7000)
                    return result

            return Burst()

    results = _run(Timed, ("burst",), times=2)
    assert [r.status for r in results] == ["pass", "fail"], results  # NOTE: timing YES, then NO
    assert "timing reported without MeasureTiming.YES" in results[1].message


def test_a_fenced_execution_accepting_unspecified_outputs_fails() -> None:
    """The dynamic variant's fenced run must be refused; a driver that says it ran it fails that case only."""
    class Done:
        def getExecutionInfo(self, launched: Any = None, fenced: Any = None) -> Any:
            return S.NONE

    class Accepting(_Prepared):
        def executeFenced(self, *args: Any) -> Any:
            try:
                return self.inner.executeFenced(*args)
            except aidl.ServiceSpecificError:
                return aidl.FencedExecutionResult(callback=Done(), syncFence=None)

    by_variant = {r.variant: r for r in _run(Accepting, ("fenced",), ("plain", "dynamic"))}
    assert by_variant["plain"].status == "pass"
    assert by_variant["dynamic"].status == "fail" and "not INVALID_ARGUMENT" in by_variant["dynamic"].message


@pytest.mark.sweep
@pytest.mark.timeout(7200)
@pytest.mark.parametrize("path", ALL, ids=[f"{p.parent.name}/{p.name[:-8]}" for p in ALL])
def test_vector_file_through_the_aidl_face(path: Path) -> None:
    """Every model of the file (1.x and AIDL) in every executor of AIDL version 4, every variant."""
    face = AidlFace(aidl.get_device("sample-all"))
    runner = Runner(face, face.all_modes)
    results = [r for vm in vectors.load_file(path) for r in runner.run_model(vm)]
    assert results and not _bad(results), "\n".join(_bad(results)[:20])


def test_a_service_through_its_aidl_face(service_process: Any, capsys: pytest.CaptureFixture) -> None:
    """`nnhal conformance --hal aidl` and `nnhal vts --hal aidl` name a running service as they name an
    in-process driver (the service serves both faces)."""
    from nnhal import cli

    rc = cli.main(["conformance", "--hal", "aidl", "--device", service_process.name, "--ops", "ADD",
                   "--model", "add_v1_2", "--mode", "all", "--no-progress"])
    out = capsys.readouterr().out
    assert rc == 0 and "0 failed" in out and " passed" in out, out[-2000:]
    rc = cli.main(["vts", "--hal", "aidl", "--device", service_process.name, "--section", "basic", "--jobs", "1",
                   "--no-progress"])
    out = capsys.readouterr().out
    assert rc == 0 and "0 failed" in out, out[-2000:]
