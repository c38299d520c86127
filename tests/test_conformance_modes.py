"""The conformance runner's burst and fenced executors (VTS runs all four:
sync, async, burst, fenced): a representative sample in the default run, the
whole suite under ``-m sweep``, and the runner catching drivers that get the
fenced or burst rules wrong."""

from __future__ import annotations

from typing import Any

import pytest

import nnhal
from nnhal import fence, hal
from nnhal.cli import main
from nnhal.conformance import vectors
from nnhal.conformance.runner import MODES, Runner
from tests.conftest import vectors_root

S = hal.ErrorStatus

# one file per kind of thing the two executors must get right: float and quant8 (with the signed
# coupling), several outputs, a dynamic-shape model, a zero-sized output (fenced: INVALID_ARGUMENT),
# an optional input, IF and WHILE, RANK
SAMPLE = ["V1_0/add", "V1_0/conv_quant8", "V1_2/softmax_v1_2", "V1_2/concat_zero_sized", "V1_2/split_float_2",
          "V1_2/lstm3_state_float16", "V1_3/if_no_value", "V1_3/while_sum_of_powers_quant8", "V1_3/rank",
          "V1_2/box_with_nms_limit_hard"]


def _models(rel: str, limit: int = 6) -> list[vectors.VectorModel]:
    path = vectors_root() / f"{rel}.json.gz"
    if not path.exists():
        pytest.skip(f"no vector file {rel}")
    return vectors.load_file(path)[:limit]


def test_all_means_the_four_executors() -> None:
    assert MODES == ("sync", "async", "burst", "fenced")


@pytest.mark.parametrize("rel", SAMPLE)
def test_burst_and_fenced_sample(rel: str) -> None:
    runner = Runner(nnhal.get_device("sample-all"), ("burst", "fenced"))
    results = [r for vm in _models(rel) for r in runner.run_model(vm)]
    assert results
    bad = [f"{r.model} [{r.mode}/{r.variant}] {r.status}: {r.message}" for r in results if r.status != "pass"]
    assert not bad, "\n".join(bad[:20])
    if rel == "V1_2/concat_zero_sized":
        fenced = [r for r in results if r.mode == "fenced" and r.variant == "plain"]
        assert fenced and all("INVALID_ARGUMENT" in r.message for r in fenced)


FILES = sorted(vectors_root().rglob("*.json.gz")) if vectors_root().is_dir() else []


@pytest.mark.sweep
@pytest.mark.parametrize("path", FILES, ids=[f"{p.parent.name}/{p.name[:-8]}" for p in FILES])
def test_vector_file_burst_fenced(path: Any) -> None:
    runner = Runner(nnhal.get_device("sample-all"), ("burst", "fenced"))
    results = [r for vm in vectors.load_file(path) for r in runner.run_model(vm)]
    bad = [f"{r.model} [{r.mode}/{r.variant}] {r.status}: {r.message}" for r in results if r.status != "pass"]
    assert not bad, "\n".join(bad[:20])


def test_cli_modes(capsys: pytest.CaptureFixture) -> None:
    path = str(vectors_root() / "V1_0" / "add.json.gz")
    for mode in ("burst", "fenced"):
        assert main(["conformance", path, "--mode", mode, "--no-progress"]) == 0
        assert "0 failed" in capsys.readouterr().out


# ---------------------------------------------------------------------------
# the runner catches drivers that break the burst or fenced rules


