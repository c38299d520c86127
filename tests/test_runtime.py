"""The client runtime (nnhal.runtime): model building, compilation across
devices (placement, partitions, fallback), executions in every mode, device
memories, and the partial sample drivers it partitions over."""

from __future__ import annotations

import re
import time
from pathlib import Path

import numpy as np
import pytest

import nnhal
from nnhal import hal, runtime
from nnhal.engine.validation import ValidationError
from nnhal.runtime import Compilation, CompilationError, ExecutionError, Model

OT = hal.OperationType
S = hal.ErrorStatus
PARTIAL = ["sample-float-fast", "sample-quant", "sample-minimal"]
ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / ".." / "shared" / "models"


def three_partitions() -> Model:
    """ADD (sample-minimal) -> TANH (sample-float-fast) -> ADD (sample-minimal) -> QUANTIZE -> RELU (sample-quant)."""
    m = Model()
    a = m.input("a", np.float32, [2, 3])
    b = m.input("b", np.float32, [2, 3])
    s = m.operation(OT.ADD, [a, b, 0], (np.float32, [2, 3]))
    t = m.operation(OT.TANH, [s], (np.float32, [2, 3]))
    u = m.operation(OT.ADD, [t, b, 0], (np.float32, [2, 3]))
    q = m.operation(OT.QUANTIZE, [u], (np.uint8, [2, 3], 0.01, 100))
    r = m.operation(OT.RELU, [q], (np.uint8, [2, 3], 0.01, 100))
    m.output(u, "u")
    m.output(r, "r")
    return m


def inputs() -> dict:
    return {"a": np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3), "b": np.full((2, 3), 0.25, np.float32)}


# ---------------------------------------------------------------------- models


def test_model_finish_is_a_validated_hal_model():
    m = three_partitions()
    hm = m.finish()
    assert isinstance(hm, hal.Model) and m.finish() is hm
    assert len(hm.main.operations) == 5 and hm.main.operands[hm.main.operations[0].inputs[2]].type == hal.OperandType.INT32
    assert [hm.main.operands[i].numberOfConsumers for i in hm.main.inputIndexes] == [1, 2]
    with pytest.raises(ValueError, match="finished"):
        m.input("c", np.float32, [1])


def test_model_finish_gives_the_drivers_validation_message():
    m = Model()
    a = m.input("a", np.float32, [2])
    b = m.input("b", np.int32, [2])  # ADD of float32 and int32: invalid
    m.output(m.operation(OT.ADD, [a, b, 0], (np.float32, [2])), "y")
    with pytest.raises(ValidationError) as e:
        m.finish()
    raw = _raw(m)
    from nnhal.engine.validation import validate_model

    with pytest.raises(ValidationError) as e2:
        validate_model(raw, [])
    assert str(e.value) == str(e2.value) and str(e.value)
    # and the driver refuses the same model
    assert nnhal.get_device("sample-all").getSupportedOperations_1_3(raw)[0] == S.INVALID_ARGUMENT


def _raw(m: Model) -> hal.Model:
    """The model ``m`` builds, without its validation (to hand the driver the invalid model)."""
    import nnhal.runtime.model as rm

    saved = rm.validate_model
    rm.validate_model = lambda *a, **k: []
    try:
        m._finished = None  # noqa: SLF001
        return m.finish()
    finally:
        rm.validate_model = saved
        m._finished = None  # noqa: SLF001


def test_model_errors_are_clear():
    m = Model()
    a = m.input("a", np.float32, [2])
    with pytest.raises(ValueError, match="two inputs"):
        m.input("a", np.float32, [2])
    other = Model()
    with pytest.raises(ValueError, match="another model"):
        other.operation(OT.RELU, [a], (np.float32, [2]))
    with pytest.raises(ValueError, match="not computed"):
        m.output(a)
    with pytest.raises(ValueError, match="no operand type"):
        m.constant("text")


