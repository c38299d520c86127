"""The ``litert-cpu`` driver (issue 10): HAL models lowered to TFLite
(nnhal.drivers.litert.lower, the importer's table read the other way) and run by
LiteRT with XNNPACK under the shared HAL front end.  Skipped, with the
reason, when ai-edge-litert is not installed."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nnhal.drivers import litert as litert_backend

if not litert_backend.available():  # pragma: no cover - only without the optional dependency
    pytest.skip("ai-edge-litert is not installed: the litert-cpu driver does not exist here",
                allow_module_level=True)

import nnhal  # noqa: E402
from nnhal import hal  # noqa: E402
from nnhal import memory as hal_memory  # noqa: E402
from nnhal.conformance import vectors  # noqa: E402
from nnhal.conformance.runner import Runner  # noqa: E402
from nnhal.drivers.litert import lower
from nnhal.tflite import loader
from nnhal.tflite import writer as w  # noqa: E402
from nnhal.tflite.schema import interpreter_module  # noqa: E402
from tests.conftest import vectors_root  # noqa: E402

S = hal.ErrorStatus
T = hal.OperandType
MODELS = Path(__file__).resolve().parents[1] / ".." / "shared" / "models"


@pytest.fixture(scope="module")
def dev() -> Any:
    return nnhal.get_device("litert-cpu")


def _run_tflite(data: bytes, inputs: list[np.ndarray]) -> list[np.ndarray]:
    lrt = interpreter_module()
    it = lrt.Interpreter(model_content=data, num_threads=1)
    it.allocate_tensors()
    for d, x in zip(it.get_input_details(), inputs):
        it.set_tensor(d["index"], x.astype(d["dtype"]).reshape(d["shape"]))
    it.invoke()
    return [it.get_tensor(d["index"]) for d in it.get_output_details()]


def _inputs_for(data: bytes, seed: int = 0) -> list[np.ndarray]:
    lrt = interpreter_module()
    it = lrt.Interpreter(model_content=data)
    rng = np.random.default_rng(seed)
    out = []
    for d in it.get_input_details():
        if d["dtype"] == np.float32:
            out.append(rng.uniform(-1, 1, d["shape"]).astype(np.float32))
        else:
            info = np.iinfo(d["dtype"])
            out.append(rng.integers(info.min, info.max, d["shape"], endpoint=True).astype(d["dtype"]))
    return out


def round_trip(data: bytes) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(LiteRT on the original, LiteRT on TFLite -> HAL -> TFLite), same inputs."""
    model, _ = loader.load(data)
    try:
        views = [hal_memory.PrivateCopy(m).view for m in model.pools]
        reasons = [lower.check_operation(model, views, op) for op in model.main.operations]
        assert not any(reasons), reasons
        back = lower.lower(model, views)
    finally:
        loader.free_model(model)
    x = _inputs_for(data)
    return _run_tflite(data, x), _run_tflite(back, x)


# ---------------------------------------------------------------------------- one table, two directions

F32 = "float32"


def _conv(dtype: str, pad: int, act: int) -> bytes:
    rng = np.random.default_rng(1)
    if dtype == F32:
        x = w.Tensor([1, 7, 6, 3])
        f = w.Tensor([4, 3, 3, 3], data=rng.standard_normal((4, 3, 3, 3)).astype(np.float32))
        b = w.Tensor([4], data=rng.standard_normal(4).astype(np.float32))
        y = w.Tensor([1, 0, 0, 4])
    else:
        x = w.Tensor([1, 7, 6, 3], "int8", scale=0.05, zero_point=-3)
        f = w.Tensor([4, 3, 3, 3], "int8", data=rng.integers(-127, 127, (4, 3, 3, 3)).astype(np.int8),
                     scale=[0.01, 0.02, 0.015, 0.03], zero_point=[0, 0, 0, 0], axis=0)
        b = w.Tensor([4], "int32", data=rng.integers(-500, 500, 4).astype(np.int32),
                     scale=[0.05 * s for s in (0.01, 0.02, 0.015, 0.03)], zero_point=[0, 0, 0, 0])
        y = w.Tensor([1, 0, 0, 4], "int8", scale=0.1, zero_point=2)
    return w.one_op("CONV_2D", [x, f, b], [y], w.options("Conv2DOptions", padding=pad, strideW=2, strideH=1,
                                                         fusedActivationFunction=act), infer_shapes=True)


