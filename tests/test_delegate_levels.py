"""The delegate plan at Android API 31-35 (NNAPI feature levels 5-8): the level Validate is called with,
the rules of levels 6 and 7 deciding BATCH_MATMUL, PACK, MIRROR_PAD, REVERSE_V2, the NNAPI partitions as
AIDL models prepared and executed through the device's AIDL face with those operations as themselves
(their HAL 1.3 rewrites before), each run matching LiteRT."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("ai_edge_litert", reason="ai-edge-litert is not installed (pip install 'nnhal[litert]')")

import nnhal  # noqa: E402
from nnhal import cli, hal  # noqa: E402
from nnhal.delegate.plan import Planner  # noqa: E402
from nnhal.delegate.run import HalSession  # noqa: E402
from nnhal.runtime.face import AidlPrepared  # noqa: E402
from nnhal.tflite.writer import Tensor  # noqa: E402
from tests.delegate_util import (  # noqa: E402
    batch_matmul_model,
    mirror_pad_model,
    pack_model,
    plan_of,
    reverse_model,
    run_and_compare,
    sandwich,
    where,
)

V = hal.HalVersion
OP = {"BATCH_MATMUL": 102, "PACK": 103, "MIRROR_PAD": 104, "REVERSE": 105}


def ok(diffs: list) -> bool:
    return bool(diffs) and all(d.ok(1e-4, 1) for d in diffs)


def hal_operations(plan) -> list[int]:
    """The HAL operation types of the plan's first NNAPI partition, as the runner builds it."""
    p = plan.nnapi[0]
    model, _, _ = Planner(plan.graph, plan.options, nnhal.get_device).hal_model(p.load_ops, p.inputs, p.outputs)
    return [int(op.type) for op in model.main.operations]


@pytest.mark.parametrize("api", [30, 31, 32, 33, 34, 35])
def test_batch_matmul_by_api_level(api):
    """BATCH_MATMUL is delegated from API 33 (feature level 6: nnapi_delegate.cc:3602 / 3604), one AIDL
    BATCH_MATMUL in one NNAPI partition (AIDL v2-v4); before, the CPU with the delegate's reason."""
    plan = plan_of(batch_matmul_model(), api)
    bmm = plan.operators[1]
    if api >= 33:
        assert where(plan) == ["nnapi"] * 3 and len(plan.nnapi) == 1
        assert bmm.rule == "nnapi_delegate.cc:3602, needs feature level 6 (1000006) (:3604)"
        assert plan.version == V(V.AIDL_V1 + api - 32) and OP["BATCH_MATMUL"] in hal_operations(plan)
    else:
        assert where(plan) == ["nnapi", "cpu", "nnapi"]
        assert bmm.reason.startswith("Android sdk version less than 1000006 (nnapi_delegate.cc:3604)")
        assert plan.version == (V.V1_3 if api == 30 else V.AIDL_V1)
    assert ok(run_and_compare(plan))


def test_int8_and_broadcast_batch_matmul():
    """int8 BATCH_MATMUL at API 33, TFLite's reference kernels' result to the step; a rank-2 constant
    right side (a broadcast batch, nnapi_delegate.cc:3617) stays on the CPU under the delegate's rules and
    goes to NNAPI with --plan max, tiled to the batch at load."""
    plan = plan_of(batch_matmul_model(dtype="int8"), 33)
    assert where(plan) == ["nnapi"] * 3
    assert ok(run_and_compare(plan, "ref"))
    data = batch_matmul_model(b_shape=(8, 5))
    plan = plan_of(data, 33)
    assert plan.operators[1].where == "cpu" and "(nnapi_delegate.cc:3617)" in plan.operators[1].reason
    assert "[nnhal could express it: --plan max]" in plan.operators[1].reason
    plan = plan_of(data, 33, plan="max")
    assert where(plan) == ["nnapi"] * 3
    assert ok(run_and_compare(plan))