def test_per_channel_quantized_conv():
    m = Model()
    x = m.input("x", np.uint8, [1, 2, 2, 2], scale=0.5, zero_point=128)
    w = m.constant(np.array([[[[2, 0]]], [[[0, -4]]]], np.int8), hal.OperandType.TENSOR_QUANT8_SYMM_PER_CHANNEL,
                   channel_quant=([0.5, 0.25], 0))
    bias = m.constant(np.array([4, -8], np.int32))  # NOTE: scale 0: per channel, input scale * filter scale
    y = m.operation(OT.CONV_2D, [x, w, bias, 0, 0, 0, 0, 1, 1, 0], (np.uint8, [1, 2, 2, 2], 1.0, 128))
    m.output(y, "y")
    xv = np.array([130, 132, 126, 128, 140, 120, 128, 128], np.uint8).reshape(1, 2, 2, 2)
    got = Compilation(m, ["sample-all"]).run({"x": xv})["y"]
    real_x = (xv.astype(np.float64) - 128) * 0.5
    real = np.stack([real_x[..., 0] * 2 * 0.5 + 4 * 0.25, real_x[..., 1] * -4 * 0.25 + -8 * 0.125], -1)
    np.testing.assert_array_equal(got, np.clip(np.round(real) + 128, 0, 255).astype(np.uint8))


# ---------------------------------------------------------------------- partial drivers


def test_partial_drivers_are_registered_with_androids_capabilities():
    for name in PARTIAL + ["sample-float-slow"]:
        assert name in nnhal.in_process_devices() and name in nnhal.list_devices()
    caps = nnhal.get_device("sample-minimal").getCapabilities_1_3()[1]
    f32 = next(p.info for p in caps.operandPerformance if p.type == hal.OperandType.TENSOR_FLOAT32)
    assert (f32.execTime, f32.powerUsage) == (0.4, 0.5)
    quant = nnhal.get_device("sample-quant").getCapabilities_1_3()[1]
    assert quant.ifPerformance.execTime == 50.0


@pytest.mark.parametrize("name", PARTIAL + ["sample-float-slow"])
def test_partial_driver_capabilities_pass_the_vts_checks(name):
    status, caps = nnhal.get_device(name).getCapabilities_1_3()
    types = [int(p.type) for p in caps.operandPerformance]
    assert status == S.NONE and types == sorted(types) and int(hal.OperandType.SUBGRAPH) not in types
    infos = [p.info for p in caps.operandPerformance] + [caps.ifPerformance, caps.whilePerformance,
                                                          caps.relaxedFloat32toFloat16PerformanceScalar]
    assert all(i.execTime > 0 and i.powerUsage > 0 for i in infos)
    assert nnhal.get_device(name).getVersionString()[1].startswith(f"nnhal-{name} ")


def test_partial_drivers_support_what_android_s_do_and_refuse_preparing_the_rest():
    hm = three_partitions().finish()
    expect = {"sample-float-fast": [True, True, True, True, False], "sample-float-slow": [True, True, True, True, False],
              "sample-quant": [False, False, False, False, True], "sample-minimal": [True, False, True, False, False],
              "sample-all": [True] * 5}
    for name, want in expect.items():
        status, got = nnhal.get_device(name).getSupportedOperations_1_3(hm)
        assert status == S.NONE and got == want, name
    cb = hal.PreparedModelCallback()
    status = nnhal.get_device("sample-minimal").prepareModel_1_3(
        hm, hal.ExecutionPreference.FAST_SINGLE_ANSWER, hal.Priority.MEDIUM, hal.OptionalTimePoint(), [], [],
        bytes(32), cb)
    assert status == S.GENERAL_FAILURE and cb.wait(10)[0] == S.GENERAL_FAILURE


# ---------------------------------------------------------------------- compilation across devices


def test_three_partitions_same_results_as_the_reference_in_every_mode():
    m = three_partitions()
    ref = Compilation(m, ["sample-all"]).run(inputs())
    with Compilation(m, PARTIAL) as c:
        assert [s.device.name for s in c.steps] == ["sample-minimal", "sample-float-fast", "sample-minimal",
                                                    "sample-float-fast", "sample-quant"]
        for mode in ("sync", "async", "burst", "fenced"):
            out = c.run(inputs(), mode=mode, measure=True)
            np.testing.assert_array_equal(out["u"], ref["u"])
            np.testing.assert_array_equal(out["r"], ref["r"])
        bursts = [s.burst for s in c.steps]
        c.run(inputs(), mode="burst")
        assert all(b is not None for b in bursts) and [s.burst for s in c.steps] == bursts  # reused
        ev = c.execution().start_compute(inputs())
        np.testing.assert_array_equal(ev.wait(30)["u"], ref["u"])
        assert ev.done()