ONE_OP = {
    "conv_f32_same_relu": lambda: _conv(F32, 0, 1),
    "conv_f32_valid_relu6": lambda: _conv(F32, 1, 3),
    "conv_i8_per_channel": lambda: _conv("int8", 0, 0),
    "add_broadcast_f32": lambda: w.one_op("ADD", [w.Tensor([2, 1, 3]), w.Tensor([4, 1])], [w.Tensor([2, 4, 3])],
                                          w.options("AddOptions", fusedActivationFunction=1)),
    "mul_u8": lambda: w.one_op("MUL", [w.Tensor([2, 5], "uint8", scale=0.1, zero_point=120),
                                       w.Tensor([2, 5], "uint8", scale=0.2, zero_point=100)],
                               [w.Tensor([2, 5], "uint8", scale=0.3, zero_point=128)], w.options("MulOptions")),
    "avg_pool_f32": lambda: w.one_op("AVERAGE_POOL_2D", [w.Tensor([1, 6, 6, 2])], [w.Tensor([1, 3, 3, 2])],
                                     w.options("Pool2DOptions", padding=1, strideW=2, strideH=2, filterWidth=2,
                                               filterHeight=2)),
    "max_pool_i8": lambda: w.one_op("MAX_POOL_2D", [w.Tensor([1, 5, 5, 2], "int8", scale=0.1, zero_point=1)],
                                    [w.Tensor([1, 3, 3, 2], "int8", scale=0.1, zero_point=1)],
                                    w.options("Pool2DOptions", padding=0, strideW=2, strideH=2, filterWidth=3,
                                              filterHeight=3)),
    "softmax_f32": lambda: w.one_op("SOFTMAX", [w.Tensor([2, 7])], [w.Tensor([2, 7])],
                                    w.options("SoftmaxOptions", beta=0.7)),
    "concat_f32": lambda: w.one_op("CONCATENATION", [w.Tensor([2, 3]), w.Tensor([2, 2])], [w.Tensor([2, 5])],
                                   w.options("ConcatenationOptions", axis=1)),
    "reshape_f32": lambda: w.one_op("RESHAPE", [w.Tensor([2, 6]), w.Tensor([2], "int32",
                                                                          data=np.array([3, -1], np.int32))],
                                    [w.Tensor([3, 4])]),
    "logistic_f32": lambda: w.one_op("LOGISTIC", [w.Tensor([3, 4])], [w.Tensor([3, 4])]),
    "fc_f32": lambda: w.one_op("FULLY_CONNECTED", [w.Tensor([2, 8]), w.Tensor(
        [3, 8], data=np.random.default_rng(3).standard_normal((3, 8)).astype(np.float32)), None],
        [w.Tensor([2, 3])], w.options("FullyConnectedOptions", fusedActivationFunction=0)),
}


@pytest.mark.parametrize("name", sorted(ONE_OP))
def test_one_op_round_trip(name: str) -> None:
    """TFLite -> HAL (the importer) -> TFLite (the lowering) computes what the original does."""
    original, again = round_trip(ONE_OP[name]())
    for a, b in zip(original, again):
        assert a.shape == b.shape and a.dtype == b.dtype
        if a.dtype == np.float32:
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
        else:
            assert np.max(np.abs(a.astype(int) - b.astype(int))) == 0