class _Wrap(hal.IPreparedModel):
    def __init__(self, inner: Any, how: str):
        self.inner, self.how = inner, how

    def executeSynchronously_1_3(self, request: Any, *a: Any) -> tuple:
        if self.how == "sync-writes-no-output":
            # NOTE: runs into a scratch output pool: success and shapes, the request's outputs left as they were
            from nnhal.platform import memory

            out = request.pools[1].hidlMemory
            scratch = memory.allocate(out.size)
            try:
                pools = [request.pools[0], hal.MemoryPool(hidlMemory=scratch)]
                return self.inner.executeSynchronously_1_3(hal.Request(request.inputs, request.outputs, pools), *a)
            finally:
                memory.free(scratch)
        got = self.inner.executeSynchronously_1_3(request, *a)
        if self.how == "sync-scribbles-on-inputs":
            from nnhal.platform import memory

            view = memory.map(request.pools[0].hidlMemory)
            view[:] = b"\x7f" * len(view)
            view.release()
        return got

    def execute_1_3(self, *a: Any) -> S:
        return self.inner.execute_1_3(*a)

    def configureExecutionBurst(self, *a: Any) -> tuple:
        if self.how == "no-burst":
            return S.GENERAL_FAILURE, None
        return self.inner.configureExecutionBurst(*a)

    def executeFenced(self, request: Any, waitFor: list, measure: Any, deadline: Any, loop: Any,
                      duration: Any) -> tuple:
        if self.how == "fenced-accepts-anything":
            # runs through the synchronous path, which takes unspecified outputs: a fenced execution must not
            status, _, timing = self.inner.executeSynchronously_1_3(request, measure, deadline, loop)

            class Info(hal.IFencedExecutionCallback):
                def getExecutionInfo(self) -> tuple:
                    return status, timing, timing

            return S.NONE, fence.signaled(), Info()
        if self.how == "fenced-timing":
            status, f, cb = self.inner.executeFenced(request, waitFor, measure, deadline, loop, duration)

            class Lying(hal.IFencedExecutionCallback):
                def getExecutionInfo(self) -> tuple:
                    return S.NONE, hal.Timing(5, 1), hal.Timing(5, 1)  # timeOnDevice > timeInDriver

            return status, f, Lying() if cb is not None else None
        return self.inner.executeFenced(request, waitFor, measure, deadline, loop, duration)


class _Device(hal.IDevice):
    def __init__(self, how: str):
        self.inner, self.how = nnhal.get_device("sample-all"), how

    def getSupportedOperations_1_3(self, model: Any) -> tuple:
        return self.inner.getSupportedOperations_1_3(model)

    def prepareModel_1_3(self, model: Any, pref: Any, prio: Any, deadline: Any, mc: Any, dc: Any, token: Any,
                         cb: Any) -> S:
        inner_cb = hal.PreparedModelCallback()
        status = self.inner.prepareModel_1_3(model, pref, prio, deadline, mc, dc, token, inner_cb)
        s, prepared = inner_cb.wait()
        cb.notify_1_3(s, _Wrap(prepared, self.how) if prepared else None)
        return status


def test_runner_catches_a_driver_without_bursts() -> None:
    vm = _models("V1_0/add", 1)[0]
    res = Runner(_Device("no-burst"), ("burst",), ("plain",)).run_model(vm)
    assert [r.status for r in res] == ["fail"] and "GENERAL_FAILURE" in res[0].message


def test_runner_catches_fenced_with_unspecified_outputs() -> None:
    vm = _models("V1_0/add", 1)[0]
    res = Runner(_Device("fenced-accepts-anything"), ("fenced",), ("plain", "dynamic")).run_model(vm)
    by_variant = {r.variant: r for r in res}
    assert by_variant["plain"].status == "pass"
    assert by_variant["dynamic"].status == "fail" and "INVALID_ARGUMENT" in by_variant["dynamic"].message


def test_runner_catches_bad_fenced_timing() -> None:
    vm = _models("V1_0/add", 1)[0]
    runner = Runner(_Device("fenced-timing"), ("fenced",), ("plain",))
    statuses = {r.status for _ in range(2) for r in runner.run_model(vm)}  # timing YES comes on one of the two
    assert "fail" in statuses


def test_runner_gives_each_executor_fresh_pools() -> None:
    """The executors of a variant share one request's pools, reset before each run: outputs a run did not
    write are zeros again (not the last executor's results), inputs a driver wrote over are the vector's."""
    vm = _models("V1_0/add", 1)[0]
    res = Runner(_Device("sync-writes-no-output"), ("async", "sync"), ("plain",)).run_model(vm)
    assert [r.status for r in res] == ["pass", "fail"], [r.message for r in res]
    res = Runner(_Device("sync-scribbles-on-inputs"), ("sync", "async"), ("plain", "dynamic")).run_model(vm)
    assert [r.status for r in res] == ["pass"] * 4, [r.message for r in res]
