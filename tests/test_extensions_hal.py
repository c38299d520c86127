"""The example device through the HAL, in process and through ``nnhal serve
--driver example-fibonacci``: the extension cases of the model and request
mutations (a mutated prefix, name or extension parameter never crashes, never
reaches the kernel, and gets the status the HAL names: INVALID_ARGUMENT for
a model ``ValidateHal`` or the declaring driver rejects, NONE with the
operation unsupported and GENERAL_FAILURE from prepareModel for one that is
valid but names what the device does not declare), the compilation cache and
memory domains with extension-typed roles."""

from __future__ import annotations

import copy
import dataclasses
import os
import struct
from typing import Any, Callable, Iterator

import numpy as np
import pytest

import nnhal
from nnhal import hal
from nnhal.drivers import fibonacci as fibmod
from nnhal.drivers.fibonacci import EXTENSION_NAME, quant64_params
from tests.driver_util import Builder, Pools, execute_async, execute_sync, make_model, prepare, prepared_model

S = hal.ErrorStatus
T = hal.OperandType
L = hal.OperandLifeTime
P = 3  # NOTE: any prefix: the model's own numbering
INT64, Q64, FIB = (P << 16) | 0, (P << 16) | 1, (P << 16) | 0
N, SCALE, ZP = 10, 0.5, 10
WANT = [f / SCALE + ZP for f in (1, 1, 2, 3, 5, 8, 13, 21, 34, 55)]


@pytest.fixture(scope="module")
def fibonacci_service(service_runtime_dir: Any) -> Iterator[Any]:
    from tests.service_util import ServiceProcess

    sp = ServiceProcess(service_runtime_dir, driver="example-fibonacci")
    try:
        sp.start()
        yield sp
    finally:
        sp.stop()


@pytest.fixture(scope="module", params=["in-process", "service"])
def dev(request: pytest.FixtureRequest) -> Iterator[Any]:
    if request.param == "in-process":
        yield nnhal.get_device("example-fibonacci")
        return
    d = request.getfixturevalue("fibonacci_service").connect()
    try:
        yield d
    finally:
        d.close()


@pytest.fixture
def kernel_calls(monkeypatch: pytest.MonkeyPatch) -> list:
    """Each time the in-process kernel gets past its checks to compute (a spy)."""
    calls: list = []
    real = fibmod.fibonacci

    def spy(n: int, dtype: Any) -> np.ndarray:
        calls.append(n)
        return real(n, dtype)

    monkeypatch.setattr(fibmod, "fibonacci", spy)
    return calls


def fib_model(constant_n: bool = False) -> hal.Model:
    """n (EXAMPLE_INT64, an input or a constant) -> EXAMPLE_FIBONACCI -> EXAMPLE_TENSOR_QUANT64_ASYMM [10]."""
    b = Builder()
    n = b.const(INT64, struct.pack("<q", N)) if constant_n else b.input(INT64, [])
    out = b.output(Q64, [N])
    b.operands[out].extraParams = hal.OperandExtraParams(extension=quant64_params(SCALE, ZP))
    b.op(FIB, [n], [out])
    m = make_model(b)
    m.extensionNameToPrefix = [hal.ExtensionNameAndPrefix(name=EXTENSION_NAME, prefix=P)]
    return m


def run(prepared: Any, n: int = N, out_bytes: int = 8 * N) -> tuple:
    pools = Pools([np.array(n, np.int64)], [out_bytes])
    status, shapes, _ = execute_sync(prepared, pools.request())
    out = pools.output(0, np.uint64, [N]).tolist() if status == S.NONE else None
    pools.close()
    return status, shapes, out


# ---------------------------------------------------------------------------
# model mutations


def _entries(m: hal.Model, *extra: tuple) -> None:
    m.extensionNameToPrefix = [*m.extensionNameToPrefix, *(hal.ExtensionNameAndPrefix(n, p) for n, p in extra)]