@pytest.mark.parametrize("name", ["mobilenet_v2_f32", "vww_mobilenetv1_int8", "kws_mobilenetv2_int8"])
def test_shared_model_round_trip(name: str) -> None:
    path = MODELS / f"{name}.tflite"
    if not path.is_file():
        pytest.skip(f"{path} not found")
    original, again = round_trip(path.read_bytes())
    for a, b in zip(original, again):
        if a.dtype == np.float32:
            np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)
        else:
            # NOTE: the importer writes int8 MEAN of other output scale as DEQUANTIZE, MEAN, QUANTIZE
            # (TFLite's float formula, within 1 step of its integer kernel): the round trip keeps that step
            assert np.max(np.abs(a.astype(int) - b.astype(int))) <= 1


# ---------------------------------------------------------------------------- the driver


def test_listed_and_described(dev: Any) -> None:
    assert "litert-cpu" in nnhal.in_process_devices() and "litert-cpu" in nnhal.list_devices()
    assert dev.getVersionString() == (S.NONE, litert_backend.VERSION_STRING)
    assert dev.getType() == (S.NONE, hal.DeviceType.CPU)
    status, caps = dev.getCapabilities_1_3()
    perf = {p.type: p.info.execTime for p in caps.operandPerformance}
    assert status == S.NONE and 0 < perf[T.TENSOR_FLOAT32] < 1e3 and 0 < perf[T.TENSOR_FLOAT16] < 1e3
    assert caps.whilePerformance.execTime == 1e3 and caps.ifPerformance.execTime < 1e3  # NOTE: WHILE refused
    assert dev.getNumberOfCacheFilesNeeded() == (S.NONE, 1, 1)


def _models(spec: str, names: str = "") -> list:
    files = sorted(vectors_root().rglob(f"{spec}.json*"))
    if not files:
        pytest.skip(f"no vector file {spec}.json")
    return [vm for vm in vectors.load_file(str(files[0])) if names in vm.name]


def _supported(dev: Any, vm: Any) -> list[bool]:
    model = vm.build_model()
    try:
        status, ok = dev.getSupportedOperations_1_3(model)
    finally:
        for p in model.pools:
            hal_memory.free(p)
    assert status == S.NONE
    return list(ok)


def test_supported_operations_and_reasons(dev: Any, caplog: pytest.LogCaptureFixture) -> None:
    """NCHW (TRANSPOSE around the NHWC operator) and float16 (computed in float32 between CASTs) are
    supported; a refusal is logged with its reason."""
    import logging

    seen = {}
    for vm in _models("conv2d_dilation"):
        seen.setdefault(("nchw" in vm.name, vm.data_type), set()).add(all(_supported(dev, vm)))
    assert seen[(True, "float32")] == {True} and seen[(False, "float32")] == {True}, seen
    assert seen[(True, "float16")] == {True}, seen
    with caplog.at_level(logging.INFO, logger="nnhal.driver"):
        assert _supported(dev, _models("heatmap_max_keypoint")[0]) == [False]
    assert "operation 0 (HEATMAP_MAX_KEYPOINT) not supported: HEATMAP_MAX_KEYPOINT has no direct TFLite" in caplog.text


ALL_MODES = ("sync", "async", "burst", "fenced")


@pytest.mark.parametrize("spec,modes", [(s, ALL_MODES) for s in (
    "conv2d_dilation", "conv2d_per_channel", "depthwise_conv2d_v1_2", "add", "add_quant8", "fully_connected_v1_2",
    "avg_pool_quant8_1", "concat_quant8_1")] + [
    # NOTE: the rewrites (NCHW, float16, grouped / transposed convolutions, other axes): large files, one mode
    (s, ("sync",)) for s in ("softmax_v1_2", "channel_shuffle", "l2_normalization_axis", "grouped_conv2d",
                             "transpose_conv2d", "local_response_normalization_v1_2",
                             "resize_bilinear_v1_2", "space_to_batch_v1_2", "add_v1_2", "instance_normalization",
                             "if_constant", "less", "select_v1_2")])
