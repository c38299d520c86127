"""The conformance suite through the HAL, per vector file, and the runner's
own behaviour (it must catch a wrong driver, not only bless a right one)."""

from __future__ import annotations

import numpy as np
import pytest

import nnhal
from nnhal import hal
from nnhal.conformance import vectors
from nnhal.conformance.compare import compare
from nnhal.conformance.runner import Runner, has_quant8_coupled_operands, to_signed
from tests.conftest import vectors_root

FILES = sorted(vectors_root().rglob("*.json.gz")) if vectors_root().is_dir() else []


def _run(path, modes=("sync", "async")):  # noqa: ANN001, ANN202
    runner = Runner(nnhal.get_device("sample-all"), modes)
    results = []
    for vm in vectors.load_file(path):
        results += runner.run_model(vm)
    return results


@pytest.mark.parametrize("path", FILES, ids=[f"{p.parent.name}/{p.name[:-8]}" for p in FILES])
def test_vector_file(path) -> None:  # noqa: ANN001
    """Every model of the file: sync + async, dynamic shapes, insufficient size, signed coupling."""
    results = _run(path)
    bad = [f"{r.model} [{r.mode}/{r.variant}] {r.status}: {r.message}" for r in results if r.status != "pass"]
    assert not bad, "\n".join(bad[:20])


def test_vector_count(vectors_dir) -> None:  # noqa: ANN001
    assert sum(1 for _ in vectors.load([vectors_dir])) == 6055


# ---------------------------------------------------------------------------
# the runner catches a wrong driver


class _WrongOutputs(hal.IPreparedModel):
    def __init__(self, inner):  # noqa: ANN001
        self.inner = inner

    def executeSynchronously_1_3(self, request, measure, deadline, loop):  # noqa: ANN001, ANN201
        status, shapes, timing = self.inner.executeSynchronously_1_3(request, measure, deadline, loop)
        mem = request.pools[1].hidlMemory
        view = nnhal.memory.map(mem)
        view[3] ^= 0x40  # corrupt the exponent of the first float32 output
        view.release()
        return status, shapes, timing


class _WrongDevice(hal.IDevice):
    def __init__(self):  # noqa: ANN204
        self.inner = nnhal.get_device("sample-all")

    def getSupportedOperations_1_3(self, model):  # noqa: ANN001, ANN201
        return self.inner.getSupportedOperations_1_3(model)

    def prepareModel_1_3(self, model, pref, prio, deadline, mc, dc, token, cb):  # noqa: ANN001, ANN201
        inner_cb = hal.PreparedModelCallback()
        status = self.inner.prepareModel_1_3(model, pref, prio, deadline, mc, dc, token, inner_cb)
        s, prepared = inner_cb.wait()
        cb.notify_1_3(s, _WrongOutputs(prepared) if prepared else None)
        return status


def test_runner_catches_wrong_results(vectors_dir) -> None:  # noqa: ANN001
    vm = vectors.load_file(vectors_dir / "V1_0" / "add.json.gz")[0]
    res = Runner(_WrongDevice(), ("sync",), ("plain",)).run_model(vm)
    assert [r.status for r in res] == ["fail"]
    assert "output 0" in res[0].message


def test_runner_expect_failure_model(vectors_dir) -> None:  # noqa: ANN001
    vm = vectors.load_file(vectors_dir / "V1_3" / "while_infinite_loop.json.gz")[0]
    assert vm.expectFailure
    res = Runner(nnhal.get_device("sample-all"), ("sync",), ("plain",)).run_model(vm)
    assert res[0].status == "pass" and "MISSED_DEADLINE" in res[0].message


def test_signed_coupling_conversion(vectors_dir) -> None:  # noqa: ANN001
    vm = vectors.load_file(vectors_dir / "V1_0" / "add_quant8.json.gz")[0]
    assert has_quant8_coupled_operands(vm)
    s = to_signed(vm)
    for a, b in zip(vm.main.operands, s.main.operands):
        if a.type == hal.OperandType.TENSOR_QUANT8_ASYMM:
            assert b.type == hal.OperandType.TENSOR_QUANT8_ASYMM_SIGNED
            assert b.zeroPoint == a.zeroPoint - 128
            np.testing.assert_array_equal(b.data.astype(int), a.data.astype(int) - 128)


def test_compare_tolerances() -> None:
    T = hal.OperandType
    e = np.array([1.0, 100.0], np.float32)
    assert compare(e + 1e-6, e, T.TENSOR_FLOAT32, model_has_fp16=False, relaxed=False, name="x").ok
    assert not compare(e + 1e-3, e, T.TENSOR_FLOAT32, model_has_fp16=False, relaxed=False, name="x").ok
    assert compare(e + 1e-3, e, T.TENSOR_FLOAT32, model_has_fp16=False, relaxed=True, name="x").ok
    q = np.array([10, 20], np.uint8)
    assert compare(q + 1, q, T.TENSOR_QUANT8_ASYMM, model_has_fp16=False, relaxed=False, name="x").ok
    assert not compare(q + 2, q, T.TENSOR_QUANT8_ASYMM, model_has_fp16=False, relaxed=False, name="x").ok
    assert compare(q + 3, q, T.TENSOR_QUANT8_ASYMM, model_has_fp16=False, relaxed=False, name="mobilenet_x").ok
    b = np.array([True, False])
    assert not compare(~b, b, T.TENSOR_BOOL8, model_has_fp16=False, relaxed=False, name="x").ok
    assert not compare(np.zeros((2, 1)), np.zeros((1, 2)), T.TENSOR_FLOAT32, model_has_fp16=False,
                       relaxed=False, name="x").ok


@pytest.mark.parametrize("kind", ["mmap_fd", "hardware_buffer_blob"])
def test_request_pools_of_every_kind(vectors_dir, kind: str) -> None:  # noqa: ANN001
    """VTS runs the generated models with ashmem and BLOB hardware-buffer pools too."""
    runner = Runner(nnhal.get_device("sample-all"), ("sync", "async"), ("plain", "dynamic"), memory=kind)
    for rel in ("V1_0/conv_quant8.json.gz", "V1_2/softmax_v1_2.json.gz", "V1_3/while_sum_of_powers_quant8.json.gz"):
        for vm in vectors.load_file(vectors_dir / rel)[:4]:
            bad = [f"{r.model} {r.mode}/{r.variant}: {r.message}" for r in runner.run_model(vm) if r.status != "pass"]
            assert not bad, bad