def _rename(name: str) -> Callable[[hal.Model], None]:
    def f(m: hal.Model) -> None:
        m.extensionNameToPrefix[0].name = name
    return f


def _params(params: Any) -> Callable[[hal.Model], None]:
    def f(m: hal.Model) -> None:
        m.main.operands[1].extraParams = hal.OperandExtraParams(extension=params)
    return f


def _operand(k: int, **changes: Any) -> Callable[[hal.Model], None]:
    def f(m: hal.Model) -> None:
        m.main.operands[k] = dataclasses.replace(m.main.operands[k], **changes)
    return f


def _op_type(t: int) -> Callable[[hal.Model], None]:
    def f(m: hal.Model) -> None:
        m.main.operations[0].type = t
    return f


def _const_length(m: hal.Model) -> None:
    m.main.operands[0].location = hal.DataLocation(0, m.main.operands[0].location.offset, 4)


INVALID: dict[str, tuple[Callable[[hal.Model], None], bool]] = {
    # name: (mutation, on the model with a constant n)
    "mapping prefix changed": (lambda m: setattr(m.extensionNameToPrefix[0], "prefix", P + 1), False),
    "operand type prefix unknown": (_operand(0, type=(9 << 16) | 0), False),
    "operation type prefix unknown": (_op_type((9 << 16) | 0), False),
    "prefix 0": (lambda m: _entries(m, ("com.example.other", 0)), False),
    "prefix above 16 bits": (lambda m: _entries(m, ("com.example.other", 0x10000)), False),
    "name given two prefixes": (lambda m: _entries(m, (EXTENSION_NAME, P + 1)), False),
    "prefix given two names": (lambda m: _entries(m, ("com.example.other", P)), False),
    "name empty": (_rename(""), False),
    "name without a dot": (_rename("fibonacci"), False),
    "name with capitals": (_rename("com.Example.fibonacci"), False),
    "name with a slash": (_rename("com.example/fibonacci"), False),
    "params none": (_params(None), False),
    "params empty": (_params(b""), False),
    "params short": (_params(quant64_params(SCALE, ZP)[:15]), False),
    "params long": (_params(quant64_params(SCALE, ZP) + b"\0"), False),
    "params scale 0": (_params(quant64_params(0.0, ZP)), False),
    "params scale negative": (_params(quant64_params(-1.0, ZP)), False),
    "params scale nan": (_params(quant64_params(float("nan"), ZP)), False),
    "params scale inf": (_params(quant64_params(float("inf"), ZP)), False),
    "params on EXAMPLE_INT64": (_operand(0, extraParams=hal.OperandExtraParams(extension=b"\0" * 8)), False),
    "channelQuant on an extension operand": (_operand(1, extraParams=hal.OperandExtraParams(
        channelQuant=hal.SymmPerChannelQuantParams(scales=[1.0] * N, channelDim=0))), False),
    "scale on an extension operand": (_operand(0, scale=1.0), False),
    "zeroPoint on an extension operand": (_operand(0, zeroPoint=1), False),
    "operand type undeclared": (_operand(1, type=(P << 16) | 2), False),
    "scalar EXAMPLE_INT64 of rank 1": (_operand(0, dimensions=[1]), False),
    "output of rank 2": (_operand(1, dimensions=[N, 1]), False),
    "input type TENSOR_INT32": (_operand(0, type=T.TENSOR_INT32, dimensions=[1]), False),
    "output type TENSOR_INT32": (_operand(1, type=T.TENSOR_INT32, extraParams=hal.OperandExtraParams()), False),
    "constant EXAMPLE_INT64 of 4 bytes": (_const_length, True),
    "extension operand in ADD": (lambda m: setattr(m.main.operations[0], "type", hal.OperationType.ADD), False),
}

UNSUPPORTED: dict[str, Callable[[hal.Model], None]] = {
    "extension not declared by the device": _rename("com.example.other"),
    "operation not declared by the extension": _op_type((P << 16) | 1),
}