def test_conformance_files_pass_where_supported(dev: Any, spec: str, modes: tuple) -> None:
    """Every model of these files the driver supports passes (sync, async, burst, fenced; dynamic
    shapes; one byte short), and each one it does not is "unsupported", never a failure."""
    runner = Runner(dev, modes=modes)
    results = []
    for vm in _models(spec):
        results += runner.run_model(vm)
    runner.close_burst()
    bad = [f"{r.model} [{r.variant}/{r.mode}]: {r.message}" for r in results if r.status == "fail"]
    assert not bad, "\n".join(bad[:20])
    assert any(r.status == "pass" for r in results)


def _prepare(dev: Any, model: hal.Model, cache: tuple = ((), ()), token: bytes = bytes(32)) -> tuple:
    cb = hal.PreparedModelCallback()
    launch = dev.prepareModel_1_3(model, hal.ExecutionPreference.FAST_SINGLE_ANSWER, hal.Priority.MEDIUM,
                                  hal.OptionalTimePoint(), list(cache[0]), list(cache[1]), token, cb)
    status, prepared = cb.wait(60)
    return launch, status, prepared


def test_unsupported_model_is_general_failure_at_prepare(dev: Any) -> None:
    model = _models("heatmap_max_keypoint")[0].build_model()
    try:
        launch, status, prepared = _prepare(dev, model)
    finally:
        for p in model.pools:
            hal_memory.free(p)
    assert status == S.GENERAL_FAILURE and prepared is None


def _fd(path: Path) -> hal.Handle:
    return hal.Handle(fds=[os.open(path, os.O_RDWR | os.O_CREAT, 0o600)])