def test_placement_report_says_why():
    with Compilation(three_partitions(), PARTIAL) as c:
        p = c.placement()
        text = str(p)
    assert p.operations[0].device == "sample-minimal" and "execTime 0.4" in p.operations[0].why
    assert p.operations[1].refused["sample-minimal"] == "sample-minimal takes only ADD, CONCATENATION and CONV_2D, " \
                                                       "not TANH"
    assert "not TENSOR_FLOAT32" in p.operations[1].refused["sample-quant"]
    assert p.operations[4].device == "sample-quant" and "sample-float-fast" in p.operations[4].refused
    assert len(p.steps) == 5 and p.steps[0]["inputs"] == ["a", "b"] and p.steps[-1]["outputs"] == ["r"]
    assert re.search(r"partition 4: sample-quant operations \['4 RELU'\]", text)


def test_preference_low_power_picks_by_power_usage():
    m = Model()
    a = m.input("a", np.float32, [4])
    m.output(m.operation(OT.RELU, [a], (np.float32, [4])), "y")
    fast = Compilation(m, ["sample-float-fast", "sample-float-slow"]).finish()
    low = Compilation(m, ["sample-float-fast", "sample-float-slow"],
                      preference=hal.ExecutionPreference.LOW_POWER).finish()
    assert fast.steps[0].device.name == "sample-float-fast" and low.steps[0].device.name == "sample-float-slow"


def test_operations_no_device_takes_run_on_the_reference_or_fail_without_fallback():
    m = Model()
    a = m.input("a", np.int32, [3])
    m.output(m.operation(OT.ABS, [a], (np.int32, [3])), "y")
    c = Compilation(m, PARTIAL).finish()
    assert c.steps[0].device.name == "sample-all" and "CPU reference" in c.operations[0].why
    assert c.run({"a": np.array([-1, 2, -3], np.int32)})["y"].tolist() == [1, 2, 3]
    with pytest.raises(CompilationError, match="no device supports it"):
        Compilation(m, PARTIAL, cpu_fallback=False).finish()


def counting_while() -> Model:
    """y = x; while y < limit: y = y + 1 (a WHILE with its cond and body subgraphs)."""
    cond = Model()
    cx = cond.input("x", np.float32, [1])
    cl = cond.input("limit", np.float32, [1])
    cond.output(cond.operation(OT.LESS, [cx, cl], (np.bool_, [1])), "c")
    body = Model()
    bx = body.input("x", np.float32, [1])
    body.input("limit", np.float32, [1])
    body.output(body.operation(OT.ADD, [bx, np.ones(1, np.float32), 0], (np.float32, [1])), "x1")
    m = Model()
    x = m.input("x", np.float32, [1])
    limit = m.input("limit", np.float32, [1])
    start = m.operation(OT.ADD, [x, np.zeros(1, np.float32), 0], (np.float32, [1]))
    m.output(m.operation(OT.WHILE, [cond, body, start, limit], (np.float32, [1])), "y")
    return m


def test_control_flow_stays_whole_and_loop_timeout():
    m = counting_while()
    c = Compilation(m, PARTIAL).finish()
    assert [s.device.name for s in c.steps] == ["sample-minimal", "sample-all"]
    assert "SUBGRAPH" in c.operations[1].refused["sample-float-fast"]
    assert c.run({"x": np.array([0.5], np.float32), "limit": np.array([4], np.float32)})["y"].tolist() == [4.5]
    with pytest.raises(ExecutionError) as e:
        c.run({"x": np.array([0], np.float32), "limit": np.array([1e30], np.float32)}, loop_timeout_ns=1_000_000)
    assert e.value.status in (S.MISSED_DEADLINE_TRANSIENT, S.MISSED_DEADLINE_PERSISTENT)


