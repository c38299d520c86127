"""The device validates a model once for getSupportedOperations followed by prepareModel of the same
model (nnhal.driver.validation_memo): an equal model with equal pool bytes reuses the verdict, anything
else (another version, a constant changed in the model or in its pool) is validated again."""

from __future__ import annotations

import numpy as np

from nnhal import hal
from nnhal.driver import device as device_mod
from nnhal.driver.validation_memo import ValidationMemo
from nnhal.drivers.sample import sample_device
from tests.driver_util import add_model, prepare

S = hal.ErrorStatus


def _count_validations(monkeypatch) -> list:
    calls: list = []
    real = device_mod.validate_model

    def counted(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(device_mod, "validate_model", counted)
    return calls


def test_supported_then_prepare_validates_once(monkeypatch):
    dev = sample_device("memo-dev")
    calls = _count_validations(monkeypatch)
    model = add_model()
    assert dev.getSupportedOperations_1_3(model)[0] == S.NONE
    _, status, prepared = prepare(model, dev)
    assert status == S.NONE and prepared is not None
    assert len(calls) == 1
    # NOTE: used up: a second preparation validates again
    assert prepare(model, dev)[1] == S.NONE and len(calls) == 2


def test_a_changed_model_or_version_is_validated_again(monkeypatch):
    dev = sample_device("memo-dev2")
    calls = _count_validations(monkeypatch)
    model = add_model()
    dev.getSupportedOperations_1_3(model)
    model.main.operands[0].dimensions = [2, 3]  # NOTE: the client changed its model between the calls
    model.main.operands[1].dimensions = [2, 3]
    model.main.operands[3].dimensions = [2, 3]
    assert prepare(model, dev)[1] == S.NONE and len(calls) == 2
    dev.getSupportedOperations_1_2(model)
    assert prepare(model, dev)[1] == S.NONE and len(calls) == 4  # NOTE: 1.2 then 1.3: not the same question


def test_pool_bytes_compared():
    """A constant in a pool the client rewrote between the calls, another model, a replaced operation
    definition, values that cannot be compared: not the same model."""
    import dataclasses

    from nnhal.engine.validation import validate_model
    from nnhal.hal.types import HalVersion
    from nnhal.ops import registry

    model = add_model()
    defs = validate_model(model, [], HalVersion.V1_3)
    memo = ValidationMemo()
    a = bytearray(b"\x01" * 64)
    memo.keep(model, [memoryview(bytes(a))], 3, defs)
    assert memo.take(add_model(), [memoryview(bytes(a))], 3) == defs
    assert memo.take(model, [memoryview(bytes(a))], 3) is None  # NOTE: used up
    memo.keep(model, [memoryview(bytes(a))], 3, defs)
    a[10] = 2
    assert memo.take(model, [memoryview(bytes(a))], 3) is None
    memo.keep(model, [memoryview(bytes(a))], 3, defs)
    assert memo.take(add_model(dims=(2, 3)), [memoryview(bytes(a))], 3) is None
    memo.keep(model, [], 3, defs)
    assert memo.take(model, [], 2) is None
    memo.keep(model, [], 3, defs)
    add = registry.REGISTRY[hal.OperationType.ADD]
    registry.REGISTRY[hal.OperationType.ADD] = dataclasses.replace(add)
    try:
        assert memo.take(model, [], 3) is None
    finally:
        registry.REGISTRY[hal.OperationType.ADD] = add
    memo.keep(np.zeros(3), [], 3, [])
    assert memo.take(np.zeros(3), [], 3) is None  # NOTE: an uncomparable value: not the same model
