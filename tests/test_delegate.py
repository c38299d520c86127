"""Models as Android's NNAPI delegate runs them (nnhal.delegate): the plan, the CPU partitions on
LiteRT, the tensors crossing them, against LiteRT running the original file."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("ai_edge_litert", reason="ai-edge-litert is not installed (pip install 'nnhal[litert]')")

from nnhal import cli, hal  # noqa: E402
from nnhal.tflite.writer import Tensor, graph, one_op, options  # noqa: E402
from tests.delegate_util import MODELS, plan_of, run_and_compare, sandwich, where  # noqa: E402

SHARED = ["palm_detection_lite", "kws_mobilenetv2_int8", "vww_mobilenetv1_int8", "mobilenet_v1_f32", "mobilenet_v2_f32"]


def _model(name: str) -> str:
    p = MODELS / f"{name}.tflite"
    if not p.exists():
        pytest.skip(f"{p} is missing (set NNHAL_MODELS)")
    return str(p)


def _ok(diffs) -> bool:
    return all(d.ok(1e-4, 1) for d in diffs)


# --------------------------------------------------------------------------- operators with no NNAPI form

def _cumsum() -> bytes:
    return sandwich("CUMSUM", [Tensor([], "int32", data=np.array(1, np.int32))], Tensor([1, 8]),
                    options("CumsumOptions"))


def _floor_mod() -> bytes:
    return sandwich("FLOOR_MOD", [Tensor([1], data=np.array([0.75], np.float32))], Tensor([1, 8]),
                    options("FloorModOptions"))


def _gather_nd() -> bytes:
    idx = np.array([[0, 3], [0, 1], [0, 7]], np.int32)
    return sandwich("GATHER_ND", [Tensor([3, 2], "int32", data=idx)], Tensor([3]), None)


def _batch_matmul() -> bytes:
    w = np.random.default_rng(1).normal(size=(1, 8, 5)).astype(np.float32)
    return sandwich("BATCH_MATMUL", [Tensor([1, 8, 5], data=w)], Tensor([1, 2, 5]), options("BatchMatMulOptions"),
                    x_shape=(1, 2, 8))


def _rfft2d() -> bytes:
    # NOTE: RFFT2D -> COMPLEX_ABS (two CPU operators; complex64 between them stays inside the CPU partition)
    ts = [Tensor([1, 4, 8]), Tensor([1], data=np.ones(1, np.float32)), Tensor([1, 4, 8]),
          Tensor([2], "int32", data=np.array([4, 8], np.int32)), Tensor([1, 4, 5], "complex64"), Tensor([1, 4, 5]),
          Tensor([1, 4, 5])]
    ops = [("ADD", [0, 1], [2], options("AddOptions")), ("RFFT2D", [2, 3], [4], options("Rfft2dOptions")),
           ("COMPLEX_ABS", [4], [5], None), ("ADD", [5, 1], [6], options("AddOptions"))]
    return graph(ts, ops, inputs=[0], outputs=[6])


@pytest.mark.parametrize("build,name", [(_cumsum, "CUMSUM"), (_floor_mod, "FLOOR_MOD"), (_gather_nd, "GATHER_ND"),
                                        (_batch_matmul, "BATCH_MATMUL"), (_rfft2d, "RFFT2D")])
@pytest.mark.parametrize("mode", ["delegate", "max"])
def test_operators_without_nnapi_form_run_on_the_cpu(build, name, mode):
    plan = plan_of(build(), plan=mode)
    ops = {o.name: o for o in plan.operators}
    assert ops[name].where == "cpu" and ops[name].reason
    assert plan.operators[0].where == "nnapi" and plan.operators[-1].where == "nnapi"
    assert [p.where for p in plan.partitions] == ["nnapi", "cpu", "nnapi"]
    assert _ok(run_and_compare(plan))


def test_computed_shape_reshape_amid_nnapi_operators():
    """A RESHAPE whose shape is computed (here by an int32 ADD of constants, as a converter leaves a
    shape arithmetic): the delegate leaves it on the CPU (nnapi_delegate.cc:2623) and delegates the rest;
    nnhal's max plan maps it with the output's static shape."""
    w = np.random.default_rng(0).normal(size=(3, 1, 1, 2)).astype(np.float32)
    ts = [Tensor([1, 4, 4, 2]), Tensor([3, 1, 1, 2], data=w), Tensor([3], data=np.zeros(3, np.float32)),
          Tensor([1, 4, 4, 3]), Tensor([3], "int32", data=np.array([1, 16, 3], np.int32)),
          Tensor([3], "int32", data=np.zeros(3, np.int32)), Tensor([3], "int32"), Tensor([1, 16, 3]),
          Tensor([1], data=np.ones(1, np.float32)), Tensor([1, 16, 3])]
    conv = options("Conv2DOptions", padding=0, strideW=1, strideH=1, dilationWFactor=1, dilationHFactor=1)
    data = graph(ts, [("CONV_2D", [0, 1, 2], [3], conv), ("ADD", [4, 5], [6], options("AddOptions")),
                      ("RESHAPE", [3, 6], [7], None), ("ADD", [7, 8], [9], options("AddOptions"))],
                 inputs=[0], outputs=[9])
    plan = plan_of(data)
    assert where(plan) == ["nnapi", "nnapi", "cpu", "nnapi"]
    assert "The shape input tensor must be constant. (nnapi_delegate.cc:2623)" in plan.operators[2].reason
    assert "[nnhal could express it: --plan max]" in plan.operators[2].reason
    assert _ok(run_and_compare(plan))
    mx = plan_of(data, plan="max")
    assert where(mx) == ["nnapi"] * 4 and _ok(run_and_compare(mx))


def _mediapipe_custom() -> bytes:
    """ADD -> MediaPipe's Convolution2DTransposeBias (custom options: padding, stride w, stride h)."""
    import struct

    w = np.random.default_rng(2).normal(size=(2, 2, 2, 3)).astype(np.float32)
    ts = [Tensor([1, 3, 3, 3]), Tensor([1], data=np.ones(1, np.float32)), Tensor([1, 3, 3, 3]),
          Tensor([2, 2, 2, 3], data=w), Tensor([2], data=np.zeros(2, np.float32)), Tensor([1, 6, 6, 2])]
    m = graph(ts, [("ADD", [0, 1], [2], options("AddOptions"))], inputs=[0], outputs=[2])
    # NOTE: the writer's graph() has builtins only: add the custom operator through the schema objects
    from nnhal.tflite import schema as sch

    mt = sch.read_model(m)
    s = sch.schema()
    code = s.OperatorCodeT()
    code.builtinCode = code.deprecatedBuiltinCode = 32
    code.customCode = b"Convolution2DTransposeBias"
    code.version = 1
    mt.operatorCodes.append(code)
    sg = mt.subgraphs[0]  # NOTE: tensors 3-5 (weights, bias, output) are already in the table
    op = s.OperatorT()
    op.opcodeIndex = len(mt.operatorCodes) - 1
    op.inputs = np.asarray([2, 3, 4], np.int32)
    op.outputs = np.asarray([5], np.int32)
    op.customOptions = np.frombuffer(struct.pack("<3i", 2, 2, 2), np.uint8)
    sg.operators.append(op)
    sg.outputs = np.asarray([5, 2], np.int32)
    return sch.write_model(mt)