def test_the_unmutated_models_run(dev: Any) -> None:
    for constant in (False, True):
        m = fib_model(constant)
        assert dev.getSupportedOperations_1_3(m) == (S.NONE, [True])
        prepared = prepared_model(m, dev)
        if constant:
            pools = Pools([], [8 * N])
            assert execute_sync(prepared, pools.request())[0] == S.NONE
            assert pools.output(0, np.uint64, [N]).tolist() == WANT
            pools.close()
        else:
            assert run(prepared) == (S.NONE, [hal.OutputShape([N], True)], WANT)


@pytest.mark.parametrize("name", sorted(INVALID))
def test_invalid_extension_model(dev: Any, name: str, kernel_calls: list) -> None:
    mutate, constant = INVALID[name]
    m = copy.deepcopy(fib_model(constant))
    mutate(m)
    assert dev.getSupportedOperations_1_3(m) == (S.INVALID_ARGUMENT, [])
    launch, status, prepared = prepare(m, dev)
    assert (launch, status, prepared) == (S.INVALID_ARGUMENT, S.INVALID_ARGUMENT, None)
    assert kernel_calls == []


@pytest.mark.parametrize("name", sorted(UNSUPPORTED))
def test_unsupported_extension_model(dev: Any, name: str, kernel_calls: list) -> None:
    m = copy.deepcopy(fib_model())
    UNSUPPORTED[name](m)
    assert dev.getSupportedOperations_1_3(m) == (S.NONE, [False])
    launch, status, prepared = prepare(m, dev)
    assert status == S.GENERAL_FAILURE and prepared is None
    assert kernel_calls == []


def test_sample_all_takes_no_extension_operation() -> None:
    """A device without the extension: the model is valid (ValidateHal), the operation unsupported."""
    ref = nnhal.get_device("sample-all")
    assert ref.getSupportedOperations_1_3(fib_model()) == (S.NONE, [False])
    assert prepare(fib_model(), ref)[1] == S.GENERAL_FAILURE


def test_older_hal_versions_cannot_carry_extensions(dev: Any) -> None:
    """A 1.0 / 1.1 model has no extensionNameToPrefix: an extension type there is an invalid type."""
    m10 = hal.v1_0.Model(operands=[hal.v1_0.Operand(type=INT64, lifetime=hal.v1_0.OperandLifeTime.MODEL_INPUT,
                                                    numberOfConsumers=1),
                                   hal.v1_0.Operand(type=hal.v1_0.OperandType.TENSOR_FLOAT32, dimensions=[N],
                                                    lifetime=hal.v1_0.OperandLifeTime.MODEL_OUTPUT)],
                         operations=[hal.v1_0.Operation(type=hal.v1_0.OperationType.ADD, inputs=[0], outputs=[1])],
                         inputIndexes=[0], outputIndexes=[1])
    status, flags = dev.getSupportedOperations(m10)
    assert status == hal.v1_0.ErrorStatus.INVALID_ARGUMENT and flags == []


# ---------------------------------------------------------------------------
# request mutations


def _request(drop_input: bool = False, drop_output: bool = False, in_bytes: int = 8,
             out_dims: tuple = ()) -> tuple[Pools, hal.Request]:
    pools = Pools([np.zeros(in_bytes, np.uint8)], [8 * N], out_dims=[list(out_dims)])
    view = nnhal.memory.map(pools.in_mem)
    view[:8] = struct.pack("<q", N) if in_bytes >= 8 else bytes(view[:8])
    view.release()
    r = pools.request()
    if drop_input:
        r.inputs = []
    if drop_output:
        r.outputs = []
    return pools, r


REQUESTS = {
    "input removed": dict(drop_input=True),
    "output removed": dict(drop_output=True),
    "EXAMPLE_INT64 input of 4 bytes": dict(in_bytes=4),
    "output dimensions conflict": dict(out_dims=(N + 1,)),
    "output of rank 2": dict(out_dims=(N, 1)),
}


