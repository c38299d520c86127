"""Vendor extensions end to end (issue 19): every case of Android's
``FibonacciExtensionTest.cpp`` through the client runtime over
``example-fibonacci`` and ``sample-all``, in process and with the example
device served by ``nnhal serve --driver example-fibonacci``; and Android's
``TestExtensions.cpp`` device report."""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np
import pytest

import nnhal
from nnhal import hal, runtime
from nnhal.drivers.fibonacci import (
    EXAMPLE_FIBONACCI,
    EXAMPLE_INT64,
    EXAMPLE_TENSOR_QUANT64_ASYMM,
    EXTENSION_NAME,
    quant64_params,
)
from nnhal.runtime import extensions as rt_extensions

S = hal.ErrorStatus
T = hal.OperandType
OT = hal.OperationType
FIB = [1, 1, 2, 3, 5, 8, 13, 21, 34, 55]


@pytest.fixture(scope="module")
def fibonacci_service(service_runtime_dir: Any) -> Iterator[Any]:
    """``nnhal serve --driver example-fibonacci`` for this module."""
    from tests.service_util import ServiceProcess

    sp = ServiceProcess(service_runtime_dir, driver="example-fibonacci")
    try:
        sp.start()
        yield sp
    finally:
        sp.stop()


@pytest.fixture(params=["in-process", "service"])
def fib_name(request: pytest.FixtureRequest) -> str:
    """The name the runtime finds the Fibonacci device by: the in-process
    driver, or a service of it (the runtime opens it through nnhal.connect)."""
    if request.param == "in-process":
        return "example-fibonacci"
    return request.getfixturevalue("fibonacci_service").name


def supported_for_devices(model: runtime.Model, names: list[str]) -> list[bool]:
    """``ANeuralNetworksModel_getSupportedOperationsForDevices``: an operation is
    supported when some device takes it (a device that fails takes nothing)."""
    hal_model = model.finish()
    union = [False] * len(hal_model.main.operations)
    for name in names:
        status, flags, _ = nnhal.supported_operations(runtime.discovery.get(name).device, hal_model)
        if status == S.NONE:
            union = [a or b for a, b in zip(union, flags)]
    return union


def add_nop(m: runtime.Model, x: runtime.Operand, out: Any) -> runtime.Operand:
    """Our NOP is ADD of zeros (no extension type support), as the reference test's."""
    return m.operation(OT.ADD, [x, np.zeros(x.dimensions, np.float32), 0], out)


def create_model(m: runtime.Model, in_type: Any, in_shape: list, out_type: Any, out_shape: list,
                 nops: bool, out_params: Any = None) -> None:
    fib = m.extension_operation_type(EXTENSION_NAME, EXAMPLE_FIBONACCI)
    x = m.input("x", in_type, in_shape)
    fib_in = add_nop(m, x, (in_type, in_shape)) if nops else x
    fib_out = m.operation(fib, [fib_in], m.tensor(out_type, out_shape, extension_params=out_params))
    m.output(add_nop(m, fib_out, (out_type, out_shape)) if nops else fib_out, "y")


def compile_fails(m: runtime.Model, names: list[str]) -> runtime.CompilationError:
    with pytest.raises(runtime.CompilationError) as e:
        runtime.Compilation(m, names).finish()
    # NOTE: BAD_DATA in the NDK: no device takes the operation and an extension operation has no CPU fallback
    assert e.value.status == S.INVALID_ARGUMENT, e.value
    return e.value


def test_model_with_extension_operand_types(fib_name: str) -> None:
    n, scale, zero_point = 10, 0.5, 10
    m = runtime.Model()
    in_type = m.extension_operand_type(EXTENSION_NAME, EXAMPLE_INT64, np.int64)
    out_type = m.extension_operand_type(EXTENSION_NAME, EXAMPLE_TENSOR_QUANT64_ASYMM)
    create_model(m, in_type, [], out_type, [n], nops=False, out_params=quant64_params(scale, zero_point))
    devices = [fib_name, "sample-all"]
    assert supported_for_devices(m, devices) == [True]
    with runtime.Compilation(m, devices) as c:
        y = c.run({"x": np.int64(n)})["y"]
    assert y.dtype == np.uint64
    assert y.tolist() == [f / scale + zero_point for f in FIB]


def test_model_with_temporaries(fib_name: str) -> None:
    m = runtime.Model()
    create_model(m, np.float32, [1], np.float32, [10], nops=True)
    devices = [fib_name, "sample-all"]
    assert supported_for_devices(m, devices) == [True, True, True]
    with runtime.Compilation(m, devices) as c:
        y = c.run({"x": np.array([10], np.float32)})["y"]
        placement = c.placement()
    assert y.tolist() == FIB
    # NOTE: the ADDs tie (execTime 1 on both) and go to the reference; the extension operation only to the
    # device declaring it, and the report says why each went where
    assert [p.device for p in placement.operations] == ["sample-all", fib_name, "sample-all"]
    assert "tie goes to the CPU reference" in placement.operations[0].why
    assert EXTENSION_NAME in placement.operations[1].why
    assert "not declared by this device" in placement.operations[1].refused["sample-all"]