def test_batch_matmul_without_target_devices_or_on_a_hidl_device():
    """Without target devices (--allow-nnapi-cpu) Validate gets the API level, 33, below feature level 6
    (nnapi_delegate.cc:6842): the CPU.  A device with no AIDL face (HIDL 1.3 only) lowers the target
    level to its own, 30 (GetTargetFeatureLevel, 678): the CPU too, the partitions HAL 1.3."""
    plan = plan_of(batch_matmul_model(), 33, allow_nnapi_cpu=True)
    assert where(plan) == ["nnapi", "cpu", "nnapi"] and plan.levels.validate == 33
    assert plan.operators[1].reason.startswith("Android sdk version less than 1000006 (nnapi_delegate.cc:3604)")
    assert plan.levels.execution == "sync" and ok(run_and_compare(plan))

    class HidlOnly:  # NOTE: duck-typed: the HIDL methods of sample-all and nothing else
        def __getattr__(self, name):
            return getattr(nnhal.get_device("sample-all"), name)

    from nnhal.delegate.plan import Options, build_plan
    from nnhal.delegate.runner import Runner

    hidl = build_plan(batch_matmul_model(), Options(android_api=33), lambda name: HidlOnly())
    assert where(hidl) == ["nnapi", "cpu", "nnapi"] and hidl.version == V.V1_3 and hidl.levels.validate == 30
    assert ":678" in hidl.levels.why
    with Runner(hidl, lambda name: HidlOnly()) as r:
        assert len(r.run([np.ones((1, 2, 8), np.float32)])) == 1


@pytest.mark.parametrize("dtype,axis", [("float32", 0), ("int32", -1)])
def test_pack_by_api_level(dtype, axis):
    """PACK from API 30 of float32 / int8 not along the last axis (3549, 3551), of int32 and along the
    last axis from feature level 6 (3546); AIDL v2 has PACK itself, earlier partitions CONCATENATION +
    RESHAPE (also the delegate's lowering below level 6)."""
    data = pack_model(dtype, axis)
    at30, at33 = plan_of(data, 30), plan_of(data, 33)
    if dtype == "float32":
        assert where(at30) == ["nnapi"] * 3 and OP["PACK"] not in hal_operations(at30)
        assert hal.OperationType.CONCATENATION in hal_operations(at30)
    else:
        assert at30.operators[1].where == "cpu" and "(nnapi_delegate.cc:3549)" in at30.operators[1].reason
        assert "(nnapi_delegate.cc:3551)" in at30.operators[1].reason
    assert where(at33) == ["nnapi"] * 3 and OP["PACK"] in hal_operations(at33)
    assert "the feature level 6 (1000006) branch (:3546)" in at33.operators[1].rule
    for plan in (at30, at33, plan_of(data, 30, plan="max")):
        assert ok(run_and_compare(plan))


@pytest.mark.parametrize("mode", [0, 1])
def test_mirror_pad_by_api_level(mode):
    """MIRROR_PAD from feature level 7 (nnapi_delegate.cc:3623): at API 34 one AIDL v3 MIRROR_PAD; at
    API 33 the CPU; with --plan max at 30 its GATHER rewrite on NNAPI.  Both modes match LiteRT."""
    data = mirror_pad_model(mode)
    at33, at34, max30 = plan_of(data, 33), plan_of(data, 34), plan_of(data, 30, plan="max")
    assert at33.operators[1].where == "cpu" and "1000007 (nnapi_delegate.cc:3623)" in at33.operators[1].reason
    assert where(at34) == ["nnapi"] * 3 and OP["MIRROR_PAD"] in hal_operations(at34)
    assert where(max30) == ["nnapi"] * 3 and hal.OperationType.GATHER in hal_operations(max30)
    for plan in (at33, at34, max30):
        assert ok(run_and_compare(plan))


def test_reverse_by_api_level():
    """REVERSE_V2 from feature level 7 (nnapi_delegate.cc:3643) as one AIDL v3 REVERSE of one axis;
    two axes are two GATHERs (NNAPI's REVERSE takes one); API 33 keeps it on the CPU."""
    at33, at35 = plan_of(reverse_model(), 33), plan_of(reverse_model(), 35)
    assert at33.operators[1].where == "cpu" and "(nnapi_delegate.cc:3643)" in at33.operators[1].reason
    assert where(at35) == ["nnapi"] * 3 and OP["REVERSE"] in hal_operations(at35)
    two = plan_of(reverse_model((0, -2)), 34)
    assert where(two) == ["nnapi"] * 3 and OP["REVERSE"] not in hal_operations(two)
    for plan in (at33, at35, two):
        assert ok(run_and_compare(plan))