def test_custom_operator_stays_on_the_cpu_in_the_delegate_plan():
    """MediaPipe's Convolution2DTransposeBias: the delegate delegates no custom operator; nnhal maps it
    (--plan max). LiteRT lacks its kernel: the delegate plan cannot run (one line, exit 2), the max plan
    runs, and --compare compares what LiteRT can compute."""
    data = _mediapipe_custom()
    plan = plan_of(data)
    assert where(plan) == ["nnapi", "cpu"]
    assert "custom operator Convolution2DTransposeBias" in plan.operators[1].reason
    mx = plan_of(data, plan="max")
    assert where(mx) == ["nnapi", "nnapi"]


def test_custom_op_commands(tmp_path, capsys):
    data = _mediapipe_custom()
    path = tmp_path / "mp.tflite"
    path.write_bytes(data)
    with pytest.raises(SystemExit) as e:
        cli.main(["run", str(path)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1
    assert "Convolution2DTransposeBias is on the CPU" in err and "--plan max" in err
    assert cli.main(["run", str(path), "--plan", "max", "--compare", "--per-tensor"]) == 0
    out = capsys.readouterr().out
    assert "LiteRT cannot run the original" in out and "without Convolution2DTransposeBias" in out
    assert "output 0 t5: not compared" in out and "output 1" in out and "every tensor within tolerance" in out
    # bench: nnhal alone for that model, and on to the next
    rc = cli.main(["bench", str(path), _model("vww_mobilenetv1_int8"), "--runs", "2", "--baseline", "none",
                   "--plan", "max"])
    cap = capsys.readouterr()
    assert rc == 0 and "LiteRT cannot run it" in cap.err and "nnhal alone" in cap.err
    assert "vww_mobilenetv1_int8.tflite" in cap.out and "LiteRT xnnpack" in cap.out


# --------------------------------------------------------------------------- sparse weights

def test_sparse_weights_densified_at_load():
    """A FULLY_CONNECTED whose weights are a sparse constant behind DENSIFY: densified at load; from API
    30 the DENSIFY is delegated (nnapi_delegate.cc:2833), before it stays on the CPU (2835)."""
    from tests.test_delegate_densify import sparse_model

    data, _ = sparse_model(block=True)
    for api, first in ((30, "nnapi"), (29, "cpu")):
        plan = plan_of(data, api)
        assert plan.graph.densified == 1
        assert plan.operators[0].name == "DENSIFY" and plan.operators[0].where == first
        assert plan.operators[1].where == "nnapi"
        assert _ok(run_and_compare(plan))


def test_sparse_float16_weights_behind_densify():
    """MediaPipe's sparse detectors: float16 weights, sparse, DENSIFY then DEQUANTIZE. The DEQUANTIZE reads
    a computed tensor (not the float16-constant path): from API 30 the delegate takes both (2833, and
    2805: a non-constant float16 DEQUANTIZE); at 29 both stay on the CPU, the FULLY_CONNECTED reads the
    weights from it."""
    from tests.test_delegate_densify import sparse_model

    data, _ = sparse_model(block=False, dtype="float16")
    plan = plan_of(data, 30)
    assert where(plan) == ["nnapi"] * 3 and _ok(run_and_compare(plan))
    plan = plan_of(data, 29)
    assert where(plan) == ["cpu", "cpu", "nnapi"] and _ok(run_and_compare(plan))
    assert "2835" in plan.operators[0].reason and "2815" in plan.operators[1].reason


# --------------------------------------------------------------------------- the shared models

@pytest.mark.parametrize("api,mode", [(30, "delegate"), (30, "max"), (35, "delegate")])
@pytest.mark.parametrize("name", SHARED)
def test_shared_models_match_litert(name, api, mode):
    """Whole on NNAPI at API 30 (HAL 1.3) and at 35 (one AIDL v4 partition through the AIDL face, a reusable
    execution; python -m nnhal.tools.delegate_report sweeps every level)."""
    kernels = "ref" if "int8" in name else "builtin"
    plan = plan_of(_model(name), api, plan=mode)
    assert all(o.where == "nnapi" for o in plan.operators)
    assert _ok(run_and_compare(plan, kernels))


@pytest.mark.parametrize("api", [27, 28, 29])
def test_int8_model_at_older_api_levels(api):
    """kws (int8) at API 27-29: int8 convolutions stay on the CPU before 29, the int8 ADDs go to NNAPI as
    uint8 (HAL 1.0 / 1.1), the results still TFLite's reference's to the step."""
    plan = plan_of(_model("kws_mobilenetv2_int8"), api)
    conv = [o for o in plan.operators if o.name == "CONV_2D"]
    assert all(o.where == ("nnapi" if api >= 29 else "cpu") for o in conv)
    if api < 29:
        assert any(o.name == "ADD" and o.where == "nnapi" for o in plan.operators)
    assert _ok(run_and_compare(plan, "ref"))


def test_plan_json_and_explain(tmp_path, capsys):
    out = tmp_path / "plan.json"
    rc = cli.main(["run", _model("palm_detection_lite"), "--android-api", "29", "--explain", "--plan-json", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert doc["android_api"] == 29 and doc["plan"] == "delegate"
    assert [o["index"] for o in doc["operators"]] == list(range(232))
    assert {o["where"] for o in doc["operators"]} == {"nnapi", "cpu"}
    for o in doc["operators"]:
        assert set(o) >= {"index", "name", "where", "partition", "device"}
        assert ("reason" in o) == (o["where"] == "cpu")
        assert doc["partitions"][o["partition"]]["where"] == o["where"]
        assert o["index"] in doc["partitions"][o["partition"]]["operators"]
    nn = [p for p in doc["partitions"] if p["where"] == "nnapi"]
    assert len(nn) == 3 and all(p["device"] == "sample-all" for p in nn)
    # one line per distinct reason (root causes with counts), the time per partition
    assert "cpu x2 (RESIZE_BILINEAR 2): NNAPI does not support half_pixel_centers == true." in text
    assert text.count("half_pixel_centers") == 1
    assert "time: NNAPI" in text and " ms" in text.split("partition 1:")[1].splitlines()[0]


def test_max_partitions():
    """LimitDelegatedPartitions: beyond --max-partitions only the largest NNAPI partitions stay; 0: no limit."""
    path = _model("palm_detection_lite")  # NOTE: at API 28 its PRELUs (API 29) cut it into many partitions
    three = plan_of(path, 28)
    assert len(three.nnapi) == 3
    dropped = [o for o in three.operators if "max_number_delegated_partitions" in o.reason]
    assert dropped
    kept = sorted(len(p.operators) for p in three.nnapi)
    free = plan_of(path, 28, max_partitions=0)
    assert sorted(len(p.operators) for p in free.nnapi)[-3:] == kept
    assert len(free.nnapi) > 3 and not any("max_number_delegated_partitions" in o.reason for o in free.operators)
    assert all(free.operators[o.index].where == "nnapi" for o in dropped)
    one = plan_of(path, 28, max_partitions=1)
    assert len(one.nnapi) == 1


def test_accelerator_refusal_moves_operators_to_the_cpu():
    """--accelerator: the device's getSupportedOperations decides per operator (sample-minimal takes
    little); the rest stays on the CPU with the device named."""
    plan = plan_of(_model("mobilenet_v2_f32"), 30, accelerator="sample-minimal")
    refused = [o for o in plan.operators if o.where == "cpu"]
    by_device = [o for o in refused if "sample-minimal does not support it" in o.reason]
    assert by_device and all(o in by_device or "max_number_delegated_partitions" in o.reason for o in refused)
    assert _ok(run_and_compare(plan))


def test_graph_draws_partitions(tmp_path, capsys):
    import xml.etree.ElementTree as ET

    out = tmp_path / "p.svg"
    assert cli.main(["graph", _model("palm_detection_lite"), "--android-api", "29", "-o", str(out)]) == 0
    root = ET.parse(out).getroot()
    texts = "".join(t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text"))
    assert "partition 2: cpu LiteRT, 1 operators" in texts and "partition 1: nnapi" in texts  # graphview groups


def test_runs_without_litert_when_no_cpu_partition(monkeypatch):
    """A model nnhal runs whole needs no LiteRT; one with a CPU partition says LiteRT is required."""
    from nnhal.delegate import runner
    from nnhal.tflite import schema

    def missing():
        raise schema.MissingDependency("no LiteRT here")

    monkeypatch.setattr(runner, "open_litert", lambda *a, **k: missing())
    monkeypatch.setattr(schema, "interpreter_module", missing)
    data = one_op("ADD", [Tensor([2]), Tensor([2])], [Tensor([2])], options("AddOptions"))
    r = runner.Runner(plan_of(data), __import__("nnhal").get_device)
    y = r.run([np.ones(2, np.float32), np.ones(2, np.float32)])
    r.close()
    np.testing.assert_array_equal(y[0], [2, 2])
    with pytest.raises(runner.PlanError, match="LiteRT is not installed"):
        runner.Runner(plan_of(_cumsum()), __import__("nnhal").get_device)


def test_python_api():
    """nnhal.delegate.plan / Runner: the same plan and results as the command line."""
    from nnhal import delegate
    from nnhal.delegate.run import LiteRT

    data = _floor_mod()
    p = delegate.make_plan(data, android_api=29)
    assert [o.where for o in p.operators] == ["nnapi", "cpu", "nnapi"]
    assert p.to_json()["partitions"][1] == {"index": 1, "where": "cpu", "operators": [1], "device": None}
    x = [np.linspace(-3, 3, 8, dtype=np.float32).reshape(1, 8)]
    with delegate.Runner(p) as r:
        y = r.run(x)
        assert len(r.times) == 3
    np.testing.assert_allclose(y[0], LiteRT(data).run(x)[0], rtol=1e-6)
    with pytest.raises(ValueError, match="android-api"):
        delegate.make_plan(data, android_api=26)


def test_devices_through_the_client_runtime():
    """--devices: each NNAPI partition compiled by the client runtime over the devices; at API 29 the int8
    model's partition is uint8 (HAL 1.2 types) and sample-quant takes it; results TFLite's reference's."""
    plan = plan_of(_model("kws_mobilenetv2_int8"), 29, devices=["sample-quant", "sample-all"])
    assert plan.nnapi and plan.nnapi[0].device == "runtime:sample-quant,sample-all"
    assert _ok(run_and_compare(plan, "ref"))


def test_float16_model_refused_by_the_device_is_not_delegated():
    """DoPrepare: a model with float16 weights whose accelerator refuses some of its operators is not
    delegated at all ("Only allow full model delegation for fp16 model")."""
    plan = plan_of(_model("palm_detection_lite"), 30, accelerator="sample-minimal")
    assert all(o.where == "cpu" for o in plan.operators)
    reasons = {o.reason for o in plan.operators}
    assert any("sample-minimal does not support it" in r for r in reasons)
    assert any("Only allow full model delegation for fp16 model" in r for r in reasons)


@pytest.mark.parametrize("api", [29, 30, 33])
def test_accelerator_as_a_service(service_process, api):
    """--accelerator naming a running service: its getSupportedOperations (of the API level's HAL
    version) and prepareModel over IPC; int8 crosses as uint8 at API 29; at API 33 through the service's
    AIDL face (nnhal.aidl.connect), version 2, executed through an IBurst; the connections closed after."""
    import gc
    import threading

    from nnhal import delegate

    def clients() -> int:
        return sum(t.name.startswith("nnhal-client") for t in threading.enumerate())

    before = clients()
    plan = delegate.make_plan(_model("kws_mobilenetv2_int8"), android_api=api, accelerator=service_process.name)
    assert all(o.where == "nnapi" and o.device == service_process.name for o in plan.operators)
    from nnhal.delegate.run import LiteRT, diff, make_inputs
    from nnhal.tflite.loader import IODescription

    x = make_inputs(IODescription(inputs=delegate.runner.input_descs(plan.graph)))
    with delegate.Runner(plan) as r:
        y = r.run(x)
        if api == 33:
            session = r.engines[0].session
            assert session.mode == "burst" and session.prepared.version == hal.HalVersion.AIDL_V2
    ref = LiteRT(plan.graph.original, kernels="ref").run(x)
    assert diff(y[0], ref[0], delegate.runner.output_descs(plan.graph)[0]).steps == 0
    gc.collect()
    assert clients() == before  # NOTE: the plan's and the runner's connections (HIDL or AIDL) closed


def test_cache_dir_loads_the_second_time(tmp_path):
    """--cache-dir (the delegate's cache_dir with a model_token from the model's bytes): the first run
    prepares and saves the NNAPI partition's compilation, the second loads it and computes the same bits;
    tampered files are refused by the driver and the partition is prepared (and saved) again; before
    HAL 1.2 there is no compilation cache to use."""
    import nnhal
    from nnhal.delegate.compile_cache import CacheDir
    from nnhal.delegate.runner import Runner

    data = sandwich("MUL", [Tensor([1, 8], "float32", data=np.arange(8, dtype=np.float32))], Tensor([1, 8], "float32"),
                    options("MulOptions"))
    cache = CacheDir.for_model(str(tmp_path / "cache"), data)
    x = [np.linspace(-1, 1, 8, dtype=np.float32).reshape(1, 8)]

    def run(api: int = 30) -> tuple[list, str]:
        plan = plan_of(data, api, cache=cache)
        r = Runner(plan, nnhal.get_device)
        try:
            return r.run(x), r.engines[0].how
        finally:
            r.close()

    first, how1 = run()
    second, how2 = run()
    assert how1.startswith("prepared and saved") and how2.startswith("loaded from the compilation cache")
    np.testing.assert_array_equal(first[0], second[0])
    files = sorted((tmp_path / "cache").iterdir())
    assert len(files) == 2 and all(f.stat().st_mode & 0o777 == 0o600 for f in files)
    raw = bytearray(files[0].read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    files[0].write_bytes(bytes(raw))
    third, how3 = run()
    assert how3.startswith("prepared and saved")
    np.testing.assert_array_equal(first[0], third[0])
    assert run()[1].startswith("loaded")
    assert "has no compilation cache" in run(28)[1]
    # NOTE: from API 31 through the AIDL face (its own token: another interface version)
    aidl_first, how = run(33)
    assert how.startswith("prepared and saved") and run(33)[1].startswith("loaded")
    np.testing.assert_array_equal(first[0], aidl_first[0])
    other = CacheDir.for_model(str(tmp_path / "cache"), data + b"\0")  # NOTE: another model token: its own files
    plan = plan_of(data, 30, cache=other)
    r = Runner(plan, nnhal.get_device)
    try:
        assert r.engines[0].how.startswith("prepared and saved")
    finally:
        r.close()


@pytest.mark.parametrize("device", ["sample-all", "litert-cpu"])
def test_one_hal_partition_runs_as_the_generic_path_does(device):
    """A plan of one HAL partition (run straight through its session): each run's own outputs, kept
    after the next run; ``values`` holding the inputs and outputs by tensor; an input of another dtype
    converted as the general path converts it; the partition's time recorded."""
    from nnhal.delegate.runner import Runner

    data = one_op("ADD", [Tensor([2, 3]), Tensor([2, 3])], [Tensor([2, 3])], options("AddOptions"))
    plan = plan_of(data, device=device)
    assert where(plan) == ["nnapi"]
    g = plan.graph
    a, b = np.arange(6, dtype=np.float32).reshape(2, 3), np.full((2, 3), 0.5, np.float32)
    with Runner(plan, __import__("nnhal").get_device) as r:
        y1 = r.run([a, b])
        y2 = r.run([b, b])
        y3 = r.run([a, a])
        assert sorted(r.values) == sorted(set(g.inputs) | set(g.outputs))
        np.testing.assert_array_equal(r.values[g.outputs[0]], a + a)
        assert r.values[g.inputs[0]] is a and r.times[0] > 0
        y4 = r.run([a.astype(np.float64), b])  # NOTE: not the HAL input's dtype: through the dictionary
        np.testing.assert_array_equal(r.values[g.outputs[0]], a + b)
        y5 = r.run([b, a])
    for y, want in zip((y1, y2, y3, y4, y5), (a + b, b + b, a + a, a + b, b + a)):
        assert y[0].dtype == np.float32
        np.testing.assert_array_equal(y[0], want)
