"""``nnhal conformance --devices`` and ``nnhal run --devices --explain``: the
client runtime from the command line, over the partial sample drivers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from nnhal.cli import app as cli

ROOT = Path(__file__).resolve().parents[1]
VECTORS = ROOT / ".." / "shared" / "conformance"
MODEL = ROOT / ".." / "shared" / "models" / "vww_mobilenetv1_int8.tflite"
PARTIAL = "sample-float-fast,sample-quant,sample-minimal"


@pytest.mark.skipif(not VECTORS.is_dir(), reason="no conformance vectors")
def test_conformance_through_the_runtime_over_partial_drivers(capsys):
    # float ADD / CONCATENATION on sample-minimal, TANH on sample-float-fast, their quant8 forms on
    # sample-quant, the rest (int32, float16) on the CPU reference
    code = cli.main(["conformance", "--devices", PARTIAL, "--ops", "ADD,TANH,CONCATENATION",
                     "--no-progress", "--jobs", "1", "--plain"])
    out = capsys.readouterr().out
    assert code == 0, out[-2000:]
    assert "0 failed" in out and "client runtime" in out


@pytest.mark.skipif(not (VECTORS.parent / "conformance-aidl").is_dir(), reason="no AIDL conformance vectors")
def test_aidl_vectors_through_the_runtime_over_partial_drivers(capsys):
    # BATCH_MATMUL / PACK (AIDL v2): the runtime speaks AIDL v2 to every device; the partial drivers refuse
    # them and the CPU reference takes them, in every mode and variant
    code = cli.main(["conformance", "--devices", PARTIAL, str(VECTORS.parent / "conformance-aidl"), "--ops",
                     "BATCH_MATMUL,PACK", "--no-progress", "--jobs", "1", "--plain"])
    out = capsys.readouterr().out
    assert code == 0, out[-2000:]
    assert "0 failed" in out and "client runtime" in out and "BATCH_MATMUL / float32" in out


@pytest.mark.skipif(not VECTORS.is_dir(), reason="no conformance vectors")
def test_zero_sized_temporaries_between_partitions_run_the_whole_model_on_the_reference(capsys):
    # BOX_WITH_NMS_LIMIT (sample-quant / the reference) leaves no box for the next partition: a request
    # cannot carry a zero-sized input, so the runtime runs the whole model on the CPU reference
    code = cli.main(["conformance", "--devices", PARTIAL, "--model", "bbox_graph_zero_sized_quant8", "--no-progress",
                     "--jobs", "1", "--plain"])
    out = capsys.readouterr().out
    assert code == 0, out[-2000:]
    assert "0 failed" in out


@pytest.mark.runtime_sweep
@pytest.mark.skipif(not VECTORS.is_dir(), reason="no conformance vectors")
def test_whole_conformance_suite_through_the_runtime(capsys):
    code = cli.main(["conformance", "--devices", PARTIAL, "--no-progress", "--plain"])
    out = capsys.readouterr().out
    assert code == 0, out[-3000:]


@pytest.mark.skipif(not MODEL.exists(), reason="no shared models")
def test_run_explain_shows_placement_and_matches_one_device(tmp_path, capsys):
    assert cli.main(["run", str(MODEL), "-o", str(tmp_path / "ref")]) == 0
    assert cli.main(["run", str(MODEL), "--devices", PARTIAL, "--explain", "-o", str(tmp_path / "rt")]) == 0
    out = capsys.readouterr().out
    assert "operation 0 QUANTIZE: sample-float-fast" in out
    assert "sample-quant refused: sample-quant takes operations whose first input is TENSOR_QUANT8_ASYMM" in out
    assert "partition 1: sample-quant" in out
    np.testing.assert_array_equal(np.load(tmp_path / "rt" / "output_0.npy"), np.load(tmp_path / "ref" / "output_0.npy"))


@pytest.fixture
def quant_service(service_runtime_dir: Path):
    """A ``nnhal serve --driver sample-quant`` process, always stopped."""
    from tests.service_util import ServiceProcess

    sp = ServiceProcess(service_runtime_dir, name="h9-quant", driver="sample-quant")
    try:
        sp.start()
        yield sp
    finally:
        sp.stop()


def test_discovery_and_partitions_across_a_service_and_in_process_drivers(quant_service):
    from nnhal import hal, runtime
    from tests.test_runtime import inputs, three_partitions

    assert "h9-quant" in runtime.names()
    ref = runtime.Compilation(three_partitions(), ["sample-all"]).run(inputs())
    with runtime.Compilation(three_partitions(), ["sample-float-fast", "h9-quant", "sample-minimal"]) as c:
        assert [s.device.name for s in c.steps][-1] == "h9-quant" and not c.steps[-1].device.in_process
        # NOTE: the service too through its AIDL face (nnhal.aidl.connect), at the 1.3 model's level
        assert c.face(c.steps[-1].device).interface == "AIDL v1"
        for mode in ("sync", "burst", "fenced"):
            out = c.run(inputs(), mode=mode)
            np.testing.assert_array_equal(out["r"], ref["r"])
        p = c.placement()
    # the reason crosses the boundary (hal.INnhalDevice through the service), the same as in process
    assert p.operations[0].refused["h9-quant"] == \
        "sample-quant takes operations whose first input is TENSOR_QUANT8_ASYMM(_SIGNED), not TENSOR_FLOAT32"
    assert hal.OperationType.RELU.name == p.operations[4].type and p.operations[4].device == "h9-quant"


@pytest.mark.skipif(not VECTORS.is_dir(), reason="no conformance vectors")
def test_partitions_tool_counts_the_plans(capsys):
    from nnhal.tools import partitions

    vec = next((VECTORS / "V1_2").glob("bbox_graph*"))
    assert partitions.main([str(vec), "--devices", PARTIAL]) == 0
    out = capsys.readouterr().out
    assert "3 partition(s): 1 models" in out and "bbox_graph_zero_sized_quant8: 3 partitions" in out