def test_compilation_cache_is_the_flatbuffer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """prepareModel_1_3 with cache handles writes the lowered flatbuffer as the data cache;
    prepareModelFromCache_1_3 rebuilds the interpreter from it; a modified data cache is refused."""
    from nnhal.driver import Device

    d = Device("litert-cachetest", litert_backend.LiteRTBackend(), cache_key_dir=str(tmp_path / "key"))
    files = sorted(vectors_root().rglob("conv2d_dilation.json*"))
    if not files:
        pytest.skip("no conv2d_dilation.json")
    vm = next(m for m in vectors.load_file(str(files[0])) if "nhwc" in m.name and m.data_type == "float32"
              and not m.expectFailure)
    model = vm.build_model()
    token = bytes(range(32))
    mc, dc = tmp_path / "model.cache", tmp_path / "data.cache"
    try:
        h = (_fd(mc), _fd(dc))
        launch, status, prepared = _prepare(d, model, ([h[0]], [h[1]]), token)
        assert (launch, status) == (S.NONE, S.NONE)
        data = dc.read_bytes()
        assert data[4:8] == b"TFL3", "the data cache is a TFLite flatbuffer"
        assert data[:len(prepared.executor.flatbuffer)] == prepared.executor.flatbuffer
        cb = hal.PreparedModelCallback()
        assert d.prepareModelFromCache_1_3(hal.OptionalTimePoint(), [_fd(mc)], [_fd(dc)], token, cb) == S.NONE
        status, again = cb.wait(60)
        assert status == S.NONE and again is not None
        runner = Runner(d, modes=("sync",))
        # NOTE: the cached model's executions: compared with the vectors through the same request path
        monkeypatch.setattr(runner, "prepare", lambda vm, dynamic: (S.NONE, again, ""))
        results = runner.run_model(vm)
        assert results and all(r.status == "pass" for r in results if r.variant == "plain"), results
        tampered = bytearray(data)
        tampered[len(tampered) // 2] ^= 1
        dc.write_bytes(bytes(tampered))
        cb = hal.PreparedModelCallback()
        d.prepareModelFromCache_1_3(hal.OptionalTimePoint(), [_fd(mc)], [_fd(dc)], token, cb)
        status, none = cb.wait(60)
        assert status == S.GENERAL_FAILURE and none is None
    finally:
        for p in model.pools:
            hal_memory.free(p)


# ---------------------------------------------------------------------------- VTS mutations on litert-cpu


from tests.test_vts_validate_model import SAMPLE as MODEL_SAMPLE  # noqa: E402
from tests.test_vts_validate_request import SAMPLE as REQUEST_SAMPLE  # noqa: E402
from tests.vts_models import model_id  # noqa: E402

# NOTE: a representative subset in the default suite (one model in 20 / in 4 of the VTS samples, spread
# over the operations); the whole samples under the ``sweep`` marker
MODEL_SUBSET = MODEL_SAMPLE[::20]
REQUEST_SUBSET = REQUEST_SAMPLE[::4]


def _model_mutations(dev: Any, vm: Any) -> None:
    """Mutated models are rejected exactly as on sample-all (INVALID_ARGUMENT from getSupportedOperations_1_3
    and prepareModel_1_3's launch and callback: the validation is the shared one)."""
    from tests.test_vts_validate_model import validate_model_mutations

    assert validate_model_mutations(dev, vm)


def _request_mutations(dev: Any, vm: Any) -> None:
    """Mutated requests are rejected as on sample-all, for the sample models litert-cpu prepares
    (the others are refused at prepare, before any request)."""
    from tests.test_vts_validate_request import validate_request_mutations

    if vm.expectFailure or not all(_supported(dev, vm)):
        pytest.skip(f"litert-cpu does not support {vm.name}")
    assert validate_request_mutations(dev, vm)


@pytest.mark.parametrize("vm", MODEL_SUBSET, ids=[model_id(vm) for vm in MODEL_SUBSET])
def test_vts_model_mutations_same_statuses(dev: Any, vm: Any) -> None:
    _model_mutations(dev, vm)


@pytest.mark.parametrize("vm", REQUEST_SUBSET, ids=[model_id(vm) for vm in REQUEST_SUBSET])
def test_vts_request_mutations_same_statuses(dev: Any, vm: Any) -> None:
    _request_mutations(dev, vm)


@pytest.mark.sweep
@pytest.mark.parametrize("vm", MODEL_SAMPLE, ids=[model_id(vm) for vm in MODEL_SAMPLE])
def test_vts_model_mutations_same_statuses_sweep(dev: Any, vm: Any) -> None:
    _model_mutations(dev, vm)


@pytest.mark.sweep
@pytest.mark.parametrize("vm", REQUEST_SAMPLE, ids=[model_id(vm) for vm in REQUEST_SAMPLE])
def test_vts_request_mutations_same_statuses_sweep(dev: Any, vm: Any) -> None:
    _request_mutations(dev, vm)


def test_supported_then_prepare_checks_and_lowers_once(monkeypatch):
    """getSupportedOperations then prepareModel of one model: the model lowered once, its operations planned
    by that trial lowering only (the per-operation checks are for a model that does not lower; the front end
    passes the copy it kept; the backend answers from the trial it kept for it)."""
    from tests.driver_util import add_model, prepare

    dev = nnhal.get_device("litert-cpu")
    checks, lowerings = [], []
    real_check, real_lower = lower.check_operation, lower.lower_traced
    monkeypatch.setattr(lower, "check_operation", lambda *a, **k: checks.append(1) or real_check(*a, **k))
    monkeypatch.setattr(lower, "lower_traced", lambda *a, **k: lowerings.append(1) or real_lower(*a, **k))
    model = add_model()
    status, ok = dev.getSupportedOperations_1_3(model)
    assert status == S.NONE and ok == [True] and (len(checks), len(lowerings)) == (0, 1)
    _, status, prepared = prepare(model, dev)
    assert status == S.NONE and prepared is not None and (len(checks), len(lowerings)) == (0, 1)
    model.main.operands[0].dimensions = [2, 3]  # NOTE: another model: lowered again
    model.main.operands[1].dimensions = [2, 3]
    model.main.operands[3].dimensions = [2, 3]
    assert dev.getSupportedOperations_1_3(model)[0] == S.NONE and len(lowerings) == 2 and not checks