def test_int32_reshape_from_api_33():
    """RESHAPE of int32: the delegate takes it from feature level 6 (nnapi_delegate.cc:2612; before 2610),
    the HAL from AIDL v2; at API 30 even --plan max keeps it on the CPU (no HAL 1.3 form)."""
    shape = Tensor([2], "int32", data=np.array([3, 2], np.int32))
    data = sandwich("RESHAPE", [shape], Tensor([3, 2], "int32"), None, x_shape=(2, 3), dtype="int32")
    at30, max30, at33 = plan_of(data, 30), plan_of(data, 30, plan="max"), plan_of(data, 33)
    assert at30.operators[1].where == "cpu" and "(nnapi_delegate.cc:2610)" in at30.operators[1].reason
    assert max30.operators[1].where == "cpu" and "needs AIDL v2; this partition is HAL 1.3" in max30.operators[1].reason
    assert where(at33) == ["nnapi"] * 3 and "the feature level 6 (1000006) branch (:2612)" in at33.operators[1].rule
    for plan in (at30, max30, at33):
        assert ok(run_and_compare(plan))


@pytest.mark.parametrize("api,mode", [(31, "burst"), (34, "burst"), (35, "reusable")])
def test_partitions_execute_through_the_aidl_face(api, mode):
    """From API 31 a partition is prepared through the device's AIDL face and executed as the delegate
    does: through an IBurst at feature levels 5-7 with target devices (nnapi_delegate.cc:4792), as a
    reusable IExecution from AIDL v4 (4884)."""
    from nnhal.delegate.runner import Runner

    plan = plan_of(batch_matmul_model(), api)
    assert plan.levels.execution == mode
    x = [np.full((1, 2, 8), 0.5, np.float32)]
    with Runner(plan, nnhal.get_device) as r:
        sessions = [e.session for e in r.engines if getattr(e, "session", None) is not None]
        assert sessions and all(isinstance(s, HalSession) and isinstance(s.prepared, AidlPrepared)
                                and s.mode == mode for s in sessions)
        first = r.run(x)[0]
        np.testing.assert_array_equal(r.run(x)[0], first)  # NOTE: the burst / execution kept and used again


def test_cli_run_at_api_33_names_the_deciding_rule(tmp_path, capsys):
    """nnhal run MODEL --android-api 33 --compare --explain --plan-json: BATCH_MATMUL on NNAPI, the
    explanation names the rule (nnapi_delegate.cc:3602, level 6 at 3604), the JSON keeps API.md's form;
    --android-api 36 is one line and status 2."""
    model = tmp_path / "bmm.tflite"
    model.write_bytes(batch_matmul_model())
    js = tmp_path / "plan.json"
    rc = cli.main(["run", str(model), "--android-api", "33", "--compare", "--explain", "--plan-json", str(js)])
    out = capsys.readouterr().out
    assert rc == 0 and "verdict: MATCH" in out
    assert "NNAPI partitions as AIDL v2" in out and "Validate at feature level 6 (1000006)" in out
    assert "BATCH_MATMUL (nnapi_delegate.cc:3602, needs feature level 6 (1000006) (:3604))" in out
    doc = json.loads(js.read_text())
    assert set(doc) == {"android_api", "plan", "operators", "partitions"} and doc["android_api"] == 33
    assert [o["where"] for o in doc["operators"]] == ["nnapi"] * 3
    assert all(set(o) == {"index", "name", "where", "partition", "device"} for o in doc["operators"])
    rc = cli.main(["run", str(model), "--android-api", "30", "--explain"])
    out = capsys.readouterr().out
    assert rc == 0 and "cpu x1 (BATCH_MATMUL): Android sdk version less than 1000006 (nnapi_delegate.cc:3604)" in out
    with pytest.raises(SystemExit) as e:
        cli.main(["run", str(model), "--android-api", "36"])
    assert e.value.code == 2


def test_devices_through_the_runtime_at_api_33():
    """--devices A,B at API 33: the NNAPI partition compiled by the client runtime over the devices'
    AIDL faces at the model's level (AIDL v2 for BATCH_MATMUL); sample-minimal takes the ADDs, sample-all
    the BATCH_MATMUL."""
    plan = plan_of(batch_matmul_model(), 33, devices=["sample-minimal", "sample-all"])
    assert where(plan) == ["nnapi"] * 3
    assert ok(run_and_compare(plan))