def test_missed_deadline_is_reported_not_fallen_back():
    c = Compilation(three_partitions(), PARTIAL).finish()
    with pytest.raises(ExecutionError) as e:
        c.run(inputs(), deadline_ns=time.monotonic_ns() - 1)
    assert e.value.status in (S.MISSED_DEADLINE_TRANSIENT, S.MISSED_DEADLINE_PERSISTENT)
    assert all(not s.fallback for s in c.steps) and c.steps[0].device.name == "sample-minimal"


def test_dynamic_output_shapes_grow_the_buffers():
    m = Model()
    a = m.input("a", np.float32, [0, 0])
    b = m.input("b", np.float32, [0, 0])
    s = m.operation(OT.ADD, [a, b, 0], (np.float32, [0, 0]))  # sample-minimal
    m.output(m.operation(OT.TANH, [s], (np.float32, [0, 0])), "y")  # sample-float-fast
    x = np.random.default_rng(0).standard_normal((30, 40)).astype(np.float32)  # 4800 bytes > the first guess
    c = Compilation(m, PARTIAL).finish()
    assert len(c.steps) == 2
    ex = c.execution()
    out = ex.compute({"a": x, "b": x})
    np.testing.assert_allclose(out["y"], np.tanh(2 * x), rtol=1e-6)
    assert ex.output_shapes["y"] == [30, 40]
    with pytest.raises(ExecutionError) as e:
        ex.compute({"a": x, "b": x}, mode="fenced")
    assert e.value.status == S.INVALID_ARGUMENT


def test_inputs_by_position_and_errors():
    c = Compilation(three_partitions(), ["sample-all"]).finish()
    v = inputs()
    out = c.run([v["a"], v["b"]])
    assert set(out) == {"u", "r"}
    with pytest.raises(ValueError, match="no input named"):
        c.run({"a": v["a"], "b": v["b"], "zz": v["a"]})
    with pytest.raises(ValueError, match="no value for input b"):
        c.run({"a": v["a"]})
    with pytest.raises(ValueError, match="mode"):
        c.run(v, mode="warp")


def test_cache_tokens_derive_from_the_step_models_and_cache_files_reload(tmp_path):
    c1 = Compilation(three_partitions(), PARTIAL, cache_dir=str(tmp_path)).finish()
    c2 = Compilation(three_partitions(), PARTIAL, cache_dir=str(tmp_path)).finish()
    assert [s.token for s in c1.steps] == [s.token for s in c2.steps]
    # the two ADD partitions on sample-minimal are the same step model (own constants only): one token
    assert c1.steps[0].token == c1.steps[2].token and len({s.token for s in c1.steps}) == 4
    assert not c1.steps[0].model.pools and len(c1.steps[0].model.operandValues) == 4
    assert any(tmp_path.iterdir())
    np.testing.assert_array_equal(c2.run(inputs())["r"], c1.run(inputs())["r"])


# ---------------------------------------------------------------------- fallback


class FailingDevice(hal.IDevice):
    """A device (over sample-float-fast) that fails at prepare or at execution, to test the fallback."""

    def __init__(self, fail_at: str):
        self.inner = nnhal.get_device("sample-float-fast")
        self.name = f"failing-{fail_at}"
        self.fail_at = fail_at
        self.executions = 0

    def __getattribute__(self, name: str):  # noqa: ANN204 - delegate every HAL method not overridden here
        if name in ("inner", "name", "fail_at", "executions", "prepareModel_1_3", "__class__", "__dict__"):
            return object.__getattribute__(self, name)
        return getattr(object.__getattribute__(self, "inner"), name)

    def prepareModel_1_3(self, model, preference, priority, deadline, modelCache, dataCache, token, callback):
        if self.fail_at == "compile":
            callback.notify_1_3(S.GENERAL_FAILURE, None)
            return S.GENERAL_FAILURE
        outer = self
        real = hal.PreparedModelCallback()
        status = self.inner.prepareModel_1_3(model, preference, priority, deadline, modelCache, dataCache, token,
                                             real)
        st, prepared = real.wait(60)

        class Failing:
            def executeSynchronously_1_3(self, *a):
                outer.executions += 1
                return S.GENERAL_FAILURE, [], hal.Timing()

            def __getattr__(self, n):
                return getattr(prepared, n)
        callback.notify_1_3(st, Failing() if prepared is not None else None)
        return status


