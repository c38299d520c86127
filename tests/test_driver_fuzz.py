"""Fuzzing the hostile-input surfaces (issue 17): compilation cache files,
wire frames and burst packets through a running service, HAL models and
requests (``nnhal.tools.fuzz_driver``).

The default run gives each surface a few seconds (all of them together
well under a minute); ``python -m pytest -m fuzz`` runs each for
``NNHAL_FUZZ_MINUTES`` (default 10) minutes, as
``python -m nnhal.tools.fuzz_driver SURFACE --minutes 10`` does."""

from __future__ import annotations

import os

import pytest

from nnhal import hal
from nnhal.driver.prepared_model import PreparedModel
from nnhal.tools import fuzz_driver as fuzz

# (surface, seconds in the default run, inputs it must at least try then: far fewer than an idle
# machine does (hal ~3000, cache ~1300, wire ~8000, burst ~20000), so that a loaded CI machine passes)
QUICK = [("hal", 10, 100), ("cache", 10, 50), ("wire", 7, 200), ("burst", 7, 200)]


def _check(report: fuzz.Report, min_inputs: int) -> None:
    print(report.summary())
    assert report.finding_count == 0, "\n".join(report.findings)
    assert report.inputs >= min_inputs, report.summary()


@pytest.mark.parametrize("surface, seconds, min_inputs", QUICK, ids=[q[0] for q in QUICK])
def test_fuzz_quick(surface: str, seconds: float, min_inputs: int) -> None:
    _check(fuzz.run(surface, seconds, seed=17), min_inputs)


@pytest.mark.fuzz
@pytest.mark.parametrize("surface", [q[0] for q in QUICK])
def test_fuzz_long(surface: str) -> None:
    minutes = float(os.environ.get("NNHAL_FUZZ_MINUTES", "10"))
    seed = int(os.environ.get("NNHAL_FUZZ_SEED", "0"))
    _check(fuzz.run(surface, minutes * 60, seed=seed), 1000)


def test_the_harness_finds_an_exception_out_of_the_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    """A planted bug (executions raise inside the driver) is a finding: the HAL
    guard answers GENERAL_FAILURE, and the harness reads its log line."""
    def broken(self, job):  # noqa: ANN001, ANN202
        raise KeyError("planted")

    monkeypatch.setattr(PreparedModel, "run_job", broken)
    report = fuzz.run("hal", 3, seed=1)
    assert report.finding_count > 0
    assert any("planted" in f for f in report.findings), report.findings


def test_the_harness_finds_a_wrong_status() -> None:
    """A surface of its own (another module's, through register): a method
    answering a status its spec does not name is a finding."""

    @fuzz.register("test-wrong-status")
    def surface(rng, end, report) -> None:  # noqa: ANN001
        report.inputs += 1
        status = hal.ErrorStatus.OUTPUT_INSUFFICIENT_SIZE  # not a preparation's
        if status not in fuzz._LAUNCH:
            report.finding(f"prepareModel_1_3 returned {status!r}")

    try:
        assert fuzz.run("test-wrong-status", 0.1).finding_count == 1
    finally:
        del fuzz.SURFACES["test-wrong-status"]


def test_mutators_are_seeded() -> None:
    import random

    a = [fuzz.mutate_bytes(random.Random(5), b"0123456789" * 4) for _ in range(3)]
    b = [fuzz.mutate_bytes(random.Random(5), b"0123456789" * 4) for _ in range(3)]
    assert a == b
    tree = {"a": [1, 2, {"b": b"xy"}], "c": "s"}
    assert fuzz.mutate_tree(random.Random(9), tree) == fuzz.mutate_tree(random.Random(9), tree)
    assert tree == {"a": [1, 2, {"b": b"xy"}], "c": "s"}  # the seed tree is left alone


def test_one_fuzz_command_for_every_surface() -> None:
    """python -m nnhal.tools.fuzz SURFACE: the .tflite importer's own, the driver's through fuzz_driver."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "nnhal.tools.fuzz", "burst", "--seconds", "1"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and "burst:" in r.stdout and "0 findings" in r.stdout, r.stdout + r.stderr