@pytest.mark.parametrize("name", sorted(REQUESTS))
def test_invalid_request(dev: Any, name: str, kernel_calls: list) -> None:
    prepared = prepared_model(fib_model(), dev)
    pools, request = _request(**REQUESTS[name])
    try:
        assert execute_sync(prepared, request)[0] == S.INVALID_ARGUMENT
        assert execute_async(prepared, request)[:2] == (S.INVALID_ARGUMENT, S.INVALID_ARGUMENT)
    finally:
        pools.close()
    assert kernel_calls == []


def test_output_too_small_reports_the_shape(dev: Any) -> None:
    prepared = prepared_model(fib_model(), dev)
    assert run(prepared, out_bytes=8 * N - 1) == (S.OUTPUT_INSUFFICIENT_SIZE, [hal.OutputShape([N], False)], None)


def test_invalid_input_value_fails_the_execution(dev: Any) -> None:
    prepared = prepared_model(fib_model(), dev)
    assert run(prepared, n=-1)[0] == S.GENERAL_FAILURE
    assert run(prepared, n=N + 1)[0] == S.GENERAL_FAILURE  # NOTE: the output is declared with N elements
    assert run(prepared) == (S.NONE, [hal.OutputShape([N], True)], WANT)


# ---------------------------------------------------------------------------
# compilation cache, memory domains


def test_a_cached_extension_model_loads_and_runs(dev: Any, tmp_path: Any) -> None:
    status, n_model, n_data = dev.getNumberOfCacheFilesNeeded()
    assert status == S.NONE and (n_model, n_data) == (1, 1)
    fds = [os.open(tmp_path / name, os.O_RDWR | os.O_CREAT, 0o600) for name in ("m", "d")]
    try:
        handles = [hal.Handle(fds=[fd]) for fd in fds]
        token = bytes(range(32))
        cb = hal.PreparedModelCallback()
        assert dev.prepareModel_1_3(fib_model(), hal.ExecutionPreference.FAST_SINGLE_ANSWER, hal.Priority.MEDIUM,
                                    hal.OptionalTimePoint(), handles[:1], handles[1:], token, cb) == S.NONE
        assert cb.wait(30)[0] == S.NONE
        assert os.path.getsize(tmp_path / "m") > 0
        cb = hal.PreparedModelCallback()
        assert dev.prepareModelFromCache_1_3(hal.OptionalTimePoint(), handles[:1], handles[1:], token, cb) == S.NONE
        status, prepared = cb.wait(30)
        assert status == S.NONE and prepared is not None
        assert run(prepared) == (S.NONE, [hal.OutputShape([N], True)], WANT)
    finally:
        for fd in fds:
            os.close(fd)


def test_device_memory_with_an_extension_typed_role(dev: Any) -> None:
    """IDevice.allocate for the quant64 output (ValidateHal's validateMemoryDesc allows extension types)."""
    prepared = prepared_model(fib_model(), dev)
    status, buffer, token = dev.allocate(hal.BufferDesc(dimensions=[]), [prepared], [],
                                         [hal.BufferRole(modelIndex=0, ioIndex=0, frequency=1.0)])
    assert status == S.NONE and buffer is not None and token > 0
    pools = Pools([np.array(N, np.int64)], [])
    request = hal.Request(inputs=pools.in_args, outputs=[hal.RequestArgument(location=hal.DataLocation(2, 0, 0))],
                          pools=[hal.MemoryPool(hidlMemory=pools.in_mem), hal.MemoryPool(hidlMemory=pools.out_mem),
                                 hal.MemoryPool(token=token)])
    assert execute_sync(prepared, request)[0] == S.NONE
    out = nnhal.memory.allocate(8 * N)
    try:
        assert buffer.copyTo(out) == S.NONE
        view = nnhal.memory.map(out)
        assert np.frombuffer(bytes(view[:8 * N]), np.uint64).tolist() == WANT
        view.release()
    finally:
        nnhal.memory.free(out)
        pools.close()
