"""Declaring extensions (``nnhal.ops.extension``): what a declaration must
hold, a backend whose declaration is broken, resolved types kept inside the
driver (plain numbers for encoders), the runtime's numbering."""

from __future__ import annotations

import logging

import msgspec
import numpy as np
import pytest

from nnhal import hal, runtime
from nnhal.driver import Device
from nnhal.drivers.fibonacci import FIBONACCI, FibonacciBackend
from nnhal.drivers.sample import SampleBackend
from nnhal.ops.base import Signature
from nnhal.ops.extension import (
    Extension,
    ExtensionOperand,
    ExtensionOperandType,
    ExtensionOperation,
    ExtensionOperationType,
    Local,
    plain_model,
    resolve,
)

T = hal.OperandType


@pytest.mark.parametrize("kwargs, message", [
    (dict(name="fibonacci"), "reverse domain name"),
    (dict(name="com.Example.x"), "reverse domain name"),
    (dict(operand_types=(ExtensionOperand(0, "A", False, 4, np.int64),)), "its byte_size is 4"),
    (dict(operand_types=(ExtensionOperand(0, "A", False, 8, np.int64), ExtensionOperand(0, "B", False, 8, np.int64))),
     "not distinct"),
    (dict(operand_types=(ExtensionOperand(1 << 16, "A", False, 8, np.int64),)), "not distinct values in [0, 65535]"),
    (dict(operations=(ExtensionOperation(0, "OP", [Signature((Local(3),), (T.TENSOR_FLOAT32,))],
                                         execute=lambda ctx: []),)), "does not declare"),
    (dict(custom_ops={"Custom": 4}), "undeclared operation 4"),
])
def test_a_declaration_must_hold(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        Extension(**{"name": "com.example.x", **kwargs})


class _Broken(SampleBackend):
    name = "broken-extensions"

    def extensions(self) -> tuple:
        raise RuntimeError("boom")


class _Twice(SampleBackend):
    name = "twice-extensions"

    def extensions(self) -> tuple:
        return (FIBONACCI, FIBONACCI)


@pytest.mark.parametrize("backend", [_Broken, _Twice])
def test_a_broken_declaration_declares_nothing(backend: type, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="nnhal.driver"):
        d = Device(backend.name, backend())
    assert d.getSupportedExtensions() == (hal.ErrorStatus.NONE, [])
    assert "extensions() failed" in caplog.text


def test_resolved_types_stay_inside_the_driver() -> None:
    p = 5
    model = hal.Model(main=hal.Subgraph(
        operands=[hal.Operand(type=(p << 16) | 0, lifetime=hal.OperandLifeTime.SUBGRAPH_INPUT, numberOfConsumers=1),
                  hal.Operand(type=(p << 16) | 1, dimensions=[3], lifetime=hal.OperandLifeTime.SUBGRAPH_OUTPUT)],
        operations=[hal.Operation(type=(p << 16) | 0, inputs=[0], outputs=[1])], inputIndexes=[0], outputIndexes=[1]),
        extensionNameToPrefix=[hal.ExtensionNameAndPrefix(FIBONACCI.name, p)])
    resolved = resolve(model, FibonacciBackend().extensions()).apply(model)
    t_in, t_out = (o.type for o in resolved.main.operands)
    assert isinstance(t_in, ExtensionOperandType) and t_in == (p << 16) and t_in.name == "EXAMPLE_INT64"
    assert t_out.is_tensor and t_out.dtype == np.uint64 and t_out.byte_size == 8
    op_type = resolved.main.operations[0].type
    assert isinstance(op_type, ExtensionOperationType) and op_type.name == "EXAMPLE_FIBONACCI"
    assert hal.operation_name(op_type) == "EXAMPLE_FIBONACCI"
    with pytest.raises(TypeError):
        msgspec.msgpack.encode(resolved)
    # NOTE: the HAL form again, and equal to the original
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(plain_model(resolved)), type=hal.Model) == model
    # a device that does not declare the extension resolves nothing
    assert resolve(model, ()).apply(model) is model


def test_the_runtime_numbers_extensions_per_model() -> None:
    a, b = runtime.Model(), runtime.Model()
    assert a.extension_operation_type(FIBONACCI.name, 0) == 1 << 16
    assert a.extension_operation_type(FIBONACCI.name, 0) == 1 << 16  # the same prefix again
    t = a.extension_operand_type(FIBONACCI.name, 1)
    assert (t.code, t.is_tensor, t.byte_size, t.dtype) == ((1 << 16) | 1, True, 8, np.dtype(np.uint64))
    with pytest.raises(ValueError, match="numbered by another model"):
        b.tensor(t, [3])
    with pytest.raises(ValueError, match="not numbered by this model"):
        b.operation((7 << 16), [b.input("x", np.float32, [1])], (np.float32, [1]))
    with pytest.raises(ValueError, match="no device declares extension 'com.example.unknown'"):
        b.extension_operand_type("com.example.unknown", 0)
    with pytest.raises(ValueError, match="has no operand type 7"):
        b.extension_operand_type(FIBONACCI.name, 7)
    with pytest.raises(ValueError, match="invalid extension name"):
        b.extension_operation_type("nodot", 0)
    with pytest.raises(ValueError, match="has 4 bytes"):
        b.extension_operand_type(FIBONACCI.name, 0, np.int32)