@pytest.mark.parametrize("which", ["input", "output"])
def test_invalid_operand_type(fib_name: str, which: str) -> None:
    m = runtime.Model()
    if which == "input":
        create_model(m, np.int32, [1], np.float32, [1], nops=False)  # unsupported input type
    else:
        create_model(m, np.float32, [1], np.int32, [1], nops=False)  # unsupported output type
    devices = [fib_name, "sample-all"]
    assert supported_for_devices(m, devices) == [False]
    err = compile_fails(m, devices)
    # NOTE: the runtime speaks to both through their AIDL face, at the model's feature level (AIDL v1 for a 1.3 model)
    assert f"{fib_name}: IDevice.getSupportedOperations (AIDL v1) returned INVALID_ARGUMENT" in str(err)
    if fib_name == "example-fibonacci":  # NOTE: in process the runtime also has the driver's log line
        assert "EXAMPLE_FIBONACCI does not accept" in str(err)


def test_invalid_input_value(fib_name: str) -> None:
    m = runtime.Model()
    create_model(m, np.float32, [1], np.float32, [1], nops=False)
    devices = [fib_name, "sample-all"]
    assert supported_for_devices(m, devices) == [True]
    with runtime.Compilation(m, devices) as c:
        with pytest.raises(runtime.ExecutionError) as e:
            c.run({"x": np.array([-1], np.float32)})
    assert e.value.status == S.GENERAL_FAILURE  # NOTE: OP_FAILED in the NDK
    assert "cannot run on the CPU reference" in str(e.value)


def test_invalid_num_inputs(fib_name: str) -> None:
    m = runtime.Model()
    fib = m.extension_operation_type(EXTENSION_NAME, EXAMPLE_FIBONACCI)
    a, b = m.input("a", np.float32, [1]), m.input("b", np.float32, [1])  # an extra input
    m.output(m.operation(fib, [a, b], (np.float32, [1])), "y")
    devices = [fib_name, "sample-all"]
    assert supported_for_devices(m, devices) == [False]
    compile_fails(m, devices)


def test_invalid_num_outputs(fib_name: str) -> None:
    m = runtime.Model()
    fib = m.extension_operation_type(EXTENSION_NAME, EXAMPLE_FIBONACCI)
    a = m.input("a", np.float32, [1])
    y1, y2 = m.operation(fib, [a], [(np.float32, [1]), (np.float32, [1])])  # an extra output
    m.output(y1, "y1")
    m.output(y2, "y2")
    devices = [fib_name, "sample-all"]
    assert supported_for_devices(m, devices) == [False]
    compile_fails(m, devices)


def test_invalid_operation(fib_name: str) -> None:
    m = runtime.Model()
    op = m.extension_operation_type(EXTENSION_NAME, EXAMPLE_FIBONACCI + 1)  # this operation does not exist
    a = m.input("a", np.float32, [1])
    m.output(m.operation(op, [a], (np.float32, [1])), "y")
    devices = [fib_name, "sample-all"]
    assert supported_for_devices(m, devices) == [False]
    err = compile_fails(m, devices)
    assert f"extension {EXTENSION_NAME} has no operation 1" in str(err)


# ---------------------------------------------------------------------------
# TestExtensions.cpp: DeviceReportsSupportedExtensions


def test_device_reports_supported_extensions(fib_name: str) -> None:
    dev = runtime.discovery.get(fib_name).device
    status, exts = dev.getSupportedExtensions()
    assert status == S.NONE
    assert exts == [hal.Extension(name=EXTENSION_NAME, operandTypes=[
        hal.ExtensionOperandTypeInformation(type=EXAMPLE_INT64, isTensor=False, byteSize=8),
        hal.ExtensionOperandTypeInformation(type=EXAMPLE_TENSOR_QUANT64_ASYMM, isTensor=True, byteSize=8)])]
    assert rt_extensions.declares(dev, EXTENSION_NAME)
    assert not rt_extensions.declares(dev, "vendor.test.unknown")
    assert not rt_extensions.declares(dev, "asdfasdfas")
    assert nnhal.get_device("sample-all").getSupportedExtensions() == (S.NONE, [])


def test_large_n_matches_python_integers() -> None:
    """The uint64 results wrap modulo 2^64 past F(93), as the reference's uint64 arithmetic."""
    m = runtime.Model()
    in_type = m.extension_operand_type(EXTENSION_NAME, EXAMPLE_INT64, np.int64)
    out_type = m.extension_operand_type(EXTENSION_NAME, EXAMPLE_TENSOR_QUANT64_ASYMM)
    create_model(m, in_type, [], out_type, [0], nops=False, out_params=quant64_params(1.0, 0))
    with runtime.Compilation(m, ["example-fibonacci", "sample-all"]) as c:
        y = c.run({"x": np.int64(90)})["y"]
    a, b, want = 1, 1, []
    for _ in range(90):
        want.append(a)
        a, b = b, a + b
    # NOTE: through float64 as the reference (uint64 -> double / scale + zeroPoint -> uint64): exact below 2^53
    assert [int(v) for v in y] == [int(np.uint64(np.float64(w))) for w in want]
