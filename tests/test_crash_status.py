"""A crashing kernel or validator is a driver bug, never an operation's expected
failure: a kernel raising a plain Python error reaches the HAL boundary
(driver/execution.py) and comes out as GENERAL_FAILURE with its traceback
logged; a validator crashing on a model refuses it with INVALID_ARGUMENT (the
model is what it could not check) but logs the crash as a driver bug."""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import pytest

from nnhal import hal
from nnhal.engine.executor import Executor
from nnhal.ops import registry
from tests.driver_util import Pools, add_model, device, execute_sync, prepare, prepared_model

S = hal.ErrorStatus
A = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)


def _boom(*_args, **_kwargs):
    return 1 // 0


@pytest.fixture
def crashing(monkeypatch):
    def patch(field: str) -> None:
        opdef = registry.REGISTRY[hal.OperationType.ADD]
        monkeypatch.setitem(registry.REGISTRY, hal.OperationType.ADD, dataclasses.replace(opdef, **{field: _boom}))
    return patch


def test_crashing_kernel_is_general_failure_with_traceback(crashing, caplog):
    crashing("execute")
    prepared = prepared_model(add_model(), device())
    with caplog.at_level(logging.DEBUG, logger="nnhal"):
        status, _, _ = execute_sync(prepared, Pools([A, A], [16]).request())
    assert status == S.GENERAL_FAILURE
    crashes = [r for r in caplog.records if r.exc_info and r.exc_info[0] is ZeroDivisionError]
    assert crashes, [r.getMessage() for r in caplog.records]


def test_executor_lets_a_kernel_crash_through(crashing):
    # NOTE: the executor no longer turns a crash into OpExecutionError (an "expected" operation failure)
    crashing("execute")
    ex = Executor(add_model(), [])
    with pytest.raises(ZeroDivisionError):
        ex.run([A, A])


def test_crashing_validator_is_refused_and_logged(crashing, caplog):
    crashing("validate")
    with caplog.at_level(logging.DEBUG, logger="nnhal"):
        _, status, prepared = prepare(add_model(), device())
    assert status == S.INVALID_ARGUMENT and prepared is None
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any("validator crashed" in m and "ZeroDivisionError" in m for m in errors), errors
    assert any(r.exc_info and r.exc_info[0] is ZeroDivisionError for r in caplog.records)