@pytest.mark.parametrize("fail_at", ["compile", "execute"])
def test_fallback_to_the_reference_gives_the_right_result(fail_at):
    m = three_partitions()
    ref = Compilation(m, ["sample-all"]).run(inputs())
    bad = FailingDevice(fail_at)
    c = Compilation(m, [bad, "sample-quant", "sample-minimal"]).finish()
    out = c.run(inputs())
    np.testing.assert_array_equal(out["u"], ref["u"])
    np.testing.assert_array_equal(out["r"], ref["r"])
    failed = [s for s in c.steps if s.fallback]
    assert failed and all(s.device.name == "sample-all" for s in failed)
    assert all(bad.name in s.fallback for s in failed)
    assert [s["fallback"] for s in c.placement().steps if s["fallback"]]
    if fail_at == "execute":
        assert bad.executions == 2  # both float-fast partitions failed once, then stayed on the reference
        c.run(inputs())
        assert bad.executions == 2


# ---------------------------------------------------------------------- device memories


def test_device_memory_keeps_state_on_the_device():
    m = Model()
    a = m.input("a", np.float32, [4])
    b = m.input("b", np.float32, [4])
    m.output(m.operation(OT.ADD, [a, b, 0], (np.float32, [4])), "sum")
    c = Compilation(m, ["sample-all"]).finish()
    state = runtime.Memory(c, inputs=["a"])
    state.copy_from(np.arange(4, dtype=np.float32))
    out_mem = runtime.Memory(c, outputs=["sum"])
    got = c.run({"a": state, "b": np.ones(4, np.float32)}, outputs={"sum": out_mem})
    assert got == {}
    np.testing.assert_array_equal(out_mem.copy_to(), [1, 2, 3, 4])
    assert c.run({"a": state, "b": np.full(4, 2, np.float32)})["sum"].tolist() == [2, 3, 4, 5]
    with pytest.raises(ValueError, match="no input named"):
        runtime.Memory(c, inputs=["zz"])


# ---------------------------------------------------------------------- discovery, README


def test_discovery_lists_in_process_devices():
    names = runtime.names()
    assert names[: len(nnhal.in_process_devices())] == list(nnhal.in_process_devices())
    d = runtime.discovery.get("sample-quant")
    assert d.in_process and d.capabilities.ifPerformance.execTime == 50.0


def test_readme_python_example_runs():
    text = (ROOT / "README.md").read_text()
    section = text[text.index("\n## Python"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert "runtime" in code
    exec(compile(code, "README.md", "exec"), {})  # noqa: S102 - the README's own example


# ---------------------------------------------------------------------- a real model


@pytest.mark.skipif(not (MODELS / "vww_mobilenetv1_int8.tflite").exists(), reason="no shared models")
def test_real_int8_model_runs_partitioned_like_the_reference():
    from nnhal import tflite

    hm, _ = tflite.load(str(MODELS / "vww_mobilenetv1_int8.tflite"))
    for name in PARTIAL:  # no single partial driver takes the whole model
        assert not all(nnhal.get_device(name).getSupportedOperations_1_3(hm)[1])
    x = np.random.default_rng(1).uniform(0, 255, (1, 96, 96, 3)).astype(np.float32)
    ref = Compilation(hm, ["sample-all"]).run([x])
    with Compilation(hm, PARTIAL) as c:
        assert {s.device.name for s in c.steps} == {"sample-float-fast", "sample-quant"}
        assert len(c.steps) == 2
        out = c.run([x])
        p = c.placement()
    np.testing.assert_array_equal(out["output0"], ref["output0"])
    assert p.operations[0].type == "QUANTIZE" and p.operations[0].device == "sample-float-fast"
    assert p.operations[1].refused["sample-float-fast"].endswith("not TENSOR_QUANT8_ASYMM_SIGNED")
    assert p.operations[0].refused["sample-quant"].endswith("not TENSOR_FLOAT32")
